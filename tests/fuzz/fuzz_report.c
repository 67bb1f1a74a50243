/* fuzz_report.c — libFuzzer target for `rrfp-mm report RUN_DIR` (runtime/report/report.c): the input is a run
 * folder's files, cut at "--8<--" lines: metrics.jsonl, recipe.ini, predictions.jsonl, zero-shot.jsonl,
 * trace-rank0.json and checkpoints/step-1/state.json (whose "data" record the summary shows: runtime/train/trained.c)
 * (a part that is absent or empty: no such file). Any bytes must write the page, whole (it ends
 * with "</html>"), or be refused with a message naming metrics.jsonl and no page written; never a crash, a hang
 * or an allocation sized by a file's numbers. The recipe's paths are relative to FUZZ_REPORT_DATA, where the
 * target runs: run_fuzz_files.sh makes held-out shards (heldout/) and a tokenizer (tok.json) there, so that a
 * recipe naming them reaches the question cards (shards, images, token ids of the predictions). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/util.h"
#include "runtime/report/report.h"
#include "fuzz_util.h"

static FILE* warn_sink;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    const char* data = getenv("FUZZ_REPORT_DATA");
    if (data && chdir(data) != 0) {
        perror(data);
        exit(1);
    }
    /* the warnings (a few lines per input) would bury libFuzzer's; FUZZ_VERBOSE=1 shows them */
    warn_sink = getenv("FUZZ_VERBOSE") ? stderr : fopen("/dev/null", "w");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const char* names[] = {"metrics.jsonl", "recipe.ini", "predictions.jsonl", "zero-shot.jsonl", "trace-rank0.json",
                                  "checkpoints/step-1/state.json"};
    const uint8_t* part[6];
    size_t len[6];
    int np = fuzz_split(data, size, part, len, 6);
    char run[512], page[600], path[700], out[4096], err[2048];
    snprintf(run, sizeof run, "%s/run", fuzz_scratch());
    snprintf(page, sizeof page, "%s/page.html", fuzz_scratch());
    fuzz_rm_rf(run);
    remove(page);
    mkdir(run, 0700);
    snprintf(path, sizeof path, "%s/checkpoints", run);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/checkpoints/step-1", run);
    mkdir(path, 0700);
    for (int i = 0; i < np; i++)
        if (i == 0 || len[i] > 0) {
            snprintf(path, sizeof path, "%s/%s", run, names[i]);
            fuzz_write(path, part[i], len[i]);
        }
    ReportConfig c = {.run_dir = run, .out = page, .questions = 4, .warn = warn_sink};
    err[0] = 0;
    struct stat st;
    if (report_write(&c, out, sizeof out, err, sizeof err) != 0) {
        if (!strstr(err, "metrics.jsonl")) {
            fprintf(stderr, "fuzz_report: a refusal that does not name metrics.jsonl: %s\n", err);
            abort();
        }
        if (stat(page, &st) == 0) {
            fprintf(stderr, "fuzz_report: refused (%s), yet a page was written\n", err);
            abort();
        }
        return 0;
    }
    size_t n;
    char* html = rr_read_file(page, &n, RR_MAX_JSONL);
    if (!html || n < 8 || strcmp(html + n - 8, "</html>\n")) {
        fprintf(stderr, "fuzz_report: the page %s is missing or not whole\n", page);
        abort();
    }
    free(html);
    return 0;
}
