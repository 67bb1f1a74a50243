/* import_lora.c — `rrfp-mm import lora`: a PEFT LoRA adapter folder onto a base checkpoint (lora_hf.h). The
 * adapter folder is hostile input: adapter_config.json's fields are checked by name and range before anything is
 * sized from them, every tensor of adapter_model.safetensors must be a LoRA factor of an LM linear of the model
 * with the shape the base and the rank imply, and every factor the config implies must be there. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
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

static const char* const PEFT_TARGET[LM_LORA_N] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

/* An adapter's or a base's JSON file, as an object. */
static cJSON* li_read_json(const char* path, char* err, size_t err_len) {
    return rr_read_json_object(path, RR_MAX_JSON, "a JSON file", "%s: cannot read: %s", err, err_len);
}

/* adapter_config.json's LoraConfig fields this engine represents; anything else that changes the math refused */
static int li_config(const cJSON* j, const char* path, LoraImport* c, unsigned* bits, unsigned* tower_only, char* err,
                     size_t err_len) {
    const cJSON* x = cJSON_GetObjectItemCaseSensitive(j, "peft_type");
    if (!cJSON_IsString(x) || strcmp(x->valuestring, "LORA") != 0)
        return rr_fail(err, err_len, "%s: peft_type must be \"LORA\" (a LoRA adapter)", path);
    x = cJSON_GetObjectItemCaseSensitive(j, "r");
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 1 || x->valuedouble > 65536)
        return rr_fail(err, err_len, "%s: r must be an integer in 1 .. 65536", path);
    c->r = (int)x->valuedouble;
    x = cJSON_GetObjectItemCaseSensitive(j, "lora_alpha");
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 1e-6 && x->valuedouble <= 1e6))
        return rr_fail(err, err_len, "%s: lora_alpha must be a number in 1e-6 .. 1e6", path);
    c->alpha = x->valuedouble;
    x = cJSON_GetObjectItemCaseSensitive(j, "lora_dropout");
    c->dropout = 0;
    if (x && !cJSON_IsNull(x)) {
        if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble <= 0.95))
            return rr_fail(err, err_len, "%s: lora_dropout must be a number in 0 .. 0.95", path);
        c->dropout = x->valuedouble;
    }
    x = cJSON_GetObjectItemCaseSensitive(j, "target_modules");
    if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) < 1 || cJSON_GetArraySize(x) > 64)
        return rr_fail(err, err_len, "%s: target_modules must be a list of the LM's linears (q_proj, k_proj, v_proj, "
                       "o_proj, gate_proj, up_proj, down_proj); a regular expression or \"all-linear\" is not read", path);
    *bits = *tower_only = 0;
    c->targets[0] = 0;
    for (const cJSON* e = x->child; e; e = e->next) {
        int t = -1, v = -1;
        for (int k = 0; k < LM_LORA_N && cJSON_IsString(e); k++)
            if (!strcmp(e->valuestring, PEFT_TARGET[k])) t = k;
        for (int k = VIT_LORA_OUT; k < VIT_LORA_N && cJSON_IsString(e); k++) /* the tower's own names */
            if (!strcmp(e->valuestring, vit_lora_target_peft((VitLoraTarget)k))) v = k;
        if (t < 0 && v < 0)
            return rr_fail(err, err_len, "%s: target_modules entry %.80s%s%s is not one of q_proj, k_proj, v_proj, o_proj, "
                           "gate_proj, up_proj, down_proj (the LM's; q_proj .. v_proj the CLIP tower's too), out_proj, "
                           "fc1, fc2 (the tower's)", path, cJSON_IsString(e) ? "\"" : "",
                           cJSON_IsString(e) ? e->valuestring : "(not a string)", cJSON_IsString(e) ? "\"" : "");
        if (t >= 0) *bits |= 1u << t;
        else *tower_only |= 1u << v;
    }
    x = cJSON_GetObjectItemCaseSensitive(j, "bias");
    if (x && !cJSON_IsNull(x) && (!cJSON_IsString(x) || strcmp(x->valuestring, "none") != 0))
        return rr_fail(err, err_len, "%s: bias must be \"none\" (the adapters train no bias)", path);
    static const char* const must_be_false[] = {"fan_in_fan_out", "use_dora", "use_rslora"};
    for (size_t k = 0; k < sizeof must_be_false / sizeof must_be_false[0]; k++) {
        x = cJSON_GetObjectItemCaseSensitive(j, must_be_false[k]);
        if (x && !cJSON_IsNull(x) && !cJSON_IsFalse(x))
            return rr_fail(err, err_len, "%s: %s must be false (this engine's LoRA is y += (alpha / r) B A x with "
                           "A (r, in), B (out, r))", path, must_be_false[k]);
    }
    static const char* const must_be_empty[] = {"rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform",
                                                "layer_replication"};
    for (size_t k = 0; k < sizeof must_be_empty / sizeof must_be_empty[0]; k++) {
        x = cJSON_GetObjectItemCaseSensitive(j, must_be_empty[k]);
        if (x && !cJSON_IsNull(x) && !((cJSON_IsObject(x) || cJSON_IsArray(x)) && !x->child))
            return rr_fail(err, err_len, "%s: %s must be empty or null (one rank and alpha for every adapted linear of "
                           "every layer, no other trained module)", path, must_be_empty[k]);
    }
    return 0;
}

