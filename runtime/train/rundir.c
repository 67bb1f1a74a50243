/* rundir.c — run folders that never mix runs (see rundir.h). */
#define _GNU_SOURCE
#include "runtime/train/rundir.h"
#include "runtime/train/runckpt.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/checkpoint.h"
#include "engine/json.h"
#include "engine/util.h"

int rundir_read_id(const char* run_dir, char* id, size_t id_len, char* err, size_t err_len) {
    char path[RECIPE_STR + 32];
    snprintf(path, sizeof path, "%s/run.json", run_dir);
    id[0] = 0;
    cJSON* j = rr_read_json_object(path, RR_MAX_JSON, "a run.json file", "%s: cannot read: %s", err, err_len);
    if (!j && errno == ENOENT) {
        if (err_len) err[0] = 0;
        return 0;
    }
    if (!j && errno) return -1;
    const cJSON* rid = j ? cJSON_GetObjectItemCaseSensitive(j, "run_id") : NULL;
    if (!cJSON_IsString(rid) || !rid->valuestring[0] || strlen(rid->valuestring) >= id_len) {
        snprintf(err, err_len, "%s: not a run identity (a JSON object with a \"run_id\" string); it is written by "
                 "`rrfp-mm train` when a run starts: move the file away if it is not a run's", path);
        cJSON_Delete(j);
        return -1;
    }
    snprintf(id, id_len, "%s", rid->valuestring);
    cJSON_Delete(j);
    return 1;
}

void rundir_new_id(char* id, size_t id_len) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, GRND_NONBLOCK) != (ssize_t)sizeof x) x = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t h = RR_FNV1A64_INIT;
    h = rr_fnv1a64_word(h, (uint64_t)ts.tv_sec);
    h = rr_fnv1a64_word(h, (uint64_t)ts.tv_nsec);
    h = rr_fnv1a64_word(h, (uint64_t)getpid());
    h = rr_fnv1a64_word(h, x);
    snprintf(id, id_len, "%016llx", (unsigned long long)h);
}

static int rundir_write_id(const char* run_dir, const char* id, const Recipe* r, char* err, size_t err_len) {
    char path[RECIPE_STR + 32], stamp[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON* j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "run_id", id);
    cJSON_AddStringToObject(j, "started", stamp);
    cJSON_AddStringToObject(j, "recipe", r->path);
    char* text = cJSON_Print(j);
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/run.json", run_dir);
    size_t n = strlen(text);
    char* line = mallocCheck(n + 2);
    memcpy(line, text, n);
    line[n] = '\n';
    int rc = rr_write_file_atomic(path, line, n + 1);
    free(line);
    free(text);
    if (rc != 0) snprintf(err, err_len, "cannot write '%s': %s", path, strerror(errno));
    return rc;
}

/* ---- what a folder holds ---- */

typedef struct {
    int64_t rows, first, last; /* metrics.jsonl: rows and their step range */
    int ckpts;                 /* step-* folders under ckpt_root (any run's) */
    char names[512];           /* the first few of them */
} RunContents;

static void rundir_inventory(const char* run_dir, const char* ckpt_root, RunContents* c) {
    memset(c, 0, sizeof *c);
    char path[RECIPE_STR + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    size_t n = 0;
    /* only a regular file holds rows (a link to /dev/full or a FIFO is read as nothing), up to the cap; a
     * file it cannot read counts no rows */
    struct stat sb;
    char* text = stat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? rr_read_file(path, &n, RR_MAX_JSONL) : NULL;
    for (char* line = text; text && line < text + n;) {
        char* nl = memchr(line, '\n', (size_t)(text + n - line));
        long long st;
        if (sscanf(line, "{\"step\":%lld", &st) == 1) {
            if (c->rows == 0 || st < c->first) c->first = st;
            if (c->rows == 0 || st > c->last) c->last = st;
            c->rows++;
        }
        line = nl ? nl + 1 : text + n;
    }
    free(text);
    DIR* d = opendir(ckpt_root);
    struct dirent* e;
    size_t o = 0;
    while (d && (e = readdir(d))) {
        long long s;
        char tail;
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1) continue;
        if (c->ckpts < 4 && o < sizeof c->names)
            o += (size_t)snprintf(c->names + o, sizeof c->names - o, "%s%s", o ? ", " : "", e->d_name);
        else if (c->ckpts == 4 && o < sizeof c->names)
            o += (size_t)snprintf(c->names + o, sizeof c->names - o, ", ...");
        c->ckpts++;
    }
    if (d) closedir(d);
}

