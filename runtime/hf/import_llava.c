/* import_llava.c — a Hugging Face LLaVA or CLIP vision checkpoint as a checkpoint of this model (see
 * import_llava.h). One input shard at a time is read, converted and written as one output file; the only
 * tensors held across shards are a CLIP layer's q, k, v projections until all three have been seen (they
 * become one fused qkv tensor). The LM part goes through import.c's Llama config parser and name table. */
#include "runtime/hf/import_llava.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/checkpoint.h"
#include "engine/engine.h"
#include "engine/safetensors.h"
#include "engine/json.h"
#include "engine/util.h"
#include "runtime/hf/hf_files.h"

/* ------------------------------------------------------------------------------------------------
 * Configs */

static void il_note_default(LlavaImport* info, const char* where, const char* key) {
    size_t at = strlen(info->defaults);
    if (at + 2 < sizeof info->defaults)
        snprintf(info->defaults + at, sizeof info->defaults - at, "%s%s.%s", at ? ", " : "", where, key);
}

/* An integer field of object o, or def (noted) when absent: a whole number inside [lo, hi] and, when
 * rkey names a recipe key model.<rkey>, inside that key's range (the model's own limits) too, checked as
 * a double before any conversion (1e300 or 2^31 never reach an int). */
static int il_int(const cJSON* o, const char* where, const char* key, int def, const char* rkey, int lo, int hi,
                  int* out, LlavaImport* info, char* err, size_t err_len) {
    const cJSON* x = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    if (!x || cJSON_IsNull(x)) {
        *out = def;
        il_note_default(info, where, key);
        return 0;
    }
    double rlo = lo, rhi = hi;
    if (rkey) import_key_range(rkey, &rlo, &rhi);
    if (rlo < lo) rlo = lo;
    if (rhi > hi) rhi = hi;
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble != floor(x->valuedouble))
        return rr_fail(err, err_len, "%s: \"%s\" is not a whole number", where, key);
    if (x->valuedouble < rlo || x->valuedouble > rhi)
        return rr_fail(err, err_len, "%s: \"%s\" = %.0f is outside this model's range [%.0f, %.0f]%s%s%s", where,
                       key, x->valuedouble, rlo, rhi, rkey ? " (model." : "", rkey ? rkey : "", rkey ? ")" : "");
    *out = (int)x->valuedouble;
    return 0;
}

/* The CLIP vision config v (CLIPVisionConfig defaults for absent fields). */
static int il_vision_config(const cJSON* v, const char* where, LlavaImport* c, char* err, size_t err_len) {
    int inter, channels;
    if (v && !cJSON_IsObject(v)) return rr_fail(err, err_len, "%s: not a JSON object", where);
    /* each within the recipe key's range before anything is sized from it (the name table, the shapes) */
    if (il_int(v, where, "hidden_size", 768, "vision_width", 1, INT_MAX, &c->D, c, err, err_len) ||
        il_int(v, where, "num_hidden_layers", 12, "vision_layers", 1, INT_MAX, &c->L, c, err, err_len) ||
        il_int(v, where, "num_attention_heads", 12, "vision_heads", 1, INT_MAX, &c->H, c, err, err_len) ||
        il_int(v, where, "patch_size", 32, "patch", 1, INT_MAX, &c->patch, c, err, err_len) ||
        il_int(v, where, "image_size", 224, "vision_image_size", 1, INT_MAX, &c->image_size, c, err, err_len) ||
        il_int(v, where, "intermediate_size", 3072, NULL, 1, 4 * 65536, &inter, c, err, err_len) ||
        il_int(v, where, "num_channels", 3, NULL, 1, 64, &channels, c, err, err_len))
        return -1;
    if (channels != 3) return rr_fail(err, err_len, "%s: num_channels = %d: the model reads RGB images (3)", where, channels);
    if (inter != 4 * c->D)
        return rr_fail(err, err_len, "%s: intermediate_size = %d is not 4 x hidden_size = %d: this model's vision MLP "
                       "hidden is 4 D", where, inter, 4 * c->D);
    if (c->D % c->H)
        return rr_fail(err, err_len, "%s: hidden_size %d is not divisible by num_attention_heads %d", where, c->D, c->H);
    if (c->image_size % c->patch)
        return rr_fail(err, err_len, "%s: image_size %d is not a multiple of patch_size %d", where, c->image_size, c->patch);
    const cJSON* x = v ? cJSON_GetObjectItemCaseSensitive(v, "hidden_act") : NULL;
    if (x && !cJSON_IsNull(x) && (!cJSON_IsString(x) || strcmp(x->valuestring, "quick_gelu")))
        return rr_fail(err, err_len, "%s: hidden_act \"%s\": the CLIP tower's MLP uses quick_gelu (OpenAI's CLIP)", where,
                       cJSON_IsString(x) ? x->valuestring : "?");
    if (!x) il_note_default(c, where, "hidden_act");
    x = v ? cJSON_GetObjectItemCaseSensitive(v, "layer_norm_eps") : NULL;
    if (x && !cJSON_IsNull(x) && (!cJSON_IsNumber(x) || x->valuedouble != 1e-5))
        return rr_fail(err, err_len, "%s: layer_norm_eps = %g: the vision LayerNorms' eps is 1e-5 (rrfp-mm's ViT)",
                       where, cJSON_IsNumber(x) ? x->valuedouble : -1.0);
    return 0;
}

