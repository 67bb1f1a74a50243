/* layout.c — what a recipe's model and layout are, computed once for everyone: the model config, the
 * LM layer split over the virtual pipeline stages (the trainer and --dry-run take it from here, so
 * they cannot disagree), and the dry run's parameter and memory table. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/bw_path.h"
#include "engine/util.h"
#include "runtime/model/partition.h"
#include "runtime/train/layout.h"
#include "text/tokenizer.h"
#include "vision/vit_lora.h"

int train_tokenizer_vocab(const Recipe* r, char* err, size_t err_len) {
    /* the tokenizer as training loads it: its checks (ids dense, in range; added tokens as Hugging Face
     * numbers them) hold here too, so the dry run describes the model training would build */
    Tokenizer* tok = tokenizer_load(r->tokenizer, err, err_len);
    if (!tok) {
        char e[1024];
        snprintf(e, sizeof e, "%s", err);
        snprintf(err, err_len, "model.vocab = 0 takes the vocabulary from data.tokenizer: %s", e);
        return -1;
    }
    int v = tokenizer_vocab_size(tok);
    tokenizer_free(tok);
    return v;
}

ModelConfig train_model_config(const Recipe* r, int vocab) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    c.patch = r->patch;
    c.Dv = r->vision_width, c.Lv = r->vision_layers, c.Hv = r->vision_heads;
    c.Dt = r->text_width, c.Lt = r->text_layers, c.Ht = r->text_heads;
    c.F = r->ffn_hidden;
    c.V = vocab;
    c.min_patches = r->min_patches, c.max_patches = r->max_patches;
    c.init_std = 0.02f;
    c.seed = (uint64_t)r->seed;
    c.rms_eps = r->rms_eps;
    c.rope_base = r->rope_base;
    c.vision_arch = !strcmp(r->vision_arch, "clip") ? 1 : 0;
    c.vision_feature_layer = r->vision_feature_layer;
    c.vision_image_size = r->vision_image_size;
    c.anyres = r->anyres;
    c.projector_act = !strcmp(r->projector_act, "gelu") ? ACT_GELU_ERF : ACT_GELU_TANH;
    c.Hkv = r->text_kv_heads;
    c.qkv_bias = r->text_qkv_bias, c.o_bias = r->text_o_bias;
    c.tie_embeddings = r->tie_embeddings;
    c.rope_llama3 = !strcmp(r->rope_type, "llama3");
    c.rope_factor = r->rope_factor, c.rope_low_freq_factor = r->rope_low_freq_factor;
    c.rope_high_freq_factor = r->rope_high_freq_factor, c.rope_original_max_pos = r->rope_original_max_pos;
    if (r->lora_r > 0) { /* [lora]: the targets were checked by recipe_validate */
        char e[256];
        c.lora_r = r->lora_r;
        c.lora_alpha = r->lora_alpha;
        c.lora_dropout = r->lora_dropout;
        if (lm_lora_targets_parse(r->lora_targets, &c.lora_targets, e, sizeof e) != 0) c.lora_targets = 0;
        if (vit_lora_targets_parse(r->lora_targets, &c.vision_lora_targets, e, sizeof e) != 0) c.vision_lora_targets = 0;
        c.lora_quant = !strcmp(r->lora_quant, "nf4");
    }
    return c;
}

static void fmt_count(char* s, size_t n, double x) {
    if (x >= 1e9) snprintf(s, n, "%.2fB", x / 1e9);
    else if (x >= 1e6) snprintf(s, n, "%.2fM", x / 1e6);
    else if (x >= 1e3) snprintf(s, n, "%.1fk", x / 1e3);
    else snprintf(s, n, "%.0f", x);
}

static void fmt_bytes(char* s, size_t n, double x) {
    if (x >= (double)(1ull << 30)) snprintf(s, n, "%.2f GiB", x / (double)(1ull << 30));
    else snprintf(s, n, "%.1f MiB", x / (double)(1 << 20));
}

void train_fmt_bytes(char* s, size_t n, double x) { fmt_bytes(s, n, x); }

/* What one virtual stage holding LM layers [l0, l1) allocates, before the microbatches in flight multiply its
 * activations: exact sizes from the model's own tables (runtime/model/model.h), nothing allocated. With tp > 1: one TP
 * rank's table (its slices of the split tensors, whole copies of the replicated ones: every TP rank holds the same
 * amount) and its split activations. */
typedef struct {
    double params, trainable, copy, act_mb; /* summed over a rank's stages */
    double act_ws;                          /* the stages' activation-recompute workspaces (one each), summed */
    double masters;                         /* values with an f32 master: bf16 runs hold none for frozen tensors */
    double scratch, wscratch;               /* one buffer per process: the largest stage's */
    double quant, qws; /* QLoRA: the NF4 base weights' bytes, and each stage's dequantisation workspace (one block's) */
    double msg_edge;   /* floats of the stage's largest pipeline message (stage_edge_max_floats); the rank's: the largest */
    int msg_dirs;      /* the directions it receives in (from the stage before, from the one after); the rank's: summed */
} StageBytes;

/* Bytes of an n-value weight in bitsandbytes' NF4 storage (engine/params_quant.h): 4 bits a value, one
 * 8-bit absmax code per block of 64, one f32 second-level absmax per 256 blocks */
static double qlora_nf4_bytes(size_t n, int slice) {
    size_t nb = (n + 63) / 64;
    if (slice) return (double)((n + 1) / 2) + 4.0 * (double)nb; /* a TP slice: each block's absmax restored (f32) */
    return (double)((n + 1) / 2) + (double)nb + 4.0 * (double)((nb + 255) / 256);
}

/* tower blocks [tv0, tv1) where the tower runs over stages (train_tower_split; tv1 < 0: the whole tower with LM layer 0);
 * head: the stage holds the final norm, the LM head and the loss (stage_init_split) */
static void stage_bytes_head(const Recipe* r, const ModelConfig* mc, int l0, int l1, int tv0, int tv1, int head, StageBytes* o) {
    int T = r->microbatch_tokens;
    memset(o, 0, sizeof *o);
    /* runtime.precision = bf16: the compute copy (engine/params.h: 2-byte bf16 for the 2-D tensors on
     * the CUDA backend, f32 words elsewhere) and, on CUDA, the bf16 GEMMs' operand scratch (bf16.cu) */
    int bf16 = !strcmp(r->precision, "bf16"), cuda = backend_name_host_addressable(r->backend) == 0;
    ParamTable pt; /* train.freeze: gradients and AdamW moments of the trainable tensors only */
    model_params_register_split(mc, l0, l1, tv0, tv1, head, r->tp, 0, &pt);
    o->params = (double)pt.total;
    double qnumel = 0; /* QLoRA's quantised base weights: their NF4 form instead of a master or compute copy */
    for (int i = 0; i < pt.n; i++)
        if (pt.specs[i].quant) qnumel += (double)pt.specs[i].numel,
                                    o->quant += qlora_nf4_bytes(pt.specs[i].numel, params_is_slice(&pt.specs[i]));
    if (qnumel > 0) {
        o->quant += 256 * 4; /* the dynamic map's values, once per table */
        o->qws = qnumel / (l1 > l0 ? l1 - l0 : 1) * (bf16 && cuda ? 2 : 4); /* one block's base weights in the GEMMs' dtype */
    }
    if (bf16) {
        for (int i = 0; i < pt.n; i++)
            if (!pt.specs[i].quant) o->copy += (double)pt.specs[i].numel * (pt.specs[i].ndim == 2 && !pt.specs[i].f32_compute && cuda ? 2 : 4);
        o->scratch = cuda ? 2.0 * (double)params_gemm_operand_elems(&pt, T, 1) : 0;
    }
    o->trainable = (double)model_params_freeze(&pt, r->freeze);
    o->masters = bf16 ? o->trainable : o->params - qnumel; /* a frozen tensor of a bf16 run: its compute copy only */
    /* a tower none of whose tensors trains keeps no activations for a backward (stage_init_tp) */
    int vit_train = 0;
    for (int i = 0; i < pt.n; i++)
        if (!strncmp(pt.specs[i].name, "vision.", 7) && !pt.specs[i].frozen) vit_train = 1;
    if (tv1 >= 0 && (tv0 > 0 || l1 == l0)) { /* a share of the tower runs its B down to the whole tower's floor */
        VitConfig vc = model_config_vit(mc);
        int hi = l1 == l0 ? tv1 : vit_blocks_run(&vc);
        vit_train = vit_train || model_vit_floor(mc, r->freeze) < hi;
    }
    params_free(&pt);
    /* every position of the microbatch may be an image patch: the worst case */
    /* bf16 on CUDA: the LM's activations 2-byte (the CUDA bf16 table takes them, model_bf16_activations; any tp) */
    int lm_bytes = bf16 && cuda && model_bf16_activations(r->tp) && mc->lora_r <= 0 ? 2 : 4; /* LoRA: f32 words */
    /* train.recompute: what a microbatch keeps, and the stage's one recompute workspace */
    size_t ws = 0;
    o->act_mb = (double)model_stage_acts_bytes_split(mc, l0, l1, tv0, tv1, head, T, model_patch_budget(mc, T), 0, r->tp, lm_bytes,
                                                     vit_train, recipe_recompute(r, 0), recipe_recompute(r, 1), &ws);
    o->act_ws = (double)ws;
    /* the pipeline's messages (runtime/pipeline/pipeline.c ensure_buffers): the LM's (T, Dt), or the tower's rows where
     * the stage runs tower blocks; received from the stage before (none on the first) and after (none on the head's) */
    o->msg_edge = (double)T * mc->Dt;
    if (l0 == 0 && (tv1 < 0 || tv1 > tv0)) {
        VitConfig mvc = model_config_vit(mc);
        double tw = (double)vit_max_tokens(&mvc, model_patch_budget(mc, T)) * mc->Dv;
        if (tw > o->msg_edge) o->msg_edge = tw;
    }
    o->msg_dirs = !(l0 == 0 && tv0 == 0) + !head;
    /* and its attention's f32 scratch where it widens q, k, v, out (bf16.cu: a known gap; the largest call on
     * that table: the LM's, and the ViT's where the tower runs there too, stage_attn_reserve) */
    if (lm_bytes == 2) {
        double ws = l1 > l0 ? 4.0 * T * (3.0 * mc->Dt / r->tp + mc->Dt / r->tp) : 0;
        if (l0 == 0 && (tv1 < 0 || tv1 > tv0 || l1 > l0) && model_bf16_vision(mc)) {
            /* the tower's rows: the patches, and CLIP's class tokens (vit_max_tokens); q, k, v views of one
             * qkv row: ld 3 Dv */
            int mp = mc->min_patches > 0 ? mc->min_patches : 1;
            double Tv = mc->vision_arch == VIT_ARCH_CLIP ? (double)T + (T + mp - 1) / mp : (double)T;
            double vw = 4.0 * Tv * (3.0 * 3.0 * mc->Dv / r->tp + mc->Dv / r->tp);
            if (vw > ws) ws = vw;
        }
        o->wscratch = ws; /* its own buffer, beside the GEMM operands' */
    }
}

