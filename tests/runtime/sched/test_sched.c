/* test_sched.c — the scheduler core (runtime/sched/: hints.c's orders, shapes and caps, dispatch.c's dispatcher),
 * without MPI.
 *
 * Hint orders against hand-written sequences (derived from docs/scheduler.md and from Megatron's /
 * Megatron-DeepSpeed's schedule code), the cap's parsing and resolution, the heap arbitration against a scan of
 * every task, the dispatcher's in-flight cap, byte budget and lookahead decision by hand, and the V hints' layout
 * (their closed form on uniform durations through the simulator). The simulator's cases are test_sim.c's, the
 * adaptive plan's test_plan.c's. Usage: test_sched [case-name-substring]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/sched/sched.h"
#include "tests/support/check.h"
#include "tests/support/sched_fixtures.h"

/* ---- helpers ------------------------------------------------------------------------------------ */

static char* order_string(PpHint h, PpShape s, int rank) {
    int n = pp_shape_tasks(&s);
    PpTask* o = mallocCheck(sizeof(PpTask) * n);
    char err[256], b[32];
    int k = pp_hint_build(h, &s, rank, o, err, sizeof err);
    char* out = mallocCheck(16 * (size_t)n + 320);
    out[0] = 0;
    if (k < 0) snprintf(out, 320, "error: %s", err);
    for (int i = 0; i < k; i++) {
        if (i) strcat(out, " ");
        strcat(out, pp_task_format(o[i], rank, s.P, b, sizeof b));
    }
    free(o);
    return out;
}

static void expect_order(PpHint h, int P, int M, int V, int split, int rank, const char* want) {
    PpShape s = {P, M, V, split, 0};
    char* got = order_string(h, s, rank);
    CHECK(!strcmp(got, want), "%s P=%d M=%d V=%d split=%d rank %d:\n   got  %s\n   want %s", pp_hint_name(h), P, M, V,
          split, rank, got, want);
    free(got);
}

/* ---- cases -------------------------------------------------------------------------------------- */

static void test_task_format(void) {
    PpTask t = {1, PP_W, 7}, u;
    char b[32];
    CHECK(!strcmp(pp_task_format(t, 2, 4, b, sizeof b), "6W7"), "got %s", b);
    CHECK(pp_task_parse("6W7", 2, 4, &u) == 0 && u.chunk == 1 && u.kind == PP_W && u.mb == 7, "parse 6W7");
    CHECK(pp_task_parse("5W7", 2, 4, &u) == -1, "stage 5 is not on rank 2 of 4");
    CHECK(pp_task_parse("6X7", 2, 4, &u) == -1, "bad kind");
    CHECK(pp_task_parse("6F", 2, 4, &u) == -1, "missing microbatch");
    PpShape s = {4, 5, 2, 1, 0};
    for (int i = 0; i < pp_shape_tasks(&s); i++)
        CHECK(pp_task_index(&s, pp_task_from_index(&s, i)) == i, "index round trip %d", i);
}

