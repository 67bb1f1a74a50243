/* generate.c — answers from a checkpoint's model with a KV cache (see generate.h). */
#include "runtime/train/generate.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/anyres.h"
#include "data/image.h"
#include "data/manifest.h"
#include "data/template.h"
#include "engine/util.h"
#include "runtime/train/trained.h"
#include "text/tokenizer.h"

struct Generator {
    Trainer* t;
    Stage* st;
    const Backend* be;
    Tokenizer* tok;
    int image_id, eot_id, V, nL, Dkv;
    TemplateKind tmpl;   /* the chat template of the model's data (trained.h): the prompt's and eot_id's */
    ImagePrep prep;      /* its image preprocessing: the loader's pipeline */
    int max_T;           /* prompt + new tokens the cache and the full-forward activations hold */
    JpegCodec* jc;
    StageActs big;       /* the prompt (and, verify, every full re-forward) */
    StageActs one;       /* one new token */
    float **kv_k, **kv_v; /* (nL) caches of (max_T, Dkv) on the backend (Dkv: the key/value heads' width) */
    float* logits;       /* host (V) */
    float* logits_full;  /* host (V), verify */
};

Generator* generator_new(Trainer* t, int max_new, char* err, size_t err_len) {
    const Recipe* r = t->r;
    if (strcmp(r->source, "shards") != 0) {
        snprintf(err, err_len, "data.source = %s: generation needs the tokenizer of shards (data.source = shards, "
                 "data.tokenizer)", r->source);
        return NULL;
    }
    Stage* st = t->ex->stages[0];
    if (!st->first || !st->last || st->tp > 1) {
        snprintf(err, err_len, "generation runs the whole model in one process (parallel.pp = 1, parallel.tp = 1)");
        return NULL;
    }
    if (!st->be->ops->attention_decode) {
        snprintf(err, err_len, "runtime.backend = %s has no decoding attention (BackendOps.attention_decode)", st->be->dev->name);
        return NULL;
    }
    /* how the model's data was made: the checkpoint's record (a run's), else data.shards' (an import's first
     * fine-tuning data), else data.eval_shards' */
    TrainedData d, o;
    char e1[1024] = "", e2[1024] = "";
    if (trained_data_of_checkpoint(r->resume, &d, err, err_len) != 0) return NULL;
    int from_shards = r->shards[0] && trained_data_of_shards(r->shards, &o, e1, sizeof e1) == 0;
    if (from_shards) trained_data_fill(&d, &o);
    else if (r->eval_shards[0] && trained_data_of_shards(r->eval_shards, &o, e2, sizeof e2) == 0) trained_data_fill(&d, &o);
    if (d.chat_template < 0 || !d.has_prep) {
        snprintf(err, err_len, "%s/state.json records no chat template or image preprocessing (an import, or a "
                 "checkpoint of an earlier build), and no shards say them: data.shards: %s%s%s\n---> HINT: set "
                 "data.shards to the shards the model is (to be) trained on: they record the template and the "
                 "preprocessing pack used", r->resume, e1[0] ? e1 : "not set", e2[0] ? "; data.eval_shards: " : "", e2);
        return NULL;
    }
    Tokenizer* tok = tokenizer_load(r->tokenizer, err, err_len);
    if (!tok) return NULL;
    if (trained_check_tokenizer(&d, r->tokenizer, tok, err, err_len) != 0) {
        tokenizer_free(tok);
        return NULL;
    }
    if (template_check_tokenizer((TemplateKind)d.chat_template, tok, e1, sizeof e1) != 0) {
        snprintf(err, err_len, "data.tokenizer %s: %s (the model's data is --template %s: %s)", r->tokenizer, e1,
                 template_name((TemplateKind)d.chat_template), d.template_from);
        tokenizer_free(tok);
        return NULL;
    }
    Generator* g = callocCheck(1, sizeof *g);
    g->t = t;
    g->st = st;
    g->be = st->be;
    g->tok = tok;
    g->tmpl = (TemplateKind)d.chat_template;
    g->prep = d.prep;
    g->image_id = tokenizer_token_id(tok, "<image>");
    g->eot_id = template_stop_id(g->tmpl, tok);
    if (g->image_id < 0 || g->eot_id < 0) {
        snprintf(err, err_len, "%s has no %s under the %s template", r->tokenizer,
                 g->image_id < 0 ? "<image> token" : "one-token end of answer (plain: a newline the tokenizer makes one token)",
                 template_name(g->tmpl));
        generator_free(g);
        return NULL;
    }
    g->V = t->mc.V;
    g->nL = st->l1 - st->l0;
    int Hkv;
    lm_local_kv(&st->lc, &Hkv, &g->Dkv); /* tp = 1: every key/value head (grouped-query: fewer than the query heads) */
    g->max_T = r->microbatch_tokens + max_new;
    /* the KV cache and attention_decode take f32 words: the LM on f32-word activations (not 2-byte ones); the
     * trainer's activations are not used again by generation */
    stage_keep_f32_activations(st);
    stage_acts_init(&g->big, st, g->max_T, model_patch_budget(&st->cfg, r->microbatch_tokens), 0);
    stage_acts_init(&g->one, st, 1, 0, 0);
    g->kv_k = callocCheck((size_t)g->nL, sizeof(float*));
    g->kv_v = callocCheck((size_t)g->nL, sizeof(float*));
    for (int j = 0; j < g->nL; j++) {
        g->kv_k[j] = g->be->dev->alloc((size_t)g->max_T * g->Dkv * sizeof(float));
        g->kv_v[j] = g->be->dev->alloc((size_t)g->max_T * g->Dkv * sizeof(float));
    }
    g->logits = mallocCheck((size_t)g->V * sizeof(float));
    g->logits_full = mallocCheck((size_t)g->V * sizeof(float));
    g->jc = jpeg_codec_new();
    return g;
}

