/* tp_quant.c — QLoRA's NF4 base weights under tensor parallelism (docs/training.md "QLoRA", "Layouts"): bitsandbytes
 * quantises a weight whole (blocks of 64 along the flattened weight, the double quantisation's mean over all of its
 * blocks), so a TP rank's slice is quantised as a part of the whole weight's quantisation: the ranks' slices are
 * gathered into the whole weight, every rank quantises it (the same host arithmetic, so the same codes) and keeps
 * its slice's codes with the absmaxes of their blocks (engine/params_quant.c, ParamQuant.split). A slice must not
 * cut a block of 64: model_tp_quant_check refuses such a split. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"
#include "engine/util.h"
#include "runtime/model/model.h"
#include "runtime/model/tp.h"
#include "text/lm_qlora.h"

/* Every block of 64 of each rank's slice inside one block of 64 of the whole (row-major) weight: a column-parallel
 * slice (rows) starts and, unless it ends the weight, ends on a block boundary; a row-parallel one (columns) needs
 * rows of whole blocks and ranges of whole blocks. */
static int slice_blocks_whole(const TpRange* r, int n, const int64_t* shape) {
    int64_t R = shape[0], C = shape[1], B = RR_NF4_BLOCK;
    for (int k = 0; k < n; k++) {
        if (r[k].dim == 0) {
            if ((r[k].offset * C) % B || (r[k].offset + r[k].length < R && (r[k].length * C) % B)) return 0;
        } else if (C % B || r[k].offset % B || r[k].length % B) {
            return 0;
        }
    }
    return 1;
}

int model_tp_quant_check(const ModelConfig* cfg, const char* name, int ndim, const int64_t* shape, int tp, char* err,
                         size_t err_len) {
    if (tp <= 1 || !cfg->lora_quant || cfg->lora_r <= 0 || ndim != 2 || !lm_qlora_is_base(name, cfg->lora_targets))
        return 0;
    for (int t = 0; t < tp; t++) {
        TpRange r[TP_MAX_RANGES];
        char e[256];
        int n = tp_shard_ranges(name, ndim, shape, tp, t, r, e, sizeof e);
        if (n < 0 || slice_blocks_whole(r, n, shape)) continue; /* a bad split is model_tp_check's to report */
        snprintf(err, err_len, "lora.quant = nf4 with parallel.tp = %d: %s (%" PRId64 " x %" PRId64 ", %s) would "
                 "leave TP rank %d a slice that cuts one of bitsandbytes' blocks of 64 values (its values would need "
                 "two absmaxes in one block of the rank's storage); allowed: a tp whose slices of every quantised weight "
                 "are whole blocks of 64 (a row-parallel weight: columns / tp a multiple of 64), or parallel.tp = 1",
                 tp, name, shape[0], shape[1], tp_split_name(tp_split_of(name)), t);
        return -1;
    }
    return 0;
}

int stage_quant_finish(Stage* st, char* err, size_t err_len) {
    ParamTable* pt = &st->params;
    if (!pt->quant || st->tp <= 1) return 0;
    int T = st->tp;
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (!s->quant || !pt->quant[i].split) continue;
        const float* mine = params_quant_pending(pt, i);
        /* every rank of the TP group wrote the same tensors (the same init or file): all pending, or none */
        int pend[2] = {mine != NULL, mine == NULL};
        char e[512];
        if (comm_allreduce(st->tp_comm, pend, 2, COMM_I32, COMM_MAX, e, sizeof e) != 0) {
            snprintf(err, err_len, "QLoRA under tensor parallelism: %s: %s", s->name, e);
            return -1;
        }
        if (pend[0] && pend[1]) {
            snprintf(err, err_len, "QLoRA under tensor parallelism: %s: some TP ranks wrote its values and others did "
                     "not (internal)", s->name);
            return -1;
        }
        if (!mine) continue;
        size_t n = s->numel;
        float* all = mallocCheck((n ? n : 1) * (size_t)T * sizeof(float));
        if (st->tp_comm->ops->allgather(st->tp_comm, mine, all, n * sizeof(float), e, sizeof e) != 0) {
            free(all);
            snprintf(err, err_len, "QLoRA under tensor parallelism: gathering %s's slices: %s", s->name, e);
            return -1;
        }
        /* rank t's slice (its ranges concatenated along the split dimension) into the whole weight */
        const int64_t* g = s->slice.gshape;
        float* whole = mallocCheck((size_t)g[0] * (size_t)g[1] * sizeof(float));
        for (int t = 0; t < T; t++) {
            TpRange r[TP_MAX_RANGES];
            int nr = tp_shard_ranges(s->name, 2, g, T, t, r, e, sizeof e);
            RR_ASSERT(nr > 0);
            const float* x = all + (size_t)t * n;
            int64_t lc = r[0].dim == 1 ? 0 : g[1]; /* the slice's columns */
            if (r[0].dim == 1)
                for (int k = 0; k < nr; k++) lc += r[k].length;
            int64_t at = 0; /* along the split dimension, in the slice */
            for (int k = 0; k < nr; k++) {
                for (int64_t j = 0; j < r[k].length; j++) {
                    if (r[k].dim == 0) /* row r.offset + j of the whole is the slice's row at + j */
                        memcpy(whole + (size_t)(r[k].offset + j) * (size_t)g[1], x + (size_t)(at + j) * (size_t)g[1],
                               (size_t)g[1] * sizeof(float));
                    else /* column r.offset + j of the whole is the slice's column at + j */
                        for (int64_t row = 0; row < g[0]; row++)
                            whole[(size_t)row * (size_t)g[1] + (size_t)(r[k].offset + j)] =
                                x[(size_t)row * (size_t)lc + (size_t)(at + j)];
                }
                at += r[k].length;
            }
        }
        params_quant_put_whole(pt, i, whole);
        free(whole);
        free(all);
    }
    return 0;
}
