/* test_pipeline.c — gradient equivalence of the pipeline runtime under mpirun.
 *
 * Every rank builds the same synthetic step (microbatches of text and images of several sizes),
 * computes the single-process reference (one Stage holding the whole model, fused backward, in
 * microbatch order), and then runs the step through the pipeline for every hint x mode x transport
 * that the shape allows, with P = the MPI world size. Each rank compares the gradients of its own
 * chunks, tensor by tensor, with the reference's same-named tensors, and the loss (summed over
 * ranks) with the reference loss.
 *
 * Tolerance: the forward and the input gradients run the same kernels on the same inputs as the
 * reference, so they are bitwise equal; weight gradients accumulate over microbatches, and the
 * runtime may run the W (or fused B) tasks of different microbatches in another order than the
 * reference, which reorders an fp32 sum of M terms. The bound is therefore M * 2^-23 relative to the
 * largest |gradient| of the tensor (plus 1e-12 absolute for all-zero tensors), i.e. fp32 round-off of
 * reordering M addends; observed differences are printed.
 *
 * Usage: test_pipeline [chunks]   (chunks = 2 exercises interleaved-1f1b; M is a multiple of P) */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "runtime/model.h"
#include "runtime/partition.h"
#include "runtime/pipeline.h"
#include "data/synth.h"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    int chunks = argc > 1 ? atoi(argv[1]) : 1;
    const Backend* be = &backend_cpu;
    ModelConfig cfg = {.patch = 2, .Dv = 16, .Lv = 2, .Hv = 2, .Dt = 32, .Lt = 2 * P * chunks, .Ht = 4, .F = 48,
                       .V = 97, .min_patches = 4, .max_patches = 16, .init_std = 0.02f, .seed = 1234};
    char err[512];
    if (model_config_check(&cfg, err, sizeof err) != 0) rr_die("test config: %s", err);
    int M = chunks > 1 ? 2 * P : 2 * P + 1; /* interleaved needs M % P == 0 */
    Microbatch* mbs = callocCheck((size_t)M, sizeof *mbs);
    int max_T = 0, max_Np = 0, sup = 0;
    SynthConfig sc = {.patch = cfg.patch, .V = cfg.V, .max_samples = 3, .min_text = 3, .max_text = 22,
                      .min_grid = 2, .max_grid = 4, .image_prob = 0.67, .supervised_prob = 0.6};
    for (int m = 0; m < M; m++) {
        synth_microbatch(&mbs[m], &sc, 7, m);
        sup += mbs[m].n_supervised;
        if (mbs[m].T > max_T) max_T = mbs[m].T;
        if (mbs[m].Np > max_Np) max_Np = mbs[m].Np;
    }
    float scale = 1.0f / (float)sup;

    /* The single-process reference. */
    Stage ref;
    stage_init(&ref, &cfg, 0, cfg.Lt, be);
    StageActs ra;
    stage_acts_init(&ra, &ref, max_T, max_Np, 0);
    double ref_loss = 0;
    for (int m = 0; m < M; m++) {
        float ls = 0;
        stage_forward(&ref, &ra, &mbs[m], NULL, NULL, &ls);
        stage_backward(&ref, &ra, NULL, scale, NULL);
        ref_loss += ls;
    }
    ref_loss *= scale;

    /* This rank's chunks: virtual stage v = c*P + rank holds an equal share of the layers. */
    int S = P * chunks, layers[64], l0s[64];
    partition_auto(cfg.Lt, S, (PartitionCost){0, 0, 1}, layers);
    for (int v = 0, l = 0; v < S; v++) l0s[v] = l, l += layers[v];
    Stage* stages = callocCheck((size_t)chunks, sizeof *stages);
    Stage** sp = callocCheck((size_t)chunks, sizeof *sp);
    for (int c = 0; c < chunks; c++) {
        int v = c * P + rank;
        stage_init(&stages[c], &cfg, l0s[v], l0s[v] + layers[v], be);
        sp[c] = &stages[c];
    }

    int failures = 0, runs = 0;
    double worst_rel = 0;
    for (int h = 0; h < PP_HINT_COUNT; h++) {
        if ((h == PP_HINT_INTERLEAVED) != (chunks > 1)) continue;
        for (int mode = 0; mode < PP_MODE_COUNT; mode++) {
            if (mode != PP_MODE_READY && !pp_hint_is_sequence((PpHint)h)) continue;
            /* variants: 0,1 = tagged / fifo transport at the default cap; 2 = cap 1 (one microbatch in
             * flight); 3 = cap 2x the hint's peak with a tiny activation byte budget (admits one F at a
             * time once anything is in flight). 2 and 3 only matter under ready. */
            for (int var = 0; var < 4; var++) {
                int tk = var == 1 ? TRANSPORT_FIFO : TRANSPORT_TAGGED;
                if (var == 1 && mode != PP_MODE_READY && h != PP_HINT_1F1B) continue; /* keep it quick */
                if (var >= 2 && mode != PP_MODE_READY) continue;
                PpCap cap = {PP_CAP_DEFAULT, 0};
                if (var == 2) cap = (PpCap){PP_CAP_COUNT, 1};
                if (var == 3) cap = (PpCap){PP_CAP_MULTIPLE, 2.0};
                PipelineConfig pc = {.P = P, .rank = rank, .chunks = chunks, .hint = (PpHint)h, .mode = (PpMode)mode,
                                     .cap = cap, .act_budget = var == 3 ? 1.0 : 0, .split = 0,
                                     .transport = (TransportKind)tk, .timeout_s = 60, .max_tokens = max_T,
                                     .max_patches = max_Np};
                Pipeline* pl = pipeline_create(&pc, sp, MPI_COMM_WORLD, err, sizeof err);
                if (!pl) rr_die("pipeline_create: %s", err);
                for (int c = 0; c < chunks; c++) params_zero_grad(&stages[c].params);
                PipelineStepStats st;
                pipeline_step(pl, mbs, M, scale, NULL, 0, &st);
                double loss = 0, my = st.loss_sum * scale;
                MPI_Allreduce(&my, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
                int bad = 0;
                if (fabs(loss - ref_loss) > 1e-6 * fabs(ref_loss)) {
                    if (rank == 0) fprintf(stderr, "loss %.9g != reference %.9g\n", loss, ref_loss);
                    bad++;
                }
                for (int c = 0; c < chunks; c++) {
                    ParamTable* pt = &stages[c].params;
                    for (int i = 0; i < pt->n; i++) {
                        int j = params_find(&ref.params, pt->specs[i].name);
                        if (j < 0) rr_die("parameter %s not in the reference", pt->specs[i].name);
                        const float* g = params_grad(pt, i);
                        const float* gr = params_grad(&ref.params, j);
                        double maxg = 0, maxd = 0;
                        for (size_t k = 0; k < pt->specs[i].numel; k++) {
                            maxg = fmax(maxg, fabs(gr[k]));
                            maxd = fmax(maxd, fabs((double)g[k] - (double)gr[k]));
                        }
                        double tol = M * ldexp(1.0, -23) * maxg + 1e-12;
                        if (maxg > 0 && maxd / maxg > worst_rel) worst_rel = maxd / maxg;
                        if (!(maxd <= tol)) {
                            fprintf(stderr, "rank %d %s %s %s: %s max diff %.3g > tol %.3g (max |g| %.3g)\n", rank,
                                    pp_hint_name((PpHint)h), pp_mode_name((PpMode)mode),
                                    transport_kind_name((TransportKind)tk), pt->specs[i].name, maxd, tol, maxg);
                            bad++;
                        }
                    }
                }
                int all_bad = 0;
                MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
                if (rank == 0)
                    printf("%-18s %-10s %-6s %-14s loss %.7f (ref %.7f) peak in flight %d %s\n",
                           pp_hint_name((PpHint)h), pp_mode_name((PpMode)mode), transport_kind_name((TransportKind)tk),
                           var == 2 ? "cap 1" : var == 3 ? "cap 2x budget" : "default cap", loss, ref_loss,
                           st.peak_inflight, all_bad ? "FAIL" : "ok");
                if (var == 2 && st.peak_inflight > 1) {
                    fprintf(stderr, "rank %d: cap 1 but %d microbatches were in flight\n", rank, st.peak_inflight);
                    failures++;
                }
                failures += all_bad ? 1 : 0;
                runs++;
                pipeline_free(pl);
            }
        }
    }
    double worst = 0;
    MPI_Allreduce(&worst_rel, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("pipeline P=%d chunks=%d M=%d: %d runs, %d failed, largest gradient difference %.3g of max |g|\n", P,
               chunks, M, runs, failures, worst);
    if (rank == 0 && !failures && runs > 0) printf("pipeline equivalence: ok\n");
    for (int c = 0; c < chunks; c++) stage_free(&stages[c]);
    stage_acts_free(&ra, &ref);
    stage_free(&ref);
    for (int m = 0; m < M; m++) synth_microbatch_free(&mbs[m]);
    free(mbs);
    free(stages);
    free(sp);
    MPI_Finalize();
    return failures || runs == 0 ? 1 : 0;
}
