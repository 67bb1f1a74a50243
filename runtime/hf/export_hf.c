/* export_hf.c — `rrfp-mm export hf`: a checkpoint of this model (any pp x tp layout) as a Hugging Face
 * LlavaForConditionalGeneration folder (import_llava.h). The names written are the hub's (llava-hf's
 * `vision_tower.vision_model.*`, `multi_modal_projector.*`, `language_model.model.*`,
 * `language_model.lm_head.weight`), which every transformers version since 4.36 opens (transformers 5 maps
 * them on load); values F32 as trained; a LoRA model's adapted linears merged, W + (alpha / r) B A
 * (lora_hf.h). The whole model is held in memory (4 bytes per parameter) while
 * the shards are written. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/checkpoint.h"
#include "data/template.h"
#include "engine/safetensors.h"
#include "engine/json.h"
#include "engine/util.h"
#include "runtime/model/model.h"
#include "runtime/hf/hf_files.h"
#include "runtime/hf/import_llava.h"
#include "runtime/hf/lora_hf.h"
#include "runtime/train/layout.h"
#include "runtime/train/trained.h"
#include "runtime/train/recipe.h"
#include "text/tokenizer.h"

/* One tensor to write: its HF name, shape and values (pointing into the table, or owned). A LoRA-adapted linear
 * (merge = 1: export_lora_merged of `ours`; 2: export_lora_merged_part of base rows `data`, adapter prefix `ours`)
 * is merged when its shard is written, into the writer's buffer (ex_fill), not held with the others. */
typedef struct {
    char name[160];
    int ndim;
    int64_t shape[4];
    const float* data;
    float* owned;
    size_t bytes;
    int file;
    int merge;
    char ours[160];
} ExTensor;

typedef struct {
    ExTensor* v;
    int n, cap;
} ExList;

static ExTensor* ex_add(ExList* l, const char* name, const float* data, int ndim, int64_t d0, int64_t d1, int64_t d2,
                        int64_t d3) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 512;
        l->v = reallocCheck(l->v, (size_t)l->cap * sizeof(ExTensor));
    }
    ExTensor* t = &l->v[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    int64_t d[4] = {d0, d1, d2, d3};
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) t->shape[i] = d[i], numel *= (size_t)d[i];
    t->data = data;
    t->bytes = numel * sizeof(float);
    return t;
}

/* t's merged values, W + (alpha / r) B A, in a new buffer (lora_hf.h); NULL when its tensor has no adapter. */
static float* ex_merged(const ModelConfig* c, const ParamTable* pt, const ExTensor* t, int merge) {
    if (merge == 1) return export_lora_merged(c, pt, t->ours);
    return export_lora_merged_part(c, pt, t->data, t->shape[0], t->shape[1], t->ours);
}

/* t LoRA-adapted (an adapter for `ours`): merged as its shard is written, so the merged linears are never all
 * held at once (docs/engine.md "Peak memory of the whole-model commands"). */
static void ex_lora(ExTensor* t, const ModelConfig* c, const ParamTable* pt, const char* ours, int merge) {
    snprintf(t->ours, sizeof t->ours, "%s", ours);
    if (export_lora_adapted(c, pt, ours, merge == 2)) t->merge = merge;
}

typedef struct {
    const ModelConfig* c;
    const ParamTable* pt;
    const ExTensor* t;
} ExFill;

static int ex_fill(void* ctx, void* buf, char* err, size_t err_len) {
    (void)err, (void)err_len;
    const ExFill* f = ctx;
    float* merged = ex_merged(f->c, f->pt, f->t, f->t->merge);
    RR_ASSERT(merged && "export: an adapter found when the list was made");
    memcpy(buf, merged, f->t->bytes);
    free(merged);
    return 0;
}

static const float* ex_get(const ParamTable* pt, const char* name) {
    int i = params_find(pt, name);
    RR_ASSERT(i >= 0 && "export: a registered tensor is missing");
    return params_data(pt, i);
}

