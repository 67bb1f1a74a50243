/* import.c — a Hugging Face Llama LM as a checkpoint of the text tower (see import.h). One input shard
 * at a time is read, converted and written as one output file, so memory holds one shard, not the
 * model. */
#include "runtime/train/import.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/checkpoint.h"
#include "engine/safetensors.h"
#include "engine/util.h"

static int im_fail(char* err, size_t n, const char* fmt, ...) RR_PRINTF(3, 4);
static int im_fail(char* err, size_t n, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

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
        im_fail(err, err_len, "%s: %s = %.200s: this model's RoPE is the plain rule (theta^(-2i/d) at the position) or "
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
            return im_fail(err, err_len, "%s: %s.%s is missing or not a positive number (rope_type llama3 needs it)", path,
                           key, names[i]);
        *dst[i] = x->valuedouble;
    }
    if (c->rope_factor < 1 || c->rope_high_freq_factor <= c->rope_low_freq_factor ||
        c->rope_original_max_pos != (double)(int)c->rope_original_max_pos)
        return im_fail(err, err_len, "%s: %s: llama3 needs factor >= 1, high_freq_factor > low_freq_factor and a whole "
                       "original_max_position_embeddings (got %g, %g, %g, %g)", path, key, c->rope_factor,
                       c->rope_low_freq_factor, c->rope_high_freq_factor, c->rope_original_max_pos);
    c->rope_llama3 = 1;
    return 0;
}

/* config.json -> info, refusing what the model cannot represent. */
static int im_config(const char* dir, LlamaImport* c, char* err, size_t err_len) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t n;
    char* text = rr_read_file(path, &n);
    if (!text) return im_fail(err, err_len, "%s: cannot read: %s (--hf takes a Hugging Face model folder)", path, strerror(errno));
    cJSON* j = cJSON_ParseWithLength(text, n);
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return im_fail(err, err_len, "%s: not a JSON object", path);
    }
    int rc = import_llama_config_json(j, path, c, err, err_len);
    cJSON_Delete(j);
    return rc;
}

