/* synth.c — synthetic microbatches (see synth.h). Layout rules follow docs/model.md "Sequence assembly and the loss": one text
 * token, then (maybe) an image's gh*gw patch positions, then text; targets are the next token when
 * it is text and drawn supervised, -100 otherwise (and always at a sample's last position). */
#include "data/synth.h"

#include "data/batch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"

static uint64_t next(uint64_t* s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return rr_mix64(*s);
}
static int uniform(uint64_t* s, int lo, int hi) { return lo + (int)(next(s) % (uint64_t)(hi - lo + 1)); }
static double unit(uint64_t* s) { return (double)(next(s) >> 11) / 9007199254740992.0; }

void synth_microbatch(Microbatch* mb, const SynthConfig* c, uint64_t seed, int index) {
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + (uint64_t)index * 0xD1B54A32D192ED03ull + 1;
    memset(mb, 0, sizeof *mb);
    int S = uniform(&st, 1, c->max_samples);
    int cap_T = S * (c->max_text + 1 + c->max_grid * c->max_grid), cap_I = S, cap_Np = S * c->max_grid * c->max_grid;
    int pp = 3 * c->patch * c->patch;
    mb->patch = c->patch;
    mb->cu_seqlens = callocCheck((size_t)S + 1, sizeof(int32_t));
    mb->ids = callocCheck((size_t)cap_T, sizeof(int32_t));
    mb->targets = callocCheck((size_t)cap_T, sizeof(int32_t));
    mb->pos = callocCheck((size_t)cap_T, sizeof(int32_t));
    mb->img_cu_patches = callocCheck((size_t)cap_I + 1, sizeof(int32_t));
    mb->grid_h = callocCheck((size_t)cap_I + 1, sizeof(int32_t));
    mb->grid_w = callocCheck((size_t)cap_I + 1, sizeof(int32_t));
    mb->img_lm_start = callocCheck((size_t)cap_I + 1, sizeof(int32_t));
    mb->patch_row = callocCheck((size_t)cap_Np + 1, sizeof(int32_t));
    mb->patch_col = callocCheck((size_t)cap_Np + 1, sizeof(int32_t));
    mb->patches = callocCheck((size_t)cap_Np * (size_t)pp + 1, sizeof(float));
    mb->sample_index = callocCheck((size_t)S, sizeof(int64_t));
    int T = 0, I = 0, Np = 0;
    for (int s = 0; s < S; s++) {
        int start = T;
        mb->sample_index[s] = (int64_t)index * 1000 + s;
        mb->ids[T++] = uniform(&st, 0, c->V - 1);
        if (unit(&st) < c->image_prob) {
            int gh = uniform(&st, c->min_grid, c->max_grid), gw = uniform(&st, c->min_grid, c->max_grid);
            mb->grid_h[I] = gh;
            mb->grid_w[I] = gw;
            mb->img_lm_start[I] = T;
            mb->img_cu_patches[I] = Np;
            for (int i = 0; i < gh; i++)
                for (int j = 0; j < gw; j++) {
                    mb->patch_row[Np] = i;
                    mb->patch_col[Np] = j;
                    for (int k = 0; k < pp; k++) mb->patches[(size_t)Np * (size_t)pp + (size_t)k] = (float)(2.0 * unit(&st) - 1.0);
                    mb->ids[T++] = -1;
                    Np++;
                }
            I++;
            mb->img_cu_patches[I] = Np;
        }
        int text = uniform(&st, c->min_text, c->max_text);
        for (int i = 0; i < text; i++) mb->ids[T++] = uniform(&st, 0, c->V - 1);
        for (int t = start; t < T; t++) {
            mb->pos[t] = t - start;
            int next_text = t + 1 < T && mb->ids[t + 1] >= 0;
            mb->targets[t] = next_text && unit(&st) < c->supervised_prob ? mb->ids[t + 1] : -100;
            mb->n_supervised += mb->targets[t] != -100;
        }
        mb->cu_seqlens[s + 1] = T;
    }
    mb->S = S;
    mb->T = T;
    mb->I = I;
    mb->Np = Np;
}

/* ---- the synthetic colour task (batch_source_synthetic, data/batch.h) ---------------------------- */

#define SYN_COLOURS SYNTH_COLOURS
#define SYN_TOK_QUESTION SYNTH_TOK_QUESTION
#define SYN_TOK_ANSWER0 SYNTH_TOK_ANSWER0
#define SYN_TOK_FILLER0 (SYN_TOK_ANSWER0 + SYN_COLOURS)

typedef struct {
    int n;            /* samples */
    int *h, *w, *f;   /* grid and text tokens of each */
} SynPlanLine;

