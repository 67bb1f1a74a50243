/* test_data.c — the data path end to end: demo data -> tokenizer -> pack -> loader, checked against
 * an independent re-reading of the manifest and the JPEG files; packing policies, DP sharding,
 * determinism (any worker count), resume, and damaged shards (flipped byte, truncation, wrong magic,
 * damaged index), each giving its documented error or count with nothing else lost.
 *
 * usage: test_data RRFP_MM_BINARY WORK_DIR
 *        test_data --check-shards SHARDS MANIFEST IMAGES TOK P MIN MAX   (tests/data/data_pack_errors.sh)
 *        test_data --bad-images WORK BAD_DIR GOOD.jpg...                 (tests/data/data_pack_errors.sh) */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/image.h"
#include "data/loader.h"
#include "data/manifest.h"
#include "data/shard.h"
#include "engine/util.h"
#include "text/tokenizer.h"

#include "tests/support/check.h"
#include "tests/support/util/proc.h"
#include "tests/support/util/shard_damage.h"

static const char* BIN;
static char WORK[1024];

/* ---- the independent expectation: manifest record -> expanded ids / targets / patches ---- */

typedef struct {
    int T, Np, I;
    int32_t *ids, *targets;
    float* patches;
    int32_t gh[16], gw[16];
} Expected;

static Manifest g_man;
static Tokenizer* g_tok;
static int g_img_id, g_eot_id;
static JpegCodec* g_jc;
static char g_images[1200];
static char** g_ids_by_global; /* loader global index -> record id (from the shard index) */

static int find_record(const char* id) {
    for (int i = 0; i < g_man.n; i++) {
        const cJSON* v = cJSON_GetObjectItemCaseSensitive(g_man.recs[i].rec, "id");
        if (cJSON_IsString(v) && !strcmp(v->valuestring, id)) return i;
    }
    return -1;
}

static void expected_build(int rec, int p, int minp, int maxp, Expected* e) {
    memset(e, 0, sizeof *e);
    ManifestSample s;
    char why[512];
    RejectReason r = manifest_sample_build(g_man.recs[rec].rec, g_man.recs[rec].line, g_tok, g_img_id, g_eot_id, &s, why,
                                           sizeof why);
    RR_ASSERT(r == REJECT_NONE);
    float* pt[16] = {0};
    for (int k = 0; k < s.n_images; k++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", g_images, s.images[k]);
        size_t n;
        uint8_t* b = (uint8_t*)rr_read_file(path, &n, RR_MAX_IMAGE);
        RR_ASSERT(b);
        int rc = image_load_patches(g_jc, b, n, p, minp, maxp, &pt[k], &e->gh[k], &e->gw[k], why, sizeof why);
        RR_ASSERT(rc == 0);
        free(b);
        e->Np += e->gh[k] * e->gw[k];
    }
    e->I = s.n_images;
    e->T = s.n_tokens - s.n_images + e->Np;
    e->ids = malloc(sizeof(int32_t) * e->T);
    e->targets = malloc(sizeof(int32_t) * e->T);
    int* sup = calloc(e->T, sizeof(int));
    size_t row = 3 * (size_t)p * p;
    e->patches = malloc(sizeof(float) * row * (e->Np ? e->Np : 1));
    int t = 0, k = 0, np = 0;
    for (int j = 0; j < s.n_tokens; j++) {
        if (s.ids[j] == g_img_id) {
            int n = e->gh[k] * e->gw[k];
            memcpy(e->patches + row * np, pt[k], sizeof(float) * row * n);
            for (int q = 0; q < n; q++) e->ids[t] = -1, sup[t] = 0, t++;
            np += n;
            k++;
        } else {
            e->ids[t] = s.ids[j], sup[t] = s.mask[j], t++;
        }
    }
    for (int u = 0; u < e->T; u++) e->targets[u] = (u + 1 < e->T && sup[u + 1]) ? e->ids[u + 1] : -100;
    for (int q = 0; q < 16; q++) free(pt[q]);
    free(sup);
    manifest_sample_free(&s);
}

static void expected_free(Expected* e) { free(e->ids), free(e->targets), free(e->patches); }

/* Every sample of a microbatch equals its independent expectation, bit for bit. */
static int check_microbatch(const Microbatch* mb, int p, int minp, int maxp, int budget, int decoded) {
    int bad = 0;
    CHECK(mb->T <= budget, "microbatch of %d positions above the budget %d", mb->T, budget);
    CHECK(mb->cu_seqlens[0] == 0 && mb->cu_seqlens[mb->S] == mb->T, "cu_seqlens ends");
    int ii = 0, np = 0, nsup = 0;
    size_t row = 3 * (size_t)p * p;
    for (int s = 0; s < mb->S; s++) {
        int rec = find_record(g_ids_by_global[mb->sample_index[s]]);
        CHECK(rec >= 0, "sample %lld not in the manifest", (long long)mb->sample_index[s]);
        if (rec < 0) return 1;
        Expected e;
        expected_build(rec, p, minp, maxp, &e);
        int a = mb->cu_seqlens[s], len = mb->cu_seqlens[s + 1] - a;
        CHECK(len == e.T, "sample %d length %d, expected %d", s, len, e.T);
        if (len == e.T) {
            for (int t = 0; t < len; t++) {
                if (mb->ids[a + t] != e.ids[t] || mb->targets[a + t] != e.targets[t] || mb->pos[a + t] != t) {
                    CHECK(0, "sample %s position %d: id %d/%d target %d/%d pos %d", g_ids_by_global[mb->sample_index[s]],
                          t, mb->ids[a + t], e.ids[t], mb->targets[a + t], e.targets[t], mb->pos[a + t]);
                    bad = 1;
                    break;
                }
                nsup += e.targets[t] != -100;
            }
            for (int k = 0; k < e.I; k++, ii++) {
                CHECK(mb->grid_h[ii] == e.gh[k] && mb->grid_w[ii] == e.gw[k], "grid");
                int n = e.gh[k] * e.gw[k];
                CHECK(mb->img_cu_patches[ii] == np && mb->img_cu_patches[ii + 1] == np + n, "img_cu_patches");
                CHECK(mb->ids[mb->img_lm_start[ii]] == -1 && mb->img_lm_start[ii] >= a, "img_lm_start");
                for (int q = 0; q < n; q++) {
                    if (mb->patch_row[np + q] != q / e.gw[k] || mb->patch_col[np + q] != q % e.gw[k]) {
                        CHECK(0, "patch row/col at %d", np + q);
                        break;
                    }
                }
                np += n;
            }
            if (decoded && e.Np)
                CHECK(!memcmp(mb->patches + row * (np - e.Np), e.patches, sizeof(float) * row * e.Np),
                      "pixels of sample %s differ from decoding its JPEG files", g_ids_by_global[mb->sample_index[s]]);
            if (!decoded) CHECK(mb->patches == NULL, "decode_images = 0 still made pixels");
        }
        expected_free(&e);
    }
    CHECK(ii == mb->I && np == mb->Np, "image / patch totals %d/%d %d/%d", ii, mb->I, np, mb->Np);
    CHECK(nsup == mb->n_supervised, "n_supervised %d, counted %d", mb->n_supervised, nsup);
    return bad;
}

static LoaderConfig base_cfg(const char* shards) {
    LoaderConfig c;
    loader_config_default(&c);
    c.shards = shards;
    c.tokenizer_hash = tokenizer_hash(g_tok);
    c.microbatch_tokens = 256;
    c.microbatches = 3;
    c.window = 16;
    c.seed = 7;
    return c;
}

