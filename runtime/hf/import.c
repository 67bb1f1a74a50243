/* import.c — a Hugging Face Llama LM as a checkpoint of the text tower (see import.h). One input shard
 * at a time is read, converted and written as one output file, so memory holds one shard, not the
 * model. */
#include "runtime/hf/import.h"

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
#include "engine/safetensors.h"
#include "engine/json.h"
#include "engine/util.h"
#include "runtime/train/recipe.h"

typedef ImportName ImName;

static void im_add(ImName* t, int* n, const char* hf, const char* ours, int64_t d0, int64_t d1) {
    ImName* x = &t[(*n)++];
    snprintf(x->hf, sizeof x->hf, "%s", hf);
    snprintf(x->ours, sizeof x->ours, "%s", ours);
    x->ndim = d1 ? 2 : 1;
    x->shape[0] = d0;
    x->shape[1] = d1;
    x->seen = 0;
}

/* The allowed range of recipe key model.<key>: the model's own limits, which an import must respect too. */
void import_key_range(const char* key, double* lo, double* hi) {
    for (int i = 0; i < recipe_key_count(); i++) {
        const RecipeKey* k = recipe_key_get(i);
        if (!strcmp(k->section, "model") && !strcmp(k->key, key)) {
            *lo = k->min;
            *hi = k->max;
            return;
        }
    }
    RR_ASSERT(!"a model key of the import is not a recipe key");
}

/* A JSON number that is an integer (any size), for the messages of the optional keys. */
static int im_json_int(const cJSON* x) { return cJSON_IsNumber(x) && x->valuedouble == floor(x->valuedouble); }

/* rope_scaling (transformers 4) or rope_parameters (transformers 5; also holds rope_theta): none, "default"
 * or "llama3" with its four factors; anything else is refused, naming the key. */
static int im_rope(const cJSON* rs, const char* key, const char* path, LlamaImport* c, char* err, size_t err_len) {
    if (!rs || cJSON_IsNull(rs)) return 0;
    const cJSON* x = cJSON_GetObjectItemCaseSensitive(rs, "rope_theta");
    if (cJSON_IsNumber(x)) c->rope_base = x->valuedouble;
    const cJSON* type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!type) type = cJSON_GetObjectItemCaseSensitive(rs, "type");
    if (!cJSON_IsObject(rs) || (type && !cJSON_IsString(type)) ||
        (cJSON_IsString(type) && strcmp(type->valuestring, "default") && strcmp(type->valuestring, "llama3"))) {
        char* t = cJSON_PrintUnformatted(rs);
        rr_fail(err, err_len, "%s: %s = %.200s: this model's RoPE is the plain rule (theta^(-2i/d) at the position) or "
                "Llama-3's scaling (rope_type llama3), no other", path, key, t ? t : "?");
        free(t);
        return -1;
    }
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "llama3")) return 0;
    const char* names[4] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    double* dst[4] = {&c->rope_factor, &c->rope_low_freq_factor, &c->rope_high_freq_factor, &c->rope_original_max_pos};
    for (int i = 0; i < 4; i++) {
        x = cJSON_GetObjectItemCaseSensitive(rs, names[i]);
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0) || x->valuedouble > 1e9)
            return rr_fail(err, err_len, "%s: %s.%s is missing or not a positive number (rope_type llama3 needs it)", path,
                           key, names[i]);
        *dst[i] = x->valuedouble;
    }
    if (c->rope_factor < 1 || c->rope_high_freq_factor <= c->rope_low_freq_factor ||
        c->rope_original_max_pos != (double)(int)c->rope_original_max_pos)
        return rr_fail(err, err_len, "%s: %s: llama3 needs factor >= 1, high_freq_factor > low_freq_factor and a whole "
                       "original_max_position_embeddings (got %g, %g, %g, %g)", path, key, c->rope_factor,
                       c->rope_low_freq_factor, c->rope_high_freq_factor, c->rope_original_max_pos);
    c->rope_llama3 = 1;
    return 0;
}

/* config.json -> info, refusing what the model cannot represent. */
static int im_config(const char* dir, LlamaImport* c, char* err, size_t err_len) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON* j = rr_read_json_object(path, RR_MAX_JSON, "a config.json file",
                                   "%s: cannot read: %s (--hf takes a Hugging Face model folder)", err, err_len);
    if (!j) return -1;
    int rc = import_llama_config_json(j, path, c, err, err_len);
    cJSON_Delete(j);
    return rc;
}

