/* test_model_golden.c — writes step dumps that tests/support/ref/llava_ref.py (an independent PyTorch
 * implementation of docs/model.md "The model, exactly") checks. Microbatches are built directly (no loader).
 *
 *   test_model_golden vit   DIR   ViT + ln_f alone: output and weight gradients for a random dout
 *   test_model_golden lm    DIR   one step on text-only samples, 2 microbatches (fused backward)
 *   test_model_golden llava DIR   one step, 3 microbatches, 8 images of 7 sizes, two adjacent (split B/W)
 *   test_model_golden traj  DIR   10 AdamW steps (warm-up + cosine, clipping) on the same 2 microbatches
 *   test_model_golden anyres DIR  one step with any-resolution images (docs/anyres.md): a wide, a tall, a square
 *                                 and a tiny image over 2 microbatches (split B/W, then fused)
 *   test_model_golden anyres_gpu DIR  the same on the CUDA backend (exit 77 without one; the emulated build runs
 *                                 engine/cuda on the CPU)
 * The dump layout is the one `train.dump_step` uses (README.md, "Step dumps"). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/safetensors.h"
#include "runtime/model/model.h"
#include "tests/support/test_model_util.h"

static ModelConfig golden_config(float init_std) {
    ModelConfig c = {.patch = 4, .Dv = 32, .Lv = 2, .Hv = 2, .Dt = 48, .Lt = 2, .Ht = 4, .F = 96, .V = 97,
                     .min_patches = 1, .max_patches = 64, .init_std = init_std, .seed = 1234};
    return c;
}

static void check(int rc, const char* err) {
    if (rc) rr_die("%s", err);
}

static void path_join(char* out, size_t n, const char* dir, const char* name) { snprintf(out, n, "%s/%s", dir, name); }

/* ---- vit ---------------------------------------------------------------------------------------- */
static void case_vit(const char* dir) {
    const Backend* be = &backend_cpu;
    ModelConfig mc = golden_config(0.1f);
    VitConfig vc = model_config_vit(&mc);
    ParamTable pt;
    params_init(&pt);
    vit_params_add(&pt, &vc);
    params_alloc(&pt, be, mc.seed);
    VitW w, g;
    vit_weights_point(&w, &pt, &vc, 0);
    vit_weights_point(&g, &pt, &vc, 1);

    uint64_t rng = 7;
    Microbatch mb;
    tm_microbatch(&mb, "i2x3 i4x4 i1x5 i3x1", mc.V, mc.patch, &rng);
    VitActs a;
    memset(&a, 0, sizeof a);
    Arena measure = {.base = NULL, .size = SIZE_MAX, .name = "measure"};
    vit_acts_layout(&a, &measure, &vc, mb.Np, 0, 1);
    Arena ar = {.base = be->dev->alloc(measure.used), .size = measure.used, .name = "vit acts"};
    vit_acts_layout(&a, &ar, &vc, mb.Np, 0, 1);

    vit_forward(be, &vc, &w, &a, buf_f32(mb.patches), mb.img_cu_patches, mb.I, mb.patch_row, mb.patch_col, mb.Np);
    size_t ND = (size_t)mb.Np * vc.D;
    float* dvout = mallocCheck(ND * sizeof(float));
    for (size_t k = 0; k < ND; k++) dvout[k] = 2.0f * tm_uniform(&rng) - 1.0f;
    be->dev->copy_h2d(be, a.dvout, dvout, ND * sizeof(float));
    vit_backward(be, &vc, &w, &g, &a);

    char path[1024], err[512];
    path_join(path, sizeof path, dir, "config.json");
    check(model_dump_config(&mc, "{\"case\": \"vit\", \"n_microbatches\": 1}", path, err, sizeof err), err);
    Stage fake; /* stage_dump_params only needs the table and the backend */
    memset(&fake, 0, sizeof fake);
    fake.params = pt;
    fake.be = be;
    path_join(path, sizeof path, dir, "weights.safetensors");
    check(stage_dump_params(&fake, 0, path, err, sizeof err), err);
    path_join(path, sizeof path, dir, "grads.safetensors");
    check(stage_dump_params(&fake, 1, path, err, sizeof err), err);

    StWriter* sw = st_writer_new();
    int P = 3 * mc.patch * mc.patch;
    st_writer_add_f32(sw, "patches", mb.patches, 2, mb.Np, P, 0, 0);
    st_writer_add_i32(sw, "img_cu_patches", mb.img_cu_patches, 1, mb.I + 1, 0, 0, 0);
    st_writer_add_i32(sw, "grid_h", mb.grid_h, 1, mb.I, 0, 0, 0);
    st_writer_add_i32(sw, "grid_w", mb.grid_w, 1, mb.I, 0, 0, 0);
    st_writer_add_i32(sw, "patch_row", mb.patch_row, 1, mb.Np, 0, 0, 0);
    st_writer_add_i32(sw, "patch_col", mb.patch_col, 1, mb.Np, 0, 0, 0);
    st_writer_add_f32(sw, "vout", buf_f32p(a.vout), 2, mb.Np, vc.D, 0, 0); /* CPU backend: host memory */
    st_writer_add_f32(sw, "dvout", dvout, 2, mb.Np, vc.D, 0, 0);
    path_join(path, sizeof path, dir, "microbatch-0.safetensors");
    check(st_writer_write(sw, path, err, sizeof err), err);
    st_writer_free(sw);

    printf("vit: %d patches in %d images dumped to %s\n", mb.Np, mb.I, dir);
    free(dvout);
    be->dev->free(ar.base);
    vit_acts_free_tables(&a);
    vit_weights_free(&w);
    vit_weights_free(&g);
    params_free(&pt);
    tm_microbatch_free(&mb);
}