static void rundir_describe(const RunContents* c, const char* run_dir, const char* ckpt_root, char* out, size_t n) {
    size_t o = 0;
    if (c->rows)
        o += (size_t)snprintf(out + o, n - o, "%s/metrics.jsonl with %lld rows (steps %lld..%lld)", run_dir,
                              (long long)c->rows, (long long)c->first, (long long)c->last);
    if (c->ckpts && o < n)
        snprintf(out + o, n - o, "%s%d checkpoint%s in %s (%s)", o ? " and " : "", c->ckpts, c->ckpts == 1 ? "" : "s",
                 ckpt_root, c->names);
}

/* ckpt_root lies inside run_dir (then moving run_dir's entries moves it too). */
static int rundir_inside(const char* run_dir, const char* ckpt_root) {
    size_t l = strlen(run_dir);
    return !strncmp(ckpt_root, run_dir, l) && ckpt_root[l] == '/';
}

/* Move every entry of `dir` (except the lock, earlier previous-* folders and, when only is not NULL,
 * names not starting with it) into dir/previous-<stamp>/, made first. Returns 0, or -1 with a message. */
static int rundir_move_aside(const char* dir, const char* stamp, const char* only, FILE* note, char* err,
                             size_t err_len) {
    char dst[RECIPE_STR + 64], from[RECIPE_STR + 320], to[RECIPE_STR + 384];
    snprintf(dst, sizeof dst, "%s/previous-%s", dir, stamp);
    DIR* d = opendir(dir);
    if (!d) return 0;
    int moved = 0, rc = 0;
    struct dirent* e;
    while (rc == 0 && (e = readdir(d))) {
        const char* nm = e->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, "..") || !strcmp(nm, ".lock") || !strncmp(nm, "previous-", 9)) continue;
        if (only && strncmp(nm, only, strlen(only)) != 0) continue;
        if (moved == 0 && mkdir(dst, 0755) != 0) {
            snprintf(err, err_len, "cannot create '%s' to move the old run aside: %s", dst, strerror(errno));
            rc = -1;
            break;
        }
        snprintf(from, sizeof from, "%s/%s", dir, nm);
        snprintf(to, sizeof to, "%s/%s", dst, nm);
        if (rename(from, to) != 0) {
            snprintf(err, err_len, "cannot move '%s' aside to '%s': %s (moved so far stays there; nothing was deleted)",
                     from, to, strerror(errno));
            rc = -1;
        }
        moved++;
    }
    closedir(d);
    if (rc == 0 && moved)
        fprintf(note, "rrfp-mm: moved the previous contents of %s (%d entr%s) aside into %s: nothing was deleted\n",
                dir, moved, moved == 1 ? "y" : "ies", dst);
    return rc;
}

/* A stamp no previous-* folder of run_dir or ckpt_root uses yet. */
static void rundir_stamp(const char* run_dir, const char* ckpt_root, char* stamp, size_t n) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char base[32], p1[RECIPE_STR + 96], p2[RECIPE_STR + 96];
    strftime(base, sizeof base, "%Y%m%d-%H%M%S", &tm);
    for (int k = 1;; k++) {
        if (k == 1) snprintf(stamp, n, "%s", base);
        else snprintf(stamp, n, "%s-%d", base, k);
        snprintf(p1, sizeof p1, "%s/previous-%s", run_dir, stamp);
        snprintf(p2, sizeof p2, "%s/previous-%s", ckpt_root, stamp);
        if (access(p1, F_OK) != 0 && access(p2, F_OK) != 0) return;
    }
}

/* Before a used run folder's contents move aside (everything in it but the lock and earlier previous-*
 * folders): refused when the folder is the working folder or a folder above it, or holds an input of this
 * run (the recipe, data.shards, data.tokenizer, ...): those would move with it. 0, or -1 with a message. */