int import_llama_config_json(const cJSON* j, const char* path, LlamaImport* c, char* err, size_t err_len) {
    int rc = -1;
    /* each within this model's own limits (the recipe key's range) before anything is sized from it */
    const char* ints[5] = {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"};
    const char* keys[5] = {"text_width", "text_layers", "text_heads", "ffn_hidden", "vocab"};
    int* dst[5] = {&c->D, &c->L, &c->H, &c->F, &c->V};
    for (int i = 0; i < 5; i++) {
        const cJSON* x = cJSON_GetObjectItemCaseSensitive(j, ints[i]);
        double lo = 1, hi = 0;
        import_key_range(keys[i], &lo, &hi);
        if (!cJSON_IsNumber(x) || !(x->valuedouble >= 1) || x->valuedouble > 2147483647.0 ||
            x->valuedouble != floor(x->valuedouble)) {
            rr_fail(err, err_len, "%s: \"%s\" is missing or not a positive integer", path, ints[i]);
            goto out;
        }
        if (x->valuedouble < lo || x->valuedouble > hi) {
            rr_fail(err, err_len, "%s: \"%s\" = %.0f is outside this model's range [%.0f, %.0f] (model.%s)", path,
                    ints[i], x->valuedouble, lo > 1 ? lo : 1, hi, keys[i]);
            goto out;
        }
        *dst[i] = (int)x->valuedouble;
    }
    const cJSON* x;
    snprintf(c->model_type, sizeof c->model_type, "llama");
    if ((x = cJSON_GetObjectItemCaseSensitive(j, "model_type")) && cJSON_IsString(x)) {
        if (strcmp(x->valuestring, "llama") && strcmp(x->valuestring, "mistral") && strcmp(x->valuestring, "qwen2")) {
            rr_fail(err, err_len, "%s: model_type \"%.40s\": the architectures imported are llama, mistral and qwen2", path,
                    x->valuestring);
            goto out;
        }
        snprintf(c->model_type, sizeof c->model_type, "%s", x->valuestring);
    }
    int qwen2 = !strcmp(c->model_type, "qwen2");
    if ((x = cJSON_GetObjectItemCaseSensitive(j, "hidden_act")) && cJSON_IsString(x) && strcmp(x->valuestring, "silu")) {
        rr_fail(err, err_len, "%s: hidden_act \"%s\": the model's SwiGLU uses silu", path, x->valuestring);
        goto out;
    }
    c->Hkv = c->H; /* grouped-query attention: num_key_value_heads (absent or null: multi-head) */
    if ((x = cJSON_GetObjectItemCaseSensitive(j, "num_key_value_heads")) && !cJSON_IsNull(x)) {
        /* range before any cast: (int)1e300 is undefined */
        if (!cJSON_IsNumber(x) || !(x->valuedouble >= 1 && x->valuedouble <= c->H) ||
            x->valuedouble != floor(x->valuedouble) || c->H % (int)x->valuedouble) {
            rr_fail(err, err_len, "%s: num_key_value_heads = %g must be a whole divisor of num_attention_heads = %d (each "
                    "key/value head serves a group of query heads)", path, cJSON_IsNumber(x) ? x->valuedouble : -1.0, c->H);
            goto out;
        }
        c->Hkv = (int)x->valuedouble;
    }
    c->tie = (x = cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings")) && cJSON_IsTrue(x);
    /* Qwen2: q, k, v always carry biases (o none); Llama / Mistral: attention_bias puts one on all four */
    c->qkv_bias = qwen2;
    if (!qwen2 && (x = cJSON_GetObjectItemCaseSensitive(j, "attention_bias")) && cJSON_IsTrue(x)) c->qkv_bias = c->o_bias = 1;
    if ((x = cJSON_GetObjectItemCaseSensitive(j, "mlp_bias")) && cJSON_IsTrue(x)) {
        rr_fail(err, err_len, "%s: mlp_bias = true: the model's SwiGLU has no biases", path);
        goto out;
    }
    /* sliding-window attention (Mistral v0.1, Qwen2 with use_sliding_window) is not this model's full causal one;
     * a Mistral config without the key has MistralConfig's default window, 4096 (transformers) */
    int mistral_default_window = !strcmp(c->model_type, "mistral") && !cJSON_GetObjectItemCaseSensitive(j, "sliding_window");
    if (mistral_default_window ||
        (qwen2 ? (x = cJSON_GetObjectItemCaseSensitive(j, "use_sliding_window")) && cJSON_IsTrue(x)
               : (x = cJSON_GetObjectItemCaseSensitive(j, "sliding_window")) && !cJSON_IsNull(x))) {
        rr_fail(err, err_len, "%s: %s: sliding-window attention, which this model cannot represent (its "
                "attention is causal over the whole sample)", path,
                qwen2 ? "use_sliding_window is set"
                      : mistral_default_window ? "model_type mistral without sliding_window (MistralConfig's default "
                                                 "window is 4096; set \"sliding_window\": null for full attention)"
                                               : "sliding_window is set");
        goto out;
    }
    if (c->D % c->H || (c->D / c->H) % 2) {
        rr_fail(err, err_len, "%s: hidden_size %d / num_attention_heads %d is not a whole even head dim (RoPE rotates "
                "halves)", path, c->D, c->H);
        goto out;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(j, "head_dim")) && !cJSON_IsNull(x) &&
        (!im_json_int(x) || x->valuedouble != (double)(c->D / c->H))) {
        rr_fail(err, err_len, "%s: head_dim = %d, not hidden_size / num_attention_heads = %d: this model's heads "
                "split the width", path, cJSON_IsNumber(x) ? x->valueint : -1, c->D / c->H);
        goto out;
    }
    c->rms_eps = 1e-6; /* the defaults of Hugging Face's LlamaConfig */
    c->rope_base = 10000.0;
    if ((x = cJSON_GetObjectItemCaseSensitive(j, "rms_norm_eps")) && cJSON_IsNumber(x)) c->rms_eps = x->valuedouble;
    if ((x = cJSON_GetObjectItemCaseSensitive(j, "rope_theta")) && cJSON_IsNumber(x)) c->rope_base = x->valuedouble;
    if (im_rope(cJSON_GetObjectItemCaseSensitive(j, "rope_scaling"), "rope_scaling", path, c, err, err_len) != 0 ||
        im_rope(cJSON_GetObjectItemCaseSensitive(j, "rope_parameters"), "rope_parameters", path, c, err, err_len) != 0)
        goto out;
    if (!(c->rms_eps > 0) || !isfinite(c->rms_eps) || !(c->rope_base > 1) || !isfinite(c->rope_base)) {
        rr_fail(err, err_len, "%s: rms_norm_eps %g / rope_theta %g out of range", path, c->rms_eps, c->rope_base);
        goto out;
    }
    rc = 0;
out:
    return rc;
}

/* weight_map's values sorted by name, then by their place in the index: duplicates are neighbours */
typedef struct {
    const char* v;
    int at;
} ImFileRef;

static int im_ref_cmp(const void* a, const void* b) {
    const ImFileRef *x = a, *y = b;
    int c = strcmp(x->v, y->v);
    return c ? c : (x->at > y->at) - (x->at < y->at);
}

static int im_ref_at(const void* a, const void* b) {
    const ImFileRef *x = a, *y = b;
    return (x->at > y->at) - (x->at < y->at);
}

int import_hf_files(const char* dir, int max_entries, char*** files, int* nf, char* err, size_t err_len) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    size_t n;
    char* text = rr_read_file(path, &n, RR_MAX_JSON);
    *files = NULL;
    *nf = 0;
    if (!text && errno != ENOENT) {
        char why[160];
        return rr_fail(err, err_len, "%s: cannot read: %s", path, rr_read_file_why(errno, "a JSON file", why, sizeof why));
    }
    if (!text) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (access(path, R_OK) != 0)
            return rr_fail(err, err_len, "%s: neither model.safetensors.index.json nor model.safetensors is readable", dir);
        *files = callocCheck(1, sizeof(char*));
        (*files)[(*nf)++] = strdup("model.safetensors");
        return 0;
    }
    cJSON* j = rr_json_parse_whole(text, n, NULL);
    free(text);
    const cJSON* wm = j ? cJSON_GetObjectItemCaseSensitive(j, "weight_map") : NULL;
    int rc = 0, count = cJSON_IsObject(wm) ? cJSON_GetArraySize(wm) : 0;
    if (!cJSON_IsObject(wm)) {
        rc = rr_fail(err, err_len, "%s: %s", path, j ? "no \"weight_map\" object" : "not valid JSON");
    } else if (count > max_entries) {
        rc = rr_fail(err, err_len, "%s: weight_map lists %d tensors, but the model config.json describes has %d: not "
                     "this model's index", path, count, max_entries);
    } else {
        ImFileRef* refs = callocCheck((size_t)count + 1, sizeof(ImFileRef));
        int nr = 0;
        const cJSON* e;
        cJSON_ArrayForEach(e, wm) {
            /* a plain file name inside the folder: no path, nothing hidden, not the folder itself */
            const char* v = cJSON_IsString(e) ? e->valuestring : NULL;
            if (!v || !v[0] || v[0] == '.' || strchr(v, '/') || strlen(v) > 255) {
                char* shown = cJSON_PrintUnformatted(e);
                rc = rr_fail(err, err_len, "%s: weight_map[\"%.200s\"] = %.200s is not a file name in the folder", path,
                             e->string, shown ? shown : "?");
                free(shown);
                break;
            }
            refs[nr].v = v;
            refs[nr].at = nr;
            nr++;
        }
        /* each file once, in the order the index names them first: sorted, then back in order (n log n;
         * a scan per entry was quadratic in a forged index's size) */
        if (rc == 0 && nr > 0) {
            qsort(refs, (size_t)nr, sizeof *refs, im_ref_cmp);
            int u = 0;
            for (int i = 0; i < nr; i++)
                if (i == 0 || strcmp(refs[i].v, refs[u - 1].v)) refs[u++] = refs[i];
            if (u > IMPORT_MAX_FILES) {
                rc = rr_fail(err, err_len, "%s: weight_map names %d files, more than the %d an import reads", path, u,
                             IMPORT_MAX_FILES);
            } else {
                qsort(refs, (size_t)u, sizeof *refs, im_ref_at);
                *files = callocCheck((size_t)u, sizeof(char*));
                for (int i = 0; i < u; i++) (*files)[(*nf)++] = strdup(refs[i].v);
            }
        }
        free(refs);
    }
    cJSON_Delete(j); /* after the last message that reads it */
    if (rc == 0 && *nf == 0) rc = rr_fail(err, err_len, "%s: empty weight_map", path);
    return rc;
}

