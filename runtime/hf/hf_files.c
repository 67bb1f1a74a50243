/* hf_files.c — the Hugging Face files around a LLaVA's weights: kept at import, written at export (see
 * hf_files.h). */
#include "runtime/hf/hf_files.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/image.h"
#include "data/shard.h"
#include "data/template.h"
#include "engine/json.h"
#include "engine/util.h"
#include "runtime/train/trained.h"
#include "text/tokenizer.h"

/* The files of a Hugging Face model folder, besides the weights, that the model's users open. */
static const char* const KEPT[] = {"config.json",          "generation_config.json", "preprocessor_config.json",
                                   "processor_config.json", "chat_template.json",     "chat_template.jinja",
                                   "tokenizer.json",        "tokenizer_config.json",  "special_tokens_map.json",
                                   "added_tokens.json",     "tokenizer.model"};
#define N_KEPT (sizeof KEPT / sizeof KEPT[0])

static int is_regular(const char* path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* ------------------------------------------------------------------------------------------------
 * Import */

int hf_keep_files(const char* hf_dir, const char* ckpt_tmp, char* kept, size_t kept_len, char* err, size_t err_len) {
    char dst_dir[4400], src[4400], dst[4600];
    snprintf(dst_dir, sizeof dst_dir, "%s/%s", ckpt_tmp, HF_KEPT_DIR);
    kept[0] = 0;
    for (size_t k = 0; k < N_KEPT; k++) {
        snprintf(src, sizeof src, "%s/%s", hf_dir, KEPT[k]);
        /* regular files only: a pipe or a device is neither copied nor waited for */
        if (!is_regular(src)) continue;
        size_t n;
        char* bytes = rr_read_file(src, &n, !strcmp(KEPT[k], "config.json") ? RR_MAX_JSON : RR_MAX_TOKENIZER);
        if (!bytes) {
            char why[160];
            return rr_fail(err, err_len, "%s: cannot read: %s", src, rr_read_file_why(errno, "a Hugging Face file", why,
                                                                                        sizeof why));
        }
        if (!kept[0] && rr_mkdirs(dst_dir) != 0) {
            free(bytes);
            return rr_fail(err, err_len, "cannot create '%s': %s", dst_dir, strerror(errno));
        }
        snprintf(dst, sizeof dst, "%s/%s", dst_dir, KEPT[k]);
        int rc = rr_write_file_atomic(dst, bytes, n);
        free(bytes);
        if (rc != 0) return rr_fail(err, err_len, "cannot write '%s': %s", dst, strerror(errno));
        size_t at = strlen(kept);
        snprintf(kept + at, kept_len - at, "%s%s", at ? ", " : "", KEPT[k]);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * Export: the imported files */

int hf_kept_find(const char* ckpt, const Recipe* r, char* dir, size_t dir_len) {
    char path[4600], from[RECIPE_STR];
    snprintf(path, sizeof path, "%s/%s/config.json", ckpt, HF_KEPT_DIR);
    if (is_regular(path)) {
        snprintf(dir, dir_len, "%s/%s", ckpt, HF_KEPT_DIR);
        return 0;
    }
    snprintf(from, sizeof from, "%s", r->init_from);
    /* train.init_from, through the run folders of trained checkpoints (a bounded chain) */
    for (int depth = 0; depth < 16 && from[0]; depth++) {
        snprintf(path, sizeof path, "%s/%s/config.json", from, HF_KEPT_DIR);
        if (is_regular(path)) {
            snprintf(dir, dir_len, "%s/%s", from, HF_KEPT_DIR);
            return 0;
        }
        snprintf(path, sizeof path, "%s/../../recipe.ini", from);
        if (!is_regular(path)) return -1;
        Recipe up;
        char e[512];
        recipe_defaults(&up);
        if (recipe_load(&up, path, e, sizeof e) != 0) return -1;
        snprintf(from, sizeof from, "%s", up.init_from);
    }
    return -1;
}

static cJSON* read_json(const char* dir, const char* file) {
    char path[4600];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    size_t n;
    size_t cap = !strcmp(file, "tokenizer.json") ? RR_MAX_TOKENIZER : RR_MAX_JSON;
    char* text = is_regular(path) ? rr_read_file(path, &n, cap) : NULL;
    if (!text) return NULL;
    cJSON* j = rr_json_parse_whole(text, n, NULL);
    free(text);
    if (j && !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        j = NULL;
    }
    return j;
}

static int write_json(const char* dir, const char* file, const cJSON* j, int* files, char* err, size_t err_len) {
    char path[4600];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char* text = cJSON_Print(j);
    int rc = rr_write_file_atomic(path, text, strlen(text));
    free(text);
    if (rc) return rr_fail(err, err_len, "cannot write '%s': %s", path, strerror(errno));
    (*files)++;
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * Export: config.json */

/* Keys the model writes only where the imported config has none (not read at import: the imported value
 * stands), per level. */
static int keep_theirs(const char* level, const char* key) {
    static const char* const top[] = {"architectures", NULL};
    static const char* const vision[] = {"projection_dim", NULL};
    static const char* const text[] = {"max_position_embeddings", "head_dim", NULL};
    const char* const* l = !strcmp(level, "vision_config") ? vision : !strcmp(level, "text_config") ? text : top;
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], key)) return 1;
    return 0;
}

/* Two JSON values that mean the same: numbers equal to float precision (the model keeps some in float),
 * activation names of one function, or equal as JSON. */
static int same_value(const cJSON* a, const cJSON* b) {
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) {
        double x = a->valuedouble, y = b->valuedouble;
        return x == y || fabs(x - y) <= 1e-6 * fmax(fabs(x), fabs(y));
    }
    if (cJSON_IsString(a) && cJSON_IsString(b)) {
        static const char* const tanh_gelu[] = {"gelu_pytorch_tanh", "gelu_new"};
        int ta = 0, tb = 0;
        for (int i = 0; i < 2; i++) ta |= !strcmp(a->valuestring, tanh_gelu[i]), tb |= !strcmp(b->valuestring, tanh_gelu[i]);
        return (ta && tb) || !strcmp(a->valuestring, b->valuestring);
    }
    if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
        if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b)) return 0;
        const cJSON* x;
        cJSON_ArrayForEach(x, a) {
            const cJSON* y = cJSON_GetObjectItemCaseSensitive(b, x->string);
            if (!y || !same_value(x, y)) return 0;
        }
        return 1;
    }
    return cJSON_Compare(a, b, 1);
}

