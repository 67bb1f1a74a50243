/* data_shard_tool.c — shards for tests, written from the shard format (data/shard.h) rather than by pack:
 *   pick SHARDS STEP MB_TOKENS MICROBATCHES PATCH MIN MAX SEED WINDOW
 *        the first sample with an image in step STEP (1-based) of the loader's plan with those settings
 *        (ffd, one process: every layout's plan); prints "SHARD_FILE LOCAL_INDEX ID"
 *   damage-image IN.rrs OUT.rrs LOCAL_INDEX
 *        a copy of IN whose sample LOCAL_INDEX has image 0 cut inside its pixel data, its frame intact
 *        (tests/support/util/shard_damage.h) */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/image.h"
#include "data/loader.h"
#include "data/shard.h"
#include "engine/util.h"
#include "util/shard_damage.h"

static int cmd_damage(const char* in, const char* out, long which) {
    char err[1024];
    if (which < 0) rr_die("%s: no sample %ld", in, which);
    if (shard_copy_damaged(in, out, (uint64_t)which, err, sizeof err) != 0) rr_die("%s", err);
    return 0;
}

static int is_shard(const struct dirent* d) {
    size_t l = strlen(d->d_name);
    return l >= 5 && !strcmp(d->d_name + l - 4, ".rrs");
}

static int by_name(const struct dirent** a, const struct dirent** b) { return strcmp((*a)->d_name, (*b)->d_name); }

static int cmd_pick(char** a) {
    LoaderConfig c;
    loader_config_default(&c);
    c.shards = a[0];
    int step = atoi(a[1]);
    c.microbatch_tokens = atoi(a[2]), c.microbatches = atoi(a[3]);
    c.patch = atoi(a[4]), c.min_patches = atoi(a[5]), c.max_patches = atoi(a[6]);
    c.seed = (uint64_t)atoll(a[7]);
    c.window = atoi(a[8]);
    c.decode_images = 0;
    char err[1024];
    Loader* L = loader_open(&c, NULL, err, sizeof err);
    if (!L) rr_die("%s", err);
    LoaderStep st;
    for (int k = 1; k <= step; k++)
        if (loader_next_step(L, &st, err, sizeof err) != 0) rr_die("%s", err);
    for (int m = 0; m < st.M; m++) {
        const Microbatch* mb = &st.mbs[m];
        for (int i = 0; i < mb->S; i++) {
            int has_image = 0;
            for (int t = mb->cu_seqlens[i]; t < mb->cu_seqlens[i + 1]; t++) has_image |= mb->ids[t] == -1;
            if (!has_image) continue;
            /* the shard file and local index of global sample g: the folder's *.rrs in name order */
            int64_t g = mb->sample_index[i];
            const char* id = loader_sample_id(L, g);
            struct dirent** names;
            int nn = scandir(a[0], &names, is_shard, by_name), found = 0; /* the loader's order: *.rrs by name */
            for (int f = 0; f < nn && !found; f++) {
                char file[1100];
                snprintf(file, sizeof file, "%s/%s", a[0], names[f]->d_name);
                Shard s;
                if (shard_open(file, &s, err, sizeof err) != 0) rr_die("%s", err);
                uint64_t n = s.n;
                shard_close(&s);
                if (g < (int64_t)n) {
                    printf("%s %lld %s\n", file, (long long)g, id);
                    found = 1;
                }
                g -= (int64_t)n;
            }
            for (int f = 0; f < nn; f++) free(names[f]);
            if (nn >= 0) free(names);
            if (found) {
                loader_close(L);
                return 0;
            }
            rr_die("no shard of %s holds sample %lld", a[0], (long long)mb->sample_index[i]);
        }
    }
    rr_die("step %d has no sample with an image", step);
}

int main(int argc, char** argv) {
    if (argc == 5 && !strcmp(argv[1], "damage-image")) return cmd_damage(argv[2], argv[3], atol(argv[4]));
    if (argc == 11 && !strcmp(argv[1], "pick")) return cmd_pick(argv + 2);
    fprintf(stderr, "usage: data_shard_tool pick SHARDS STEP MB_TOKENS MICROBATCHES PATCH MIN MAX SEED WINDOW\n"
                    "       data_shard_tool damage-image IN.rrs OUT.rrs LOCAL_INDEX\n");
    return 2;
}