/* Hand out steps until `epochs` full epochs worth of stream positions were consumed; record which
 * global samples came out (count per sample). */
static int64_t drain(Loader* L, int steps, int64_t* seen, int N, int check, const LoaderConfig* c) {
    int64_t samples = 0;
    char err[1024];
    for (int st = 0; st < steps; st++) {
        LoaderStep step;
        int rc = loader_next_step(L, &step, err, sizeof err);
        CHECK(rc == 0, "loader_next_step: %s", err);
        if (rc) break;
        int64_t nsup = 0;
        for (int m = 0; m < step.M; m++) {
            const Microbatch* mb = &step.mbs[m];
            nsup += mb->n_supervised;
            for (int s = 0; s < mb->S; s++) {
                RR_ASSERT(mb->sample_index[s] >= 0 && mb->sample_index[s] < N);
                if (seen) seen[mb->sample_index[s]]++;
            }
            samples += mb->S;
            if (check) check_microbatch(mb, c->patch, c->min_patches, c->max_patches, c->microbatch_tokens, c->decode_images);
        }
        CHECK(nsup == step.n_supervised, "step n_supervised");
    }
    return samples;
}

/* A digest of one microbatch's tokens: every id, target, position and sample index. */
static uint64_t mb_digest_tokens(const Microbatch* mb) {
    uint64_t h = 1469598103934665603ull;
    h = h * 31 + rr_fnv1a64(mb->ids, sizeof(int32_t) * mb->T);
    h = h * 31 + rr_fnv1a64(mb->targets, sizeof(int32_t) * mb->T);
    h = h * 31 + rr_fnv1a64(mb->pos, sizeof(int32_t) * mb->T);
    h = h * 31 + rr_fnv1a64(mb->sample_index, sizeof(int64_t) * mb->S);
    return h;
}

/* A digest of one microbatch: its tokens and every pixel. */
static uint64_t mb_digest(const Microbatch* mb) {
    uint64_t h = mb_digest_tokens(mb);
    if (mb->patches) h = h * 31 + rr_fnv1a64(mb->patches, sizeof(float) * mb->Np * 3 * mb->patch * mb->patch);
    return h;
}

/* A digest of the next `steps` steps: every id, target, position and pixel. */
static uint64_t digest_steps(Loader* L, int steps) {
    uint64_t h = 1469598103934665603ull;
    char err[1024];
    for (int st = 0; st < steps; st++) {
        LoaderStep step;
        if (loader_next_step(L, &step, err, sizeof err) != 0) {
            CHECK(0, "%s", err);
            return 0;
        }
        for (int m = 0; m < step.M; m++) h = h * 31 + mb_digest(&step.mbs[m]);
    }
    return h;
}

static int copy_file(const char* a, const char* b) { return proc_copy_file(a, b); }