static void im_rm_rf(const char* dir) {
    /* only our own temporary folder, whose name we made; nftw, never a shell */
    if (rr_remove_tree(dir) != 0) rr_warn("could not remove %s: %s", dir, strerror(errno));
}

/* path with its existing part resolved (realpath of the longest existing prefix, then the rest as
 * written) into buf; -1 when the rest, which does not exist yet, has a '.' or '..' component */
static int im_resolve(const char* path, char* buf, size_t n) {
    char pre[4200];
    snprintf(pre, sizeof pre, "%s", path);
    const char* rest = rr_path_existing_part(path, pre, sizeof pre, 1);
    char real[PATH_MAX];
    if (!realpath(pre, real)) return -1;
    for (const char* c = rest; *c;) { /* no '.' or '..' where the folders do not exist yet */
        size_t l = strcspn(c, "/");
        if ((l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.')) return -1;
        c += l;
        while (*c == '/') c++;
    }
    snprintf(buf, n, "%s%s%s", real, rest[0] && strcmp(real, "/") ? "/" : "", rest);
    return 0;
}

int import_out_begin(ImportOut* o, const char* out, const char* input, char* err, size_t err_len) {
    memset(o, 0, sizeof *o);
    struct stat sb;
    if (!out[0] || out[strlen(out) - 1] == '/')
        return rr_fail(err, err_len, "--out '%.300s': expected the path of a folder to create (no trailing '/')", out);
    if (lstat(out, &sb) == 0)
        return rr_fail(err, err_len, "%.300s already exists: remove it or choose another --out", out);
    if (snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%d", out, (int)getpid()) >= (int)sizeof o->tmp - 300)
        return rr_fail(err, err_len, "--out '%.200s...': path too long", out);
    char ro[4400], ri[PATH_MAX];
    if (im_resolve(out, ro, sizeof ro) != 0)
        return rr_fail(err, err_len, "--out '%.300s': a '.' or '..' after a folder that does not exist yet", out);
    /* never into (or over) what is being read */
    if (input && realpath(input, ri)) {
        size_t l = strlen(ri);
        if (!strncmp(ro, ri, l) && (ro[l] == 0 || ro[l] == '/' || !strcmp(ri, "/")))
            return rr_fail(err, err_len, "--out '%.300s' is inside the folder it reads, '%.300s': choose a folder "
                           "outside it", out, input);
    }
    /* the outermost folder this command creates (tmp, or the first missing parent of --out): a failure
     * removes it whole, so it leaves nothing behind, not even the parents it made */
    for (size_t i = 1; o->tmp[i - 1]; i++) {
        if (o->tmp[i] != '/' && o->tmp[i] != 0) continue;
        snprintf(o->made_top, sizeof o->made_top, "%.*s", (int)i, o->tmp);
        if (lstat(o->made_top, &sb) != 0) break;
        o->made_top[0] = 0;
    }
    if (!o->made_top[0]) /* tmp itself exists (another process's, or planted): never written into */
        return rr_fail(err, err_len, "'%.300s' already exists: remove it or choose another --out", o->tmp);
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", o->tmp);
    char* slash = strrchr(parent, '/');
    int rc = 0;
    if (slash && slash != parent) {
        *slash = 0;
        if (rr_mkdirs(parent) != 0) rc = rr_fail(err, err_len, "cannot create '%.300s': %s", parent, strerror(errno));
    }
    /* the temporary folder is ours only when this mkdir made it (not an existing folder or link) */
    if (rc == 0 && mkdir(o->tmp, 0755) != 0) rc = rr_fail(err, err_len, "cannot create '%.300s': %s", o->tmp, strerror(errno));
    if (rc != 0) {
        if (strcmp(o->made_top, o->tmp)) im_rm_rf(o->made_top); /* the parents made above */
        return -1;
    }
    o->made = 1;
    return 0;
}

int import_out_end(ImportOut* o, const char* out, int rc, char* err, size_t err_len) {
    if (!o->made) return rc;
    if (rc == 0 && rename(o->tmp, out) != 0)
        rc = rr_fail(err, err_len, "cannot rename '%.300s' to '%.300s': %s", o->tmp, out, strerror(errno));
    if (rc != 0) im_rm_rf(o->made_top);
    o->made = 0;
    /* the rename is durable once the parent folder is (the files in it were fsync'd) */
    if (rc == 0 && rr_fsync_parent(out) != 0)
        rc = rr_fail(err, err_len, "cannot fsync the folder holding '%.300s' after renaming it there: %s (it is "
                     "complete, but may not survive a power loss)", out, strerror(errno));
    return rc;
}

ImportName* import_llama_names(const LlamaImport* c, int* n_out) {
    /* c->L is within model.text_layers' range (im_config), so the table's size is small and exact */
    size_t cap = 13 * (size_t)c->L + 3;
    int n = 0, Dkv = c->Hkv * (c->D / c->H);
    ImName* names = callocCheck(cap, sizeof(ImName));
    char hf[128], ours[128];
    im_add(names, &n, "model.embed_tokens.weight", "text.embed.weight", c->V, c->D);
    for (int l = 0; l < c->L; l++) {
        const struct {
            const char *hf, *ours;
            int64_t d0, d1;
        } m[13] = {{"input_layernorm.weight", "norm1.weight", c->D, 0},
                   {"self_attn.q_proj.weight", "attn.q.weight", c->D, c->D},
                   {"self_attn.k_proj.weight", "attn.k.weight", Dkv, c->D},
                   {"self_attn.v_proj.weight", "attn.v.weight", Dkv, c->D},
                   {"self_attn.o_proj.weight", "attn.o.weight", c->D, c->D},
                   {"post_attention_layernorm.weight", "norm2.weight", c->D, 0},
                   {"mlp.gate_proj.weight", "mlp.gate.weight", c->F, c->D},
                   {"mlp.up_proj.weight", "mlp.up.weight", c->F, c->D},
                   {"mlp.down_proj.weight", "mlp.down.weight", c->D, c->F},
                   {"self_attn.q_proj.bias", "attn.q.bias", c->D, 0},
                   {"self_attn.k_proj.bias", "attn.k.bias", Dkv, 0},
                   {"self_attn.v_proj.bias", "attn.v.bias", Dkv, 0},
                   {"self_attn.o_proj.bias", "attn.o.bias", c->D, 0}};
        int nm = c->qkv_bias ? (c->o_bias ? 13 : 12) : 9; /* the biases, when the config has them */
        for (int k = 0; k < nm; k++) {
            snprintf(hf, sizeof hf, "model.layers.%d.%s", l, m[k].hf);
            snprintf(ours, sizeof ours, "text.blocks.%d.%s", l, m[k].ours);
            im_add(names, &n, hf, ours, m[k].d0, m[k].d1);
        }
    }
    im_add(names, &n, "model.norm.weight", "text.norm.weight", c->D, 0);
    if (!c->tie) im_add(names, &n, "lm_head.weight", "text.lm_head.weight", c->V, c->D);

    *n_out = n;
    return names;
}

/* TMP/state.json of an import (a checkpoint state at step 0 with no optimiser state: train.init_from reads
 * it, a resume refuses it), with the identity its files carry; takes `list` (the files). */
void import_llama_keys(const LlamaImport* c, cJSON* keys) {
    char v[64];
#define IM_KEY(name, fmt, val) (snprintf(v, sizeof v, fmt, val), cJSON_AddStringToObject(keys, "model." name, v))
    IM_KEY("text_width", "%d", c->D);
    IM_KEY("text_layers", "%d", c->L);
    IM_KEY("text_heads", "%d", c->H);
    IM_KEY("ffn_hidden", "%d", c->F);
    IM_KEY("vocab", "%d", c->V);
    IM_KEY("rms_eps", "%.17g", c->rms_eps);
    IM_KEY("rope_base", "%.17g", c->rope_base);
    IM_KEY("text_kv_heads", "%d", c->Hkv != c->H ? c->Hkv : 0);
    IM_KEY("text_qkv_bias", "%s", c->qkv_bias ? "true" : "false");
    IM_KEY("text_o_bias", "%s", c->o_bias ? "true" : "false");
    IM_KEY("tie_embeddings", "%s", c->tie ? "true" : "false");
    IM_KEY("rope_type", "%s", c->rope_llama3 ? "llama3" : "default");
    if (c->rope_llama3) {
        IM_KEY("rope_factor", "%.17g", c->rope_factor);
        IM_KEY("rope_low_freq_factor", "%.17g", c->rope_low_freq_factor);
        IM_KEY("rope_high_freq_factor", "%.17g", c->rope_high_freq_factor);
        IM_KEY("rope_original_max_pos", "%.0f", c->rope_original_max_pos);
    }
#undef IM_KEY
}

/* The LM's [model] keys beyond its shape (import.h) */
void import_print_lm_keys(FILE* f, const LlamaImport* info) {
    fprintf(f, "rms_eps = %.17g\nrope_base = %.17g\n", info->rms_eps, info->rope_base);
    if (info->Hkv != info->H) fprintf(f, "text_kv_heads = %d\n", info->Hkv);
    if (info->qkv_bias) fprintf(f, "text_qkv_bias = true\n");
    if (info->o_bias) fprintf(f, "text_o_bias = true\n");
    if (info->tie) fprintf(f, "tie_embeddings = true\n");
    if (info->rope_llama3)
        fprintf(f, "rope_type = llama3\nrope_factor = %.17g\nrope_low_freq_factor = %.17g\nrope_high_freq_factor = %.17g\n"
                "rope_original_max_pos = %.0f\n", info->rope_factor, info->rope_low_freq_factor, info->rope_high_freq_factor,
                info->rope_original_max_pos);
}

CheckpointState import_identity(void) {
    CheckpointState id = {.step = 0, .run = checkpoint_new_run_id()};
    snprintf(id.layout, sizeof id.layout, "%s", CHECKPOINT_LAYOUT_IMPORT);
    return id;
}

cJSON* import_state_new(const CheckpointState* id, const char* imported_from) {
    cJSON* j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "rrfp-mm-checkpoint");
    cJSON_AddNumberToObject(j, "version", CHECKPOINT_VERSION);
    cJSON_AddNumberToObject(j, "step", 0);
    cJSON_AddNumberToObject(j, "optimizer_step", 0);
    cJSON_AddStringToObject(j, "recipe_hash", "0000000000000000");
    cJSON_AddStringToObject(j, "seed", "0");
    cJSON_AddStringToObject(j, "data_seed", "0");
    char hx[24];
    snprintf(hx, sizeof hx, "%016llx", (unsigned long long)id->run);
    cJSON_AddStringToObject(j, "run", hx);
    cJSON_AddStringToObject(j, "layout", id->layout);
    cJSON_AddNullToObject(j, "loader");
    cJSON_AddStringToObject(j, "imported_from", imported_from);
    return j;
}

int import_state_write(const char* tmp, cJSON* j, char* err, size_t err_len) {
    char* text = cJSON_Print(j);
    cJSON_Delete(j);
    char path[4400];
    snprintf(path, sizeof path, "%s/state.json", tmp);
    int rc = 0;
    if (rr_write_file_atomic(path, text, strlen(text)) != 0)
        rc = rr_fail(err, err_len, "cannot write '%s': %s", path, strerror(errno));
    free(text);
    return rc;
}

int import_write_state(const char* tmp, const CheckpointState* id, const char* hf_dir, cJSON* list, cJSON* learned,
                       char* err, size_t err_len) {
    /* the source's config.json as read (validated by the import before anything was written) */
    char cpath[4200];
    snprintf(cpath, sizeof cpath, "%s/config.json", hf_dir);
    cJSON* cfg = rr_read_json(cpath, RR_MAX_JSON);
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        cJSON_Delete(list);
        cJSON_Delete(learned);
        return rr_fail(err, err_len, "%s: cannot be read again as a JSON object (changed during the import?)", cpath);
    }
    cJSON* j = import_state_new(id, hf_dir);
    cJSON_AddItemToObject(j, "files", list);
    while (learned && learned->child) {
        cJSON* x = cJSON_DetachItemViaPointer(learned, learned->child);
        cJSON_AddItemToObject(j, x->string, x); /* the key is copied before the item's own is freed */
    }
    cJSON_Delete(learned);
    cJSON_AddItemToObject(j, "hf_config", cfg);
    return import_state_write(tmp, j, err, err_len);
}

int import_run_begin(ImportRun* run, const char* out, const char* hf_dir, int max_entries, char* err, size_t err_len) {
    memset(run, 0, sizeof *run);
    run->id = import_identity();
    run->list = cJSON_CreateArray();
    if (import_out_begin(&run->o, out, hf_dir, err, err_len) != 0) return -1;
    return import_hf_files(hf_dir, max_entries, &run->files, &run->nf, err, err_len);
}

int import_run_end(ImportRun* run, const char* out, const char* hf_dir, int rc, cJSON* learned, char* err, size_t err_len) {
    if (rc == 0) {
        rc = import_write_state(run->o.tmp, &run->id, hf_dir, run->list, learned, err, err_len);
        run->list = NULL, learned = NULL; /* freed with the state */
    }
    cJSON_Delete(learned);
    rc = import_out_end(&run->o, out, rc, err, err_len); /* renamed, or what this import made removed */
    cJSON_Delete(run->list);
    for (int k = 0; k < run->nf; k++) free(run->files[k]);
    free(run->files);
    return rc;
}

int import_file_open(ImportFile* fi, const char* hf_dir, const char* name, char* err, size_t err_len) {
    memset(fi, 0, sizeof *fi);
    snprintf(fi->path, sizeof fi->path, "%s/%s", hf_dir, name);
    if (st_load(&fi->f, fi->path, err, err_len) != 0) return -1;
    fi->w = st_writer_new();
    fi->bufs = callocCheck((size_t)fi->f.n + 1, sizeof(float*));
    fi->defs = callocCheck((size_t)fi->f.n + 1, sizeof(void*));
    return 0;
}

typedef struct {
    const ImportFile* fi;
    char ours[128];
    uint64_t hash; /* of the values first read (checkpoint_add_tensor's checksum) */
    size_t n;
    int np;
    ImportPart parts[3];
    char names[3][128];
} ImportDeferred;

static int import_fill(void* ctx, void* buf, char* err, size_t err_len) {
    const ImportDeferred* d = ctx;
    float* v = buf;
    size_t at = 0;
    for (int p = 0; p < d->np; p++) {
        const ImportPart* x = &d->parts[p];
        if (st_read_f32(&d->fi->f, x->name, v + at, x->ndim, x->shape, err, err_len) != 0) return -1;
        size_t n = 1;
        for (int k = 0; k < x->ndim; k++) n *= (size_t)x->shape[k];
        at += n;
    }
    RR_ASSERT(at == d->n);
    if (rr_xxh64(v, d->n * sizeof(float), 0) != d->hash)
        return rr_fail(err, err_len, "%s: tensor '%s' (for %s) changed while it was imported (its values differ from "
                       "the first read): import again from a folder nothing writes to", d->fi->path, d->parts[0].name,
                       d->ours);
    return 0;
}

void import_file_defer(ImportFile* fi, const char* ours, float* v, size_t n, const ImportPart* parts, int np) {
    RR_ASSERT(np >= 1 && np <= 3 && fi->nd <= fi->f.n);
    ImportDeferred* d = callocCheck(1, sizeof *d);
    d->fi = fi;
    snprintf(d->ours, sizeof d->ours, "%s", ours);
    d->hash = rr_xxh64(v, n * sizeof(float), 0);
    d->n = n;
    d->np = np;
    for (int p = 0; p < np; p++) {
        d->parts[p] = parts[p];
        snprintf(d->names[p], sizeof d->names[p], "%s", parts[p].name);
        d->parts[p].name = d->names[p];
    }
    free(v);
    fi->defs[fi->nd++] = d;
    st_writer_defer(fi->w, ours, import_fill, d);
}

void import_file_keep(ImportFile* fi, float* buf) {
    RR_ASSERT(fi->nb <= fi->f.n && "one buffer per tensor of the file");
    fi->bufs[fi->nb++] = buf;
}

float* import_file_buf(ImportFile* fi, size_t n) {
    float* v = mallocCheck((n ? n : 1) * sizeof(float));
    import_file_keep(fi, v);
    return v;
}

int import_file_close(ImportFile* fi, int rc, int write, ImportRun* run, int k, const char* from, FILE* log, char* err,
                      size_t err_len) {
    if (rc == 0 && write) {
        char base[64], shard[32], path[4400];
        snprintf(shard, sizeof shard, "hf%d", k);
        snprintf(base, sizeof base, "model.%s.safetensors", shard);
        snprintf(path, sizeof path, "%s/%s", run->o.tmp, base);
        st_writer_meta(fi->w, "format", "rrfp-mm");
        checkpoint_identity_meta(fi->w, &run->id, shard);
        st_writer_meta(fi->w, "imported_from", from);
        rc = st_writer_write(fi->w, path, err, err_len);
        cJSON_AddItemToArray(run->list, cJSON_CreateString(base));
        if (rc == 0 && log) fprintf(log, "import: %s -> %s\n", fi->path, base);
    }
    st_writer_free(fi->w);
    for (int i = 0; i < fi->nb; i++) free(fi->bufs[i]);
    free(fi->bufs);
    for (int i = 0; i < fi->nd; i++) free(fi->defs[i]);
    free(fi->defs);
    st_free(&fi->f);
    return rc;
}

int import_llama(const char* hf_dir, const char* out, LlamaImport* info, FILE* log, char* err, size_t err_len) {
    memset(info, 0, sizeof *info);
    if (im_config(hf_dir, info, err, err_len) != 0) return -1;
    const LlamaImport* c = info;
    int n = 0;
    ImName* names = import_llama_names(info, &n);
    size_t cap = (size_t)n;

    ImportRun run;
    int rc = import_run_begin(&run, out, hf_dir, (int)cap + c->L + 16, err, err_len);
    for (int k = 0; k < run.nf && rc == 0; k++) {
        ImportFile fi;
        if ((rc = import_file_open(&fi, hf_dir, run.files[k], err, err_len)) != 0) break;
        const StFile* f = &fi.f;
        const char* path = fi.path;
        for (int t = 0; t < f->n && rc == 0; t++) {
            const StTensor* x = &f->tensors[t];
            size_t ln = strlen(x->name);
            if (ln >= 19 && !strcmp(x->name + ln - 19, "rotary_emb.inv_freq")) continue; /* recomputed from theta */
            if (c->tie && !strcmp(x->name, "lm_head.weight")) continue; /* tied: the head is the embedding */
            ImName* m = NULL;
            for (int i = 0; i < n && !m; i++)
                if (!strcmp(names[i].hf, x->name)) m = &names[i];
            if (!m) {
                rc = rr_fail(err, err_len, "%s: tensor '%s' has no place in this model (a bias, or another "
                             "architecture's tensor)", path, x->name);
                break;
            }
            if (m->seen) {
                rc = rr_fail(err, err_len, "%s: tensor '%s' appears in two files", path, x->name);
                break;
            }
            /* the buffer is sized from the tensor as the file stores it (its bytes are in the file), after
             * checking that shape against the one config.json implies: never from config.json alone */
            if (st_expect_shape(f, x->name, m->ndim, m->shape, err, err_len) != 0) {
                size_t l = strlen(err);
                snprintf(err + l, err_len - l, " (from %s/config.json)", hf_dir);
                rc = -1;
                break;
            }
            size_t numel = (x->end - x->begin) / dtype_size(x->dtype);
            float* v = mallocCheck((numel ? numel : 1) * sizeof(float));
            if (st_read_f32(f, x->name, v, m->ndim, m->shape, err, err_len) != 0) {
                free(v);
                rc = -1; /* names the file and the tensor (a dtype this import does not convert) */
                break;
            }
            m->seen = 1;
            char e2[512];
            if (checkpoint_add_tensor(fi.w, m->ours, m->ndim, m->shape, v, e2, sizeof e2) != 0) {
                free(v);
                rc = rr_fail(err, err_len, "%s: tensor '%s' (for %s): %s", path, x->name, m->ours, e2);
                break;
            }
            /* read again when the shard is written: one tensor held at a time */
            ImportPart part = {x->name, m->ndim, {m->shape[0], m->ndim > 1 ? m->shape[1] : 0, 0, 0}};
            import_file_defer(&fi, m->ours, v, numel, &part, 1);
            info->tensors++;
        }
        rc = import_file_close(&fi, rc, 1, &run, k, "huggingface llama", log, err, err_len);
    }
    for (int i = 0; i < n && rc == 0; i++)
        if (!names[i].seen)
            rc = rr_fail(err, err_len, "%s: tensor '%s' (for %s) is in none of the model's files", hf_dir, names[i].hf,
                         names[i].ours);
    cJSON* learned = NULL;
    if (rc == 0) {
        learned = cJSON_CreateObject();
        import_llama_keys(info, cJSON_AddObjectToObject(learned, "recipe"));
    }
    rc = import_run_end(&run, out, hf_dir, rc, learned, err, err_len);
    free(names);
    return rc;
}
