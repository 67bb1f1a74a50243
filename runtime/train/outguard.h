/* outguard.h — the one check every command runs on each file or folder it writes, before it does its
 * work (docs/reliability.md, "Outputs never overwrite inputs"). An output path is refused when it is
 *   - an input of the command: the same file by device and inode (so a link, a hard link or another
 *     spelling of the path counts), or a path inside a folder the command reads that nothing may be
 *     added to (`sealed`: a checkpoint, the Hugging Face folder being imported);
 *   - inside a checkpoint folder (a folder holding state.json and model*.safetensors: a run's step-N, an
 *     import), itself a checkpoint folder, or named like a checkpoint's own entries (step-*, .step-*,
 *     .pruned-*, .old.*, .lock) beside a run's checkpoints: a checkpoint's files are train's only;
 *   - a run folder's own file (rundir_own_file: run.json, recipe.ini, metrics.jsonl, .lock, ...);
 *   - an existing folder where a file is wanted, an existing non-folder where a folder is wanted, or
 *     something that is neither a regular file nor a folder (a device, a FIFO: a rename would replace it);
 *   - for a folder output, a folder holding an input whose name matches the files the command writes
 *     or removes there (`pattern`).
 * Files are then written to a temporary name and renamed (rr_write_file_atomic), so a failure leaves the
 * old file or none. Nothing here prints or exits. */
#ifndef RRFP_TRAIN_OUTGUARD_H
#define RRFP_TRAIN_OUTGUARD_H

#include <stddef.h>

#include "runtime/train/recipe.h"

typedef struct {
    char* path;  /* as given (a copy) */
    char* what;  /* how the message names it: "the manifest", "data.tokenizer", "a shard of data.shards" */
    int sealed;  /* a folder nothing may be written into */
} GuardInput;

typedef struct {
    GuardInput* v;
    int n, cap;
} GuardInputs;

typedef enum {
    GUARD_OUT_FILE,   /* one file */
    GUARD_OUT_FOLDER, /* a folder created or filled with files whose names match `pattern` */
} GuardOutKind;

/* Add one input (path and what are copied; a NULL or empty path is ignored). */
void guard_inputs_add(GuardInputs* in, const char* path, const char* what, int sealed);
/* A recipe's inputs: the recipe file, data.tokenizer, the .rrs files of data.shards and data.eval_shards
 * (a folder's or the one file), data.synthetic_plan, and train.init_from (sealed). */
void guard_inputs_add_recipe(GuardInputs* in, const Recipe* r);
void guard_inputs_free(GuardInputs* in);

/* Do two paths name one file: the same text, or (when both exist) the same device and inode. */
int guard_same_file(const char* a, const char* b);

/* Check output `out` (given as `flag`, e.g. "--out") of kind `kind` against the inputs and the rules
 * above; `pattern` (fnmatch, folder outputs only; NULL = none) names the files a folder output writes or
 * removes there. Returns 0, or -1 with a message naming the flag, the path and what it would overwrite. */
int guard_output(const char* flag, const char* out, GuardOutKind kind, const char* pattern, const GuardInputs* in,
                 char* err, size_t err_len);
/* The same check of `out` against one more input file (identity only), for inputs too many to list (the
 * images of a large manifest): call it for each after guard_output. A missing `out` is no input. */
int guard_output_input(const char* flag, const char* out, const char* path, const char* what, char* err,
                       size_t err_len);

#endif
