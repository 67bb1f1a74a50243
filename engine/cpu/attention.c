/* attention.c — attention over packed variable-length sequences (cu_seqlens), FlashAttention-2 style.
 *
 * Sequence s owns the token rows [cu_seqlens[s], cu_seqlens[s+1]); its tokens attend only to keys of
 * the same sequence (all of them, or j <= i when causal). Per (sequence, head) this is
 *   S = scale * Q K^T,  P = softmax_rows(S),  O = P V,  lse_i = log sum_j exp(S_ij),  scale = 1/sqrt(d).
 *
 * Forward: one work item is a tile of ATTN_BLOCK query rows of one head. It walks the key tiles of
 * its sequence with an online softmax (running row max m and row sum l; when m grows, what was
 * accumulated so far is rescaled by exp(m_old - m_new)), so only an ATTN_BLOCK x ATTN_BLOCK tile of
 * scores exists at a time. It saves lse = m + log(l) for the backward.
 *
 * Backward: with P_ij = exp(S_ij - lse_i) recomputed tile by tile from q, k and lse,
 *   dV = P^T dO,  dP = dO V^T,  dS_ij = P_ij (dP_ij - D_i),  D_i = sum_c dO_ic O_ic (= sum_j P_ij dP_ij),
 *   dQ = scale dS K,  dK = scale dS^T Q.
 * Work is split so that every row of dq, dk and dv has one writer (see cpu_attention_backward), so
 * every tile product adds straight into the caller's gradients with no race and no T x T or T x d
 * scratch.
 *
 * Tile products go through cpu_sgemm (BLIS), which handles the ld_qkv row stride of the fused qkv
 * buffer directly. Plain vectorised loops (axpy form) were measured 1.2-2x slower than BLIS for
 * tiles of 16 to 64 rows and faster only for sequences of a few tokens, so there are none. The
 * softmax loops are plain C with a polynomial exp the compiler vectorises (tests/engine/cpu/cpu.cmake
 * builds this file with -O3 for that). Scratch: two ATTN_BLOCK x ATTN_BLOCK tiles and two
 * d x ATTN_BLOCK tiles per thread, allocated once per call and thread, whatever T is (plus S*H
 * work-item records in the backward). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/fastmath.h"
#include "engine/engine.h"

/* Query rows and key rows per tile. 128 measured 5-15% faster than 64 here (fewer, larger BLIS
 * calls); the backward's working set, two 64 KiB score tiles plus q/k/v/dO tiles of 128 x d, still
 * fits a 1 MiB L2 for d <= 128. */
#define ATTN_BLOCK 128

/* e^x for x <= 0 (softmax arguments after the row max is subtracted), with the relative accuracy of
 * expf (~2 ulp): x = n ln2 + r, |r| <= ln2/2, e^r by the Cephes minimax polynomial, 2^n by building the
 * float's exponent field. Written without calls or branches so that loops over it vectorise
 * (glibc's expf is scalar here). Below -87 the result would be subnormal: it returns 0 there. */
static inline float attn_exp(float x) {
    float xc = x < -87.0f ? -87.0f : x;
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x / ln2), 1.5*2^23 trick */
    float r = xc - n * 0.693359375f - n * -2.12194440e-4f;              /* ln2 split in two for accuracy */
    float p = cpu_exp_cephes_p(r) * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n); /* a register move; a union would stop vectorisation */
    return x < -87.0f ? 0.0f : p * two_n;
}

/* The build targets baseline x86-64 (SSE2); the tile functions are also compiled for AVX2+FMA and
 * AVX-512 and the best one the CPU has is picked at load time (GCC function multi-versioning). */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define ATTN_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ATTN_VECTOR_CLONES
#endif

static void attention_check_args(const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv) {
    RR_ASSERT(S >= 0 && T >= 0 && H > 0 && Hkv > 0 && H % Hkv == 0 && d > 0 && ld_q >= H * d && ld_kv >= Hkv * d);
    RR_ASSERT(cu_seqlens[0] == 0 && cu_seqlens[S] == T);
    for (int s = 0; s < S; s++) RR_ASSERT(cu_seqlens[s] <= cu_seqlens[s + 1]);
}

/* xt (d, ATTN_BLOCK) = the transpose of rows x[0 .. n) (n <= ATTN_BLOCK, d columns, stride ld).
 * BLIS runs Q K^T as Q times a copied-out K^T 10-30% faster than as a transposed operand (measured
 * with bench/attention.sh), and the copy is d*n moves against 2*d*n*ATTN_BLOCK flops. */
