/* params_quant.c — frozen base weights stored as bitsandbytes stores a QLoRA base (engine/params.h "NF4 storage",
 * docs/training.md "QLoRA"): NF4 codes packed two a byte in blocks of 64 values, each block's absmax quantised
 * again (8-bit codes of the signed dynamic map in blocks of 256 around the absmaxes' mean), all on the backend.
 * The quantisation is engine/quant.c's (bitsandbytes' quantize_4bit with compress_statistics), over the whole
 * tensor flattened, from the values as written (f32); the ops read the tensor through the backend's
 * nf4_dequantize into a weight of the compute dtype. */
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/kernel_math.h"
#include "engine/params.h"
#include "engine/quant.h"
#include "engine/util.h"

void params_quant_alloc(ParamTable* pt) {
    int any = 0;
    for (int i = 0; i < pt->n; i++) any |= pt->specs[i].quant;
    if (!any) return;
    const Backend* be = pt->be;
    RR_ASSERT(be->ops->nf4_dequantize && "the backend has no NF4 dequantisation");
    pt->quant = callocCheck((size_t)pt->n, sizeof(ParamQuant));
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (!s->quant) continue;
        ParamQuant* Q = &pt->quant[i];
        Q->nb = rr_quant_blocks(s->numel, RR_NF4_BLOCK);
        Q->nb2 = rr_quant_blocks(Q->nb, RR_DQ_BLOCK);
        Q->q = be_alloc_as(be, MEM_WEIGHTS, (s->numel + 1) / 2);
        Q->q8 = be_alloc_as(be, MEM_WEIGHTS, Q->nb);
        Q->absmax2 = be_alloc_as(be, MEM_WEIGHTS, Q->nb2 * sizeof(float));
    }
    pt->quant_map8 = be_alloc_as(be, MEM_WEIGHTS, 256 * sizeof(float));
    be->dev->copy_h2d(be, pt->quant_map8, rr_dynamic_map8, 256 * sizeof(float));
}

void params_quant_set(ParamTable* pt, int i, const uint8_t* q, const uint8_t* q8, const float* absmax2, float offset) {
    const Backend* be = pt->be;
    ParamQuant* Q = &pt->quant[i];
    be->dev->copy_h2d(be, Q->q, q, (pt->specs[i].numel + 1) / 2);
    be->dev->copy_h2d(be, Q->q8, q8, Q->nb);
    be->dev->copy_h2d(be, Q->absmax2, absmax2, Q->nb2 * sizeof(float));
    be->dev->synchronize(be); /* the host buffers may go once this returns */
    Q->offset = offset;
    Q->set = 1;
    pt->quant_gen++;
}

void params_quant_get(const ParamTable* pt, int i, uint8_t* q, uint8_t* q8, float* absmax2, float* offset) {
    const Backend* be = pt->be;
    const ParamQuant* Q = &pt->quant[i];
    RR_ASSERT(!Q->stage && "a quantised tensor read before its last value was written");
    be->dev->copy_d2h(be, q, Q->q, (pt->specs[i].numel + 1) / 2);
    be->dev->copy_d2h(be, q8, Q->q8, Q->nb);
    be->dev->copy_d2h(be, absmax2, Q->absmax2, Q->nb2 * sizeof(float));
    *offset = Q->offset;
}

/* bitsandbytes' quantize_4bit(x, blocksize = 64, quant_type = "nf4", compress_statistics = True) of the staged
 * values */
static void quant_staged(ParamTable* pt, int i) {
    ParamQuant* Q = &pt->quant[i];
    size_t n = pt->specs[i].numel;
    if (Q->set) { /* the values it holds already (written back unchanged): its quantised form stays */
        float* cur = mallocCheck((n ? n : 1) * sizeof(float));
        float* stage = Q->stage;
        Q->stage = NULL;
        params_quant_values(pt, i, cur);
        Q->stage = stage;
        int same = !memcmp(cur, stage, n * sizeof(float));
        free(cur);
        if (same) {
            free(Q->stage);
            Q->stage = NULL;
            Q->staged = 0;
            return;
        }
    }
    uint8_t* q = mallocCheck((n + 1) / 2);
    float* absmax = mallocCheck(Q->nb * sizeof(float));
    uint8_t* q8 = mallocCheck(Q->nb);
    float* absmax2 = mallocCheck(Q->nb2 * sizeof(float));
    float offset;
    rr_nf4_quantize(Q->stage, n, RR_NF4_BLOCK, q, absmax);
    rr_nf4_absmax_compress(absmax, Q->nb, q8, absmax2, &offset);
    free(Q->stage);
    Q->stage = NULL;
    Q->staged = 0;
    params_quant_set(pt, i, q, q8, absmax2, offset);
    free(q), free(absmax), free(q8), free(absmax2);
}

void params_quant_put(ParamTable* pt, int i, size_t at, const float* h, size_t n) {
    ParamQuant* Q = &pt->quant[i];
    size_t numel = pt->specs[i].numel;
    RR_ASSERT(at + n <= numel);
    if (!Q->stage) Q->stage = mallocCheck((numel ? numel : 1) * sizeof(float));
    memcpy(Q->stage + at, h, n * sizeof(float));
    Q->staged += n; /* the writers put disjoint ranges: the tensor is whole when they sum to numel */
    if (Q->staged >= numel) quant_staged(pt, i);
}

void params_quant_values(const ParamTable* pt, int i, float* dst) {
    const ParamQuant* Q = &pt->quant[i];
    size_t n = pt->specs[i].numel;
    uint8_t* q = mallocCheck((n + 1) / 2);
    uint8_t* q8 = mallocCheck(Q->nb);
    float* absmax2 = mallocCheck(Q->nb2 * sizeof(float));
    uint16_t* w = mallocCheck((n ? n : 1) * sizeof(uint16_t));
    float offset;
    params_quant_get(pt, i, q, q8, absmax2, &offset);
    rr_nf4_dq_dequantize_bf16(q, q8, absmax2, offset, n, w);
    for (size_t k = 0; k < n; k++) dst[k] = rr_bf16_to_f32(w[k]);
    free(q), free(q8), free(absmax2), free(w);
}

void params_quant_dequantize(const ParamTable* pt, const Backend* be, int i, Buf out) {
    const ParamQuant* Q = &pt->quant[i];
    RR_ASSERT(pt->specs[i].quant && !Q->stage);
    be->ops->nf4_dequantize(be, out, Q->q, Q->q8, Q->absmax2, pt->quant_map8, Q->offset, pt->specs[i].numel);
}

void params_quant_free(ParamTable* pt) {
    if (!pt->quant) return;
    for (int i = 0; i < pt->n; i++) {
        ParamQuant* Q = &pt->quant[i];
        if (pt->be) {
            if (Q->q) pt->be->dev->free(Q->q);
            if (Q->q8) pt->be->dev->free(Q->q8);
            if (Q->absmax2) pt->be->dev->free(Q->absmax2);
        }
        free(Q->stage);
    }
    if (pt->be && pt->quant_map8) pt->be->dev->free(pt->quant_map8);
    free(pt->quant);
    pt->quant = NULL;
    pt->quant_map8 = NULL;
}
