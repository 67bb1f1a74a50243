// cuda_ops.cuh — prototypes of the CUDA backend's entries (one .cu file per op family, ggml norm.cuh
// style). Each has exactly the signature of its slot in engine/engine.h's Backend, where the contract
// is documented; every pointer is device memory. cuda_backend.cu gathers them into the table.
// Each entry runs on cuda_ctx.stream through a static launcher `<op>_cuda(..., cudaStream_t)` that
// launches a static `<op>_kernel` and checks cudaGetLastError().
#pragma once

#include <stddef.h>

#include <cuda_bf16.h>

#include "engine/engine.h"

// linear.cu (cuBLAS, through engine/gemm_desc.h)
void cuda_linear_forward(const Backend* be, float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC);
void cuda_linear_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int N, int C, int OC);
void cuda_linear_gelu_forward(const Backend* be, float* out, float* pre, const float* inp, const float* weight,
                              const float* bias, int N, int C, int OC);

// norm.cu
void cuda_layernorm_forward(const Backend* be, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, int N, int C);
void cuda_layernorm_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int N, int C);
void cuda_rmsnorm_forward(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, int N, int C, double eps);
void cuda_rmsnorm_backward(const Backend* be, float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                           const float* rstd, int N, int C);

// elementwise.cu
void cuda_gelu_forward(const Backend* be, float* out, const float* inp, size_t n);
void cuda_gelu_backward(const Backend* be, float* dinp, const float* dout, const float* inp, size_t n);
void cuda_swiglu_forward(const Backend* be, float* out, const float* gate, const float* up, size_t n);
void cuda_swiglu_backward(const Backend* be, float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n);
void cuda_add_forward(const Backend* be, float* out, const float* a, const float* b, size_t n);

// rope.cu
void cuda_rope_forward(const Backend* be, float* x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf);
void cuda_rope_backward(const Backend* be, float* dx, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf);
void cuda_rope2d_forward(const Backend* be, float* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld);
void cuda_rope2d_backward(const Backend* be, float* dx, const int* pos_row, const int* pos_col, int N, int H, int d, int ld);
// RoPE's cos / sin tables (rope.cu) for the calls BackendDevice.reserve announces: positions below their max_T, built now
void cuda_rope_reserve(const Backend* be, const AttnReserve* attn, int n_attn);
void cuda_rope_qk_forward(const Backend* be, float* q, float* k, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k,
                          const RopeFreq* rf);
void cuda_bf16_rope_qk_forward(const Backend* be, float* q, float* k, const int* pos, int N, int H, int Hkv, int d, int ld_q,
                               int ld_k, const RopeFreq* rf);
void cuda_bf16a_rope_qk_forward(const Backend* be, uint16_t* q, uint16_t* k, const int* pos, int N, int H, int Hkv, int d, int ld_q,
                                int ld_k, const RopeFreq* rf);
void cuda_rope_qk_backward(const Backend* be, float* dq, float* dk, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k,
                           const RopeFreq* rf);

// embedding.cu
void cuda_embedding_forward(const Backend* be, float* out, const int* ids, const float* table, int N, int C);
void cuda_embedding_backward(const Backend* be, float* dtable, const float* dout, const int* ids, int N, int C);

// crossentropy.cu
void cuda_crossentropy_forward(const Backend* be, float* loss_sum, float* lse, const float* logits, const int* targets, int N, int V);
void cuda_crossentropy_backward(const Backend* be, float* dlogits, const float* logits, const float* lse, const int* targets,
                                float scale, int N, int V);

// attention.cu
void cuda_attention_forward(const Backend* be, float* out, float* lse, const float* q, const float* k, const float* v,
                            const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal);
void cuda_attention_backward(const Backend* be, float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                             const float* q, const float* k, const float* v, const int* cu_seqlens, int S, int T,
                             int H, int Hkv, int d, int ld_q, int ld_kv, int causal);

// attention_decode.cu (generation with a KV cache)
void cuda_attention_decode(const Backend* be, float* out, const float* q, const float* k, const float* v, int n, int Tk, int H,
                           int Hkv, int d, int ld_q, int ld_kv);

