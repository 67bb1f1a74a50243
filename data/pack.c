/* pack.c — the pack tool (see pack.h): validate, tokenize, check every JPEG, write shards. */
#define _GNU_SOURCE
#include "data/pack.h"

#include "data/template.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/image.h"
#include "data/shard.h"
#include "engine/util.h"
#include "text/tokenizer.h"

#define PACK_MAX_SHARDS 100000

typedef struct {
    char final[4096], tmp[4112];
} ShardName;

static void progress_line(const PackConfig* c, const PackSummary* s, int64_t total, int workers, double t0, int final) {
    if (!c->progress) return;
    double dt = rr_now() - t0;
    double rate = dt > 0 ? (double)s->read / dt : 0;
    double eta = rate > 0 ? (double)(total - s->read) / rate : 0;
    fprintf(c->progress, "%spack: %lld/%lld records, %.0f records/s (%d worker%s), %.1f MiB written, ETA %.0f s%s",
            isatty(fileno(c->progress)) ? "\r" : "", (long long)s->read, (long long)total, rate, workers,
            workers == 1 ? "" : "s",
            (double)s->bytes / (1 << 20), eta, final || !isatty(fileno(c->progress)) ? "\n" : "");
    fflush(c->progress);
}

void pack_summary_print(const PackSummary* s, FILE* f) {
    fprintf(f, "pack: read %lld records, packed %lld into %d shard%s (%.2f MiB, %llu text tokens, %llu images), "
               "rejected %lld",
            (long long)s->read, (long long)s->packed, s->shards, s->shards == 1 ? "" : "s",
            (double)s->bytes / (1 << 20), (unsigned long long)s->tokens, (unsigned long long)s->images,
            (long long)s->rejected);
    int first = 1;
    for (int r = 1; r < REJECT_N; r++)
        if (s->by_reason[r]) {
            fprintf(f, "%s%s %lld", first ? ": " : ", ", reject_reason_name((RejectReason)r), (long long)s->by_reason[r]);
            first = 0;
        }
    fprintf(f, "\n");
}

/* Does the relative path `name` climb above its starting folder ("../x", "a/../../x")? Decided on
 * the text alone, before the file system is asked anything (whether a file outside exists is not
 * revealed either). */
static int path_climbs_out(const char* name) {
    int depth = 0;
    for (const char* p = name; *p;) {
        const char* q = strchr(p, '/');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (--depth < 0) return 1;
        } else if (n > 0 && !(n == 1 && p[0] == '.')) {
            depth++;
        }
        p += n + (q ? 1 : 0);
    }
    return 0;
}

/* Read and check one image; fills its metadata. images_real: realpath of the images folder (NULL with
 * allow_outside_images). Returns REJECT_NONE or a reason with why. No message quotes the file. */