static void log_change(FILE* log, const char* level, const char* key, const cJSON* was, const cJSON* now) {
    if (!log) return;
    char* w = cJSON_PrintUnformatted(was);
    char* n = cJSON_PrintUnformatted(now);
    fprintf(log, "export: config.json: %s%s%s = %.200s (the imported config had %.200s)\n", level, level[0] ? "." : "",
            key, n ? n : "?", w ? w : "?");
    free(w);
    free(n);
}

/* The RoPE of text config t as (theta, llama3 and its factors) from rope_parameters, rope_scaling and rope_theta. */
typedef struct {
    double theta, f[4];
    int llama3;
} Rope;
static Rope rope_of(const cJSON* t) {
    Rope r = {.theta = 10000.0}; /* LlamaConfig's default */
    const cJSON* x = cJSON_GetObjectItemCaseSensitive(t, "rope_theta");
    if (cJSON_IsNumber(x)) r.theta = x->valuedouble;
    const char* keys[2] = {"rope_scaling", "rope_parameters"};
    for (int k = 0; k < 2; k++) {
        const cJSON* s = cJSON_GetObjectItemCaseSensitive(t, keys[k]);
        if (!cJSON_IsObject(s)) continue;
        x = cJSON_GetObjectItemCaseSensitive(s, "rope_theta");
        if (cJSON_IsNumber(x)) r.theta = x->valuedouble;
        const cJSON* type = cJSON_GetObjectItemCaseSensitive(s, "rope_type");
        if (!type) type = cJSON_GetObjectItemCaseSensitive(s, "type");
        if (cJSON_IsString(type) && !strcmp(type->valuestring, "llama3")) {
            static const char* f[4] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
            r.llama3 = 1;
            for (int i = 0; i < 4; i++) {
                x = cJSON_GetObjectItemCaseSensitive(s, f[i]);
                r.f[i] = cJSON_IsNumber(x) ? x->valuedouble : 0;
            }
        }
    }
    return r;
}
static int rope_same(Rope a, Rope b) {
    if (a.llama3 != b.llama3 || fabs(a.theta - b.theta) > 1e-6 * fmax(a.theta, b.theta)) return 0;
    for (int i = 0; a.llama3 && i < 4; i++)
        if (fabs(a.f[i] - b.f[i]) > 1e-6 * fmax(fabs(a.f[i]), fabs(b.f[i]))) return 0;
    return 1;
}

