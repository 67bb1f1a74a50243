/* test_model.c — whole-model checks that need no PyTorch.
 *
 *   test_model fd      central finite differences of the step loss against stage_backward, for (fd_variants:
 *                      the same with grouped-query attention, attention biases, tied embeddings, Llama-3 RoPE)
 *                      sampled elements of every parameter tensor (ViT, projector, embedding, LM,
 *                      head) on a tiny multimodal microbatch
 *   test_model split   (split_variants: with the LM variants) B then W (interleaved across 3 microbatches in flight, as a pipeline runs
 *                      them) gives bitwise the same loss and gradients as the fused backward
 *   test_model gpu     the same 3-microbatch step on the CUDA backend against the CPU backend, and
 *                      split vs fused on CUDA (label gpu; exit 77 = skipped without a device)
 *   test_model bad_X   a damaged microbatch (X = budget, image_id, target, grid, pos,
 *                      overlap) stops
 *                      with a message naming it
 *   test_model freeze  train.freeze (stage 1 `vision,text`, stage 2 `vision`, and finer prefixes): over
 *                      3 AdamW steps, fused and split backward, frozen tensors stay bitwise as initialised
 *                      and the trainable ones are bitwise those of an unfrozen run whose frozen
 *                      gradients are computed and discarded; no gradient / AdamW memory for frozen
 *                      tensors; with `vision` frozen the ViT backward never runs and its activations
 *                      are not kept (smaller StageActs)
 *   test_model stages  the model cut into 2 and 3 pipeline stages, chained in one process, gives
 *                      bitwise the same initial weights, losses and gradients as one stage: init is
 *                      a function of (seed, name) only, and the chain runs the same ops on the same
 *                      values in the same order (only the hidden state is copied between stages),
 *                      so not even round-off may differ */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/model/model.h"
#include "text/lm_lora.h"
#include "vision/vit_lora.h"
#include "tests/support/test_model_util.h"
#include "tests/support/test_stage_chain.h"

static int failures = 0;
/* `fd_clip`, `split_clip`, `freeze_clip`: the same tests with the CLIP tower (model.vision_arch = clip),
 * LLaVA's feature layer -2 (so the last block is registered, frozen and never run) and the exact-GELU
 * projector; its image sizes chosen so that some images have the position grid and others are
 * interpolated. */
static int g_clip = 0;
static void clip_config(ModelConfig* c) {
    if (!g_clip) return;
    c->vision_arch = 1;
    c->Lv = 3;
    c->vision_feature_layer = -2;
    c->vision_image_size = 3 * c->patch; /* a 3 x 3 grid */
    c->projector_act = ACT_GELU_ERF;
}
#define EXPECT(cond, ...)                                          \
    do {                                                           \
        if (!(cond)) {                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);            \
            printf(__VA_ARGS__);                                   \
            printf("\n");                                          \
            failures++;                                            \
        }                                                          \
    } while (0)

/* ---- finite differences -------------------------------------------------------------------------- */

static double fd_loss(Stage* st, StageActs* a, const Microbatch* mb) {
    float ls;
    stage_forward(st, a, mb, NULL, NULL, &ls);
    stage_acts_release(a);
    return (double)ls / mb->n_supervised;
}

static void fd_run(const ModelConfig* cfg, const char* what);

static void test_fd(void) {
    /* Tiny, with init std 0.3 so that every nonlinearity (softmax, GELU, SiLU, norms) is off its
     * linear regime and a wrong derivative term shows. */
    ModelConfig c = {.patch = 2, .Dv = 8, .Lv = 2, .Hv = 2, .Dt = 8, .Lt = 2, .Ht = 2, .F = 12, .V = 11,
                     .min_patches = 1, .max_patches = 16, .init_std = 0.3f, .seed = 5};
    clip_config(&c);
    fd_run(&c, g_clip ? "fd clip" : "fd");
}

/* The LM variants in one model: grouped-query attention (4 query heads on 2 key/value heads), q/k/v and o
 * biases (drawn N(0, 0.3) rather than left at their zero init, so that they act on the forward), tied
 * embeddings (the embedding's gradient has the lookup's and the head's parts) and Llama-3's RoPE with
 * original_max_pos 8, so that the head's 2 frequency pairs at theta 10000 fall in different bands. */
static void test_fd_variants(void) {
    ModelConfig c = {.patch = 2, .Dv = 8, .Lv = 2, .Hv = 2, .Dt = 16, .Lt = 2, .Ht = 4, .F = 12, .V = 11,
                     .min_patches = 1, .max_patches = 16, .init_std = 0.3f, .seed = 5, .Hkv = 2, .qkv_bias = 1,
                     .o_bias = 1, .tie_embeddings = 1, .rope_llama3 = 1, .rope_factor = 8, .rope_low_freq_factor = 1,
                     .rope_high_freq_factor = 4, .rope_original_max_pos = 8};
    clip_config(&c);
    fd_run(&c, g_clip ? "fd variants clip" : "fd variants");
}

/* LLaVA-NeXT's any-resolution images (docs/anyres.md): tiles of 4 pixels (2 x 2 patches) on pinpoints [[4,8],[8,4],
 * [8,8]]; a wide image (rows of the grid unpadded away), a tall one (columns) and a square one; the gradients of
 * image_newline (the sum over the newline positions) and of everything below the gathers of the unpadded grid. */
static int g_anyres = 0;
static void test_fd_anyres(void) {
    ModelConfig c = {.patch = 2, .Dv = 8, .Lv = 2, .Hv = 2, .Dt = 8, .Lt = 2, .Ht = 2, .F = 12, .V = 11,
                     .min_patches = 1, .max_patches = 16, .init_std = 0.3f, .seed = 5, .anyres = 5,
                     .vision_image_size = 4};
    clip_config(&c);
    c.vision_image_size = 4; /* the tile side (CLIP: its position grid, 2 x 2) */
    g_anyres = 1;
    fd_run(&c, g_clip ? "fd anyres clip" : "fd anyres");
}

