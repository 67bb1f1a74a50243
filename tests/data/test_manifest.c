/* test_manifest.c — the manifest's line cap (data/manifest.h MANIFEST_MAX_LINES): line numbers and the JSONL form's
 * record count are ints, so a file of more lines is refused before it is parsed, naming it. The real cap (INT_MAX - 1
 * lines: 2 GiB of newlines at least) is too large for a test; manifest_parse_capped runs the same check under a small
 * one: a file of exactly the cap's lines parses whole (JSONL and a JSON array, with and without a final newline, blank
 * lines counted), one line more is refused; the editor's count (a final newline starts no line). */
#include <stdio.h>
#include <string.h>

#include "data/manifest.h"
#include "tests/support/check.h"

/* parse text under max_lines: 0 and the record count in *n, or -1 and the message in err */
static int parse(const char* text, int64_t max_lines, int* n, char* err, size_t err_len) {
    Manifest m;
    err[0] = 0;
    int rc = manifest_parse_capped(text, strlen(text), "m.jsonl", max_lines, &m, err, err_len);
    if (rc == 0) {
        *n = m.n;
        manifest_free(&m);
    }
    return rc;
}

int main(void) {
    char err[512];
    int n = -1;
    static const struct {
        const char* text;
        int lines, records;
    } cases[] = {
        {"{\"id\":1}\n{\"id\":2}\n{\"id\":3}", 3, 3},
        {"{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n", 3, 3},     /* a final newline starts no line */
        {"{\"id\":1}\n\n{\"id\":3}\n", 3, 2},               /* a blank line is a line */
        {"\xEF\xBB\xBF{\"id\":1}\n{\"id\":2}\n", 2, 2},     /* counted after a byte-order mark */
        {"[\n{\"id\":1},\n{\"id\":2}\n]", 4, 2},            /* a JSON array */
        {"[{\"id\":1},{\"id\":2},{\"id\":3},{\"id\":4}]", 1, 4}, /* many records on one line */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = parse(cases[i].text, cases[i].lines, &n, err, sizeof err);
        CHECK(rc == 0 && n == cases[i].records, "case %zu at its %d lines: rc %d, %d records (expected %d): %s", i,
              cases[i].lines, rc, n, cases[i].records, err);
        rc = parse(cases[i].text, cases[i].lines - 1, &n, err, sizeof err);
        char want[128];
        snprintf(want, sizeof want, "m.jsonl: more than %d lines: a manifest holds at most %d", cases[i].lines - 1,
                 cases[i].lines - 1);
        CHECK(rc == -1 && strstr(err, want), "case %zu under %d lines: rc %d, '%s' (expected '%s')", i,
              cases[i].lines - 1, rc, err, want);
    }
    /* an empty file has no line; the real cap is what manifest_parse applies */
    CHECK(parse("", 0, &n, err, sizeof err) == 0 && n == 0, "empty file: %s", err);
    CHECK(MANIFEST_MAX_LINES == (int64_t)INT_MAX - 1, "MANIFEST_MAX_LINES %lld", (long long)MANIFEST_MAX_LINES);
    if (check_failures) {
        fprintf(stderr, "%d of %d checks failed\n", check_failures, check_count);
        return 1;
    }
    printf("manifest lines: %d checks ok\n", check_count);
    return 0;
}