void generator_free(Generator* g) {
    if (!g) return;
    if (g->big.block) stage_acts_free(&g->big, g->st);
    if (g->one.block) stage_acts_free(&g->one, g->st);
    for (int j = 0; g->kv_k && j < g->nL; j++) {
        if (g->kv_k[j]) g->be->dev->free(g->kv_k[j]);
        if (g->kv_v[j]) g->be->dev->free(g->kv_v[j]);
    }
    free(g->kv_k);
    free(g->kv_v);
    free(g->logits);
    free(g->logits_full);
    if (g->jc) jpeg_codec_free(g->jc);
    if (g->tok) tokenizer_free(g->tok);
    free(g);
}

/* The prompt's token ids (with the <image> id where each image goes): the human turn through pack's
 * template, cut where the answer's tokens begin. Returns the count (*ids malloc'd), or -1. */
static int gen_prompt_ids(Generator* g, const char* human, int n_images, int32_t** ids, char* err, size_t err_len) {
    char* text = NULL;
    if (n_images > 0 && !strstr(human, "<image>")) {
        /* LLaVA's convention: the image first, then the question */
        size_t n = strlen(human) + 16 * (size_t)n_images + 1;
        text = mallocCheck(n);
        text[0] = 0;
        for (int i = 0; i < n_images; i++) strcat(text, "<image>\n");
        strcat(text, human);
        human = text;
    }
    cJSON* rec = cJSON_CreateObject();
    cJSON_AddStringToObject(rec, "id", "generate");
    cJSON* imgs = cJSON_AddArrayToObject(rec, "image");
    for (int i = 0; i < n_images; i++) cJSON_AddItemToArray(imgs, cJSON_CreateString("image"));
    cJSON* conv = cJSON_AddArrayToObject(rec, "conversations");
    cJSON* h = cJSON_CreateObject();
    cJSON_AddStringToObject(h, "from", "human");
    cJSON_AddStringToObject(h, "value", human);
    cJSON_AddItemToArray(conv, h);
    cJSON* a = cJSON_CreateObject(); /* a placeholder answer: its first token marks where the prompt ends */
    cJSON_AddStringToObject(a, "from", "gpt");
    cJSON_AddStringToObject(a, "value", "x");
    cJSON_AddItemToArray(conv, a);
    ManifestSample s;
    char why[512];
    RejectReason rr = manifest_sample_build_template(rec, 1, g->tok, g->tmpl, g->image_id, g->eot_id, &s, why, sizeof why);
    cJSON_Delete(rec);
    free(text);
    if (rr != REJECT_NONE) {
        snprintf(err, err_len, "the prompt does not fit the template (%s): %s", reject_reason_name(rr), why);
        return -1;
    }
    int n = 0;
    while (n < s.n_tokens && !s.mask[n]) n++;
    *ids = mallocCheck(sizeof(int32_t) * (size_t)(n ? n : 1));
    memcpy(*ids, s.ids, sizeof(int32_t) * (size_t)n);
    manifest_sample_free(&s);
    return n;
}

