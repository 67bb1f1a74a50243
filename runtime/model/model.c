/* model.c — the LLaVA composition as pipeline stages (runtime/model/model.h): parameters of a stage,
 * per-microbatch activations from one block, sequence assembly (image rows from the projector,
 * text rows from the embedding), forward, split (B / W) and fused backward, and step dumps. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/anyres.h"
#include "engine/cuda/kernel_math.h"
#include "engine/params_quant_st.h"
#include "engine/safetensors.h"
#include "runtime/model/model.h"
#include "runtime/model/tp.h"
#include "text/lm_qlora.h"

#include <stdarg.h>

#define IGNORE_INDEX (-100)

/* ------------------------------------------------------------------------------------------------
 * Config */

int model_config_check(const ModelConfig* c, char* err, size_t err_len) {
#define REQ(cond, ...)                             \
    do {                                           \
        if (!(cond)) {                             \
            snprintf(err, err_len, __VA_ARGS__);   \
            return -1;                             \
        }                                          \
    } while (0)
    REQ(c->patch >= 1, "model: patch must be >= 1 (got %d)", c->patch);
    REQ(c->lora_r <= 0 || ((c->lora_targets || c->vision_lora_targets) && c->lora_alpha > 0),
        "lora: r = %d needs at least one target linear and alpha > 0 (got targets %#x, alpha %g)", c->lora_r,
        c->lora_targets, c->lora_alpha);
    REQ(!c->vision_lora_targets || c->vision_arch == VIT_ARCH_CLIP,
        "lora: the tower's targets (vision.*) adapt the CLIP tower's linears; model.vision_arch is rope2d");
    REQ(c->Dv >= 1 && c->Lv >= 1 && c->Hv >= 1, "model: vision Dv, Lv, Hv must be >= 1 (got %d, %d, %d)", c->Dv,
        c->Lv, c->Hv);
    REQ(c->vision_arch == VIT_ARCH_ROPE2D || c->vision_arch == VIT_ARCH_CLIP,
        "model: vision_arch %d unknown; allowed: rope2d (0), clip (1)", c->vision_arch);
    if (c->vision_arch == VIT_ARCH_CLIP) {
        REQ(c->Dv % c->Hv == 0, "model: vision head dim Dv/Hv = %d/%d must be whole", c->Dv, c->Hv);
        REQ(c->vision_image_size >= c->patch && c->vision_image_size % c->patch == 0,
            "model.vision_image_size %d must be a whole multiple of model.patch %d (CLIP's position grid)",
            c->vision_image_size, c->patch);
        int f = c->vision_feature_layer, run = f < 0 ? c->Lv + 1 + f : f;
        REQ(run >= 1 && run <= c->Lv,
            "model.vision_feature_layer %d selects hidden state %d of %d; allowed: 1 .. %d, or -1 .. -%d (from the end; "
            "-2 as LLaVA)", f, run, c->Lv + 1, c->Lv, c->Lv);
    } else {
        REQ(c->Dv % c->Hv == 0 && (c->Dv / c->Hv) % 4 == 0,
            "model: vision head dim Dv/Hv = %d/%d must be a whole multiple of 4 (2-D RoPE rotates two halves)", c->Dv,
            c->Hv);
    }
    REQ(c->projector_act == ACT_GELU_TANH || c->projector_act == ACT_GELU_ERF,
        "model: projector_act %d unknown; allowed: gelu_tanh (0), gelu (1)", c->projector_act);
    REQ(c->Dt >= 1 && c->Lt >= 1 && c->Ht >= 1, "model: text Dt, Lt, Ht must be >= 1 (got %d, %d, %d)", c->Dt,
        c->Lt, c->Ht);
    REQ(c->Dt % c->Ht == 0 && (c->Dt / c->Ht) % 2 == 0,
        "model: text head dim Dt/Ht = %d/%d must be a whole even number (RoPE rotates halves)", c->Dt, c->Ht);
    REQ(c->F >= 1, "model: SwiGLU hidden F must be >= 1 (got %d)", c->F);
    REQ(c->V >= 2, "model: vocabulary V must be >= 2 (got %d)", c->V);
    REQ(c->min_patches >= 1 && c->max_patches >= c->min_patches,
        "model: need 1 <= min_patches <= max_patches (got %d, %d)", c->min_patches, c->max_patches);
    REQ(c->init_std > 0, "model: init_std must be > 0 (got %g)", c->init_std);
    REQ(c->Hkv >= 0 && (c->Hkv == 0 || c->Ht % c->Hkv == 0),
        "model: text_kv_heads = %d must divide text_heads = %d (each key/value head serves text_heads / text_kv_heads "
        "query heads)", c->Hkv, c->Ht);
    REQ(!c->rope_llama3 || (c->rope_factor >= 1 && c->rope_low_freq_factor > 0 &&
                            c->rope_high_freq_factor > c->rope_low_freq_factor && c->rope_original_max_pos >= 1),
        "model: rope_type = llama3 needs rope_factor >= 1, 0 < rope_low_freq_factor < rope_high_freq_factor and "
        "rope_original_max_pos >= 1 (got %g, %g, %g, %g)", c->rope_factor, c->rope_low_freq_factor,
        c->rope_high_freq_factor, c->rope_original_max_pos);
    REQ(!c->anyres || (c->vision_image_size >= c->patch && c->vision_image_size % c->patch == 0),
        "model.anyres needs model.vision_image_size (the tile side, 336) a whole multiple of model.patch %d (got %d)",
        c->patch, c->vision_image_size);
#undef REQ
    return 0;
}

int model_patch_budget(const ModelConfig* c, int microbatch_tokens) {
    int64_t n = (int64_t)microbatch_tokens * (c->anyres > 1 ? c->anyres : 1);
    return n > INT32_MAX / 4 ? INT32_MAX / 4 : (int)n;
}

VitConfig model_config_vit(const ModelConfig* c) {
    VitConfig v = {.patch = c->patch, .D = c->Dv, .L = c->Lv, .H = c->Hv, .Dt = c->Dt, .init_std = c->init_std};
    v.arch = (VitArch)c->vision_arch;
    v.proj_act = (Act)c->projector_act;
    v.min_patches = c->min_patches;
    if (v.arch == VIT_ARCH_CLIP) {
        v.grid = c->vision_image_size / c->patch;
        v.L_run = c->vision_feature_layer < 0 ? c->Lv + 1 + c->vision_feature_layer : c->vision_feature_layer;
    }
    if (c->lora_r > 0 && c->vision_lora_targets) { /* LoRA on the tower (vision/vit_lora.c) */
        v.lora_r = c->lora_r;
        v.lora_scale = (float)(c->lora_alpha / c->lora_r);
        v.lora_dropout = (float)c->lora_dropout;
        v.lora_targets = c->vision_lora_targets;
    }
    return v;
}

LmConfig model_config_lm(const ModelConfig* c) {
    /* 0 (a ModelConfig written before these fields) means the defaults of docs/model.md */
    LmConfig l = {.D = c->Dt, .L = c->Lt, .H = c->Ht, .F = c->F, .V = c->V, .init_std = c->init_std,
                  .rms_eps = c->rms_eps > 0 ? c->rms_eps : 1e-5, .Hkv = c->Hkv > 0 ? c->Hkv : c->Ht,
                  .qkv_bias = c->qkv_bias, .o_bias = c->o_bias};
    l.rope = (RopeFreq){.theta = c->rope_base > 0 ? c->rope_base : 10000.0, .llama3 = c->rope_llama3,
                        .factor = c->rope_factor, .low_freq_factor = c->rope_low_freq_factor,
                        .high_freq_factor = c->rope_high_freq_factor, .original_max_pos = c->rope_original_max_pos};
    if (c->lora_r > 0) {
        l.lora_r = c->lora_r;
        l.lora_scale = (float)(c->lora_alpha / c->lora_r);
        l.lora_dropout = (float)c->lora_dropout;
        l.lora_targets = c->lora_targets;
        l.lora_quant = c->lora_quant;
    }
    return l;
}

/* ------------------------------------------------------------------------------------------------
 * Stage */

/* Values (grads = 0) or gradient (grads = 1; NULL when the tensor is frozen) of a registered tensor. */
static float* stage_ptr(const ParamTable* pt, const char* name, int grads) {
    int i = params_find(pt, name);
    if (i < 0) rr_die("internal: parameter '%s' is not registered in this stage", name);
    return grads ? params_grad(pt, i) : buf_f32p(params_weights_buf(pt, i));
}
/* the values of a tensor the GEMMs or the gathers read, typed by their storage (its compute copy's) */
static Buf stage_buf(const ParamTable* pt, const char* name) {
    int i = params_find(pt, name);
    if (i < 0) rr_die("internal: parameter '%s' is not registered in this stage", name);
    return params_weights_buf(pt, i);
}

/* A Stage with its shapes but no parameters: enough for registration counts and the act layout. Tower blocks
 * [tv0, tv1): the first stage's (tv1 = Lv) or a tower-only stage's (l0 == l1 == 0, tv1 < Lv); none elsewhere. A last
 * stage may hold no LM block (l0 == l1 == Lt): the final norm, the LM head and the loss on the previous stage's output. */
static void stage_shell_tower(Stage* st, const ModelConfig* cfg, int l0, int l1, int tv0, int tv1) {
    char err[256];
    if (model_config_check(cfg, err, sizeof err)) rr_die("internal: %s (callers check the config with model_config_check first)", err);
    int tower_only = l0 == l1 && l0 == 0; /* l0 == l1 == Lt: a head-only last stage (the final norm, the head, the loss) */
    RR_ASSERT(tower_only ? 0 <= tv0 && tv0 < tv1 && tv1 < cfg->Lv : 0 <= l0 && (l0 < l1 || l0 == cfg->Lt) && l1 <= cfg->Lt);
    RR_ASSERT(tower_only || (l0 == 0 ? 0 <= tv0 && tv0 <= cfg->Lv && tv1 == cfg->Lv : tv0 == 0 && tv1 == 0));
    memset(st, 0, sizeof *st);
    st->cfg = *cfg;
    st->vc = model_config_vit(cfg);
    st->lc = model_config_lm(cfg);
    st->l0 = l0;
    st->l1 = l1;
    st->tower_only = tower_only;
    st->first = !tower_only && l0 == 0;
    st->last = !tower_only && l1 == cfg->Lt;
    st->tower = tower_only || st->first;
    st->tv0 = st->tower ? tv0 : 0;
    st->tv1 = st->tower ? tv1 : 0;
    if (st->tower) st->vc.blk0 = tv0, st->vc.blk1 = tv1;
    st->vit_train = st->tower;
    st->proj_train = st->first;
}

/* head: the shell holds the final norm, the LM head and the loss (the stage ending at Lt, or the head-only one after it:
 * then the stage ending at Lt has head = 0 and passes its output on) */
static void stage_shell_head(Stage* st, int head) {
    RR_ASSERT(!head || st->l1 == st->cfg.Lt);
    RR_ASSERT(head || st->l0 < st->l1 || st->tower_only); /* a stage with no LM block holds the tower's or the head */
    st->last = head;
}

static void stage_shell(Stage* st, const ModelConfig* cfg, int l0, int l1) {
    stage_shell_tower(st, cfg, l0, l1, 0, l0 == 0 ? cfg->Lv : 0);
}

static void stage_register_whole(ParamTable* pt, const Stage* st);

/* Register the parameters of LM blocks [l0, l1) (and the first / last stage's extras) into pt; under
 * tensor parallelism only this TP rank's slice of each split tensor (global names, slices recorded). */
static void stage_register(ParamTable* pt, const Stage* st) {
    if (st->tp <= 1) {
        stage_register_whole(pt, st);
        return;
    }
    ParamTable whole;
    params_init(&whole);
    stage_register_whole(&whole, st);
    for (int i = 0; i < whole.n; i++) {
        const ParamSpec* s = &whole.specs[i];
        TpRange r[TP_MAX_RANGES];
        char e[256];
        int n = tp_shard_ranges(s->name, s->ndim, s->shape, st->tp, st->tp_rank, r, e, sizeof e);
        if (n < 0) rr_die("internal: %s (callers check the split with model_tp_check first)", e);
        int idx;
        if (tp_split_of(s->name) == TP_REPLICATED || (n == 1 && r[0].length == s->shape[r[0].dim] && r[0].offset == 0)) {
            idx = params_add(pt, s->name, s->ndim, s->shape, s->init, s->init_std, s->decay);
        } else {
            ParamSlice sl = {.dim = r[0].dim, .n = n};
            for (int k = 0; k < n; k++) sl.off[k] = r[k].offset, sl.len[k] = r[k].length;
            idx = params_add_slice(pt, s->name, s->ndim, s->shape, &sl, s->init, s->init_std, s->decay);
        }
        /* the marks made at registration travel with the tensor: a params_keep_f32_compute'd one (the CLIP
         * tower's vision.pos_embed.weight, read as f32 words by rows_gather) dropped here became a bf16
         * compute copy under tp > 1, read as f32: loss NaN with runtime.precision = bf16 on CUDA */
        pt->specs[idx].f32_compute = s->f32_compute;
        pt->specs[idx].gemm_bias = s->gemm_bias; /* a GEMM bias's 2-byte compute copy (params_mark_gemm_bias) */
        pt->specs[idx].act_table = s->act_table; /* a gather's table (params_mark_act_table) */
        pt->specs[idx].frozen = s->frozen;       /* LoRA's frozen base (stage_register_whole) */
        pt->specs[idx].quant = s->quant;         /* QLoRA's NF4 base (a slice: runtime/model/tp_quant.c) */
    }
    params_free(&whole);
}

int model_tp_check(const ModelConfig* cfg, int tp, char* err, size_t err_len) {
    if (tp <= 1) return 0;
    int hkv = cfg->Hkv > 0 ? cfg->Hkv : cfg->Ht;
    if (hkv % tp) { /* k and v split by key/value head (their rows could divide while the heads do not) */
        snprintf(err, err_len, "parallel.tp = %d does not divide model.text_kv_heads = %d: tensor parallelism splits "
                 "grouped-query attention by key/value head (each rank holds whole key/value heads and their query "
                 "heads); allowed: a tp that divides %d", tp, hkv, hkv);
        return -1;
    }
    Stage st;
    stage_shell(&st, cfg, 0, cfg->Lt);
    ParamTable pt;
    params_init(&pt);
    stage_register_whole(&pt, &st);
    int rc = 0;
    for (int i = 0; i < pt.n && rc == 0; i++) {
        TpRange r[TP_MAX_RANGES];
        char e[256];
        if (tp_shard_ranges(pt.specs[i].name, pt.specs[i].ndim, pt.specs[i].shape, tp, 0, r, e, sizeof e) < 0) {
            snprintf(err, err_len, "%s; tensor parallelism splits heads, MLP hidden sizes and the vocabulary: "
                     "model.vision_heads (%d), model.text_heads (%d), model.ffn_hidden (%d) and model.vocab (%d) must "
                     "all be multiples of parallel.tp = %d", e, cfg->Hv, cfg->Ht, cfg->F, cfg->V, tp);
            rc = -1;
        }
        if (rc == 0)
            rc = model_tp_quant_check(cfg, pt.specs[i].name, pt.specs[i].ndim, pt.specs[i].shape, tp, err, err_len);
    }
    params_free(&pt);
    return rc;
}

