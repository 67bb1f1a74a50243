/* tokenizer_edit.c — special tokens added to a tokenizer.json's text (see tokenizer.h,
 * tokenizer_json_add_special): `rrfp-mm tokenizer add-special` and `export hf --add-image-token`. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json.h"
#include "engine/util.h"
#include "text/tokenizer.h"

static char* te_fail(char* err, size_t err_len, const char* fmt, ...) RR_PRINTF(3, 4);
static char* te_fail(char* err, size_t err_len, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return NULL;
}

/* The added_tokens entry of content c in array at, or NULL. */
static cJSON* te_entry(cJSON* at, const char* c) {
    cJSON* e;
    cJSON_ArrayForEach(e, at) {
        const cJSON* x = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (cJSON_IsString(x) && !strcmp(x->valuestring, c)) return e;
    }
    return NULL;
}

char* tokenizer_json_add_special(const char* json, size_t len, const char* name, const char* const* tokens, int n,
                                 int first_id, int* ids, int* added, char* err, size_t err_len) {
    for (int i = 0; i < n; i++) {
        if (!tokens[i][0]) return te_fail(err, err_len, "an empty token cannot be added");
        for (int j = 0; j < i; j++)
            if (!strcmp(tokens[i], tokens[j])) return te_fail(err, err_len, "\"%s\" is given twice", tokens[i]);
    }
    /* the file as the engine reads it: its ids are the ones HF gives on load */
    Tokenizer* tok = tokenizer_load_json(json, len, name, err, err_len);
    if (!tok) return NULL;
    cJSON* root = rr_json_parse_whole(json, len, NULL);
    RR_ASSERT(root); /* the loader parsed it */
    cJSON* at = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!at || cJSON_IsNull(at)) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "added_tokens");
        at = cJSON_AddArrayToObject(root, "added_tokens");
    }
    int next = first_id >= 0 ? first_id : tokenizer_vocab_size(tok);
    for (int i = 0; i < n; i++) {
        int have = tokenizer_token_id(tok, tokens[i]);
        added[i] = 0;
        ids[i] = have;
        if (have >= 0 && te_entry(at, tokens[i])) continue; /* an added token already: kept as it is */
        /* a token of the vocabulary keeps its id (HF's rule); a new one takes the next id */
        if (have < 0) ids[i] = next++;
        cJSON* e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "id", ids[i]);
        cJSON_AddStringToObject(e, "content", tokens[i]);
        cJSON_AddFalseToObject(e, "single_word");
        cJSON_AddFalseToObject(e, "lstrip");
        cJSON_AddFalseToObject(e, "rstrip");
        cJSON_AddFalseToObject(e, "normalized");
        cJSON_AddTrueToObject(e, "special");
        cJSON_AddItemToArray(at, e);
        added[i] = 1;
    }
    tokenizer_free(tok);
    char* out = cJSON_Print(root);
    cJSON_Delete(root);
    /* loaded back: each token must have the id written (what HF gives the entry on load) */
    char lerr[512];
    Tokenizer* back = tokenizer_load_json(out, strlen(out), name, lerr, sizeof lerr);
    if (!back) {
        free(out);
        return te_fail(err, err_len, "%s with the tokens added does not load: %s", name, lerr);
    }
    for (int i = 0; i < n; i++) {
        int got = tokenizer_token_id(back, tokens[i]);
        if (got != ids[i]) {
            tokenizer_free(back);
            free(out);
            return te_fail(err, err_len, "%s: \"%s\" written with id %d loads as id %d (Hugging Face gives an added token "
                           "the next id after the vocabulary and the added tokens, %d here)", name, tokens[i], ids[i],
                           got, got);
        }
    }
    tokenizer_free(back);
    return out;
}
