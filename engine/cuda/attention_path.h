/* attention_path.h — which path ran each attention call of the CUDA backend, for tests and benchmarks
 * (a test named for a path fails when that path did not run). Counters since the process started, per
 * path; rrfp_cuda_attention_paths (exported by librrfp-cuda.so; backend_cuda_emu_attention_paths in the
 * CPU emulation) copies them. Plain C, no device code. */
#ifndef RRFP_ATTENTION_PATH_H
#define RRFP_ATTENTION_PATH_H

enum {
    RR_ATTN_CUDNN_FWD = 0,    /* cuDNN's fused attention ran the forward (and agreed, if it was its first run) */
    RR_ATTN_CUDNN_BWD,        /* ... the backward */
    RR_ATTN_OWN_TC_FWD,       /* the own tensor-core kernel (flash_attention.cu) ran the forward */
    RR_ATTN_OWN_TC_BWD,       /* ... the backward */
    RR_ATTN_OWN_F32_FWD,      /* the fp32 table's kernel (attention.cu) ran the forward */
    RR_ATTN_OWN_F32_BWD,      /* ... the backward */
    RR_ATTN_CUDNN_REFUSED,    /* cuDNN was asked and refused the shape (descriptor, graph, heuristics or plan) */
    RR_ATTN_CUDNN_DISAGREED,  /* cuDNN ran, and its first-run self-check found it disagreeing with the own kernel */
    RR_ATTN_CUDNN_NOT_TRIED,  /* cuDNN absent, turned off, the shape outside its support or the reservation */
    RR_ATTN_PATHS
};

static inline const char* rr_attn_path_name(int p) {
    static const char* names[RR_ATTN_PATHS] = {"cudnn_fwd",   "cudnn_bwd",     "own_tc_fwd",     "own_tc_bwd",
                                               "own_f32_fwd", "own_f32_bwd",   "cudnn_refused",  "cudnn_disagreed",
                                               "cudnn_not_tried"};
    return p >= 0 && p < RR_ATTN_PATHS ? names[p] : "?";
}

#endif
