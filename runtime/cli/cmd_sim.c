/* cmd_sim.c — `rrfp-mm sim`: run one pipeline step of a hint under a dispatch mode on the virtual
 * clock (sim.c, driving the runtime's own dispatcher) and report makespan, lower bound, efficiency
 * and bubble, or a run of steps (--steps, or several --durations: adaptive learns its choice across
 * them as the MPI runtime does); generate, dump and trace duration sets; time the dispatcher's decisions. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/util.h"
#include "runtime/cli/cli.h"
#include "runtime/cli/args.h"
#include "data/loader.h"
#include "runtime/plan/plan.h"
#include "runtime/train/recipe.h"
#include "runtime/trace/trace.h"

static void sim_usage(FILE* f) {
    fprintf(f,
            "usage: rrfp-mm sim (--durations FILE... | --stages P --microbatches M [--variance V] [--kind text|mm]\n"
            "                    [--seed S] [--split-backward] [--latency L])\n"
            "                   [--mode fixed-sync|fixed|ready|lookahead|adaptive|rollout] [--hint HINT] [--cap N|Nx] [--chunks V]\n"
            "                   [--estimate-error E] [--estimate-seed S] [--keep-order] [--steps K]\n"
            "       rrfp-mm sim --calibrated RECIPE [--stages P] [--microbatches M] [--workload text|mm|anyres]\n"
            "                   [--policy fifo|ffd|balanced] [--flops F] [--jitter J] [--straggler F:LEN:P]\n"
            "                   [--seed S] [--split-backward] [--mode ...] [--hint ...] [--dump FILE] ...\n"
            "                   [--json] [--grid] [--dump FILE] [--trace FILE] [--bench-dispatch]\n\n"
            "Simulates one step of the RRFP pipeline runtime (docs/scheduler.md) with the runtime's own\n"
            "dispatcher under a virtual clock, or a run of steps (--steps K, or one --durations FILE per step).\n\n"
            "  --durations FILE  duration file {\"stages\", \"microbatches\", \"latency\", \"F\", \"B\", \"W\"?};\n"
            "                    given more than once: a run, one file per step in the order given\n"
            "  --stages/--microbatches  generate durations instead (see bench/README.md for the generator):\n"
            "      --kind text|mm (default text), --variance V (default 0.1 text, 1.0 mm), --seed S (1),\n"
            "      --split-backward (B = W = F instead of B = 2F), --latency L (default 0.02)\n"
            "  --calibrated RECIPE  generate one step's durations (seconds) from RECIPE's model, a LLaVA-1.5-like\n"
            "                    sample mix packed by the loader's packer at data.microbatch_tokens, the\n"
            "                    partitioner's FLOP model and --flops (default 400e12 FLOP/s per rank);\n"
            "                    --stages / --microbatches default to parallel.pp / data.microbatches;\n"
            "                    --workload text|mm|anyres (default mm), --policy (default data.policy), --jitter J\n"
            "                    (lognormal sigma per task, default 0.03, at most 1), --straggler FACTOR:LEN:PROB\n"
            "                    (default 1.5:8:0.01), --recompute none|selective|full (default the recipe's\n"
            "                    train.recompute: full recompute adds the recomputed forward to B, and to W\n"
            "                    with --split-backward), --tower-split auto|off (default auto: the tower's blocks\n"
            "                    over stages where it costs more than a stage's share, docs/anyres.md; off:\n"
            "                    the whole tower on stage 0, as the trainer runs), --partition balance|path\n"
            "                    (default the recipe's parallel.partition: the split the trainer runs);\n"
            "                    every parameter: docs/scheduler.md\n"
            "  --mode MODE       fixed-sync, fixed, ready, lookahead, adaptive or rollout (default ready); adaptive\n"
            "                    predicts the step from the estimates under ready, lookahead and fixed\n"
            "                    and runs the one predicted fastest, on the microbatches in ends order (small\n"
            "                    ones at both ends) where that is predicted faster (docs/scheduler.md; --grid and\n"
            "                    --trace name the data's microbatches; --keep-order: never reorder, as\n"
            "                    parallel.reorder = false); rollout (an experiment,\n"
            "                    simulator only) simulates the rest of the step on the estimates at each decision\n"
            "  --estimate-error E  lookahead's cost model: each task's estimate is its true duration times a\n"
            "                    factor drawn in [1-E, 1+E] per (rank, task) (default 0 = exact, E < 1)\n"
            "  --estimate-seed S the seed of those factors (default 1); step k of a run uses S + 1000 k\n"
            "  --steps K         a run of K steps (default 1) from the generator or --calibrated, step k's\n"
            "                    durations drawn with --seed + 1000 k: fresh durations and estimates per step\n"
            "                    and, under adaptive, one learner for the run (each finished step's measured\n"
            "                    durations inform the next step's choice, as in the MPI runtime); the\n"
            "                    figures are the run's totals, with each step's on its own line (--json:\n"
            "                    \"steps\", \"step_makespans\" and, under adaptive, \"step_modes\" and\n"
            "                    \"step_reordered\" added)\n"
            "  --hint HINT       gpipe, 1f1b, interleaved-1f1b, zb-h1, bf, bfw, zbv, dualpipev (default 1f1b;\n"
            "                    zbv and dualpipev: --chunks 2 in a V, split backward)\n"
            "  --cap N|Nx        ready's in-flight cap: a count, or a multiple of the hint's own peak\n"
            "                    (default P - r, the 1F1B peak; with --chunks > 1 the hint's peak)\n"
            "  --chunks V        model chunks per rank (interleaved-1f1b; 2 for zbv and dualpipev, in a V); each\n"
            "                    rank's durations are split evenly over its chunks\n"
            "  --json            print exactly one JSON object {mode, hint, cap, makespan, lower_bound,\n"
            "                    efficiency, bubble}; cap is a number, \"Nx\", \"P-r\" (default), or null\n"
            "                    in the fixed modes\n"
            "  --grid            print the hint's rank x step grid and the order each rank ran\n"
            "                    (tasks print as <stage><kind><microbatch>, stage = chunk*P + rank; in the V\n"
            "                    of zbv / dualpipev chunk 1 of rank r is stage 2P-1-r)\n"
            "  --dump FILE       write the durations used as a duration file\n"
            "  --trace FILE      write the simulated step as a Chrome trace (1 time unit = 1 ms)\n"
            "  --bench-dispatch  time the dispatcher's decisions (heap vs a scan of every task) on rank 0\n");
}

static int parse_int_arg(const char* flag, const char* v, long lo, long hi, long* out) {
    return cli_parse_long("sim", flag, v, lo, hi, out);
}

static int parse_double_arg(const char* flag, const char* v, double lo, double* out) {
    char* end;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x < lo) {
        fprintf(stderr, "rrfp-mm sim: %s expects a number >= %g, got '%s'\n", flag, lo, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* Cost per decision of the heap arbitration against a scan of every task, on rank 0 of a P x M
 * pipeline: inputs arrive in a random order interleaved with decisions (the same script for both). */