static void fd_run(const ModelConfig* cfg, const char* what) {
    ModelConfig c = *cfg;
    const char* spec = g_clip ? "p1 i3x3 a3 | p1 i1x3 p1 a2 i2x4 a2 | a3" : "p1 i2x2 a3 | p1 i1x3 p1 a2 i2x1 a2 | a3";
    uint64_t rng = 11;
    Microbatch mb;
    static const int ar_sizes[3][2] = {{3, 13}, {11, 4}, {6, 6}}; /* (h, w): wide, tall, square */
    if (g_anyres)
        tm_anyres_microbatch(&mb, "p1 i1x1 a3 | p1 i1x1 p1 a2 i1x1 a2 | a3", ar_sizes, 3, "[[4,8],[8,4],[8,8]]", 4, c.patch,
                             c.V, &rng);
    else
        tm_microbatch(&mb, spec, c.V, c.patch, &rng);
    Stage st;
    stage_init(&st, &c, 0, c.Lt, &backend_cpu);
    StageActs a;
    stage_acts_init(&a, &st, mb.T, mb.Np, 0);
    if (c.qkv_bias || c.o_bias) /* the LM's attention biases away from their zero init */
        for (int i = 0; i < st.params.n; i++) {
            const ParamSpec* s = &st.params.specs[i];
            if (!strncmp(s->name, "text.", 5) && strstr(s->name, ".attn.") && strstr(s->name, ".bias"))
                for (size_t k = 0; k < s->numel; k++)
                    st.params.data[s->offset + k] = 0.3f * (float)((double)(tm_rand(&rng) % 2001) / 1000.0 - 1.0);
        }

    char cerr[512];
    EXPECT(stage_check_microbatch(&st, &a, &mb, cerr, sizeof cerr) == 0, "%s: %s", what, cerr);
    float ls;
    stage_forward(&st, &a, &mb, NULL, NULL, &ls);
    stage_backward(&st, &a, NULL, 1.0f / mb.n_supervised, NULL);
    ParamTable* pt = &st.params;
    /* h = 3e-3. The fp32 forward carries ~1e-7 relative error, so the loss (~2.4) is known to
     * a few 1e-7 and the difference quotient to ~5e-5; the O(h^2) truncation term, measured at
     * 1% of the largest projector gradients with h = 1e-2 (curvature is high with std 0.3), is
     * ~1e-3 relative at h = 3e-3. Hence |fd - g| <= 1e-4 + 2e-3 |g| (worst seen: 0.35 of it),
     * while a wrong term (a missing branch, a wrong sign) misses by 10-100% (tried: 60x-300x). */
    const float h = 3e-3f;
    const double atol = 1e-4, rtol = 2e-3;
    int checked = 0;
    double worst = 0;
    int n_frozen = 0, n_tower = 0;
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        float* w = pt->data + s->offset;
        if (s->frozen) { /* CLIP's blocks past the feature layer and post_ln: never run, the loss ignores them */
            EXPECT(g_clip, "%s is frozen in a test that freezes nothing", s->name);
            float w0 = w[0];
            w[0] = w0 + 0.5f;
            double lp = fd_loss(&st, &a, &mb);
            w[0] = w0;
            double l0 = fd_loss(&st, &a, &mb);
            EXPECT(lp == l0, "%s is never run, yet changing it changes the loss (%.9g -> %.9g)", s->name, l0, lp);
            n_frozen++;
            continue;
        }
        /* Any-resolution images: every tensor from the gathers down (image_newline, projector, LM) is checked; the
         * tower's own backward is model_fd's (the same code, images of any grid) and its gradients through the
         * tiles and gathers are model_torch_anyres's (PyTorch, 1e-5). Here each vision tensor feeds 10 tower
         * passes and the loss's curvature in it is higher: the central difference's O(h^2) term measured 0.6% of
         * the largest patch-embedding gradient at h = 3e-3 (6.6% at 1e-2: quadratic in h, converging to the
         * analytic value), above rtol, and a smaller h or Richardson's extrapolation meets fp32 noise instead. */
        if (g_anyres && !strncmp(s->name, "vision.", 7)) {
            n_tower++;
            continue;
        }
        const float* g = pt->grad + s->goff;
        size_t pick[3];
        size_t amax = 0;
        for (size_t k = 1; k < s->numel; k++)
            if (fabsf(g[k]) > fabsf(g[amax])) amax = k;
        pick[0] = amax;
        pick[1] = tm_rand(&rng) % s->numel;
        pick[2] = tm_rand(&rng) % s->numel;
        for (int p = 0; p < 3; p++) {
            size_t k = pick[p];
            float w0 = w[k];
            w[k] = w0 + h;
            double lp = fd_loss(&st, &a, &mb);
            w[k] = w0 - h;
            double lm = fd_loss(&st, &a, &mb);
            w[k] = w0;
            double fd = (lp - lm) / (2.0 * h);
            double err = fabs(fd - g[k]);
            double tol = atol + rtol * fabs(g[k]);
            if (err / tol > worst) worst = err / tol;
            EXPECT(err <= tol, "%s[%zu]: analytic %.6e, finite difference %.6e, |diff| %.2e > tol %.2e", s->name, k,
                   g[k], fd, err, tol);
            checked++;
        }
    }
    if (g_clip) EXPECT(n_frozen == 12 + 2, "the CLIP tower froze %d tensors, expected block 2's 12 and post_ln's 2", n_frozen);
    if (g_anyres) {
        /* LLaVA-NeXT's image_newline starts as N(0, 1 / sqrt(Dt)) (LlavaNextModel's embed_std, the text hidden size),
         * not the model's init_std */
        int nl = params_find(pt, "image_newline");
        EXPECT(nl >= 0, "%s: no image_newline", what);
        if (nl >= 0)
            EXPECT(pt->specs[nl].init == PARAM_INIT_NORMAL && pt->specs[nl].init_std == 1.0f / sqrtf((float)c.Dt),
                   "%s: image_newline's init: kind %d, std %g; expected N(0, 1 / sqrt(Dt = %d)) = N(0, %g)", what,
                   (int)pt->specs[nl].init, pt->specs[nl].init_std, c.Dt, 1.0 / sqrt((double)c.Dt));
    }
    printf("%s: %d elements of %d tensors checked (%d never run%s), worst |diff|/tol = %.3f\n", what, checked,
           pt->n - n_frozen - n_tower, n_frozen, g_anyres ? ", the tower's left to model_fd and model_torch_anyres" : "",
           worst);
    stage_acts_free(&a, &st);
    stage_free(&st);
    microbatch_free(&mb); /* with the any-resolution layout's arrays */
}

/* ---- split vs fused ---------------------------------------------------------------------------------- */

static ModelConfig small_config(int Lt) {
    ModelConfig c = {.patch = 4, .Dv = 32, .Lv = 2, .Hv = 2, .Dt = 48, .Lt = Lt, .Ht = 4, .F = 96, .V = 97,
                     .min_patches = 1, .max_patches = 64, .init_std = 0.1f, .seed = 77};
    clip_config(&c);
    return c;
}
static const char* SPECS[] = {
    "p2 i2x3 p3 a5 | p1 i3x3 a4 i1x2 p1 a3",
    "p3 a4 | i2x2 p2 a6",
    "p1 i4x2 p2 a5 i1x1 a2",
};
#define NMB 3

static void split_run(const ModelConfig* cfg);

static void test_split(void) {
    ModelConfig c = small_config(2);
    split_run(&c);
}

/* the LM variants (grouped-query attention, biases, tied embeddings, Llama-3 RoPE): B then W as fused, bitwise */
static void test_split_variants(void) {
    ModelConfig c = small_config(2);
    c.Hkv = 2, c.qkv_bias = c.o_bias = 1, c.tie_embeddings = 1;
    c.rope_llama3 = 1, c.rope_factor = 8, c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4, c.rope_original_max_pos = 16;
    split_run(&c);
}

/* The NMB microbatches of SPECS drawn from rng seed `seed` into mb, their token and patch budgets; returns their
 * supervised targets. */
static int spec_microbatches(const ModelConfig* c, uint64_t seed, Microbatch* mb, int* max_T, int* max_Np) {
    uint64_t rng = seed;
    int n_sup = 0;
    for (int m = 0; m < NMB; m++) {
        tm_microbatch(&mb[m], SPECS[m], c->V, c->patch, &rng);
        n_sup += mb[m].n_supervised;
    }
    tm_budget(SPECS, NMB, max_T, max_Np);
    return n_sup;
}