/* mb's arrays for one sample of T tokens and I tower images of Np patches in all (rows of `row` floats),
 * malloc'd (microbatch_free). */
static void gen_microbatch_alloc(Microbatch* mb, int T, int I, int Np, size_t row) {
    mb->cu_seqlens = mallocCheck(2 * sizeof(int32_t));
    mb->ids = mallocCheck(sizeof(int32_t) * (size_t)T);
    mb->targets = mallocCheck(sizeof(int32_t) * (size_t)T);
    mb->pos = mallocCheck(sizeof(int32_t) * (size_t)T);
    mb->sample_index = callocCheck(1, sizeof(int64_t));
    mb->img_cu_patches = mallocCheck(sizeof(int32_t) * (size_t)(I + 1));
    mb->grid_h = mallocCheck(sizeof(int32_t) * (size_t)(I ? I : 1));
    mb->grid_w = mallocCheck(sizeof(int32_t) * (size_t)(I ? I : 1));
    mb->img_lm_start = mallocCheck(sizeof(int32_t) * (size_t)(I ? I : 1));
    mb->patch_row = mallocCheck(sizeof(int32_t) * (size_t)(Np ? Np : 1));
    mb->patch_col = mallocCheck(sizeof(int32_t) * (size_t)(Np ? Np : 1));
    mb->patches = mallocCheck(sizeof(float) * row * (size_t)(Np ? Np : 1));
}

/* One sample as the loader assembles it (data/loader.c): image tokens become their patch rows, no
 * targets. mb's arrays are malloc'd (microbatch_free). */
static void gen_microbatch(Microbatch* mb, const int32_t* ids, int n, int image_id, int I, float* const* patches,
                           const int* gh, const int* gw, int p) {
    memset(mb, 0, sizeof *mb);
    int T = 0, Np = 0, k = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] != image_id) T++;
        else T += gh[k] * gw[k], k++;
    }
    for (int i = 0; i < I; i++) Np += gh[i] * gw[i];
    size_t row = (size_t)3 * p * p;
    mb->S = 1, mb->T = T, mb->I = I, mb->Np = Np, mb->patch = p;
    gen_microbatch_alloc(mb, T, I, Np, row);
    mb->cu_seqlens[0] = 0, mb->cu_seqlens[1] = T;
    mb->img_cu_patches[0] = 0;
    int t = 0, np = 0;
    k = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] == image_id) {
            mb->grid_h[k] = gh[k], mb->grid_w[k] = gw[k], mb->img_lm_start[k] = t;
            memcpy(mb->patches + row * (size_t)np, patches[k], sizeof(float) * row * (size_t)gh[k] * gw[k]);
            for (int r = 0; r < gh[k]; r++)
                for (int c = 0; c < gw[k]; c++) {
                    mb->ids[t] = -1, mb->pos[t] = t, t++;
                    mb->patch_row[np] = r, mb->patch_col[np] = c, np++;
                }
            mb->img_cu_patches[k + 1] = np;
            k++;
        } else {
            mb->ids[t] = ids[i], mb->pos[t] = t, t++;
        }
    }
    for (int u = 0; u < T; u++) mb->targets[u] = -100;
}

/* The same with any-resolution images (docs/anyres.md): image k is its layout's tower images (patches[k]: the base
 * image's and the tiles', g x g each) and n_positions LM positions, as the loader lays them out (Microbatch.J). */