static void flip_byte(const char* path, long off) {
    FILE* f = fopen(path, "r+b");
    RR_ASSERT(f);
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

/* A digest of a microbatch's plan: ids, targets, positions, samples, grids (no pixels). */
static uint64_t mb_digest_plan(const Microbatch* mb) {
    uint64_t h = mb_digest_tokens(mb);
    h = h * 31 + rr_fnv1a64(mb->grid_h, sizeof(int32_t) * mb->I);
    h = h * 31 + rr_fnv1a64(mb->img_lm_start, sizeof(int32_t) * mb->I);
    h = h * 31 + (uint64_t)mb->n_supervised;
    return h;
}

/* Section 8 of main (see there). */
static void undecodable_image(const char* shards, int N) {
    char dir[1200], in[1300], out[1300], err[2048];
    snprintf(dir, sizeof dir, "%s/undecodable", WORK);
    RR_ASSERT(rr_remove_tree(dir) == 0 && proc_copy_dir(shards, dir) == 0);
    snprintf(in, sizeof in, "%s/shard-00001.rrs", shards);
    snprintf(out, sizeof out, "%s/shard-00001.rrs", dir);
    Shard s;
    RR_ASSERT(shard_open(in, &s, err, sizeof err) == 0);
    uint64_t which = 5;
    while (which < s.n && s.entries[which].n_images == 0) which++;
    RR_ASSERT(which < s.n);
    char victim[256];
    snprintf(victim, sizeof victim, "%s", s.ids + s.entries[which].id_off);
    shard_close(&s);
    RR_ASSERT(shard_copy_damaged(in, out, which, err, sizeof err) == 0);
    int64_t g_victim = -1;
    for (int i = 0; i < N; i++)
        if (!strcmp(g_ids_by_global[i], victim)) g_victim = i;
    RR_ASSERT(g_victim >= 0);

    /* (a) alone: against the intact shards, step by step over more than an epoch */
    LoaderConfig c = base_cfg(dir), ci = base_cfg(shards);
    c.microbatch_tokens = ci.microbatch_tokens = 1024; /* an epoch in fewer steps */
    Loader* A = loader_open(&c, NULL, err, sizeof err);
    Loader* I = loader_open(&ci, NULL, err, sizeof err);
    RR_ASSERT(A && I);
    /* (b) agree_skips: a decoding rank and one that decodes nothing; (c) 2 replicas of 2 microbatches against
     * one process of 4 (deferred decoding) */
    LoaderConfig cd = c, cp = c, c4 = c, cr[2];
    cd.agree_skips = 1, cd.quiet = 1;
    cp.agree_skips = 1, cp.decode_images = 0;
    c4.microbatches = 4, c4.quiet = 1;
    Loader* D = loader_open(&cd, NULL, err, sizeof err);
    Loader* P = loader_open(&cp, NULL, err, sizeof err);
    Loader* O4 = loader_open(&c4, NULL, err, sizeof err);
    Loader* R[2];
    for (int r = 0; r < 2; r++) {
        cr[r] = c4;
        cr[r].microbatches = 2, cr[r].dp_rank = r, cr[r].dp_size = 2, cr[r].agree_skips = 1, cr[r].quiet = 1;
        R[r] = loader_open(&cr[r], NULL, err, sizeof err);
        RR_ASSERT(R[r]);
    }
    RR_ASSERT(D && P && O4);
    int occurrences = 0, victim_out = 0, plan_bad = 0, agree_bad = 0, dp_bad = 0, found_dp = 0;
    int64_t supervised_lost = 0;
    fprintf(stderr, "(warnings naming %s sample %llu, id '%s', are expected below)\n", out, (unsigned long long)which, victim);
    for (int st = 0; st < 30; st++) {
        LoaderStep sa, si, sd, sp, s4, sr[2];
        RR_ASSERT(loader_next_step(A, &sa, err, sizeof err) == 0 && loader_next_step(I, &si, err, sizeof err) == 0);
        RR_ASSERT(loader_next_step(D, &sd, err, sizeof err) == 0 && loader_next_step(P, &sp, err, sizeof err) == 0);
        RR_ASSERT(loader_next_step(O4, &s4, err, sizeof err) == 0);
        for (int r = 0; r < 2; r++) RR_ASSERT(loader_next_step(R[r], &sr[r], err, sizeof err) == 0);
        /* the intact plan minus the victim, microbatch by microbatch */
        int here = 0;
        for (int m = 0; m < si.M; m++) {
            const Microbatch *a = &sa.mbs[m], *b = &si.mbs[m];
            int j = 0;
            for (int k = 0; k < b->S; k++) {
                if (b->sample_index[k] == g_victim) {
                    here++;
                    for (int t = b->cu_seqlens[k]; t < b->cu_seqlens[k + 1]; t++) supervised_lost += b->targets[t] != -100;
                    continue;
                }
                if (j >= a->S || a->sample_index[j] != b->sample_index[k]) plan_bad++;
                j++;
            }
            if (j != a->S) plan_bad++;
            for (int k = 0; k < a->S; k++) victim_out += a->sample_index[k] == g_victim;
            check_microbatch(a, c.patch, c.min_patches, c.max_patches, c.microbatch_tokens, 1);
        }
        occurrences += here;
        CHECK(sd.n_undecoded == here && sp.n_undecoded == 0, "step %d: %d undecoded samples found by the decoding rank, "
              "%d by the other, the victim %d times in the step", st + 1, sd.n_undecoded, sp.n_undecoded, here);
        CHECK(sa.n_undecoded == 0, "alone, the step still lists undecoded samples");
        for (int i = 0; i < sd.n_undecoded; i++)
            CHECK(sd.undecoded[i].sample == g_victim && strstr(sd.undecoded[i].why, "shard-00001.rrs sample") &&
                      strstr(sd.undecoded[i].why, victim) && strstr(sd.undecoded[i].why, "image 0: corrupt JPEG"),
                  "undecoded entry: %s", sd.undecoded[i].why);
        /* every rank gets the decoding rank's findings: the same steps as alone */
        if (loader_drop_samples(D, sd.undecoded, sd.n_undecoded, &sd, err, sizeof err) != 0 ||
            loader_drop_samples(P, sd.undecoded, sd.n_undecoded, &sp, err, sizeof err) != 0) {
            CHECK(0, "loader_drop_samples: %s", err);
            break;
        }
        for (int m = 0; m < sa.M; m++) {
            if (mb_digest_plan(&sd.mbs[m]) != mb_digest_plan(&sa.mbs[m]) || mb_digest(&sd.mbs[m]) != mb_digest(&sa.mbs[m]) ||
                mb_digest_plan(&sp.mbs[m]) != mb_digest_plan(&sa.mbs[m]))
                agree_bad++;
        }
        CHECK(sd.n_supervised == sa.n_supervised && sp.n_supervised == sa.n_supervised && sd.samples == sa.samples &&
                  sp.samples == sa.samples && sd.tokens == sa.tokens, "step %d: the sums differ", st + 1);
        LoaderPos pa, pi, pd, pp;
        loader_get_pos(A, &pa), loader_get_pos(I, &pi), loader_get_pos(D, &pd), loader_get_pos(P, &pp);
        CHECK(pa.stream_pos == pi.stream_pos && pa.group_done == pi.group_done && pa.steps == pi.steps,
              "step %d: the position moved off the intact shards' plan", st + 1);
        CHECK(!memcmp(&pa, &pd, sizeof pa) && !memcmp(&pa, &pp, sizeof pa), "step %d: positions differ across ranks", st + 1);
        /* replicas: the union of both replicas' findings, dropped by both */
        LoaderSkip u[8];
        int nu = 0;
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < sr[r].n_undecoded && nu < 8; i++) u[nu++] = sr[r].undecoded[i];
        found_dp += nu;
        for (int r = 0; r < 2; r++)
            if (loader_drop_samples(R[r], u, nu, &sr[r], err, sizeof err) != 0) CHECK(0, "replica %d: %s", r, err);
        for (int r = 0; r < 2; r++)
            for (int m = 0; m < 2; m++) dp_bad += mb_digest(&sr[r].mbs[m]) != mb_digest(&s4.mbs[m * 2 + r]);
        LoaderPos p4, pr0, pr1;
        loader_get_pos(O4, &p4), loader_get_pos(R[0], &pr0), loader_get_pos(R[1], &pr1);
        CHECK(!memcmp(&p4, &pr0, sizeof p4) && !memcmp(&p4, &pr1, sizeof p4), "step %d: replica positions differ", st + 1);
    }
    LoaderStats sta;
    loader_stats(A, &sta);
    CHECK(occurrences >= 2, "the victim came up %d times in 30 steps (expected several epochs)", occurrences);
    CHECK(victim_out == 0, "the undecodable sample was handed out %d times", victim_out);
    CHECK(plan_bad == 0, "%d microbatches are not the intact plan minus the sample", plan_bad);
    CHECK(sta.skipped_damaged == occurrences, "skipped_damaged %lld, the sample came up %d times",
          (long long)sta.skipped_damaged, occurrences);
    CHECK(agree_bad == 0, "%d microbatches differ between the decoding rank, the other and the lone loader", agree_bad);
    CHECK(dp_bad == 0 && found_dp >= 2, "replicas: %d microbatches differ from one process's; %d findings", dp_bad, found_dp);
    /* resume: a position after a drop replays the same steps */
    LoaderPos mid;
    loader_get_pos(A, &mid);
    Loader* B = loader_open(&c, &mid, err, sizeof err);
    RR_ASSERT(B);
    uint64_t ha = digest_steps(A, 12), hb = digest_steps(B, 12);
    CHECK(ha == hb, "resumed from a position after the drops: other steps");
    loader_close(B);
    printf("undecodable image: %d occurrences of '%s' dropped from their steps (%lld supervised targets), the rest "
           "the intact plan bit for bit; a rank without pixels and 2 replicas drop the same; resume equal\n",
           occurrences, victim, (long long)supervised_lost);
    loader_close(A), loader_close(I), loader_close(D), loader_close(P), loader_close(O4);
    loader_close(R[0]), loader_close(R[1]);

    /* (d) microbatch_drop_samples: dropping every other sample leaves microbatches equal to the manifest
     * sample by sample; dropping all leaves the first as a placeholder that trains nothing */
    c = base_cfg(shards);
    Loader* L = loader_open(&c, NULL, err, sizeof err);
    LoaderStep st;
    RR_ASSERT(L && loader_next_step(L, &st, err, sizeof err) == 0);
    for (int m = 0; m < st.M; m++) {
        Microbatch* mb = &st.mbs[m];
        uint8_t drop[512] = {0};
        RR_ASSERT(mb->S <= 512);
        int S = mb->S;
        for (int k = 1; k < S; k += 2) drop[k] = 1;
        CHECK(microbatch_drop_samples(mb, drop) == S / 2 && mb->S == S - S / 2, "dropped %d of %d", S / 2, S);
        check_microbatch(mb, c.patch, c.min_patches, c.max_patches, c.microbatch_tokens, 1);
        memset(drop, 1, sizeof drop);
        int64_t first = mb->sample_index[0];
        int T0 = mb->cu_seqlens[1], Np0 = mb->I ? mb->img_cu_patches[0] : 0;
        (void)Np0;
        int dropped = microbatch_drop_samples(mb, drop), zero = 1, ignored = 1;
        for (int t = 0; t < mb->T; t++) ignored &= mb->targets[t] == -100;
        for (size_t i = 0; mb->patches && i < (size_t)mb->Np * 3 * c.patch * c.patch; i++) zero &= mb->patches[i] == 0.0f;
        CHECK(dropped == S - S / 2 - 1 && mb->S == 1 && mb->sample_index[0] == first && mb->T == T0 && mb->n_supervised == 0 &&
                  ignored && zero && mb->cu_seqlens[1] == mb->T && mb->img_cu_patches[mb->I] == mb->Np,
              "the placeholder: S %d, T %d (expected %d), n_supervised %d, targets ignored %d, pixels zero %d", mb->S,
              mb->T, T0, mb->n_supervised, ignored, zero);
    }
    loader_close(L);

    /* (e) fatal_errors: the step fails naming shard, index, id and the decoder's reason */
    c = base_cfg(dir);
    c.fatal_errors = 1;
    L = loader_open(&c, NULL, err, sizeof err);
    RR_ASSERT(L);
    int rc = 0;
    for (int i = 0; i < 400 && rc == 0; i++) rc = loader_next_step(L, &st, err, sizeof err);
    char want[64];
    snprintf(want, sizeof want, "shard-00001.rrs sample %llu ", (unsigned long long)which);
    CHECK(rc == -1 && strstr(err, want) && strstr(err, victim) && strstr(err, "corrupt JPEG") && strstr(err, "data.on_error"),
          "fatal undecodable image: %s", err);
    loader_close(L);
}