static void stage_bytes_tower(const Recipe* r, const ModelConfig* mc, int l0, int l1, int tv0, int tv1, StageBytes* o) {
    stage_bytes_head(r, mc, l0, l1, tv0, tv1, l1 == mc->Lt, o);
}

static void stage_bytes(const Recipe* r, const ModelConfig* mc, int l0, int l1, StageBytes* o) {
    stage_bytes_tower(r, mc, l0, l1, 0, -1, o);
}

static void stage_bytes_add(StageBytes* acc, const StageBytes* s) {
    acc->params += s->params, acc->masters += s->masters, acc->trainable += s->trainable, acc->copy += s->copy, acc->act_mb += s->act_mb;
    acc->act_ws += s->act_ws;
    if (s->msg_edge > acc->msg_edge) acc->msg_edge = s->msg_edge;
    acc->msg_dirs += s->msg_dirs;
    acc->quant += s->quant, acc->qws += s->qws;
    if (s->scratch > acc->scratch) acc->scratch = s->scratch;
    if (s->wscratch > acc->wscratch) acc->wscratch = s->wscratch;
}

/* Microbatches whose activations pipeline rank `rank` holds at once: gpipe M, otherwise min(P - rank, M) x chunks,
 * or runtime.cap under the modes that apply it. */
static int rank_inflight(const Recipe* r, int rank) {
    int P = r->pp, M = r->microbatches, inflight;
    if (!strcmp(r->hint, "gpipe")) inflight = M;
    else inflight = (P - rank < M ? P - rank : M) * r->chunks;
    if ((!strcmp(r->mode, "ready") || !strcmp(r->mode, "lookahead") || !strcmp(r->mode, "adaptive")) &&
        strcmp(r->cap, "0") != 0) {
        double cv = atof(r->cap);
        int c = strchr(r->cap, 'x') ? (int)(cv * inflight + 0.999) : (int)cv;
        inflight = c < M ? c : M;
    }
    return inflight;
}

static void rank_bytes_of(const Recipe* r, const StageBytes* sb, int inflight, int layers, TrainRankBytes* out) {
    out->params = sb->params;
    out->layers = layers;
    out->weights = sb->masters * 4 + sb->copy + sb->quant;
    out->compute_copy = sb->copy;
    /* on CUDA the column sums' partials (bias / norm-weight gradients: engine/cuda/bw_path.h), any precision */
    double scratch = sb->scratch;
    if (backend_name_host_addressable(r->backend) == 0) scratch += (double)RR_COLSUM_SCRATCH_FLOATS * 4;
    /* the pipeline's message buffers, f32, each the rank's largest message: the one it sends from; a receive buffer per
     * microbatch per direction where they are this memory's (the cpu backend's; a device's under runtime.comm = nccl,
     * whose send pool holds two more per direction; over MPI a device stages each receive in one buffer, the
     * receive buffers in host memory) */
    if (sb->msg_dirs > 0) {
        int dev = backend_name_host_addressable(r->backend) == 0, nccl = dev && !strcmp(r->comm, "nccl");
        double msg = 4.0 * sb->msg_edge, M = r->microbatches;
        scratch += msg;
        if (!dev || nccl) scratch += sb->msg_dirs * M * msg;
        if (nccl) scratch += sb->msg_dirs * (M < 2 ? M : 2) * msg;
        else if (dev) scratch += msg;
    }
    out->scratch = scratch + sb->wscratch + sb->qws;
    out->trainable = sb->trainable;
    out->grads = sb->trainable * 4;
    out->adam = sb->trainable * 8;
    if (r->zero && r->dp > 1) { /* the distributed optimizer: moments (and bf16's f32 masters) of 1/dp of the trainable values */
        out->adam = sb->trainable * 8 / r->dp;
        if (sb->copy > 0) out->weights -= sb->trainable * 4 * (1 - 1.0 / r->dp);
        out->scratch += r->dp * r->dp_bucket_mb * 1048576.0; /* the all-gather's staging buffer */
    }
    out->acts = sb->act_mb * inflight + sb->act_ws;
    out->total = out->weights + out->grads + out->adam + out->acts + out->scratch;
}

/* tower: each virtual stage's tower blocks (train_tower_split), or NULL: the whole tower with LM layer 0 */
static int rank_bytes_split_tower(const Recipe* r, const ModelConfig* mc, const int* layers, const int* tower, int rank,
                                  TrainRankBytes* out) {
    int P = r->pp, nl = 0;
    StageBytes acc, sb;
    memset(&acc, 0, sizeof acc);
    for (int ch = 0; ch < r->chunks; ch++) {
        int s = rank + ch * P, l0 = 0, tv0 = 0;
        for (int u = 0; u < s; u++) l0 += layers[u], tv0 += tower ? tower[u] : 0;
        nl += layers[s];
        int head = s == P * r->chunks - 1; /* the head: on the last virtual stage (alone there with no LM layer) */
        if (!tower) stage_bytes_head(r, mc, l0, l0 + layers[s], 0, -1, head, &sb);
        else if (layers[s] == 0 && l0 == 0) stage_bytes_tower(r, mc, 0, 0, tv0, tv0 + tower[s], &sb);
        else stage_bytes_head(r, mc, l0, l0 + layers[s], l0 == 0 ? tv0 : 0, l0 == 0 ? mc->Lv : 0, head, &sb);
        stage_bytes_add(&acc, &sb);
    }
    rank_bytes_of(r, &acc, rank_inflight(r, rank), nl, out);
    return 0;
}

int train_rank_bytes(const Recipe* r, const ModelConfig* mc, int rank, TrainRankBytes* out, char* err,
                     size_t err_len) {
    int S = r->pp * r->chunks;
    int* layers = mallocCheck((size_t)S * sizeof(int));
    int* tower = mallocCheck((size_t)S * sizeof(int));
    int ts = train_layer_split(r, mc, layers, err, err_len) != 0 /* the trainer's own split */
                 ? -1
                 : train_tower_split(r, mc, layers, tower, NULL, 0, err, err_len);
    if (ts >= 0) rank_bytes_split_tower(r, mc, layers, ts ? tower : NULL, rank, out);
    free(layers);
    free(tower);
    return ts < 0 ? -1 : 0;
}

/* The cost model at the token budget of a step: half of the LM positions image patches, images of (min + max) / 2
 * patches, samples of 256 positions (recipes/README.md). Any-resolution models (model.anyres, docs/anyres.md): as many
 * tower patches as LM positions (an image's tiles hold about one patch per position it takes), the tower's attention
 * a tile's; the calibrated simulator splits on the same assumptions (runtime/sim/calib.c). */
