/* trained.c — what a model was made with, beyond its tensors (see trained.h). */
#include "runtime/train/trained.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "data/loader.h"
#include "data/shard.h"
#include "data/template.h"
#include "engine/json.h"
#include "engine/util.h"
#include "runtime/train/rundir.h"

void trained_data_none(TrainedData* d) {
    memset(d, 0, sizeof *d);
    d->chat_template = -1;
    d->image_token = -1;
}

int trained_data_of_shards(const char* shards, TrainedData* d, char* err, size_t err_len) {
    trained_data_none(d);
    ShardInfo in;
    char first[RECIPE_STR + 64];
    if (loader_shards_info(shards, &in, first, sizeof first, err, err_len) != 0) return -1;
    d->chat_template = (int)in.chat_template;
    d->has_prep = 1;
    d->prep.kind = (ImagePrepKind)in.prep;
    d->prep.size = (int)in.prep_size;
    d->prep.pins = in.pins; /* any-resolution shards' grid pinpoints */
    d->has_hash = 1;
    d->tokenizer_hash = in.tokenizer_hash;
    d->image_token = in.image_token;
    snprintf(d->shards, sizeof d->shards, "%s", shards);
    snprintf(d->template_from, sizeof d->template_from, "%s", first);
    snprintf(d->prep_from, sizeof d->prep_from, "%s", first);
    snprintf(d->hash_from, sizeof d->hash_from, "%s", first);
    snprintf(d->image_from, sizeof d->image_from, "%s", first);
    return 0;
}

/* DIR/state.json parsed (NULL with a message; path gets its name). */
static cJSON* trained_state(const char* dir, char* path, size_t path_len, char* err, size_t err_len) {
    snprintf(path, path_len, "%s/state.json", dir);
    cJSON* j = rr_read_json_object(path, RR_MAX_JSON, "a checkpoint's state.json",
                                   "%s: cannot read: %s (not a checkpoint folder?)", err, err_len);
    if (!j && !errno) snprintf(err, err_len, "%s: not a JSON object (not a checkpoint folder?)", path);
    return j;
}

/* A whole number in [lo, hi]. */
static int trained_int(const cJSON* x, double lo, double hi, int64_t* out) {
    /* the range first: converting a double outside int64_t's (1e300 in a state.json) is undefined */
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= lo && x->valuedouble <= hi) || x->valuedouble != floor(x->valuedouble))
        return -1;
    *out = (int64_t)x->valuedouble;
    return 0;
}

