/* cpu_ops.h — prototypes of the CPU backend's ops (one .c file per op in engine/cpu/).
 *
 * Each function has exactly the signature of its slot in engine/engine.h's Backend struct (the table
 * it runs through first: the CPU runs ops in call order and needs no stream), where
 * the contract of every op is documented (argument order: outputs, saved statistics, inputs,
 * weights, dimensions; backward ADDS into gradients, NULL gradients are skipped). backend_cpu.c
 * gathers them into `backend_cpu`. Tests and benches may call them directly. */
#ifndef RRFP_CPU_OPS_H
#define RRFP_CPU_OPS_H

#include <stddef.h>

#include "engine/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* linear.c */
void cpu_linear_forward(const Backend* be, float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC);
void cpu_linear_gelu_forward(const Backend* be, float* out, float* pre, const float* inp, const float* weight, const float* bias,
                             int N, int C, int OC);
void cpu_linear_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, int N, int C, int OC);

/* layernorm.c */
void cpu_layernorm_forward(const Backend* be, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                           const float* bias, int N, int C);
void cpu_layernorm_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, const float* mean, const float* rstd, int N, int C);

/* rmsnorm.c */
void cpu_rmsnorm_forward(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, int N, int C, double eps);
void cpu_rmsnorm_backward(const Backend* be, float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                          const float* rstd, int N, int C);

/* gelu.c */
void cpu_gelu_forward(const Backend* be, float* out, const float* inp, size_t n);
void cpu_gelu_backward(const Backend* be, float* dinp, const float* dout, const float* inp, size_t n);

/* swiglu.c */
void cpu_swiglu_forward(const Backend* be, float* out, const float* gate, const float* up, size_t n);
void cpu_swiglu_backward(const Backend* be, float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n);

/* add.c */
void cpu_add_forward(const Backend* be, float* out, const float* a, const float* b, size_t n);

/* scale.c (the step end's other two ops, adamw_update and sum_squares, are engine/adamw.c's, declared
 * in engine/engine.h) */
void cpu_scale(const Backend* be, float* x, float s, size_t n);

/* rope.c */
void cpu_rope_forward(const Backend* be, float* x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf);
void cpu_rope_backward(const Backend* be, float* dx, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf);
void cpu_rope2d_forward(const Backend* be, float* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld);
void cpu_rope2d_backward(const Backend* be, float* dx, const int* pos_row, const int* pos_col, int N, int H, int d, int ld);
void cpu_rope_qk_forward(const Backend* be, float* q, float* k, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k,
                         const RopeFreq* rf);
void cpu_rope_qk_backward(const Backend* be, float* dq, float* dk, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k,
                          const RopeFreq* rf);

/* act.c, rows_gather.c (the CLIP tower's) */
void cpu_act_forward(const Backend* be, float* out, const float* inp, size_t n, Act act);
void cpu_act_backward(const Backend* be, float* dinp, const float* dout, const float* inp, size_t n, Act act);
void cpu_rows_gather_forward(const Backend* be, float* out, const int* idx, const float* w, const float* table, int N, int K, int C);
void cpu_rows_gather_backward(const Backend* be, float* dtable, const float* dout, const int* idx, const float* w, int N, int K, int C);
void cpu_bf16_act_forward(const Backend* be, float* out, const float* inp, size_t n, Act act);
void cpu_bf16_rows_gather_forward(const Backend* be, float* out, const int* idx, const float* w, const float* table, int N, int K,
                                  int C);

/* embedding.c */
void cpu_embedding_forward(const Backend* be, float* out, const int* ids, const float* table, int N, int C);
void cpu_embedding_backward(const Backend* be, float* dtable, const float* dout, const int* ids, int N, int C);

/* crossentropy.c */
void cpu_crossentropy_forward(const Backend* be, float* loss_sum, float* lse, const float* logits, const int* targets, int N, int V);
void cpu_crossentropy_backward(const Backend* be, float* dlogits, const float* logits, const float* lse, const int* targets, float scale,
                               int N, int V);