int import_llama_config_json(const cJSON* j, const char* path, LlamaImport* c, char* err, size_t err_len) {
    int rc = -1;
    const char* ints[5] = {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"};
    int* dst[5] = {&c->D, &c->L, &c->H, &c->F, &c->V};
    for (int i = 0; i < 5; i++) {
        const cJSON* x = cJSON_GetObjectItemCaseSensitive(j, ints[i]);
        if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble != (double)(int)x->valuedouble) {
            im_fail(err, err_len, "%s: \"%s\" is missing or not a positive integer", path, ints[i]);
            goto out;
        }
        *dst[i] = x->valueint;
    }
    const cJSON* x;
    snprintf(c->model_type, sizeof c->model_type, "llama");
    if ((x = cJSON_GetObjectItemCaseSensitive(j, "model_type")) && cJSON_IsString(x)) {
        if (strcmp(x->valuestring, "llama") && strcmp(x->valuestring, "mistral") && strcmp(x->valuestring, "qwen2")) {
            im_fail(err, err_len, "%s: model_type \"%.40s\": the architectures imported are llama, mistral and qwen2", path,
                    x->valuestring);
            goto out;
        }
        snprintf(c->model_type, sizeof c->model_type, "%s", x->valuestring);
    }
    int qwen2 = !strcmp(c->model_type, "qwen2");
    if ((x = cJSON_GetObjectItemCaseSensitive(j, "hidden_act")) && cJSON_IsString(x) && strcmp(x->valuestring, "silu")) {
        im_fail(err, err_len, "%s: hidden_act \"%s\": the model's SwiGLU uses silu", path, x->valuestring);
        goto out;
    }
    c->Hkv = c->H; /* grouped-query attention: num_key_value_heads (absent or null: multi-head) */
    if ((x = cJSON_GetObjectItemCaseSensitive(j, "num_key_value_heads")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble != (double)(int)x->valuedouble ||
            c->H % x->valueint) {
            im_fail(err, err_len, "%s: num_key_value_heads = %g must be a whole divisor of num_attention_heads = %d (each "
                    "key/value head serves a group of query heads)", path, cJSON_IsNumber(x) ? x->valuedouble : -1.0, c->H);
            goto out;
        }
        c->Hkv = x->valueint;
    }
    c->tie = (x = cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings")) && cJSON_IsTrue(x);
    /* Qwen2: q, k, v always carry biases (o none); Llama / Mistral: attention_bias puts one on all four */
    c->qkv_bias = qwen2;
    if (!qwen2 && (x = cJSON_GetObjectItemCaseSensitive(j, "attention_bias")) && cJSON_IsTrue(x)) c->qkv_bias = c->o_bias = 1;
    if ((x = cJSON_GetObjectItemCaseSensitive(j, "mlp_bias")) && cJSON_IsTrue(x)) {
        im_fail(err, err_len, "%s: mlp_bias = true: the model's SwiGLU has no biases", path);
        goto out;
    }
    /* sliding-window attention (Mistral v0.1, Qwen2 with use_sliding_window) is not this model's full causal one */
    if (qwen2 ? (x = cJSON_GetObjectItemCaseSensitive(j, "use_sliding_window")) && cJSON_IsTrue(x)
              : (x = cJSON_GetObjectItemCaseSensitive(j, "sliding_window")) && !cJSON_IsNull(x)) {
        im_fail(err, err_len, "%s: %s is set: sliding-window attention, which this model cannot represent (its "
                "attention is causal over the whole sample)", path, qwen2 ? "use_sliding_window" : "sliding_window");
        goto out;
    }
    if (c->D % c->H || (c->D / c->H) % 2) {
        im_fail(err, err_len, "%s: hidden_size %d / num_attention_heads %d is not a whole even head dim (RoPE rotates "
                "halves)", path, c->D, c->H);
        goto out;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(j, "head_dim")) && !cJSON_IsNull(x) &&
        (!cJSON_IsNumber(x) || x->valueint != c->D / c->H)) {
        im_fail(err, err_len, "%s: head_dim = %d, not hidden_size / num_attention_heads = %d: this model's heads "
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
    if (!(c->rms_eps > 0) || !(c->rope_base > 1)) {
        im_fail(err, err_len, "%s: rms_norm_eps %g / rope_theta %g out of range", path, c->rms_eps, c->rope_base);
        goto out;
    }
    rc = 0;
out:
    return rc;
}

/* The safetensors files of the model: the index's weight_map values (each once), or model.safetensors. */
static int im_files(const char* dir, char*** files, int* nf, char* err, size_t err_len) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    size_t n;
    char* text = rr_read_file(path, &n);
    *files = NULL;
    *nf = 0;
    if (!text) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (access(path, R_OK) != 0)
            return im_fail(err, err_len, "%s: neither model.safetensors.index.json nor model.safetensors is readable", dir);
        *files = callocCheck(1, sizeof(char*));
        (*files)[(*nf)++] = strdup("model.safetensors");
        return 0;
    }
    cJSON* j = cJSON_ParseWithLength(text, n);
    free(text);
    const cJSON* wm = j ? cJSON_GetObjectItemCaseSensitive(j, "weight_map") : NULL;
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(j);
        return im_fail(err, err_len, "%s: no \"weight_map\" object", path);
    }
    *files = callocCheck((size_t)cJSON_GetArraySize(wm) + 1, sizeof(char*));
    const cJSON* e;
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
            cJSON_Delete(j);
            return im_fail(err, err_len, "%s: weight_map[\"%s\"] is not a file name in the folder", path, e->string);
        }
        int dup = 0;
        for (int i = 0; i < *nf && !dup; i++) dup = !strcmp((*files)[i], e->valuestring);
        if (!dup) (*files)[(*nf)++] = strdup(e->valuestring);
    }
    cJSON_Delete(j);
    if (*nf == 0) return im_fail(err, err_len, "%s: empty weight_map", path);
    return 0;
}

static void im_rm_rf(const char* dir) {
    char cmd[4300];
    /* only our own temporary folder, whose name we made */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) rr_warn("could not remove %s", dir);
}

