/* lm.h — the decoder LM of docs/model.md "Decoder LM and RoPE", as blocks that a pipeline stage can hold a range of.
 *
 *   x0 = embed(ids) (image positions: the projector's output, spliced in by runtime/model/model.c)
 *   block: x += o(attn(rope(q(n)), rope(k(n)), v(n))) with n = RMSNorm1(x);
 *          x += down(silu(gate(m)) * up(m))               with m = RMSNorm2(x)
 *   logits = lm_head(RMSNorm(x_L)); loss = sum of CE over supervised targets
 * Attention is causal within each packed sample (cu_seqlens), 1-D RoPE by the position inside the
 * sample. No biases anywhere in the LM.
 *
 * Parameter names (registered by lm_*_params_add, in this order):
 *   text.embed.weight (V, D)                        [first stage]
 *   text.blocks.{i}.norm1.weight (D)
 *   text.blocks.{i}.attn.q.weight (D, D)  .attn.k.weight (Dkv, D)  .attn.v.weight (Dkv, D)
 *   text.blocks.{i}.attn.{q,k,v}.bias (D / Dkv / Dkv)   [qkv_bias: Qwen2]                 init 0
 *   text.blocks.{i}.attn.o.weight (D, D)                                      std 0.02/sqrt(2L)
 *   text.blocks.{i}.attn.o.bias (D)                     [o_bias: Llama's attention_bias]  init 0
 *   text.blocks.{i}.norm2.weight (D)
 *   text.blocks.{i}.mlp.gate.weight (F, D)  .mlp.up.weight (F, D)
 *   text.blocks.{i}.mlp.down.weight (D, F)                                    std 0.02/sqrt(2L)
 *   text.norm.weight (D)  text.lm_head.weight (V, D)                [last stage; no head when tied]
 * Dkv = Hkv * D / H: grouped-query attention (Hkv key/value heads, each shared by H / Hkv query heads;
 * Hkv = H is multi-head attention). With tied embeddings (runtime/model) the head is text.embed.weight.
 * L is the LM's total block count (not the stage's), so init does not depend on the pipeline split.
 * Weights N(0, 0.02) keyed by (seed, name); norm weights 1. */
#ifndef RRFP_LM_H
#define RRFP_LM_H

#include "engine/engine.h"
#include "engine/params.h"

#include "text/lm_types.h"

void lm_embed_params_add(ParamTable* pt, const LmConfig* c);
/* Registers blocks [l0, l1) under their global indices. */
void lm_blocks_params_add(ParamTable* pt, const LmConfig* c, int l0, int l1);
void lm_head_params_add(ParamTable* pt, const LmConfig* c);
/* Point at the values (grads = 0) or gradients (grads = 1) of block `l` (global index). */
void lm_block_weights_point(LmBlockW* w, const ParamTable* pt, int l, int grads);

/* What one microbatch keeps of a block: everything (RECOMPUTE_NONE), everything but h (SELECTIVE), nothing (FULL: the
 * block's input, the stage's residual, is all a backward needs). The fields not kept are NULL. */
void lm_block_acts_layout(LmBlockActs* a, Arena* ar, const LmConfig* c, int max_T);
/* The recompute workspace of one block, shared by every block and microbatch of a stage: FULL, a whole block's
 * activations; SELECTIVE, h only; NONE, nothing. Valid from a forward or recompute of a block to the end of the block's
 * backward call (so the split backward's W recomputes what it reads: lm_block_recompute before W too). */
void lm_recompute_layout(LmBlockActs* ws, Arena* ar, const LmConfig* c, int max_T);
/* The activations a block's forward writes and its backward reads: the kept ones, with the recomputed ones from ws. */
void lm_block_acts_view(const LmConfig* c, const LmBlockActs* kept, const LmBlockActs* ws, LmBlockActs* view);
/* Recompute what the block's microbatch did not keep into its view (lm_block_acts_view) from the block's input xin
 * (FULL: the forward up to h, its output not written; SELECTIVE: h = SwiGLU(gate, up)), bitwise the forward's values.
 * Returns 1 when it recomputed anything (FULL or SELECTIVE with T > 0), 0 otherwise. */
int lm_block_recompute(const Backend* be, const LmConfig* c, const LmBlockW* w, LmBlockActs* view, LmScratch* s,
                       const LmSeq* seq, Buf xin);
void lm_block_grads_layout(LmBlockGrads* g, Arena* ar, const LmConfig* c, int max_T);
void lm_scratch_layout(LmScratch* s, Arena* ar, const LmConfig* c, int max_T);

/* xout = block(xin). xin must stay valid (unchanged) until the block's backward ends. xout none (buf_none()): the
 * forward stops after h (the recompute: the down projection and the residual are not needed by the backward). */
void lm_block_forward(const Backend* be, const LmConfig* c, const LmBlockW* w, LmBlockActs* a, LmScratch* s,
                      const LmSeq* seq, Buf xin, Buf xout);
/* B: dxin = d block input, OVERWRITTEN (not added), from dxout; fills g for W. */
void lm_block_backward_input(const Backend* be, const LmConfig* c, const LmBlockW* w, const LmBlockActs* a,
                             LmBlockGrads* g, LmScratch* s, const LmSeq* seq, Buf xin, const float* dxout,
                             float* dxin);
/* W: adds the block's weight gradients into dw from g, the saved activations and dxout. */
void lm_block_backward_weight(const Backend* be, const LmConfig* c, const LmBlockW* w, const LmBlockW* dw,
                              const LmBlockActs* a, const LmBlockGrads* g, const LmSeq* seq, Buf xin, const float* dxout);

/* LoRA on the block's linears (text/lm_lora.c) */
#include "text/lm_lora.h"

#endif