static void test_hint_orders(void) {
    // 1f1b (docs/scheduler.md): w = min(P-1-r, M) forwards, then F(w) B0 F(w+1) B1 ..., then the rest of B.
    expect_order(PP_HINT_1F1B, 4, 6, 1, 0, 0, "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0B3 0B4 0B5");
    expect_order(PP_HINT_1F1B, 4, 6, 1, 0, 1, "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1B4 1B5");
    expect_order(PP_HINT_1F1B, 4, 6, 1, 0, 3, "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5");
    expect_order(PP_HINT_1F1B, 4, 2, 1, 0, 0, "0F0 0F1 0B0 0B1");  // M < P: warm-up clamped to M
    expect_order(PP_HINT_1F1B, 2, 3, 1, 1, 0, "0F0 0F1 0B0 0W0 0F2 0B1 0W1 0B2 0W2");
    // gpipe: all forwards, then all backwards (W directly after its B when split).
    expect_order(PP_HINT_GPIPE, 2, 3, 1, 0, 1, "1F0 1F1 1F2 1B0 1B1 1B2");
    expect_order(PP_HINT_GPIPE, 2, 3, 1, 1, 1, "1F0 1F1 1F2 1B0 1W0 1B1 1W1 1B2 1W2");
    // bf: B0 (W0) B1 (W1) ... then the forwards; bfw: all B, all F, all W.
    expect_order(PP_HINT_BF, 2, 2, 1, 1, 0, "0B0 0W0 0B1 0W1 0F0 0F1");
    expect_order(PP_HINT_BF, 2, 3, 1, 0, 1, "1B0 1B1 1B2 1F0 1F1 1F2");
    expect_order(PP_HINT_BFW, 2, 2, 1, 1, 1, "1B0 1B1 1F0 1F1 1W0 1W1");
    expect_order(PP_HINT_BFW, 2, 2, 1, 0, 1, "1B0 1B1 1F0 1F1");
    // zb-h1 (Megatron-DeepSpeed ZeroBubbleH1Pipeline, exact semantics): warm-up P-r-1 forwards,
    // r (F B) pairs whose W waits, then F B W, then B W, then the r deferred W.
    expect_order(PP_HINT_ZBH1, 4, 6, 1, 1, 0,
                 "0F0 0F1 0F2 0F3 0B0 0W0 0F4 0B1 0W1 0F5 0B2 0W2 0B3 0W3 0B4 0W4 0B5 0W5");
    expect_order(PP_HINT_ZBH1, 4, 6, 1, 1, 1,
                 "1F0 1F1 1F2 1B0 1F3 1B1 1W0 1F4 1B2 1W1 1F5 1B3 1W2 1B4 1W3 1B5 1W4 1W5");
    expect_order(PP_HINT_ZBH1, 4, 6, 1, 1, 3,
                 "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3W0 3F4 3B4 3W1 3F5 3B5 3W2 3W3 3W4 3W5");
    expect_order(PP_HINT_ZBH1, 4, 6, 1, 0, 1, "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1B4 1B5");  // = 1f1b
    // interleaved-1f1b, P=2, V=2, M=4 by Megatron's table (groups of P microbatches, each chunk in
    // turn; backward walks chunks in reverse). Forward table k -> (chunk, mb):
    //   (0,0) (0,1) (1,0) (1,1) (0,2) (0,3) (1,2) (1,3); backward: (1,0) (1,1) (0,0) (0,1) (1,2) ...
    // rank 0: warm-up 2(P-r-1) + (V-1)P = 4 forwards, then 4 F/B pairs, then 4 backwards; stage = c*P + r.
    expect_order(PP_HINT_INTERLEAVED, 2, 4, 2, 0, 0, "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3");
    // rank 1: warm-up 2 forwards, 6 pairs, 2 backwards.
    expect_order(PP_HINT_INTERLEAVED, 2, 4, 2, 0, 1, "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3");
    // M == P: warm-up 2*3 + 4 = 10 >= 8 clamps to all forwards, then all backwards (Megatron's
    // are_all_microbatches_in_warmup).
    expect_order(PP_HINT_INTERLEAVED, 4, 4, 2, 0, 0, "0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 4B0 4B1 4B2 4B3 0B0 0B1 0B2 0B3");
    expect_order(PP_HINT_INTERLEAVED, 2, 4, 2, 1, 1,
                 "1F0 1F1 3F0 3B0 3W0 3F1 3B1 3W1 1F2 1B0 1W0 1F3 1B1 1W1 3F2 3B2 3W2 3F3 3B3 3W3 1B2 1W2 1B3 1W3");
    // Shape errors are clear.
    char err[256];
    PpTask o[64];
    PpShape bad = {4, 6, 2, 0, 0};
    CHECK(pp_hint_build(PP_HINT_INTERLEAVED, &bad, 0, o, err, sizeof err) == -1 && strstr(err, "divisible"),
          "M %% P check: %s", err);
    PpShape one = {4, 8, 1, 0, 0};
    CHECK(pp_hint_build(PP_HINT_INTERLEAVED, &one, 0, o, err, sizeof err) == -1 && strstr(err, "chunks"),
          "chunks check: %s", err);
    PpShape two = {4, 8, 2, 0, 0};
    CHECK(pp_hint_build(PP_HINT_1F1B, &two, 0, o, err, sizeof err) == -1 && strstr(err, "chunk"), "1f1b chunks: %s",
          err);
    // Every hint's order is a permutation of the rank's tasks; sequences keep F < B < W.
    for (int h = 0; h < PP_HINT_COUNT; h++)
        for (int P = 1; P <= 5; P++)
            for (int M = 1; M <= 11; M++)
                for (int split = 0; split <= 1; split++) {
                    int vh = pp_hint_vshape((PpHint)h);
                    PpShape s = {P, M, h == PP_HINT_INTERLEAVED ? 3 : vh ? 2 : 1, split, vh};
                    if (h == PP_HINT_INTERLEAVED && (P < 2 || M % P)) continue;
                    if (vh && (!split || (h == PP_HINT_DUALPIPEV && M < 2 * P))) continue;
                    for (int r = 0; r < P; r++) {
                        PpTask* ord = mallocCheck(sizeof(PpTask) * pp_shape_tasks(&s));
                        int n = pp_hint_build((PpHint)h, &s, r, ord, err, sizeof err);
                        CHECK(n == pp_shape_tasks(&s), "%s: %s", pp_hint_name(h), err);
                        CHECK(pp_order_check(&s, r, ord, n, pp_hint_is_sequence(h), err, sizeof err) == 0, "%s P=%d M=%d: %s",
                              pp_hint_name(h), P, M, err);
                        free(ord);
                    }
                }
    // The checker itself rejects a duplicate and a B before its F.
    PpShape s = {2, 2, 1, 0, 0};
    PpTask dup[4] = {{0, PP_F, 0}, {0, PP_F, 0}, {0, PP_B, 0}, {0, PP_B, 1}};
    CHECK(pp_order_check(&s, 0, dup, 4, 0, err, sizeof err) == -1 && strstr(err, "twice"), "%s", err);
    PpTask rev[4] = {{0, PP_B, 0}, {0, PP_F, 0}, {0, PP_F, 1}, {0, PP_B, 1}};
    CHECK(pp_order_check(&s, 0, rev, 4, 0, err, sizeof err) == 0, "a ranking may put B first");
    CHECK(pp_order_check(&s, 0, rev, 4, 1, err, sizeof err) == -1 && strstr(err, "before its forward"), "%s", err);
    // Peaks: 1f1b min(P - r, M); gpipe M.
    PpShape p4 = {4, 8, 1, 1, 0};
    for (int r = 0; r < 4; r++) {
        CHECK(pp_hint_peak(PP_HINT_1F1B, &p4, r) == 4 - r, "1f1b peak r=%d", r);
        CHECK(pp_hint_peak(PP_HINT_ZBH1, &p4, r) == 4 - r, "zb-h1 peak r=%d", r);
        CHECK(pp_hint_peak(PP_HINT_BFW, &p4, r) == 4 - r, "bfw peak r=%d", r);
        CHECK(pp_hint_peak(PP_HINT_GPIPE, &p4, r) == 8, "gpipe peak r=%d", r);
    }
}

