/* Reading a JSON file from elsewhere: capped, parsed, and a clear message when it is not what was expected. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

/* The JSON in file `path`, read through rr_read_file capped at `max` (engine/util.h) and parsed: the tree
 * (cJSON_Delete it), or NULL with err when
 *   - the file cannot be read: fmt takes two %s, the path then the reason (rr_read_file_why with
 *     `expected`), e.g. "%s: cannot read: %s"; errno stays the read's, so a caller may take ENOENT as
 *     "absent" (err is written all the same);
 *   - the text is not a JSON object: "<path>: not a JSON object", errno 0.
 * err may be NULL (no message). This function can't fail otherwise. */
cJSON* rr_read_json_object(const char* path, size_t max, const char* expected, const char* fmt, char* err,
                           size_t err_len);

/* The one JSON value that text[0..n) holds, or NULL when it does not parse or when anything but whitespace
 * (a second value, a NUL byte, garbage) follows it: a file with something after its JSON is damaged, not
 * read in part (cJSON_ParseWithLength stops after the first value). *bad_at (may be NULL) is then the
 * offset of the fault: cJSON's error position, or the first byte after the value. A UTF-8 byte-order mark
 * at the start is skipped, as cJSON does. Inline: the tokenizer, built alone into its fuzz target, uses it. */
static inline cJSON* rr_json_parse_whole(const char* text, size_t n, size_t* bad_at) {
    const char* end = NULL;
    cJSON* j = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!j) {
        const char* at = cJSON_GetErrorPtr();
        if (bad_at) *bad_at = at && at >= text && at <= text + n ? (size_t)(at - text) : 0;
        return NULL;
    }
    size_t i = end && end >= text && end <= text + n ? (size_t)(end - text) : n;
    while (i < n && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) i++;
    if (i < n) {
        cJSON_Delete(j);
        if (bad_at) *bad_at = i;
        return NULL;
    }
    return j;
}

/* The same without a message or the object check: the parsed JSON value of the file, or NULL when it
 * cannot be read (errno set) or does not parse (errno 0). */
cJSON* rr_read_json(const char* path, size_t max);

/* Member `key` of object j, a 64-bit value stored as a string of digits (JSON numbers are doubles): hex (1 to
 * 16 hex digits) or decimal (1 to 20 digits), nothing else, into *out. Returns 0, or -1 when absent or
 * malformed. */
int rr_json_u64(const cJSON* j, const char* key, int hex, uint64_t* out);