static int bench_dispatch(int P, int M, PpHint hint, int split, PpCap cap, uint64_t seed) {
    PpShape s = {P, M, 1, split, 0};
    char err[512];
    if (pp_hint_check_shape(hint, &s, err, sizeof err)) {
        fprintf(stderr, "rrfp-mm sim: %s\n", err);
        return 2;
    }
    int n = pp_shape_tasks(&s), r = 0;
    PpTask* order = mallocCheck(sizeof(PpTask) * n);
    pp_hint_build(hint, &s, r, order, err, sizeof err);
    PpDispatchConfig cfg = {s, r, PP_MODE_READY, order, n, pp_cap_for(cap, hint, &s, r), 0, NULL, NULL, NULL};
    // Script: -1 = decide (and run what was chosen), k >= 0 = the input of dense task k arrives.
    int* pend = mallocCheck(sizeof(int) * n);
    int np = 0;
    for (int i = 0; i < n; i++) {
        int sr;
        PpTask src;
        if (pp_task_input(&s, r, order[i], &sr, &src)) pend[np++] = pp_task_index(&s, order[i]);
    }
    int* script = mallocCheck(sizeof(int) * (4 * n + 16));
    int ns = 0;
    PpDispatcher d;
    if (pp_dispatcher_init(&d, &cfg, err, sizeof err)) rr_die("%s", err);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    while (!pp_dispatcher_all_done(&d)) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        PpTask t;
        if (np > 0 && (x >> 62) < 2) {  // half the time an input arrives (oldest-first with jitter)
            int k = (int)((x >> 20) % (np < 8 ? np : 8));
            script[ns++] = pend[k];
            pp_dispatcher_input_arrived(&d, pp_task_from_index(&s, pend[k]));
            memmove(pend + k, pend + k + 1, sizeof(int) * (np - k - 1));
            np--;
            continue;
        }
        int rc = pp_dispatcher_next(&d, &t);
        if (rc == 1) {
            pp_dispatcher_started(&d, t);
            pp_dispatcher_finished(&d, t);
        }
        if (rc == 1 || np == 0) script[ns++] = -1;
        RR_ASSERT(ns < 4 * n + 16);
    }
    pp_dispatcher_free(&d);
    long decisions = 0;
    for (int i = 0; i < ns; i++) decisions += script[i] < 0;
    double best[2] = {INFINITY, INFINITY};
    for (int rep = 0; rep < 5; rep++)
        for (int which = 0; which < 2; which++) {
            pp_dispatcher_init(&d, &cfg, err, sizeof err);
            double t0 = rr_now();
            for (int i = 0; i < ns; i++) {
                if (script[i] >= 0) {
                    pp_dispatcher_input_arrived(&d, pp_task_from_index(&s, script[i]));
                    continue;
                }
                PpTask t;
                int rc = which == 0 ? pp_dispatcher_next(&d, &t) : pp_dispatcher_next_scan(&d, &t);
                if (rc == 1) {
                    pp_dispatcher_started(&d, t);
                    pp_dispatcher_finished(&d, t);
                }
            }
            double dt = rr_now() - t0;
            RR_ASSERT(pp_dispatcher_all_done(&d));
            pp_dispatcher_free(&d);
            if (dt < best[which]) best[which] = dt;
        }
    printf("dispatch bench: P=%d M=%d hint=%s rank 0, %d tasks, %ld decisions (best of 5, arrivals and "
           "start/finish bookkeeping included)\n", P, M, pp_hint_name(hint), n, decisions);
    printf("  heap: %8.1f ns/decision\n", best[0] * 1e9 / decisions);
    printf("  scan: %8.1f ns/decision  (scan / heap = %.1fx)\n", best[1] * 1e9 / decisions, best[1] / best[0]);
    free(script);
    free(pend);
    free(order);
    return 0;
}