static PartitionCost split_cost(const Recipe* r, const ModelConfig* c) {
    double tokens = (double)r->microbatch_tokens * r->microbatches;
    int g = c->anyres && c->patch > 0 ? c->vision_image_size / c->patch : 0;
    PartitionCost k = partition_cost_model(c->Dv, c->Lv, c->Dt, c->F, c->V, tokens, c->anyres ? tokens : 0.5 * tokens,
                                           c->anyres ? (double)g * g : 0.5 * (c->min_patches + c->max_patches), 256.0,
                                           c->patch);
    /* full recompute: the recomputed forwards are part of each block's cost */
    return partition_cost_recompute(k, recipe_recompute(r, 0) == RECOMPUTE_FULL, recipe_recompute(r, 1) == RECOMPUTE_FULL);
}

/* The automatic split's objective (parallel.partition, partition_auto_path): 0 balance, else the step's microbatches
 * for the path-aware split (one chunk per rank: interleaved chunks' paths are not the formula's), flagged for a
 * split-backward hint (PARTITION_SPLIT_BACKWARD: the last stage keeps an LM block) */
static int split_path_mb(const Recipe* r) {
    if (strcmp(r->partition, "path") || r->chunks != 1) return 0;
    int split = !strcmp(r->hint, "zb-h1") || !strcmp(r->hint, "bfw");
    return r->microbatches | (split ? PARTITION_SPLIT_BACKWARD : 0);
}

/* The tower's part of split_cost's (partition_auto_tower) */
static PartitionTower split_tower(const Recipe* r, const ModelConfig* c) {
    double tokens = (double)r->microbatch_tokens * r->microbatches;
    int g = c->anyres && c->patch > 0 ? c->vision_image_size / c->patch : 0;
    PartitionTower t = partition_tower_model(c->Dv, c->Lv, c->anyres ? tokens : 0.5 * tokens,
                                             c->anyres ? (double)g * g : 0.5 * (c->min_patches + c->max_patches), c->patch);
    return partition_tower_recompute(t, recipe_recompute(r, 1) == RECOMPUTE_FULL);
}

double train_budget_gib(const Recipe* r) {
    if (r->memory_budget > 0) return r->memory_budget;
    if (r->device_memory > 0 && !r->allow_overcommit) return r->device_memory * (1.0 - TRAIN_DEVICE_RESERVE);
    return 0;
}

static double budget_bytes(const Recipe* r) { return train_budget_gib(r) * (double)(1ull << 30); }

/* Where the budget comes from, for messages: "runtime.memory_budget = 25 GiB", or the device's memory less the
 * reserve. */
static void budget_what(const Recipe* r, char* s, size_t n) {
    if (r->memory_budget > 0) snprintf(s, n, "runtime.memory_budget = %g GiB", r->memory_budget);
    else {
        char dev[32], b[32];
        fmt_bytes(dev, sizeof dev, r->device_memory * (double)(1ull << 30));
        fmt_bytes(b, sizeof b, budget_bytes(r));
        snprintf(s, n, "the device's memory (%s less a %.0f%% reserve: %s; runtime.memory_budget unset)", dev,
                 100 * TRAIN_DEVICE_RESERVE, b);
    }
}

/* The split that balances the cost model at the token budget of a step (assumptions in recipes/README.md),
 * or parallel.layers as given. */
static int split_by_time(const Recipe* r, const ModelConfig* c, int* layers, char* err, size_t err_len) {
    int S = r->pp * r->chunks;
    if (r->layers[0]) {
        char e[256];
        if (partition_parse(r->layers, c->Lt, S, layers, e, (int)sizeof e) != 0) {
            snprintf(err, err_len, "%s: parallel.layers = %s: %s", recipe_origin(r, "parallel", "layers"), r->layers, e);
            return -1;
        }
        return 0;
    }
    if (partition_auto_path(c->Lt, S, split_cost(r, c), split_path_mb(r), NULL, NULL, layers) != 0) {
        snprintf(err, err_len, "%s: %d LM layers cannot be split over %d x %d virtual pipeline stages (at least one "
                 "layer each)", recipe_origin(r, "parallel", "pp"), c->Lt, r->pp, r->chunks);
        return -1;
    }
    return 0;
}

/* The largest rank of a split: its index, and its bytes in *out. tower: each virtual stage's tower blocks, or NULL:
 * the whole tower with LM layer 0 */
static int split_largest_tower(const Recipe* r, const ModelConfig* mc, const int* layers, const int* tower,
                               TrainRankBytes* out) {
    int worst = 0;
    for (int rank = 0; rank < r->pp; rank++) {
        TrainRankBytes b;
        rank_bytes_split_tower(r, mc, layers, tower, rank, &b);
        if (rank == 0 || b.total > out->total) *out = b, worst = rank;
    }
    return worst;
}

/* split_largest_tower of the LM split `layers` with the recipe's parallel.tower_layers where it splits the tower over
 * stages (train_tower_split on these layers; a split that does not exist is refused where the trainer takes it),
 * else with the tower on stage 0 (parallel.tower_split = auto is checked where its split is taken: train_tower_split) */
static int split_largest(const Recipe* r, const ModelConfig* mc, const int* layers, TrainRankBytes* out) {
    int S = r->pp * r->chunks, *tower = NULL;
    if (r->tower_layers[0]) {
        int* lw = mallocCheck((size_t)S * sizeof(int));
        memcpy(lw, layers, (size_t)S * sizeof(int));
        tower = mallocCheck((size_t)S * sizeof(int));
        char e[1024];
        if (train_tower_split(r, mc, lw, tower, NULL, 0, e, sizeof e) != 1) free(tower), tower = NULL;
        free(lw);
    }
    int worst = split_largest_tower(r, mc, layers, tower, out);
    free(tower);
    return worst;
}

static int tower_only_cap(const ModelConfig* c);

/* partition_auto_fit's test, for one pipeline rank per virtual stage (chunks = 1): stage s is rank s, and its
 * stage bytes depend only on its layer range (memoised over (l0, l1)). */
typedef struct {
    const Recipe* r;
    const ModelConfig* mc;
    double budget;
    StageBytes* memo;
    unsigned char* have;
} FitCtx;

static int stage_fits(void* vctx, int s, int l0, int k) {
    FitCtx* f = vctx;
    size_t i = (size_t)l0 * (size_t)(f->mc->Lt + 1) + (size_t)(l0 + k);
    StageBytes own, *sb = &f->memo[i];
    if (s < f->r->pp - 1 && l0 + k == f->mc->Lt) /* a head-only last stage follows: this one holds no head */
        stage_bytes_head(f->r, f->mc, l0, l0 + k, 0, -1, 0, sb = &own);
    else if (!f->have[i]) {
        stage_bytes(f->r, f->mc, l0, l0 + k, &f->memo[i]);
        f->have[i] = 1;
    }
    TrainRankBytes b;
    rank_bytes_of(f->r, sb, rank_inflight(f->r, s), k, &b);
    return b.total <= f->budget;
}

/* The time-balanced split among those whose every rank fits runtime.memory_budget (chunks = 1). 0, or -1 when
 * none fits. */
/* The search reads each stage's table for every layer range (cubic in the layers): up to this many LM layers it
 * takes a second or two; beyond it the budget is checked, not searched (a recipe's layers go to 1024). */
#define SPLIT_FIT_MAX_LAYERS 128

static int split_fit(const Recipe* r, const ModelConfig* mc, int* layers) {
    if (r->chunks != 1 || mc->Lt > SPLIT_FIT_MAX_LAYERS) return -1;
    size_t n = (size_t)(mc->Lt + 1) * (size_t)(mc->Lt + 1);
    FitCtx f = {r, mc, budget_bytes(r), mallocCheck(n * sizeof(StageBytes)), callocCheck(n, 1)};
    int rc = partition_auto_path(mc->Lt, r->pp, split_cost(r, mc), split_path_mb(r), stage_fits, &f, layers);
    free(f.memo);
    free(f.have);
    return rc;
}

/* The memory refit over the chain [tower blocks][LM blocks] (parallel.tower_split = auto, chunks = 1): of the splits
 * whose every rank fits the budget, the one with the least max stage cost or path (split_path_mb; of those the least
 * sum of squared stage costs), as partition_auto_tower_path measures them. A split that moves tower blocks has tower-only
 * stages [0, s0) holding blocks [0, Lv - rb) (at most tower_only_cap, one or more each) and stage s0 the last rb blocks
 * with LM layer 0. For each (s0, rb) the two parts are split apart by partition_auto_path with the budget as its fits:
 * the tower-only stages as uniform blocks (the patch embedding the first stage's extra), the LM stages as the LM split
 * with the rb blocks (and the rest of the tower's stage: projector, embedding) as stage s0's extra. The parts' maxima
 * are independent (a path adds 1/M of every earlier stage's cost: for the LM stages the tower-only stages' total, the
 * same for each), so the best of each part gives the best max for the pair; s0 = 0 is split_fit's LM split. Each stage's
 * bytes as rank_bytes_split_tower counts them, memoised by range. */