/* The HF tensors of the model in pt (whole, loaded). */
static void ex_tensors(ExList* l, const ModelConfig* c, const ParamTable* pt) {
    int64_t D = c->Dv, Dt = c->Dt, p = c->patch, G = c->vision_image_size / c->patch;
    char hf[160], ours[128];
    const char* V = "vision_tower.vision_model.";
    /* the patch embedding is CLIP's Conv2d weight (D, 3, p, p), channel-major: the same values */
    snprintf(hf, sizeof hf, "%sembeddings.patch_embedding.weight", V);
    ex_add(l, hf, ex_get(pt, "vision.patch_embed.weight"), 4, D, 3, p, p);
    snprintf(hf, sizeof hf, "%sembeddings.class_embedding", V);
    ex_add(l, hf, ex_get(pt, "vision.class_embedding"), 1, D, 0, 0, 0);
    snprintf(hf, sizeof hf, "%sembeddings.position_embedding.weight", V);
    ex_add(l, hf, ex_get(pt, "vision.pos_embed.weight"), 2, 1 + G * G, D, 0, 0);
    snprintf(hf, sizeof hf, "%spre_layrnorm.weight", V);
    ex_add(l, hf, ex_get(pt, "vision.pre_ln.weight"), 1, D, 0, 0, 0);
    snprintf(hf, sizeof hf, "%spre_layrnorm.bias", V);
    ex_add(l, hf, ex_get(pt, "vision.pre_ln.bias"), 1, D, 0, 0, 0);
    for (int b = 0; b < c->Lv; b++) {
        static const struct {
            const char *hf, *ours;
            int rows4, cols4, bias;
        } m[] = {{"layer_norm1.weight", "ln1.weight", 0, 0, 1}, {"layer_norm1.bias", "ln1.bias", 0, 0, 1},
                 {"self_attn.out_proj.weight", "attn.out.weight", 0, 0, 0},
                 {"self_attn.out_proj.bias", "attn.out.bias", 0, 0, 1},
                 {"layer_norm2.weight", "ln2.weight", 0, 0, 1}, {"layer_norm2.bias", "ln2.bias", 0, 0, 1},
                 {"mlp.fc1.weight", "mlp.fc1.weight", 1, 0, 0}, {"mlp.fc1.bias", "mlp.fc1.bias", 1, 0, 1},
                 {"mlp.fc2.weight", "mlp.fc2.weight", 0, 1, 0}, {"mlp.fc2.bias", "mlp.fc2.bias", 0, 0, 1}};
        for (size_t k = 0; k < sizeof m / sizeof m[0]; k++) {
            snprintf(hf, sizeof hf, "%sencoder.layers.%d.%s", V, b, m[k].hf);
            snprintf(ours, sizeof ours, "vision.blocks.%d.%s", b, m[k].ours);
            int64_t rows = m[k].rows4 ? 4 * D : D;
            if (m[k].bias) {
                ex_add(l, hf, ex_get(pt, ours), 1, rows, 0, 0, 0);
            } else {
                ExTensor* t = ex_add(l, hf, ex_get(pt, ours), 2, rows, m[k].cols4 ? 4 * D : D, 0, 0);
                ex_lora(t, c, pt, ours, 1); /* the tower's LoRA: W + (alpha / r) B A */
            }
        }
        /* the fused [q | k | v] rows back to three projections */
        static const char* part[3] = {"q_proj", "k_proj", "v_proj"};
        snprintf(ours, sizeof ours, "vision.blocks.%d.attn.qkv.weight", b);
        const float* qw = ex_get(pt, ours);
        snprintf(ours, sizeof ours, "vision.blocks.%d.attn.qkv.bias", b);
        const float* qb = ex_get(pt, ours);
        for (int k = 0; k < 3; k++) {
            snprintf(hf, sizeof hf, "%sencoder.layers.%d.self_attn.%s.weight", V, b, part[k]);
            ExTensor* t = ex_add(l, hf, qw + (size_t)k * D * D, 2, D, D, 0, 0);
            snprintf(ours, sizeof ours, "vision.blocks.%d.attn.%c", b, "qkv"[k]); /* its adapter, if any */
            ex_lora(t, c, pt, ours, 2);
            snprintf(hf, sizeof hf, "%sencoder.layers.%d.self_attn.%s.bias", V, b, part[k]);
            ex_add(l, hf, qb + (size_t)k * D, 1, D, 0, 0, 0);
        }
    }
    snprintf(hf, sizeof hf, "%spost_layernorm.weight", V);
    ex_add(l, hf, ex_get(pt, "vision.post_ln.weight"), 1, D, 0, 0, 0);
    snprintf(hf, sizeof hf, "%spost_layernorm.bias", V);
    ex_add(l, hf, ex_get(pt, "vision.post_ln.bias"), 1, D, 0, 0, 0);
    ex_add(l, "multi_modal_projector.linear_1.weight", ex_get(pt, "projector.0.weight"), 2, Dt, D, 0, 0);
    ex_add(l, "multi_modal_projector.linear_1.bias", ex_get(pt, "projector.0.bias"), 1, Dt, 0, 0, 0);
    ex_add(l, "multi_modal_projector.linear_2.weight", ex_get(pt, "projector.2.weight"), 2, Dt, Dt, 0, 0);
    ex_add(l, "multi_modal_projector.linear_2.bias", ex_get(pt, "projector.2.bias"), 1, Dt, 0, 0, 0);
    if (c->anyres) ex_add(l, "image_newline", ex_get(pt, "image_newline"), 1, Dt, 0, 0, 0); /* LLaVA-NeXT's (llava-hf's name) */
    /* the LM under import llama's names (the same table), below language_model. */
    LlamaImport li = {.D = c->Dt, .L = c->Lt, .H = c->Ht, .F = c->F, .V = c->V, .Hkv = c->Hkv > 0 ? c->Hkv : c->Ht,
                      .qkv_bias = c->qkv_bias, .o_bias = c->o_bias, .tie = c->tie_embeddings};
    int n = 0;
    ImportName* names = import_llama_names(&li, &n);
    for (int i = 0; i < n; i++) {
        snprintf(hf, sizeof hf, "language_model.%s", names[i].hf);
        ExTensor* t = ex_add(l, hf, ex_get(pt, names[i].ours), names[i].ndim, names[i].shape[0], names[i].shape[1], 0, 0);
        ex_lora(t, c, pt, names[i].ours, 1); /* LoRA: W + (alpha / r) B A (lora_hf.h) */
    }
    free(names);
}

