/* layout.c — what a recipe's model and layout are, computed once for everyone: the model config, the
 * LM layer split over the virtual pipeline stages (the trainer and --dry-run take it from here, so
 * they cannot disagree), and the dry run's parameter and memory table. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/bw_path.h"
#include "engine/util.h"
#include "runtime/model/partition.h"
#include "runtime/train/layout.h"
#include "text/tokenizer.h"

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
    c.projector_act = !strcmp(r->projector_act, "gelu") ? ACT_GELU_ERF : ACT_GELU_TANH;
    c.Hkv = r->text_kv_heads;
    c.qkv_bias = r->text_qkv_bias, c.o_bias = r->text_o_bias;
    c.tie_embeddings = r->tie_embeddings;
    c.rope_llama3 = !strcmp(r->rope_type, "llama3");
    c.rope_factor = r->rope_factor, c.rope_low_freq_factor = r->rope_low_freq_factor;
    c.rope_high_freq_factor = r->rope_high_freq_factor, c.rope_original_max_pos = r->rope_original_max_pos;
    return c;
}

int train_layer_split(const Recipe* r, const ModelConfig* c, int* layers, char* err, size_t err_len) {
    int S = r->pp * r->chunks;
    if (r->layers[0]) {
        char e[256];
        if (partition_parse(r->layers, c->Lt, S, layers, e, (int)sizeof e) != 0) {
            snprintf(err, err_len, "%s: parallel.layers = %s: %s", recipe_origin(r, "parallel", "layers"), r->layers, e);
            return -1;
        }
        return 0;
    }
    /* the cost model at the token budget of a step; assumptions in recipes/README.md */
    double tokens = (double)r->microbatch_tokens * r->microbatches;
    PartitionCost pc = partition_cost_model(c->Dv, c->Lv, c->Dt, c->F, c->V, tokens, 0.5 * tokens,
                                            0.5 * (c->min_patches + c->max_patches), 256.0, c->patch);
    if (partition_auto(c->Lt, S, pc, layers) != 0) {
        snprintf(err, err_len, "%s: %d LM layers cannot be split over %d x %d virtual pipeline stages (at least one "
                 "layer each)", recipe_origin(r, "parallel", "pp"), c->Lt, r->pp, r->chunks);
        return -1;
    }
    return 0;
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

