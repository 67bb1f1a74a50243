/* cuda_attn_hooks.h — the CUDA backend's attention hooks for tests (engine/cuda/attention_path.h, flash_attention.cu):
 * which path ran each attention call, and the own tensor-core kernel called directly (any storage, GQA).
 * In the CPU emulation (RR_CUDA_EMU) they are linked in; on a device they are looked up in librrfp-cuda.so,
 * which backend_cuda_get has opened already. NULL / -1 when not there (a CPU-only build). */
#ifndef RRFP_CUDA_ATTN_HOOKS_H
#define RRFP_CUDA_ATTN_HOOKS_H
#include <dlfcn.h>
#include <stdio.h>

#include "engine/cuda/attention_path.h"
#include "engine/engine.h"
#include "engine/util.h"

typedef int (*AttnPathsFn)(long* counts, int n);
/* engine/cuda/flash_attention.cu rrfp_cuda_flash_attention: the buffers typed (f32 or bf16 inputs; forward a = out,
 * backward a, dk, dv = the gradients, in the inputs' dtype or f32) */
typedef void (*FlashFn)(int backward, Buf a, Buf dk, Buf dv, float* lse, Buf dout, Buf out, Buf q, Buf k, Buf v,
                        const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ldq, int ldkv, int ldo, int causal);
typedef void (*FlashBwdInfoFn)(int* version, int* dkdv_warps, int* dq_kernel, int* lpt);

#ifdef RR_CUDA_EMU
#ifdef __cplusplus
extern "C" {
#endif
int backend_cuda_emu_attention_paths(long* counts, int n);
void backend_cuda_emu_flash_attention(int backward, Buf a, Buf dk, Buf dv, float* lse, Buf dout, Buf out, Buf q, Buf k,
                                      Buf v, const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ldq, int ldkv,
                                      int ldo, int causal);
void backend_cuda_emu_flash_attention_bwd_info(int* version, int* dkdv_warps, int* dq_kernel, int* lpt);
#ifdef RR_FA_DEV
void rrfp_dev_flash_attention(int backward, Buf a, Buf dk, Buf dv, float* lse, Buf dout, Buf out, Buf q, Buf k, Buf v,
                              const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ldq, int ldkv, int ldo,
                              int causal);
#endif
#ifdef __cplusplus
}
#endif
static inline AttnPathsFn attn_paths_fn(void) { return backend_cuda_emu_attention_paths; }
#ifdef RR_FA_DEV /* dev/cuda/'s build: the entry that runs the backward version the environment asks for */
static inline FlashFn flash_fn(void) { return rrfp_dev_flash_attention; }
#else
static inline FlashFn flash_fn(void) { return backend_cuda_emu_flash_attention; }
#endif
static inline FlashBwdInfoFn flash_bwd_info_fn(void) { return backend_cuda_emu_flash_attention_bwd_info; }
#else
static inline void* attn_cuda_lib(void) {
    char err[512];
    return rr_dlopen_beside_exe("RRFP_CUDA_LIB", "librrfp-cuda.so", err, sizeof err);
}
static inline AttnPathsFn attn_paths_fn(void) {
    void* h = attn_cuda_lib();
    return h ? (AttnPathsFn)dlsym(h, "rrfp_cuda_attention_paths") : NULL;
}
static inline FlashFn flash_fn(void) {
    void* h = attn_cuda_lib();
#ifdef RR_FA_DEV /* dev/cuda/'s librrfp-cuda.so (RRFP_CUDA_LIB): the backward version the environment asks for */
    return h ? (FlashFn)dlsym(h, "rrfp_dev_flash_attention") : NULL;
#else
    return h ? (FlashFn)dlsym(h, "rrfp_cuda_flash_attention") : NULL;
#endif
}
/* the own kernel's last backward: version (1, 2), the dk/dv kernel's warps per block, v2's dq kernel (2: double
 * buffers, 1: single, 0: v1), its block order (1: longest first over all samples) */
static inline FlashBwdInfoFn flash_bwd_info_fn(void) {
    void* h = attn_cuda_lib();
    return h ? (FlashBwdInfoFn)dlsym(h, "rrfp_cuda_flash_attention_bwd_info") : NULL;
}
#endif

/* counts[RR_ATTN_PATHS] since the start; 0 on success, -1 when the hook is missing */
static inline int attn_paths(long* counts) {
    AttnPathsFn f = attn_paths_fn();
    if (!f) return -1;
    f(counts, RR_ATTN_PATHS);
    return 0;
}
#endif