static void test_cap(void) {
    PpCap c;
    char err[256];
    CHECK(pp_cap_parse("4", &c, err, sizeof err) == 0 && c.kind == PP_CAP_COUNT && c.value == 4, "4");
    CHECK(pp_cap_parse("1.5x", &c, err, sizeof err) == 0 && c.kind == PP_CAP_MULTIPLE && c.value == 1.5, "1.5x");
    CHECK(pp_cap_resolve(c, 4, 8, 3) == 6, "1.5 x 4");
    CHECK(pp_cap_resolve(c, 1, 8, 7) == 1, "floor(1.5) = 1");
    CHECK(pp_cap_parse("1.5", &c, err, sizeof err) == -1, "non-integer count");
    CHECK(pp_cap_parse("0", &c, err, sizeof err) == -1, "zero");
    CHECK(pp_cap_parse("abc", &c, err, sizeof err) == -1 && strstr(err, "1.5x"), "%s", err);
    CHECK(pp_cap_resolve(CAP_DEFAULT, 0, 8, 3) == 5, "default P - r");
    /* pp_cap_for (what the simulator and the MPI runtime both run under): multiples of the hint's own
     * peak (P - r for 1f1b / zb-h1 / bfw, M for gpipe), counts as given, the default P - r */
    PpShape p4 = {4, 8, 1, 1, 0};
    PpCap one = {PP_CAP_MULTIPLE, 1.0}, half = {PP_CAP_MULTIPLE, 1.5}, two = {PP_CAP_COUNT, 2};
    for (int r = 0; r < 4; r++) {
        CHECK(pp_cap_for(one, PP_HINT_BFW, &p4, r) == 4 - r, "bfw 1x r=%d: %d", r, pp_cap_for(one, PP_HINT_BFW, &p4, r));
        CHECK(pp_cap_for(half, PP_HINT_ZBH1, &p4, r) == (3 * (4 - r)) / 2, "zb-h1 1.5x r=%d", r);
        CHECK(pp_cap_for(one, PP_HINT_GPIPE, &p4, r) == 8, "gpipe 1x r=%d", r);
        CHECK(pp_cap_for(two, PP_HINT_BFW, &p4, r) == 2, "count r=%d", r);
        CHECK(pp_cap_for(CAP_DEFAULT, PP_HINT_BFW, &p4, r) == 4 - r, "default r=%d", r);
    }
}

