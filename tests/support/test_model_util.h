/* test_model_util.h — microbatches for model tests, built straight from a compact spec (no loader).
 *
 * A spec lists samples separated by '|'; each sample is a sequence of segments:
 *   pN    N prompt tokens (not supervised)       aN    N assistant tokens (supervised)
 *   iHxW  an image of H x W patches (its LM positions hold id -1, patches row-major)
 * e.g. "p2 i2x3 p3 a5 | p1 a4". Targets follow docs/model.md "Sequence assembly and the loss": position t's target is the
 * token at t+1 of the same sample when that token is an assistant token, else -100. Token ids and
 * pixels are random from a splitmix64 stream. */
#ifndef RRFP_TEST_MODEL_UTIL_H
#define RRFP_TEST_MODEL_UTIL_H

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/anyres.h"
#include "data/microbatch.h"
#include "engine/util.h"

static inline uint64_t tm_rand(uint64_t* s) {
    return rr_splitmix64(s);
}
static inline float tm_uniform(uint64_t* s) { return (float)((tm_rand(s) >> 40) / 16777216.0); } /* [0, 1) */

/* Walk the spec; with mb == NULL only count. kind per position: 0 prompt, 1 assistant, 2 image. */
static void tm_walk(const char* spec, Microbatch* mb, int* kind, int* T, int* S, int* I, int* Np) {
    int t = 0, s = 0, i = 0, np = 0;
    const char* p = spec;
    int in_sample = 0;
    while (*p) {
        if (isspace((unsigned char)*p)) {
            p++;
            continue;
        }
        if (*p == '|') {
            if (!in_sample) rr_die("test spec '%s': empty sample", spec);
            in_sample = 0;
            p++;
            continue;
        }
        if (!in_sample) {
            if (mb) mb->cu_seqlens[s] = t;
            s++;
            in_sample = 1;
        }
        char c = *p++;
        char* end;
        long a = strtol(p, &end, 10);
        if (end == p || a < 1) rr_die("test spec '%s': bad count after '%c'", spec, c);
        p = end;
        if (c == 'p' || c == 'a') {
            for (long k = 0; k < a; k++, t++)
                if (kind) kind[t] = c == 'a';
        } else if (c == 'i') {
            if (*p != 'x') rr_die("test spec '%s': image needs HxW", spec);
            long b = strtol(p + 1, &end, 10);
            if (end == p + 1 || b < 1) rr_die("test spec '%s': bad image width", spec);
            p = end;
            if (mb) {
                mb->grid_h[i] = (int32_t)a;
                mb->grid_w[i] = (int32_t)b;
                mb->img_lm_start[i] = t;
                mb->img_cu_patches[i] = np;
                for (int k = 0; k < a * b; k++) {
                    mb->patch_row[np + k] = (int32_t)(k / b);
                    mb->patch_col[np + k] = (int32_t)(k % b);
                }
            }
            for (long k = 0; k < a * b; k++, t++)
                if (kind) kind[t] = 2;
            np += (int)(a * b);
            i++;
        } else {
            rr_die("test spec '%s': unknown segment '%c'", spec, c);
        }
    }
    if (mb) {
        mb->cu_seqlens[s] = t;
        mb->img_cu_patches[i] = np;
    }
    *T = t;
    *S = s;
    *I = i;
    *Np = np;
}

/* Build a microbatch from spec with ids in [0, V) and pixels in [-1, 1). */
static void tm_microbatch(Microbatch* mb, const char* spec, int V, int patch, uint64_t* rng) {
    int T, S, I, Np;
    tm_walk(spec, NULL, NULL, &T, &S, &I, &Np);
    memset(mb, 0, sizeof *mb);
    mb->T = T;
    mb->S = S;
    mb->I = I;
    mb->Np = Np;
    mb->patch = patch;
    mb->cu_seqlens = callocCheck(S + 1, sizeof(int32_t));
    mb->ids = callocCheck(T, sizeof(int32_t));
    mb->targets = callocCheck(T, sizeof(int32_t));
    mb->pos = callocCheck(T, sizeof(int32_t));
    mb->img_cu_patches = callocCheck(I + 1, sizeof(int32_t));
    mb->grid_h = callocCheck(I + 1, sizeof(int32_t));
    mb->grid_w = callocCheck(I + 1, sizeof(int32_t));
    mb->img_lm_start = callocCheck(I + 1, sizeof(int32_t));
    mb->patch_row = callocCheck(Np + 1, sizeof(int32_t));
    mb->patch_col = callocCheck(Np + 1, sizeof(int32_t));
    size_t P = 3 * (size_t)patch * patch;
    mb->patches = callocCheck(Np * P + 1, sizeof(float));
    mb->sample_index = callocCheck(S, sizeof(int64_t));
    int* kind = callocCheck(T, sizeof(int));
    tm_walk(spec, mb, kind, &T, &S, &I, &Np);
    for (int t = 0; t < T; t++) mb->ids[t] = kind[t] == 2 ? -1 : (int32_t)(tm_rand(rng) % (uint64_t)V);
    for (size_t k = 0; k < Np * P; k++) mb->patches[k] = 2.0f * tm_uniform(rng) - 1.0f;
    mb->n_supervised = 0;
    for (int s = 0; s < S; s++) {
        mb->sample_index[s] = s;
        for (int t = mb->cu_seqlens[s]; t < mb->cu_seqlens[s + 1]; t++) {
            mb->pos[t] = t - mb->cu_seqlens[s];
            int nxt = t + 1;
            if (nxt < mb->cu_seqlens[s + 1] && kind[nxt] == 1) {
                mb->targets[t] = mb->ids[nxt];
                mb->n_supervised++;
            } else {
                mb->targets[t] = -100;
            }
        }
    }
    free(kind);
}

