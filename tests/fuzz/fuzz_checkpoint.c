/* fuzz_checkpoint.c — libFuzzer target for loading a checkpoint folder (engine/checkpoint.c): the input
 * is state.json, then (after a "--8<--" line) the model's safetensors file, written into a scratch
 * folder and loaded with checkpoint_load into a two-tensor parameter table. Any bytes must load (only
 * when names, shapes, checksums and values are right) or give a message naming a file, never a crash.
 * FUZZ_SEED_DIR=DIR: first write a real checkpoint of that table as the seed DIR/real. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint.h"
#include "fuzz_util.h"

static void table_make(ParamTable* pt) {
    memset(pt, 0, sizeof *pt);
    pt->n = 2;
    pt->specs = calloc(2, sizeof(ParamSpec));
    snprintf(pt->specs[0].name, sizeof pt->specs[0].name, "text.blocks.0.attn.q.weight");
    pt->specs[0].ndim = 2, pt->specs[0].shape[0] = 3, pt->specs[0].shape[1] = 4, pt->specs[0].numel = 12;
    pt->specs[0].slice.dim = -1;
    snprintf(pt->specs[1].name, sizeof pt->specs[1].name, "text.norm.weight");
    pt->specs[1].ndim = 1, pt->specs[1].shape[0] = 5, pt->specs[1].numel = 5, pt->specs[1].offset = 12;
    pt->specs[1].goff = 12, pt->specs[1].slice.dim = -1;
    pt->total = 17, pt->gtotal = 17;
    pt->data = calloc(17, 4), pt->grad = calloc(17, 4);
    for (int i = 0; i < 17; i++) pt->data[i] = 0.5f + 0.1f * (float)i;
}

static void table_free(ParamTable* pt) { free(pt->specs), free(pt->data), free(pt->grad); }

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    const char* seed_dir = getenv("FUZZ_SEED_DIR");
    if (!seed_dir) return 0;
    ParamTable pt;
    table_make(&pt);
    char root[512], out[4096], err[1024], path[4600];
    snprintf(root, sizeof root, "%s/ck", fuzz_scratch());
    CheckpointState st = {.step = 7, .opt_step = 7,
                          .record = "{\"recipe_hash\":\"000000001234abcd\",\"seed\":\"1\",\"data_seed\":\"2\",\"loader\":null}"};
    if (checkpoint_save(root, &pt, &st, NULL, out, sizeof out, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_checkpoint: cannot write the seed checkpoint: %s\n", err);
        exit(1);
    }
    size_t n1, n2;
    snprintf(path, sizeof path, "%s/state.json", out);
    char* s = rr_read_file(path, &n1, RR_MAX_JSON);
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    char* m = rr_read_file(path, &n2, RR_MAX_SAFETENSORS);
    if (!s || !m) {
        fprintf(stderr, "fuzz_checkpoint: the seed checkpoint %s has no state.json or model.safetensors\n", out);
        exit(1);
    }
    char* seed = malloc(n1 + n2 + 16);
    memcpy(seed, s, n1);
    memcpy(seed + n1, FUZZ_SEP, sizeof FUZZ_SEP - 1);
    memcpy(seed + n1 + sizeof FUZZ_SEP - 1, m, n2);
    snprintf(path, sizeof path, "%s/real", seed_dir);
    fuzz_write(path, seed, n1 + sizeof FUZZ_SEP - 1 + n2);
    free(seed), free(s), free(m);
    fuzz_rm_rf(root);
    table_free(&pt);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const uint8_t* part[2];
    size_t len[2];
    int np = fuzz_split(data, size, part, len, 2);
    char dir[512], path[700], err[2048];
    snprintf(dir, sizeof dir, "%s/ckpt", fuzz_scratch());
    fuzz_rm_rf(dir);
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/state.json", dir);
    fuzz_write(path, part[0], len[0]);
    if (np > 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        fuzz_write(path, part[1], len[1]);
    }
    ParamTable pt;
    table_make(&pt);
    CheckpointState st;
    if (checkpoint_load(dir, &pt, &st, NULL, err, sizeof err) == 0) {
        checkpoint_state_free(&st);
    } else if (!strstr(err, dir)) {
        fprintf(stderr, "fuzz_checkpoint: a refusal that names no file of the folder: %s\n", err);
        abort();
    }
    table_free(&pt);
    return 0;
}