/* The heap arbitration chooses exactly what a scan of every task chooses, under random arrival
 * orders, caps and byte budgets. */
static void test_heap_matches_scan(void) {
    uint64_t x = 12345;
    int decisions = 0;
    for (int trial = 0; trial < 200; trial++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int P = 1 + (int)((x >> 33) % 6), M = 1 + (int)((x >> 40) % 12), r = (int)((x >> 20) % P);
        int h = (int)((x >> 50) % PP_HINT_COUNT);
        PpShape s = {P, M, 1, (int)((x >> 10) & 1), 0};
        if (h == PP_HINT_INTERLEAVED) {  // V = 2 chunks: later-chunk forwards are never gated
            if (P < 2) s.P = P = 2;
            s.chunks = 2;
            s.M = M = P * (1 + M % 3);
            r = r % P;
        } else if (pp_hint_vshape((PpHint)h)) {  // two chunks in a V, split backward, M >= 2P
            s.chunks = 2, s.split = 1, s.vshape = 1;
            if (s.M < 2 * P) s.M = M = 2 * P;
        }
        int n = pp_shape_tasks(&s);
        PpTask* ord = mallocCheck(sizeof(PpTask) * n);
        char err[256];
        pp_hint_build((PpHint)h, &s, r, ord, err, sizeof err);
        double* bytes = mallocCheck(sizeof(double) * s.M);
        for (int m = 0; m < M; m++) bytes[m] = 1 + (double)((x >> (m % 50)) % 7);
        PpDispatchConfig cfg = {s, r, PP_MODE_READY, ord, n, 1 + (int)((x >> 5) % 4), trial % 2 ? 9.0 : 0, bytes, NULL, NULL};
        PpDispatcher d;
        CHECK(pp_dispatcher_init(&d, &cfg, err, sizeof err) == 0, "%s", err);
        // Pending cross-rank inputs, delivered in a random order interleaved with decisions.
        PpTask* pend = mallocCheck(sizeof(PpTask) * n);
        int np = 0;
        for (int i = 0; i < n; i++) {
            int sr;
            PpTask src;
            if (pp_task_input(&s, r, ord[i], &sr, &src)) pend[np++] = ord[i];
        }
        int guard = 0;
        while (!pp_dispatcher_all_done(&d) && guard++ < 10 * n + 10) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            if (np > 0 && (x >> 60) < 6) {  // deliver one random pending input
                int k = (int)((x >> 20) % np);
                pp_dispatcher_input_arrived(&d, pend[k]);
                pend[k] = pend[--np];
                continue;
            }
            PpTask a, b;
            int ra = pp_dispatcher_next(&d, &a), rb = pp_dispatcher_next_scan(&d, &b);
            decisions++;
            CHECK(ra == rb && (ra != 1 || (a.kind == b.kind && a.mb == b.mb && a.chunk == b.chunk)),
                  "heap %d (%d,%d) vs scan %d (%d,%d)", ra, a.kind, a.mb, rb, b.kind, b.mb);
            if (ra == 1) {
                pp_dispatcher_started(&d, a);
                pp_dispatcher_finished(&d, a);
            } else if (np == 0) {
                CHECK(0, "stuck with no pending input (hint %s)", pp_hint_name(h));
                break;
            }
        }
        CHECK(pp_dispatcher_all_done(&d), "trial %d not done", trial);
        pp_dispatcher_free(&d);
        free(pend);
        free(bytes);
        free(ord);
    }
    CHECK(decisions > 1000, "decisions %d", decisions);
}