static void gen_microbatch_anyres(Microbatch* mb, const int32_t* ids, int n, int image_id, int J, float* const* patches,
                                  const AnyresLayout* lay, const int* oh, const int* ow, int p) {
    memset(mb, 0, sizeof *mb);
    int T = 0, I = 0, k = 0, g = lay[0].g;
    for (int i = 0; i < n; i++) {
        if (ids[i] != image_id) T++;
        else T += lay[k].n_positions, k++;
    }
    for (int j = 0; j < J; j++) I += lay[j].n_tiles;
    int Np = I * g * g;
    size_t row = (size_t)3 * p * p;
    mb->S = 1, mb->T = T, mb->I = I, mb->Np = Np, mb->patch = p, mb->J = J;
    gen_microbatch_alloc(mb, T, I, Np, row);
    mb->ar_tile0 = mallocCheck(sizeof(int32_t) * (size_t)(J + 1));
    mb->ar_size = mallocCheck(sizeof(int32_t) * 2 * (size_t)(J ? J : 1));
    mb->ar_grid = mallocCheck(sizeof(int32_t) * 2 * (size_t)(J ? J : 1));
    mb->ar_lm_start = mallocCheck(sizeof(int32_t) * (size_t)(J ? J : 1));
    mb->cu_seqlens[0] = 0, mb->cu_seqlens[1] = T;
    mb->img_cu_patches[0] = 0, mb->ar_tile0[0] = 0;
    int t = 0, np = 0, ii = 0;
    k = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] == image_id) {
            mb->ar_size[2 * k] = oh[k], mb->ar_size[2 * k + 1] = ow[k];
            mb->ar_grid[2 * k] = lay[k].rows, mb->ar_grid[2 * k + 1] = lay[k].cols;
            mb->ar_lm_start[k] = t;
            memcpy(mb->patches + row * (size_t)np, patches[k], sizeof(float) * row * (size_t)lay[k].n_tiles * g * g);
            for (int q = 0; q < lay[k].n_tiles; q++, ii++) {
                mb->grid_h[ii] = mb->grid_w[ii] = g, mb->img_lm_start[ii] = t;
                for (int r = 0; r < g * g; r++) mb->patch_row[np] = r / g, mb->patch_col[np] = r % g, np++;
                mb->img_cu_patches[ii + 1] = np;
            }
            for (int q = 0; q < lay[k].n_positions; q++) mb->ids[t] = -1, mb->pos[t] = t, t++;
            mb->ar_tile0[++k] = ii;
        } else {
            mb->ids[t] = ids[i], mb->pos[t] = t, t++;
        }
    }
    for (int u = 0; u < T; u++) mb->targets[u] = -100;
}

/* The logits of the last position of the forward in a (its logits (T, V) on the backend) into out. */
static void gen_last_logits(Generator* g, const StageActs* a, float* out) {
    g->be->dev->copy_d2h(g->be, out, buf_f32p(a->logits) + (size_t)(a->T - 1) * g->V, (size_t)g->V * sizeof(float));
}

static int gen_argmax(const float* x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* splitmix64: the sampler's generator (a pure function of the seed and the draw). */
static uint64_t gen_next(uint64_t* s) {
    return rr_splitmix64(s);
}

typedef struct {
    float p;
    int id;
} GenProb;

static int gen_prob_desc(const void* a, const void* b) {
    const GenProb *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id - y->id;
}

static int gen_sample(const float* logits, int V, const GenOptions* o, uint64_t* rng, GenProb* work) {
    if (o->temperature <= 0) return gen_argmax(logits, V);
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++) m = fmax(m, logits[i] / o->temperature);
    for (int i = 0; i < V; i++) {
        work[i].p = (float)exp(logits[i] / o->temperature - m);
        work[i].id = i;
        sum += work[i].p;
    }
    qsort(work, (size_t)V, sizeof *work, gen_prob_desc);
    /* nucleus: the smallest prefix whose probability reaches top_p */
    double keep = 0;
    int n = 0;
    while (n < V && (n == 0 || keep < o->top_p * sum)) keep += work[n++].p;
    double u = (double)(gen_next(rng) >> 11) * 0x1.0p-53 * keep, c = 0;
    for (int i = 0; i < n; i++) {
        c += work[i].p;
        if (u < c) return work[i].id;
    }
    return work[n - 1].id;
}