static int rundir_clear_check(const Recipe* r, const char* run_dir, char* err, size_t err_len) {
    char rd[PATH_MAX], cwd[PATH_MAX], ri[PATH_MAX];
    if (!realpath(run_dir, rd)) return 0; /* nothing there to move */
    size_t l = strlen(rd);
    int above = !strcmp(rd, "/");
    if (realpath(".", cwd) && (!strcmp(cwd, rd) || above || (!strncmp(cwd, rd, l) && cwd[l] == '/'))) {
        snprintf(err, err_len, "train.run_dir = %s is the working folder%s: moving a used run folder's contents aside "
                 "(train.overwrite, or --resume auto's fresh start) would move everything in it, not only a run's "
                 "files\n---> HINT: give the run a folder of its own: --set train.run_dir=runs/NAME", run_dir,
                 strcmp(cwd, rd) ? " or a folder above it" : "");
        return -1;
    }
    const struct {
        const char *key, *path;
    } in[] = {{"the recipe", r->path}, {"data.tokenizer", r->tokenizer}, {"data.shards", r->shards},
              {"data.eval_shards", r->eval_shards}, {"train.init_from", r->init_from},
              {"data.synthetic_plan", r->synthetic_plan}};
    int synthetic = !strcmp(r->source, "synthetic"); /* reads no shards or tokenizer */
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        if (synthetic && i >= 1 && i <= 3) continue;
        if (!in[i].path[0] || !realpath(in[i].path, ri)) continue;
        if (!strcmp(ri, rd) || above || (!strncmp(ri, rd, l) && ri[l] == '/')) {
            snprintf(err, err_len, "train.run_dir = %s holds %s (%s), an input of this run: moving the folder's "
                     "contents aside (train.overwrite, or --resume auto's fresh start) would move it too\n---> HINT: "
                     "give the run a folder of its own (--set train.run_dir=runs/NAME), or keep the run's inputs "
                     "outside its folder", run_dir, in[i].key, in[i].path);
            return -1;
        }
    }
    return 0;
}

static int rundir_clear(const char* run_dir, const char* ckpt_root, FILE* note, char* err, size_t err_len) {
    char stamp[48];
    rundir_stamp(run_dir, ckpt_root, stamp, sizeof stamp);
    if (!rundir_inside(run_dir, ckpt_root) &&
        rundir_move_aside(ckpt_root, stamp, "step-", note, err, err_len) != 0)
        return -1;
    return rundir_move_aside(run_dir, stamp, NULL, note, err, err_len);
}

int rundir_own_file(const char* name) {
    static const char* exact[] = {"run.json", "recipe.ini", "metrics.jsonl", ".lock", "checkpoints"};
    static const char* prefix[] = {"rank-", "trace-rank", "dump-", "previous-"};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (!strcmp(name, exact[i])) return 1;
    for (size_t i = 0; i < sizeof prefix / sizeof prefix[0]; i++)
        if (!strncmp(name, prefix[i], strlen(prefix[i]))) return 1;
    return 0;
}

int rundir_latest(const char* run_dir, const char* ckpt_root, char* out, size_t out_len, char* err, size_t err_len) {
    char id[RUN_ID_LEN];
    if (rundir_read_id(run_dir, id, sizeof id, err, err_len) < 0) return -1;
    if (runckpt_latest_of(ckpt_root, id, out, out_len) >= 0) return 0;
    if (id[0])
        snprintf(err, err_len, "no checkpoint of run %s (%s/run.json) in '%s'", id, run_dir, ckpt_root);
    else
        snprintf(err, err_len, "no checkpoint in '%s'", ckpt_root);
    return -1;
}

/* checkpoint.resume = latest / auto pass over step-* folders without a state.json (a folder renamed there
 * by hand, or left by another tool: a checkpoint is renamed to step-N only when complete): each is named,
 * and left as it is. */
static void rundir_note_incomplete(const Recipe* r, const char* ckpt_root, const char* chosen, FILE* note) {
    DIR* d = opendir(ckpt_root);
    int n = 0;
    for (struct dirent* e; d && (e = readdir(d));) {
        long long s;
        char tail, p[RECIPE_STR + 320];
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1) continue;
        snprintf(p, sizeof p, "%s/%s/state.json", ckpt_root, e->d_name);
        if (access(p, F_OK) == 0) continue;
        if (n++ < 8)
            fprintf(note, "rrfp-mm: warning: checkpoint.resume = %s: '%s/%s' has no state.json (not a complete "
                    "checkpoint: an incomplete or foreign folder): skipped%s%s; it is left as it is\n", r->resume,
                    ckpt_root, e->d_name, chosen[0] ? ", resuming from " : "", chosen);
    }
    if (n > 8) fprintf(note, "rrfp-mm: warning: ... and %d more such folders in '%s'\n", n - 8, ckpt_root);
    if (d) closedir(d);
}