int trained_data_of_checkpoint(const char* dir, TrainedData* d, char* err, size_t err_len) {
    trained_data_none(d);
    char path[RECIPE_STR + 64];
    cJSON* j = trained_state(dir, path, sizeof path, err, err_len);
    if (!j) return -1;
    const cJSON* rec = cJSON_GetObjectItemCaseSensitive(j, "data");
    const cJSON* img = cJSON_GetObjectItemCaseSensitive(j, "image_token_id"); /* an import's */
    const char* bad = NULL;
    int64_t v;
    if (img && !cJSON_IsNull(img)) {
        if (trained_int(img, 0, 1 << 30, &v) != 0) bad = "\"image_token_id\" (a token id)";
        else d->image_token = (int)v, snprintf(d->image_from, sizeof d->image_from, "%s", path);
    }
    if (!bad && rec && !cJSON_IsNull(rec)) {
        const cJSON* t = cJSON_GetObjectItemCaseSensitive(rec, "template");
        const cJSON* p = cJSON_GetObjectItemCaseSensitive(rec, "image_preprocess");
        const cJSON* s = cJSON_GetObjectItemCaseSensitive(rec, "image_size");
        const cJSON* h = cJSON_GetObjectItemCaseSensitive(rec, "tokenizer_hash");
        const cJSON* tf = cJSON_GetObjectItemCaseSensitive(rec, "tokenizer");
        const cJSON* sh = cJSON_GetObjectItemCaseSensitive(rec, "shards");
        const cJSON* ii = cJSON_GetObjectItemCaseSensitive(rec, "image_token_id");
        const cJSON* gp = cJSON_GetObjectItemCaseSensitive(rec, "grid_pinpoints");
        AnyresPinpoints pins = {0};
        char pe[256];
        TemplateKind tk = TEMPLATE_RRFP;
        ImagePrepKind pk = IMAGE_PREP_SMART;
        char* end = NULL;
        if (!cJSON_IsObject(rec)) bad = "\"data\" (an object)";
        else if (t && (!cJSON_IsString(t) || template_parse(t->valuestring, &tk) != 0))
            bad = "\"data\".\"template\" (rrfp, vicuna_v1, llama_3, chatml or plain)";
        else if (p && (!cJSON_IsString(p) || image_prep_parse(p->valuestring, &pk) != 0))
            bad = "\"data\".\"image_preprocess\" (smart, llava or anyres)";
        else if (p && pk != IMAGE_PREP_SMART && trained_int(s, 1, 16384, &v) != 0)
            bad = "\"data\".\"image_size\" (a whole number in 1 .. 16384 with image_preprocess llava or anyres)";
        else if (p && pk == IMAGE_PREP_ANYRES &&
                 (!cJSON_IsString(gp) || anyres_pinpoints_parse(gp->valuestring, (int)v, &pins, pe, sizeof pe) != 0))
            bad = "\"data\".\"grid_pinpoints\" (image_preprocess anyres: [height, width] pairs, multiples of image_size)";
        else if (h && (!cJSON_IsString(h) || strlen(h->valuestring) != 16 ||
                       (strtoull(h->valuestring, &end, 16), *end != 0)))
            bad = "\"data\".\"tokenizer_hash\" (16 hex digits)";
        else if (tf && (!cJSON_IsString(tf) || strlen(tf->valuestring) >= sizeof d->tokenizer))
            bad = "\"data\".\"tokenizer\" (a path)";
        else if (sh && (!cJSON_IsString(sh) || strlen(sh->valuestring) >= sizeof d->shards))
            bad = "\"data\".\"shards\" (a path)";
        else if (ii && trained_int(ii, 0, 1 << 30, &v) != 0)
            bad = "\"data\".\"image_token_id\" (a token id)";
        if (!bad) {
            if (t) d->chat_template = (int)tk, snprintf(d->template_from, sizeof d->template_from, "%s", path);
            if (p) {
                d->has_prep = 1;
                d->prep.kind = pk;
                d->prep.size = pk != IMAGE_PREP_SMART ? (int)cJSON_GetNumberValue(s) : 0;
                d->prep.pins = pins;
                snprintf(d->prep_from, sizeof d->prep_from, "%s", path);
            }
            if (h) {
                d->has_hash = 1;
                d->tokenizer_hash = strtoull(h->valuestring, NULL, 16);
                snprintf(d->hash_from, sizeof d->hash_from, "%s", path);
            }
            if (tf) snprintf(d->tokenizer, sizeof d->tokenizer, "%s", tf->valuestring);
            if (sh) snprintf(d->shards, sizeof d->shards, "%s", sh->valuestring);
            if (ii && d->image_token < 0)
                d->image_token = (int)ii->valuedouble, snprintf(d->image_from, sizeof d->image_from, "%s", path);
        }
    }
    cJSON_Delete(j);
    if (bad) {
        snprintf(err, err_len, "%s: malformed %s", path, bad);
        return -1;
    }
    return 0;
}

