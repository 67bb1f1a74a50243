/* checkpoint.c — checkpoint folders of safetensors + state.json, written atomically (see
 * checkpoint.h). Values go through the backend's copy functions so device-resident tables work. */
#define _GNU_SOURCE
#include "engine/checkpoint.h"

#include <cjson/cJSON.h>
#include <ctype.h>
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
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/json.h"
#include "engine/params_quant_st.h"
#include "engine/safetensors.h"


void checkpoint_state_free(CheckpointState* st) {
    free(st->record);
    st->record = NULL;
}

static int ck_on_host(const ParamTable* pt) { return !pt->be || pt->be->dev->host_addressable; }

static void ck_file_name(char* out, size_t n, const char* dir, const char* base, const char* shard) {
    if (shard) snprintf(out, n, "%s/%s.%s.safetensors", dir, base, shard);
    else snprintf(out, n, "%s/%s.safetensors", dir, base);
}

/* A temporary or pruned folder of ours: removed whole (nftw, no shell, symbolic links not followed). */
static void ck_rm_rf(const char* dir) {
    if (rr_remove_tree(dir) != 0) rr_warn("could not remove '%s': %s", dir, strerror(errno));
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

/* Check one F32 tensor's values and put its checksum in w's metadata; *hash gets the checksum. */
static int ck_check_and_hash(StWriter* w, const ParamSpec* s, const char* name, const float* x, int nonneg,
                             int64_t step, uint64_t* hash, char* err, size_t err_len) {
    int64_t bad = ck_bad_value(x, s->numel, nonneg);
    if (bad >= 0) {
        rr_fail(err, err_len, "refusing to write the checkpoint of step %lld: tensor '%s' holds %s value (%g at "
               "element %lld); the run has diverged or its state is damaged, and the last good checkpoint stays the "
               "newest", (long long)step, name, ck_value_kind(x[bad]), (double)x[bad], (long long)bad);
        return -1;
    }
    char key[200], hx[24];
    ck_checksum_key(key, sizeof key, name);
    *hash = rr_xxh64(x, s->numel * sizeof(float), 0);
    snprintf(hx, sizeof hx, "%016" PRIx64, *hash);
    st_writer_meta(w, key, hx);
    return 0;
}

/* Add one F32 tensor and its checksum to w, after checking its values. */
static int ck_add_checked(StWriter* w, const ParamSpec* s, const char* name, const float* x, int nonneg, int64_t step,
                          char* err, size_t err_len) {
    uint64_t hash;
    if (ck_check_and_hash(w, s, name, x, nonneg, step, &hash, err, err_len) != 0) return -1;
    st_writer_add(w, name, DTYPE_F32, s->ndim, s->shape, x);
    return 0;
}

/* A tensor of a table whose values are not in host memory as one f32 block (a device's, or a bf16 run's
 * master-less frozen tensors): copied to the host one tensor at a time, once to check and hash it, and again
 * as its file is written (st_writer_defer), its checksum compared with the first copy's. The host then holds
 * one tensor, not the model and its two moments. */
typedef struct {
    const ParamTable* pt;
    int i;        /* the spec */
    int what;     /* 0 the values, 1 AdamW's m, 2 its v */
    uint64_t hash; /* of the first copy */
    char name[160];
} CkDeferred;

static void ck_tensor_to_host(const ParamTable* pt, int i, int what, float* dst) {
    const ParamSpec* s = &pt->specs[i];
    const float* block = what == 1 ? pt->m : what == 2 ? pt->v : NULL;
    if (what == 0) {
        if (params_lean(pt)) params_values_to_host(pt, i, dst); /* a frozen tensor of a bf16 run: its bf16 values */
        else pt->be->dev->copy_d2h(pt->be, dst, pt->data + s->offset, s->numel * sizeof(float));
    } else if (!block) {
        memset(dst, 0, s->numel * sizeof(float)); /* no moments allocated: zeros, as a fresh optimizer's */
    } else {
        pt->be->dev->copy_d2h(pt->be, dst, block + s->goff, s->numel * sizeof(float));
    }
}

static int ck_fill(void* ctx, void* buf, char* err, size_t err_len) {
    const CkDeferred* d = ctx;
    const ParamSpec* s = &d->pt->specs[d->i];
    ck_tensor_to_host(d->pt, d->i, d->what, buf);
    if (rr_xxh64(buf, s->numel * sizeof(float), 0) != d->hash)
        return rr_fail(err, err_len, "tensor '%s' changed while its checkpoint was written", d->name);
    return 0;
}

/* Check, hash and add tensor i's values (what 0) or moment (1, 2) to w, deferred (CkDeferred). */
static int ck_add_deferred(StWriter* w, CkDeferred* d, const ParamTable* pt, int i, int what, const char* name,
                           float* scratch, int64_t step, char* err, size_t err_len) {
    const ParamSpec* s = &pt->specs[i];
    *d = (CkDeferred){.pt = pt, .i = i, .what = what};
    snprintf(d->name, sizeof d->name, "%s", name);
    ck_tensor_to_host(pt, i, what, scratch);
    if (ck_check_and_hash(w, s, d->name, scratch, what == 2, step, &d->hash, err, err_len) != 0) return -1;
    st_writer_add(w, d->name, DTYPE_F32, s->ndim, s->shape, scratch); /* the bytes come from ck_fill */
    st_writer_defer(w, d->name, ck_fill, d);
    return 0;
}

static const char* ck_layout(const CheckpointState* st) { return st->layout[0] ? st->layout : "pp=1 tp=1 chunks=1"; }

void checkpoint_identity_meta(StWriter* w, const CheckpointState* st, const char* shard) {
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)st->step);
    st_writer_meta(w, "step", v);
    snprintf(v, sizeof v, "%016llx", (unsigned long long)st->run);
    st_writer_meta(w, "run", v);
    st_writer_meta(w, "layout", ck_layout(st));
    st_writer_meta(w, "shard", shard ? shard : "");
}

