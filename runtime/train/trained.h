/* trained.h — what a model was made with, beyond its tensors, where the commands that read a model find it.
 *
 * The data a model was trained on: the chat template its samples were rendered with, how its images were
 * preprocessed, and the tokenizer (its hash) and <image> id they were tokenized with. Pack records them in
 * every shard (data/shard.h: the header and the index's record); a run writes them into each checkpoint's
 * state.json as "data" {"template", "image_preprocess", "image_size", "tokenizer_hash", "tokenizer",
 * "image_token_id", "shards"}, taken from data.shards. `generate` builds its prompt with that template,
 * stops at its end of answer, preprocesses images as the loader does under that preprocessing, and refuses
 * a tokenizer of another hash; `eval` refuses held-out shards packed otherwise than the model's data.
 *
 * What an import learned (rrfp-mm import llama | llava | clip), in its state.json: "recipe" {"model.KEY":
 * "VALUE", ..., "data.min_patches": ..., "data.max_patches": ...} (the keys it prints and the variant keys
 * it decided, at their values), "image_token_id" (a LLaVA's image_token_index), "hf_config" (the source
 * config.json as read) and "absent" (the never-used tensors the source lacked); `import lora` adds the
 * [lora] keys ("lora.r": ..., which agree like model keys). Every command that reads a
 * model takes the checkpoint's model keys where the recipe leaves them at their defaults, and refuses a
 * recipe that sets one to another value, naming the key.
 *
 * Everything read from state.json is checked (types, ranges, lengths) as hostile input; errors name the
 * file and the field. Nothing here exits. */
#ifndef RRFP_TRAIN_TRAINED_H
#define RRFP_TRAIN_TRAINED_H

#include <stddef.h>
#include <stdint.h>

#include "data/image.h"
#include "runtime/train/recipe.h"
#include "text/tokenizer.h"

typedef struct {
    int chat_template;          /* TemplateKind, -1 = not recorded */
    int has_prep;               /* prep recorded */
    ImagePrep prep;
    int has_hash;               /* tokenizer_hash recorded */
    uint64_t tokenizer_hash;
    int image_token;            /* the <image> id, -1 = not recorded */
    char tokenizer[RECIPE_STR]; /* the tokenizer file the record names ("" = none) */
    char shards[RECIPE_STR];    /* the shards it came from ("" = none) */
    /* the file each part was read from (messages name it) */
    char template_from[RECIPE_STR + 64], prep_from[RECIPE_STR + 64], hash_from[RECIPE_STR + 64],
        image_from[RECIPE_STR + 64];
} TrainedData;

/* Nothing recorded. */
void trained_data_none(TrainedData* d);
/* The record of `shards` (a folder of .rrs files or one): every part. Returns 0, or -1 with a message. */
int trained_data_of_shards(const char* shards, TrainedData* d, char* err, size_t err_len);
/* The "data" record of checkpoint folder DIR's state.json, and an import's "image_token_id" (parts it
 * lacks stay unrecorded). Returns 0, or -1 with a message naming the file and field. */
int trained_data_of_checkpoint(const char* dir, TrainedData* d, char* err, size_t err_len);
/* d as state.json's "data" object (malloc'd JSON text). */
char* trained_data_json(const TrainedData* d);
/* Fill the parts d lacks from o (the checkpoint's record first, then the shards'). */
void trained_data_fill(TrainedData* d, const TrainedData* o);

/* The tokenizer at `path` (loaded as tok) against d: the hash d records, and the <image> id. Returns 0,
 * or -1 with a message naming both files. */
int trained_check_tokenizer(const TrainedData* d, const char* path, const Tokenizer* tok, char* err, size_t err_len);
/* Before a model is built from r (eval, generate): r's data.tokenizer against the record of checkpoint
 * folder DIR (trained_check_tokenizer; nothing to check when DIR records none). Returns 0, or -1 with a
 * message naming both files. */
int trained_check_recipe_tokenizer(const Recipe* r, const char* dir, char* err, size_t err_len);
/* Shards (their record s, read from data.`key`) against the model's record m: the same chat template and
 * image preprocessing where m records them. Returns 0, or -1 with a message naming both files. */
int trained_check_shards(const TrainedData* m, const TrainedData* s, const char* key, char* err, size_t err_len);

/* A reader's --checkpoint: `latest` / `auto` as the newest checkpoint of r's run (rundir_latest), else the
 * folder as given. Returns 0, or -1 with a message. */
int trained_checkpoint_dir(const Recipe* r, const char* ckpt, char* out, size_t out_len, char* err, size_t err_len);

/* The import record's recipe keys of checkpoint folder DIR applied to r (then recipe_validate): a key r
 * leaves at its default takes the checkpoint's value (its origin "DIR/state.json"); a model key r sets to
 * another value is refused naming the key, where it was set and the checkpoint's value (model.vocab = 0,
 * "from the tokenizer", takes the checkpoint's; model.text_kv_heads compares as the heads it means); a data
 * key r sets keeps r's value. `why` (e.g. "train.init_from") goes into the messages. A folder whose
 * state.json has no "recipe" (a run's checkpoint) changes nothing. Returns the number of keys taken, or -1
 * with a message. */
int trained_apply_keys(Recipe* r, const char* dir, const char* why, char* err, size_t err_len);
/* For a command that reads checkpoint folder DIR (eval, generate): DIR's keys (trained_apply_keys), or,
 * when DIR carries none (a run's checkpoint) and r sets train.init_from to a folder that does (the import
 * the run started from: the recipe that trained it reads it too), that folder's. Returns the number of keys
 * taken, or -1 with a message. */
int trained_apply_model_keys(Recipe* r, const char* dir, const char* why, char* err, size_t err_len);
/* Does DIR/state.json carry an import's recipe keys? 1 yes, 0 no (or unreadable). */
int trained_has_keys(const char* dir);

/* The import's "absent" tensor names of DIR/state.json (malloc'd array of malloc'd names; *n of them; NULL
 * and 0 when none). Returns 0, or -1 with a message. */
int trained_absent_tensors(const char* dir, char*** names, int* n, char* err, size_t err_len);
void trained_free_names(char** names, int n);

#endif
