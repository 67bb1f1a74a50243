/* exec_pipeline.c — the pipeline step executor (parallel.pp > 1, one process per pipeline rank under
 * mpirun). The step is the one-process step with the microbatch loop replaced by the RRFP runtime
 * (runtime/pipeline/): every rank draws the same step plan from the same deterministic loader, runs its
 * own tasks, and the trainer's step end (norm over every rank, clipping, AdamW on each rank's own
 * parameters) gives the one-process update, to fp32 round-off. Checkpoints are one shard per (rank,
 * chunk) in one folder, committed by pipeline rank 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/checkpoint.h"
#include "engine/util.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/sim/sim.h"
#include "runtime/trace/trace.h"
#include "runtime/train/exec.h"
#include "runtime/train/layout.h"

typedef struct {
    StepExec ex;
    const Recipe* r;
    Comm* pipe;      /* the pipeline group (the grid's; not owned) */
    Comm* mp;        /* the pp x tp ranks of this replica (checkpoints: every shard of the model) */
    int P, rank, n_chunks;
    int tp, t;       /* tensor parallelism: this rank is TP rank t of tp */
    Stage** chunks;  /* (n_chunks) chunk c = virtual stage c * P + rank */
    Pipeline* pl;
    PpTrace* trace;
    PpDurations replay;  /* runtime.compute = replay:FILE (F NULL otherwise) */
    int last_mode;       /* adaptive: the previous step's choice, 2 x mode + reordered (-1 before the first) */
    /* TP coordination over the steps after the first (printed at the end, tp > 1): leader-decides
     * choices sent / received, time spent sending / receiving them, peers' wait for the chosen task's
     * inputs, this rank's step wall time */
    long steps, tp_choices;
    double tp_coord_s, tp_wait_s, wall_s;
} PipeExec;

static int pipe_forward_backward(StepExec* ex, const StepPlan* plan, float scale, int step, const char* dump_dir,
                                 double* loss_sum, char* err, size_t err_len) {
    PipeExec* x = (PipeExec*)ex;
    /* the distributed optimizer's all-gather of the last step may still fill a grad block: it zeroes it then */
    for (int c = 0; c < x->n_chunks; c++)
        if (!ex->zero || !step_exec_zero_pending(ex->zero, c)) params_zero_grad(&x->chunks[c]->params);
    for (int c = 0; c < x->n_chunks; c++) x->chunks[c]->lora_step = ex->quiet ? 0 : step; /* LoRA's dropout trains only */
    PipelineStepStats ps;
    if (pipeline_step(x->pl, plan->mbs, plan->M, scale, ex->quiet ? NULL : x->trace, step, dump_dir, &ps, err, err_len) != 0)
        return -1;
    int choice = (2 * (int)ps.mode + (ps.reordered != 0)) * 1000 + (int)(ps.cap.value * 100 + 0.5);
    if (x->rank == 0 && !strcmp(x->r->mode, "adaptive") && choice != x->last_mode) {
        /* adaptive's choice (mode and order), each time it changes (one write, not interleaved) */
        char line[320];
        if (isnan(ps.predicted[0]))
            snprintf(line, sizeof line, "rrfp-mm: adaptive: step %d runs %s (no estimates of every rank yet)\n", step,
                     pp_mode_name(ps.mode));
        else {
            char capbuf[48] = "";
            if (pp_mode_is_ready(ps.mode) && ps.cap.kind == PP_CAP_MULTIPLE) /* the plan's in-flight cap (pp_plan_order_cap) */
                snprintf(capbuf, sizeof capbuf, " at in-flight cap %gx", ps.cap.value);
            snprintf(line, sizeof line, "rrfp-mm: adaptive: step %d runs %s%s (predicted s: ready %.4g, lookahead %.4g, "
                     "fixed %.4g)%s\n", step, pp_mode_name(ps.mode), capbuf, ps.predicted[0], ps.predicted[1],
                     ps.predicted[2], ps.reordered ? " on its microbatches reordered (ends order)" : "");
        }
        fputs(line, stderr);
        x->last_mode = choice;
    }
    if (x->steps++ > 0) {
        x->tp_choices += ps.tp_choices;
        x->tp_coord_s += ps.tp_coord_s;
        x->tp_wait_s += ps.tp_wait_s;
        x->wall_s += ps.wall_s;
    }
    double sums[2] = {ps.loss_sum, ps.busy_s}, wall = ps.wall_s;
    if (comm_allreduce(x->pipe, sums, 2, COMM_F64, COMM_SUM, err, err_len) != 0 ||
        comm_allreduce(x->pipe, &wall, 1, COMM_F64, COMM_MAX, err, err_len) != 0)
        return -1;
    *loss_sum = sums[0];
    ex->bubble = wall > 0 ? 1.0 - sums[1] / ((double)x->P * wall) : 0.0;
    return 0;
}