typedef struct {
    const Recipe* r;
    const ModelConfig* mc;
    double budget;
    int s0, rb, S;
    StageBytes *tmemo, *lmemo, *fmemo; /* tower-only [b0, b1); LM [l0, l1) with l0 > 0; stage s0: (rb, LM layers) */
    StageBytes* hmemo;                 /* [l0, Lt) before a head-only last stage: stage s0 by rb, then by l0 > 0 */
    unsigned char *thave, *lhave, *fhave, *hhave;
    int* fail; /* by range start and stage: the fewest blocks found over the budget (a stage's bytes grow with its range) */
} ChainFit;

/* whether stage s fits with bytes sb; key: the range's family and start (a tower-only stage's first block; stage s0's
 * tower blocks; an LM stage's first layer), head: the range holds the head (larger than the range without it, so its
 * failure says nothing of that one's) */
static int chain_fits_bytes(const ChainFit* f, int key, int s, const StageBytes* sb, int k, int head) {
    TrainRankBytes b;
    rank_bytes_of(f->r, sb, rank_inflight(f->r, s), k, &b);
    int ok = b.total <= f->budget;
    if (!ok && !head && k < f->fail[(size_t)key * (size_t)f->S + (size_t)s]) f->fail[(size_t)key * (size_t)f->S + (size_t)s] = k;
    return ok;
}

/* the range of k blocks from the start `key` on stage s is known over the budget: a shorter one from there was */
static int chain_known_over(const ChainFit* f, int key, int s, int k) {
    return k >= f->fail[(size_t)key * (size_t)f->S + (size_t)s];
}

static int chain_tower_fits(void* v, int s, int b0, int k) { /* tower-only stage s: blocks [b0, b0 + k) */
    ChainFit* f = v;
    if (k < 1 || chain_known_over(f, b0, s, k)) return 0;
    size_t i = (size_t)b0 * (size_t)(f->mc->Lv + 1) + (size_t)(b0 + k);
    if (!f->thave[i]) stage_bytes_tower(f->r, f->mc, 0, 0, b0, b0 + k, &f->tmemo[i]), f->thave[i] = 1;
    return chain_fits_bytes(f, b0, s, &f->tmemo[i], k, 0);
}

static int chain_lm_fits(void* v, int s, int l0, int k) { /* stage s0 + s: LM layers [l0, l0 + k) */
    ChainFit* f = v;
    int g = f->s0 + s, Lt = f->mc->Lt, Lv = f->mc->Lv, head = g == f->S - 1;
    if (k < 1 && (s == 0 || !head)) return 0; /* stage s0 holds LM layer 0; only the last may hold the head alone */
    if (head && l0 + k < Lt) return 0;        /* the last stage ends at the last LM layer (the memo: no head below it) */
    int key = l0 == 0 ? Lv + 1 + f->rb : 2 * (Lv + 1) + l0; /* stage s0 by its tower blocks, the others by l0 */
    if (chain_known_over(f, key, g, k)) return 0;
    StageBytes* sb;
    if (l0 + k == Lt && !head) { /* a head-only last stage follows: this one holds no head */
        size_t i = l0 == 0 ? (size_t)f->rb : (size_t)(Lv + 1) + (size_t)l0;
        if (!f->hhave[i])
            stage_bytes_head(f->r, f->mc, l0, Lt, l0 == 0 ? Lv - f->rb : 0, l0 == 0 ? Lv : 0, 0, &f->hmemo[i]), f->hhave[i] = 1;
        sb = &f->hmemo[i];
    } else if (l0 == 0) {
        size_t i = (size_t)f->rb * (size_t)(Lt + 1) + (size_t)k;
        if (!f->fhave[i]) stage_bytes_head(f->r, f->mc, 0, k, Lv - f->rb, Lv, head, &f->fmemo[i]), f->fhave[i] = 1;
        sb = &f->fmemo[i];
    } else {
        size_t i = (size_t)l0 * (size_t)(Lt + 1) + (size_t)(l0 + k);
        if (!f->lhave[i]) stage_bytes_head(f->r, f->mc, l0, l0 + k, 0, 0, head, &f->lmemo[i]), f->lhave[i] = 1;
        sb = &f->lmemo[i];
    }
    return chain_fits_bytes(f, key, g, sb, k, head);
}

/* 1 with a fitting split that moves tower blocks (lw, tw set) and is shorter than every fitting LM split with the tower
 * on stage 0; 0 where such an LM split is the best (lw set, tw = Lv, 0, ...); -1 where none fits or the search does not
 * apply (parallel.chunks > 1, past SPLIT_FIT_MAX_LAYERS LM layers or tower blocks). */
static int split_fit_chain(const Recipe* r, const ModelConfig* mc, int* lw, int* tw) {
    int S = r->pp, Lv = mc->Lv, Lt = mc->Lt, pm = split_path_mb(r), cap = tower_only_cap(mc);
    if (r->chunks != 1 || Lt > SPLIT_FIT_MAX_LAYERS || Lv > SPLIT_FIT_MAX_LAYERS) return -1;
    PartitionCost pc = split_cost(r, mc);
    PartitionTower pt = split_tower(r, mc);
    int *l = mallocCheck((size_t)S * sizeof(int)), *t = mallocCheck((size_t)S * sizeof(int));
    double* c = mallocCheck((size_t)S * sizeof(double));
    double best = 1e300, best_ss = 1e300;
    int found = -1;
    /* one candidate split (l, t) against the best so far, by partition_auto_tower_path's measure: one moving tower blocks
     * replaces the LM split only where it is shorter (ties keep the tower on stage 0, as partition_auto_tower_path) */
#define CHAIN_TAKE(moved)                                                                                                \
    do {                                                                                                                 \
        partition_stage_costs_tower(S, t, l, pc, pt, c);                                                                 \
        double mx = partition_stage_paths(S, c, pm, NULL), ss = 0;                                                       \
        for (int s_ = 0; s_ < S; s_++) ss += c[s_] * c[s_];                                                              \
        if (mx < best * (1.0 - 1e-9) || (mx <= best * (1.0 + 1e-9) && found == (moved) && ss < best_ss * (1.0 - 1e-12))) { \
            best = mx, best_ss = ss, found = (moved);                                                                    \
            memcpy(lw, l, (size_t)S * sizeof(int)), memcpy(tw, t, (size_t)S * sizeof(int));                              \
        }                                                                                                                \
    } while (0)
    if (split_fit(r, mc, l) == 0) { /* s0 = 0: the LM split with the tower on stage 0 */
        for (int s = 0; s < S; s++) t[s] = s ? 0 : Lv;
        CHAIN_TAKE(0);
    }
    size_t nt = (size_t)(Lv + 1) * (size_t)(Lv + 1), nl = (size_t)(Lt + 1) * (size_t)(Lt + 1);
    size_t nf = (size_t)(Lv + 1) * (size_t)(Lt + 1);
    size_t nh = (size_t)(Lv + 1) + (size_t)(Lt + 1);
    ChainFit f = {r, mc, budget_bytes(r), 0, 0, S, mallocCheck(nt * sizeof(StageBytes)), mallocCheck(nl * sizeof(StageBytes)),
                  mallocCheck(nf * sizeof(StageBytes)), mallocCheck(nh * sizeof(StageBytes)), callocCheck(nt, 1),
                  callocCheck(nl, 1), callocCheck(nf, 1), callocCheck(nh, 1), NULL};
    size_t nk = (size_t)(2 * (Lv + 1) + Lt + 1) * (size_t)S;
    f.fail = mallocCheck(nk * sizeof(int));
    for (size_t i = 0; i < nk; i++) f.fail[i] = INT_MAX;
    for (int s0 = 1; s0 < S && s0 <= cap; s0++)
        for (int rb = Lv - cap; rb <= Lv - s0; rb++) {
            f.s0 = s0, f.rb = rb;
            /* the tower-only stages: blocks [0, Lv - rb), the patch embedding with block 0 */
            PartitionCost tc = {pt.in, 0, pt.layer};
            if (partition_auto_path(Lv - rb, s0, tc, pm, chain_tower_fits, &f, t) != 0) continue;
            /* the LM stages: stage s0 holds the last rb tower blocks and the rest of the tower's stage as its extra */
            PartitionCost lc = pc;
            lc.first_extra = pc.first_extra - pt.in - (Lv - rb) * pt.layer;
            if (partition_auto_path(Lt, S - s0, lc, pm, chain_lm_fits, &f, l + s0) != 0) continue;
            for (int s = 0; s < S; s++) {
                if (s < s0) l[s] = 0;
                else t[s] = s == s0 ? rb : 0;
            }
            CHAIN_TAKE(1);
        }
#undef CHAIN_TAKE
    free(f.tmemo), free(f.lmemo), free(f.fmemo), free(f.hmemo);
    free(f.thave), free(f.lhave), free(f.fhave), free(f.hhave), free(f.fail);
    free(l), free(t), free(c);
    return found;
}

