/* cmd_import.c — `rrfp-mm import llama --hf DIR --out CKPT`: a Hugging Face Llama LM as a checkpoint of
 * the text tower for train.init_from (runtime/hf/import.h), and the recipe keys it implies. */
#include <stdio.h>
#include <sys/stat.h>
#include <string.h>

#include "runtime/cli/args.h"
#include "runtime/cli/cli.h"
#include "runtime/hf/import.h"
#include "runtime/hf/lora_hf.h"
#include "runtime/train/outguard.h"

static void import_usage(FILE* f) {
    fprintf(f, "usage: rrfp-mm import llama|llava|llava_next|clip --hf DIR --out CKPT\n"
               "       rrfp-mm import lora --hf ADAPTER_DIR --base BASE_CKPT --out CKPT [--recipe R.ini]\n\n"
               "Converts a Hugging Face Llama-format LM (DIR/config.json, DIR/model.safetensors or the shards that\n"
               "DIR/model.safetensors.index.json lists) into checkpoint folder CKPT holding text.* tensors, for\n"
               "train.init_from (tensors load by name and shape; vision and projector keep their initialisation).\n"
               "model_type llama, mistral or qwen2. Prints the recipe keys the model implies: grouped-query attention\n"
               "(text_kv_heads), q/k/v and o biases (text_qkv_bias, text_o_bias), tied embeddings (tie_embeddings),\n"
               "Llama-3 RoPE scaling (rope_type = llama3 and its factors) among them. Refuses, naming the key, what\n"
               "the model cannot represent (mlp_bias, sliding-window attention, other RoPE scalings). DIR/tokenizer.json\n"
               "is data.tokenizer.\n\n"
               "import llava: a LlavaForConditionalGeneration (CLIP tower, projector, a Llama / Mistral / Qwen2 LM as\n"
               "import llama takes; llava-hf hub names, transformers 5's save_pretrained names or the in-memory model.*\n"
               "names) as a whole-model checkpoint.\n"
               "import llava_next: a LlavaNextForConditionalGeneration the same way, with its image_newline and\n"
               "image_grid_pinpoints (model.anyres; pack --image-preprocess anyres --grid-pinpoints, docs/anyres.md).\n"
               "import clip: a CLIPVisionModel (or CLIPModel's vision part) as a vision.* checkpoint.\n"
               "Both print the recipe keys the model implies and refuse, naming the key, what it cannot represent.\n"
               "import lora: a PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors, as\n"
               "`export hf --adapter` and PeftModel.save_pretrained write it) onto base checkpoint BASE_CKPT (an import,\n"
               "or a run's checkpoint with --recipe giving its model keys): CKPT holds the base and the adapters, and\n"
               "its [lora] keys (r, alpha, dropout, targets: the adapter's; a recipe that sets one must agree), so\n"
               "train.init_from = CKPT goes on training the adapters. Every tensor name and shape is checked against\n"
               "the model and the rank; what does not fit is refused naming the key.\n"
               "CKPT must not exist; it is built as CKPT.tmp.PID and renamed when complete. Refused before anything\n"
               "is read: a path inside DIR, inside a checkpoint folder, named like a checkpoint beside a run's\n"
               "checkpoints (it would join that run's), or a run folder's own entry (docs/reliability.md).\n");
}

int cmd_import(int argc, char** argv) {
    const char *kind = NULL, *hf = NULL, *out = NULL, *base = NULL, *recipe = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            import_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--hf") && i + 1 < argc) {
            hf = argv[++i];
        } else if (!strcmp(argv[i], "--base") && i + 1 < argc) {
            base = argv[++i];
        } else if (!strcmp(argv[i], "--recipe") && i + 1 < argc) {
            recipe = argv[++i];
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
        } else if (argv[i][0] != '-' && !kind) {
            kind = argv[i];
        } else {
            cli_unknown_option("import", argv[i], import_usage, NULL);
            return 2;
        }
    }
    struct stat sb;
    /* the output guard, before anything is read (an existing --out is refused by the import itself: it
     * builds a new folder) */
    if (kind && hf && out && lstat(out, &sb) != 0) {
        GuardInputs in = {0};
        char gerr[2048];
        guard_inputs_add(&in, hf, "the Hugging Face folder", 1);
        guard_inputs_add(&in, base, "the base checkpoint", 1);
        guard_inputs_add(&in, recipe, "the recipe", 0);
        int bad = guard_output("--out", out, GUARD_OUT_FOLDER, NULL, &in, gerr, sizeof gerr);
        guard_inputs_free(&in);
        if (bad) {
            fprintf(stderr, "rrfp-mm import: %s\n", gerr);
            return 2;
        }
    }
    if (kind && hf && out && (!strcmp(kind, "llava") || !strcmp(kind, "llava_next") || !strcmp(kind, "clip")))
        return cmd_import_llava(kind, hf, out);
    if (kind && !strcmp(kind, "lora")) {
        if (!hf || !out || !base) {
            fprintf(stderr, "rrfp-mm import lora: needs --hf ADAPTER_DIR, --base BASE_CKPT and --out CKPT\n\n");
            import_usage(stderr);
            return 2;
        }
        LoraImport li;
        char err[2048];
        if (import_lora(hf, base, recipe, out, &li, stderr, err, sizeof err) != 0) {
            fprintf(stderr, "rrfp-mm: error: import lora: %s\n", err);
            return 1;
        }
        printf("imported %d adapter tensors onto %d base tensors into %s\n", li.adapters, li.base, out);
        printf("; recipe keys it holds (train.init_from = %s takes them):\n[lora]\nr = %d\nalpha = %.17g\ndropout = %.17g\n"
               "targets = %s\n[train]\ninit_from = %s\n", out, li.r, li.alpha, li.dropout, li.targets, out);
        return 0;
    }
    if ((base || recipe) && kind) {
        fprintf(stderr, "rrfp-mm import %s: --base and --recipe are import lora's\n", kind);
        return 2;
    }
    if (!kind || strcmp(kind, "llama") != 0 || !hf || !out) {
        if (kind && strcmp(kind, "llama") != 0 && strcmp(kind, "llava") != 0 && strcmp(kind, "llava_next") != 0 &&
            strcmp(kind, "clip") != 0 && strcmp(kind, "lora") != 0)
            fprintf(stderr, "rrfp-mm import: unknown format '%s' (known: llama, llava, llava_next, clip, lora)\n\n", kind);
        import_usage(stderr);
        return 2;
    }
    LlamaImport info;
    char err[2048];
    if (import_llama(hf, out, &info, stderr, err, sizeof err) != 0) {
        fprintf(stderr, "rrfp-mm: error: import llama: %s\n", err);
        return 1;
    }
    printf("imported %d tensors of a %s LM (D %d, %d layers, %d heads, F %d, V %d) into %s\n", info.tensors,
           info.model_type, info.D, info.L, info.H, info.F, info.V, out);
    printf("; recipe keys for this LM (set the [model] keys as below, and [train] init_from = %s):\n", out);
    printf("[model]\ntext_width = %d\ntext_layers = %d\ntext_heads = %d\nffn_hidden = %d\nvocab = %d\n", info.D, info.L,
           info.H, info.F, info.V);
    import_print_lm_keys(stdout, &info);
    printf("[train]\ninit_from = %s\n", out);
    return 0;
}