static void split_run(const ModelConfig* cfg) {
    ModelConfig c = *cfg;
    Microbatch mb[NMB];
    int max_T, max_Np;
    int n_sup = spec_microbatches(&c, 3, mb, &max_T, &max_Np);
    float scale = 1.0f / n_sup;

    Stage fused;
    stage_init(&fused, &c, 0, c.Lt, &backend_cpu);
    StageActs fa;
    stage_acts_init(&fa, &fused, max_T, max_Np, 0);
    float lf[NMB], ls[NMB];
    for (int m = 0; m < NMB; m++) {
        stage_forward(&fused, &fa, &mb[m], NULL, NULL, &lf[m]);
        stage_backward(&fused, &fa, NULL, scale, NULL);
    }

    Stage split;
    stage_init(&split, &c, 0, c.Lt, &backend_cpu);
    StageActs sa[NMB];
    for (int m = 0; m < NMB; m++) stage_acts_init(&sa[m], &split, max_T, max_Np, 1);
    /* F0 F1 B0 F2 B1 W0 B2 W1 W2: microbatches in flight, W delayed (zero-bubble style). W runs in
     * microbatch order, as the fused run accumulates, so every sum is formed in the same order. */
    stage_forward(&split, &sa[0], &mb[0], NULL, NULL, &ls[0]);
    stage_forward(&split, &sa[1], &mb[1], NULL, NULL, &ls[1]);
    stage_backward_input(&split, &sa[0], NULL, scale, NULL);
    stage_forward(&split, &sa[2], &mb[2], NULL, NULL, &ls[2]);
    stage_backward_input(&split, &sa[1], NULL, scale, NULL);
    stage_backward_weight(&split, &sa[0]);
    stage_backward_input(&split, &sa[2], NULL, scale, NULL);
    stage_backward_weight(&split, &sa[1]);
    stage_backward_weight(&split, &sa[2]);

    for (int m = 0; m < NMB; m++) EXPECT(memcmp(&lf[m], &ls[m], sizeof(float)) == 0, "loss of microbatch %d: fused %.9g, split %.9g", m, lf[m], ls[m]);
    const ParamTable *pf = &fused.params, *ps = &split.params;
    EXPECT(pf->total == ps->total, "parameter counts differ");
    int nz = 0, nfz = 0;
    for (int i = 0; i < pf->n; i++) {
        const ParamSpec* s = &pf->specs[i];
        if (s->frozen) {
            nfz++;
            continue;
        }
        const float *gf = pf->grad + s->goff, *gs = ps->grad + s->goff;
        size_t bad = 0;
        double gmax = 0;
        for (size_t k = 0; k < s->numel; k++) {
            if (memcmp(&gf[k], &gs[k], sizeof(float)) != 0) bad++;
            if (fabsf(gf[k]) > gmax) gmax = fabsf(gf[k]);
        }
        if (gmax > 0) nz++;
        EXPECT(bad == 0, "%s: %zu of %zu gradient elements differ between fused and split backward", s->name, bad,
               s->numel);
    }
    /* every tensor must receive gradient here (images and text in every microbatch), or the
     * comparison would be vacuous for it */
    EXPECT(nz == pf->n - nfz, "only %d of %d tensors received a nonzero gradient", nz, pf->n - nfz);
    EXPECT(nfz == (g_clip ? 12 + 2 : 0), "%d tensors frozen", nfz);
    printf("split: %d tensors, %zu gradient floats, B/W vs fused bitwise equal: %s\n", pf->n, pf->total,
           failures ? "no" : "yes");
    for (int m = 0; m < NMB; m++) stage_acts_free(&sa[m], &split);
    stage_acts_free(&fa, &fused);
    stage_free(&split);
    stage_free(&fused);
    for (int m = 0; m < NMB; m++) tm_microbatch_free(&mb[m]);
}

/* ---- train.freeze --------------------------------------------------------------------------------------- */

/* AdamW on the trainable tensors of pt (frozen[i] from the frozen run's table: the same registration
 * order), with the clipping factor from the trainable gradients' norm (per tensor, in double). */
static void freeze_adamw(ParamTable* pt, const ParamTable* fz, int t) {
    double ss = 0;
    for (int i = 0; i < pt->n; i++) {
        if (fz->specs[i].frozen) continue;
        const float* g = params_grad(pt, i);
        for (size_t k = 0; k < pt->specs[i].numel; k++) ss += (double)g[k] * g[k];
    }
    float clip = sqrt(ss) > 0.5 ? (float)(0.5 / (sqrt(ss) + 1e-6)) : 1.0f; /* clipping engaged */
    AdamWConfig cfg = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int i = 0; i < pt->n; i++) {
        if (fz->specs[i].frozen) continue;
        const ParamSpec* s = &pt->specs[i];
        float* g = params_grad(pt, i);
        for (size_t k = 0; k < s->numel; k++) g[k] *= clip;
        backend_cpu.ops->adamw_update(&backend_cpu, params_data(pt, i), g, pt->m + s->goff, pt->v + s->goff, s->numel, &cfg, t, s->decay);
    }
}