static void attention_tile_transpose(float* xt, const float* x, int n, int d, int ld) {
    for (int j = 0; j < n; j++)
        for (int c = 0; c < d; c++) xt[(size_t)c * ATTN_BLOCK + j] = x[(size_t)j * ld + c];
}

/* ------------------------------------------------------------------------------------------------
 * Forward */

/* One query tile: rows [q0, q0 + nq) of head h (q, out, lse offset to the head, k, v to its key/value
 * head; q rows of stride ldq, k and v rows of stride ld), keys [k_begin, k_end) of its sequence.
 * Scratch: s_tile (ATTN_BLOCK, ATTN_BLOCK), m and l ATTN_BLOCK, kt (d, ATTN_BLOCK). */
ATTN_VECTOR_CLONES static void attention_forward_tile(float* out, float* lse, const float* q, const float* k,
                                                      const float* v, int q0, int nq, int k_begin, int k_end, int H,
                                                      int d, int ldq, int ld, int causal, float* s_tile, float* m,
                                                      float* l, float* kt) {
    const int ldo = H * d;
    const float scale = 1.0f / sqrtf((float)d);
    float* o = out + (size_t)q0 * ldo;
    for (int r = 0; r < nq; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        memset(o + (size_t)r * ldo, 0, d * sizeof(float));
    }
    /* causal: the last row of the tile sees keys up to q0 + nq - 1, nothing after */
    int k_stop = causal ? q0 + nq : k_end;
    for (int k0 = k_begin; k0 < k_stop; k0 += ATTN_BLOCK) {
        int nk = k_stop - k0 < ATTN_BLOCK ? k_stop - k0 : ATTN_BLOCK;
        /* S = scale * Q K^T: (nq, nk) */
        attention_tile_transpose(kt, k + (size_t)k0 * ld, nk, d, ld);
        cpu_sgemm(0, 0, nq, nk, d, scale, q + (size_t)q0 * ldq, ldq, kt, ATTN_BLOCK, 0.0f, s_tile, ATTN_BLOCK);
        for (int r = 0; r < nq; r++) {
            float* srow = s_tile + (size_t)r * ATTN_BLOCK;
            int n_vis = nk; /* keys k0 .. k0 + n_vis - 1 are visible to this row */
            if (causal) n_vis = q0 + r - k0 + 1 < nk ? q0 + r - k0 + 1 : nk;
            if (n_vis <= 0) { /* every key of this tile is in this row's future */
                memset(srow, 0, nk * sizeof(float));
                continue;
            }
            float mx = srow[0];
#pragma omp simd reduction(max : mx)
            for (int j = 1; j < n_vis; j++) mx = srow[j] > mx ? srow[j] : mx;
            float m_new = mx > m[r] ? mx : m[r];
            float alpha = expf(m[r] - m_new); /* 0 on the first tile (m = -inf) */
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < n_vis; j++) {
                float p = attn_exp(srow[j] - m_new);
                srow[j] = p;
                sum += p;
            }
            for (int j = n_vis; j < nk; j++) srow[j] = 0.0f;
            l[r] = l[r] * alpha + sum;
            m[r] = m_new;
            if (alpha != 1.0f) {
                float* orow = o + (size_t)r * ldo;
                for (int c = 0; c < d; c++) orow[c] *= alpha;
            }
        }
        /* O += P V: (nq, d) */
        cpu_sgemm(0, 0, nq, d, nk, 1.0f, s_tile, ATTN_BLOCK, v + (size_t)k0 * ld, ld, 1.0f, o, ldo);
    }
    for (int r = 0; r < nq; r++) {
        float inv = 1.0f / l[r];
        float* orow = o + (size_t)r * ldo;
        for (int c = 0; c < d; c++) orow[c] *= inv;
        lse[(size_t)(q0 + r) * H] = m[r] + logf(l[r]);
    }
}