/* text_config as import llama reads it: absent shape fields take the class default of its model_type
 * (LlamaConfig when absent; noted). */
static cJSON* il_text_config(const cJSON* top, LlavaImport* info) {
    const cJSON* tc = cJSON_GetObjectItemCaseSensitive(top, "text_config");
    if (tc && !cJSON_IsNull(tc) && !cJSON_IsObject(tc)) return NULL; /* the caller names it */
    cJSON* t = cJSON_IsObject(tc) ? cJSON_Duplicate(tc, 1) : cJSON_CreateObject();
    /* the class defaults of the LM's config class (LlamaConfig, MistralConfig, Qwen2Config) */
    const cJSON* mt = cJSON_GetObjectItemCaseSensitive(t, "model_type");
    const char* type = cJSON_IsString(mt) ? mt->valuestring : "llama";
    int mistral = !strcmp(type, "mistral"), qwen2 = !strcmp(type, "qwen2");
    const struct {
        const char* key;
        int def;
    } llama_defaults[] = {{"hidden_size", 4096},
                          {"intermediate_size", mistral ? 14336 : qwen2 ? 22016 : 11008},
                          {"num_hidden_layers", 32},
                          {"num_attention_heads", 32},
                          {"vocab_size", qwen2 ? 151936 : 32000},
                          {"num_key_value_heads", mistral ? 8 : -1}};
    for (size_t i = 0; i < sizeof llama_defaults / sizeof llama_defaults[0]; i++) {
        if (cJSON_GetObjectItemCaseSensitive(t, llama_defaults[i].key) || llama_defaults[i].def < 0) continue;
        /* old llava-hf configs keep vocab_size at the top */
        const cJSON* up = cJSON_GetObjectItemCaseSensitive(top, llama_defaults[i].key);
        if (!strcmp(llama_defaults[i].key, "vocab_size") && cJSON_IsNumber(up)) {
            cJSON_AddNumberToObject(t, "vocab_size", up->valuedouble);
            continue;
        }
        cJSON_AddNumberToObject(t, llama_defaults[i].key, llama_defaults[i].def);
        char kv[64];
        snprintf(kv, sizeof kv, "%s = %d", llama_defaults[i].key, llama_defaults[i].def);
        il_note_default(info, "text_config", kv);
    }
    /* the norms' eps and RoPE's base (import llama takes LlamaConfig's) */
    const cJSON* rp = cJSON_GetObjectItemCaseSensitive(t, "rope_parameters");
    if (!cJSON_GetObjectItemCaseSensitive(t, "rms_norm_eps")) il_note_default(info, "text_config", "rms_norm_eps = 1e-06");
    if (!cJSON_GetObjectItemCaseSensitive(t, "rope_theta") && !cJSON_GetObjectItemCaseSensitive(rp, "rope_theta"))
        il_note_default(info, "text_config", "rope_theta = 10000");
    /* MistralConfig's sliding_window defaults to 4096 (a window, which import llama refuses by name) */
    if (mistral && !cJSON_GetObjectItemCaseSensitive(t, "sliding_window")) {
        cJSON_AddNumberToObject(t, "sliding_window", 4096);
        il_note_default(info, "text_config", "sliding_window");
    }
    if (!mt) cJSON_AddStringToObject(t, "model_type", "llama");
    /* rope_parameters (transformers 5), rope_scaling, GQA, biases and tie_word_embeddings: import llama's
     * config checks (import_llama_config_json) read them */
    return t;
}

