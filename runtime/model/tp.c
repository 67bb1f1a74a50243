/* tp.c — the tensor-parallel split of every tensor, shard initialisation and the vocabulary-parallel
 * cross-entropy (see tp.h). */
#include "runtime/model/tp.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"

static int ends_with(const char* s, const char* suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static TpSplit tp_split_base(const char* name);

/* A LoRA factor is split as its base weight's matching dimension (text/lm_lora.c): A (r, in) takes a row-parallel
 * base's column split, B (out, r) a column-parallel base's row split; the other factor is replicated. */
TpSplit tp_split_of(const char* name) {
    size_t n = strlen(name);
    int is_a = ends_with(name, ".lora_A.weight"), is_b = ends_with(name, ".lora_B.weight");
    if ((is_a || is_b) && n < 128) {
        char base[136];
        snprintf(base, sizeof base, "%.*s.weight", (int)(n - 14), name);
        TpSplit s = tp_split_base(base);
        if (is_a) return s == TP_ROW ? TP_ROW : TP_REPLICATED;
        return s == TP_COLUMN ? TP_COLUMN : TP_REPLICATED;
    }
    return tp_split_base(name);
}

static TpSplit tp_split_base(const char* name) {
    static const char* column[] = {".attn.q.weight", ".attn.k.weight", ".attn.v.weight", ".attn.q.bias",
                                   ".attn.k.bias", ".attn.v.bias", ".mlp.gate.weight",
                                   ".mlp.up.weight", ".attn.qkv.weight", ".attn.qkv.bias", ".mlp.fc1.weight",
                                   ".mlp.fc1.bias"};
    static const char* row[] = {".attn.o.weight", ".mlp.down.weight", ".attn.out.weight", ".mlp.fc2.weight"};
    if (!strcmp(name, "text.embed.weight") || !strcmp(name, "text.lm_head.weight")) return TP_VOCAB;
    if (!strcmp(name, "projector.0.weight") || !strcmp(name, "projector.0.bias")) return TP_COLUMN;
    if (!strcmp(name, "projector.2.weight")) return TP_ROW;
    for (size_t i = 0; i < sizeof column / sizeof column[0]; i++)
        if (ends_with(name, column[i])) return TP_COLUMN;
    for (size_t i = 0; i < sizeof row / sizeof row[0]; i++)
        if (ends_with(name, row[i])) return TP_ROW;
    return TP_REPLICATED;
}

const char* tp_split_name(TpSplit s) {
    switch (s) {
    case TP_REPLICATED: return "replicated";
    case TP_COLUMN: return "column";
    case TP_ROW: return "row";
    case TP_VOCAB: return "vocab";
    }
    return "?";
}

int tp_shard_ranges(const char* name, int ndim, const int64_t* shape, int T, int t, TpRange* out, char* err,
                    size_t err_len) {
    TpSplit s = T > 1 ? tp_split_of(name) : TP_REPLICATED;
    if (s == TP_ROW && ndim < 2) s = TP_REPLICATED; /* a row-parallel layer's bias: added once, after the reduce */
    if (s == TP_REPLICATED) {
        out[0] = (TpRange){0, 0, shape[0]};
        return 1;
    }
    int dim = s == TP_ROW ? 1 : 0;
    /* the fused ViT qkv: [q | k | v] along rows, each part split by heads */
    int parts = ends_with(name, ".attn.qkv.weight") || ends_with(name, ".attn.qkv.bias") ? 3 : 1;
    int64_t whole = shape[dim];
    if (whole % parts || (whole / parts) % T) {
        snprintf(err, err_len, "tensor %s: dimension %d of size %lld (%d part(s)) is not divisible by tp = %d", name, dim,
                 (long long)whole, parts, T);
        return -1;
    }
    int64_t part = whole / parts, len = part / T;
    for (int k = 0; k < parts; k++) out[k] = (TpRange){dim, k * part + t * len, len};
    return parts;
}

void tp_shard_shape(const TpRange* r, int n, int ndim, const int64_t* shape, int64_t* out) {
    for (int i = 0; i < ndim; i++) out[i] = shape[i];
    int64_t len = 0;
    for (int k = 0; k < n; k++) len += r[k].length;
    out[r[0].dim] = len;
}

void tp_init_normal_shard(float* shard, const char* name, int ndim, const int64_t* shape, const TpRange* r, int n,
                          uint64_t seed, float std) {
    int64_t off[TP_MAX_RANGES], len[TP_MAX_RANGES];
    for (int k = 0; k < n; k++) off[k] = r[k].offset, len[k] = r[k].length;
    init_normal_slice(shard, name, ndim, shape, r[0].dim, n, off, len, seed, std);
}

/* ---- vocabulary-parallel embedding ---- */

int tp_vocab_embed_forward(float* out, const int32_t* ids, const float* table, int T, int D, int Vs, int v0, int V,
                           char* err, size_t err_len) {
    for (int i = 0; i < T; i++) {
        if (ids[i] < -1 || ids[i] >= V) {
            snprintf(err, err_len, "embedding: id %d at position %d is outside [0, %d) and is not -1 (image)", ids[i], i,
                     V);
            return -1;
        }
        int r = ids[i] - v0;
        float* o = out + (size_t)i * D;
        if (ids[i] >= 0 && r >= 0 && r < Vs) memcpy(o, table + (size_t)r * D, sizeof(float) * (size_t)D);
        else memset(o, 0, sizeof(float) * (size_t)D);
    }
    return 0;
}

void tp_vocab_embed_backward(float* dtable, const int32_t* ids, const float* dout, int T, int D, int Vs, int v0) {
    for (int i = 0; i < T; i++) {
        int r = ids[i] - v0;
        if (ids[i] < 0 || r < 0 || r >= Vs) continue;
        float* g = dtable + (size_t)r * D;
        const float* d = dout + (size_t)i * D;
        for (int j = 0; j < D; j++) g[j] += d[j];
    }
}

/* ---- vocabulary-parallel cross-entropy ---- */

int tp_vocab_ce_forward(float* loss_sum, float* lse, const float* logits, const int* targets, int N, int Vs, int v0,
                        int V, TpReduceFn reduce, void* ctx, double* scratch, char* err, size_t err_len) {
    for (int n = 0; n < N; n++)
        if (targets[n] != -100 && (targets[n] < 0 || targets[n] >= V)) {
            snprintf(err, err_len, "cross-entropy: target %d of row %d is outside [0, %d) and is not the ignore index -100",
                     targets[n], n, V);
            return -1;
        }
    double* mx = scratch;         /* (N) row max over the whole vocabulary */
    double* st = scratch + N;     /* (2N) sum of exponentials, then the target logits */
    for (int n = 0; n < N; n++) {
        const float* z = logits + (size_t)n * Vs;
        float m = -INFINITY;
        for (int v = 0; v < Vs; v++) m = z[v] > m ? z[v] : m;
        mx[n] = m;
    }
    if (reduce(ctx, mx, (size_t)N, 1, err, err_len) != 0) return -1;
    for (int n = 0; n < N; n++) {
        const float* z = logits + (size_t)n * Vs;
        float m = (float)mx[n];
        double sum = 0.0;
        for (int v = 0; v < Vs; v++) sum += exp((double)(z[v] - m));
        st[n] = sum;
        int tl = targets[n] - v0; /* the target logit lives on one rank; the others add 0 */
        st[N + n] = targets[n] != -100 && tl >= 0 && tl < Vs ? (double)z[tl] : 0.0;
    }
    if (reduce(ctx, st, 2 * (size_t)N, 0, err, err_len) != 0) return -1;
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        lse[n] = (float)(mx[n] + log(st[n]));
        if (targets[n] != -100) total += (double)lse[n] - st[N + n];
    }
    *loss_sum = (float)total;
    return 0;
}

void tp_vocab_ce_backward(float* dlogits, const float* logits, const float* lse, const int* targets, float scale,
                          int N, int Vs, int v0) {
    for (int n = 0; n < N; n++) {
        int t = targets[n];
        if (t == -100) continue;
        const float* z = logits + (size_t)n * Vs;
        float* dz = dlogits + (size_t)n * Vs;
        for (int v = 0; v < Vs; v++) dz[v] += scale * expf(z[v] - lse[n]);
        if (t - v0 >= 0 && t - v0 < Vs) dz[t - v0] -= scale;
    }
}