/* [lora] key `key` = value from the adapter (its origin `origin`), unless the recipe set it: then it must agree */
static int li_key(Recipe* r, const char* key, const char* value, const char* origin, const char* path, char* err,
                  size_t err_len) {
    const RecipeKey* k = NULL;
    for (int i = 0; i < recipe_key_count() && !k; i++)
        if (!strcmp(recipe_key_get(i)->section, "lora") && !strcmp(recipe_key_get(i)->key, key)) k = recipe_key_get(i);
    RR_ASSERT(k);
    char set[256], e[1024], mine[RECIPE_STR + 16], theirs[RECIPE_STR + 16];
    snprintf(set, sizeof set, "lora.%s=%s", key, value);
    const char* o = recipe_origin(r, "lora", key);
    if (!strcmp(o, "default")) return recipe_set_derived(r, set, origin, err, err_len);
    Recipe* ck = mallocCheck(sizeof *ck);
    *ck = *r;
    int rc = recipe_set(ck, set, e, sizeof e);
    if (rc == 0) {
        recipe_key_format(r, k, mine, sizeof mine);
        recipe_key_format(ck, k, theirs, sizeof theirs);
        if (!strcmp(key, "targets")) { /* the same linears in any order */
            unsigned a = 0, b = 0, va = 0, vb = 0;
            lm_lora_targets_parse(r->lora_targets, &a, e, sizeof e);
            lm_lora_targets_parse(ck->lora_targets, &b, e, sizeof e);
            vit_lora_targets_parse(r->lora_targets, &va, e, sizeof e);
            vit_lora_targets_parse(ck->lora_targets, &vb, e, sizeof e);
            if (a == b && va == vb) snprintf(mine, sizeof mine, "%s", theirs);
        }
        if (strcmp(mine, theirs) != 0)
            rc = rr_fail(err, err_len, "%s: lora.%s = %s, but the adapter's %s has %s = %s\n---> HINT: remove "
                         "lora.%s from the recipe (the adapter's value is then taken)", o, key, mine, path,
                         !strcmp(key, "r") ? "r" : !strcmp(key, "alpha") ? "lora_alpha" : !strcmp(key, "dropout") ? "lora_dropout" : "target_modules",
                         theirs, key);
    } else {
        rc = rr_fail(err, err_len, "%s: %s", path, e);
    }
    free(ck);
    return rc;
}

/* The adapted linears from the file's tensors: a tower factor must be of a listed name (q_proj .. v_proj, or the
 * tower's own out_proj, fc1, fc2), and makes its linear a tower target; q_proj .. v_proj adapt the LM unless the file
 * holds the tower's factors of it and no LM one (PEFT wraps both; the other keeps B = 0: no adapter); out_proj, fc1,
 * fc2 listed are tower targets (their factors must then be there: checked with the others). info->targets gets the
 * [lora] targets, ours. */
