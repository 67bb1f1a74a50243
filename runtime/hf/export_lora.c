/* export_lora.c — a LoRA checkpoint out to Hugging Face (lora_hf.h): the merged weights of `export hf`, and
 * `export hf --adapter`'s PEFT adapter folder. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/checkpoint.h"
#include "engine/safetensors.h"
#include "engine/json.h"
#include "engine/util.h"
#include "runtime/hf/hf_files.h"
#include "runtime/hf/import.h"
#include "runtime/hf/lora_hf.h"
#include "runtime/train/layout.h"
#include "runtime/train/recipe.h"
#include "runtime/train/trained.h"
#include "text/lm.h"
#include "vision/vit_lora.h"

/* Our module of each LmLoraTarget (lm_lora_target_module) and its Hugging Face module below a decoder layer */
static const char* const HF_MODULE[LM_LORA_N] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                 "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                                 "mlp.down_proj"};
static const char* const PEFT_PREFIX[2] = {"base_model.model.model.language_model.layers.", "base_model.model.model.layers."};
/* transformers < 4.52's LlavaForConditionalGeneration: the LM under language_model.model (read, never written) */
static const char* const PEFT_PREFIX_LLAVA_OLD = "base_model.model.language_model.model.layers.";
/* the CLIP tower's encoder layers in LlavaForConditionalGeneration (transformers >= 4.52; < 4.52 read too) */
static const char* const PEFT_TOWER = "base_model.model.model.vision_tower.vision_model.encoder.layers.";
static const char* const PEFT_TOWER_OLD = "base_model.model.vision_tower.vision_model.encoder.layers.";

/* "vision.blocks.N.<module>.lora_X.weight" -> N, target, X; -1 when it is not one */
static int lx_parse_tower(const char* ours, int* layer, int* target, char* ab) {
    if (strncmp(ours, "vision.blocks.", 14) != 0 || !lm_lora_is_adapter(ours)) return -1;
    char* end;
    long l = strtol(ours + 14, &end, 10);
    if (end == ours + 14 || *end != '.' || l < 0 || l > 1 << 20) return -1;
    const char* mod = end + 1;
    size_t ml = strlen(mod) - 14;
    for (int t = 0; t < VIT_LORA_N; t++) {
        const char* m = vit_lora_target_module((VitLoraTarget)t);
        if (strlen(m) == ml && !strncmp(mod, m, ml)) {
            *layer = (int)l, *target = t, *ab = mod[ml + 6];
            return 0;
        }
    }
    return -1;
}

/* "text.blocks.N.<module>.lora_X.weight" -> N, target, X ('A' / 'B'); -1 when it is not one */
static int lx_parse_ours(const char* ours, int* layer, int* target, char* ab) {
    if (strncmp(ours, "text.blocks.", 12) != 0 || !lm_lora_is_adapter(ours)) return -1;
    char* end;
    long l = strtol(ours + 12, &end, 10);
    if (end == ours + 12 || *end != '.' || l < 0 || l > 1 << 20) return -1;
    const char* mod = end + 1;
    size_t ml = strlen(mod) - 14; /* ".lora_X.weight" */
    for (int t = 0; t < LM_LORA_N; t++) {
        const char* m = lm_lora_target_module((LmLoraTarget)t);
        if (strlen(m) == ml && !strncmp(mod, m, ml)) {
            *layer = (int)l, *target = t, *ab = mod[ml + 6];
            return 0;
        }
    }
    return -1;
}

int lora_peft_key(const char* ours, PeftBase b, char* out, size_t out_len) {
    int l, t;
    char ab;
    if (b == PEFT_BASE_LLAVA && lx_parse_tower(ours, &l, &t, &ab) == 0) { /* LlamaForCausalLM has no tower */
        snprintf(out, out_len, "%s%d.%s.lora_%c.weight", PEFT_TOWER, l, vit_lora_target_peft_path((VitLoraTarget)t), ab);
        return 0;
    }
    if (lx_parse_ours(ours, &l, &t, &ab) != 0) return -1;
    snprintf(out, out_len, "%s%d.%s.lora_%c.weight", PEFT_PREFIX[b], l, HF_MODULE[t], ab);
    return 0;
}

