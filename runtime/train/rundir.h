/* rundir.h — run folders that never mix runs. A run folder (train.run_dir) belongs to one
 * run: RUN_DIR/run.json {"run_id": ...} is written once, when the run starts fresh, and every
 * checkpoint the run writes carries the same "run_id" in its state.json (engine/checkpoint.h), so
 * `latest` and checkpoint.keep see only this run's checkpoints, even in a shared checkpoint.dir.
 *
 * A fresh start into a folder that holds another run's metrics rows or checkpoints is refused, naming
 * what is there and the ways on (--resume auto, another train.run_dir, train.overwrite = true); with
 * train.overwrite the old contents move aside into RUN_DIR/previous-<date>-<time>/ (and an outside
 * checkpoint.dir's step-* folders into CKPT_DIR/previous-<date>-<time>/): nothing is deleted.
 *
 * checkpoint.resume: "" fresh; DIR; `latest` (the newest checkpoint of this run; an error when there is
 * none); `auto` (the newest checkpoint of this run, else a fresh start: one job line for the first start
 * and every requeue). Errors are returned with a message; nothing here exits. */
#ifndef RRFP_TRAIN_RUNDIR_H
#define RRFP_TRAIN_RUNDIR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/train/recipe.h"

#define RUN_ID_LEN 40

typedef struct {
    char run_id[RUN_ID_LEN];     /* this run's identity */
    char resume_dir[RECIPE_STR + 64]; /* the checkpoint to resume ("" = a fresh start) */
} RunStart;

/* RUN_DIR/run.json's run_id into id. Returns 1 when read, 0 when there is no run.json (id ""), -1 with
 * a message when it cannot be read or parsed. */
int rundir_read_id(const char* run_dir, char* id, size_t id_len, char* err, size_t err_len);
/* A new run identity: 16 hex digits from the clock, the pid and the kernel's random bytes. */
void rundir_new_id(char* id, size_t id_len);

/* Decide how the run starts, on the rank that holds the run folder's lock (before anything is
 * allocated): resolve checkpoint.resume (latest / auto / DIR) against this run's checkpoints under
 * ckpt_root, refuse a fresh start into a used folder (or, with train.overwrite, or `auto` finding no
 * checkpoint, move the old contents aside), and write RUN_DIR/run.json when it is absent or a fresh run
 * replaces it. Notes (what moved where) go to `note`. Returns 0, or -1 with a message. */
int rundir_prepare(const Recipe* r, const char* run_dir, const char* ckpt_root, RunStart* out, FILE* note, char* err,
                   size_t err_len);

/* Is `name` an entry that `rrfp-mm train` writes in a run folder: run.json, recipe.ini, metrics.jsonl,
 * .lock, rank-*.json, trace-rank*.json, the default checkpoints/ folder, dump-* step dumps and the
 * previous-* folders of runs moved aside. (Other commands' outputs, such as predictions.jsonl or
 * report.html, are not.) */
int rundir_own_file(const char* name);

/* checkpoint.resume = latest / auto for a reader (eval, generate): the newest checkpoint of the run in
 * run_dir (every checkpoint under ckpt_root when the folder has no run.json). Returns 0, or -1 with a
 * message naming the folder. */
int rundir_latest(const char* run_dir, const char* ckpt_root, char* out, size_t out_len, char* err, size_t err_len);

/* A refused resume: the hashed recipe keys whose values differ between the recipe of the run that wrote
 * checkpoint `dir` (its run folder's recipe.ini: run_dir's when dir lies under ckpt_root, else
 * DIR/../../recipe.ini) and r, one "section.key: OLD (checkpoint's run) -> NEW (this recipe)" per line.
 * Returns how many differ (0 with `out` explaining when the old recipe cannot be read). */
int rundir_recipe_diff(const Recipe* r, const char* run_dir, const char* ckpt_root, const char* dir, char* out,
                       size_t out_len);

#endif
