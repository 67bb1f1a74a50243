/* wrap.c — for executables linked with -Wl,--wrap=backend_cuda_get (rrfp-mm-emu): every call of
 * backend_cuda_get in the engine, the trainer and the CLI gets the emulated CUDA backend instead,
 * without recompiling them. */
#include "engine/engine.h"

const Backend* backend_cuda_emu_get(char* why, size_t why_len);
const Backend* __wrap_backend_cuda_get(char* why, size_t why_len);

const Backend* __wrap_backend_cuda_get(char* why, size_t why_len) { return backend_cuda_emu_get(why, why_len); }

/* and comm_nccl_create (-Wl,--wrap=comm_nccl_create) gets NCCL emulated over MPI
 * (tests/support/cuda_emu/comm_nccl_emu.cpp) instead of opening librrfp-nccl.so */
#include "runtime/comm/comm.h"
Comm* rrfp_nccl_emu_comm_create(Comm* host, int links, char* err, size_t err_len);
Comm* __wrap_comm_nccl_create(Comm* host, int links, char* err, size_t err_len);
Comm* __wrap_comm_nccl_create(Comm* host, int links, char* err, size_t err_len) {
    return rrfp_nccl_emu_comm_create(host, links, err, err_len);
}

/* and runtime.profile's NCCL timing (comm_nccl_profile / _take) the emulated NCCL's */
void rrfp_nccl_emu_profile(int on);
void rrfp_nccl_emu_profile_take(double* ms, long* ops);
void __wrap_comm_nccl_profile(int on);
void __wrap_comm_nccl_profile_take(double* ms, long* ops);
void __wrap_comm_nccl_profile(int on) { rrfp_nccl_emu_profile(on); }
void __wrap_comm_nccl_profile_take(double* ms, long* ops) { rrfp_nccl_emu_profile_take(ms, ops); }

/* and metrics_peak_rss_mb (-Wl,--wrap=metrics_peak_rss_mb), which the trainer calls once at the end of
 * every step on every rank: with RR_EMU_STEP_ALLOCS=1 it prints the cudaMalloc calls and the calls into
 * MPI through comm/'s MPI groups (comm_mpi_counts: collectives, point-to-point) since the previous
 * step's end, so that a test can check that steps after the first allocate nothing and, with
 * runtime.comm = nccl, use no MPI (the NCCL emulation's own MPI traffic is not counted: it is NCCL's). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
long emu_malloc_count(void);
long emu_nccl_ops(void);
long long emu_blas_flops(void); /* 2 m n k of every cuBLAS(Lt) product run so far (cuda_emu.h) */
void emu_op_counts(long* out); /* kernels, cuBLAS(Lt) products, memsets, copies, graph launches (cuda_emu.h) */
double __real_metrics_peak_rss_mb(void);
double __wrap_metrics_peak_rss_mb(void);
double __wrap_metrics_peak_rss_mb(void) {
    static long last = 0, calls = 0, last_coll = 0, last_p2p = 0;
    const char* e = getenv("RR_EMU_STEP_ALLOCS");
    if (e && *e == '1') {
        int rank = 0, inited = 0;
        MPI_Initialized(&inited);
        if (inited) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        long now = emu_malloc_count(), coll = 0, p2p = 0;
        comm_mpi_counts(&coll, &p2p);
        fprintf(stderr, "cuda-emu: rank %d step-end %ld: %ld cudaMalloc calls since the previous one, %ld NCCL operations "
                "so far, %ld MPI collectives and %ld MPI point-to-point since the previous one\n", rank, ++calls,
                now - last, emu_nccl_ops(), coll - last_coll, p2p - last_p2p);
        last = now, last_coll = coll, last_p2p = p2p;
    }
    /* RR_EMU_STEP_LAUNCHES=1: the device operations the step launched, by the emulation's own count
     * (tests/runtime/train/train_launches_emu.sh holds them) */
    const char* l = getenv("RR_EMU_STEP_LAUNCHES");
    if (l && *l == '1') {
        static long prev[5], steps = 0;
        long c[5];
        emu_op_counts(c);
        int rank = 0, inited = 0;
        MPI_Initialized(&inited);
        if (inited) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        fprintf(stderr, "cuda-emu: rank %d step %ld launches: %ld kernels, %ld cublas, %ld memsets, %ld copies, %ld graphs\n",
                rank, ++steps, c[0] - prev[0], c[1] - prev[1], c[2] - prev[2], c[3] - prev[3], c[4] - prev[4]);
        for (int i = 0; i < 5; i++) prev[i] = c[i];
    }
    /* RR_EMU_STEP_FLOPS=1: the FLOPs of the cuBLAS products the step ran (bench/gpu_train.sh checks its model-FLOP
     * formula against them) */
    const char* fl = getenv("RR_EMU_STEP_FLOPS");
    if (fl && *fl == '1') {
        static long long prev_fl = 0, fl_steps = 0;
        long long now = emu_blas_flops();
        int rank = 0, inited = 0;
        MPI_Initialized(&inited);
        if (inited) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        fprintf(stderr, "cuda-emu: rank %d step %lld blas flops: %lld\n", rank, ++fl_steps, now - prev_fl);
        prev_fl = now;
    }
    return __real_metrics_peak_rss_mb();
}
