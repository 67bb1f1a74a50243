/* calib.c — the calibrated duration generator (pp_calib_generate, sim.h): durations of one training
 * step computed from a model, a sample mix, the loader's own packer and the partitioner's cost model,
 * instead of invented distributions. Every parameter is documented in sim.h and docs/scheduler.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/anyres.h"
#include "data/loader.h"
#include "engine/engine.h"
#include "engine/util.h"
#include "runtime/model/partition.h"
#include "runtime/sim/sim.h"

static double u01(uint64_t* x) { return ((rr_splitmix64(x) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static double normal(uint64_t* x) { return sqrt(-2 * log(u01(x))) * cos(6.283185307179586 * u01(x)); }
/* lognormal with the given mean */
static double lognormal(uint64_t* x, double mean, double sigma) {
    return mean * exp(sigma * normal(x) - 0.5 * sigma * sigma);
}

void pp_calib_defaults(PpCalibConfig* c) {
    memset(c, 0, sizeof *c);
    c->P = 8;
    c->M = 32;
    c->workload = PP_WORKLOAD_MM;
    c->policy = 2; /* balanced */
    c->window = 256;
    c->microbatch_tokens = 4096;
    c->Dv = 1024, c->Lv = 24, c->Dt = 4096, c->Lt = 32, c->F = 11008, c->V = 32000, c->patch = 14;
    c->min_patches = 64, c->max_patches = 576;
    c->text_only_share = 0.061;
    c->extra_image_prob = 0.0;
    c->image_text_mean = 180, c->image_text_sigma = 0.8;
    c->text_only_mean = 650, c->text_only_sigma = 0.9;
    c->image_px_mean = 640.0 * 480.0, c->image_px_sigma = 0.6, c->aspect_sigma = 0.3;
    c->tile = 336, c->doc_share = 0.25;
    c->flops = 400e12;
    c->link_GBps = 25, c->link_latency_s = 10e-6, c->act_bytes = 2;
    c->jitter = 0.03;
    c->straggler_factor = 1.5, c->straggler_len = 8, c->straggler_prob = 0.01;
    c->tower_split = 1;
    c->partition_path = 1; /* parallel.partition's default */
    c->seed = 1;
}

/* One sample: LM positions and the images' patch counts (at most 8 images); sq: the sum of the tower's squared
 * attention lengths (an image's patches squared; any-resolution: a tile's, per tile). */
typedef struct {
    int L, n_img, patches[8];
    double sq;
} CalibSample;

static void draw_sample(const PpCalibConfig* c, uint64_t* x, CalibSample* s) {
    memset(s, 0, sizeof *s);
    int text_only = c->workload == PP_WORKLOAD_TEXT || u01(x) < c->text_only_share;
    double text;
    if (text_only) {
        text = lognormal(x, c->text_only_mean, c->text_only_sigma);
    } else {
        s->n_img = 1;
        while (s->n_img < 8 && u01(x) < c->extra_image_prob) s->n_img++;
        text = lognormal(x, c->image_text_mean, c->image_text_sigma);
        for (int i = 0; i < s->n_img && c->workload == PP_WORKLOAD_ANYRES; i++) {
            /* a photograph (mm's size) or a document page, tiled as LLaVA-NeXT does */
            double w, h;
            if (u01(x) < c->doc_share) {
                w = lognormal(x, 1240.0, 0.3);
                h = w * 1.41 * exp(0.15 * normal(x));
            } else {
                double px = lognormal(x, c->image_px_mean, c->image_px_sigma), ar = exp(c->aspect_sigma * normal(x));
                w = sqrt(px * ar), h = sqrt(px / ar);
            }
            int iw = w < 1 ? 1 : w > 8192 ? 8192 : (int)w, ih = h < 1 ? 1 : h > 8192 ? 8192 : (int)h;
            AnyresPinpoints pp;
            AnyresLayout l;
            char e[256];
            anyres_pinpoints_default(&pp);
            if (c->tile != 336) /* LLaVA-1.6's grids (1 x 2, 2 x 1, 2 x 2, 3 x 1, 1 x 3) at this tile side */
                for (int q = 0; q < pp.n; q++) pp.hw[q][0] = pp.hw[q][0] / 336 * c->tile, pp.hw[q][1] = pp.hw[q][1] / 336 * c->tile;
            if (anyres_layout(ih, iw, &pp, c->tile, c->patch, ANYRES_SELECT_DEFAULT, &l, e, sizeof e) != 0) rr_die("internal: %s", e);
            int g2 = l.g * l.g;
            s->patches[i] = l.n_tiles * g2;
            s->sq += (double)l.n_tiles * g2 * g2;
            s->L += l.n_positions; /* added to the text below */
        }
        for (int i = 0; i < s->n_img && c->workload != PP_WORKLOAD_ANYRES; i++) {
            /* a photo's size, then the loader's rule: sides in patches, the count clamped into
             * [min_patches, max_patches] keeping the aspect ratio (docs/data.md "Image preprocessing", smart_resize) */
            double px = lognormal(x, c->image_px_mean, c->image_px_sigma);
            double ar = exp(c->aspect_sigma * normal(x));
            double n = px / ((double)c->patch * c->patch);
            if (n < c->min_patches) n = c->min_patches;
            if (n > c->max_patches) n = c->max_patches;
            int gh = (int)floor(sqrt(n / ar)), gw;
            if (gh < 1) gh = 1;
            gw = (int)floor(n / gh);
            if (gw < 1) gw = 1;
            while (gh * gw > c->max_patches) gw > gh ? gw-- : gh--;
            while (gh * gw < c->min_patches) gw < gh ? gw++ : gh++;
            s->patches[i] = gh * gw;
            s->sq += (double)gh * gw * gh * gw;
        }
    }
    int t = (int)lround(text) + s->n_img; /* the text tokens include one <image> token per image */
    if (t < s->n_img + 8) t = s->n_img + 8;
    int L = t - s->n_img;
    if (c->workload == PP_WORKLOAD_ANYRES) L += s->L; /* the images' unpadded positions */
    else
        for (int i = 0; i < s->n_img; i++) L += s->patches[i];
    if (L > c->microbatch_tokens) L = c->microbatch_tokens; /* the loader refuses longer ones; truncated here */
    s->L = L;
}