static void freeze_case(const char* freeze, int split_bw) {
    ModelConfig c = small_config(2);
    Microbatch mb[NMB];
    int max_T, max_Np;
    int n_sup = spec_microbatches(&c, 3, mb, &max_T, &max_Np);
    float scale = 1.0f / n_sup;
    char err[1024];
    EXPECT(model_freeze_check(&c, freeze, NULL, err, sizeof err) == 0, "freeze '%s' refused: %s", freeze, err);

    Stage ref, fz;
    stage_init(&ref, &c, 0, c.Lt, &backend_cpu);
    stage_init_frozen(&fz, &c, 0, c.Lt, freeze, &backend_cpu);
    params_alloc_optimizer(&ref.params);
    params_alloc_optimizer(&fz.params);
    ParamTable *pr = &ref.params, *pf = &fz.params;
    size_t trainable = 0;
    int n_frozen = 0, vision_all = 1, n_vision = 0;
    for (int i = 0; i < pf->n; i++) {
        const ParamSpec* s = &pf->specs[i];
        if (!s->frozen) trainable += s->numel;
        n_frozen += s->frozen;
        if (!strncmp(s->name, "vision.", 7)) n_vision++, vision_all &= s->frozen;
        EXPECT((params_grad(pf, i) == NULL) == (s->frozen != 0), "%s: gradient pointer vs frozen flag", s->name);
    }
    EXPECT(n_frozen > 0 && n_frozen < pf->n, "freeze '%s' froze %d of %d tensors", freeze, n_frozen, pf->n);
    EXPECT(pf->gtotal == trainable && pf->gtotal < pf->total,
           "gradient / AdamW floats %zu, expected the trainable %zu (of %zu)", pf->gtotal, trainable, pf->total);
    float* init = mallocCheck(pf->total * sizeof(float));
    memcpy(init, pf->data, pf->total * sizeof(float));
    EXPECT(memcmp(pr->data, pf->data, pf->total * sizeof(float)) == 0, "initial weights differ");
    size_t bytes_ref = stage_acts_bytes(&ref, max_T, max_Np, split_bw), bytes_fz = stage_acts_bytes(&fz, max_T, max_Np, split_bw);
    if (vision_all) {
        /* what a ViT backward would keep: (L+1) residuals less the 2 the forward alternates, block
         * activations of L-1 blocks, and the gradient buffers: at least (L-1) * 12 N D floats */
        size_t least = (size_t)(c.Lv - 1) * 12 * max_Np * c.Dv * sizeof(float);
        EXPECT(bytes_ref - bytes_fz >= least, "frozen ViT: activations %zu bytes vs %zu unfrozen (expected >= %zu less)",
               bytes_fz, bytes_ref, least);
    }
    /* the dry run's allocation-free size (runtime/train/layout.c) says the same, frozen tower or not */
    EXPECT(model_stage_acts_bytes_lm(&c, 0, c.Lt, max_T, max_Np, split_bw, 1, 4, !vision_all) == bytes_fz,
           "model_stage_acts_bytes_lm(vit_train %d) %zu, the frozen stage %zu", !vision_all,
           model_stage_acts_bytes_lm(&c, 0, c.Lt, max_T, max_Np, split_bw, 1, 4, !vision_all), bytes_fz);
    EXPECT(model_stage_acts_bytes_lm(&c, 0, c.Lt, max_T, max_Np, split_bw, 1, 4, 1) == bytes_ref,
           "model_stage_acts_bytes_lm(vit_train 1) disagrees with the unfrozen stage");

    StageActs ra[NMB], fa[NMB];
    for (int m = 0; m < NMB; m++) {
        stage_acts_init(&ra[m], &ref, max_T, max_Np, split_bw);
        stage_acts_init(&fa[m], &fz, max_T, max_Np, split_bw);
    }
    for (int step = 1; step <= 3; step++) {
        Stage* both[2] = {&ref, &fz};
        StageActs* acts[2] = {ra, fa};
        float loss[2][NMB];
        for (int k = 0; k < 2; k++) {
            params_zero_grad(&both[k]->params);
            for (int m = 0; m < NMB; m++) stage_forward(both[k], &acts[k][m], &mb[m], NULL, NULL, &loss[k][m]);
            for (int m = 0; m < NMB; m++) {
                if (split_bw) {
                    stage_backward_input(both[k], &acts[k][m], NULL, scale, NULL);
                    stage_backward_weight(both[k], &acts[k][m]);
                } else {
                    stage_backward(both[k], &acts[k][m], NULL, scale, NULL);
                }
            }
        }
        for (int m = 0; m < NMB; m++)
            EXPECT(memcmp(&loss[0][m], &loss[1][m], sizeof(float)) == 0, "step %d microbatch %d: loss %.9g frozen vs %.9g",
                   step, m, loss[1][m], loss[0][m]);
        for (int i = 0; i < pf->n; i++) {
            if (pf->specs[i].frozen) {
                /* the reference computed this gradient; it is discarded (CLIP's blocks past the feature layer have none) */
                if (params_grad(pr, i)) memset(params_grad(pr, i), 0, pr->specs[i].numel * sizeof(float));
                continue;
            }
            EXPECT(memcmp(params_grad(pr, i), params_grad(pf, i), pf->specs[i].numel * sizeof(float)) == 0,
                   "step %d: gradient of %s differs from the unfrozen run's", step, pf->specs[i].name);
        }
        freeze_adamw(pr, pf, step);
        freeze_adamw(pf, pf, step);
    }
    int moved = 0;
    for (int i = 0; i < pf->n; i++) {
        const ParamSpec* s = &pf->specs[i];
        const float* d = params_data(pf, i);
        if (s->frozen) {
            EXPECT(memcmp(d, init + s->offset, s->numel * sizeof(float)) == 0, "frozen %s changed", s->name);
        } else {
            moved += memcmp(d, init + s->offset, s->numel * sizeof(float)) != 0;
            EXPECT(memcmp(d, params_data(pr, i), s->numel * sizeof(float)) == 0,
                   "trainable %s differs from the run whose frozen gradients were discarded", s->name);
        }
    }
    EXPECT(moved == pf->n - n_frozen, "only %d of %d trainable tensors moved", moved, pf->n - n_frozen);
    if (vision_all) {
        /* a frozen tower's forward buffers are the stage's, one set for every microbatch in flight (StageTowerScratch):
         * each microbatch keeps its output alone (the losses and gradients above: with all NMB forwards before the
         * backwards), and the dry run's workspace counts that set once */
        EXPECT(fz.vit_fwd && fz.vit_fwd->block, "frozen tower: no shared forward scratch");
        EXPECT(fa[0].vit.x.p == fa[1].vit.x.p && fa[0].vit.blocks[0].fc1.p == fa[1].vit.blocks[0].fc1.p && fa[0].vit.tmp.p == fa[1].vit.tmp.p,
               "frozen tower: the microbatches' forward buffers are not shared");
        EXPECT(fa[0].vit.vout.p != fa[1].vit.vout.p, "frozen tower: the microbatches share their output");
        EXPECT((char*)fa[0].vit.x.p >= (char*)fz.vit_fwd->block && (char*)fa[0].vit.x.p < (char*)fz.vit_fwd->block + fz.vit_fwd->bytes,
               "frozen tower: the residual is not in the stage's scratch");
        size_t ws = 0;
        model_stage_acts_bytes_rc(&c, 0, c.Lt, max_T, max_Np, split_bw, 1, 4, 0, RECOMPUTE_NONE, RECOMPUTE_NONE, &ws);
        EXPECT(ws == fz.vit_fwd->bytes, "the dry run's workspace %zu bytes, the frozen tower's scratch %zu", ws, fz.vit_fwd->bytes);
        /* at least one block's forward set (ln1, qkv, att, xmid, ln2, fc1, gelu: 15 N D floats) and two residuals */
        EXPECT(fz.vit_fwd->bytes >= (size_t)17 * max_Np * c.Dv * sizeof(float), "frozen tower's scratch %zu bytes", fz.vit_fwd->bytes);
    } else {
        EXPECT(!fz.vit_fwd, "a training tower has the frozen tower's shared scratch");
    }
    long vb = fz.n_vit_backward;
    if (vision_all) EXPECT(vb == 0, "vision frozen, but the ViT backward ran %ld times", vb);
    else EXPECT(vb > 0, "a vision tensor trains, but the ViT backward never ran");
    EXPECT(ref.n_vit_backward > 0, "the unfrozen run never ran the ViT backward");
    printf("freeze '%s' (%s backward): %d of %d tensors frozen, gradient + AdamW floats %zu of %zu, ViT backward runs "
           "%ld (unfrozen %ld), activations %zu vs %zu bytes\n",
           freeze, split_bw ? "split" : "fused", n_frozen, pf->n, pf->gtotal, pf->total, vb, ref.n_vit_backward,
           bytes_fz, bytes_ref);
    for (int m = 0; m < NMB; m++) {
        stage_acts_free(&ra[m], &ref);
        stage_acts_free(&fa[m], &fz);
        tm_microbatch_free(&mb[m]);
    }
    free(init);
    stage_free(&ref);
    stage_free(&fz);
}

static void test_freeze(void) {
    const char* cases[] = {"vision,text", "vision", "projector", "text.embed, vision.blocks.0,vision.patch_embed, text.blocks.1.mlp",
                           g_clip ? "vision.pre_ln,text.lm_head,text.norm" : "vision.ln_f,text.lm_head,text.norm"}; /* CLIP: no ln_f */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int split_bw = 0; split_bw < 2; split_bw++) freeze_case(cases[i], split_bw);
    /* refused lists: a name that matches nothing (a prefix must end at a dot), and everything */
    ModelConfig c = small_config(2);
    char err[1024];
    EXPECT(model_freeze_check(&c, "vision,txt", NULL, err, sizeof err) != 0 && strstr(err, "'txt' names no parameter"),
           "'txt' accepted or unclear: %s", err);
    EXPECT(model_freeze_check(&c, "text.block", NULL, err, sizeof err) != 0, "'text.block' (not at a dot) accepted");
    EXPECT(model_freeze_check(&c, "text.blocks.5", NULL, err, sizeof err) != 0, "a block the model lacks accepted");
    EXPECT(model_freeze_check(&c, "vision,projector,text", NULL, err, sizeof err) != 0 && strstr(err, "nothing would train"),
           "freezing everything accepted: %s", err);
}