/* An explicit checkpoint.resume that is no checkpoint folder: what it is instead and what to give, in err; 0 when
 * it holds a state.json (the checkpoint's own checks follow). */
static int rundir_resume_folder(const char* dir, char* err, size_t err_len) {
    struct stat sb;
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/state.json", dir);
    if (stat(p, &sb) == 0) return 0;
    const char* give = "---> HINT: --resume takes a checkpoint folder (RUN_DIR/checkpoints/step-N), or latest (this "
                       "run's newest) or auto (the newest if any, else a fresh start)";
    if (stat(dir, &sb) != 0) {
        snprintf(err, err_len, "checkpoint.resume = '%s': no such folder\n%s", dir, give);
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(err, err_len, "checkpoint.resume = '%s': not a folder\n%s", dir, give);
        return -1;
    }
    snprintf(p, sizeof p, "%s/checkpoints", dir);
    int run_folder = stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
    int steps = 0;
    DIR* d = opendir(dir);
    for (struct dirent* e; d && (e = readdir(d));) steps += !strncmp(e->d_name, "step-", 5);
    if (d) closedir(d);
    if (run_folder)
        snprintf(err, err_len, "checkpoint.resume = '%s' is a run folder, not a checkpoint\n---> HINT: --resume latest "
                 "--set train.run_dir=%s resumes its newest checkpoint; or give one of %s/checkpoints/step-*", dir, dir,
                 dir);
    else if (steps)
        snprintf(err, err_len, "checkpoint.resume = '%s' holds %d step-* folder(s), it is not one\n---> HINT: give "
                 "one of them (%s/step-N), or --resume latest with that run's train.run_dir", dir, steps, dir);
    else
        snprintf(err, err_len, "checkpoint.resume = '%s' holds no checkpoint (no state.json)\n%s", dir, give);
    return -1;
}