/* config.json of DIR into info. */
static int il_config(const char* dir, int llava, LlavaImport* c, char* err, size_t err_len) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON* j = rr_read_json_object(path, RR_MAX_JSON, "a config.json file",
                                   "%s: cannot read: %s (--hf takes a Hugging Face model folder)", err, err_len);
    if (!j) return -1;
    int rc = -1;
    const cJSON* mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    const char* type = cJSON_IsString(mt) ? mt->valuestring : "";
    char where[4300];
    c->llava = llava;
    c->image_token_index = -1;
    c->feature_layer = -2;
    c->proj_act = ACT_GELU_ERF;
    if (!llava) {
        const cJSON* v = j;
        snprintf(where, sizeof where, "%s", path);
        if (!strcmp(type, "clip")) {
            v = cJSON_GetObjectItemCaseSensitive(j, "vision_config");
            snprintf(where, sizeof where, "%s vision_config", path);
        } else if (strcmp(type, "clip_vision_model")) {
            rr_fail(err, err_len, "%s: model_type \"%s\": import clip reads a CLIPVisionModel (clip_vision_model) or a "
                    "CLIPModel (clip)%s", path, type, !strcmp(type, "llava") ? "; this is a LLaVA: use import llava" : "");
            goto out;
        }
        rc = il_vision_config(v, where, c, err, err_len);
        goto out;
    }
    if (llava == 2 ? strcmp(type, "llava_next") : strcmp(type, "llava")) {
        if (llava == 2)
            rr_fail(err, err_len, "%s: model_type \"%s\": import llava_next reads a LlavaNextForConditionalGeneration "
                    "(llava_next)%s", path, type, !strcmp(type, "llava") ? "; this is a LLaVA-1.5: use import llava" : "");
        else
            rr_fail(err, err_len, "%s: model_type \"%s\": import llava reads a LlavaForConditionalGeneration (llava)%s", path,
                    type, !strcmp(type, "llava_next") ? "; this is a LLaVA-NeXT: use import llava_next"
                          : !strncmp(type, "llava_", 6) ? " (LLaVA-OneVision's image tiling is not this model)" : "");
        goto out;
    }
    const cJSON* vc = cJSON_GetObjectItemCaseSensitive(j, "vision_config");
    if (vc && !cJSON_IsNull(vc) && !cJSON_IsObject(vc)) {
        rr_fail(err, err_len, "%s: vision_config is not a JSON object", path);
        goto out;
    }
    const cJSON* vt = vc ? cJSON_GetObjectItemCaseSensitive(vc, "model_type") : NULL;
    if (cJSON_IsString(vt) && strcmp(vt->valuestring, "clip_vision_model")) {
        rr_fail(err, err_len, "%s: vision_config.model_type \"%s\": the vision tower this model has is CLIP's "
                "(clip_vision_model)", path, vt->valuestring);
        goto out;
    }
    snprintf(where, sizeof where, "%s vision_config", path);
    cJSON* vdef = NULL;
    if (!cJSON_IsObject(vc)) {
        /* LlavaConfig without a vision_config: its own default, CLIP ViT-L/14-336 (not CLIPVisionConfig's) */
        vdef = cJSON_CreateObject();
        static const struct {
            const char* k;
            int v;
        } d[] = {{"hidden_size", 1024}, {"intermediate_size", 4096}, {"num_hidden_layers", 24},
                 {"num_attention_heads", 16}, {"patch_size", 14}, {"image_size", 336}};
        for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) cJSON_AddNumberToObject(vdef, d[i].k, d[i].v);
        il_note_default(c, "config.json", "vision_config (LlavaConfig's: CLIP ViT-L/14-336)");
        vc = vdef;
    }
    int vrc = il_vision_config(vc, where, c, err, err_len);
    cJSON_Delete(vdef);
    if (vrc) goto out;
    const cJSON* x = cJSON_GetObjectItemCaseSensitive(j, "vision_feature_layer");
    if (x && !cJSON_IsNumber(x)) {
        rr_fail(err, err_len, "%s: vision_feature_layer is not one integer (a list concatenates several layers' "
                "features, which this model's projector cannot take)", path);
        goto out;
    }
    if (il_int(j, path, "vision_feature_layer", -2, "vision_feature_layer", -c->L - 1, c->L, &c->feature_layer, c, err,
               err_len))
        goto out;
    int run = c->feature_layer < 0 ? c->L + 1 + c->feature_layer : c->feature_layer;
    if (run < 1) {
        rr_fail(err, err_len, "%s: vision_feature_layer = %d selects the embeddings themselves (hidden state 0); "
                "allowed: a hidden state after at least one block", path, c->feature_layer);
        goto out;
    }
    x = cJSON_GetObjectItemCaseSensitive(j, "vision_feature_select_strategy");
    if (x && (!cJSON_IsString(x) || strcmp(x->valuestring, "default"))) {
        rr_fail(err, err_len, "%s: vision_feature_select_strategy \"%s\": this model drops the class token (`default`)",
                path, cJSON_IsString(x) ? x->valuestring : "?");
        goto out;
    }
    if (llava == 2) { /* image_grid_pinpoints: [height, width] pairs, multiples of the tile (the tower's image) side */
        x = cJSON_GetObjectItemCaseSensitive(j, "image_grid_pinpoints");
        if (!x || cJSON_IsNull(x)) {
            anyres_pinpoints_default(&c->pins);
            il_note_default(c, "config.json", "image_grid_pinpoints");
        } else {
            memset(&c->pins, 0, sizeof c->pins);
            int ok = cJSON_IsArray(x) && cJSON_GetArraySize(x) >= 1 && cJSON_GetArraySize(x) <= ANYRES_MAX_PINPOINTS;
            for (const cJSON* pr = ok ? x->child : NULL; pr && ok; pr = pr->next) {
                ok = cJSON_IsArray(pr) && cJSON_GetArraySize(pr) == 2;
                for (int k = 0; k < 2 && ok; k++) {
                    const cJSON* v = cJSON_GetArrayItem(pr, k);
                    ok = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= ANYRES_MAX_SIDE &&
                         v->valuedouble == (double)(int)v->valuedouble;
                    if (ok) c->pins.hw[c->pins.n][k] = (int)v->valuedouble;
                }
                if (ok) c->pins.n++;
            }
            if (!ok) {
                rr_fail(err, err_len, "%s: image_grid_pinpoints: expected a list of 1 .. %d [height, width] pairs of whole "
                        "numbers in 1 .. %d", path, ANYRES_MAX_PINPOINTS, ANYRES_MAX_SIDE);
                goto out;
            }
        }
        char e[256];
        if (anyres_pinpoints_check(&c->pins, c->image_size, e, sizeof e) != 0) {
            rr_fail(err, err_len, "%s: image_grid_pinpoints: %s (vision_config.image_size)", path, e);
            goto out;
        }
        c->anyres_tiles = 0;
        for (int i = 0; i < c->pins.n; i++) {
            int t = 1 + (c->pins.hw[i][0] / c->image_size) * (c->pins.hw[i][1] / c->image_size);
            if (t > c->anyres_tiles) c->anyres_tiles = t;
        }
    }
    x = cJSON_GetObjectItemCaseSensitive(j, "projector_hidden_act");
    if (x && cJSON_IsString(x)) {
        if (!strcmp(x->valuestring, "gelu")) c->proj_act = ACT_GELU_ERF;
        else if (!strcmp(x->valuestring, "gelu_pytorch_tanh") || !strcmp(x->valuestring, "gelu_new")) c->proj_act = ACT_GELU_TANH;
        else {
            rr_fail(err, err_len, "%s: projector_hidden_act \"%s\": the projector's activation is gelu (exact) or "
                    "gelu_pytorch_tanh", path, x->valuestring);
            goto out;
        }
    } else {
        il_note_default(c, "config.json", "projector_hidden_act");
    }
    x = cJSON_GetObjectItemCaseSensitive(j, "multimodal_projector_bias");
    if (x && cJSON_IsFalse(x)) {
        rr_fail(err, err_len, "%s: multimodal_projector_bias = false: this model's projector has biases", path);
        goto out;
    }
    /* LlavaConfig without a text_config takes LlamaConfig() whole: a 7B Llama with rms_norm_eps 1e-6 and
     * rope_theta 1e4, which is rarely the LM in the files (Vicuna's eps is 1e-5): refused, not guessed */
    const cJSON* tcx = cJSON_GetObjectItemCaseSensitive(j, "text_config");
    if (!tcx || cJSON_IsNull(tcx)) {
        rr_fail(err, err_len, "%s: no text_config: LlavaConfig would take LlamaConfig's defaults for the whole LM "
                "(model_type llama, hidden_size 4096, intermediate_size 11008, num_hidden_layers 32, "
                "num_attention_heads 32, vocab_size 32000, rms_norm_eps 1e-06, rope_theta 10000.0), which the import "
                "does not assume: write the LM's config.json keys into \"text_config\"", path);
        goto out;
    }
    cJSON* t = il_text_config(j, c);
    if (!t) {
        rr_fail(err, err_len, "%s: text_config is not a JSON object", path);
        goto out;
    }
    snprintf(where, sizeof where, "%s text_config", path);
    rc = import_llama_config_json(t, where, &c->text, err, err_len);
    cJSON_Delete(t);
    if (rc != 0) goto out;
    /* the <image> token: a whole number inside the LM's vocabulary (its embedding row) */
    const char* itk = "image_token_index";
    x = cJSON_GetObjectItemCaseSensitive(j, itk);
    if (!x) x = cJSON_GetObjectItemCaseSensitive(j, itk = "image_token_id");
    if (x && !cJSON_IsNull(x)) {
        rc = il_int(j, path, itk, -1, NULL, 0, c->text.V - 1, &c->image_token_index, c, err, err_len);
        if (rc != 0) {
            size_t l = strlen(err);
            snprintf(err + l, err_len - l, " (text_config.vocab_size %d)", c->text.V);
        }
    }