/* A tower key (either path) into ours; -1 when it is not one */
static int lx_tower_ours(const char* key, char* out, size_t out_len) {
    const char* rest = NULL;
    if (!strncmp(key, PEFT_TOWER, strlen(PEFT_TOWER))) rest = key + strlen(PEFT_TOWER);
    else if (!strncmp(key, PEFT_TOWER_OLD, strlen(PEFT_TOWER_OLD))) rest = key + strlen(PEFT_TOWER_OLD);
    if (!rest || *rest < '0' || *rest > '9') return -1;
    char* end;
    long l = strtol(rest, &end, 10);
    if (*end != '.' || l > 1 << 20) return -1;
    const char* mod = end + 1;
    for (int t = 0; t < VIT_LORA_N; t++) {
        const char* m = vit_lora_target_peft_path((VitLoraTarget)t);
        size_t ml = strlen(m);
        if (strncmp(mod, m, ml) != 0) continue;
        const char* tail = mod + ml;
        if (strcmp(tail, ".lora_A.weight") != 0 && strcmp(tail, ".lora_B.weight") != 0) continue;
        snprintf(out, out_len, "vision.blocks.%ld.%s.lora_%c.weight", l, vit_lora_target_module((VitLoraTarget)t), tail[6]);
        return 0;
    }
    return -1;
}

int lora_peft_ours(const char* key, char* out, size_t out_len, PeftBase* b) {
    const char* rest = NULL;
    if (lx_tower_ours(key, out, out_len) == 0) {
        *b = PEFT_BASE_LLAVA;
        return 0;
    }
    if (!strncmp(key, PEFT_PREFIX[0], strlen(PEFT_PREFIX[0]))) rest = key + strlen(PEFT_PREFIX[0]), *b = PEFT_BASE_LLAVA;
    else if (!strncmp(key, PEFT_PREFIX_LLAVA_OLD, strlen(PEFT_PREFIX_LLAVA_OLD)))
        rest = key + strlen(PEFT_PREFIX_LLAVA_OLD), *b = PEFT_BASE_LLAVA;
    else if (!strncmp(key, PEFT_PREFIX[1], strlen(PEFT_PREFIX[1]))) rest = key + strlen(PEFT_PREFIX[1]), *b = PEFT_BASE_LLAMA;
    if (!rest || *rest < '0' || *rest > '9') return -1;
    char* end;
    long l = strtol(rest, &end, 10);
    if (*end != '.' || l > 1 << 20) return -1;
    const char* mod = end + 1;
    for (int t = 0; t < LM_LORA_N; t++) {
        size_t ml = strlen(HF_MODULE[t]);
        if (strncmp(mod, HF_MODULE[t], ml) != 0) continue;
        const char* tail = mod + ml;
        if (strcmp(tail, ".lora_A.weight") != 0 && strcmp(tail, ".lora_B.weight") != 0) return -1;
        snprintf(out, out_len, "text.blocks.%ld.%s.lora_%c.weight", l, lm_lora_target_module((LmLoraTarget)t), tail[6]);
        return 0;
    }
    return -1;
}

/* The tensor of `ours` when it is a linear with an adapter (its adapter's prefix into prefix[136]), else -1. */
static int export_lora_weight(const ModelConfig* mc, const ParamTable* pt, const char* ours, char* prefix) {
    if (mc->lora_r <= 0) return -1;
    size_t n = strlen(ours);
    if (n < 8 || n > 100 || (strncmp(ours, "text.blocks.", 12) != 0 && strncmp(ours, "vision.blocks.", 14) != 0) ||
        strcmp(ours + n - 7, ".weight") != 0)
        return -1;
    char a[160];
    snprintf(prefix, 136, "%.*s", (int)(n - 7), ours);
    snprintf(a, sizeof a, "%s.lora_A.weight", prefix);
    int iw = params_find(pt, ours);
    return iw < 0 || params_find(pt, a) < 0 ? -1 : iw; /* -1: no adapter */
}

