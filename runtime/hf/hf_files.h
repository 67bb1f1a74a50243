/* hf_files.h — the Hugging Face files around a LLaVA's weights.
 *
 * Import (`rrfp-mm import llava`): the folder's config.json, tokenizer and processor files (HF_KEPT_FILES)
 * are copied as they are into the checkpoint's HF_KEPT_DIR subfolder (CKPT/hf/), where `data.tokenizer`
 * can point and where `export hf` finds them again.
 *
 * Export (`rrfp-mm export hf`): the folder of the imported files is found beside the checkpoint exported
 * (CKPT/hf/) or beside the one it was trained from (the recipe's train.init_from, followed through run
 * folders: RUN_DIR/checkpoints/step-N's RUN_DIR/recipe.ini). Then:
 *   config.json             the imported config.json with the model's values put in: every key the
 *                           import read comes back as it was unless the model says otherwise (each
 *                           change logged); keys it did not read (max_position_embeddings,
 *                           pad_token_id, projection_dim, ...) are kept; what the model has that the
 *                           imported config lacks is added. Synonyms keep the imported config's name
 *                           (image_token_id, dtype, rope_parameters). torch_dtype says float32 (the
 *                           files' type).
 *   tokenizer_config.json   the tokenizer's (or a new one) with what AutoTokenizer needs where absent:
 *                           tokenizer_class, bos / eos / unk / pad tokens, added_tokens_decoder in step
 *                           with tokenizer.json's added_tokens, model_max_length, and the chat template
 *                           of --template (the one pack used: data/template.h's text, as Jinja).
 *   special_tokens_map.json the tokenizer's, or those tokens.
 *   generation_config.json  the imported one (or a new one) with bos / eos / pad ids from the tokenizer
 *                           and the template (the template's stop token first among the eos ids).
 *   preprocessor_config.json the image processor of the run's preprocessing, read from its shards
 *                           (data.shards' header): `--image-preprocess llava` is LlavaImageProcessor
 *                           (CLIPImageProcessor's fields plus do_pad: pad to square with the mean colour,
 *                           bicubic resize to the side, CLIP mean / std); the default preprocessing is a
 *                           CLIPImageProcessor at the tower's image size with mean = std = 0.5 (x/127.5
 *                           - 1; its dynamic resolution has no Hugging Face equivalent: said on the log);
 *                           without readable shards, the imported one as it was.
 *   processor_config.json   LlavaProcessor: image_token <image>, patch_size, the select strategy,
 *                           num_additional_image_tokens 1 (CLIP's class token).
 *   chat_template.json      the --template's Jinja, or the imported one as it was.
 * Each file the export cannot derive is left out with a line on the log saying why and what to give. */
#ifndef RRFP_TRAIN_HF_FILES_H
#define RRFP_TRAIN_HF_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "runtime/model/model.h"
#include "runtime/train/recipe.h"

#define HF_KEPT_DIR "hf"

/* import: the files of Hugging Face folder hf_dir kept in ckpt_tmp/HF_KEPT_DIR (regular files only, each
 * within its size cap); their names, comma-separated, into kept (empty: none). Returns 0, or -1 with err. */
int hf_keep_files(const char* hf_dir, const char* ckpt_tmp, char* kept, size_t kept_len, char* err, size_t err_len);

/* export: the folder of the imported files for checkpoint ckpt of recipe r, into dir; 0, or -1 when none. */
int hf_kept_find(const char* ckpt, const Recipe* r, char* dir, size_t dir_len);

/* export: `ours` (the config.json the model implies) merged into kept_dir's config.json as described above;
 * a new object (ours duplicated when kept_dir is NULL or has no readable config.json, said on the log). */
cJSON* hf_config_keep(const cJSON* ours, const char* kept_dir, FILE* log);

/* The bytes of the regular *.safetensors files in folder dir (what a checkpoint's tensors can hold at most: a
 * model sized from a recipe is allocated only once its files are known to be that large), or if_missing when dir
 * cannot be opened. */
/* The recipe an export of checkpoint ckpt works from: recipe_path's (validated) when given, the defaults
 * otherwise, with the model keys an import recorded (runtime/train/trained.h: where the recipe leaves them, or
 * all of them without one; `what` names the command in messages). Without recipe_path the checkpoint must
 * hold them. state = ckpt/state.json. Returns what trained_apply_keys took (>= 0), or -1 with the message. */
int hf_export_recipe(const char* ckpt, const char* recipe_path, const char* what, Recipe* r, char* state,
                     size_t state_len, char* err, size_t err_len);
uint64_t hf_safetensors_bytes(const char* dir, uint64_t if_missing);

typedef struct {
    const char* tmp;           /* the export's folder being built: config.json and the tokenizer files in it */
    const char* kept;          /* the imported files' folder, or NULL */
    const char* tokenizer;     /* the tokenizer.json exported (its source, for messages), or NULL */
    const Recipe* r;           /* the run's recipe (data.shards: its image preprocessing) */
    const ModelConfig* mc;
    const char* chat_template; /* --template NAME (data/template.h), or NULL */
    int image_token_index;     /* config.json's */
    int files;                 /* out: files written */
} HfExtras;
/* export: the files above besides config.json and the weights. Returns 0, or -1 with err (a tokenizer whose
 * <image> is not image_token_index, a template whose tokens the tokenizer lacks, a file not written). */
int hf_write_extras(HfExtras* x, FILE* log, char* err, size_t err_len);

#endif