/* ---- one step (lm, llava) ---------------------------------------------------------------------- */
static const char* LM_SPECS[] = {"p3 a5 | p4 a6 | a7", "p2 a9 | p5 a3 p2 a4"};
static const char* LLAVA_SPECS[] = {
    "p2 i2x3 p3 a5 | p1 i3x3 a4 i1x2 p1 a3",
    "p3 a4 | i2x2 p2 a6",
    "p1 i4x2 i1x3 p2 a5 i1x1 a2", /* two images back to back */
};

/* A case's start: st on the CPU backend (with AdamW's state when optim), its activations for the M
 * microbatches of specs (drawn from rng seed `seed` into mb; their supervised targets in *n_sup), and its
 * weights dumped to dir/weights.safetensors. */
static void golden_begin(const char* dir, const ModelConfig* mc, const char* const* specs, int M, int split, int optim,
                         uint64_t seed, Stage* st, StageActs* a, Microbatch* mb, int* n_sup) {
    stage_init(st, mc, 0, mc->Lt, &backend_cpu);
    if (optim) params_alloc_optimizer(&st->params);
    int max_T, max_Np;
    tm_budget(specs, M, &max_T, &max_Np);
    stage_acts_init(a, st, max_T, max_Np, split);
    uint64_t rng = seed;
    *n_sup = 0;
    for (int m = 0; m < M; m++) {
        tm_microbatch(&mb[m], specs[m], mc->V, mc->patch, &rng);
        *n_sup += mb[m].n_supervised;
    }
    char path[1024], err[512];
    path_join(path, sizeof path, dir, "weights.safetensors");
    check(stage_dump_params(st, 0, path, err, sizeof err), err);
}

/* Microbatch m of a case: forward (its loss returned), dumped to dir/microbatch-<m>.safetensors, then backward with
 * loss scale 1 / n_sup (split: B then W). */
static float golden_microbatch(const char* dir, Stage* st, StageActs* a, Microbatch* mb, int m, int split, int n_sup) {
    char path[1024], err[512], fname[64];
    float ls;
    stage_forward(st, a, &mb[m], NULL, NULL, &ls);
    snprintf(fname, sizeof fname, "microbatch-%d.safetensors", m);
    path_join(path, sizeof path, dir, fname);
    check(stage_dump_microbatch(st, a, &mb[m], path, err, sizeof err), err);
    if (split) {
        stage_backward_input(st, a, NULL, 1.0f / n_sup, NULL);
        stage_backward_weight(st, a);
    } else {
        stage_backward(st, a, NULL, 1.0f / n_sup, NULL);
    }
    return ls;
}

/* A case's end: the gradients to dir/grads.safetensors, the config with the case's figures to dir/config.json. */
static void golden_end(const char* dir, Stage* st, const ModelConfig* mc, const char* name, int M, int n_sup, double loss) {
    char path[1024], err[512];
    path_join(path, sizeof path, dir, "grads.safetensors");
    check(stage_dump_params(st, 1, path, err, sizeof err), err);
    char extra[256];
    snprintf(extra, sizeof extra, "{\"case\": \"%s\", \"n_microbatches\": %d, \"n_supervised\": %d, \"loss\": %.9g}",
             name, M, n_sup, loss);
    path_join(path, sizeof path, dir, "config.json");
    check(model_dump_config(mc, extra, path, err, sizeof err), err);
}