char* trained_data_json(const TrainedData* d) {
    cJSON* j = cJSON_CreateObject();
    if (d->chat_template >= 0) cJSON_AddStringToObject(j, "template", template_name((TemplateKind)d->chat_template));
    if (d->has_prep) {
        cJSON_AddStringToObject(j, "image_preprocess", image_prep_name(d->prep.kind));
        if (d->prep.kind != IMAGE_PREP_SMART) cJSON_AddNumberToObject(j, "image_size", d->prep.size);
        if (d->prep.kind == IMAGE_PREP_ANYRES) {
            char pins[ANYRES_MAX_PINPOINTS * 24];
            anyres_pinpoints_format(&d->prep.pins, pins, sizeof pins);
            cJSON_AddStringToObject(j, "grid_pinpoints", pins);
        }
    }
    if (d->has_hash) {
        char hx[24];
        snprintf(hx, sizeof hx, "%016" PRIx64, d->tokenizer_hash);
        cJSON_AddStringToObject(j, "tokenizer_hash", hx);
    }
    if (d->tokenizer[0]) cJSON_AddStringToObject(j, "tokenizer", d->tokenizer);
    if (d->image_token >= 0) cJSON_AddNumberToObject(j, "image_token_id", d->image_token);
    if (d->shards[0]) cJSON_AddStringToObject(j, "shards", d->shards);
    char* s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

void trained_data_fill(TrainedData* d, const TrainedData* o) {
    if (d->chat_template < 0 && o->chat_template >= 0) {
        d->chat_template = o->chat_template;
        snprintf(d->template_from, sizeof d->template_from, "%s", o->template_from);
    }
    if (!d->has_prep && o->has_prep) {
        d->has_prep = 1;
        d->prep = o->prep;
        snprintf(d->prep_from, sizeof d->prep_from, "%s", o->prep_from);
    }
    if (!d->has_hash && o->has_hash) {
        d->has_hash = 1;
        d->tokenizer_hash = o->tokenizer_hash;
        snprintf(d->hash_from, sizeof d->hash_from, "%s", o->hash_from);
        if (!d->tokenizer[0]) snprintf(d->tokenizer, sizeof d->tokenizer, "%s", o->tokenizer);
    }
    if (d->image_token < 0 && o->image_token >= 0) {
        d->image_token = o->image_token;
        snprintf(d->image_from, sizeof d->image_from, "%s", o->image_from);
    }
    if (!d->shards[0]) snprintf(d->shards, sizeof d->shards, "%s", o->shards);
}

int trained_check_tokenizer(const TrainedData* d, const char* path, const Tokenizer* tok, char* err, size_t err_len) {
    uint64_t h = tokenizer_hash(tok);
    if (d->has_hash && h != d->tokenizer_hash) {
        char was[RECIPE_STR + 32] = "";
        if (d->tokenizer[0]) snprintf(was, sizeof was, ", tokenizer %s", d->tokenizer);
        snprintf(err, err_len, "data.tokenizer %s (hash %016" PRIx64 ") is not the tokenizer the model's data was "
                 "tokenized with: %s records hash %016" PRIx64 "%s\n---> HINT: set data.tokenizer to that tokenizer "
                 "(a tokenizer retrained or edited at the same path gives other ids)", path, h, d->hash_from,
                 d->tokenizer_hash, was);
        return -1;
    }
    int id = tokenizer_token_id(tok, "<image>");
    if (d->image_token >= 0 && id >= 0 && id != d->image_token) {
        snprintf(err, err_len, "data.tokenizer %s has <image> at id %d, but %s records id %d for it: not the model's "
                 "tokenizer", path, id, d->image_from, d->image_token);
        return -1;
    }
    return 0;
}

int trained_check_recipe_tokenizer(const Recipe* r, const char* dir, char* err, size_t err_len) {
    TrainedData d;
    if (trained_data_of_checkpoint(dir, &d, err, err_len) != 0) return -1;
    if (!d.has_hash && d.image_token < 0) return 0;
    Tokenizer* tok = tokenizer_load(r->tokenizer, err, err_len);
    if (!tok) return -1;
    int rc = trained_check_tokenizer(&d, r->tokenizer, tok, err, err_len);
    tokenizer_free(tok);
    return rc;
}

int trained_check_shards(const TrainedData* m, const TrainedData* s, const char* key, char* err, size_t err_len) {
    if (m->chat_template >= 0 && s->chat_template >= 0 && m->chat_template != s->chat_template) {
        snprintf(err, err_len, "data.%s %s was packed with --template %s, but the model was trained on --template %s "
                 "data (%s)\n---> HINT: pack the held-out manifest with --template %s", key, s->template_from,
                 template_name((TemplateKind)s->chat_template), template_name((TemplateKind)m->chat_template),
                 m->template_from, template_name((TemplateKind)m->chat_template));
        return -1;
    }
    if (m->has_prep && s->has_prep && (m->prep.kind != s->prep.kind || m->prep.size != s->prep.size ||
                                       memcmp(&m->prep.pins, &s->prep.pins, sizeof m->prep.pins) != 0)) {
        snprintf(err, err_len, "data.%s %s was packed with --image-preprocess %s (size %d), but the model was trained "
                 "on --image-preprocess %s (size %d) data (%s)\n---> HINT: pack the held-out manifest as the training "
                 "data was", key, s->prep_from, image_prep_name(s->prep.kind), s->prep.size, image_prep_name(m->prep.kind),
                 m->prep.size, m->prep_from);
        return -1;
    }
    return 0;
}

int trained_checkpoint_dir(const Recipe* r, const char* ckpt, char* out, size_t out_len, char* err, size_t err_len) {
    if (strcmp(ckpt, "latest") != 0 && strcmp(ckpt, "auto") != 0) {
        snprintf(out, out_len, "%s", ckpt);
        return 0;
    }
    char root[RECIPE_STR + 32];
    if (r->ckpt_dir[0]) snprintf(root, sizeof root, "%s", r->ckpt_dir);
    else snprintf(root, sizeof root, "%s/checkpoints", r->run_dir);
    char e[1024];
    if (rundir_latest(r->run_dir, root, out, out_len, e, sizeof e) != 0) {
        snprintf(err, err_len, "checkpoint %s: %s", ckpt, e);
        return -1;
    }
    return 0;
}

static const RecipeKey* trained_key(const char* section, const char* key) {
    for (int i = 0; i < recipe_key_count(); i++) {
        const RecipeKey* k = recipe_key_get(i);
        if (!strcmp(k->section, section) && !strcmp(k->key, key)) return k;
    }
    return NULL;
}

int trained_has_keys(const char* dir) {
    char path[RECIPE_STR + 64], e[256];
    cJSON* j = trained_state(dir, path, sizeof path, e, sizeof e);
    int has = j && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "recipe"));
    cJSON_Delete(j);
    return has;
}