static void stage_register_whole(ParamTable* pt, const Stage* st) {
    if (st->tower) vit_params_add(pt, &st->vc); /* the stage's blocks (VitConfig.blk0 / blk1) */
    if (st->first) {
        projector_params_add(pt, &st->vc);
        if (st->cfg.anyres) { /* LLaVA-NeXT's image_newline: N(0, 1 / sqrt(Dt)) as LlavaNextModel, a gather's table */
            int64_t shape[1] = {st->cfg.Dt};
            params_add(pt, "image_newline", 1, shape, PARAM_INIT_NORMAL, 1.0f / sqrtf((float)st->cfg.Dt), 0);
            params_mark_act_table(pt, "image_newline");
        }
        lm_embed_params_add(pt, &st->lc);
    }
    lm_blocks_params_add(pt, &st->lc, st->l0, st->l1);
    if (st->last) {
        if (!st->cfg.tie_embeddings) {
            lm_head_params_add(pt, &st->lc);
        } else {
            /* tied: the head is text.embed.weight; a last stage without the embedding holds its copy (same
             * name, so the same init; its gradient is summed with the first stage's: stage_tied_embed) */
            if (!st->first) lm_embed_params_add(pt, &st->lc);
            int64_t shape[1] = {st->cfg.Dt};
            params_add(pt, "text.norm.weight", 1, shape, PARAM_INIT_ONES, 0, 0);
        }
    }
    /* LoRA: the LM's own tensors are frozen (PEFT's base model); the adapters train */
    for (int i = 0; i < pt->n && st->cfg.lora_r > 0; i++)
        if (!strncmp(pt->specs[i].name, "text.", 5) && !lm_lora_is_adapter(pt->specs[i].name)) pt->specs[i].frozen = 1;
    for (int i = 0; i < pt->n && st->cfg.lora_r > 0 && st->cfg.vision_lora_targets; i++) /* the tower's too */
        if (!strncmp(pt->specs[i].name, "vision.", 7) && !lm_lora_is_adapter(pt->specs[i].name)) pt->specs[i].frozen = 1;
    if (st->cfg.lora_r > 0 && st->cfg.lora_quant) lm_qlora_mark(pt, &st->lc, st->l0, st->l1); /* QLoRA: stored NF4 */
}

/* Calls fn(item, ctx) for every comma-separated item of list (spaces trimmed, empty items skipped);
 * stops at and returns the first nonzero return. */
static int freeze_for_each(const char* list, int (*fn)(const char* item, void* ctx), void* ctx) {
    const char* p = list ? list : "";
    while (*p) {
        const char* comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char item[128];
        while (n > 0 && (*p == ' ' || *p == '\t')) p++, n--;
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
        if (n >= sizeof item) n = sizeof item - 1;
        memcpy(item, p, n);
        item[n] = 0;
        if (n > 0) {
            int rc = fn(item, ctx);
            if (rc) return rc;
        }
        p += comma ? (size_t)(comma - p) + 1 : strlen(p);
    }
    return 0;
}

/* The tower's LoRA adapters train whatever train.freeze says of the tower (LLaVA's `vision` freezes its base). */
static void freeze_keep_vision_adapters(ParamTable* pt) {
    for (int i = 0; i < pt->n; i++)
        if (!strncmp(pt->specs[i].name, "vision.", 7) && lm_lora_is_adapter(pt->specs[i].name)) pt->specs[i].frozen = 0;
}

static int freeze_apply(const char* item, void* ctx) {
    params_freeze((ParamTable*)ctx, item);
    freeze_keep_vision_adapters((ParamTable*)ctx);
    return 0;
}

typedef struct {
    ParamTable* pt;
    const char* bad;
    char bad_buf[128];
} FreezeCheck;

static int freeze_check_item(const char* item, void* ctx) {
    FreezeCheck* fc = ctx;
    int nf = params_freeze(fc->pt, item);
    freeze_keep_vision_adapters(fc->pt);
    if (nf > 0) return 0;
    snprintf(fc->bad_buf, sizeof fc->bad_buf, "%s", item);
    fc->bad = fc->bad_buf;
    return 1;
}

int model_freeze_check(const ModelConfig* cfg, const char* freeze, int* n_frozen, char* err, size_t err_len) {
    Stage st;
    stage_shell(&st, cfg, 0, cfg->Lt);
    ParamTable pt;
    params_init(&pt);
    stage_register(&pt, &st);
    FreezeCheck fc = {.pt = &pt};
    int rc = 0;
    if (freeze_for_each(freeze, freeze_check_item, &fc) != 0) {
        snprintf(err, err_len,
                 "'%s' names no parameter of this model; allowed: a comma-separated list of vision, projector, "
                 "text, or prefixes of parameter names ending at a dot, such as text.embed, text.blocks.0, "
                 "vision.blocks.1.attn, text.lm_head (the names: rrfp-mm tensors list on a checkpoint's "
                 "model.safetensors)",
                 fc.bad);
        rc = -1;
    }
    int nf = 0;
    for (int i = 0; i < pt.n; i++) nf += pt.specs[i].frozen;
    if (rc == 0 && nf == pt.n) {
        snprintf(err, err_len, "'%s' freezes every parameter of the model: nothing would train; allowed: a subset "
                 "(LLaVA stage 1: vision,text; stage 2: vision)", freeze);
        rc = -1;
    }
    if (n_frozen) *n_frozen = nf;
    params_free(&pt);
    return rc;
}

size_t model_params_freeze(ParamTable* pt, const char* freeze) {
    freeze_for_each(freeze, freeze_apply, pt);
    size_t n = 0;
    for (int i = 0; i < pt->n; i++)
        if (!pt->specs[i].frozen) n += pt->specs[i].numel;
    return n;
}

void stage_init(Stage* st, const ModelConfig* cfg, int l0, int l1, const Backend* be) {
    stage_init_frozen(st, cfg, l0, l1, NULL, be);
}

void stage_init_frozen(Stage* st, const ModelConfig* cfg, int l0, int l1, const char* freeze, const Backend* be) {
    stage_init_tp(st, cfg, l0, l1, freeze, be, 1, 0, NULL);
}

/* ---- tensor-parallel all-reduces (through the comm/ seam; device memory through a host copy) ---- */

static int stage_tp_fail(Stage* st, const char* what, const char* e) {
    if (!st->tp_failed)
        snprintf(st->tp_err, sizeof st->tp_err, "TP rank %d of %d: %s: %s", st->tp_rank, st->tp, what, e);
    st->tp_failed = 1;
    return -1;
}

static int stage_tp_sum(void* ctx, float* buf, size_t n) {
    Stage* st = ctx;
    if (st->tp_failed) return -1; /* a lost peer: fail fast, the caller reports the first error */
    char e[256];
    float* h = buf;
    if (!st->tp_on_host && st->tp_comm->device_memory && st->tp_comm->ops->wait_event) {
        /* a device group (NCCL): in place on the device, its stream ordered after the compute stream's
         * work so far; the call returns once the sum is there */
        if (!st->tp_ev) st->tp_ev = st->be->dev->event_create();
        st->be->dev->event_record(st->be, st->tp_ev);
        if (st->tp_comm->ops->wait_event(st->tp_comm, -1, st->tp_ev, e, sizeof e) != 0 ||
            comm_allreduce(st->tp_comm, buf, n, COMM_F32, COMM_SUM, e, sizeof e) != 0)
            return stage_tp_fail(st, "all-reduce over the TP group", e);
        return 0;
    }
    if (!st->tp_on_host) {
        if (st->tp_host_n < n) {
            free(st->tp_host);
            st->tp_host = mallocCheck(n * sizeof(float));
            st->tp_host_n = n;
        }
        h = st->tp_host;
        st->be->dev->copy_d2h(st->be, h, buf, n * sizeof(float));
    }
    if (comm_allreduce(st->tp_comm, h, n, COMM_F32, COMM_SUM, e, sizeof e) != 0)
        return stage_tp_fail(st, "all-reduce over the TP group", e);
    if (!st->tp_on_host) st->be->dev->copy_h2d(st->be, buf, h, n * sizeof(float));
    return 0;
}

static int stage_tp_reduce_d(void* ctx, double* buf, size_t n, int op_max, char* err, size_t err_len) {
    Stage* st = ctx;
    if (st->tp_failed) {
        snprintf(err, err_len, "%s", st->tp_err);
        return -1;
    }
    char e[256];
    if (comm_allreduce(st->tp_comm, buf, n, COMM_F64, op_max ? COMM_MAX : COMM_SUM, e, sizeof e) != 0) {
        stage_tp_fail(st, "vocabulary-parallel cross-entropy all-reduce", e);
        snprintf(err, err_len, "%s", st->tp_err);
        return -1;
    }
    return 0;
}

const char* stage_tp_error(const Stage* st) { return st->tp_failed ? st->tp_err : NULL; }

/* Stage.param_wait: the part's weights current before it reads them (a failure fails the stage as a lost TP
 * peer does: the caller's stage_tp_error check reports it) */
static void stage_param_wait(Stage* st, int part) {
    if (!st->param_wait || st->tp_failed) return;
    char e[768];
    if (st->param_wait(st->param_ctx, part, e, sizeof e) != 0) {
        snprintf(st->tp_err, sizeof st->tp_err, "%s", e);
        st->tp_failed = 1;
    }
}

void stage_init_tp(Stage* st, const ModelConfig* cfg, int l0, int l1, const char* freeze, const Backend* be, int tp,
                   int tp_rank, Comm* tp_comm) {
    stage_init_tower(st, cfg, l0, l1, 0, l0 == 0 ? cfg->Lv : 0, freeze, be, tp, tp_rank, tp_comm);
}

int model_vit_floor(const ModelConfig* cfg, const char* freeze) {
    Stage sh;
    stage_shell(&sh, cfg, 0, cfg->Lt);
    ParamTable pt;
    params_init(&pt);
    stage_register_whole(&pt, &sh);
    freeze_for_each(freeze, freeze_apply, &pt);
    char always[8192];
    freeze_for_each(vit_always_frozen(&sh.vc, always, sizeof always), freeze_apply, &pt);
    int floor = vit_blocks_run(&sh.vc), l;
    for (int i = 0; i < pt.n; i++) {
        const char* n = pt.specs[i].name;
        if (pt.specs[i].frozen || strncmp(n, "vision.", 7)) continue;
        if (sscanf(n, "vision.blocks.%d.", &l) == 1) {
            if (l < floor) floor = l;
        } else if (strncmp(n, "vision.ln_f.", 12) && strncmp(n, "vision.post_ln.", 15)) {
            floor = 0; /* the embedding trains: every block's input gradient is needed */
        }
    }
    params_free(&pt);
    return floor;
}

void stage_init_tower(Stage* st, const ModelConfig* cfg, int l0, int l1, int tv0, int tv1, const char* freeze,
                      const Backend* be, int tp, int tp_rank, Comm* tp_comm) {
    stage_init_split(st, cfg, l0, l1, tv0, tv1, l1 == cfg->Lt, freeze, be, tp, tp_rank, tp_comm);
}