uint64_t checkpoint_new_run_id(void) {
    uint64_t id = 0;
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id) { /* no entropy source: clock, pid and address */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id = rr_mix64((uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^
                      (uint64_t)(uintptr_t)&id);
    }
    return id ? id : 1;
}

int checkpoint_add_tensor(StWriter* w, const char* name, int ndim, const int64_t* shape, const float* x, char* err,
                          size_t err_len) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    int64_t bad = ck_bad_value(x, n, 0);
    if (bad >= 0) {
        rr_fail(err, err_len, "tensor '%s' holds %s value (%g at element %lld): a checkpoint never holds one", name,
               ck_value_kind(x[bad]), (double)x[bad], (long long)bad);
        return -1;
    }
    char key[200], hx[24];
    ck_checksum_key(key, sizeof key, name);
    snprintf(hx, sizeof hx, "%016" PRIx64, rr_xxh64(x, n * sizeof(float), 0));
    st_writer_add(w, name, DTYPE_F32, ndim, shape, x);
    st_writer_meta(w, key, hx);
    return 0;
}

/* Write model[.shard].safetensors and optimizer[.shard].safetensors of pt into folder dir, each carrying
 * the identity of st (step, run, layout) and its shard name. */
static int ck_write_tensors(const char* dir, const ParamTable* pt, const CheckpointState* st, const char* shard,
                            char* err, size_t err_len) {
    int64_t step = st->step;
    char path[4200];
    rr_test_pause("RRFP_TEST_CKPT_SLEEP_MS"); /* tests only: a fault aimed at a checkpoint write lands in it */
    /* on the host as one f32 block (the CPU backend, or a table without a backend: the distributed optimizer's
     * gathered host copies): written from where it is; else one tensor at a time */
    int deferred = pt->be && (!ck_on_host(pt) || params_lean(pt));
    const float* data = pt->data; /* the undeferred case: every block where it lies */
    const float* m = pt->m;
    const float* v = pt->v;
    float* zeros = NULL;
    float* scratch = NULL;
    CkDeferred* defs = NULL;
    if (deferred) {
        size_t largest = 1;
        for (int i = 0; i < pt->n; i++)
            if (pt->specs[i].numel > largest) largest = pt->specs[i].numel;
        scratch = mallocCheck(largest * sizeof(float));
        defs = callocCheck((size_t)pt->n * 3 + 1, sizeof *defs);
    } else if (!m || !v) {
        zeros = callocCheck(pt->gtotal ? pt->gtotal : 1, sizeof(float));
    }
    StWriter* w = st_writer_new();
    StWriter* wo = st_writer_new();
    st_writer_meta(w, "format", "rrfp-mm");
    checkpoint_identity_meta(w, st, shard);
    st_writer_meta(wo, "format", "rrfp-mm-adamw");
    checkpoint_identity_meta(wo, st, shard);
    char name[160];
    int rc = 0;
    char skey[200], sval[256];
    for (int i = 0; i < pt->n && rc == 0; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (pt->omit_replicated && !params_is_slice(s)) continue; /* TP rank 0 writes the replicated tensors */
        if (s->shared_copy) continue; /* the stage that owns it writes it */
        int sliced = params_slice_format(s, sval, sizeof sval);
        for (int what = 0; what < 3 && rc == 0; what++) {
            if (what == 1 && s->frozen) break; /* a frozen tensor has no AdamW state */
            snprintf(name, sizeof name, "%s%s", what == 1 ? "m." : what == 2 ? "v." : "", s->name);
            StWriter* to = what ? wo : w;
            if (deferred) {
                rc = ck_add_deferred(to, &defs[3 * i + what], pt, i, what, name, scratch, step, err, err_len);
            } else {
                const float* x = what == 0 ? data + s->offset : (what == 1 ? (m ? m : zeros) : (v ? v : zeros)) + s->goff;
                rc = ck_add_checked(to, s, name, x, what == 2, step, err, err_len);
            }
            if (sliced) {
                snprintf(skey, sizeof skey, "slice.%s", name);
                st_writer_meta(to, skey, sval);
            }
        }
    }
    void* quant = params_quant_st_add(w, pt); /* QLoRA's NF4 base weights, as trained on */
    ck_file_name(path, sizeof path, dir, "model", shard);
    if (rc == 0) rc = st_writer_write(w, path, err, err_len);
    params_quant_st_free(quant);
    if (rc == 0) {
        ck_file_name(path, sizeof path, dir, "optimizer", shard);
        rc = st_writer_write(wo, path, err, err_len);
    }
    st_writer_free(w);
    st_writer_free(wo);
    free(zeros);
    free(scratch);
    free(defs);
    return rc;
}

/* The members of state.json that the checkpoint itself writes and checks; every other member is the owner's
 * record (CheckpointState.record). */
static int ck_own_key(const char* k) {
    static const char* const own[] = {"format", "version", "step", "optimizer_step", "run", "layout", "run_id", "files"};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (!strcmp(k, own[i])) return 1;
    return 0;
}

/* Write dir/state.json (last, so a folder with state.json has every file) naming the files of the
 * given shards (NULL entry = the unsharded pair). */