int trained_apply_keys(Recipe* r, const char* dir, const char* why, char* err, size_t err_len) {
    char path[RECIPE_STR + 64];
    cJSON* j = trained_state(dir, path, sizeof path, err, err_len);
    if (!j) return -1;
    const cJSON* keys = cJSON_GetObjectItemCaseSensitive(j, "recipe");
    if (!keys || cJSON_IsNull(keys)) {
        cJSON_Delete(j);
        return 0;
    }
    int rc = 0, taken = 0;
    if (!cJSON_IsObject(keys) || cJSON_GetArraySize(keys) > RECIPE_MAX_KEYS) {
        snprintf(err, err_len, "%s: malformed \"recipe\" (an object of at most %d \"section.key\": \"value\")", path,
                 RECIPE_MAX_KEYS);
        rc = -1;
    }
    Recipe* ck = mallocCheck(sizeof *ck);
    char origin[RECIPE_STR + 96];
    snprintf(origin, sizeof origin, "%s (%s)", path, why);
    for (const cJSON* x = rc == 0 ? keys->child : NULL; x && rc == 0; x = x->next) {
        char section[16] = "", key[64] = "", set[RECIPE_STR + 96], mine[RECIPE_STR + 16], theirs[RECIPE_STR + 16];
        const char* dot = x->string ? strchr(x->string, '.') : NULL;
        const RecipeKey* k = NULL;
        if (dot && (size_t)(dot - x->string) < sizeof section && strlen(dot + 1) < sizeof key) {
            memcpy(section, x->string, (size_t)(dot - x->string));
            memcpy(key, dot + 1, strlen(dot + 1) + 1);
            k = trained_key(section, key);
        }
        if (!k || (strcmp(section, "model") && strcmp(section, "data") && strcmp(section, "lora")) || !cJSON_IsString(x) ||
            strlen(x->valuestring) >= RECIPE_STR || strchr(x->valuestring, '\n')) {
            snprintf(err, err_len, "%s: \"recipe\" entry \"%.80s\" is not a model, lora or data key with a value as text", path,
                     x->string ? x->string : "?");
            rc = -1;
            break;
        }
        snprintf(set, sizeof set, "%s.%s=%s", section, key, x->valuestring);
        *ck = *r;
        char e[1024];
        if (recipe_set(ck, set, e, sizeof e) != 0) {
            snprintf(err, err_len, "%s: \"recipe\": %s", path, e);
            rc = -1;
            break;
        }
        recipe_key_format(r, k, mine, sizeof mine);
        recipe_key_format(ck, k, theirs, sizeof theirs);
        const char* o = recipe_origin(r, section, key);
        int is_default = !strcmp(o, "default");
        int same = !strcmp(mine, theirs);
        if (!same && !strcmp(section, "model") && !strcmp(key, "text_kv_heads")) /* 0 = text_heads */
            same = (r->text_kv_heads ? r->text_kv_heads : r->text_heads) ==
                   (ck->text_kv_heads ? ck->text_kv_heads : ck->text_heads);
        if (same && !is_default) continue; /* the recipe says the same */
        if (is_default || (!strcmp(section, "model") && !strcmp(key, "vocab") && r->vocab == 0)) {
            if (recipe_set_derived(r, set, origin, e, sizeof e) != 0) {
                snprintf(err, err_len, "%s: \"recipe\": %s", path, e);
                rc = -1;
            }
            taken++;
            continue;
        }
        if (!strcmp(section, "data")) continue; /* the data is the recipe's business */
        snprintf(err, err_len, "%s: %s.%s = %s, but %s is a model with %s.%s = %s (%s \"recipe\"): a recipe that "
                 "reads this checkpoint (%s) agrees with it on every model key\n---> HINT: remove %s.%s from the "
                 "recipe (the checkpoint's value is then taken), or read another checkpoint", o, section, key, mine,
                 dir, section, key, theirs, path, why, section, key);
        rc = -1;
    }
    free(ck);
    cJSON_Delete(j);
    if (rc == 0 && taken > 0 && recipe_validate(r, err, err_len) != 0) rc = -1;
    return rc == 0 ? taken : -1;
}

