/* checkpoint.c — checkpoint folders of safetensors + state.json, written atomically (see
 * checkpoint.h). Values go through the backend's copy functions so device-resident tables work. */
#define _GNU_SOURCE
#include "engine/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/safetensors.h"

static void ck_err(char* err, size_t n, const char* fmt, ...) RR_PRINTF(3, 4);
static void ck_err(char* err, size_t n, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

void checkpoint_state_free(CheckpointState* st) {
    free(st->loader);
    st->loader = NULL;
}

static int ck_on_host(const ParamTable* pt) { return !pt->be || !strcmp(pt->be->name, "cpu"); }

/* A host copy of one of pt's blocks (or the block itself on the CPU backend). */
static float* ck_host_view(const ParamTable* pt, const float* block, size_t n, int* owned) {
    *owned = 0;
    if (!block) return NULL;
    if (ck_on_host(pt)) return (float*)block;
    float* h = mallocCheck((n ? n : 1) * sizeof(float));
    pt->be->copy_d2h(pt->be, h, block, n * sizeof(float));
    *owned = 1;
    return h;
}

static void ck_file_name(char* out, size_t n, const char* dir, const char* base, const char* shard) {
    if (shard) snprintf(out, n, "%s/%s.%s.safetensors", dir, base, shard);
    else snprintf(out, n, "%s/%s.safetensors", dir, base);
}

static void ck_rm_rf(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return;
    struct dirent* e;
    char p[4096];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void ck_fsync_dir(const char* dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* The first value of x[0..n) that no training state can hold: not finite, or (nonneg) below zero.
 * Returns its index, or -1 when every value is fine. */
static int64_t ck_bad_value(const float* x, size_t n, int nonneg) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || (nonneg && x[i] < 0.0f)) return (int64_t)i;
    return -1;
}

static const char* ck_value_kind(float x) { return isnan(x) ? "a NaN" : isinf(x) ? "an infinite" : "a negative"; }

/* The checksum of a tensor's bytes as stored in the metadata: "xxh64.<name>" -> 16 hex digits. */
static void ck_checksum_key(char* key, size_t n, const char* name) { snprintf(key, n, "xxh64.%s", name); }

/* Add one F32 tensor and its checksum to w, after checking its values. */
static int ck_add_checked(StWriter* w, const ParamSpec* s, const char* name, const float* x, int nonneg, int64_t step,
                          char* err, size_t err_len) {
    int64_t bad = ck_bad_value(x, s->numel, nonneg);
    if (bad >= 0) {
        ck_err(err, err_len, "refusing to write the checkpoint of step %lld: tensor '%s' holds %s value (%g at "
               "element %lld); the run has diverged or its state is damaged, and the last good checkpoint stays the "
               "newest", (long long)step, name, ck_value_kind(x[bad]), (double)x[bad], (long long)bad);
        return -1;
    }
    char key[200], hx[24];
    ck_checksum_key(key, sizeof key, name);
    snprintf(hx, sizeof hx, "%016" PRIx64, rr_xxh64(x, s->numel * sizeof(float), 0));
    st_writer_add(w, name, DTYPE_F32, s->ndim, s->shape, x);
    st_writer_meta(w, key, hx);
    return 0;
}

/* Write model[.shard].safetensors and optimizer[.shard].safetensors of pt into folder dir. */
static int ck_write_tensors(const char* dir, const ParamTable* pt, int64_t step, const char* shard, char* err,
                            size_t err_len) {
    char path[4200];
    int own_d, own_m, own_v;
    float* data = ck_host_view(pt, pt->data, pt->total, &own_d);
    float* m = ck_host_view(pt, pt->m, pt->gtotal, &own_m);
    float* v = ck_host_view(pt, pt->v, pt->gtotal, &own_v);
    float* zeros = NULL;
    if (!m || !v) zeros = callocCheck(pt->gtotal ? pt->gtotal : 1, sizeof(float));
    char step_s[32];
    snprintf(step_s, sizeof step_s, "%lld", (long long)step);

    StWriter* w = st_writer_new();
    StWriter* wo = st_writer_new();
    st_writer_meta(w, "format", "rrfp-mm");
    st_writer_meta(w, "step", step_s);
    st_writer_meta(wo, "format", "rrfp-mm-adamw");
    st_writer_meta(wo, "step", step_s);
    char name[160];
    int rc = 0;
    char skey[200], sval[256];
    for (int i = 0; i < pt->n && rc == 0; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (pt->omit_replicated && !params_is_slice(s)) continue; /* TP rank 0 writes the replicated tensors */
        int sliced = params_slice_format(s, sval, sizeof sval);
        rc = ck_add_checked(w, s, s->name, data + s->offset, 0, step, err, err_len);
        if (sliced) {
            snprintf(skey, sizeof skey, "slice.%s", s->name);
            st_writer_meta(w, skey, sval);
        }
        if (s->frozen) continue; /* a frozen tensor has no AdamW state */
        snprintf(name, sizeof name, "m.%s", s->name);
        if (rc == 0) rc = ck_add_checked(wo, s, name, (m ? m : zeros) + s->goff, 0, step, err, err_len);
        if (sliced) {
            snprintf(skey, sizeof skey, "slice.%s", name);
            st_writer_meta(wo, skey, sval);
        }
        snprintf(name, sizeof name, "v.%s", s->name);
        if (rc == 0) rc = ck_add_checked(wo, s, name, (v ? v : zeros) + s->goff, 1, step, err, err_len);
        if (sliced) {
            snprintf(skey, sizeof skey, "slice.%s", name);
            st_writer_meta(wo, skey, sval);
        }
    }
    ck_file_name(path, sizeof path, dir, "model", shard);
    if (rc == 0) rc = st_writer_write(w, path, err, err_len);
    if (rc == 0) {
        ck_file_name(path, sizeof path, dir, "optimizer", shard);
        rc = st_writer_write(wo, path, err, err_len);
    }
    st_writer_free(w);
    st_writer_free(wo);
    if (own_d) free(data);
    if (own_m) free(m);
    if (own_v) free(v);
    free(zeros);
    return rc;
}

/* Write dir/state.json (last, so a folder with state.json has every file) naming the files of the
 * given shards (NULL entry = the unsharded pair). */
static int ck_write_state(const char* dir, const CheckpointState* st, const char* const* shards, int n_shards,
                          char* err, size_t err_len) {
    char path[4200];
    int rc = 0;
    cJSON* j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "rrfp-mm-checkpoint");
    cJSON_AddNumberToObject(j, "version", CHECKPOINT_VERSION);
    cJSON_AddNumberToObject(j, "step", (double)st->step);
    cJSON_AddNumberToObject(j, "optimizer_step", (double)st->opt_step);
    char hx[32];
    /* 64-bit values as hex strings: JSON numbers are doubles */
    snprintf(hx, sizeof hx, "%016llx", (unsigned long long)st->recipe_hash);
    cJSON_AddStringToObject(j, "recipe_hash", hx);
    snprintf(hx, sizeof hx, "%llu", (unsigned long long)st->seed);
    cJSON_AddStringToObject(j, "seed", hx);
    snprintf(hx, sizeof hx, "%llu", (unsigned long long)st->data_seed);
    cJSON_AddStringToObject(j, "data_seed", hx);
    if (st->run_id[0]) cJSON_AddStringToObject(j, "run_id", st->run_id);
    cJSON* lj = st->loader ? cJSON_Parse(st->loader) : cJSON_CreateNull();
    if (!lj) {
        ck_err(err, err_len, "internal error: the loader position is not JSON: %.200s", st->loader);
        rc = -1;
        lj = cJSON_CreateNull();
    }
    cJSON_AddItemToObject(j, "loader", lj);
    cJSON* files = cJSON_AddArrayToObject(j, "files");
    for (int i = 0; i < n_shards; i++) {
        ck_file_name(path, sizeof path, ".", "model", shards[i]);
        cJSON_AddItemToArray(files, cJSON_CreateString(path + 2));
        ck_file_name(path, sizeof path, ".", "optimizer", shards[i]);
        cJSON_AddItemToArray(files, cJSON_CreateString(path + 2));
    }
    char* text = cJSON_Print(j);
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/state.json", dir);
    if (rc == 0 && rr_write_file_atomic(path, text, strlen(text)) != 0) {
        ck_err(err, err_len, "cannot write '%s': %s", path, strerror(errno));
        rc = -1;
    }
    free(text);
    return rc;
}

