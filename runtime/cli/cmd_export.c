/* cmd_export.c — `rrfp-mm export hf --checkpoint DIR --out HF_DIR [--recipe R.ini] [--tokenizer T.json]
 * [--template NAME] [--image-token-id N | --add-image-token [--pad-vocab M]] [--shard-mb MB]`: a checkpoint as a Hugging Face LlavaForConditionalGeneration folder
 * (runtime/hf/import_llava.h); `--adapter ADAPTER_DIR`: a LoRA checkpoint's adapters as a PEFT folder
 * (runtime/hf/lora_hf.h). */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cli/args.h"
#include "runtime/cli/cli.h"
#include "runtime/hf/import_llava.h"
#include "runtime/hf/lora_hf.h"
#include "runtime/train/trained.h"
#include "runtime/train/outguard.h"

static void export_usage(FILE* f) {
    fprintf(f, "usage: rrfp-mm export hf --checkpoint DIR --out HF_DIR [--recipe R.ini] [--tokenizer T.json]\n"
               "                         [--template NAME] [--image-token-id N | --add-image-token [--pad-vocab M]]\n"
               "                         [--shard-mb MB | --shard-bytes N]\n"
               "       rrfp-mm export hf --checkpoint DIR --adapter ADAPTER_DIR [--recipe R.ini]\n\n"
               "Writes checkpoint folder DIR (any pipeline x tensor-parallel layout) as a Hugging Face\n"
               "LlavaForConditionalGeneration folder: config.json, model-*.safetensors shards (F32, at most MB each,\n"
               "default 2048; N bytes with --shard-bytes), model.safetensors.index.json and the tokenizer files.\n"
               "The model's keys come from an import's checkpoint itself (rrfp-mm import: no --recipe needed) and\n"
               "from the recipe (default: DIR/../../recipe.ini, the run's own for RUN_DIR/checkpoints/step-N); the\n"
               "tokenizer from --tokenizer (default: the recipe's data.tokenizer when readable).\n"
               "config.json's image_token_index is --image-token-id, else the checkpoint's (an import's\n"
               "image_token_index, or the id its run's shards used), else the id of <image> in the tokenizer's\n"
               "added_tokens. --add-image-token (a model trained from an LM\n"
               "whose vocabulary has no <image>, e.g. Vicuna + CLIP): <image> becomes id V (the vocabulary size),\n"
               "the vocabulary grows to V + 1 rounded up to a multiple of M (--pad-vocab, default 64, as llava-hf's\n"
               "32064), the new embedding and lm_head rows are the mean of the trained rows, and the tokenizer.json\n"
               "written holds <image>. Refused for a model with no Hugging Face equivalent (model.vision_arch =\n"
               "rope2d).\n"
               "Besides the weights it writes what AutoProcessor, AutoTokenizer and GenerationConfig open:\n"
               "preprocessor_config.json (the image preprocessing of the run's shards, data.shards),\n"
               "processor_config.json, tokenizer_config.json (with the chat template of --template NAME, the one\n"
               "pack used: rrfp, vicuna_v1, llama_3, chatml or plain), special_tokens_map.json, chat_template.json\n"
               "and generation_config.json (bos / eos / pad ids from the tokenizer and the template). The files\n"
               "`rrfp-mm import llava` kept (CKPT/hf/, of this checkpoint or of the recipe's train.init_from)\n"
               "are the base: config.json keeps their values (each one the model changes is logged).\n"
               "HF_DIR must not exist; it is built as HF_DIR.tmp.PID and renamed when complete. Refused before\n"
               "anything is read: a path inside the checkpoint, inside any checkpoint folder, named like a\n"
               "checkpoint beside a run's checkpoints, or a run folder's own entry (docs/reliability.md).\n"
               "A LoRA checkpoint ([lora] r > 0) is written merged: each adapted linear as W + (alpha / r) B A.\n"
               "--adapter ADAPTER_DIR (with or without --out) writes its adapters instead as a PEFT folder:\n"
               "adapter_config.json and adapter_model.safetensors (F32) under PEFT's names for\n"
               "LlavaForConditionalGeneration, or LlamaForCausalLM for a run that started from `import llama`\n"
               "(PeftModel.from_pretrained opens it on that base; docs/training.md \"LoRA adapters and PEFT\").\n");
}