/* ours' keys into theirs (one level: the top, vision_config or text_config). */
static void merge_level(cJSON* theirs, const cJSON* ours, const char* level, FILE* log) {
    int text = !strcmp(level, "text_config");
    /* the RoPE: the imported config's form (rope_parameters, transformers 5) when it describes ours */
    int rope_kept = 0;
    if (text && cJSON_GetObjectItemCaseSensitive(theirs, "rope_parameters")) {
        if (rope_same(rope_of(theirs), rope_of(ours))) {
            rope_kept = 1;
        } else {
            log_change(log, level, "rope_parameters", cJSON_GetObjectItemCaseSensitive(theirs, "rope_parameters"),
                       cJSON_GetObjectItemCaseSensitive(ours, "rope_scaling"));
            cJSON_DeleteItemFromObjectCaseSensitive(theirs, "rope_parameters");
        }
    }
    const cJSON* o;
    cJSON_ArrayForEach(o, ours) {
        const char* key = o->string;
        if (!strcmp(key, "vision_config") || !strcmp(key, "text_config")) continue; /* the caller's */
        if (rope_kept && (!strcmp(key, "rope_theta") || !strcmp(key, "rope_scaling"))) continue;
        /* synonyms: the imported config's name */
        static const char* const syn[][2] = {{"image_token_index", "image_token_id"}, {"torch_dtype", "dtype"}};
        for (size_t s = 0; s < sizeof syn / sizeof syn[0]; s++)
            if (!strcmp(key, syn[s][0]) && !cJSON_GetObjectItemCaseSensitive(theirs, key) &&
                cJSON_GetObjectItemCaseSensitive(theirs, syn[s][1]))
                key = syn[s][1];
        cJSON* t = cJSON_GetObjectItemCaseSensitive(theirs, key);
        if (t && keep_theirs(level, key)) continue;
        if (t && same_value(t, o)) continue;
        /* null where the model's value is what null stands for (num_key_value_heads: multi-head) */
        if (t && cJSON_IsNull(t) && !strcmp(key, "num_key_value_heads") &&
            same_value(o, cJSON_GetObjectItemCaseSensitive(ours, "num_attention_heads")))
            continue;
        /* a Mistral LM without a window is the Llama the model exports */
        if (t && text && !strcmp(key, "model_type") && cJSON_IsString(t) && !strcmp(t->valuestring, "mistral") &&
            !strcmp(o->valuestring, "llama") && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ours, "attention_bias")))
            continue;
        if (t && strcmp(key, "torch_dtype") && strcmp(key, "dtype")) log_change(log, level, key, t, o);
        if (t) cJSON_ReplaceItemInObjectCaseSensitive(theirs, key, cJSON_Duplicate(o, 1));
        else cJSON_AddItemToObject(theirs, key, cJSON_Duplicate(o, 1));
    }
}

cJSON* hf_config_keep(const cJSON* ours, const char* kept_dir, FILE* log) {
    cJSON* theirs = kept_dir ? read_json(kept_dir, "config.json") : NULL;
    if (!theirs) {
        if (log)
            fprintf(log, "export: no imported Hugging Face config.json (an `rrfp-mm import llava` checkpoint's %s/, the "
                    "exported checkpoint's or train.init_from's): config.json holds the model's keys and Hugging Face's "
                    "defaults for the rest\n", HF_KEPT_DIR);
        return cJSON_Duplicate(ours, 1);
    }
    if (log) fprintf(log, "export: config.json keeps the values of %s/config.json\n", kept_dir);
    merge_level(theirs, ours, "", log);
    static const char* const sub[2] = {"vision_config", "text_config"};
    for (int k = 0; k < 2; k++) {
        const cJSON* o = cJSON_GetObjectItemCaseSensitive(ours, sub[k]);
        cJSON* t = cJSON_GetObjectItemCaseSensitive(theirs, sub[k]);
        if (!cJSON_IsObject(t)) {
            cJSON_DeleteItemFromObjectCaseSensitive(theirs, sub[k]);
            t = cJSON_AddObjectToObject(theirs, sub[k]);
        }
        merge_level(t, o, sub[k], log);
    }
    /* old llava-hf configs repeat the LM's vocabulary size at the top */
    const cJSON* tv = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ours, "text_config"), "vocab_size");
    cJSON* top = cJSON_GetObjectItemCaseSensitive(theirs, "vocab_size");
    if (cJSON_IsNumber(top) && tv && !same_value(top, tv)) {
        log_change(log, "", "vocab_size", top, tv);
        cJSON_ReplaceItemInObjectCaseSensitive(theirs, "vocab_size", cJSON_Duplicate(tv, 1));
    }
    return theirs;
}

/* ------------------------------------------------------------------------------------------------
 * Export: the chat template as Jinja (data/template.h's text, for messages of role system / user /
 * assistant whose content is a string or a list of {"type": "image"} / {"type": "text", "text": ...}
 * parts: the images first, each "<image>\n", then the text, as LLaVA's preprocess_multimodal puts one) */

/* the content of message m; TRIM: with Jinja's trim (Llama-3's "content | trim") */
#define J_CONTENT(TRIM)                                                                                           \
    "{%- if m['content'] is string -%}{{ m['content']" TRIM " }}{%- else -%}"                                     \
    "{%- for p in m['content'] -%}{%- if p['type'] == 'image' -%}{{ '<image>\\n' }}{%- endif -%}{%- endfor -%}"   \
    "{%- for p in m['content'] -%}{%- if p['type'] == 'text' -%}{{ p['text']" TRIM " }}{%- endif -%}{%- endfor -%}" \
    "{%- endif -%}"