// dropout.cu (LoRA's dropout; the bf16 table's forward rounds its output)
void cuda_dropout_forward(const Backend* be, Buf out, Buf inp, int N, int C, int ld_g, int c0, float p, uint64_t seed);
void cuda_bf16_dropout_forward(const Backend* be, Buf out, Buf inp, int N, int C, int ld_g, int c0, float p,
                               uint64_t seed);
void cuda_dropout_backward(const Backend* be, float* dinp, const float* dout, int N, int C, int ld_g, int c0, float p,
                           uint64_t seed);
// quant.cu (QLoRA's base weights: BackendOps.nf4_dequantize, 2-byte or f32-word weights)
void cuda_nf4_dequantize(const Backend* be, Buf out, const uint8_t* q, const uint8_t* q8, const float* absmax2,
                         const float* map8, float offset, size_t n);

// optim.cu (the step end)
double cuda_sum_squares(const Backend* be, const float* x, size_t n);
void cuda_scale(const Backend* be, float* x, float s, size_t n);
void cuda_adamw_update(const Backend* be, float* param, const float* grad, float* m, float* v, size_t n, const AdamWConfig* cfg, int t,
                       int decay);

// bf16.cu (runtime.precision = bf16: the rounding points of engine/cpu/bf16.c; linear via cuBLASLt); the
// norm / elementwise / RoPE / embedding forwards of the bf16 table live beside their f32 kernels (rounding
// in the store)
void cuda_round_bf16(const Backend* be, float* out, const float* inp, size_t n);
// clip_ops.cu
void cuda_act_forward(const Backend* be, float* out, const float* inp, size_t n, Act act);
void cuda_act_backward(const Backend* be, float* dinp, const float* dout, const float* inp, size_t n, Act act);
void cuda_rows_gather_forward(const Backend* be, float* out, const int* idx, const float* w, const float* table, int N, int K,
                              int C);
void cuda_rows_gather_backward(const Backend* be, float* dtable, const float* dout, const int* idx, const float* w, int N,
                               int K, int C);
void cuda_bf16_act_forward(const Backend* be, float* out, const float* inp, size_t n, Act act);
void cuda_bf16_rows_gather_forward(const Backend* be, float* out, const int* idx, const float* w, const float* table, int N,
                                   int K, int C);
void cuda_to_bf16(const Backend* be, uint16_t* out, const float* inp, size_t n);
// optim.cu: AdamW writing the compute copy in the same pass
void cuda_adamw_update_copy(const Backend* be, float* param, const float* grad, float* m, float* v, size_t n,
                            const AdamWConfig* cfg, int t, int decay, Buf copy);
void cuda_adamw_multi(const Backend* be, const AdamwTensor* ts, int n, const AdamWConfig* cfgs, int ncfg, int t);
double cuda_sum_squares_multi(const Backend* be, const float* const* xs, const size_t* ns, int n);
void cuda_bf16_linear_forward(const Backend* be, float* out, const float* inp, const uint16_t* weight, const uint16_t* bias, int N, int C,
                              int OC);
void cuda_bf16_linear_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const uint16_t* weight, int N, int C, int OC);
void cuda_bf16_linear_gelu_forward(const Backend* be, float* out, float* pre, const float* inp, const uint16_t* weight,
                                   const uint16_t* bias, int N, int C, int OC);
void cuda_bf16_layernorm_forward(const Backend* be, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, int N, int C);
void cuda_bf16_rmsnorm_forward(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, int N, int C, double eps);
void cuda_bf16_gelu_forward(const Backend* be, float* out, const float* inp, size_t n);
void cuda_bf16_swiglu_forward(const Backend* be, float* out, const float* gate, const float* up, size_t n);
void cuda_bf16_add_forward(const Backend* be, float* out, const float* a, const float* b, size_t n);
void cuda_bf16_rope_forward(const Backend* be, float* x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf);
void cuda_bf16_rope2d_forward(const Backend* be, float* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld);
void cuda_bf16_embedding_forward(const Backend* be, float* out, const int* ids, const uint16_t* table, int N, int C);
void cuda_bf16_attention_forward(const Backend* be, float* out, float* lse, const float* q, const float* k, const float* v,
                                 const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal);

