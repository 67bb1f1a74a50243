/* template.c — LLaVA's chat templates (see template.h): a record's turns as the text LLaVA's training
 * code builds, cut into segments that are or are not supervised, then tokenized segment by segment. */
#include "data/template.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"

static const char* TEMPLATE_NAMES[TEMPLATE_N] = {"rrfp", "vicuna_v1", "llama_3", "chatml", "plain"};

/* The system prompts of LLaVA's templates (LLaVA's llava/conversation.py: conv_vicuna_v1; LLaVA-NeXT's:
 * conv_llava_llama_3 / preprocess_llama3's default, conv_qwen / preprocess_qwen's default). */
#define SYSTEM_VICUNA_V1                                                                                     \
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, " \
    "detailed, and polite answers to the user's questions."
#define SYSTEM_LLAMA_3                                                                                       \
    "You are a helpful language and vision assistant. You are able to understand the visual content that " \
    "the user provides, and assist the user with a variety of tasks using natural language."
#define SYSTEM_CHATML "You are a helpful assistant."

int template_parse(const char* name, TemplateKind* k) {
    for (int i = 0; i < TEMPLATE_N; i++)
        if (!strcmp(name, TEMPLATE_NAMES[i])) {
            *k = (TemplateKind)i;
            return 0;
        }
    return -1;
}

const char* template_name(TemplateKind k) { return k >= 0 && k < TEMPLATE_N ? TEMPLATE_NAMES[k] : "?"; }

/* The beginning-of-sequence token vicuna_v1 and plain start with: what LLaVA's tokenizer adds (Llama's
 * <s>, Llama-3's <|begin_of_text|>), none for a tokenizer without either (GPT-2 style, Qwen2). */
static int template_bos(const Tokenizer* tok) {
    int id = tokenizer_token_id(tok, "<s>");
    return id >= 0 ? id : tokenizer_token_id(tok, "<|begin_of_text|>");
}