char* generate_utf8_clean(const char* s, size_t n) {
    char* out = mallocCheck(3 * n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) ok = ((unsigned char)s[i + k] >> 6) == 2;
        if (ok && len > 1) {
            /* no overlong forms, surrogates or code points above U+10FFFF */
            uint32_t cp = c & (0xFF >> (len + 1));
            for (size_t k = 1; k < len; k++) cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
            ok = cp >= (len == 2 ? 0x80u : len == 3 ? 0x800u : 0x10000u) && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
        }
        if (ok) {
            memcpy(out + o, s + i, len);
            o += len, i += len;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3, i++;
        }
    }
    out[o] = 0;
    return out;
}

int generator_answer(Generator* g, const char* human, const uint8_t* const* jpeg, const size_t* jpeg_len, int n_images,
                     const GenOptions* o, char** answer, GenStats* stats, char* err, size_t err_len) {
    const Recipe* r = g->t->r;
    memset(stats, 0, sizeof *stats);
    *answer = NULL;
    if (n_images > MANIFEST_MAX_IMAGES) {
        snprintf(err, err_len, "%d images: at most %d per question", n_images, MANIFEST_MAX_IMAGES);
        return -1;
    }
    float* patches[MANIFEST_MAX_IMAGES] = {0};
    int gh[MANIFEST_MAX_IMAGES], gw[MANIFEST_MAX_IMAGES];
    AnyresLayout lay[MANIFEST_MAX_IMAGES]; /* any-resolution images: their layouts (docs/anyres.md) */
    int anyres = g->prep.kind == IMAGE_PREP_ANYRES;
    int32_t* ids = NULL;
    int32_t* seq = NULL;
    GenProb* work = NULL;
    Microbatch mb = {0};
    int rc = -1;
    for (int i = 0; i < n_images && anyres; i++) { /* the loader's tiles, decoded the same way */
        char e[512];
        if (image_read_header(g->jc, jpeg[i], jpeg_len[i], &gw[i], &gh[i], e, sizeof e) != 0 ||
            anyres_layout(gh[i], gw[i], &g->prep.pins, g->prep.size, r->patch, ANYRES_SELECT_DEFAULT, &lay[i], e, sizeof e) != 0) {
            snprintf(err, err_len, "image %d: %s", i + 1, e);
            goto done;
        }
        patches[i] = mallocCheck(sizeof(float) * 3 * (size_t)r->patch * r->patch * (size_t)lay[i].n_tiles * lay[i].g * lay[i].g);
        if (anyres_patches_into(g->jc, jpeg[i], jpeg_len[i], &g->prep.pins, g->prep.size, r->patch, gw[i], gh[i], patches[i],
                                e, sizeof e) != 0) {
            snprintf(err, err_len, "image %d: %s", i + 1, e);
            goto done;
        }
    }
    for (int i = 0; i < n_images && !anyres; i++) {
        char e[512];
        if (image_load_patches_prep(g->jc, jpeg[i], jpeg_len[i], &g->prep, r->patch, r->min_patches, r->max_patches,
                                    &patches[i], &gh[i], &gw[i], e, sizeof e) != 0) {
            snprintf(err, err_len, "image %d: %s", i + 1, e);
            goto done;
        }
    }
    int n = gen_prompt_ids(g, human, n_images, &ids, err, err_len);
    if (n < 0) goto done;
    int images_in_prompt = 0;
    for (int i = 0; i < n; i++) images_in_prompt += ids[i] == g->image_id;
    if (images_in_prompt != n_images) {
        snprintf(err, err_len, "the prompt has %d <image> marker%s for %d image%s", images_in_prompt,
                 images_in_prompt == 1 ? "" : "s", n_images, n_images == 1 ? "" : "s");
        goto done;
    }
    if (anyres) gen_microbatch_anyres(&mb, ids, n, g->image_id, n_images, patches, lay, gh, gw, r->patch);
    else gen_microbatch(&mb, ids, n, g->image_id, n_images, patches, gh, gw, r->patch);
    if (mb.T > r->microbatch_tokens) {
        snprintf(err, err_len, "the prompt is %d LM positions (text and image patches), above data.microbatch_tokens = %d",
                 mb.T, r->microbatch_tokens);
        goto done;
    }
    if (stage_check_microbatch(g->st, &g->big, &mb, err, err_len) != 0) goto done; /* e.g. the model and the images disagree on any-resolution */
    stats->prompt_tokens = mb.T;
    int max_new = g->max_T - mb.T < o->max_new ? g->max_T - mb.T : o->max_new;
    /* the prompt: the training forward, its keys and values kept */
    g->big.kv_k = g->kv_k, g->big.kv_v = g->kv_v, g->big.kv_past = 0;
    stage_forward(g->st, &g->big, &mb, NULL, NULL, NULL);
    g->big.state = ACTS_EMPTY;
    g->big.kv_k = g->big.kv_v = NULL;
    gen_last_logits(g, &g->big, g->logits);
    int T0 = mb.T;
    /* verify: the whole sequence so far (prompt rows, then the generated tokens) for full re-forwards */
    seq = mallocCheck(sizeof(int32_t) * (size_t)(T0 + max_new + 1));
    memcpy(seq, mb.ids, sizeof(int32_t) * (size_t)T0);
    work = mallocCheck(sizeof(GenProb) * (size_t)g->V);
    uint64_t rng = o->seed;
    int32_t* out = mallocCheck(sizeof(int32_t) * (size_t)(max_new + 1));
    int nout = 0;
    int32_t one_cu[2] = {0, 1}, one_id, one_pos, one_tg = -100;
    int64_t one_si = 0;
    Microbatch m1 = {.S = 1, .T = 1, .cu_seqlens = one_cu, .ids = &one_id, .targets = &one_tg, .pos = &one_pos,
                     .sample_index = &one_si, .patch = r->patch};
    for (;;) {
        int next = gen_sample(g->logits, g->V, o, &rng, work);
        if (nout == max_new) break;
        out[nout++] = next;
        stats->new_tokens = nout;
        if (next == g->eot_id) {
            stats->stopped = 1;
            break;
        }
        if (nout == max_new) break;
        /* the new token at position T0 + nout - 1, against the cache */
        one_id = next;
        one_pos = T0 + nout - 1;
        g->one.kv_k = g->kv_k, g->one.kv_v = g->kv_v, g->one.kv_past = one_pos;
        stage_forward(g->st, &g->one, &m1, NULL, NULL, NULL);
        g->one.state = ACTS_EMPTY;
        g->one.kv_k = g->one.kv_v = NULL;
        gen_last_logits(g, &g->one, g->logits);
        if (o->verify) {
            /* the same step by a full re-forward of prompt + generated tokens, no cache */
            seq[one_pos] = next;
            Microbatch full = mb;
            int32_t cu[2] = {0, one_pos + 1};
            int32_t* pos = mallocCheck(sizeof(int32_t) * (size_t)(one_pos + 1));
            int32_t* tg = mallocCheck(sizeof(int32_t) * (size_t)(one_pos + 1));
            for (int u = 0; u <= one_pos; u++) pos[u] = u, tg[u] = -100;
            full.T = one_pos + 1, full.cu_seqlens = cu, full.ids = seq, full.pos = pos, full.targets = tg;
            stage_forward(g->st, &g->big, &full, NULL, NULL, NULL);
            g->big.state = ACTS_EMPTY;
            free(pos);
            free(tg);
            gen_last_logits(g, &g->big, g->logits_full);
            for (int v = 0; v < g->V; v++)
                stats->max_logit_diff = fmax(stats->max_logit_diff, fabs((double)g->logits[v] - g->logits_full[v]));
            stats->argmax_differs += gen_argmax(g->logits, g->V) != gen_argmax(g->logits_full, g->V);
        }
    }
    int nans = nout - (stats->stopped ? 1 : 0);
    size_t len = 0;
    char* text = tokenizer_decode(g->tok, out, nans, &len);
    free(out);
    /* the rrfp and vicuna_v1 templates' answer segment is " " + answer */
    size_t skip = text && len > 0 && text[0] == ' ' && (g->tmpl == TEMPLATE_RRFP || g->tmpl == TEMPLATE_VICUNA_V1) ? 1 : 0;
    *answer = generate_utf8_clean(text ? text + skip : "", text ? len - skip : 0);
    free(text);
    rc = 0;
done:
    for (int i = 0; i < n_images; i++) free(patches[i]);
    free(ids);
    free(seq);
    free(work);
    if (mb.ids) microbatch_free(&mb);
    return rc;
}