void cpu_attention_forward(const Backend* be, float* out, float* lse, const float* q, const float* k, const float* v,
                           const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal) {
    attention_check_args(cu_seqlens, S, T, H, Hkv, d, ld_q, ld_kv);
    const int G = H / Hkv; /* query heads per key/value head */
#pragma omp parallel if ((size_t)T * H * d > 4096)
    {
        float* s_tile = mallocCheck((size_t)ATTN_BLOCK * (ATTN_BLOCK + 2 + d) * sizeof(float));
        float* kt = s_tile + ATTN_BLOCK * (ATTN_BLOCK + 2);
        float* m = s_tile + ATTN_BLOCK * ATTN_BLOCK;
        float* l = m + ATTN_BLOCK;
        for (int s = 0; s < S; s++) {
            int start = cu_seqlens[s], end = cu_seqlens[s + 1];
            int n_tiles = (end - start + ATTN_BLOCK - 1) / ATTN_BLOCK;
            /* nowait: a thread done with its share of this sequence starts on the next one. Causal
             * tiles near the end of a sequence cost the most: hand them out first. */
#pragma omp for collapse(2) schedule(dynamic, 1) nowait
            for (int h = 0; h < H; h++) {
                for (int b = n_tiles - 1; b >= 0; b--) {
                    int q0 = start + b * ATTN_BLOCK;
                    int nq = end - q0 < ATTN_BLOCK ? end - q0 : ATTN_BLOCK;
                    size_t gd = (size_t)(h / G) * d;
                    attention_forward_tile(out + (size_t)h * d, lse + h, q + (size_t)h * d, k + gd, v + gd, q0, nq,
                                           start, end, H, d, ld_q, ld_kv, causal, s_tile, m, l, kt);
                }
            }
        }
        free(s_tile);
    }
}

/* ------------------------------------------------------------------------------------------------
 * Backward */

/* Per-thread scratch of the backward. */
typedef struct {
    float* p;    /* (ATTN_BLOCK, ATTN_BLOCK): P of the tile pair */
    float* ds;   /* (ATTN_BLOCK, ATTN_BLOCK): dP, then dS in place */
    float* dsum; /* ATTN_BLOCK: D_i of the query rows */
    float* kt;   /* (d, ATTN_BLOCK): K^T of the key tile */
    float* vt;   /* (d, ATTN_BLOCK): V^T of the key tile */
} AttnBwdScratch;

/* One (query tile, key tile) pair of one head (q, dq, dout, out, lse offset to the query head, stride
 * ldq; k, dk, dv to its key/value head, stride ld): adds its share into dq rows [q0, q0 + nq) and dk,
 * dv rows [k0, k0 + nk); a NULL gradient is skipped. sc->kt and sc->vt must hold this key tile's K^T
 * and V^T. */
ATTN_VECTOR_CLONES static void attention_backward_pair(float* dq, float* dk, float* dv, const float* dout,
                                                       const float* out, const float* lse, const float* q,
                                                       const float* k, int q0, int nq, int k0, int nk, int H,
                                                       int d, int ldq, int ld, int causal, const AttnBwdScratch* sc) {
    const int ldo = H * d;
    const float scale = 1.0f / sqrtf((float)d);
    const float* dout_t = dout + (size_t)q0 * ldo;
    /* P = exp(scale * Q K^T - lse): (nq, nk), zero where masked */
    cpu_sgemm(0, 0, nq, nk, d, scale, q + (size_t)q0 * ldq, ldq, sc->kt, ATTN_BLOCK, 0.0f, sc->p, ATTN_BLOCK);
    for (int r = 0; r < nq; r++) {
        float* prow = sc->p + (size_t)r * ATTN_BLOCK;
        float lse_r = lse[(size_t)(q0 + r) * H];
        int n_vis = nk;
        if (causal) n_vis = q0 + r - k0 + 1 < nk ? (q0 + r - k0 + 1 > 0 ? q0 + r - k0 + 1 : 0) : nk;
#pragma omp simd
        for (int j = 0; j < n_vis; j++) prow[j] = attn_exp(prow[j] - lse_r);
        for (int j = n_vis; j < nk; j++) prow[j] = 0.0f;
    }
    /* dV += P^T dO: (nk, d) */
    if (dv) cpu_sgemm(1, 0, nk, d, nq, 1.0f, sc->p, ATTN_BLOCK, dout_t, ldo, 1.0f, dv + (size_t)k0 * ld, ld);
    if (!dq && !dk) return;
    /* dP = dO V^T: (nq, nk); dS = P (dP - D), in place */
    cpu_sgemm(0, 0, nq, nk, d, 1.0f, dout_t, ldo, sc->vt, ATTN_BLOCK, 0.0f, sc->ds, ATTN_BLOCK);
    for (int r = 0; r < nq; r++) {
        const float* orow = out + (size_t)(q0 + r) * ldo;
        const float* drow = dout_t + (size_t)r * ldo;
        float D = 0.0f;
#pragma omp simd reduction(+ : D)
        for (int c = 0; c < d; c++) D += drow[c] * orow[c];
        sc->dsum[r] = D;
    }
    for (int r = 0; r < nq; r++) {
        const float* prow = sc->p + (size_t)r * ATTN_BLOCK;
        float* dsrow = sc->ds + (size_t)r * ATTN_BLOCK;
        float D = sc->dsum[r];
#pragma omp simd
        for (int j = 0; j < nk; j++) dsrow[j] = prow[j] * (dsrow[j] - D);
    }
    /* dQ += scale dS K: (nq, d);  dK += scale dS^T Q: (nk, d) */
    if (dq)
        cpu_sgemm(0, 0, nq, d, nk, scale, sc->ds, ATTN_BLOCK, k + (size_t)k0 * ld, ld, 1.0f, dq + (size_t)q0 * ldq, ldq);
    if (dk)
        cpu_sgemm(1, 0, nk, d, nq, scale, sc->ds, ATTN_BLOCK, q + (size_t)q0 * ldq, ldq, 1.0f, dk + (size_t)k0 * ld, ld);
}

