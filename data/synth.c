/* synth.c — synthetic microbatches (see synth.h). Layout rules follow DESIGN.md section 4: one text
 * token, then (maybe) an image's gh*gw patch positions, then text; targets are the next token when
 * it is text and drawn supervised, -100 otherwise (and always at a sample's last position). */
#include "data/synth.h"

#include <stdlib.h>
#include <string.h>

#include "engine/util.h"

static uint64_t next(uint64_t* s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static int uniform(uint64_t* s, int lo, int hi) { return lo + (int)(next(s) % (uint64_t)(hi - lo + 1)); }
static double unit(uint64_t* s) { return (double)(next(s) >> 11) / 9007199254740992.0; }

void synth_microbatch(Microbatch* mb, const SynthConfig* c, uint64_t seed, int index) {
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + (uint64_t)index * 0xD1B54A32D192ED03ull + 1;
    memset(mb, 0, sizeof *mb);
    int S = uniform(&st, 1, c->max_samples);
    int cap_T = S * (c->max_text + 1 + c->max_grid * c->max_grid), cap_I = S, cap_Np = S * c->max_grid * c->max_grid;
    int pp = 3 * c->patch * c->patch;
    mb->patch = c->patch;
    mb->cu_seqlens = callocCheck((size_t)S + 1, sizeof(int32_t));
    mb->ids = callocCheck((size_t)cap_T, sizeof(int32_t));
    mb->targets = callocCheck((size_t)cap_T, sizeof(int32_t));
    mb->pos = callocCheck((size_t)cap_T, sizeof(int32_t));
    mb->img_cu_patches = callocCheck((size_t)cap_I + 1, sizeof(int32_t));
    mb->grid_h = callocCheck((size_t)cap_I + 1, sizeof(int32_t));
    mb->grid_w = callocCheck((size_t)cap_I + 1, sizeof(int32_t));
    mb->img_lm_start = callocCheck((size_t)cap_I + 1, sizeof(int32_t));
    mb->patch_row = callocCheck((size_t)cap_Np + 1, sizeof(int32_t));
    mb->patch_col = callocCheck((size_t)cap_Np + 1, sizeof(int32_t));
    mb->patches = callocCheck((size_t)cap_Np * (size_t)pp + 1, sizeof(float));
    mb->sample_index = callocCheck((size_t)S, sizeof(int64_t));
    int T = 0, I = 0, Np = 0;
    for (int s = 0; s < S; s++) {
        int start = T;
        mb->sample_index[s] = (int64_t)index * 1000 + s;
        mb->ids[T++] = uniform(&st, 0, c->V - 1);
        if (unit(&st) < c->image_prob) {
            int gh = uniform(&st, c->min_grid, c->max_grid), gw = uniform(&st, c->min_grid, c->max_grid);
            mb->grid_h[I] = gh;
            mb->grid_w[I] = gw;
            mb->img_lm_start[I] = T;
            mb->img_cu_patches[I] = Np;
            for (int i = 0; i < gh; i++)
                for (int j = 0; j < gw; j++) {
                    mb->patch_row[Np] = i;
                    mb->patch_col[Np] = j;
                    for (int k = 0; k < pp; k++) mb->patches[(size_t)Np * (size_t)pp + (size_t)k] = (float)(2.0 * unit(&st) - 1.0);
                    mb->ids[T++] = -1;
                    Np++;
                }
            I++;
            mb->img_cu_patches[I] = Np;
        }
        int text = uniform(&st, c->min_text, c->max_text);
        for (int i = 0; i < text; i++) mb->ids[T++] = uniform(&st, 0, c->V - 1);
        for (int t = start; t < T; t++) {
            mb->pos[t] = t - start;
            int next_text = t + 1 < T && mb->ids[t + 1] >= 0;
            mb->targets[t] = next_text && unit(&st) < c->supervised_prob ? mb->ids[t + 1] : -100;
            mb->n_supervised += mb->targets[t] != -100;
        }
        mb->cu_seqlens[s + 1] = T;
    }
    mb->S = S;
    mb->T = T;
    mb->I = I;
    mb->Np = Np;
}

void synth_microbatch_free(Microbatch* mb) {
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
