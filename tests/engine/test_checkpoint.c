/* test_checkpoint.c — engine/checkpoint.c: a parameter table <-> a checksummed safetensors folder.
 *
 *   test_checkpoint DIR   save / load / latest / prune and damaged checkpoints; checked values: XXH64 against its
 *                         reference vectors and zstd, a flipped mantissa / exponent / sign bit on disk, NaN and
 *                         negative second moments refused on save and on load, naming the tensor; the run's record
 *                         (runtime/train/runckpt.h) carried through state.json as it is; a checkpoint of more
 *                         shard files than the descriptor limit allows loads */
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "engine/checkpoint.h"
#include "engine/safetensors.h"
#include "runtime/train/runckpt.h"

#include "tests/support/check.h"

/* A two-tensor parameter table built by hand (engine/params.c is not needed for the file format). */
static void table_make(ParamTable* pt, float base) {
    memset(pt, 0, sizeof *pt);
    pt->n = 2;
    pt->specs = callocCheck(2, sizeof(ParamSpec));
    snprintf(pt->specs[0].name, sizeof pt->specs[0].name, "text.blocks.0.attn.q.weight");
    pt->specs[0].ndim = 2, pt->specs[0].shape[0] = 3, pt->specs[0].shape[1] = 4, pt->specs[0].numel = 12;
    snprintf(pt->specs[1].name, sizeof pt->specs[1].name, "text.norm.weight");
    pt->specs[1].ndim = 1, pt->specs[1].shape[0] = 5, pt->specs[1].numel = 5, pt->specs[1].offset = 12, pt->specs[1].goff = 12;
    pt->total = 17, pt->gtotal = 17; /* nothing frozen: gradients and moments at the value offsets */
    pt->data = mallocCheck(17 * 4), pt->grad = callocCheck(17, 4);
    pt->m = mallocCheck(17 * 4), pt->v = mallocCheck(17 * 4);
    for (int i = 0; i < 17; i++) {
        pt->data[i] = base + 0.1f * (float)i;
        pt->m[i] = base - 1e-3f * (float)i;
        pt->v[i] = 1e-7f * (float)(i + 1);
    }
}

static void table_free(ParamTable* pt) {
    free(pt->specs), free(pt->data), free(pt->grad), free(pt->m), free(pt->v);
}

static int count_pruned_entries(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, ".pruned-", 8)) n++;
    closedir(d);
    return n;
}

/* Flip bit `bit` of float element `elem` of tensor `name` in the safetensors file `path` (in place). */
static void flip_tensor_bit(const char* path, const char* name, size_t elem, int bit) {
    StFile f;
    char err[512];
    RR_ASSERT(st_load(&f, path, err, sizeof err) == 0);
    const StTensor* t = st_find(&f, name);
    RR_ASSERT(t && elem * 4 < t->end - t->begin);
    long off = (long)(f.data_off + t->begin + elem * 4);
    st_free(&f);
    FILE* fp = fopen(path, "r+b");
    RR_ASSERT(fp);
    uint32_t u;
    RR_ASSERT(fseek(fp, off, SEEK_SET) == 0 && fread(&u, 4, 1, fp) == 1);
    u ^= 1u << bit;
    RR_ASSERT(fseek(fp, off, SEEK_SET) == 0 && fwrite(&u, 4, 1, fp) == 1 && fclose(fp) == 0);
}

static int count_entries(const char* dir, const char* prefix) {
    DIR* d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent* e; (e = readdir(d));) n += !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