/* --check-shards SHARDS MANIFEST IMAGES TOK P MIN MAX: one epoch of every policy over the shards, each
 * sample checked against the manifest and its JPEG files (used on real photographs by
 * tests/data/data_pack_errors.sh). */
static int check_shards(char** a) {
    char err[2048];
    g_tok = tokenizer_load(a[3], err, sizeof err);
    RR_ASSERT(g_tok);
    g_img_id = tokenizer_token_id(g_tok, "<image>");
    g_eot_id = tokenizer_token_id(g_tok, "<|endoftext|>");
    RR_ASSERT(manifest_load(a[1], &g_man, err, sizeof err) == 0);
    snprintf(g_images, sizeof g_images, "%s", a[2]);
    g_jc = jpeg_codec_new();
    for (int pol = 0; pol < 3; pol++) {
        LoaderConfig c = base_cfg(a[0]);
        c.patch = atoi(a[4]), c.min_patches = atoi(a[5]), c.max_patches = atoi(a[6]);
        c.microbatch_tokens = 4 * c.max_patches + 256;
        c.microbatches = 1, c.window = 4, c.policy = (LoaderPolicy)pol, c.workers = 2;
        Loader* L = loader_open(&c, NULL, err, sizeof err);
        CHECK(L != NULL, "%s", err);
        if (!L) break;
        int N = loader_sample_count(L);
        if (!g_ids_by_global) {
            g_ids_by_global = calloc(N, sizeof(char*));
            Shard s;
            char path[1200];
            int g = 0;
            for (int k = 0; g < N; k++) {
                snprintf(path, sizeof path, "%s/shard-%05d.rrs", a[0], k);
                RR_ASSERT(shard_open(path, &s, err, sizeof err) == 0);
                for (uint64_t i = 0; i < s.n; i++) g_ids_by_global[g++] = strdup(s.ids + s.entries[i].id_off);
                shard_close(&s);
            }
        }
        int64_t* seen = calloc(N, sizeof(int64_t));
        int64_t got = 0;
        int miss = N;
        while (miss > 0 && got < 4 * N) { /* groups straddle epochs: allow a few */
            got += drain(L, 1, seen, N, 1, &c);
            miss = 0;
            for (int i = 0; i < N; i++) miss += seen[i] == 0;
        }
        CHECK(miss == 0, "%d samples not handed out", miss);
        printf("check-shards policy %d: %d samples (p %d, patches %d..%d) equal to the manifest and JPEGs\n", pol, N,
               c.patch, c.min_patches, c.max_patches);
        free(seen);
        loader_close(L);
    }
    return check_failures ? 1 : 0;
}

/* ---- --bad-images WORK BAD_DIR GOOD.jpg...: a bad JPEG costs only itself ---------------------------
 * Every file of BAD_DIR (tests/data/bad_jpegs.py: random bytes after a JPEG marker, headers claiming
 * 65535x65535, a zero height, 12-bit samples, 60000x60000 followed by noise, a cut file) is rejected,
 * and after each one the same codec still decodes every good photograph bit for bit like a fresh
 * codec (libjpeg-turbo 2.1 leaves its handle broken after a failed header read). The address space is
 * capped at 4 GiB, so a decode buffer sized from a lying header (10 GB for 60000x60000) kills the test
 * instead of passing. Then the loader over a shard holding the bad images between good ones hands out
 * every good sample, with the right pixels, epoch after epoch, and skips only the bad ones. */

static uint8_t* read_or_die(const char* path, size_t* n) {
    uint8_t* b = (uint8_t*)rr_read_file(path, n, RR_MAX_IMAGE);
    if (!b) {
        fprintf(stderr, "cannot read '%s': %s\n", path, strerror(errno));
        exit(2);
    }
    return b;
}

