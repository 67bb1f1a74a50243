/* test_tower_stages.c — the tower over pipeline stages (docs/anyres.md "The tower over stages"), chained in one process.
 *
 *   test_tower_stages anyres  a tiny any-resolution model (the RoPE tower, 3 blocks; LLaVA-NeXT tiles)
 *   test_tower_stages clip    a tiny LLaVA-1.5 (the CLIP tower, 4 blocks, feature layer -2: block 3 never runs)
 *
 * Each cuts the chain [tower blocks][LM blocks] into 2 and 3 stages with tower-only stages before the one holding LM
 * block 0 (tower blocks on stages 0 and 1, the LM on 1 and 2; two tower-only stages; the first LM stage holding no
 * block that runs), passes the tower's hidden state forward and its gradient back between them, and checks against
 * one stage holding everything: the same tensors (each stage its own blocks only), bitwise the same initial weights,
 * losses and gradients, with the fused and the split (B then W) backward, with a trainable tower, a frozen one
 * (train.freeze = vision: no tower stage runs a backward, no gradient travels back to them) and one frozen below
 * block 1 (the stages under the floor get no gradient). Only the hidden states are copied between stages, so the
 * same ops run on the same values in the same order: not even round-off may differ.
 *
 *   test_tower_stages MODEL gpu | gpu_bf16   the same on the CUDA backend (test_tower_stages_emu: the emulated CUDA
 *                                            runtime), f32 or runtime.precision = bf16 with 2-byte activations (the
 *                                            tower's edges narrowed and widened, the gradient's 2-byte copy made at the
 *                                            edge); exit 77 without a device */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model/model.h"
#include "tests/support/test_model_util.h"
#include "tests/support/check.h"
#include "tests/support/test_stage_chain.h"

static const Backend* g_be = &backend_cpu;

#define NMB 3
#define MAXS 4

/* A stage of a layout: LM blocks [l0, l1), tower blocks [tv0, tv1) */
typedef struct {
    int l0, l1, tv0, tv1;
} Cut;

/* the names of tower block l's tensors start so */
static int holds_block(const Stage* st, int l) {
    char n[64];
    snprintf(n, sizeof n, "vision.blocks.%d.ln1.weight", l);
    return params_find(&st->params, n) >= 0;
}

/* the tensors whose gradient a gather's backward accumulates (CLIP's position and class tables, image_newline, the
 * token embedding): float atomics on CUDA */
static double worst_scatter = 0;
static int scatter_grad(const char* name) {
    return !strcmp(name, "vision.pos_embed.weight") || !strcmp(name, "vision.class_embedding") || !strcmp(name, "image_newline") ||
           !strcmp(name, "text.embed.weight");
}

/* a table's values (grads = 0) or gradients in host memory */
static float* table_host(const ParamTable* pt, int grads) {
    size_t n = grads ? pt->gtotal : pt->total;
    float* h = mallocCheck((n ? n : 1) * sizeof(float));
    if (grads) {
        pt->be->dev->copy_d2h(pt->be, h, pt->grad, n * sizeof(float));
    } else { /* every value in the host layout (a frozen tensor of a bf16 run: its compute copy's values) */
        int own;
        float* v = params_host_values(pt, &own);
        memcpy(h, v, n * sizeof(float));
        if (own) free(v);
    }
    return h;
}