/* Loaded state is checked and written state is finite (docs/reliability.md). */
static void checkpoint_values_test(const char* dir) {
    /* XXH64: the reference vectors (xxHash's own and python-xxhash's README), and zstd's frame checksum
     * (the low 32 bits of XXH64 with seed 0) on every length 0..299, an independent implementation */
    CHECK(rr_xxh64("", 0, 0) == 0xEF46DB3751D8E999ull, "xxh64('')");
    CHECK(rr_xxh64("a", 1, 0) == 0xD24EC4F1A98C6E5Bull, "xxh64('a')");
    CHECK(rr_xxh64("abc", 3, 0) == 0x44BC2CF5AD770999ull, "xxh64('abc')");
    CHECK(rr_xxh64("Nobody inspects the spammish repetition", 39, 0) == 0xFBCEA83C8A378BF1ull, "xxh64(39 bytes)");
    unsigned char buf[300], frame[512];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 131 + 7);
    ZSTD_CCtx* cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    for (size_t n = 0; n < sizeof buf; n++) {
        size_t k = ZSTD_compress2(cc, frame, sizeof frame, buf, n);
        RR_ASSERT(!ZSTD_isError(k) && k >= 4);
        uint32_t z;
        memcpy(&z, frame + k - 4, 4);
        CHECK(z == (uint32_t)rr_xxh64(buf, n, 0), "xxh64 of %zu bytes differs from zstd's checksum", n);
    }
    ZSTD_freeCCtx(cc);

    char root[1024], out[4096], err[1024], model[4200], opt[4200];
    snprintf(root, sizeof root, "%s/ckpt_values", dir);
    CHECK(rr_remove_tree(root) == 0, "rm");
    ParamTable a, b;
    table_make(&a, 1.5f);
    table_make(&b, 0.0f);
    CheckpointState st = {.step = 11, .opt_step = 11,
                          .record = "{\"recipe_hash\":\"0000000000000000\",\"seed\":\"1\",\"data_seed\":\"2\",\"loader\":null}"},
                    got;
    CHECK(checkpoint_save(root, &a, &st, NULL, out, sizeof out, err, sizeof err) == 0, "%s", err);
    snprintf(model, sizeof model, "%s/model.safetensors", out);
    snprintf(opt, sizeof opt, "%s/optimizer.safetensors", out);
    CHECK(checkpoint_load(out, &b, &got, NULL, err, sizeof err) == 0, "%s", err);
    checkpoint_state_free(&got);

    struct {
        const char* file;
        const char* tensor;
        size_t elem;
        int bit;
        const char* expect;
    } cases[] = {
        /* the lowest mantissa bit: 1.7 becomes 1.6999999, a plausible value only the checksum sees */
        {model, "text.norm.weight", 2, 0, "fails its checksum"},
        {opt, "m.text.blocks.0.attn.q.weight", 7, 3, "fails its checksum"},
        /* the top exponent bit of a value in [1, 2): NaN or infinity */
        {model, "text.blocks.0.attn.q.weight", 1, 30, "holds a NaN value"},
        /* the lowest exponent bit: 1.5 becomes 0.75, plausible again */
        {model, "text.blocks.0.attn.q.weight", 0, 23, "fails its checksum"},
        /* the sign of a second moment */
        {opt, "v.text.norm.weight", 3, 31, "but an AdamW second moment is never negative"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        flip_tensor_bit(cases[c].file, cases[c].tensor, cases[c].elem, cases[c].bit);
        char want[300];
        snprintf(want, sizeof want, "%s: tensor '%s' ", cases[c].file, cases[c].tensor);
        CHECK(checkpoint_load(out, &b, &got, NULL, err, sizeof err) != 0 && strstr(err, want) &&
                  strstr(err, cases[c].expect),
              "bit %d of %s[%zu]: %s", cases[c].bit, cases[c].tensor, cases[c].elem, err);
        flip_tensor_bit(cases[c].file, cases[c].tensor, cases[c].elem, cases[c].bit); /* and back */
        CHECK(checkpoint_load(out, &b, &got, NULL, err, sizeof err) == 0, "restored: %s", err);
        checkpoint_state_free(&got);
    }
    /* a model file without checksums (written by an older build, or by hand) */
    {
        StWriter* w = st_writer_new();
        for (int i = 0; i < a.n; i++) st_writer_add(w, a.specs[i].name, DTYPE_F32, a.specs[i].ndim, a.specs[i].shape,
                                                    a.data + a.specs[i].offset);
        checkpoint_identity_meta(w, &st, NULL); /* the folder's own file in every other respect */
        CHECK(st_writer_write(w, model, err, sizeof err) == 0, "%s", err);
        st_writer_free(w);
        CHECK(checkpoint_load(out, &b, &got, NULL, err, sizeof err) != 0 && strstr(err, "has no checksum") &&
                  strstr(err, "'text.blocks.0.attn.q.weight'"),
              "no checksum: %s", err);
    }
    /* a folder where a safetensors file is expected */
    {
        StFile f;
        CHECK(st_load(&f, out, err, sizeof err) != 0 && strstr(err, "is a directory, expected a .safetensors file"),
              "folder: %s", err);
    }

    /* never written: a NaN parameter, an infinite first moment, a negative second moment */
    st.step = 12;
    struct {
        float* x;
        float bad;
        const char* expect;
    } saves[] = {{&a.data[14], NAN, "tensor 'text.norm.weight' holds a NaN value (nan at element 2)"},
                 {&a.m[4], INFINITY, "tensor 'm.text.blocks.0.attn.q.weight' holds an infinite value (inf at element 4)"},
                 {&a.v[0], -1e-9f, "tensor 'v.text.blocks.0.attn.q.weight' holds a negative value (-1e-09 at element 0)"}};
    for (size_t c = 0; c < sizeof saves / sizeof saves[0]; c++) {
        float keep = *saves[c].x;
        *saves[c].x = saves[c].bad;
        CHECK(checkpoint_save(root, &a, &st, NULL, out, sizeof out, err, sizeof err) != 0 &&
                  strstr(err, "refusing to write the checkpoint of step 12") && strstr(err, saves[c].expect),
              "save %zu: %s", c, err);
        *saves[c].x = keep;
        CHECK(count_entries(root, "step-00000012") == 0 && count_entries(root, ".step-") == 0,
              "a refused save left a folder in %s", root);
    }
    char latest[4096];
    CHECK(runckpt_latest(root, latest, sizeof latest) == 11, "the newest checkpoint is no longer step 11");

    /* a checkpoint of the previous format version is refused with what to do */
    snprintf(model, sizeof model, "%s/step-00000011/state.json", root);
    {
        size_t n;
        char* text = rr_read_file(model, &n, RR_MAX_JSON);
        char* v = text ? strstr(text, "\"version\":") : NULL;
        CHECK(v != NULL, "no version in %s", model);
        v += strlen("\"version\":");
        while (*v == ' ' || *v == '\t') v++;
        CHECK(*v == '0' + CHECKPOINT_VERSION, "version %c in %s", *v, model);
        *v = '1';
        CHECK(rr_write_file_atomic(model, text, n) == 0, "rewrite %s", model);
        free(text);
    }
    snprintf(model, sizeof model, "%s/step-00000011", root);
    CHECK(checkpoint_load(model, &b, &got, NULL, err, sizeof err) != 0 && strstr(err, "checkpoint version 1") &&
              strstr(err, "start the run again"),
          "old version: %s", err);
    table_free(&a);
    table_free(&b);
}