static RejectReason pack_image(JpegCodec* jc, const PackConfig* c, const char* images_real, const char* name,
                               uint8_t** data, size_t* len, ShardImage* im, char* why, size_t why_len) {
    char path[PATH_MAX + 64], real[PATH_MAX];
    *data = NULL;
    if (!c->allow_outside_images && (name[0] == '/' || path_climbs_out(name))) {
        snprintf(why, why_len, "image path '%s' %s the images folder '%s' (--allow-outside-images to allow it)", name,
                 name[0] == '/' ? "is absolute, not relative to" : "leads outside", c->images_dir);
        return REJECT_OUTSIDE_IMAGES;
    }
    if (name[0] == '/') snprintf(path, sizeof path, "%s", name);
    else snprintf(path, sizeof path, "%s/%s", c->images_dir, name);
    if (images_real) { /* symbolic links: the file itself must lie inside the folder */
        if (!realpath(path, real)) {
            char eb[128]; /* strerror_r: the workers run this at once (docs/data.md "Pack") */
            snprintf(why, why_len, "image '%.1024s': %s", path, strerror_r(errno, eb, sizeof eb));
            return REJECT_MISSING_IMAGE;
        }
        size_t n = strlen(images_real);
        if (strncmp(real, images_real, n) != 0 || (real[n] != '/' && strcmp(images_real, "/") != 0)) {
            snprintf(why, why_len, "image '%.600s' resolves to '%.600s', outside the images folder '%.600s' "
                     "(--allow-outside-images to allow it)", path, real, c->images_dir);
            return REJECT_OUTSIDE_IMAGES;
        }
    }
    const char* rd = images_real ? real : path; /* read what was checked */
    struct stat st;
    if (stat(rd, &st) == 0 && !S_ISREG(st.st_mode)) { /* a folder, a device (/dev/zero never ends), a pipe */
        snprintf(why, why_len, "image '%.1024s' is %s, expected a JPEG file", path,
                 S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
        return REJECT_MISSING_IMAGE;
    }
    *data = (uint8_t*)rr_read_file(rd, len, RR_MAX_IMAGE);
    if (!*data) {
        char e[128];
        snprintf(why, why_len, "image '%.1024s': %s", path, rr_read_file_why(errno, "a JPEG file", e, sizeof e));
        return REJECT_MISSING_IMAGE;
    }
    int w, h, ow, oh;
    char e[256];
    if (image_read_header(jc, *data, *len, &w, &h, e, sizeof e) != 0) {
        snprintf(why, why_len, "image '%.1024s': %s", path, e);
        return REJECT_BAD_IMAGE;
    }
    if ((w > h ? (double)w / h : (double)h / w) > 200.0) {
        snprintf(why, why_len, "image '%.1024s': aspect ratio %dx%d is above 200 (Qwen2-VL smart_resize's limit)", path, w, h);
        return REJECT_BAD_IMAGE;
    }
    int gh, gw;
    image_prep_grid(&c->prep, h, w, c->patch, c->min_patches, c->max_patches, &gh, &gw);
    /* decode it fully, with the loader's own decode (image_decode_prep: the same scale, LLaVA's full size):
     * entropy-coded data is read to the end (a PNG: to its IEND) */
    uint8_t* rgb = image_decode_prep(jc, *data, *len, &c->prep, c->patch, gh, gw, &ow, &oh, e, sizeof e);
    if (!rgb) {
        snprintf(why, why_len, "image '%.1024s': %s", path, e);
        return REJECT_BAD_IMAGE;
    }
    free(rgb);
    im->w = (uint16_t)w, im->h = (uint16_t)h, im->grid_h = (uint16_t)gh, im->grid_w = (uint16_t)gw;
    return REJECT_NONE;
}

/* ---- one record's work (any thread) and its taking in manifest order (the writing thread) ---- */

/* The inputs every worker reads; nothing in it is written while records are in flight (the tokenizer's
 * word cache has its own mutex: text/tokenizer_encode.c). */
typedef struct {
    const PackConfig* c;
    const Manifest* m;
    const Tokenizer* tok;
    TemplateKind tmpl;
    int image_id, eot_id;
    const char* images_real;
} PackJob;

/* One record, checked, tokenized, its images read and decoded, compressed into its frame: what the writer needs. */
typedef struct {
    int index; /* the record's number in the manifest */
    RejectReason why_code;
    char why[2048];
    ManifestSample s;
    uint8_t* jpeg[SHARD_MAX_IMAGES]; /* the image files' bytes, until they are in the frame */
    ShardSampleIn in;                /* what the frame was made of (its bytes freed) and the index holds */
    ShardFrame frame;                /* the compressed sample, written as it is */
    int frame_rc;                    /* -1: shard_frame_make failed, with frame_err */
    char frame_err[256];
} PackItem;

/* Empty the item for the next record, keeping its frame's buffers (a window of slots reuses them: no large
 * allocation per record); pack_item_free frees those too. */
static void pack_item_clear(PackItem* it) {
    for (int k = 0; k < SHARD_MAX_IMAGES; k++) free(it->jpeg[k]);
    manifest_sample_free(&it->s);
    ShardFrame keep = it->frame;
    if (keep.frame_cap + keep.payload_cap > (8u << 20)) shard_frame_free(&keep); /* an outsize record's: let go */
    memset(it, 0, sizeof *it);
    it->frame = keep;
    it->frame.frame_n = 0;
}

static void pack_item_free(PackItem* it) {
    pack_item_clear(it);
    shard_frame_free(&it->frame);
}

/* Record i of the manifest into it (cleared: pack_item_clear): everything but the writing, the zstd frame
 * included. jc, cctx: this thread's codec and compression context. */
static void pack_record(const PackJob* j, JpegCodec* jc, ZSTD_CCtx* cctx, int i, PackItem* it) {
    const ManifestRecord* r = &j->m->recs[i];
    it->index = i;
    if (!r->rec) {
        it->why_code = REJECT_BAD_JSON;
        snprintf(it->why, sizeof it->why, "%s", r->json_err ? r->json_err : "invalid JSON");
    } else {
        it->why_code = manifest_sample_build_template(r->rec, r->line, j->tok, j->tmpl, j->image_id, j->eot_id, &it->s,
                                                      it->why, sizeof it->why);
    }
    for (int k = 0; it->why_code == REJECT_NONE && k < it->s.n_images; k++)
        it->why_code = pack_image(jc, j->c, j->images_real, it->s.images[k], &it->jpeg[k], &it->in.jpeg_len[k],
                                  &it->in.img[k], it->why, sizeof it->why);
    if (it->why_code != REJECT_NONE) return;
    ShardSampleIn* in = &it->in;
    const ManifestSample* s = &it->s;
    in->id = s->id;
    in->n_tokens = s->n_tokens;
    in->ids = s->ids;
    in->mask = s->mask;
    in->n_supervised = s->n_supervised;
    in->n_images = s->n_images;
    for (int k = 0; k < s->n_images; k++) in->jpeg[k] = it->jpeg[k];
    it->frame_rc = shard_frame_make(cctx, in, &it->frame, it->frame_err, sizeof it->frame_err);
    for (int k = 0; k < s->n_images; k++) { /* the frame holds them now: a window of records holds each image once */
        free(it->jpeg[k]);
        it->jpeg[k] = NULL;
        in->jpeg[k] = NULL;
    }
}

typedef struct {
    ShardInfo info;
    uint64_t shard_bytes;
    ShardName* names; /* (PACK_MAX_SHARDS) */
    ShardWriter* w;   /* the shard being written, NULL between shards */
} PackOut;

/* A record done by pack_record, taken in manifest order: counted, reported when rejected, written when not.
 * Returns 0, or -1 with err (--strict's first rejection, the reject fraction passed, a write). */
static int pack_take(const PackJob* j, PackOut* o, const PackItem* it, PackSummary* sum, char* err, size_t err_len) {
    const PackConfig* c = j->c;
    const ManifestRecord* r = &j->m->recs[it->index];
    int n = j->m->n, rc = 0;
    sum->read++;
    if (it->why_code != REJECT_NONE) {
        sum->rejected++;
        /* once past the limit no later record can bring it back under: stop here */
        int too_many = !c->strict && (double)sum->rejected > c->max_reject_fraction * (double)n;
        sum->by_reason[it->why_code]++;
        const char* id = it->s.id[0] ? it->s.id : "?";
        if (c->strict) {
            snprintf(err, err_len, "%s:%d: record '%s' rejected (%s): %s\n---> HINT: --strict makes any rejected "
                     "record fatal; without it the record is skipped and counted", c->manifest, r->line, id,
                     reject_reason_name(it->why_code), it->why);
            rc = -1;
        } else if (c->progress) {
            fprintf(c->progress, "%s%s:%d: record '%s' rejected (%s): %s\n",
                    isatty(fileno(c->progress)) ? "\r\033[K" : "", c->manifest, r->line, id,
                    reject_reason_name(it->why_code), it->why);
        }
        if (too_many) {
            snprintf(err, err_len, "%s: %lld of the %d records rejected (stopped at line %d), more than "
                     "--max-reject-fraction %g allows; no shard written\n---> HINT: the summary counts the reasons; "
                     "most records failing for one reason is usually a wrong --images folder or manifest, not bad "
                     "data (--max-reject-fraction 1 packs whatever is usable)", c->manifest,
                     (long long)sum->rejected, n, r->line, c->max_reject_fraction);
            rc = -1;
        }
        return rc;
    }
    if (o->w && shard_writer_bytes(o->w) >= o->shard_bytes) {
        rc = shard_writer_close(o->w, err, err_len);
        o->w = NULL;
    }
    if (rc == 0 && !o->w) {
        if (sum->shards == PACK_MAX_SHARDS) {
            snprintf(err, err_len, "more than %d shards: give a larger --shard-size", PACK_MAX_SHARDS);
            rc = -1;
        } else {
            ShardName* sn = &o->names[sum->shards++];
            snprintf(sn->final, sizeof sn->final, "%.4000s/shard-%05d.rrs", c->out_dir, sum->shards - 1);
            snprintf(sn->tmp, sizeof sn->tmp, "%.4096s.tmp", sn->final);
            o->w = shard_writer_open(sn->tmp, &o->info, err, err_len);
            if (!o->w) rc = -1;
        }
    }
    if (rc == 0 && it->frame_rc != 0) rc = rr_fail(err, err_len, "%s", it->frame_err);
    if (rc == 0) {
        uint64_t before = shard_writer_bytes(o->w);
        rc = shard_writer_add_frame(o->w, &it->in, &it->frame, err, err_len);
        sum->bytes += shard_writer_bytes(o->w) - before;
        sum->packed++;
        sum->tokens += (uint64_t)it->s.n_tokens;
        sum->images += (uint64_t)it->s.n_images;
    }
    return rc;
}

/* ---- the workers (--workers N > 1) ----
 * Workers take records in manifest order and fill the slots of a ring of `window` records; the writing
 * thread takes slot i % window when record i is done, so what is written, printed and counted is exactly
 * what one thread does, in the same order, whichever record finishes first. A worker takes record i
 * only below taken + window: at most `window` records' images are held at once. */
typedef struct PackPool PackPool;
struct PackPool {
    const PackJob* job;
    int n_workers, window;
    pthread_t* threads;
    PackItem* ring;  /* (window) */
    char* done;      /* (window) slot i % window holds record i, finished */
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    int next;  /* the next record a worker takes */
    int taken; /* records the writer took: slots below it are free */
    int stop;
};

static void* pack_worker(void* arg) {
    PackPool* p = arg;
    JpegCodec* jc = jpeg_codec_new(); /* TurboJPEG handles and zstd contexts are per thread (data/image.h) */
    ZSTD_CCtx* cctx = shard_cctx_new();
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->next < p->job->m->n && p->next >= p->taken + p->window)
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->stop || p->next >= p->job->m->n) break;
        int i = p->next++;
        pthread_mutex_unlock(&p->mu);
        pack_record(p->job, jc, cctx, i, &p->ring[i % p->window]);
        pthread_mutex_lock(&p->mu);
        p->done[i % p->window] = 1;
        if (i == p->taken) pthread_cond_signal(&p->done_cv); /* the writer waits for this one only */
    }
    pthread_mutex_unlock(&p->mu);
    jpeg_codec_free(jc);
    ZSTD_freeCCtx(cctx);
    return NULL;
}