static void check_layout(const ModelConfig* c, const Cut* cut, int P, const char* freeze, int split_bw, const Microbatch* mb,
                         int max_T, int max_Np, int n_sup) {
    Stage one;
    stage_init_frozen(&one, c, 0, c->Lt, freeze, g_be);
    float l1[NMB], lp[NMB];
    check_failures += tsc_run_chain(g_be, &one, 1, mb, NMB, max_T, max_Np, 0, l1, n_sup);
    Stage st[MAXS];
    for (int s = 0; s < P; s++)
        stage_init_tower(&st[s], c, cut[s].l0, cut[s].l1, cut[s].tv0, cut[s].tv1, freeze, g_be, 1, 0, NULL);
    for (int s = 0; s < P; s++) /* gpu_bf16: the tower stages on 2-byte activations (their edges narrowed and widened) */
        CHECK(!st[s].tower || st[s].vc.act_bytes == (g_be->precision == PRECISION_BF16 && g_be != &backend_cpu ? 2 : 0),
               "stage %d: tower activations of %d bytes", s, st[s].vc.act_bytes);
    check_failures += tsc_run_chain(g_be, st, P, mb, NMB, max_T, max_Np, split_bw, lp, n_sup);
    char what[160];
    snprintf(what, sizeof what, "%d stages (tower", P);
    for (int s = 0; s < P; s++)
        snprintf(what + strlen(what), sizeof what - strlen(what), " %d:[%d,%d)", s, st[s].tv0, st[s].tv1);
    snprintf(what + strlen(what), sizeof what - strlen(what), ", freeze '%s', %s)", freeze, split_bw ? "B/W" : "fused");
    for (int m = 0; m < NMB; m++)
        CHECK(memcmp(&l1[m], &lp[m], sizeof(float)) == 0, "%s: loss of microbatch %d %.9g vs %.9g", what, m, lp[m], l1[m]);
    int seen = 0;
    float *ov = table_host(&one.params, 0), *og = table_host(&one.params, 1);
    for (int s = 0; s < P; s++) {
        /* the split happened: each stage holds its own tower blocks and no other */
        for (int l = 0; l < c->Lv; l++)
            CHECK(holds_block(&st[s], l) == (st[s].tower && l >= cut[s].tv0 && l < cut[s].tv1), "%s: stage %d %s tower block %d",
                   what, s, holds_block(&st[s], l) ? "holds" : "lacks", l);
        CHECK((params_find(&st[s].params, "vision.patch_embed.weight") >= 0) == (st[s].tower && cut[s].tv0 == 0),
               "%s: stage %d and the patch embedding", what, s);
        const ParamTable* pt = &st[s].params;
        float *sv = table_host(pt, 0), *sg = table_host(pt, 1);
        for (int i = 0; i < pt->n; i++) {
            const ParamSpec* sp = &pt->specs[i];
            int j = params_find(&one.params, sp->name);
            CHECK(j >= 0, "%s: stage %d has '%s' that the single stage lacks", what, s, sp->name);
            if (j < 0) continue;
            seen++;
            const ParamSpec* sj = &one.params.specs[j];
            CHECK(memcmp(sv + sp->offset, ov + sj->offset, sp->numel * sizeof(float)) == 0, "%s: initial '%s' differs", what,
                   sp->name);
            CHECK(!params_grad(pt, i) == !params_grad(&one.params, j), "%s: '%s' frozen in one run only", what, sp->name);
            if (!params_grad(pt, i) || !params_grad(&one.params, j)) continue;
            if (g_be != &backend_cpu && scatter_grad(sp->name)) {
                /* CUDA: a gather's backward adds its rows with float atomics, in the device's order (not the same
                 * from one launch to the next: tests/runtime/train/train_cuda_emu.sh TOL_RESUME), so its sums match
                 * to fp32 reordering: within 1e-6 of the tensor's largest element */
                double d = 0, m = 0;
                for (size_t k = 0; k < sp->numel; k++) {
                    double x = sg[sp->goff + k], y = og[sj->goff + k];
                    d = fabs(x - y) > d ? fabs(x - y) : d;
                    m = fabs(y) > m ? fabs(y) : m;
                }
                CHECK(d <= 1e-6 * m, "%s: gradient of '%s' differs by %.3g (largest %.3g)", what, sp->name, d, m);
                if (d > worst_scatter * m) worst_scatter = m > 0 ? d / m : 0;
                continue;
            }
            CHECK(memcmp(sg + sp->goff, og + sj->goff, sp->numel * sizeof(float)) == 0,
                   "%s: gradient of '%s' differs from the single stage's", what, sp->name);
        }
        free(sv), free(sg);
        /* a tower-only stage ran its backward exactly where some block at or below it trains */
        if (st[s].tower_only)
            CHECK((st[s].n_vit_backward > 0) == (st[s].vit_floor < cut[s].tv1), "%s: stage %d ran %ld tower backwards (floor %d)",
                   what, s, st[s].n_vit_backward, st[s].vit_floor);
    }
    free(ov), free(og);
    CHECK(seen == one.params.n, "%s: the stages hold %d tensors, the single stage %d", what, seen, one.params.n);
    printf("tower stages: %s: %d tensors equal to one stage (bitwise%s)\n", what, seen,
           g_be != &backend_cpu ? "; CUDA's atomic gather sums to round-off" : "");
    for (int s = 0; s < P; s++) stage_free(&st[s]);
    stage_free(&one);
}

