/* vit_lora.h — LoRA on the CLIP tower's linears (vision/vit_lora.c; docs/training.md "LoRA"): the adapters'
 * parameters and the adapted linear's forward and backward, called by the blocks (vision/vit.c). */
#ifndef RRFP_VIT_LORA_H
#define RRFP_VIT_LORA_H

#include "vision/vision.h"

/* "q" .. "fc2" (the recipe's vision.<name>); the tensor path of its base ("attn.q", "attn.out", "mlp.fc1", ...);
 * PEFT's module name (q_proj, k_proj, v_proj, out_proj, fc1, fc2) and its path in a CLIP encoder layer. */
const char* vit_lora_target_name(VitLoraTarget t);
const char* vit_lora_target_module(VitLoraTarget t);
const char* vit_lora_target_peft(VitLoraTarget t);
const char* vit_lora_target_peft_path(VitLoraTarget t);
/* The tower's targets of a comma-separated lora.targets list: the items that start with "vision." (vision.q,
 * vision.k, vision.v, vision.out, vision.fc1, vision.fc2, or vision.all) into bits; other items are the LM's and
 * are skipped. -1 (err set) on an unknown vision.<name>. */
int vit_lora_targets_parse(const char* list, unsigned* bits, char* err, size_t err_len);
/* Registers the adapters of blocks [0, vit_blocks_run): vision.blocks.{l}.<module>.lora_A.weight (r, in),
 * Kaiming-uniform (bound 1/sqrt(in)), .lora_B.weight (out, r), zeros. */
void vit_lora_params_add(ParamTable* pt, const VitConfig* c);
/* Point block l's lora_A / lora_B at the table's values (grads 0) or gradients (grads 1; NULL where frozen). */
void vit_lora_weights_point(VitBlockW* w, const ParamTable* pt, int l, int grads);
/* Carving (from ar) of a block's u (N rows), a block's du, and the tower's scratch (max_T rows). */
void vit_lora_acts_carve(VitBlockActs* b, Arena* ar, const VitConfig* c, size_t N);
void vit_lora_grads_carve(VitBlockGrads* g, Arena* ar, const VitConfig* c, size_t N);
void vit_lora_scratch_layout(VitActs* a, Arena* ar, const VitConfig* c, int max_T);
/* Uploads the q / k / v column table once (vit_forward_prepare: the host's part of a forward). */
void vit_lora_prepare(const Backend* be, const VitConfig* c, VitActs* a);
/* Forward of adapter t of block l (x: its input, (T, in_local)): y += scale B A drop(x); y is the base's output,
 * for q, k, v the whole qkv (their columns of it). No-op where the block has no adapter t. */
void vit_lora_forward(const Backend* be, const VitConfig* c, const VitBlockW* w, VitBlockActs* b, VitActs* a, int l,
                      VitLoraTarget t, const float* x, float* y);
/* The forward's first half alone: b->lora_u[t] (a recompute that stops before fc2). */
void vit_lora_forward_input(const Backend* be, const VitConfig* c, const VitBlockW* w, VitBlockActs* b, VitActs* a,
                            int l, VitLoraTarget t, const float* x);
/* B: dx += the adapter's input gradient (dy: the base output's gradient, for q, k, v the whole dqkv); keeps du for W.
 * Called where the base's input gradient is whole (after its TP sum) for q, k, v, fc1, and local for out, fc2. */
void vit_lora_backward_input(const Backend* be, const VitConfig* c, const VitBlockW* w, const VitBlockActs* b,
                             VitBlockGrads* g, VitActs* a, int l, VitLoraTarget t, const float* x, const float* dy,
                             float* dx);
/* W: the factors' gradients into dw (none where NULL). */
void vit_lora_backward_weight(const Backend* be, const VitConfig* c, const VitBlockW* w, const VitBlockW* dw,
                              const VitBlockActs* b, const VitBlockGrads* g, const VitActs* a, int l, VitLoraTarget t,
                              const float* x, const float* dy);

#endif