static int bad_images(int argc, char** argv) {
    const char* work = argv[0];
    const char* bad_dir = argv[1];
    int ngood = argc - 2;
    RR_ASSERT(ngood >= 1 && ngood <= 8);
#ifndef __SANITIZE_ADDRESS__ /* AddressSanitizer's shadow memory needs terabytes of address space */
    struct rlimit rl = {4ull << 30, 4ull << 30};
    RR_ASSERT(setrlimit(RLIMIT_AS, &rl) == 0);
#endif
    const int p = 8, minp = 16, maxp = 64;
    char err[512];

    uint8_t* good[8];
    size_t good_n[8];
    float* ref[8];
    int ref_gh[8], ref_gw[8], gw_[8], gh_[8];
    for (int g = 0; g < ngood; g++) {
        good[g] = read_or_die(argv[2 + g], &good_n[g]);
        JpegCodec* fresh = jpeg_codec_new();
        RR_ASSERT(jpeg_read_header(fresh, good[g], good_n[g], &gw_[g], &gh_[g], err, sizeof err) == 0);
        int rc = image_load_patches(fresh, good[g], good_n[g], p, minp, maxp, &ref[g], &ref_gh[g], &ref_gw[g], err,
                                    sizeof err);
        CHECK(rc == 0, "%s: %s", argv[2 + g], err);
        jpeg_codec_free(fresh);
        if (rc) return 1;
    }

    /* the bad files, in name order */
    char* bad_name[32];
    int nbad = 0;
    DIR* d = opendir(bad_dir);
    RR_ASSERT(d);
    for (struct dirent* e; (e = readdir(d));)
        if (e->d_name[0] != '.' && nbad < 32) bad_name[nbad++] = strdup(e->d_name);
    closedir(d);
    for (int i = 0; i < nbad; i++)
        for (int j = i + 1; j < nbad; j++)
            if (strcmp(bad_name[j], bad_name[i]) < 0) {
                char* t = bad_name[i];
                bad_name[i] = bad_name[j], bad_name[j] = t;
            }
    CHECK(nbad >= 7, "only %d bad JPEGs in %s", nbad, bad_dir);
    uint8_t* bad[32];
    size_t bad_n[32];

    /* 1. the decoder: every bad one rejected, every good one still decoded after it */
    JpegCodec* jc = jpeg_codec_new();
    for (int b = 0; b < nbad; b++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", bad_dir, bad_name[b]);
        bad[b] = read_or_die(path, &bad_n[b]);
        float* pt = NULL;
        int gh, gw;
        err[0] = 0;
        int rc = image_load_patches(jc, bad[b], bad_n[b], p, minp, maxp, &pt, &gh, &gw, err, sizeof err);
        CHECK(rc == -1 && err[0], "%s: accepted", bad_name[b]);
        if (rc == 0) free(pt);
        printf("  %-24s rejected: %s\n", bad_name[b], err);
        if (strstr(bad_name[b], "huge"))
            CHECK(strstr(err, "60000x60000") && strstr(err, "above the limit"), "%s: %s", bad_name[b], err);
        for (int g = 0; g < ngood; g++) {
            rc = image_load_patches(jc, good[g], good_n[g], p, minp, maxp, &pt, &gh, &gw, err, sizeof err);
            CHECK(rc == 0, "%s after %s: %s", argv[2 + g], bad_name[b], err);
            if (rc) continue;
            CHECK(gh == ref_gh[g] && gw == ref_gw[g] &&
                      !memcmp(pt, ref[g], sizeof(float) * (size_t)gh * gw * 3 * p * p),
                  "%s decodes differently after %s", argv[2 + g], bad_name[b]);
            free(pt);
        }
        /* a full-size decode (scale 1) of the bad file: bounded before the buffer is allocated */
        int ow, oh;
        uint8_t* rgb = jpeg_decode_rgb(jc, bad[b], bad_n[b], 1, &ow, &oh, err, sizeof err);
        CHECK(!rgb, "%s: decoded at scale 1", bad_name[b]);
        free(rgb);
        rgb = jpeg_decode_rgb(jc, good[0], good_n[0], 2, &ow, &oh, err, sizeof err);
        CHECK(rgb != NULL, "%s after a scale-1 decode of %s: %s", argv[2], bad_name[b], err);
        free(rgb);
    }
    jpeg_codec_free(jc);

    /* 2. the loader: one shard, bad images between good ones, one worker (one codec for them all) */
    char dir[1200], path[1300];
    snprintf(dir, sizeof dir, "%s/bad_shard", work);
    RR_ASSERT(proc_fresh_dir(dir) == 0);
    snprintf(path, sizeof path, "%s/shard-00000.rrs", dir);
    ShardInfo info = {.tokenizer_hash = 0, .image_token = 5, .patch = p, .min_patches = minp, .max_patches = maxp};
    ShardWriter* w = shard_writer_open(path, &info, err, sizeof err);
    RR_ASSERT(w);
    const int32_t ids[5] = {1, 5, 2, 3, 4};
    const uint8_t mask[5] = {0, 0, 0, 1, 1};
    int N = 0, is_good[64];
    char name[64][64];
    int gi = 0;
    for (int b = 0; b <= nbad; b++) {
        for (int k = 0; k < 2; k++) { /* bad b (none after the last), then a good one */
            int g = k == 1 ? gi++ % ngood : -1;
            if (k == 0 && b == nbad) continue;
            ShardSampleIn in;
            memset(&in, 0, sizeof in);
            snprintf(name[N], sizeof name[N], k == 0 ? "bad-%d" : "good-%d", k == 0 ? b : g);
            in.id = name[N];
            in.n_tokens = 5, in.ids = ids, in.mask = mask, in.n_supervised = 2, in.n_images = 1;
            int src = g >= 0 ? g : 0; /* a bad image's index entry claims the first good one's size */
            in.jpeg[0] = g >= 0 ? good[g] : bad[b];
            in.jpeg_len[0] = g >= 0 ? good_n[g] : bad_n[b];
            in.img[0] = (ShardImage){(uint16_t)gw_[src], (uint16_t)gh_[src], (uint16_t)ref_gh[src], (uint16_t)ref_gw[src]};
            RR_ASSERT(shard_writer_add(w, &in, err, sizeof err) == 0);
            is_good[N++] = g;
        }
    }
    RR_ASSERT(shard_writer_close(w, err, sizeof err) == 0);
    LoaderConfig c;
    loader_config_default(&c);
    c.shards = dir;
    c.microbatch_tokens = 4 * maxp + 64;
    c.microbatches = 1, c.window = 4, c.policy = LOADER_POLICY_FIFO, c.workers = 1, c.seed = 3;
    c.patch = p, c.min_patches = minp, c.max_patches = maxp;
    Loader* L = loader_open(&c, NULL, err, sizeof err);
    CHECK(L != NULL, "%s", err);
    if (!L) return 1;
    RR_ASSERT(loader_sample_count(L) == N);
    int64_t seen[64] = {0}, got = 0;
    LoaderStats st;
    size_t row = (size_t)3 * p * p;
    fprintf(stderr, "(warnings naming the bad-* samples of %s are expected below)\n", path);
    for (int iter = 0; iter < 50 * N; iter++) {
        LoaderStep step;
        int rc = loader_next_step(L, &step, err, sizeof err);
        CHECK(rc == 0, "loader_next_step: %s", err);
        if (rc) break;
        for (int m = 0; m < step.M; m++) {
            const Microbatch* mb = &step.mbs[m];
            for (int s = 0; s < mb->S; s++) {
                int64_t gidx = mb->sample_index[s];
                seen[gidx]++;
                got++;
                int g = is_good[gidx];
                CHECK(g >= 0, "bad sample %s handed out", name[gidx]);
                if (g < 0 || !mb->patches) continue;
                /* one image per sample, in sample order */
                int n = mb->img_cu_patches[s + 1] - mb->img_cu_patches[s];
                CHECK(n == ref_gh[g] * ref_gw[g] &&
                          !memcmp(mb->patches + row * mb->img_cu_patches[s], ref[g], sizeof(float) * row * n),
                      "%s: pixels differ from a fresh decode", name[gidx]);
            }
        }
        loader_stats(L, &st);
        if (got + st.skipped_damaged >= 3 * N) break;
    }
    loader_stats(L, &st);
    int missing = 0;
    for (int i = 0; i < N; i++) missing += is_good[i] >= 0 && seen[i] < 2;
    CHECK(missing == 0, "%d good samples handed out fewer than twice in 3 epochs (damaged %lld, delivered %lld)",
          missing, (long long)st.skipped_damaged, (long long)got);
    CHECK(st.skipped_damaged >= 2 * nbad, "damaged count %lld", (long long)st.skipped_damaged);
    loader_close(L);
    for (int g = 0; g < ngood; g++) free(good[g]), free(ref[g]);
    for (int b = 0; b < nbad; b++) free(bad[b]), free(bad_name[b]);
    if (check_failures) fprintf(stderr, "%d check(s) failed\n", check_failures);
    else printf("bad-images: %d bad JPEGs rejected, each costing only itself (decoder and loader)\n", nbad);
    return check_failures ? 1 : 0;
}