/* Rename the complete temporary folder to ROOT/step-N (replacing an older one of the same step). */
static int ck_finalize(const char* root, const char* tmp, int64_t step, char* out_dir, size_t out_len, char* err,
                       size_t err_len) {
    char final[4096];
    snprintf(final, sizeof final, "%s/step-%08lld", root, (long long)step);
    struct stat sb;
    if (stat(final, &sb) == 0) { /* a re-run after resume */
        char old[4200];
        snprintf(old, sizeof old, "%s/.old.%d", root, (int)getpid());
        if (rename(final, old) == 0) ck_rm_rf(old);
    }
    if (rename(tmp, final) != 0) {
        ck_err(err, err_len, "cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
        return -1;
    }
    ck_fsync_dir(root);
    if (out_dir) snprintf(out_dir, out_len, "%s", final);
    return 0;
}

int checkpoint_save(const char* root, const ParamTable* pt, const CheckpointState* st, const char* shard,
                    char* out_dir, size_t out_len, char* err, size_t err_len) {
    if (rr_mkdirs(root) != 0) {
        ck_err(err, err_len, "cannot create checkpoint folder '%s': %s", root, strerror(errno));
        return -1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/.step-%08lld.tmp.%d", root, (long long)st->step, (int)getpid());
    ck_rm_rf(tmp);
    if (mkdir(tmp, 0755) != 0) {
        ck_err(err, err_len, "cannot create '%s': %s", tmp, strerror(errno));
        return -1;
    }
    const char* shards[1] = {shard};
    int rc = ck_write_tensors(tmp, pt, st->step, shard, err, err_len);
    if (rc == 0) rc = ck_write_state(tmp, st, shards, 1, err, err_len);
    if (rc == 0) rc = ck_finalize(root, tmp, st->step, out_dir, out_len, err, err_len);
    if (rc != 0) ck_rm_rf(tmp);
    return rc;
}

void checkpoint_shard_tmp_name(char* tmp, size_t tmp_len, const char* root, int64_t step, int pid) {
    snprintf(tmp, tmp_len, "%s/.step-%08lld.tmp.shards.%d", root, (long long)step, pid);
}

int checkpoint_shard_begin(const char* root, int64_t step, char* tmp, size_t tmp_len, char* err, size_t err_len) {
    checkpoint_shard_tmp_name(tmp, tmp_len, root, step, (int)getpid());
    if (rr_mkdirs(root) != 0) {
        ck_err(err, err_len, "cannot create checkpoint folder '%s': %s", root, strerror(errno));
        return -1;
    }
    ck_rm_rf(tmp);
    if (mkdir(tmp, 0755) != 0) {
        ck_err(err, err_len, "cannot create '%s': %s", tmp, strerror(errno));
        return -1;
    }
    return 0;
}

int checkpoint_shard_write(const char* tmp, const ParamTable* pt, int64_t step, const char* shard, char* err,
                           size_t err_len) {
    return ck_write_tensors(tmp, pt, step, shard, err, err_len);
}

int checkpoint_shard_commit(const char* root, const char* tmp, const CheckpointState* st, const char* const* shards,
                            int n_shards, char* out_dir, size_t out_len, char* err, size_t err_len) {
    int rc = ck_write_state(tmp, st, shards, n_shards, err, err_len);
    if (rc == 0) rc = ck_finalize(root, tmp, st->step, out_dir, out_len, err, err_len);
    if (rc != 0) ck_rm_rf(tmp);
    return rc;
}

void checkpoint_shard_abort(const char* tmp) { ck_rm_rf(tmp); }

/* Check one tensor just read from f into x: values (finite; nonneg: AdamW's v >= 0), then the
 * checksum of its bytes in the file. Values first: a NaN is named as such, not as a checksum failure. */
static int ck_check_loaded(const StFile* f, const char* name, const float* x, size_t n, int nonneg, char* err,
                           size_t err_len) {
    int64_t bad = ck_bad_value(x, n, nonneg);
    if (bad >= 0) {
        ck_err(err, err_len, "%s: tensor '%s' holds %s value (%g at element %lld)%s: the checkpoint is damaged, "
               "refusing to load it", f->path, name, ck_value_kind(x[bad]), (double)x[bad], (long long)bad,
               nonneg && !isnan(x[bad]) && !isinf(x[bad]) ? " but an AdamW second moment is never negative" : "");
        return -1;
    }
    char key[200];
    ck_checksum_key(key, sizeof key, name);
    const char* want = st_meta(f, key);
    const StTensor* t = st_find(f, name);
    RR_ASSERT(t);
    uint64_t stored = 0, got = rr_xxh64(t->data, t->end - t->begin, 0);
    char* end = NULL;
    if (want) stored = strtoull(want, &end, 16);
    if (!want || strlen(want) != 16 || *end) {
        ck_err(err, err_len, "%s: tensor '%s' has no checksum (\"%s\" missing or malformed in __metadata__): "
               "not a checkpoint written by this build, or a damaged header", f->path, name, key);
        return -1;
    }
    if (stored != got) {
        ck_err(err, err_len, "%s: tensor '%s' fails its checksum (xxh64 %016" PRIx64 " stored, %016" PRIx64
               " computed): the file is damaged (a flipped bit on disk or in transfer), refusing to load it", f->path,
               name, stored, got);
        return -1;
    }
    return 0;
}

int checkpoint_read_assembled(const StFile* f, int nf, const char* name, const ParamSlice* want, int ndim,
                              const int64_t* shape, float* out, int check, int nonneg, char* err, size_t err_len) {
    char key[200];
    snprintf(key, sizeof key, "slice.%s", name);
    int64_t lnumel = 1;
    for (int i = 0; i < ndim; i++) lnumel *= shape[i];
    int d = want->dim; /* the dimension the pieces are cut along (found from the first sliced piece) */
    uint8_t* covered = NULL;
    int64_t wlen = 0, found = 0;
    float* tmp = NULL;
    int rc = 0;
    for (int k = 0; k < nf && rc == 0; k++) {
        const StTensor* t = st_find(&f[k], name);
        if (!t) continue;
        found++;
        ParamSlice fs = {.dim = -1};
        int fnd = t->ndim;
        const char* mv = st_meta(&f[k], key);
        if (mv && params_slice_parse(mv, &fs, &fnd) != 0) {
            ck_err(err, err_len, "%s: tensor '%s': malformed slice description '%s'", f[k].path, name, mv);
            rc = -1;
            break;
        }
        if (fs.dim < 0)
            for (int i = 0; i < t->ndim; i++) fs.gshape[i] = t->shape[i];
        if (want->dim < 0 && fs.dim < 0) { /* whole from whole: the common case */
            rc = st_read_f32(&f[k], name, out, ndim, shape, err, err_len);
            if (rc == 0 && check) rc = ck_check_loaded(&f[k], name, out, (size_t)lnumel, nonneg, err, err_len);
            free(covered);
            return rc;
        }
        const int64_t* wg = want->dim < 0 ? shape : want->gshape;
        int same = fnd == ndim;
        for (int i = 0; same && i < ndim; i++) same = fs.gshape[i] == wg[i];
        if (!same) {
            ck_err(err, err_len, "%s: tensor '%s' is a piece of a tensor of another shape than this model's", f[k].path,
                   name);
            rc = -1;
            break;
        }
        if (d < 0) d = fs.dim;
        if (fs.dim >= 0 && fs.dim != d) {
            ck_err(err, err_len, "%s: tensor '%s' is cut along dimension %d, expected %d", f[k].path, name, fs.dim, d);
            rc = -1;
            break;
        }
        /* ranges along d: the wanted ones (storage order) and the piece's */
        int wn = want->dim < 0 ? 1 : want->n, pn = fs.dim < 0 ? 1 : fs.n;
        int64_t wo[PARAM_MAX_RANGES], wl[PARAM_MAX_RANGES], po[PARAM_MAX_RANGES], pl[PARAM_MAX_RANGES];
        for (int r = 0; r < wn; r++) wo[r] = want->dim < 0 ? 0 : want->off[r], wl[r] = want->dim < 0 ? wg[d] : want->len[r];
        for (int r = 0; r < pn; r++) po[r] = fs.dim < 0 ? 0 : fs.off[r], pl[r] = fs.dim < 0 ? wg[d] : fs.len[r];
        int64_t Wd = 0, Pd = 0, outer = 1, inner = 1;
        for (int r = 0; r < wn; r++) Wd += wl[r];
        for (int r = 0; r < pn; r++) Pd += pl[r];
        for (int i = 0; i < d; i++) outer *= wg[i];
        for (int i = d + 1; i < ndim; i++) inner *= wg[i];
        if (!covered) {
            wlen = Wd;
            covered = callocCheck((size_t)Wd + 1, 1);
        }
        int64_t pnumel = 1;
        for (int i = 0; i < t->ndim; i++) pnumel *= t->shape[i];
        if (pnumel != outer * Pd * inner) {
            ck_err(err, err_len, "%s: tensor '%s': its shape does not match its slice description", f[k].path, name);
            rc = -1;
            break;
        }
        tmp = reallocCheck(tmp, (size_t)pnumel * sizeof(float) + 1);
        rc = st_read_f32(&f[k], name, tmp, t->ndim, t->shape, err, err_len);
        if (rc == 0 && check) rc = ck_check_loaded(&f[k], name, tmp, (size_t)pnumel, nonneg, err, err_len);
        if (rc != 0) break;
        for (int a = 0, wpos = 0; a < wn; wpos += (int)wl[a], a++)
            for (int b = 0, ppos = 0; b < pn; ppos += (int)pl[b], b++) {
                int64_t lo = wo[a] > po[b] ? wo[a] : po[b];
                int64_t hi = wo[a] + wl[a] < po[b] + pl[b] ? wo[a] + wl[a] : po[b] + pl[b];
                if (lo >= hi) continue;
                for (int64_t o = 0; o < outer; o++)
                    memcpy(out + (o * Wd + wpos + lo - wo[a]) * inner, tmp + (o * Pd + ppos + lo - po[b]) * inner,
                           (size_t)((hi - lo) * inner) * sizeof(float));
                memset(covered + wpos + lo - wo[a], 1, (size_t)(hi - lo));
            }
    }
    if (rc == 0 && !found) {
        ck_err(err, err_len, "%s: tensor '%s' is missing (in none of its %d shard file(s))", nf > 0 ? f[0].path : "?", name, nf);
        rc = -1;
    }
    for (int64_t i = 0; rc == 0 && i < wlen; i++)
        if (!covered[i]) {
            ck_err(err, err_len, "%s: tensor %s: index %lld of dimension %d (of this model's part) is in none of the "
                   "%d file(s) (a shard is missing)", f[0].path, name, (long long)i, d, nf);
            rc = -1;
        }
    free(covered);
    free(tmp);
    return rc;
}

/* Read every tensor of pt (names with `prefix`) into block, each from whichever of the n files holds
 * it, or assembled from the pieces several files hold: checkpoint shards of any pipeline x tensor
 * parallel layout keep global names (and record their slices), so a stage reads its own part of each
 * tensor from the shards of another layout. */
static int ck_read_block(const StFile* f, int nf, const ParamTable* pt, float* block, const char* prefix, char* err,
                         size_t err_len) {
    /* values: every tensor at offset; moments ("m." / "v."): the trainable ones at goff */
    int moments = prefix[0] != 0;
    size_t n = moments ? pt->gtotal : pt->total;
    int owned = 0;
    float* h = block;
    if (!ck_on_host(pt)) {
        h = mallocCheck((n ? n : 1) * sizeof(float));
        owned = 1;
    }
    char name[160];
    int rc = 0;
    for (int i = 0; i < pt->n && rc == 0; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (moments && s->frozen) continue;
        snprintf(name, sizeof name, "%s%s", prefix, s->name);
        ParamSlice whole = {.dim = -1};
        rc = checkpoint_read_assembled(f, nf, name, params_is_slice(s) ? &s->slice : &whole, s->ndim, s->shape,
                                       h + (moments ? s->goff : s->offset), 1,
                                       !strcmp(prefix, "v."), err, err_len);
    }
    if (owned) {
        if (rc == 0) pt->be->copy_h2d(pt->be, block, h, n * sizeof(float));
        free(h);
    }
    return rc;
}

/* Load the files of state.json's "files" list whose names start with `base` ("model" / "optimizer"),
 * or, with `shard`, just base.shard.safetensors. Returns the count, or -1 with a message. */
static int ck_load_files(const char* dir, const cJSON* files, const char* base, const char* shard, StFile** out,
                         char* err, size_t err_len) {
    char path[4200];
    *out = NULL;
    int n = 0;
    if (shard || !cJSON_IsArray(files)) {
        *out = callocCheck(1, sizeof(StFile));
        ck_file_name(path, sizeof path, dir, base, shard);
        if (st_load(&(*out)[0], path, err, err_len) != 0) {
            free(*out);
            *out = NULL;
            return -1;
        }
        return 1;
    }
    *out = callocCheck((size_t)cJSON_GetArraySize(files) + 1, sizeof(StFile));
    const cJSON* e;
    cJSON_ArrayForEach(e, files) {
        if (!cJSON_IsString(e) || strncmp(e->valuestring, base, strlen(base)) != 0) continue;
        if (strchr(e->valuestring, '/')) continue; /* only files inside the folder */
        snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
        if (st_load(&(*out)[n], path, err, err_len) != 0) {
            for (int i = 0; i < n; i++) st_free(&(*out)[i]);
            free(*out);
            *out = NULL;
            return -1;
        }
        n++;
    }
    if (n == 0) {
        ck_err(err, err_len, "%s/state.json lists no %s files", dir, base);
        free(*out);
        *out = NULL;
        return -1;
    }
    return n;
}

static void ck_free_files(StFile* f, int n) {
    for (int i = 0; i < n; i++) st_free(&f[i]);
    free(f);
}

static int ck_json_u64(const cJSON* j, const char* key, int hex, uint64_t* out) {
    const cJSON* x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsString(x)) return -1;
    char* end;
    errno = 0;
    *out = strtoull(x->valuestring, &end, hex ? 16 : 10);
    return (*end || errno) ? -1 : 0;
}

int checkpoint_load(const char* dir, ParamTable* pt, CheckpointState* st, const char* shard, char* err,
                    size_t err_len) {
    memset(st, 0, sizeof *st);
    char path[4200];
    snprintf(path, sizeof path, "%s/state.json", dir);
    size_t n;
    char* text = rr_read_file(path, &n);
    if (!text) {
        char why[128];
        ck_err(err, err_len, "%s: cannot read: %s (not a checkpoint folder?)", path,
               rr_read_file_why(errno, "a JSON file", why, sizeof why));
        return -1;
    }
    cJSON* j = cJSON_ParseWithLength(text, n);
    free(text);
    const cJSON* fmt = j ? cJSON_GetObjectItemCaseSensitive(j, "format") : NULL;
    const cJSON* ver = j ? cJSON_GetObjectItemCaseSensitive(j, "version") : NULL;
    const cJSON* stp = j ? cJSON_GetObjectItemCaseSensitive(j, "step") : NULL;
    const cJSON* ost = j ? cJSON_GetObjectItemCaseSensitive(j, "optimizer_step") : NULL;
    if (!j || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "rrfp-mm-checkpoint") != 0) {
        ck_err(err, err_len, "%s: not an rrfp-mm checkpoint state (bad JSON or \"format\")", path);
        cJSON_Delete(j);
        return -1;
    }
    if (!cJSON_IsNumber(ver) || ver->valueint != CHECKPOINT_VERSION) {
        ck_err(err, err_len, "%s: checkpoint version %d, this build reads version %d only (version 2 added "
               "per-tensor checksums); resume it with the build that wrote it, or start the run again", path,
               cJSON_IsNumber(ver) ? ver->valueint : -1, CHECKPOINT_VERSION);
        cJSON_Delete(j);
        return -1;
    }
    if (!cJSON_IsNumber(stp) || !cJSON_IsNumber(ost) || ck_json_u64(j, "recipe_hash", 1, &st->recipe_hash) ||
        ck_json_u64(j, "seed", 0, &st->seed) || ck_json_u64(j, "data_seed", 0, &st->data_seed)) {
        ck_err(err, err_len, "%s: missing or malformed step / optimizer_step / recipe_hash / seed / data_seed", path);
        cJSON_Delete(j);
        return -1;
    }
    st->step = (int64_t)stp->valuedouble;
    st->opt_step = (int64_t)ost->valuedouble;
    const cJSON* rid = cJSON_GetObjectItemCaseSensitive(j, "run_id");
    if (cJSON_IsString(rid)) snprintf(st->run_id, sizeof st->run_id, "%s", rid->valuestring);
    const cJSON* lj = cJSON_GetObjectItemCaseSensitive(j, "loader");
    if (lj && !cJSON_IsNull(lj)) st->loader = cJSON_PrintUnformatted(lj);
    const cJSON* files = cJSON_GetObjectItemCaseSensitive(j, "files");

    StFile* f = NULL;
    int nf = ck_load_files(dir, files, "model", shard, &f, err, err_len);
    if (nf < 0) goto fail;
    int rc = ck_read_block(f, nf, pt, pt->data, "", err, err_len);
    ck_free_files(f, nf);
    if (rc) goto fail;
    params_refresh_compute(pt);
    if (pt->m && pt->v) {
        nf = ck_load_files(dir, files, "optimizer", shard, &f, err, err_len);
        if (nf < 0) goto fail;
        rc = ck_read_block(f, nf, pt, pt->m, "m.", err, err_len);
        if (rc == 0) rc = ck_read_block(f, nf, pt, pt->v, "v.", err, err_len);
        ck_free_files(f, nf);
        if (rc) goto fail;
    }
    cJSON_Delete(j);
    return 0;
fail:
    cJSON_Delete(j);
    checkpoint_state_free(st);
    return -1;
}

