/* test_image_loader.c — the loader's pixels of every image in a folder of shards (driven by
 * tests/data/data_cmyk_gif.py):
 *   test_image_loader SHARDS PATCH MIN_PATCHES MAX_PATCHES OUT
 * opens the loader on SHARDS (fifo, one microbatch a step, one epoch, a damaged image fatal), and writes, for
 * each image in the order the loader gives them, a line "sample_id grid_h grid_w" to OUT.txt and its
 * normalised patches (grid_h * grid_w rows of 3 p^2 float32) to OUT.f32: what the model would be fed, decoded
 * by the loader's workers from the bytes the shards hold. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/loader.h"
#include "engine/util.h"

int main(int argc, char** argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: test_image_loader SHARDS PATCH MIN_PATCHES MAX_PATCHES OUT\n");
        return 2;
    }
    char err[1024], path[1200];
    LoaderConfig c;
    loader_config_default(&c);
    c.shards = argv[1];
    c.patch = atoi(argv[2]), c.min_patches = atoi(argv[3]), c.max_patches = atoi(argv[4]);
    c.microbatch_tokens = 4096, c.microbatches = 1, c.policy = LOADER_POLICY_FIFO, c.workers = 2, c.seed = 1;
    c.fatal_errors = 1;
    Loader* L = loader_open(&c, NULL, err, sizeof err);
    if (!L) rr_die("loader: %s", err);
    int64_t N = loader_sample_count(L), seen = 0, n_img = 0;
    snprintf(path, sizeof path, "%s.txt", argv[5]);
    FILE* ft = fopenCheck(path, "w");
    snprintf(path, sizeof path, "%s.f32", argv[5]);
    FILE* fp = fopenCheck(path, "wb");
    size_t row = (size_t)3 * c.patch * c.patch;
    while (seen < N) {
        LoaderStep step;
        if (loader_next_step(L, &step, err, sizeof err)) rr_die("loader_next_step: %s", err);
        for (int m = 0; m < step.M; m++) {
            Microbatch* mb = &step.mbs[m];
            for (int i = 0; i < mb->I; i++) {
                int s = 0; /* the sample holding image i */
                while (s + 1 < mb->S && mb->cu_seqlens[s + 1] <= mb->img_lm_start[i]) s++;
                int np = mb->img_cu_patches[i + 1] - mb->img_cu_patches[i];
                if (np != mb->grid_h[i] * mb->grid_w[i]) rr_die("image %d: %d patches for a %dx%d grid", i, np, mb->grid_h[i], mb->grid_w[i]);
                fprintf(ft, "%s %d %d\n", loader_sample_id(L, mb->sample_index[s]), mb->grid_h[i], mb->grid_w[i]);
                const float* src = mb->patches + row * (size_t)mb->img_cu_patches[i];
                if (fwrite(src, sizeof(float), row * (size_t)np, fp) != row * (size_t)np) rr_die("short write %s", path);
                n_img++;
            }
            seen += mb->S;
        }
    }
    fclose(ft);
    fclose(fp);
    printf("%lld samples, %lld images\n", (long long)seen, (long long)n_img);
    loader_close(L);
    return 0;
}