ImportName* import_llama_names(const LlamaImport* c, int* n_out) {
    int cap = 13 * c->L + 3, n = 0, Dkv = c->Hkv * (c->D / c->H);
    ImName* names = callocCheck((size_t)cap, sizeof(ImName));
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

int import_llama(const char* hf_dir, const char* out, LlamaImport* info, FILE* log, char* err, size_t err_len) {
    memset(info, 0, sizeof *info);
    if (im_config(hf_dir, info, err, err_len) != 0) return -1;
    struct stat sb;
    if (stat(out, &sb) == 0) return im_fail(err, err_len, "%s already exists: remove it or choose another --out", out);
    const LlamaImport* c = info;
    int n = 0;
    ImName* names = import_llama_names(info, &n);

    char** files = NULL;
    int nf = 0, rc = 0;
    char tmp[4200], path[4400];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", out, (int)getpid());
    if (im_files(hf_dir, &files, &nf, err, err_len) != 0) rc = -1;
    if (rc == 0 && rr_mkdirs(tmp) != 0) rc = im_fail(err, err_len, "cannot create '%s': %s", tmp, strerror(errno));
    cJSON* list = cJSON_CreateArray();
    for (int k = 0; k < nf && rc == 0; k++) {
        StFile f;
        snprintf(path, sizeof path, "%s/%s", hf_dir, files[k]);
        if (st_load(&f, path, err, err_len) != 0) {
            rc = -1;
            break;
        }
        StWriter* w = st_writer_new();
        float** bufs = callocCheck((size_t)f.n + 1, sizeof(float*));
        int nb = 0;
        for (int t = 0; t < f.n && rc == 0; t++) {
            const StTensor* x = &f.tensors[t];
            size_t ln = strlen(x->name);
            if (ln >= 19 && !strcmp(x->name + ln - 19, "rotary_emb.inv_freq")) continue; /* recomputed from theta */
            if (c->tie && !strcmp(x->name, "lm_head.weight")) continue; /* tied: the head is the embedding */
            ImName* m = NULL;
            for (int i = 0; i < n && !m; i++)
                if (!strcmp(names[i].hf, x->name)) m = &names[i];
            if (!m) {
                rc = im_fail(err, err_len, "%s: tensor '%s' has no place in this model (a bias, or another "
                             "architecture's tensor)", path, x->name);
                break;
            }
            if (m->seen) {
                rc = im_fail(err, err_len, "%s: tensor '%s' appears in two files", path, x->name);
                break;
            }
            size_t numel = (size_t)m->shape[0] * (size_t)(m->ndim == 2 ? m->shape[1] : 1);
            float* v = mallocCheck(numel * sizeof(float));
            bufs[nb++] = v;
            if (st_read_f32(&f, x->name, v, m->ndim, m->shape, err, err_len) != 0) {
                rc = -1; /* names the file, the tensor and the shape config.json implies */
                break;
            }
            m->seen = 1;
            st_writer_add(w, m->ours, DTYPE_F32, m->ndim, m->shape, v);
            info->tensors++;
        }
        if (rc == 0) {
            char base[64];
            snprintf(base, sizeof base, "model.hf%d.safetensors", k);
            snprintf(path, sizeof path, "%s/%s", tmp, base);
            st_writer_meta(w, "format", "rrfp-mm");
            st_writer_meta(w, "imported_from", "huggingface llama");
            rc = st_writer_write(w, path, err, err_len);
            cJSON_AddItemToArray(list, cJSON_CreateString(base));
            if (rc == 0 && log) fprintf(log, "import: %s/%s -> %s\n", hf_dir, files[k], base);
        }
        st_writer_free(w);
        for (int i = 0; i < nb; i++) free(bufs[i]);
        free(bufs);
        st_free(&f);
    }
    for (int i = 0; i < n && rc == 0; i++)
        if (!names[i].seen)
            rc = im_fail(err, err_len, "%s: tensor '%s' (for %s) is in none of the model's files", hf_dir, names[i].hf,
                         names[i].ours);
    if (rc == 0) {
        /* a checkpoint state at step 0 with no optimiser state: train.init_from reads it, a resume refuses it */
        cJSON* j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "format", "rrfp-mm-checkpoint");
        cJSON_AddNumberToObject(j, "version", CHECKPOINT_VERSION);
        cJSON_AddNumberToObject(j, "step", 0);
        cJSON_AddNumberToObject(j, "optimizer_step", 0);
        cJSON_AddStringToObject(j, "recipe_hash", "0000000000000000");
        cJSON_AddStringToObject(j, "seed", "0");
        cJSON_AddStringToObject(j, "data_seed", "0");
        cJSON_AddNullToObject(j, "loader");
        cJSON_AddStringToObject(j, "imported_from", hf_dir);
        cJSON_AddItemToObject(j, "files", list);
        list = NULL;
        char* text = cJSON_Print(j);
        cJSON_Delete(j);
        snprintf(path, sizeof path, "%s/state.json", tmp);
        if (rr_write_file_atomic(path, text, strlen(text)) != 0)
            rc = im_fail(err, err_len, "cannot write '%s': %s", path, strerror(errno));
        free(text);
    }
    if (rc == 0 && rename(tmp, out) != 0) rc = im_fail(err, err_len, "cannot rename '%s' to '%s': %s", tmp, out, strerror(errno));
    if (rc != 0 && nf > 0) im_rm_rf(tmp);
    cJSON_Delete(list);
    for (int k = 0; k < nf; k++) free(files[k]);
    free(files);
    free(names);
    return rc;
}