static void case_step(const char* dir, const char* name, const char* const* specs, int M, int split) {
    ModelConfig mc = golden_config(0.1f);
    Stage st;
    StageActs a;
    Microbatch mb[8];
    int n_sup;
    golden_begin(dir, &mc, specs, M, split, 0, 99, &st, &a, mb, &n_sup);
    double loss_sum = 0;
    for (int m = 0; m < M; m++) loss_sum += golden_microbatch(dir, &st, &a, mb, m, split, n_sup);
    double loss = loss_sum / n_sup;
    golden_end(dir, &st, &mc, name, M, n_sup, loss);
    printf("%s: %d microbatches, %d supervised targets, loss %.6f, dumped to %s\n", name, M, n_sup, loss, dir);
    for (int m = 0; m < M; m++) tm_microbatch_free(&mb[m]);
    stage_acts_free(&a, &st);
    stage_free(&st);
}

/* ---- any-resolution images ---------------------------------------------------------------------- */
#define AR_TILE 12
#define AR_PINS "[[12,24],[24,12],[24,24],[36,12]]"

static void case_anyres(const char* dir, const Backend* be) {
    ModelConfig mc = golden_config(0.1f);
    mc.anyres = 1;
    mc.vision_image_size = AR_TILE;
    /* wide (rows unpadded), tall (columns unpadded), square, below every pinpoint */
    static const int sizes0[2][2] = {{5, 23}, {40, 9}}, sizes1[2][2] = {{30, 30}, {3, 4}};
    const char* specs[2] = {"p2 i1x1 p1 a4 | p1 i1x1 a3", "p3 a2 i1x1 a3 | p1 i1x1 p2 a2"};
    Microbatch mb[2];
    uint64_t rng = 77;
    tm_anyres_microbatch(&mb[0], specs[0], sizes0, 2, AR_PINS, AR_TILE, mc.patch, mc.V, &rng);
    tm_anyres_microbatch(&mb[1], specs[1], sizes1, 2, AR_PINS, AR_TILE, mc.patch, mc.V, &rng);
    Stage st;
    stage_init(&st, &mc, 0, mc.Lt, be);
    int max_T = mb[0].T > mb[1].T ? mb[0].T : mb[1].T, max_Np = mb[0].Np > mb[1].Np ? mb[0].Np : mb[1].Np;
    StageActs a;
    stage_acts_init(&a, &st, max_T, max_Np, 1);
    char path[1024], err[512];
    int n_sup = mb[0].n_supervised + mb[1].n_supervised;
    path_join(path, sizeof path, dir, "weights.safetensors");
    check(stage_dump_params(&st, 0, path, err, sizeof err), err);
    double loss_sum = 0;
    for (int m = 0; m < 2; m++) {
        check(stage_check_microbatch(&st, &a, &mb[m], err, sizeof err), err);
        loss_sum += golden_microbatch(dir, &st, &a, mb, m, m == 0, n_sup);
    }
    double loss = loss_sum / n_sup;
    golden_end(dir, &st, &mc, "anyres", 2, n_sup, loss);
    printf("anyres: %d + %d tower images, %d + %d LM positions, loss %.6f, dumped to %s\n", mb[0].I, mb[1].I, mb[0].T, mb[1].T,
           loss, dir);
    for (int m = 0; m < 2; m++) microbatch_free(&mb[m]);
    stage_acts_free(&a, &st);
    stage_free(&st);
}

