/* test_llava_logits.c — the logits of an imported LLaVA checkpoint, for tests/runtime/hf/import_llava.py.
 *
 *   test_llava_logits CKPT OUT.safetensors KEY=VALUE...
 *
 * KEY=VALUE are the [model] recipe keys `rrfp-mm import llava` printed (vision_width, vision_layers,
 * vision_heads, patch, vision_image_size, vision_feature_layer, projector_act, text_width, text_layers,
 * text_heads, ffn_hidden, vocab, rms_eps, rope_base, and the LM variants text_kv_heads, text_qkv_bias,
 * text_o_bias, tie_embeddings, rope_type and its factors; vision_arch must be clip), and LoRA's lora_r, lora_alpha,
 * lora_targets (a LoRA checkpoint run unmerged). Builds the whole model,
 * loads EVERY tensor from CKPT (train.init_from's loader, whose report must say all loaded), forwards
 * one microbatch of two packed samples with images (a 3 x 3 grid and a 2 x 4 grid; with vision_image_size
 * = 3 patch the first is the checkpoint's grid and the second gets interpolated position embeddings) and
 * writes the microbatch and its logits (the step-dump layout) to OUT. Exit 0 when that worked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint.h"
#include "runtime/model/model.h"
#include "tests/support/test_model_util.h"

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s CKPT OUT.safetensors KEY=VALUE...\n", argv[0]);
        return 2;
    }
    char err0[256];
    ModelConfig c = {.min_patches = 1, .max_patches = 64, .init_std = 0.02f, .seed = 1, .vision_arch = -1};
    for (int i = 3; i < argc; i++) {
        char key[64];
        const char* eq = strchr(argv[i], '=');
        if (!eq || eq - argv[i] >= (long)sizeof key) {
            fprintf(stderr, "bad argument '%s'\n", argv[i]);
            return 2;
        }
        memcpy(key, argv[i], (size_t)(eq - argv[i]));
        key[eq - argv[i]] = 0;
        const char* v = eq + 1;
        if (!strcmp(key, "vision_arch")) c.vision_arch = !strcmp(v, "clip") ? 1 : -1;
        else if (!strcmp(key, "vision_width")) c.Dv = atoi(v);
        else if (!strcmp(key, "vision_layers")) c.Lv = atoi(v);
        else if (!strcmp(key, "vision_heads")) c.Hv = atoi(v);
        else if (!strcmp(key, "patch")) c.patch = atoi(v);
        else if (!strcmp(key, "vision_image_size")) c.vision_image_size = atoi(v);
        else if (!strcmp(key, "vision_feature_layer")) c.vision_feature_layer = atoi(v);
        else if (!strcmp(key, "projector_act")) c.projector_act = !strcmp(v, "gelu") ? ACT_GELU_ERF : ACT_GELU_TANH;
        else if (!strcmp(key, "text_width")) c.Dt = atoi(v);
        else if (!strcmp(key, "text_layers")) c.Lt = atoi(v);
        else if (!strcmp(key, "text_heads")) c.Ht = atoi(v);
        else if (!strcmp(key, "ffn_hidden")) c.F = atoi(v);
        else if (!strcmp(key, "vocab")) c.V = atoi(v);
        else if (!strcmp(key, "rms_eps")) c.rms_eps = atof(v);
        else if (!strcmp(key, "rope_base")) c.rope_base = atof(v);
        else if (!strcmp(key, "text_kv_heads")) c.Hkv = atoi(v);
        else if (!strcmp(key, "text_qkv_bias")) c.qkv_bias = !strcmp(v, "true");
        else if (!strcmp(key, "text_o_bias")) c.o_bias = !strcmp(v, "true");
        else if (!strcmp(key, "tie_embeddings")) c.tie_embeddings = !strcmp(v, "true");
        else if (!strcmp(key, "rope_type")) c.rope_llama3 = !strcmp(v, "llama3");
        else if (!strcmp(key, "rope_factor")) c.rope_factor = atof(v);
        else if (!strcmp(key, "rope_low_freq_factor")) c.rope_low_freq_factor = atof(v);
        else if (!strcmp(key, "rope_high_freq_factor")) c.rope_high_freq_factor = atof(v);
        else if (!strcmp(key, "rope_original_max_pos")) c.rope_original_max_pos = atof(v);
        else if (!strcmp(key, "lora_r")) c.lora_r = atoi(v), c.lora_targets = c.lora_targets ? c.lora_targets : (1u << LM_LORA_N) - 1;
        else if (!strcmp(key, "lora_alpha")) c.lora_alpha = atof(v);
        else if (!strcmp(key, "lora_targets")) {
            if (lm_lora_targets_parse(v, &c.lora_targets, err0, sizeof err0) != 0) {
                fprintf(stderr, "lora_targets: %s\n", err0);
                return 2;
            }
        } else {
            fprintf(stderr, "unknown key '%s'\n", key);
            return 2;
        }
    }
    (void)tm_budget;
    char err[2048];
    if (c.vision_arch != 1) {
        fprintf(stderr, "vision_arch=clip is required\n");
        return 1;
    }
    if (model_config_check(&c, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    Stage st;
    stage_init(&st, &c, 0, c.Lt, &backend_cpu);
    /* train.init_from's loader (an import has no optimiser state: a resume refuses it), with its report:
     * every tensor of the model loaded, none initialised from the seed, none of the checkpoint left over */
    char* rep = NULL;
    size_t rep_len = 0;
    FILE* rf = open_memstream(&rep, &rep_len);
    int lrc = checkpoint_init_from(argv[1], &st.params, rf, err, sizeof err);
    fclose(rf);
    if (lrc != 0) {
        fprintf(stderr, "init_from: %s\n", err);
        free(rep);
        return 1;
    }
    fputs(rep, stdout);
    const char* at = strstr(rep, ": loaded ");
    int n_loaded = -1, n_init = -1, n_unused = -1;
    double values;
    if (!at || sscanf(at, ": loaded %d tensors (%lf values), initialised %d from model.seed, %d in the", &n_loaded, &values,
                      &n_init, &n_unused) != 4 || n_loaded != st.params.n || n_init != 0 || n_unused != 0) {
        fprintf(stderr, "init_from did not load every tensor of the model (%d of %d loaded, %d initialised, %d unused)\n",
                n_loaded, st.params.n, n_init, n_unused);
        free(rep);
        return 1;
    }
    free(rep);
    printf("loaded all %d tensors of the model from %s\n", st.params.n, argv[1]);
    const char* spec = "p3 i3x3 p2 a4 | p2 i2x4 p1 a3"; /* two samples with one image each */
    uint64_t rng = 2025;
    Microbatch mb;
    tm_microbatch(&mb, spec, c.V, c.patch, &rng);
    StageActs a;
    stage_acts_init(&a, &st, mb.T, mb.Np, 0);
    float ls;
    stage_forward(&st, &a, &mb, NULL, NULL, &ls);
    int rc = stage_dump_microbatch(&st, &a, &mb, argv[2], err, sizeof err);
    if (rc != 0) fprintf(stderr, "%s\n", err);
    stage_acts_free(&a, &st);
    stage_free(&st);
    tm_microbatch_free(&mb);
    return rc ? 1 : 0;
}
