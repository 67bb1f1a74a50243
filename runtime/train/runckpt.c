/* runckpt.c — a run's checkpoint folders (runckpt.h): the newest, pruning, and the leftovers of killed writers. */
#include "runtime/train/runckpt.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/checkpoint.h"
#include "engine/json.h"
#include "engine/util.h"

/* A temporary or pruned folder: removed whole (nftw, no shell, symbolic links not followed). */
static void rc_rm_rf(const char* dir) {
    if (rr_remove_tree(dir) != 0) rr_warn("could not remove '%s': %s", dir, strerror(errno));
}

char* runckpt_record_json(const RunRecord* r, char* err, size_t err_len) {
    cJSON* j = cJSON_CreateObject();
    char hx[32];
    int rc = 0;
    /* 64-bit values as hex strings: JSON numbers are doubles */
    snprintf(hx, sizeof hx, "%016llx", (unsigned long long)r->recipe_hash);
    cJSON_AddStringToObject(j, "recipe_hash", hx);
    snprintf(hx, sizeof hx, "%llu", (unsigned long long)r->seed);
    cJSON_AddStringToObject(j, "seed", hx);
    snprintf(hx, sizeof hx, "%llu", (unsigned long long)r->data_seed);
    cJSON_AddStringToObject(j, "data_seed", hx);
    cJSON* lj = r->loader ? cJSON_Parse(r->loader) : cJSON_CreateNull();
    if (!lj) {
        rr_fail(err, err_len, "internal error: the loader position is not JSON: %.200s", r->loader);
        rc = -1;
        lj = cJSON_CreateNull();
    }
    cJSON_AddItemToObject(j, "loader", lj);
    if (r->data) {
        cJSON* dj = cJSON_Parse(r->data);
        if (!cJSON_IsObject(dj)) {
            rr_fail(err, err_len, "internal error: the data record is not a JSON object: %.200s", r->data);
            rc = -1;
        }
        if (dj) cJSON_AddItemToObject(j, "data", dj);
    }
    char* text = rc == 0 ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return text;
}

void runckpt_record_free(RunRecord* r) {
    free(r->loader);
    free(r->data);
    r->loader = r->data = NULL;
}

int runckpt_record_parse(const char* path, const char* record, RunRecord* r, char* err, size_t err_len) {
    memset(r, 0, sizeof *r);
    cJSON* j = record ? cJSON_Parse(record) : cJSON_CreateObject();
    const char* bad = NULL;
    if (rr_json_u64(j, "recipe_hash", 1, &r->recipe_hash))
        bad = "\"recipe_hash\" (16 hex digits)";
    else if (rr_json_u64(j, "seed", 0, &r->seed) || r->seed > 9007199254740991ull)
        bad = "\"seed\" (a decimal string, model.seed's range)";
    else if (rr_json_u64(j, "data_seed", 0, &r->data_seed) || r->data_seed > 9007199254740991ull)
        bad = "\"data_seed\" (a decimal string, data.seed's range)";
    if (bad) {
        cJSON_Delete(j);
        return rr_fail(err, err_len, "%s: missing or malformed %s", path, bad);
    }
    const cJSON* lj = cJSON_GetObjectItemCaseSensitive(j, "loader");
    const cJSON* dj = cJSON_GetObjectItemCaseSensitive(j, "data");
    int rc = 0;
    if (lj && !cJSON_IsNull(lj) && !cJSON_IsObject(lj))
        rc = rr_fail(err, err_len, "%s: \"loader\" is neither null nor an object (the loader's position)", path);
    else if (dj && !cJSON_IsNull(dj) && !cJSON_IsObject(dj))
        rc = rr_fail(err, err_len, "%s: \"data\" is neither null nor an object (what shaped the training data)", path);
    if (rc == 0 && lj && !cJSON_IsNull(lj)) r->loader = cJSON_PrintUnformatted(lj);
    if (rc == 0 && cJSON_IsObject(dj)) r->data = cJSON_PrintUnformatted(dj);
    cJSON_Delete(j);
    return rc;
}

/* Does checkpoint folder ROOT/NAME count for run_id (NULL or "": every complete one)? */
static int rc_of_run(const char* root, const char* name, const char* run_id) {
    char p[4200], id[64];
    snprintf(p, sizeof p, "%s/%s/state.json", root, name);
    if (access(p, R_OK) != 0) return 0;
    if (!run_id || !run_id[0]) return 1;
    snprintf(p, sizeof p, "%s/%s", root, name);
    /* a checkpoint of an earlier build carries no identity: it counts for whichever run resumed it */
    return checkpoint_run_id(p, id, sizeof id, NULL, 0) == 0 && (!id[0] || !strcmp(id, run_id));
}

