/* bw_path.h — what the host side needs to know of the CUDA backend's bandwidth-bound kernels (the norms' and
 * the elementwise forward kernels, the column sums of the bias / norm-weight gradients: cuda_common.cuh).
 *   - Which path each launch took, for tests: a case named for a path fails when that path did not run.
 *     Counters since the process started, per path; rrfp_cuda_bw_paths (exported by librrfp-cuda.so;
 *     backend_cuda_emu_bw_paths in the CPU emulation) copies them.
 *   - The column sums' partial buffer, a fixed size the backend reserves (and the dry run counts).
 * Plain C, no device code. */
#ifndef RRFP_BW_PATH_H
#define RRFP_BW_PATH_H

/* f32 values of the column sums' partials (2 MiB): two sums (column_sum2) of R C values each; the chunk count R
 * (about 1024 blocks of 256 columns) keeps R C near 1024 x 256, so this rarely caps it */
#define RR_COLSUM_SCRATCH_FLOATS (1 << 19)

enum {
    RR_BW_VEC = 0,        /* a norm / elementwise forward launch on 16-byte vectors (8-value groups) */
    RR_BW_SCALAR,         /* ... value by value: C not a multiple of 8 (norms) or a pointer not 16-byte aligned */
    RR_BW_COLSUM_VEC,     /* a column sum's first launch through the functor's 16-byte vec8 */
    RR_BW_COLSUM_SCALAR,  /* ... through f(n, c) */
    RR_BW_COLSUM_CHUNKED, /* a column sum in more than one row chunk (the partials, then a second launch) */
    RR_BW_PATHS
};

static inline const char* rr_bw_path_name(int p) {
    static const char* names[RR_BW_PATHS] = {"vec", "scalar", "colsum_vec", "colsum_scalar", "colsum_chunked"};
    return p >= 0 && p < RR_BW_PATHS ? names[p] : "?";
}

#endif