out:
    cJSON_Delete(j);
    return rc;
}

/* ------------------------------------------------------------------------------------------------
 * Names */

enum { IL_PLAIN = 0, IL_CONV, IL_Q, IL_K, IL_V };

typedef struct {
    ImportName n; /* n.hf: the canonical name ("V:" vision, "P:" projector, "L:" Llama) */
    int kind, layer;
    int optional; /* never used by the model (post_layernorm, blocks past the feature layer): may be absent */
} IlName;

typedef struct {
    IlName* v;
    int n, cap;
} IlTable;

static IlName* il_add(IlTable* t, const char* hf, const char* ours, int ndim, int64_t d0, int64_t d1, int kind, int layer) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 256;
        t->v = reallocCheck(t->v, (size_t)t->cap * sizeof(IlName));
    }
    IlName* x = &t->v[t->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->n.hf, sizeof x->n.hf, "%s", hf);
    snprintf(x->n.ours, sizeof x->n.ours, "%s", ours);
    x->n.ndim = ndim;
    x->n.shape[0] = d0;
    x->n.shape[1] = d1;
    x->kind = kind;
    x->layer = layer;
    return x;
}

static void il_table(IlTable* t, const LlavaImport* c) {
    int64_t D = c->D, G = c->image_size / c->patch, P = 3LL * c->patch * c->patch;
    int run = c->feature_layer < 0 ? c->L + 1 + c->feature_layer : c->feature_layer;
    char hf[128], ours[128];
    il_add(t, "V:embeddings.patch_embedding.weight", "vision.patch_embed.weight", 2, D, P, IL_CONV, -1);
    il_add(t, "V:embeddings.class_embedding", "vision.class_embedding", 1, D, 0, IL_PLAIN, -1);
    il_add(t, "V:embeddings.position_embedding.weight", "vision.pos_embed.weight", 2, 1 + G * G, D, IL_PLAIN, -1);
    il_add(t, "V:pre_layrnorm.weight", "vision.pre_ln.weight", 1, D, 0, IL_PLAIN, -1);
    il_add(t, "V:pre_layrnorm.bias", "vision.pre_ln.bias", 1, D, 0, IL_PLAIN, -1);
    for (int l = 0; l < c->L; l++) {
        static const struct {
            const char *hf, *ours;
            int kind, rows4, cols4, bias;
        } m[] = {{"layer_norm1.weight", "ln1.weight", IL_PLAIN, 0, 0, 1},
                 {"layer_norm1.bias", "ln1.bias", IL_PLAIN, 0, 0, 1},
                 {"self_attn.q_proj.weight", "attn.qkv.weight", IL_Q, 0, 0, 0},
                 {"self_attn.k_proj.weight", "attn.qkv.weight", IL_K, 0, 0, 0},
                 {"self_attn.v_proj.weight", "attn.qkv.weight", IL_V, 0, 0, 0},
                 {"self_attn.q_proj.bias", "attn.qkv.bias", IL_Q, 0, 0, 1},
                 {"self_attn.k_proj.bias", "attn.qkv.bias", IL_K, 0, 0, 1},
                 {"self_attn.v_proj.bias", "attn.qkv.bias", IL_V, 0, 0, 1},
                 {"self_attn.out_proj.weight", "attn.out.weight", IL_PLAIN, 0, 0, 0},
                 {"self_attn.out_proj.bias", "attn.out.bias", IL_PLAIN, 0, 0, 1},
                 {"layer_norm2.weight", "ln2.weight", IL_PLAIN, 0, 0, 1},
                 {"layer_norm2.bias", "ln2.bias", IL_PLAIN, 0, 0, 1},
                 {"mlp.fc1.weight", "mlp.fc1.weight", IL_PLAIN, 1, 0, 0},
                 {"mlp.fc1.bias", "mlp.fc1.bias", IL_PLAIN, 1, 0, 1},
                 {"mlp.fc2.weight", "mlp.fc2.weight", IL_PLAIN, 0, 1, 0},
                 {"mlp.fc2.bias", "mlp.fc2.bias", IL_PLAIN, 0, 0, 1}};
        for (size_t k = 0; k < sizeof m / sizeof m[0]; k++) {
            snprintf(hf, sizeof hf, "V:encoder.layers.%d.%s", l, m[k].hf);
            snprintf(ours, sizeof ours, "vision.blocks.%d.%s", l, m[k].ours);
            int64_t rows = m[k].rows4 ? 4 * D : D;
            IlName* x = m[k].bias ? il_add(t, hf, ours, 1, rows, 0, m[k].kind, l)
                                  : il_add(t, hf, ours, 2, rows, m[k].cols4 ? 4 * D : D, m[k].kind, l);
            x->optional = l >= run;
        }
    }
    il_add(t, "V:post_layernorm.weight", "vision.post_ln.weight", 1, D, 0, IL_PLAIN, -1)->optional = 1;
    il_add(t, "V:post_layernorm.bias", "vision.post_ln.bias", 1, D, 0, IL_PLAIN, -1)->optional = 1;
    if (!c->llava) return;
    int64_t Dt = c->text.D;
    il_add(t, "P:linear_1.weight", "projector.0.weight", 2, Dt, D, IL_PLAIN, -1);
    il_add(t, "P:linear_1.bias", "projector.0.bias", 1, Dt, 0, IL_PLAIN, -1);
    il_add(t, "P:linear_2.weight", "projector.2.weight", 2, Dt, Dt, IL_PLAIN, -1);
    il_add(t, "P:linear_2.bias", "projector.2.bias", 1, Dt, 0, IL_PLAIN, -1);
    if (c->llava == 2) il_add(t, "N:image_newline", "image_newline", 1, Dt, 0, IL_PLAIN, -1);
    int nl = 0;
    ImportName* lm = import_llama_names(&c->text, &nl);
    for (int i = 0; i < nl; i++) {
        snprintf(hf, sizeof hf, "L:%.120s", lm[i].hf);
        il_add(t, hf, lm[i].ours, lm[i].ndim, lm[i].shape[0], lm[i].shape[1], IL_PLAIN, -1);
    }
    free(lm);
}

