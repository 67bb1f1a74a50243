/* train_samples.c — rrfp-bench-samples SHARD_DIR: the samples of a folder of .rrs shards (data/shard.h), in the
 * order the folder's shards sort by name and each shard's index, as JSON lines for bench/gpu_train_hf.py (the
 * transformers side of bench/gpu_train.sh trains on the very token ids rrfp-mm packed):
 *   first line  {"shards": N, "samples": S, "image_token": ID, "patch": P, "prep": K, "prep_size": SIDE}
 *   per sample  {"id": "...", "ids": [...], "mask": "0011...", "images": [[w, h, grid_h, grid_w], ...]}
 * ids hold one <image> id per image (the loader expands it to the image's grid_h x grid_w positions); mask is 1
 * at the supervised tokens (the assistant's answers). A damaged sample is an error naming the shard and index. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/shard.h"
#include "engine/util.h"

static int is_shard(const struct dirent* d) {
    size_t l = strlen(d->d_name);
    return l >= 5 && !strcmp(d->d_name + l - 4, ".rrs");
}

static int by_name(const struct dirent** a, const struct dirent** b) { return strcmp((*a)->d_name, (*b)->d_name); }

static void put_string(const char* s) {
    cJSON* j = cJSON_CreateString(s);
    char* t = cJSON_PrintUnformatted(j);
    fputs(t, stdout);
    free(t);
    cJSON_Delete(j);
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: rrfp-bench-samples SHARD_DIR   (JSON lines of every sample, for bench/gpu_train_hf.py)\n");
        return 2;
    }
    struct dirent** names;
    int nn = scandir(argv[1], &names, is_shard, by_name);
    if (nn <= 0) rr_die("rrfp-bench-samples: %s: no .rrs shards (%s)", argv[1], nn < 0 ? "cannot read the folder" : "none");
    Shard* sh = callocCheck((size_t)nn, sizeof *sh);
    char err[1024], path[4096];
    uint64_t total = 0;
    for (int f = 0; f < nn; f++) {
        snprintf(path, sizeof path, "%s/%s", argv[1], names[f]->d_name);
        if (shard_open(path, &sh[f], err, sizeof err) != 0) rr_die("rrfp-bench-samples: %s", err);
        total += sh[f].n;
    }
    printf("{\"shards\": %d, \"samples\": %llu, \"image_token\": %d, \"patch\": %u, \"prep\": %u, \"prep_size\": %u}\n", nn,
           (unsigned long long)total, sh[0].info.image_token, sh[0].info.patch, sh[0].info.prep, sh[0].info.prep_size);
    ZSTD_DCtx* dctx = ZSTD_createDCtx();
    for (int f = 0; f < nn; f++) {
        for (uint64_t i = 0; i < sh[f].n; i++) {
            ShardSample smp;
            if (shard_read_sample(&sh[f], i, dctx, &smp, err, sizeof err) != 0)
                rr_die("rrfp-bench-samples: %s: sample %llu: %s", sh[f].path, (unsigned long long)i, err);
            const ShardEntry* e = &sh[f].entries[i];
            fputs("{\"id\": ", stdout);
            put_string(sh[f].ids + e->id_off);
            fputs(", \"ids\": [", stdout);
            for (int t = 0; t < smp.n_tokens; t++) printf("%s%d", t ? "," : "", smp.ids[t]);
            fputs("], \"mask\": \"", stdout);
            for (int t = 0; t < smp.n_tokens; t++) putchar(smp.mask[t] ? '1' : '0');
            fputs("\", \"images\": [", stdout);
            for (uint32_t k = 0; k < e->n_images; k++) {
                const ShardImage* im = &sh[f].images[e->image0 + k];
                printf("%s[%u, %u, %u, %u]", k ? ", " : "", im->w, im->h, im->grid_h, im->grid_w);
            }
            fputs("]}\n", stdout);
            shard_sample_free(&smp);
        }
        shard_close(&sh[f]);
        free(names[f]);
    }
    ZSTD_freeDCtx(dctx);
    free(names);
    free(sh);
    if (fflush(stdout) != 0 || ferror(stdout)) rr_die("rrfp-bench-samples: cannot write the samples");
    return 0;
}