/* In-flight accounting, the cap and the byte budget on one rank. */
static void test_dispatcher_cap_budget(void) {
    PpShape s = {4, 6, 1, 0, 0};
    PpTask ord[12];
    char err[256];
    pp_hint_build(PP_HINT_GPIPE, &s, 3, ord, err, sizeof err);  // last rank: B needs only the local F
    double bytes[6] = {4, 4, 4, 4, 1, 1};
    PpDispatchConfig cfg = {s, 3, PP_MODE_READY, ord, 12, 3, 10.0, bytes, NULL, NULL};
    PpDispatcher d;
    CHECK(pp_dispatcher_init(&d, &cfg, err, sizeof err) == 0, "%s", err);
    PpTask t;
    CHECK(pp_dispatcher_next(&d, &t) == 0, "nothing before F0's activation arrives");
    for (int m = 0; m < 6; m++) pp_dispatcher_input_arrived(&d, (PpTask){0, PP_F, m});
    // F0 (4 bytes), F1 (8 bytes); F2 would make 12 > 10: held although in-flight 2 < cap 3.
    for (int m = 0; m < 2; m++) {
        CHECK(pp_dispatcher_next(&d, &t) == 1 && t.kind == PP_F && t.mb == m, "F%d", m);
        pp_dispatcher_started(&d, t);
        pp_dispatcher_finished(&d, t);
    }
    CHECK(pp_dispatcher_next(&d, &t) == 1 && t.kind == PP_B && t.mb == 0, "budget holds F2, B0 runs (kind %d mb %d)",
          t.kind, t.mb);
    CHECK(d.inflight == 2 && d.inflight_bytes == 8, "inflight %d bytes %g", d.inflight, d.inflight_bytes);
    pp_dispatcher_started(&d, t);
    pp_dispatcher_finished(&d, t);
    CHECK(d.inflight == 1, "B finished -> in flight 1");
    CHECK(pp_dispatcher_next(&d, &t) == 1 && t.kind == PP_F && t.mb == 2, "F2 fits now");
    pp_dispatcher_started(&d, t);
    pp_dispatcher_finished(&d, t);
    CHECK(pp_dispatcher_next(&d, &t) == 1 && t.kind == PP_B && t.mb == 1, "F3 (4+4+4 > 10 bytes) is held; B1 runs");
    CHECK(d.peak_inflight == 2, "peak %d", d.peak_inflight);
    pp_dispatcher_free(&d);
    // A fixed mode refuses a ranking.
    PpTask bf[12];
    pp_hint_build(PP_HINT_BF, &s, 0, bf, err, sizeof err);
    PpDispatchConfig cf = {s, 0, PP_MODE_FIXED, bf, 12, 0, 0, NULL, NULL, NULL};
    CHECK(pp_dispatcher_init(&d, &cf, err, sizeof err) == -1 && strstr(err, "mode ready"), "%s", err);
}

/* lookahead's decision on one rank, by hand (1f1b, P = 4, M = 8, rank 1, whole backward: F0 F1 F2 B0 ...
 * with cap 3). Estimates: every task 1 unit. */
static double est_one(void* ctx, int r, PpTask t) {
    (void)ctx, (void)r, (void)t;
    return 1.0;
}

