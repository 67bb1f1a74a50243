/* outguard.c — the output guard every command runs (outguard.h). */
#define _GNU_SOURCE
#include "runtime/train/outguard.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/util.h"
#include "runtime/train/rundir.h"

static char* og_strdup(const char* s) {
    size_t n = strlen(s) + 1;
    return memcpy(mallocCheck(n), s, n);
}

void guard_inputs_add(GuardInputs* in, const char* path, const char* what, int sealed) {
    if (!path || !path[0]) return;
    if (in->n == in->cap) {
        in->cap = in->cap ? 2 * in->cap : 16;
        in->v = reallocCheck(in->v, (size_t)in->cap * sizeof *in->v);
    }
    GuardInput* g = &in->v[in->n++];
    g->path = og_strdup(path);
    g->what = og_strdup(what);
    g->sealed = sealed;
}

/* The .rrs files of a shards setting: a folder's, or the one file. */
static void og_add_shards(GuardInputs* in, const char* shards, const char* what) {
    if (!shards[0]) return;
    struct stat sb;
    DIR* d = stat(shards, &sb) == 0 && S_ISDIR(sb.st_mode) ? opendir(shards) : NULL;
    if (!d) {
        guard_inputs_add(in, shards, what, 0);
        return;
    }
    for (struct dirent* e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".rrs") != 0) continue;
        char p[RECIPE_STR + 300];
        snprintf(p, sizeof p, "%s/%s", shards, e->d_name);
        guard_inputs_add(in, p, what, 0);
    }
    closedir(d);
}

void guard_inputs_add_recipe(GuardInputs* in, const Recipe* r) {
    guard_inputs_add(in, r->path, "the recipe", 0);
    guard_inputs_add(in, r->tokenizer, "data.tokenizer", 0);
    guard_inputs_add(in, r->synthetic_plan, "data.synthetic_plan", 0);
    if (strcmp(r->source, "synthetic") != 0) og_add_shards(in, r->shards, "a shard of data.shards");
    og_add_shards(in, r->eval_shards, "a shard of data.eval_shards");
    guard_inputs_add(in, r->init_from, "train.init_from", 1);
}

void guard_inputs_free(GuardInputs* in) {
    for (int i = 0; i < in->n; i++) free(in->v[i].path), free(in->v[i].what);
    free(in->v);
    memset(in, 0, sizeof *in);
}

int guard_same_file(const char* a, const char* b) {
    if (!strcmp(a, b)) return 1;
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* path as an absolute one: the realpath of its longest existing prefix, then the rest as written. */
static void og_resolve(const char* path, char* buf, size_t n) {
    char pre[PATH_MAX];
    snprintf(pre, sizeof pre, "%s", path);
    size_t l = strlen(pre);
    while (l > 1 && pre[l - 1] == '/') pre[--l] = 0;
    const char* rest = rr_path_existing_part(path, pre, sizeof pre, 0);
    char real[PATH_MAX];
    if (!realpath(pre, real)) snprintf(real, sizeof real, "%s", pre);
    if (snprintf(buf, n, "%s%s%s", real, rest[0] && strcmp(real, "/") ? "/" : "", rest) >= (int)n)
        snprintf(buf, n, "%s", path); /* longer than any path the system opens: kept as given */
    l = strlen(buf);
    while (l > 1 && buf[l - 1] == '/') buf[--l] = 0;
}

/* dir holds state.json and a model*.safetensors file: a checkpoint folder (a run's step-N, an import). */
static int og_is_checkpoint(const char* dir) {
    char p[PATH_MAX + 128];
    struct stat sb;
    snprintf(p, sizeof p, "%s/state.json", dir);
    if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    DIR* d = opendir(dir);
    int found = 0;
    for (struct dirent* e; d && !found && (e = readdir(d));)
        found = !strncmp(e->d_name, "model", 5) && strlen(e->d_name) >= 17 &&
                !strcmp(e->d_name + strlen(e->d_name) - 12, ".safetensors");
    if (d) closedir(d);
    return found;
}

/* dir is a run folder: its run.json, or (earlier builds) metrics.jsonl beside recipe.ini. */
static int og_is_run_folder(const char* dir) {
    char p[PATH_MAX + 128];
    snprintf(p, sizeof p, "%s/run.json", dir);
    if (access(p, F_OK) == 0) return 1;
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    if (access(p, F_OK) != 0) return 0;
    snprintf(p, sizeof p, "%s/recipe.ini", dir);
    return access(p, F_OK) == 0;
}

/* dir holds a checkpoint step-*: a checkpoint root (train's checkpoint.dir). */
static int og_holds_checkpoints(const char* dir) {
    DIR* d = opendir(dir);
    int found = 0;
    for (struct dirent* e; d && !found && (e = readdir(d));) {
        long long s;
        char tail;
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1) continue;
        char p[PATH_MAX + 400];
        snprintf(p, sizeof p, "%s/%s/state.json", dir, e->d_name);
        found = access(p, F_OK) == 0;
    }
    if (d) closedir(d);
    return found;
}

/* The names a checkpoint root reserves: its checkpoints, their temporary, pruned and replaced folders,
 * its lock. */
static int og_checkpoint_entry(const char* name) {
    return !strncmp(name, "step-", 5) || !strncmp(name, ".step-", 6) || !strncmp(name, ".pruned-", 8) ||
           !strncmp(name, ".old.", 5) || !strcmp(name, ".lock");
}