/* a task of the simulated step as printed and traced: by the data's microbatch (adaptive may have run the
 * step reordered, slot s = microbatch r->order[s]) */
static PpTask data_task(const PpSimResult* r, PpTask t) {
    if (r->order) t.mb = r->order[t.mb];
    return t;
}

static void print_exec_grid(FILE* f, const PpSimResult* r, const PpShape* s) {
    char b[32];
    int P = s->P;
    fprintf(f, "executed order (ready reorders the hint; the fixed modes run it as is%s):\n",
            r->order ? "; microbatches numbered as in the data, run in adaptive's order" : "");
    for (int k = 0; k < P; k++) {
        fprintf(f, "%5s%d", "r", k);
        for (int i = 0; i < r->n_exec[k]; i++)
            fprintf(f, " %s", pp_task_label(s, data_task(r, r->exec[k][i].task), k, b, sizeof b));
        fputc('\n', f);
    }
}

static int write_sim_trace(const char* path, const PpSimResult* r, const PpShape* s, char* err, size_t errlen) {
    const double unit = 1e-3;  // one simulated time unit shown as 1 ms
    int P = s->P;
    PpTrace* tr = pp_trace_open(path, 0);
    for (int k = 0; k < P; k++) {
        pp_trace_rank(tr, k);
        for (int i = 0; i < r->n_exec[k]; i++)
            pp_trace_task_stage(tr, k, P, pp_vstage(s, k, r->exec[k][i].task.chunk), data_task(r, r->exec[k][i].task),
                                r->exec[k][i].start * unit, r->exec[k][i].end * unit);
        pp_trace_step(tr, k, 0, 0, r->makespan * unit);
    }
    for (int i = 0; i < r->n_msgs; i++) {
        const PpSimMsg* m = &r->msgs[i];
        pp_trace_send(tr, m->src, m->dst, data_task(r, m->task), 0, m->send * unit);
        pp_trace_recv(tr, m->dst, m->src, data_task(r, m->task), 0, m->arrive * unit);
    }
    return pp_trace_close(tr, err, errlen);
}