/* ---- 10-step trajectory ------------------------------------------------------------------------- */
#define TRAJ_STEPS 10
static void case_traj(const char* dir) {
    ModelConfig mc = golden_config(0.02f);
    const char* const* specs = LLAVA_SPECS;
    int M = 2;
    const float max_lr = 1e-2f, min_lr = 1e-3f, wd = 0.1f, clip = 1.0f;
    const int warmup = 2;
    Stage st;
    StageActs a;
    Microbatch mb[2];
    int n_sup;
    golden_begin(dir, &mc, specs, M, 0, 1, 4242, &st, &a, mb, &n_sup);
    char path[1024], err[512], fname[64];
    for (int m = 0; m < M; m++) {
        snprintf(fname, sizeof fname, "microbatch-%d.safetensors", m);
        path_join(path, sizeof path, dir, fname);
        check(stage_dump_microbatch(&st, NULL, &mb[m], path, err, sizeof err), err);
    }
    double losses[TRAJ_STEPS], norms[TRAJ_STEPS], lrs[TRAJ_STEPS];
    ParamTable* pt = &st.params;
    for (int step = 0; step < TRAJ_STEPS; step++) {
        params_zero_grad(pt);
        double ls = 0;
        for (int m = 0; m < M; m++) {
            float l;
            stage_forward(&st, &a, &mb[m], NULL, NULL, &l);
            ls += l;
            stage_backward(&st, &a, NULL, 1.0f / n_sup, NULL);
        }
        losses[step] = ls / n_sup;
        /* global-norm clipping, the rule of torch.nn.utils.clip_grad_norm_ */
        double norm = sqrt(sum_squares(pt->grad, pt->total));
        norms[step] = norm;
        if (norm > clip) {
            float s = (float)(clip / (norm + 1e-6));
            for (size_t k = 0; k < pt->total; k++) pt->grad[k] *= s;
        }
        float lr = lr_schedule(step, warmup, TRAJ_STEPS, max_lr, min_lr);
        lrs[step] = lr;
        AdamWConfig ac = {.lr = lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = wd};
        for (int i = 0; i < pt->n; i++) {
            const ParamSpec* s = &pt->specs[i];
            adamw_update(pt->data + s->offset, pt->grad + s->offset, pt->m + s->offset, pt->v + s->offset, s->numel,
                         &ac, step + 1, s->decay);
        }
        printf("traj step %d: loss %.6f grad norm %.4f lr %.5f\n", step, losses[step], norm, lr);
    }
    path_join(path, sizeof path, dir, "weights_final.safetensors");
    check(stage_dump_params(&st, 0, path, err, sizeof err), err);
    char extra[2048];
    int o = snprintf(extra, sizeof extra,
                     "{\"case\": \"traj\", \"n_microbatches\": %d, \"n_supervised\": %d, \"steps\": %d, "
                     "\"max_lr\": %.9g, \"min_lr\": %.9g, \"warmup\": %d, \"weight_decay\": %.9g, "
                     "\"clip\": %.9g, \"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-8",
                     M, n_sup, TRAJ_STEPS, max_lr, min_lr, warmup, wd, clip);
    const char* keys[3] = {"losses", "grad_norms", "lrs"};
    double* vals[3] = {losses, norms, lrs};
    for (int k = 0; k < 3; k++) {
        o += snprintf(extra + o, sizeof extra - o, ", \"%s\": [", keys[k]);
        for (int s = 0; s < TRAJ_STEPS; s++) o += snprintf(extra + o, sizeof extra - o, "%s%.9g", s ? ", " : "", vals[k][s]);
        o += snprintf(extra + o, sizeof extra - o, "]");
    }
    snprintf(extra + o, sizeof extra - o, "}");
    path_join(path, sizeof path, dir, "config.json");
    check(model_dump_config(&mc, extra, path, err, sizeof err), err);
    for (int m = 0; m < M; m++) tm_microbatch_free(&mb[m]);
    stage_acts_free(&a, &st);
    stage_free(&st);
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s vit|lm|llava|traj DIR\n", argv[0]);
        return 2;
    }
    const char* dir = argv[2];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) rr_die("cannot create %s: %s", dir, strerror(errno));
    if (!strcmp(argv[1], "vit"))
        case_vit(dir);
    else if (!strcmp(argv[1], "lm"))
        case_step(dir, "lm", LM_SPECS, 2, 0);
    else if (!strcmp(argv[1], "llava"))
        case_step(dir, "llava", LLAVA_SPECS, 3, 1);
    else if (!strcmp(argv[1], "traj"))
        case_traj(dir);
    else if (!strcmp(argv[1], "anyres"))
        case_anyres(dir, &backend_cpu);
    else if (!strcmp(argv[1], "anyres_gpu")) {
        char why[256] = "";
        const Backend* cu = backend_cuda_get(why, sizeof why);
        if (!cu) {
            printf("skipped: %s\n", why);
            return 77;
        }
        case_anyres(dir, cu);
    }
    else {
        fprintf(stderr, "unknown case '%s' (vit, lm, llava, traj)\n", argv[1]);
        return 2;
    }
    return 0;
}