/* Every pair of key tile kb (rows k0 = start + kb * ATTN_BLOCK ..) with the query tiles that see it,
 * for rows [start, end) of one key/value head and the G query heads of its group (q, dq, dout, out,
 * lse offset to the group's first query head): the complete dk and dv of that key tile, and its
 * share of dq. */
static void attention_backward_key_tile(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                        const float* lse, const float* q, const float* k, const float* v, int start,
                                        int end, int kb, int H, int G, int d, int ldq, int ld, int causal,
                                        const AttnBwdScratch* sc) {
    int k0 = start + kb * ATTN_BLOCK, nk = end - k0 < ATTN_BLOCK ? end - k0 : ATTN_BLOCK;
    attention_tile_transpose(sc->kt, k + (size_t)k0 * ld, nk, d, ld);
    attention_tile_transpose(sc->vt, v + (size_t)k0 * ld, nk, d, ld);
    for (int i = 0; i < G; i++) {
        size_t hd = (size_t)i * d;
        /* causal: queries before k0 see none of these keys */
        for (int q0 = causal ? k0 : start; q0 < end; q0 += ATTN_BLOCK) {
            int nq = end - q0 < ATTN_BLOCK ? end - q0 : ATTN_BLOCK;
            attention_backward_pair(dq ? dq + hd : NULL, dk, dv, dout + hd, out + hd, lse + i, q + hd, k, q0, nq, k0,
                                    nk, H, d, ldq, ld, causal, sc);
        }
    }
}

/* The complete dq of query tile qb of rows [start, end) of one head (its pairs with every key tile
 * it sees). */
static void attention_backward_query_tile(float* dq, const float* dout, const float* out, const float* lse,
                                          const float* q, const float* k, const float* v, int start, int end, int qb,
                                          int H, int d, int ldq, int ld, int causal, const AttnBwdScratch* sc) {
    int q0 = start + qb * ATTN_BLOCK, nq = end - q0 < ATTN_BLOCK ? end - q0 : ATTN_BLOCK;
    int k_stop = causal ? q0 + nq : end;
    for (int k0 = start; k0 < k_stop; k0 += ATTN_BLOCK) {
        int nk = k_stop - k0 < ATTN_BLOCK ? k_stop - k0 : ATTN_BLOCK;
        attention_tile_transpose(sc->kt, k + (size_t)k0 * ld, nk, d, ld);
        attention_tile_transpose(sc->vt, v + (size_t)k0 * ld, nk, d, ld);
        attention_backward_pair(dq, NULL, NULL, dout, out, lse, q, k, q0, nq, k0, nk, H, d, ldq, ld, causal, sc);
    }
}

typedef struct {
    int s, h;
    double cost;
} AttnItem;

static int attn_item_cmp_desc(const void* a, const void* b) {
    double x = ((const AttnItem*)a)->cost, y = ((const AttnItem*)b)->cost;
    return (x < y) - (x > y);
}

/* Work split. Normally one item is a whole (sequence, key/value head) with the query heads of its group
 * (grouped-query attention: a key/value head's gradient sums over them): its thread is the only writer
 * of those rows and columns of dq, dk and dv, so the tile products add straight into the caller's buffers.
 * Items go out largest first (cost ~ len^2), which keeps ragged packings balanced. When one item is
 * too big for that (a single long sample with few heads), the work is split finer in two passes
 * that again each have one writer per row: dk and dv per (sequence, head, key tile), then dq per
 * (sequence, head, query tile). That recomputes P and dP once more (7 tile products per pair
 * instead of 5), so it is chosen only when the largest item alone exceeds 1.4x an even share. */