/* A changed layout (a copy of the recipe) is valid and fits the budget. */
static int layout_fits(Recipe* r, const ModelConfig* mc) {
    char e[1024];
    if (recipe_validate(r, e, sizeof e) != 0) return 0;
    int* layers = mallocCheck((size_t)r->pp * r->chunks * sizeof(int));
    int ok = split_by_time(r, mc, layers, e, sizeof e) == 0;
    if (ok) {
        TrainRankBytes b;
        split_largest(r, mc, layers, &b);
        ok = b.total <= budget_bytes(r) || (!r->layers[0] && split_fit(r, mc, layers) == 0);
    }
    free(layers);
    return ok;
}

/* The smallest changes of the layout that fit the budget, each alone, as "--set" text: the distributed optimizer
 * (dp > 1), the tower's blocks over stages, more activation recompute, more pipeline ranks, fewer microbatches in
 * flight (runtime.cap), more tensor-parallel ranks, half the tokens per microbatch (twice the microbatches: the same
 * tokens per step). */
static void fit_suggestions(const Recipe* r, const ModelConfig* mc, char* out, size_t n) {
    size_t len = 0;
    out[0] = 0;
    Recipe t;
#define SUGGEST(...) do { if (len < n) len += (size_t)snprintf(out + len, n - len, __VA_ARGS__); } while (0)
    if (r->dp > 1 && !r->zero) { /* the distributed optimizer: no more ranks, no recompute */
        t = *r;
        t.zero = 1;
        if (layout_fits(&t, mc)) SUGGEST("--set parallel.zero=1");
    }
    if (strcmp(r->tower_split, "auto") && !r->layers[0] && !r->tower_layers[0] && mc->Lv > 0) {
        /* the tower's blocks over stages (split_fit_chain: a fitting split that moves them) */
        int *lw = mallocCheck((size_t)r->pp * sizeof(int)), *tw = mallocCheck((size_t)r->pp * sizeof(int));
        t = *r;
        snprintf(t.tower_split, sizeof t.tower_split, "auto");
        if (split_fit_chain(&t, mc, lw, tw) == 1) SUGGEST("%s--set parallel.tower_split=auto", len ? "; " : "");
        free(lw), free(tw);
    }
    /* then activation recompute: the layout and the training numbers stay, the backward re-runs forwards */
    static const char* const recompute_modes[] = {"selective", "full"};
    for (int m = 0; m < 2; m++) {
        int want = m == 0 ? RECOMPUTE_SELECTIVE : RECOMPUTE_FULL;
        if (recipe_recompute(r, 0) >= want && recipe_recompute(r, 1) >= want) continue;
        t = *r;
        snprintf(t.recompute, sizeof t.recompute, "%s", recompute_modes[m]);
        snprintf(t.recompute_lm, sizeof t.recompute_lm, "same");
        snprintf(t.recompute_tower, sizeof t.recompute_tower, "same");
        if (layout_fits(&t, mc)) {
            SUGGEST("%s--set train.recompute=%s", len ? "; " : "", recompute_modes[m]);
            break;
        }
    }
    if (!r->layers[0]) {
        for (int pp = r->pp + 1; pp <= mc->Lt && pp <= 2 * r->pp + 8 && mc->Lt <= SPLIT_FIT_MAX_LAYERS; pp++) {
            t = *r;
            t.pp = pp, t.chunks = 1;
            if (layout_fits(&t, mc)) {
                SUGGEST("%s--set parallel.pp=%d%s", len ? "; " : "", pp, r->chunks > 1 ? " --set parallel.chunks=1" : "");
                break;
            }
        }
    }
    if (strcmp(r->mode, "ready") == 0 || strcmp(r->mode, "lookahead") == 0 || strcmp(r->mode, "adaptive") == 0) {
        int most = rank_inflight(r, 0);
        for (int cap = most - 1; cap >= 1; cap--) {
            t = *r;
            snprintf(t.cap, sizeof t.cap, "%d", cap);
            if (layout_fits(&t, mc)) { /* the largest cap that fits: the fewest microbatches held back */
                SUGGEST("%s--set runtime.cap=%d", len ? "; " : "", cap);
                break;
            }
        }
    }
    for (int tp = 2 * r->tp; tp <= 64; tp *= 2) {
        t = *r;
        t.tp = tp;
        if (layout_fits(&t, mc)) {
            SUGGEST("%s--set parallel.tp=%d", len ? "; " : "", tp);
            break;
        }
    }
    for (int k = 2; k <= 16 && r->microbatch_tokens / k >= 16; k *= 2) {
        t = *r;
        t.microbatch_tokens = r->microbatch_tokens / k, t.microbatches = r->microbatches * k;
        if (t.microbatches > (1 << 16)) break;
        if (layout_fits(&t, mc)) {
            SUGGEST("%s--set data.microbatch_tokens=%d --set data.microbatches=%d", len ? "; " : "", t.microbatch_tokens,
                    t.microbatches);
            break;
        }
    }
#undef SUGGEST
    if (!out[0]) snprintf(out, n, "none of %sactivation recompute, more pipeline ranks, runtime.cap, more tensor-parallel "
                                  "ranks or smaller microbatches fits alone", r->dp > 1 && !r->zero ? "parallel.zero=1, " : "");
}

static int auto_tower_split(const Recipe* r, const ModelConfig* mc, int* lw, int* tower, char* why, size_t n);

static int split_layers(const Recipe* r, const ModelConfig* c, int* layers, char* note, size_t note_len, char* err,
                        size_t err_len) {
    if (note && note_len) note[0] = 0;
    if (split_by_time(r, c, layers, err, err_len) != 0) return -1;
    if (train_budget_gib(r) <= 0) return 0;
    TrainRankBytes b;
    int worst = split_largest(r, c, layers, &b);
    if (b.total <= budget_bytes(r)) return 0;
    int S = r->pp * r->chunks;
    if (!strcmp(r->tower_split, "auto") && !r->layers[0] && !r->tower_layers[0] && c->Lv > 0) {
        /* the cost model's split of the chain, which train_tower_split takes, where every rank of it fits */
        int *lw = mallocCheck((size_t)S * sizeof(int)), *tw = mallocCheck((size_t)S * sizeof(int));
        char why[512];
        TrainRankBytes bt;
        int fits = auto_tower_split(r, c, lw, tw, why, sizeof why) == 1 &&
                   (split_largest_tower(r, c, lw, tw, &bt), bt.total <= budget_bytes(r));
        if (!fits) fits = split_fit_chain(r, c, lw, tw) == 1; /* else a fitting split moving tower blocks: the refit's */
        free(lw);
        free(tw);
        if (fits) return 0;
    }
    char need[32], acts[32], fix[1024], what[160];
    budget_what(r, what, sizeof what);
    train_fmt_bytes(need, sizeof need, b.total);
    train_fmt_bytes(acts, sizeof acts, b.acts);
    int* fitted = mallocCheck((size_t)S * sizeof(int));
    if (!r->layers[0] && split_fit(r, c, fitted) == 0) { /* another split of the layers fits: take it */
        if (note && note_len) {
            size_t len = (size_t)snprintf(note, note_len, "memory-fitted: the %s split",
                                          split_path_mb(r) ? "path-aware" : "time-balanced");
            for (int s = 0; s < S && len < note_len; s++)
                len += (size_t)snprintf(note + len, note_len - len, "%s%d", s ? "," : " ", layers[s]);
            if (len < note_len)
                snprintf(note + len, note_len - len, " needs %s on rank %d, over %s", need, worst, what);
        }
        memcpy(layers, fitted, (size_t)S * sizeof(int));
        free(fitted);
        return 0;
    }
    free(fitted);
    fit_suggestions(r, c, fix, sizeof fix);
    snprintf(err, err_len, "%s: %s: rank %d needs %s (activations %s)%s; changes that fit: %s",
             r->memory_budget > 0 ? recipe_origin(r, "runtime", "memory_budget") : recipe_origin(r, "runtime", "backend"),
             what, worst, need, acts,
             r->layers[0] && r->tower_layers[0] ? " with parallel.layers and parallel.tower_layers as given"
             : r->layers[0] ? " with parallel.layers as given"
             : r->chunks > 1 ? " and no other split is searched with parallel.chunks > 1"
             : c->Lt > SPLIT_FIT_MAX_LAYERS ? " and no other split is searched past 128 LM layers (give parallel.layers)"
             : !strcmp(r->tower_split, "auto") && c->Lv > 0 && !r->tower_layers[0]
                 ? " and no split of the LM layers, nor of the tower blocks and LM layers (parallel.tower_split = auto), fits"
                             : " and no split of the LM layers fits",
             fix);
    return -1;
}