/* attention.c */
void cpu_attention_forward(const Backend* be, float* out, float* lse, const float* q, const float* k, const float* v,
                           const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal);
void cpu_attention_backward(const Backend* be, float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                            const float* q, const float* k, const float* v, const int* cu_seqlens, int S, int T,
                            int H, int Hkv, int d, int ld_q, int ld_kv, int causal);

/* attention_decode.c: generation's attention against a KV cache (engine.h) */
void cpu_attention_decode(const Backend* be, float* out, const float* q, const float* k, const float* v, int n, int Tk, int H,
                          int Hkv, int d, int ld_q, int ld_kv);

/* bf16.c: the forward ops with the bf16 rounding points (engine.h, Precision); the backward ops,
 * cross-entropy and the step end of backend_cpu_bf16 are the f32 ones above. */
void cpu_round_bf16(const Backend* be, float* out, const float* inp, size_t n);
void cpu_to_bf16(const Backend* be, uint16_t* out, const float* inp, size_t n);
void cpu_adamw_update_copy(const Backend* be, float* param, const float* grad, float* m, float* v, size_t n,
                           const AdamWConfig* cfg, int t, int decay, Buf copy);
void cpu_bf16_linear_forward(const Backend* be, float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                             int OC);
void cpu_bf16_linear_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                              const float* weight, int N, int C, int OC);
void cpu_bf16_layernorm_forward(const Backend* be, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                const float* bias, int N, int C);
void cpu_bf16_rmsnorm_forward(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, int N, int C, double eps);
void cpu_bf16_gelu_forward(const Backend* be, float* out, const float* inp, size_t n);
void cpu_bf16_linear_gelu_forward(const Backend* be, float* out, float* pre, const float* inp, const float* weight,
                                  const float* bias, int N, int C, int OC);
void cpu_bf16_swiglu_forward(const Backend* be, float* out, const float* gate, const float* up, size_t n);
void cpu_bf16_add_forward(const Backend* be, float* out, const float* a, const float* b, size_t n);
void cpu_bf16_rope_forward(const Backend* be, float* x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf);
void cpu_bf16_rope2d_forward(const Backend* be, float* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld);
void cpu_bf16_rope_qk_forward(const Backend* be, float* q, float* k, const int* pos, int N, int H, int Hkv, int d, int ld_q,
                              int ld_k, const RopeFreq* rf);
void cpu_bf16_embedding_forward(const Backend* be, float* out, const int* ids, const float* table, int N, int C);
void cpu_bf16_attention_forward(const Backend* be, float* out, float* lse, const float* q, const float* k, const float* v,
                                const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal);

/* LoRA's dropout (dropout.c): BackendOps.dropout_forward / dropout_backward; the bf16 table's forward rounds its output */
void cpu_dropout_forward(const Backend* be, Buf out, Buf inp, int N, int C, int ld_g, int c0, float p, uint64_t seed);
void cpu_bf16_dropout_forward(const Backend* be, Buf out, Buf inp, int N, int C, int ld_g, int c0, float p, uint64_t seed);
void cpu_dropout_backward(const Backend* be, float* dinp, const float* dout, int N, int C, int ld_g, int c0, float p,
                          uint64_t seed);
/* The norms' parameter gradients (layernorm.c): dweight += dy (x - mean) rstd and dbias += dy summed over the N rows
 * (either may be NULL; mean NULL: RMSNorm's, no centring), column blocks in parallel. */
void cpu_norm_params_backward(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                              const float* rstd, int N, int C);
/* nf4.c (QLoRA's base weights: engine/quant.h rr_nf4_dq_dequantize_bf16, widened to the f32 words of every CPU table) */
void cpu_nf4_dequantize(const Backend* be, Buf out, const uint8_t* q, const uint8_t* q8, const float* absmax2,
                        const float* map8, float offset, size_t n);

#ifdef __cplusplus
}
#endif
#endif