static void tm_microbatch_free(Microbatch* mb) {
    free(mb->cu_seqlens);
    free(mb->ids);
    free(mb->targets);
    free(mb->pos);
    free(mb->img_cu_patches);
    free(mb->grid_h);
    free(mb->grid_w);
    free(mb->img_lm_start);
    free(mb->patch_row);
    free(mb->patch_col);
    free(mb->patches);
    free(mb->sample_index);
    memset(mb, 0, sizeof *mb);
}

/* A microbatch of `spec` (tm_microbatch) whose k-th image is LLaVA-NeXT any-resolution image k of sizes[k] = (h, w)
 * (docs/anyres.md) under the grid pinpoints `pins` and tiles of `tile` pixels: its run of `<image>` positions is the
 * layout's n_positions long (the spec's image k must be "i1x1": its length is set here), its tower images the base
 * image and the tiles, (tile / patch)^2 random patches each, its layout in Microbatch.J. Free with microbatch_free. */
static inline void tm_anyres_microbatch(Microbatch* mb, const char* spec, const int (*sizes)[2], int J, const char* pins, int tile,
                                 int patch, int V, uint64_t* rng) {
    AnyresPinpoints pp;
    char err[256], sp[512];
    if (anyres_pinpoints_parse(pins, tile, &pp, err, sizeof err)) rr_die("%s", err);
    AnyresLayout l[8];
    int k = 0, o = 0;
    RR_ASSERT(J <= 8);
    for (const char* c = spec; *c;) {
        if (!strncmp(c, "i1x1", 4)) {
            if (anyres_layout(sizes[k][0], sizes[k][1], &pp, tile, patch, ANYRES_SELECT_DEFAULT, &l[k], err, sizeof err))
                rr_die("%s", err);
            o += snprintf(sp + o, sizeof sp - (size_t)o, "i%dx1", l[k].n_positions);
            k++;
            c += 4;
        } else {
            sp[o++] = *c++;
        }
    }
    sp[o] = '\0';
    RR_ASSERT(k == J);
    tm_microbatch(mb, sp, V, patch, rng);
    int g = tile / patch, I = 0;
    for (int j = 0; j < J; j++) I += l[j].n_tiles;
    size_t P = 3 * (size_t)patch * patch, Np = (size_t)I * g * g;
    int32_t* start = mb->img_lm_start;
    mb->J = J;
    mb->ar_tile0 = (int32_t*)callocCheck(J + 1, sizeof(int32_t));
    mb->ar_size = (int32_t*)callocCheck(2 * J, sizeof(int32_t));
    mb->ar_grid = (int32_t*)callocCheck(2 * J, sizeof(int32_t));
    mb->ar_lm_start = (int32_t*)callocCheck(J, sizeof(int32_t));
    free(mb->img_cu_patches), free(mb->grid_h), free(mb->grid_w), free(mb->patch_row), free(mb->patch_col), free(mb->patches);
    mb->I = I;
    mb->Np = (int)Np;
    mb->img_cu_patches = (int32_t*)callocCheck(I + 1, sizeof(int32_t));
    mb->grid_h = (int32_t*)callocCheck(I, sizeof(int32_t));
    mb->grid_w = (int32_t*)callocCheck(I, sizeof(int32_t));
    mb->img_lm_start = (int32_t*)callocCheck(I, sizeof(int32_t));
    mb->patch_row = (int32_t*)callocCheck(Np, sizeof(int32_t));
    mb->patch_col = (int32_t*)callocCheck(Np, sizeof(int32_t));
    mb->patches = (float*)callocCheck(Np * P, sizeof(float));
    for (size_t q = 0; q < Np * P; q++) mb->patches[q] = 2.0f * tm_uniform(rng) - 1.0f;
    int i = 0;
    for (int j = 0; j < J; j++) {
        mb->ar_tile0[j] = i;
        mb->ar_size[2 * j] = sizes[j][0], mb->ar_size[2 * j + 1] = sizes[j][1];
        mb->ar_grid[2 * j] = l[j].rows, mb->ar_grid[2 * j + 1] = l[j].cols;
        mb->ar_lm_start[j] = start[j];
        for (int t = 0; t < l[j].n_tiles; t++, i++) {
            mb->grid_h[i] = mb->grid_w[i] = g;
            mb->img_lm_start[i] = start[j];
            mb->img_cu_patches[i + 1] = mb->img_cu_patches[i] + g * g;
            for (int q = 0; q < g * g; q++)
                mb->patch_row[mb->img_cu_patches[i] + q] = q / g, mb->patch_col[mb->img_cu_patches[i] + q] = q % g;
        }
    }
    mb->ar_tile0[J] = I;
    free(start);
}

/* Largest T and Np over a set of specs (the activation budget of a test). */
static void tm_budget(const char* const* specs, int n, int* max_T, int* max_Np) {
    *max_T = 1;
    *max_Np = 0;
    for (int k = 0; k < n; k++) {
        int T, S, I, Np;
        tm_walk(specs[k], NULL, NULL, &T, &S, &I, &Np);
        if (T > *max_T) *max_T = T;
        if (Np > *max_Np) *max_Np = Np;
    }
}

#endif