void cpu_attention_backward(const Backend* be, float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                            const float* q, const float* k, const float* v, const int* cu_seqlens, int S, int T,
                            int H, int Hkv, int d, int ld_q, int ld_kv, int causal) {
    attention_check_args(cu_seqlens, S, T, H, Hkv, d, ld_q, ld_kv);
    if ((!dq && !dk && !dv) || T == 0) return;
    const int G = H / Hkv;
    int n_items = S * Hkv, n_threads = omp_get_max_threads();
    AttnItem* items = mallocCheck((size_t)n_items * sizeof(AttnItem));
    double total = 0.0;
    for (int s = 0; s < S; s++)
        for (int g = 0; g < Hkv; g++) {
            double len = cu_seqlens[s + 1] - cu_seqlens[s];
            items[s * Hkv + g] = (AttnItem){s, g, G * len * len};
            total += G * len * len;
        }
    qsort(items, n_items, sizeof(AttnItem), attn_item_cmp_desc);
    int two_pass = n_threads > 1 && items[0].cost * n_threads > 1.4 * total;
#pragma omp parallel if ((size_t)T * H * d > 4096)
    {
        AttnBwdScratch sc;
        sc.p = mallocCheck((size_t)ATTN_BLOCK * (2 * ATTN_BLOCK + 1 + 2 * d) * sizeof(float));
        sc.ds = sc.p + ATTN_BLOCK * ATTN_BLOCK;
        sc.dsum = sc.ds + ATTN_BLOCK * ATTN_BLOCK;
        sc.kt = sc.dsum + ATTN_BLOCK;
        sc.vt = sc.kt + (size_t)d * ATTN_BLOCK;
        if (!two_pass) {
#pragma omp for schedule(dynamic, 1)
            for (int i = 0; i < n_items; i++) {
                int s = items[i].s, g = items[i].h, start = cu_seqlens[s], end = cu_seqlens[s + 1];
                size_t hd = (size_t)g * G * d, gd = (size_t)g * d; /* the group's first query head, its kv head */
                for (int kb = 0; kb * ATTN_BLOCK < end - start; kb++)
                    attention_backward_key_tile(dq ? dq + hd : NULL, dk ? dk + gd : NULL, dv ? dv + gd : NULL,
                                                dout + hd, out + hd, lse + (size_t)g * G, q + hd, k + gd, v + gd, start,
                                                end, kb, H, G, d, ld_q, ld_kv, causal, &sc);
            }
        } else {
            /* the same nowait-per-sequence pattern as the forward; a barrier between the passes is
             * not needed (they write different buffers), nor taken */
            for (int s = 0; s < S; s++) {
                int start = cu_seqlens[s], end = cu_seqlens[s + 1];
                int n_tiles = (end - start + ATTN_BLOCK - 1) / ATTN_BLOCK;
                if (dk || dv) {
#pragma omp for collapse(2) schedule(dynamic, 1) nowait
                    for (int g = 0; g < Hkv; g++)
                        for (int kb = 0; kb < n_tiles; kb++) { /* causal: the first key tiles cost the most */
                            size_t hd = (size_t)g * G * d, gd = (size_t)g * d;
                            attention_backward_key_tile(NULL, dk ? dk + gd : NULL, dv ? dv + gd : NULL, dout + hd,
                                                        out + hd, lse + (size_t)g * G, q + hd, k + gd, v + gd, start,
                                                        end, kb, H, G, d, ld_q, ld_kv, causal, &sc);
                        }
                }
                if (dq) {
#pragma omp for collapse(2) schedule(dynamic, 1) nowait
                    for (int h = 0; h < H; h++)
                        for (int qb = n_tiles - 1; qb >= 0; qb--) { /* causal: the last query tiles cost the most */
                            size_t hd = (size_t)h * d, gd = (size_t)(h / G) * d;
                            attention_backward_query_tile(dq + hd, dout + hd, out + hd, lse + h, q + hd, k + gd,
                                                          v + gd, start, end, qb, H, d, ld_q, ld_kv, causal, &sc);
                        }
                }
            }
        }
        free(sc.p);
    }
    free(items);
}
