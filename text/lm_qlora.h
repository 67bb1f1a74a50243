/* lm_qlora.h — QLoRA (docs/training.md "QLoRA"): the LoRA targets' base weights stored as bitsandbytes' NF4 with
 * double-quantised absmaxes (engine/params.h, params_mark_quant) and dequantised, block by block, into one
 * workspace of the compute dtype that the block's GEMMs read, with LoRA's adapters on top as without it. */
#ifndef RRFP_LM_QLORA_H
#define RRFP_LM_QLORA_H

#include "engine/params.h"
#include "text/lm.h"

/* The dequantised base weights of one block: one Buf per LmLoraTarget (none where the target is not adapted),
 * holding block `layer`'s as of the table's quantisation `gen` (layer -1: none yet). */
typedef struct LmQloraWs {
    void* mem;
    Buf w[LM_LORA_N];
    int layer;
    unsigned gen;
} LmQloraWs;

/* Mark the base weights of blocks [l0, l1)'s adapted linears for NF4 storage (before params_alloc). */
void lm_qlora_mark(ParamTable* pt, const LmConfig* c, int l0, int l1);
/* The workspace on the table's backend (after params_alloc), in its weight storage; blocks [l0, l1) pointed at it. */
void lm_qlora_ws_init(LmQloraWs* ws, const ParamTable* pt, const LmConfig* c, LmBlockW* blocks, int l0, int l1);
void lm_qlora_ws_free(LmQloraWs* ws, const Backend* be);
/* Dequantise block l's base weights into the workspace unless it holds them already (same block, same
 * quantisation); on the backend's stream, before the block's forward, recompute or backward. */
void lm_qlora_load(LmQloraWs* ws, const Backend* be, const ParamTable* pt, int l);
/* 1 when `name` is a base weight QLoRA stores quantised: text.blocks.{l}.<target module>.weight of a target in
 * `targets` (LmLoraTarget bits). */
int lm_qlora_is_base(const char* name, unsigned targets);

#endif