int export_lora_adapted(const ModelConfig* mc, const ParamTable* pt, const char* name, int part) {
    char prefix[136], a[160], b[160];
    if (!part) {
        if (export_lora_weight(mc, pt, name, prefix) < 0) return 0;
        name = prefix;
    }
    if (mc->lora_r <= 0) return 0;
    snprintf(a, sizeof a, "%s.lora_A.weight", name);
    snprintf(b, sizeof b, "%s.lora_B.weight", name);
    return params_find(pt, a) >= 0 && params_find(pt, b) >= 0;
}

float* export_lora_merged(const ModelConfig* mc, const ParamTable* pt, const char* ours) {
    char prefix[136];
    int iw = export_lora_weight(mc, pt, ours, prefix);
    if (iw < 0) return NULL; /* no adapter */
    const ParamSpec* sw = &pt->specs[iw];
    RR_ASSERT(sw->ndim == 2 && !params_is_slice(sw));
    return export_lora_merged_part(mc, pt, params_data(pt, iw), sw->shape[0], sw->shape[1], prefix);
}

float* export_lora_merged_part(const ModelConfig* mc, const ParamTable* pt, const float* W, int64_t out, int64_t in,
                               const char* prefix) {
    if (mc->lora_r <= 0) return NULL;
    char a[160], b[160];
    snprintf(a, sizeof a, "%s.lora_A.weight", prefix);
    snprintf(b, sizeof b, "%s.lora_B.weight", prefix);
    int ia = params_find(pt, a), ib = params_find(pt, b);
    if (ia < 0 || ib < 0) return NULL;
    const ParamSpec *sa = &pt->specs[ia], *sb = &pt->specs[ib];
    RR_ASSERT(sa->ndim == 2 && sb->ndim == 2);
    int64_t r = sa->shape[0];
    RR_ASSERT(sa->shape[1] == in && sb->shape[0] == out && sb->shape[1] == r);
    const float *A = params_data(pt, ia), *B = params_data(pt, ib);
    double scale = mc->lora_alpha / mc->lora_r;
    float* m = mallocCheck((size_t)(out * in) * sizeof(float));
    double* row = mallocCheck((size_t)in * sizeof(double));
    for (int64_t o = 0; o < out; o++) {
        /* (B A)[o, :] summed in double over the rank, then W + scale * that rounded once */
        for (int64_t i = 0; i < in; i++) row[i] = 0;
        for (int64_t k = 0; k < r; k++) {
            double bk = B[o * r + k];
            const float* ak = A + k * in;
            for (int64_t i = 0; i < in; i++) row[i] += bk * ak[i];
        }
        for (int64_t i = 0; i < in; i++) m[o * in + i] = (float)((double)W[o * in + i] + scale * row[i]);
    }
    free(row);
    return m;
}

/* The import a checkpoint's model came from: ckpt itself when its state.json holds an import's "hf_config", else
 * train.init_from, followed through run folders (RUN_DIR/checkpoints/step-N's RUN_DIR/recipe.ini). Its state.json
 * (parsed) or NULL when there is none. */
static cJSON* lx_import_state(const char* ckpt, const Recipe* r, char* from, size_t from_len) {
    char dir[RECIPE_STR], path[RECIPE_STR + 64];
    snprintf(dir, sizeof dir, "%s", ckpt);
    for (int depth = 0; depth < 16 && dir[0]; depth++) {
        snprintf(path, sizeof path, "%s/state.json", dir);
        cJSON* j = rr_read_json(path, RR_MAX_JSON);
        if (j && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "hf_config"))) {
            snprintf(from, from_len, "%s", dir);
            return j;
        }
        cJSON_Delete(j);
        /* the checkpoint's run recipe is r; further up, each run folder's own */
        const char* next = r->init_from;
        Recipe up;
        char e[512];
        if (depth > 0) {
            snprintf(path, sizeof path, "%s/../../recipe.ini", dir);
            recipe_defaults(&up);
            if (recipe_load(&up, path, e, sizeof e) != 0) return NULL;
            next = up.init_from;
        }
        char tmp[RECIPE_STR];
        snprintf(tmp, sizeof tmp, "%s", next);
        snprintf(dir, sizeof dir, "%s", tmp);
    }
    return NULL;
}

