/* test_report.c — the report page's HTML writer without a browser: escaping, base64, an atomic write
 * (a failed write leaves the old page and no temporary), a missing or malformed metrics.jsonl is an
 * error naming the file (and line), absent optional parts are notes, a damaged one is a warning
 * naming its file and line while the rest of the page is still written.
 * Usage: test_report WORK_DIR */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/util.h"
#include "runtime/report/report.h"

#include "tests/support/check.h"

static void write_file(const char* path, const char* text) {
    FILE* f = fopenCheck(path, "w");
    fputs(text, f);
    fclose(f);
}

static int count(const char* hay, const char* needle) {
    int n = 0;
    for (const char* p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* Files in dir whose name contains ".tmp" (leftovers of an atomic write). */
static int leftovers(const char* dir) {
    DIR* d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    for (struct dirent* de; (de = readdir(d));) n += strstr(de->d_name, ".tmp") != NULL;
    closedir(d);
    return n;
}

static const char* METRICS =
    "{\"step\":1,\"loss\":6.5,\"lr\":0.0001,\"grad_norm\":9.5,\"tokens_per_s\":1000,\"peak_mem_mb\":100}\n"
    "{\"step\":2,\"loss\":4.25,\"lr\":0.0002,\"grad_norm\":3.5,\"tokens_per_s\":1100,\"peak_mem_mb\":101}\n"
    "{\"step\":3,\"loss\":2.125,\"lr\":0.0003,\"grad_norm\":1.5,\"tokens_per_s\":1200,\"peak_mem_mb\":102}\n";

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_report WORK_DIR\n");
        return 2;
    }
    char run[2048], path[4096], out[4096], err[2048];
    RR_ASSERT(rr_mkdirs(argv[1]) == 0);

    /* escaping: the five characters, UTF-8 untouched */
    char* e = report_html_escape("<a href=\"x\">&'b' caf\xc3\xa9</a>");
    CHECK(!strcmp(e, "&lt;a href=&quot;x&quot;&gt;&amp;&#39;b&#39; caf\xc3\xa9&lt;/a&gt;"), "got '%s'", e);
    free(e);
    /* base64: RFC 4648 test vectors */
    const char* in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    const char* want[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        char* b = report_base64((const unsigned char*)in[i], strlen(in[i]));
        CHECK(!strcmp(b, want[i]), "base64('%s') = '%s', want '%s'", in[i], b, want[i]);
        free(b);
    }

    /* a run folder whose name needs escaping */
    snprintf(run, sizeof run, "%s/run <&> \"q\"", argv[1]);
    RR_ASSERT(rr_mkdirs(run) == 0);
    ReportConfig c = {.run_dir = run, .questions = 4, .warn = NULL};
    /* a previous run's files: this run starts from an empty run folder */
    const char* stale[] = {"metrics.jsonl", "report.html", "recipe.ini", "predictions.jsonl"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", run, stale[i]);
        remove(path);
    }
    snprintf(path, sizeof path, "%s/old.html", argv[1]);
    remove(path);

    /* missing metrics.jsonl: an error naming the file, nothing written */
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    CHECK(report_write(&c, out, sizeof out, err, sizeof err) != 0, "no metrics: must fail");
    CHECK(strstr(err, path) && strstr(err, "No such file"), "error: %s", err);
    snprintf(out, sizeof out, "%s/report.html", run);
    struct stat st;
    CHECK(stat(out, &st) != 0, "no page may be written without metrics");

    /* a malformed line: the file and the line */
    write_file(path, "{\"step\":1,\"loss\":2}\nnot json\n");
    CHECK(report_write(&c, out, sizeof out, err, sizeof err) != 0, "malformed metrics: must fail");
    CHECK(strstr(err, "metrics.jsonl:2:"), "error: %s", err);
    /* a row with text after its object is damaged too, not read in part (cJSON stops after the first value) */
    write_file(path, "{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":1} {\"step\":9}\n{\"step\":3,\"loss\":1}\n");
    CHECK(report_write(&c, out, sizeof out, err, sizeof err) != 0 && strstr(err, "metrics.jsonl:2:"),
          "a row with a second value: %s", err);
    /* a torn last row (no newline: a killed run's): drawn without it, with a warning naming it */
    {
        write_file(path, "{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":1.5}\n{\"step\":3,\"lo");
        char* tb = NULL;
        size_t tl = 0;
        c.warn = open_memstream(&tb, &tl);
        int trc = report_write(&c, out, sizeof out, err, sizeof err);
        fclose(c.warn);
        c.warn = NULL;
        CHECK(trc == 0, "a run whose last row is torn is refused: %s", err);
        CHECK(tb && strstr(tb, "metrics.jsonl:3: a torn last row") && strstr(tb, "left out"), "torn row warning: %s",
              tb ? tb : "");
        free(tb);
        snprintf(out, sizeof out, "%s/report.html", run);
        remove(out);
        /* only a torn row: no steps */
        write_file(path, "{\"step\":1,\"lo");
        CHECK(report_write(&c, out, sizeof out, err, sizeof err) != 0 && strstr(err, "no steps"), "error: %s", err);
    }
    /* an empty file: no steps */
    write_file(path, "");
    CHECK(report_write(&c, out, sizeof out, err, sizeof err) != 0 && strstr(err, "no steps"), "error: %s", err);

    /* metrics only: curves with one point per step; the other parts are notes */
    write_file(path, METRICS);
    CHECK(report_write(&c, out, sizeof out, err, sizeof err) == 0, "report: %s", err);
    size_t n;
    char* page = rr_read_file(out, &n, RR_MAX_JSONL);
    CHECK(page && !strncmp(page, "<!DOCTYPE html>", 15) && strstr(page, "</html>\n"), "page framing");
    if (page) {
        CHECK(count(page, "<path class=\"curve\"") == 4, "4 curves, got %d", count(page, "<path class=\"curve\""));
        CHECK(count(page, " L") >= 8, "each curve has 3 points");
        CHECK(strstr(page, "run &lt;&amp;&gt; &quot;q&quot;") && !strstr(page, "run <&>"), "run folder escaped");
        CHECK(strstr(page, "No recipe.ini") && strstr(page, "No trace") && strstr(page, "Not evaluated"),
              "absent parts are notes");
        /* no script, no network: the only URL is the SVG namespace, which is a name and never fetched */
        CHECK(!strstr(page, "<script") && !strstr(page, "https://") &&
                  count(page, "http://") == count(page, "http://www.w3.org/2000/svg"), "no script, no URL");
    }
    free(page);

    /* steps and values too close for their magnitude (1e17 and 1e17 + 32: a tick step of 5 is below their
     * resolution) and spans past the largest double: a bounded number of ticks, drawn at once (a tick loop
     * of "v += step" added nothing and ran until memory ran out); SIGALRM ends a hang as a failure */
    const char* far[] = {"{\"step\":100000000000000000,\"loss\":1}\n{\"step\":100000000000000032,\"loss\":2}\n",
                         "{\"step\":1,\"loss\":100000000000000000}\n{\"step\":2,\"loss\":100000000000000032}\n",
                         "{\"step\":-1e308,\"loss\":-1e308,\"lr\":1e308}\n{\"step\":1e308,\"loss\":1e308,\"lr\":-1e308}\n"};
    for (int i = 0; i < 3; i++) {
        write_file(path, far[i]);
        alarm(20);
        CHECK(report_write(&c, out, sizeof out, err, sizeof err) == 0, "far values %d: %s", i, err);
        alarm(0);
        page = rr_read_file(out, &n, RR_MAX_JSONL);
        CHECK(page && strstr(page, "</html>\n"), "far values %d: page", i);
        /* 4 charts of at most 24 ticks on each axis */
        if (page) CHECK(count(page, "class=\"xt\"") <= 4 * 25 && count(page, "class=\"yt\"") <= 4 * 24,
                        "far values %d: %d x ticks, %d y ticks", i, count(page, "class=\"xt\""), count(page, "class=\"yt\""));
        free(page);
    }

    /* recipe.ini: a table, values escaped */
    snprintf(path, sizeof path, "%s/recipe.ini", run);
    write_file(path, "; comment\n[model]\npatch = 24\n[data]\nshards = a<b\nsource = synthetic\n");
    /* a damaged predictions.jsonl: the page is still written, with a warning naming the file and line */
    snprintf(path, sizeof path, "%s/predictions.jsonl", run);
    write_file(path, "{\"sample_index\":0,\"correct\":true,\"predicted\":[1]}\n{\"sample_index\":\"x\"}\n");
    char* wbuf = NULL;
    size_t wlen = 0;
    c.warn = open_memstream(&wbuf, &wlen);
    CHECK(report_write(&c, out, sizeof out, err, sizeof err) == 0, "report: %s", err);
    fclose(c.warn);
    c.warn = NULL;
    CHECK(wbuf && strstr(wbuf, "predictions.jsonl:2:"), "warning names the line: %s", wbuf ? wbuf : "");
    page = rr_read_file(out, &n, RR_MAX_JSONL);
    if (page) {
        CHECK(strstr(page, "<table class=\"recipe\">") && strstr(page, "<td>patch</td><td>24</td>") &&
                  strstr(page, "<td>a&lt;b</td>"), "recipe table");
        CHECK(strstr(page, "predictions.jsonl:2:"), "the page says why the questions are left out");
    }
    free(page), free(wbuf);

    /* a synthetic run's predictions: accuracy, no cards */
    write_file(path, "{\"sample_index\":0,\"correct\":true,\"predicted\":[1]}\n"
                     "{\"sample_index\":1,\"correct\":false,\"predicted\":[2]}\n");
    CHECK(report_write(&c, out, sizeof out, err, sizeof err) == 0, "report: %s", err);
    page = rr_read_file(out, &n, RR_MAX_JSONL);
    if (page) CHECK(strstr(page, "<b>50.0%</b>") && strstr(page, "Synthetic source"), "accuracy of 2 predictions");
    free(page);
    /* an empty zero-shot.jsonl (an eval killed before its first answer), and one of blank lines: no questions, none
     * in both (it once handed qsort and bsearch a NULL array: a UBSan report in the sanitizer build) */
    char zpath[4200];
    snprintf(zpath, sizeof zpath, "%s/zero-shot.jsonl", run);
    const char* empties[] = {"", "\n\n"};
    for (int i = 0; i < 2; i++) {
        write_file(zpath, empties[i]);
        CHECK(report_write(&c, out, sizeof out, err, sizeof err) == 0, "empty zero-shot.jsonl %d: %s", i, err);
        page = rr_read_file(out, &n, RR_MAX_JSONL);
        CHECK(page && strstr(page, "zero-shot.jsonl): greedy exact match on <b>0</b> held-out questions") &&
                  strstr(page, "Of 0 questions in both"), "empty zero-shot.jsonl %d: the page says none", i);
        free(page);
    }
    remove(zpath);

    /* atomic write: a page that cannot be written leaves the old one whole and no temporary */
    snprintf(path, sizeof path, "%s/old.html", argv[1]);
    write_file(path, "OLD");
    char dir_as_file[4200];
    snprintf(dir_as_file, sizeof dir_as_file, "%s/old.html/report.html", argv[1]);
    c.out = dir_as_file;
    CHECK(report_write(&c, out, sizeof out, err, sizeof err) != 0 && strstr(err, dir_as_file), "error: %s", err);
    c.out = path;
    CHECK(report_write(&c, out, sizeof out, err, sizeof err) == 0, "report: %s", err);
    page = rr_read_file(path, &n, RR_MAX_JSONL);
    CHECK(page && !strncmp(page, "<!DOCTYPE html>", 15), "--out replaced");
    free(page);
    CHECK(leftovers(argv[1]) == 0 && leftovers(run) == 0, "no temporary left behind");

    if (check_failures) fprintf(stderr, "report: %d failure(s)\n", check_failures);
    else printf("report: ok\n");
    return check_failures ? 1 : 0;
}
