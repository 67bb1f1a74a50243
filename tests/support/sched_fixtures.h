/* sched_fixtures.h — what the scheduler's, the simulator's and the plan's unit tests share: uniform durations,
 * one simulated makespan, the default cap, the cap specs the combination sweeps run and the case runner of their
 * main. Header-only, after tests/support/check.h (its counters). */
#ifndef RRFP_TESTS_SCHED_FIXTURES_H
#define RRFP_TESTS_SCHED_FIXTURES_H

#include <stdio.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/plan/plan.h"
#include "tests/support/check.h"

static inline PpDurations make_uniform(int P, int M, double f, double b, double w, double lat) {
    PpDurations d = {P, M, w > 0, lat, NULL, NULL, NULL};
    d.F = mallocCheck(sizeof(double) * P * M);
    d.B = mallocCheck(sizeof(double) * P * M);
    if (d.split) d.W = mallocCheck(sizeof(double) * P * M);
    for (int i = 0; i < P * M; i++) {
        d.F[i] = f;
        d.B[i] = b;
        if (d.split) d.W[i] = w;
    }
    return d;
}

static inline double sim_makespan(const PpDurations* d, PpHint h, PpMode m, PpCap cap, int V) {
    PpSimResult r;
    char err[512];
    if (pp_sim_run(d, h, m, cap, V, &r, err, sizeof err)) {
        fprintf(stderr, "  sim error: %s\n", err);
        return -1;
    }
    double ms = r.deadlock ? -2 : r.makespan;
    if (r.deadlock) fprintf(stderr, "  %s\n", r.msg);
    pp_sim_result_free(&r);
    return ms;
}

static const PpCap CAP_DEFAULT = {PP_CAP_DEFAULT, 0};

static const char* const CAP_SPECS[] = {NULL, "1", "2", "1x", "1.5x", "2x"};

/* A test's cases by name; sched_run_cases runs those whose name holds argv[1] (all without it), prints each
 * one's verdict and the CHECK count, and returns the exit code. */
typedef struct {
    const char* name;
    void (*fn)(void);
} SchedCase;

static inline int sched_run_cases(const SchedCase* cases, int n, int argc, char** argv) {
    for (int i = 0; i < n; i++) {
        if (argc > 1 && !strstr(cases[i].name, argv[1])) continue;
        int before = check_failures;
        cases[i].fn();
        printf("%s %s\n", check_failures == before ? "ok  " : "FAIL", cases[i].name);
    }
    printf("%d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif
