/* loader.c — shards -> sample stream -> worker threads (read, verify, decode, resize) -> packer ->
 * steps of Microbatches. The rules are in loader.h; this file keeps them deterministic: the plan is a
 * function of the index and the frames' checksums only (an image that does not decode changes no plan:
 * its sample is dropped from its step afterwards, loader_drop_samples), workers just fill slots of a ring
 * in stream order, and the consumer alone decides what goes where. */
#include "data/anyres.h"
#include "data/loader.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "data/image.h"
#include "data/shard.h"
#include "data/template.h"
#include "engine/util.h"

/* ---- one processed sample ---------------------------------------------------------------------- */

typedef struct {
    int64_t k;          /* stream position */
    int64_t g;          /* global sample index */
    int damaged;        /* 1: skipped, why says so */
    int undecoded;      /* 1: an image did not decode (why says which and why): kept in the plan, no pixels */
    char why[384];
    int n_tokens;
    int32_t* ids;
    uint8_t* mask;
    int n_images, Np;
    float* patches;     /* (Np, 3p^2), NULL without decode_images (or until decoded, when deferred) */
    uint8_t* jpeg;      /* deferred decoding: the images' JPEG bytes, concatenated (NULL otherwise) */
    size_t jpeg_len[SHARD_MAX_IMAGES];
} SampleData;

static void sample_data_clear(SampleData* d) {
    free(d->ids), free(d->mask), free(d->patches), free(d->jpeg);
    memset(d, 0, sizeof *d);
}

/* One planned microbatch of a packing group: its samples (owned), in stream order once formed. */
typedef struct {
    SampleData** v;
    int n, cap;
    int64_t tokens;
    double cost;
} Bin;

static void bin_free(Bin* b) {
    for (int i = 0; i < b->n; i++) sample_data_clear(b->v[i]), free(b->v[i]);
    free(b->v);
    memset(b, 0, sizeof *b);
}

enum { SLOT_EMPTY = 0, SLOT_BUSY, SLOT_DONE };

static int loader_img_np(const Loader* L, int64_t gi);

/* A step prepared by the planner: its microbatches, and the position and counters after it. */
enum { PLAN_DEPTH = 2 };
typedef struct {
    Microbatch* mbs; /* (M) */
    LoaderStep sum;
    LoaderPos pos;
    LoaderStats st;
    LoaderSkip* und; /* (sum.n_undecoded) its samples whose images did not decode, in step order */
} PlannedStep;
typedef struct {
    int state;
    SampleData d;
} Slot;

struct Loader {
    ImagePrep prep; /* how the shards say their images are preprocessed (all shards agree) */
    LoaderConfig cfg;
    char shards_path[1024];
    int n_shards;
    Shard* shards;
    int64_t N;
    int64_t* shard_base;   /* (n_shards+1) first global index of each shard */
    int32_t* cost_L;       /* (N) LM positions */
    double* cost_b;        /* (N) balanced cost */
    int64_t* img_base;     /* (N+1) first image of each sample in grid_h/grid_w */
    uint16_t *grid_h, *grid_w;
    int32_t* img_np;       /* any-resolution shards: patches of each image (its tiles' and base image's), else NULL */
    int32_t* img_pos;      /* any-resolution shards: LM positions of each image (data/anyres.h), else NULL */
    uint16_t *img_w, *img_h; /* any-resolution shards: each image's original size */
    int64_t per_epoch;     /* stream positions per epoch (N: every replica walks the whole stream) */
    int defer_decode;      /* decode only the microbatches this replica keeps (dp > 1, in the planner) */
    uint64_t config_hash;
    int oversize_total;

    /* permutation cache (two epochs), guarded by mu */
    int64_t perm_epoch[2];
    int64_t* perm[2];

    /* ring of processed samples, guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    Slot* ring;
    int64_t cap;
    int64_t next_claim;  /* next stream position a worker takes */
    int64_t base;        /* consumer's next take; workers stay below base + cap */
    int stop;
    int consumer_waiting, workers_waiting; /* signal only when someone sleeps: a futex wake per sample
                                             * costs as much CPU as resizing a small image */
    int n_workers;
    pthread_t* threads;
    int64_t bytes_read;
    int64_t images_decoded; /* JPEGs decoded into patches (workers, or the planner when deferred) */
    JpegCodec** p_jc;       /* the planner's decoders, one per decode thread (deferred decoding) */

    /* consumer state */
    SampleData held;       /* fifo: the sample that did not fit (position held.k), or n_tokens = -1 */
    int has_held;
    int64_t g_start, g_end; /* current group's stream range */
    Bin* grp;               /* the group's microbatches (samples, assembled when handed out) */
    int grp_n, grp_next, grp_cap;
    LoaderPos at_group;     /* counters when the current group began */
    LoaderStats st;
    Microbatch* step_mbs;   /* last step handed out (owned here) */
    int step_n;
    LoaderSkip* step_und;   /* its undecoded samples (owned here) */
    int step_n_und, step_dropped; /* how many; loader_drop_samples ran on it */
    int64_t dropped;        /* samples dropped from steps handed out since the last seek (every replica's): the
                             * planner's counters and positions do not hold them (skipped_damaged +, samples -) */

    /* planner thread: forms and assembles whole steps ahead of the trainer, so loader_next_step only
     * hands over a finished step; guarded by pmu. L->st and the group state above are the planner's;
     * pub / pub_pos are as of the last step handed out. */
    pthread_t planner;
    int planner_on;
    pthread_mutex_t pmu;
    pthread_cond_t cv_plan;
    PlannedStep q[PLAN_DEPTH];
    int q_head, q_n, p_stop, p_failed;
    char p_err[1024];
    LoaderStats pub;
    LoaderPos pub_pos;
};

/* ---- small helpers ------------------------------------------------------------------------------- */


void loader_config_default(LoaderConfig* c) {
    memset(c, 0, sizeof *c);
    c->microbatch_tokens = 1024;
    c->microbatches = 4;
    c->policy = LOADER_POLICY_FFD;
    c->window = 64;
    c->workers = 1;
    c->seed = 1;
    c->patch = 8, c->min_patches = 16, c->max_patches = 64;
    c->dp_rank = 0, c->dp_size = 1;
    c->decode_images = 1;
}

int loader_policy_parse(const char* s, LoaderPolicy* p) {
    if (!strcmp(s, "fifo")) *p = LOADER_POLICY_FIFO;
    else if (!strcmp(s, "ffd")) *p = LOADER_POLICY_FFD;
    else if (!strcmp(s, "balanced")) *p = LOADER_POLICY_BALANCED;
    else return -1;
    return 0;
}

static int cmp_str(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

/* *.rrs files of a folder in name order, or the one file. */
static int list_shards(const char* path, char*** out, int* n, char* err, size_t err_len) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, err_len, "data.shards '%s': %s", path, strerror(errno));
        return -1;
    }
    *n = 0;
    if (!S_ISDIR(st.st_mode)) {
        *out = mallocCheck(sizeof(char*));
        (*out)[0] = strdup(path);
        *n = 1;
        return 0;
    }
    DIR* d = opendir(path);
    if (!d) {
        snprintf(err, err_len, "data.shards '%s': %s", path, strerror(errno));
        return -1;
    }
    int cap = 16;
    char** v = mallocCheck(sizeof(char*) * cap);
    for (struct dirent* de; (de = readdir(d));) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 4, ".rrs") != 0) continue;
        if (*n == cap) v = reallocCheck(v, sizeof(char*) * (cap *= 2));
        size_t pl = strlen(path) + l + 2;
        v[*n] = mallocCheck(pl);
        snprintf(v[*n], pl, "%s/%s", path, de->d_name);
        (*n)++;
    }
    closedir(d);
    if (*n == 0) {
        free(v);
        snprintf(err, err_len, "data.shards '%s' holds no .rrs shard\n---> HINT: make shards with `rrfp-mm pack`",
                 path);
        return -1;
    }
    qsort(v, (size_t)*n, sizeof(char*), cmp_str);
    *out = v;
    return 0;
}

static int shard_of(const Loader* L, int64_t g) {
    int lo = 0, hi = L->n_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (L->shard_base[mid] <= g) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static const char* sample_id(const Loader* L, int64_t g, int* shard, int64_t* local) {
    int s = shard_of(L, g);
    int64_t i = g - L->shard_base[s];
    if (shard) *shard = s;
    if (local) *local = i;
    return L->shards[s].ids + L->shards[s].entries[i].id_off;
}

/* Global sample at stream position k (caller holds mu or is the only thread). */
static int64_t stream_sample(Loader* L, int64_t k) {
    int64_t e = k / L->per_epoch, j = k % L->per_epoch;
    int slot = -1;
    for (int s = 0; s < 2; s++)
        if (L->perm[s] && L->perm_epoch[s] == e) slot = s;
    if (slot < 0) {
        /* replace the older cached epoch */
        slot = (L->perm[0] && L->perm[1]) ? (L->perm_epoch[0] < L->perm_epoch[1] ? 0 : 1) : (L->perm[0] ? 1 : 0);
        if (!L->perm[slot]) L->perm[slot] = mallocCheck(sizeof(int64_t) * (size_t)L->N);
        int64_t* p = L->perm[slot];
        for (int64_t i = 0; i < L->N; i++) p[i] = i;
        uint64_t st = rr_mix64(L->cfg.seed * 0x9E3779B97F4A7C15ull ^ rr_mix64((uint64_t)e + 0x632BE59BD9B4E019ull));
        for (int64_t i = L->N - 1; i > 0; i--) {
            st += 0x9E3779B97F4A7C15ull;
            int64_t r = (int64_t)(rr_mix64(st) % (uint64_t)(i + 1));
            int64_t t = p[i];
            p[i] = p[r], p[r] = t;
        }
        L->perm_epoch[slot] = e;
    }
    return L->perm[slot][j];
}

/* ---- workers ----------------------------------------------------------------------------------------- */

static void process_sample(Loader* L, JpegCodec* jc, ZSTD_DCtx* dctx, SampleData* d, int64_t* bytes) {
    int s;
    int64_t i;
    sample_id(L, d->g, &s, &i);
    const Shard* sh = &L->shards[s];
    ShardSample ss;
    char err[320];
    *bytes += sh->entries[i].size;
    if (shard_read_sample(sh, (uint64_t)i, dctx, &ss, err, sizeof err) != 0) {
        d->damaged = 1;
        snprintf(d->why, sizeof d->why, "%s", err);
        return;
    }
    d->n_tokens = ss.n_tokens;
    d->ids = mallocCheck(sizeof(int32_t) * (size_t)(ss.n_tokens ? ss.n_tokens : 1));
    d->mask = mallocCheck((size_t)(ss.n_tokens ? ss.n_tokens : 1));
    memcpy(d->ids, ss.ids, sizeof(int32_t) * (size_t)ss.n_tokens);
    memcpy(d->mask, ss.mask, (size_t)ss.n_tokens);
    d->n_images = ss.n_images;
    int64_t ib = L->img_base[d->g];
    d->Np = 0;
    for (int k = 0; k < ss.n_images; k++) d->Np += loader_img_np(L, ib + k);
    if (L->defer_decode && d->Np > 0) {
        /* keep the JPEG bytes: the planner decodes them if this replica keeps the sample's microbatch */
        size_t tot = 0;
        for (int k = 0; k < ss.n_images; k++) tot += ss.jpeg_len[k];
        d->jpeg = mallocCheck(tot ? tot : 1);
        tot = 0;
        for (int k = 0; k < ss.n_images; k++) {
            memcpy(d->jpeg + tot, ss.jpeg[k], ss.jpeg_len[k]);
            d->jpeg_len[k] = ss.jpeg_len[k];
            tot += ss.jpeg_len[k];
        }
    } else if (L->cfg.decode_images && d->Np > 0) {
        int p = L->cfg.patch;
        size_t row = (size_t)3 * p * p;
        d->patches = mallocCheck(sizeof(float) * row * (size_t)d->Np);
        size_t off = 0;
        for (int k = 0; k < ss.n_images; k++) {
            int gh = L->grid_h[ib + k], gw = L->grid_w[ib + k];
            if (image_patches_into_prep(jc, ss.jpeg[k], ss.jpeg_len[k], &L->prep, p, L->cfg.min_patches,
                                        L->cfg.max_patches, gh, gw, d->patches + off, err, sizeof err) != 0) {
                /* the frame is intact: the sample stays in the plan (every rank plans with it) and the step
                 * names it (loader.h, "Images that do not decode") */
                d->undecoded = 1;
                snprintf(d->why, sizeof d->why, "image %d: %s", k, err);
                free(d->patches);
                d->patches = NULL;
                break;
            }
            off += row * (size_t)loader_img_np(L, ib + k);
        }
    }
    shard_sample_free(&ss);
    if (d->damaged) {
        int64_t k = d->k, g = d->g;
        char why[384];
        memcpy(why, d->why, sizeof why);
        sample_data_clear(d);
        d->k = k, d->g = g, d->damaged = 1;
        memcpy(d->why, why, sizeof why);
    }
}

static void* worker_main(void* arg) {
    Loader* L = arg;
    JpegCodec* jc = jpeg_codec_new();
    ZSTD_DCtx* dctx = ZSTD_createDCtx();
    pthread_mutex_lock(&L->mu);
    for (;;) {
        while (!L->stop && L->next_claim >= L->base + L->cap) {
            L->workers_waiting++;
            pthread_cond_wait(&L->cv_work, &L->mu);
            L->workers_waiting--;
        }
        if (L->stop) break;
        int64_t k = L->next_claim++;
        Slot* sl = &L->ring[k % L->cap];
        RR_ASSERT(sl->state == SLOT_EMPTY);
        sl->state = SLOT_BUSY;
        SampleData d;
        memset(&d, 0, sizeof d);
        d.k = k;
        d.g = stream_sample(L, k);
        pthread_mutex_unlock(&L->mu);
        int64_t bytes = 0;
        rr_test_pause("RRFP_TEST_READ_SLEEP_MS"); /* tests only: a loader slower than the steps */
        process_sample(L, jc, dctx, &d, &bytes);
        pthread_mutex_lock(&L->mu);
        sl->d = d;
        sl->state = SLOT_DONE;
        L->bytes_read += bytes;
        if (L->cfg.decode_images && !L->defer_decode && !d.damaged && !d.undecoded) L->images_decoded += d.n_images;
        if (L->consumer_waiting) pthread_cond_broadcast(&L->cv_done);
    }
    pthread_mutex_unlock(&L->mu);
    ZSTD_freeDCtx(dctx);
    jpeg_codec_free(jc);
    return NULL;
}

static void workers_start(Loader* L, int64_t from) {
    L->next_claim = from;
    L->base = from;
    L->stop = 0;
    L->threads = mallocCheck(sizeof(pthread_t) * (size_t)L->n_workers);
    for (int i = 0; i < L->n_workers; i++)
        if (pthread_create(&L->threads[i], NULL, worker_main, L) != 0) rr_die("pthread_create failed for a loader worker");
}

static void workers_stop(Loader* L) {
    if (!L->threads) return;
    pthread_mutex_lock(&L->mu);
    L->stop = 1;
    pthread_cond_broadcast(&L->cv_work);
    pthread_mutex_unlock(&L->mu);
    for (int i = 0; i < L->n_workers; i++) pthread_join(L->threads[i], NULL);
    free(L->threads);
    L->threads = NULL;
    for (int64_t i = 0; i < L->cap; i++) {
        sample_data_clear(&L->ring[i].d);
        L->ring[i].state = SLOT_EMPTY;
    }
}

/* Take stream position k (must be the consumer's next): waits for its worker. */
static void take(Loader* L, int64_t k, SampleData* out) {
    if (L->has_held && L->held.k == k) {
        *out = L->held;
        L->has_held = 0;
        memset(&L->held, 0, sizeof L->held);
        return;
    }
    RR_ASSERT(k == L->base);
    Slot* sl = &L->ring[k % L->cap];
    pthread_mutex_lock(&L->mu);
    if (sl->state != SLOT_DONE) {
        L->consumer_waiting = 1;
        while (sl->state != SLOT_DONE) pthread_cond_wait(&L->cv_done, &L->mu);
        L->consumer_waiting = 0;
    }
    *out = sl->d;
    memset(&sl->d, 0, sizeof sl->d);
    sl->state = SLOT_EMPTY;
    L->base = k + 1;
    if (L->workers_waiting) pthread_cond_broadcast(&L->cv_work);
    pthread_mutex_unlock(&L->mu);
}

/* ---- microbatch assembly ------------------------------------------------------------------------- */

/* patches of global image gi: its grid's, or (any-resolution) its tower images' */
static int loader_img_np(const Loader* L, int64_t gi) { return L->img_np ? L->img_np[gi] : L->grid_h[gi] * L->grid_w[gi]; }

static void assemble(Loader* L, SampleData* const* s, int S, Microbatch* mb) {
    memset(mb, 0, sizeof *mb);
    int p = L->cfg.patch, img_tok = L->shards[0].info.image_token;
    size_t row = (size_t)3 * p * p;
    int T = 0, I = 0, Np = 0, J = 0;
    int g = L->prep.kind == IMAGE_PREP_ANYRES ? L->prep.size / p : 0; /* any-resolution: tiles of g x g patches */
    for (int i = 0; i < S; i++) {
        T += L->cost_L[s[i]->g];
        J += s[i]->n_images;
        I += g ? s[i]->Np / (g * g) : s[i]->n_images; /* a tower image a tile */
        Np += s[i]->Np;
    }
    mb->S = S, mb->T = T, mb->I = I, mb->Np = Np, mb->patch = p;
    mb->cu_seqlens = mallocCheck(sizeof(int32_t) * (S + 1));
    mb->ids = mallocCheck(sizeof(int32_t) * (T ? T : 1));
    mb->targets = mallocCheck(sizeof(int32_t) * (T ? T : 1));
    mb->pos = mallocCheck(sizeof(int32_t) * (T ? T : 1));
    mb->sample_index = mallocCheck(sizeof(int64_t) * (S ? S : 1));
    mb->img_cu_patches = mallocCheck(sizeof(int32_t) * (I + 1));
    mb->grid_h = mallocCheck(sizeof(int32_t) * (I ? I : 1));
    mb->grid_w = mallocCheck(sizeof(int32_t) * (I ? I : 1));
    mb->img_lm_start = mallocCheck(sizeof(int32_t) * (I ? I : 1));
    mb->patch_row = mallocCheck(sizeof(int32_t) * (Np ? Np : 1));
    mb->patch_col = mallocCheck(sizeof(int32_t) * (Np ? Np : 1));
    if (L->cfg.decode_images) mb->patches = mallocCheck(sizeof(float) * row * (Np ? Np : 1));
    if (g) {
        mb->J = J;
        mb->ar_tile0 = mallocCheck(sizeof(int32_t) * (J + 1));
        mb->ar_size = mallocCheck(sizeof(int32_t) * 2 * (J ? J : 1));
        mb->ar_grid = mallocCheck(sizeof(int32_t) * 2 * (J ? J : 1));
        mb->ar_lm_start = mallocCheck(sizeof(int32_t) * (J ? J : 1));
        mb->ar_tile0[0] = 0;
    }
    uint8_t* sup = mallocCheck(T ? T : 1);
    int t = 0, ii = 0, np = 0, jj = 0;
    mb->img_cu_patches[0] = 0;
    for (int i = 0; i < S; i++) {
        const SampleData* d = s[i];
        mb->cu_seqlens[i] = t;
        mb->sample_index[i] = d->g;
        int start = t, k = 0;
        int64_t ib = L->img_base[d->g];
        for (int j = 0; j < d->n_tokens; j++) {
            if (d->ids[j] == img_tok && g) { /* any-resolution: its base image and tiles, its unpadded positions */
                int ntile = L->img_np[ib + k] / (g * g);
                mb->ar_size[2 * jj] = L->img_h[ib + k], mb->ar_size[2 * jj + 1] = L->img_w[ib + k];
                mb->ar_grid[2 * jj] = L->grid_h[ib + k], mb->ar_grid[2 * jj + 1] = L->grid_w[ib + k];
                mb->ar_lm_start[jj] = t;
                for (int q = 0; q < ntile; q++) {
                    mb->grid_h[ii] = mb->grid_w[ii] = g, mb->img_lm_start[ii] = t;
                    for (int r = 0; r < g * g; r++) mb->patch_row[np] = r / g, mb->patch_col[np] = r % g, np++;
                    mb->img_cu_patches[ii + 1] = np;
                    ii++;
                }
                for (int q = 0; q < L->img_pos[ib + k]; q++) mb->ids[t] = -1, sup[t] = 0, mb->pos[t] = t - start, t++;
                mb->ar_tile0[++jj] = ii;
                k++;
            } else if (d->ids[j] == img_tok) {
                int gh = L->grid_h[ib + k], gw = L->grid_w[ib + k];
                mb->grid_h[ii] = gh, mb->grid_w[ii] = gw, mb->img_lm_start[ii] = t;
                for (int r = 0; r < gh; r++)
                    for (int c = 0; c < gw; c++) {
                        mb->ids[t] = -1, sup[t] = 0, mb->pos[t] = t - start, t++;
                        mb->patch_row[np] = r, mb->patch_col[np] = c, np++;
                    }
                mb->img_cu_patches[ii + 1] = np;
                ii++, k++;
            } else {
                mb->ids[t] = d->ids[j], sup[t] = d->mask[j], mb->pos[t] = t - start, t++;
            }
        }
        for (int u = start; u < t; u++) {
            int sv = u + 1 < t && sup[u + 1];
            mb->targets[u] = sv ? mb->ids[u + 1] : -100;
            mb->n_supervised += sv;
        }
        if (mb->patches && d->Np && d->patches) /* deferred decoding writes into mb->patches later */
            memcpy(mb->patches + row * (size_t)(np - d->Np), d->patches, sizeof(float) * row * (size_t)d->Np);
        else if (mb->patches && d->Np && d->undecoded) /* zero until it is dropped from the step */
            memset(mb->patches + row * (size_t)(np - d->Np), 0, sizeof(float) * row * (size_t)d->Np);
    }
    mb->cu_seqlens[S] = t;
    RR_ASSERT(t == T && ii == I && np == Np && (!g || jj == J));
    free(sup);
}

/* ---- packing ----------------------------------------------------------------------------------------- */

static void bin_add(Bin* b, SampleData* d, int L_) {
    if (b->n == b->cap) b->v = reallocCheck(b->v, sizeof(SampleData*) * (size_t)(b->cap = b->cap ? 2 * b->cap : 8));
    b->v[b->n++] = d;
    b->tokens += L_;
}

static int cmp_sample_k(const void* a, const void* b) {
    int64_t x = (*(SampleData* const*)a)->k, y = (*(SampleData* const*)b)->k;
    return (x > y) - (x < y);
}

/* Sort keys for ffd / balanced: larger cost first, ties in stream order (a plain comparator, no
 * global context, so loaders in several threads do not share state). */
typedef struct {
    double cost;
    int64_t k;
    SampleData* d;
} SortItem;
static int cmp_decreasing(const void* a, const void* b) {
    const SortItem *x = a, *y = b;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    return (x->k > y->k) - (x->k < y->k);
}
int loader_pack_window(LoaderPolicy policy, int n, const int* cost_L, const double* cost_b, const int64_t* key,
                       int budget, int* bin_of) {
    if (policy == LOADER_POLICY_FIFO || n <= 0) return 0;
    SortItem* t = mallocCheck(sizeof(SortItem) * (size_t)n);
    int* tok = callocCheck((size_t)n, sizeof(int)); /* at most n bins */
    double* cost = callocCheck((size_t)n, sizeof(double));
    int nb = 0;
    for (int i = 0; i < n; i++) t[i] = (SortItem){(double)cost_L[i], key[i], (SampleData*)(intptr_t)i};
    qsort(t, (size_t)n, sizeof(SortItem), cmp_decreasing);
    for (int j = 0; j < n; j++) { /* first-fit decreasing */
        int i = (int)(intptr_t)t[j].d, c = cost_L[i], b = 0;
        while (b < nb && tok[b] + c > budget) b++;
        if (b == nb) nb++;
        tok[b] += c;
        bin_of[i] = b;
    }
    if (policy == LOADER_POLICY_BALANCED) {
        /* same number of bins, refilled by least cost (LPT); a new bin only when none has room */
        for (int b = 0; b < nb; b++) tok[b] = 0, cost[b] = 0;
        for (int i = 0; i < n; i++) t[i] = (SortItem){cost_b[i], key[i], (SampleData*)(intptr_t)i};
        qsort(t, (size_t)n, sizeof(SortItem), cmp_decreasing);
        for (int j = 0; j < n; j++) {
            int i = (int)(intptr_t)t[j].d, c = cost_L[i], best = -1;
            for (int b = 0; b < nb; b++)
                if (tok[b] + c <= budget && (best < 0 || cost[b] < cost[best])) best = b;
            if (best < 0) best = nb++;
            tok[best] += c;
            cost[best] += cost_b[i];
            bin_of[i] = best;
        }
    }
    free(t);
    free(tok);
    free(cost);
    return nb;
}

double loader_balanced_cost(double lm, double patches_sq, double attn_tokens) {
    return lm + (lm * lm + patches_sq) / attn_tokens;
}

static void report_damaged(Loader* L, const SampleData* d) {
    if (L->cfg.quiet) return;
    int s;
    int64_t i;
    const char* id = sample_id(L, d->g, &s, &i);
    rr_warn("data: %s sample %lld (id '%s'): %s; skipped (%lld damaged so far)", L->shards[s].path, (long long)i, id,
            d->why, (long long)(L->st.skipped_damaged + __atomic_load_n(&L->dropped, __ATOMIC_RELAXED) + 1));
}

/* Next usable sample at or after *k: skips (and counts) damaged and over-budget ones. Returns 0 with
 * *out filled, or -1 with err when damage is fatal. */
static int next_usable(Loader* L, int64_t* k, SampleData* out, char* err, size_t err_len) {
    for (int64_t skipped = 0;; skipped++) {
        if (skipped > L->per_epoch) { /* a whole epoch without one usable sample: never ends otherwise */
            snprintf(err, err_len, "no usable sample in %s: the last %lld stream positions (a whole epoch)"
                     " were all damaged or above data.microbatch_tokens = %d", L->shards_path,
                     (long long)skipped, L->cfg.microbatch_tokens);
            return -1;
        }
        take(L, *k, out);
        (*k)++;
        if (out->damaged) {
            if (L->cfg.fatal_errors) {
                int s;
                int64_t i;
                const char* id = sample_id(L, out->g, &s, &i);
                snprintf(err, err_len, "%s sample %lld (id '%s'): %s\n---> HINT: data.on_error = skip reports and skips "
                         "damaged samples", L->shards[s].path, (long long)i, id, out->why);
                sample_data_clear(out);
                return -1;
            }
            report_damaged(L, out);
            L->st.skipped_damaged++;
            sample_data_clear(out);
            continue;
        }
        if (L->cost_L[out->g] > L->cfg.microbatch_tokens) {
            L->st.skipped_oversize++;
            sample_data_clear(out);
            continue;
        }
        return 0;
    }
}

static void group_clear(Loader* L) {
    for (int i = L->grp_next; i < L->grp_n; i++) bin_free(&L->grp[i]);
    L->grp_n = L->grp_next = 0;
}

/* Form the packing group starting at L->g_end: fills L->grp. */
static int group_form(Loader* L, char* err, size_t err_len) {
    group_clear(L);
    L->g_start = L->g_end;
    L->at_group.stream_pos = L->g_start;
    L->at_group.samples = L->st.samples;
    L->at_group.skipped_damaged = L->st.skipped_damaged;
    L->at_group.skipped_oversize = L->st.skipped_oversize;
    int64_t k = L->g_start;
    int B = L->cfg.microbatch_tokens;
    int nb = 0, cap_b = 8;
    Bin* bins = callocCheck((size_t)cap_b, sizeof(Bin));
    SampleData** items = NULL;
    int n_items = 0;
    int rc = 0;
    if (L->cfg.policy == LOADER_POLICY_FIFO) {
        nb = 1;
        for (;;) {
            SampleData* d = mallocCheck(sizeof *d);
            if (next_usable(L, &k, d, err, err_len) != 0) {
                free(d);
                rc = -1;
                break;
            }
            int c = L->cost_L[d->g];
            if (bins[0].tokens + c > B) {
                L->held = *d; /* starts the next group */
                L->has_held = 1;
                free(d);
                k--;
                break;
            }
            bin_add(&bins[0], d, c);
        }
    } else {
        int W = L->cfg.window;
        items = mallocCheck(sizeof(SampleData*) * (size_t)W);
        for (; n_items < W; n_items++) {
            SampleData* d = mallocCheck(sizeof *d);
            if (next_usable(L, &k, d, err, err_len) != 0) {
                free(d);
                rc = -1;
                break;
            }
            items[n_items] = d;
        }
        if (rc == 0) {
            /* the packer proper: loader_pack_window (shared with the duration generator) */
            int* cl = mallocCheck(sizeof(int) * (size_t)(n_items ? n_items : 1));
            double* cb = mallocCheck(sizeof(double) * (size_t)(n_items ? n_items : 1));
            int64_t* key = mallocCheck(sizeof(int64_t) * (size_t)(n_items ? n_items : 1));
            int* bin_of = mallocCheck(sizeof(int) * (size_t)(n_items ? n_items : 1));
            for (int i = 0; i < n_items; i++)
                cl[i] = L->cost_L[items[i]->g], cb[i] = L->cost_b[items[i]->g], key[i] = items[i]->k;
            nb = loader_pack_window(L->cfg.policy, n_items, cl, cb, key, B, bin_of);
            if (nb > cap_b) {
                bins = reallocCheck(bins, sizeof(Bin) * (size_t)nb);
                memset(bins + cap_b, 0, sizeof(Bin) * (size_t)(nb - cap_b));
                cap_b = nb;
            }
            for (int i = 0; i < n_items; i++) {
                bin_add(&bins[bin_of[i]], items[i], cl[i]);
                bins[bin_of[i]].cost += cb[i];
            }
            free(cl);
            free(cb);
            free(key);
            free(bin_of);
        }
    }
    L->g_end = k;
    if (rc == 0) {
        /* the group keeps the bins (and so the samples); a microbatch is assembled when handed out */
        if (L->grp_cap < nb) L->grp = reallocCheck(L->grp, sizeof(Bin) * (size_t)(L->grp_cap = nb));
        for (int b = 0; b < nb; b++) {
            /* samples of a microbatch in stream order */
            qsort(bins[b].v, (size_t)bins[b].n, sizeof(SampleData*), cmp_sample_k);
            L->grp[b] = bins[b];
        }
        L->grp_n = nb;
        L->grp_next = 0;
    } else {
        if (L->cfg.policy == LOADER_POLICY_FIFO)
            for (int b = 0; b < nb; b++) bin_free(&bins[b]);
        else
            for (int i = 0; i < n_items; i++) sample_data_clear(items[i]), free(items[i]);
        for (int b = 0; b < nb; b++) free(bins[b].v);
    }
    free(items);
    free(bins);
    return rc;
}

/* ---- open / step / position ------------------------------------------------------------------------ */

/* Position after everything the planner has formed so far (its own state). */
static void planner_pos(const Loader* L, LoaderPos* pos) {
    memset(pos, 0, sizeof *pos);
    pos->config_hash = L->config_hash;
    pos->steps = L->st.steps;
    if (L->grp_next == L->grp_n) {
        /* group used up: the next step starts a fresh group at its end */
        pos->stream_pos = L->g_end;
        pos->group_done = 0;
        pos->samples = L->st.samples;
        pos->skipped_damaged = L->st.skipped_damaged;
        pos->skipped_oversize = L->st.skipped_oversize;
    } else {
        pos->stream_pos = L->g_start;
        pos->group_done = L->grp_next;
        pos->samples = L->at_group.samples;
        pos->skipped_damaged = L->at_group.skipped_damaged;
        pos->skipped_oversize = L->at_group.skipped_oversize;
    }
}

/* Decode the images of a step's kept samples (deferred decoding, planner thread) straight into their
 * assembled microbatches' patch rows, on up to data.workers threads (the planner and n_workers - 1
 * helpers, each with its own decoder, claiming a sample at a time across the step; a sample is one
 * thread's, so the result does not depend on the threads). A sample whose image does not decode gets
 * zero pixels and is marked: the other replicas and pipeline ranks planned with it, so it stays in the
 * plan and the step names it (loader.h, "Images that do not decode"). */
typedef struct {
    const SampleData* d;
    float* dst;   /* its first patch row in its microbatch */
    int bad;      /* its image `bad - 1` did not decode (why says why); 0 = decoded */
    char why[320];
} DecodeItem;
typedef struct {
    Loader* L;
    DecodeItem* v;
    int n;
    JpegCodec* jc;
    int* next; /* the next index of v to claim (atomic) */
    int n_dec;
} DecodeJob;

static void* decode_samples(void* arg) {
    DecodeJob* j = arg;
    Loader* L = j->L;
    int p = L->cfg.patch;
    size_t row = (size_t)3 * p * p;
    for (;;) {
        int i = __atomic_fetch_add(j->next, 1, __ATOMIC_RELAXED);
        if (i >= j->n) break;
        DecodeItem* it = &j->v[i];
        const SampleData* d = it->d;
        int64_t ib = L->img_base[d->g];
        size_t off = 0, at = 0;
        for (int k = 0; k < d->n_images; k++) {
            int gh = L->grid_h[ib + k], gw = L->grid_w[ib + k];
            if (image_patches_into_prep(j->jc, d->jpeg + at, d->jpeg_len[k], &L->prep, p, L->cfg.min_patches,
                                        L->cfg.max_patches, gh, gw, it->dst + off, it->why, sizeof it->why) != 0) {
                it->bad = k + 1;
                memset(it->dst, 0, sizeof(float) * row * (size_t)d->Np);
                break;
            }
            off += row * (size_t)loader_img_np(L, ib + k);
            at += d->jpeg_len[k];
            j->n_dec++;
        }
    }
    return NULL;
}

/* The step's undecoded samples in step order (microbatch, then slot), as LoaderSkip entries. */
static void undecoded_add(Loader* L, PlannedStep* ps, int* cap, int mb, int slot, const SampleData* d, const char* why) {
    if (ps->sum.n_undecoded == *cap) ps->und = reallocCheck(ps->und, sizeof(LoaderSkip) * (size_t)(*cap = *cap ? 2 * *cap : 4));
    LoaderSkip* u = &ps->und[ps->sum.n_undecoded++];
    memset(u, 0, sizeof *u);
    int s;
    int64_t li;
    const char* id = sample_id(L, d->g, &s, &li);
    u->replica = L->cfg.dp_rank, u->mb = mb, u->slot = slot, u->sample = d->g;
    snprintf(u->why, sizeof u->why, "%.200s sample %lld (id '%.100s'): %s", L->shards[s].path, (long long)li, id, why);
}

static void step_decode(Loader* L, const Bin* kept, const Microbatch* mbs, int M, PlannedStep* ps, int* cap) {
    int n = 0;
    for (int b = 0; b < M; b++) n += kept[b].n;
    DecodeItem* v = callocCheck((size_t)(n ? n : 1), sizeof(DecodeItem));
    int* mb_of = mallocCheck(sizeof(int) * 2 * (size_t)(n ? n : 1)); /* (microbatch, slot) of each item */
    size_t row = (size_t)3 * L->cfg.patch * L->cfg.patch;
    n = 0;
    for (int b = 0; b < M; b++) {
        size_t np = 0; /* patches before the sample in its microbatch (assemble's order) */
        for (int i = 0; i < kept[b].n; i++) {
            const SampleData* d = kept[b].v[i];
            if (d->jpeg && d->Np) {
                v[n].d = d, v[n].dst = mbs[b].patches + row * np;
                mb_of[2 * n] = b, mb_of[2 * n + 1] = i;
                n++;
            }
            np += (size_t)d->Np;
        }
    }
    int nt = L->n_workers < n ? L->n_workers : n;
    if (nt < 1) nt = 1;
    if (!L->p_jc) L->p_jc = callocCheck((size_t)L->n_workers, sizeof(JpegCodec*));
    DecodeJob* jobs = callocCheck((size_t)nt, sizeof(DecodeJob));
    pthread_t* th = callocCheck((size_t)nt, sizeof(pthread_t));
    int next = 0;
    for (int t = 0; t < nt; t++) {
        if (!L->p_jc[t]) L->p_jc[t] = jpeg_codec_new();
        jobs[t] = (DecodeJob){.L = L, .v = v, .n = n, .jc = L->p_jc[t], .next = &next};
    }
    for (int t = 1; t < nt; t++)
        if (pthread_create(&th[t], NULL, decode_samples, &jobs[t]) != 0) rr_die("pthread_create failed for a loader decoder");
    decode_samples(&jobs[0]);
    int n_dec = 0;
    for (int t = 0; t < nt; t++) {
        if (t > 0) pthread_join(th[t], NULL);
        n_dec += jobs[t].n_dec;
    }
    for (int i = 0; i < n; i++)
        if (v[i].bad) {
            char why[400];
            snprintf(why, sizeof why, "image %d: %s", v[i].bad - 1, v[i].why);
            undecoded_add(L, ps, cap, mb_of[2 * i], mb_of[2 * i + 1], v[i].d, why);
        }
    free(jobs);
    free(th);
    free(v);
    free(mb_of);
    pthread_mutex_lock(&L->mu);
    L->images_decoded += n_dec;
    pthread_mutex_unlock(&L->mu);
}

/* Form the next step (planner thread). Every replica plans the global step, the microbatches
 * 0 .. M*D-1 of one process with M x D microbatches, and keeps (assembles) microbatches d, d + D, ...;
 * the others are dropped unassembled. With deferred decoding the kept microbatches are assembled
 * first and their images decoded into them. Returns 0, or -1 with err (fatal damage). */
static int plan_step(Loader* L, PlannedStep* ps, char* err, size_t err_len) {
    memset(ps, 0, sizeof *ps);
    int M = L->cfg.microbatches, D = L->cfg.dp_size, d = L->cfg.dp_rank;
    Bin* kept = callocCheck((size_t)M, sizeof(Bin)); /* this replica's bins, taken out of the group */
    int m = 0, rc = 0;
    for (int g = 0; g < M * D && rc == 0; g++) {
        while (rc == 0 && L->grp_next == L->grp_n) rc = group_form(L, err, err_len);
        if (rc != 0) break;
        Bin* b = &L->grp[L->grp_next++];
        L->st.samples += b->n; /* the global count: the position is the same on every replica */
        if (g % D == d) {
            kept[m++] = *b;
            memset(b, 0, sizeof *b); /* owned by kept now */
        } else {
            bin_free(b);
        }
    }
    if (rc == 0) {
        RR_ASSERT(m == M);
        ps->mbs = callocCheck((size_t)M, sizeof(Microbatch));
        for (int j = 0; j < M; j++) assemble(L, kept[j].v, kept[j].n, &ps->mbs[j]);
        int cap = 0;
        if (L->defer_decode) {
            step_decode(L, kept, ps->mbs, M, ps, &cap);
        } else {
            for (int j = 0; j < M; j++)
                for (int i = 0; i < kept[j].n; i++)
                    if (kept[j].v[i]->undecoded) undecoded_add(L, ps, &cap, j, i, kept[j].v[i], kept[j].v[i]->why);
        }
        if (ps->sum.n_undecoded > 0 && L->cfg.fatal_errors) {
            snprintf(err, err_len, "%s\n---> HINT: data.on_error = skip reports and skips damaged samples", ps->und[0].why);
            rc = -1;
        }
    }
    for (int j = 0; j < m; j++) bin_free(&kept[j]);
    free(kept);
    if (rc != 0) {
        for (int j = 0; ps->mbs && j < M; j++) microbatch_free(&ps->mbs[j]);
        free(ps->mbs);
        free(ps->und);
        ps->mbs = NULL;
        ps->und = NULL;
        return -1;
    }
    for (int j = 0; j < M; j++) {
        const Microbatch* mb = &ps->mbs[j];
        ps->sum.n_supervised += mb->n_supervised;
        ps->sum.tokens += mb->T;
        ps->sum.patches += mb->Np;
        ps->sum.samples += mb->S;
    }
    ps->sum.M = M;
    L->st.steps++;
    L->st.microbatches += M;
    L->st.tokens += ps->sum.tokens;
    L->st.patches += ps->sum.patches;
    L->st.supervised += ps->sum.n_supervised;
    L->st.epoch = (L->g_end > 0 ? L->g_end - 1 : 0) / L->per_epoch;
    planner_pos(L, &ps->pos);
    ps->st = L->st;
    return 0;
}

static void* planner_main(void* arg) {
    Loader* L = arg;
    char err[1024];
    pthread_mutex_lock(&L->pmu);
    while (!L->p_stop) {
        while (!L->p_stop && L->q_n == PLAN_DEPTH) pthread_cond_wait(&L->cv_plan, &L->pmu);
        if (L->p_stop) break;
        pthread_mutex_unlock(&L->pmu);
        PlannedStep ps;
        int rc = plan_step(L, &ps, err, sizeof err);
        pthread_mutex_lock(&L->pmu);
        if (rc != 0) {
            L->p_failed = 1;
            snprintf(L->p_err, sizeof L->p_err, "%s", err);
            pthread_cond_broadcast(&L->cv_plan);
            break;
        }
        L->q[(L->q_head + L->q_n) % PLAN_DEPTH] = ps;
        L->q_n++;
        pthread_cond_broadcast(&L->cv_plan);
    }
    pthread_mutex_unlock(&L->pmu);
    return NULL;
}

static void planner_stop(Loader* L) {
    if (!L->planner_on) return;
    pthread_mutex_lock(&L->pmu);
    L->p_stop = 1;
    pthread_cond_broadcast(&L->cv_plan);
    pthread_mutex_unlock(&L->pmu);
    pthread_join(L->planner, NULL);
    L->planner_on = 0;
    for (int i = 0; i < L->q_n; i++) {
        PlannedStep* ps = &L->q[(L->q_head + i) % PLAN_DEPTH];
        for (int m = 0; m < ps->sum.M; m++) microbatch_free(&ps->mbs[m]);
        free(ps->mbs);
        free(ps->und);
    }
    L->q_head = L->q_n = 0;
}

static void planner_start(Loader* L) {
    L->p_stop = L->p_failed = 0;
    L->p_err[0] = 0;
    if (pthread_create(&L->planner, NULL, planner_main, L) != 0) rr_die("pthread_create failed for the loader planner");
    L->planner_on = 1;
}

/* Free the step last handed out. */
static void step_release(Loader* L) {
    for (int m = 0; m < L->step_n; m++) microbatch_free(&L->step_mbs[m]);
    free(L->step_mbs);
    free(L->step_und);
    L->step_mbs = NULL;
    L->step_und = NULL;
    L->step_n = L->step_n_und = L->step_dropped = 0;
}

static void loader_reset(Loader* L) {
    planner_stop(L);
    workers_stop(L);
    group_clear(L);
    if (L->has_held) sample_data_clear(&L->held);
    L->has_held = 0;
    step_release(L);
}

int loader_seek(Loader* L, const LoaderPos* pos, char* err, size_t err_len) {
    if (pos->config_hash != L->config_hash) {
        snprintf(err, err_len, "the saved loader position belongs to another data set or packing configuration "
                 "(hash %016" PRIx64 ", this one %016" PRIx64 "): shards, data.seed, policy, window, "
                 "microbatch_tokens, microbatches x dp (the global step), patch bounds must be those of the run "
                 "that saved it", pos->config_hash, L->config_hash);
        return -1;
    }
    if (pos->stream_pos < 0 || pos->group_done < 0) {
        snprintf(err, err_len, "invalid loader position (stream_pos %lld, group_done %lld)", (long long)pos->stream_pos,
                 (long long)pos->group_done);
        return -1;
    }
    loader_reset(L);
    L->dropped = 0; /* pos holds the drops before it */
    L->st.steps = pos->steps;
    L->st.microbatches = pos->steps * L->cfg.microbatches; /* this replica's */
    L->st.samples = pos->samples;
    L->st.skipped_damaged = pos->skipped_damaged;
    L->st.skipped_oversize = pos->skipped_oversize;
    L->g_end = pos->stream_pos;
    workers_start(L, pos->stream_pos);
    if (pos->group_done > 0) {
        if (group_form(L, err, err_len) != 0) return -1;
        if (pos->group_done > L->grp_n) {
            snprintf(err, err_len, "invalid loader position (group_done %lld, the group has %d microbatches)",
                     (long long)pos->group_done, L->grp_n);
            return -1;
        }
        for (int b = 0; b < pos->group_done; b++) {
            L->st.samples += L->grp[L->grp_next].n; /* handed out before the position was saved */
            bin_free(&L->grp[L->grp_next++]);
        }
    }
    double wait = L->pub.wait_s;
    L->pub = L->st;
    L->pub.wait_s = wait;
    L->pub_pos = *pos;
    planner_start(L);
    return 0;
}

int loader_shards_info(const char* shards, ShardInfo* info, char* first, size_t first_len, char* err, size_t err_len) {
    char** paths;
    int ns;
    if (list_shards(shards, &paths, &ns, err, err_len) != 0) return -1;
    int rc = 0;
    for (int s = 0; s < ns && rc == 0; s++) {
        Shard sh;
        if (shard_open(paths[s], &sh, err, err_len) != 0) {
            rc = -1;
            break;
        }
        const ShardInfo* in = &sh.info;
        if (s == 0) {
            *info = *in;
            snprintf(first, first_len, "%s", paths[0]);
        } else if (in->tokenizer_hash != info->tokenizer_hash || in->image_token != info->image_token ||
                   in->prep != info->prep || in->prep_size != info->prep_size ||
                   in->chat_template != info->chat_template) {
            snprintf(err, err_len, "%s and %s were packed differently (tokenizer hash %016" PRIx64 " / %016" PRIx64
                     ", <image> id %d / %d, --image-preprocess %s / %s, --template %s / %s): one folder of shards is "
                     "one pack", paths[0], paths[s], info->tokenizer_hash, in->tokenizer_hash, info->image_token,
                     in->image_token, image_prep_name((ImagePrepKind)info->prep), image_prep_name((ImagePrepKind)in->prep),
                     template_name((TemplateKind)info->chat_template), template_name((TemplateKind)in->chat_template));
            rc = -1;
        }
        shard_close(&sh);
    }
    for (int s = 0; s < ns; s++) free(paths[s]);
    free(paths);
    return rc;
}

Loader* loader_open(const LoaderConfig* cfg, const LoaderPos* resume, char* err, size_t err_len) {
    if (cfg->microbatch_tokens < 1 || cfg->microbatches < 1 || cfg->window < 1 || cfg->workers < 1 ||
        cfg->dp_size < 1 || cfg->dp_rank < 0 || cfg->dp_rank >= cfg->dp_size || cfg->patch < 1 ||
        cfg->min_patches < 1 || cfg->max_patches < cfg->min_patches) {
        snprintf(err, err_len, "invalid loader settings (microbatch_tokens %d, microbatches %d, window %d, workers %d, "
                 "dp %d of %d, patch %d, patches %d..%d)", cfg->microbatch_tokens, cfg->microbatches, cfg->window,
                 cfg->workers, cfg->dp_rank, cfg->dp_size, cfg->patch, cfg->min_patches, cfg->max_patches);
        return NULL;
    }
    char** paths;
    int ns;
    if (list_shards(cfg->shards, &paths, &ns, err, err_len) != 0) return NULL;
    Loader* L = callocCheck(1, sizeof *L);
    L->cfg = *cfg;
    snprintf(L->shards_path, sizeof L->shards_path, "%s", cfg->shards);
    L->cfg.shards = L->shards_path;
    if (L->cfg.attn_tokens <= 0) L->cfg.attn_tokens = 512;
    L->shards = callocCheck((size_t)ns, sizeof(Shard));
    L->shard_base = callocCheck((size_t)ns + 1, sizeof(int64_t));
    pthread_mutex_init(&L->mu, NULL);
    pthread_cond_init(&L->cv_work, NULL);
    pthread_cond_init(&L->cv_done, NULL);
    pthread_mutex_init(&L->pmu, NULL);
    pthread_cond_init(&L->cv_plan, NULL);
    int ok = 1;
    for (int s = 0; s < ns && ok; s++) {
        if (shard_open(paths[s], &L->shards[s], err, err_len) != 0) {
            ok = 0;
            break;
        }
        L->n_shards = s + 1;
        const ShardInfo* in = &L->shards[s].info;
        if (cfg->tokenizer_hash && in->tokenizer_hash != cfg->tokenizer_hash) {
            snprintf(err, err_len, "%s: packed with another tokenizer (hash %016" PRIx64 ", data.tokenizer has %016" PRIx64
                     ")\n---> HINT: re-pack with this tokenizer, or set data.tokenizer to the one the shards were "
                     "packed with", paths[s], in->tokenizer_hash, cfg->tokenizer_hash);
            ok = 0;
        } else if (s > 0 && in->image_token != L->shards[0].info.image_token) {
            snprintf(err, err_len, "%s: <image> token id %d differs from %s's %d", paths[s], in->image_token, paths[0],
                     L->shards[0].info.image_token);
            ok = 0;
        } else if (s > 0 && (in->prep != L->shards[0].info.prep || in->prep_size != L->shards[0].info.prep_size)) {
            snprintf(err, err_len, "%s: packed with --image-preprocess %s (size %u), %s with %s (size %u): one folder of "
                     "shards has one preprocessing", paths[s], image_prep_name((ImagePrepKind)in->prep), in->prep_size,
                     paths[0], image_prep_name((ImagePrepKind)L->shards[0].info.prep), L->shards[0].info.prep_size);
            ok = 0;
        } else if (s > 0 && in->chat_template != L->shards[0].info.chat_template) {
            snprintf(err, err_len, "%s: packed with --template %s, %s with %s: one folder of shards has one chat template",
                     paths[s], template_name((TemplateKind)in->chat_template), paths[0],
                     template_name((TemplateKind)L->shards[0].info.chat_template));
            ok = 0;
        } else if (s > 0 && memcmp(&in->pins, &L->shards[0].info.pins, sizeof in->pins) != 0) {
            snprintf(err, err_len, "%s: packed with other --grid-pinpoints than %s: one folder of shards has one", paths[s],
                     paths[0]);
            ok = 0;
        } else if (in->prep == IMAGE_PREP_LLAVA || in->prep == IMAGE_PREP_ANYRES) {
            /* the grid (a tile's under anyres) is fixed by the pack: the model's patch and patch bounds must take it */
            uint32_t g = in->prep_size / (in->patch ? in->patch : 1);
            if (in->patch != (uint32_t)cfg->patch) {
                snprintf(err, err_len, "%s: packed with --image-preprocess llava for %u-pixel patches, but model.patch is "
                         "%d\n---> HINT: re-pack with --patch %d", paths[s], in->patch, cfg->patch, cfg->patch);
                ok = 0;
            } else if ((int64_t)g * g < cfg->min_patches || (int64_t)g * g > cfg->max_patches) {
                snprintf(err, err_len, "%s: packed with --image-preprocess llava: every image is %u x %u = %u patches, "
                         "outside data.min_patches .. data.max_patches = %d .. %d\n---> HINT: set both to %u", paths[s],
                         g, g, g * g, cfg->min_patches, cfg->max_patches, g * g);
                ok = 0;
            }
        }
        L->shard_base[s + 1] = L->shard_base[s] + (int64_t)L->shards[s].n;
    }
    for (int s = 0; s < ns; s++) free(paths[s]);
    free(paths);
    if (!ok) {
        loader_close(L);
        return NULL;
    }
    L->prep.kind = (ImagePrepKind)L->shards[0].info.prep;
    L->prep.size = (int)L->shards[0].info.prep_size;
    L->prep.pins = L->shards[0].info.pins;
    L->N = L->shard_base[ns];
    L->per_epoch = L->N;
    if (L->N < 1) {
        snprintf(err, err_len, "data.shards '%s' holds no sample", cfg->shards);
        loader_close(L);
        return NULL;
    }
    L->defer_decode = cfg->decode_images && cfg->dp_size > 1;
    /* costs and grids from the index (recomputed when the loader's patch bounds differ from pack's) */
    L->cost_L = mallocCheck(sizeof(int32_t) * (size_t)L->N);
    L->cost_b = mallocCheck(sizeof(double) * (size_t)L->N);
    L->img_base = mallocCheck(sizeof(int64_t) * (size_t)(L->N + 1));
    int64_t n_img = 0;
    for (int s = 0; s < ns; s++)
        for (uint64_t i = 0; i < L->shards[s].n; i++) n_img += L->shards[s].entries[i].n_images;
    L->grid_h = mallocCheck(sizeof(uint16_t) * (size_t)(n_img ? n_img : 1));
    L->grid_w = mallocCheck(sizeof(uint16_t) * (size_t)(n_img ? n_img : 1));
    int anyres = L->prep.kind == IMAGE_PREP_ANYRES, ag = anyres ? L->prep.size / cfg->patch : 0;
    if (anyres) {
        L->img_np = mallocCheck(sizeof(int32_t) * (size_t)(n_img ? n_img : 1));
        L->img_pos = mallocCheck(sizeof(int32_t) * (size_t)(n_img ? n_img : 1));
        L->img_w = mallocCheck(sizeof(uint16_t) * (size_t)(n_img ? n_img : 1));
        L->img_h = mallocCheck(sizeof(uint16_t) * (size_t)(n_img ? n_img : 1));
    }
    uint64_t h = 0x243F6A8885A308D3ull;
#define HMIX(v) (h = rr_mix64(h ^ (uint64_t)(v)))
    /* the global step (microbatches x dp), not the replica's share, so a position resumes under any dp;
     * hashed as dp 0 of 1, so that one-process positions of earlier builds stay valid */
    HMIX(L->N), HMIX(cfg->seed), HMIX(cfg->policy), HMIX(cfg->window), HMIX(cfg->microbatch_tokens);
    HMIX((int64_t)cfg->microbatches * cfg->dp_size), HMIX(0), HMIX(1), HMIX(cfg->patch), HMIX(cfg->min_patches);
    HMIX(cfg->max_patches);
    int64_t g = 0, gi = 0, first_over = -1;
    for (int s = 0; s < ns; s++) {
        const Shard* sh = &L->shards[s];
        int same = (sh->info.patch == (uint32_t)cfg->patch && sh->info.min_patches == (uint32_t)cfg->min_patches &&
                    sh->info.max_patches == (uint32_t)cfg->max_patches) ||
                   sh->info.prep == IMAGE_PREP_LLAVA || anyres; /* LLaVA's grid is the pack's (checked above) */
        HMIX(sh->info.tokenizer_hash);
        if (sh->info.prep) HMIX(sh->info.prep), HMIX(sh->info.prep_size); /* version 2 shards only: older positions stay valid */
        for (int q = 0; q < sh->info.pins.n; q++) HMIX(sh->info.pins.hw[q][0]), HMIX(sh->info.pins.hw[q][1]); /* version 3 */
        if (sh->info.chat_template) HMIX(0x54504c ^ sh->info.chat_template); /* the same: rrfp shards hash as before */
        for (uint64_t i = 0; i < sh->n; i++, g++) {
            const ShardEntry* e = &sh->entries[i];
            L->img_base[g] = gi;
            int64_t lm = (int64_t)e->n_tokens - e->n_images;
            double sq = 0;
            for (uint32_t k = 0; k < e->n_images; k++, gi++) {
                const ShardImage* im = &sh->images[e->image0 + k];
                int gh = im->grid_h, gw = im->grid_w;
                if (!same) image_smart_resize(im->h, im->w, cfg->patch, cfg->min_patches, cfg->max_patches, &gh, &gw);
                L->grid_h[gi] = (uint16_t)gh, L->grid_w[gi] = (uint16_t)gw;
                if (anyres) { /* docs/anyres.md: the unpadded positions; a tower pass (attention) per tile */
                    AnyresLayout l;
                    char e[256];
                    if (anyres_layout_grid(im->h, im->w, gh, gw, L->prep.size, cfg->patch, ANYRES_SELECT_DEFAULT, &l, e,
                                           sizeof e) != 0) {
                        snprintf(err, err_len, "%s: sample %llu image %u: %s", sh->path, (unsigned long long)i, k, e);
                        loader_close(L);
                        return NULL;
                    }
                    L->img_np[gi] = l.n_tiles * ag * ag;
                    L->img_pos[gi] = l.n_positions;
                    L->img_w[gi] = im->w, L->img_h[gi] = im->h;
                    lm += l.n_positions;
                    sq += (double)l.n_tiles * ag * ag * ag * ag;
                    continue;
                }
                lm += gh * gw;
                sq += (double)gh * gw * gh * gw;
            }
            L->cost_L[g] = (int32_t)(lm > INT32_MAX ? INT32_MAX : lm);
            L->cost_b[g] = loader_balanced_cost((double)lm, sq, L->cfg.attn_tokens);
            HMIX(lm), HMIX(e->size), HMIX(e->n_supervised);
            if (lm > cfg->microbatch_tokens) {
                if (first_over < 0) first_over = g;
                L->oversize_total++;
            }
        }
    }
    L->img_base[L->N] = gi;
#undef HMIX
    L->config_hash = h;
    if (first_over >= 0 && !cfg->skip_oversize) {
        int s;
        int64_t i;
        const char* id = sample_id(L, first_over, &s, &i);
        const ShardEntry* e = &L->shards[s].entries[i];
        snprintf(err, err_len, "%s sample %lld (id '%s') needs %d LM positions (%u text tokens, %u image%s), above "
                 "data.microbatch_tokens = %d; %d sample%s of %lld are over the budget\n---> HINT: raise "
                 "data.microbatch_tokens or lower data.max_patches, or let the loader skip them (skip_oversize)",
                 L->shards[s].path, (long long)i, id, L->cost_L[first_over], e->n_tokens - e->n_images, e->n_images,
                 e->n_images == 1 ? "" : "s", cfg->microbatch_tokens, L->oversize_total,
                 L->oversize_total == 1 ? " is" : "s", (long long)L->N);
        loader_close(L);
        return NULL;
    }
    /* ring: the window plus a few steps of look-ahead */
    double meanL = 0;
    for (int64_t i = 0; i < L->N; i++) meanL += L->cost_L[i];
    meanL = meanL / (double)L->N;
    int64_t per_step =
        (int64_t)((double)cfg->microbatches * cfg->dp_size * cfg->microbatch_tokens / (meanL > 1 ? meanL : 1)) + 1;
    int64_t pf = cfg->prefetch > 0 ? cfg->prefetch : 4 * per_step;
    if (pf > 4096) pf = 4096;
    L->cap = (int64_t)cfg->window + pf + 2;
    L->ring = callocCheck((size_t)L->cap, sizeof(Slot));
    L->n_workers = cfg->workers;
    L->st.dataset_samples = L->N;
    L->st.shards = ns;
    LoaderPos start = {.config_hash = L->config_hash};
    if (loader_seek(L, resume ? resume : &start, err, err_len) != 0) {
        loader_close(L);
        return NULL;
    }
    return L;
}

int loader_next_step(Loader* L, LoaderStep* step, char* err, size_t err_len) {
    /* with agree_skips the caller drops the last step's undecoded samples before it asks for the next */
    RR_ASSERT(!L->cfg.agree_skips || L->step_n_und == 0 || L->step_dropped);
    step_release(L);
    memset(step, 0, sizeof *step);
    pthread_mutex_lock(&L->pmu);
    if (L->q_n == 0 && !L->p_failed) {
        double t0 = rr_now();
        while (L->q_n == 0 && !L->p_failed) pthread_cond_wait(&L->cv_plan, &L->pmu);
        L->pub.wait_s += rr_now() - t0;
    }
    if (L->q_n == 0) { /* the planner stopped on fatal damage; steps before it were handed out */
        snprintf(err, err_len, "%s", L->p_err);
        pthread_mutex_unlock(&L->pmu);
        return -1;
    }
    PlannedStep ps = L->q[L->q_head];
    L->q_head = (L->q_head + 1) % PLAN_DEPTH;
    L->q_n--;
    pthread_cond_broadcast(&L->cv_plan);
    pthread_mutex_unlock(&L->pmu);
    L->step_mbs = ps.mbs;
    L->step_n = ps.sum.M;
    L->step_und = ps.und;
    L->step_n_und = ps.sum.n_undecoded;
    *step = ps.sum;
    step->mbs = ps.mbs;
    step->undecoded = ps.und;
    double wait = L->pub.wait_s;
    L->pub = ps.st;
    L->pub.wait_s = wait;
    L->pub_pos = ps.pos;
    /* the drops of the steps before (the planner's counters do not hold them) */
    L->pub.skipped_damaged += L->dropped, L->pub_pos.skipped_damaged += L->dropped;
    L->pub.samples -= L->dropped, L->pub_pos.samples -= L->dropped;
    if (!L->cfg.agree_skips) {
        /* alone: this rank's decision is the step's */
        int n = L->step_n_und;
        if (loader_drop_samples(L, L->step_und, n, step, err, err_len) != 0) return -1;
        for (int i = 0; i < n && !L->cfg.quiet; i++)
            rr_warn("data: %s; skipped (%lld damaged so far)", L->step_und[i].why,
                    (long long)(L->pub.skipped_damaged - n + i + 1));
        step->n_undecoded = 0;
        step->undecoded = NULL;
    }
    return 0;
}

static int cmp_skip(const void* a, const void* b) {
    const LoaderSkip *x = a, *y = b;
    if (x->replica != y->replica) return x->replica < y->replica ? -1 : 1;
    if (x->mb != y->mb) return x->mb < y->mb ? -1 : 1;
    return (x->slot > y->slot) - (x->slot < y->slot);
}

int loader_drop_samples(Loader* L, const LoaderSkip* v, int n, LoaderStep* step, char* err, size_t err_len) {
    RR_ASSERT(L->step_mbs && !L->step_dropped);
    L->step_dropped = 1;
    LoaderSkip* u = mallocCheck(sizeof(LoaderSkip) * (size_t)(n ? n : 1));
    if (n) memcpy(u, v, sizeof(LoaderSkip) * (size_t)n);
    qsort(u, (size_t)n, sizeof(LoaderSkip), cmp_skip);
    uint8_t** drop = callocCheck((size_t)L->step_n, sizeof(uint8_t*));
    int64_t distinct = 0;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (i > 0 && !cmp_skip(&u[i - 1], &u[i])) continue; /* the same sample, found by another rank too */
        distinct++;
        if (u[i].replica != L->cfg.dp_rank) continue;
        const Microbatch* mb = u[i].mb >= 0 && u[i].mb < L->step_n ? &L->step_mbs[u[i].mb] : NULL;
        if (!mb || u[i].slot < 0 || u[i].slot >= mb->S || mb->sample_index[u[i].slot] != u[i].sample) {
            snprintf(err, err_len, "data: a rank dropped sample %lld (microbatch %d, slot %d) from step %lld, which this "
                     "rank's plan does not hold there: the ranks planned different steps", (long long)u[i].sample,
                     u[i].mb, u[i].slot, (long long)L->pub.steps);
            rc = -1;
            break;
        }
        if (!drop[u[i].mb]) drop[u[i].mb] = callocCheck((size_t)mb->S, 1);
        drop[u[i].mb][u[i].slot] = 1;
    }
    if (rc == 0) {
        step->n_supervised = step->tokens = step->patches = step->samples = 0;
        for (int m = 0; m < L->step_n; m++) {
            Microbatch* mb = &L->step_mbs[m];
            int flagged = 0, S = mb->S;
            for (int i = 0; drop[m] && i < S; i++) flagged += drop[m][i];
            /* a placeholder (every sample of the microbatch dropped, the first kept harmless) trains nothing:
             * not counted as a sample */
            if (flagged) step->samples -= flagged - microbatch_drop_samples(mb, drop[m]);
            step->n_supervised += mb->n_supervised;
            step->tokens += mb->T;
            step->patches += mb->Np;
            step->samples += mb->S;
        }
        __atomic_add_fetch(&L->dropped, distinct, __ATOMIC_RELAXED);
        L->pub.skipped_damaged += distinct, L->pub_pos.skipped_damaged += distinct;
        L->pub.samples -= distinct, L->pub_pos.samples -= distinct;
    }
    for (int m = 0; m < L->step_n; m++) free(drop[m]);
    free(drop);
    free(u);
    return rc;
}

void loader_get_pos(const Loader* L, LoaderPos* pos) { *pos = L->pub_pos; }

void loader_stats(const Loader* L, LoaderStats* s) {
    *s = L->pub;
    pthread_mutex_lock((pthread_mutex_t*)&L->mu);
    s->bytes_read = L->bytes_read;
    s->images_decoded = L->images_decoded;
    pthread_mutex_unlock((pthread_mutex_t*)&L->mu);
}

void loader_close(Loader* L) {
    if (!L) return;
    loader_reset(L);
    free(L->grp);
    free(L->ring);
    for (int s = 0; s < L->n_shards; s++) shard_close(&L->shards[s]);
    free(L->shards), free(L->shard_base);
    free(L->cost_L), free(L->cost_b), free(L->img_base), free(L->grid_h), free(L->grid_w);
    free(L->img_np), free(L->img_pos), free(L->img_w), free(L->img_h);
    free(L->perm[0]), free(L->perm[1]);
    for (int t = 0; L->p_jc && t < L->n_workers; t++)
        if (L->p_jc[t]) jpeg_codec_free(L->p_jc[t]);
    free(L->p_jc);
    pthread_mutex_destroy(&L->mu);
    pthread_cond_destroy(&L->cv_work);
    pthread_cond_destroy(&L->cv_done);
    pthread_mutex_destroy(&L->pmu);
    pthread_cond_destroy(&L->cv_plan);
    free(L);
}

int loader_sample_count(const Loader* L) { return (int)L->N; }
int loader_sample_tokens(const Loader* L, int64_t i) { return i >= 0 && i < L->N ? L->cost_L[i] : -1; }
const char* loader_sample_id(const Loader* L, int64_t i) { return i >= 0 && i < L->N ? sample_id(L, i, NULL, NULL) : ""; }

/* ---- position as JSON ---------------------------------------------------------------------------- */

char* loader_pos_to_json(const LoaderPos* p) {
    char buf[512];
    snprintf(buf, sizeof buf,
             "{\"stream_pos\": %lld, \"group_done\": %lld, \"steps\": %lld, \"samples\": %lld, \"skipped_damaged\": "
             "%lld, \"skipped_oversize\": %lld, \"config_hash\": \"%016" PRIx64 "\"}",
             (long long)p->stream_pos, (long long)p->group_done, (long long)p->steps, (long long)p->samples,
             (long long)p->skipped_damaged, (long long)p->skipped_oversize, p->config_hash);
    return strdup(buf);
}

int loader_pos_from_json(const char* json, LoaderPos* p, char* err, size_t err_len) {
    memset(p, 0, sizeof *p);
    cJSON* o = cJSON_Parse(json);
    if (!cJSON_IsObject(o)) {
        snprintf(err, err_len, "loader position is not a JSON object: %.80s", json);
        cJSON_Delete(o);
        return -1;
    }
    static const char* keys[] = {"stream_pos", "group_done", "steps", "samples", "skipped_damaged", "skipped_oversize"};
    int64_t* dst[] = {&p->stream_pos, &p->group_done, &p->steps, &p->samples, &p->skipped_damaged, &p->skipped_oversize};
    for (int i = 0; i < 6; i++) {
        cJSON* v = cJSON_GetObjectItemCaseSensitive(o, keys[i]);
        /* a whole number a double holds exactly: converting anything else to int64_t is undefined */
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 9007199254740992.0) ||
            v->valuedouble != floor(v->valuedouble)) {
            snprintf(err, err_len, "loader position: \"%s\" missing or not a whole number in [0, 2^53]", keys[i]);
            cJSON_Delete(o);
            return -1;
        }
        *dst[i] = (int64_t)v->valuedouble;
    }
    cJSON* h = cJSON_GetObjectItemCaseSensitive(o, "config_hash");
    char* end = NULL;
    if (!cJSON_IsString(h) || (p->config_hash = strtoull(h->valuestring, &end, 16), *end != 0)) {
        snprintf(err, err_len, "loader position: \"config_hash\" missing or not a hex string");
        cJSON_Delete(o);
        return -1;
    }
    cJSON_Delete(o);
    return 0;
}