/* stage_init_split's work; forward_only: every tensor frozen on a params_forward_only table (stage_init_forward) */
static void stage_init_any(Stage* st, const ModelConfig* cfg, int l0, int l1, int tv0, int tv1, int head,
                           const char* freeze, const Backend* be, int tp, int tp_rank, Comm* tp_comm, int forward_only) {
    stage_shell_tower(st, cfg, l0, l1, tv0, tv1);
    stage_shell_head(st, head);
    st->be = be;
    st->tp = tp > 1 ? tp : 1;
    st->tp_rank = tp > 1 ? tp_rank : 0;
    st->tp_comm = tp_comm;
    st->tp_on_host = be->dev->host_addressable;
    st->Vs = cfg->V / st->tp;
    st->v0 = st->tp_rank * st->Vs;
    if (st->tp > 1) {
        RR_ASSERT(tp_comm && tp_comm->size == tp && tp_comm->rank == tp_rank);
        st->vc.tp = st->lc.tp = st->tp;
        st->vc.tp_rank = st->lc.tp_rank = st->tp_rank;
        st->vc.tp_reduce = stage_tp_sum;
        st->lc.tp_reduce = stage_tp_sum;
        st->vc.tp_ctx = st->lc.tp_ctx = st;
    }
    /* every backend table has the CLIP tower's ops (engine.h: a table written before them would have NULL) */
    RR_ASSERT(!st->tower || (cfg->vision_arch != VIT_ARCH_CLIP && cfg->projector_act == ACT_GELU_TANH) ||
              (be->ops->act_forward && be->ops->act_backward && be->ops->rows_gather_forward && be->ops->rows_gather_backward));
    params_init(&st->params);
    stage_register(&st->params, st);
    st->params.omit_replicated = st->tp_rank > 0;
    if (cfg->tie_embeddings && st->last && !st->first) /* the tied head's copy of the first stage's embedding */
        st->params.specs[params_find(&st->params, "text.embed.weight")].shared_copy = 1;
    freeze_for_each(freeze, freeze_apply, &st->params);
    if (st->tower) { /* CLIP: the blocks past the feature layer and post_layernorm never run: never trained */
        char always[8192];
        freeze_for_each(vit_always_frozen(&st->vc, always, sizeof always), freeze_apply, &st->params);
    }
    /* the forward only: the marks above decide nothing (no gradient, no backward), and no adapter stays trainable */
    if (forward_only) params_forward_only(&st->params);
    /* the LM on 2-byte bf16 activations where the backend's ops take them (BackendOps.bf16_activations; tp > 1 too:
     * the TP sums stay f32, text/lm.c lm_tp_residual), RRFP_BF16_ACTIVATIONS=0 keeps f32 words (a comparison, not a
     * setting); LoRA keeps f32 words. The stage runs on be either way and allocates its activations in the storage
     * chosen here (lm_act_dtype, vit_act_dtype). */
    int b16 = be->ops->bf16_activations && model_bf16_activations(st->tp) && cfg->lora_r <= 0;
    /* the tower on 2-byte activations too (below): CLIP's gather tables (class, position embeddings) get 2-byte compute
     * copies, written by AdamW, so no step narrows them (engine/params.h params_mark_act_table) */
    st->params.act_tables_bf16 = b16 && st->tower && model_bf16_vision(cfg);
    params_alloc(&st->params, be, cfg->seed);
    if (b16) {
        st->lc.act_bytes = 2;
        if (st->tower && model_bf16_vision(cfg)) st->vc.act_bytes = 2; /* the tower and the projector too */
    }

    const ParamTable* pt = &st->params;
    if (st->tower) {
        vit_weights_point(&st->vit_w, pt, &st->vc, 0);
        vit_weights_point(&st->vit_g, pt, &st->vc, 1);
        /* what the tower's backward must compute (frozen = no work that nothing needs): a stage with a share of it runs
         * its blocks' B down to the whole tower's floor, which an earlier stage may hold */
        st->vit_floor = st->tower_only || tv0 > 0 ? model_vit_floor(cfg, freeze) : vit_backward_floor(&st->vc, &st->vit_g);
        st->vit_train = st->vit_floor < vit_run_hi(&st->vc) || st->vit_g.lnf_w || st->vit_g.lnf_b;
        if (!st->vit_train) st->vit_fwd = callocCheck(1, sizeof *st->vit_fwd); /* its block: stage_tower_reserve */
    }
    if (st->first) {
        projector_weights_point(&st->proj_w, pt, 0);
        projector_weights_point(&st->proj_g, pt, 1);
        st->embed_w = stage_buf(pt, "text.embed.weight");
        st->embed_g = stage_ptr(pt, "text.embed.weight", 1);
        if (cfg->anyres) {
            st->newline_w = stage_buf(pt, "image_newline");
            st->newline_g = stage_ptr(pt, "image_newline", 1);
            st->newline16 = pt->compute && params_compute_dtype(pt, params_find(pt, "image_newline")) == DTYPE_BF16;
        }
        st->proj_train = st->proj_g.fc1_w.p || st->proj_g.fc1_b.p || st->proj_g.fc2_w.p || st->proj_g.fc2_b.p;
    }
    int nL = l1 - l0;
    st->blk_w = callocCheck(nL, sizeof(LmBlockW));
    st->blk_g = callocCheck(nL, sizeof(LmBlockW));
    for (int j = 0; j < nL; j++) {
        lm_block_weights_point(&st->blk_w[j], pt, l0 + j, 0);
        lm_block_weights_point(&st->blk_g[j], pt, l0 + j, 1);
    }
    if (st->lc.lora_quant && st->lc.lora_r > 0) { /* QLoRA: the blocks read their base weights dequantised */
        st->qlora = callocCheck(1, sizeof(LmQloraWs));
        lm_qlora_ws_init(st->qlora, pt, &st->lc, st->blk_w, l0, l1);
    }
    if (st->last) {
        const char* head = cfg->tie_embeddings ? "text.embed.weight" : "text.lm_head.weight";
        st->normf_w = stage_ptr(pt, "text.norm.weight", 0);
        st->normf_g = stage_ptr(pt, "text.norm.weight", 1);
        st->head_w = stage_buf(pt, head);
        st->head_g = stage_ptr(pt, head, 1);
    }
}

void stage_init_split(Stage* st, const ModelConfig* cfg, int l0, int l1, int tv0, int tv1, int head, const char* freeze,
                      const Backend* be, int tp, int tp_rank, Comm* tp_comm) {
    stage_init_any(st, cfg, l0, l1, tv0, tv1, head, freeze, be, tp, tp_rank, tp_comm, 0);
}

void stage_init_forward(Stage* st, const ModelConfig* cfg, const Backend* be) {
    stage_init_any(st, cfg, 0, cfg->Lt, 0, cfg->Lv, 1, NULL, be, 1, 0, NULL, 1);
}

int model_bf16_activations(int tp) {
    const char* env = getenv("RRFP_BF16_ACTIVATIONS");
    (void)tp; /* every tp: the TP sums of 2-byte partials run in f32 (lm_tp_residual) */
    return !(env && !strcmp(env, "0"));
}

int model_bf16_vision(const ModelConfig* cfg) {
    (void)cfg; /* every tower (RoPE, CLIP) and projector (tanh, exact GELU) has its ops on the table */
    return 1;
}

void stage_set_recompute(Stage* st, Recompute lm, Recompute tower) {
    st->lc.recompute = st->l1 > st->l0 ? (int)lm : RECOMPUTE_NONE;
    st->vc.recompute = st->tower && st->vit_train ? (int)tower : RECOMPUTE_NONE;
    if ((st->lc.recompute != RECOMPUTE_NONE || st->vc.recompute != RECOMPUTE_NONE) && !st->rc)
        st->rc = callocCheck(1, sizeof *st->rc);
}

void stage_keep_f32_activations(Stage* st) {
    st->lc.act_bytes = 0;
    st->vc.act_bytes = 0;
    /* generation runs no backward: no recompute, and the workspace laid out for the other activation words goes */
    st->lc.recompute = st->vc.recompute = RECOMPUTE_NONE;
    if (st->rc && st->rc->block) st->be->dev->free(st->rc->block);
    free(st->rc);
    st->rc = NULL;
    if (st->vit_fwd && st->vit_fwd->block) { /* laid out for the other activation words: again at stage_acts_init */
        st->be->dev->free(st->vit_fwd->block);
        st->vit_fwd->block = NULL;
        st->vit_fwd->bytes = 0;
        st->vit_fwd->max_Np = 0;
    }
}

void stage_free(Stage* st) {
    vit_graphs_free(st);
    vit_weights_free(&st->vit_w);
    vit_weights_free(&st->vit_g);
    free(st->blk_w);
    free(st->blk_g);
    if (st->qlora) lm_qlora_ws_free(st->qlora, st->be);
    free(st->qlora);
    free(st->tp_host);
    if (st->rc && st->rc->block) st->be->dev->free(st->rc->block);
    free(st->rc);
    if (st->vit_fwd && st->vit_fwd->block) st->be->dev->free(st->vit_fwd->block);
    free(st->vit_fwd);
    if (st->tp_ev) st->be->dev->event_destroy(st->tp_ev);
    params_free(&st->params);
    memset(st, 0, sizeof *st);
}

/* ------------------------------------------------------------------------------------------------
 * Activations: one backend block, carved in a fixed order (measured first with a NULL-based arena) */

/* Under activation recompute a fused backward's scratch (split = 0: what a stage_backward call uses and leaves, the block
 * gradients, the LM scratch, the residual gradients, the head's output gradients) is the stage's, beside the recompute
 * workspace, instead of each microbatch's: a microbatch's block then holds what it keeps between its calls only. */
static int stage_bwd_shared(const Stage* st, int split) {
    return !split && (st->lc.recompute != RECOMPUTE_NONE || st->vc.recompute != RECOMPUTE_NONE);
}

/* What a microbatch's backward writes and reads within its calls (split: per block, kept from B to W) */
static void stage_bwd_layout(StageActs* a, const Stage* st, Arena* ar, int max_T, int max_Np, int split) {
    const ModelConfig* c = &st->cfg;
    size_t T = (size_t)max_T, Dt = c->Dt, nL = (size_t)(st->l1 - st->l0);
    size_t Vs = st->Vs > 0 ? (size_t)st->Vs : (size_t)c->V;
    size_t ab = (size_t)lm_act_bytes(&st->lc);
    for (size_t j = 0; j < nL; j++) {
        if (split || j == 0)
            lm_block_grads_layout(&a->grads[j], ar, &st->lc, max_T);
        else
            a->grads[j] = a->grads[0]; /* fused: a block's W runs right after its B */
    }
    lm_scratch_layout(&a->scratch, ar, &st->lc, max_T);
    for (size_t j = 0; j < nL; j++) a->grads[j].lora_x = a->scratch.lora_x; /* LoRA's W redraws its dropout there */
    a->dres = arena_alloc_f32(ar, (split ? nL + 1 : 2) * T * Dt);
    /* 2-byte activations: each residual gradient's 2-byte copy, stored by the pass that finishes it (a block's norm1
     * backward, the final norm's backward; at a pipeline edge a narrowing), for the down projection's GEMMs */
    a->dres16 = ab == 2 ? arena_alloc(ar, (split ? nL + 1 : 2) * T * Dt * 2) : NULL;
    for (size_t j = 0; j < nL && a->dres16; j++) {
        size_t so = split ? j + 1 : (j + 1) % 2, si = split ? j : j % 2;
        a->grads[j].dxout16 = a->dres16 + so * T * Dt;
        /* block 0's: read as f32 only (embedding), but the projector's GEMMs take its image rows in 2 bytes */
        a->grads[j].dxin16 = j > 0 || (st->first && vit_act_bytes(&st->vc) == 2) ? a->dres16 + si * T * Dt : NULL;
    }
    /* the projector's backward buffers (one call's under the fused backward, like the LM's) */
    if (st->first) projector_acts_layout_bwd(&a->proj, ar, &st->vc, max_Np);
    if (st->last) {
        /* 2-byte at tp = 1 with 2-byte activations: cross-entropy's backward stores it for the head's GEMMs only (the
         * vocabulary-parallel one at tp > 1 computes f32 values, converted by the GEMMs) */
        a->dlogits = ab == 2 && st->tp <= 1 ? buf_of(arena_alloc(ar, T * Vs * 2), DTYPE_BF16) : buf_f32(arena_alloc_f32(ar, T * Vs));
        a->dnf = arena_alloc_f32(ar, T * Dt);
    }
}

/* A first stage whose tower does not train: one set of forward buffers for its microbatches (StageTowerScratch) */
static int stage_tower_shared(const Stage* st) { return st->tower && !st->vit_train; }

static size_t stage_tower_bytes(const Stage* st, int max_Np) {
    if (!stage_tower_shared(st) || max_Np <= 0) return 0;
    VitActs v;
    memset(&v, 0, sizeof v);
    Arena m = {.base = NULL, .size = SIZE_MAX, .name = "tower scratch measure"};
    vit_acts_layout_scratch(&v, &m, &st->vc, max_Np);
    vit_acts_free_tables(&v);
    return m.used;
}

/* The frozen tower's scratch for microbatches of up to max_Np patches: (re)allocated when smaller, between stage calls
 * (it holds nothing then); the graphs recorded over the old block go */
static void stage_tower_reserve(const Stage* st, int max_Np) {
    StageTowerScratch* ts = st->vit_fwd;
    if (!ts || (ts->block && ts->max_Np >= max_Np)) return;
    if (ts->block && ts->max_Np > max_Np) max_Np = ts->max_Np;
    size_t n = stage_tower_bytes(st, max_Np);
    if (n == 0) return;
    if (ts->block) st->be->dev->free(ts->block);
    vit_graphs_forget(st->vit_graphs);
    ts->block = be_alloc_as(st->be, MEM_ACTS, n);
    ts->bytes = n;
    ts->max_Np = max_Np;
    ts->gen++;
}

/* Point a microbatch's frozen tower at the stage's scratch, carved for its max_Np, before its forward */
static void stage_tower_bind(const Stage* st, StageActs* a) {
    StageTowerScratch* ts = st->vit_fwd;
    if (!ts || a->max_Np <= 0) return; /* no patches: the tower does nothing */
    RR_ASSERT(ts->block && ts->max_Np >= a->max_Np);
    Arena ar = {.base = ts->block, .size = ts->bytes, .name = "tower scratch"};
    vit_acts_layout_scratch(&a->vit, &ar, &st->vc, a->max_Np);
    if (a->vit_fwd_gen != ts->gen) a->vit.cm_ready = 0; /* another block: CLIP's index is not there yet */
    a->vit_fwd_gen = ts->gen;
}

static void stage_acts_layout(StageActs* a, const Stage* st, Arena* ar, int max_T, int max_Np, int split) {
    const ModelConfig* c = &st->cfg;
    size_t T = (size_t)max_T, Np = (size_t)max_Np, Dt = c->Dt, nL = (size_t)(st->l1 - st->l0);
    a->max_T = max_T;
    a->max_Np = max_Np;
    a->split = split;
    a->cu_seqlens = arena_alloc(ar, (T + 1) * sizeof(int32_t));
    a->pos = arena_alloc(ar, T * sizeof(int32_t));
    size_t Vs = st->Vs > 0 ? (size_t)st->Vs : (size_t)c->V; /* a shell (sizes only) is unsplit */
    if (st->first) {
        a->ids = arena_alloc(ar, T * sizeof(int32_t));
        if (st->tp > 1) a->lids = arena_alloc(ar, T * sizeof(int32_t));
    }
    if (st->tower) {
        a->img_cu = arena_alloc(ar, (Np + 1) * sizeof(int32_t));
        a->prow = arena_alloc(ar, Np * sizeof(int32_t));
        a->pcol = arena_alloc(ar, Np * sizeof(int32_t));
        /* the tower's first activation: 2-byte words where the tower's activations are (narrowed on the host) */
        a->patches = vit_has_embed(&st->vc) ? buf_of(arena_alloc(ar, Np * 3 * c->patch * c->patch * (size_t)vit_act_bytes(&st->vc)), vit_act_dtype(&st->vc))
                                           : buf_none(); /* a later stage's share of the tower: its input comes from the previous stage */
        /* a frozen vision tower keeps nothing for a backward that never runs: its output alone, the rest of its
         * forward's buffers the stage's (stage_tower_bind) */
        if (stage_tower_shared(st)) {
            vit_acts_layout_out(&a->vit, ar, &st->vc, max_Np);
            Arena m = {.base = NULL, .size = SIZE_MAX, .name = "tower scratch measure"};
            vit_acts_layout_scratch(&a->vit, &m, &st->vc, max_Np); /* its tables; the pointers bound at each forward */
        } else {
            vit_acts_layout(&a->vit, ar, &st->vc, max_Np, split, st->vit_train);
        }
        a->vit.b_floor = st->vit_floor;
    }
    if (st->first) {
        projector_acts_layout_fwd(&a->proj, ar, &st->vc, max_Np); /* its backward's buffers: stage_bwd_layout */
        if (c->anyres) {
            a->ar_idx = arena_alloc(ar, T * sizeof(int32_t));
            a->ar_nl = arena_alloc(ar, T * sizeof(int32_t));
            a->nl16 = lm_act_bytes(&st->lc) == 2 ? arena_alloc(ar, Dt * 2) : NULL;
        }
    }
    if (st->last) a->targets = arena_alloc(ar, T * sizeof(int32_t));
    size_t ab = (size_t)lm_act_bytes(&st->lc); /* an LM activation's bytes (res, nf, logits) */
    DType adt = lm_act_dtype(&st->lc);
    a->res = buf_of(arena_alloc(ar, (nL + 1) * T * Dt * ab), adt);
    for (size_t j = 0; j < nL; j++) lm_block_acts_layout(&a->blocks[j], ar, &st->lc, max_T);
    if (st->last) {
        a->nf = buf_of(arena_alloc(ar, T * Dt * ab), adt);
        a->rstdf = arena_alloc_f32(ar, T);
        a->logits = buf_of(arena_alloc(ar, T * Vs * ab), adt);
        a->lse = arena_alloc_f32(ar, T);
        a->loss_dev = arena_alloc_f32(ar, 1);
    }
    /* the fused backward's scratch under recompute: the stage's (stage_bwd_bind at each call) */
    if (!stage_bwd_shared(st, split)) stage_bwd_layout(a, st, ar, max_T, max_Np, split);
}

