/* runckpt.h — a run's checkpoints: what a run records in each (its recipe hash, seeds, loader position and
 * data record, docs/training.md "Checkpoints"), which is the newest of a run, pruning, and the leftovers of
 * killed writers. engine/checkpoint.h writes and reads the folder itself (a parameter table <-> a checksummed
 * safetensors folder) and carries this record as it is (CheckpointState.record). */
#ifndef RRFP_RUNCKPT_H
#define RRFP_RUNCKPT_H

#include <stddef.h>
#include <stdint.h>

/* A run's record in a checkpoint's state.json: "recipe_hash" (16 hex digits), "seed" and "data_seed" (decimal
 * strings), "loader" (the loader's own JSON position, or null) and, when set, "data" (what shaped the data the
 * model was trained on: a JSON object, the runtime's: chat template, image preprocessing, tokenizer hash). */
typedef struct {
    uint64_t recipe_hash; /* recipe_hash() of the run that wrote it */
    uint64_t seed;        /* model.seed */
    uint64_t data_seed;   /* data.seed */
    char* loader;         /* loader position as JSON text (NULL = none) */
    char* data;           /* the data record, JSON object text (NULL = none: checkpoints of earlier builds) */
} RunRecord;

/* r as the JSON object text of CheckpointState.record (malloc'd), or NULL with a message when its loader
 * position or data record is not JSON (an internal error). */
char* runckpt_record_json(const RunRecord* r, char* err, size_t err_len);
/* The record of the checkpoint whose state.json is `path` (CheckpointState.record as checkpoint_load hands it
 * back) into *r, every value checked (type and range): 0, or -1 with a message naming path and the key
 * (*r freed). r's loader and data are malloc'd (runckpt_record_free). */
int runckpt_record_parse(const char* path, const char* record, RunRecord* r, char* err, size_t err_len);
void runckpt_record_free(RunRecord* r);

/* Path of the newest complete checkpoint under ROOT into out. Returns its step, or -1 when none. */
int64_t runckpt_latest(const char* root, char* out, size_t out_len);
/* As runckpt_latest, counting only the checkpoints whose run_id (checkpoint_run_id) is run_id (NULL or "": every
 * one); a checkpoint without one (an earlier build's) counts for every run. */
int64_t runckpt_latest_of(const char* root, const char* run_id, char* out, size_t out_len);

/* Delete all but the newest `keep` checkpoints under ROOT (keep 0 = keep all). */
void runckpt_prune(const char* root, int keep);
/* As runckpt_prune, counting and deleting only the checkpoints whose run_id is run_id (NULL or "": every one;
 * one without a run_id counts, as above): another run's checkpoints are never touched. */
void runckpt_prune_run(const char* root, int keep, const char* run_id);

/* Remove the leftovers of killed writers under ROOT: .step-N.tmp.PID, .step-N.tmp.shards.PID and .old.PID
 * folders (engine/checkpoint.c's temporary names) whose process PID is no longer alive on this machine (a live
 * process's, another job's included, is never touched). Writes their names, comma-separated, into removed.
 * Returns how many were removed (0 when ROOT does not exist). */
int runckpt_clean_stale(const char* root, char* removed, size_t removed_len);

#endif
