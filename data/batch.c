/* batch.c — the shard batch source: the loader (data/loader.h) behind the BatchSource interface. */
#include "data/batch.h"

#include <stdlib.h>
#include <string.h>

#include "engine/util.h"

typedef struct {
    Loader* L;
    int n_und;                /* the last step's undecoded samples (agree_skips) */
    const LoaderSkip* und;
} ShardSource;

static int shard_next(BatchSource* src, StepPlan* plan, char* err, size_t err_len) {
    ShardSource* ss = src->self;
    LoaderStep st;
    if (loader_next_step(ss->L, &st, err, err_len) != 0) return -1;
    memset(plan, 0, sizeof *plan);
    plan->mbs = st.mbs;
    plan->M = st.M;
    plan->n_supervised = st.n_supervised;
    plan->tokens = st.tokens;
    plan->patches = st.patches;
    plan->samples = st.samples;
    ss->n_und = st.n_undecoded;
    ss->und = st.undecoded;
    return 0;
}

static int shard_undecoded(BatchSource* src, const LoaderSkip** v) {
    ShardSource* ss = src->self;
    *v = ss->und;
    return ss->n_und;
}

static int shard_drop(BatchSource* src, const LoaderSkip* v, int n, StepPlan* plan, char* err, size_t err_len) {
    ShardSource* ss = src->self;
    LoaderStep st;
    if (loader_drop_samples(ss->L, v, n, &st, err, err_len) != 0) return -1;
    plan->n_supervised = st.n_supervised;
    plan->tokens = st.tokens;
    plan->patches = st.patches;
    plan->samples = st.samples;
    ss->n_und = 0;
    ss->und = NULL;
    return 0;
}

static char* shard_position(BatchSource* src) {
    ShardSource* ss = src->self;
    LoaderPos pos;
    loader_get_pos(ss->L, &pos);
    return loader_pos_to_json(&pos);
}

static int shard_seek(BatchSource* src, const char* json, char* err, size_t err_len) {
    ShardSource* ss = src->self;
    LoaderPos pos;
    if (!json) {
        snprintf(err, err_len, "the checkpoint has no loader position");
        return -1;
    }
    if (loader_pos_from_json(json, &pos, err, err_len) != 0) return -1;
    ss->n_und = 0;
    ss->und = NULL;
    return loader_seek(ss->L, &pos, err, err_len);
}

static int64_t shard_skipped(BatchSource* src) {
    ShardSource* ss = src->self;
    LoaderStats st;
    loader_stats(ss->L, &st);
    return st.skipped_damaged + st.skipped_oversize;
}

static const char* shard_sample_id(BatchSource* src, int64_t index) {
    ShardSource* ss = src->self;
    return loader_sample_id(ss->L, index);
}

static int64_t shard_images_decoded(BatchSource* src) {
    ShardSource* ss = src->self;
    LoaderStats st;
    loader_stats(ss->L, &st);
    return st.images_decoded;
}

static int64_t shard_samples(BatchSource* src) {
    ShardSource* ss = src->self;
    LoaderStats st;
    loader_stats(ss->L, &st);
    return st.samples;
}

static void shard_free(BatchSource* src) {
    ShardSource* ss = src->self;
    loader_close(ss->L);
    free(ss);
    src->self = NULL;
}

int batch_source_shards(BatchSource* src, const LoaderConfig* c, char* err, size_t err_len) {
    Loader* L = loader_open(c, NULL, err, err_len);
    if (!L) return -1;
    ShardSource* ss = callocCheck(1, sizeof *ss);
    ss->L = L;
    LoaderStats st;
    loader_stats(L, &st);
    *src = (BatchSource){.self = ss, .name = "shards", .next = shard_next, .position = shard_position, .seek = shard_seek,
                         .skipped = shard_skipped, .images_decoded = shard_images_decoded, .samples = shard_samples,
                         .dataset_samples = st.dataset_samples, .free = shard_free, .sample_id = shard_sample_id,
                         .undecoded = c->agree_skips ? shard_undecoded : NULL, .drop = c->agree_skips ? shard_drop : NULL};
    return 0;
}
