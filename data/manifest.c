/* manifest.c — LLaVA manifest parsing (JSON array or JSONL, with the line of every record) and the
 * prompt template (see manifest.h). */
#include "data/manifest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/template.h"
#include "engine/util.h"

static const char* REJECT_NAMES[REJECT_N] = {
    "ok",           "bad_json",     "not_object",    "no_conversations", "empty_conversation", "bad_turn",
    "no_answer",    "bad_image_field", "image_tokens", "missing_image",   "bad_image",          "too_long",
    "outside_images"};

const char* reject_reason_name(RejectReason r) { return r >= 0 && r < REJECT_N ? REJECT_NAMES[r] : "?"; }

static void line_col(const char* text, size_t off, int* line, int* col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') l++, c = 1;
        else c++;
    }
    *line = l;
    *col = c;
}

/* Lines of the top-level elements of a JSON array that cJSON accepted: a small scanner that tracks
 * nesting and strings. Returns the number of elements found (<= cap). */
static int array_element_lines(const char* t, size_t n, int* lines, int cap) {
    int depth = 0, in_str = 0, esc = 0, line = 1, k = 0, expect = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = t[i];
        if (ch == '\n') line++;
        if (in_str) {
            if (esc) esc = 0;
            else if (ch == '\\') esc = 1;
            else if (ch == '"') in_str = 0;
            continue;
        }
        if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n') continue;
        if (depth == 1 && expect && ch != ']') {
            if (k < cap) lines[k] = line;
            k++;
            expect = 0;
        }
        if (ch == '"') in_str = 1;
        else if (ch == '[' || ch == '{') {
            depth++;
            if (depth == 1) expect = 1;
        } else if (ch == ']' || ch == '}') depth--;
        else if (ch == ',' && depth == 1) expect = 1;
    }
    return k;
}

int manifest_parse(const char* text, size_t len, const char* name, Manifest* m, char* err, size_t err_len) {
    return manifest_parse_capped(text, len, name, MANIFEST_MAX_LINES, m, err, err_len);
}

int manifest_parse_capped(const char* text, size_t len, const char* name, int64_t max_lines, Manifest* m, char* err,
                          size_t err_len) {
    memset(m, 0, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s", name);
    /* A UTF-8 byte-order mark (written by some Windows editors and .NET) is not part of the JSON; left
     * in, it hid the '[' of an array, which was then read as JSONL with most records lost. Lines and
     * columns are counted after it, as an editor shows them. */
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) text += 3, len -= 3;
    /* every line number below (and the JSONL form's record count) is an int: a file of more lines is refused
     * first (16 GiB of newlines, RR_MAX_MANIFEST, are 8 times INT_MAX) */
    int64_t lines = len > 0; /* an editor's count: a final newline starts no line */
    for (const char* p = text; (p = memchr(p, '\n', (size_t)(text + len - p))) != NULL;)
        if (++p < text + len) lines++;
    if (lines > max_lines) {
        snprintf(err, err_len, "%s: more than %lld lines: a manifest holds at most %lld (split it into several)", name,
                 (long long)max_lines, (long long)max_lines);
        return -1;
    }
    size_t i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) i++;
    if (i < len && text[i] == '[') {
        const char* end = NULL;
        cJSON* root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
        size_t off = len;
        const char* what = "invalid JSON";
        if (!root) {
            const char* ep = cJSON_GetErrorPtr();
            if (ep && ep >= text && ep <= text + len) off = (size_t)(ep - text);
        } else if (!cJSON_IsArray(root)) {
            off = i;
            what = "not a JSON array";
        } else if (end) { /* only white space may follow the array */
            while (end < text + len && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')) end++;
            if (end != text + len) {
                off = (size_t)(end - text);
                what = "unexpected bytes after the array";
            }
        }
        if (off != len || !root) {
            int line, col;
            line_col(text, off, &line, &col);
            snprintf(err, err_len, "%s:%d:%d: %s (the manifest starts with '[' so it must be one JSON array "
                     "of records)", name, line, col, what);
            cJSON_Delete(root);
            return -1;
        }
        int n = cJSON_GetArraySize(root);
        int* lines = callocCheck((size_t)n + 1, sizeof(int));
        array_element_lines(text, len, lines, n);
        m->root = root;
        m->n = n;
        m->recs = callocCheck((size_t)n + 1, sizeof(ManifestRecord));
        int k = 0;
        for (cJSON* it = root->child; it && k < n; it = it->next, k++) {
            m->recs[k].rec = it;
            m->recs[k].line = lines[k] ? lines[k] : 1;
        }
        free(lines);
        return 0;
    }
    /* JSONL: each non-blank line is one record */
    int cap = 64, n = 0, line = 1;
    m->recs = callocCheck((size_t)cap, sizeof(ManifestRecord));
    size_t p = 0;
    while (p < len) {
        size_t q = p;
        while (q < len && text[q] != '\n') q++;
        size_t a = p, b = q;
        while (a < b && (text[a] == ' ' || text[a] == '\t' || text[a] == '\r')) a++;
        while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\t' || text[b - 1] == '\r')) b--;
        if (b > a) {
            if (n == cap) { /* n < lines <= INT_MAX - 1: a cap of INT_MAX holds them */
                cap = cap > INT_MAX / 2 ? INT_MAX : cap * 2;
                m->recs = reallocCheck(m->recs, sizeof(ManifestRecord) * (size_t)cap);
            }
            ManifestRecord* r = &m->recs[n++];
            memset(r, 0, sizeof *r);
            r->line = line;
            const char* end = NULL;
            r->rec = cJSON_ParseWithLengthOpts(text + a, b - a, &end, 0);
            if (r->rec && end && end != text + b) {
                /* trailing bytes after a complete value (cJSON stops at the end of the value) */
                while (end < text + b && (*end == ' ' || *end == '\t')) end++;
                if (end != text + b) {
                    cJSON_Delete(r->rec);
                    r->rec = NULL;
                }
            }
            if (!r->rec) {
                const char* ep = end ? end : cJSON_GetErrorPtr();
                int col = ep && ep >= text + a && ep <= text + b ? (int)(ep - (text + a)) + 1 : 1;
                char buf[256];
                snprintf(buf, sizeof buf, "invalid JSON at column %d", col);
                r->json_err = strdup(buf);
            }
        }
        line++;
        p = q + 1;
    }
    m->n = n;
    return 0;
}

