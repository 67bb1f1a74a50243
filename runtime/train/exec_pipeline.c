/* trainer_pp.c — the trainer's pipeline-parallel pieces (parallel.pp > 1, one process per pipeline
 * rank under mpirun). The step is the single-process step with the microbatch loop replaced by the
 * RRFP runtime (runtime/pipeline.h): every rank draws the same step plan from the same deterministic
 * loader, runs its own tasks, and the step ends with the gradient norm summed over all ranks,
 * clipping and AdamW on each rank's own parameters — the single-process update, to fp32 round-off.
 * Checkpoints are written as one shard per (rank, chunk) in one folder, committed by rank 0. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint.h"
#include "engine/util.h"
#include "runtime/partition.h"
#include "runtime/pipeline.h"
#include "runtime/trace.h"
#include "runtime/trainer.h"

/* Layers per virtual stage: parallel.layers, or balanced by the cost model with the token budget of a
 * step, assuming (documented in recipes/README.md) half of the LM positions are image patches, images
 * of (min + max) / 2 patches and samples of 256 positions. */
static int pp_layers(const Trainer* t, int S, int* layers, char* err, size_t err_len) {
    const Recipe* r = t->r;
    const ModelConfig* c = &t->mc;
    if (r->layers[0]) {
        char e[256];
        if (partition_parse(r->layers, c->Lt, S, layers, e, (int)sizeof e) != 0) {
            snprintf(err, err_len, "%s: parallel.layers = %s: %s", recipe_origin(r, "parallel", "layers"), r->layers, e);
            return -1;
        }
        return 0;
    }
    double tokens = (double)r->microbatch_tokens * r->microbatches;
    PartitionCost pc = partition_cost_model(c->Dv, c->Lv, c->Dt, c->F, c->V, tokens, 0.5 * tokens,
                                            0.5 * (c->min_patches + c->max_patches), 256.0, c->patch);
    return partition_auto(c->Lt, S, pc, layers);
}

int trainer_pp_init(Trainer* t, const Backend* be, char* err, size_t err_len) {
    const Recipe* r = t->r;
    int inited = 0, world = 1, rank = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        snprintf(err, err_len, "parallel.pp = %d needs MPI: run under mpirun -np %d", r->pp, r->pp);
        return -1;
    }
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (world != r->pp) {
        snprintf(err, err_len, "%s: parallel.pp = %d but mpirun started %d ranks; allowed: mpirun -np %d (one rank per "
                 "pipeline stage)", recipe_origin(r, "parallel", "pp"), r->pp, world, r->pp);
        return -1;
    }
    t->pp = r->pp;
    t->pp_rank = rank;
    t->n_chunks = r->chunks;
    int S = r->pp * r->chunks, layers[4096 + 1], l0[4096 + 1];
    if (S > 4096 || pp_layers(t, S, layers, err, err_len) != 0) return -1;
    for (int v = 0, l = 0; v < S; v++) l0[v] = l, l += layers[v];
    t->chunks = callocCheck((size_t)t->n_chunks, sizeof(Stage*));
    for (int c = 0; c < t->n_chunks; c++) {
        int v = c * r->pp + rank;
        Stage* st = c == 0 ? &t->st : callocCheck(1, sizeof(Stage));
        stage_init(st, &t->mc, l0[v], l0[v] + layers[v], be);
        params_alloc_optimizer(&st->params);
        t->chunks[c] = st;
    }
    PipelineConfig pc = {.P = r->pp, .rank = rank, .chunks = r->chunks, .cap = {PP_CAP_DEFAULT, 0},
                         .act_budget = (double)r->act_budget_mb * 1048576.0, .transport = TRANSPORT_TAGGED,
                         .timeout_s = 600, .max_tokens = r->microbatch_tokens, .max_patches = r->microbatch_tokens};
    char e[512];
    if (pp_hint_parse(r->hint, &pc.hint) != 0 || pp_mode_parse(r->mode, &pc.mode) != 0) {
        snprintf(err, err_len, "internal: hint '%s' or mode '%s' passed validation but does not parse", r->hint, r->mode);
        return -1;
    }
    if (r->cap[0] && strcmp(r->cap, "0") != 0 && pp_cap_parse(r->cap, &pc.cap, e, sizeof e) != 0) {
        snprintf(err, err_len, "%s: runtime.cap = %s: %s", recipe_origin(r, "runtime", "cap"), r->cap, e);
        return -1;
    }
    PpShape shape = {r->pp, r->microbatches, r->chunks, pipeline_hint_splits(pc.hint)};
    if (pp_hint_check_shape(pc.hint, &shape, e, sizeof e) != 0) {
        snprintf(err, err_len, "%s: parallel.hint = %s: %s", recipe_origin(r, "parallel", "hint"), r->hint, e);
        return -1;
    }
    t->pl = pipeline_create(&pc, t->chunks, MPI_COMM_WORLD, e, sizeof e);
    if (!t->pl) {
        snprintf(err, err_len, "%s: %s", recipe_origin(r, "parallel", "mode"), e);
        return -1;
    }
    if (r->trace) {
        double origin = rr_now(); /* one clock for every rank of this machine: rank 0's start */
        MPI_Bcast(&origin, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        char path[RECIPE_STR + 64];
        snprintf(path, sizeof path, "%s/trace-rank%d.json", t->run_dir, rank);
        t->trace = pp_trace_open(path, origin);
        pp_trace_rank(t->trace, rank);
    }
    if (rank == 0) {
        fprintf(stderr, "rrfp-mm: pipeline: %d ranks x %d chunks, hint %s, mode %s, layers", r->pp, r->chunks, r->hint,
                r->mode);
        for (int v = 0; v < S; v++) fprintf(stderr, "%s%d", v ? "," : " ", layers[v]);
        fprintf(stderr, " (%s)\n", r->layers[0] ? "parallel.layers" : "cost model");
    }
    return 0;
}

