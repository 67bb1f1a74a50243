/* checkpoint.h — a parameter table <-> a checksummed safetensors folder (docs/training.md "Checkpoints").
 *
 * A checkpoint is one folder ROOT/step-NNNNNNNN/ holding
 *   model.safetensors      every parameter by name (F32), metadata {"format": "rrfp-mm", "step"}
 *   optimizer.safetensors  AdamW moments as "m.<name>" and "v.<name>" (F32), trainable tensors only
 *                          (a tensor frozen by train.freeze has none)
 *   state.json             {"format", "version", "step", "optimizer_step", "run", "layout", "run_id",
 *                           the owner's record (a run's: runtime/train/runckpt.h), "files"}
 * (A pipeline/tensor-parallel shard writes model.pp<P>.tp<T>.safetensors and the matching optimizer
 * file instead; names stay global so a checkpoint reloads under another layout.)
 *
 * Checked values (docs/reliability.md "What is checked: files and arguments from elsewhere"). Every tensor's bytes carry an XXH64 checksum in its file's
 * __metadata__ ("xxh64.<tensor name>": 16 hex digits), verified on load, so silent corruption (a
 * flipped bit that still gives a plausible value) is found; every loaded value must be finite and
 * every AdamW second moment non-negative. A checkpoint is never written with a non-finite value
 * (a diverged run keeps its last good checkpoint as the newest). Errors name the file and tensor.
 *
 * Crash safety: the folder is built as ROOT/.step-NNNNNNNN.tmp.<pid>/ (each file written with
 * rr_write_file_atomic: temporary name, fsync, rename), then renamed to its final name and ROOT is
 * fsync'd. A folder named step-* is therefore always complete; state.json is written last. */
#ifndef RRFP_CHECKPOINT_H
#define RRFP_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/params.h"
#include "engine/safetensors.h"

#define CHECKPOINT_VERSION 3 /* 2: per-tensor XXH64 checksums; 3: every file carries step, run, layout, shard */
#define CHECKPOINT_LAYOUT_IMPORT "import" /* the layout of rrfp-mm import's folders: model files only */
#define CHECKPOINT_MAX_STEP 1000000000 /* train.steps' own upper bound: a larger step is not a run's */

typedef struct {
    int64_t step;          /* optimiser steps completed */
    int64_t opt_step;      /* AdamW t of the last update */
    uint64_t run;          /* identity of the job that wrote it (checkpoint_new_run_id at its start) */
    char layout[64];       /* the shards that wrote it, "pp=P tp=T chunks=C" ("" = one process, pp=1 tp=1 chunks=1) */
    char run_id[40];       /* the owner that wrote it (state.json "run_id", optional: "" = none, as in
                            * checkpoints of earlier builds): a folder of the same step in the way of a save is
                            * replaced when it is the same owner's, moved aside otherwise */
    char* record;          /* the owner's record (a run's: runtime/train/runckpt.h), a JSON object's text whose
                            * members state.json holds beside the checkpoint's own: written as given; on load,
                            * every member that is not the checkpoint's own, unchecked (malloc'd; NULL = none) */
} CheckpointState;

void checkpoint_state_free(CheckpointState* st);

/* A fresh identity for a job's checkpoints (random, never 0). */
uint64_t checkpoint_new_run_id(void);
/* The identity every file of a checkpoint carries in its __metadata__: "step", "run" (16 hex digits),
 * "layout" and "shard" (the shard part of its name, "" for model.safetensors). The load checks each
 * file's against state.json, so a folder holding another step's or another job's file is refused
 * naming the file. (The writers here add it; rrfp-mm import adds it to its files.) */
void checkpoint_identity_meta(StWriter* w, const CheckpointState* st, const char* shard);
/* Add F32 tensor x to w as a checkpoint holds it: refused (-1, naming the tensor) when a value is not
 * finite, else added with its XXH64 checksum in the metadata. x must stay valid until the write. */
int checkpoint_add_tensor(StWriter* w, const char* name, int ndim, const int64_t* shape, const float* x, char* err,
                          size_t err_len);

/* Write ROOT/step-NNNNNNNN/ for st->step from pt's values and AdamW moments (pt->m / pt->v may be
 * NULL before the first step: then zeros are written). `shard` NULL for a single-process run.
 * Writes the folder's path into out_dir. Returns 0, or -1 with a message in err (nothing left
 * behind that looks like a checkpoint; a non-finite parameter or moment, or a negative second moment,
 * is such an error, naming the tensor, and writes no folder). */
int checkpoint_save(const char* root, const ParamTable* pt, const CheckpointState* st, const char* shard,
                    char* out_dir, size_t out_len, char* err, size_t err_len);

/* Read DIR/state.json, then every parameter of pt (and, when pt->m is allocated, its moments) from
 * DIR's safetensors files, checking names, shapes and dtypes. With shard NULL every model / optimizer
 * file that state.json lists is searched by name, so a checkpoint written under any pipeline layout
 * loads into any other (a stage reads only its own tensors). Every tensor read is checked (its
 * checksum, finite values, v >= 0). Returns 0, or -1 with a message naming the file and tensor (pt's
 * values are then partly overwritten: do not use them). */
int checkpoint_load(const char* dir, ParamTable* pt, CheckpointState* st, const char* shard, char* err,
                    size_t err_len);