static int ck_write_state(const char* dir, const CheckpointState* st, const char* const* shards, int n_shards,
                          char* err, size_t err_len) {
    char path[4200];
    int rc = 0;
    rr_test_pause("RRFP_TEST_CKPT_SLEEP_MS"); /* between the tensors and state.json: see ck_write_tensors */
    cJSON* j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "rrfp-mm-checkpoint");
    cJSON_AddNumberToObject(j, "version", CHECKPOINT_VERSION);
    cJSON_AddNumberToObject(j, "step", (double)st->step);
    cJSON_AddNumberToObject(j, "optimizer_step", (double)st->opt_step);
    char hx[32];
    /* 64-bit values as hex strings: JSON numbers are doubles */
    snprintf(hx, sizeof hx, "%016llx", (unsigned long long)st->run);
    cJSON_AddStringToObject(j, "run", hx);
    cJSON_AddStringToObject(j, "layout", ck_layout(st));
    if (st->run_id[0]) cJSON_AddStringToObject(j, "run_id", st->run_id);
    if (st->record) { /* the owner's record: its members beside the checkpoint's own */
        cJSON* rj = cJSON_Parse(st->record);
        if (!cJSON_IsObject(rj)) {
            rr_fail(err, err_len, "internal error: the checkpoint's record is not a JSON object: %.200s", st->record);
            rc = -1;
        }
        while (cJSON_IsObject(rj) && rj->child) {
            cJSON* x = cJSON_DetachItemViaPointer(rj, rj->child);
            if (ck_own_key(x->string)) {
                rr_fail(err, err_len, "internal error: the checkpoint's record holds its own key \"%s\"", x->string);
                rc = -1;
                cJSON_Delete(x);
                continue;
            }
            cJSON_AddItemToObject(j, x->string, x); /* the key is copied before the item's own is freed */
        }
        cJSON_Delete(rj);
    }
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
        rr_fail(err, err_len, "cannot write '%s': %s", path, strerror(errno));
        rc = -1;
    }
    free(text);
    return rc;
}