static int sim_main(int argc, char** argv, const char** dfiles) {
    int tower_split = -1; /* --tower-split: -1 unset (auto), 1 auto, 0 off */
    const char* partition_text = NULL; /* --partition balance|path (unset: the recipe's parallel.partition) */
    const char *calib_recipe = NULL, *workload_text = "mm", *policy_text = NULL, *recompute_text = NULL;
    double cal_flops = 0, cal_jitter = -1, cal_sf = 0, cal_sp = 0;
    long cal_sl = 0;
    int have_straggler = 0;
    const char *durations = NULL, *dump = NULL, *trace = NULL, *cap_text = NULL;
    int ndfiles = 0;             // dfiles[]: every --durations FILE, in order (a run when more than one)
    long steps = 0;              // --steps K (0: not given)
    const char *mode_text = "ready", *hint_text = "1f1b", *kind_text = "text";
    long P = 0, M = 0, seed = 1, chunks = 1, est_seed = 1;
    double variance = -1, latency = 0.02, est_error = 0;
    int split = 0, json = 0, grid = 0, bench = 0, have_latency = 0, keep_order = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE()                                                            \
    if (!v) {                                                                   \
        fprintf(stderr, "rrfp-mm sim: %s needs a value\n", a);                  \
        return 2;                                                               \
    }                                                                           \
    i++;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            sim_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--durations")) {
            NEED_VALUE();
            durations = dfiles[ndfiles++] = v;
        } else if (!strcmp(a, "--steps")) {
            NEED_VALUE();
            if (parse_int_arg(a, v, 1, 10000, &steps)) return 2;
        } else if (!strcmp(a, "--mode")) {
            NEED_VALUE();
            mode_text = v;
        } else if (!strcmp(a, "--hint")) {
            NEED_VALUE();
            hint_text = v;
        } else if (!strcmp(a, "--cap")) {
            NEED_VALUE();
            cap_text = v;
        } else if (!strcmp(a, "--chunks")) {
            NEED_VALUE();
            if (parse_int_arg(a, v, 1, 64, &chunks)) return 2;
        } else if (!strcmp(a, "--stages")) {
            NEED_VALUE();
            if (parse_int_arg(a, v, 1, 65536, &P)) return 2;
        } else if (!strcmp(a, "--microbatches")) {
            NEED_VALUE();
            if (parse_int_arg(a, v, 1, 1 << 20, &M)) return 2;
        } else if (!strcmp(a, "--variance")) {
            NEED_VALUE();
            if (parse_double_arg(a, v, 0, &variance)) return 2;
        } else if (!strcmp(a, "--kind")) {
            NEED_VALUE();
            kind_text = v;
        } else if (!strcmp(a, "--seed")) {
            NEED_VALUE();
            if (parse_int_arg(a, v, 0, 2147483647L, &seed)) return 2;
        } else if (!strcmp(a, "--latency")) {
            NEED_VALUE();
            if (parse_double_arg(a, v, 0, &latency)) return 2;
            have_latency = 1;
        } else if (!strcmp(a, "--estimate-error")) {
            NEED_VALUE();
            if (parse_double_arg(a, v, 0, &est_error)) return 2;
            if (est_error >= 1) {
                fprintf(stderr, "rrfp-mm sim: --estimate-error expects a number in [0, 1), got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--estimate-seed")) {
            NEED_VALUE();
            if (parse_int_arg(a, v, 0, 2147483647L, &est_seed)) return 2;
        } else if (!strcmp(a, "--calibrated")) {
            NEED_VALUE();
            calib_recipe = v;
        } else if (!strcmp(a, "--tower-split")) {
            NEED_VALUE();
            if (strcmp(v, "auto") && strcmp(v, "off")) {
                fprintf(stderr, "rrfp-mm sim: --tower-split expects auto or off, got '%s'\n", v);
                return 2;
            }
            tower_split = !strcmp(v, "auto");
        } else if (!strcmp(a, "--partition")) {
            NEED_VALUE();
            if (strcmp(v, "balance") && strcmp(v, "path")) {
                fprintf(stderr, "rrfp-mm sim: --partition expects balance or path, got '%s'\n", v);
                return 2;
            }
            partition_text = v;
        } else if (!strcmp(a, "--workload")) {
            NEED_VALUE();
            workload_text = v;
        } else if (!strcmp(a, "--policy")) {
            NEED_VALUE();
            policy_text = v;
        } else if (!strcmp(a, "--flops")) {
            NEED_VALUE();
            if (parse_double_arg(a, v, 1, &cal_flops)) return 2;
        } else if (!strcmp(a, "--jitter")) {
            NEED_VALUE();
            if (parse_double_arg(a, v, 0, &cal_jitter)) return 2;
        } else if (!strcmp(a, "--straggler")) {
            NEED_VALUE();
            char* end;
            cal_sf = strtod(v, &end);
            if (*end != ':' || (cal_sl = strtol(end + 1, &end, 10), *end != ':') || (cal_sp = strtod(end + 1, &end), *end) ||
                !(cal_sf >= 1) || cal_sl < 1 || !(cal_sp >= 0 && cal_sp <= 1)) {
                fprintf(stderr, "rrfp-mm sim: --straggler expects FACTOR:LENGTH:PROBABILITY (factor >= 1, length >= 1 "
                                "microbatches, probability in [0, 1]), got '%s'\n", v);
                return 2;
            }
            have_straggler = 1;
        } else if (!strcmp(a, "--recompute")) {
            NEED_VALUE();
            recompute_text = v;
        } else if (!strcmp(a, "--split-backward")) {
            split = 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--grid")) {
            grid = 1;
        } else if (!strcmp(a, "--keep-order")) {
            keep_order = 1;
        } else if (!strcmp(a, "--dump")) {
            NEED_VALUE();
            dump = v;
        } else if (!strcmp(a, "--trace")) {
            NEED_VALUE();
            trace = v;
        } else if (!strcmp(a, "--bench-dispatch")) {
            bench = 1;
        } else {
            cli_unknown_option("sim", a, sim_usage, NULL);
            return 2;
        }
#undef NEED_VALUE
    }
    PpMode mode;
    PpHint hint;
    PpCap cap = {PP_CAP_DEFAULT, 0};
    char err[1024];
    if (pp_mode_parse(mode_text, &mode)) {
        fprintf(stderr, "rrfp-mm sim: unknown --mode '%s' (expected fixed-sync, fixed, ready, lookahead, adaptive or rollout)\n", mode_text);
        return 2;
    }
    if (pp_hint_parse(hint_text, &hint)) {
        fprintf(stderr, "rrfp-mm sim: unknown --hint '%s' (expected gpipe, 1f1b, interleaved-1f1b, zb-h1, bf, bfw, zbv or dualpipev)\n",
                hint_text);
        return 2;
    }
    if (cap_text && pp_cap_parse(cap_text, &cap, err, sizeof err)) {
        fprintf(stderr, "rrfp-mm sim: --cap: %s\n", err);
        return 2;
    }
    PpGenKind kind;
    if (!strcmp(kind_text, "text")) kind = PP_GEN_TEXT;
    else if (!strcmp(kind_text, "mm")) kind = PP_GEN_MM;
    else {
        fprintf(stderr, "rrfp-mm sim: unknown --kind '%s' (expected text or mm)\n", kind_text);
        return 2;
    }
    if (variance < 0) variance = kind == PP_GEN_TEXT ? 0.1 : 1.0;
    if (cap_text && !pp_mode_is_ready(mode) && !bench)
        fprintf(stderr, "rrfp-mm sim: warning: --cap applies to --mode ready, lookahead and adaptive only; mode %s runs the hint as a "
                        "sequence, so the cap is ignored\n", pp_mode_name(mode));
    if (keep_order && mode != PP_MODE_ADAPTIVE && !bench)
        fprintf(stderr, "rrfp-mm sim: warning: --keep-order applies to --mode adaptive only; mode %s never reorders the "
                        "microbatches\n", pp_mode_name(mode));
    if (bench) return bench_dispatch(P ? (int)P : 128, M ? (int)M : 512, hint, split, cap, (uint64_t)seed);

    int P0 = 0, split0 = 0;  // the run's pipeline: step 0's stages and backward
    if (ndfiles > 0 && steps) {
        fprintf(stderr, "rrfp-mm sim: --steps K generates a run (or calibrates one); for a run of duration files give "
                        "--durations once per step\n");
        return 2;
    }
    int K = ndfiles > 1 ? ndfiles : steps ? (int)steps : 1;  // the run's steps
    if (K > 1 && (grid || trace || dump)) {
        fprintf(stderr, "rrfp-mm sim: --grid, --trace and --dump show one step; a run of %d steps has several (run a "
                        "step on its own: one --durations FILE, or --seed S + 1000 k for step k of --steps)\n", K);
        return 2;
    }
    Recipe rc0;
    PpCalibConfig cc;
    if (tower_split >= 0 && !calib_recipe) {
        fprintf(stderr, "rrfp-mm sim: --tower-split splits a --calibrated RECIPE's model (duration files have no model)\n");
        return 2;
    }
    if (partition_text && !calib_recipe) {
        fprintf(stderr, "rrfp-mm sim: --partition splits a --calibrated RECIPE's model (duration files have no model)\n");
        return 2;
    }
    if (recompute_text && !calib_recipe) {
        fprintf(stderr, "rrfp-mm sim: --recompute costs a --calibrated RECIPE's blocks (the generator and duration files "
                        "have no model)\n");
        return 2;
    }
    if (calib_recipe) {
        if (durations || have_latency) {
            fprintf(stderr, "rrfp-mm sim: --calibrated RECIPE excludes --durations and --latency (the recipe and the link give them)\n");
            return 2;
        }
        recipe_defaults(&rc0);
        if (recipe_load(&rc0, calib_recipe, err, sizeof err) != 0) {
            fprintf(stderr, "rrfp-mm: error: %s\n", err);
            return 1;
        }
        pp_calib_defaults(&cc);
        cc.P = P ? (int)P : rc0.pp;
        cc.M = M ? (int)M : rc0.microbatches;
        cc.microbatch_tokens = rc0.microbatch_tokens;
        cc.window = rc0.window;
        cc.Dv = rc0.vision_width, cc.Lv = rc0.vision_layers, cc.Dt = rc0.text_width, cc.Lt = rc0.text_layers;
        cc.F = rc0.ffn_hidden, cc.V = rc0.vocab > 0 ? rc0.vocab : 32000, cc.patch = rc0.patch;
        cc.min_patches = rc0.min_patches, cc.max_patches = rc0.max_patches;
        cc.split = split;
        if (tower_split >= 0) cc.tower_split = tower_split;
        cc.partition_path = !strcmp(partition_text ? partition_text : rc0.partition, "path"); /* as the trainer splits */
        cc.recompute_lm = recipe_recompute(&rc0, 0); /* train.recompute: B (and W) grow by the recomputed forward */
        cc.recompute_tower = recipe_recompute(&rc0, 1);
        if (recompute_text) {
            int m = !strcmp(recompute_text, "full") ? RECOMPUTE_FULL : !strcmp(recompute_text, "selective") ? RECOMPUTE_SELECTIVE
                  : !strcmp(recompute_text, "none") ? RECOMPUTE_NONE : -1;
            if (m < 0) {
                fprintf(stderr, "rrfp-mm sim: unknown --recompute '%s' (expected none, selective or full)\n", recompute_text);
                return 2;
            }
            cc.recompute_lm = cc.recompute_tower = m;
        }
        LoaderPolicy lp;
        if (loader_policy_parse(policy_text ? policy_text : rc0.policy, &lp) != 0) {
            fprintf(stderr, "rrfp-mm sim: unknown --policy '%s' (expected fifo, ffd or balanced)\n", policy_text);
            return 2;
        }
        cc.policy = (int)lp;
        if (!strcmp(workload_text, "text")) cc.workload = PP_WORKLOAD_TEXT;
        else if (!strcmp(workload_text, "mm")) cc.workload = PP_WORKLOAD_MM;
        else if (!strcmp(workload_text, "anyres")) cc.workload = PP_WORKLOAD_ANYRES, cc.tile = rc0.vision_image_size;
        else {
            fprintf(stderr, "rrfp-mm sim: unknown --workload '%s' (expected text, mm or anyres)\n", workload_text);
            return 2;
        }
        if (cal_flops > 0) cc.flops = cal_flops;
        if (cal_jitter >= 0) cc.jitter = cal_jitter;
        if (have_straggler) cc.straggler_factor = cal_sf, cc.straggler_len = (int)cal_sl, cc.straggler_prob = cal_sp;
    } else if (durations) {
        if (P || M || have_latency || split) {
            fprintf(stderr, "rrfp-mm sim: --durations FILE excludes --stages/--microbatches/--latency/--split-backward "
                            "(the file gives them)\n");
            return 2;
        }
    } else {
        if (!P || !M) {
            fprintf(stderr, "rrfp-mm sim: give --durations FILE, or --stages P and --microbatches M to generate "
                            "durations\n\n");
            sim_usage(stderr);
            return 2;
        }
        if (pp_sim_check_size(P, M, err, sizeof err) != 0) {
            fprintf(stderr, "rrfp-mm sim: --stages %ld --microbatches %ld: %s\n", (long)P, (long)M, err);
            return 2;
        }
    }
    /* a run of files: every file is read and checked before the first step runs, so a bad file fails the
     * run before it prints anything (the steps' own loads below read them again, one step in memory at a time) */
    for (int k = 0; K > 1 && k < ndfiles; k++) {
        PpDurations d;
        if (pp_durations_load(dfiles[k], &d, err, sizeof err)) {
            fprintf(stderr, "rrfp-mm: error: %s\n", err);
            return 1;
        }
        int P_k = d.P, split_k = d.split;
        pp_durations_free(&d);
        if (k == 0) {
            P0 = P_k, split0 = split_k;
        } else if (P_k != P0 || split_k != split0) {
            fprintf(stderr, "rrfp-mm: error: %s: a run's steps must have the same pipeline: %d stages, %s backward, as "
                            "%s (step 0); this step has %d stages, %s backward\n", dfiles[k], P0,
                    split0 ? "split" : "whole", dfiles[0], P_k, split_k ? "split" : "whole");
            return 1;
        }
    }
    FILE* info = json ? stderr : stdout;  // --json keeps stdout to exactly one JSON object
    PpPlanLearn learn;                    // adaptive's learner across a run's steps (sim.h)
    memset(&learn, 0, sizeof learn);
    double tot_ms = 0, tot_lb = 0, tot_work = 0;
    double* step_ms = mallocCheck(sizeof(double) * (size_t)K);
    PpMode* step_mode = mallocCheck(sizeof(PpMode) * (size_t)K);
    int* step_reordered = mallocCheck(sizeof(int) * (size_t)K);
    int rc = 0;
    char capbuf[32];
    if (!pp_mode_is_ready(mode)) snprintf(capbuf, sizeof capbuf, "none");
    else if (cap.kind == PP_CAP_DEFAULT && chunks > 1) snprintf(capbuf, sizeof capbuf, "peak");
    else pp_cap_format(cap, capbuf, sizeof capbuf);
    for (int k = 0; k < K && rc == 0; k++) {
        /* step k of a run: the generators' seed and the estimates' seed advance by 1000 per step (as
         * rrfp-bench-adaptive --steps), so step 0 is the one-step run of the same arguments */
        uint64_t seed_k = (uint64_t)seed + 1000u * (uint64_t)k, est_seed_k = (uint64_t)est_seed + 1000u * (uint64_t)k;
        const char* name = durations ? dfiles[k] : NULL;  // a run of files has one per step (K = ndfiles)
        PpDurations d;
        if (calib_recipe) {
            PpCalibStats cs;
            cc.seed = seed_k;
            if (pp_calib_generate(&cc, &d, &cs, err, sizeof err) != 0) {
                fprintf(stderr, "rrfp-mm sim: %s\n", err);
                rc = 2;
                break;
            }
            if (K > 1) fprintf(info, "step %d: ", k);
            fprintf(info,
                    "calibrated: %s, %s workload, P=%d M=%d policy %s: %d samples, %.0f tokens (%.0f patches), fill %.3f "
                    "(microbatches %.0f..%.0f tokens), step work %.4g s, latency %.3g s, straggling %.3f, layers",
                    calib_recipe, workload_text, cc.P, cc.M, policy_text ? policy_text : rc0.policy, cs.samples, cs.tokens,
                    cs.patches, cs.fill, cs.min_T, cs.max_T, cs.step_work_s, d.latency, cs.straggler_share);
            for (int st = 0; st < cc.P && st < 128; st++) fprintf(info, "%s%d", st ? "," : " ", cs.layers[st]);
            if (cs.tower_spans) { /* the tower's blocks over stages (partition_auto_tower) */
                fprintf(info, ", tower");
                for (int st = 0; st < cc.P && st < 128; st++) fprintf(info, "%s%d", st ? "," : " ", cs.tower[st]);
            }
            fprintf(info, "\n");
        } else if (durations) {
            if (pp_durations_load(name, &d, err, sizeof err)) {
                fprintf(stderr, "rrfp-mm: error: %s\n", err);
                rc = 1;
                break;
            }
        } else {
            pp_durations_generate(&d, (int)P, (int)M, variance, kind, seed_k, split, latency);
        }
        /* generated and calibrated durations get a duration file's checks: --latency 1e308 (or a huge --flops
         * ratio or straggler factor) would make every figure below inf or nan */
        if (!durations && pp_durations_check(&d, calib_recipe ? "calibrated durations" : "generated durations", err,
                                             sizeof err) != 0) {
            fprintf(stderr, "rrfp-mm sim: %s\n", err);
            pp_durations_free(&d);
            rc = 2;
            break;
        }
        if (k == 0) P0 = d.P, split0 = d.split;  // (a run of files was checked alike above; generated: alike)
        if (dump) {
            char* js = pp_durations_to_json(&d);
            if (rr_write_file_atomic(dump, js, strlen(js))) {
                fprintf(stderr, "rrfp-mm: error: cannot write '%s': %s\n", dump, strerror(errno));
                free(js);
                pp_durations_free(&d);
                rc = 1;
                break;
            }
            free(js);
        }
        PpShape shape = {d.P, d.M, (int)chunks, d.split, pp_hint_vshape(hint)};
        if (grid) {
            if (pp_hint_check_shape(hint, &shape, err, sizeof err) == 0) pp_hint_print_grid(hint, &shape, info);
        }
        PpSimResult r;
        double t0 = rr_now();
        PpSimOptions so = {est_error, est_seed_k, K > 1 ? &learn : NULL, 0, NULL, keep_order};
        if (pp_sim_run_opts(&d, hint, mode, cap, (int)chunks, &so, &r, err, sizeof err)) {
            if (K > 1) fprintf(stderr, "rrfp-mm sim: step %d%s%s: %s\n", k, name ? " " : "", name ? name : "", err);
            else fprintf(stderr, "rrfp-mm sim: %s\n", err);
            pp_durations_free(&d);
            rc = 2;
            break;
        }
        double wall = rr_now() - t0;
        if (r.deadlock) {
            fprintf(stderr, "rrfp-mm: error: hint %s under mode %s does not finish: %s\n", pp_hint_name(hint),
                    pp_mode_name(mode), r.msg);
            rc = 1;
        } else if (pp_exec_check(&shape, r.exec, r.n_exec, d.latency, err, sizeof err)) {
            fprintf(stderr, "rrfp-mm: internal error: the simulated schedule is invalid: %s\n", err);
            rc = 1;
        }
        if (rc == 0) {
            if (grid) print_exec_grid(info, &r, &shape);
            step_ms[k] = r.makespan, step_mode[k] = r.chosen, step_reordered[k] = r.order != NULL;
            tot_ms += r.makespan, tot_lb += r.lower_bound, tot_work += (1 - r.bubble) * d.P * r.makespan;
            if (K > 1 && !json) {
                if (k == 0)
                    printf("sim: a run of %d steps, P=%d chunks=%ld backward=%s hint=%s mode=%s cap=%s%s\n"
                           "step  M     makespan     lower_bound  efficiency  bubble%s\n",
                           K, d.P, chunks, d.split ? "split" : "whole", pp_hint_name(hint), pp_mode_name(mode), capbuf,
                           mode == PP_MODE_ADAPTIVE && est_error != 0 ? " (adaptive learns across the steps)" : "",
                           mode == PP_MODE_ADAPTIVE ? "  adaptive ran" : "");
                printf("%-5d %-5d %-12.6g %-12.6g %-11.4f %-7.4f", k, d.M, r.makespan, r.lower_bound, r.efficiency,
                       r.bubble);
                if (mode == PP_MODE_ADAPTIVE) printf(" %s%s", pp_mode_name(r.chosen), r.order ? ", reordered" : "");
                printf("\n");
            } else if (K == 1 && !json) {
                printf("sim: P=%d M=%d chunks=%ld backward=%s latency=%g hint=%s mode=%s cap=%s\n", d.P, d.M, chunks,
                       d.split ? "split" : "whole", d.latency, pp_hint_name(hint), pp_mode_name(mode), capbuf);
                printf("makespan     %.6g\nlower_bound  %.6g\nefficiency   %.4f\nbubble       %.4f\n", r.makespan,
                       r.lower_bound, r.efficiency, r.bubble);
                if (d.P <= 32) {
                    printf("rank   busy      idle      cap  peak-in-flight\n");
                    for (int q = 0; q < d.P; q++) {
                        double busy = 0;
                        for (int i = 0; i < r.n_exec[q]; i++) busy += r.exec[q][i].end - r.exec[q][i].start;
                        char cb[16];
                        if (pp_mode_is_ready(r.chosen)) snprintf(cb, sizeof cb, "%d", r.cap[q]);
                        else snprintf(cb, sizeof cb, "-");
                        printf("%4d  %-9.4g %-9.4g %4s  %d\n", q, busy, r.makespan - busy, cb, r.peak_inflight[q]);
                    }
                }
                printf("simulated in %.3f s (%ld dispatcher decisions", wall, r.decisions);
                if (pp_mode_waits(r.chosen)) printf(", %ld of them waited for an announced input", r.waits);
                if (r.chosen == PP_MODE_ROLLOUT)
                    printf(", %ld of them simulated the rest of the step, %ld of those waited", r.rollouts, r.waits);
                printf(")\n");
                if (mode == PP_MODE_ADAPTIVE) {
                    printf("adaptive: ran %s (predicted on the estimates: ready %.6g, lookahead %.6g, fixed %.6g)\n",
                           pp_mode_name(r.chosen), r.predicted[0], r.predicted[1], r.predicted[2]);
                    if (r.plan_cap.kind != cap.kind || r.plan_cap.value != cap.value) {
                        char cb2[32];
                        printf("adaptive: in-flight cap %s, tighter than the configured %s (predicted faster)\n",
                               pp_cap_format(r.plan_cap, cb2, sizeof cb2), capbuf);
                    }
                    /* the plan's order choice (the executed grid and the trace name the data's microbatches) */
                    if (r.order) {
                        printf("adaptive: reordered the microbatches (ends order, predicted faster), ran in the order:");
                        for (int q = 0; q < d.M; q++) printf(" %d", r.order[q]);
                        printf("\n");
                    } else {
                        printf("adaptive: microbatches as they are (%s)\n",
                               keep_order ? "--keep-order" : "the ends order was not predicted faster");
                    }
                }
            }
            if (trace && write_sim_trace(trace, &r, &shape, err, sizeof err)) {
                fprintf(stderr, "rrfp-mm: error: %s\n", err);
                rc = 1;
            }
        }
        pp_sim_result_free(&r);
        pp_durations_free(&d);
    }
    if (rc == 0 && json) {
        cJSON* o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "mode", pp_mode_name(mode));
        cJSON_AddStringToObject(o, "hint", pp_hint_name(hint));
        if (!pp_mode_is_ready(mode)) cJSON_AddNullToObject(o, "cap");
        else if (cap.kind == PP_CAP_COUNT) cJSON_AddNumberToObject(o, "cap", cap.value);
        else cJSON_AddStringToObject(o, "cap", capbuf);
        cJSON_AddNumberToObject(o, "makespan", tot_ms);
        cJSON_AddNumberToObject(o, "lower_bound", tot_lb);
        cJSON_AddNumberToObject(o, "efficiency", tot_ms > 0 ? tot_lb / tot_ms : 1.0);
        cJSON_AddNumberToObject(o, "bubble", tot_ms > 0 ? 1.0 - tot_work / (P0 * tot_ms) : 0.0);
        if (K > 1) {  // a run: its totals above, each step's here
            cJSON_AddNumberToObject(o, "steps", K);
            cJSON_AddItemToObject(o, "step_makespans", cJSON_CreateDoubleArray(step_ms, K));
            if (mode == PP_MODE_ADAPTIVE) {
                cJSON* ms = cJSON_AddArrayToObject(o, "step_modes");
                cJSON* ro = cJSON_AddArrayToObject(o, "step_reordered");
                for (int k = 0; k < K; k++) {
                    cJSON_AddItemToArray(ms, cJSON_CreateString(pp_mode_name(step_mode[k])));
                    cJSON_AddItemToArray(ro, cJSON_CreateBool(step_reordered[k]));
                }
            }
        }
        char* js = cJSON_PrintUnformatted(o);
        printf("%s\n", js);
        free(js);
        cJSON_Delete(o);
    } else if (rc == 0 && K > 1) {
        int n_ready = 0, n_fixed = 0, n_la = 0, n_re = 0;
        for (int k = 0; k < K; k++) {
            n_ready += step_mode[k] == PP_MODE_READY, n_fixed += step_mode[k] == PP_MODE_FIXED;
            n_la += step_mode[k] == PP_MODE_LOOKAHEAD, n_re += step_reordered[k];
        }
        printf("run   makespan %.6g  lower_bound %.6g  efficiency %.4f  bubble %.4f (totals over %d steps)\n", tot_ms,
               tot_lb, tot_ms > 0 ? tot_lb / tot_ms : 1.0, tot_ms > 0 ? 1.0 - tot_work / (P0 * tot_ms) : 0.0, K);
        if (mode == PP_MODE_ADAPTIVE)
            printf("adaptive: ready on %d, fixed on %d, lookahead on %d of %d steps; %d reordered\n", n_ready, n_fixed,
                   n_la, K, n_re);
    }
    free(step_ms);
    free(step_mode);
    free(step_reordered);
    return rc;
}

int cmd_sim(int argc, char** argv) {
    const char** dfiles = mallocCheck(sizeof(char*) * (size_t)(argc > 0 ? argc : 1));
    int rc = sim_main(argc, argv, dfiles);
    free(dfiles);
    return rc;
}
