/* lora_hf.h — LoRA adapters out to and in from Hugging Face (docs/training.md "LoRA adapters and PEFT").
 *
 * `export hf` of a LoRA checkpoint writes the merged model: each adapted LM linear as W + (alpha / r) B A
 * (export_lora_merged), computed in double and rounded once to f32.
 *
 * `export hf --adapter OUT` writes a PEFT adapter folder (export_hf_adapter): adapter_config.json (LoraConfig's
 * fields) and adapter_model.safetensors holding only the factors, F32, under PEFT's key names
 * (`get_peft_model_state_dict`: "base_model.model." + the module's path in the base model + ".lora_A.weight" /
 * ".lora_B.weight", the adapter name left out):
 *   LlavaForConditionalGeneration (transformers >= 4.52):  model.language_model.layers.N.self_attn.q_proj
 *   LlamaForCausalLM (a run from `import llama`):          model.layers.N.self_attn.q_proj
 * (mlp.gate_proj, mlp.up_proj, mlp.down_proj likewise); the CLIP tower's adapters (lora.targets vision.*) under
 *   LlavaForConditionalGeneration:  model.vision_tower.vision_model.encoder.layers.N.self_attn.q_proj (k_proj,
 *                                   v_proj, out_proj; mlp.fc1, mlp.fc2)
 *
 * `import lora` (import_lora) reads such a folder onto a base checkpoint: adapter_config.json's r, lora_alpha,
 * lora_dropout and target_modules become the [lora] keys (a recipe that sets them must agree), every tensor of
 * adapter_model.safetensors is matched by name and shape (also transformers < 4.52's Llava path
 * language_model.model.layers.N...), and a checkpoint of the base plus the adapters is written. */
#ifndef RRFP_HF_LORA_HF_H
#define RRFP_HF_LORA_HF_H

#include <stddef.h>
#include <stdio.h>

#include "engine/params.h"
#include "runtime/model/model.h"

typedef enum { PEFT_BASE_LLAVA = 0, PEFT_BASE_LLAMA = 1 } PeftBase;

/* PEFT's key of our adapter tensor `ours` (text.blocks.N.<module>.lora_{A,B}.weight, or the tower's
 * vision.blocks.N.<module>... on PEFT_BASE_LLAVA) on base `b`. Returns 0, or -1 when `ours` is not an adapter tensor
 * (of that base). */
int lora_peft_key(const char* ours, PeftBase b, char* out, size_t out_len);
/* Our name of PEFT key `key` under any of the three base paths, or the tower's two (the base found into *b). Returns
 * 0, or -1 when the key is not a LoRA factor of an LM or tower linear. */
int lora_peft_ours(const char* key, char* out, size_t out_len, PeftBase* b);

/* The merged weight of LM tensor `ours` of the loaded table pt (whole, not a slice): W + (alpha / r) B A as a new
 * malloc'd (out, in) array, or NULL when `ours` has no adapter (not a LoRA model, or not a target). */
float* export_lora_merged(const ModelConfig* mc, const ParamTable* pt, const char* ours);
/* The same for base values W (out, in) whose adapter is `prefix`.lora_A / .lora_B (the tower's q, k, v: rows of the
 * stacked attn.qkv, prefix vision.blocks.N.attn.q); NULL when there is no such adapter. */
float* export_lora_merged_part(const ModelConfig* mc, const ParamTable* pt, const float* W, int64_t out, int64_t in,
                               const char* prefix);
/* Whether export_lora_merged (part = 0: `name` is ours) or export_lora_merged_part (part = 1: `name` is the prefix)
 * would merge, without merging: an adapter is there. */
int export_lora_adapted(const ModelConfig* mc, const ParamTable* pt, const char* name, int part);

typedef struct {
    int tensors;       /* adapter tensors written */
    PeftBase base;     /* the key naming used */
    char base_name[512]; /* base_model_name_or_path written ("" = null) */
} HfAdapterExport;
/* export hf --adapter: checkpoint ckpt of a LoRA run (recipe as export_hf takes it) as PEFT adapter folder
 * out_dir (built as OUT.tmp.PID and renamed; import_out_begin's rules). Returns 0, or -1 with a message. */
int export_hf_adapter(const char* ckpt, const char* recipe_path, const char* out_dir, HfAdapterExport* info, FILE* log,
                      char* err, size_t err_len);

typedef struct {
    int adapters;  /* adapter tensors read */
    int base;      /* base tensors copied */
    int r;
    double alpha, dropout;
    char targets[128]; /* the [lora] targets, ours (q,k,v,...) */
} LoraImport;
/* import lora: PEFT adapter folder adapter_dir onto checkpoint base (an import, or a run's checkpoint with
 * recipe_path giving its model keys) as checkpoint folder out (layout "import": base + adapters, state.json's
 * "recipe" with the [lora] keys). Returns 0, or -1 with a message naming the file and key. */
int import_lora(const char* adapter_dir, const char* base, const char* recipe_path, const char* out, LoraImport* info,
                FILE* log, char* err, size_t err_len);

#endif