int trained_apply_model_keys(Recipe* r, const char* dir, const char* why, char* err, size_t err_len) {
    if (trained_has_keys(dir) || !r->init_from[0] || !trained_has_keys(r->init_from))
        return trained_apply_keys(r, dir, why, err, err_len);
    return trained_apply_keys(r, r->init_from, "train.init_from", err, err_len);
}

void trained_free_names(char** names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

int trained_absent_tensors(const char* dir, char*** names, int* n, char* err, size_t err_len) {
    *names = NULL;
    *n = 0;
    char path[RECIPE_STR + 64];
    cJSON* j = trained_state(dir, path, sizeof path, err, err_len);
    if (!j) return -1;
    const cJSON* a = cJSON_GetObjectItemCaseSensitive(j, "absent");
    int rc = 0;
    if (a && !cJSON_IsNull(a)) {
        int m = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
        if (m < 0 || m > 1 << 20) {
            snprintf(err, err_len, "%s: malformed \"absent\" (a list of tensor names)", path);
            rc = -1;
        }
        if (rc == 0 && m > 0) *names = callocCheck((size_t)m, sizeof(char*));
        for (const cJSON* x = rc == 0 ? a->child : NULL; x && rc == 0; x = x->next) {
            if (!cJSON_IsString(x) || strlen(x->valuestring) >= 160) {
                snprintf(err, err_len, "%s: malformed \"absent\" entry (a tensor name)", path);
                rc = -1;
                break;
            }
            (*names)[(*n)++] = strdup(x->valuestring);
        }
        if (rc != 0) {
            trained_free_names(*names, *n);
            *names = NULL;
            *n = 0;
        }
    }
    cJSON_Delete(j);
    return rc;
}