/* The shard name of chunk c of pipeline rank p, TP rank t: "pp{p}c{c}", or "pp{p}tp{t}c{c}" under TP. */
static void shard_name(const PipeExec* x, int p, int t, int c, char* out, size_t n) {
    if (x->tp > 1) snprintf(out, n, "pp%dtp%dc%d", p, t, c);
    else snprintf(out, n, "pp%dc%d", p, c);
}

static int pipe_dump_params(StepExec* ex, const char* dir, int grads, char* err, size_t err_len) {
    PipeExec* x = (PipeExec*)ex;
    for (int c = 0; c < x->n_chunks; c++) {
        char path[4096], shard[48];
        shard_name(x, x->rank, x->t, c, shard, sizeof shard);
        snprintf(path, sizeof path, "%s/%s.%s.safetensors", dir, grads ? "grads" : "weights", shard);
        if (stage_dump_params(x->chunks[c], grads, path, err, err_len) != 0) return -1;
        snprintf(path, sizeof path, "%s/compute.%s.safetensors", dir, shard);
        if (!grads && stage_dump_compute(x->chunks[c], path, err, err_len) < 0) return -1;
    }
    return 0;
}

static int pipe_load(StepExec* ex, const char* dir, CheckpointState* cs, char* err, size_t err_len) {
    PipeExec* x = (PipeExec*)ex;
    for (int c = 0; c < x->n_chunks; c++) {
        CheckpointState tmp;
        if (checkpoint_load(dir, &x->chunks[c]->params, c == 0 ? cs : &tmp, NULL, err, err_len) != 0) return -1;
        if (c > 0) checkpoint_state_free(&tmp);
    }
    return 0;
}

/* Every rank of the replica (pp x tp) writes its shards into the first rank's temporary folder; that rank
 * commits it when all succeeded. */
static int pipe_save(StepExec* ex, const char* root, const CheckpointState* cs, char* out, size_t out_len, char* err,
                     size_t err_len) {
    PipeExec* x = (PipeExec*)ex;
    char tmp[4096], e[1024] = "";
    int rc = 0, lead = x->mp->rank == 0;
    if (lead) rc = checkpoint_shard_begin(root, cs->step, tmp, sizeof tmp, e, sizeof e);
    int hdr[2] = {rc, (int)getpid()}; /* rank 0's pid names the temporary folder */
    if (comm_bcast(x->mp, hdr, sizeof hdr, 0, err, err_len) != 0) return -1;
    rc = hdr[0];
    if (rc != 0) {
        if (lead) snprintf(err, err_len, "%s", e);
        else snprintf(err, err_len, "the replica's first rank could not start checkpoint step %lld", (long long)cs->step);
        return -1;
    }
    checkpoint_shard_tmp_name(tmp, sizeof tmp, root, cs->step, hdr[1]);
    for (int c = 0; c < x->n_chunks && rc == 0; c++) {
        char shard[48];
        shard_name(x, x->rank, x->t, c, shard, sizeof shard);
        rc = checkpoint_shard_write(tmp, &x->chunks[c]->params, cs, shard, e, sizeof e);
    }
    int all = rc;
    if (comm_allreduce(x->mp, &all, 1, COMM_I32, COMM_MIN, err, err_len) != 0) return -1;
    if (all != 0) {
        if (lead) checkpoint_shard_abort(tmp);
        if (rc != 0) snprintf(err, err_len, "%s", e);
        else snprintf(err, err_len, "another rank of the replica failed to write its checkpoint shard");
        return -1;
    }
    if (lead) {
        int n = x->P * x->tp * x->n_chunks;
        char(*names)[48] = callocCheck((size_t)n, 48);
        const char** shards = callocCheck((size_t)n, sizeof(char*));
        for (int r = 0, k = 0; r < x->P; r++)
            for (int t = 0; t < x->tp; t++)
                for (int c = 0; c < x->n_chunks; c++, k++) {
                    shard_name(x, r, t, c, names[k], 48);
                    shards[k] = names[k];
                }
        rc = checkpoint_shard_commit(root, tmp, cs, shards, n, out, out_len, e, sizeof e);
        free(names);
        free(shards);
    }
    if (comm_bcast(x->mp, &rc, sizeof rc, 0, err, err_len) != 0) return -1;
    if (rc != 0) {
        if (lead) snprintf(err, err_len, "%s", e);
        else snprintf(err, err_len, "the replica's first rank could not commit checkpoint step %lld", (long long)cs->step);
        return -1;
    }
    if (!lead) snprintf(out, out_len, "%s/step-%08lld", root, (long long)cs->step);
    return 0;
}