static void test_lookahead_decision(void) {
    PpShape s = {4, 8, 1, 0, 0};
    char err[256];
    for (int mode = PP_MODE_READY; mode <= PP_MODE_LOOKAHEAD; mode++) {
        PpDispatcher d;
        CHECK(pp_dispatcher_init_hint(&d, PP_HINT_1F1B, &s, 1, (PpMode)mode, CAP_DEFAULT, 0, NULL, err, sizeof err) == 0,
              "%s", err);
        d.estimate = est_one;
        PpTask t, f[4], b0 = {0, PP_B, 0};
        for (int m = 0; m < 4; m++) f[m] = (PpTask){0, PP_F, m};
        // F0 F1 F2 run (cap 3), then B0 arrives and runs: one microbatch finishes, F3 may be admitted.
        for (int m = 0; m < 3; m++) {
            pp_dispatcher_input_arrived(&d, f[m]);
            CHECK(pp_dispatcher_next_at(&d, m, &t) == 1 && t.kind == PP_F && t.mb == m, "F%d", m);
            pp_dispatcher_started(&d, t);
            pp_dispatcher_finished(&d, t);
        }
        pp_dispatcher_input_arrived(&d, b0);
        CHECK(pp_dispatcher_next_at(&d, 3, &t) == 1 && t.kind == PP_B && t.mb == 0, "B0");
        pp_dispatcher_started(&d, t);
        pp_dispatcher_finished(&d, t);
        // Hint order now: F3 (input not in), B1, ... B1's gradient is in; F3's producer has started and
        // its activation is predicted at 5.5: before B1 (estimate 1, so 2 units... at now = 5) would end.
        pp_dispatcher_input_arrived(&d, (PpTask){0, PP_B, 1});
        pp_dispatcher_notice(&d, f[3], 5.5);
        int rc = pp_dispatcher_next_at(&d, 5.0, &t);
        if (mode == PP_MODE_READY) CHECK(rc == 1 && t.kind == PP_B && t.mb == 1, "ready ignores notices: rc %d", rc);
        else CHECK(rc == 0 && d.n_waits == 1, "lookahead waits for F3 (predicted 5.5 < 5 + 1): rc %d", rc);
        // Predicted later than B1 would finish: lookahead runs B1 as ready does. Without a clock it is ready.
        pp_dispatcher_notice(&d, f[3], 6.5);
        CHECK(pp_dispatcher_next_at(&d, 5.0, &t) == 1 && t.kind == PP_B, "6.5 >= 5 + 1: run B1");
        CHECK(pp_dispatcher_next(&d, &t) == 1 && t.kind == PP_B, "next() without a clock is ready's choice");
        // Overdue (predicted in the past): still waits, the producer has started.
        pp_dispatcher_notice(&d, f[3], 4.0);
        rc = pp_dispatcher_next_at(&d, 5.0, &t);
        CHECK(mode == PP_MODE_READY ? rc == 1 : rc == 0, "overdue prediction: rc %d", rc);
        // The input arrives: F3 runs (better ranked), and its prediction is dropped.
        pp_dispatcher_input_arrived(&d, f[3]);
        CHECK(pp_dispatcher_next_at(&d, 5.6, &t) == 1 && t.kind == PP_F && t.mb == 3 && d.n_noticed == 0, "F3");
        pp_dispatcher_free(&d);
    }
    // Never idle in place of a forward, and never under a ranking (bfw): there lookahead is ready.
    PpShape sp = {4, 8, 1, 1, 0};
    PpDispatcher d;
    CHECK(pp_dispatcher_init_hint(&d, PP_HINT_BFW, &sp, 3, PP_MODE_LOOKAHEAD, CAP_DEFAULT, 0, NULL, err, sizeof err) == 0,
          "%s", err);
    d.estimate = est_one;
    PpTask t;
    pp_dispatcher_input_arrived(&d, (PpTask){0, PP_F, 0});
    CHECK(pp_dispatcher_next_at(&d, 0, &t) == 1, "F0");
    pp_dispatcher_started(&d, t);
    pp_dispatcher_finished(&d, t);
    pp_dispatcher_input_arrived(&d, (PpTask){0, PP_F, 1});
    pp_dispatcher_notice(&d, (PpTask){0, PP_F, 2}, 1.1);
    CHECK(pp_dispatcher_next_at(&d, 1, &t) == 1 && t.kind == PP_B && t.mb == 0, "bfw: B0 (last stage, no input)");
    pp_dispatcher_free(&d);
}

/* The V hints (zbv, dualpipev; their orders against a port of torch's schedules are sched_ref's):
 * - the V layout: chunk 0 of rank r is stage r, chunk 1 stage 2P-1-r; the tip rank P-1 feeds itself
 *   (its chunk-0 forward's output is its own chunk-1 forward's input), the loss is on rank 0's chunk 1;
 * - closed form on uniform durations with T_F = T_B = T_W = 1 per chunk (the ZB paper's condition for
 *   ZB-V's zero bubble) and latency 0: every rank works 6M, and the last rank cannot start before the
 *   forward has crossed the P-1 ranks before it, so makespan = 6M + (P - 1), which is also the simulator's lower
 *   bound (efficiency 1): zbv and dualpipev reach it under fixed and ready (cap 1x), for P = 1..8 and
 *   M = 2P, 2P + 1, 3P, 4P; fixed-sync finishes (its receives per chunk, dispatch.c) and is no faster;
 * - refusals: one chunk, the interleaved layout's hints in a V, a whole backward, dualpipev with M < 2P. */
