/* import.h — `rrfp-mm import llama`: a Hugging Face Llama-format LM (config.json and one or several
 * *.safetensors, with model.safetensors.index.json when sharded) becomes a checkpoint folder of the
 * text tower under this model's names (text/lm.h), loadable by train.init_from.
 *
 *   model.embed_tokens.weight                     -> text.embed.weight            (V, D)
 *   model.layers.N.input_layernorm.weight         -> text.blocks.N.norm1.weight   (D)
 *   model.layers.N.self_attn.{q,k,v,o}_proj.weight-> text.blocks.N.attn.{q,k,v,o}.weight (D, D)
 *   model.layers.N.post_attention_layernorm.weight-> text.blocks.N.norm2.weight   (D)
 *   model.layers.N.mlp.{gate,up,down}_proj.weight -> text.blocks.N.mlp.{gate,up,down}.weight
 *   model.norm.weight                             -> text.norm.weight             (D)
 *   lm_head.weight                                -> text.lm_head.weight          (V, D)
 * No layout change: HF's Llama applies RoPE with rotate_half on each head's [first half | second half]
 * (its conversion script permuted Meta's interleaved q/k rows into that order), which is docs/model.md's
 * NeoX rule, and head h is columns [h d, (h+1) d) of q, k, v as here. Values are stored F32 (F32, BF16
 * and F16 inputs are converted exactly).
 *
 * model_type llama, mistral and qwen2. Taken over as recipe keys (cmd_import prints them): grouped-query
 * attention (num_key_value_heads: k_proj / v_proj are (num_key_value_heads * head dim, D)), q/k/v biases
 * (qwen2: model.layers.N.self_attn.{q,k,v}_proj.bias; llama / mistral attention_bias: also o_proj.bias),
 * tie_word_embeddings (no lm_head.weight; one in the files is skipped), Llama-3 RoPE scaling
 * (rope_scaling, or transformers 5's rope_parameters with rope_theta inside).
 * Refused with a message naming the config key or tensor: mlp_bias, sliding-window attention, a
 * rope_scaling type other than default / llama3, a head_dim other than hidden_size /
 * num_attention_heads or odd, hidden_act other than silu, another model_type, and tensors the model has
 * no place for. */
#ifndef RRFP_TRAIN_IMPORT_H
#define RRFP_TRAIN_IMPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "engine/checkpoint.h"

typedef struct {
    int D, L, H, F, V;   /* hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size */
    double rms_eps;      /* rms_norm_eps */
    double rope_base;    /* rope_theta (or rope_parameters.rope_theta) */
    int tensors;         /* tensors written */
    /* the LM variants (recipe keys in brackets) */
    char model_type[16]; /* llama | mistral | qwen2 */
    int Hkv;             /* num_key_value_heads [model.text_kv_heads] */
    int qkv_bias, o_bias; /* qwen2, or attention_bias [model.text_qkv_bias, model.text_o_bias] */
    int tie;             /* tie_word_embeddings [model.tie_embeddings] */
    int rope_llama3;     /* rope_scaling / rope_parameters rope_type llama3 [model.rope_type = llama3] */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_pos;
} LlamaImport;

/* One tensor of an import: its Hugging Face name, this model's name and shape, seen in a file yet. */
typedef struct {
    char hf[128], ours[128];
    int ndim;
    int64_t shape[2];
    int seen;
} ImportName;

/* The config checks of import_llama on a parsed config.json object (an LM's, or a LLaVA config's
 * text_config), `path` naming it in messages. Fills every field but `tensors`. Returns 0, or -1 with a
 * message naming the key. */
struct cJSON;
int import_llama_config_json(const struct cJSON* j, const char* path, LlamaImport* c, char* err, size_t err_len);
/* The LM's tensors under Hugging Face's LlamaForCausalLM names (model.*, lm_head.weight unless tied) and
 * ours, for the shapes and variants of info (k/v rows of the key/value heads, the biases); malloc'd, *n entries. */
ImportName* import_llama_names(const LlamaImport* info, int* n);

/* ---- shared by import llama / llava / clip and export hf: the hostile-input rules in one place ---- */

/* The allowed range of recipe key model.<key> (its RecipeKey min / max): the model's own limits, which
 * every number an import reads from a config.json must respect before anything is sized from it. */
void import_key_range(const char* key, double* lo, double* hi);

/* The safetensors files of Hugging Face folder DIR: the index's weight_map values, each once in the order
 * the index first names them (duplicates found by sorting), or model.safetensors when there is no index.
 * Each value must be a plain file name in the folder (no '/', not empty, not hidden, <= 255 bytes); an
 * index of more than max_entries tensors (the model's own count plus slack) or of more than
 * IMPORT_MAX_FILES files is refused. *files is malloc'd (free each and it) even on failure. */
#define IMPORT_MAX_FILES 4096
int import_hf_files(const char* dir, int max_entries, char*** files, int* nf, char* err, size_t err_len);

/* The output folder of an import or export, built as OUT.tmp.PID and renamed at the end. */
typedef struct {
    char tmp[4200];      /* OUT.tmp.PID, created by this command (mkdir succeeded: never an existing folder) */
    char made_top[4200]; /* the outermost folder this command created: tmp or the first missing parent */
    int made;
} ImportOut;
/* Refuses an --out that exists (lstat: a dangling link too), ends with '/', has '.' / '..' past its
 * existing part, or lies inside `input` (the folder read, may be NULL); then creates the missing parents
 * and OUT.tmp.PID. Returns 0, or -1 with a message (nothing left behind). */