/* ---- init_from ---------------------------------------------------------------------------------- */

/* "text.blocks.12.attn.q.weight" -> "text.blocks.*.attn.q.weight": names of repeated blocks collapse. */
static void ck_name_pattern(const char* name, char* out, size_t n) {
    size_t o = 0;
    for (const char* p = name; *p && o + 2 < n;) {
        if (*p == '.' && p[1] >= '0' && p[1] <= '9') {
            const char* q = p + 1;
            while (*q >= '0' && *q <= '9') q++;
            if (*q == '.' || *q == 0) {
                out[o++] = '.';
                out[o++] = '*';
                p = q;
                continue;
            }
        }
        out[o++] = *p++;
    }
    out[o] = 0;
}

/* Print names grouped by pattern ("text.blocks.*.attn.q.weight x4"), in first-seen order. */
static void ck_print_grouped(FILE* f, const char* what, const char** names, const char** notes, int n) {
    fprintf(f, "  %s: %d tensor%s\n", what, n, n == 1 ? "" : "s");
    char* done = callocCheck((size_t)n + 1, 1);
    char pa[256], pb[256];
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        ck_name_pattern(names[i], pa, sizeof pa);
        int count = 0;
        for (int j = i; j < n; j++) {
            if (done[j]) continue;
            ck_name_pattern(names[j], pb, sizeof pb);
            if (!strcmp(pa, pb) && (!notes || !strcmp(notes[i] ? notes[i] : "", notes[j] ? notes[j] : ""))) {
                done[j] = 1;
                count++;
            }
        }
        if (count == 1) fprintf(f, "    %s", names[i]);
        else fprintf(f, "    %s x%d", pa, count);
        if (notes && notes[i]) fprintf(f, " (%s)", notes[i]);
        fprintf(f, "\n");
    }
    free(done);
}

