/* Capped JSON file reads (json.h). */
#include "json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "util.h"

cJSON* rr_read_json(const char* path, size_t max) {
    size_t n;
    char* text = rr_read_file(path, &n, max);
    if (!text) return NULL;
    cJSON* j = cJSON_ParseWithLength(text, n);
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
        rr_fail(err, err_len, "%s: not a JSON object", path);
        errno = 0;
        return NULL;
    }
    return j;
}
