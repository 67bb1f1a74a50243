/* cuda_bw_hooks.h — which path the CUDA backend's bandwidth-bound kernels took (engine/cuda/bw_path.h), for
 * tests: linked in the CPU emulation (RR_CUDA_EMU), looked up in librrfp-cuda.so on a device (as the attention
 * hooks, tests/support/cuda_attn_hooks.h). */
#ifndef RRFP_CUDA_BW_HOOKS_H
#define RRFP_CUDA_BW_HOOKS_H
#include "engine/cuda/bw_path.h"
#include "tests/support/cuda_attn_hooks.h"

typedef int (*BwPathsFn)(long* counts, int n);
#ifdef RR_CUDA_EMU
#ifdef __cplusplus
extern "C" {
#endif
int backend_cuda_emu_bw_paths(long* counts, int n);
#ifdef __cplusplus
}
#endif
static inline BwPathsFn bw_paths_fn(void) { return backend_cuda_emu_bw_paths; }
#else
static inline BwPathsFn bw_paths_fn(void) {
    void* h = attn_cuda_lib();
    return h ? (BwPathsFn)dlsym(h, "rrfp_cuda_bw_paths") : NULL;
}
#endif

/* counts[RR_BW_PATHS] since the start; 0 on success, -1 when the hook is missing */
static inline int bw_paths(long* counts) {
    BwPathsFn f = bw_paths_fn();
    if (!f) return -1;
    f(counts, RR_BW_PATHS);
    return 0;
}
#endif