static void ck_shape_str(char* out, size_t n, int ndim, const int64_t* shape) {
    size_t o = (size_t)snprintf(out, n, "(");
    for (int d = 0; d < ndim && o < n; d++) o += (size_t)snprintf(out + o, n - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < n) snprintf(out + o, n - o, ")");
}

int checkpoint_init_from(const char* dir, ParamTable* pt, FILE* report, char* err, size_t err_len) {
    char path[4200];
    snprintf(path, sizeof path, "%s/state.json", dir);
    size_t n;
    char* text = rr_read_file(path, &n);
    if (!text) {
        ck_err(err, err_len, "%s: cannot read: %s (train.init_from needs a checkpoint folder: a run's "
               "checkpoints/step-N, or the output of rrfp-mm import llama)", path, strerror(errno));
        return -1;
    }
    cJSON* j = cJSON_ParseWithLength(text, n);
    free(text);
    const cJSON* fmt = j ? cJSON_GetObjectItemCaseSensitive(j, "format") : NULL;
    if (!j || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "rrfp-mm-checkpoint") != 0) {
        ck_err(err, err_len, "%s: not an rrfp-mm checkpoint state (bad JSON or \"format\")", path);
        cJSON_Delete(j);
        return -1;
    }
    StFile* f = NULL;
    int nf = ck_load_files(dir, cJSON_GetObjectItemCaseSensitive(j, "files"), "model", NULL, &f, err, err_len);
    cJSON_Delete(j);
    if (nf < 0) return -1;

    int load = pt->data != NULL;
    float* host = NULL;
    if (load && !ck_on_host(pt)) {
        host = mallocCheck((pt->total ? pt->total : 1) * sizeof(float));
        pt->be->copy_d2h(pt->be, host, pt->data, pt->total * sizeof(float));
    }
    float* h = load ? (host ? host : pt->data) : NULL;
    const char** loaded = callocCheck((size_t)pt->n + 1, sizeof(char*));
    const char** inited = callocCheck((size_t)pt->n + 1, sizeof(char*));
    char** why = callocCheck((size_t)pt->n + 1, sizeof(char*));
    int n_loaded = 0, n_init = 0, rc = 0;
    double values = 0;
    for (int i = 0; i < pt->n && rc == 0; i++) {
        const ParamSpec* s = &pt->specs[i];
        /* matched by global name and global shape: a TP-sharded checkpoint's files hold slices (metadata
         * "slice.<name>"), and this table may hold a slice too; checkpoint_read_assembled cuts this
         * table's part out of whichever pieces hold it, as a resume does */
        const StTensor* t = NULL;
        int k, gnd = 0;
        int64_t gshape[TENSOR_MAX_DIMS] = {0};
        for (k = 0; k < nf && !t; k++) t = st_find(&f[k], s->name);
        k--;
        if (t) {
            char key[200];
            snprintf(key, sizeof key, "slice.%s", s->name);
            const char* mv = st_meta(&f[k], key);
            ParamSlice fs = {.dim = -1};
            gnd = t->ndim;
            if (mv && params_slice_parse(mv, &fs, &gnd) != 0) {
                ck_err(err, err_len, "%s: tensor '%s': malformed slice description '%s'", f[k].path, s->name, mv);
                rc = -1;
                break;
            }
            for (int d = 0; d < gnd && d < TENSOR_MAX_DIMS; d++) gshape[d] = fs.dim < 0 ? t->shape[d] : fs.gshape[d];
        }
        const int64_t* mine = params_is_slice(s) ? s->slice.gshape : s->shape;
        int same = t && gnd == s->ndim;
        for (int d = 0; same && d < s->ndim; d++) same = gshape[d] == mine[d];
        if (!same) {
            char a[96], b[96], w[256];
            if (!t) snprintf(w, sizeof w, "not in the checkpoint");
            else {
                ck_shape_str(a, sizeof a, gnd, gshape);
                ck_shape_str(b, sizeof b, s->ndim, mine);
                snprintf(w, sizeof w, "shape %s in the checkpoint, %s here", a, b);
            }
            why[n_init] = strdup(w);
            inited[n_init++] = s->name;
            continue;
        }
        if (load) {
            ParamSlice whole = {.dim = -1};
            rc = checkpoint_read_assembled(f, nf, s->name, params_is_slice(s) ? &s->slice : &whole, s->ndim, s->shape,
                                           h + s->offset, 0, 0, err, err_len);
        }
        loaded[n_loaded++] = s->name;
        values += (double)s->numel;
    }
    if (rc == 0 && load && host) pt->be->copy_h2d(pt->be, pt->data, host, pt->total * sizeof(float));
    if (rc == 0 && report) {
        int n_ck = 0;
        for (int k = 0; k < nf; k++) n_ck += f[k].n;
        const char** unused = callocCheck((size_t)n_ck + 1, sizeof(char*));
        int n_unused = 0;
        for (int k = 0; k < nf; k++)
            for (int t = 0; t < f[k].n; t++) {
                const StTensor* x = &f[k].tensors[t];
                int used = 0;
                for (int i = 0; i < n_loaded && !used; i++) used = !strcmp(loaded[i], x->name);
                for (int j = 0; j < n_unused && !used; j++) used = !strcmp(unused[j], x->name); /* TP pieces: once */
                if (!used) unused[n_unused++] = x->name;
            }
        fprintf(report, "init_from %s: loaded %d tensors (%.0f values), initialised %d from model.seed, %d in the "
                "checkpoint not used\n", dir, n_loaded, values, n_init, n_unused);
        ck_print_grouped(report, "loaded", loaded, NULL, n_loaded);
        ck_print_grouped(report, "initialised", inited, (const char**)why, n_init);
        ck_print_grouped(report, "not used", unused, NULL, n_unused);
        fflush(report);
        free(unused);
    }
    for (int i = 0; i < n_init; i++) free(why[i]);
    free(why);
    free(loaded);
    free(inited);
    free(host);
    ck_free_files(f, nf);
    return rc;
}