static cJSON* ex_config(const ModelConfig* c, int image_token_index, int vocab, const AnyresPinpoints* pins) {
    cJSON* j = cJSON_CreateObject();
    cJSON* a = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(c->anyres ? "LlavaNextForConditionalGeneration" : "LlavaForConditionalGeneration"));
    cJSON_AddStringToObject(j, "model_type", c->anyres ? "llava_next" : "llava");
    if (c->anyres) { /* docs/anyres.md: [height, width] pairs */
        cJSON* g = cJSON_AddArrayToObject(j, "image_grid_pinpoints");
        for (int i = 0; i < pins->n; i++) {
            int hw[2] = {pins->hw[i][0], pins->hw[i][1]};
            cJSON_AddItemToArray(g, cJSON_CreateIntArray(hw, 2));
        }
    }
    cJSON_AddNumberToObject(j, "image_token_index", image_token_index);
    cJSON_AddStringToObject(j, "projector_hidden_act", c->projector_act == ACT_GELU_ERF ? "gelu" : "gelu_pytorch_tanh");
    cJSON_AddNumberToObject(j, "vision_feature_layer", c->vision_feature_layer);
    cJSON_AddStringToObject(j, "vision_feature_select_strategy", "default");
    cJSON_AddTrueToObject(j, "multimodal_projector_bias");
    int G = c->vision_image_size / c->patch;
    cJSON_AddNumberToObject(j, "image_seq_length", G * G);
    /* transformers reads the text config's; the top level's says the same (LlavaConfig's default is true) */
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_embeddings);
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    cJSON* v = cJSON_AddObjectToObject(j, "vision_config");
    cJSON_AddStringToObject(v, "model_type", "clip_vision_model");
    cJSON_AddNumberToObject(v, "hidden_size", c->Dv);
    cJSON_AddNumberToObject(v, "intermediate_size", 4 * c->Dv);
    cJSON_AddNumberToObject(v, "num_hidden_layers", c->Lv);
    cJSON_AddNumberToObject(v, "num_attention_heads", c->Hv);
    cJSON_AddNumberToObject(v, "image_size", c->vision_image_size);
    cJSON_AddNumberToObject(v, "patch_size", c->patch);
    cJSON_AddNumberToObject(v, "num_channels", 3);
    cJSON_AddStringToObject(v, "hidden_act", "quick_gelu");
    cJSON_AddNumberToObject(v, "layer_norm_eps", 1e-5);
    cJSON_AddNumberToObject(v, "projection_dim", c->Dv);
    cJSON* t = cJSON_AddObjectToObject(j, "text_config");
    LmConfig lc = model_config_lm(c);
    /* the LM's family: q/k/v biases without o's are Qwen2's (qwen2 always has them); Llama's attention_bias
     * puts one on all four (export_hf refuses o's alone, which neither family has) */
    int qwen2 = c->qkv_bias && !c->o_bias;
    cJSON_AddStringToObject(t, "model_type", qwen2 ? "qwen2" : "llama");
    cJSON_AddNumberToObject(t, "hidden_size", c->Dt);
    cJSON_AddNumberToObject(t, "intermediate_size", c->F);
    cJSON_AddNumberToObject(t, "num_hidden_layers", c->Lt);
    cJSON_AddNumberToObject(t, "num_attention_heads", c->Ht);
    cJSON_AddNumberToObject(t, "num_key_value_heads", c->Hkv > 0 ? c->Hkv : c->Ht);
    cJSON_AddNumberToObject(t, "head_dim", c->Dt / c->Ht);
    cJSON_AddNumberToObject(t, "vocab_size", vocab);
    cJSON_AddNumberToObject(t, "rms_norm_eps", lc.rms_eps);
    cJSON_AddNumberToObject(t, "rope_theta", lc.rope.theta);
    if (c->rope_llama3) { /* transformers 4's key (transformers 5 reads it into rope_parameters) */
        cJSON* rs = cJSON_AddObjectToObject(t, "rope_scaling");
        cJSON_AddStringToObject(rs, "rope_type", "llama3");
        cJSON_AddNumberToObject(rs, "factor", c->rope_factor);
        cJSON_AddNumberToObject(rs, "low_freq_factor", c->rope_low_freq_factor);
        cJSON_AddNumberToObject(rs, "high_freq_factor", c->rope_high_freq_factor);
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings", c->rope_original_max_pos);
    }
    /* positions are not bounded here; Llama-3.1's ratio for a scaled RoPE */
    double maxpos = c->rope_llama3 ? c->rope_original_max_pos * c->rope_factor : 4096;
    cJSON_AddNumberToObject(t, "max_position_embeddings", maxpos);
    cJSON_AddStringToObject(t, "hidden_act", "silu");
    cJSON_AddBoolToObject(t, "tie_word_embeddings", c->tie_embeddings);
    if (qwen2) {
        cJSON_AddFalseToObject(t, "use_sliding_window");
    } else {
        cJSON_AddBoolToObject(t, "attention_bias", c->o_bias);
        cJSON_AddFalseToObject(t, "mlp_bias");
    }
    return j;
}