/* ---- the forward-only stage (eval, generate) ------------------------------------------------------------- */

/* stage_init_forward against stage_init on the same values (random, every tensor: the LoRA adapters' B too), fp32 and
 * bf16, without and with LoRA (CLIP: the tower's adapters too): every microbatch's loss and logits the same bits, and
 * the forward-only stage holds no gradient buffer, no master on bf16, a frozen tower's scratch, no ViT backward. */
static void forward_only_case(const Backend* be, int lora) {
    ModelConfig c = small_config(2);
    if (lora) {
        char e[256];
        c.lora_r = 4;
        c.lora_alpha = 8;
        EXPECT(lm_lora_targets_parse("q,v,down", &c.lora_targets, e, sizeof e) == 0, "%s", e);
        if (g_clip) EXPECT(vit_lora_targets_parse("vision.all", &c.vision_lora_targets, e, sizeof e) == 0, "%s", e);
    }
    Microbatch mb[NMB];
    int max_T, max_Np;
    spec_microbatches(&c, 5, mb, &max_T, &max_Np);
    Stage ref, fo;
    stage_init(&ref, &c, 0, c.Lt, be);
    stage_init_forward(&fo, &c, be);
    ParamTable *pr = &ref.params, *pf = &fo.params;
    EXPECT(pr->n == pf->n && pr->total == pf->total, "tables differ: %d / %d tensors", pr->n, pf->n);
    EXPECT(pf->grad == NULL && pf->gtotal == 0 && pf->m == NULL, "the forward-only table has a gradient or moments");
    EXPECT(pr->grad != NULL && pr->gtotal > 0, "the training table has no gradient");
    EXPECT(pf->mtotal == (be->precision == PRECISION_BF16 ? 0 : pf->total), "forward-only masters: %zu floats of %zu",
           pf->mtotal, pf->total);
    uint64_t rng = 99;
    float* vals = mallocCheck(pf->total * sizeof(float));
    for (size_t k = 0; k < pf->total; k++) vals[k] = 0.2f * (tm_uniform(&rng) - 0.5f);
    for (int i = 0; i < pf->n; i++) /* the norms' weights near 1 */
        if (pf->specs[i].ndim == 1 && strstr(pf->specs[i].name, "norm") && !strstr(pf->specs[i].name, "bias"))
            for (size_t k = 0; k < pf->specs[i].numel; k++) vals[pf->specs[i].offset + k] += 1.0f;
    ParamTable* both[2] = {pr, pf};
    for (int t = 0; t < 2; t++) { /* as checkpoint_load_model writes a table */
        int own;
        float* h = params_host_values(both[t], &own);
        memcpy(h, vals, pf->total * sizeof(float));
        params_set_host_values(both[t], h, own);
        params_master_written(both[t], -1);
        params_refresh_compute(both[t]);
    }
    StageActs ra, fa;
    stage_acts_init(&ra, &ref, max_T, max_Np, 0);
    stage_acts_init(&fa, &fo, max_T, max_Np, 0);
    int same = 1;
    for (int m = 0; m < NMB; m++) {
        float lr, lf;
        stage_forward(&ref, &ra, &mb[m], NULL, NULL, &lr);
        stage_forward(&fo, &fa, &mb[m], NULL, NULL, &lf);
        size_t n = (size_t)mb[m].T * (size_t)c.V;
        float* xr = mallocCheck(n * sizeof(float));
        float* xf = mallocCheck(n * sizeof(float));
        stage_logits_d2h(&ref, &ra, xr, n);
        stage_logits_d2h(&fo, &fa, xf, n);
        EXPECT(memcmp(&lr, &lf, sizeof lr) == 0, "microbatch %d: loss %.9g forward-only vs %.9g", m, lf, lr);
        EXPECT(isfinite(lr) && lr > 0, "microbatch %d: loss %g", m, lr);
        same &= memcmp(xr, xf, n * sizeof(float)) == 0;
        EXPECT(memcmp(xr, xf, n * sizeof(float)) == 0, "microbatch %d: logits differ", m);
        free(xr);
        free(xf);
        stage_acts_release(&ra);
        stage_acts_release(&fa);
    }
    EXPECT(fo.vit_fwd && !fo.vit_train && fo.n_vit_backward == 0, "the forward-only tower trains");
    printf("forward_only (%s%s): %d tensors, no gradient buffer (the training stage's: %zu floats), masters %zu of %zu "
           "floats, logits %s\n", be->precision == PRECISION_BF16 ? "bf16" : "fp32", lora ? ", LoRA" : "", pf->n,
           pr->gtotal, pf->mtotal, pf->total, same ? "the same bits" : "DIFFER");
    stage_acts_free(&ra, &ref);
    stage_acts_free(&fa, &fo);
    for (int m = 0; m < NMB; m++) tm_microbatch_free(&mb[m]);
    free(vals);
    stage_free(&ref);
    stage_free(&fo);
}

static void test_forward_only(void) {
    for (int lora = 0; lora < 2; lora++) {
        forward_only_case(&backend_cpu, lora);
        forward_only_case(&backend_cpu_bf16, lora);
    }
}

/* ---- pipeline stages chained in one process ----------------------------------------------------------- */