// scratch reserved up front (BackendDevice.reserve): bf16.cu's GEMM operands, optim.cu's sum_squares, cuDNN attention's
void cuda_bf16_reserve(size_t gemm_elems);
void cuda_sum_squares_reserve(size_t n);
void cuda_reserve(const Backend* be, size_t gemm_elems, size_t sumsq_n, const AttnReserve* attn, int n_attn);
// attention_cudnn.cu's scratch (attention_scratch.h's layout) for the largest calls; nothing without cuDNN
void cuda_cudnn_attention_reserve(const AttnReserve* attn, int n_attn);
// flash_attention.cu: the own kernel's backward scratch (row statistics; bf16 copies of f32 inputs) for the
// stage's largest calls
void cuda_flash_attention_reserve(const AttnReserve* attn, int n_attn);

// attention_cudnn.cu: cuDNN's fused attention for the bf16 tables (1: done, 0: run the own kernel). q, k, v, out and
// dout typed: f32 words (the bf16 table) or 2-byte bf16 words (2-byte activations; then -1: a run to be checked
// against the own kernel, call the f32 entry on widened inputs). The backward adds into the f32 dq, dk, dv (each may
// be NULL); with 2-byte inputs, dq16, dk16, dv16 (rows of stride ld_dv; NULL: none) are 2-byte mirrors of the f32 sums,
// or with dv NULL dv16 is dv stored 2-byte only (dv16 = bf16(dv16 + cuDNN's dv)).
int cuda_cudnn_attention_forward(const Backend* be, Buf out, float* lse, Buf q, Buf k, Buf v, const int* cu_seqlens, int S,
                                 int T, int H, int d, int ld_qkv, int causal);
int cuda_cudnn_attention_backward(const Backend* be, float* dq, float* dk, float* dv, Buf dout, Buf out, const float* lse,
                                  Buf q, Buf k, Buf v, const int* cu_seqlens, int S, int T, int H, int d, int ld_qkv,
                                  int causal, uint16_t* dq16, uint16_t* dk16, uint16_t* dv16, int ld_dv);
int cuda_cudnn_attention_available(void);
void cuda_bf16_attention_backward(const Backend* be, float* dq, float* dk, float* dv, const float* dout, const float* out,
                                  const float* lse, const float* q, const float* k, const float* v,
                                  const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal);

// flash_attention.cu: the own tensor-core attention (bf16 MMA, f32 softmax and accumulation) over packed
// samples; H query heads, Hkv key/value heads (GQA: Hkv divides H); row strides ldq (q, dq), ldkv (k, v, dk,
// dv), ldo (out, dout); lse f32 (T, H). The f32 variant converts its inputs to bf16 on load and stores f32
// (rounded to bf16 when round_out). Gradients are added to dq, dk, dv (NULL: skipped).
void cuda_flash_attention_forward_bf16(cudaStream_t stream, __nv_bfloat16* out, float* lse, const __nv_bfloat16* q,
                                       const __nv_bfloat16* k, const __nv_bfloat16* v, const int* cu_seqlens, int S,
                                       int T, int H, int Hkv, int d, int ldq, int ldkv, int ldo, int causal);
void cuda_flash_attention_backward_bf16(cudaStream_t stream, __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
                                        const __nv_bfloat16* dout, const __nv_bfloat16* out, const float* lse,
                                        const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                        const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ldq, int ldkv,
                                        int ldo, int causal);
// bf16 q, k, v, out, dout and f32 gradients dq (row stride ldgq), dk, dv (ldgkv), added unrounded: the backward v2's
// kernels without the f32 entry's bf16 copies
void cuda_flash_attention_backward_bf16_f32grad(cudaStream_t stream, float* dq, float* dk, float* dv,
                                                const __nv_bfloat16* dout, const __nv_bfloat16* out, const float* lse,
                                                const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                                const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ldq,
                                                int ldkv, int ldo, int ldgq, int ldgkv, int causal);
