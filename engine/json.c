/* Capped JSON file reads (json.h). */
#include "json.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

cJSON* rr_read_json(const char* path, size_t max) {
    size_t n;
    char* text = rr_read_file(path, &n, max);
    if (!text) return NULL;
    cJSON* j = rr_json_parse_whole(text, n, NULL);
    free(text);
    errno = 0;
    return j;
}

cJSON* rr_read_json_object(const char* path, size_t max, const char* expected, const char* fmt, char* err,
                           size_t err_len) {
    cJSON* j = rr_read_json(path, max);
    if (!j && errno) {
        int e = errno;
        char why[160];
        if (err && err_len) snprintf(err, err_len, fmt, path, rr_read_file_why(e, expected, why, sizeof why));
        errno = e;
        return NULL;
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        rr_fail(err, err_len, "%s: not a JSON object (or not only one: nothing may follow it)", path);
        errno = 0;
        return NULL;
    }
    return j;
}

int rr_json_u64(const cJSON* j, const char* key, int hex, uint64_t* out) {
    const cJSON* x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsString(x)) return -1;
    const char* v = x->valuestring;
    size_t n = strlen(v);
    if (n == 0 || n > (hex ? 16u : 20u)) return -1;
    for (size_t i = 0; i < n; i++)
        if (!(hex ? isxdigit((unsigned char)v[i]) : isdigit((unsigned char)v[i]))) return -1;
    char* end;
    errno = 0;
    *out = strtoull(v, &end, hex ? 16 : 10);
    return (*end || errno) ? -1 : 0;
}