int rundir_prepare(const Recipe* r, const char* run_dir, const char* ckpt_root, RunStart* out, FILE* note, char* err,
                   size_t err_len) {
    memset(out, 0, sizeof *out);
    char folder_id[RUN_ID_LEN];
    int have_id = rundir_read_id(run_dir, folder_id, sizeof folder_id, err, err_len);
    if (have_id < 0) return -1;
    int fresh = 0;
    if (!strcmp(r->resume, "latest") || !strcmp(r->resume, "auto")) {
        int64_t got = runckpt_latest_of(ckpt_root, folder_id, out->resume_dir, sizeof out->resume_dir);
        if (got < 0) out->resume_dir[0] = 0;
        rundir_note_incomplete(r, ckpt_root, out->resume_dir, note);
        if (got < 0) {
            if (!strcmp(r->resume, "latest")) {
                if (folder_id[0])
                    snprintf(err, err_len, "checkpoint.resume = latest: no checkpoint of this run (%s in %s/run.json) in "
                             "'%s'\n---> HINT: --resume auto starts fresh when there is none", folder_id, run_dir,
                             ckpt_root);
                else
                    snprintf(err, err_len, "checkpoint.resume = latest: no checkpoint in '%s'\n---> HINT: --resume auto "
                             "starts fresh when there is none", ckpt_root);
                return -1;
            }
            fresh = 1; /* auto: nothing of this run to resume */
        }
    } else if (r->resume[0]) {
        if (rundir_resume_folder(r->resume, err, err_len) != 0) return -1;
        snprintf(out->resume_dir, sizeof out->resume_dir, "%s", r->resume);
    } else {
        fresh = 1;
    }

    if (!fresh) {
        char ck_id[RUN_ID_LEN];
        if (checkpoint_run_id(out->resume_dir, ck_id, sizeof ck_id, err, err_len) != 0) return -1;
        if (have_id && ck_id[0] && strcmp(ck_id, folder_id) != 0) {
            snprintf(err, err_len,
                     "checkpoint %s belongs to run %s, but run folder %s holds run %s (its run.json): resuming it there "
                     "would mix two runs\n---> HINT: resume it into its own run folder or a new one (another "
                     "train.run_dir), or start this folder's run with --resume auto",
                     out->resume_dir, ck_id, run_dir, folder_id);
            return -1;
        }
        /* checkpoints of earlier builds carry no identity: the folder's, or a new one from now on */
        if (ck_id[0]) snprintf(out->run_id, sizeof out->run_id, "%s", ck_id);
        else if (have_id) snprintf(out->run_id, sizeof out->run_id, "%s", folder_id);
        else rundir_new_id(out->run_id, sizeof out->run_id);
        if (!have_id && rundir_write_id(run_dir, out->run_id, r, err, err_len) != 0) return -1;
        return 0;
    }

    /* a fresh start: the folder must not hold another run's rows or checkpoints */
    RunContents c;
    rundir_inventory(run_dir, ckpt_root, &c);
    if (c.rows || c.ckpts) {
        char what[2048];
        rundir_describe(&c, run_dir, ckpt_root, what, sizeof what);
        if (!r->overwrite && strcmp(r->resume, "auto") != 0) {
            int outside = !rundir_inside(run_dir, ckpt_root);
            snprintf(err, err_len,
                     "train.run_dir = %s holds another run: %s. A fresh start there would mix two runs (its metrics "
                     "rows and checkpoints with this run's).\n---> HINT: continue that run with --resume auto (or "
                     "--set checkpoint.resume=auto); or give this run another folder (--set train.run_dir=...%s); or "
                     "--set train.overwrite=true to move the old contents aside into %s/previous-<date>-<time>/%s "
                     "(nothing is deleted)",
                     run_dir, what, outside ? " and --set checkpoint.dir=..." : "", run_dir,
                     outside ? " and the checkpoints into CKPT_DIR/previous-<date>-<time>/" : "");
            return -1;
        }
        /* overwrite, or auto with no checkpoint of this run to resume (a first attempt that died before
         * its first checkpoint, or another run's leftovers): aside, never deleted */
        if (rundir_clear_check(r, run_dir, err, err_len) != 0) return -1;
        fprintf(note, "rrfp-mm: %s: a fresh start in a used run folder (%s)\n",
                r->overwrite ? "train.overwrite = true" : "checkpoint.resume = auto found no checkpoint of this run",
                what);
        if (rundir_clear(run_dir, ckpt_root, note, err, err_len) != 0) return -1;
    }
    /* (a run.json alone, of a run that never finished a step, is replaced by this run's) */
    rundir_new_id(out->run_id, sizeof out->run_id);
    return rundir_write_id(run_dir, out->run_id, r, err, err_len);
}

int rundir_recipe_diff(const Recipe* r, const char* run_dir, const char* ckpt_root, const char* dir, char* out,
                       size_t out_len) {
    char path[RECIPE_STR * 2 + 64];
    size_t l = strlen(ckpt_root);
    if (!strncmp(dir, ckpt_root, l) && dir[l] == '/') {
        snprintf(path, sizeof path, "%s/recipe.ini", run_dir);
    } else {
        /* the default layout RUN/checkpoints/step-N */
        char tmp[RECIPE_STR + 64];
        snprintf(tmp, sizeof tmp, "%s", dir);
        size_t n = strlen(tmp);
        while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
        for (int up = 0; up < 2; up++) {
            char* s = strrchr(tmp, '/');
            if (!s) {
                snprintf(tmp, sizeof tmp, ".");
                break;
            }
            *s = 0;
        }
        snprintf(path, sizeof path, "%s/recipe.ini", tmp[0] ? tmp : "/");
    }
    Recipe* old = mallocCheck(sizeof *old);
    char e[1024];
    int n = 0;
    if (recipe_load(old, path, e, sizeof e) != 0) {
        snprintf(out, out_len, "the recipe of the run that wrote it cannot be read (%s)", e);
    } else {
        n = recipe_hash_diff(old, r, out, out_len);
        if (n == 0)
            snprintf(out, out_len, "%s hashes like this recipe: it is not the recipe that wrote the checkpoint", path);
        else {
            size_t o = strlen(out);
            snprintf(out + o, out_len - o, "\n  (old: %s, the recipe of the run that wrote it; new: this recipe)", path);
        }
    }
    free(old);
    return n;
}
