/* import_llava.h — `rrfp-mm import llava` and `rrfp-mm import clip`: Hugging Face checkpoints of a LLaVA
 * (LlavaForConditionalGeneration) or of OpenAI's CLIP vision tower (CLIPVisionModel, or CLIPModel's vision
 * part) as a checkpoint folder of this model's names, for train.init_from; and `rrfp-mm export hf`, the way
 * back (export_hf.c).
 *
 * Names. Every naming a LLaVA checkpoint exists under is read (the prefixes are peeled off first):
 *   the hub's llava-hf:            vision_tower.vision_model.*  multi_modal_projector.*  language_model.model.*
 *                                  language_model.lm_head.weight
 *   transformers 5's save_pretrained and the in-memory module:
 *                                  [model.]vision_tower.*  (no vision_model.)  [model.]multi_modal_projector.*
 *                                  model.language_model.*  lm_head.weight
 * CLIP vision part (below `vision_model.` or the tower's prefix) -> ours (vision/vision.h):
 *   embeddings.patch_embedding.weight (D, 3, p, p)   -> vision.patch_embed.weight (D, 3p^2), the same values
 *                                                       (the tower reads patches channel-major, as the conv)
 *   embeddings.class_embedding (D)                   -> vision.class_embedding
 *   embeddings.position_embedding.weight (1+G^2, D)  -> vision.pos_embed.weight
 *   pre_layrnorm.*                                   -> vision.pre_ln.*
 *   encoder.layers.N.layer_norm1 / layer_norm2.*     -> vision.blocks.N.ln1 / ln2.*
 *   encoder.layers.N.self_attn.{q,k,v}_proj.*        -> vision.blocks.N.attn.qkv.* (rows [q | k | v])
 *   encoder.layers.N.self_attn.out_proj.*            -> vision.blocks.N.attn.out.*
 *   encoder.layers.N.mlp.fc1 / fc2.*                 -> vision.blocks.N.mlp.fc1 / fc2.*
 *   post_layernorm.*                                 -> vision.post_ln.* (never used, as in LLaVA)
 *   embeddings.position_ids                          (a buffer: skipped)
 * Projector: multi_modal_projector.linear_1.* -> projector.0.*, linear_2.* -> projector.2.*.
 * LM: the Llama names of `import llama` (runtime/hf/import.c, the same code), after the prefix: a Llama,
 * Mistral or Qwen2 text_config (grouped-query attention, q/k/v and o biases, tied embeddings, Llama-3 RoPE
 * scaling, as import llama takes them); tied: an lm_head.weight in the files is skipped.
 *
 * Configs. A field absent from config.json takes its Hugging Face class default (CLIPVisionConfig,
 * LlamaConfig: llava-hf's own configs omit most of text_config), and the import prints which. Refused,
 * naming the key: a vision hidden_act other than quick_gelu, intermediate_size != 4 hidden_size,
 * layer_norm_eps != 1e-5, num_channels != 3, a list of vision_feature_layer, select strategy `full`,
 * a projector activation other than gelu / gelu_pytorch_tanh / gelu_new, multimodal_projector_bias =
 * false, and whatever `import llama` refuses in text_config; a tensor with no place in the model.
 * Hostile input (docs/reliability.md, "What is checked"): each vision_config number is a whole number in
 * its recipe key's range (model.vision_width, vision_layers, vision_heads, patch, vision_image_size),
 * vision_feature_layer a whole number naming a hidden state after a block, image_token_index one inside
 * the LM's vocabulary, all before anything is sized; buffers come from the file's tensor after its shape
 * is checked; a NaN or infinite weight is refused naming the Hugging Face tensor; the index and --out go
 * through import.h's shared helpers (import_hf_files, import_out_begin / import_out_end).
 *
 * import llava_next: a LlavaNextForConditionalGeneration (model_type llava_next; docs/anyres.md): the same tower,
 * projector and LM, plus `image_newline` (Dt; [model.]image_newline) -> image_newline, and image_grid_pinpoints
 * (LlavaNextConfig's default [[336,672],[672,336],[672,672],[1008,336],[336,1008]] when absent; each pair a
 * multiple of vision_config.image_size) -> model.anyres = 1 + the largest pinpoint's tiles, recorded with the
 * pinpoints for pack and export. vision_feature_select_strategy `full` is refused as for import llava. */
#ifndef RRFP_TRAIN_IMPORT_LLAVA_H
#define RRFP_TRAIN_IMPORT_LLAVA_H

#include <stdio.h>