static int li_targets(const StFile* f, const char* apath, const char* cpath, unsigned* bits, unsigned tower_only,
                      unsigned* tower, LoraImport* info, char* err, size_t err_len) {
    unsigned lm_seen = 0;
    *tower = tower_only;
    for (int i = 0; i < f->n; i++) {
        char ours[160];
        PeftBase b;
        if (lora_peft_ours(f->tensors[i].name, ours, sizeof ours, &b) != 0) continue; /* refused, named, below */
        int vision = !strncmp(ours, "vision.", 7);
        for (int t = 0; t < (vision ? VIT_LORA_N : LM_LORA_N); t++) {
            char m[64];
            snprintf(m, sizeof m, ".%s.lora_", vision ? vit_lora_target_module((VitLoraTarget)t) : lm_lora_target_module((LmLoraTarget)t));
            if (!strstr(ours, m)) continue;
            if (!vision) {
                lm_seen |= 1u << t;
            } else if (!((tower_only | (*bits & 7u)) >> t & 1)) {
                return rr_fail(err, err_len, "%s: tensor '%s' adapts the tower's %s, which target_modules of %s does not "
                               "list", apath, f->tensors[i].name, vit_lora_target_peft((VitLoraTarget)t), cpath);
            } else {
                *tower |= 1u << t;
            }
        }
    }
    for (int t = VIT_LORA_Q; t <= VIT_LORA_V; t++) /* the tower's alone */
        if ((*tower >> t & 1) && !(lm_seen >> t & 1)) *bits &= ~(1u << t);
    info->targets[0] = 0;
    for (int t = 0; t < LM_LORA_N; t++)
        if (*bits >> t & 1) {
            size_t l = strlen(info->targets);
            snprintf(info->targets + l, sizeof info->targets - l, "%s%s", l ? "," : "", lm_lora_target_name((LmLoraTarget)t));
        }
    for (int t = 0; t < VIT_LORA_N; t++)
        if (*tower >> t & 1) {
            size_t l = strlen(info->targets);
            snprintf(info->targets + l, sizeof info->targets - l, "%svision.%s", l ? "," : "", vit_lora_target_name((VitLoraTarget)t));
        }
    return 0;
}