int train_layer_split(const Recipe* r, const ModelConfig* c, int* layers, char* err, size_t err_len) {
    return split_layers(r, c, layers, NULL, 0, err, err_len);
}

/* The most tower blocks the tower-only stages may hold: the stage holding LM layer 0 holds at least the tower's last
 * block (with its final norm), and every block past the feature layer (CLIP: never run) */
static int tower_only_cap(const ModelConfig* c) {
    VitConfig vc = model_config_vit(c);
    int run = vit_blocks_run(&vc);
    return run < c->Lv - 1 ? run : c->Lv - 1;
}

/* A split with tower-only stages before the one holding LM block 0 (train_tower_split): 0, or -1 with why */
static int tower_split_check(const ModelConfig* c, int S, const int* layers, const int* tower, char* why, size_t n) {
    int s0 = 0, at = 0, run = tower_only_cap(c);
    while (s0 < S && layers[s0] == 0) s0++;
    for (int s = 0; s < S; s++) {
        if (s < s0 && tower[s] < 1) {
            snprintf(why, n, "stage %d holds no LM layer and no tower block; allowed: the stages before the first with LM "
                     "layers hold at least one tower block each", s);
            return -1;
        }
        if (s > s0 && tower[s] > 0) {
            snprintf(why, n, "stage %d holds tower blocks after stage %d, which holds LM layer 0; allowed: tower blocks on "
                     "stage %d and the stages before it", s, s0, s0);
            return -1;
        }
        if (s > s0 && s < S - 1 && layers[s] == 0) {
            snprintf(why, n, "stage %d holds no LM layer; allowed: zeros before the first stage with LM layers and on the "
                     "last stage (the final norm, the LM head and the loss alone)", s);
            return -1;
        }
        if (s < s0) at += tower[s];
    }
    if (s0 > 0 && at > run) {
        snprintf(why, n, "the stages before stage %d hold tower blocks [0, %d); allowed: at most %d there (the tower's last "
                 "block, the ones past model.vision_feature_layer and the final norm go with LM layer 0)", s0, at, run);
        return -1;
    }
    return 0;
}

/* parallel.tower_split = auto's split of the chain [tower blocks][LM blocks] (partition_auto_tower), the tower-only
 * stages' blocks past tower_only_cap moved to the stage holding LM layer 0: 1 with lw (LM layers) and tower set, 0 when
 * the tower stays on stage 0 (tower = Lv, 0, ...; why set where the cost model's split does not exist, else "") */
static int auto_tower_split(const Recipe* r, const ModelConfig* mc, int* lw, int* tower, char* why, size_t n) {
    int S = r->pp * r->chunks;
    why[0] = 0;
    int rc = partition_auto_tower_path(mc->Lt, S, split_cost(r, mc), split_tower(r, mc), split_path_mb(r), tower, lw);
    if (rc == 1) { /* the tower-only stages' blocks past tower_only_cap go to the stage holding LM layer 0 */
        int s0 = 0, at = 0, cap = tower_only_cap(mc);
        while (s0 < S && lw[s0] == 0) s0++;
        for (int s = 0; s < s0 && s0 < S; s++) {
            int k = at + tower[s] > cap ? cap - at : tower[s];
            tower[s0] += tower[s] - (k > 0 ? k : 0);
            tower[s] = k > 0 ? k : 0;
            at += tower[s];
        }
    }
    if (rc == 1 && tower_split_check(mc, S, lw, tower, why, n) != 0) rc = 0;
    if (rc != 1)
        for (int s = 0; s < S; s++) tower[s] = s ? 0 : mc->Lv;
    return rc == 1;
}

int train_tower_split(const Recipe* r, const ModelConfig* mc, int* layers, int* tower, char* note, size_t note_len, char* err,
                      size_t err_len) {
    int S = r->pp * r->chunks;
    for (int s = 0; s < S; s++) tower[s] = s ? 0 : mc->Lv;
    if (note_len) note[0] = 0;
    char why[512];
    if (r->tower_layers[0]) {
        const char* origin = recipe_origin(r, "parallel", "tower_layers");
        int* t = mallocCheck((size_t)S * sizeof(int));
        int rc = partition_parse(r->tower_layers, mc->Lv, S, t, why, (int)sizeof why);
        if (rc == 0) rc = tower_split_check(mc, S, layers, t, why, sizeof why);
        if (rc != 0) {
            snprintf(err, err_len, "%s: parallel.tower_layers = %s: %s", origin, r->tower_layers, why);
            free(t);
            return -1;
        }
        memcpy(tower, t, (size_t)S * sizeof(int));
        free(t);
        if (note_len) snprintf(note, note_len, "parallel.tower_layers");
        return tower[0] < mc->Lv;
    }
    for (int s = 0; s < S; s++)
        if (layers[s] < 1 && (s < S - 1 || S < 2)) { /* the last stage may hold the head alone */
            snprintf(err, err_len, "%s: parallel.layers = %s: stage %d holds no LM layer; allowed: zeros before the first "
                     "stage with LM layers, with parallel.tower_layers giving those stages tower blocks, and on the last "
                     "stage (the final norm, the LM head and the loss alone)",
                     recipe_origin(r, "parallel", "layers"), r->layers, s);
            return -1;
        }
    if (strcmp(r->tower_split, "auto") || r->layers[0] || mc->Lv < 1) return 0;
    int* lw = mallocCheck((size_t)S * sizeof(int));
    int rc = auto_tower_split(r, mc, lw, tower, why, sizeof why);
    if (rc == 0 && why[0] && note_len) snprintf(note, note_len, "the cost model's tower split is not run: %s", why);
    int fitted = 0;
    if (rc >= 0 && train_budget_gib(r) > 0) {
        /* the memory budget: the chain's split (or, where it does not pay, the LM split with the tower on stage 0) runs
         * where every rank fits; else the refit over the chain (split_fit_chain) takes the shortest split that fits,
         * one moving tower blocks where that is shorter than every fitting LM split, otherwise the LM split (its
         * layers from train_layer_split's refit) with the tower on stage 0 */
        TrainRankBytes b;
        int worst = split_largest_tower(r, mc, rc == 1 ? lw : layers, rc == 1 ? tower : NULL, &b);
        if (b.total > budget_bytes(r)) {
            char need[32], what[160], was[256];
            train_fmt_bytes(need, sizeof need, b.total);
            budget_what(r, what, sizeof what);
            int *fl = mallocCheck((size_t)S * sizeof(int)), *ft = mallocCheck((size_t)S * sizeof(int));
            size_t o = (size_t)snprintf(was, sizeof was, "%s", rc == 1 ? "the cost model's tower split: LM" : "the LM split");
            for (int s = 0; s < S && o < sizeof was; s++)
                o += (size_t)snprintf(was + o, sizeof was - o, "%s%d", s ? "," : " ", rc == 1 ? lw[s] : layers[s]);
            for (int s = 0; s < S && rc == 1 && o < sizeof was; s++)
                o += (size_t)snprintf(was + o, sizeof was - o, "%s%d", s ? "," : ", tower ", tower[s]);
            if (split_fit_chain(r, mc, fl, ft) == 1) {
                if (note_len)
                    snprintf(note, note_len, "memory-fitted: %s%s needs %s on rank %d, over %s", was,
                             rc == 1 ? "" : " with the tower on stage 0", need, worst, what);
                memcpy(lw, fl, (size_t)S * sizeof(int));
                memcpy(tower, ft, (size_t)S * sizeof(int));
                rc = 1, fitted = 1;
            } else if (rc == 1) {
                TrainRankBytes bl; /* the LM split with the tower on stage 0: it fits, unless the run is refused anyway */
                split_largest_tower(r, mc, layers, NULL, &bl);
                if (note_len)
                    snprintf(note, note_len, "the cost model's tower split is not run: with it rank %d needs %s, over %s (%s)",
                             worst, need, what, bl.total <= budget_bytes(r) ? "the LM split with the tower on stage 0 fits"
                                                                            : "no split fits");
                for (int s = 0; s < S; s++) tower[s] = s ? 0 : mc->Lv;
                rc = 0;
            }
            free(fl), free(ft);
        }
    }
    if (rc == 1) {
        memcpy(layers, lw, (size_t)S * sizeof(int));
        if (note_len && !fitted) snprintf(note, note_len, "parallel.tower_split = auto");
    }
    free(lw);
    return rc == 1;
}

/* The dry run's line on the automatic split's objective: the longest stage path (fill + work + drain for the step's
 * microbatches, partition_auto_path) of the split and of the other objective's, on the cost model */