static int il_starts(const char* s, const char* p) { return !strncmp(s, p, strlen(p)); }

/* A Hugging Face name under any of the namings (import_llava.h) -> the canonical name, or "" for a
 * tensor that is skipped (buffers, CLIPModel's text side). Returns 0, or -1 when it fits no naming. */
static int il_canon(const char* name, int llava, char* out, size_t n) {
    const char* s = name;
    out[0] = 0;
    if (!llava) {
        if (il_starts(s, "text_model.") || il_starts(s, "text_projection.") || il_starts(s, "visual_projection.") ||
            !strcmp(s, "logit_scale"))
            return 0;
        if (!il_starts(s, "vision_model.")) return -1;
        s += strlen("vision_model.");
        if (!strcmp(s, "embeddings.position_ids")) return 0;
        snprintf(out, n, "V:%s", s);
        return 0;
    }
    if (!strcmp(s, "lm_head.weight") || !strcmp(s, "language_model.lm_head.weight")) {
        snprintf(out, n, "L:lm_head.weight");
        return 0;
    }
    if (!strcmp(s, "image_newline") || !strcmp(s, "model.image_newline")) { /* LLaVA-NeXT's */
        snprintf(out, n, "N:image_newline");
        return 0;
    }
    if (il_starts(s, "model.") && (il_starts(s + 6, "vision_tower.") || il_starts(s + 6, "multi_modal_projector.") ||
                                   il_starts(s + 6, "language_model.")))
        s += 6;
    if (il_starts(s, "vision_tower.")) {
        s += strlen("vision_tower.");
        if (il_starts(s, "vision_model.")) s += strlen("vision_model.");
        if (!strcmp(s, "embeddings.position_ids")) return 0;
        snprintf(out, n, "V:%s", s);
        return 0;
    }
    if (il_starts(s, "multi_modal_projector.")) {
        snprintf(out, n, "P:%s", s + strlen("multi_modal_projector."));
        return 0;
    }
    if (il_starts(s, "language_model.")) {
        s += strlen("language_model.");
        if (il_starts(s, "model.")) s += strlen("model.");
        snprintf(out, n, "L:model.%s", s);
        return 0;
    }
    return -1;
}