int export_hf_adapter(const char* ckpt, const char* recipe_path, const char* out_dir, HfAdapterExport* info, FILE* log,
                      char* err, size_t err_len) {
    memset(info, 0, sizeof *info);
    Recipe r;
    char state[4200];
    if (hf_export_recipe(ckpt, recipe_path, "rrfp-mm export hf --adapter", &r, state, sizeof state, err, err_len) < 0)
        return -1;
    const char* keys_from = recipe_path ? recipe_path : state;
    if (r.lora_r <= 0)
        return rr_fail(err, err_len, "%s: lora.r = 0: %s is not a LoRA model, so it has no adapters (export hf without "
                       "--adapter writes the whole model)", keys_from, ckpt);
    int V = r.vocab;
    if (V == 0 && (V = train_tokenizer_vocab(&r, err, err_len)) < 0) return -1;
    ModelConfig mc = train_model_config(&r, V);
    mc.lora_quant = 0; /* QLoRA: the adapters alone; the base is read as the checkpoint's dequantised values */
    if (model_config_check(&mc, err, err_len) != 0) return -1;
    /* the adapters alone: the base is not read */
    LmConfig lc = model_config_lm(&mc);
    lc.tp = 1;
    ParamTable pt;
    params_init(&pt);
    for (int l = 0; l < mc.Lt; l++) lm_lora_params_add(&pt, &lc, l);
    VitConfig vc = model_config_vit(&mc); /* the tower's adapters (lora.targets' vision.*) */
    vc.tp = 1;
    vit_lora_params_add(&pt, &vc);
    uint64_t held = hf_safetensors_bytes(ckpt, 0);
    if ((uint64_t)pt.total > held / 2) {
        params_free(&pt);
        return rr_fail(err, err_len, "%s: the adapters of %s (lora.r = %d) have %zu values, but the checkpoint's files "
                       "hold %llu bytes: not a checkpoint of this model", ckpt, keys_from, r.lora_r, pt.total,
                       (unsigned long long)held);
    }
    ImportOut o;
    if (import_out_begin(&o, out_dir, ckpt, err, err_len) != 0) {
        params_free(&pt);
        return -1;
    }
    /* read and written, never trained: a forward-only table (every tensor frozen), so params_alloc makes no gradient (a copy of
     * the model's size; docs/engine.md "Peak memory of the whole-model commands") */
    params_forward_only(&pt);
    params_alloc(&pt, &backend_cpu, mc.seed);
    CheckpointState st = {0};
    int rc = checkpoint_load_model(ckpt, &pt, NULL, 0, &st, err, err_len);
    checkpoint_state_free(&st);
    /* the base model's class and name: the import the run started from */
    char from[RECIPE_STR] = "";
    cJSON* imp = rc == 0 ? lx_import_state(ckpt, &r, from, sizeof from) : NULL;
    const cJSON* hc = imp ? cJSON_GetObjectItemCaseSensitive(imp, "hf_config") : NULL;
    const cJSON* mt = hc ? cJSON_GetObjectItemCaseSensitive(hc, "model_type") : NULL;
    info->base = PEFT_BASE_LLAVA;
    if (cJSON_IsString(mt) && strcmp(mt->valuestring, "llava") != 0) info->base = PEFT_BASE_LLAMA;
    const cJSON* nm = hc ? cJSON_GetObjectItemCaseSensitive(hc, "_name_or_path") : NULL;
    const cJSON* src = imp ? cJSON_GetObjectItemCaseSensitive(imp, "imported_from") : NULL;
    if (cJSON_IsString(nm) && nm->valuestring[0]) snprintf(info->base_name, sizeof info->base_name, "%s", nm->valuestring);
    else if (cJSON_IsString(src) && src->valuestring[0]) snprintf(info->base_name, sizeof info->base_name, "%s", src->valuestring);
    if (rc == 0 && info->base == PEFT_BASE_LLAMA && mc.vision_lora_targets)
        rc = rr_fail(err, err_len, "%s: the run adapted the tower (lora.targets vision.*) but its import %s is a "
                     "LlamaForCausalLM, which has no tower to key them under", ckpt, from);
    if (rc == 0 && log)
        fprintf(log, "export: adapters for %s (%s)%s%s\n",
                info->base == PEFT_BASE_LLAVA ? "LlavaForConditionalGeneration" : "LlamaForCausalLM",
                imp ? "the model_type of the import it started from" : "no import found: this engine's export hf class",
                info->base_name[0] ? ", base_model_name_or_path " : "", info->base_name);
    if (rc == 0) {
        StWriter* w = st_writer_new();
        char key[256];
        for (int i = 0; i < pt.n; i++) {
            const ParamSpec* s = &pt.specs[i];
            RR_ASSERT(lora_peft_key(s->name, info->base, key, sizeof key) == 0);
            st_writer_add(w, key, DTYPE_F32, s->ndim, s->shape, params_data(&pt, i));
            info->tensors++;
        }
        st_writer_meta(w, "format", "pt");
        char path[4400];
        snprintf(path, sizeof path, "%s/adapter_model.safetensors", o.tmp);
        rc = st_writer_write(w, path, err, err_len);
        st_writer_free(w);
    }
    if (rc == 0) {
        /* LoraConfig's fields (PEFT's adapter_config.json) */
        cJSON* j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "peft_type", "LORA");
        cJSON_AddStringToObject(j, "task_type", "CAUSAL_LM");
        if (info->base_name[0]) cJSON_AddStringToObject(j, "base_model_name_or_path", info->base_name);
        else cJSON_AddNullToObject(j, "base_model_name_or_path");
        cJSON_AddNullToObject(j, "revision");
        cJSON_AddNumberToObject(j, "r", r.lora_r);
        cJSON_AddNumberToObject(j, "lora_alpha", r.lora_alpha);
        cJSON_AddNumberToObject(j, "lora_dropout", r.lora_dropout);
        cJSON* tm = cJSON_AddArrayToObject(j, "target_modules");
        for (int t = 0; t < LM_LORA_N; t++)
            if (mc.lora_targets >> t & 1) cJSON_AddItemToArray(tm, cJSON_CreateString(strchr(HF_MODULE[t], '.') + 1));
        /* the tower's (PEFT matches a name's last part: q_proj .. v_proj are both the LM's and the tower's, written
         * once; out_proj, fc1, fc2 are the tower's alone) */
        for (int t = 0; t < VIT_LORA_N; t++) {
            const char* pm = vit_lora_target_peft((VitLoraTarget)t);
            int dup = t <= VIT_LORA_V && (mc.lora_targets >> t & 1); /* LM_LORA_Q .. V have the same bits */
            if (mc.vision_lora_targets >> t & 1 && !dup) cJSON_AddItemToArray(tm, cJSON_CreateString(pm));
        }
        cJSON_AddStringToObject(j, "bias", "none");
        cJSON_AddFalseToObject(j, "fan_in_fan_out");
        cJSON_AddTrueToObject(j, "init_lora_weights");
        cJSON_AddTrueToObject(j, "inference_mode");
        cJSON_AddFalseToObject(j, "use_rslora");
        cJSON_AddFalseToObject(j, "use_dora");
        cJSON_AddNullToObject(j, "modules_to_save");
        cJSON_AddNullToObject(j, "layers_to_transform");
        cJSON_AddNullToObject(j, "layers_pattern");
        cJSON_AddObjectToObject(j, "rank_pattern");
        cJSON_AddObjectToObject(j, "alpha_pattern");
        char* text = cJSON_Print(j);
        cJSON_Delete(j);
        char path[4400];
        snprintf(path, sizeof path, "%s/adapter_config.json", o.tmp);
        if (rr_write_file_atomic(path, text, strlen(text)) != 0)
            rc = rr_fail(err, err_len, "cannot write '%s': %s", path, strerror(errno));
        free(text);
    }
    cJSON_Delete(imp);
    params_free(&pt);
    return import_out_end(&o, out_dir, rc, err, err_len);
}