int checkpoint_run_id(const char* dir, char* id, size_t id_len) {
    char p[4200];
    snprintf(p, sizeof p, "%s/state.json", dir);
    size_t n;
    char* text = rr_read_file(p, &n);
    if (!text) return -1;
    cJSON* j = cJSON_ParseWithLength(text, n);
    free(text);
    if (!j) return -1;
    const cJSON* rid = cJSON_GetObjectItemCaseSensitive(j, "run_id");
    snprintf(id, id_len, "%s", cJSON_IsString(rid) ? rid->valuestring : "");
    cJSON_Delete(j);
    return 0;
}

/* Does checkpoint folder ROOT/NAME count for run_id (NULL or "": every complete one)? */
static int ck_of_run(const char* root, const char* name, const char* run_id) {
    char p[4200], id[64];
    snprintf(p, sizeof p, "%s/%s/state.json", root, name);
    if (access(p, R_OK) != 0) return 0;
    if (!run_id || !run_id[0]) return 1;
    snprintf(p, sizeof p, "%s/%s", root, name);
    /* a checkpoint of an earlier build carries no identity: it counts for whichever run resumed it */
    return checkpoint_run_id(p, id, sizeof id) == 0 && (!id[0] || !strcmp(id, run_id));
}

int64_t checkpoint_latest_of(const char* root, const char* run_id, char* out, size_t out_len) {
    DIR* d = opendir(root);
    if (!d) return -1;
    int64_t best = -1;
    struct dirent* e;
    while ((e = readdir(d))) {
        long long s;
        char tail;
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1) continue;
        if (s > best && ck_of_run(root, e->d_name, run_id)) {
            best = s;
            snprintf(out, out_len, "%s/%s", root, e->d_name);
        }
    }
    closedir(d);
    return best;
}