/* ------------------------------------------------------------------------------------------------
 * Files */

/* A tensor read from a Hugging Face file holds finite values only (a checkpoint never holds a NaN or an
 * infinity): refused naming the file and the Hugging Face tensor. */
static int il_finite(const float* v, size_t n, const char* path, const char* name, char* err, size_t err_len) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return rr_fail(err, err_len, "%s: tensor '%s' holds %s value at element %zu: a checkpoint holds finite "
                           "values only", path, name, isnan(v[i]) ? "a NaN" : "an infinite", i);
    return 0;
}

/* The name table sorted by canonical name, for a lookup per tensor in log n (a scan was n x m). */
static int il_ptr_cmp(const void* a, const void* b) {
    return strcmp((*(IlName* const*)a)->n.hf, (*(IlName* const*)b)->n.hf);
}
static int il_key_cmp(const void* key, const void* b) { return strcmp((const char*)key, (*(IlName* const*)b)->n.hf); }

/* Add an F32 tensor as a checkpoint holds it (checkpoint_add_tensor: a value that is not finite is refused,
 * naming the tensor; else added with its XXH64 checksum). Returns 0, or -1 with the message in err. */
static int il_put(StWriter* w, const char* name, int ndim, const int64_t* shape, const float* data, const char* path,
                  char* err, size_t err_len) {
    char e2[512];
    if (checkpoint_add_tensor(w, name, ndim, shape, data, e2, sizeof e2) == 0) return 0;
    snprintf(err, err_len, "%s: %s", path, e2);
    return -1;
}

/* A CLIP layer's q / k / v until all three parts of a tensor (weight or bias) have been read. */
typedef struct {
    float* buf;
    int parts;
    int file[3];          /* the index of the file each part came from */
    char name[3][128];    /* its Hugging Face name */
} IlPending;

/* The recipe keys the import decided (what cmd_import_llava prints), as text values into `keys`. */
static void il_keys(const LlavaImport* c, cJSON* keys) {
    char v[64];
    int G = c->image_size / c->patch;
#define IL_KEY(name, fmt, val) (snprintf(v, sizeof v, fmt, val), cJSON_AddStringToObject(keys, name, v))
    IL_KEY("model.vision_arch", "%s", "clip");
    IL_KEY("model.vision_width", "%d", c->D);
    IL_KEY("model.vision_layers", "%d", c->L);
    IL_KEY("model.vision_heads", "%d", c->H);
    IL_KEY("model.patch", "%d", c->patch);
    IL_KEY("model.vision_image_size", "%d", c->image_size);
    IL_KEY("model.vision_feature_layer", "%d", c->feature_layer);
    if (c->llava) {
        IL_KEY("model.projector_act", "%s", act_name((Act)c->proj_act));
        import_llama_keys(&c->text, keys);
    }
    if (c->llava == 2) IL_KEY("model.anyres", "%d", c->anyres_tiles);
    IL_KEY("data.min_patches", "%d", G * G);
    IL_KEY("data.max_patches", "%d", G * G);
#undef IL_KEY
}

