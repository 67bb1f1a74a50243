/* test_templates.c — the chat templates (data/template.h) against the prompts LLaVA's own code builds.
 *
 * tests/support/fixtures/chat_templates_expected.json holds, per template and conversation, the text LLaVA's
 * llava/conversation.py (LLaVA and LLaVA-NeXT) and train.py's preprocessing make, written by
 * tests/data/chat_templates_ref.py from those files. For each case:
 *   1. the template's segments, concatenated, are that text byte for byte;
 *   2. the supervised segments are exactly the expected answer pieces, in order;
 *   3. tokenized segment by segment (tokenizer_encode_continue, as pack does) with a SentencePiece-style
 *      tokenizer (Llama-2's layout, byte fallback, <image> and the templates' special tokens added), the ids
 *      are those of the whole text encoded at once (plus the BOS where LLaVA's code adds one: vicuna_v1, plain), and
 *      manifest_sample_build_template's label mask is 1 exactly on the supervised segments' tokens.
 * Then records a template refuses (turns out of order; plain with more than one exchange).
 * Usage: test_templates EXPECTED.json */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/manifest.h"
#include "data/template.h"
#include "engine/util.h"
#include "text/tokenizer.h"

static int failures, checks;
#define CHECK(cond, ...)                                             \
    do {                                                             \
        checks++;                                                    \
        if (!(cond)) {                                               \
            failures++;                                              \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);     \
            fprintf(stderr, __VA_ARGS__);                            \
            fprintf(stderr, "\n");                                   \
        }                                                            \
    } while (0)

/* Llama-2's layout: <unk> <s> </s>, byte pieces, the metaspace, ASCII letters and a few merges; the
 * templates' special tokens and <image> added (special, not normalized). */
static Tokenizer* sp_tokenizer(int metaspace) {
    cJSON* root = cJSON_CreateObject();
    cJSON* added = cJSON_AddArrayToObject(root, "added_tokens");
    const char* specials[] = {"<unk>", "<s>", "</s>", "<image>", "<|begin_of_text|>", "<|start_header_id|>",
                              "<|end_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>"};
    cJSON* model = cJSON_CreateObject();
    cJSON* vocab = cJSON_CreateObject();
    int id = 0;
    for (int i = 0; i < 3; i++) cJSON_AddNumberToObject(vocab, specials[i], id++);
    char b[8];
    for (int i = 0; i < 256; i++) {
        snprintf(b, sizeof b, "<0x%02X>", i);
        cJSON_AddNumberToObject(vocab, b, id++);
    }
    cJSON_AddNumberToObject(vocab, "\xE2\x96\x81", id++);
    for (int c = 33; c < 127; c++) {
        char s[2] = {(char)c, 0};
        cJSON_AddNumberToObject(vocab, s, id++);
    }
    const char* merged[] = {"\xE2\x96\x81" "A", "\xE2\x96\x81t", "he", "\xE2\x96\x81the", "\xE2\x96\x81" "a", "er", "ed"};
    const char* merges[] = {"\xE2\x96\x81 A", "\xE2\x96\x81 t", "h e", "\xE2\x96\x81t he", "\xE2\x96\x81 a", "e r", "e d"};
    for (int i = 0; i < 7; i++) cJSON_AddNumberToObject(vocab, merged[i], id++);
    for (int i = 0; i < 10; i++) {
        cJSON* a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", i < 3 ? i : id++);
        cJSON_AddStringToObject(a, "content", specials[i]);
        cJSON_AddBoolToObject(a, "special", 1);
        cJSON_AddBoolToObject(a, "normalized", 0);
        cJSON_AddItemToArray(added, a);
    }
    if (metaspace) { /* the newer form: Metaspace prepending at the start of the text only */
        cJSON_AddNullToObject(root, "normalizer");
        cJSON_AddItemToObject(root, "pre_tokenizer", cJSON_Parse("{\"type\":\"Metaspace\",\"replacement\":\"\xE2\x96\x81\","
                                                                 "\"prepend_scheme\":\"first\",\"split\":false}"));
    } else {
        cJSON_AddItemToObject(root, "normalizer", cJSON_Parse(
            "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\xE2\x96\x81\"},"
            "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xE2\x96\x81\"}]}"));
        cJSON_AddNullToObject(root, "pre_tokenizer");
    }
    cJSON_AddItemToObject(root, "decoder", cJSON_Parse(
        "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xE2\x96\x81\"},\"content\":\" \"},"
        "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}"));
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddStringToObject(model, "unk_token", "<unk>");
    cJSON_AddBoolToObject(model, "fuse_unk", 1);
    cJSON_AddBoolToObject(model, "byte_fallback", 1);
    cJSON_AddItemToObject(model, "vocab", vocab);
    cJSON* ml = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < 7; i++) cJSON_AddItemToArray(ml, cJSON_CreateString(merges[i]));
    cJSON_AddItemToObject(root, "model", model);
    char* js = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    char err[512];
    Tokenizer* t = tokenizer_load_json(js, strlen(js), "sp_templates.json", err, sizeof err);
    if (!t) fprintf(stderr, "%s\n", err);
    free(js);
    return t;
}