static int ex_write_json(const char* dir, const char* file, const cJSON* j, char* err, size_t err_len) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char* text = cJSON_Print(j);
    int rc = rr_write_file_atomic(path, text, strlen(text));
    free(text);
    return rc ? rr_fail(err, err_len, "cannot write '%s': %s", path, strerror(errno)) : 0;
}

/* The <image> id of a tokenizer.json as the engine reads it (the id Hugging Face gives it on load; a token
 * listed twice with two ids is refused by the loader), -1 when it has none, -2 with err when it does not load. */
static int ex_image_token(const char* tokenizer, char* err, size_t err_len) {
    Tokenizer* tok = tokenizer_load(tokenizer, err, err_len);
    if (!tok) return -2;
    int id = tokenizer_token_id(tok, "<image>");
    tokenizer_free(tok);
    return id;
}

/* --add-image-token: tensor `name` of l (V rows of D) grown to Vout rows, the new ones the mean of the V trained
 * rows (summed in double, in row order). Absent (a tied lm_head): nothing. */
static void ex_grow_rows(ExList* l, const ModelConfig* c, const ParamTable* pt, const char* name, int64_t V,
                         int64_t Vout) {
    for (int i = 0; i < l->n; i++) {
        ExTensor* t = &l->v[i];
        if (strcmp(t->name, name)) continue;
        RR_ASSERT(t->ndim == 2 && t->shape[0] == V);
        if (t->merge) { /* an adapted embedding or head: its merged rows, grown */
            t->owned = ex_merged(c, pt, t, t->merge);
            t->data = t->owned;
            t->merge = 0;
        }
        int64_t D = t->shape[1];
        float* g = mallocCheck((size_t)Vout * (size_t)D * sizeof(float));
        memcpy(g, t->data, (size_t)V * (size_t)D * sizeof(float));
        double* sum = callocCheck((size_t)D, sizeof(double));
        for (int64_t r = 0; r < V; r++)
            for (int64_t c = 0; c < D; c++) sum[c] += t->data[r * D + c];
        for (int64_t r = V; r < Vout; r++)
            for (int64_t c = 0; c < D; c++) g[r * D + c] = (float)(sum[c] / (double)V);
        free(sum);
        free(t->owned);
        t->owned = g;
        t->data = g;
        t->shape[0] = Vout;
        t->bytes = (size_t)Vout * (size_t)D * sizeof(float);
    }
}