static void test_stages(void) {
    ModelConfig c = small_config(3);
    Microbatch mb[NMB];
    int max_T, max_Np;
    int n_sup = spec_microbatches(&c, 21, mb, &max_T, &max_Np);

    Stage one;
    stage_init(&one, &c, 0, c.Lt, &backend_cpu);
    float l1[NMB];
    failures += tsc_run_chain(&backend_cpu, &one, 1, mb, NMB, max_T, max_Np, 0, l1, n_sup);

    const int layouts[2][4] = {{0, 1, 3, -1}, {0, 1, 2, 3}};
    for (int li = 0; li < 2; li++) {
        int P = layouts[li][3] < 0 ? 2 : 3;
        Stage st[3];
        for (int s = 0; s < P; s++) stage_init(&st[s], &c, layouts[li][s], layouts[li][s + 1], &backend_cpu);
        float lp[NMB];
        failures += tsc_run_chain(&backend_cpu, st, P, mb, NMB, max_T, max_Np, li == 1, lp, n_sup);
        for (int m = 0; m < NMB; m++)
            EXPECT(memcmp(&l1[m], &lp[m], sizeof(float)) == 0, "%d stages: loss of microbatch %d %.9g vs %.9g", P, m,
                   lp[m], l1[m]);
        int seen = 0;
        for (int s = 0; s < P; s++) {
            const ParamTable* pt = &st[s].params;
            for (int i = 0; i < pt->n; i++) {
                const ParamSpec* sp = &pt->specs[i];
                int j = params_find(&one.params, sp->name);
                EXPECT(j >= 0, "%d stages: stage %d has '%s' that the single stage lacks", P, s, sp->name);
                if (j < 0) continue;
                seen++;
                EXPECT(memcmp(params_data(pt, i), params_data(&one.params, j), sp->numel * sizeof(float)) == 0,
                       "%d stages: initial '%s' differs from the single stage's", P, sp->name);
                if (!params_grad(pt, i) || !params_grad(&one.params, j)) { /* CLIP's never-run tensors */
                    EXPECT(!params_grad(pt, i) && !params_grad(&one.params, j) && g_clip,
                           "%d stages: '%s' frozen in one run only", P, sp->name);
                    continue;
                }
                EXPECT(memcmp(params_grad(pt, i), params_grad(&one.params, j), sp->numel * sizeof(float)) == 0,
                       "%d stages: gradient of '%s' differs from the single stage's", P, sp->name);
            }
        }
        EXPECT(seen == one.params.n, "%d stages hold %d tensors, the single stage %d", P, seen, one.params.n);
        printf("stages: %d-stage split (%s backward) vs one stage: %d tensors compared\n", P,
               li == 1 ? "B/W" : "fused", seen);
        for (int s = 0; s < P; s++) {
            /* the allocation-free sizes (--dry-run) are exactly what a real stage takes */
            EXPECT(model_stage_param_count(&c, st[s].l0, st[s].l1) == st[s].params.total,
                   "model_stage_param_count(%d, %d) disagrees with the stage's table", st[s].l0, st[s].l1);
            StageActs a;
            stage_acts_init(&a, &st[s], max_T, max_Np, 1);
            EXPECT(model_stage_acts_bytes(&c, st[s].l0, st[s].l1, max_T, max_Np, 1) == a.bytes,
                   "model_stage_acts_bytes(%d, %d) disagrees with stage_acts_init", st[s].l0, st[s].l1);
            stage_acts_free(&a, &st[s]);
            stage_free(&st[s]);
        }
    }
    /* LLaVA-1.5-7B shapes (CLIP-L/14 ViT, Vicuna-7B LM), counted without allocating: the LM alone
     * is the known 6.74B (4096 x 32 layers, F 11008, V 32000, untied head) */
    ModelConfig big = {.patch = 14, .Dv = 1024, .Lv = 24, .Hv = 16, .Dt = 4096, .Lt = 32, .Ht = 32, .F = 11008,
                       .V = 32000, .min_patches = 1, .max_patches = 576, .init_std = 0.02f, .seed = 1};
    size_t n_all = model_stage_param_count(&big, 0, 32), n_lm = model_stage_param_count(&big, 1, 32);
    size_t lm_expect = (size_t)32000 * 4096 * 2 + 32 * ((size_t)4 * 4096 * 4096 + 3 * (size_t)4096 * 11008 + 2 * 4096) + 4096;
    size_t n_first = model_stage_param_count(&big, 0, 1), block = (size_t)4 * 4096 * 4096 + 3 * (size_t)4096 * 11008 + 2 * 4096;
    EXPECT(n_all - (n_first - block - (size_t)32000 * 4096) == lm_expect,
           "7B shapes: LM parameters %zu, expected %zu", n_all - (n_first - block - (size_t)32000 * 4096), lm_expect);
    EXPECT(n_all == n_first + n_lm, "7B shapes: stages [0,1) + [1,32) = %zu + %zu != %zu", n_first, n_lm, n_all);
    printf("stages: 7B shapes counted without allocating: %.3fB parameters (%.3fB in the LM)\n", n_all / 1e9,
           lm_expect / 1e9);
    stage_free(&one);
    for (int m = 0; m < NMB; m++) tm_microbatch_free(&mb[m]);
}

/* ---- the CUDA backend against the CPU backend (label gpu; exit 77 without a device) ---------------- */

/* Per-tensor ||a - b|| / ||b|| over a table's gradients (host copies). */
static double table_rel_err(const ParamTable* pt, const float* a, const float* b, int i) {
    const ParamSpec* s = &pt->specs[i];
    double d = 0, n = 0;
    for (size_t k = 0; k < s->numel; k++) {
        double x = a[s->goff + k], y = b[s->goff + k]; /* gradients: goff (== offset when nothing is frozen) */
        d += (x - y) * (x - y);
        n += y * y;
    }
    return n > 0 ? sqrt(d / n) : sqrt(d);
}

static float* table_host(const ParamTable* pt, int grads) {
    size_t n = grads ? pt->gtotal : pt->total; /* the gradients of the trainable tensors only */
    float* h = mallocCheck((n ? n : 1) * sizeof(float));
    pt->be->dev->copy_d2h(pt->be, h, grads ? pt->grad : pt->data, n * sizeof(float));
    return h;
}

static void test_gpu(void) {
    char why[256] = "";
    const Backend* cu = backend_cuda_get(why, sizeof why);
    if (!cu) {
        printf("skipped: %s\n", why);
        exit(77);
    }
    ModelConfig c = small_config(2);
    Microbatch mb[NMB];
    int max_T, max_Np;
    int n_sup = spec_microbatches(&c, 3, mb, &max_T, &max_Np);
    float scale = 1.0f / n_sup;
    Stage sc, sg, sgs; /* CPU fused, CUDA fused, CUDA split */
    stage_init(&sc, &c, 0, c.Lt, &backend_cpu);
    stage_init(&sg, &c, 0, c.Lt, cu);
    stage_init(&sgs, &c, 0, c.Lt, cu);
    float* wc = table_host(&sc.params, 0);
    float* wg = table_host(&sg.params, 0);
    EXPECT(memcmp(wc, wg, sc.params.total * sizeof(float)) == 0, "initial weights differ between CPU and CUDA");
    StageActs ac, ag, as[NMB];
    stage_acts_init(&ac, &sc, max_T, max_Np, 0);
    stage_acts_init(&ag, &sg, max_T, max_Np, 0);
    for (int m = 0; m < NMB; m++) stage_acts_init(&as[m], &sgs, max_T, max_Np, 1);
    float lc[NMB], lg[NMB], ls[NMB];
    for (int m = 0; m < NMB; m++) {
        stage_forward(&sc, &ac, &mb[m], NULL, NULL, &lc[m]);
        stage_backward(&sc, &ac, NULL, scale, NULL);
        stage_forward(&sg, &ag, &mb[m], NULL, NULL, &lg[m]);
        stage_backward(&sg, &ag, NULL, scale, NULL);
    }
    stage_forward(&sgs, &as[0], &mb[0], NULL, NULL, &ls[0]);
    stage_forward(&sgs, &as[1], &mb[1], NULL, NULL, &ls[1]);
    stage_backward_input(&sgs, &as[0], NULL, scale, NULL);
    stage_forward(&sgs, &as[2], &mb[2], NULL, NULL, &ls[2]);
    stage_backward_input(&sgs, &as[1], NULL, scale, NULL);
    stage_backward_weight(&sgs, &as[0]);
    stage_backward_input(&sgs, &as[2], NULL, scale, NULL);
    stage_backward_weight(&sgs, &as[1]);
    stage_backward_weight(&sgs, &as[2]);
    /* CPU and CUDA sum in different orders (BLIS vs cuBLAS tiles, tiled attention): the same fp32
     * round-off argument as tests/support/ref/llava_ref.py gives ~1e-6 per tensor; bound 1e-5. */
    for (int m = 0; m < NMB; m++)
        EXPECT(fabs(lc[m] - lg[m]) <= 1e-5 * fabs(lc[m]), "loss of microbatch %d: CPU %.9g CUDA %.9g", m, lc[m],
               lg[m]);
    float* gc = table_host(&sc.params, 1);
    float* gg = table_host(&sg.params, 1);
    float* gs = table_host(&sgs.params, 1);
    double worst = 0;
    for (int i = 0; i < sc.params.n; i++) {
        const char* name = sc.params.specs[i].name;
        if (sc.params.specs[i].frozen) continue; /* CLIP's never-run tensors */
        double e = table_rel_err(&sc.params, gg, gc, i);
        if (e > worst) worst = e;
        EXPECT(e <= 1e-5, "gradient of %s: CUDA vs CPU relative error %.2e > 1e-5", name, e);
        /* split vs fused on CUDA: bitwise, except the embedding, whose CUDA backward adds with
         * atomics (the order of equal-id rows varies from run to run): round-off there */
        double es = table_rel_err(&sc.params, gs, gg, i);
        if (!strcmp(name, "text.embed.weight") || !strcmp(name, "vision.pos_embed.weight") ||
            !strcmp(name, "vision.class_embedding")) /* atomics: the rows many tokens share */
            EXPECT(es <= 1e-6, "gradient of %s: CUDA split vs fused relative error %.2e", name, es);
        else
            EXPECT(es == 0, "gradient of %s: CUDA split vs fused differ (relative %.2e), expected bitwise", name, es);
    }
    printf("gpu: %d tensors, worst CUDA vs CPU gradient relative error %.2e\n", sc.params.n, worst);
    free(wc);
    free(wg);
    free(gc);
    free(gg);
    free(gs);
    for (int m = 0; m < NMB; m++) stage_acts_free(&as[m], &sgs);
    stage_acts_free(&ac, &sc);
    stage_acts_free(&ag, &sg);
    stage_free(&sc);
    stage_free(&sg);
    stage_free(&sgs);
    for (int m = 0; m < NMB; m++) tm_microbatch_free(&mb[m]);
}

