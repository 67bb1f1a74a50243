/* test_anyres_loader.c — any-resolution shards (pack --image-preprocess anyres) through the loader and the model
 * (driven by tests/data/pack_anyres.py):
 *   test_anyres_loader SHARDS TILE PATCH OUT
 * opens the loader on SHARDS (fifo, one microbatch a step, one epoch), checks every microbatch with the model's
 * stage_check_microbatch (a small model.anyres model: tower images, grids, the `<image>` runs' lengths against
 * data/anyres.h) and runs its forward and backward (the loss must be finite), and writes OUT/images.txt, one line
 * per image: "sample_index h w rows cols n_positions n_tiles first_patch_row", and OUT/patches.f32 (every
 * microbatch's patches in order) for the script to compare with its own processor. Then each microbatch of two or
 * more samples loses its first (microbatch_drop_samples, as a rank drops an image that did not decode): its
 * images' tiles and layout must go with it and the rest pass the model's check and run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/anyres.h"
#include "data/loader.h"
#include "runtime/model/model.h"

int main(int argc, char** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: test_anyres_loader SHARDS TILE PATCH OUT\n");
        return 2;
    }
    int tile = atoi(argv[2]), p = atoi(argv[3]), g = tile / p;
    char err[1024], path[1200];
    LoaderConfig c;
    loader_config_default(&c);
    c.shards = argv[1];
    c.microbatch_tokens = 400;
    c.microbatches = 1, c.window = 4, c.policy = LOADER_POLICY_FIFO, c.workers = 2, c.seed = 1;
    c.patch = p, c.min_patches = g * g, c.max_patches = g * g;
    Loader* L = loader_open(&c, NULL, err, sizeof err);
    if (!L) rr_die("loader: %s", err);
    int64_t N = loader_sample_count(L);
    ModelConfig mc = {.patch = p, .Dv = 16, .Lv = 1, .Hv = 2, .Dt = 16, .Lt = 1, .Ht = 2, .F = 32, .V = 512,
                      .min_patches = 1, .max_patches = 8192, .init_std = 0.02f, .seed = 5, .anyres = 1,
                      .vision_image_size = tile};
    if (model_config_check(&mc, err, sizeof err)) rr_die("%s", err);
    Stage st;
    stage_init(&st, &mc, 0, mc.Lt, &backend_cpu);
    StageActs a;
    stage_acts_init(&a, &st, c.microbatch_tokens, 4 * c.microbatch_tokens, 0);
    snprintf(path, sizeof path, "%s/images.txt", argv[4]);
    FILE* ft = fopenCheck(path, "w");
    snprintf(path, sizeof path, "%s/patches.f32", argv[4]);
    FILE* fp = fopenCheck(path, "wb");
    int64_t seen = 0, n_mb = 0, n_img = 0, row0 = 0, n_drop = 0;
    size_t row = (size_t)3 * p * p;
    while (seen < N) {
        LoaderStep step;
        if (loader_next_step(L, &step, err, sizeof err)) rr_die("loader_next_step: %s", err);
        for (int m = 0; m < step.M; m++) {
            Microbatch* mb = &step.mbs[m];
            if (stage_check_microbatch(&st, &a, mb, err, sizeof err)) rr_die("microbatch %lld: %s", (long long)n_mb, err);
            float ls;
            stage_forward(&st, &a, mb, NULL, NULL, &ls);
            stage_backward(&st, &a, NULL, mb->n_supervised ? 1.0f / mb->n_supervised : 1.0f, NULL);
            if (!isfinite(ls)) rr_die("microbatch %lld: loss %g", (long long)n_mb, ls);
            for (int j = 0; j < mb->J; j++) {
                int s = 0; /* the sample holding the image */
                while (s + 1 < mb->S && mb->cu_seqlens[s + 1] <= mb->ar_lm_start[j]) s++;
                int n = 0, t = mb->ar_lm_start[j];
                while (t + n < mb->T && mb->ids[t + n] == -1 && t + n < mb->cu_seqlens[s + 1]) n++;
                fprintf(ft, "%lld %d %d %d %d %d %d %lld\n", (long long)mb->sample_index[s], mb->ar_size[2 * j],
                        mb->ar_size[2 * j + 1], mb->ar_grid[2 * j], mb->ar_grid[2 * j + 1], n,
                        mb->ar_tile0[j + 1] - mb->ar_tile0[j], (long long)(row0 + mb->img_cu_patches[mb->ar_tile0[j]]));
                n_img++;
            }
            if (fwrite(mb->patches, sizeof(float), row * (size_t)mb->Np, fp) != row * (size_t)mb->Np) rr_die("short write");
            row0 += mb->Np;
            seen += mb->S;
            n_mb++;
            if (mb->S >= 2) { /* a sample dropped (an image that did not decode on some rank): its tiles and layout go */
                int J0 = mb->J, S0 = mb->S, I0 = mb->I, nj0 = 0;
                for (int j = 0; j < mb->J; j++) nj0 += mb->ar_lm_start[j] < mb->cu_seqlens[1];
                uint8_t drop[64] = {1};
                if (S0 <= 64 && microbatch_drop_samples(mb, drop) == 1) {
                    if (mb->J != J0 - nj0 || mb->S != S0 - 1 || mb->I >= I0 || mb->ar_tile0[mb->J] != mb->I)
                        rr_die("microbatch %lld: dropping sample 0 left J %d (of %d, %d its), I %d (of %d)", (long long)n_mb,
                               mb->J, J0, nj0, mb->I, I0);
                    if (stage_check_microbatch(&st, &a, mb, err, sizeof err))
                        rr_die("microbatch %lld after a drop: %s", (long long)n_mb, err);
                    float ls2;
                    stage_forward(&st, &a, mb, NULL, NULL, &ls2);
                    stage_acts_release(&a);
                    n_drop++;
                }
            }
        }
    }
    fclose(ft);
    fclose(fp);
    if (n_drop == 0) rr_die("no microbatch of two samples to drop one from");
    printf("anyres loader: %lld samples, %lld images in %lld microbatches checked by the model and trained; %lld with a "
           "sample dropped checked again\n", (long long)seen, (long long)n_img, (long long)n_mb, (long long)n_drop);
    stage_acts_free(&a, &st);
    stage_free(&st);
    loader_close(L);
    return 0;
}