int manifest_load(const char* path, Manifest* m, char* err, size_t err_len) {
    size_t len;
    char* text = rr_read_file_err(path, &len, RR_MAX_MANIFEST, "a JSON or JSONL manifest file", err, err_len,
                                  "cannot read manifest '%s': %s");
    if (!text) return -1;
    int rc = manifest_parse(text, len, path, m, err, err_len);
    free(text);
    return rc;
}

void manifest_free(Manifest* m) {
    if (m->root) cJSON_Delete(m->root);
    else
        for (int i = 0; i < m->n; i++) cJSON_Delete(m->recs[i].rec);
    for (int i = 0; i < m->n; i++) free(m->recs[i].json_err);
    free(m->recs);
    memset(m, 0, sizeof *m);
}

/* ---- one record ------------------------------------------------------------------------------------ */

typedef struct {
    int32_t* ids;
    uint8_t* mask;
    int n, cap;
} TokBuf;

static void tokbuf_push(TokBuf* b, const int32_t* ids, int n, uint8_t m) {
    if (b->n + n > b->cap) {
        while (b->n + n > b->cap) b->cap = b->cap ? 2 * b->cap : 256;
        b->ids = reallocCheck(b->ids, sizeof(int32_t) * (size_t)b->cap);
        b->mask = reallocCheck(b->mask, (size_t)b->cap);
    }
    memcpy(b->ids + b->n, ids, sizeof(int32_t) * (size_t)n);
    memset(b->mask + b->n, m, (size_t)n);
    b->n += n;
}

static int tokbuf_push_text(TokBuf* b, const Tokenizer* tok, const char* text, uint8_t m) {
    int32_t* ids = NULL;
    int n = tokenizer_encode(tok, text, strlen(text), &ids);
    if (n > 0) tokbuf_push(b, ids, n, m);
    free(ids);
    return n;
}

/* Upper bound on a sample's tokens: an index entry stores counts as u32, and a sample must fit a
 * microbatch anyway; 1<<24 keeps every derived count well inside int. */
#define MANIFEST_MAX_TOKENS (1 << 24)