int64_t checkpoint_latest(const char* root, char* out, size_t out_len) {
    return checkpoint_latest_of(root, NULL, out, out_len);
}

static int ck_cmp_i64(const void* a, const void* b) {
    int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
    return x < y ? -1 : x > y;
}

void checkpoint_prune(const char* root, int keep) { checkpoint_prune_run(root, keep, NULL); }

void checkpoint_prune_run(const char* root, int keep, const char* run_id) {
    if (keep <= 0) return;
    DIR* d = opendir(root);
    if (!d) return;
    int64_t* steps = NULL;
    int n = 0, cap = 0;
    struct dirent* e;
    while ((e = readdir(d))) {
        long long s;
        char tail;
        if (!strncmp(e->d_name, ".pruned-", 8)) { /* left by a run killed while pruning */
            char left[4200];
            snprintf(left, sizeof left, "%s/%s", root, e->d_name);
            ck_rm_rf(left);
            continue;
        }
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1 || !ck_of_run(root, e->d_name, run_id)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            steps = reallocCheck(steps, (size_t)cap * sizeof(int64_t));
        }
        steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof(int64_t), ck_cmp_i64);
    char p[4200], gone[4200];
    for (int i = 0; i + keep < n; i++) {
        /* Renamed out of the step-* namespace first (atomic), then deleted: a crash in the middle of
           the deletion leaves a hidden folder, never a step-* folder with files missing. */
        snprintf(p, sizeof p, "%s/step-%08lld", root, (long long)steps[i]);
        snprintf(gone, sizeof gone, "%s/.pruned-%08lld.%d", root, (long long)steps[i], (int)getpid());
        if (rename(p, gone) == 0) ck_rm_rf(gone);
    }
    ck_fsync_dir(root);
    free(steps);
}