/* Rename the complete temporary folder to ROOT/step-N (replacing this run's older one of the same step). */
static int ck_finalize(const char* root, const char* tmp, const CheckpointState* st, char* out_dir, size_t out_len,
                       char* err, size_t err_len) {
    int64_t step = st->step;
    char final[4096];
    snprintf(final, sizeof final, "%s/step-%08lld", root, (long long)step);
    struct stat sb;
    char ours_old[4200] = ""; /* this run's own checkpoint of the step, moved aside until the new one is in place */
    if (lstat(final, &sb) == 0) {
        /* a re-run after resume replaces this run's own checkpoint of the step; anything else there (no
         * state.json, another run's) was not written by this run: moved aside and named, never deleted */
        char id[64] = "", old[4200];
        int ours = S_ISDIR(sb.st_mode) && checkpoint_run_id(final, id, sizeof id, NULL, 0) == 0 &&
                   (!id[0] || !st->run_id[0] || !strcmp(id, st->run_id));
        if (ours) {
            snprintf(old, sizeof old, "%s/.old.%d", root, (int)getpid());
            if (rename(final, old) == 0) snprintf(ours_old, sizeof ours_old, "%s", old);
        } else {
            char sp[4200];
            snprintf(sp, sizeof sp, "%s/state.json", final);
            const char* why = id[0] ? "it belongs to another run"
                              : access(sp, F_OK) == 0 ? "its state.json cannot be read"
                                                      : "it has no state.json: an incomplete or foreign folder";
            snprintf(old, sizeof old, "%s.kept.%d", final, (int)getpid());
            if (rename(final, old) != 0) {
                rr_fail(err, err_len, "'%s' is in the way of this run's checkpoint of step %lld and is not one of this "
                       "run's (%s); cannot move it aside to '%s': %s", final, (long long)step, why, old, strerror(errno));
                return -1;
            }
            rr_warn("'%s' was in the way of this run's checkpoint of step %lld and is not one of this run's (%s): "
                    "moved aside to '%s', not deleted", final, (long long)step, why, old);
        }
    }
    if (rename(tmp, final) != 0) {
        rr_fail(err, err_len, "cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
        /* the complete one it was to replace stays: put back, or named where it is */
        if (ours_old[0] && rename(ours_old, final) != 0) {
            size_t l = strlen(err);
            snprintf(err + l, err_len - l, "; nor put this run's earlier checkpoint of step %lld back from '%s': %s "
                     "(move it back to '%s' before the next start, which removes it as a killed run's leftover)",
                     (long long)step, ours_old, strerror(errno), final);
        }
        return -1;
    }
    if (ours_old[0]) ck_rm_rf(ours_old);
    if (out_dir) snprintf(out_dir, out_len, "%s", final);
    /* the rename is durable only once ROOT is: a checkpoint a power loss could take back is not reported saved */
    if (rr_fsync_dir(root) != 0) {
        rr_fail(err, err_len, "cannot fsync checkpoint folder '%s' after renaming the checkpoint of step %lld into "
               "it: %s ('%s' is complete, but may not survive a power loss)", root, (long long)step, strerror(errno),
               final);
        return -1;
    }
    return 0;
}

int checkpoint_save(const char* root, const ParamTable* pt, const CheckpointState* st, const char* shard,
                    char* out_dir, size_t out_len, char* err, size_t err_len) {
    if (rr_mkdirs(root) != 0) {
        rr_fail(err, err_len, "cannot create checkpoint folder '%s': %s", root, strerror(errno));
        return -1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/.step-%08lld.tmp.%d", root, (long long)st->step, (int)getpid());
    ck_rm_rf(tmp);
    if (mkdir(tmp, 0755) != 0) {
        rr_fail(err, err_len, "cannot create '%s': %s", tmp, strerror(errno));
        return -1;
    }
    const char* shards[1] = {shard};
    int rc = ck_write_tensors(tmp, pt, st, shard, err, err_len);
    if (rc == 0) rc = ck_write_state(tmp, st, shards, 1, err, err_len);
    if (rc == 0) rc = ck_finalize(root, tmp, st, out_dir, out_len, err, err_len);
    if (rc != 0) ck_rm_rf(tmp);
    return rc;
}

void checkpoint_shard_tmp_name(char* tmp, size_t tmp_len, const char* root, int64_t step, int pid) {
    snprintf(tmp, tmp_len, "%s/.step-%08lld.tmp.shards.%d", root, (long long)step, pid);
}

int checkpoint_shard_begin(const char* root, int64_t step, char* tmp, size_t tmp_len, char* err, size_t err_len) {
    checkpoint_shard_tmp_name(tmp, tmp_len, root, step, (int)getpid());
    if (rr_mkdirs(root) != 0) {
        rr_fail(err, err_len, "cannot create checkpoint folder '%s': %s", root, strerror(errno));
        return -1;
    }
    ck_rm_rf(tmp);
    if (mkdir(tmp, 0755) != 0) {
        rr_fail(err, err_len, "cannot create '%s': %s", tmp, strerror(errno));
        return -1;
    }
    return 0;
}

int checkpoint_shard_write(const char* tmp, const ParamTable* pt, const CheckpointState* st, const char* shard,
                           char* err, size_t err_len) {
    return ck_write_tensors(tmp, pt, st, shard, err, err_len);
}

int checkpoint_shard_commit(const char* root, const char* tmp, const CheckpointState* st, const char* const* shards,
                            int n_shards, char* out_dir, size_t out_len, char* err, size_t err_len) {
    int rc = ck_write_state(tmp, st, shards, n_shards, err, err_len);
    if (rc == 0) rc = ck_finalize(root, tmp, st, out_dir, out_len, err, err_len);
    if (rc != 0) ck_rm_rf(tmp);
    return rc;
}

void checkpoint_shard_abort(const char* tmp) { ck_rm_rf(tmp); }

/* Check one tensor just read from f into x: values (finite; nonneg: AdamW's v >= 0), then the
 * checksum of its bytes in the file. Values first: a NaN is named as such, not as a checksum failure.
 * x holds the whole tensor (whole = 1: an F32 tensor's bytes are x's, hashed there) or part of it (its
 * bytes are hashed from the file, a chunk at a time). */
static int ck_check_values(const StFile* f, const char* name, const float* x, size_t n, int64_t first, int nonneg,
                           char* err, size_t err_len) {
    int64_t bad = ck_bad_value(x, n, nonneg);
    if (bad >= 0) {
        rr_fail(err, err_len, "%s: tensor '%s' holds %s value (%g at element %lld)%s: the checkpoint is damaged, "
               "refusing to load it", f->path, name, ck_value_kind(x[bad]), (double)x[bad], (long long)(first + bad),
               nonneg && !isnan(x[bad]) && !isinf(x[bad]) ? " but an AdamW second moment is never negative" : "");
        return -1;
    }
    return 0;
}

static int ck_check_loaded(const StFile* f, const char* name, const float* x, size_t n, int whole, int nonneg,
                           int check, char* err, size_t err_len) {
    if (x && ck_check_values(f, name, x, n, 0, nonneg, err, err_len) != 0) return -1;
    char key[200];
    ck_checksum_key(key, sizeof key, name);
    const char* want = st_meta(f, key);
    if (!want && check == CK_CHECK_VALUES) return 0; /* no checksum to verify (another tool's file) */
    const StTensor* t = st_find(f, name);
    RR_ASSERT(t);
    uint64_t stored = 0, got = 0;
    if (whole && t->dtype == DTYPE_F32) got = rr_xxh64(x, t->end - t->begin, 0);
    else if (st_tensor_xxh64(f, t, &got, err, err_len) != 0) return -1;
    char* end = NULL;
    if (want) stored = strtoull(want, &end, 16);
    if (!want || strlen(want) != 16 || *end) {
        rr_fail(err, err_len, "%s: tensor '%s' has no checksum (\"%s\" missing or malformed in __metadata__): "
               "not a checkpoint written by this build, or a damaged header", f->path, name, key);
        return -1;
    }
    if (stored != got) {
        rr_fail(err, err_len, "%s: tensor '%s' fails its checksum (xxh64 %016" PRIx64 " stored, %016" PRIx64
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
        if (t->ndim < 1 || t->ndim > TENSOR_MAX_DIMS) { /* the format allows 8; this model's tensors have <= 4 */
            rr_fail(err, err_len, "%s: tensor '%s' has %d dimensions, expected %d (this model's tensors have 1 to %d)",
                   f[k].path, name, t->ndim, ndim, TENSOR_MAX_DIMS);
            rc = -1;
            break;
        }
        ParamSlice fs = {.dim = -1};
        int fnd = t->ndim;
        const char* mv = st_meta(&f[k], key);
        if (mv && params_slice_parse(mv, &fs, &fnd) != 0) {
            rr_fail(err, err_len, "%s: tensor '%s': malformed slice description '%s'", f[k].path, name, mv);
            rc = -1;
            break;
        }
        if (fs.dim < 0)
            for (int i = 0; i < t->ndim; i++) fs.gshape[i] = t->shape[i];
        if (want->dim < 0 && fs.dim < 0) { /* whole from whole: the common case */
            rc = st_read_f32(&f[k], name, out, ndim, shape, err, err_len);
            if (rc == 0 && check) rc = ck_check_loaded(&f[k], name, out, (size_t)lnumel, 1, nonneg, check, err, err_len);
            free(covered);
            return rc;
        }
        const int64_t* wg = want->dim < 0 ? shape : want->gshape;
        int same = fnd == ndim;
        for (int i = 0; same && i < ndim; i++) same = fs.gshape[i] == wg[i];
        if (!same) {
            rr_fail(err, err_len, "%s: tensor '%s' is a piece of a tensor of another shape than this model's", f[k].path,
                   name);
            rc = -1;
            break;
        }
        if (d < 0) d = fs.dim;
        if (fs.dim >= 0 && fs.dim != d) {
            rr_fail(err, err_len, "%s: tensor '%s' is cut along dimension %d, expected %d", f[k].path, name, fs.dim, d);
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
            rr_fail(err, err_len, "%s: tensor '%s': its shape does not match its slice description", f[k].path, name);
            rc = -1;
            break;
        }
        if (outer == 1) {
            /* cut along dimension 0: each overlap is whole rows, contiguous in both the piece and out, read from
             * the file straight into place (the piece is never held whole); the values read are checked, and the
             * piece's checksum is computed from the file a chunk at a time */
            for (int a = 0, wpos = 0; a < wn && rc == 0; wpos += (int)wl[a], a++)
                for (int b = 0, ppos = 0; b < pn && rc == 0; ppos += (int)pl[b], b++) {
                    int64_t lo = wo[a] > po[b] ? wo[a] : po[b];
                    int64_t hi = wo[a] + wl[a] < po[b] + pl[b] ? wo[a] + wl[a] : po[b] + pl[b];
                    if (lo >= hi) continue;
                    float* dst = out + (wpos + lo - wo[a]) * inner;
                    rc = st_read_f32_range(&f[k], t, (uint64_t)((ppos + lo - po[b]) * inner), (uint64_t)((hi - lo) * inner),
                                           dst, err, err_len);
                    if (rc == 0 && check)
                        rc = ck_check_values(&f[k], name, dst, (size_t)((hi - lo) * inner), (ppos + lo - po[b]) * inner,
                                             nonneg, err, err_len);
                    memset(covered + wpos + lo - wo[a], 1, (size_t)(hi - lo));
                }
            if (rc == 0 && check) rc = ck_check_loaded(&f[k], name, NULL, 0, 0, nonneg, check, err, err_len);
            if (rc != 0) break;
            continue;
        }
        tmp = reallocCheck(tmp, (size_t)pnumel * sizeof(float) + 1);
        rc = st_read_f32(&f[k], name, tmp, t->ndim, t->shape, err, err_len);
        if (rc == 0 && check) rc = ck_check_loaded(&f[k], name, tmp, (size_t)pnumel, 1, nonneg, check, err, err_len);
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
        rr_fail(err, err_len, "%s: tensor '%s' is missing (in none of its %d shard file(s))", nf > 0 ? f[0].path : "?", name, nf);
        rc = -1;
    }
    for (int64_t i = 0; rc == 0 && i < wlen; i++)
        if (!covered[i]) {
            rr_fail(err, err_len, "%s: tensor %s: index %lld of dimension %d (of this model's part) is in none of the "
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
static int ck_read_block(const StFile* f, int nf, ParamTable* pt, float* block, const char* prefix, char* err,
                         size_t err_len) {
    /* values: every tensor at offset; moments ("m." / "v."): the trainable ones at goff */
    int moments = prefix[0] != 0;
    size_t n = moments ? pt->gtotal : pt->total;
    int owned = 0;
    float* h = block;
    /* values (block NULL): read in the host layout, then into the masters and the master-less copies */
    if (!ck_on_host(pt) || (!moments && params_lean(pt))) {
        h = mallocCheck((n ? n : 1) * sizeof(float));
        owned = 1;
    } else if (!moments) {
        h = pt->data;
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
    if (owned && !moments && rc == 0) {
        params_set_host_values(pt, h, 1);
    } else if (owned) {
        if (rc == 0) pt->be->dev->copy_h2d(pt->be, block, h, n * sizeof(float));
        free(h);
    }
    return rc;
}

/* The shard part of a checkpoint file's name: "model.pp1c0.safetensors" -> "pp1c0", "model.safetensors" -> "".
 * Returns -1 when the name is not base[.SHARD].safetensors. */
static int ck_shard_of(const char* file, const char* base, char* shard, size_t n) {
    size_t bl = strlen(base), fl = strlen(file), sl = strlen(".safetensors");
    if (fl < bl + sl || strncmp(file, base, bl) || strcmp(file + fl - sl, ".safetensors")) return -1;
    const char* p = file + bl;
    size_t k = fl - bl - sl;
    if (k == 0) {
        snprintf(shard, n, "%s", "");
        return 0;
    }
    if (p[0] != '.' || k < 2 || k - 1 >= n) return -1;
    memcpy(shard, p + 1, k - 1);
    shard[k - 1] = 0;
    return 0;
}

/* File f (named `file` in state.json) must carry the identity of the checkpoint state.json describes
 * (checkpoint_identity_meta): written at the same step, by the same job, under the same layout, as the
 * shard its name says. A file of another step or job copied into the folder is refused here, by name. */
static int ck_check_identity(const StFile* f, const char* file, const char* base, const CheckpointState* st,
                             const char* dir, char* err, size_t err_len) {
    char want_step[32], want_run[24], shard[128];
    snprintf(want_step, sizeof want_step, "%lld", (long long)st->step);
    snprintf(want_run, sizeof want_run, "%016llx", (unsigned long long)st->run);
    const char* keys[4] = {"step", "run", "layout", "shard"};
    const char* want[4] = {want_step, want_run, ck_layout(st), shard};
    const char* what[4] = {"step", "run (the job that wrote it)", "layout", "shard"};
    if (ck_shard_of(file, base, shard, sizeof shard) != 0) {
        rr_fail(err, err_len, "%s/state.json: file '%s' is not named %s[.SHARD].safetensors", dir, file, base);
        return -1;
    }
    for (int k = 0; k < 4; k++) {
        const char* got = st_meta(f, keys[k]);
        if (!got || strcmp(got, want[k])) {
            rr_fail(err, err_len, "%s: %s \"%.64s\" in its metadata, but %s/state.json says %s \"%s\": a file of "
                   "another checkpoint (another step, job or layout) is in this folder; refusing to mix them (restore "
                   "the folder's own file, or resume from another checkpoint)", f->path, what[k], got ? got : "(none)",
                   dir, what[k], want[k]);
            return -1;
        }
    }
    return 0;
}

/* Load the files of state.json's "files" list whose names start with `base` ("model" / "optimizer"),
 * or, with `shard`, just base.shard.safetensors. With `id` (not NULL), every file must carry that
 * identity (ck_check_identity). Returns the count, or -1 with a message. */
static int ck_load_files(const char* dir, const cJSON* files, const char* base, const char* shard,
                         const CheckpointState* id, StFile** out, char* err, size_t err_len) {
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
        if (id && ck_check_identity(&(*out)[0], strrchr(path, '/') + 1, base, id, dir, err, err_len) != 0) {
            st_free(&(*out)[0]);
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
        if (st_load(&(*out)[n], path, err, err_len) != 0 ||
            (id && ck_check_identity(&(*out)[n], e->valuestring, base, id, dir, err, err_len) != 0)) {
            for (int i = 0; i <= n; i++) st_free(&(*out)[i]);
            free(*out);
            *out = NULL;
            return -1;
        }
        /* a checkpoint of many shards (pp x tp x chunks files): its descriptors are not all held at once,
         * each read reopens its file (and checks it is the one opened) */
        if (cJSON_GetArraySize(files) > ST_KEEP_OPEN) st_close_fd(&(*out)[n]);
        n++;
    }
    if (n == 0) {
        rr_fail(err, err_len, "%s/state.json lists no %s files", dir, base);
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

/* A JSON number that is a whole number in [lo, hi] (a double holds every integer up to 2^53 exactly). */
static int ck_json_int(const cJSON* x, double lo, double hi, int64_t* out) {
    if (!cJSON_IsNumber(x)) return -1;
    double v = x->valuedouble;
    if (!(v >= lo && v <= hi) || v != floor(v)) return -1;
    *out = (int64_t)v;
    return 0;
}

/* "pp=P tp=T chunks=C", each in [1, 65536] and at most 2^20 shards; the number of shards it writes. */
static int ck_layout_shards(const char* layout, int64_t* shards) {
    int p, t, c, used = 0;
    if (sscanf(layout, "pp=%5d tp=%5d chunks=%5d%n", &p, &t, &c, &used) != 3 || layout[used] != 0 || p < 1 ||
        t < 1 || c < 1 || (int64_t)p * t * c > (1 << 20))
        return -1;
    *shards = (int64_t)p * t * c;
    return 0;
}

static int ck_cmp_str(const void* a, const void* b) { return strcmp(*(const char* const*)a, *(const char* const*)b); }

/* Parse and check state.json (path, already parsed as j) into st: every value of the right type and in
 * its range, and consistent with the others (optimizer_step <= step; the files are the layout's shards,
 * each model file with its optimizer file). The files' own identity is checked as they are loaded. */
static int ck_state_parse(const char* path, const cJSON* j, CheckpointState* st, char* err, size_t err_len) {
    const cJSON* fmt = j ? cJSON_GetObjectItemCaseSensitive(j, "format") : NULL;
    const cJSON* ver = j ? cJSON_GetObjectItemCaseSensitive(j, "version") : NULL;
    if (!j || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "rrfp-mm-checkpoint") != 0) {
        rr_fail(err, err_len, "%s: not an rrfp-mm checkpoint state (bad JSON or \"format\")", path);
        return -1;
    }
    if (!cJSON_IsNumber(ver) || ver->valuedouble != CHECKPOINT_VERSION) {
        rr_fail(err, err_len, "%s: checkpoint version %.0f, this build reads version %d only (version 3 added the "
               "step, run and layout to every file of a checkpoint); resume it with the build that wrote it, or "
               "start the run again (train.init_from reads its parameters)", path,
               cJSON_IsNumber(ver) && fabs(ver->valuedouble) < 1e9 ? ver->valuedouble : -1.0, CHECKPOINT_VERSION);
        return -1;
    }
    const char* bad = NULL;
    int64_t shards = 0;
    const cJSON* lay = cJSON_GetObjectItemCaseSensitive(j, "layout");
    if (ck_json_int(cJSON_GetObjectItemCaseSensitive(j, "step"), 0, CHECKPOINT_MAX_STEP, &st->step))
        bad = "\"step\" (a whole number in [0, 1e9])";
    else if (ck_json_int(cJSON_GetObjectItemCaseSensitive(j, "optimizer_step"), 0, CHECKPOINT_MAX_STEP, &st->opt_step))
        bad = "\"optimizer_step\" (a whole number in [0, 1e9])";
    else if (st->opt_step > st->step)
        bad = "\"optimizer_step\" (at most \"step\": one AdamW update per step at most)";
    else if (rr_json_u64(j, "run", 1, &st->run))
        bad = "\"run\" (16 hex digits)";
    else if (!cJSON_IsString(lay) || strlen(lay->valuestring) >= sizeof st->layout ||
             (strcmp(lay->valuestring, CHECKPOINT_LAYOUT_IMPORT) && ck_layout_shards(lay->valuestring, &shards)))
        bad = "\"layout\" (\"pp=P tp=T chunks=C\")";
    if (bad) {
        rr_fail(err, err_len, "%s: missing or malformed %s", path, bad);
        return -1;
    }
    snprintf(st->layout, sizeof st->layout, "%s", lay->valuestring);
    const cJSON* files = cJSON_GetObjectItemCaseSensitive(j, "files");
    int nm = 0, no = 0;
    if (!cJSON_IsArray(files)) {
        rr_fail(err, err_len, "%s: missing or malformed \"files\" (a list of the folder's file names)", path);
        return -1;
    }
    int import = !strcmp(st->layout, CHECKPOINT_LAYOUT_IMPORT); /* model files only, as many as it converted */
    int nfiles = cJSON_GetArraySize(files);
    if (!import && nfiles != 2 * shards) {
        rr_fail(err, err_len, "%s: \"files\" lists %d files, but layout \"%s\" writes %lld (a model and an optimizer "
               "file per shard)", path, nfiles, st->layout, (long long)(2 * shards));
        return -1;
    }
    const char** names = callocCheck((size_t)nfiles + 1, sizeof(char*));
    const cJSON* e;
    int rc = 0;
    cJSON_ArrayForEach(e, files) {
        char shard[128];
        const char* v = cJSON_IsString(e) ? e->valuestring : NULL;
        int model = v && ck_shard_of(v, "model", shard, sizeof shard) == 0;
        int optim = v && !model && ck_shard_of(v, "optimizer", shard, sizeof shard) == 0;
        if (!v || strchr(v, '/') || (!model && !optim)) {
            rr_fail(err, err_len, "%s: \"files\" entry %.200s is not model[.SHARD].safetensors or "
                   "optimizer[.SHARD].safetensors", path, v ? v : "(not a string)");
            rc = -1;
            break;
        }
        names[nm + no] = v;
        nm += model, no += optim;
    }
    /* each file once: sorted, so a forged list of a million names costs n log n, not n^2 */
    if (rc == 0) qsort(names, (size_t)(nm + no), sizeof *names, ck_cmp_str);
    for (int i = 1; rc == 0 && i < nm + no; i++)
        if (!strcmp(names[i - 1], names[i])) {
            rr_fail(err, err_len, "%s: \"files\" lists %.200s twice", path, names[i]);
            rc = -1;
        }
    free(names);
    if (rc != 0) return -1;
    if (import ? (nm < 1 || no != 0) : (nm != shards || no != shards)) {
        rr_fail(err, err_len, "%s: \"files\" lists %d model and %d optimizer files, but layout \"%s\" writes %s", path,
               nm, no, st->layout, import ? "one or more model files and no optimizer file" : "one of each per shard");
        return -1;
    }
    /* the run (run folder) that wrote it: optional (checkpoints of builds before run folders carry none) */
    const cJSON* rid = cJSON_GetObjectItemCaseSensitive(j, "run_id");
    if (rid && !cJSON_IsNull(rid)) {
        if (!cJSON_IsString(rid) || !rid->valuestring[0] || strlen(rid->valuestring) >= sizeof st->run_id) {
            rr_fail(err, err_len, "%s: malformed \"run_id\" (a string of 1 to %zu characters: RUN_DIR/run.json's)", path,
                   sizeof st->run_id - 1);
            return -1;
        }
        snprintf(st->run_id, sizeof st->run_id, "%s", rid->valuestring);
    }
    /* everything else is the owner's record, handed back as it is */
    cJSON* rec = cJSON_CreateObject();
    const cJSON* m;
    cJSON_ArrayForEach(m, j) {
        if (!ck_own_key(m->string)) cJSON_AddItemToObject(rec, m->string, cJSON_Duplicate(m, 1));
    }
    st->record = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    return 0;
}

/* A checkpoint folder's state.json read, parsed and checked into *st (zeroed first), and a folder named
 * step-N (as the writer names them) holding step N: a renamed or copied folder is not taken for another
 * step (checkpoint.resume = latest goes by the name). Returns the parsed JSON (the caller deletes it), or
 * NULL with a message (st freed). */
static cJSON* ck_state_open(const char* dir, CheckpointState* st, char* path, size_t path_len, char* err,
                            size_t err_len) {
    memset(st, 0, sizeof *st);
    snprintf(path, path_len, "%s/state.json", dir);
    cJSON* j = rr_read_json_object(path, RR_MAX_JSON, "a JSON file", "%s: cannot read: %s (not a checkpoint folder?)", err,
                                   err_len);
    if (!j && errno) return NULL;
    if (ck_state_parse(path, j, st, err, err_len) != 0) goto fail; /* NULL j: not a checkpoint state */
    const char* base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    long long named;
    int used = 0;
    if (sscanf(base, "step-%lld%n", &named, &used) == 1 && base[used] == 0 && named != st->step) {
        rr_fail(err, err_len, "%s: \"step\" is %lld, but the folder is named for step %lld: refusing to mix steps "
               "(name the folder step-%08lld, or resume from the folder of step %lld)", path, (long long)st->step,
               named, (long long)st->step, named);
        goto fail;
    }
    return j;
fail:
    cJSON_Delete(j);
    checkpoint_state_free(st);
    return NULL;
}

int checkpoint_load(const char* dir, ParamTable* pt, CheckpointState* st, const char* shard, char* err,
                    size_t err_len) {
    char path[4200];
    cJSON* j = ck_state_open(dir, st, path, sizeof path, err, err_len);
    if (!j) return -1;
    if (!strcmp(st->layout, CHECKPOINT_LAYOUT_IMPORT)) {
        rr_fail(err, err_len, "%s: an imported model (rrfp-mm import), with no optimiser state or data position: it "
               "starts a run as train.init_from, it does not resume one", path);
        goto fail;
    }
    const cJSON* files = cJSON_GetObjectItemCaseSensitive(j, "files");

    StFile* f = NULL;
    int nf = ck_load_files(dir, files, "model", shard, st, &f, err, err_len);
    if (nf < 0) goto fail;
    int rc = ck_read_block(f, nf, pt, NULL, "", err, err_len);
    if (rc == 0) rc = params_quant_st_read(f, nf, pt, 1, err, err_len); /* QLoRA: the codes it trained on */
    ck_free_files(f, nf);
    /* every master was (re)written, even on a failed read: no copy may stay as it was */
    params_master_written(pt, -1);
    params_refresh_compute(pt);
    if (rc) goto fail;
    if (pt->m && pt->v) {
        nf = ck_load_files(dir, files, "optimizer", shard, st, &f, err, err_len);
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

int checkpoint_load_moments_range(const char* dir, const ParamTable* pt, size_t lo, size_t hi, float* m, float* v,
                                  char* err, size_t err_len) {
    RR_ASSERT(lo <= hi && hi <= pt->gtotal);
    char path[4200];
    CheckpointState st;
    cJSON* j = ck_state_open(dir, &st, path, sizeof path, err, err_len);
    if (!j) return -1;
    StFile* f = NULL;
    int nf = ck_load_files(dir, cJSON_GetObjectItemCaseSensitive(j, "files"), "optimizer", NULL, &st, &f, err, err_len);
    int rc = nf < 0 ? -1 : 0;
    float* h = NULL;
    char name[160];
    for (int i = 0; i < pt->n && rc == 0; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (s->frozen || s->goff + s->numel <= lo || s->goff >= hi) continue;
        /* the part of tensor i inside [lo, hi): its elements a .. b */
        size_t a = lo > s->goff ? lo - s->goff : 0, b = hi < s->goff + s->numel ? hi - s->goff : s->numel;
        h = reallocCheck(h, s->numel * sizeof(float));
        ParamSlice whole = {.dim = -1};
        for (int k = 0; k < 2 && rc == 0; k++) {
            snprintf(name, sizeof name, "%s%s", k ? "v." : "m.", s->name);
            rc = checkpoint_read_assembled(f, nf, name, params_is_slice(s) ? &s->slice : &whole, s->ndim, s->shape, h,
                                           CK_CHECK_ALL, k, err, err_len);
            if (rc == 0) memcpy((k ? v : m) + (s->goff + a - lo), h + a, (b - a) * sizeof(float));
        }
    }
    free(h);
    if (nf > 0) ck_free_files(f, nf);
    cJSON_Delete(j);
    checkpoint_state_free(&st);
    return rc;
}

int checkpoint_load_model(const char* dir, ParamTable* pt, const char* const* optional, int n_optional,
                          CheckpointState* st, char* err, size_t err_len) {
    char path[4200];
    cJSON* j = ck_state_open(dir, st, path, sizeof path, err, err_len);
    if (!j) return -1;
    StFile* f = NULL;
    int nf = -1, rc = -1;
    nf = ck_load_files(dir, cJSON_GetObjectItemCaseSensitive(j, "files"), "model", NULL, st, &f, err, err_len);
    if (nf < 0) goto done;
    int own = 0; /* the optional tensors keep pt's values: start from them */
    float* h = params_host_values(pt, &own);
    rc = 0;
    for (int i = 0; i < pt->n && rc == 0; i++) {
        const ParamSpec* s = &pt->specs[i];
        int held = 0, opt = 0;
        for (int k = 0; k < nf && !held; k++) held = st_find(&f[k], s->name) != NULL;
        for (int k = 0; k < n_optional && !held && !opt; k++) opt = !strcmp(optional[k], s->name);
        if (opt) continue;
        ParamSlice whole = {.dim = -1};
        rc = checkpoint_read_assembled(f, nf, s->name, params_is_slice(s) ? &s->slice : &whole, s->ndim, s->shape,
                                       h + s->offset, CK_CHECK_ALL, 0, err, err_len);
        params_master_written(pt, i);
    }
    if (rc == 0) params_set_host_values(pt, h, own);
    else if (own) free(h);
    params_refresh_compute(pt); /* the copies of the tensors read (engine/params.h), also after a failed read */
done:
    if (nf >= 0) ck_free_files(f, nf);
    cJSON_Delete(j);
    if (rc != 0) checkpoint_state_free(st);
    return rc;
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
    cJSON* j = rr_read_json_object(path, RR_MAX_JSON, "a checkpoint's state.json",
                                   "%s: cannot read: %s (train.init_from needs a checkpoint folder: a run's "
                                   "checkpoints/step-N, or the output of rrfp-mm import llama)", err, err_len);
    if (!j && errno) return -1;
    const cJSON* fmt = j ? cJSON_GetObjectItemCaseSensitive(j, "format") : NULL;
    if (!j || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "rrfp-mm-checkpoint") != 0) {
        rr_fail(err, err_len, "%s: not an rrfp-mm checkpoint state (bad JSON or \"format\")", path);
        cJSON_Delete(j);
        return -1;
    }
    /* a checkpoint of this build (state.json has "run") is checked as a resume checks it: state.json's
     * values, and every model file's step, job and layout; another tool's folder is read as it is */
    CheckpointState id;
    memset(&id, 0, sizeof id);
    int ours = cJSON_GetObjectItemCaseSensitive(j, "run") != NULL;
    if (ours && ck_state_parse(path, j, &id, err, err_len) != 0) {
        cJSON_Delete(j);
        return -1;
    }
    checkpoint_state_free(&id);
    StFile* f = NULL;
    int nf = ck_load_files(dir, cJSON_GetObjectItemCaseSensitive(j, "files"), "model", NULL, ours ? &id : NULL, &f,
                           err, err_len);
    cJSON_Delete(j);
    if (nf < 0) return -1;

    int load = pt->data != NULL, own = 0;
    float* h = load ? params_host_values(pt, &own) : NULL; /* the tensors not loaded keep their values */
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
                rr_fail(err, err_len, "%s: tensor '%s': malformed slice description '%s'", f[k].path, s->name, mv);
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
                /* gshape holds 4 dims; a file's tensor of more (the format allows 8) is shown as stored (a
                 * slice description is never parsed to more than 4) */
                ck_shape_str(a, sizeof a, gnd, gnd > TENSOR_MAX_DIMS ? t->shape : gshape);
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
                                           h + s->offset, ours ? CK_CHECK_ALL : CK_CHECK_VALUES, 0, err, err_len);
        }
        if (load) params_master_written(pt, i);
        loaded[n_loaded++] = s->name;
        values += (double)s->numel;
    }
    if (rc == 0 && load) params_set_host_values(pt, h, own);
    else if (own) free(h);
    if (rc == 0 && load) rc = params_quant_st_read(f, nf, pt, 0, err, err_len); /* a QLoRA checkpoint's NF4 form */
    /* the compute copies of the tensors just loaded (a bf16 table), before any step reads them */
    if (load) params_refresh_compute(pt);
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
    ck_free_files(f, nf);
    return rc;
}

int checkpoint_run_id(const char* dir, char* id, size_t id_len, char* err, size_t err_len) {
    char p[4200];
    snprintf(p, sizeof p, "%s/state.json", dir);
    id[0] = 0;
    cJSON* j = rr_read_json_object(p, RR_MAX_JSON, "a checkpoint's state.json", "%s: cannot read: %s (not a checkpoint folder?)",
                                   err, err_len);
    if (!j && errno) return -1;
    const cJSON* rid = j ? cJSON_GetObjectItemCaseSensitive(j, "run_id") : NULL;
    int rc = 0;
    if (!cJSON_IsObject(j)) {
        if (err) rr_fail(err, err_len, "%s: not a JSON object (not a checkpoint folder?)", p);
        rc = -1;
    } else if (rid && !cJSON_IsNull(rid) &&
               (!cJSON_IsString(rid) || !rid->valuestring[0] || strlen(rid->valuestring) >= id_len)) {
        if (err) rr_fail(err, err_len, "%s: malformed \"run_id\" (a string of 1 to %zu characters: RUN_DIR/run.json's)", p,
                        id_len - 1);
        rc = -1;
    } else if (cJSON_IsString(rid)) {
        snprintf(id, id_len, "%s", rid->valuestring);
    }
    cJSON_Delete(j);
    return rc;
}