int trainer_pp_load(Trainer* t, const char* dir, CheckpointState* cs, char* err, size_t err_len) {
    for (int c = 0; c < t->n_chunks; c++) {
        CheckpointState tmp;
        if (checkpoint_load(dir, &t->chunks[c]->params, c == 0 ? cs : &tmp, NULL, err, err_len) != 0) return -1;
        if (c > 0) checkpoint_state_free(&tmp);
    }
    return 0;
}

int trainer_pp_compute(Trainer* t, const StepPlan* plan, float scale, double* loss_sum, double* norm, char* err,
                       size_t err_len) {
    (void)err;
    (void)err_len;
    for (int c = 0; c < t->n_chunks; c++) params_zero_grad(&t->chunks[c]->params);
    PipelineStepStats ps;
    pipeline_step(t->pl, plan->mbs, plan->M, scale, t->trace, (int)t->step + 1, &ps);
    double local[3] = {0.0, ps.loss_sum, ps.busy_s}, global[3];
    for (int c = 0; c < t->n_chunks; c++)
        local[0] += trainer_grad_sum_squares(t->chunks[c]); /* on the chunk's backend; a double to the host */
    MPI_Allreduce(local, global, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double wall = 0.0;
    MPI_Allreduce(&ps.wall_s, &wall, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    *norm = sqrt(global[0]);
    *loss_sum = global[1];
    t->bubble = wall > 0 ? 1.0 - global[2] / ((double)t->pp * wall) : 0.0;
    return 0;
}

void trainer_pp_optimizer(Trainer* t, float lr, float clip) {
    for (int c = 0; c < t->n_chunks; c++) trainer_optimizer_step(t->chunks[c], t->r, lr, (int)t->opt_step, clip);
}

int trainer_pp_checkpoint(Trainer* t, const CheckpointState* cs, char* out, size_t out_len, char* err,
                          size_t err_len) {
    char tmp[RECIPE_STR + 128];
    int rc = 0, all = 0;
    if (t->pp_rank == 0) rc = checkpoint_shard_begin(t->ckpt_root, cs->step, tmp, sizeof tmp, err, err_len);
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc != 0) {
        if (t->pp_rank != 0) snprintf(err, err_len, "rank 0 could not start checkpoint step %lld", (long long)cs->step);
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s/.step-%08lld.tmp.shards", t->ckpt_root, (long long)cs->step);
    for (int c = 0; c < t->n_chunks && rc == 0; c++) {
        char shard[32];
        snprintf(shard, sizeof shard, "pp%dc%d", t->pp_rank, c);
        rc = checkpoint_shard_write(tmp, &t->chunks[c]->params, cs->step, shard, err, err_len);
    }
    MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all != 0) {
        if (t->pp_rank == 0) checkpoint_shard_abort(tmp);
        if (rc == 0) snprintf(err, err_len, "another rank failed to write its checkpoint shard");
        return -1;
    }
    if (t->pp_rank == 0) {
        int n = t->pp * t->n_chunks;
        char(*names)[32] = callocCheck((size_t)n, 32);
        const char** shards = callocCheck((size_t)n, sizeof(char*));
        for (int r = 0, k = 0; r < t->pp; r++)
            for (int c = 0; c < t->n_chunks; c++, k++) {
                snprintf(names[k], 32, "pp%dc%d", r, c);
                shards[k] = names[k];
            }
        rc = checkpoint_shard_commit(t->ckpt_root, tmp, cs, shards, n, out, out_len, err, err_len);
        free(names);
        free(shards);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc != 0 && t->pp_rank != 0) snprintf(err, err_len, "rank 0 could not commit checkpoint step %lld", (long long)cs->step);
    if (rc == 0 && t->pp_rank != 0) snprintf(out, out_len, "%s/step-%08lld", t->ckpt_root, (long long)cs->step);
    return rc;
}

void trainer_pp_free(Trainer* t) {
    if (t->trace) {
        char e[512];
        if (pp_trace_close(t->trace, e, sizeof e) != 0) rr_warn("trace: %s", e);
        t->trace = NULL;
    }
    pipeline_free(t->pl);
    t->pl = NULL;
    for (int c = 1; c < t->n_chunks; c++) {
        stage_free(t->chunks[c]);
        free(t->chunks[c]);
    }
    free(t->chunks);
    t->chunks = NULL;
}