/* The pid a leftover's name ends with: .step-N.tmp.PID, .step-N.tmp.shards.PID, .old.PID; 0 when the
 * name is none of them. */
static int ck_leftover_pid(const char* name) {
    long long step;
    int pid = 0, n = 0;
    if (sscanf(name, ".step-%lld.tmp.shards.%d%n", &step, &pid, &n) == 2 && name[n] == 0) return pid;
    if (sscanf(name, ".step-%lld.tmp.%d%n", &step, &pid, &n) == 2 && name[n] == 0) return pid;
    if (sscanf(name, ".old.%d%n", &pid, &n) == 1 && name[n] == 0) return pid;
    return 0;
}

int checkpoint_clean_stale(const char* root, char* removed, size_t removed_len) {
    if (removed_len) removed[0] = 0;
    DIR* d = opendir(root);
    if (!d) return 0;
    int n = 0;
    size_t o = 0;
    struct dirent* e;
    char p[4200];
    while ((e = readdir(d))) {
        int pid = ck_leftover_pid(e->d_name);
        if (pid <= 0) continue;
        /* alive (ours, or another job's on this machine; EPERM: alive under another user) */
        if (pid == (int)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        snprintf(p, sizeof p, "%s/%s", root, e->d_name);
        ck_rm_rf(p);
        n++;
        if (o < removed_len) o += (size_t)snprintf(removed + o, removed_len - o, "%s%s", o ? ", " : "", e->d_name);
    }
    closedir(d);
    if (n) ck_fsync_dir(root);
    return n;
}