/* ---- 2-byte activations (label gpu, and on the emulation) -----------------------------------------------
 * runtime.precision = bf16 on CUDA: a stage's LM stores its activations as 2-byte bf16 words (lc.act_bytes = 2), and
 * so do the RoPE tower and projector of a first stage (vc.act_bytes), on the one bf16 table. The numerics are the
 * same, so the same step with the gate off (RRFP_BF16_ACTIVATIONS=0: f32-word activations) must give the same losses
 * and gradients. In the emulation: bitwise, but for the tensors whose CUDA backward adds with atomics (round-off).
 * On a device cuBLASLt may choose another algorithm for a bf16 D than for an f32 one (and cuDNN runs on other
 * buffers), so a stored activation may round the other way: there losses within 1e-3 and each gradient within
 * 3e-2 relative (design bounds, not yet measured). Run as one stage (fused backward) and as two pipeline stages
 * (split B then W) exchanging f32 hidden states, so the stage-edge conversions run too. */
#ifdef RR_CUDA_EMU
#define BF16A_EXACT 1
#else
#define BF16A_EXACT 0
#endif

/* the gradient of `name` in pt (host copy h) against the reference's */
static void bf16a_cmp_grad(const char* what, const ParamTable* ref, const float* href, const ParamTable* pt, const float* h,
                           const char* name) {
    int i = params_find(ref, name), j = params_find(pt, name);
    if (i < 0 || j < 0 || ref->specs[i].frozen) return;
    const ParamSpec *a = &ref->specs[i], *b = &pt->specs[j];
    size_t differ = 0;
    double d = 0, n = 0;
    for (size_t k = 0; k < a->numel; k++) {
        float x = href[a->goff + k], y = h[b->goff + k];
        differ += memcmp(&x, &y, sizeof x) != 0;
        d += ((double)x - y) * ((double)x - y);
        n += (double)x * x;
    }
    double e = n > 0 ? sqrt(d / n) : sqrt(d);
    if (!BF16A_EXACT)
        EXPECT(e <= 3e-2, "%s: gradient of %s: relative %.2e from the bf16 table's", what, name, e);
    else if (!strcmp(name, "text.embed.weight") || !strcmp(name, "vision.pos_embed.weight") ||
             !strcmp(name, "vision.class_embedding")) /* atomics: the rows many tokens share */
        EXPECT(e <= 1e-6, "%s: gradient of %s: relative %.2e from the bf16 table's", what, name, e);
    else
        EXPECT(differ == 0, "%s: gradient of %s: %zu values differ from the bf16 table's (relative %.2e)", what, name,
               differ, e);
}

static int bf16a_run(const ModelConfig* cfg, const Backend* b16) {
    ModelConfig c = *cfg;
    Microbatch mb[NMB];
    int max_T, max_Np, cut = c.Lt / 2;
    int n_sup = spec_microbatches(&c, 11, mb, &max_T, &max_Np);
    float scale = 1.0f / n_sup;
    setenv("RRFP_BF16_ACTIVATIONS", "0", 1);
    Stage ref;
    stage_init(&ref, &c, 0, c.Lt, b16);
    unsetenv("RRFP_BF16_ACTIVATIONS");
    Stage one, two[2];
    stage_init(&one, &c, 0, c.Lt, b16);
    stage_init(&two[0], &c, 0, cut, b16);
    stage_init(&two[1], &c, cut, c.Lt, b16);
    EXPECT(lm_act_dtype(&ref.lc) == DTYPE_F32 && vit_act_dtype(&ref.vc) == DTYPE_F32,
           "RRFP_BF16_ACTIVATIONS=0 left the gate on");
    int gated = b16->ops->bf16_activations && lm_act_dtype(&one.lc) == DTYPE_BF16 &&
                lm_act_dtype(&two[0].lc) == DTYPE_BF16 && lm_act_dtype(&two[1].lc) == DTYPE_BF16 && one.be == b16 &&
                ref.be == b16;
    EXPECT(gated, "the stages' LM is not on 2-byte activations (the path this test names did not run)");
    if (!gated) return 0;
    /* the tower and the projector run there too (the RoPE tower and CLIP's with its exact-GELU projector) */
    EXPECT(vit_act_dtype(&one.vc) == DTYPE_BF16 && vit_act_dtype(&two[0].vc) == DTYPE_BF16,
           "the tower is not on 2-byte activations");
    /* CLIP's gather tables (class, position embeddings): 2-byte compute copies AdamW writes (params_mark_act_table),
     * read as they are, no narrowing in the step; f32 words with the gate off */
    if (g_clip)
        EXPECT(one.vit_w.tables16 && two[0].vit_w.tables16 && !ref.vit_w.tables16,
               "CLIP's class / position tables are not 2-byte compute copies with 2-byte activations (gate on %d %d, "
               "off %d)", one.vit_w.tables16, two[0].vit_w.tables16, ref.vit_w.tables16);
    StageActs ar, a1, a2[2];
    stage_acts_init(&ar, &ref, max_T, max_Np, 0);
    stage_acts_init(&a1, &one, max_T, max_Np, 0);
    for (int s = 0; s < 2; s++) stage_acts_init(&a2[s], &two[s], max_T, max_Np, 1);
    EXPECT(a1.bytes < ar.bytes, "2-byte activations take %zu bytes, f32 words %zu", a1.bytes, ar.bytes);
    float* hid = b16->dev->alloc((size_t)max_T * c.Dt * sizeof(float));
    float* dhid = b16->dev->alloc((size_t)max_T * c.Dt * sizeof(float));
    for (int m = 0; m < NMB; m++) {
        float lr, l1, l2;
        stage_forward(&ref, &ar, &mb[m], NULL, NULL, &lr);
        stage_backward(&ref, &ar, NULL, scale, NULL);
        stage_forward(&one, &a1, &mb[m], NULL, NULL, &l1);
        stage_backward(&one, &a1, NULL, scale, NULL);
        stage_forward(&two[0], &a2[0], &mb[m], NULL, hid, NULL);
        stage_forward(&two[1], &a2[1], &mb[m], hid, NULL, &l2);
        stage_backward_input(&two[1], &a2[1], NULL, scale, dhid);
        stage_backward_weight(&two[1], &a2[1]);
        stage_backward_input(&two[0], &a2[0], dhid, scale, NULL);
        stage_backward_weight(&two[0], &a2[0]);
        int same = BF16A_EXACT ? memcmp(&lr, &l1, sizeof lr) == 0 && memcmp(&lr, &l2, sizeof lr) == 0
                               : fabsf(l1 - lr) <= 1e-3f * fabsf(lr) && fabsf(l2 - lr) <= 1e-3f * fabsf(lr);
        EXPECT(same, "loss of microbatch %d: bf16 table %.9g, 2-byte activations %.9g (one stage) %.9g (two)", m, lr, l1, l2);
    }
    float *gr = table_host(&ref.params, 1), *g1 = table_host(&one.params, 1);
    float *g20 = table_host(&two[0].params, 1), *g21 = table_host(&two[1].params, 1);
    for (int i = 0; i < ref.params.n; i++) {
        const char* name = ref.params.specs[i].name;
        bf16a_cmp_grad("one stage", &ref.params, gr, &one.params, g1, name);
        int j0 = params_find(&two[0].params, name), j1 = params_find(&two[1].params, name);
        if (j0 >= 0 && j1 >= 0) { /* the tied embedding: the trainer sums the first stage's and the last's copy's */
            const ParamSpec *a = &two[0].params.specs[j0], *b = &two[1].params.specs[j1];
            for (size_t k = 0; k < a->numel; k++) g20[a->goff + k] += g21[b->goff + k];
        }
        if (j0 >= 0) bf16a_cmp_grad("two stages", &ref.params, gr, &two[0].params, g20, name);
        else bf16a_cmp_grad("two stages", &ref.params, gr, &two[1].params, g21, name);
    }
    int n = ref.params.n;
    free(gr), free(g1), free(g20), free(g21);
    b16->dev->free(hid), b16->dev->free(dhid);
    stage_acts_free(&ar, &ref);
    stage_acts_free(&a1, &one);
    for (int s = 0; s < 2; s++) stage_acts_free(&a2[s], &two[s]);
    stage_free(&ref), stage_free(&one), stage_free(&two[0]), stage_free(&two[1]);
    for (int m = 0; m < NMB; m++) tm_microbatch_free(&mb[m]);
    return n;
}