static void stage_acts_tables(StageActs* a, const Stage* st) {
    int nL = st->l1 - st->l0;
    a->blocks = callocCheck(nL, sizeof(LmBlockActs));
    a->grads = callocCheck(nL, sizeof(LmBlockGrads));
}

static void stage_acts_free_tables(StageActs* a) {
    free(a->blocks);
    free(a->grads);
    vit_acts_free_tables(&a->vit);
    a->blocks = NULL;
    a->grads = NULL;
}

int stage_attn_reserve(const Stage* st, int max_tokens, int max_patches, AttnReserve out[2]) {
    const ModelConfig* c = &st->cfg;
    int tp = st->tp > 1 ? st->tp : 1, n = 0;
    if (st->tower && max_patches > 0) {
        int mp = c->min_patches > 0 ? c->min_patches : 1;
        out[n++] = (AttnReserve){.max_T = vit_max_tokens(&st->vc, max_patches), .max_S = (max_patches + mp - 1) / mp, .H = c->Hv / tp,
                                 .d = c->Dv / c->Hv, .ld_qkv = 3 * c->Dv / tp,
                                 .rope = c->vision_arch == VIT_ARCH_CLIP ? 0 : 2, /* CLIP has no RoPE */
                                 .act = vit_act_dtype(&st->vc)};
    }
    if (st->l1 > st->l0)
        out[n++] = (AttnReserve){.max_T = max_tokens, .max_S = max_tokens, .H = c->Ht / tp, .d = c->Dt / c->Ht,
                                 .ld_qkv = c->Dt / tp, .rope = 1, .rope_freq = st->lc.rope, .act = lm_act_dtype(&st->lc)};
    return n;
}

/* The recompute workspace of the stage's modes, carved out of ar (a measuring arena gives its bytes: 0 without
 * recompute) */
/* The recompute workspace of the stage's modes, and with fused the fused backward's scratch (stage_bwd_shared) after it,
 * carved out of ar (a measuring arena gives its bytes: 0 without recompute) */
static void stage_recompute_layout(const Stage* st, Arena* ar, StageRecompute* rc, int max_T, int max_Np, int fused) {
    lm_recompute_layout(&rc->lm, ar, &st->lc, max_T);
    if (st->tower && st->vit_train) vit_recompute_layout(&rc->vit, ar, &st->vc, max_Np);
    else memset(&rc->vit, 0, sizeof rc->vit);
    rc->max_T = max_T;
    rc->max_Np = max_Np;
    rc->fused = fused && stage_bwd_shared(st, 0);
    rc->bwd = NULL;
    rc->bwd_bytes = 0;
    if (rc->fused) {
        StageActs t; /* measured: its pointers are carved again at each call (stage_bwd_bind) */
        memset(&t, 0, sizeof t);
        stage_acts_tables(&t, st);
        Arena m = {.base = NULL, .size = SIZE_MAX, .name = "backward scratch measure"};
        stage_bwd_layout(&t, st, &m, max_T, max_Np, 0);
        stage_acts_free_tables(&t);
        rc->bwd_bytes = m.used;
        rc->bwd = arena_alloc(ar, m.used);
    }
}

static size_t stage_recompute_bytes(const Stage* st, int max_T, int max_Np, int fused) {
    StageRecompute rc;
    Arena measure = {.base = NULL, .size = SIZE_MAX, .name = "recompute measure"};
    stage_recompute_layout(st, &measure, &rc, max_T, max_Np, fused);
    return measure.used;
}

/* The workspace for microbatches of up to max_T tokens and max_Np patches (with fused: and the fused backward's scratch):
 * (re)allocated when it is smaller, between stage calls (so it holds nothing then) */
static void stage_recompute_reserve(const Stage* st, int max_T, int max_Np, int fused) {
    StageRecompute* rc = st->rc;
    if (!rc) return;
    fused = fused && stage_bwd_shared(st, 0);
    if (rc->block && rc->max_T >= max_T && rc->max_Np >= max_Np && (rc->fused || !fused)) return;
    if (rc->block && rc->max_T > max_T) max_T = rc->max_T;
    if (rc->block && rc->max_Np > max_Np) max_Np = rc->max_Np;
    if (rc->block && rc->fused) fused = 1;
    size_t n = stage_recompute_bytes(st, max_T, max_Np, fused);
    if (n == 0) return;
    if (rc->block) st->be->dev->free(rc->block);
    rc->block = be_alloc_as(st->be, MEM_ACTS, n);
    rc->bytes = n;
    Arena ar = {.base = rc->block, .size = n, .name = "recompute workspace"};
    stage_recompute_layout(st, &ar, rc, max_T, max_Np, fused);
}

/* Point a fused microbatch's backward scratch at the stage's (stage_bwd_shared), carved for its max_T (the strides the
 * stage_dres helpers use) out of the stage's block laid out for the largest; before each call that may use it */
static void stage_bwd_bind(const Stage* st, StageActs* a) {
    if (!stage_bwd_shared(st, a->split)) return;
    RR_ASSERT(st->rc && st->rc->bwd && st->rc->max_T >= a->max_T && st->rc->max_Np >= a->max_Np);
    Arena ar = {.base = st->rc->bwd, .size = st->rc->bwd_bytes, .name = "backward scratch"};
    stage_bwd_layout(a, st, &ar, a->max_T, a->max_Np, 0);
}

size_t stage_acts_bytes(const Stage* st, int max_tokens, int max_patches, int split) {
    StageActs a;
    memset(&a, 0, sizeof a);
    stage_acts_tables(&a, st);
    Arena measure = {.base = NULL, .size = SIZE_MAX, .name = "activation measure"};
    stage_acts_layout(&a, st, &measure, max_tokens, max_patches, split);
    stage_acts_free_tables(&a);
    return measure.used;
}

void model_params_register(const ModelConfig* cfg, int l0, int l1, ParamTable* pt) {
    model_params_register_tp(cfg, l0, l1, 1, 0, pt);
}

/* A shell of TP rank t of tp: the split sizes, no group, no parameters. tv1 < 0: the tower on the first stage. */
static void stage_shell_tp_tower(Stage* st, const ModelConfig* cfg, int l0, int l1, int tv0, int tv1, int tp, int t) {
    if (tv1 < 0) stage_shell(st, cfg, l0, l1);
    else stage_shell_tower(st, cfg, l0, l1, tv0, tv1);
    st->tp = tp > 1 ? tp : 1;
    st->tp_rank = tp > 1 ? t : 0;
    st->vc.tp = st->lc.tp = st->tp;
    st->vc.tp_rank = st->lc.tp_rank = st->tp_rank;
    st->Vs = cfg->V / st->tp;
    st->v0 = st->tp_rank * st->Vs;
}

static void stage_shell_tp(Stage* st, const ModelConfig* cfg, int l0, int l1, int tp, int t) {
    stage_shell_tp_tower(st, cfg, l0, l1, 0, -1, tp, t);
}

void model_params_register_tower(const ModelConfig* cfg, int l0, int l1, int tv0, int tv1, int tp, int t, ParamTable* pt) {
    model_params_register_split(cfg, l0, l1, tv0, tv1, l1 == cfg->Lt, tp, t, pt);
}

void model_params_register_split(const ModelConfig* cfg, int l0, int l1, int tv0, int tv1, int head, int tp, int t,
                                 ParamTable* pt) {
    Stage st;
    stage_shell_tp_tower(&st, cfg, l0, l1, tv0, tv1, tp, t);
    stage_shell_head(&st, head);
    params_init(pt);
    stage_register(pt, &st);
}

void model_params_register_tp(const ModelConfig* cfg, int l0, int l1, int tp, int t, ParamTable* pt) {
    Stage st;
    stage_shell_tp(&st, cfg, l0, l1, tp, t);
    params_init(pt);
    stage_register(pt, &st);
}

size_t model_stage_acts_bytes_tp(const ModelConfig* cfg, int l0, int l1, int max_tokens, int max_patches, int split,
                                 int tp) {
    Stage st;
    stage_shell_tp(&st, cfg, l0, l1, tp, 0);
    return stage_acts_bytes(&st, max_tokens, max_patches, split);
}

size_t model_stage_acts_bytes_lm(const ModelConfig* cfg, int l0, int l1, int max_tokens, int max_patches, int split, int tp,
                                 int lm_act_bytes, int vit_train) {
    Stage st;
    stage_shell_tp(&st, cfg, l0, l1, tp, 0);
    st.vit_train = st.tower && vit_train;
    st.lc.act_bytes = lm_act_bytes == 2 ? 2 : 0;
    st.vc.act_bytes = lm_act_bytes == 2 && st.tower && model_bf16_vision(cfg) ? 2 : 0; /* as stage_init_tp */
    return stage_acts_bytes(&st, max_tokens, max_patches, split);
}

size_t model_stage_acts_bytes_rc(const ModelConfig* cfg, int l0, int l1, int max_tokens, int max_patches, int split, int tp,
                                 int lm_act_bytes, int vit_train, int lm, int tower, size_t* ws) {
    return model_stage_acts_bytes_tower(cfg, l0, l1, 0, -1, max_tokens, max_patches, split, tp, lm_act_bytes, vit_train, lm,
                                        tower, ws);
}

size_t model_stage_acts_bytes_tower(const ModelConfig* cfg, int l0, int l1, int tv0, int tv1, int max_tokens, int max_patches,
                                    int split, int tp, int lm_act_bytes, int vit_train, int lm, int tower, size_t* ws) {
    return model_stage_acts_bytes_split(cfg, l0, l1, tv0, tv1, l1 == cfg->Lt, max_tokens, max_patches, split, tp,
                                        lm_act_bytes, vit_train, lm, tower, ws);
}

size_t model_stage_acts_bytes_split(const ModelConfig* cfg, int l0, int l1, int tv0, int tv1, int head, int max_tokens,
                                    int max_patches, int split, int tp, int lm_act_bytes, int vit_train, int lm, int tower,
                                    size_t* ws) {
    Stage st;
    stage_shell_tp_tower(&st, cfg, l0, l1, tv0, tv1, tp, 0);
    stage_shell_head(&st, head);
    st.vit_train = st.tower && vit_train;
    st.lc.act_bytes = lm_act_bytes == 2 ? 2 : 0;
    st.vc.act_bytes = lm_act_bytes == 2 && st.tower && model_bf16_vision(cfg) ? 2 : 0; /* as stage_init_tp */
    st.lc.recompute = st.l1 > st.l0 ? lm : RECOMPUTE_NONE; /* as stage_set_recompute */
    st.vc.recompute = st.tower && st.vit_train ? tower : RECOMPUTE_NONE;
    if (ws) *ws = stage_recompute_bytes(&st, max_tokens, max_patches, !split) + stage_tower_bytes(&st, max_patches);
    return stage_acts_bytes(&st, max_tokens, max_patches, split);
}

size_t model_stage_param_count(const ModelConfig* cfg, int l0, int l1) {
    Stage st;
    stage_shell(&st, cfg, l0, l1);
    ParamTable pt;
    params_init(&pt);
    stage_register(&pt, &st);
    size_t n = pt.total;
    params_free(&pt);
    return n;
}

size_t model_stage_acts_bytes(const ModelConfig* cfg, int l0, int l1, int max_tokens, int max_patches, int split) {
    Stage st;
    stage_shell(&st, cfg, l0, l1);
    return stage_acts_bytes(&st, max_tokens, max_patches, split);
}

void stage_acts_init(StageActs* a, const Stage* st, int max_tokens, int max_patches, int split) {
    RR_ASSERT(max_tokens >= 1 && max_patches >= 0);
    memset(a, 0, sizeof *a);
    a->bytes = stage_acts_bytes(st, max_tokens, max_patches, split);
    a->block = be_alloc_as(st->be, MEM_ACTS, a->bytes);
    stage_acts_tables(a, st);
    Arena ar = {.base = a->block, .size = a->bytes, .name = "stage activations"};
    stage_acts_layout(a, st, &ar, max_tokens, max_patches, split);
    RR_ASSERT(ar.used == a->bytes);
    stage_recompute_reserve(st, max_tokens, max_patches, !split);
    stage_tower_reserve(st, max_patches);
    if (st->rc) a->vit.rc_ws = &st->rc->vit; /* the tower's recompute workspace (the struct's address stays) */
    /* host copies of the image placement and the text runs, for assembly and its backward */
    a->h_img_cu = mallocCheck(((size_t)max_patches + 1) * sizeof(int32_t));
    a->h_img_lm_start = mallocCheck(((size_t)max_patches + 1) * sizeof(int32_t));
    a->h_seg = mallocCheck(2 * ((size_t)max_patches + 1) * sizeof(int32_t));
    if (st->first && st->cfg.anyres) {
        a->h_ar_idx = mallocCheck(((size_t)max_tokens + 1) * sizeof(int32_t));
        a->h_ar_nl = mallocCheck(((size_t)max_tokens + 1) * sizeof(int32_t));
    }
    if (st->tower && vit_has_embed(&st->vc) && st->vc.act_bytes == 2 && max_patches > 0)
        a->h_patches16 = mallocCheck((size_t)max_patches * 3 * st->vc.patch * st->vc.patch * sizeof(uint16_t));
    if (st->tp > 1) {
        a->h_own = mallocCheck(2 * ((size_t)max_tokens + 1) * sizeof(int32_t));
        a->h_targets = mallocCheck(((size_t)max_tokens + 1) * sizeof(int32_t));
    }
    a->state = ACTS_EMPTY;
}

void stage_acts_free(StageActs* a, const Stage* st) {
    if (a->block) st->be->dev->free(a->block);
    free(a->h_img_cu);
    free(a->h_img_lm_start);
    free(a->h_seg);
    free(a->h_own);
    free(a->h_targets);
    free(a->h_patches16);
    free(a->h_ar_idx);
    free(a->h_ar_nl);
    stage_acts_free_tables(a);
    memset(a, 0, sizeof *a);
}