int pp_calib_generate(const PpCalibConfig* c, PpDurations* d, PpCalibStats* st, char* err, size_t errlen) {
    memset(d, 0, sizeof *d);
    if (c->P < 1 || c->M < 1 || c->P > c->Lt || c->microbatch_tokens < 64 || !(c->flops > 0) || c->policy < 0 ||
        c->policy > 2 || c->window < 1) {
        snprintf(err, errlen, "calibrated generator: needs 1 <= stages <= LM layers (%d), microbatches >= 1, a token "
                 "budget >= 64, a FLOP rate > 0, policy fifo|ffd|balanced and window >= 1 (got P %d, M %d, budget %d, "
                 "flops %g)", c->Lt, c->P, c->M, c->microbatch_tokens, c->flops);
        return -1;
    }
    /* the jitter is a lognormal factor's sigma with mean 1: its median is exp(-sigma^2/2), so a large sigma
     * shrinks almost every task toward 0 (sigma 10: all durations print as 0) instead of jittering them */
    if (!(c->jitter >= 0 && c->jitter <= PP_CALIB_MAX_JITTER)) {
        snprintf(err, errlen, "calibrated generator: jitter %g is out of range; allowed: 0 <= jitter <= %g (a lognormal "
                 "sigma: beyond that the median task shrinks below %.2f of its mean)", c->jitter, PP_CALIB_MAX_JITTER,
                 exp(-0.5 * PP_CALIB_MAX_JITTER * PP_CALIB_MAX_JITTER));
        return -1;
    }
    if (c->workload == PP_WORKLOAD_ANYRES && (c->patch < 1 || c->tile < c->patch || c->tile % c->patch)) {
        snprintf(err, errlen, "calibrated generator: the anyres workload needs the tile side (model.vision_image_size, %d) a "
                 "multiple of model.patch (%d)", c->tile, c->patch);
        return -1;
    }
    uint64_t x = c->seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    /* 1. samples, packed by the loader's own packer into M microbatches */
    int M = c->M, cap_s = 1024, n_s = 0;
    CalibSample* smp = mallocCheck(sizeof(CalibSample) * (size_t)cap_s);
    int* mb_of = mallocCheck(sizeof(int) * (size_t)cap_s); /* microbatch of each sample, -1 = not in the step */
    int n_mb = 0, fifo_tok = 0;
    while (n_mb < M) {
        int W = c->policy == 0 ? 1 : c->window;
        if (n_s + W > cap_s) {
            while (n_s + W > cap_s) cap_s *= 2;
            smp = reallocCheck(smp, sizeof(CalibSample) * (size_t)cap_s);
            mb_of = reallocCheck(mb_of, sizeof(int) * (size_t)cap_s);
        }
        if (c->policy == 0) { /* fifo: a microbatch closes when the next sample does not fit */
            draw_sample(c, &x, &smp[n_s]);
            if (fifo_tok > 0 && fifo_tok + smp[n_s].L > c->microbatch_tokens) n_mb++, fifo_tok = 0;
            if (n_mb >= M) break;
            fifo_tok += smp[n_s].L;
            mb_of[n_s++] = n_mb;
            continue;
        }
        int cl[4096];
        double cb[4096];
        int64_t key[4096];
        int bin_of[4096];
        if (W > 4096) W = 4096;
        for (int i = 0; i < W; i++) {
            draw_sample(c, &x, &smp[n_s + i]);
            double sq = smp[n_s + i].sq;
            cl[i] = smp[n_s + i].L;
            cb[i] = loader_balanced_cost(smp[n_s + i].L, sq, 512.0);
            key[i] = n_s + i;
        }
        int nb = loader_pack_window((LoaderPolicy)c->policy, W, cl, cb, key, c->microbatch_tokens, bin_of);
        for (int i = 0; i < W; i++) mb_of[n_s + i] = n_mb + bin_of[i] < M ? n_mb + bin_of[i] : -1;
        n_s += W;
        n_mb += nb;
    }
    /* 2. per microbatch: tokens, patches and the partitioner's cost model's statistics */
    double *T = callocCheck((size_t)M, sizeof(double)), *Np = callocCheck((size_t)M, sizeof(double));
    double *L2 = callocCheck((size_t)M, sizeof(double)), *P2 = callocCheck((size_t)M, sizeof(double));
    int* ns = callocCheck((size_t)M, sizeof(int));
    for (int i = 0; i < n_s; i++) {
        int m = mb_of[i];
        if (m < 0 || m >= M) continue;
        T[m] += smp[i].L;
        L2[m] += (double)smp[i].L * smp[i].L;
        ns[m]++;
        for (int k = 0; k < smp[i].n_img; k++) Np[m] += smp[i].patches[k];
        P2[m] += smp[i].sq;
    }
    /* 3. the layer split: the partitioner's, on the recipe's budget (as the trainer computes it) */
    int P = c->P, mm = c->workload != PP_WORKLOAD_TEXT;
    int* layers = mallocCheck(sizeof(int) * (size_t)P);
    double tok = (double)c->microbatch_tokens * M;
    int ar = c->workload == PP_WORKLOAD_ANYRES, g = ar ? c->tile / c->patch : 0; /* any-resolution: a tile's attention */
    PartitionCost pc = partition_cost_model(c->Dv, c->Lv, c->Dt, c->F, c->V, tok, ar ? tok : mm ? 0.5 * tok : 0.0,
                                            ar ? (double)g * g : 0.5 * (c->min_patches + c->max_patches), 256.0, c->patch);
    int lm_full = c->recompute_lm == RECOMPUTE_FULL, tower_full = c->recompute_tower == RECOMPUTE_FULL;
    pc = partition_cost_recompute(pc, lm_full, tower_full); /* as the trainer splits (runtime/train/layout.c) */
    /* parallel.partition = path: for this step's microbatches and its backward (whole, or split: B and W) */
    int path_M = c->partition_path ? M | (c->split ? PARTITION_SPLIT_BACKWARD : 0) : 0;
    /* the tower's blocks over stages where it costs more than a stage's share (partition_auto_tower) */
    int* tower = callocCheck((size_t)P, sizeof(int));
    int spans = 0;
    if (c->tower_split && mm) {
        PartitionTower pt = partition_tower_model(c->Dv, c->Lv, ar ? tok : 0.5 * tok,
                                                  ar ? (double)g * g : 0.5 * (c->min_patches + c->max_patches), c->patch);
        spans = partition_auto_tower_path(c->Lt, P, pc, partition_tower_recompute(pt, tower_full), path_M, tower,
                                          layers) == 1;
    } else partition_auto_path(c->Lt, P, pc, path_M, NULL, NULL, layers);
    int lm0 = 0; /* the stage holding LM block 0 (the projector and the embedding) */
    while (spans && lm0 < P - 1 && layers[lm0] == 0) lm0++;
    /* 4. durations: FLOPs / rate; F = 1/3 of forward + backward, B = 2/3 (split: B = W = 1/3) */
    d->P = P, d->M = M, d->split = c->split;
    d->F = mallocCheck(sizeof(double) * (size_t)P * M);
    d->B = mallocCheck(sizeof(double) * (size_t)P * M);
    if (c->split) d->W = mallocCheck(sizeof(double) * (size_t)P * M);
    double mean_T = 0;
    for (int m = 0; m < M; m++) mean_T += T[m] / M;
    uint64_t y = c->seed * 0xD1B54A32D192ED03ull + 77;
    int* slow_left = callocCheck((size_t)P, sizeof(int));
    double total = 0, slowed = 0;
    for (int m = 0; m < M; m++) {
        double tps = ns[m] > 0 && T[m] > 0 ? L2[m] / T[m] : 1.0;      /* sum L^2 / T: causal attention per token */
        double ppi = Np[m] > 0 ? P2[m] / Np[m] : 1.0;                  /* sum p^2 / Np: ViT attention per patch */
        PartitionCost k = partition_cost_model(c->Dv, c->Lv, c->Dt, c->F, c->V, T[m], mm ? Np[m] : 0.0, ppi, tps, c->patch);
        PartitionTower kt = partition_tower_model(c->Dv, c->Lv, mm ? Np[m] : 0.0, ppi, c->patch);
        for (int s = 0; s < P; s++) {
            /* the first stage's extra (the tower, the projector, the embedding): on stage 0, or where the split put the
             * tower's blocks (the patch embedding with block 0, the rest with LM block 0) */
            double first = s == 0 ? k.first_extra : 0;
            if (spans)
                first = tower[s] * kt.layer + (s == 0 ? kt.in : 0) +
                        (s == lm0 ? k.first_extra - kt.in - kt.layers * kt.layer : 0);
            double fl = layers[s] * k.per_layer + first + (s == P - 1 ? k.last_extra : 0);
            double sec = fl / c->flops;
            /* full recompute: the recomputed forward (a third of the block's forward + backward) in B, and in W too */
            double rc = ((lm_full ? layers[s] * k.per_layer : 0) + (tower_full ? first : 0)) / 3 / c->flops;
            /* stragglers: rank s starts an episode with probability straggler_prob per microbatch and
             * runs straggler_len microbatches straggler_factor times slower */
            if (slow_left[s] == 0 && c->straggler_prob > 0 && u01(&y) < c->straggler_prob) slow_left[s] = c->straggler_len;
            double slow = 1.0;
            if (slow_left[s] > 0) slow = c->straggler_factor, slow_left[s]--, slowed += 1;
            double jf = c->jitter > 0 ? lognormal(&y, 1.0, c->jitter) : 1.0;
            double jb = c->jitter > 0 ? lognormal(&y, 1.0, c->jitter) : 1.0;
            double jw = c->jitter > 0 ? lognormal(&y, 1.0, c->jitter) : 1.0;
            size_t i = (size_t)s * M + m;
            d->F[i] = sec / 3 * slow * jf;
            if (c->split) {
                d->B[i] = (sec / 3 + rc) * slow * jb;
                d->W[i] = (sec / 3 + rc) * slow * jw;
            } else {
                d->B[i] = (2 * sec / 3 + rc) * slow * jb;
            }
            total += d->F[i] + d->B[i] + (c->split ? d->W[i] : 0);
        }
    }
    /* the message latency: a mean microbatch's activation over the link, plus the link's latency */
    d->latency = c->link_latency_s + mean_T * c->Dt * c->act_bytes / (c->link_GBps * 1e9);
    if (st) {
        memset(st, 0, sizeof *st);
        st->samples = 0;
        for (int m = 0; m < M; m++) st->samples += ns[m], st->tokens += T[m], st->patches += Np[m];
        double mx = 0, mn = 1e300;
        for (int m = 0; m < M; m++) mx = T[m] > mx ? T[m] : mx, mn = T[m] < mn ? T[m] : mn;
        st->fill = st->tokens / ((double)M * c->microbatch_tokens);
        st->min_T = mn, st->max_T = mx;
        st->step_work_s = total;
        st->straggler_share = slowed / ((double)P * M);
        for (int s = 0; s < P && s < 128; s++) st->layers[s] = layers[s], st->tower[s] = spans ? tower[s] : s == 0 ? c->Lv : 0;
        st->tower_spans = spans;
    }
    free(tower);
    free(slow_left);
    free(layers);
    free(T), free(Np), free(L2), free(P2), free(ns);
    free(smp);
    free(mb_of);
    return 0;
}