#include "data/anyres.h"
#include "runtime/hf/import.h"

typedef struct {
    int llava;                  /* 1: import llava; 2: import llava_next; 0: import clip (the vision tower alone) */
    AnyresPinpoints pins;       /* llava_next: image_grid_pinpoints (docs/anyres.md) */
    int anyres_tiles;           /* llava_next: the most tower images of one image (model.anyres) */
    int D, L, H, patch, image_size; /* CLIP: hidden_size, num_hidden_layers, num_attention_heads, patch_size, image_size */
    int feature_layer;          /* vision_feature_layer (-2 for import clip: LLaVA's) */
    int proj_act;               /* Act of the projector (llava) */
    int image_token_index;      /* llava: the <image> token id (-1 when the config has none) */
    LlamaImport text;           /* llava: the LM */
    int tensors;                /* tensors written */
    int skipped;                /* tensors skipped (CLIPModel's text tower, position_ids buffers) */
    int absent;                 /* never-used tensors absent from the files (kept at their initialisation) */
    char defaults[1024];        /* the config fields that took a class default, comma-separated */
    char kept[512];             /* llava: the folder's files kept in OUT/hf/ (hf_files.h), comma-separated */
} LlavaImport;

/* Read DIR/config.json and its safetensors (model.safetensors, or the shards model.safetensors.index.json
 * lists), write checkpoint folder OUT (built under a temporary name and renamed: never half-written).
 * llava = 1 for a LlavaForConditionalGeneration, 0 for a CLIP vision model. Progress lines go to `log`
 * (may be NULL). Returns 0 with *info filled, or -1 with a message naming the file, key or tensor. */
int import_llava(const char* hf_dir, const char* out, int llava, LlavaImport* info, FILE* log, char* err,
                 size_t err_len);

/* ---- export (export_hf.c) ---- */
typedef struct {
    int tensors;     /* tensors written */
    int files;       /* safetensors shards written */
    int tokenizer;   /* tokenizer files copied */
    int extras;      /* processor, tokenizer and generation configs written (hf_files.h) */
} HfExport;

/* Write checkpoint folder CKPT (any pp x tp layout: slices reassembled) as a Hugging Face
 * LlavaForConditionalGeneration folder OUT_DIR: config.json, model-0000i-of-0000n.safetensors shards (at
 * most shard_bytes each, F32), model.safetensors.index.json and, when tokenizer is not NULL, that
 * tokenizer.json (with tokenizer_config.json, special_tokens_map.json and tokenizer.model when they sit
 * beside it). The model's shapes and keys come from the checkpoint when it is an import (its recorded keys,
 * runtime/train/trained.h; recipe_path may then be NULL, and a recipe that disagrees on a model key is
 * refused) and from recipe_path (a recipe.ini: the run's own, which RUN_DIR/recipe.ini is). The LM's text_config: model_type qwen2 for q/k/v biases without o's (Qwen2),
 * else llama (attention_bias = text_o_bias); num_key_value_heads (GQA), tie_word_embeddings (tied: no
 * lm_head.weight written), rope_scaling llama3 with its factors. Refused, with the reason, for a model with
 * no Hugging Face equivalent: the 2-D RoPE ViT (model.vision_arch = rope2d), a bias on o alone; the
 * projector's gelu_tanh is written as gelu_pytorch_tanh.
 * image_token_index: the <image> id the config declares (-1: the checkpoint's record, an import's
 * image_token_index or the id its run's shards used; else the tokenizer's <image>).
 * add_image_token > 0 (export hf --add-image-token, for a model trained from an LM whose vocabulary has no
 * <image>, e.g. Vicuna + CLIP): <image> becomes id V (the model's vocabulary size), the vocabulary grows to
 * V + 1 rounded up to a multiple of add_image_token (llava-hf's checkpoints pad to 64: 32000 -> 32064), the
 * embedding's and the untied lm_head's new rows are the mean of the trained rows (as llava-hf's conversion
 * initialises them, without its noise: deterministic), text_config.vocab_size says the new size, and the
 * tokenizer.json written gains <image> (special) in added_tokens (tokenizer_config.json's
 * added_tokens_decoder too, when it has one). Refused when image_token_index >= 0 is also given or the
 * tokenizer already holds <image>. Returns 0, or -1 with a message. */
int export_hf(const char* ckpt, const char* recipe_path, const char* out_dir, const char* tokenizer,
              const char* chat_template, int image_token_index, int add_image_token, size_t shard_bytes, HfExport* info, FILE* log, char* err,
              size_t err_len);

#endif