int main(int argc, char** argv) {
    if (argc >= 5 && !strcmp(argv[1], "--bad-images")) return bad_images(argc - 2, argv + 2);
    if (argc == 9 && !strcmp(argv[1], "--check-shards")) return check_shards(argv + 2);
    if (argc < 3) {
        fprintf(stderr, "usage: test_data RRFP_MM WORK_DIR\n");
        return 2;
    }
    BIN = argv[1];
    snprintf(WORK, sizeof WORK, "%s", argv[2]);
    RR_ASSERT(proc_fresh_dir(WORK) == 0);
    /* demo data (300 records: single and two-image, text only), its tokenizer, shards of ~1 MiB */
    char a1[1300], a2[1300], a3[1300], a4[1300], a5[1300], log[1300];
    snprintf(a1, sizeof a1, "%s/demo", WORK);
    const char* demo[] = {BIN, "demo-data", "--out", a1, "--samples", "300", "--heldout", "20", "--seed", "3", NULL};
    RR_ASSERT(proc_run(demo, NULL, "/dev/null") == 0);
    snprintf(a1, sizeof a1, "%s/demo/train.json", WORK);
    snprintf(a2, sizeof a2, "%s/tok.json", WORK);
    const char* tok[] = {BIN, "tokenizer", "train", "--vocab", "400", "--manifest", a1, "--out", a2, NULL};
    RR_ASSERT(proc_run(tok, "/dev/null", "/dev/null") == 0);
    snprintf(a3, sizeof a3, "%s/demo/images", WORK);
    snprintf(a4, sizeof a4, "%s/shards", WORK);
    snprintf(log, sizeof log, "%s/pack.log", WORK);
    const char* pack[] = {BIN, "pack", "--manifest", a1, "--images", a3, "--tokenizer", a2, "--out", a4,
                          "--shard-size", "0.5", NULL};
    RR_ASSERT(proc_run(pack, NULL, log) == 0);
    CHECK(proc_file_has(log, "read 300 records, packed 300 into"), "pack summary");

    /* same inputs -> byte-identical shards */
    snprintf(a5, sizeof a5, "%s/shards2", WORK);
    const char* pack2[] = {BIN, "pack", "--manifest", a1, "--images", a3, "--tokenizer", a2, "--out", a5,
                           "--shard-size", "0.5", NULL};
    RR_ASSERT(proc_run(pack2, NULL, "/dev/null") == 0);
    CHECK(proc_same_dir(a4, a5), "packing twice gave different bytes");
    CHECK(proc_count_names(a4, "rrs") > 1, "expected several shards");

    char path[2048], err[2048];
    snprintf(path, sizeof path, "%s/tok.json", WORK);
    g_tok = tokenizer_load(path, err, sizeof err);
    RR_ASSERT(g_tok);
    g_img_id = tokenizer_token_id(g_tok, "<image>");
    g_eot_id = tokenizer_token_id(g_tok, "<|endoftext|>");
    snprintf(path, sizeof path, "%s/demo/train.json", WORK);
    RR_ASSERT(manifest_load(path, &g_man, err, sizeof err) == 0);
    snprintf(g_images, sizeof g_images, "%s/demo/images", WORK);
    g_jc = jpeg_codec_new();

    char shards[1200];
    snprintf(shards, sizeof shards, "%s/shards", WORK);
    LoaderConfig c = base_cfg(shards);
    Loader* L = loader_open(&c, NULL, err, sizeof err);
    RR_ASSERT(L);
    int N = loader_sample_count(L);
    CHECK(N == 300, "N = %d", N);
    /* global index -> id, read from the shard index */
    g_ids_by_global = calloc(N, sizeof(char*));
    {
        int g = 0;
        for (int k = 0;; k++) {
            snprintf(path, sizeof path, "%s/shard-%05d.rrs", shards, k);
            Shard s;
            if (access(path, F_OK) != 0) break;
            RR_ASSERT(shard_open(path, &s, err, sizeof err) == 0);
            CHECK(s.info.tokenizer_hash == tokenizer_hash(g_tok), "tokenizer hash in header");
            for (uint64_t i = 0; i < s.n; i++) g_ids_by_global[g++] = strdup(s.ids + s.entries[i].id_off);
            shard_close(&s);
        }
        CHECK(g == N, "ids %d", g);
    }
    /* patch counts vary several-fold */
    {
        int mn = 1 << 30, mx = 0;
        for (int i = 0; i < N; i++) {
            int l = loader_sample_tokens(L, i);
            mn = l < mn ? l : mn, mx = l > mx ? l : mx;
        }
        CHECK(mx >= 4 * mn, "sample lengths %d..%d do not vary several-fold", mn, mx);
    }

    /* 1. round trip, every policy: each sample of an epoch comes out once, equal to the manifest + JPEGs */
    const char* pol_names[] = {"fifo", "ffd", "balanced"};
    for (int pol = 0; pol < 3; pol++) {
        loader_close(L);
        c = base_cfg(shards);
        c.policy = (LoaderPolicy)pol;
        c.workers = 2;
        L = loader_open(&c, NULL, err, sizeof err);
        RR_ASSERT(L);
        int64_t* seen = calloc(N, sizeof(int64_t));
        int64_t got = 0;
        int steps = 0;
        while (got < N - c.window - 40) got += drain(L, 1, seen, N, 1, &c), steps++;
        int dup = 0, miss = 0;
        for (int i = 0; i < N; i++) dup += seen[i] > 1;
        LoaderStats st;
        loader_stats(L, &st);
        CHECK(dup == 0, "%s: %d samples twice within the first epoch", pol_names[pol], dup);
        CHECK(st.skipped_damaged == 0 && st.skipped_oversize == 0, "nothing skipped");
        (void)miss;
        /* run on into later epochs: every sample keeps coming */
        drain(L, 40, seen, N, 0, &c);
        for (int i = 0; i < N; i++) miss += seen[i] == 0;
        CHECK(miss == 0, "%s: %d samples never handed out over several epochs", pol_names[pol], miss);
        free(seen);
        printf("round trip %s: %d steps checked bit for bit against the manifest and JPEGs\n", pol_names[pol], steps);
    }
    loader_close(L);

    /* 2. determinism: worker count changes nothing; the seed changes the order */
    {
        uint64_t d[3];
        int workers[3] = {1, 3, 1};
        for (int i = 0; i < 3; i++) {
            c = base_cfg(shards);
            c.workers = workers[i];
            c.policy = LOADER_POLICY_BALANCED;
            if (i == 2) c.seed = 8;
            L = loader_open(&c, NULL, err, sizeof err);
            d[i] = digest_steps(L, 12);
            loader_close(L);
        }
        CHECK(d[0] == d[1], "1 and 3 workers gave different data");
        CHECK(d[0] != d[2], "seed 7 and seed 8 gave the same data");
    }

    /* 3. resume: position after k steps, through JSON, replays the same steps (fifo, ffd, balanced) */
    for (int pol = 0; pol < 3; pol++)
        for (int k = 1; k <= 7; k += 3) {
            c = base_cfg(shards);
            c.policy = (LoaderPolicy)pol;
            L = loader_open(&c, NULL, err, sizeof err);
            drain(L, k, NULL, N, 0, &c);
            LoaderPos pos, back;
            loader_get_pos(L, &pos);
            char* js = loader_pos_to_json(&pos);
            CHECK(loader_pos_from_json(js, &back, err, sizeof err) == 0, "%s", err);
            CHECK(!memcmp(&pos, &back, sizeof pos), "position JSON round trip: %s", js);
            uint64_t cont = digest_steps(L, 8);
            LoaderStats s1;
            loader_stats(L, &s1);
            loader_close(L);
            Loader* R = loader_open(&c, &back, err, sizeof err);
            CHECK(R != NULL, "resume: %s", err);
            if (R) {
                uint64_t res = digest_steps(R, 8);
                LoaderStats s2;
                loader_stats(R, &s2);
                CHECK(cont == res, "%s: resume after %d steps gives other data (%s)", pol_names[pol], k, js);
                CHECK(s1.samples == s2.samples && s1.steps == s2.steps, "%s: counters after resume %lld/%lld",
                      pol_names[pol], (long long)s1.samples, (long long)s2.samples);
                loader_close(R);
            }
            free(js);
        }
    /* loader_seek on an open loader: back to a position saved earlier replays the same steps */
    {
        c = base_cfg(shards);
        c.policy = LOADER_POLICY_BALANCED;
        L = loader_open(&c, NULL, err, sizeof err);
        drain(L, 2, NULL, N, 0, &c);
        LoaderPos pos;
        loader_get_pos(L, &pos);
        uint64_t first = digest_steps(L, 5);
        drain(L, 3, NULL, N, 0, &c);
        CHECK(loader_seek(L, &pos, err, sizeof err) == 0, "seek: %s", err);
        uint64_t again = digest_steps(L, 5);
        CHECK(first == again, "loader_seek back 8 steps gives other data");
        loader_close(L);
    }
    /* a position from another configuration is refused */
    {
        c = base_cfg(shards);
        L = loader_open(&c, NULL, err, sizeof err);
        drain(L, 2, NULL, N, 0, &c);
        LoaderPos pos;
        loader_get_pos(L, &pos);
        loader_close(L);
        c.microbatch_tokens = 300;
        L = loader_open(&c, &pos, err, sizeof err);
        CHECK(L == NULL && strstr(err, "another data set or packing configuration"), "foreign position: %s", err);
        if (L) loader_close(L);
    }

    /* 4. DP: replica r of R (M microbatches each) gets microbatches r, r + R, ... of the step of one
     *    process with M x R microbatches, bit for bit (ids, targets, samples, pixels), for every policy;
     *    every replica's position equals the one process's, and a position resumes under the other
     *    layout (one process -> replica, replica -> one process) with the same following steps. */
    for (int pol = 0; pol < 3; pol++) {
        enum { R = 3, M = 2, STEPS = 6 };
        LoaderConfig one = base_cfg(shards);
        one.policy = (LoaderPolicy)pol;
        one.microbatches = M * R;
        one.workers = 2;
        Loader* L1 = loader_open(&one, NULL, err, sizeof err);
        RR_ASSERT(L1);
        Loader* Lr[R];
        LoaderConfig rc[R];
        for (int r = 0; r < R; r++) {
            rc[r] = one;
            rc[r].microbatches = M;
            rc[r].dp_rank = r, rc[r].dp_size = R;
            rc[r].workers = 1 + r; /* 1, 2, 3: deferred decoding on that many threads */
            Lr[r] = loader_open(&rc[r], NULL, err, sizeof err);
            CHECK(Lr[r] != NULL, "dp loader: %s", err);
        }
        int bad = 0;
        int64_t kept_images = 0; /* images in replica 0's microbatches handed out */
        LoaderPos pos1 = {0}, posr = {0}, mid1 = {0};
        for (int st = 0; st < STEPS && !bad; st++) {
            LoaderStep s1;
            CHECK(loader_next_step(L1, &s1, err, sizeof err) == 0, "%s", err);
            int64_t nsup = 0;
            for (int r = 0; r < R; r++) {
                LoaderStep sr;
                if (loader_next_step(Lr[r], &sr, err, sizeof err) != 0) {
                    CHECK(0, "replica %d: %s", r, err);
                    bad = 1;
                    break;
                }
                CHECK(sr.M == M, "replica %d: %d microbatches", r, sr.M);
                for (int m = 0; m < M; m++)
                    if (mb_digest(&sr.mbs[m]) != mb_digest(&s1.mbs[m * R + r])) bad++;
                for (int m = 0; m < M; m++) check_microbatch(&sr.mbs[m], rc[r].patch, rc[r].min_patches,
                                                              rc[r].max_patches, rc[r].microbatch_tokens, 1);
                nsup += sr.n_supervised;
                for (int m = 0; r == 0 && m < M; m++) kept_images += sr.mbs[m].I;
                loader_get_pos(Lr[r], &posr);
                loader_get_pos(L1, &pos1);
                if (memcmp(&posr, &pos1, sizeof pos1)) {
                    char* a = loader_pos_to_json(&posr);
                    char* b = loader_pos_to_json(&pos1);
                    CHECK(0, "%s: replica %d position after step %d: %s, one process %s", pol_names[pol], r, st + 1, a, b);
                    free(a), free(b);
                    bad++;
                }
            }
            CHECK(nsup == s1.n_supervised, "%s step %d: replicas' supervised targets %lld, one process %lld",
                  pol_names[pol], st + 1, (long long)nsup, (long long)s1.n_supervised);
            if (st == 2) mid1 = pos1;
        }
        CHECK(bad == 0, "%s: %d replica microbatches differ from the one-process step's", pol_names[pol], bad);
        /* replica 1 resumed from the one-process position after 3 steps replays its share of steps 4.. */
        Loader* Q = loader_open(&rc[1], &mid1, err, sizeof err);
        CHECK(Q != NULL, "%s: a one-process position refused by a replica: %s", pol_names[pol], err);
        Loader* O = loader_open(&one, &mid1, err, sizeof err);
        CHECK(O != NULL, "%s: %s", pol_names[pol], err);
        for (int st = 3; Q && O && st < STEPS; st++) {
            LoaderStep sq, so;
            CHECK(loader_next_step(Q, &sq, err, sizeof err) == 0 && loader_next_step(O, &so, err, sizeof err) == 0, "%s", err);
            for (int m = 0; m < M; m++)
                CHECK(mb_digest(&sq.mbs[m]) == mb_digest(&so.mbs[m * R + 1]), "%s: resumed replica 1, step %d, "
                      "microbatch %d differs", pol_names[pol], st + 1, m);
        }
        if (Q) loader_close(Q);
        if (O) loader_close(O);
        /* and the reverse: a replica's position opens a one-process loader at the same step */
        loader_get_pos(Lr[2], &posr);
        O = loader_open(&one, &posr, err, sizeof err);
        CHECK(O != NULL, "%s: a replica position refused by one process: %s", pol_names[pol], err);
        if (O) {
            uint64_t a = digest_steps(O, 2), b = digest_steps(L1, 2);
            CHECK(a == b, "%s: one process resumed from a replica's position gives other data", pol_names[pol]);
            loader_close(O);
        }
        /* another global step (R x (M + 1)) is another plan: refused */
        LoaderConfig other = rc[0];
        other.microbatches = M + 1;
        O = loader_open(&other, &posr, err, sizeof err);
        CHECK(O == NULL && strstr(err, "another data set or packing configuration"), "%s: foreign global step: %s",
              pol_names[pol], O ? "accepted" : err);
        if (O) loader_close(O);
        /* decoding: replica 0 decoded the images of its own microbatches only, those handed out and at most
         * the 2 steps its planner prepares ahead (not the other replicas' 2/3 of each step) */
        LoaderStats s1, s2;
        loader_stats(L1, &s1);
        loader_stats(Lr[0], &s2);
        int64_t ahead = 0;
        for (int st = 0; st < 2; st++) {
            LoaderStep sr;
            CHECK(loader_next_step(Lr[0], &sr, err, sizeof err) == 0, "%s", err);
            for (int m = 0; m < sr.M; m++) ahead += sr.mbs[m].I;
        }
        CHECK(s2.images_decoded >= kept_images && s2.images_decoded <= kept_images + ahead,
              "%s: replica 0 decoded %lld images; its microbatches of %d steps hold %lld (+ %lld in the next 2)",
              pol_names[pol], (long long)s2.images_decoded, STEPS, (long long)kept_images, (long long)ahead);
        printf("dp %s: %d replicas x %d microbatches = one process x %d, %d steps bit for bit, positions equal, "
               "resume both ways; images decoded: one process %lld (workers, read ahead), replica 0 %lld (its "
               "microbatches: %lld, + %lld planned ahead at most)\n", pol_names[pol], R, M, M * R, STEPS,
               (long long)s1.images_decoded, (long long)s2.images_decoded, (long long)kept_images, (long long)ahead);
        for (int r = 0; r < R; r++)
            if (Lr[r]) loader_close(Lr[r]);
        loader_close(L1);
    }

    /* 5. decode_images = 0 (later pipeline stages): same plan, no pixels */
    {
        c = base_cfg(shards);
        uint64_t a, b;
        L = loader_open(&c, NULL, err, sizeof err);
        drain(L, 3, NULL, N, 0, &c);
        loader_close(L);
        c.decode_images = 0;
        L = loader_open(&c, NULL, err, sizeof err);
        drain(L, 3, NULL, N, 1, &c);
        loader_close(L);
        c.decode_images = 1;
        /* ids/targets digest equal with and without pixels */
        L = loader_open(&c, NULL, err, sizeof err);
        LoaderStep s1;
        loader_next_step(L, &s1, err, sizeof err);
        a = rr_fnv1a64(s1.mbs[0].targets, sizeof(int32_t) * s1.mbs[0].T);
        loader_close(L);
        c.decode_images = 0;
        L = loader_open(&c, NULL, err, sizeof err);
        loader_next_step(L, &s1, err, sizeof err);
        b = rr_fnv1a64(s1.mbs[0].targets, sizeof(int32_t) * s1.mbs[0].T);
        loader_close(L);
        CHECK(a == b, "plan differs without pixels");
    }

    /* 6. over-budget samples: error naming one, or skipped and counted */
    {
        c = base_cfg(shards);
        c.microbatch_tokens = 60;
        L = loader_open(&c, NULL, err, sizeof err);
        CHECK(L == NULL && strstr(err, "above data.microbatch_tokens = 60") && strstr(err, "sample") &&
                  strstr(err, "id 'train_"), "oversize error: %s", err);
        c.skip_oversize = 1;
        L = loader_open(&c, NULL, err, sizeof err);
        CHECK(L != NULL, "%s", err);
        drain(L, 10, NULL, N, 1, &c);
        LoaderStats st;
        loader_stats(L, &st);
        CHECK(st.skipped_oversize > 0, "oversize samples not counted");
        loader_close(L);
        /* every sample over the budget: an error, not an endless search */
        c.microbatch_tokens = 16;
        L = loader_open(&c, NULL, err, sizeof err);
        CHECK(L != NULL, "%s", err);
        LoaderStep stp;
        CHECK(L && loader_next_step(L, &stp, err, sizeof err) == -1 && strstr(err, "no usable sample"),
              "all oversize: %s", err);
        loader_close(L);
    }

    /* 7. damage. A copy of the shards with one flipped byte inside one frame: that sample is reported
     *    and skipped, every other sample still comes out intact. */
    {
        snprintf(path, sizeof path, "%s/bad", WORK);
        RR_ASSERT(rr_remove_tree(path) == 0 && proc_copy_dir(shards, path) == 0);
        snprintf(path, sizeof path, "%s/bad/shard-00001.rrs", WORK);
        Shard s;
        RR_ASSERT(shard_open(path, &s, err, sizeof err) == 0);
        long off = (long)(s.entries[5].offset + s.entries[5].size / 2);
        char victim[256];
        snprintf(victim, sizeof victim, "%s", s.ids + s.entries[5].id_off);
        shard_close(&s);
        flip_byte(path, off);
        char bad[1200];
        snprintf(bad, sizeof bad, "%s/bad", WORK);
        c = base_cfg(bad);
        c.policy = LOADER_POLICY_FIFO;
        c.microbatches = 1;
        L = loader_open(&c, NULL, err, sizeof err);
        RR_ASSERT(L);
        int64_t* seen = calloc(N, sizeof(int64_t));
        int64_t got = 0;
        LoaderStats st;
        fprintf(stderr, "(a warning naming %s sample 5 is expected below)\n", path);
        for (;;) {
            got += drain(L, 1, seen, N, 1, &c);
            loader_stats(L, &st);
            if (got + st.skipped_damaged >= N) break;
        }
        CHECK(st.skipped_damaged == 1, "damaged count %lld", (long long)st.skipped_damaged);
        int victim_seen = -1, others_missing = 0;
        for (int i = 0; i < N; i++) {
            if (!strcmp(g_ids_by_global[i], victim)) victim_seen = (int)seen[i];
            else others_missing += seen[i] == 0;
        }
        CHECK(victim_seen == 0, "the damaged sample was handed out");
        CHECK(others_missing == 0, "%d intact samples lost next to a damaged one", others_missing);
        loader_close(L);
        free(seen);
        /* fatal_errors: the step fails with shard, sample index and id */
        c.fatal_errors = 1;
        L = loader_open(&c, NULL, err, sizeof err);
        int rc = 0;
        for (int i = 0; i < 400 && rc == 0; i++) {
            LoaderStep stp;
            rc = loader_next_step(L, &stp, err, sizeof err);
        }
        CHECK(rc == -1 && strstr(err, "shard-00001.rrs sample 5") && strstr(err, victim) && strstr(err, "corrupt frame"),
              "fatal damage message: %s", err);
        loader_close(L);
    }
    /* 8. an intact frame whose image does not decode (pack decoded it; this copy's bytes do not): no decode
     *    changes the plan (steps and positions are the intact shards'); the sample is dropped from its step
     *    and counted; a rank that decodes nothing (decode_images = 0) and replicas that decode other
     *    microbatches drop exactly the same samples when given the decoding ranks' findings (agree_skips);
     *    a microbatch whose every sample is dropped keeps a harmless placeholder; fatal_errors names it. */
    undecodable_image(shards, N);
    /* truncated shard, wrong magic, damaged index, damaged header: the shard is refused by name */
    {
        snprintf(path, sizeof path, "%s/shard-00000.rrs", shards);
        char p2[1200];
        snprintf(p2, sizeof p2, "%s/cut.rrs", WORK);
        copy_file(path, p2);
        struct stat stt;
        stat(p2, &stt);
        RR_ASSERT(truncate(p2, stt.st_size / 2) == 0);
        Shard s;
        CHECK(shard_open(p2, &s, err, sizeof err) == -1 && strstr(err, "cut.rrs: truncated shard"), "truncated: %s", err);
        copy_file(path, p2);
        flip_byte(p2, 0);
        CHECK(shard_open(p2, &s, err, sizeof err) == -1 && strstr(err, "wrong magic"), "magic: %s", err);
        copy_file(path, p2);
        flip_byte(p2, stt.st_size - 3);
        CHECK(shard_open(p2, &s, err, sizeof err) == -1 && strstr(err, "damaged index"), "index: %s", err);
        copy_file(path, p2);
        flip_byte(p2, 20);
        CHECK(shard_open(p2, &s, err, sizeof err) == -1 && strstr(err, "damaged shard header"), "header: %s", err);
        copy_file(path, p2);
        flip_byte(p2, 8);
        CHECK(shard_open(p2, &s, err, sizeof err) == -1 && strstr(err, "version"), "version: %s", err);
        /* the loader names the file */
        c = base_cfg(p2);
        L = loader_open(&c, NULL, err, sizeof err);
        CHECK(L == NULL && strstr(err, "cut.rrs"), "loader on a bad shard: %s", err);
        /* another tokenizer */
        c = base_cfg(shards);
        c.tokenizer_hash ^= 1;
        L = loader_open(&c, NULL, err, sizeof err);
        CHECK(L == NULL && strstr(err, "packed with another tokenizer"), "tokenizer hash: %s", err);
    }

    for (int i = 0; i < N; i++) free(g_ids_by_global[i]);
    free(g_ids_by_global);
    manifest_free(&g_man);
    tokenizer_free(g_tok);
    jpeg_codec_free(g_jc);
    if (check_failures) {
        fprintf(stderr, "%d check(s) failed\n", check_failures);
        return 1;
    }
    printf("test_data: all checks passed\n");
    return 0;
}