typedef struct {
    SynthSourceConfig c;
    int V;
    int heldout;  /* 1: the held-out stream (never seen in training) */
    int64_t step; /* next step to generate */
    Microbatch* mbs;
    int M;
    SynPlanLine* plan; /* data.synthetic_plan (NULL: shapes drawn) */
    int plan_n;
} SynSource;

static uint64_t syn_mix(uint64_t x) { return rr_mix64(x + 0x9e3779b97f4a7c15ull); }

typedef struct {
    uint64_t s;
} SynRng;
static uint64_t syn_next(SynRng* g) { return g->s = syn_mix(g->s); }
static int syn_int(SynRng* g, int lo, int hi) { return lo + (int)(syn_next(g) % (uint64_t)(hi - lo + 1)); }
static float syn_unit(SynRng* g) { return (float)((syn_next(g) >> 40) * (1.0 / 16777216.0)); }


/* Colour k's RGB in [-1, 1]: the 8 corners of the cube, scaled so noise does not hide them. */
static float syn_colour(int k, int ch) { return ((k >> ch) & 1) ? 0.6f : -0.6f; }

/* Generate microbatch m of step `step` (m: the index among all replicas' microbatches of the step):
 * samples until the next one would not fit. */
static void syn_make_mb(SynSource* ss, int64_t step, int m, Microbatch* mb) {
    const SynthSourceConfig* r = &ss->c;
    int p = r->patch, P3 = 3 * p * p, T_max = r->microbatch_tokens;
    uint64_t stream = ss->heldout ? 0x5eed0fe7a1ull : 0; /* held-out samples: another key */
    SynRng g = {syn_mix(syn_mix((uint64_t)r->seed ^ stream) ^ syn_mix((uint64_t)step * 1315423911ull + (uint64_t)m))};
    /* first pass: sample shapes */
    enum { MAXS = 4096 };
    int gh[MAXS], gw[MAXS], nf[MAXS], col[MAXS];
    int S = 0, T = 0, Np = 0;
    int side_lo = 1, side_hi = 1;
    while (side_lo * side_lo < r->min_patches) side_lo++;
    while ((side_hi + 1) * (side_hi + 1) <= r->max_patches) side_hi++;
    if (side_hi < side_lo) side_hi = side_lo;
    const SynPlanLine* pl = ss->plan ? &ss->plan[(size_t)((uint64_t)(step * ss->M * (ss->c.dp_size > 1 ? ss->c.dp_size : 1) + m) %
                                                    (uint64_t)ss->plan_n)]
                                     : NULL;
    for (int i = 0; pl && i < pl->n; i++) { /* the plan's shapes (checked against the budget when read) */
        gh[S] = pl->h[i], gw[S] = pl->w[i], nf[S] = pl->f[i] - 3, col[S] = syn_int(&g, 0, SYN_COLOURS - 1);
        T += pl->h[i] * pl->w[i] + pl->f[i];
        Np += pl->h[i] * pl->w[i];
        S++;
    }
    for (; !pl;) {
        SynRng g2 = g;
        int h = syn_int(&g2, side_lo, side_hi), w = syn_int(&g2, side_lo, side_hi);
        while (h * w > r->max_patches) w--;
        int f = syn_int(&g2, 1, 6);
        int k = syn_int(&g2, 0, SYN_COLOURS - 1);
        int len = h * w + f + 3;
        if (T + len > T_max || S == MAXS) break;
        g = g2;
        gh[S] = h, gw[S] = w, nf[S] = f, col[S] = k;
        T += len;
        Np += h * w;
        S++;
    }
    RR_ASSERT(S > 0);
    memset(mb, 0, sizeof *mb);
    mb->S = S, mb->T = T, mb->I = S, mb->Np = Np, mb->patch = p;
    mb->cu_seqlens = mallocCheck((size_t)(S + 1) * 4);
    mb->ids = mallocCheck((size_t)T * 4), mb->targets = mallocCheck((size_t)T * 4), mb->pos = mallocCheck((size_t)T * 4);
    mb->patches = mallocCheck((size_t)Np * (size_t)P3 * 4);
    mb->img_cu_patches = mallocCheck((size_t)(S + 1) * 4);
    mb->grid_h = mallocCheck((size_t)S * 4), mb->grid_w = mallocCheck((size_t)S * 4);
    mb->patch_row = mallocCheck((size_t)Np * 4), mb->patch_col = mallocCheck((size_t)Np * 4);
    mb->img_lm_start = mallocCheck((size_t)S * 4);
    mb->sample_index = mallocCheck((size_t)S * 8);
    int t = 0, np = 0;
    mb->cu_seqlens[0] = 0;
    mb->img_cu_patches[0] = 0;
    for (int s = 0; s < S; s++) {
        int n = gh[s] * gw[s], start = t;
        mb->img_lm_start[s] = t;
        mb->grid_h[s] = gh[s], mb->grid_w[s] = gw[s];
        for (int i = 0; i < n; i++, np++) {
            mb->patch_row[np] = i / gw[s], mb->patch_col[np] = i % gw[s];
            float* px = mb->patches + (size_t)np * P3;
            for (int q = 0; q < p * p; q++)
                for (int ch = 0; ch < 3; ch++) px[q * 3 + ch] = syn_colour(col[s], ch) + 0.8f * (syn_unit(&g) - 0.5f);
            mb->ids[t++] = -1;
        }
        for (int i = 0; i < nf[s]; i++) mb->ids[t++] = syn_int(&g, SYN_TOK_FILLER0, ss->V - 2);
        mb->ids[t++] = SYN_TOK_QUESTION;
        mb->ids[t++] = SYN_TOK_ANSWER0 + col[s];
        mb->ids[t++] = ss->V - 1; /* end of turn */
        int end = t;
        for (int u = start; u < end; u++) {
            mb->pos[u] = u - start;
            /* supervised: the answer and the end token (the assistant turn) */
            mb->targets[u] = (u >= end - 3 && u < end - 1) ? mb->ids[u + 1] : -100;
        }
        mb->cu_seqlens[s + 1] = t;
        mb->img_cu_patches[s + 1] = np;
        mb->sample_index[s] = step * 100000 + m * 1000 + s;
    }
    mb->n_supervised = 2 * S;
}

