/* test_llama_logits.c — the LM logits of an imported checkpoint, for tests/runtime/hf/import_llama.py.
 *
 *   test_llama_logits CKPT D L H F V RMS_EPS ROPE_BASE OUT.safetensors [KEY=VALUE ...]
 *
 * KEY=VALUE: the LM variants as `rrfp-mm import llama` prints them: text_kv_heads=N, text_qkv_bias=true,
 * text_o_bias=true, tie_embeddings=true, rope_type=llama3, rope_factor=X, rope_low_freq_factor=X,
 * rope_high_freq_factor=X, rope_original_max_pos=N.
 *
 * Builds the model with that LM (and a tiny vision tower), starts it from CKPT through train.init_from's
 * loader (its report on stdout: every text.* tensor must load), forwards a text-only microbatch of two
 * packed samples (positions restart at each) and writes the microbatch and its logits (the step-dump
 * layout) to OUT. Exit 0 when that worked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint.h"
#include "runtime/model/model.h"
#include "tests/support/test_model_util.h"

int main(int argc, char** argv) {
    if (argc < 10) {
        fprintf(stderr, "usage: %s CKPT D L H F V RMS_EPS ROPE_BASE OUT.safetensors [KEY=VALUE ...]\n", argv[0]);
        return 2;
    }
    ModelConfig c = {.patch = 2, .Dv = 8, .Lv = 1, .Hv = 2, .Dt = atoi(argv[2]), .Lt = atoi(argv[3]), .Ht = atoi(argv[4]),
                     .F = atoi(argv[5]), .V = atoi(argv[6]), .min_patches = 1, .max_patches = 16, .init_std = 0.02f,
                     .seed = 1, .rms_eps = atof(argv[7]), .rope_base = atof(argv[8])};
    for (int i = 10; i < argc; i++) {
        const char* eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "not KEY=VALUE: %s\n", argv[i]);
            return 2;
        }
        const char* v = eq + 1;
        int on = !strcmp(v, "true") || !strcmp(v, "1");
#define KEY(k) (!strncmp(argv[i], k "=", strlen(k) + 1))
        if (KEY("text_kv_heads")) c.Hkv = atoi(v);
        else if (KEY("text_qkv_bias")) c.qkv_bias = on;
        else if (KEY("text_o_bias")) c.o_bias = on;
        else if (KEY("tie_embeddings")) c.tie_embeddings = on;
        else if (KEY("rope_type")) c.rope_llama3 = !strcmp(v, "llama3");
        else if (KEY("rope_factor")) c.rope_factor = atof(v);
        else if (KEY("rope_low_freq_factor")) c.rope_low_freq_factor = atof(v);
        else if (KEY("rope_high_freq_factor")) c.rope_high_freq_factor = atof(v);
        else if (KEY("rope_original_max_pos")) c.rope_original_max_pos = atof(v);
        else {
            fprintf(stderr, "unknown key: %s\n", argv[i]);
            return 2;
        }
#undef KEY
    }
    (void)tm_budget;
    char err[2048];
    if (model_config_check(&c, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    Stage st;
    stage_init(&st, &c, 0, c.Lt, &backend_cpu);
    if (checkpoint_init_from(argv[1], &st.params, stdout, err, sizeof err) != 0) {
        fprintf(stderr, "init_from: %s\n", err);
        return 1;
    }
    const char* spec = "p9 a6 | p4 a12"; /* two samples: 15 and 16 tokens */
    uint64_t rng = 2024;
    Microbatch mb;
    tm_microbatch(&mb, spec, c.V, c.patch, &rng);
    StageActs a;
    stage_acts_init(&a, &st, mb.T, 1, 0);
    float ls;
    stage_forward(&st, &a, &mb, NULL, NULL, &ls);
    int rc = stage_dump_microbatch(&st, &a, &mb, argv[9], err, sizeof err);
    if (rc != 0) fprintf(stderr, "%s\n", err);
    stage_acts_free(&a, &st);
    stage_free(&st);
    tm_microbatch_free(&mb);
    return rc ? 1 : 0;
}
