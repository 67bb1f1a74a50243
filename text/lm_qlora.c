/* lm_qlora.c — QLoRA's quantised base weights in the LM's blocks (text/lm_qlora.h, docs/training.md "QLoRA").
 * The quantised tensors are the targets' base weights (a TP rank's slices of them: runtime/model/tp_quant.c), and the
 * quantisation is the one bitsandbytes makes of the whole weight in every layout. */
#include <stdio.h>
#include <string.h>

#include "text/lm_qlora.h"

static void base_name(char* n, size_t len, int l, int t) {
    snprintf(n, len, "text.blocks.%d.%s.weight", l, lm_lora_target_module((LmLoraTarget)t));
}

void lm_qlora_mark(ParamTable* pt, const LmConfig* c, int l0, int l1) {
    char n[128];
    for (int l = l0; l < l1; l++)
        for (int t = 0; t < LM_LORA_N; t++) {
            if (!(c->lora_targets >> t & 1)) continue;
            base_name(n, sizeof n, l, t);
            params_mark_quant(pt, n);
        }
}

int lm_qlora_is_base(const char* name, unsigned targets) {
    int l, k = 0;
    char rest[64];
    if (sscanf(name, "text.blocks.%d.%63s%n", &l, rest, &k) != 2 || name[k]) return 0;
    for (int t = 0; t < LM_LORA_N; t++) {
        char want[64];
        snprintf(want, sizeof want, "%s.weight", lm_lora_target_module((LmLoraTarget)t));
        if ((targets >> t & 1) && !strcmp(rest, want)) return 1;
    }
    return 0;
}

void lm_qlora_ws_init(LmQloraWs* ws, const ParamTable* pt, const LmConfig* c, LmBlockW* blocks, int l0, int l1) {
    memset(ws, 0, sizeof *ws);
    ws->layer = -1;
    if (l1 <= l0) return;
    const Backend* be = pt->be;
    size_t es = dtype_size(be->weight_dtype), off[LM_LORA_N], bytes = 0;
    char n[128];
    for (int t = 0; t < LM_LORA_N; t++) {
        off[t] = SIZE_MAX;
        if (!(c->lora_targets >> t & 1)) continue;
        base_name(n, sizeof n, l0, t);
        int i = params_find(pt, n);
        RR_ASSERT(i >= 0 && pt->specs[i].quant);
        off[t] = bytes;
        bytes += (pt->specs[i].numel * es + 255) & ~(size_t)255; /* every block's target t has the same shape */
    }
    ws->mem = be_alloc_as(be, MEM_WORKSPACE, bytes ? bytes : 256);
    for (int t = 0; t < LM_LORA_N; t++)
        ws->w[t] = off[t] == SIZE_MAX ? buf_none() : buf_of((char*)ws->mem + off[t], be->weight_dtype);
    for (int l = l0; l < l1; l++) {
        LmBlockW* w = &blocks[l - l0];
        Buf* base[LM_LORA_N] = {&w->q_w, &w->k_w, &w->v_w, &w->o_w, &w->gate_w, &w->up_w, &w->down_w};
        for (int t = 0; t < LM_LORA_N; t++)
            if (ws->w[t].p) *base[t] = ws->w[t];
    }
}

void lm_qlora_ws_free(LmQloraWs* ws, const Backend* be) {
    if (ws->mem) be->dev->free(ws->mem);
    memset(ws, 0, sizeof *ws);
}

void lm_qlora_load(LmQloraWs* ws, const Backend* be, const ParamTable* pt, int l) {
    if (!ws->mem || (ws->layer == l && ws->gen == pt->quant_gen)) return;
    char n[128];
    for (int t = 0; t < LM_LORA_N; t++) {
        if (!ws->w[t].p) continue;
        base_name(n, sizeof n, l, t);
        params_quant_dequantize(pt, be, params_find(pt, n), ws->w[t]);
    }
    ws->layer = l;
    ws->gen = pt->quant_gen;
}