int cmd_export(int argc, char** argv) {
    const char *kind = NULL, *ckpt = NULL, *out = NULL, *recipe = NULL, *tok = NULL, *tmpl = NULL, *adapter = NULL;
    int image_id = -1, add_image = 0;
    long shard_mb = 2048, pad_vocab = 64;
    size_t shard_bytes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            export_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--checkpoint") && i + 1 < argc) {
            ckpt = argv[++i];
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(argv[i], "--adapter") && i + 1 < argc) {
            adapter = argv[++i];
        } else if (!strcmp(argv[i], "--recipe") && i + 1 < argc) {
            recipe = argv[++i];
        } else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
            tok = argv[++i];
        } else if (!strcmp(argv[i], "--template") && i + 1 < argc) {
            tmpl = argv[++i];
        } else if (!strcmp(argv[i], "--image-token-id") && i + 1 < argc) {
            char* end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 0 || v > (1L << 30)) {
                fprintf(stderr, "rrfp-mm export: --image-token-id '%s' is not a token id\n", argv[i]);
                return 2;
            }
            image_id = (int)v;
        } else if (!strcmp(argv[i], "--add-image-token")) {
            add_image = 1;
        } else if (!strcmp(argv[i], "--pad-vocab") && i + 1 < argc) {
            char* end;
            pad_vocab = strtol(argv[++i], &end, 10);
            if (*end || pad_vocab < 1 || pad_vocab > 65536) {
                fprintf(stderr, "rrfp-mm export: --pad-vocab '%s' is not in 1 .. 65536\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--shard-bytes") && i + 1 < argc) { /* tests: several small shards */
            char* end;
            long long b = strtoll(argv[++i], &end, 10);
            if (*end || b < 1) {
                fprintf(stderr, "rrfp-mm export: --shard-bytes '%s' is not a positive size\n", argv[i]);
                return 2;
            }
            shard_bytes = (size_t)b;
        } else if (!strcmp(argv[i], "--shard-mb") && i + 1 < argc) {
            char* end;
            shard_mb = strtol(argv[++i], &end, 10);
            if (*end || shard_mb < 1 || shard_mb > (1L << 20)) {
                fprintf(stderr, "rrfp-mm export: --shard-mb '%s' is not in 1 .. 1048576\n", argv[i]);
                return 2;
            }
        } else if (argv[i][0] != '-' && !kind) {
            kind = argv[i];
        } else {
            cli_unknown_option("export", argv[i], export_usage, NULL);
            return 2;
        }
    }
    if (!kind || strcmp(kind, "hf") != 0 || !ckpt || (!out && !adapter)) {
        if (kind && strcmp(kind, "hf") != 0) fprintf(stderr, "rrfp-mm export: unknown format '%s' (known: hf)\n\n", kind);
        export_usage(stderr);
        return 2;
    }
    if (add_image && image_id >= 0) {
        fprintf(stderr, "rrfp-mm export: --add-image-token makes <image> a new id; it cannot be given with "
                "--image-token-id\n");
        return 2;
    }
    char rpath[4200];
    if (!recipe) { /* the run's own: RUN_DIR/recipe.ini, the checkpoint being RUN_DIR/checkpoints/step-N */
        snprintf(rpath, sizeof rpath, "%s/../../recipe.ini", ckpt);
        if (access(rpath, R_OK) == 0) recipe = rpath;
        else if (!trained_has_keys(ckpt)) { /* an import carries its model keys: no recipe needed */
            fprintf(stderr, "rrfp-mm: error: export hf: %s: cannot read: %s (a checkpoint outside a run folder that is "
                    "not an import needs --recipe R.ini)\n", rpath, strerror(errno));
            return 1;
        }
    }
    HfExport info;
    char err[2048];
    /* the output guard, before anything is read (an existing --out is refused by the export itself: it
     * builds a new folder) */
    GuardInputs in = {0};
    guard_inputs_add(&in, ckpt, "the checkpoint", 1);
    guard_inputs_add(&in, recipe, "the recipe", 0);
    guard_inputs_add(&in, tok, "the tokenizer", 0);
    struct stat sb;
    int rc = out && lstat(out, &sb) != 0 ? guard_output("--out", out, GUARD_OUT_FOLDER, NULL, &in, err, sizeof err) : 0;
    if (rc == 0 && adapter && lstat(adapter, &sb) != 0)
        rc = guard_output("--adapter", adapter, GUARD_OUT_FOLDER, NULL, &in, err, sizeof err);
    if (rc == 0 && adapter && out && !strcmp(adapter, out)) {
        snprintf(err, sizeof err, "--adapter and --out name the same folder '%s'", out);
        rc = 1;
    }
    guard_inputs_free(&in);
    if (rc != 0) {
        fprintf(stderr, "rrfp-mm export: %s\n", err);
        return 2;
    }
    if (adapter) {
        HfAdapterExport ai;
        if (export_hf_adapter(ckpt, recipe, adapter, &ai, stderr, err, sizeof err) != 0) {
            fprintf(stderr, "rrfp-mm: error: export hf --adapter: %s\n", err);
            return 1;
        }
        printf("exported %d adapter tensors into %s (PeftModel.from_pretrained opens it on the %s base%s%s)\n", ai.tensors,
               adapter, ai.base == PEFT_BASE_LLAVA ? "LlavaForConditionalGeneration" : "LlamaForCausalLM",
               ai.base_name[0] ? " " : "", ai.base_name);
        if (!out) return 0;
    }
    if (export_hf(ckpt, recipe, out, tok, tmpl, image_id, add_image ? (int)pad_vocab : 0, shard_bytes ? shard_bytes : (size_t)shard_mb << 20, &info, stderr, err, sizeof err) != 0) {
        fprintf(stderr, "rrfp-mm: error: export hf: %s\n", err);
        return 1;
    }
    printf("exported %d tensors in %d file(s)%s and %d processor / tokenizer / generation config(s) into %s "
           "(LlavaForConditionalGeneration.from_pretrained opens it)\n",
           info.tensors, info.files, info.tokenizer ? " with the tokenizer" : "", info.extras, out);
    return 0;
}