static int syn_next_plan(BatchSource* src, StepPlan* plan, char* err, size_t err_len) {
    SynSource* ss = src->self;
    for (int m = 0; m < ss->M; m++) microbatch_free(&ss->mbs[m]);
    memset(plan, 0, sizeof *plan);
    for (int m = 0; m < ss->M; m++) {
        int D = ss->c.dp_size > 1 ? ss->c.dp_size : 1, d = D > 1 ? ss->c.dp_rank : 0;
        syn_make_mb(ss, ss->c.fixed_batch && !ss->heldout ? 0 : ss->step, m * D + d, &ss->mbs[m]);
        plan->n_supervised += ss->mbs[m].n_supervised;
        plan->tokens += ss->mbs[m].T;
        plan->patches += ss->mbs[m].Np;
        plan->samples += ss->mbs[m].S;
    }
    plan->mbs = ss->mbs;
    plan->M = ss->M;
    ss->step++;
    return 0;
}

static char* syn_position(BatchSource* src) {
    SynSource* ss = src->self;
    char* s = mallocCheck(64);
    snprintf(s, 64, "{\"synthetic_step\":%lld}", (long long)ss->step);
    return s;
}

static int syn_seek(BatchSource* src, const char* json, char* err, size_t err_len) {
    SynSource* ss = src->self;
    long long st;
    int used = 0;
    if (!json || sscanf(json, "{\"synthetic_step\":%18lld}%n", &st, &used) != 1 || !used || json[used] || st < 0) {
        snprintf(err, err_len, "checkpoint loader position '%s' is not a synthetic-source position",
                 json ? json : "(none)");
        return -1;
    }
    ss->step = st;
    return 0;
}

/* skipped samples and decoded JPEGs: none (generated samples cannot be damaged, pixels are made) */
static int64_t syn_none(BatchSource* src) {
    (void)src;
    return 0;
}

static void syn_plan_free(SynSource* ss) {
    for (int i = 0; i < ss->plan_n; i++) free(ss->plan[i].h), free(ss->plan[i].w), free(ss->plan[i].f);
    free(ss->plan);
    ss->plan = NULL;
    ss->plan_n = 0;
}