static int checkpoint_test(const char* dir) {
    checkpoint_values_test(dir);
    char root[1024], out[4096], err[1024], p[4200];
    snprintf(root, sizeof root, "%s/ckpt_test", dir);
    CHECK(rr_remove_tree(root) == 0, "rm");
    ParamTable a;
    table_make(&a, 1.5f);
    /* a run's record (runtime/train/runckpt.h), carried through state.json as it is */
    RunRecord rec = {.recipe_hash = 0xfedcba9876543210ull, .seed = 1234, .data_seed = 7, .loader = "{\"epoch\":0,\"cursor\":12}"};
    CheckpointState st = {.step = 3, .opt_step = 3, .record = runckpt_record_json(&rec, err, sizeof err)};
    CHECK(st.record, "%s", err);
    CHECK(checkpoint_save(root, &a, &st, NULL, out, sizeof out, err, sizeof err) == 0, "%s", err);
    snprintf(p, sizeof p, "%s/step-00000003", root);
    CHECK(!strcmp(out, p), "%s", out);
    st.step = 5;
    CHECK(checkpoint_save(root, &a, &st, NULL, out, sizeof out, err, sizeof err) == 0, "%s", err);
    /* a leftover temporary folder (a crash mid-save) is never taken for a checkpoint */
    snprintf(p, sizeof p, "%s/.step-00000009.tmp.1", root);
    mkdir(p, 0755);
    char latest[4096];
    CHECK(runckpt_latest(root, latest, sizeof latest) == 5, "latest");
    CHECK(strstr(latest, "step-00000005") != NULL, "%s", latest);

    ParamTable b;
    table_make(&b, -7.0f);
    CheckpointState got;
    CHECK(checkpoint_load(latest, &b, &got, NULL, err, sizeof err) == 0, "%s", err);
    RunRecord back;
    CHECK(runckpt_record_parse(latest, got.record, &back, err, sizeof err) == 0, "%s", err);
    CHECK(got.step == 5 && got.opt_step == 3 && back.recipe_hash == 0xfedcba9876543210ull && back.seed == 1234 &&
              back.data_seed == 7,
          "state");
    CHECK(back.loader && !strcmp(back.loader, "{\"epoch\":0,\"cursor\":12}"), "loader %s", back.loader);
    runckpt_record_free(&back);
    CHECK(!memcmp(a.data, b.data, 17 * 4) && !memcmp(a.m, b.m, 17 * 4) && !memcmp(a.v, b.v, 17 * 4),
          "values differ after reload");
    checkpoint_state_free(&got);

    /* a table of another shape: error names the file and the tensor */
    b.specs[1].shape[0] = 6;
    CHECK(checkpoint_load(latest, &b, &got, NULL, err, sizeof err) != 0 && strstr(err, "model.safetensors") &&
              strstr(err, "'text.norm.weight' has shape (5), expected (6)"),
          "%s", err);
    b.specs[1].shape[0] = 5;
    snprintf(b.specs[1].name, sizeof b.specs[1].name, "text.final_norm.weight");
    CHECK(checkpoint_load(latest, &b, &got, NULL, err, sizeof err) != 0 && strstr(err, "'text.final_norm.weight' is missing"),
          "%s", err);
    snprintf(b.specs[1].name, sizeof b.specs[1].name, "text.norm.weight");
    /* a truncated optimizer file */
    snprintf(p, sizeof p, "%s/optimizer.safetensors", latest);
    CHECK(truncate(p, 100) == 0, "truncate");
    CHECK(checkpoint_load(latest, &b, &got, NULL, err, sizeof err) != 0 && strstr(err, "optimizer.safetensors"), "%s", err);
    /* not a checkpoint */
    CHECK(checkpoint_load(root, &b, &got, NULL, err, sizeof err) != 0 && strstr(err, "state.json"), "%s", err);

    /* prune keeps the newest; it renames a folder out of step-* before deleting it, so a run killed
       while pruning leaves a hidden .pruned-* folder, which the next prune removes */
    st.step = 7;
    CHECK(checkpoint_save(root, &a, &st, NULL, out, sizeof out, err, sizeof err) == 0, "%s", err);
    snprintf(p, sizeof p, "%s/.pruned-00000001.999", root);
    CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
    snprintf(p, sizeof p, "%s/.pruned-00000001.999/model.safetensors", root);
    FILE* left = fopen(p, "wb");
    CHECK(left && fputs("partly deleted", left) >= 0 && fclose(left) == 0, "write %s", p);
    runckpt_prune(root, 2);
    CHECK(count_pruned_entries(root) == 0, "prune left .pruned-* folders in %s", root);
    snprintf(p, sizeof p, "%s/step-00000003", root);
    CHECK(access(p, F_OK) != 0, "step 3 not pruned");
    snprintf(p, sizeof p, "%s/step-00000005/state.json", root);
    CHECK(access(p, F_OK) == 0, "step 5 pruned");
    table_free(&a);
    table_free(&b);
    free(st.record);
    if (check_failures) fprintf(stderr, "%d failure(s)\n", check_failures);
    else printf("checkpoint test: ok\n");
    return check_failures ? 1 : 0;
}