static void test_gpu_bf16a(void) {
    char why[256] = "";
    const Backend* cu = backend_cuda_get(why, sizeof why);
    if (!cu) {
        printf("skipped: %s\n", why);
        exit(77);
    }
    const Backend* b16 = backend_with_precision(cu, PRECISION_BF16);
    ModelConfig c = small_config(2);
    int n = bf16a_run(&c, b16);
    /* the LM variants: grouped-query attention (the own kernel), q / k / v / o biases (cuBLASLt's bias epilogue with
     * a bf16 D), tied embeddings, Llama-3 RoPE (with the RoPE tower only: CLIP's adds nothing to the LM's paths) */
    if (g_clip) {
        printf("gpu_bf16a: %d + 0 tensors, 2-byte activations equal the bf16 table's\n", n);
        return;
    }
    c.Hkv = 2, c.qkv_bias = c.o_bias = 1, c.tie_embeddings = 1;
    c.rope_llama3 = 1, c.rope_factor = 8, c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4, c.rope_original_max_pos = 16;
    int nv = bf16a_run(&c, b16);
    printf("gpu_bf16a: %d + %d tensors, 2-byte activations equal the bf16 table's\n", n, nv);
}

/* ---- bad microbatches: each must stop with a message naming what is wrong (see model.cmake) ------- */

static void test_bad(const char* what) {
    ModelConfig c = small_config(2);
    uint64_t rng = 5;
    Microbatch mb;
    tm_microbatch(&mb, "p2 i2x3 p3 a5 | p1 a4", c.V, c.patch, &rng);
    Stage st;
    stage_init(&st, &c, 0, c.Lt, &backend_cpu);
    StageActs a;
    int max_T = mb.T, max_Np = mb.Np;
    if (!strcmp(what, "budget")) max_T = mb.T - 1;          /* more positions than the budget */
    if (!strcmp(what, "image_id")) mb.ids[4] = 3;            /* a token id inside the image span */
    if (!strcmp(what, "target")) mb.targets[7] = c.V + 100;  /* a target outside the vocabulary */
    if (!strcmp(what, "grid")) mb.grid_w[0] = 4;             /* grid disagrees with the patch count */
    if (!strcmp(what, "pos")) mb.pos[mb.cu_seqlens[1]] = 3;  /* positions must restart per sample */
    if (!strcmp(what, "overlap")) {                           /* a second image inside the first */
        tm_microbatch_free(&mb);
        tm_microbatch(&mb, "p2 i2x2 i1x2 a5", c.V, c.patch, &rng);
        mb.img_lm_start[1] = 4;
    }
    if (!strncmp(what, "anyres_", 7)) { /* any-resolution images (tiles of 8 px, 2 x 2 patches of 4) */
        microbatch_free(&mb);
        static const int sz[1][2] = {{5, 23}};
        tm_anyres_microbatch(&mb, "p2 i1x1 a5", sz, 1, "[[8,16],[16,8],[16,16]]", 8, c.patch, c.V, &rng);
        if (!strcmp(what, "anyres_grid")) mb.ar_grid[1] = 1;   /* a tile grid that is not the image's tower images' */
        c.anyres = !strcmp(what, "anyres_model") ? 0 : 5, c.vision_image_size = 8; /* anyres_model: a model without them */
        stage_free(&st);
        stage_init(&st, &c, 0, c.Lt, &backend_cpu);
        max_T = mb.T, max_Np = mb.Np;
    }
    stage_acts_init(&a, &st, max_T, max_Np, 0);
    /* what every caller of stage_forward runs first (step executors, eval): refused with a message */
    char err[1024];
    if (stage_check_microbatch(&st, &a, &mb, err, sizeof err) != 0) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
        exit(1);
    }
    printf("bad %s: the microbatch was accepted\n", what);
    exit(1 + 2); /* neither success nor the expected exit 1 */
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s fd|fd_variants|split|split_variants|stages|freeze[_clip]\n", argv[0]);
        return 2;
    }
    char mode[64];
    snprintf(mode, sizeof mode, "%s", argv[1]);
    size_t ml = strlen(mode);
    if (ml > 5 && !strcmp(mode + ml - 5, "_clip")) {
        g_clip = 1;
        mode[ml - 5] = 0;
        argv[1] = mode;
    }
    if (!strcmp(argv[1], "fd"))
        test_fd();
    else if (!strcmp(argv[1], "fd_variants"))
        test_fd_variants();
    else if (!strcmp(argv[1], "fd_anyres"))
        test_fd_anyres();
    else if (!strcmp(argv[1], "split"))
        test_split();
    else if (!strcmp(argv[1], "split_variants"))
        test_split_variants();
    else if (!strcmp(argv[1], "stages"))
        test_stages();
    else if (!strcmp(argv[1], "freeze"))
        test_freeze();
    else if (!strcmp(argv[1], "forward_only"))
        test_forward_only();
    else if (!strcmp(argv[1], "gpu"))
        test_gpu();
    else if (!strcmp(argv[1], "gpu_bf16a"))
        test_gpu_bf16a();
    else if (!strncmp(argv[1], "bad_", 4))
        test_bad(argv[1] + 4);
    else {
        fprintf(stderr, "unknown test '%s'\n", argv[1]);
        return 2;
    }
    if (failures) printf("%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