static void dry_run_paths(FILE* out, const Recipe* r, const ModelConfig* mc, const int* layers, const int* tower) {
    int S = r->pp * r->chunks, M = r->microbatches, pm = split_path_mb(r);
    if (S < 2 || r->chunks != 1) return;
    PartitionCost pc = split_cost(r, mc);
    PartitionTower pt = split_tower(r, mc);
    double* c = mallocCheck((size_t)S * sizeof(double));
    int *ol = mallocCheck((size_t)S * sizeof(int)), *ot = mallocCheck((size_t)S * sizeof(int));
    if (tower) partition_stage_costs_tower(S, tower, layers, pc, pt, c);
    else partition_stage_costs(S, layers, pc, c);
    double mine = partition_stage_paths(S, c, M, NULL);
    /* the other objective's split, as train_tower_split would take it (the tower over stages or not) */
    int spans = tower && partition_auto_tower_path(mc->Lt, S, pc, pt, pm ? 0 : M, ot, ol) == 1;
    if (spans) partition_stage_costs_tower(S, ot, ol, pc, pt, c);
    else {
        partition_auto_path(mc->Lt, S, pc, pm ? 0 : M, NULL, NULL, ol);
        partition_stage_costs(S, ol, pc, c);
    }
    double other = partition_stage_paths(S, c, M, NULL);
    fprintf(out, "parallel.partition = %s: the longest stage path (fill + work + drain for %d microbatches, the cost "
                 "model's bound on the step) %.4f of the %s split's", pm ? "path" : "balance", M, mine / other,
            pm ? "cost-balanced" : "path-aware");
    for (int s = 0; s < S; s++) fprintf(out, "%s%d", s ? "," : " ", ol[s]);
    fprintf(out, "\n");
    free(c), free(ol), free(ot);
}