/* --add-image-token: <image> (id) added to tokenizer_config.json's added_tokens_decoder when it has one
 * (tokenizer.json's added_tokens: tokenizer_json_add_special). Returns the new text (malloc'd), NULL with err set
 * when the file is not JSON of that shape, or NULL with err empty when there is nothing to add. */
static char* ex_tokenizer_config_add_image(const char* src, const char* text, size_t n, int id, char* err,
                                           size_t err_len) {
    err[0] = 0;
    cJSON* j = rr_json_parse_whole(text, n, NULL);
    if (!j || !cJSON_IsObject(j)) {
        rr_fail(err, err_len, "%s: not a JSON object: cannot add <image> to it", src);
        cJSON_Delete(j);
        return NULL;
    }
    char* out = NULL;
    cJSON* dec = cJSON_GetObjectItemCaseSensitive(j, "added_tokens_decoder");
    if (dec && !cJSON_IsObject(dec)) {
        rr_fail(err, err_len, "%s: added_tokens_decoder is not an object: cannot add <image> to it", src);
    } else if (dec) { /* (none: nothing to keep in step) */
        cJSON* tok = cJSON_CreateObject();
        cJSON_AddStringToObject(tok, "content", "<image>");
        cJSON_AddFalseToObject(tok, "single_word");
        cJSON_AddFalseToObject(tok, "lstrip");
        cJSON_AddFalseToObject(tok, "rstrip");
        cJSON_AddFalseToObject(tok, "normalized");
        cJSON_AddTrueToObject(tok, "special");
        char key[16];
        snprintf(key, sizeof key, "%d", id);
        cJSON_DeleteItemFromObjectCaseSensitive(dec, key);
        cJSON_AddItemToObject(dec, key, tok);
        out = cJSON_Print(j);
    }
    cJSON_Delete(j);
    return out;
}

/* The grid pinpoints an import of a LLaVA-NeXT recorded in state.json ("grid_pinpoints"); without one, *pins (the
 * default) stays and the log says so. Returns 0, or -1 when the record does not parse. */
static int ex_pinpoints(const char* state, int tile, AnyresPinpoints* pins, FILE* log, char* err, size_t err_len) {
    cJSON* j = rr_read_json(state, RR_MAX_JSON);
    const cJSON* g = j ? cJSON_GetObjectItemCaseSensitive(j, "grid_pinpoints") : NULL;
    int rc = 0;
    if (cJSON_IsString(g)) {
        char e[512];
        if (anyres_pinpoints_parse(g->valuestring, tile, pins, e, sizeof e) != 0)
            rc = rr_fail(err, err_len, "%s: \"grid_pinpoints\": %s", state, e);
    } else if (log) {
        fprintf(log, "export: %s records no grid pinpoints: image_grid_pinpoints is LLaVA-1.6's\n", state);
    }
    cJSON_Delete(j);
    return rc;
}