int import_out_begin(ImportOut* o, const char* out, const char* input, char* err, size_t err_len);
/* rc == 0: rename tmp to OUT; otherwise (or when the rename fails) remove made_top, the folders this
 * command made and nothing else (rr_remove_tree). Returns the final rc. */
int import_out_end(ImportOut* o, const char* out, int rc, char* err, size_t err_len);
/* TMP/state.json of an import at step 0 (no optimiser state), naming hf_dir; takes `list`, the files'
 * names (a cJSON array), and `learned` (an object, may be NULL: what the import learned, runtime/train/
 * trained.h: "recipe", "image_token_id", "absent"), whose members go into state.json beside hf_dir's
 * config.json as "hf_config". Returns 0, or -1 with the message in err. */
/* The state.json of an import (step 0, checkpoint identity `id`, no loader position) as a new object whose
 * "imported_from" is `imported_from`: the caller adds what the import learned, then import_state_write. */
cJSON* import_state_new(const CheckpointState* id, const char* imported_from);
/* The identity every file of an import's checkpoint carries (checkpoint_identity_meta): step 0, a new job
 * (checkpoint_new_run_id), layout CHECKPOINT_LAYOUT_IMPORT. */
CheckpointState import_identity(void);
/* j printed to tmp/state.json (written to a temporary name and renamed), j freed. Returns 0, or -1 with
 * the message in err. */
int import_state_write(const char* tmp, cJSON* j, char* err, size_t err_len);
int import_write_state(const char* tmp, const CheckpointState* id, const char* hf_dir, cJSON* list, cJSON* learned,
                       char* err, size_t err_len);
/* An import's frame: the output folder (built in o.tmp), the source's safetensors files, the identity each written
 * file carries and the written files' names. */
typedef struct {
    ImportOut o;
    char** files; /* import_hf_files */
    int nf;
    CheckpointState id; /* import_identity */
    cJSON* list;        /* the names of the files written into o.tmp */
} ImportRun;
/* import_out_begin, then import_hf_files (max_entries: its cap). Returns 0, or -1 with a message (import_run_end
 * still to be called). */
int import_run_begin(ImportRun* run, const char* out, const char* hf_dir, int max_entries, char* err, size_t err_len);
/* rc == 0: state.json written (import_write_state with `learned`, which it takes; NULL: none) and the folder renamed
 * to out; otherwise what the import made is removed. Frees the run; returns the final rc. */
int import_run_end(ImportRun* run, const char* out, const char* hf_dir, int rc, cJSON* learned, char* err, size_t err_len);

/* One safetensors file of a Hugging Face folder as an import reads it: its tensors (f), the shard of our checkpoint
 * written from it (w) and the f32 buffers the shard's tensors point into until it is written. */
typedef struct {
    char path[4400]; /* hf_dir/name: what the messages name */
    StFile f;
    StWriter* w;
    float** bufs;
    int nb;
    void** defs; /* import_file_defer's contexts */
    int nd;
} ImportFile;
/* Loads hf_dir/name (st_load's checks) and starts its shard. Returns 0, or -1 with a message (nothing to free). */
int import_file_open(ImportFile* fi, const char* hf_dir, const char* name, char* err, size_t err_len);
/* A new f32 buffer of n values (uninitialised), freed by import_file_close. */
float* import_file_buf(ImportFile* fi, size_t n);
/* buf (malloc'd) freed by import_file_close from now on. */
void import_file_keep(ImportFile* fi, float* buf);
/* One of the file's tensors as import_file_defer reads it: its name and the shape it is read at. */
typedef struct {
    const char* name;
    int ndim;
    int64_t shape[4];
} ImportPart;
/* Tensor `ours` of the shard, just added with checkpoint_add_tensor from v (n values, malloc'd: freed here), is
 * made again when the shard is written: parts[0..np) read from the file one after the other (q, k and v into one
 * fused tensor), converted as they were, and their checksum compared with v's (a file changed since is refused,
 * naming it). The import so holds one converted tensor at a time, not the shard's (docs/engine.md "Peak memory
 * of the whole-model commands"). */
void import_file_defer(ImportFile* fi, const char* ours, float* v, size_t n, const ImportPart* parts, int np);
/* write = 1 (and rc == 0): the shard as model.hfK.safetensors in the run's folder (K = k, the file's index in
 * run->files) with the run's identity and "imported_from" = from, its name appended to the run's list, a line to
 * `log` (may be NULL); then (in every case) frees the file, the shard and the buffers. Returns rc, or -1 with a
 * message when the write fails. */
int import_file_close(ImportFile* fi, int rc, int write, ImportRun* run, int k, const char* from, FILE* log, char* err,
                      size_t err_len);
/* The recipe keys an LM import decided, as text values into object `keys` ("model.text_width": "4096", ...):
 * the keys cmd_import prints, and the variant keys at the values the config implies (text_kv_heads 0 for
 * multi-head attention, the biases, tie_embeddings, rope_type). */
void import_llama_keys(const LlamaImport* c, cJSON* keys);
/* The LM's recipe keys beyond its shape as import llama and import llava print them, one "key = value" line
 * each: rms_eps, rope_base, and the variants (GQA, biases, tie, RoPE scaling) where the config has them. */
void import_print_lm_keys(FILE* f, const LlamaImport* info);

/* Read DIR/config.json and its safetensors, write checkpoint folder OUT (OUT/model.*.safetensors and
 * OUT/state.json, built under a temporary name and renamed: never half-written). Progress lines go to
 * `log` (may be NULL). Returns 0 with *info filled, or -1 with a message. */
int import_llama(const char* hf_dir, const char* out, LlamaImport* info, FILE* log, char* err, size_t err_len);

#endif