static PackPool* pack_pool_start(const PackJob* job, int n_workers) {
    PackPool* p = callocCheck(1, sizeof *p);
    p->job = job;
    p->n_workers = n_workers;
    p->window = 4 * n_workers;
    p->ring = callocCheck((size_t)p->window, sizeof *p->ring);
    p->done = callocCheck((size_t)p->window, 1);
    p->threads = callocCheck((size_t)n_workers, sizeof *p->threads);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    /* SIGINT / SIGTERM go to the calling thread only (the workers start with them blocked), whose handler's
     * flag the record loop reads (PackConfig.stop) */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    for (int k = 0; k < n_workers; k++)
        if (pthread_create(&p->threads[k], NULL, pack_worker, p) != 0) rr_die("pack: cannot start worker thread %d", k);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return p;
}

/* Record i, once done (i is the one after the last taken). */
static PackItem* pack_pool_wait(PackPool* p, int i) {
    pthread_mutex_lock(&p->mu);
    RR_ASSERT(i == p->taken);
    while (!p->done[i % p->window]) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return &p->ring[i % p->window];
}

/* Record i was taken and its slot cleared (pack_item_clear): a worker may fill it with record i + window. */
static void pack_pool_release(PackPool* p, int i) {
    pthread_mutex_lock(&p->mu);
    p->done[i % p->window] = 0;
    p->taken = i + 1;
    pthread_cond_signal(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
}

/* No more records are taken: workers finish the one they hold and end; every slot is freed. */
static void pack_pool_stop(PackPool* p) {
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int k = 0; k < p->n_workers; k++) pthread_join(p->threads[k], NULL);
    for (int k = 0; k < p->window; k++) pack_item_free(&p->ring[k]);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p->threads), free(p->ring), free(p->done), free(p);
}

