/* fuzz_durations.c — libFuzzer target for simulator duration files (runtime/sim/sim.c,
 * pp_durations_parse: what `rrfp-mm sim --durations` and `trace --durations` read). Any bytes parse or
 * are refused naming the file; a parsed file serialises to a text that parses back to the same
 * durations; a small one simulates under ready and fixed to a finite makespan no less than its lower
 * bound (one chunk, 1F1B). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/plan/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char* text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    PpDurations d, back;
    char err[2048];
    int rc = pp_durations_parse(text, "fuzz.json", &d, err, sizeof err);
    free(text);
    if (rc != 0) {
        if (!strstr(err, "fuzz.json")) {
            fprintf(stderr, "fuzz_durations: a refusal that does not name the file: %s\n", err);
            abort();
        }
        return 0;
    }
    char* js = pp_durations_to_json(&d);
    if (pp_durations_parse(js, "again.json", &back, err, sizeof err) != 0 || back.P != d.P || back.M != d.M ||
        back.split != d.split) {
        fprintf(stderr, "fuzz_durations: a parsed file does not serialise back: %s\n%s\n", err, js);
        abort();
    }
    for (int i = 0; i < d.P * d.M; i++)
        if (back.F[i] != d.F[i] || back.B[i] != d.B[i] || (d.W && back.W[i] != d.W[i])) {
            fprintf(stderr, "fuzz_durations: entry %d changed in the round trip\n%s\n", i, js);
            abort();
        }
    free(js);
    pp_durations_free(&back);
    if ((long)d.P * d.M <= 256) {
        PpCap cap = {PP_CAP_DEFAULT, 0};
        PpMode modes[2] = {PP_MODE_READY, PP_MODE_FIXED};
        for (int k = 0; k < 2; k++) {
            PpSimResult r;
            if (pp_sim_run(&d, PP_HINT_1F1B, modes[k], cap, 1, &r, err, sizeof err) != 0) continue;
            if (!r.deadlock && (!isfinite(r.makespan) || r.makespan < r.lower_bound * (1 - 1e-9) - 1e-300)) {
                fprintf(stderr, "fuzz_durations: makespan %g, lower bound %g\n", r.makespan, r.lower_bound);
                abort();
            }
            pp_sim_result_free(&r);
        }
    }
    pp_durations_free(&d);
    return 0;
}