static void pipe_set_grads_done(StepExec* ex, StepGradsDone fn, void* ctx) {
    pipeline_set_grads_done(((PipeExec*)ex)->pl, fn, ctx);
}

/* The trace file, written at the end of the run: a failed write is the run's error, never lost silently. */
static int pipe_finish(StepExec* ex, char* err, size_t err_len) {
    PipeExec* x = (PipeExec*)ex;
    if (!x->trace) return 0;
    PpTrace* tr = x->trace;
    x->trace = NULL;
    return pp_trace_close(tr, err, err_len);
}

static void pipe_free(StepExec* ex) {
    PipeExec* x = (PipeExec*)ex;
    if (x->tp > 1 && x->steps > 1) {
        /* one write per rank (bench/parallel.sh reads these lines) */
        long n = x->steps - 1;
        char line[512];
        snprintf(line, sizeof line,
                 "rrfp-mm: TP coordination: pipeline rank %d, TP rank %d (%s), %ld steps after the first: %.1f choices "
                 "per step, %.4f ms sending/receiving choices per step (%.2f us per choice), %.4f ms per step waiting "
                 "for the inputs of the leader's choices, step %.3f ms on this rank (coordination %.3f%% of it)\n",
                 x->rank, x->t, x->t == 0 ? "leader" : "peer", n, (double)x->tp_choices / (double)n,
                 1e3 * x->tp_coord_s / (double)n, x->tp_choices ? 1e6 * x->tp_coord_s / (double)x->tp_choices : 0.0,
                 1e3 * x->tp_wait_s / (double)n, 1e3 * x->wall_s / (double)n,
                 x->wall_s > 0 ? 100.0 * x->tp_coord_s / x->wall_s : 0.0);
        fputs(line, stderr);
    }
    if (x->trace) {
        char e[512];
        if (pp_trace_close(x->trace, e, sizeof e) != 0) rr_warn("trace: %s", e);
    }
    pipeline_free(x->pl);
    pp_durations_free(&x->replay);
    for (int c = 0; c < x->n_chunks; c++)
        if (x->chunks[c]) {
            stage_free(x->chunks[c]);
            free(x->chunks[c]);
        }
    free(x->chunks);
    free(x);
}

/* The end of virtual stage v's tower blocks under train_tower_split's split (0: none): a tower-only stage's own, the
 * whole tower's (Lv) on the stage holding LM layer 0 */
static int pipe_tower_end(const ModelConfig* mc, const int* layers, const int* tower, int v) {
    int l0 = 0, t1 = 0;
    for (int u = 0; u <= v; u++) t1 += tower[u];
    for (int u = 0; u < v; u++) l0 += layers[u];
    if (layers[v] == 0 && l0 == 0) return t1; /* else a head-only last stage: no tower block */
    return l0 == 0 ? mc->Lv : 0;
}

