/* fuzz_trace.c — libFuzzer target for Chrome trace files as `rrfp-mm trace` reads them
 * (runtime/trace/trace.c, runtime/cli/cmd_trace.c): the input is written as a trace file and given to
 * `trace FILE --svg OUT --json OUT --durations OUT --durations-dir DIR`; any bytes must draw, merge and give
 * durations (the last step's, and every step's in DIR, emptied before each input), or be refused with exit 1
 * naming the file, never a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cli/cli.h"
#include "fuzz_util.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    /* the command's messages (one or two lines per input) would bury libFuzzer's */
    if (!getenv("FUZZ_VERBOSE")) freopen("/dev/null", "w", stdout);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char in[600], svg[600], json[600], dur[600], dir[600];
    snprintf(in, sizeof in, "%s/t.json", fuzz_scratch());
    snprintf(svg, sizeof svg, "%s/t.svg", fuzz_scratch());
    snprintf(json, sizeof json, "%s/merged.json", fuzz_scratch());
    snprintf(dur, sizeof dur, "%s/d.json", fuzz_scratch());
    snprintf(dir, sizeof dir, "%s/steps", fuzz_scratch());
    fuzz_write(in, data, size);
    fuzz_rm_rf(dir); /* the step files of the last input would be refused as another export's */
    char* argv[] = {"trace", in, "--svg", svg, "--json", json, "--durations", dur, "--durations-dir", dir, NULL};
    int rc = cmd_trace(10, argv);
    if (rc != 0 && rc != 1) {
        fprintf(stderr, "fuzz_trace: exit %d (expected 0 or 1)\n", rc);
        abort();
    }
    return 0;
}