int import_llava(const char* hf_dir, const char* out, int llava, LlavaImport* info, FILE* log, char* err,
                 size_t err_len) {
    memset(info, 0, sizeof *info);
    if (il_config(hf_dir, llava, info, err, err_len) != 0) return -1;
    IlTable tab = {0};
    il_table(&tab, info);
    IlName** sorted = mallocCheck((size_t)tab.n * sizeof(IlName*));
    for (int i = 0; i < tab.n; i++) sorted[i] = &tab.v[i];
    qsort(sorted, (size_t)tab.n, sizeof *sorted, il_ptr_cmp);
    IlPending* pend = callocCheck((size_t)info->L * 2, sizeof(IlPending)); /* [layer][0 weight, 1 bias] */
    int64_t D = info->D;

    char canon[160];
    /* --out as import llama takes it (import.h): lstat, no trailing '/', not inside --hf; the index may list the
     * tensors this import skips too (CLIPModel's text side, buffers): twice the table */
    ImportRun run;
    int rc = import_run_begin(&run, out, hf_dir, 2 * tab.n + 64, err, err_len);
    for (int k = 0; k < run.nf && rc == 0; k++) {
        ImportFile fi;
        if ((rc = import_file_open(&fi, hf_dir, run.files[k], err, err_len)) != 0) break;
        const StFile* f = &fi.f;
        StWriter* w = fi.w;
        const char* path = fi.path;
        int added = 0;
        for (int t = 0; t < f->n && rc == 0; t++) {
            const StTensor* x = &f->tensors[t];
            size_t ln = strlen(x->name);
            if (ln >= 19 && !strcmp(x->name + ln - 19, "rotary_emb.inv_freq")) { /* recomputed from theta */
                info->skipped++;
                continue;
            }
            if (il_canon(x->name, llava, canon, sizeof canon) != 0) {
                rc = rr_fail(err, err_len, "%s: tensor '%s' is under no naming of a %s checkpoint (%s)", path, x->name,
                             llava ? "LLaVA" : "CLIP vision",
                             llava ? "vision_tower., multi_modal_projector., language_model., model.*, lm_head.weight"
                                   : "vision_model.*");
                break;
            }
            if (!canon[0]) {
                info->skipped++;
                continue;
            }
            if (llava && info->text.tie && !strcmp(canon, "L:lm_head.weight")) { /* tied: the head is the embedding */
                info->skipped++;
                continue;
            }
            IlName** found = bsearch(canon, sorted, (size_t)tab.n, sizeof *sorted, il_key_cmp);
            IlName* m = found ? *found : NULL;
            if (!m) {
                rc = rr_fail(err, err_len, "%s: tensor '%s' has no place in this model (another architecture's tensor, "
                             "or a layer / bias the config does not declare)", path, x->name);
                break;
            }
            if (m->n.seen) {
                rc = rr_fail(err, err_len, "%s: tensor '%s' appears twice (two namings, or two files)", path, x->name);
                break;
            }
            m->n.seen = 1;
            /* the file's shape against config.json's before anything is allocated for it (the file's own
             * size, checked by st_load, then bounds the allocation) */
            int64_t want[4] = {m->n.shape[0], m->n.shape[1], 0, 0};
            int wnd = m->n.ndim;
            if (m->kind == IL_CONV) want[1] = 3, want[2] = want[3] = info->patch, wnd = 4;
            int same = x->ndim == wnd;
            for (int d = 0; d < wnd && same; d++) same = x->shape[d] == want[d];
            if (!same) {
                char got[128] = "", exp[128] = "";
                for (int d = 0; d < x->ndim && d < ST_MAX_DIMS; d++)
                    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)x->shape[d]);
                for (int d = 0; d < wnd; d++)
                    snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%lld", d ? ", " : "", (long long)want[d]);
                rc = rr_fail(err, err_len, "%s: tensor '%s' has shape (%s), config.json implies (%s)", path, x->name, got,
                             exp);
                break;
            }
            if (m->kind == IL_CONV) {
                /* CLIP's Conv2d weight (D, 3, p, p) is the (D, 3p^2) linear over channel-major patch pixels */
                int64_t cs[4] = {D, 3, info->patch, info->patch};
                size_t numel = (size_t)D * 3 * info->patch * info->patch;
                float* v = mallocCheck(numel * sizeof(float));
                rc = st_read_f32(f, x->name, v, 4, cs, err, err_len);
                if (rc == 0) rc = il_finite(v, numel, path, x->name, err, err_len);
                if (rc == 0) rc = il_put(w, m->n.ours, m->n.ndim, m->n.shape, v, path, err, err_len);
                if (rc != 0) {
                    free(v);
                    continue;
                }
                ImportPart part = {x->name, 4, {cs[0], cs[1], cs[2], cs[3]}};
                import_file_defer(&fi, m->n.ours, v, numel, &part, 1); /* read again as the shard is written */
                added++, info->tensors++;
                continue;
            }
            size_t numel = (size_t)m->n.shape[0] * (size_t)(m->n.ndim == 2 ? m->n.shape[1] : 1);
            if (m->kind == IL_Q || m->kind == IL_K || m->kind == IL_V) {
                int isb = m->n.ndim == 1;
                IlPending* pd = &pend[m->layer * 2 + isb];
                if (!pd->buf) pd->buf = mallocCheck(3 * numel * sizeof(float));
                int part = m->kind - IL_Q;
                pd->file[part] = k;
                snprintf(pd->name[part], sizeof pd->name[part], "%s", x->name);
                if (st_read_f32(f, x->name, pd->buf + (size_t)part * numel, m->n.ndim, m->n.shape, err, err_len) != 0 ||
                    il_finite(pd->buf + (size_t)part * numel, numel, path, x->name, err, err_len) != 0) {
                    rc = -1;
                    break;
                }
                if (++pd->parts == 3) { /* all of q, k, v: the fused tensor goes into this file */
                    int64_t sh[2] = {3 * m->n.shape[0], m->n.shape[1]};
                    float* qkv = pd->buf;
                    pd->buf = NULL;
                    rc = il_put(w, m->n.ours, m->n.ndim, sh, qkv, path, err, err_len);
                    if (rc == 0 && pd->file[0] == k && pd->file[1] == k && pd->file[2] == k) {
                        /* the three parts in this file: read again as the shard is written */
                        ImportPart parts[3];
                        for (int q = 0; q < 3; q++)
                            parts[q] = (ImportPart){pd->name[q], m->n.ndim, {m->n.shape[0], m->n.shape[1], 0, 0}};
                        import_file_defer(&fi, m->n.ours, qkv, 3 * numel, parts, 3);
                    } else
                        import_file_keep(&fi, qkv); /* parts from an earlier file: held until this shard is written */
                    added++;
                    info->tensors++;
                }
                continue;
            }
            float* v = mallocCheck((numel ? numel : 1) * sizeof(float));
            if (st_read_f32(f, x->name, v, m->n.ndim, m->n.shape, err, err_len) != 0 ||
                il_finite(v, numel, path, x->name, err, err_len) != 0) {
                free(v);
                rc = -1; /* names the file, the tensor and the shape config.json implies, or the value */
                break;
            }
            if (il_put(w, m->n.ours, m->n.ndim, m->n.shape, v, path, err, err_len) != 0) {
                free(v);
                rc = -1;
                break;
            }
            ImportPart part = {x->name, m->n.ndim, {m->n.shape[0], m->n.shape[1], 0, 0}};
            import_file_defer(&fi, m->n.ours, v, numel, &part, 1); /* read again as the shard is written */
            added++;
            info->tensors++;
        }
        rc = import_file_close(&fi, rc, added > 0, &run, k,
                               llava == 2 ? "huggingface llava_next" : llava ? "huggingface llava" : "huggingface clip", log,
                               err, err_len);
    }
    cJSON* absent = cJSON_CreateArray(); /* our names, each once (q, k and v make one qkv tensor) */
    for (int i = 0; i < tab.n && rc == 0; i++) {
        IlName* m = &tab.v[i];
        if (m->n.seen) continue;
        if (m->optional) {
            info->absent++;
            int listed = 0;
            for (const cJSON* x = absent->child; x && !listed; x = x->next) listed = !strcmp(x->valuestring, m->n.ours);
            if (!listed) cJSON_AddItemToArray(absent, cJSON_CreateString(m->n.ours));
            continue;
        }
        rc = rr_fail(err, err_len, "%s: tensor %s (for %s) is in none of the model's files", hf_dir, m->n.hf + 2, m->n.ours);
    }
    for (int l = 0; l < info->L && rc == 0; l++)
        for (int b = 0; b < 2; b++)
            if (pend[l * 2 + b].buf)
                rc = rr_fail(err, err_len, "%s: layer %d's q / k / v %s are not all in the files", hf_dir, l,
                             b ? "biases" : "weights");
    /* the folder's config, tokenizer and processor files, as they were, beside the weights (hf_files.h) */
    if (rc == 0 && llava) rc = hf_keep_files(hf_dir, run.o.tmp, info->kept, sizeof info->kept, err, err_len);
    cJSON* learned = NULL;
    if (rc == 0) {
        /* what the import learned (runtime/train/trained.h): the recipe keys it prints and decided, the <image>
         * id, the tensors the source lacked */
        learned = cJSON_CreateObject();
        il_keys(info, cJSON_AddObjectToObject(learned, "recipe"));
        if (llava && info->image_token_index >= 0) cJSON_AddNumberToObject(learned, "image_token_id", info->image_token_index);
        if (llava == 2) { /* for pack --grid-pinpoints and export hf's image_grid_pinpoints */
            char pins[ANYRES_MAX_PINPOINTS * 24];
            anyres_pinpoints_format(&info->pins, pins, sizeof pins);
            cJSON_AddStringToObject(learned, "grid_pinpoints", pins);
        }
        cJSON_AddItemToObject(learned, "absent", absent);
        absent = NULL;
    }
    cJSON_Delete(absent);
    rc = import_run_end(&run, out, hf_dir, rc, learned, err, err_len);
    for (int l = 0; l < info->L * 2; l++) free(pend[l].buf);
    free(pend);
    free(sorted);
    free(tab.v);
    return rc;
}