int import_lora(const char* adapter_dir, const char* base, const char* recipe_path, const char* out, LoraImport* info,
                FILE* log, char* err, size_t err_len) {
    memset(info, 0, sizeof *info);
    Recipe r;
    recipe_defaults(&r);
    if (recipe_path && (recipe_load(&r, recipe_path, err, err_len) != 0 || recipe_validate(&r, err, err_len) != 0))
        return -1;
    char cpath[4400], apath[4400], bstate[4400];
    snprintf(cpath, sizeof cpath, "%s/adapter_config.json", adapter_dir);
    snprintf(apath, sizeof apath, "%s/adapter_model.safetensors", adapter_dir);
    snprintf(bstate, sizeof bstate, "%s/state.json", base);
    if (trained_apply_keys(&r, base, "rrfp-mm import lora --base", err, err_len) < 0) return -1;
    int base_keys = trained_has_keys(base);
    if (!recipe_path && !base_keys)
        return rr_fail(err, err_len, "%s holds no model keys (not an import): give --recipe R.ini, the recipe of the run "
                       "that wrote it", bstate);
    cJSON* cfg = li_read_json(cpath, err, err_len);
    if (!cfg) return -1;
    unsigned bits = 0, tower_only = 0, tower = 0;
    int rc = li_config(cfg, cpath, info, &bits, &tower_only, err, err_len);
    /* the adapters' file, read whole once (capped): which of q_proj .. v_proj adapt the LM, the tower or both is
     * what its tensors say (PEFT matches a name's last part) */
    StFile f;
    int loaded = 0;
    if (rc == 0 && st_load(&f, apath, err, err_len) != 0) rc = -1;
    else if (rc == 0) loaded = 1;
    if (rc == 0) rc = li_targets(&f, apath, cpath, &bits, tower_only, &tower, info, err, err_len);
    char v[64];
    if (rc == 0) snprintf(v, sizeof v, "%d", info->r), rc = li_key(&r, "r", v, cpath, cpath, err, err_len);
    if (rc == 0) snprintf(v, sizeof v, "%.17g", info->alpha), rc = li_key(&r, "alpha", v, cpath, cpath, err, err_len);
    if (rc == 0) snprintf(v, sizeof v, "%.17g", info->dropout), rc = li_key(&r, "dropout", v, cpath, cpath, err, err_len);
    if (rc == 0) rc = li_key(&r, "targets", info->targets, cpath, cpath, err, err_len);
    if (rc == 0) rc = recipe_validate(&r, err, err_len);
    int V = rc == 0 ? r.vocab : -1;
    if (rc == 0 && V == 0 && (V = train_tokenizer_vocab(&r, err, err_len)) < 0) rc = -1;
    ModelConfig mc = {0};
    if (rc == 0) mc = train_model_config(&r, V);
    if (rc == 0 && model_config_check(&mc, err, err_len) != 0) rc = -1;
    if (rc != 0) {
        if (loaded) st_free(&f);
        cJSON_Delete(cfg);
        return -1;
    }
    ParamTable pt;
    model_params_register(&mc, 0, mc.Lt, &pt);
    uint64_t held = hf_safetensors_bytes(base, 0), nbase = 0, nad = 0;
    for (int i = 0; i < pt.n; i++) {
        if (!lm_lora_is_adapter(pt.specs[i].name)) nbase += pt.specs[i].numel;
        else nad += pt.specs[i].numel;
    }
    struct stat asb;
    /* r from the config sizes the adapters: nothing is allocated before the file is known to hold them (2 bytes
     * each at the least) */
    if (stat(apath, &asb) != 0 || !S_ISREG(asb.st_mode) || nad > (uint64_t)asb.st_size / 2) {
        params_free(&pt);
        st_free(&f);
        cJSON_Delete(cfg);
        return rr_fail(err, err_len, "%s: %s: r = %d (%s) implies %llu adapter values for this model", apath,
                       stat(apath, &asb) != 0 ? strerror(errno) : !S_ISREG(asb.st_mode) ? "not a regular file"
                                                                                      : "the file is too small for them",
                       info->r, cpath, (unsigned long long)nad);
    }
    if (nbase > held / 2) { /* the base's files hold its values, 2 bytes each at the least */
        params_free(&pt); /* (it clears the table: the message takes nbase, counted above) */
        st_free(&f);
        cJSON_Delete(cfg);
        return rr_fail(err, err_len, "%s: the model has %llu base parameters (2 bytes each at the least), but the base's "
                       "model files hold %llu bytes: not a checkpoint of this model (--recipe)", base,
                       (unsigned long long)nbase, (unsigned long long)held);
    }
    ImportOut o;
    if (import_out_begin(&o, out, adapter_dir, err, err_len) != 0) {
        params_free(&pt);
        st_free(&f);
        cJSON_Delete(cfg);
        return -1;
    }
    /* read and written, never trained: a forward-only table (every tensor frozen), so params_alloc makes no gradient (a copy of
     * the model's size; docs/engine.md "Peak memory of the whole-model commands") */
    params_forward_only(&pt);
    params_alloc(&pt, &backend_cpu, mc.seed);
    /* the base: every tensor but the adapters (and the import's never-used ones) must be in it */
    char** absent = NULL;
    int n_absent = 0;
    rc = trained_absent_tensors(base, &absent, &n_absent, err, err_len);
    const char** optional = callocCheck((size_t)(pt.n + n_absent + 1), sizeof(char*));
    int n_opt = 0;
    for (int i = 0; i < pt.n; i++)
        if (lm_lora_is_adapter(pt.specs[i].name)) optional[n_opt++] = pt.specs[i].name;
    for (int i = 0; i < n_absent; i++) optional[n_opt++] = absent[i];
    CheckpointState bst = {0};
    if (rc == 0) rc = checkpoint_load_model(base, &pt, optional, n_opt, &bst, err, err_len);
    checkpoint_state_free(&bst);
    free(optional);
    /* the adapters, each by name and shape */
    int* seen = callocCheck((size_t)pt.n + 1, sizeof(int));
    int peft_base = -1;
    for (int t = 0; loaded && rc == 0 && t < f.n; t++) {
        const StTensor* x = &f.tensors[t];
        char ours[160];
        PeftBase b;
        if (lora_peft_ours(x->name, ours, sizeof ours, &b) != 0) {
            rc = rr_fail(err, err_len, "%s: tensor '%s' is not a LoRA factor of an LM or tower linear (expected "
                         "base_model.model.model.language_model.layers.N.self_attn.q_proj.lora_A.weight and the like: "
                         "LlavaForConditionalGeneration's, its model.vision_tower.vision_model.encoder.layers.N..., or "
                         "model.layers.N... of LlamaForCausalLM)", apath, x->name);
            break;
        }
        if (peft_base >= 0 && (int)b != peft_base) {
            rc = rr_fail(err, err_len, "%s: tensor '%s' names another base model than the file's other tensors", apath,
                         x->name);
            break;
        }
        peft_base = (int)b;
        int i = params_find(&pt, ours);
        if (i < 0) {
            rc = rr_fail(err, err_len, "%s: tensor '%s' (%s) has no place in this model: its layer is past model.text_layers "
                         "= %d or its linear is not in target_modules (%s)", apath, x->name, ours, mc.Lt, cpath);
            break;
        }
        if (seen[i]++) {
            rc = rr_fail(err, err_len, "%s: tensor '%s' is %s a second time (two namings of one factor)", apath, x->name, ours);
            break;
        }
        const ParamSpec* s = &pt.specs[i];
        if (st_expect_shape(&f, x->name, s->ndim, s->shape, err, err_len) != 0 ||
            st_read_f32(&f, x->name, params_data(&pt, i), s->ndim, s->shape, err, err_len) != 0) {
            size_t l = strlen(err);
            snprintf(err + l, err_len - l, " (for %s: r = %d from %s and the base's widths)", ours, info->r, cpath);
            rc = -1;
            break;
        }
        info->adapters++;
    }
    for (int i = 0; rc == 0 && i < pt.n; i++) {
        const ParamSpec* s = &pt.specs[i];
        if (lm_lora_is_adapter(s->name)) {
            if (!seen[i]) {
                char key[256];
                lora_peft_key(s->name, peft_base == PEFT_BASE_LLAMA ? PEFT_BASE_LLAMA : PEFT_BASE_LLAVA, key, sizeof key);
                rc = rr_fail(err, err_len, "%s: tensor '%s' (for %s) is missing: target_modules of %s and the model's %d "
                             "layers imply it", apath, key, s->name, cpath, mc.Lt);
            }
        } else {
            info->base++;
        }
    }
    free(seen);
    if (loaded) st_free(&f);
    /* the base model's class: an adapter for LlamaForCausalLM onto a LLaVA import (or the reverse) is refused */
    cJSON* bj = rc == 0 ? li_read_json(bstate, err, err_len) : NULL;
    if (rc == 0 && !bj) rc = -1;
    const cJSON* hc = bj ? cJSON_GetObjectItemCaseSensitive(bj, "hf_config") : NULL;
    const cJSON* mt = hc ? cJSON_GetObjectItemCaseSensitive(hc, "model_type") : NULL;
    if (rc == 0 && cJSON_IsString(mt) && peft_base >= 0 &&
        (peft_base == PEFT_BASE_LLAVA) != (strcmp(mt->valuestring, "llava") == 0))
        rc = rr_fail(err, err_len, "%s: its tensors are keyed for %s, but the base %s is a %s import (%s \"hf_config\" "
                     "model_type \"%s\"): the adapter was trained on another model", apath,
                     peft_base == PEFT_BASE_LLAVA ? "LlavaForConditionalGeneration" : "LlamaForCausalLM", base,
                     mt->valuestring, bstate, mt->valuestring);
    /* the checkpoint: one model file of every tensor, state.json as an import's with the [lora] keys */
    CheckpointState id = import_identity();
    if (rc == 0) {
        StWriter* w = st_writer_new();
        for (int i = 0; i < pt.n && rc == 0; i++) {
            const ParamSpec* s = &pt.specs[i];
            char e2[512];
            if (checkpoint_add_tensor(w, s->name, s->ndim, s->shape, params_data(&pt, i), e2, sizeof e2) != 0)
                rc = rr_fail(err, err_len, "%s: %s", lm_lora_is_adapter(s->name) ? apath : base, e2);
        }
        st_writer_meta(w, "format", "rrfp-mm");
        checkpoint_identity_meta(w, &id, "");
        st_writer_meta(w, "imported_from", "peft lora");
        char path[4400];
        snprintf(path, sizeof path, "%s/model.safetensors", o.tmp);
        if (rc == 0) rc = st_writer_write(w, path, err, err_len);
        st_writer_free(w);
    }
    if (rc == 0) {
        cJSON* j = import_state_new(&id, adapter_dir);
        cJSON_AddStringToObject(j, "base", base);
        cJSON* files = cJSON_AddArrayToObject(j, "files");
        cJSON_AddItemToArray(files, cJSON_CreateString("model.safetensors"));
        /* what the base's import learned, kept; the model keys the recipe gave where the base has none */
        static const char* const kept[] = {"image_token_id", "absent", "hf_config", "data"};
        for (size_t k = 0; k < sizeof kept / sizeof kept[0]; k++) {
            const cJSON* x = cJSON_GetObjectItemCaseSensitive(bj, kept[k]);
            if (x) cJSON_AddItemToObject(j, kept[k], cJSON_Duplicate(x, 1));
        }
        const cJSON* bk = cJSON_GetObjectItemCaseSensitive(bj, "recipe");
        cJSON* keys = cJSON_IsObject(bk) ? cJSON_Duplicate(bk, 1) : cJSON_CreateObject();
        for (int i = 0; i < recipe_key_count(); i++) {
            const RecipeKey* k = recipe_key_get(i);
            int lora = !strcmp(k->section, "lora");
            if (!lora && (base_keys || strcmp(k->section, "model") != 0)) continue;
            char name[96], val[RECIPE_STR + 16];
            snprintf(name, sizeof name, "%s.%s", k->section, k->key);
            recipe_key_format(&r, k, val, sizeof val);
            cJSON_DeleteItemFromObjectCaseSensitive(keys, name);
            cJSON_AddStringToObject(keys, name, val);
        }
        cJSON_AddItemToObject(j, "recipe", keys);
        cJSON_AddItemToObject(j, "adapter_config", cJSON_Duplicate(cfg, 1));
        rc = import_state_write(o.tmp, j, err, err_len);
    }
    if (rc == 0) { /* the base's kept Hugging Face files, where export hf finds them */
        char kdir[4400], kcfg[4500], kept[1024];
        snprintf(kdir, sizeof kdir, "%s/%s", base, HF_KEPT_DIR);
        snprintf(kcfg, sizeof kcfg, "%s/config.json", kdir);
        struct stat sb;
        if (stat(kcfg, &sb) == 0 && S_ISREG(sb.st_mode)) rc = hf_keep_files(kdir, o.tmp, kept, sizeof kept, err, err_len);
    }
    if (rc == 0 && log)
        fprintf(log, "import: %s: %d adapter tensors (r %d, alpha %g, targets %s) onto %d tensors of %s\n", adapter_dir,
                info->adapters, info->r, info->alpha, info->targets, info->base, base);
    cJSON_Delete(bj);
    cJSON_Delete(cfg);
    trained_free_names(absent, n_absent);
    params_free(&pt);
    return import_out_end(&o, out, rc, err, err_len);
}