/* data.synthetic_plan: every line a microbatch of `HxW+F` samples within the token budget */
static int syn_plan_read(SynSource* ss, const char* path, char* err, size_t err_len) {
    size_t len;
    char* text = rr_read_file(path, &len, RR_MAX_JSONL); /* a text plan, capped like other line files */
    if (!text) {
        snprintf(err, err_len, "data.synthetic_plan '%s': %s", path, strerror(errno));
        return -1;
    }
    int line = 0, rc = 0;
    for (char* p = text; p < text + len && rc == 0;) {
        char* nl = memchr(p, '\n', (size_t)(text + len - p));
        char* e = nl ? nl : text + len;
        line++;
        SynPlanLine L = {0, NULL, NULL, NULL};
        int T = 0, cap = 0;
        for (char* q = p; q < e && rc == 0;) {
            while (q < e && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
            if (q >= e) break;
            long h, w, f;
            char *r, *tok = q, *tend = q;
            while (tend < e && *tend != ' ' && *tend != '\t' && *tend != '\r') tend++;
            h = strtol(q, &r, 10);
            if (r == q || r >= e || *r != 'x') goto bad;
            q = r + 1, w = strtol(q, &r, 10);
            if (r == q || r >= e || *r != '+') goto bad;
            q = r + 1, f = strtol(q, &r, 10);
            if (r == q || (r < e && *r != ' ' && *r != '\t' && *r != '\r')) goto bad;
            q = r;
            if (h < 1 || w < 1 || h > 4096 || w > 4096 || f < 4 || f > (1 << 20) || L.n == 4096 ||
                T + h * w + f > ss->c.microbatch_tokens) {
                snprintf(err, err_len, "data.synthetic_plan %s:%d: sample %d (%ldx%ld+%ld) %s", path, line, L.n + 1, h,
                         w, f,
                         L.n == 4096 ? "is past the 4096 samples a microbatch may hold"
                         : f < 4 || h < 1 || w < 1 ? "needs a grid of at least 1x1 and F >= 4 text tokens"
                                                   : "does not fit data.microbatch_tokens with the samples before it");
                rc = -1;
                break;
            }
            if (L.n == cap) {
                cap = cap ? 2 * cap : 16;
                L.h = reallocCheck(L.h, (size_t)cap * sizeof(int));
                L.w = reallocCheck(L.w, (size_t)cap * sizeof(int));
                L.f = reallocCheck(L.f, (size_t)cap * sizeof(int));
            }
            L.h[L.n] = (int)h, L.w[L.n] = (int)w, L.f[L.n] = (int)f;
            L.n++;
            T += (int)(h * w + f);
            continue;
        bad:
            snprintf(err, err_len, "data.synthetic_plan %s:%d: '%.*s' is not a sample; allowed: HxW+F (e.g. 24x24+12)",
                     path, line, (int)(tend - tok > 40 ? 40 : tend - tok), tok);
            rc = -1;
        }
        if (rc == 0 && L.n > 0) {
            ss->plan = reallocCheck(ss->plan, (size_t)(ss->plan_n + 1) * sizeof *ss->plan);
            ss->plan[ss->plan_n++] = L;
        } else {
            free(L.h), free(L.w), free(L.f);
        }
        p = e + (nl ? 1 : 0);
    }
    free(text);
    if (rc == 0 && ss->plan_n == 0) {
        snprintf(err, err_len, "data.synthetic_plan '%s': no microbatch (every line empty)", path);
        rc = -1;
    }
    return rc;
}

static void syn_free(BatchSource* src) {
    SynSource* ss = src->self;
    syn_plan_free(ss);
    for (int m = 0; m < ss->M; m++) microbatch_free(&ss->mbs[m]);
    free(ss->mbs);
    free(ss);
    src->self = NULL;
}

int batch_source_synthetic(BatchSource* src, const SynthSourceConfig* r, int vocab, char* err, size_t err_len) {
    if (vocab < 16) {
        snprintf(err, err_len, "the synthetic source needs a vocabulary of at least 16 (got %d)", vocab);
        return -1;
    }
    int need = 1;
    while (need * need < r->min_patches) need++;
    if (need * need + 9 > r->microbatch_tokens) {
        snprintf(err, err_len, "data.microbatch_tokens %d cannot hold one synthetic sample", r->microbatch_tokens);
        return -1;
    }
    if (r->dp_size > 1 && (r->dp_rank < 0 || r->dp_rank >= r->dp_size)) {
        snprintf(err, err_len, "synthetic source: dp rank %d is not a rank of %d replicas", r->dp_rank, r->dp_size);
        return -1;
    }
    SynSource* ss = callocCheck(1, sizeof *ss);
    ss->c = *r;
    ss->heldout = r->heldout;
    ss->V = vocab;
    ss->M = r->microbatches;
    if (r->plan && r->plan[0] && !r->heldout && syn_plan_read(ss, r->plan, err, err_len) != 0) {
        syn_plan_free(ss);
        free(ss);
        return -1;
    }
    ss->mbs = callocCheck((size_t)ss->M, sizeof(Microbatch));
    *src = (BatchSource){.self = ss, .name = "synthetic", .next = syn_next_plan, .position = syn_position, .seek = syn_seek,
                         .skipped = syn_none, .images_decoded = syn_none, .free = syn_free};
    return 0;
}