int template_check_tokenizer(TemplateKind k, const Tokenizer* tok, char* err, size_t err_len) {
    static const char* need[TEMPLATE_N][5] = {
        {"<image>", "<|endoftext|>"},
        {"<image>", "</s>"},
        {"<image>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
        {"<image>", "<|im_start|>", "<|im_end|>"},
        {"<image>"},
    };
    /* every missing one, for the command that adds them (`rrfp-mm tokenizer add-special`) */
    char missing[160] = "";
    const char* first = NULL;
    for (int i = 0; i < 5 && need[k][i]; i++)
        if (tokenizer_token_id(tok, need[k][i]) < 0) {
            if (!first) first = need[k][i];
            size_t at = strlen(missing);
            snprintf(missing + at, sizeof missing - at, "%s%s", at ? "," : "", need[k][i]);
        }
    if (first) {
        snprintf(err, err_len, "the tokenizer has no %s token, which the %s template needs (missing: %s)%s; to add them as "
                 "special tokens after the vocabulary: rrfp-mm tokenizer add-special --tokenizer IN --add \"%s\" --out OUT "
                 "(the model's vocabulary then needs their rows: model.vocab)", first, template_name(k), missing,
                 k == TEMPLATE_RRFP ? " (`rrfp-mm tokenizer train` adds <image> and <|endoftext|>; a published LLaVA's "
                                      "tokenizer goes with --template vicuna_v1, llama_3 or chatml)"
                                    : "",
                 missing);
        return -1;
    }
    for (int i = 0; i < 5 && need[k][i]; i++) {
        int id = tokenizer_token_id(tok, need[k][i]);
        /* the manifest's text names it: it must encode as that one token (an added token), not be split */
        int32_t* ids = NULL;
        int n = tokenizer_encode(tok, need[k][i], strlen(need[k][i]), &ids);
        int one = n == 1 && ids[0] == id;
        free(ids);
        if (!one) {
            snprintf(err, err_len, "the tokenizer has %s in its vocabulary (id %d) but encodes the text \"%s\" as %d "
                     "token%s, not that one: it is not among the tokenizer.json's \"added_tokens\", so every %s in a "
                     "manifest would be split; the %s template needs it whole. To add it: an entry {\"id\": %d, "
                     "\"content\": \"%s\", \"special\": true} in \"added_tokens\"%s", need[k][i], id, need[k][i], n,
                     n == 1 ? "" : "s", need[k][i], template_name(k), id, need[k][i],
                     !strcmp(need[k][i], "<image>") ? ", or a tokenizer from `rrfp-mm tokenizer train`, which has it" : "");
            return -1;
        }
    }
    return 0;
}

void template_segs_free(TemplateSegs* s) {
    for (int i = 0; i < s->n; i++) free(s->seg[i].text);
    free(s->seg);
    memset(s, 0, sizeof *s);
}

/* Append text (n bytes) to the segment list with the given supervision, joining it to the last segment
 * when that has the same one. */
static void segs_add(TemplateSegs* s, const char* text, size_t n, int supervised) {
    if (n == 0) return;
    if (s->n > 0 && s->seg[s->n - 1].supervised == supervised) {
        TemplateSeg* g = &s->seg[s->n - 1];
        g->text = reallocCheck(g->text, g->len + n + 1);
        memcpy(g->text + g->len, text, n);
        g->len += n;
        g->text[g->len] = 0;
        return;
    }
    s->seg = reallocCheck(s->seg, sizeof(TemplateSeg) * (size_t)(s->n + 1));
    TemplateSeg* g = &s->seg[s->n++];
    g->text = mallocCheck(n + 1);
    memcpy(g->text, text, n);
    g->text[n] = 0;
    g->len = n;
    g->supervised = supervised;
}
static void segs_str(TemplateSegs* s, const char* text, int supervised) { segs_add(s, text, strlen(text), supervised); }

/* Python's str.strip() (ASCII white space and the Unicode ones LLaVA's data has: Jinja's trim is the same) */
static int is_ws(const char* p, size_t n, size_t* k) {
    static const char* uni[] = {"\xC2\x85", "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\xA8", "\xE2\x80\xA9"};
    if (n >= 1 && (*p == ' ' || (*p >= '\t' && *p <= '\r') || (*p >= 0x1C && *p <= 0x1F))) {
        *k = 1;
        return 1;
    }
    for (size_t i = 0; i < sizeof uni / sizeof uni[0]; i++) {
        size_t m = strlen(uni[i]);
        if (n >= m && !memcmp(p, uni[i], m)) {
            *k = m;
            return 1;
        }
    }
    if (n >= 3 && (uint8_t)p[0] == 0xE2 && (uint8_t)p[1] == 0x80 && (uint8_t)p[2] >= 0x80 && (uint8_t)p[2] <= 0x8A) {
        *k = 3; /* U+2000 .. U+200A */
        return 1;
    }
    return 0;
}
static void strip(const char** p, size_t* n) {
    size_t k;
    while (*n > 0 && is_ws(*p, *n, &k)) *p += k, *n -= k;
    for (;;) { /* from the end: try each length of character that could end there */
        int cut = 0;
        for (size_t m = 1; m <= 3 && m <= *n && !cut; m++)
            if (is_ws(*p + *n - m, m, &k) && k == m) *n -= m, cut = 1;
        if (!cut) break;
    }
}

/* LLaVA's preprocess_multimodal: a turn with one <image> has it moved to the front, "<image>\n" + the
 * rest stripped (then the whole stripped). Turns with several images are left as written. Returns a
 * malloc'd string. */
static char* image_to_front(const char* v) {
    const char* at = strstr(v, "<image>");
    if (!at || strstr(at + 7, "<image>")) return strdup(v);
    size_t n = strlen(v);
    char* rest = mallocCheck(n + 1);
    memcpy(rest, v, (size_t)(at - v));
    strcpy(rest + (at - v), at + 7);
    const char* p = rest;
    size_t m = strlen(rest);
    strip(&p, &m);
    char* out = mallocCheck(m + 9);
    memcpy(out, "<image>\n", 8);
    memcpy(out + 8, p, m);
    out[8 + m] = 0;
    const char* q = out;
    size_t k = 8 + m;
    strip(&q, &k); /* an empty rest leaves "<image>" */
    memmove(out, q, k);
    out[k] = 0;
    free(rest);
    return out;
}

RejectReason template_render(const cJSON* conv, TemplateKind k, TemplateSegs* segs, char* why, size_t why_len) {
    memset(segs, 0, sizeof *segs);
    RR_ASSERT(k != TEMPLATE_RRFP && k < TEMPLATE_N);
    int n = cJSON_GetArraySize(conv), first = 0;
    const cJSON* turn0 = cJSON_GetArrayItem(conv, 0);
    const char* f0 = cJSON_GetObjectItemCaseSensitive(turn0, "from")->valuestring;
    if (strcmp(f0, "human") && strcmp(f0, "user")) first = 1; /* LLaVA skips a leading gpt turn */
    /* the turns must alternate human, gpt, human, gpt, ... (LLaVA asserts it) */
    int t = 0;
    for (const cJSON* x = conv->child; x; x = x->next, t++) {
        if (t < first) continue;
        const char* f = cJSON_GetObjectItemCaseSensitive(x, "from")->valuestring;
        int answer = !strcmp(f, "gpt") || !strcmp(f, "assistant");
        if (answer != ((t - first) % 2 == 1)) {
            snprintf(why, why_len, "turn %d: \"%s\" where the %s template expects a %s turn (turns alternate human, gpt)",
                     t, f, template_name(k), (t - first) % 2 ? "gpt" : "human");
            return REJECT_BAD_TURN;
        }
    }
    if (k == TEMPLATE_PLAIN && (n - first != 2)) {
        snprintf(why, why_len, "the plain template takes one human turn (its image) and one gpt turn (the caption); "
                 "this record has %d turns", n - first);
        return REJECT_BAD_TURN;
    }
    switch (k) {
    case TEMPLATE_VICUNA_V1: segs_str(segs, SYSTEM_VICUNA_V1 " ", 0); break;
    case TEMPLATE_LLAMA_3: segs_str(segs, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" SYSTEM_LLAMA_3 "<|eot_id|>", 0); break;
    case TEMPLATE_CHATML: segs_str(segs, "<|im_start|>system\n" SYSTEM_CHATML "<|im_end|>\n", 0); break;
    default: break;
    }
    t = 0;
    for (const cJSON* x = conv->child; x; x = x->next, t++) {
        if (t < first) continue;
        int answer = (t - first) % 2 == 1;
        const char* raw = cJSON_GetObjectItemCaseSensitive(x, "value")->valuestring;
        char* v = answer ? strdup(raw) : image_to_front(raw);
        const char* p = v;
        size_t m = strlen(v);
        switch (k) {
        case TEMPLATE_VICUNA_V1: /* SeparatorStyle.TWO: "USER: q" + " " + "ASSISTANT: a" + "</s>" */
            if (!answer) {
                segs_str(segs, "USER: ", 0);
                segs_add(segs, p, m, 0);
                segs_str(segs, " ASSISTANT:", 0);
            } else {
                segs_str(segs, " ", 1); /* the space before the answer goes with it (preprocess_v1's "- 2") */
                segs_add(segs, p, m, 1);
                segs_str(segs, "</s>", 1);
            }
            break;
        case TEMPLATE_LLAMA_3: /* Llama-3-Instruct's chat template, content | trim */
            strip(&p, &m);
            segs_str(segs, answer ? "<|start_header_id|>assistant<|end_header_id|>\n\n" : "<|start_header_id|>user<|end_header_id|>\n\n", 0);
            segs_add(segs, p, m, answer);
            segs_str(segs, "<|eot_id|>", answer);
            break;
        case TEMPLATE_CHATML: /* SeparatorStyle.CHATML: role + "\n" + message + "<|im_end|>" + "\n" */
            segs_str(segs, answer ? "<|im_start|>assistant\n" : "<|im_start|>user\n", 0);
            segs_add(segs, p, m, answer);
            segs_str(segs, "<|im_end|>", answer);
            segs_str(segs, "\n", 0);
            break;
        case TEMPLATE_PLAIN: /* preprocess_plain: "<image>" + caption + "\n" */
            if (!answer) {
                if (!strstr(raw, "<image>")) {
                    snprintf(why, why_len, "the plain template needs <image> in the human turn");
                    free(v);
                    template_segs_free(segs);
                    return REJECT_IMAGE_TOKENS;
                }
                segs_str(segs, "<image>", 0);
            } else {
                segs_add(segs, p, m, 1);
                segs_str(segs, "\n", 1);
            }
            break;
        default: break;
        }
        free(v);
    }
    return REJECT_NONE;
}

int template_bos_id(TemplateKind k, const Tokenizer* tok) {
    return k == TEMPLATE_VICUNA_V1 || k == TEMPLATE_PLAIN ? template_bos(tok) : -1;
}

int template_stop_id(TemplateKind k, const Tokenizer* tok) {
    switch (k) {
    case TEMPLATE_RRFP: return tokenizer_token_id(tok, "<|endoftext|>");
    case TEMPLATE_VICUNA_V1: return tokenizer_token_id(tok, "</s>");
    case TEMPLATE_LLAMA_3: return tokenizer_token_id(tok, "<|eot_id|>");
    case TEMPLATE_CHATML: return tokenizer_token_id(tok, "<|im_end|>");
    case TEMPLATE_PLAIN: {
        int32_t* ids = NULL;
        int n = tokenizer_encode(tok, "\n", 1, &ids);
        int id = n == 1 ? ids[0] : -1;
        free(ids);
        return id;
    }
    default: return -1;
    }
}