int pack_default_workers(void) {
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return n < 1 ? 1 : n > PACK_DEFAULT_MAX_WORKERS ? PACK_DEFAULT_MAX_WORKERS : n;
}

/* the shard record holds every template's number */
_Static_assert(TEMPLATE_N - 1 == SHARD_MAX_TEMPLATE, "data/shard.h's SHARD_MAX_TEMPLATE is the last TemplateKind");

int pack_run(const PackConfig* c, PackSummary* sum, char* err, size_t err_len) {
    memset(sum, 0, sizeof *sum);
    if (c->prep.kind == IMAGE_PREP_LLAVA &&
        (c->prep.size < c->patch || c->prep.size > 16384 || c->prep.size % c->patch || (c->prep.size / c->patch) > 255)) {
        snprintf(err, err_len, "--image-preprocess llava: --image-size %d must be a multiple of --patch %d in [%d, 16384] "
                 "with at most 255 patches a side", c->prep.size, c->patch, c->patch);
        return -1;
    }
    if (c->prep.kind == IMAGE_PREP_ANYRES) { /* the tile side (--image-size) and the grid pinpoints */
        if (c->prep.size < c->patch || c->prep.size > ANYRES_MAX_SIDE || c->prep.size % c->patch || c->prep.size / c->patch > 255)
            return rr_fail(err, err_len, "--image-preprocess anyres: --image-size %d (the tile side) must be a multiple of "
                           "--patch %d in [%d, %d] with at most 255 patches a side", c->prep.size, c->patch, c->patch,
                           ANYRES_MAX_SIDE);
        char e[256];
        if (anyres_pinpoints_check(&c->prep.pins, c->prep.size, e, sizeof e) != 0)
            return rr_fail(err, err_len, "--grid-pinpoints: %s", e);
    }
    if (c->patch < 1 || c->patch > 1024 || c->min_patches < 1 || c->max_patches < c->min_patches ||
        c->max_patches > 65535) {
        snprintf(err, err_len, "need 1 <= patch <= 1024 and 1 <= min_patches <= max_patches <= 65535 (got %d, %d, %d)",
                 c->patch, c->min_patches, c->max_patches);
        return -1;
    }
    char terr[1024];
    Tokenizer* tok = tokenizer_load(c->tokenizer, terr, sizeof terr);
    if (!tok) {
        snprintf(err, err_len, "%s", terr);
        return -1;
    }
    int image_id = tokenizer_token_id(tok, "<image>"), eot_id = tokenizer_token_id(tok, "<|endoftext|>");
    TemplateKind tmpl = TEMPLATE_RRFP;
    if (c->chat_template && template_parse(c->chat_template, &tmpl) != 0) {
        snprintf(err, err_len, "--template %s: unknown chat template; allowed: rrfp, vicuna_v1, llama_3, chatml, plain",
                 c->chat_template);
        tokenizer_free(tok);
        return -1;
    }
    if (template_check_tokenizer(tmpl, tok, terr, sizeof terr) != 0) {
        snprintf(err, err_len, "%s: %s", c->tokenizer, terr);
        tokenizer_free(tok);
        return -1;
    }
    char images_real_buf[PATH_MAX], *images_real = NULL;
    if (!c->allow_outside_images) {
        struct stat ist;
        const char* bad = !realpath(c->images_dir, images_real_buf) ? strerror(errno)
                          : stat(images_real_buf, &ist) != 0 || !S_ISDIR(ist.st_mode) ? "not a folder" : NULL;
        if (bad) {
            snprintf(err, err_len, "--images '%s': %s", c->images_dir, bad);
            tokenizer_free(tok);
            return -1;
        }
        images_real = images_real_buf;
    }
    Manifest m;
    if (manifest_load(c->manifest, &m, err, err_len) != 0) {
        tokenizer_free(tok);
        return -1;
    }
    struct stat out_st;
    int out_existed = stat(c->out_dir, &out_st) == 0;
    if (rr_mkdirs(c->out_dir) != 0) {
        snprintf(err, err_len, "cannot create the output folder '%s': %s", c->out_dir, strerror(errno));
        manifest_free(&m);
        tokenizer_free(tok);
        return -1;
    }
    ShardInfo info = {.tokenizer_hash = tokenizer_hash(tok), .image_token = image_id, .patch = (uint32_t)c->patch,
                      .min_patches = (uint32_t)c->min_patches, .max_patches = (uint32_t)c->max_patches,
                      .prep = (uint32_t)c->prep.kind, .prep_size = c->prep.kind ? (uint32_t)c->prep.size : 0,
                      .chat_template = (uint32_t)tmpl};
    if (c->prep.kind == IMAGE_PREP_ANYRES) info.pins = c->prep.pins;
    if (c->prep.kind != IMAGE_PREP_SMART) { /* every grid (every tile's under anyres) is (size / p)^2: min = max = that */
        uint32_t g = (uint32_t)(c->prep.size / c->patch);
        info.min_patches = info.max_patches = g * g;
    }
    uint64_t shard_bytes = (uint64_t)(c->shard_mb * 1048576.0);
    if (shard_bytes < 4096) shard_bytes = 4096;

    PackJob job = {.c = c, .m = &m, .tok = tok, .tmpl = tmpl, .image_id = image_id, .eot_id = eot_id,
                   .images_real = images_real};
    PackOut out = {.info = info, .shard_bytes = shard_bytes, .names = callocCheck(PACK_MAX_SHARDS, sizeof(ShardName))};
    int workers = c->workers > 0 ? c->workers : pack_default_workers();
    if (workers > m.n) workers = m.n > 0 ? m.n : 1;
    JpegCodec* jc = workers <= 1 ? jpeg_codec_new() : NULL; /* --workers 1: this thread does every record */
    ZSTD_CCtx* cctx = workers <= 1 ? shard_cctx_new() : NULL;
    PackPool* pool = workers > 1 ? pack_pool_start(&job, workers) : NULL;
    PackItem* one = pool ? NULL : callocCheck(1, sizeof *one);
    int rc = 0, renamed = 0; /* renamed: the shards renamed to their final names */
    double t0 = rr_now(), last = t0;
    for (int i = 0; i < m.n && rc == 0; i++) {
        if (c->stop && *c->stop) {
            rc = rr_fail(err, err_len, "interrupted by signal %d after %lld of the %d records; no shard written",
                         (int)*c->stop, (long long)sum->read, m.n);
            break;
        }
        PackItem* it = pool ? pack_pool_wait(pool, i) : one;
        if (!pool) pack_record(&job, jc, cctx, i, it);
        rc = pack_take(&job, &out, it, sum, err, err_len);
        pack_item_clear(it);
        if (pool) pack_pool_release(pool, i);
        double now = rr_now();
        if (now - last > (c->progress && isatty(fileno(c->progress)) ? 0.5 : 10.0)) {
            progress_line(c, sum, m.n, workers, t0, 0);
            last = now;
        }
    }
    if (pool) pack_pool_stop(pool); /* workers past the last record taken finish theirs and are dropped */
    if (one) pack_item_free(one);
    free(one);
    ShardWriter* w = out.w;
    ShardName* names = out.names;
    if (rc == 0 && sum->packed == 0) {
        snprintf(err, err_len, "%s: no record could be packed (%lld read, all rejected)", c->manifest,
                 (long long)sum->read);
        rc = -1;
    }
    if (rc == 0 && w) {
        rc = shard_writer_close(w, err, err_len);
        w = NULL;
    }
    if (rc == 0 && c->stop && *c->stop) /* between the last record and the renames: still nothing finished */
        rc = rr_fail(err, err_len, "interrupted by signal %d after the last record; no shard written", (int)*c->stop);
    if (w) shard_writer_abort(w);
    if (rc == 0) {
        sum->bytes = 0;
        for (int k = 0; k < sum->shards; k++) {
            struct stat st;
            if (stat(names[k].tmp, &st) == 0) sum->bytes += (uint64_t)st.st_size;
        }
        progress_line(c, sum, m.n, workers, t0, 1);
        for (int k = 0; k < sum->shards && rc == 0; k++, renamed++)
            if (rename(names[k].tmp, names[k].final) != 0) {
                snprintf(err, err_len, "cannot rename '%s' to '%s': %s", names[k].tmp, names[k].final, strerror(errno));
                rc = -1;
                break;
            }
        /* shard-*.rrs left from an earlier, larger pack into the same folder would join this data set */
        DIR* d = rc == 0 ? opendir(c->out_dir) : NULL;
        if (rc == 0 && !d)
            rc = rr_fail(err, err_len, "cannot list '%s' for shards of an earlier pack to remove: %s", c->out_dir,
                         strerror(errno));
        for (struct dirent* de; d && (de = readdir(d));) {
            int k;
            size_t nl = strlen(de->d_name);
            if (sscanf(de->d_name, "shard-%d.rrs", &k) == 1 && nl > 4 && !strcmp(de->d_name + nl - 4, ".rrs") &&
                k >= sum->shards) {
                char p[4400];
                snprintf(p, sizeof p, "%s/%s", c->out_dir, de->d_name);
                unlink(p);
            }
        }
        if (d) closedir(d);
        /* the renames are durable once the folder is */
        if (rc == 0 && rr_fsync_dir(c->out_dir) != 0)
            rc = rr_fail(err, err_len, "cannot fsync folder '%s' after renaming the shards into it: %s (they may not "
                         "survive a power loss)", c->out_dir, strerror(errno));
    }
    if (rc != 0) {
        /* a failure after some renames: the shards renamed are this run's and go too (a data set of some of
           them, beside an earlier pack's, would be taken whole) */
        for (int k = 0; k < renamed; k++) unlink(names[k].final);
        for (int k = 0; k < sum->shards; k++) unlink(names[k].tmp);
        if (!out_existed) rmdir(c->out_dir); /* made by this run, and empty now */
        sum->shards = 0, sum->bytes = 0;      /* for the summary: nothing was written */
    }
    free(names);
    if (jc) jpeg_codec_free(jc);
    ZSTD_freeCCtx(cctx); /* NULL: nothing */
    manifest_free(&m);
    tokenizer_free(tok);
    return rc;
}