StepExec* step_exec_pipeline_create(const Recipe* r, const ModelConfig* mc, const Backend* be, CommGrid* grid,
                                    const char* run_dir, char* err, size_t err_len) {
    int S = r->pp * r->chunks;
    int* layers = mallocCheck(sizeof(int) * (size_t)S);
    int* tower = mallocCheck(sizeof(int) * (size_t)S);
    char tower_note[600];
    int tower_split = train_layer_split(r, mc, layers, err, err_len) != 0
                          ? -1
                          : train_tower_split(r, mc, layers, tower, tower_note, sizeof tower_note, err, err_len);
    if (tower_split < 0) {
        free(layers);
        free(tower);
        return NULL;
    }
    PipeExec* x = callocCheck(1, sizeof *x);
    x->r = r;
    x->pipe = grid->pipe;
    x->mp = grid->mp;
    x->tp = r->tp;
    x->t = grid->t;
    x->P = r->pp;
    x->rank = grid->p;
    x->n_chunks = r->chunks;
    x->last_mode = -1;
    x->chunks = callocCheck((size_t)x->n_chunks, sizeof(Stage*));
    PpHint hint = PP_HINT_1F1B;
    if (pp_hint_parse(r->hint, &hint) != 0) hint = PP_HINT_1F1B; /* validated by the recipe */
    PpShape layout = {r->pp, r->microbatches, r->chunks, 0, pp_hint_vshape(hint)};
    for (int c = 0; c < x->n_chunks; c++) {
        int v = pp_vstage(&layout, x->rank, c), l0 = 0; /* Megatron's c*P + r, or the V of zbv / dualpipev */
        int tv0 = 0; /* the tower over stages (train_tower_split): blocks [tv0, tv0 + tower[v]), the rest with LM layer 0 */
        for (int u = 0; u < v; u++) l0 += layers[u], tv0 += tower[u];
        x->chunks[c] = callocCheck(1, sizeof(Stage));
        /* the last virtual stage holds the head: with no LM layer there (parallel.layers = ...,0) it alone */
        int head = v == S - 1;
        if (tower_split) {
            int tv1 = pipe_tower_end(mc, layers, tower, v);
            stage_init_split(x->chunks[c], mc, l0, l0 + layers[v], tv1 > 0 ? tv0 : 0, tv1, head, r->freeze, be, r->tp,
                             grid->t, grid->tp_group);
        } else
            stage_init_split(x->chunks[c], mc, l0, l0 + layers[v], 0, l0 == 0 ? mc->Lv : 0, head, r->freeze, be, r->tp,
                             grid->t, grid->tp_group);
        stage_set_recompute(x->chunks[c], (Recompute)recipe_recompute(r, 0), (Recompute)recipe_recompute(r, 1));
        if (!(r->zero && r->dp > 1)) params_alloc_optimizer(&x->chunks[c]->params); /* the distributed optimizer: shards only */
    }
    StepExec* ex = &x->ex;
    ex->name = r->tp > 1 ? "pipeline x tensor parallel" : "pipeline";
    ex->stages = x->chunks;
    ex->n_stages = x->n_chunks;
    ex->norm_group = grid->mp;
    ex->log_rank = grid->rank == 0;
    ex->decode_images = x->rank == 0; /* only the first stage (the ViT) uses pixels */
    ex->bubble = 0;
    ex->forward_backward = pipe_forward_backward;
    ex->dump_params = pipe_dump_params;
    ex->save = pipe_save;
    ex->load = pipe_load;
    ex->set_grads_done = pipe_set_grads_done;
    ex->free = pipe_free;
    ex->finish = pipe_finish;

    PipelineConfig pc = {.P = r->pp, .rank = x->rank, .chunks = r->chunks, .cap = {PP_CAP_DEFAULT, 0},
                         .act_budget = (double)r->act_budget_mb * 1048576.0, .transport = grid->pipe->device_memory ? TRANSPORT_FIFO : TRANSPORT_TAGGED,
                         .timeout_s = 600, .stall_warn_s = r->stall_warn_s, .max_tokens = r->microbatch_tokens,
                         .max_patches = model_patch_budget(mc, r->microbatch_tokens), .tp = grid->tp_group, .keep_order = !r->reorder};
    for (int v = 0; tower_split && v < S; v++) /* the tower over stages: the virtual stages up to the one of LM layer 0 */
        if (layers[v] > 0) {
            pc.tower_vstages = v + 1;
            break;
        }
    char e[512];
    if (pp_hint_parse(r->hint, &pc.hint) != 0 || pp_mode_parse(r->mode, &pc.mode) != 0) {
        snprintf(err, err_len, "internal: hint '%s' or mode '%s' passed validation but does not parse", r->hint, r->mode);
        goto fail;
    }
    if (r->cap[0] && strcmp(r->cap, "0") != 0 && pp_cap_parse(r->cap, &pc.cap, e, sizeof e) != 0) {
        snprintf(err, err_len, "%s: runtime.cap = %s: %s", recipe_origin(r, "runtime", "cap"), r->cap, e);
        goto fail;
    }
    PpShape shape = {r->pp, r->microbatches, r->chunks, pipeline_hint_splits(pc.hint), pp_hint_vshape(pc.hint)};
    if (pp_hint_check_shape(pc.hint, &shape, e, sizeof e) != 0) {
        snprintf(err, err_len, "%s: parallel.hint = %s: %s", recipe_origin(r, "parallel", "hint"), r->hint, e);
        goto fail;
    }
    if (!strncmp(r->compute, "replay:", 7)) {
        /* Replay (docs/scheduler.md "The simulator's semantics"): tasks sleep the file's durations; messages stay the real ones */
        const char* file = r->compute + 7;
        const char* origin = recipe_origin(r, "runtime", "compute");
        if (pp_durations_load(file, &x->replay, e, sizeof e) != 0) {
            snprintf(err, err_len, "%s: runtime.compute = %s: %s", origin, r->compute, e);
            goto fail;
        }
        if (x->replay.P != r->pp || x->replay.M < r->microbatches) {
            snprintf(err, err_len, "%s: runtime.compute = %s: the file has %d stages x %d microbatches; allowed: stages "
                     "= parallel.pp = %d and microbatches >= data.microbatches = %d", origin, r->compute, x->replay.P,
                     x->replay.M, r->pp, r->microbatches);
            goto fail;
        }
        if (x->replay.split != shape.split) {
            snprintf(err, err_len, "%s: runtime.compute = %s: the file %s W durations but parallel.hint = %s %s the "
                     "backward; allowed: a file with W for zb-h1 and bfw, without W for the others", origin, r->compute,
                     x->replay.split ? "has" : "has no", r->hint, shape.split ? "splits" : "does not split");
            goto fail;
        }
        pc.replay[0] = x->replay.F, pc.replay[1] = x->replay.B, pc.replay[2] = x->replay.W;
        pc.replay_M = x->replay.M;
        pc.replay_scale = r->replay_scale;
        pc.plan_latency_s = x->replay.latency * r->replay_scale;
    }
    x->pl = pipeline_create(&pc, x->chunks, grid->pipe, r->microbatches, e, sizeof e);
    if (!x->pl) {
        snprintf(err, err_len, "%s: %s", recipe_origin(r, "parallel", "mode"), e);
        goto fail;
    }
    if (r->trace) {
        double origin = rr_now(); /* one clock for every rank of this machine: rank 0's start */
        if (comm_bcast(grid->pipe, &origin, sizeof origin, 0, err, err_len) != 0) goto fail;
        char path[4096];
        snprintf(path, sizeof path, "%s/trace-rank%d.json", run_dir, x->rank);
        x->trace = pp_trace_open(path, origin);
        pp_trace_rank(x->trace, x->rank);
    }
    if (grid->rank == 0) {
        /* one write, so the line is not interleaved with other output */
        char line[8192];
        size_t o = (size_t)snprintf(line, sizeof line, "rrfp-mm: pipeline: %d ranks x %d chunks%s%.0d, hint %s, mode %s, comm %s%s%s%s, layers",
                                    r->pp, r->chunks, r->tp > 1 ? " x tensor parallel " : "", r->tp > 1 ? r->tp : 0, r->hint, r->mode,
                                    grid->pipe->ops->name, x->replay.F ? " (compute: " : "",
                                    x->replay.F ? r->compute : "", x->replay.F ? ")" : "");
        for (int v = 0; v < S && o < sizeof line; v++) o += (size_t)snprintf(line + o, sizeof line - o, "%s%d", v ? "," : " ", layers[v]);
        if (o < sizeof line) o += (size_t)snprintf(line + o, sizeof line - o, " (%s)", r->layers[0] ? "parallel.layers" : "cost model");
        /* the tower over stages: each stage's tower blocks (docs/anyres.md "The tower over stages") */
        for (int v = 0, a0 = 0; tower_split && v < S && o < sizeof line; a0 += tower[v], v++) {
            int a1 = pipe_tower_end(mc, layers, tower, v);
            o += a1 > 0 ? (size_t)snprintf(line + o, sizeof line - o, "%s[%d,%d)", v ? " " : ", tower blocks ", a0, a1)
                        : (size_t)snprintf(line + o, sizeof line - o, "%s-", v ? " " : ", tower blocks ");
        }
        if (tower_split && o < sizeof line) o += (size_t)snprintf(line + o, sizeof line - o, " (%s)", tower_note);
        else if (tower_note[0] && o < sizeof line) o += (size_t)snprintf(line + o, sizeof line - o, "; %s", tower_note);
        if (o < sizeof line) snprintf(line + o, sizeof line - o, "\n");
        fputs(line, stderr);
    }
    free(layers);
    free(tower);
    return ex;
fail:
    free(layers);
    free(tower);
    pipe_free(ex);
    return NULL;
}