/* the system prompt: a leading system message's, else the template's default D */
#define J_SYSTEM(D)                                                                                              \
    "{%- if messages[0]['role'] == 'system' -%}{{ messages[0]['content'] }}{%- else -%}{{ \"" D "\" }}{%- endif -%}"

static char* chat_template_jinja(TemplateKind k, const char* bos) {
    char* out = NULL;
    size_t n = 0;
    FILE* f = open_memstream(&out, &n);
    switch (k) {
    case TEMPLATE_RRFP: /* "USER: " q " ASSISTANT:" ("\n" before all but the first), " " a "<|endoftext|>" */
        fputs("{%- for m in messages -%}"
              "{%- if m['role'] == 'user' -%}{%- if not loop.first and messages[loop.index0 - 1]['role'] != 'system' -%}"
              "{{ '\\n' }}{%- endif -%}{{ 'USER: ' }}" J_CONTENT("") "{{ ' ASSISTANT:' }}"
              "{%- elif m['role'] == 'assistant' -%}{{ ' ' }}" J_CONTENT("") "{{ '<|endoftext|>' }}"
              "{%- endif -%}{%- endfor -%}",
              f);
        break;
    case TEMPLATE_VICUNA_V1: /* <s> system " " then "USER: " q " ASSISTANT:", " " a "</s>" */
        fprintf(f, "{{ '%s' }}", bos);
        fputs(J_SYSTEM("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                       "helpful, detailed, and polite answers to the user's questions.")
              "{{ ' ' }}{%- for m in messages -%}"
              "{%- if m['role'] == 'user' -%}{{ 'USER: ' }}" J_CONTENT("") "{{ ' ASSISTANT:' }}"
              "{%- elif m['role'] == 'assistant' -%}{{ ' ' }}" J_CONTENT("") "{{ '</s>' }}"
              "{%- endif -%}{%- endfor -%}",
              f);
        break;
    case TEMPLATE_LLAMA_3:
        fputs("{{ '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\\n\\n' }}"
              J_SYSTEM("You are a helpful language and vision assistant. You are able to understand the visual content "
                       "that the user provides, and assist the user with a variety of tasks using natural language.")
              "{{ '<|eot_id|>' }}{%- for m in messages -%}"
              "{%- if m['role'] == 'user' or m['role'] == 'assistant' -%}"
              "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' }}" J_CONTENT(" | trim") "{{ '<|eot_id|>' }}"
              "{%- endif -%}{%- endfor -%}"
              "{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif -%}",
              f);
        break;
    case TEMPLATE_CHATML:
        fputs("{{ '<|im_start|>system\\n' }}" J_SYSTEM("You are a helpful assistant.") "{{ '<|im_end|>\\n' }}"
              "{%- for m in messages -%}{%- if m['role'] == 'user' or m['role'] == 'assistant' -%}"
              "{{ '<|im_start|>' + m['role'] + '\\n' }}" J_CONTENT("") "{{ '<|im_end|>\\n' }}"
              "{%- endif -%}{%- endfor -%}"
              "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}",
              f);
        break;
    case TEMPLATE_PLAIN: /* <s> "<image>", the caption and "\n" */
        fprintf(f, "{{ '%s' }}", bos);
        fputs("{%- for m in messages -%}{%- if m['role'] == 'user' -%}{{ '<image>' }}"
              "{%- elif m['role'] == 'assistant' -%}" J_CONTENT("") "{{ '\\n' }}{%- endif -%}{%- endfor -%}",
              f);
        break;
    default: RR_ASSERT(!"a template without its Jinja");
    }
    fclose(f);
    return out;
}

/* The token that ends an answer under template k (what generation stops at). */
static const char* hf_stop_token(TemplateKind k) {
    switch (k) {
    case TEMPLATE_RRFP: return "<|endoftext|>";
    case TEMPLATE_VICUNA_V1: return "</s>";
    case TEMPLATE_LLAMA_3: return "<|eot_id|>";
    case TEMPLATE_CHATML: return "<|im_end|>";
    default: return NULL; /* plain: the caption's "\n", no token of its own */
    }
}

/* ------------------------------------------------------------------------------------------------
 * Export: the other files */

static const char* first_token(const Tokenizer* tok, const char* const* names) {
    for (int i = 0; names[i]; i++)
        if (tokenizer_token_id(tok, names[i]) >= 0) return names[i];
    return NULL;
}

/* A string value of tokenizer_config.json (a token is a string or {"content": ...}), or NULL. */
static const char* token_str(const cJSON* tc, const char* key) {
    const cJSON* x = cJSON_GetObjectItemCaseSensitive(tc, key);
    if (cJSON_IsObject(x)) x = cJSON_GetObjectItemCaseSensitive(x, "content");
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static void set_if_absent_str(cJSON* o, const char* key, const char* v) {
    if (v && !cJSON_GetObjectItemCaseSensitive(o, key)) cJSON_AddStringToObject(o, key, v);
}

/* The run's image preprocessing from the first shard of data.shards (0), or -1 (no readable shard). */
static int run_prep(const Recipe* r, ImagePrep* prep, char* where, size_t where_len) {
    char path[4600] = "";
    struct stat sb;
    if (!r->shards[0] || stat(r->shards, &sb) != 0) return -1;
    if (S_ISDIR(sb.st_mode)) {
        DIR* d = opendir(r->shards);
        if (!d) return -1;
        struct dirent* e;
        char best[512] = "";
        while ((e = readdir(d))) {
            size_t l = strlen(e->d_name);
            if (l < 5 || strcmp(e->d_name + l - 4, ".rrs") || l >= sizeof best) continue;
            if (!best[0] || strcmp(e->d_name, best) < 0) snprintf(best, sizeof best, "%s", e->d_name);
        }
        closedir(d);
        if (!best[0]) return -1;
        snprintf(path, sizeof path, "%s/%s", r->shards, best);
    } else {
        snprintf(path, sizeof path, "%s", r->shards);
    }
    Shard s;
    char e[512];
    if (shard_open(path, &s, e, sizeof e) != 0) return -1;
    prep->kind = s.info.prep == IMAGE_PREP_LLAVA || s.info.prep == IMAGE_PREP_ANYRES ? (ImagePrepKind)s.info.prep : IMAGE_PREP_SMART;
    prep->size = (int)s.info.prep_size;
    prep->pins = s.info.pins;
    shard_close(&s);
    snprintf(where, where_len, "%s", path);
    return 0;
}

static void add_size(cJSON* o, const char* key, const char* a, int va, const char* b, int vb) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON* s = cJSON_AddObjectToObject(o, key);
    cJSON_AddNumberToObject(s, a, va);
    if (b) cJSON_AddNumberToObject(s, b, vb);
}

static void put(cJSON* o, const char* key, cJSON* v) {
    if (cJSON_GetObjectItemCaseSensitive(o, key)) cJSON_ReplaceItemInObjectCaseSensitive(o, key, v);
    else cJSON_AddItemToObject(o, key, v);
}

/* preprocessor_config.json: the run's preprocessing over the imported file's other fields. */
static int write_preprocessor(HfExtras* x, FILE* log, char* err, size_t err_len) {
    ImagePrep prep;
    char where[4600];
    cJSON* kept = x->kept ? read_json(x->kept, "preprocessor_config.json") : NULL;
    if (run_prep(x->r, &prep, where, sizeof where) != 0) {
        if (!kept) {
            if (log)
                fprintf(log, "export: no preprocessor_config.json: the run's shards (data.shards = %s) cannot be read "
                        "for its image preprocessing and no imported one was found (AutoProcessor needs it)\n",
                        x->r->shards[0] ? x->r->shards : "none");
            return 0;
        }
        if (log)
            fprintf(log, "export: preprocessor_config.json is the imported one as it was (the run's shards, data.shards = "
                    "%s, cannot be read)\n", x->r->shards[0] ? x->r->shards : "none");
        int rc = write_json(x->tmp, "preprocessor_config.json", kept, &x->files, err, err_len);
        cJSON_Delete(kept);
        return rc;
    }
    cJSON* p = kept ? kept : cJSON_CreateObject();
    int anyres = prep.kind == IMAGE_PREP_ANYRES; /* LLaVA-NeXT's tiles (docs/anyres.md): CLIP's pixels per tile */
    int llava = prep.kind == IMAGE_PREP_LLAVA || anyres;
    int S = llava ? prep.size : x->mc->vision_image_size;
    double mean[3], std[3];
    for (int c = 0; c < 3; c++) {
        mean[c] = llava ? image_clip_mean[c] : 0.5;
        std[c] = llava ? image_clip_std[c] : 0.5;
    }
    put(p, "image_processor_type",
        cJSON_CreateString(anyres ? "LlavaNextImageProcessor" : llava ? "LlavaImageProcessor" : "CLIPImageProcessor"));
    put(p, "processor_class", cJSON_CreateString(anyres ? "LlavaNextProcessor" : "LlavaProcessor"));
    if (anyres) {
        cJSON* g = cJSON_CreateArray();
        for (int i = 0; i < prep.pins.n; i++) cJSON_AddItemToArray(g, cJSON_CreateIntArray(prep.pins.hw[i], 2));
        put(p, "image_grid_pinpoints", g);
    }
    put(p, "do_convert_rgb", cJSON_CreateTrue());
    put(p, "do_pad", cJSON_CreateBool(llava)); /* LLaVA: expand2square with the mean colour; LLaVA-NeXT: the tiles of a batch */
    put(p, "do_resize", cJSON_CreateTrue());
    if (llava) add_size(p, "size", "shortest_edge", S, NULL, 0);
    else add_size(p, "size", "height", S, "width", S);
    put(p, "resample", cJSON_CreateNumber(llava ? 3 : 2)); /* PIL's BICUBIC / BILINEAR */
    put(p, "do_center_crop", cJSON_CreateBool(llava));
    add_size(p, "crop_size", "height", S, "width", S);
    put(p, "do_rescale", cJSON_CreateTrue());
    put(p, "rescale_factor", cJSON_CreateNumber(1.0 / 255.0));
    put(p, "do_normalize", cJSON_CreateTrue());
    put(p, "image_mean", cJSON_CreateDoubleArray(mean, 3));
    put(p, "image_std", cJSON_CreateDoubleArray(std, 3));
    if (log) {
        fprintf(log, "export: preprocessor_config.json: the run's image preprocessing (%s, from %s)\n",
                image_prep_name(prep.kind), where);
        if (!llava)
            fprintf(log, "export: the run's preprocessing resizes each image to its own grid of patches (smart_resize); "
                    "Hugging Face's processor feeds %d x %d: pack with --image-preprocess llava for the same pixels in "
                    "both\n", S, S);
    }
    int rc = write_json(x->tmp, "preprocessor_config.json", p, &x->files, err, err_len);
    cJSON_Delete(p);
    return rc;
}

/* processor_config.json: LlavaProcessor's (an any-resolution model's: LlavaNextProcessor's). */
static int write_processor(HfExtras* x, char* err, size_t err_len) {
    cJSON* p = x->kept ? read_json(x->kept, "processor_config.json") : NULL;
    if (!p) p = cJSON_CreateObject();
    put(p, "processor_class", cJSON_CreateString(x->mc->anyres ? "LlavaNextProcessor" : "LlavaProcessor"));
    put(p, "image_token", cJSON_CreateString("<image>"));
    put(p, "patch_size", cJSON_CreateNumber(x->mc->patch));
    put(p, "vision_feature_select_strategy", cJSON_CreateString("default"));
    put(p, "num_additional_image_tokens", cJSON_CreateNumber(1)); /* CLIP's class token */
    int rc = write_json(x->tmp, "processor_config.json", p, &x->files, err, err_len);
    cJSON_Delete(p);
    return rc;
}

/* A file of the imported folder copied as it was (when there). */
static int copy_kept(HfExtras* x, const char* file, char* err, size_t err_len) {
    char src[4600], dst[4600];
    snprintf(src, sizeof src, "%s/%s", x->kept, file);
    if (!is_regular(src)) return 0;
    size_t n;
    char* b = rr_read_file(src, &n, RR_MAX_TOKENIZER);
    if (!b) return rr_fail(err, err_len, "%s: cannot read: %s", src, strerror(errno));
    snprintf(dst, sizeof dst, "%s/%s", x->tmp, file);
    int rc = rr_write_file_atomic(dst, b, n);
    free(b);
    if (rc) return rr_fail(err, err_len, "cannot write '%s': %s", dst, strerror(errno));
    x->files++;
    return 0;
}

int hf_write_extras(HfExtras* x, FILE* log, char* err, size_t err_len) {
    char path[4600];
    TemplateKind tk = TEMPLATE_RRFP;
    if (x->chat_template && template_parse(x->chat_template, &tk) != 0)
        return rr_fail(err, err_len, "--template %s: unknown chat template; allowed: rrfp, vicuna_v1, llama_3, chatml, "
                       "plain", x->chat_template);
    if (write_preprocessor(x, log, err, err_len) || write_processor(x, err, err_len)) return -1;
    snprintf(path, sizeof path, "%s/tokenizer.json", x->tmp);
    Tokenizer* tok = NULL;
    if (is_regular(path)) {
        char e[1024];
        if (!(tok = tokenizer_load(path, e, sizeof e))) return rr_fail(err, err_len, "%s", e);
    }
    int rc = -1;
    cJSON *tc = NULL, *gen = NULL, *cfg = NULL;
    char* jinja = NULL;
    if (!tok) {
        if (log)
            fprintf(log, "export: no tokenizer (give --tokenizer, or the recipe's data.tokenizer): no tokenizer files, "
                    "no generation_config.json%s\n", x->chat_template ? ", no chat template" : "");
        if (x->kept && (copy_kept(x, "generation_config.json", err, err_len) || copy_kept(x, "chat_template.json", err, err_len)))
            return -1;
        return 0;
    }
    /* one <image> id: the tokenizer's (as the engine reads it) is config.json's */
    int img = tokenizer_token_id(tok, "<image>");
    if (x->tokenizer) snprintf(path, sizeof path, "%s", x->tokenizer);
    if (img != x->image_token_index) {
        if (img < 0)
            rr_fail(err, err_len, "%s has no <image> token, which LlavaProcessor expands into the image's features "
                    "(config.json's image_token_index %d): add it (rrfp-mm tokenizer add-special --tokenizer IN --add "
                    "\"<image>\" --out OUT) or export with --add-image-token", path, x->image_token_index);
        else
            rr_fail(err, err_len, "%s gives <image> id %d but config.json's image_token_index is %d: one <image>, one id "
                    "(export without --image-token-id, or with %d)", path, img, x->image_token_index, img);
        goto out;
    }
    if (x->chat_template) {
        char e[1024];
        if (x->tokenizer) snprintf(path, sizeof path, "%s", x->tokenizer);
        if (template_check_tokenizer(tk, tok, e, sizeof e) != 0) {
            rr_fail(err, err_len, "--template %s: %s: %s", x->chat_template, path, e);
            goto out;
        }
        int bos = template_bos_id(tk, tok);
        jinja = chat_template_jinja(tk, bos >= 0 ? tokenizer_token_str(tok, bos) : "");
    }
    snprintf(path, sizeof path, "%s/config.json", x->tmp);
    cfg = read_json(x->tmp, "config.json");
    RR_ASSERT(cfg); /* written by the export just before */
    /* tokenizer_config.json */
    tc = read_json(x->tmp, "tokenizer_config.json");
    if (!tc) tc = cJSON_CreateObject();
    static const char* const bos_names[] = {"<s>", "<|begin_of_text|>", NULL};
    static const char* const eos_names[] = {"</s>", "<|endoftext|>", "<|end_of_text|>", "<|im_end|>", NULL};
    static const char* const unk_names[] = {"<unk>", NULL};
    static const char* const pad_names[] = {"<pad>", NULL};
    set_if_absent_str(tc, "tokenizer_class", "PreTrainedTokenizerFast");
    set_if_absent_str(tc, "bos_token", first_token(tok, bos_names));
    set_if_absent_str(tc, "eos_token", x->chat_template && hf_stop_token(tk) ? hf_stop_token(tk) : first_token(tok, eos_names));
    set_if_absent_str(tc, "unk_token", first_token(tok, unk_names));
    set_if_absent_str(tc, "pad_token", first_token(tok, pad_names));
    set_if_absent_str(tc, "processor_class", "LlavaProcessor");
    if (!cJSON_GetObjectItemCaseSensitive(tc, "clean_up_tokenization_spaces"))
        cJSON_AddFalseToObject(tc, "clean_up_tokenization_spaces");
    const cJSON* mp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cfg, "text_config"),
                                                       "max_position_embeddings");
    if (cJSON_IsNumber(mp) && !cJSON_GetObjectItemCaseSensitive(tc, "model_max_length"))
        cJSON_AddNumberToObject(tc, "model_max_length", mp->valuedouble);
    /* added_tokens_decoder in step with tokenizer.json's added_tokens (the ids the engine gives them) */
    {
        cJSON* tj = read_json(x->tmp, "tokenizer.json");
        cJSON* dec = cJSON_GetObjectItemCaseSensitive(tc, "added_tokens_decoder");
        if (!cJSON_IsObject(dec)) {
            cJSON_DeleteItemFromObjectCaseSensitive(tc, "added_tokens_decoder");
            dec = cJSON_AddObjectToObject(tc, "added_tokens_decoder");
        }
        const cJSON* a;
        const cJSON* list = tj ? cJSON_GetObjectItemCaseSensitive(tj, "added_tokens") : NULL;
        cJSON_ArrayForEach(a, list) {
            const cJSON* c = cJSON_GetObjectItemCaseSensitive(a, "content");
            if (!cJSON_IsString(c) || !c->valuestring[0]) continue;
            int id = tokenizer_token_id(tok, c->valuestring);
            char key[16];
            snprintf(key, sizeof key, "%d", id);
            const cJSON* have = cJSON_GetObjectItemCaseSensitive(dec, key);
            const cJSON* hc = have ? cJSON_GetObjectItemCaseSensitive(have, "content") : NULL;
            if (cJSON_IsString(hc) && !strcmp(hc->valuestring, c->valuestring)) continue;
            cJSON* e = cJSON_Duplicate(a, 1);
            cJSON_DeleteItemFromObjectCaseSensitive(e, "id");
            put(dec, key, e);
        }
        cJSON_Delete(tj);
    }
    if (jinja) {
        const char* had = token_str(tc, "chat_template");
        if (had && strcmp(had, jinja) && log)
            fprintf(log, "export: tokenizer_config.json: the chat template is --template %s's (the tokenizer's own was "
                    "replaced)\n", x->chat_template);
        put(tc, "chat_template", cJSON_CreateString(jinja));
    } else if (!cJSON_GetObjectItemCaseSensitive(tc, "chat_template") &&
               !(x->kept && (snprintf(path, sizeof path, "%s/chat_template.json", x->kept), is_regular(path))) && log) {
        fprintf(log, "export: no chat template (give --template NAME, the one pack used: rrfp, vicuna_v1, llama_3, "
                "chatml or plain)\n");
    }
    if (write_json(x->tmp, "tokenizer_config.json", tc, &x->files, err, err_len)) goto out;
    /* special_tokens_map.json: the tokenizer's own when it came along, else those tokens */
    snprintf(path, sizeof path, "%s/special_tokens_map.json", x->tmp);
    if (!is_regular(path)) {
        cJSON* sm = cJSON_CreateObject();
        static const char* const keys[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
        for (int i = 0; i < 4; i++) set_if_absent_str(sm, keys[i], token_str(tc, keys[i]));
        int w = write_json(x->tmp, "special_tokens_map.json", sm, &x->files, err, err_len);
        cJSON_Delete(sm);
        if (w) goto out;
    }
    /* chat_template.json: the template's, or the imported one */
    if (jinja) {
        cJSON* ct = cJSON_CreateObject();
        cJSON_AddStringToObject(ct, "chat_template", jinja);
        int w = write_json(x->tmp, "chat_template.json", ct, &x->files, err, err_len);
        cJSON_Delete(ct);
        if (w) goto out;
    } else if (x->kept && (copy_kept(x, "chat_template.json", err, err_len) || copy_kept(x, "chat_template.jinja", err, err_len))) {
        goto out;
    }
    /* generation_config.json: bos / eos / pad ids */
    gen = x->kept ? read_json(x->kept, "generation_config.json") : NULL;
    if (!gen) gen = cJSON_CreateObject();
    const char* bos = token_str(tc, "bos_token");
    if (bos && tokenizer_token_id(tok, bos) >= 0 && !cJSON_GetObjectItemCaseSensitive(gen, "bos_token_id"))
        cJSON_AddNumberToObject(gen, "bos_token_id", tokenizer_token_id(tok, bos));
    {
        /* the template's stop token first, then the ids already there (or the tokenizer's eos) */
        const char* stop = x->chat_template ? hf_stop_token(tk) : NULL;
        const char* eos = token_str(tc, "eos_token");
        int ids[34], n = 0;
        if (stop) ids[n++] = tokenizer_token_id(tok, stop);
        const cJSON* had = cJSON_GetObjectItemCaseSensitive(gen, "eos_token_id");
        const cJSON* e;
        if (cJSON_IsNumber(had)) ids[n++] = had->valueint;
        const cJSON* list = cJSON_IsArray(had) ? had : NULL;
        cJSON_ArrayForEach(e, list) if (cJSON_IsNumber(e) && n < 32) ids[n++] = e->valueint;
        if (n == 0 && eos && tokenizer_token_id(tok, eos) >= 0) ids[n++] = tokenizer_token_id(tok, eos);
        int m = 0;
        for (int i = 0; i < n; i++) {
            int dup = 0;
            for (int j = 0; j < m; j++) dup |= ids[j] == ids[i];
            if (!dup) ids[m++] = ids[i];
        }
        if (m == 1) put(gen, "eos_token_id", cJSON_CreateNumber(ids[0]));
        else if (m > 1) put(gen, "eos_token_id", cJSON_CreateIntArray(ids, m));
    }
    if (!cJSON_GetObjectItemCaseSensitive(gen, "pad_token_id")) {
        const cJSON* cp = cJSON_GetObjectItemCaseSensitive(cfg, "pad_token_id");
        const char* pad = token_str(tc, "pad_token");
        if (cJSON_IsNumber(cp)) cJSON_AddNumberToObject(gen, "pad_token_id", cp->valuedouble);
        else if (pad && tokenizer_token_id(tok, pad) >= 0) cJSON_AddNumberToObject(gen, "pad_token_id", tokenizer_token_id(tok, pad));
    }
    if (write_json(x->tmp, "generation_config.json", gen, &x->files, err, err_len)) goto out;
    rc = 0;
out:
    free(jinja);
    cJSON_Delete(tc);
    cJSON_Delete(gen);
    cJSON_Delete(cfg);
    tokenizer_free(tok);
    return rc;
}

uint64_t hf_safetensors_bytes(const char* dir, uint64_t if_missing) {
    uint64_t sum = 0;
    DIR* d = opendir(dir);
    if (!d) return if_missing;
    struct dirent* e;
    char p[4600];
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 12 || strcmp(e->d_name + l - 12, ".safetensors")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) sum += (uint64_t)sb.st_size;
    }
    closedir(d);
    return sum;
}

int hf_export_recipe(const char* ckpt, const char* recipe_path, const char* what, Recipe* r, char* state,
                     size_t state_len, char* err, size_t err_len) {
    recipe_defaults(r);
    if (recipe_path && (recipe_load(r, recipe_path, err, err_len) != 0 || recipe_validate(r, err, err_len) != 0))
        return -1;
    snprintf(state, state_len, "%s/state.json", ckpt);
    int taken = trained_apply_keys(r, ckpt, what, err, err_len);
    if (taken < 0) return -1;
    if (!recipe_path && !trained_has_keys(ckpt))
        return rr_fail(err, err_len, "%s holds no model keys (not an import of this build): give --recipe R.ini, the "
                       "recipe of the run that wrote it", state);
    return taken;
}
