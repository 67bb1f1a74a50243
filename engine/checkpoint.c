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

int checkpoint_save(const char* root, const ParamTable* pt, const CheckpointState* st, const char* shard,
                    char* out_dir, size_t out_len, char* err, size_t err_len) {
    if (ck_mkdir_p(root) != 0) {
        ck_err(err, err_len, "cannot create checkpoint folder '%s': %s", root, strerror(errno));
        return -1;
    }
    char final[4096], tmp[4096], path[4200];
    snprintf(final, sizeof final, "%s/step-%08lld", root, (long long)st->step);
    snprintf(tmp, sizeof tmp, "%s/.step-%08lld.tmp.%d", root, (long long)st->step, (int)getpid());
    ck_rm_rf(tmp);
    if (mkdir(tmp, 0755) != 0) {
        ck_err(err, err_len, "cannot create '%s': %s", tmp, strerror(errno));
        return -1;
    }
    int own_d, own_m, own_v;
    float* data = ck_host_view(pt, pt->data, &own_d);
    float* m = ck_host_view(pt, pt->m, &own_m);
    float* v = ck_host_view(pt, pt->v, &own_v);
    float* zeros = NULL;
    if (!m || !v) zeros = callocCheck(pt->total ? pt->total : 1, sizeof(float));
    char step_s[32];
    snprintf(step_s, sizeof step_s, "%lld", (long long)st->step);

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
    int rc = 0;
    ck_file_name(path, sizeof path, tmp, "model", shard);
    rc = st_writer_write(w, path, err, err_len);
    if (rc == 0) {
        ck_file_name(path, sizeof path, tmp, "optimizer", shard);
        rc = st_writer_write(wo, path, err, err_len);
    }
    st_writer_free(w);
    st_writer_free(wo);
    if (own_d) free(data);
    if (own_m) free(m);
    if (own_v) free(v);
    free(zeros);

    if (rc == 0) {
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
        ck_file_name(path, sizeof path, ".", "model", shard);
        cJSON_AddItemToArray(files, cJSON_CreateString(path + 2));
        ck_file_name(path, sizeof path, ".", "optimizer", shard);
        cJSON_AddItemToArray(files, cJSON_CreateString(path + 2));
        char* text = cJSON_Print(j);
        cJSON_Delete(j);
        snprintf(path, sizeof path, "%s/state.json", tmp);
        if (rc == 0 && rr_write_file_atomic(path, text, strlen(text)) != 0) {
            ck_err(err, err_len, "cannot write '%s': %s", path, strerror(errno));
            rc = -1;
        }
        free(text);
    }
    if (rc == 0) {
        /* replace an older checkpoint of the same step (a re-run after resume) */
        struct stat sb;
        if (stat(final, &sb) == 0) {
            char old[4200];
            snprintf(old, sizeof old, "%s/.old.%d", root, (int)getpid());
            if (rename(final, old) == 0) ck_rm_rf(old);
        }
        if (rename(tmp, final) != 0) {
            ck_err(err, err_len, "cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
            rc = -1;
        }
    }
    if (rc != 0) {
        ck_rm_rf(tmp);
        return -1;
    }
    ck_fsync_dir(root);
    if (out_dir) snprintf(out_dir, out_len, "%s", final);
    return 0;
}

static int ck_read_block(const StFile* f, const ParamTable* pt, float* block, const char* prefix, char* err,
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
        rc = st_read_f32(f, name, h + s->offset, s->ndim, s->shape, err, err_len);
    }
    if (owned) {
        if (rc == 0) pt->be->copy_h2d(block, h, pt->total * sizeof(float));
        free(h);
    }
    return rc;
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
    cJSON_Delete(j);

    StFile f;
    ck_file_name(path, sizeof path, dir, "model", shard);
    if (st_load(&f, path, err, err_len) != 0) goto fail;
    int rc = ck_read_block(&f, pt, pt->data, "", err, err_len);
    st_free(&f);
    if (rc) goto fail;
    if (pt->m && pt->v) {
        ck_file_name(path, sizeof path, dir, "optimizer", shard);
        if (st_load(&f, path, err, err_len) != 0) goto fail;
        rc = ck_read_block(&f, pt, pt->m, "m.", err, err_len);
        if (rc == 0) rc = ck_read_block(&f, pt, pt->v, "v.", err, err_len);
        st_free(&f);
        if (rc) goto fail;
    }
    return 0;
fail:
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
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            steps = reallocCheck(steps, (size_t)cap * sizeof(int64_t));
        }
        steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof(int64_t), ck_cmp_i64);
    char p[4200];
    for (int i = 0; i + keep < n; i++) {
        snprintf(p, sizeof p, "%s/step-%08lld", root, (long long)steps[i]);
        ck_rm_rf(p);
    }
    ck_fsync_dir(root);
    free(steps);
}