void stage_acts_release(StageActs* a) { a->state = ACTS_EMPTY; }

/* row t of an LM activation buffer of width W */
static Buf stage_act_row(Buf base, size_t t, size_t W) { return buf_at(base, t * W); }

static Buf stage_res(const StageActs* a, const Stage* st, int j) {
    return stage_act_row(a->res, (size_t)j * a->max_T, st->cfg.Dt);
}

static float* stage_dres(const StageActs* a, const Stage* st, int j) {
    size_t slot = a->split ? (size_t)j : (size_t)(j % 2);
    return a->dres + slot * a->max_T * st->cfg.Dt;
}
/* its 2-byte copy (2-byte activations; else NULL) */
static uint16_t* stage_dres16(const StageActs* a, const Stage* st, int j) {
    size_t slot = a->split ? (size_t)j : (size_t)(j % 2);
    return a->dres16 ? a->dres16 + slot * a->max_T * st->cfg.Dt : NULL;
}

/* ------------------------------------------------------------------------------------------------
 * Microbatch checks (a loader bug or a damaged shard must not turn into a silent wrong step) */

static int64_t mb_sample_of(const Microbatch* mb, int t) {
    int s = 0;
    while (s + 1 < mb->S && mb->cu_seqlens[s + 1] <= t) s++;
    return mb->sample_index ? mb->sample_index[s] : s;
}

static int mb_fail_hint(char* err, size_t err_len, const char* hint, const char* fmt, ...) RR_PRINTF(4, 5);
static int mb_fail_hint(char* err, size_t err_len, const char* hint, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < err_len) snprintf(err + n, err_len - (size_t)n, "\n---> HINT: %s", hint);
    return -1;
}

/* Any-resolution images (docs/anyres.md): each of the J images' tower images are its base image and its tiles,
 * each a g x g grid; it covers exactly data/anyres.h's n_positions image positions of one sample, in order. */
static int stage_check_anyres(const Stage* st, const Microbatch* mb, int n_image_ids, char* err, size_t err_len) {
    const ModelConfig* c = &st->cfg;
    if (!c->anyres)
        return rr_fail(err, err_len, "microbatch: %d any-resolution images, but the model is not any-resolution (model.anyres)",
                       mb->J);
    if (mb->I > 0 && (mb->J < 1 || !mb->ar_tile0 || !mb->ar_size || !mb->ar_grid || !mb->ar_lm_start))
        return rr_fail(err, err_len, "microbatch: %d images without their any-resolution layout (model.anyres needs shards "
                       "packed with --image-preprocess anyres)", mb->I);
    if (mb->I == 0 && mb->J == 0) return n_image_ids ? rr_fail(err, err_len, "microbatch: %d image positions but no image", n_image_ids) : 0;
    if (mb->ar_tile0[0] != 0 || mb->ar_tile0[mb->J] != mb->I)
        return rr_fail(err, err_len, "microbatch: any-resolution images cover tower images %d .. %d, expected 0 .. %d",
                       mb->ar_tile0[0], mb->ar_tile0[mb->J], mb->I);
    int g = c->vision_image_size / c->patch, total = 0, prev_end = 0;
    for (int j = 0; j < mb->J; j++) {
        AnyresLayout l;
        char e[256];
        if (anyres_layout_grid(mb->ar_size[2 * j], mb->ar_size[2 * j + 1], mb->ar_grid[2 * j], mb->ar_grid[2 * j + 1],
                               c->vision_image_size, c->patch, ANYRES_SELECT_DEFAULT, &l, e, sizeof e) != 0)
            return rr_fail(err, err_len, "microbatch: any-resolution image %d: %s", j, e);
        int i0 = mb->ar_tile0[j], i1 = mb->ar_tile0[j + 1], t0 = mb->ar_lm_start[j], n = l.n_positions;
        if (i1 - i0 != l.n_tiles)
            return rr_fail(err, err_len, "microbatch: any-resolution image %d has %d tower images, its %d x %d grid needs %d", j,
                           i1 - i0, l.rows, l.cols, l.n_tiles);
        if (t0 < prev_end || t0 + n > mb->T)
            return rr_fail(err, err_len, "microbatch: any-resolution image %d at LM positions [%d, %d): before the previous "
                           "image's end %d or past T = %d", j, t0, t0 + n, prev_end, mb->T);
        int64_t s0 = mb_sample_of(mb, t0), s1 = mb_sample_of(mb, t0 + n - 1);
        if (s0 != s1) return rr_fail(err, err_len, "microbatch: any-resolution image %d spans samples %lld and %lld", j, (long long)s0, (long long)s1);
        for (int t = t0; t < t0 + n; t++)
            if (mb->ids[t] != -1)
                return rr_fail(err, err_len, "microbatch: sample %lld: any-resolution image %d covers position %d whose id is %d, "
                               "not -1", (long long)s0, j, t, mb->ids[t]);
        for (int i = i0; i < i1; i++) {
            if (mb->grid_h[i] != g || mb->grid_w[i] != g || mb->img_cu_patches[i + 1] - mb->img_cu_patches[i] != g * g)
                return rr_fail(err, err_len, "microbatch: any-resolution image %d: tile %d is a %d x %d grid, expected %d x %d", j,
                               i - i0, mb->grid_h[i], mb->grid_w[i], g, g);
            if (mb->img_lm_start[i] != t0)
                return rr_fail(err, err_len, "microbatch: any-resolution image %d: tile %d starts at %d, not at its image's %d", j,
                               i - i0, mb->img_lm_start[i], t0);
            for (int k = mb->img_cu_patches[i]; k < mb->img_cu_patches[i + 1]; k++)
                if (mb->patch_row[k] != (k - mb->img_cu_patches[i]) / g || mb->patch_col[k] != (k - mb->img_cu_patches[i]) % g)
                    return rr_fail(err, err_len, "microbatch: any-resolution image %d: tile %d's patch %d is not in row-major order",
                                   j, i - i0, k);
        }
        total += n;
        prev_end = t0 + n;
    }
    if (total != n_image_ids)
        return rr_fail(err, err_len, "microbatch: %d image positions (id -1) but the any-resolution images take %d", n_image_ids,
                       total);
    return 0;
}