RejectReason manifest_sample_build(const cJSON* rec, int line, const Tokenizer* tok, int image_id, int eot_id,
                                   ManifestSample* s, char* why, size_t why_len) {
    return manifest_sample_build_template(rec, line, tok, TEMPLATE_RRFP, image_id, eot_id, s, why, why_len);
}

/* A LLaVA template's segments, tokenized one after the other (tokenizer_encode_continue: as if the text
 * were encoded whole), the supervised ones masked 1. */
static void tokbuf_push_segs(TokBuf* b, const Tokenizer* tok, TemplateKind k, const TemplateSegs* sg) {
    int bos = template_bos_id(k, tok), prev = -1; /* the BOS is the tokenizer's addition, not text */
    if (bos >= 0) tokbuf_push(b, &bos, 1, 0);
    for (int i = 0; i < sg->n; i++) {
        int32_t* ids = NULL;
        int n = tokenizer_encode_continue(tok, sg->seg[i].text, sg->seg[i].len, prev, &ids);
        if (n > 0) {
            tokbuf_push(b, ids, n, (uint8_t)sg->seg[i].supervised);
            prev = ids[n - 1];
        }
        free(ids);
    }
}

/* The tokens b[start, n) just pushed: an image token in an answer (is_answer 1; -1: the tokens' own mask says) is
 * refused (turn t, or -1: no turn named), the others counted into *image_tokens; b over MANIFEST_MAX_TOKENS is
 * refused. b is freed when refused. */
static RejectReason tokbuf_check(TokBuf* b, int start, int is_answer, int t, int image_id, int* image_tokens, char* why,
                                 size_t why_len) {
    for (int i = start; i < b->n; i++)
        if (b->ids[i] == image_id) {
            if (is_answer < 0 ? b->mask[i] != 0 : is_answer != 0) {
                if (t >= 0) snprintf(why, why_len, "turn %d: a \"gpt\" turn contains <image>", t);
                else snprintf(why, why_len, "a \"gpt\" turn contains <image>");
                free(b->ids), free(b->mask);
                return REJECT_IMAGE_TOKENS;
            }
            (*image_tokens)++;
        }
    if (b->n > MANIFEST_MAX_TOKENS) {
        snprintf(why, why_len, "more than %d tokens", MANIFEST_MAX_TOKENS);
        free(b->ids), free(b->mask);
        return REJECT_TOO_LONG;
    }
    return REJECT_NONE;
}