static void run_case(const Tokenizer* tok, const cJSON* c, int k_case, int check_text) {
    const char* name = cJSON_GetObjectItemCaseSensitive(c, "template")->valuestring;
    const cJSON* conv = cJSON_GetObjectItemCaseSensitive(c, "conversations");
    const char* want = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
    const cJSON* sup = cJSON_GetObjectItemCaseSensitive(c, "supervised");
    TemplateKind k;
    CHECK(template_parse(name, &k) == 0, "case %d: template %s", k_case, name);
    TemplateSegs sg;
    char why[256];
    RejectReason r = template_render(conv, k, &sg, why, sizeof why);
    CHECK(r == REJECT_NONE, "case %d (%s): rejected: %s", k_case, name, why);
    if (r != REJECT_NONE) return;
    /* 1. the text */
    size_t total = 0;
    for (int i = 0; i < sg.n; i++) total += sg.seg[i].len;
    char* text = mallocCheck(total + 1);
    size_t o = 0;
    for (int i = 0; i < sg.n; i++) memcpy(text + o, sg.seg[i].text, sg.seg[i].len), o += sg.seg[i].len;
    text[o] = 0;
    CHECK(!check_text || !strcmp(text, want), "case %d (%s): text differs from LLaVA's:\n  ours   '%s'\n  LLaVA's '%s'", k_case, name, text, want);
    /* 2. the supervised pieces */
    int j = 0;
    for (int i = 0; i < sg.n; i++) {
        if (!sg.seg[i].supervised) continue;
        const cJSON* w = cJSON_GetArrayItem(sup, j++);
        CHECK(w && !strcmp(sg.seg[i].text, w->valuestring), "case %d (%s): supervised piece %d is '%s', expected '%s'",
              k_case, name, j - 1, sg.seg[i].text, w ? w->valuestring : "(none)");
    }
    CHECK(j == cJSON_GetArraySize(sup), "case %d (%s): %d supervised pieces, expected %d", k_case, name, j,
          cJSON_GetArraySize(sup));
    /* 3. tokens: segment by segment as the whole, and the label mask */
    cJSON* rec = cJSON_CreateObject();
    cJSON_AddItemToObject(rec, "conversations", cJSON_Duplicate(conv, 1));
    int n_img = 0;
    for (const char* p = strstr(text, "<image>"); p; p = strstr(p + 1, "<image>")) n_img++;
    if (n_img) cJSON_AddStringToObject(rec, "image", "a.jpg");
    ManifestSample s;
    int image_id = tokenizer_token_id(tok, "<image>");
    r = manifest_sample_build_template(rec, 1, tok, k, image_id, -1, &s, why, sizeof why);
    CHECK(r == REJECT_NONE, "case %d (%s): the record is rejected: %s", k_case, name, why);
    if (r == REJECT_NONE) {
        int32_t* whole;
        int n = tokenizer_encode(tok, text, strlen(text), &whole);
        /* the BOS LLaVA's training code puts first: preprocess_v1 and preprocess_plain tokenize with the tokenizer's
         * BOS added (Llama-2's <s>); llama_3's text starts with <|begin_of_text|> itself (preprocess_llama3 adds no
         * other) and Qwen's ChatML (preprocess_qwen) has none */
        int bos = k == TEMPLATE_VICUNA_V1 || k == TEMPLATE_PLAIN ? tokenizer_token_id(tok, "<s>") : -1, off = bos >= 0;
        CHECK(template_bos_id(k, tok) == bos, "case %d (%s): template_bos_id %d, expected %d", k_case, name,
              template_bos_id(k, tok), bos);
        int same = s.n_tokens == n + off && (!off || s.ids[0] == bos);
        for (int i = 0; same && i < n; i++) same = s.ids[off + i] == whole[i];
        CHECK(same, "case %d (%s): the segments' ids (%d) differ from the whole text's (%d + %d BOS)", k_case, name,
              s.n_tokens, n, off);
        /* the mask: supervised tokens decode to exactly the supervised pieces */
        char* sup_text = calloc(1, 1);
        size_t sl = 0;
        for (int i = 0; i < s.n_tokens; i++) {
            if (!s.mask[i]) continue;
            int a = i;
            while (i < s.n_tokens && s.mask[i]) i++;
            size_t m;
            char* d = tokenizer_decode(tok, s.ids + a, i - a, &m);
            sup_text = realloc(sup_text, sl + m + 2);
            memcpy(sup_text + sl, d, m);
            sl += m;
            sup_text[sl++] = '|';
            sup_text[sl] = 0;
            free(d);
        }
        char* want_sup = calloc(1, 1);
        size_t wl = 0;
        for (int i = 0; i < cJSON_GetArraySize(sup); i++) {
            const char* w = cJSON_GetArrayItem(sup, i)->valuestring;
            /* the SentencePiece decoder strips one leading space from each decoded run (a Metaspace-first
             * tokenizer wrote none for a run that does not start the text: its "\u2581" is the space) */
            if (w[0] == ' ') w++;
            want_sup = realloc(want_sup, wl + strlen(w) + 2);
            memcpy(want_sup + wl, w, strlen(w));
            wl += strlen(w);
            want_sup[wl++] = '|';
            want_sup[wl] = 0;
        }
        CHECK(!strcmp(sup_text, want_sup), "case %d (%s): the masked tokens decode to '%s', expected '%s'", k_case, name,
              sup_text, want_sup);
        free(sup_text);
        free(want_sup);
        free(whole);
        manifest_sample_free(&s);
    }
    cJSON_Delete(rec);
    free(text);
    template_segs_free(&sg);
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s chat_templates_expected.json\n", argv[0]);
        return 2;
    }
    size_t n;
    char* js = rr_read_file(argv[1], &n, RR_MAX_JSON);
    cJSON* cases = js ? cJSON_ParseWithLength(js, n) : NULL;
    free(js);
    if (!cJSON_IsArray(cases)) {
        fprintf(stderr, "%s: cannot read the expected prompts\n", argv[1]);
        return 1;
    }
    Tokenizer* tok = sp_tokenizer(0);
    Tokenizer* meta = sp_tokenizer(1);
    if (!tok || !meta) return 1;
    int k = 0, per[TEMPLATE_N] = {0};
    const cJSON* c;
    cJSON_ArrayForEach(c, cases) {
        TemplateKind t;
        if (!template_parse(cJSON_GetObjectItemCaseSensitive(c, "template")->valuestring, &t)) per[t]++;
        run_case(tok, c, k, 1);
        run_case(meta, c, k, 0); /* the ids of the segments equal the whole text's with Metaspace too */
        k++;
    }
    tokenizer_free(meta);
    CHECK(per[TEMPLATE_VICUNA_V1] >= 4 && per[TEMPLATE_LLAMA_3] >= 4 && per[TEMPLATE_CHATML] >= 4 && per[TEMPLATE_PLAIN] >= 2,
          "every template has its cases (%d %d %d %d)", per[1], per[2], per[3], per[4]);
    /* refusals */
    struct {
        const char* rec;
        TemplateKind k;
        const char* needle;
    } bad[] = {
        {"{\"conversations\":[{\"from\":\"human\",\"value\":\"a\"},{\"from\":\"human\",\"value\":\"b\"},"
         "{\"from\":\"gpt\",\"value\":\"c\"}]}", TEMPLATE_VICUNA_V1, "turns alternate"},
        {"{\"image\":\"a.jpg\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\"},{\"from\":\"gpt\",\"value\":\"c\"},"
         "{\"from\":\"human\",\"value\":\"d\"},{\"from\":\"gpt\",\"value\":\"e\"}]}", TEMPLATE_PLAIN, "one human turn"},
        {"{\"conversations\":[{\"from\":\"human\",\"value\":\"no image\"},{\"from\":\"gpt\",\"value\":\"c\"}]}",
         TEMPLATE_PLAIN, "needs <image>"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON* rec = cJSON_Parse(bad[i].rec);
        ManifestSample s;
        char why[256] = "";
        RejectReason r = manifest_sample_build_template(rec, 1, tok, bad[i].k, tokenizer_token_id(tok, "<image>"), -1, &s,
                                                        why, sizeof why);
        CHECK(r != REJECT_NONE && strstr(why, bad[i].needle), "bad record %zu refused (%s): '%s'", i,
              template_name(bad[i].k), why);
        if (r == REJECT_NONE) manifest_sample_free(&s);
        cJSON_Delete(rec);
    }
    char err[256];
    CHECK(template_check_tokenizer(TEMPLATE_CHATML, tok, err, sizeof err) == 0, "chatml's tokens are there");
    tokenizer_free(tok);
    cJSON_Delete(cases);
    printf("%d cases, %d checks, %d failed\n", k, checks, failures);
    if (!failures) printf("templates: ok\n");
    return failures ? 1 : 0;
}