// the same with dv 2-byte bf16 (rows of stride ldgv): dv16 = bf16(dv16 + the f32 sum) in the kernel's one store (a
// zeroed dv16 gets rr_f32_to_bf16 of the f32 entry's dv: the 2-byte output gradient that goes with 2-byte activations)
// the same with f32 dq, dk, dv (added) and 2-byte mirrors of their final values (any may be NULL; rows of stride ld16):
// rr_f32_to_bf16 of each value in the store that wrote it (a gradient a bias sums in f32 and a GEMM reads in 2 bytes)
void cuda_flash_attention_backward_bf16_f32grad_m16(cudaStream_t stream, float* dq, float* dk, float* dv,
                                                     __nv_bfloat16* dq16, __nv_bfloat16* dk16, __nv_bfloat16* dv16,
                                                     int ld16, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                                                     const float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                     const __nv_bfloat16* v, const int* cu_seqlens, int S, int T, int H,
                                                     int Hkv, int d, int ldq, int ldkv, int ldo, int ldgq, int ldgkv,
                                                     int causal);
void cuda_flash_attention_backward_bf16_f32grad_dv16(cudaStream_t stream, float* dq, float* dk, __nv_bfloat16* dv16,
                                                     int ldgv, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                                                     const float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                     const __nv_bfloat16* v, const int* cu_seqlens, int S, int T, int H,
                                                     int Hkv, int d, int ldq, int ldkv, int ldo, int ldgq, int ldgkv,
                                                     int causal);
void cuda_flash_attention_forward_f32(cudaStream_t stream, float* out, float* lse, const float* q, const float* k,
                                      const float* v, const int* cu_seqlens, int S, int T, int H, int Hkv, int d,
                                      int ldq, int ldkv, int ldo, int causal, int round_out);
void cuda_flash_attention_backward_f32(cudaStream_t stream, float* dq, float* dk, float* dv, const float* dout,
                                       const float* out, const float* lse, const float* q, const float* k,
                                       const float* v, const int* cu_seqlens, int S, int T, int H, int Hkv, int d,
                                       int ldq, int ldkv, int ldo, int causal);
// which path ran each attention call (engine/cuda/attention_path.h's RR_ATTN_*): counted here
void cuda_attention_path_note(int path);

// 2-byte activations (the bf16 table's entries given Bufs of DTYPE_BF16: cuda_backend.cu dispatches): the bf16
// numerics with activations stored as 2-byte bf16 words (engine.h lists which pointers); each beside its family's kernels.
void cuda_from_bf16(const Backend* be, float* out, const uint16_t* inp, size_t n);
void cuda_bf16a_linear_forward(const Backend* be, uint16_t* out, const uint16_t* inp, const uint16_t* weight, const uint16_t* bias, int N, int C,
                               int OC);
void cuda_bf16a_linear_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const uint16_t* inp,
                                const uint16_t* weight, int N, int C, int OC);
void cuda_bf16a_linear_gelu_forward(const Backend* be, uint16_t* out, uint16_t* pre, const uint16_t* inp, const uint16_t* weight,
                                    const uint16_t* bias, int N, int C, int OC);
void cuda_bf16a_layernorm_forward(const Backend* be, uint16_t* out, float* mean, float* rstd, const uint16_t* inp, const float* weight,
                                  const float* bias, int N, int C);
void cuda_bf16a_layernorm_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const uint16_t* inp,
                                   const float* weight, const float* mean, const float* rstd, int N, int C);
void cuda_bf16a_rmsnorm_forward(const Backend* be, uint16_t* out, float* rstd, const uint16_t* inp, const float* weight, int N, int C,
                                double eps);
void cuda_bf16a_rmsnorm_backward(const Backend* be, float* dinp, float* dweight, const float* dout, const uint16_t* inp,
                                 const float* weight, const float* rstd, int N, int C);
void cuda_bf16a_gelu_forward(const Backend* be, uint16_t* out, const uint16_t* inp, size_t n);
void cuda_bf16a_gelu_backward(const Backend* be, float* dinp, const float* dout, const uint16_t* inp, size_t n);
void cuda_bf16a_swiglu_forward(const Backend* be, uint16_t* out, const uint16_t* gate, const uint16_t* up, size_t n);
void cuda_bf16a_swiglu_backward(const Backend* be, float* dgate, float* dup, const float* dout, const uint16_t* gate, const uint16_t* up,
                                size_t n);
