/* params_quant.c — frozen base weights stored as bitsandbytes stores a QLoRA base (engine/params_quant.h,
 * docs/training.md "QLoRA"): NF4 codes packed two a byte in blocks of 64 values, each block's absmax quantised
 * again (8-bit codes of the signed dynamic map in blocks of 256 around the absmaxes' mean), all on the backend.
 * The quantisation is engine/quant.c's (bitsandbytes' quantize_4bit with compress_statistics), over the whole
 * tensor flattened, from the values as written (f32); the ops read the tensor through the backend's
 * nf4_dequantize into a weight of the compute dtype. */
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/kernel_math.h"
#include "engine/cuda/nf4_math.h"
#include "engine/params_quant.h"
#include "engine/quant.h"
#include "engine/util.h"

/* ---- a tensor-parallel slice (ParamQuant.split) ---- */

/* The global flat index of value k (local row-major) of a 2-D slice: its row and column through the slice's ranges
 * along its dimension */
static size_t slice_global(const ParamSpec* s, size_t k) {
    size_t C = (size_t)s->shape[1], GC = (size_t)s->slice.gshape[1];
    size_t r = k / C, c = k % C, *x = s->slice.dim == 0 ? &r : &c;
    for (int j = 0; j < s->slice.n; j++) {
        if (*x < (size_t)s->slice.len[j]) {
            *x += (size_t)s->slice.off[j];
            break;
        }
        *x -= (size_t)s->slice.len[j];
    }
    return r * GC + c;
}

/* The slice's codes and its blocks' restored absmaxes from the whole form on the host, to the backend */
static void split_upload(ParamTable* pt, int i) {
    const ParamSpec* s = &pt->specs[i];
    ParamQuant* Q = &pt->quant[i];
    const Backend* be = Q->be;
    size_t n = s->numel;
    uint8_t* q = callocCheck((n + 1) / 2 + 1, 1);
    float* a = mallocCheck((Q->nb ? Q->nb : 1) * sizeof(float));
    for (size_t k = 0; k < n; k++) {
        size_t g = slice_global(s, k);
        unsigned c = g % 2 ? Q->hq[g / 2] & 15u : (unsigned)Q->hq[g / 2] >> 4;
        q[k / 2] |= (uint8_t)(k % 2 ? c : c << 4);
        if (k % RR_NF4_BLOCK == 0) a[k / RR_NF4_BLOCK] = rr_nf4_absmax_at(Q->hq8, Q->habsmax2, rr_dynamic_map8, Q->offset,
                                                                          g / RR_NF4_BLOCK);
        else RR_ASSERT(g / RR_NF4_BLOCK == slice_global(s, k - k % RR_NF4_BLOCK) / RR_NF4_BLOCK &&
                       "a tensor-parallel slice cuts a block of 64 (model_tp_check refuses the split)");
    }
    be->dev->copy_h2d(be, Q->q, q, (n + 1) / 2);
    be->dev->copy_h2d(be, Q->absmax2, a, Q->nb * sizeof(float));
    be->dev->synchronize(be);
    free(q), free(a);
}

void params_quant_sizes(const ParamTable* pt, int i, size_t* numel, size_t* nb, size_t* nb2) {
    const ParamQuant* Q = &pt->quant[i];
    *numel = Q->split ? Q->gnumel : pt->specs[i].numel;
    *nb = Q->split ? Q->gnb : Q->nb;
    *nb2 = Q->split ? Q->gnb2 : Q->nb2;
}

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
        Q->be = be;
        if (params_is_slice(s)) { /* the slice's codes and its blocks' absmaxes; the whole form on the host */
            RR_ASSERT(s->ndim == 2);
            Q->split = 1;
            Q->gnumel = (size_t)s->slice.gshape[0] * (size_t)s->slice.gshape[1];
            Q->gnb = rr_quant_blocks(Q->gnumel, RR_NF4_BLOCK);
            Q->gnb2 = rr_quant_blocks(Q->gnb, RR_DQ_BLOCK);
            Q->nb = Q->nb2 = rr_quant_blocks(s->numel, RR_NF4_BLOCK);
            Q->q = be_alloc_as(be, MEM_WEIGHTS, (s->numel + 1) / 2);
            Q->absmax2 = be_alloc_as(be, MEM_WEIGHTS, (Q->nb ? Q->nb : 1) * sizeof(float));
            Q->hq = mallocCheck((Q->gnumel + 1) / 2 + 1);
            Q->hq8 = mallocCheck(Q->gnb + 1);
            Q->habsmax2 = mallocCheck((Q->gnb2 + 1) * sizeof(float));
            continue;
        }
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
    ParamQuant* Q = &pt->quant[i];
    const Backend* be = Q->be;
    if (Q->split) { /* the whole form kept on the host, the slice's part to the backend; values staged are replaced */
        memcpy(Q->hq, q, (Q->gnumel + 1) / 2);
        memcpy(Q->hq8, q8, Q->gnb);
        memcpy(Q->habsmax2, absmax2, Q->gnb2 * sizeof(float));
        Q->offset = offset;
        split_upload(pt, i);
        free(Q->stage);
        Q->stage = NULL;
        Q->staged = 0;
        Q->set = 1;
        pt->quant_gen++;
        return;
    }
    be->dev->copy_h2d(be, Q->q, q, (pt->specs[i].numel + 1) / 2);
    be->dev->copy_h2d(be, Q->q8, q8, Q->nb);
    be->dev->copy_h2d(be, Q->absmax2, absmax2, Q->nb2 * sizeof(float));
    be->dev->synchronize(be); /* the host buffers may go once this returns */
    Q->offset = offset;
    Q->set = 1;
    pt->quant_gen++;
}

