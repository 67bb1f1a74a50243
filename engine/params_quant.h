/* params_quant.h — the NF4 storage of a parameter table's frozen base weights (engine/params_quant.c); the
 * table (engine/params.h) holds it and marks its tensors (params_mark_quant). */
#ifndef RRFP_PARAMS_QUANT_H
#define RRFP_PARAMS_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/params_types.h"

/* ---- NF4 storage of frozen base weights (QLoRA; engine/params_quant.c, docs/training.md "QLoRA") ----
 * A tensor marked with params_mark_quant (frozen, whole: not a slice) holds no master and no compute copy: the
 * values written to it (initialisation, a checkpoint or init_from read) are quantised once, over the whole
 * tensor flattened row-major as bitsandbytes' quantize_4bit(blocksize 64, quant_type nf4, compress_statistics)
 * does (engine/quant.h), when its last value arrives; the table reports it back dequantised (bf16 values widened
 * to f32: params_values_to_host), and a write of exactly those values back (a load that leaves the tensor as it
 * is) keeps the quantised form. */
typedef struct ParamQuant {
    uint8_t* q;       /* backend: (numel + 1) / 2 packed NF4 codes, value 2j in the high nibble of byte j */
    uint8_t* q8;      /* backend: nb 8-bit codes of the absmaxes minus offset (dynamic map), nb = blocks of 64 */
    float* absmax2;   /* backend: nb2 second-level absmaxes, one per 256 absmaxes */
    float offset;     /* the absmaxes' mean */
    size_t nb, nb2;
    float* stage;     /* host: values written since the last quantisation (NULL: none pending) */
    size_t staged;    /* how many of them */
    int set;          /* holds a quantised form (a write of exactly its dequantised values keeps it) */
    /* A tensor-parallel slice (params_is_slice): the quantisation is the whole weight's (bitsandbytes quantises the
     * whole flattened weight). The backend holds the slice's codes (q, local order) and one f32 absmax per block of
     * 64 of its values (absmax2, nb of them; q8 NULL), restored from the whole form, which stays on the host (hq,
     * hq8, habsmax2, offset: what checkpoints write); every block of the slice lies inside one block of the whole
     * (model_tp_check refuses a split that cuts one). Values are staged until the whole weight's are given
     * (params_quant_pending, params_quant_put_whole). */
    int split;
    size_t gnumel, gnb, gnb2;
    const Backend* be; /* where q, q8, absmax2 live (ParamTable.be is NULL while a table points at host copies) */
    uint8_t *hq, *hq8;
    float* habsmax2;
} ParamQuant;
/* Tensor i's dequantised values into out, a weight in the storage be->weight_dtype gives (2-byte bf16 words, or
 * f32 words holding the bf16 values), by be's nf4_dequantize (be: the table's backend, possibly bound to a stream). */
void params_quant_dequantize(const ParamTable* pt, const Backend* be, int i, Buf out);
/* Tensor i's quantised form to / from host memory: q ((numel + 1) / 2 bytes), q8 (nb), absmax2 (nb2 floats),
 * offset, of the whole tensor (params_quant_sizes; a tensor-parallel slice's setter keeps its slice). The setter
 * replaces the stored form as it is (a checkpoint's: no quantisation). */
void params_quant_get(const ParamTable* pt, int i, uint8_t* q, uint8_t* q8, float* absmax2, float* offset);
void params_quant_set(ParamTable* pt, int i, const uint8_t* q, const uint8_t* q8, const float* absmax2, float offset);
/* The whole tensor's values, blocks of 64 and blocks of 256 absmaxes (a slice: its global tensor's). */
void params_quant_sizes(const ParamTable* pt, int i, size_t* numel, size_t* nb, size_t* nb2);
/* A tensor-parallel slice whose values were all written and not yet quantised: those values (local order), else
 * NULL. The caller gathers every rank's slice into the whole weight (row-major, the global shape) and gives it to
 * params_quant_put_whole, which quantises it (or keeps the form it holds when the values are its own) and keeps
 * the slice. */
const float* params_quant_pending(const ParamTable* pt, int i);
void params_quant_put_whole(ParamTable* pt, int i, const float* whole);
/* Internal to params.c: storage after the table's layout, a write of values [at, at + n), the host values, the
 * storage freed */
void params_quant_alloc(ParamTable* pt);
void params_quant_put(ParamTable* pt, int i, size_t at, const float* h, size_t n);
void params_quant_values(const ParamTable* pt, int i, float* dst);
void params_quant_free(ParamTable* pt);

#endif