RejectReason manifest_sample_build_template(const cJSON* rec, int line, const Tokenizer* tok, int tmpl_kind,
                                            int image_id, int eot_id, ManifestSample* s, char* why, size_t why_len) {
    TemplateKind tmpl = (TemplateKind)tmpl_kind;
    RR_ASSERT(tmpl >= 0 && tmpl < TEMPLATE_N);
    memset(s, 0, sizeof *s);
    if (!cJSON_IsObject(rec)) {
        snprintf(why, why_len, "the record is not a JSON object");
        return REJECT_NOT_OBJECT;
    }
    const cJSON* id = cJSON_GetObjectItemCaseSensitive(rec, "id");
    if (cJSON_IsString(id)) snprintf(s->id, sizeof s->id, "%s", id->valuestring);
    else if (cJSON_IsNumber(id)) snprintf(s->id, sizeof s->id, "%.17g", id->valuedouble);
    else snprintf(s->id, sizeof s->id, "line-%d", line);

    const cJSON* img = cJSON_GetObjectItemCaseSensitive(rec, "image");
    if (cJSON_IsString(img)) {
        s->images[s->n_images++] = img->valuestring;
    } else if (cJSON_IsArray(img)) {
        for (const cJSON* it = img->child; it; it = it->next) {
            if (!cJSON_IsString(it)) {
                snprintf(why, why_len, "\"image\" must be a file name or an array of file names");
                return REJECT_BAD_IMAGE_FIELD;
            }
            if (s->n_images == MANIFEST_MAX_IMAGES) {
                snprintf(why, why_len, "more than %d images in one record", MANIFEST_MAX_IMAGES);
                return REJECT_BAD_IMAGE_FIELD;
            }
            s->images[s->n_images++] = it->valuestring;
        }
    } else if (img && !cJSON_IsNull(img)) {
        snprintf(why, why_len, "\"image\" must be a file name or an array of file names");
        return REJECT_BAD_IMAGE_FIELD;
    }
    for (int i = 0; i < s->n_images; i++)
        if (!s->images[i][0]) {
            snprintf(why, why_len, "\"image\" %d is an empty file name", i);
            return REJECT_BAD_IMAGE_FIELD;
        }

    const cJSON* conv = cJSON_GetObjectItemCaseSensitive(rec, "conversations");
    if (!cJSON_IsArray(conv)) {
        snprintf(why, why_len, "\"conversations\" is %s, expected an array of turns", conv ? "not an array" : "missing");
        return REJECT_NO_CONVERSATIONS;
    }
    if (!conv->child) {
        snprintf(why, why_len, "\"conversations\" is empty");
        return REJECT_EMPTY_CONVERSATION;
    }
    int t = 0, answers = 0;
    for (const cJSON* turn = conv->child; turn; turn = turn->next, t++) {
        const cJSON* from = cJSON_GetObjectItemCaseSensitive(turn, "from");
        const cJSON* value = cJSON_GetObjectItemCaseSensitive(turn, "value");
        if (!cJSON_IsObject(turn) || !cJSON_IsString(from) || !cJSON_IsString(value)) {
            snprintf(why, why_len, "turn %d: expected {\"from\": \"human\"|\"gpt\", \"value\": \"...\"}", t);
            return REJECT_BAD_TURN;
        }
        const char* f = from->valuestring;
        if (strcmp(f, "human") && strcmp(f, "user") && strcmp(f, "gpt") && strcmp(f, "assistant")) {
            snprintf(why, why_len, "turn %d: \"from\" is \"%.40s\", expected \"human\" or \"gpt\"", t, f);
            return REJECT_BAD_TURN;
        }
        answers += !strcmp(f, "gpt") || !strcmp(f, "assistant");
    }
    if (!answers) {
        snprintf(why, why_len, "no \"gpt\" turn: nothing to learn from this record");
        return REJECT_NO_ANSWER;
    }

    TokBuf b = {0};
    int image_tokens = 0;
    if (tmpl != TEMPLATE_RRFP) {
        TemplateSegs sg;
        RejectReason r = template_render(conv, tmpl, &sg, why, why_len);
        if (r != REJECT_NONE) return r;
        tokbuf_push_segs(&b, tok, tmpl, &sg);
        template_segs_free(&sg);
        RejectReason r2 = tokbuf_check(&b, 0, -1, -1, image_id, &image_tokens, why, why_len);
        if (r2 != REJECT_NONE) return r2;
    }
    t = 0;
    for (const cJSON* turn = conv->child; turn && tmpl == TEMPLATE_RRFP; turn = turn->next, t++) {
        const char* f = cJSON_GetObjectItemCaseSensitive(turn, "from")->valuestring;
        const char* v = cJSON_GetObjectItemCaseSensitive(turn, "value")->valuestring;
        int is_answer = !strcmp(f, "gpt") || !strcmp(f, "assistant");
        size_t vl = strlen(v);
        char* seg = mallocCheck(vl + 32);
        int start = b.n;
        if (is_answer) {
            snprintf(seg, vl + 32, " %s", v);
            tokbuf_push_text(&b, tok, seg, 1);
            tokbuf_push(&b, &eot_id, 1, 1);
        } else {
            snprintf(seg, vl + 32, "%sUSER: %s ASSISTANT:", t ? "\n" : "", v);
            tokbuf_push_text(&b, tok, seg, 0);
        }
        free(seg);
        RejectReason r2 = tokbuf_check(&b, start, is_answer, t, image_id, &image_tokens, why, why_len);
        if (r2 != REJECT_NONE) return r2;
    }
    if (image_tokens != s->n_images) {
        snprintf(why, why_len, "%d image%s in \"image\" but %d <image> token%s in the human turns", s->n_images,
                 s->n_images == 1 ? "" : "s", image_tokens, image_tokens == 1 ? "" : "s");
        free(b.ids), free(b.mask);
        return REJECT_IMAGE_TOKENS;
    }
    s->ids = b.ids;
    s->mask = b.mask;
    s->n_tokens = b.n;
    for (int i = 1; i < b.n; i++) s->n_supervised += b.mask[i];
    return REJECT_NONE;
}

void manifest_sample_free(ManifestSample* s) {
    free(s->ids);
    free(s->mask);
    s->ids = NULL;
    s->mask = NULL;
}