void params_quant_get(const ParamTable* pt, int i, uint8_t* q, uint8_t* q8, float* absmax2, float* offset) {
    const ParamQuant* Q = &pt->quant[i];
    const Backend* be = Q->be;
    RR_ASSERT(!Q->stage && "a quantised tensor read before its last value was written");
    if (Q->split) {
        RR_ASSERT(Q->set);
        memcpy(q, Q->hq, (Q->gnumel + 1) / 2);
        memcpy(q8, Q->hq8, Q->gnb);
        memcpy(absmax2, Q->habsmax2, Q->gnb2 * sizeof(float));
        *offset = Q->offset;
        return;
    }
    be->dev->copy_d2h(be, q, Q->q, (pt->specs[i].numel + 1) / 2);
    be->dev->copy_d2h(be, q8, Q->q8, Q->nb);
    be->dev->copy_d2h(be, absmax2, Q->absmax2, Q->nb2 * sizeof(float));
    *offset = Q->offset;
}

static void quant_whole_values(const ParamTable* pt, int i, float* dst);

/* bitsandbytes' quantize_4bit(x, blocksize = 64, quant_type = "nf4", compress_statistics = True) of the staged
 * values (a slice: of the whole weight's, given) */
static void quant_staged(ParamTable* pt, int i, const float* whole) {
    ParamQuant* Q = &pt->quant[i];
    size_t n, nb, nb2;
    params_quant_sizes(pt, i, &n, &nb, &nb2);
    const float* x = whole ? whole : Q->stage;
    if (Q->set) { /* the values it holds already (written back unchanged): its quantised form stays */
        float* cur = mallocCheck((n ? n : 1) * sizeof(float));
        float* stage = Q->stage;
        Q->stage = NULL;
        quant_whole_values(pt, i, cur);
        Q->stage = stage;
        int same = !memcmp(cur, x, n * sizeof(float));
        free(cur);
        if (same) {
            free(Q->stage);
            Q->stage = NULL;
            Q->staged = 0;
            return;
        }
    }
    uint8_t* q = mallocCheck((n + 1) / 2);
    float* absmax = mallocCheck(nb * sizeof(float));
    uint8_t* q8 = mallocCheck(nb);
    float* absmax2 = mallocCheck(nb2 * sizeof(float));
    float offset;
    rr_nf4_quantize(x, n, RR_NF4_BLOCK, q, absmax);
    rr_nf4_absmax_compress(absmax, nb, q8, absmax2, &offset);
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
    if (Q->staged >= numel && !Q->split) quant_staged(pt, i, NULL); /* a slice: the whole weight's, later */
}

const float* params_quant_pending(const ParamTable* pt, int i) {
    const ParamQuant* Q = &pt->quant[i];
    return Q->split && Q->stage && Q->staged >= pt->specs[i].numel ? Q->stage : NULL;
}

void params_quant_put_whole(ParamTable* pt, int i, const float* whole) {
    RR_ASSERT(params_quant_pending(pt, i));
    quant_staged(pt, i, whole);
}

/* The whole tensor's dequantised values (a slice: its global tensor's, from the host form) */
static void quant_whole_values(const ParamTable* pt, int i, float* dst) {
    const ParamQuant* Q = &pt->quant[i];
    size_t n, nb, nb2;
    params_quant_sizes(pt, i, &n, &nb, &nb2);
    uint8_t* q = mallocCheck((n + 1) / 2);
    uint8_t* q8 = mallocCheck(nb);
    float* absmax2 = mallocCheck(nb2 * sizeof(float));
    uint16_t* w = mallocCheck((n ? n : 1) * sizeof(uint16_t));
    float offset;
    params_quant_get(pt, i, q, q8, absmax2, &offset);
    rr_nf4_dq_dequantize_bf16(q, q8, absmax2, offset, n, w);
    for (size_t k = 0; k < n; k++) dst[k] = rr_bf16_to_f32(w[k]);
    free(q), free(q8), free(absmax2), free(w);
    (void)Q;
}

void params_quant_values(const ParamTable* pt, int i, float* dst) {
    const ParamQuant* Q = &pt->quant[i];
    if (!Q->split) {
        quant_whole_values(pt, i, dst);
        return;
    }
    if (params_quant_pending(pt, i)) { /* values written and not yet quantised (the whole weight's, later) */
        memcpy(dst, Q->stage, pt->specs[i].numel * sizeof(float));
        return;
    }
    /* a slice: its values of the whole weight's dequantisation (the same words the backend's restore gives) */
    float* w = mallocCheck((Q->gnumel ? Q->gnumel : 1) * sizeof(float));
    quant_whole_values(pt, i, w);
    const ParamSpec* s = &pt->specs[i];
    for (size_t k = 0; k < s->numel; k++) dst[k] = w[slice_global(s, k)];
    free(w);
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
        if (Q->be) {
            if (Q->q) Q->be->dev->free(Q->q);
            if (Q->q8) Q->be->dev->free(Q->q8);
            if (Q->absmax2) Q->be->dev->free(Q->absmax2);
        }
        free(Q->stage);
        free(Q->hq), free(Q->hq8), free(Q->habsmax2);
    }
    if (pt->be && pt->quant_map8) pt->be->dev->free(pt->quant_map8);
    free(pt->quant);
    pt->quant = NULL;
    pt->quant_map8 = NULL;
}