/* The AdamW moments of pt's trainable elements [lo, hi) in gradient order (ParamSpec.goff; a tensor may
 * be cut at either end) from checkpoint folder DIR of any layout, into host arrays m and v of hi - lo
 * floats each: the distributed optimizer's shard (docs/parallel.md "The distributed optimizer"). Each
 * tensor read is checked as checkpoint_load checks it. Returns 0, or -1 with a message naming the file and
 * tensor. */
int checkpoint_load_moments_range(const char* dir, const ParamTable* pt, size_t lo, size_t hi, float* m, float* v,
                                  char* err, size_t err_len);

/* The model values of checkpoint folder DIR as they are, for a command that reads a model without
 * resuming a run (rrfp-mm eval, generate): any layout, and an import (layout "import": model files only,
 * which checkpoint_load refuses). state.json, every model file's identity, and every tensor read (its
 * checksum, finite values) are checked as checkpoint_load checks them; no optimiser state is read. A
 * tensor of pt that no file holds is an error naming it, unless its name is one of the n_optional names
 * in `optional` (an import's never-used tensors: they keep pt's values). pt's bf16 compute copy is
 * rebuilt. Returns 0 with *st filled (checkpoint_state_free), or -1 with a message naming the file and
 * tensor. */
int checkpoint_load_model(const char* dir, ParamTable* pt, const char* const* optional, int n_optional,
                          CheckpointState* st, char* err, size_t err_len);

/* ---- multi-rank checkpoints (one shard per pipeline rank, one folder) ----
 * Rank 0 calls checkpoint_shard_begin (creates ROOT/.step-N.tmp.shards.PID/, path into tmp); after a
 * barrier every rank calls checkpoint_shard_write with its shard name ("pp0", "pp1", ...); after a
 * second barrier rank 0 calls checkpoint_shard_commit with every shard name, which writes state.json
 * last and renames the folder to ROOT/step-N. A crash at any point leaves no step-* folder that is
 * incomplete. Each returns 0, or -1 with a message (commit removes the temporary folder on failure;
 * checkpoint_shard_abort removes it after another rank's failure). */
int checkpoint_shard_begin(const char* root, int64_t step, char* tmp, size_t tmp_len, char* err, size_t err_len);
int checkpoint_shard_write(const char* tmp, const ParamTable* pt, const CheckpointState* st, const char* shard,
                           char* err, size_t err_len);
int checkpoint_shard_commit(const char* root, const char* tmp, const CheckpointState* st, const char* const* shards,
                            int n_shards, char* out_dir, size_t out_len, char* err, size_t err_len);
void checkpoint_shard_abort(const char* tmp);
/* The temporary folder checkpoint_shard_begin makes for `step` when rank 0 has process id `pid`:
 * ROOT/.step-N.tmp.shards.PID (the other ranks name it from rank 0's pid). */
void checkpoint_shard_tmp_name(char* tmp, size_t tmp_len, const char* root, int64_t step, int pid);

/* train.init_from: read every tensor of pt whose global name and global shape match a tensor of
 * checkpoint folder DIR (any layout: its state.json lists the model files, and the slices that the
 * shards of a tensor-parallel checkpoint hold are reassembled by global name, as checkpoint_load does;
 * pt may hold a slice too; values only, F32 or BF16) into pt->data, leaving the others as initialised. With pt->data NULL (a registration-only table, e.g. the
 * whole model on the rank that logs) nothing is read. When report is not NULL, prints what was loaded,
 * what keeps its initialisation (absent, or another shape), and which checkpoint tensors matched
 * nothing of pt. Returns 0, or -1 with a message naming the file (and the tensor). */
int checkpoint_init_from(const char* dir, ParamTable* pt, FILE* report, char* err, size_t err_len);

/* Tensor `name` as stored in the nf files f (checkpoint shards, step dumps), assembled: each file may
 * hold it whole or a slice of it (metadata "slice.<name>", params_slice_format), and out (ndim, shape:
 * the local shape) gets the part `want` describes (want->dim -1: the whole tensor; else that slice of the
 * global tensor want->gshape), whichever pieces it is cut from. check (CK_CHECK_*): each piece's values must be
 * finite (nonneg: >= 0) and match its checksum. A stored piece of more than TENSOR_MAX_DIMS dimensions is refused. Returns 0, or -1 with a message (absent, another global shape, a
 * part in no file). */
#define CK_CHECK_NONE 0   /* read as stored (tensors diff, dumps) */
#define CK_CHECK_ALL 1    /* finite values and a matching checksum, which must be present (resume) */
#define CK_CHECK_VALUES 2 /* finite values; the checksum where the file has one (train.init_from) */
int checkpoint_read_assembled(const StFile* f, int nf, const char* name, const ParamSlice* want, int ndim,
                              const int64_t* shape, float* out, int check, int nonneg, char* err, size_t err_len);

/* ---- the owner (a run folder never mixes runs: runtime/train/rundir.h, runckpt.h) ----
 * The "run_id" of checkpoint folder DIR's state.json into id ("" when it has none). Returns 0, or -1
 * when DIR/state.json cannot be read (over RR_MAX_JSON too) or parsed, or its run_id is malformed, with
 * a message naming the file in err (err may be NULL). */
int checkpoint_run_id(const char* dir, char* id, size_t id_len, char* err, size_t err_len);

#endif