int64_t runckpt_latest_of(const char* root, const char* run_id, char* out, size_t out_len) {
    DIR* d = opendir(root);
    if (!d) return -1;
    int64_t best = -1;
    struct dirent* e;
    while ((e = readdir(d))) {
        long long s;
        char tail;
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1) continue;
        if (s > best && rc_of_run(root, e->d_name, run_id)) {
            best = s;
            snprintf(out, out_len, "%s/%s", root, e->d_name);
        }
    }
    closedir(d);
    return best;
}

int64_t runckpt_latest(const char* root, char* out, size_t out_len) {
    return runckpt_latest_of(root, NULL, out, out_len);
}

static int rc_cmp_i64(const void* a, const void* b) {
    int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
    return x < y ? -1 : x > y;
}

void runckpt_prune(const char* root, int keep) { runckpt_prune_run(root, keep, NULL); }

void runckpt_prune_run(const char* root, int keep, const char* run_id) {
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
            rc_rm_rf(left);
            continue;
        }
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1 || !rc_of_run(root, e->d_name, run_id)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            steps = reallocCheck(steps, (size_t)cap * sizeof(int64_t));
        }
        steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof(int64_t), rc_cmp_i64);
    char p[4200], gone[4200];
    for (int i = 0; i + keep < n; i++) {
        /* Renamed out of the step-* namespace first (atomic), then deleted: a crash in the middle of
           the deletion leaves a hidden folder, never a step-* folder with files missing. */
        snprintf(p, sizeof p, "%s/step-%08lld", root, (long long)steps[i]);
        snprintf(gone, sizeof gone, "%s/.pruned-%08lld.%d", root, (long long)steps[i], (int)getpid());
        if (rename(p, gone) == 0) rc_rm_rf(gone);
    }
    (void)rr_fsync_dir(root); /* a removal: a power loss can only bring back an old checkpoint, whole */
    free(steps);
}

/* The pid a leftover's name ends with: .step-N.tmp.PID, .step-N.tmp.shards.PID, .old.PID; 0 when the
 * name is none of them. */
static int rc_leftover_pid(const char* name) {
    long long step;
    int pid = 0, n = 0;
    if (sscanf(name, ".step-%lld.tmp.shards.%d%n", &step, &pid, &n) == 2 && name[n] == 0) return pid;
    if (sscanf(name, ".step-%lld.tmp.%d%n", &step, &pid, &n) == 2 && name[n] == 0) return pid;
    if (sscanf(name, ".old.%d%n", &pid, &n) == 1 && name[n] == 0) return pid;
    return 0;
}

/* Whether process pid runs on this machine: kill(pid, 0) succeeds (or EPERM: another user's), and it is
 * not a zombie. A rank killed by mpirun stays a zombie until its parent reaps it, which can take the
 * parent's whole life: its temporary folder would be kept as a live writer's forever. */
static int rc_pid_alive(int pid) {
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE* f = fopen(path, "r");
    if (!f) return 1; /* no /proc: kill's answer */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char* rp = strrchr(buf, ')'); /* "PID (COMM) STATE ...": COMM may hold spaces and parentheses */
    return !(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
}

int runckpt_clean_stale(const char* root, char* removed, size_t removed_len) {
    if (removed_len) removed[0] = 0;
    DIR* d = opendir(root);
    if (!d) return 0;
    int n = 0;
    size_t o = 0;
    struct dirent* e;
    char p[4200];
    while ((e = readdir(d))) {
        int pid = rc_leftover_pid(e->d_name);
        if (pid <= 0) continue;
        /* alive (ours, or another job's on this machine; EPERM: alive under another user; not a zombie) */
        if (pid == (int)getpid() || rc_pid_alive(pid)) continue;
        snprintf(p, sizeof p, "%s/%s", root, e->d_name);
        rc_rm_rf(p);
        n++;
        if (o < removed_len) o += (size_t)snprintf(removed + o, removed_len - o, "%s%s", o ? ", " : "", e->d_name);
    }
    closedir(d);
    if (n) (void)rr_fsync_dir(root); /* removals of leftovers: see runckpt_prune_run */
    return n;
}