/* out (stat so, when it exists) is input file `path`. */
static int og_is_input(const char* out, const struct stat* so, const char* path) {
    struct stat si;
    return !strcmp(out, path) || (so && stat(path, &si) == 0 && so->st_dev == si.st_dev && so->st_ino == si.st_ino);
}

static void og_input_err(const char* flag, const char* out, const char* what, const char* path, char* err,
                         size_t err_len) {
    snprintf(err, err_len, "%s '%s' is %s '%s'; refusing to overwrite an input (give another path)", flag, out, what,
             path);
}

int guard_output_input(const char* flag, const char* out, const char* path, const char* what, char* err,
                       size_t err_len) {
    struct stat so;
    if (stat(out, &so) != 0 || !og_is_input(out, &so, path)) return 0;
    og_input_err(flag, out, what, path, err, err_len);
    return -1;
}

int guard_output(const char* flag, const char* out, GuardOutKind kind, const char* pattern, const GuardInputs* in,
                 char* err, size_t err_len) {
    if (!out || !out[0]) {
        snprintf(err, err_len, "%s: an empty path", flag);
        return -1;
    }
    char ro[PATH_MAX];
    og_resolve(out, ro, sizeof ro);
    struct stat so;
    int exists = stat(out, &so) == 0;
    /* an input: the same file, or inside a sealed folder */
    for (int i = 0; in && i < in->n; i++) {
        const GuardInput* g = &in->v[i];
        if (og_is_input(out, exists ? &so : NULL, g->path)) {
            og_input_err(flag, out, g->what, g->path, err, err_len);
            return -1;
        }
        char ri[PATH_MAX];
        if (g->sealed && realpath(g->path, ri)) {
            size_t l = strlen(ri);
            if (!strncmp(ro, ri, l) && (ro[l] == '/' || !strcmp(ri, "/"))) {
                snprintf(err, err_len, "%s '%s' is inside %s '%s', which this command reads: give a path outside it",
                         flag, out, g->what, g->path);
                return -1;
            }
        }
    }
    if (kind == GUARD_OUT_FILE && exists && S_ISDIR(so.st_mode)) {
        snprintf(err, err_len, "%s '%s' is a folder; a file path is expected (e.g. '%s/%s')", flag, out, out,
                 "NAME");
        return -1;
    }
    if (kind == GUARD_OUT_FILE && exists && !S_ISREG(so.st_mode)) {
        snprintf(err, err_len, "%s '%s' is not a regular file (a device, FIFO or socket): refusing to replace it", flag,
                 out);
        return -1;
    }
    if (kind == GUARD_OUT_FOLDER && exists && !S_ISDIR(so.st_mode)) {
        snprintf(err, err_len, "%s '%s' exists and is not a directory", flag, out);
        return -1;
    }
    if (kind == GUARD_OUT_FOLDER && exists && og_is_checkpoint(out)) {
        snprintf(err, err_len, "%s '%s' is a checkpoint folder (it holds state.json): a checkpoint's files are "
                 "written by `rrfp-mm train` only; give another folder", flag, out);
        return -1;
    }
    /* every folder above: not a checkpoint, not a run folder's own entry, not a checkpoint root's entry */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", ro);
    for (int first = 1;; first = 0) {
        char* slash = strrchr(path, '/');
        if (!slash) break;
        char name[NAME_MAX + 1];
        snprintf(name, sizeof name, "%s", slash + 1);
        if (slash == path) slash[1] = 0;
        else *slash = 0;
        /* path: the folder holding `name` (out itself when first, else a folder above it) */
        if (og_is_checkpoint(path)) {
            snprintf(err, err_len, "%s '%s' is inside checkpoint folder '%s' (it holds state.json): a checkpoint's "
                     "files are written by `rrfp-mm train` only; give a path outside it", flag, out, path);
            return -1;
        }
        if (name[0] && og_is_run_folder(path) && rundir_own_file(name)) {
            if (first)
                snprintf(err, err_len, "%s '%s' is run folder '%s''s own %s (written by `rrfp-mm train`); give another "
                         "path (predictions, reports and answers may go beside it)", flag, out, path, name);
            else
                snprintf(err, err_len, "%s '%s' is inside run folder '%s''s own %s (written by `rrfp-mm train`); give "
                         "a path outside it", flag, out, path, name);
            return -1;
        }
        if (name[0] && og_checkpoint_entry(name) && og_holds_checkpoints(path)) {
            snprintf(err, err_len, "%s '%s': '%s' in '%s' is named like a checkpoint's own entry (step-*, .step-*, "
                     ".pruned-*, .old.*, .lock) beside the checkpoints there; give another path", flag, out, name, path);
            return -1;
        }
        if (!strcmp(path, "/")) break;
    }
    /* a folder output: no input among the files it writes or removes there */
    if (kind == GUARD_OUT_FOLDER && pattern && exists) {
        char rd[PATH_MAX];
        for (int i = 0; in && i < in->n && realpath(out, rd); i++) {
            char ri[PATH_MAX];
            if (!realpath(in->v[i].path, ri)) continue;
            char* slash = strrchr(ri, '/');
            if (!slash || slash == ri) continue;
            *slash = 0;
            if (!strcmp(ri, rd) && fnmatch(pattern, slash + 1, 0) == 0) {
                snprintf(err, err_len, "%s '%s' holds %s '%s', which this command would replace (it writes %s "
                         "there); give another folder", flag, out, in->v[i].what, in->v[i].path, pattern);
                return -1;
            }
        }
    }
    return 0;
}