int train_rank_bytes(const Recipe* r, const ModelConfig* mc, int rank, TrainRankBytes* out, char* err,
                     size_t err_len) {
    int P = r->pp, S = r->pp * r->chunks, T = r->microbatch_tokens, M = r->microbatches;
    int* layers = mallocCheck((size_t)S * sizeof(int));
    if (train_layer_split(r, mc, layers, err, err_len) != 0) { /* the trainer's own split */
        free(layers);
        return -1;
    }
    /* Exact per-stage sizes from the model's own tables (runtime/model.h), nothing allocated. With
     * tp > 1: one TP rank's table (its slices of the split tensors, whole copies of the replicated
     * ones: every TP rank holds the same amount) and its split activations. */
    double params = 0, trainable = 0, act_mb = 0, copy = 0, scratch = 0, wscratch = 0;
    int nl = 0;
    /* runtime.precision = bf16: the compute copy (engine/params.h: 2-byte bf16 for the 2-D tensors on
     * the CUDA backend, f32 words elsewhere) and, on CUDA, the bf16 GEMMs' operand scratch (bf16.cu) */
    int bf16 = !strcmp(r->precision, "bf16"), cuda = !strcmp(r->backend, "cuda");
    for (int ch = 0; ch < r->chunks; ch++) {
        int s = rank + ch * P, l0 = 0;
        for (int u = 0; u < s; u++) l0 += layers[u];
        nl += layers[s];
        ParamTable pt; /* train.freeze: gradients and AdamW moments of the trainable tensors only */
        model_params_register_tp(mc, l0, l0 + layers[s], r->tp, 0, &pt);
        params += (double)pt.total;
        if (bf16) {
            for (int i = 0; i < pt.n; i++) copy += (double)pt.specs[i].numel * (pt.specs[i].ndim == 2 && !pt.specs[i].f32_compute && cuda ? 2 : 4);
            double sc = cuda ? 2.0 * (double)params_gemm_operand_elems(&pt, T, 1) : 0;
            if (sc > scratch) scratch = sc; /* one scratch per process, grown to the largest product */
        }
        trainable += (double)model_params_freeze(&pt, r->freeze);
        params_free(&pt);
        /* every position of the microbatch may be an image patch: the worst case */
        /* bf16 on CUDA: the LM's activations 2-byte (the bf16-activation table, model_bf16_activations; any tp) */
        int lm_bytes = bf16 && cuda && model_bf16_activations(r->tp) ? 2 : 4;
        act_mb += (double)model_stage_acts_bytes_lm(mc, l0, l0 + layers[s], T, T, 0, r->tp, lm_bytes);
        /* and its attention's f32 scratch where it widens q, k, v, out (bf16.cu: a known gap; the largest call on
         * that table: the LM's, and the ViT's where the tower runs there too, stage_attn_reserve) */
        if (lm_bytes == 2) {
            double ws = layers[s] > 0 ? 4.0 * T * (3.0 * mc->Dt / r->tp + mc->Dt / r->tp) : 0;
            if (l0 == 0 && model_bf16_vision(mc)) {
                /* the tower's rows: the patches, and CLIP's class tokens (vit_max_tokens); q, k, v views of one
                 * qkv row: ld 3 Dv */
                int mp = mc->min_patches > 0 ? mc->min_patches : 1;
                double Tv = mc->vision_arch == VIT_ARCH_CLIP ? (double)T + (T + mp - 1) / mp : (double)T;
                double vw = 4.0 * Tv * (3.0 * 3.0 * mc->Dv / r->tp + mc->Dv / r->tp);
                if (vw > ws) ws = vw;
            }
            if (ws > wscratch) wscratch = ws; /* its own buffer, beside the GEMM operands' */
        }
    }
    free(layers);
    int inflight;
    if (!strcmp(r->hint, "gpipe")) inflight = M;
    else inflight = (P - rank < M ? P - rank : M) * r->chunks;
    if ((!strcmp(r->mode, "ready") || !strcmp(r->mode, "lookahead") || !strcmp(r->mode, "adaptive")) &&
        strcmp(r->cap, "0") != 0) {
        double cv = atof(r->cap);
        int c = strchr(r->cap, 'x') ? (int)(cv * inflight + 0.999) : (int)cv;
        inflight = c < M ? c : M;
    }
    out->params = params;
    out->layers = nl;
    out->weights = params * 4 + copy;
    out->compute_copy = copy;
    /* on CUDA the column sums' partials (bias / norm-weight gradients: engine/cuda/bw_path.h), any precision */
    if (cuda) scratch += (double)RR_COLSUM_SCRATCH_FLOATS * 4;
    out->scratch = scratch + wscratch;
    out->trainable = trainable;
    out->grads = trainable * 4;
    out->adam = trainable * 8;
    out->acts = act_mb * inflight;
    out->total = out->weights + out->grads + out->adam + out->acts + out->scratch;
    return 0;
}