static void test_vhints(void) {
    PpShape s = {4, 8, 2, 1, 1};
    CHECK(pp_vstage(&s, 0, 0) == 0 && pp_vstage(&s, 0, 1) == 7 && pp_vstage(&s, 3, 0) == 3 && pp_vstage(&s, 3, 1) == 4,
          "V stages");
    for (int v = 0; v < 8; v++) {
        int r, c;
        pp_vstage_owner(&s, v, &r, &c);
        CHECK(pp_vstage(&s, r, c) == v, "owner of stage %d", v);
    }
    int sr;
    PpTask src;
    CHECK(pp_task_input(&s, 3, (PpTask){1, PP_F, 2}, &sr, &src) && sr == 3 && src.chunk == 0 && src.kind == PP_F,
          "the tip feeds itself");
    CHECK(pp_task_input(&s, 0, (PpTask){1, PP_F, 2}, &sr, &src) && sr == 1 && src.chunk == 1, "stage 7 <- stage 6");
    CHECK(!pp_task_input(&s, 0, (PpTask){1, PP_B, 2}, &sr, &src), "the loss is on rank 0's chunk 1");
    CHECK(pp_task_input(&s, 0, (PpTask){0, PP_B, 2}, &sr, &src) && sr == 1 && src.chunk == 0, "stage 0 <- stage 1");
    char b[32];
    CHECK(!strcmp(pp_task_label(&s, (PpTask){1, PP_W, 5}, 1, b, sizeof b), "6W5"), "label %s", b);
    static const PpHint vh[2] = {PP_HINT_ZBV, PP_HINT_DUALPIPEV};
    int cases = 0;
    for (int P = 1; P <= 8; P++) {
        int Ms[4] = {2 * P, 2 * P + 1, 3 * P, 4 * P};
        for (int i = 0; i < 4; i++) {
            int M = Ms[i];
            PpDurations d = make_uniform(P, M, 2, 2, 2, 0);  // per chunk 1, 1, 1
            double want = 6.0 * M + (P - 1);
            CHECK(fabs(pp_lower_bound(&d, 2) - want) < 1e-9, "lower bound P=%d M=%d: %g", P, M, pp_lower_bound(&d, 2));
            for (int h = 0; h < 2; h++) {
                PpCap c1 = {PP_CAP_MULTIPLE, 1.0};
                double f = sim_makespan(&d, vh[h], PP_MODE_FIXED, CAP_DEFAULT, 2);
                double r = sim_makespan(&d, vh[h], PP_MODE_READY, c1, 2);
                double fs = sim_makespan(&d, vh[h], PP_MODE_FIXED_SYNC, CAP_DEFAULT, 2);
                CHECK(f == want && r == want && fs >= want, "%s P=%d M=%d: fixed %g ready %g fixed-sync %g, closed form %g",
                      pp_hint_name(vh[h]), P, M, f, r, fs, want);
                cases++;
            }
            pp_durations_free(&d);
        }
    }
    printf("  zbv / dualpipev on uniform durations: %d (P, M) cases at 6M + P - 1 = the lower bound\n", cases);
    char err[256];
    PpTask o[64];
    PpShape one = {4, 8, 1, 1, 0}, whole = {4, 8, 2, 0, 1}, few = {4, 7, 2, 1, 1};
    CHECK(pp_hint_build(PP_HINT_ZBV, &one, 0, o, err, sizeof err) == -1 && strstr(err, "2 model chunks"), "%s", err);
    CHECK(pp_hint_build(PP_HINT_ZBV, &whole, 0, o, err, sizeof err) == -1 && strstr(err, "split backward"), "%s", err);
    CHECK(pp_hint_build(PP_HINT_DUALPIPEV, &few, 0, o, err, sizeof err) == -1 && strstr(err, "2P=8"), "%s", err);
    CHECK(pp_hint_build(PP_HINT_ZBV, &few, 0, o, err, sizeof err) == 42, "zbv with M < 2P: %s", err);
    PpShape inter = {4, 8, 2, 1, 1};
    CHECK(pp_hint_check_shape(PP_HINT_INTERLEAVED, &inter, err, sizeof err) == -1 && strstr(err, "V layout"), "%s", err);
}

int main(int argc, char** argv) {
    static const SchedCase cases[] = {
        {"task_format", test_task_format},
        {"hint_orders", test_hint_orders},
        {"cap", test_cap},
        {"heap_matches_scan", test_heap_matches_scan},
        {"dispatcher_cap_budget", test_dispatcher_cap_budget},
        {"lookahead_decision", test_lookahead_decision},
        {"vhints", test_vhints},
    };
    return sched_run_cases(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