int stage_check_microbatch(const Stage* st, const StageActs* a, const Microbatch* mb, char* err, size_t err_len) {
    const ModelConfig* c = &st->cfg;
    if (mb->T < 1 || mb->S < 1)
        return rr_fail(err, err_len, "microbatch: empty (T = %d positions, S = %d samples)", mb->T, mb->S);
    if (a && mb->T > a->max_T)
        return mb_fail_hint(err, err_len, "raise the activation budget or lower data.microbatch_tokens", "microbatch: %d LM positions exceed the activation budget of %d", mb->T, a->max_T);
    if (mb->cu_seqlens[0] != 0 || mb->cu_seqlens[mb->S] != mb->T)
        return rr_fail(err, err_len, "microbatch: cu_seqlens must run from 0 to T = %d (got %d .. %d)", mb->T, mb->cu_seqlens[0],
               mb->cu_seqlens[mb->S]);
    for (int s = 0; s < mb->S; s++) {
        if (mb->cu_seqlens[s + 1] <= mb->cu_seqlens[s])
            return rr_fail(err, err_len, "microbatch: sample %lld is empty or cu_seqlens decreases at %d",
                   (long long)(mb->sample_index ? mb->sample_index[s] : s), s);
        for (int t = mb->cu_seqlens[s]; t < mb->cu_seqlens[s + 1]; t++)
            if (mb->pos[t] != t - mb->cu_seqlens[s])
                return rr_fail(err, err_len, "microbatch: sample %lld: position %d is %d, expected %d (positions restart per sample)",
                       (long long)mb_sample_of(mb, t), t, mb->pos[t], t - mb->cu_seqlens[s]);
    }
    if (st->last) {
        int n = 0;
        for (int t = 0; t < mb->T; t++) {
            if (mb->targets[t] == IGNORE_INDEX) continue;
            if (mb->targets[t] < 0 || mb->targets[t] >= c->V)
                return rr_fail(err, err_len, "microbatch: sample %lld: target %d at position %d is outside [0, %d) and not -100",
                       (long long)mb_sample_of(mb, t), mb->targets[t], t, c->V);
            n++;
        }
        if (n != mb->n_supervised)
            return rr_fail(err, err_len, "microbatch: n_supervised says %d but %d targets are not -100", mb->n_supervised, n);
    }
    if (!st->tower) return 0;
    if (a && mb->Np > a->max_Np)
        return mb_fail_hint(err, err_len, "raise the patch budget", "microbatch: %d patches exceed the activation budget of %d", mb->Np,
                    a->max_Np);
    if (mb->I > 0 && mb->patch != c->patch)
        return rr_fail(err, err_len, "microbatch: patch size %d, but the model's is %d", mb->patch, c->patch);
    if (mb->img_cu_patches && (mb->img_cu_patches[0] != 0 || mb->img_cu_patches[mb->I] != mb->Np))
        return rr_fail(err, err_len, "microbatch: img_cu_patches must run from 0 to Np = %d", mb->Np);
    int n_image_ids = 0;
    for (int t = 0; t < mb->T; t++) {
        if (mb->ids[t] == -1) {
            n_image_ids++;
        } else if (mb->ids[t] < 0 || mb->ids[t] >= c->V) {
            return rr_fail(err, err_len, "microbatch: sample %lld: token id %d at position %d is outside [0, %d)",
                   (long long)mb_sample_of(mb, t), mb->ids[t], t, c->V);
        }
    }
    if (c->anyres || mb->J) return stage_check_anyres(st, mb, n_image_ids, err, err_len);
    if (n_image_ids != mb->Np)
        return rr_fail(err, err_len, "microbatch: %d image positions (id -1) but %d patches", n_image_ids, mb->Np);
    for (int i = 0; i < mb->I; i++) {
        int n = mb->img_cu_patches[i + 1] - mb->img_cu_patches[i], t0 = mb->img_lm_start[i];
        if (n < 1 || n != mb->grid_h[i] * mb->grid_w[i])
            return rr_fail(err, err_len, "microbatch: image %d has %d patches, grid %d x %d", i, n, mb->grid_h[i], mb->grid_w[i]);
        if (t0 < 0 || t0 + n > mb->T)
            return rr_fail(err, err_len, "microbatch: image %d at LM positions [%d, %d) outside [0, %d)", i, t0, t0 + n, mb->T);
        /* images in order and disjoint: with the -1 count equal to Np, they then cover every image
         * position exactly once, so no row of the assembled sequence is left unwritten */
        if (i > 0 && t0 < mb->img_lm_start[i - 1] + mb->img_cu_patches[i] - mb->img_cu_patches[i - 1])
            return rr_fail(err, err_len, "microbatch: image %d starts at LM position %d, inside or before image %d at [%d, %d)", i, t0,
                   i - 1, mb->img_lm_start[i - 1],
                   mb->img_lm_start[i - 1] + mb->img_cu_patches[i] - mb->img_cu_patches[i - 1]);
        int64_t s0 = mb_sample_of(mb, t0), s1 = mb_sample_of(mb, t0 + n - 1);
        if (s0 != s1) return rr_fail(err, err_len, "microbatch: image %d spans samples %lld and %lld", i, (long long)s0, (long long)s1);
        for (int t = t0; t < t0 + n; t++)
            if (mb->ids[t] != -1)
                return rr_fail(err, err_len, "microbatch: sample %lld: image %d covers position %d whose id is %d, not -1",
                       (long long)s0, i, t, mb->ids[t]);
        for (int k = mb->img_cu_patches[i]; k < mb->img_cu_patches[i + 1]; k++) {
            int r = mb->patch_row[k], q = mb->patch_col[k];
            if (r < 0 || r >= mb->grid_h[i] || q < 0 || q >= mb->grid_w[i])
                return rr_fail(err, err_len, "microbatch: image %d: patch %d at (%d, %d) outside its %d x %d grid", i, k, r, q,
                       mb->grid_h[i], mb->grid_w[i]);
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * Forward */

/* Any-resolution images: the projector row (or the image_newline) each LM position takes, from data/anyres.h's
 * feature map of each image (the tower images of image j are laid end to end from img_cu[ar_tile0[j]]). */
static void stage_anyres_index(Stage* st, StageActs* a, const Microbatch* mb) {
    const ModelConfig* c = &st->cfg;
    for (int t = 0; t < mb->T; t++) a->h_ar_idx[t] = a->h_ar_nl[t] = -1;
    int32_t* map = NULL;
    size_t cap = 0;
    for (int j = 0; j < mb->J; j++) {
        AnyresLayout l;
        char e[256];
        if (anyres_layout_grid(mb->ar_size[2 * j], mb->ar_size[2 * j + 1], mb->ar_grid[2 * j], mb->ar_grid[2 * j + 1],
                               c->vision_image_size, c->patch, ANYRES_SELECT_DEFAULT, &l, e, sizeof e) != 0)
            rr_die("internal: any-resolution image %d: %s (stage_check_microbatch passed it)", j, e);
        if ((size_t)l.n_positions > cap) {
            cap = (size_t)l.n_positions;
            free(map);
            map = mallocCheck(cap * sizeof(int32_t));
        }
        anyres_feature_map(&l, map);
        int k0 = mb->img_cu_patches[mb->ar_tile0[j]], t0 = mb->ar_lm_start[j];
        for (int k = 0; k < l.n_positions; k++) {
            if (map[k] >= 0) a->h_ar_idx[t0 + k] = k0 + map[k];
            else a->h_ar_nl[t0 + k] = 0;
        }
    }
    free(map);
    st->be->dev->copy_h2d(st->be, a->ar_idx, a->h_ar_idx, (size_t)mb->T * sizeof(int32_t));
    st->be->dev->copy_h2d(st->be, a->ar_nl, a->h_ar_nl, (size_t)mb->T * sizeof(int32_t));
}

/* x0 (T, Dt): image positions take the projector rows of their image in patch order, the others
 * the token embedding (docs/model.md "Sequence assembly and the loss"); with any-resolution images the
 * rows of docs/anyres.md "The features" (stage_anyres_index) and the image_newline, by two row gathers. */
static void stage_assemble(Stage* st, StageActs* a, Buf x0) {
    const Backend* be = st->be;
    int Dt = st->cfg.Dt;
    if (st->tp > 1) {
        /* vocabulary-parallel: this rank's rows for the tokens it owns, 0 elsewhere, summed over TP (in f32:
         * 2-byte rows widened into the LM's f32 TP scratch, summed, narrowed back, exact: one rank's row + 0s) */
        size_t n = (size_t)a->T * Dt;
        be->dev->memset0(be, x0.p, n * (size_t)lm_act_bytes(&st->lc));
        for (int r = 0; r < a->n_own; r++) {
            int t0 = a->h_own[2 * r], t1 = a->h_own[2 * r + 1];
            be->ops->embedding_forward(be, stage_act_row(x0, t0, Dt), a->lids + t0, st->embed_w, t1 - t0, Dt);
        }
        if (lm_act_bytes(&st->lc) == 2) {
            RR_ASSERT(a->scratch.tp_sum);
            be->ops->from_bf16(be, a->scratch.tp_sum, buf_bf16p(x0), n);
            stage_tp_sum(st, a->scratch.tp_sum, n);
            be->ops->to_bf16(be, buf_bf16p(x0), a->scratch.tp_sum, n);
        } else
            stage_tp_sum(st, buf_f32p(x0), n);
    } else
    for (int r = 0; r < a->n_seg; r++) {
        int t0 = a->h_seg[2 * r], t1 = a->h_seg[2 * r + 1];
        be->ops->embedding_forward(be, stage_act_row(x0, t0, Dt), a->ids + t0, st->embed_w, t1 - t0, Dt);
    }
    if (st->cfg.anyres) {
        /* the gathers add: the image positions must hold zeros (the TP path's sum leaves them 0) */
        RR_ASSERT(lm_act_bytes(&st->lc) == vit_act_bytes(&st->vc) && "any-resolution images: the tower's and the LM's rows in one storage");
        if (st->tp <= 1)
            for (int t = 0; t < a->T;) { /* the image runs (between the text runs) */
                int t1 = t;
                while (t1 < a->T && a->h_ar_idx[t1] < 0 && a->h_ar_nl[t1] < 0) t1++;
                t = t1;
                while (t1 < a->T && (a->h_ar_idx[t1] >= 0 || a->h_ar_nl[t1] >= 0)) t1++;
                if (t1 > t) be->dev->memset0(be, stage_act_row(x0, t, Dt).p, (size_t)(t1 - t) * Dt * (size_t)lm_act_bytes(&st->lc));
                t = t1;
            }
        Buf nl = st->newline_w;
        if (lm_act_bytes(&st->lc) == 2 && !st->newline16) { /* the table in 2-byte words (exact: a bf16 value) */
            be->ops->to_bf16(be, a->nl16, buf_f32p(st->newline_w), (size_t)Dt);
            nl = buf_bf16(a->nl16);
        }
        be->ops->rows_gather_forward(be, x0, a->ar_idx, NULL, a->proj.out, a->T, 1, Dt);
        be->ops->rows_gather_forward(be, x0, a->ar_nl, NULL, nl, a->T, 1, Dt);
        return;
    }
    /* the projector's rows (f32 words holding bf16 values: rounded by its producer) into the image positions;
     * with 2-byte activations narrowed on the way (exact), one launch per image as the copy was */
    for (int i = 0; i < a->I; i++) {
        int k0 = a->h_img_cu[i], n = a->h_img_cu[i + 1] - k0;
        if (lm_act_bytes(&st->lc) == 2 && vit_act_bytes(&st->vc) == 2) /* 2-byte rows both sides */
            be->dev->copy_d2d(be, buf_bf16p(stage_act_row(x0, a->h_img_lm_start[i], Dt)), buf_bf16p(buf_at(a->proj.out, (size_t)k0 * Dt)),
                         (size_t)n * Dt * sizeof(uint16_t));
        else if (lm_act_bytes(&st->lc) == 2)
            be->ops->to_bf16(be, buf_bf16p(stage_act_row(x0, a->h_img_lm_start[i], Dt)), buf_f32p(buf_at(a->proj.out, (size_t)k0 * Dt)),
                        (size_t)n * Dt);
        else
            be->dev->copy_d2d(be, buf_f32p(stage_act_row(x0, a->h_img_lm_start[i], Dt)), buf_f32p(buf_at(a->proj.out, (size_t)k0 * Dt)),
                         (size_t)n * Dt * sizeof(float));
    }
}

/* Host views of a microbatch's logits (T, Vs) and lse (T) for the vocabulary-parallel cross-entropy (the
 * CPU reference of runtime/model/tp.h; device backends copy). */
static float* stage_host(const Stage* st, const float* dev, size_t n) {
    if (st->tp_on_host) return (float*)dev;
    float* h = mallocCheck((n ? n : 1) * sizeof(float));
    st->be->dev->copy_d2h(st->be, h, dev, n * sizeof(float));
    return h;
}

/* the logits' host view: 2-byte logits widened (exact) on the host */
static float* stage_host_logits(const Stage* st, const StageActs* a, size_t n) {
    if (lm_act_bytes(&st->lc) == 4) return stage_host(st, buf_f32p(a->logits), n);
    float* h = mallocCheck((n ? n : 1) * sizeof(float));
    stage_logits_d2h(st, a, h, n);
    return h;
}

static void stage_tp_ce_forward(Stage* st, StageActs* a) {
    int T = a->T;
    size_t nl = (size_t)T * st->Vs;
    float* logits = stage_host_logits(st, a, nl);
    float* lse = st->tp_on_host ? a->lse : mallocCheck((size_t)T * sizeof(float));
    double* scratch = mallocCheck(3 * (size_t)T * sizeof(double));
    char e[512];
    a->loss_sum = 0;
    if (tp_vocab_ce_forward(&a->loss_sum, lse, logits, a->h_targets, T, st->Vs, st->v0, st->cfg.V, stage_tp_reduce_d,
                            st, scratch, e, sizeof e) != 0 && !st->tp_failed)
        stage_tp_fail(st, "vocabulary-parallel cross-entropy", e);
    free(scratch);
    if (!st->tp_on_host) {
        st->be->dev->copy_h2d(st->be, a->lse, lse, (size_t)T * sizeof(float));
        free(lse);
        free(logits);
    }
}

static void stage_tp_ce_backward(Stage* st, StageActs* a, float loss_scale) {
    int T = a->T;
    size_t nl = (size_t)T * st->Vs;
    float* logits = stage_host_logits(st, a, nl);
    float* lse = stage_host(st, a->lse, (size_t)T);
    float* dl = st->tp_on_host ? buf_f32p(a->dlogits) : callocCheck(nl + 1, sizeof(float));
    tp_vocab_ce_backward(dl, logits, lse, a->h_targets, loss_scale, T, st->Vs, st->v0);
    if (!st->tp_on_host) {
        st->be->dev->copy_h2d(st->be, buf_f32p(a->dlogits), dl, nl * sizeof(float));
        free(dl);
        free(lse);
        free(logits);
    }
}

/* QLoRA: block j's base weights dequantised into the stage's workspace (no-op without, or when it holds them) */
static void stage_qlora_load(Stage* st, int j) {
    if (st->qlora) lm_qlora_load(st->qlora, st->be, &st->params, st->l0 + j);
}

/* LM block j's activations as its forward writes and its backward reads them (the kept ones and the recompute
 * workspace's: lm_block_acts_view) */
static void stage_block_view(const Stage* st, const StageActs* a, int j, LmBlockActs* v) {
    RR_ASSERT(st->lc.recompute == RECOMPUTE_NONE || (st->rc && st->rc->block));
    lm_block_acts_view(&st->lc, &a->blocks[j], st->rc ? &st->rc->lm : &a->blocks[j], v);
}

/* Recompute block j's dropped activations into its view (before its B under full recompute, before its W under
 * either), counted in n_recomputed */
static void stage_block_recompute(Stage* st, StageActs* a, int j, LmBlockActs* v, const LmSeq* seq) {
    stage_qlora_load(st, j);
    st->n_recomputed += lm_block_recompute(st->be, &st->lc, &st->blk_w[j], v, &a->scratch, seq,
                                           stage_res(a, st, j));
}

/* the tower's recomputed blocks into the stage's count */
static void stage_count_vit_recompute(Stage* st, StageActs* a) {
    st->n_recomputed += a->vit.n_recomputed;
    a->vit.n_recomputed = 0;
}

void stage_forward(Stage* st, StageActs* a, const Microbatch* mb, const float* hidden_in, float* hidden_out,
                   float* loss_sum) {
    const Backend* be = st->be;
    const ModelConfig* c = &st->cfg;
    RR_ASSERT(a->state == ACTS_EMPTY && "stage_forward on activations still in use by another microbatch");
    RR_ASSERT(stage_takes_hidden(st) == (hidden_in != NULL));
    RR_ASSERT(st->last == (hidden_out == NULL));
    /* the callers (step executors, eval) validate every microbatch once with stage_check_microbatch;
     * here only what would write outside the activation block */
    RR_ASSERT(mb->T >= 1 && mb->T <= a->max_T && (!st->tower || mb->Np <= a->max_Np));
    stage_bwd_bind(st, a); /* the LM scratch (the forward's too) where the stage holds it */
    int T = mb->T, Dt = c->Dt, nL = st->l1 - st->l0;
    a->T = T;
    a->S = mb->S;
    a->n_supervised = mb->n_supervised;
    be->dev->copy_h2d(be, a->cu_seqlens, mb->cu_seqlens, (size_t)(mb->S + 1) * sizeof(int32_t));
    be->dev->copy_h2d(be, a->pos, mb->pos, (size_t)T * sizeof(int32_t));
    if (st->last) be->dev->copy_h2d(be, a->targets, mb->targets, (size_t)T * sizeof(int32_t));
    if (st->last && st->tp > 1) memcpy(a->h_targets, mb->targets, (size_t)T * sizeof(int32_t));

    Buf x0 = stage_res(a, st, 0);
    stage_param_wait(st, 0);
    if (st->first) {
        a->I = mb->I;
        a->Np = mb->Np;
        be->dev->copy_h2d(be, a->ids, mb->ids, (size_t)T * sizeof(int32_t));
        a->n_seg = 0;
        for (int t = 0; t < T;) {
            if (mb->ids[t] == -1) {
                t++;
                continue;
            }
            int t1 = t;
            while (t1 < T && mb->ids[t1] != -1) t1++;
            a->h_seg[2 * a->n_seg] = t;
            a->h_seg[2 * a->n_seg + 1] = t1;
            a->n_seg++;
            t = t1;
        }
        if (st->tp > 1) {
            /* the positions whose token this TP rank owns, in runs, with local row ids */
            int32_t* lid = mallocCheck(((size_t)T + 1) * sizeof(int32_t));
            a->n_own = 0;
            for (int t = 0; t < T;) {
                int own = mb->ids[t] >= st->v0 && mb->ids[t] < st->v0 + st->Vs;
                lid[t] = own ? mb->ids[t] - st->v0 : 0;
                if (!own) {
                    t++;
                    continue;
                }
                int t1 = t;
                while (t1 < T && mb->ids[t1] >= st->v0 && mb->ids[t1] < st->v0 + st->Vs) {
                    lid[t1] = mb->ids[t1] - st->v0;
                    t1++;
                }
                a->h_own[2 * a->n_own] = t;
                a->h_own[2 * a->n_own + 1] = t1;
                a->n_own++;
                t = t1;
            }
            be->dev->copy_h2d(be, a->lids, lid, (size_t)T * sizeof(int32_t));
            free(lid);
        }
    }
    if (st->tower) { /* the stage's share of the tower: every tower stage takes the microbatch's image table from its plan */
        a->I = mb->I;
        a->Np = mb->Np;
        if (mb->I > 0) {
            size_t P = 3 * (size_t)c->patch * c->patch;
            memcpy(a->h_img_cu, mb->img_cu_patches, (size_t)(mb->I + 1) * sizeof(int32_t));
            memcpy(a->h_img_lm_start, mb->img_lm_start, (size_t)mb->I * sizeof(int32_t));
            be->dev->copy_h2d(be, a->img_cu, mb->img_cu_patches, (size_t)(mb->I + 1) * sizeof(int32_t));
            be->dev->copy_h2d(be, a->prow, mb->patch_row, (size_t)mb->Np * sizeof(int32_t));
            be->dev->copy_h2d(be, a->pcol, mb->patch_col, (size_t)mb->Np * sizeof(int32_t));
            if (!vit_has_embed(&st->vc)) { /* block tv0's input: the previous stage's (stage_forward's hidden_in) */
            } else if (st->vc.act_bytes == 2) { /* the tower's 2-byte activation: narrowed here, where it is produced */
                RR_ASSERT(a->h_patches16);
                vit_patches_to_bf16(a->h_patches16, mb->patches, (size_t)mb->Np * P);
                be->dev->copy_h2d(be, buf_bf16p(a->patches), a->h_patches16, (size_t)mb->Np * P * sizeof(uint16_t));
            } else {
                be->dev->copy_h2d(be, buf_f32p(a->patches), mb->patches, (size_t)mb->Np * P * sizeof(float));
            }
        }
        a->n_ar = mb->J;
        if (c->anyres && st->first) stage_anyres_index(st, a, mb);
        stage_tower_bind(st, a); /* a frozen tower: the stage's forward buffers */
        /* the tower's LoRA dropout: the microbatch's key (below), mixed with the tower's own tag (vision/vit_lora.c) */
        a->vit.lora_seed = st->lora_step > 0 && c->lora_r > 0 && c->lora_dropout > 0 && st->vc.lora_targets
                               ? lm_lora_seed(c->seed, st->lora_step, mb->index)
                               : 0;
        vit_forward_prepare(be, &st->vc, &a->vit, a->patches, a->img_cu, a->I, a->prow, a->pcol, a->Np);
        if (st->tv0 > 0 && a->Np > 0) vit_stage_input(be, &st->vc, &a->vit, hidden_in);
        vit_forward_graphed(st, be, &a->vit); /* vit_forward_run, or its recorded graph (runtime.cuda_graphs) */
        if (st->tower_only) { /* tower blocks alone: the tower's hidden state to the next stage */
            if (a->Np > 0) vit_stage_output(be, &st->vc, &a->vit, hidden_out);
            a->state = ACTS_FORWARD;
            return;
        }
    }
    if (st->first) {
        projector_forward(be, &st->vc, &st->proj_w, &a->proj, a->vit.vout, a->Np);
        stage_assemble(st, a, x0);
    } else {
        a->I = a->Np = 0;
        /* the pipeline's hidden states are f32 words (bf16 values under runtime.precision = bf16): narrowed
         * (exact) into 2-byte activations, one pass per microbatch */
        if (lm_act_bytes(&st->lc) == 2) be->ops->to_bf16(be, buf_bf16p(x0), hidden_in, (size_t)T * Dt);
        else be->dev->copy_d2d(be, buf_f32p(x0), hidden_in, (size_t)T * Dt * sizeof(float));
    }

    /* LoRA's dropout: keyed by (seed, step, the microbatch's index in the global step), so a pipeline, a resume
     * and a recompute draw the same masks; none outside training (lora_step 0) */
    a->lora_seed = st->lora_step > 0 && c->lora_r > 0 && c->lora_dropout > 0 ? lm_lora_seed(c->seed, st->lora_step, mb->index) : 0;
    LmSeq seq = {.T = T, .S = a->S, .cu_seqlens = a->cu_seqlens, .pos = a->pos, .kv_past = a->kv_past, .lora_seed = a->lora_seed};
    RR_ASSERT(!a->kv_k || a->S == 1);
    RR_ASSERT(!a->kv_k || lm_act_bytes(&st->lc) == 4);
    for (int j = 0; j < nL; j++) {
        if (a->kv_k) seq.kv_k = a->kv_k[j], seq.kv_v = a->kv_v[j]; /* generation's KV cache */
        LmBlockActs v;
        stage_block_view(st, a, j, &v);
        stage_param_wait(st, 1 + j);
        stage_qlora_load(st, j);
        lm_block_forward(be, &st->lc, &st->blk_w[j], &v, &a->scratch, &seq, stage_res(a, st, j),
                         stage_res(a, st, j + 1));
    }

    Buf xL = stage_res(a, st, nL);
    stage_param_wait(st, 1 + nL);
    if (st->last) {
        be->ops->rmsnorm_forward(be, a->nf, a->rstdf, xL, st->normf_w, T, Dt, st->lc.rms_eps);
        if (st->tp > 1) {
            be->ops->linear_forward(be, a->logits, a->nf, st->head_w, buf_none(), T, Dt, st->Vs);
            stage_tp_ce_forward(st, a);
        } else {
            be->ops->linear_forward(be, a->logits, a->nf, st->head_w, buf_none(), T, Dt, c->V);
            be->ops->crossentropy_forward(be, a->loss_dev, a->lse, a->logits, a->targets, T, c->V);
            be->dev->copy_d2h(be, &a->loss_sum, a->loss_dev, sizeof(float));
        }
        if (loss_sum) *loss_sum = a->loss_sum;
    } else if (lm_act_bytes(&st->lc) == 2) {
        be->ops->from_bf16(be, hidden_out, buf_bf16p(xL), (size_t)T * Dt); /* widened (exact) to f32 words */
    } else {
        be->dev->copy_d2d(be, hidden_out, buf_f32p(xL), (size_t)T * Dt * sizeof(float));
    }
    a->state = ACTS_FORWARD;
}

/* ------------------------------------------------------------------------------------------------
 * Backward. B = every input gradient (down through the LM blocks, the projector and the ViT);
 * W = every weight gradient, from what B kept. The fused path runs each piece's B then its W. */

static void stage_head_backward_input(Stage* st, StageActs* a, float loss_scale) {
    const Backend* be = st->be;
    int T = a->T, Dt = st->cfg.Dt, V = st->cfg.V, nL = st->l1 - st->l0;
    if (st->tp > 1) V = st->Vs; /* this rank's vocabulary columns */
    if (lm_act_bytes(&st->lc) == 2 && st->tp <= 1) { /* 2-byte dlogits, stored whole by cross-entropy's backward */
        be->ops->crossentropy_backward(be, a->dlogits, a->logits, a->lse, a->targets, loss_scale, T, V);
        be->ops->linear_backward(be, buf_f32(a->dnf), NULL, NULL, a->dlogits, NULL, a->nf, st->head_w, T, Dt,
                                 V, 1); /* dnf written (beta 0): no memset */
    } else {
        be->dev->memset0(be, a->dnf, (size_t)T * Dt * sizeof(float));
        be->dev->memset0(be, buf_f32p(a->dlogits), (size_t)T * V * sizeof(float));
        if (st->tp > 1) stage_tp_ce_backward(st, a, loss_scale);
        else be->ops->crossentropy_backward(be, a->dlogits, a->logits, a->lse, a->targets, loss_scale, T, V);
        be->ops->linear_backward(be, buf_f32(a->dnf), NULL, NULL, a->dlogits, NULL, a->nf, st->head_w, T, Dt, V, 0);
    }
    if (st->tp > 1) stage_tp_sum(st, a->dnf, (size_t)T * Dt); /* the vocabulary shards' partial sums */
    float* dxL = stage_dres(a, st, nL);
    be->dev->memset0(be, dxL, (size_t)T * Dt * sizeof(float));
    /* with 2-byte activations, dxL's 2-byte copy for the last block's down projection (NULL: none) */
    be->ops->rmsnorm_backward(be, dxL, stage_dres16(a, st, nL), NULL, a->dnf, stage_res(a, st, nL), st->normf_w, a->rstdf,
                              T, Dt);
}

static void stage_head_backward_weight(Stage* st, StageActs* a) {
    const Backend* be = st->be;
    int T = a->T, Dt = st->cfg.Dt, V = st->tp > 1 ? st->Vs : st->cfg.V, nL = st->l1 - st->l0;
    /* dlogits 2-byte (stored so by cross-entropy's backward) or f32, as the table stores it */
    be->ops->linear_backward(be, buf_none(), st->head_g, NULL, a->dlogits, NULL, a->nf, st->head_w, T, Dt, V, 0);
    be->ops->rmsnorm_backward(be, NULL, NULL, st->normf_g, a->dnf, stage_res(a, st, nL), st->normf_w, a->rstdf, T, Dt);
}

/* Image rows of d x0 go back to the projector output, in patch order. */
static void stage_vision_backward_input(Stage* st, StageActs* a) {
    const Backend* be = st->be;
    int Dt = st->cfg.Dt;
    if (a->Np == 0 || (!st->proj_train && !st->vit_train)) return; /* nothing below the LM trains */
    const float* dx0 = stage_dres(a, st, 0);
    const uint16_t* dx016 = vit_act_bytes(&st->vc) == 2 ? stage_dres16(a, st, 0) : NULL; /* block 0's 2-byte copy */
    if (st->cfg.anyres) { /* the gather's backward: each kept row's gradient, zero for the unpadded-away rows */
        be->dev->memset0(be, a->proj.dout, (size_t)a->Np * Dt * sizeof(float));
        be->ops->rows_gather_backward(be, a->proj.dout, dx0, a->ar_idx, NULL, a->T, 1, Dt);
        if (dx016) be->ops->to_bf16(be, a->proj.dout16, a->proj.dout, (size_t)a->Np * Dt);
        projector_backward_input(be, &st->vc, &st->proj_w, &a->proj, a->Np, st->vit_train);
        if (st->vit_train) be->dev->copy_d2d(be, a->vit.dvout, a->proj.dvin, (size_t)a->Np * st->cfg.Dv * sizeof(float));
        return;
    }
    for (int i = 0; i < a->I; i++) {
        int k0 = a->h_img_cu[i], n = a->h_img_cu[i + 1] - k0;
        be->dev->copy_d2d(be, a->proj.dout + (size_t)k0 * Dt, dx0 + (size_t)a->h_img_lm_start[i] * Dt,
                     (size_t)n * Dt * sizeof(float));
        if (dx016)
            be->dev->copy_d2d(be, a->proj.dout16 + (size_t)k0 * Dt, dx016 + (size_t)a->h_img_lm_start[i] * Dt,
                         (size_t)n * Dt * sizeof(uint16_t));
    }
    projector_backward_input(be, &st->vc, &st->proj_w, &a->proj, a->Np, st->vit_train);
    if (st->vit_train) be->dev->copy_d2d(be, a->vit.dvout, a->proj.dvin, (size_t)a->Np * st->cfg.Dv * sizeof(float));
}

/* The projector's W and the ViT's B / W run only for what trains. */
static void stage_vision_backward_weight(Stage* st, StageActs* a, int vit_input_too) {
    const Backend* be = st->be;
    if (st->proj_train) projector_backward_weight(be, &st->vc, &st->proj_w, &st->proj_g, &a->proj, a->Np);
    if (!st->vit_train || a->Np == 0) return;
    vit_backward_graphed(st, be, &a->vit, vit_input_too, 1); /* or its recorded graph (runtime.cuda_graphs) */
    st->n_vit_backward++;
}

static void stage_embed_backward_weight(Stage* st, StageActs* a) {
    int Dt = st->cfg.Dt;
    const float* dx0 = stage_dres(a, st, 0);
    if (st->newline_g && a->n_ar > 0) /* image_newline: the sum of its positions' gradients */
        st->be->ops->rows_gather_backward(st->be, st->newline_g, dx0, a->ar_nl, NULL, a->T, 1, Dt);
    if (!st->embed_g) return; /* frozen */
    if (st->tp > 1) { /* this rank's vocabulary rows only */
        for (int r = 0; r < a->n_own; r++) {
            int t0 = a->h_own[2 * r], t1 = a->h_own[2 * r + 1];
            st->be->ops->embedding_backward(st->be, st->embed_g, dx0 + (size_t)t0 * Dt, a->lids + t0, t1 - t0, Dt);
        }
        return;
    }
    for (int r = 0; r < a->n_seg; r++) {
        int t0 = a->h_seg[2 * r], t1 = a->h_seg[2 * r + 1];
        st->be->ops->embedding_backward(st->be, st->embed_g, dx0 + (size_t)t0 * Dt, a->ids + t0, t1 - t0, Dt);
    }
}

int stage_takes_hidden(const Stage* st) { return st->tower ? st->tv0 > 0 : 1; }
int stage_takes_grad(const Stage* st) { return st->tower_only ? st->vit_train : !st->last; }
int stage_gives_grad(const Stage* st) { return st->tower ? st->tv0 > 0 && st->vit_floor < st->tv0 : 1; }

static size_t stage_tower_rows(const Stage* st, const Microbatch* mb) {
    return mb->Np > 0 ? (size_t)mb->Np + (st->vc.arch == VIT_ARCH_CLIP ? (size_t)mb->I : 0) : 0;
}
size_t stage_in_floats(const Stage* st, const Microbatch* mb) {
    if (!stage_takes_hidden(st)) return 0;
    return st->tower ? stage_tower_rows(st, mb) * (size_t)st->cfg.Dv : (size_t)mb->T * st->cfg.Dt;
}
size_t stage_out_floats(const Stage* st, const Microbatch* mb) {
    if (st->last) return 0;
    return st->tower_only ? stage_tower_rows(st, mb) * (size_t)st->cfg.Dv : (size_t)mb->T * st->cfg.Dt;
}
size_t stage_edge_max_floats(const Stage* st, int max_tokens, int max_patches) {
    size_t lm = (size_t)max_tokens * st->cfg.Dt;
    size_t tw = st->tower ? (size_t)vit_max_tokens(&st->vc, max_patches) * st->cfg.Dv : 0;
    return lm > tw ? lm : tw;
}

static void stage_backward_start(Stage* st, StageActs* a, const float* dhidden_out, float loss_scale) {
    RR_ASSERT(st->last == (dhidden_out == NULL));
    int nL = st->l1 - st->l0;
    if (st->last) {
        stage_head_backward_input(st, a, loss_scale);
    } else {
        st->be->dev->copy_d2d(st->be, stage_dres(a, st, nL), dhidden_out, (size_t)a->T * st->cfg.Dt * sizeof(float));
        /* the pipeline's f32 gradient at the stage's exit edge: narrowed once for the last block's GEMMs */
        if (stage_dres16(a, st, nL)) st->be->ops->to_bf16(st->be, stage_dres16(a, st, nL), dhidden_out, (size_t)a->T * st->cfg.Dt);
    }
}

/* A tower-only stage's backward (input: B, weight: W; both: fused): its blocks' share, from the next stage's gradient of
 * its output down to the gradient of its input for the previous stage */
static void stage_tower_only_backward(Stage* st, StageActs* a, const float* dhidden_out, float* dhidden_in, int input,
                                      int weight) {
    if (!st->vit_train || a->Np == 0) return;
    if (input) vit_stage_doutput(st->be, &st->vc, &a->vit, dhidden_out);
    vit_backward_graphed(st, st->be, &a->vit, input, weight);
    if (input && dhidden_in) vit_stage_dinput(st->be, &st->vc, &a->vit, dhidden_in);
    if (weight) st->n_vit_backward++;
    stage_count_vit_recompute(st, a);
}

void stage_backward_input(Stage* st, StageActs* a, const float* dhidden_out, float loss_scale, float* dhidden_in) {
    RR_ASSERT(a->split && "stage_backward_input needs activations made with split = 1");
    RR_ASSERT(st->params.grad && "a backward on a forward-only stage (stage_init_forward)");
    RR_ASSERT(a->state == ACTS_FORWARD);
    RR_ASSERT(stage_gives_grad(st) == (dhidden_in != NULL));
    const Backend* be = st->be;
    int nL = st->l1 - st->l0;
    if (st->tower_only) {
        RR_ASSERT(stage_takes_grad(st) == (dhidden_out != NULL));
        stage_tower_only_backward(st, a, dhidden_out, dhidden_in, 1, 0);
        a->state = ACTS_INPUT_GRAD;
        return;
    }
    LmSeq seq = {.T = a->T, .S = a->S, .cu_seqlens = a->cu_seqlens, .pos = a->pos, .lora_seed = a->lora_seed};
    stage_backward_start(st, a, dhidden_out, loss_scale);
    for (int j = nL - 1; j >= 0; j--) {
        LmBlockActs v; /* B reads no h: selective recompute runs before W only */
        stage_block_view(st, a, j, &v);
        if (st->lc.recompute == RECOMPUTE_FULL) stage_block_recompute(st, a, j, &v, &seq);
        stage_qlora_load(st, j);
        lm_block_backward_input(st->be, &st->lc, &st->blk_w[j], &v, &a->grads[j], &a->scratch, &seq,
                                stage_res(a, st, j), stage_dres(a, st, j + 1), stage_dres(a, st, j));
    }
    if (st->first) {
        stage_vision_backward_input(st, a);
        if (st->vit_train && a->Np > 0) vit_backward_graphed(st, st->be, &a->vit, 1, 0);
        if (dhidden_in && a->Np > 0) vit_stage_dinput(st->be, &st->vc, &a->vit, dhidden_in); /* to the tower's stages */
        stage_count_vit_recompute(st, a);
    } else {
        be->dev->copy_d2d(be, dhidden_in, stage_dres(a, st, 0), (size_t)a->T * st->cfg.Dt * sizeof(float));
    }
    a->state = ACTS_INPUT_GRAD;
}

void stage_backward_weight(Stage* st, StageActs* a) {
    RR_ASSERT(a->state == ACTS_INPUT_GRAD && "stage_backward_weight before stage_backward_input");
    RR_ASSERT(st->params.grad && "a backward on a forward-only stage (stage_init_forward)");
    int nL = st->l1 - st->l0;
    LmSeq seq = {.T = a->T, .S = a->S, .cu_seqlens = a->cu_seqlens, .pos = a->pos, .lora_seed = a->lora_seed};
    if (st->tower_only) {
        stage_tower_only_backward(st, a, NULL, NULL, 0, 1);
        a->state = ACTS_EMPTY;
        return;
    }
    if (st->last) stage_head_backward_weight(st, a);
    for (int j = nL - 1; j >= 0; j--) {
        LmBlockActs v; /* the workspace has held other blocks (and microbatches) since B: recomputed again */
        stage_block_view(st, a, j, &v);
        stage_block_recompute(st, a, j, &v, &seq);
        stage_qlora_load(st, j);
        lm_block_backward_weight(st->be, &st->lc, &st->blk_w[j], &st->blk_g[j], &v, &a->grads[j], &seq,
                                 stage_res(a, st, j), stage_dres(a, st, j + 1));
    }
    if (st->first) {
        stage_embed_backward_weight(st, a);
        stage_vision_backward_weight(st, a, 0);
        stage_count_vit_recompute(st, a);
    }
    a->state = ACTS_EMPTY;
}

void stage_backward(Stage* st, StageActs* a, const float* dhidden_out, float loss_scale, float* dhidden_in) {
    RR_ASSERT(a->state == ACTS_FORWARD);
    RR_ASSERT(st->params.grad && "a backward on a forward-only stage (stage_init_forward)");
    stage_bwd_bind(st, a); /* the backward's scratch where the stage holds it (stage_bwd_shared) */
    RR_ASSERT(stage_gives_grad(st) == (dhidden_in != NULL));
    const Backend* be = st->be;
    int nL = st->l1 - st->l0;
    if (st->tower_only) {
        RR_ASSERT(stage_takes_grad(st) == (dhidden_out != NULL));
        stage_tower_only_backward(st, a, dhidden_out, dhidden_in, 1, 1);
        a->state = ACTS_EMPTY;
        return;
    }
    LmSeq seq = {.T = a->T, .S = a->S, .cu_seqlens = a->cu_seqlens, .pos = a->pos, .lora_seed = a->lora_seed};
    stage_backward_start(st, a, dhidden_out, loss_scale);
    if (st->last) stage_head_backward_weight(st, a);
    for (int j = nL - 1; j >= 0; j--) {
        LmBlockActs v;
        stage_block_view(st, a, j, &v);
        stage_block_recompute(st, a, j, &v, &seq);
        lm_block_backward_input(st->be, &st->lc, &st->blk_w[j], &v, &a->grads[j], &a->scratch, &seq,
                                stage_res(a, st, j), stage_dres(a, st, j + 1), stage_dres(a, st, j));
        lm_block_backward_weight(st->be, &st->lc, &st->blk_w[j], &st->blk_g[j], &v, &a->grads[j], &seq,
                                 stage_res(a, st, j), stage_dres(a, st, j + 1));
    }
    if (st->first) {
        stage_embed_backward_weight(st, a);
        stage_vision_backward_input(st, a);
        stage_vision_backward_weight(st, a, 1);
        if (dhidden_in && a->Np > 0) vit_stage_dinput(st->be, &st->vc, &a->vit, dhidden_in); /* to the tower's stages */
        stage_count_vit_recompute(st, a);
    } else {
        be->dev->copy_d2d(be, dhidden_in, stage_dres(a, st, 0), (size_t)a->T * st->cfg.Dt * sizeof(float));
    }
    a->state = ACTS_EMPTY;
}

/* ------------------------------------------------------------------------------------------------
 * Dumps */

int stage_dump_params(const Stage* st, int grads, const char* path, char* err, size_t err_len) {
    const ParamTable* pt = &st->params;
    float* host;
    if (grads) {
        host = mallocCheck((pt->gtotal ? pt->gtotal : 1) * sizeof(float));
        st->be->dev->copy_d2h(st->be, host, pt->grad, pt->gtotal * sizeof(float));
    } else { /* every value in the host layout (a frozen tensor of a bf16 run: its bf16 values) */
        int own;
        float* v = params_host_values(pt, &own);
        host = own ? v : mallocCheck((pt->total ? pt->total : 1) * sizeof(float));
        if (!own) memcpy(host, v, pt->total * sizeof(float));
    }
    StWriter* w = st_writer_new();
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (grads && s->frozen) continue; /* a frozen tensor has no gradient */
        if (pt->omit_replicated && !params_is_slice(s)) continue; /* TP rank 0 writes the replicated tensors */
        if (s->shared_copy) continue;                               /* the tied embedding's copy: stage 0 writes it */
        st_writer_add(w, s->name, DTYPE_F32, s->ndim, s->shape, host + (grads ? s->goff : s->offset));
        char key[160], val[256];
        if (params_slice_format(s, val, sizeof val)) {
            snprintf(key, sizeof key, "slice.%s", s->name);
            st_writer_meta(w, key, val);
        }
    }
    st_writer_meta(w, "format", grads ? "rrfp-mm-grads" : "rrfp-mm-weights");
    void* quant = grads ? NULL : params_quant_st_add(w, pt); /* QLoRA: the NF4 form beside the values */
    int rc = st_writer_write(w, path, err, err_len);
    params_quant_st_free(quant);
    st_writer_free(w);
    free(host);
    return rc;
}

int stage_dump_compute(const Stage* st, const char* path, char* err, size_t err_len) {
    const ParamTable* pt = &st->params;
    if (!pt->compute) return 1;
    unsigned char* host = mallocCheck(pt->compute_bytes ? pt->compute_bytes : 1);
    st->be->dev->copy_d2h(st->be, host, pt->compute, pt->compute_bytes);
    StWriter* w = st_writer_new();
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (pt->omit_replicated && !params_is_slice(s)) continue; /* as stage_dump_params */
        if (s->shared_copy) continue;
        st_writer_add(w, s->name, params_compute_dtype(pt, i), s->ndim, s->shape, host + s->coff);
        char key[160], val[256];
        if (params_slice_format(s, val, sizeof val)) {
            snprintf(key, sizeof key, "slice.%s", s->name);
            st_writer_meta(w, key, val);
        }
    }
    st_writer_meta(w, "format", "rrfp-mm-compute");
    int rc = st_writer_write(w, path, err, err_len);
    st_writer_free(w);
    free(host);
    return rc;
}

void stage_logits_d2h(const Stage* st, const StageActs* a, float* dst, size_t n) {
    if (lm_act_bytes(&st->lc) == 4) {
        st->be->dev->copy_d2h(st->be, dst, buf_f32p(a->logits), n * sizeof(float));
        return;
    }
    uint16_t* l16 = mallocCheck((n ? n : 1) * sizeof(uint16_t)); /* 2-byte bf16 logits: widened on the host */
    st->be->dev->copy_d2h(st->be, l16, buf_bf16p(a->logits), n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) dst[i] = rr_bf16_to_f32(l16[i]);
    free(l16);
}

int stage_dump_microbatch(const Stage* st, const StageActs* a, const Microbatch* mb, const char* path, char* err,
                          size_t err_len) {
    const ModelConfig* c = &st->cfg;
    StWriter* w = st_writer_new();
    int P = 3 * c->patch * c->patch;
    /* the inputs from the first stage, the logits and loss from the last: a pipeline's per-stage files
     * union into one microbatch without a tensor twice */
    if (!stage_takes_hidden(st) && st->tp_rank == 0) { /* TP: the inputs once, from TP rank 0 (the tower's first stage) */
    st_writer_add_i32(w, "cu_seqlens", mb->cu_seqlens, 1, mb->S + 1, 0, 0, 0);
    st_writer_add_i32(w, "ids", mb->ids, 1, mb->T, 0, 0, 0);
    st_writer_add_i32(w, "targets", mb->targets, 1, mb->T, 0, 0, 0);
    st_writer_add_i32(w, "pos", mb->pos, 1, mb->T, 0, 0, 0);
    st_writer_add_f32(w, "patches", mb->patches, 2, mb->Np, P, 0, 0);
    /* a text-only microbatch may carry no img_cu_patches array; it means {0} */
    int32_t zero = 0;
    st_writer_add_i32(w, "img_cu_patches", mb->img_cu_patches ? mb->img_cu_patches : &zero, 1, mb->I + 1, 0, 0, 0);
    st_writer_add_i32(w, "grid_h", mb->grid_h, 1, mb->I, 0, 0, 0);
    st_writer_add_i32(w, "grid_w", mb->grid_w, 1, mb->I, 0, 0, 0);
    st_writer_add_i32(w, "patch_row", mb->patch_row, 1, mb->Np, 0, 0, 0);
    st_writer_add_i32(w, "patch_col", mb->patch_col, 1, mb->Np, 0, 0, 0);
    st_writer_add_i32(w, "img_lm_start", mb->img_lm_start, 1, mb->I, 0, 0, 0);
    }
    float* logits = NULL;
    float loss = 0;
    char buf[64];
    if (st->last && a && a->state != ACTS_EMPTY) {
        int Vs = st->tp > 1 ? st->Vs : c->V; /* TP: this rank's vocabulary columns, the slice recorded */
        size_t nl = (size_t)mb->T * Vs;
        logits = mallocCheck((nl ? nl : 1) * sizeof(float));
        stage_logits_d2h(st, a, logits, nl);
        st_writer_add_f32(w, "logits", logits, 2, mb->T, Vs, 0, 0);
        if (st->tp > 1) {
            char val[128];
            snprintf(val, sizeof val, "dim=1;shape=%d,%d;ranges=%d:%d", mb->T, c->V, st->v0, Vs);
            st_writer_meta(w, "slice.logits", val);
        }
        loss = a->loss_sum;
        if (st->tp_rank == 0) st_writer_add_f32(w, "loss_sum", &loss, 1, 1, 0, 0, 0);
    }
    if (mb->J > 0 && !stage_takes_hidden(st)) { /* any-resolution images: their layout (docs/anyres.md) */
        st_writer_add_i32(w, "ar_tile0", mb->ar_tile0, 1, mb->J + 1, 0, 0, 0);
        st_writer_add_i32(w, "ar_size", mb->ar_size, 2, mb->J, 2, 0, 0);
        st_writer_add_i32(w, "ar_grid", mb->ar_grid, 2, mb->J, 2, 0, 0);
        st_writer_add_i32(w, "ar_lm_start", mb->ar_lm_start, 1, mb->J, 0, 0, 0);
    }
    snprintf(buf, sizeof buf, "%d", mb->n_supervised);
    st_writer_meta(w, "n_supervised", buf);
    snprintf(buf, sizeof buf, "%d", mb->patch);
    st_writer_meta(w, "patch", buf);
    st_writer_meta(w, "format", "rrfp-mm-microbatch");
    int rc = st_writer_write(w, path, err, err_len);
    st_writer_free(w);
    free(logits);
    return rc;
}

int model_dump_config(const ModelConfig* c, const char* extra_json, const char* path, char* err, size_t err_len) {
    cJSON* j = extra_json ? cJSON_Parse(extra_json) : cJSON_CreateObject();
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        snprintf(err, err_len, "%s: extra fields are not a JSON object", path);
        return -1;
    }
    cJSON_AddStringToObject(j, "format", "rrfp-mm-dump");
    cJSON_AddNumberToObject(j, "patch", c->patch);
    cJSON_AddNumberToObject(j, "Dv", c->Dv);
    cJSON_AddNumberToObject(j, "Lv", c->Lv);
    cJSON_AddNumberToObject(j, "Hv", c->Hv);
    cJSON_AddNumberToObject(j, "Dt", c->Dt);
    cJSON_AddNumberToObject(j, "Lt", c->Lt);
    cJSON_AddNumberToObject(j, "Ht", c->Ht);
    cJSON_AddNumberToObject(j, "F", c->F);
    cJSON_AddNumberToObject(j, "V", c->V);
    cJSON_AddNumberToObject(j, "min_patches", c->min_patches);
    cJSON_AddNumberToObject(j, "max_patches", c->max_patches);
    cJSON_AddNumberToObject(j, "init_std", c->init_std);
    LmConfig lc = model_config_lm(c);
    cJSON_AddNumberToObject(j, "rms_eps", lc.rms_eps);
    cJSON_AddStringToObject(j, "vision_arch", c->vision_arch == VIT_ARCH_CLIP ? "clip" : "rope2d");
    cJSON_AddNumberToObject(j, "vision_feature_layer", c->vision_feature_layer);
    cJSON_AddNumberToObject(j, "vision_image_size", c->vision_image_size);
    cJSON_AddStringToObject(j, "projector_act", act_name((Act)c->projector_act));
    cJSON_AddNumberToObject(j, "rope_base", lc.rope.theta);
    /* the LM variants (tests/support/ref/llava_ref.py reads them; absent = docs/model.md's default model) */
    cJSON_AddNumberToObject(j, "Hkv", lc.Hkv);
    cJSON_AddNumberToObject(j, "qkv_bias", c->qkv_bias);
    cJSON_AddNumberToObject(j, "o_bias", c->o_bias);
    cJSON_AddNumberToObject(j, "tie_embeddings", c->tie_embeddings);
    if (c->anyres) cJSON_AddNumberToObject(j, "anyres", c->anyres);
    if (c->rope_llama3) {
        cJSON_AddStringToObject(j, "rope_type", "llama3");
        cJSON_AddNumberToObject(j, "rope_factor", c->rope_factor);
        cJSON_AddNumberToObject(j, "rope_low_freq_factor", c->rope_low_freq_factor);
        cJSON_AddNumberToObject(j, "rope_high_freq_factor", c->rope_high_freq_factor);
        cJSON_AddNumberToObject(j, "rope_original_max_pos", c->rope_original_max_pos);
    }
    if (c->lora_r > 0) { /* LoRA (tests/support/ref/lora_ref.py) */
        cJSON_AddNumberToObject(j, "lora_r", c->lora_r);
        cJSON_AddNumberToObject(j, "lora_alpha", c->lora_alpha);
        cJSON_AddNumberToObject(j, "lora_dropout", c->lora_dropout);
        cJSON_AddNumberToObject(j, "lora_targets", c->lora_targets);
        if (c->vision_lora_targets) cJSON_AddNumberToObject(j, "vision_lora_targets", c->vision_lora_targets);
        if (c->lora_quant) cJSON_AddStringToObject(j, "lora_quant", "nf4");
    }
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->seed);
    cJSON_AddStringToObject(j, "seed", seed); /* a string: JSON numbers lose 64-bit integers */
    char* text = cJSON_Print(j);
    cJSON_Delete(j);
    int rc = rr_write_file_atomic(path, text, strlen(text));
    if (rc) snprintf(err, err_len, "%s: cannot write (%s)", path, strerror(errno));
    free(text);
    return rc;
}