/* A checkpoint of more shard files than the process may hold open (RLIMIT_NOFILE lowered to 40): 100 pipeline
 * shards of one 3-value tensor each, model and optimiser files, load whole (the reader closes each file's
 * descriptor past ST_KEEP_OPEN files and reopens it per read: engine/safetensors.h st_close_fd). */
static void test_many_shards(const char* dir) {
    enum { NS = 100 };
    char root[1024], tmp[4200], out[4200], err[1024];
    snprintf(root, sizeof root, "%s/ckpt_many", dir);
    CHECK(rr_remove_tree(root) == 0, "rm");
    ParamTable all, one;
    memset(&all, 0, sizeof all);
    all.n = NS, all.total = all.gtotal = 3 * NS;
    all.specs = callocCheck(NS, sizeof(ParamSpec));
    all.data = callocCheck(3 * NS, 4), all.grad = callocCheck(3 * NS, 4);
    all.m = callocCheck(3 * NS, 4), all.v = callocCheck(3 * NS, 4);
    for (int i = 0; i < NS; i++) {
        ParamSpec* s = &all.specs[i];
        snprintf(s->name, sizeof s->name, "text.blocks.%d.norm.weight", i);
        s->ndim = 1, s->shape[0] = 3, s->numel = 3, s->offset = s->goff = (size_t)(3 * i);
    }
    CheckpointState st = {.step = 4, .opt_step = 4, .record = NULL}, got;
    snprintf(st.layout, sizeof st.layout, "pp=%d tp=1 chunks=1", NS);
    CHECK(checkpoint_shard_begin(root, 4, tmp, sizeof tmp, err, sizeof err) == 0, "%s", err);
    char names[NS][16];
    const char* shards[NS];
    float val[3], m[3], v[3];
    for (int i = 0; i < NS; i++) {
        one = all;
        one.n = 1, one.total = one.gtotal = 3;
        ParamSpec spec = all.specs[i];
        spec.offset = spec.goff = 0;
        one.specs = &spec;
        for (int k = 0; k < 3; k++) val[k] = (float)i + 0.25f * (float)k, m[k] = -val[k], v[k] = 1e-3f * (float)(k + 1);
        one.data = val, one.m = m, one.v = v;
        snprintf(names[i], sizeof names[i], "pp%dc0", i);
        shards[i] = names[i];
        CHECK(checkpoint_shard_write(tmp, &one, &st, names[i], err, sizeof err) == 0, "%s", err);
    }
    CHECK(checkpoint_shard_commit(root, tmp, &st, shards, NS, out, sizeof out, err, sizeof err) == 0, "%s", err);
    if (check_failures) return;
    struct rlimit old, lim;
    CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0, "getrlimit");
    lim = old;
    lim.rlim_cur = 40;
    CHECK(setrlimit(RLIMIT_NOFILE, &lim) == 0, "setrlimit");
    int rc = checkpoint_load(out, &all, &got, NULL, err, sizeof err);
    setrlimit(RLIMIT_NOFILE, &old);
    CHECK(rc == 0, "a checkpoint of %d shards under a limit of 40 descriptors: %s", 2 * NS, err);
    if (rc == 0) checkpoint_state_free(&got);
    int bad = -1;
    for (int i = 0; i < NS && bad < 0 && rc == 0; i++)
        for (int k = 0; k < 3; k++)
            if (all.data[3 * i + k] != (float)i + 0.25f * (float)k || all.m[3 * i + k] != -all.data[3 * i + k]) bad = i;
    CHECK(bad < 0, "shard %d's values did not load", bad);
    free(all.specs), free(all.data), free(all.grad), free(all.m), free(all.v);
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_checkpoint DIR\n");
        return 2;
    }
    test_many_shards(argv[1]);
    return checkpoint_test(argv[1]);
}