void cuda_bf16a_add_forward(const Backend* be, uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n);
void cuda_bf16a_add_f32_forward(const Backend* be, uint16_t* out, const uint16_t* a, const float* b, size_t n);
void cuda_bf16a_rope_forward(const Backend* be, uint16_t* x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf);
void cuda_bf16a_rope2d_forward(const Backend* be, uint16_t* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld);
void cuda_bf16a_embedding_forward(const Backend* be, uint16_t* out, const int* ids, const uint16_t* table, int N, int C);
void cuda_bf16a_crossentropy_forward(const Backend* be, float* loss_sum, float* lse, const uint16_t* logits, const int* targets, int N,
                                     int V);
void cuda_bf16a_crossentropy_backward(const Backend* be, float* dlogits, const uint16_t* logits, const float* lse, const int* targets,
                                      float scale, int N, int V);
void cuda_bf16a_attention_forward(const Backend* be, uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                  const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal);
void cuda_bf16a_attention_backward(const Backend* be, float* dq, float* dk, float* dv, const float* dout, const uint16_t* out,
                                   const float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                   const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal);
void cuda_bf16a_attn_reserve(const AttnReserve* attn, int n_attn);
// 2-byte output gradients with 2-byte activations (its slots dispatch here on a 2-byte gradient or mirror:
// cuda_backend.cu, the *_g entries)
void cuda_bf16a_linear_backward_b16(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, float* dbias,
                                    const uint16_t* dout16, const float* dout, const uint16_t* inp, const uint16_t* weight, int N,
                                    int C, int OC, int set);
void cuda_bf16a_swiglu_backward_b16(const Backend* be, uint16_t* dgate16, uint16_t* dup16, const float* dout,
                                    const uint16_t* gate, const uint16_t* up, size_t n);
void cuda_bf16a_rmsnorm_backward_b16(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, const float* dout,
                                     const uint16_t* inp, const float* weight, const float* rstd, int N, int C);
void cuda_bf16a_rope_qk_backward_b16(const Backend* be, uint16_t* dq16, int ldq16, float* dq, uint16_t* dk16, int ldk16,
                                     float* dk, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k,
                                     const RopeFreq* rf, int keep_q, int keep_k);
void cuda_bf16a_attention_backward_b16(const Backend* be, float* dq, float* dk, float* dv, uint16_t* dq16, uint16_t* dk16,
                                       uint16_t* dv16, int ld16,
                                       const uint16_t* dout16, const uint16_t* out, const float* lse, const uint16_t* q,
                                       const uint16_t* k, const uint16_t* v, const int* cu_seqlens, int S, int T, int H, int Hkv,
                                       int d, int ld_q, int ld_kv, int causal);
void cuda_bf16a_layernorm_backward_b16(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, float* dbias,
                                       const float* dout, const uint16_t* inp, const float* weight, const float* mean,
                                       const float* rstd, int N, int C);
void cuda_bf16a_rope2d_backward_b16(const Backend* be, uint16_t* dx16, int ld16, float* dx, const int* pos_row,
                                    const int* pos_col, int N, int H, int d, int ld, int keep_f32);
void cuda_bf16a_crossentropy_backward_b16(const Backend* be, uint16_t* dlogits16, const uint16_t* logits, const float* lse,
                                          const int* targets, float scale, int N, int V);
void cuda_bf16a_act_backward_b16(const Backend* be, float* dinp, uint16_t* dinp16, const float* dout, const uint16_t* inp,
                                 size_t n, Act act);
// clip_ops.cu with 2-byte activations
void cuda_bf16a_act_forward(const Backend* be, uint16_t* out, const uint16_t* inp, size_t n, Act act);
void cuda_bf16a_act_backward(const Backend* be, float* dinp, const float* dout, const uint16_t* inp, size_t n, Act act);
void cuda_bf16a_rows_gather_forward(const Backend* be, uint16_t* out, const int* idx, const float* w, const uint16_t* table, int N,
                                    int K, int C);
