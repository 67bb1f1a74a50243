/* lm_lora.h — LoRA on the LM's linears (text/lm_lora.c; docs/training.md "LoRA"): the adapters' parameters and
 * the adapted linear's forward and backward, called by the block (text/lm.c). */
#ifndef RRFP_LM_LORA_H
#define RRFP_LM_LORA_H

#include "text/lm_types.h"

/* "q" .. "down": PEFT's target name of t without "_proj"; the tensor suffix of its base weight ("attn.q", ...) */
const char* lm_lora_target_name(LmLoraTarget t);
const char* lm_lora_target_module(LmLoraTarget t);
/* Parse a comma-separated target list (q,k,v,o,gate,up,down, or "all") into bits; -1 on an unknown name. Items that
 * start with "vision." are the tower's (vision/vit_lora.h) and are skipped; a list of those alone gives bits 0. */
int lm_lora_targets_parse(const char* list, unsigned* bits, char* err, size_t err_len);
/* Registers block l's adapters: text.blocks.{l}.<module>.lora_A.weight (r, in), Kaiming-uniform (bound 1/sqrt(in),
 * PEFT's kaiming_uniform_(a = sqrt(5))), and .lora_B.weight (out, r), zeros. */
void lm_lora_params_add(ParamTable* pt, const LmConfig* c, int l);
/* 1 when `name` is a LoRA factor (ends in .lora_A.weight or .lora_B.weight). */
int lm_lora_is_adapter(const char* name);
void lm_lora_weights_point(LmBlockW* w, const ParamTable* pt, int l, int grads);
void lm_lora_acts_layout(LmBlockActs* a, Arena* ar, const LmConfig* c, int max_T);
void lm_lora_grads_layout(LmBlockGrads* g, Arena* ar, const LmConfig* c, int max_T);
void lm_lora_scratch_layout(LmScratch* s, Arena* ar, const LmConfig* c, int max_T);
/* The dropout key of a microbatch: a function of (model seed, step, the microbatch's index in the global step);
 * never 0. */
uint64_t lm_lora_seed(uint64_t model_seed, int64_t step, int mb_index);
/* One adapted linear (target t of block w, input x (T, in_local), base output y): forward y += scale B A drop(x);
 * B: dx += its input gradient (lm_lora_backward_input; keeps du for W); W: the factors' gradients. No-ops where
 * the block has no adapter t. */
void lm_lora_forward(const Backend* be, const LmConfig* c, const LmBlockW* w, LmBlockActs* a, LmScratch* s,
                     const LmSeq* seq, LmLoraTarget t, Buf x, Buf y);
/* The forward's first half alone: a->lora_u[t] = scale A drop(x) (TP-summed for o, down), what t's W pass reads
 * (a recompute that stops before the down projection). Returns 0 where the block has no adapter t. */
int lm_lora_forward_input(const Backend* be, const LmConfig* c, const LmBlockW* w, LmBlockActs* a, LmScratch* s,
                          const LmSeq* seq, LmLoraTarget t, Buf x);
void lm_lora_backward_input(const Backend* be, const LmConfig* c, const LmBlockW* w, const LmBlockActs* a,
                            LmBlockGrads* g, LmScratch* s, const LmSeq* seq, LmLoraTarget t, Buf x, const float* dy,
                            float* dx);
void lm_lora_backward_weight(const Backend* be, const LmConfig* c, const LmBlockW* w, const LmBlockW* dw,
                             const LmBlockActs* a, const LmBlockGrads* g, const LmSeq* seq, LmLoraTarget t, Buf x,
                             const float* dy);

#endif
