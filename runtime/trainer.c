/* trainer.c — single-process training loop (see trainer.h). */
#include "runtime/trainer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"

int trainer_tokenizer_vocab(const Recipe* r, char* err, size_t err_len) {
    size_t n;
    char* js = rr_read_file(r->tokenizer, &n);
    if (!js) {
        snprintf(err, err_len, "model.vocab = 0 takes the vocabulary from data.tokenizer, but '%s' cannot be read: %s",
                 r->tokenizer, strerror(errno));
        return -1;
    }
    cJSON* root = cJSON_ParseWithLength(js, n);
    free(js);
    cJSON* model = root ? cJSON_GetObjectItemCaseSensitive(root, "model") : NULL;
    cJSON* vocab = model ? cJSON_GetObjectItemCaseSensitive(model, "vocab") : NULL;
    if (!cJSON_IsObject(vocab)) {
        snprintf(err, err_len, "%s: not a tokenizer.json (no model.vocab object)", r->tokenizer);
        cJSON_Delete(root);
        return -1;
    }
    int max_id = -1;
    for (cJSON* t = vocab->child; t; t = t->next)
        if (cJSON_IsNumber(t) && t->valueint > max_id) max_id = t->valueint;
    cJSON* added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    for (cJSON* t = added ? added->child : NULL; t; t = t->next) {
        cJSON* id = cJSON_GetObjectItemCaseSensitive(t, "id");
        if (cJSON_IsNumber(id) && id->valueint > max_id) max_id = id->valueint;
    }
    cJSON_Delete(root);
    return max_id + 1;
}

int trainer_run(const Recipe* r, FILE* log) {
    (void)log;
    fprintf(stderr, "rrfp-mm: error: %s: training is not available in this build yet (the model stages and the "
                    "loader have not landed); use --dry-run\n", r->path);
    return 1;
}