int main(int argc, char** argv) {
    if (argc < 2 || argc > 3 || (strcmp(argv[1], "anyres") && strcmp(argv[1], "clip")) ||
        (argc == 3 && strcmp(argv[2], "gpu") && strcmp(argv[2], "gpu_bf16"))) {
        fprintf(stderr, "usage: %s anyres|clip [gpu|gpu_bf16]\n", argv[0]);
        return 2;
    }
    if (argc == 3) {
        char why[256] = "";
        const Backend* cu = backend_cuda_get(why, sizeof why);
        if (!cu) {
            printf("skipped: %s\n", why);
            return 77;
        }
        g_be = strcmp(argv[2], "gpu_bf16") ? cu : backend_with_precision(cu, PRECISION_BF16);
    }
    int clip = !strcmp(argv[1], "clip");
    ModelConfig c;
    Microbatch mb[NMB];
    int max_T = 1, max_Np = 0, n_sup = 0;
    uint64_t rng = 29;
    const char* freeze_low;
    if (clip) { /* LLaVA-1.5's shape: CLIP, hidden_states[-2] (block 3 registered, frozen, never run) */
        c = (ModelConfig){.patch = 4, .Dv = 32, .Lv = 4, .Hv = 2, .Dt = 48, .Lt = 2, .Ht = 4, .F = 96, .V = 97, .min_patches = 1,
                          .max_patches = 64, .init_std = 0.1f, .seed = 77, .vision_arch = 1, .vision_feature_layer = -2,
                          .vision_image_size = 12, .projector_act = ACT_GELU_ERF};
        static const char* specs[NMB] = {"p2 i2x3 p3 a5 | p1 i3x3 a4 i1x2 p1 a3", "p3 a4 | i2x2 p2 a6", "p1 i3x3 p2 a5 i1x1 a2"};
        for (int m = 0; m < NMB; m++) tm_microbatch(&mb[m], specs[m], c.V, c.patch, &rng);
        freeze_low = "vision.patch_embed,vision.class_embedding,vision.pos_embed,vision.pre_ln,vision.blocks.0";
    } else { /* LLaVA-NeXT's tiles: 4-pixel tiles of 2 x 2 patches on pinpoints [[4,8],[8,4],[8,8]] */
        c = (ModelConfig){.patch = 2, .Dv = 16, .Lv = 3, .Hv = 2, .Dt = 16, .Lt = 2, .Ht = 2, .F = 24, .V = 31, .min_patches = 1,
                          .max_patches = 16, .init_std = 0.2f, .seed = 5, .anyres = 5, .vision_image_size = 4};
        static const int sizes[3][2] = {{3, 13}, {11, 4}, {6, 6}};
        static const char* specs[NMB] = {"p1 i1x1 a3 | p1 i1x1 a2", "p2 a4 | p1 i1x1 p1 a2", "p1 i1x1 a3 i1x1 a2"};
        static const int J[NMB] = {2, 1, 2}, k0[NMB] = {0, 2, 0};
        for (int m = 0; m < NMB; m++)
            tm_anyres_microbatch(&mb[m], specs[m], &sizes[k0[m]], J[m], "[[4,8],[8,4],[8,8]]", 4, c.patch, c.V, &rng);
        freeze_low = "vision.patch_embed,vision.blocks.0";
    }
    (void)tm_budget; /* the any-resolution budget is counted here */
    for (int m = 0; m < NMB; m++) {
        n_sup += mb[m].n_supervised;
        if (mb[m].T > max_T) max_T = mb[m].T;
        if (mb[m].Np > max_Np) max_Np = mb[m].Np;
    }
    int Lv = c.Lv, Lt = c.Lt;
    /* tower blocks [0, 2) alone, then [2, Lv) with the LM; tower on stages 0 and 1 with the LM on 1 and 2; two
     * tower-only stages; CLIP: a first LM stage holding only the never-run block 3 (its input the features' layer) */
    const Cut two[2] = {{0, 0, 0, 2}, {0, Lt, 2, Lv}};
    const Cut three[3] = {{0, 0, 0, 1}, {0, 1, 1, Lv}, {1, Lt, 0, 0}};
    const Cut three_t[3] = {{0, 0, 0, 1}, {0, 0, 1, 2}, {0, Lt, 2, Lv}};
    const Cut top[2] = {{0, 0, 0, Lv - 1}, {0, Lt, Lv - 1, Lv}};
    const char* freezes[3] = {"", "vision", freeze_low};
    for (int f = 0; f < 3; f++) {
        check_layout(&c, two, 2, freezes[f], 0, mb, max_T, max_Np, n_sup);
        check_layout(&c, three, 3, freezes[f], 1, mb, max_T, max_Np, n_sup);
    }
    check_layout(&c, three_t, 3, "", 0, mb, max_T, max_Np, n_sup);
    check_layout(&c, three_t, 3, freeze_low, 1, mb, max_T, max_Np, n_sup);
    check_layout(&c, top, 2, "", 1, mb, max_T, max_Np, n_sup);
    {
        /* the floor: freeze_low leaves block 1 the lowest that trains; a frozen tower none */
        CHECK(model_vit_floor(&c, freeze_low) == 1, "floor under '%s': %d", freeze_low, model_vit_floor(&c, freeze_low));
        CHECK(model_vit_floor(&c, "vision") == (clip ? Lv - 1 : Lv), "floor of a frozen tower: %d", model_vit_floor(&c, "vision"));
        CHECK(model_vit_floor(&c, "") == 0, "floor of a trainable tower: %d", model_vit_floor(&c, ""));
    }
    for (int m = 0; m < NMB; m++) tm_microbatch_free(&mb[m]);
    if (g_be != &backend_cpu) printf("tower stages: gathers' atomic gradients within %.3g of their largest\n", worst_scatter);
    if (check_failures) printf("%d check(s) failed\n", check_failures);
    return check_failures ? 1 : 0;
}