int export_hf(const char* ckpt, const char* recipe_path, const char* out_dir, const char* tokenizer,
              const char* chat_template, int image_token_index, int add_image_token, size_t shard_bytes, HfExport* info, FILE* log, char* err,
              size_t err_len) {
    memset(info, 0, sizeof *info);
    Recipe r;
    char state[4200];
    int taken = hf_export_recipe(ckpt, recipe_path, "rrfp-mm export hf", &r, state, sizeof state, err, err_len);
    if (taken < 0) return -1;
    if (!recipe_path) recipe_path = state; /* the messages below name where the keys came from */
    TrainedData td;
    if (trained_data_of_checkpoint(ckpt, &td, err, err_len) != 0) return -1;
    /* the chat template the run's data was packed with (trained.h), unless --template names the same one */
    if (td.chat_template >= 0) {
        const char* rec = template_name((TemplateKind)td.chat_template);
        if (chat_template && strcmp(chat_template, rec) != 0)
            return rr_fail(err, err_len, "--template %s, but %s records that the model was trained on %s's prompts: "
                           "export without --template (it is taken from there)", chat_template, td.template_from, rec);
        if (!chat_template && log) fprintf(log, "export: chat template %s (from %s)\n", rec, td.template_from);
        chat_template = rec;
    }
    if (strcmp(r.vision_arch, "clip"))
        return rr_fail(err, err_len, "%s: model.vision_arch = %s: the 2-D RoPE ViT (rrfp-mm's own, no class token, "
                       "rotary positions) has no Hugging Face equivalent; LlavaForConditionalGeneration's tower is CLIP "
                       "(model.vision_arch = clip, e.g. from rrfp-mm import llava)", recipe_path, r.vision_arch);
    if (r.text_o_bias && !r.text_qkv_bias)
        return rr_fail(err, err_len, "%s: model.text_o_bias = true with model.text_qkv_bias = false: no Hugging Face LM "
                       "has a bias on o alone (Llama's attention_bias puts one on q, k, v and o; Qwen2's on q, k, v)",
                       recipe_path);
    int V = r.vocab;
    if (V == 0 && (V = train_tokenizer_vocab(&r, err, err_len)) < 0) return -1;
    ModelConfig mc = train_model_config(&r, V);
    mc.lora_quant = 0; /* QLoRA: the checkpoint's dequantised base values, merged in f32 like any LoRA base */
    if (model_config_check(&mc, err, err_len) != 0) return -1;
    /* an any-resolution model's image_grid_pinpoints: its run's data record (the shards'), else an import's record,
     * else LLaVA-1.6's */
    AnyresPinpoints pins;
    anyres_pinpoints_default(&pins);
    if (mc.anyres && td.has_prep && td.prep.kind == IMAGE_PREP_ANYRES && td.prep.pins.n > 0) pins = td.prep.pins;
    else if (mc.anyres && ex_pinpoints(state, mc.vision_image_size, &pins, log, err, err_len) != 0) return -1;
    /* the run's own (a recipe's data.tokenizer; without a recipe there is none to take) */
    if (!tokenizer && strcmp(recipe_path, state) != 0 && access(r.tokenizer, R_OK) == 0) tokenizer = r.tokenizer;
    int Vout = V;
    if (add_image_token > 0) {
        if (image_token_index >= 0)
            return rr_fail(err, err_len, "--add-image-token makes <image> a new id; it cannot be given with an id");
        int held = tokenizer ? ex_image_token(tokenizer, err, err_len) : -1;
        if (held == -2) return -1;
        if (held >= 0)
            return rr_fail(err, err_len, "%s already holds <image> (id %d): export without --add-image-token (its id "
                           "is taken from there)", tokenizer, held);
        image_token_index = V;
        int64_t grown = ((int64_t)V + add_image_token) / add_image_token * add_image_token;
        if (grown > (1 << 30)) return rr_fail(err, err_len, "vocabulary %d grown to %lld is too large", V, (long long)grown);
        Vout = (int)grown;
    }
    if (image_token_index < 0 && td.image_token >= 0) {
        /* the checkpoint's own: an import's image_token_index, or the id its run's shards mark images with */
        int held = tokenizer ? ex_image_token(tokenizer, err, err_len) : -1;
        if (held == -2) return -1;
        if (held >= 0 && held != td.image_token && add_image_token <= 0)
            return rr_fail(err, err_len, "%s has <image> at id %d, but %s records id %d: not this model's tokenizer "
                           "(give --image-token-id N to choose)", tokenizer, held, td.image_from, td.image_token);
        if (add_image_token <= 0) image_token_index = td.image_token;
    }
    if (image_token_index < 0 && tokenizer && (image_token_index = ex_image_token(tokenizer, err, err_len)) == -2) return -1;
    if (image_token_index < 0 || image_token_index >= Vout)
        return rr_fail(err, err_len, "the <image> token id (config.json's image_token_index) is %s: give "
                       "--image-token-id N (0 <= N < vocab %d) or a --tokenizer whose added_tokens hold <image>",
                       image_token_index < 0 ? "unknown" : "outside the vocabulary", Vout);
    ParamTable pt;
    model_params_register(&mc, 0, mc.Lt, &pt);
    /* the model is sized from the recipe: allocated only once the checkpoint's files are known to hold at
     * least that many values (2 bytes each at the least), so a recipe of another model costs nothing */
    uint64_t held = hf_safetensors_bytes(ckpt, UINT64_MAX); /* checkpoint_init_from names a missing folder */
    if ((uint64_t)pt.total > held / 2) {
        char a[32], b[32];
        rr_fmt_bytes(a, sizeof a, (uint64_t)pt.total * sizeof(float));
        rr_fmt_bytes(b, sizeof b, held);
        rr_fail(err, err_len, "%s: the model of %s has %zu parameters (%s as F32), but the checkpoint's "
                "model files hold %s: not a checkpoint of this model (--recipe)", ckpt, recipe_path, pt.total, a, b);
        params_free(&pt);
        return -1;
    }
    /* --out as the imports take it (import.h): never existing, never inside the checkpoint it reads */
    ImportOut o;
    if (import_out_begin(&o, out_dir, ckpt, err, err_len) != 0) {
        params_free(&pt);
        return -1;
    }
    /* read and written, never trained: a forward-only table (every tensor frozen), so params_alloc makes no gradient (a copy of
     * the model's size; docs/engine.md "Peak memory of the whole-model commands") */
    params_forward_only(&pt);
    params_alloc(&pt, &backend_cpu, mc.seed);
    /* train.init_from's loader: a trained checkpoint of any layout or an import (which a resume refuses);
     * every value checked finite and against its checksum; every tensor of the model must be in it */
    char* rep = NULL;
    size_t rep_len = 0;
    FILE* rf = open_memstream(&rep, &rep_len);
    int lrc = checkpoint_init_from(ckpt, &pt, rf, err, err_len);
    fclose(rf);
    const char* lat = lrc == 0 && rep ? strstr(rep, ": loaded ") : NULL;
    int n_loaded = -1, n_init = -1;
    double values;
    if (lrc == 0 && (!lat || sscanf(lat, ": loaded %d tensors (%lf values), initialised %d", &n_loaded, &values, &n_init) != 3 ||
                     n_init != 0)) {
        /* the report's "  initialised: N tensors" block names them, with the reason (absent, another shape) */
        const char* which = lat ? strstr(lat, "\n  initialised:") : NULL;
        char names[600] = "?";
        if (which) {
            which = strchr(which + 1, '\n');
            size_t k = 0;
            for (const char* c = which ? which + 1 : ""; *c == ' ' && c[1] == ' ' && c[2] == ' ' && k + 4 < sizeof names;) {
                while (*c == ' ') c++;
                if (k) names[k++] = ';', names[k++] = ' ';
                while (*c && *c != '\n' && k + 1 < sizeof names) names[k++] = *c++;
                if (*c == '\n') c++;
            }
            names[k] = 0;
        }
        rr_fail(err, err_len, "%s: the checkpoint lacks %d of the model's %d tensors (%s): not a checkpoint of "
                "this model", ckpt, n_init, pt.n, names);
        lrc = -1;
    }
    free(rep);
    if (lrc != 0) {
        params_free(&pt);
        return import_out_end(&o, out_dir, -1, err, err_len);
    }
    ExList l = {0};
    ex_tensors(&l, &mc, &pt);
    if (Vout > V) {
        ex_grow_rows(&l, &mc, &pt, "language_model.model.embed_tokens.weight", V, Vout);
        ex_grow_rows(&l, &mc, &pt, "language_model.lm_head.weight", V, Vout);
        if (log)
            fprintf(log, "export: <image> is id %d; the vocabulary grows %d -> %d (new embedding and lm_head rows: the "
                    "mean of the trained rows)\n", V, V, Vout);
    }
    /* shards of at most shard_bytes (a bigger tensor alone) */
    int nfile = 1;
    size_t at = 0, total = 0;
    for (int i = 0; i < l.n; i++) {
        if (at > 0 && at + l.v[i].bytes > shard_bytes) nfile++, at = 0;
        l.v[i].file = nfile;
        at += l.v[i].bytes;
        total += l.v[i].bytes;
    }
    char path[4400], base[64], kept[4400] = "";
    const char* tmp = o.tmp;
    int rc = 0;
    cJSON* wm = cJSON_CreateObject();
    ExFill* fills = callocCheck((size_t)l.n + 1, sizeof(ExFill)); /* the merged tensors' contexts */
    for (int f = 1; f <= nfile && rc == 0; f++) {
        StWriter* w = st_writer_new();
        snprintf(base, sizeof base, "model-%05d-of-%05d.safetensors", f, nfile);
        for (int i = 0; i < l.n; i++) {
            if (l.v[i].file != f) continue;
            st_writer_add(w, l.v[i].name, DTYPE_F32, l.v[i].ndim, l.v[i].shape, l.v[i].data);
            if (l.v[i].merge) { /* merged into the writer's buffer as it writes this tensor */
                fills[i] = (ExFill){&mc, &pt, &l.v[i]};
                st_writer_defer(w, l.v[i].name, ex_fill, &fills[i]);
            }
            cJSON_AddStringToObject(wm, l.v[i].name, base);
            info->tensors++;
        }
        st_writer_meta(w, "format", "pt");
        snprintf(path, sizeof path, "%s/%s", tmp, base);
        rc = st_writer_write(w, path, err, err_len);
        st_writer_free(w);
        if (rc == 0) info->files++;
        if (rc == 0 && log) fprintf(log, "export: %s\n", base);
    }
    if (rc == 0) {
        cJSON* idx = cJSON_CreateObject();
        cJSON* meta = cJSON_AddObjectToObject(idx, "metadata");
        cJSON_AddNumberToObject(meta, "total_size", (double)total);
        cJSON_AddItemToObject(idx, "weight_map", wm);
        wm = NULL;
        rc = ex_write_json(tmp, "model.safetensors.index.json", idx, err, err_len);
        cJSON_Delete(idx);
    }
    if (rc == 0) {
        /* the imported config.json's values kept (hf_files.h) */
        if (hf_kept_find(ckpt, &r, kept, sizeof kept) != 0) kept[0] = 0;
        cJSON* ours = ex_config(&mc, image_token_index, Vout, &pins);
        cJSON* cfg = hf_config_keep(ours, kept[0] ? kept : NULL, log);
        rc = ex_write_json(tmp, "config.json", cfg, err, err_len);
        cJSON_Delete(cfg);
        cJSON_Delete(ours);
    }
    if (rc == 0 && tokenizer) {
        /* tokenizer.json, and its companions where they sit beside it */
        static const char* names[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model"};
        char dir[4200];
        snprintf(dir, sizeof dir, "%s", tokenizer);
        char* slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
        for (int k = 0; k < 4 && rc == 0; k++) {
            char src[4400];
            if (k == 0) snprintf(src, sizeof src, "%s", tokenizer);
            else snprintf(src, sizeof src, "%s/%s", dir, names[k]);
            size_t n;
            /* regular files only: a companion that is a pipe or a device is not copied (nor waited for) */
            struct stat sb;
            int found = stat(src, &sb) == 0;
            if (!found || !S_ISREG(sb.st_mode)) {
                if (k == 0)
                    rc = rr_fail(err, err_len, "%s: cannot read: %s", src,
                                 found ? "not a regular file (a pipe or a device)" : strerror(errno));
                continue;
            }
            char* bytes = rr_read_file(src, &n, RR_MAX_TOKENIZER);
            if (!bytes) {
                char why[160];
                rc = rr_fail(err, err_len, "%s: cannot read: %s", src,
                             rr_read_file_why(errno, "a tokenizer file", why, sizeof why));
                continue;
            }
            if (Vout > V && k <= 1) { /* --add-image-token: <image> into the tokenizer written */
                /* tokenizer.json: as `tokenizer add-special` adds it, <image> at id V (loaded back: the id HF
                 * gives it must be V, which a tokenizer of fewer than V ids does not give) */
                static const char* const image[1] = {"<image>"};
                int id, was_added;
                err[0] = 0;
                char* added = k == 0 ? tokenizer_json_add_special(bytes, n, src, image, 1, V, &id, &was_added, err, err_len)
                                     : ex_tokenizer_config_add_image(src, bytes, n, V, err, err_len);
                if (!added && err[0]) {
                    rc = -1;
                    free(bytes);
                    continue;
                }
                if (added) {
                    free(bytes);
                    bytes = added;
                    n = strlen(added);
                }
            }
            snprintf(path, sizeof path, "%s/%s", tmp, names[k]);
            if (rr_write_file_atomic(path, bytes, n) != 0) rc = rr_fail(err, err_len, "cannot write '%s': %s", path, strerror(errno));
            else info->tokenizer++;
            free(bytes);
        }
    }
    if (rc == 0) { /* the processor, tokenizer and generation configs (hf_files.h) */
        HfExtras x = {.tmp = tmp, .kept = kept[0] ? kept : NULL, .tokenizer = tokenizer, .r = &r, .mc = &mc, .chat_template = chat_template,
                      .image_token_index = image_token_index};
        rc = hf_write_extras(&x, log, err, err_len);
        info->extras = x.files;
    }
    rc = import_out_end(&o, out_dir, rc, err, err_len); /* renamed, or what this export made removed */
    cJSON_Delete(wm);
    free(fills);
    for (int i = 0; i < l.n; i++) free(l.v[i].owned);
    free(l.v);
    params_free(&pt);
    return rc;
}