int train_dry_run(const Recipe* r, int vocab, FILE* out, char* err, size_t err_len) {
    ModelConfig mc = train_model_config(r, vocab);
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
    if (train_layer_split(r, &mc, layers, err, err_len) != 0) { /* the trainer's own split */
        free(layers);
        return -1;
    }
    fprintf(out, "layout: pp %d x tp %d x dp %d = %d ranks, %d chunk(s) per rank, hint %s, mode %s\n", r->pp, r->tp,
            r->dp, r->pp * r->tp * r->dp, r->chunks, r->hint, r->mode);
    fprintf(out, "LM layers per virtual stage:");
    for (int s = 0; s < S; s++) fprintf(out, "%s%d", s ? "," : " ", layers[s]);
    fprintf(out, " (%s)\n", r->layers[0] ? "parallel.layers" : "cost-balanced");
    fprintf(out,
            "memory per rank (f32; weights: the stage's parameter table, grads and AdamW m + v: its trainable tensors\n"
            "(train.freeze); activations: the\n"
            "stage's StageActs block for a %d-token microbatch with every position an image patch (worst case),\n"
            "times microbatches in flight: gpipe M, otherwise min(P - r, M) x chunks, or runtime.cap; with tp > 1 one\n"
            "TP rank's: its slices of the split tensors and whole copies of the replicated ones, split activations%s):\n",
            T,
            strcmp(r->precision, "bf16") ? ""
            : !strcmp(r->backend, "cuda")
                ? ";\nbf16 on cuda: weights include the compute copy, 2 bytes per 2-D parameter, and total the bf16 GEMM "
                  "operand scratch;\nactivations are 2-byte bf16 (with the attention's f32 scratch in the total; "
                  "docs/cuda.md, bf16 storage)"
                : ";\nbf16: weights include the compute copy (f32 words on the cpu)");
    fprintf(out, "  %-5s %-8s %12s %12s %12s %12s %12s %12s\n", "rank", "layers", "params", "weights", "grads",
            "adam m+v", "activations", "total");
    /* Exact per-stage sizes from the model's own tables (runtime/model.h), nothing allocated. With
     * tp > 1 they are divided by tp: exact for the split matrices, a slight under-count for the
     * replicated norms and biases. */
    double max_total = 0, max_params = 0;
    for (int rank = 0; rank < P; rank++) {
        TrainRankBytes b;
        if (train_rank_bytes(r, &mc, rank, &b, err, err_len) != 0) {
            free(layers);
            return -1;
        }
        if (b.total > max_total) max_total = b.total;
        if (b.params > max_params) max_params = b.params;
        char sp[32], sw[32], sg[32], sa[32], sx[32], st[32];
        fmt_count(sp, sizeof sp, b.params);
        fmt_bytes(sw, sizeof sw, b.weights);
        fmt_bytes(sg, sizeof sg, b.grads);
        fmt_bytes(sa, sizeof sa, b.adam);
        fmt_bytes(sx, sizeof sx, b.acts);
        fmt_bytes(st, sizeof st, b.total);
        char ly[16];
        snprintf(ly, sizeof ly, "%d%s", b.layers, rank == 0 ? "+ViT" : "");
        fprintf(out, "  %-5d %-8s %12s %12s %12s %12s %12s %12s\n", rank, ly, sp, sw, sg, sa, sx, st);
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
        double buckets = ceil(max_params * 4 / (r->dp_bucket_mb * 1048576.0));
        char hc[32];
        fmt_bytes(hc, sizeof hc, max_params * 4);
        fprintf(out,
                "data parallel: dp %d replicas, each rank holding the memory above (parameters, gradients and AdamW "
                "state replicated, no ZeRO); gradient all-reduce in place in buckets of %g MiB (%.0f on the largest "
                "rank)%s%s%s\n",
                r->dp, r->dp_bucket_mb, buckets, strcmp(r->backend, "cpu") ? ", plus a host copy of the gradients on "
                                                                              "this device backend: " : "",
                strcmp(r->backend, "cpu") ? hc : "", strcmp(r->backend, "cpu") ? " per rank" : "");
    }
    if (r->tp > 1)
        fprintf(out, "tensor parallel: tp %d ranks per stage, each holding the figures above (heads, MLP hidden and "
                     "vocabulary split; norms, the patch embedding and row-parallel biases replicated; the full "
                     "logits never on one rank); activations cross TP ranks only through all-reduces of (tokens, "
                     "width) per split layer (docs/parallel.md)\n", r->tp);
    fprintf(out, "dry run: nothing allocated, no training.\n");
    free(layers);
    return 0;
}

