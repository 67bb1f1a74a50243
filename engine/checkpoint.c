/* checkpoint.c — checkpoint folders of safetensors + state.json, written atomically (see
 * checkpoint.h). Values go through the backend's copy functions so device-resident tables work. */
#define _GNU_SOURCE
#include "engine/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
static float* ck_host_view(const ParamTable* pt, const float* block, int* owned) {
    *owned = 0;
    if (!block) return NULL;
    if (ck_on_host(pt)) return (float*)block;
    float* h = mallocCheck(pt->total * sizeof(float));
    pt->be->copy_d2h(h, block, pt->total * sizeof(float));
    *owned = 1;
    return h;
}

static void ck_file_name(char* out, size_t n, const char* dir, const char* base, const char* shard) {
    if (shard) snprintf(out, n, "%s/%s.%s.safetensors", dir, base, shard);
    else snprintf(out, n, "%s/%s.safetensors", dir, base);
}

static int ck_mkdir_p(const char* path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char* p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
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

/* Write model[.shard].safetensors and optimizer[.shard].safetensors of pt into folder dir. */
static int ck_write_tensors(const char* dir, const ParamTable* pt, int64_t step, const char* shard, char* err,
                            size_t err_len) {
    char path[4200];
    int own_d, own_m, own_v;
    float* data = ck_host_view(pt, pt->data, &own_d);
    float* m = ck_host_view(pt, pt->m, &own_m);
    float* v = ck_host_view(pt, pt->v, &own_v);
    float* zeros = NULL;
    if (!m || !v) zeros = callocCheck(pt->total ? pt->total : 1, sizeof(float));
    char step_s[32];
    snprintf(step_s, sizeof step_s, "%lld", (long long)step);

    StWriter* w = st_writer_new();
    StWriter* wo = st_writer_new();
    st_writer_meta(w, "format", "rrfp-mm");
    st_writer_meta(w, "step", step_s);
    st_writer_meta(wo, "format", "rrfp-mm-adamw");
    st_writer_meta(wo, "step", step_s);
    char name[128];
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        st_writer_add(w, s->name, DTYPE_F32, s->ndim, s->shape, data + s->offset);
        snprintf(name, sizeof name, "m.%s", s->name);
        st_writer_add(wo, name, DTYPE_F32, s->ndim, s->shape, (m ? m : zeros) + s->offset);
        snprintf(name, sizeof name, "v.%s", s->name);
        st_writer_add(wo, name, DTYPE_F32, s->ndim, s->shape, (v ? v : zeros) + s->offset);
    }
    ck_file_name(path, sizeof path, dir, "model", shard);
    int rc = st_writer_write(w, path, err, err_len);
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
    if (ck_mkdir_p(root) != 0) {
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

int checkpoint_shard_begin(const char* root, int64_t step, char* tmp, size_t tmp_len, char* err, size_t err_len) {
    snprintf(tmp, tmp_len, "%s/.step-%08lld.tmp.shards", root, (long long)step);
    if (ck_mkdir_p(root) != 0) {
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

/* Read every tensor of pt (names with `prefix`) into block, each from whichever of the n files holds
 * it: checkpoint shards of any pipeline layout keep global names, so a stage reads its own tensors
 * from the shards of another layout. */
static int ck_read_block(const StFile* f, int nf, const ParamTable* pt, float* block, const char* prefix, char* err,
                         size_t err_len) {
    int owned = 0;
    float* h = block;
    if (!ck_on_host(pt)) {
        h = mallocCheck(pt->total * sizeof(float));
        owned = 1;
    }
    char name[160];
    int rc = 0;
    for (int i = 0; i < pt->n && rc == 0; i++) {
        const ParamSpec* s = &pt->specs[i];
        snprintf(name, sizeof name, "%s%s", prefix, s->name);
        int k = 0;
        while (k < nf - 1 && !st_find(&f[k], name)) k++;
        rc = st_read_f32(&f[k], name, h + s->offset, s->ndim, s->shape, err, err_len);
        if (rc != 0 && nf > 1 && !st_find(&f[k], name))
            ck_err(err, err_len, "%s: tensor %s is in none of its %d shard files", f[0].path, name, nf);
    }
    if (owned) {
        if (rc == 0) pt->be->copy_h2d(block, h, pt->total * sizeof(float));
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
        ck_err(err, err_len, "%s: cannot read: %s (not a checkpoint folder?)", path, strerror(errno));
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
        ck_err(err, err_len, "%s: checkpoint version %d, this build reads version %d", path,
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

int64_t checkpoint_latest(const char* root, char* out, size_t out_len) {
    DIR* d = opendir(root);
    if (!d) return -1;
    int64_t best = -1;
    struct dirent* e;
    char p[4200];
    while ((e = readdir(d))) {
        long long s;
        char tail;
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1) continue;
        snprintf(p, sizeof p, "%s/%s/state.json", root, e->d_name);
        if (access(p, R_OK) != 0) continue;
        if (s > best) {
            best = s;
            snprintf(out, out_len, "%s/%s", root, e->d_name);
        }
    }
    closedir(d);
    return best;
}

static int ck_cmp_i64(const void* a, const void* b) {
    int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
    return x < y ? -1 : x > y;
}

void checkpoint_prune(const char* root, int keep) {
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
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1) continue;
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