int train_dry_run(const Recipe* r, int vocab, FILE* out, char* err, size_t err_len) {
    ModelConfig mc = train_model_config(r, vocab);
    if (mc.lora_quant && r->tp > 1) { /* QLoRA's slices of whole blocks (the rest of the split: trainer_init) */
        char e[1024];
        if (model_tp_check(&mc, r->tp, e, sizeof e) != 0) {
            snprintf(err, err_len, "%s: parallel.tp = %d: %s", recipe_origin(r, "parallel", "tp"), r->tp, e);
            return -1;
        }
    }
    if (r->freeze[0]) {
        char e[1024];
        if (model_freeze_check(&mc, r->freeze, NULL, e, sizeof e) != 0) {
            snprintf(err, err_len, "%s: train.freeze = %s: %s", recipe_origin(r, "train", "freeze"), r->freeze, e);
            return -1;
        }
    }
    ModelParamCounts c;
    model_param_counts(&mc, &c);
    char a[32], b[32];
    fprintf(out, "recipe %s (hash %016llx)\n", r->path, (unsigned long long)recipe_hash(r));
    fprintf(out, "model: ViT Dv %d x %d layers, %d heads, patch %d; LM Dt %d x %d layers, %d heads, F %d, V %d\n",
            r->vision_width, r->vision_layers, r->vision_heads, r->patch, r->text_width, r->text_layers, r->text_heads,
            r->ffn_hidden, vocab);
    fprintf(out, "parameters:\n");
    fmt_count(a, sizeof a, c.vision);
    fmt_count(b, sizeof b, c.vision_block);
    fprintf(out, "  vision     %10s  %14.0f  (patch embed, %d blocks of %s, final LayerNorm)\n", a, c.vision,
            r->vision_layers, b);
    fmt_count(a, sizeof a, c.projector);
    fprintf(out, "  projector  %10s  %14.0f  (mlp2x_gelu)\n", a, c.projector);
    fmt_count(a, sizeof a, c.text);
    fmt_count(b, sizeof b, c.text_block);
    fprintf(out, "  text       %10s  %14.0f  (embedding, %d blocks of %s, final RMSNorm, LM head)\n", a, c.text,
            r->text_layers, b);
    fmt_count(a, sizeof a, c.total);
    fprintf(out, "  total      %10s  %14.0f\n", a, c.total);

    /* Layout: LM layers over pp x chunks virtual stages; rank r holds virtual stages r, r + pp, ... */
    int P = r->pp, S = r->pp * r->chunks, T = r->microbatch_tokens, M = r->microbatches;
    int* layers = mallocCheck((size_t)S * sizeof(int));
    char note[512], over[2048] = "";
    if (split_layers(r, &mc, layers, note, sizeof note, err, err_len) != 0) { /* the trainer's own split */
        /* over the memory budget: the table of the time-balanced split, then why it cannot run */
        if (split_by_time(r, &mc, layers, over, sizeof over) != 0) {
            free(layers);
            return -1;
        }
        snprintf(over, sizeof over, "%s", err);
    }
    /* the tower over stages, as the trainer runs it (train_tower_split: it may take the chain's LM split) */
    int* tower = mallocCheck((size_t)S * sizeof(int));
    char tnote[600];
    int ts = train_tower_split(r, &mc, layers, tower, tnote, sizeof tnote, err, err_len);
    if (ts < 0) {
        free(layers);
        free(tower);
        return -1;
    }
    fprintf(out, "layout: pp %d x tp %d x dp %d = %d ranks, %d chunk(s) per rank, hint %s, mode %s\n", r->pp, r->tp,
            r->dp, r->pp * r->tp * r->dp, r->chunks, r->hint, r->mode);
    if (recipe_recompute(r, 0) != RECOMPUTE_NONE || recipe_recompute(r, 1) != RECOMPUTE_NONE) {
        static const char* const rn[] = {"none", "selective", "full"};
        fprintf(out, "activation recompute: LM blocks %s, tower %s (train.recompute: activations are what each microbatch "
                     "keeps, times microbatches in flight, plus one block's recompute workspace per stage)\n",
                rn[recipe_recompute(r, 0)], rn[recipe_recompute(r, 1)]);
    }
    fprintf(out, "LM layers per virtual stage:");
    for (int s = 0; s < S; s++) fprintf(out, "%s%d", s ? "," : " ", layers[s]);
    int pm = split_path_mb(r);
    fprintf(out, " (%s)\n", note[0] ? note : r->layers[0] ? "parallel.layers" : ts ? "with the tower's" : pm ? "path-aware"
                                                                                                  : "cost-balanced");
    if (!r->layers[0] && !r->tower_layers[0]) /* the split's objective (parallel.partition) on the cost model */
        dry_run_paths(out, r, &mc, layers, ts ? tower : NULL);
    if (ts) { /* docs/anyres.md "The tower over stages": the live split */
        fprintf(out, "tower blocks per virtual stage:");
        for (int s = 0; s < S; s++) fprintf(out, "%s%d", s ? "," : " ", tower[s]);
        fprintf(out, " (%s; the stages before the first with LM layers hold tower blocks alone and pass the tower's "
                     "hidden state on)\n", tnote);
    } else if (tnote[0]) {
        fprintf(out, "%s\n", tnote);
    }
    if (!r->layers[0] && mc.Lv > 0 && !ts) { /* the cost model's split with the tower over stages, where it would pay */
        int *tw = mallocCheck((size_t)S * sizeof(int)), *lw = mallocCheck((size_t)S * sizeof(int));
        PartitionCost pc = split_cost(r, &mc);
        PartitionTower pt = split_tower(r, &mc);
        if (partition_auto_tower_path(mc.Lt, S, pc, pt, pm, tw, lw) == 1) {
            double *a = mallocCheck((size_t)S * sizeof(double)), *b = mallocCheck((size_t)S * sizeof(double));
            int *ref = mallocCheck((size_t)S * sizeof(int));
            partition_auto_path(mc.Lt, S, pc, pm, NULL, NULL, ref);
            partition_stage_costs(S, ref, pc, a);
            partition_stage_costs_tower(S, tw, lw, pc, pt, b);
            double ma = partition_stage_paths(S, a, pm, NULL), mb = partition_stage_paths(S, b, pm, NULL);
            fprintf(out, "the tower costs more than a stage's share: with its blocks over stages the cost model splits LM");
            for (int s = 0; s < S; s++) fprintf(out, "%s%d", s ? "," : " ", lw[s]);
            fprintf(out, ", tower");
            for (int s = 0; s < S; s++) fprintf(out, "%s%d", s ? "," : " ", tw[s]);
            fprintf(out, " (the %s %.2fx the %s split's); parallel.tower_split = auto runs it "
                         "(docs/anyres.md \"The tower over stages\")\n", pm ? "longest stage path" : "most expensive stage",
                    mb / ma, pm ? "path-aware" : "cost-balanced");
            free(a), free(b), free(ref);
        }
        free(tw), free(lw);
    }
    fprintf(out,
            "memory per rank (f32; weights: the stage's parameter table, grads and AdamW m + v: its trainable tensors\n"
            "(train.freeze; in bf16 a frozen tensor is its compute copy alone); activations: the\n"
            "stage's StageActs block for a %d-token microbatch with every position an image patch (worst case),\n"
            "times microbatches in flight: gpipe M, otherwise min(P - r, M) x chunks, or runtime.cap, and once per stage a\n"
            "frozen tower's forward buffers and the recompute workspace; with tp > 1 one\n"
            "TP rank's: its slices of the split tensors and whole copies of the replicated ones, split activations;\n"
            "workspace: the backend's own scratch and, with pp > 1, the pipeline's message buffers%s):\n",
            T,
            strcmp(r->precision, "bf16") ? ""
            : backend_name_host_addressable(r->backend) == 0
                ? ";\nbf16 on cuda: weights include the compute copy, 2 bytes per 2-D parameter, and workspace the bf16 GEMM "
                  "operand scratch;\nactivations are 2-byte bf16 (with the attention's f32 scratch in the workspace; "
                  "docs/cuda.md, bf16 storage)"
                : ";\nbf16: weights include the compute copy (f32 words on the cpu)");
    if (r->memory_budget > 0)
        fprintf(out, "memory budget: %g GiB per rank (runtime.memory_budget)\n", r->memory_budget);
    else if (train_budget_gib(r) > 0) {
        char dev[32], b[32];
        fmt_bytes(dev, sizeof dev, r->device_memory * (double)(1ull << 30));
        fmt_bytes(b, sizeof b, budget_bytes(r));
        fprintf(out, "memory budget: %s per rank (runtime.memory_budget unset: the device's %s less a %.0f%% reserve for the "
                     "CUDA context, the libraries' workspaces and communication buffers)\n", b, dev, 100 * TRAIN_DEVICE_RESERVE);
    }
    else if (backend_name_host_addressable(r->backend) == 0)
        fprintf(out, "memory budget: none (runtime.memory_budget unset and %s)\n",
                r->allow_overcommit ? "runtime.allow_overcommit = 1" : "no device here to take its memory from");
    else
        fprintf(out, "memory budget: none (runtime.memory_budget unset; the cpu backend has no default: the start-up check "
                     "compares the ranks' total with the host's available memory)\n");
    int budget = train_budget_gib(r) > 0;
    fprintf(out, "  %-5s %-8s %12s %12s %12s %12s %12s %12s %12s%s\n", "rank", "layers", "params", "weights", "grads",
            "adam m+v", "activations", "workspace", "total", budget ? "       budget" : "");
    /* Exact per-stage sizes from the model's own tables (runtime/model/model.h), nothing allocated. With
     * tp > 1 they are divided by tp: exact for the split matrices, a slight under-count for the
     * replicated norms and biases. */
    double max_total = 0, max_params = 0;
    for (int rank = 0; rank < P; rank++) {
        TrainRankBytes b;
        rank_bytes_split_tower(r, &mc, layers, ts ? tower : NULL, rank, &b);
        if (b.total > max_total) max_total = b.total;
        if (b.params > max_params) max_params = b.params;
        char sp[32], sw[32], sg[32], sa[32], sx[32], sk[32], st[32], sb[48] = "";
        fmt_count(sp, sizeof sp, b.params);
        fmt_bytes(sw, sizeof sw, b.weights);
        fmt_bytes(sg, sizeof sg, b.grads);
        fmt_bytes(sa, sizeof sa, b.adam);
        fmt_bytes(sx, sizeof sx, b.acts);
        fmt_bytes(sk, sizeof sk, b.scratch);
        fmt_bytes(st, sizeof st, b.total);
        if (budget) {
            char bb[32];
            fmt_bytes(bb, sizeof bb, budget_bytes(r));
            snprintf(sb, sizeof sb, "  %s %s", b.total <= budget_bytes(r) ? "<=" : "> ", bb);
        }
        char ly[16];
        int vit = ts ? tower[rank] > 0 || (b.layers > 0 && (rank == 0 || layers[rank - 1] == 0)) : rank == 0;
        snprintf(ly, sizeof ly, "%d%s", b.layers, vit ? "+ViT" : ""); /* the tower's blocks over stages: each of its ranks */
        fprintf(out, "  %-5d %-8s %12s %12s %12s %12s %12s %12s %12s%s\n", rank, ly, sp, sw, sg, sa, sx, sk, st, sb);
    }
    char mt[32];
    fmt_bytes(mt, sizeof mt, max_total);
    /* in 64 bits: the recipe's bounds allow 2^22 x 2^16 x 2^20 (4194304 x 512 overflowed an int) */
    fprintf(out, "largest rank: %s; tokens per step: %d x %d microbatches x dp %d = %lld\n", mt, T, M, r->dp,
            (long long)T * M * r->dp);
    /* DP (exec_dp.c): every replica holds the table above in full (no ZeRO sharding); the gradient
     * all-reduce works in place on the grad block, bucket by bucket, so it adds nothing on the CPU; a
     * device backend reduces through a host copy of the grad block. */
    if (r->dp > 1) {
        /* the distributed optimizer's saving on the largest rank: AdamW m + v (and, in bf16, the trainable f32
         * masters) divided by dp (runtime/train/exec_zero.c) */
        Recipe zr = *r, nr = *r;
        zr.zero = 1, nr.zero = 0;
        double zmax = 0, nmax = 0, zadam = 0, nadam = 0, zw = 0, nw = 0;
        for (int rank = 0; rank < P; rank++) {
            TrainRankBytes zb, nb;
            rank_bytes_split_tower(&zr, &mc, layers, ts ? tower : NULL, rank, &zb);
            rank_bytes_split_tower(&nr, &mc, layers, ts ? tower : NULL, rank, &nb);
            if (zb.total > zmax) zmax = zb.total, zadam = zb.adam, zw = zb.weights;
            if (nb.total > nmax) nmax = nb.total, nadam = nb.adam, nw = nb.weights;
        }
        char s0[32], s1[32], a0[32], a1[32], w0[32], w1[32];
        fmt_bytes(s0, sizeof s0, nmax);
        fmt_bytes(s1, sizeof s1, zmax);
        fmt_bytes(a0, sizeof a0, nadam);
        fmt_bytes(a1, sizeof a1, zadam);
        fmt_bytes(w0, sizeof w0, nw);
        fmt_bytes(w1, sizeof w1, zw);
        if (r->zero)
            fprintf(out, "distributed optimizer (parallel.zero = 1): each stage's AdamW m + v%s sharded over its %d "
                         "replicas (the table above holds 1/%d); largest rank %s instead of %s with zero = 0 (adam m+v "
                         "%s instead of %s%s%s%s%s); gradients reduce-scattered, the updated weights all-gathered\n",
                    strcmp(r->precision, "bf16") ? "" : " and f32 masters", r->dp, r->dp, s1, s0, a1, a0,
                    zw != nw ? ", weights " : "", zw != nw ? w1 : "", zw != nw ? " instead of " : "", zw != nw ? w0 : "");
        else
            fprintf(out, "distributed optimizer: off; parallel.zero=1 would shard AdamW m + v%s over the %d replicas: "
                         "largest rank %s instead of %s (adam m+v %s instead of %s%s%s%s%s)\n",
                    strcmp(r->precision, "bf16") ? "" : " and the f32 masters", r->dp, s1, s0, a1, a0,
                    zw != nw ? ", weights " : "", zw != nw ? w1 : "", zw != nw ? " instead of " : "", zw != nw ? w0 : "");
        double buckets = ceil(max_params * 4 / (r->dp_bucket_mb * 1048576.0));
        char hc[32];
        fmt_bytes(hc, sizeof hc, max_params * 4);
        int dev = backend_name_host_addressable(r->backend) == 0; /* a host copy of the grad block */
        char how[256];
        if (r->zero)
            snprintf(how, sizeof how, "gradients reduce-scattered in place (one collective per stage), the updated weights "
                     "all-gathered in rounds of %g MiB per replica (a staging buffer of %d x %g MiB)", r->dp_bucket_mb,
                     r->dp, r->dp_bucket_mb);
        else
            snprintf(how, sizeof how, "gradient all-reduce in place in buckets of %g MiB (%.0f on the largest rank)",
                     r->dp_bucket_mb, buckets);
        fprintf(out, "data parallel: dp %d replicas, each rank holding the memory above (%s); %s%s%s%s\n", r->dp,
                r->zero ? "its shard of the optimiser state" : "parameters, gradients and AdamW state replicated", how,
                dev ? ", plus a host copy of the gradients on this device backend where the DP "
                                            "group is not NCCL's: " : "",
                dev ? hc : "", dev ? " per rank" : "");
    }
    if (r->tp > 1)
        fprintf(out, "tensor parallel: tp %d ranks per stage, each holding the figures above (heads, MLP hidden and "
                     "vocabulary split; norms, the patch embedding and row-parallel biases replicated; the full "
                     "logits never on one rank); activations cross TP ranks only through all-reduces of (tokens, "
                     "width) per split layer (docs/parallel.md)\n", r->tp);
    free(layers);
    free(tower);
    if (over[0]) { /* the verdict the trainer would give, after the table that explains it */
        snprintf(err, err_len, "%s", over);
        return -1;
    }
    fprintf(out, "dry run: nothing allocated, no training.\n");
    return 0;
}

