/* microbatch.c — freeing a Microbatch and dropping samples from one (the loader fills them, see
 * data/loader.h). */
#include "data/microbatch.h"

#include <stdlib.h>
#include <string.h>

void microbatch_free(Microbatch* mb) {
    if (!mb) return;
    free(mb->cu_seqlens), free(mb->ids), free(mb->targets), free(mb->pos);
    free(mb->patches), free(mb->img_cu_patches), free(mb->grid_h), free(mb->grid_w);
    free(mb->patch_row), free(mb->patch_col), free(mb->img_lm_start), free(mb->sample_index);
    free(mb->ar_tile0), free(mb->ar_size), free(mb->ar_grid), free(mb->ar_lm_start);
    memset(mb, 0, sizeof *mb);
}

int microbatch_drop_samples(Microbatch* mb, const uint8_t* drop) {
    int S = mb->S, n = 0;
    for (int s = 0; s < S; s++) n += drop[s] != 0;
    if (n == 0) return 0;
    int placeholder = n == S; /* the first sample stays, made harmless below */
    size_t row = (size_t)3 * mb->patch * mb->patch;
    /* compaction in order: every write lands at or before the element it copies, and images are read
     * (their start, their patch range) before their slot can be written */
    int t_out = 0, s_out = 0, i_out = 0, np_out = 0, i_in = 0, j_in = 0, j_out = 0;
    for (int s = 0; s < S; s++) {
        int t0 = mb->cu_seqlens[s], t1 = mb->cu_seqlens[s + 1];
        int i0 = i_in;
        while (i_in < mb->I && mb->img_lm_start[i_in] < t1) i_in++;
        int i1 = i_in, keep = !drop[s] || (placeholder && s == 0);
        int shift = t0 - t_out;
        if (!keep) { /* its any-resolution images are skipped too */
            while (j_in < mb->J && mb->ar_lm_start[j_in] < t1) j_in++;
            continue;
        }
        memmove(mb->ids + t_out, mb->ids + t0, sizeof(int32_t) * (size_t)(t1 - t0));
        memmove(mb->targets + t_out, mb->targets + t0, sizeof(int32_t) * (size_t)(t1 - t0));
        memmove(mb->pos + t_out, mb->pos + t0, sizeof(int32_t) * (size_t)(t1 - t0));
        mb->cu_seqlens[s_out] = t_out;
        mb->sample_index[s_out] = mb->sample_index[s];
        while (j_in < mb->J && mb->ar_lm_start[j_in] < t1) { /* any-resolution images: their tiles move with them */
            if (keep) {
                mb->ar_size[2 * j_out] = mb->ar_size[2 * j_in], mb->ar_size[2 * j_out + 1] = mb->ar_size[2 * j_in + 1];
                mb->ar_grid[2 * j_out] = mb->ar_grid[2 * j_in], mb->ar_grid[2 * j_out + 1] = mb->ar_grid[2 * j_in + 1];
                mb->ar_lm_start[j_out] = mb->ar_lm_start[j_in] - shift;
                mb->ar_tile0[j_out + 1] = mb->ar_tile0[j_out] + (mb->ar_tile0[j_in + 1] - mb->ar_tile0[j_in]);
                j_out++;
            }
            j_in++;
        }
        for (int i = i0; i < i1; i++) {
            int p0 = mb->img_cu_patches[i], p1 = mb->img_cu_patches[i + 1];
            if (mb->patches) memmove(mb->patches + row * (size_t)np_out, mb->patches + row * (size_t)p0, sizeof(float) * row * (size_t)(p1 - p0));
            memmove(mb->patch_row + np_out, mb->patch_row + p0, sizeof(int32_t) * (size_t)(p1 - p0));
            memmove(mb->patch_col + np_out, mb->patch_col + p0, sizeof(int32_t) * (size_t)(p1 - p0));
            mb->grid_h[i_out] = mb->grid_h[i];
            mb->grid_w[i_out] = mb->grid_w[i];
            mb->img_lm_start[i_out] = mb->img_lm_start[i] - shift;
            np_out += p1 - p0;
            mb->img_cu_patches[++i_out] = np_out;
        }
        t_out += t1 - t0;
        s_out++;
    }
    mb->S = s_out, mb->T = t_out, mb->I = i_out, mb->Np = np_out;
    if (mb->J) mb->J = j_out;
    mb->cu_seqlens[s_out] = t_out;
    mb->img_cu_patches[0] = 0;
    mb->n_supervised = 0;
    for (int t = 0; t < mb->T; t++) {
        if (placeholder) mb->targets[t] = -100;
        mb->n_supervised += mb->targets[t] != -100;
    }
    if (placeholder && mb->patches) memset(mb->patches, 0, sizeof(float) * row * (size_t)mb->Np);
    return S - s_out;
}
