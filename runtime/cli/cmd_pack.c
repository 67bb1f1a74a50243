/* cmd_pack.c — `rrfp-mm pack`: LLaVA manifest + JPEGs -> .rrs shards (data/pack.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/pack.h"
#include "runtime/cli/cli.h"
#include "runtime/cli/args.h"
#include "runtime/train/outguard.h"

static void pack_usage(FILE* f) {
    fprintf(f,
            "usage: rrfp-mm pack --manifest M --images DIR --tokenizer tok.json --out DIR\n"
            "                    [--shard-size MB] [--strict] [--patch P] [--min-patches N] [--max-patches N]\n"
            "                    [--max-reject-fraction F] [--allow-outside-images] [--template NAME]\n"
            "                    [--image-preprocess smart|llava|anyres] [--image-size S] [--grid-pinpoints LIST]\n"
            "                    [--workers N]\n"
            "\n"
            "Reads a LLaVA manifest (JSON array or JSONL), checks every record and every JPEG (header and a\n"
            "full decode), tokenizes with the prompt template (data/manifest.h) and writes DIR/shard-NNNNN.rrs\n"
            "(data/shard.h). Rejected records are named by manifest line and reason and skipped (--strict: the\n"
            "first one is fatal). Defaults: --shard-size 256, --patch 8, --min-patches 16, --max-patches 64\n"
            "(the image grid stored in the index; a loader with other settings recomputes it).\n"
            "More than a fraction F (default 0.5) of the records rejected is an error, and nothing is written.\n"
            "Image paths must stay inside --images (no absolute paths, no '..' or links out of it) unless\n"
            "--allow-outside-images. --quiet: no progress line on stderr.\n"
            "--image-preprocess llava: LLaVA-1.5's pixels (pad to a square with the CLIP mean colour, Pillow's\n"
            "bicubic resize to S x S (--image-size, default 336), CLIP mean/std; data/image.h), recorded in the\n"
            "shards so that the loader applies it; every image is then (S / P)^2 patches. Default: smart (Qwen2-VL\n"
            "smart_resize within the patch bounds, x / 127.5 - 1).\n"
            "--image-preprocess anyres: LLaVA-NeXT's any-resolution tiles (docs/anyres.md): the grid pinpoints\n"
            "(--grid-pinpoints, [height, width] pairs, default LLaVA-1.6's\n"
            "[[336,672],[672,336],[672,672],[1008,336],[336,1008]]) pick each image's tile grid; tiles of S x S\n"
            "(--image-size) after the base image, CLIP mean/std; recorded in the shards (version 3).\n"
            "--template: the chat template (data/template.h): rrfp (the default: \"USER: q ASSISTANT: a<|endoftext|>\"),\n"
            "or LLaVA's vicuna_v1 (LLaVA-1.5, Vicuna / Llama-2 tokenizers), llama_3 (LLaVA-NeXT Llama-3), chatml\n"
            "(LLaVA-NeXT Qwen) or plain (pretraining: image + caption); only the answers are supervised.\n"
            "--out is refused before anything is read when it is an input, a file, a checkpoint folder or a\n"
            "folder inside one, or a folder holding the manifest or tokenizer under a shard-* name\n"
            "(docs/reliability.md); each shard is written to a temporary name and renamed.\n"
            "--workers N: threads that check, tokenize, read, decode and compress records (default: the CPUs this\n"
            "process may use, at most %d; 1: one thread); the shards are written by one thread in manifest order,\n"
            "so they and every message are the same for any N.\n"
            "SIGINT / SIGTERM stop the pack and remove what it wrote (exit 128 + the signal); a second one ends it\n"
            "at once.\n",
            PACK_DEFAULT_MAX_WORKERS);
}

/* SIGINT / SIGTERM: pack_run stops before its next record and removes its temporary shards (PackConfig.stop;
 * before, the process ended with its *.rrs.tmp files left behind); SA_RESETHAND: a second signal ends the
 * process at once. */
static volatile sig_atomic_t pack_signal;
static void pack_on_signal(int sig) { pack_signal = sig; }

static int parse_int(const char* opt, const char* s, long lo, long hi, int* out) {
    long v;
    if (cli_parse_long("pack", opt, s, lo, hi, &v) != 0) return -1;
    *out = (int)v;
    return 0;
}

int cmd_pack(int argc, char** argv) {
    PackConfig c = {.shard_mb = 256, .patch = 8, .min_patches = 16, .max_patches = 64, .progress = stderr,
                    .max_reject_fraction = 0.5};
    const char* pins_text = NULL;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            pack_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--manifest") && has) c.manifest = argv[++i];
        else if (!strcmp(a, "--images") && has) c.images_dir = argv[++i];
        else if (!strcmp(a, "--tokenizer") && has) c.tokenizer = argv[++i];
        else if (!strcmp(a, "--template") && has) c.chat_template = argv[++i];
        else if (!strcmp(a, "--out") && has) c.out_dir = argv[++i];
        else if (!strcmp(a, "--strict")) c.strict = 1;
        else if (!strcmp(a, "--allow-outside-images")) c.allow_outside_images = 1;
        else if (!strcmp(a, "--quiet")) c.progress = NULL;
        else if (!strcmp(a, "--shard-size") && has) {
            char* end;
            c.shard_mb = strtod(argv[++i], &end);
            if (*end || !(c.shard_mb > 0)) {
                fprintf(stderr, "rrfp-mm pack: --shard-size expects a positive number of MiB, got '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--max-reject-fraction") && has) {
            char* end;
            c.max_reject_fraction = strtod(argv[++i], &end);
            if (*end || !*argv[i] || !(c.max_reject_fraction >= 0 && c.max_reject_fraction <= 1)) {
                fprintf(stderr, "rrfp-mm pack: --max-reject-fraction expects a number in [0, 1], got '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--image-preprocess") && has) {
            if (image_prep_parse(argv[++i], &c.prep.kind) != 0) {
                fprintf(stderr, "rrfp-mm pack: --image-preprocess '%s' unknown; allowed: smart, llava, anyres\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--grid-pinpoints") && has) {
            pins_text = argv[++i];
        } else if (!strcmp(a, "--image-size") && has) {
            if (parse_int(a, argv[++i], 1, 16384, &c.prep.size)) return 2;
        } else if (!strcmp(a, "--workers") && has) {
            if (parse_int(a, argv[++i], 1, PACK_MAX_WORKERS, &c.workers)) return 2;
        } else if (!strcmp(a, "--patch") && has) {
            if (parse_int(a, argv[++i], 1, 1024, &c.patch)) return 2;
        } else if (!strcmp(a, "--min-patches") && has) {
            if (parse_int(a, argv[++i], 1, 65535, &c.min_patches)) return 2;
        } else if (!strcmp(a, "--max-patches") && has) {
            if (parse_int(a, argv[++i], 1, 65535, &c.max_patches)) return 2;
        } else {
            cli_unknown_option("pack", a, pack_usage, NULL);
            return 2;
        }
    }
    if (!c.manifest || !c.images_dir || !c.tokenizer || !c.out_dir) {
        fprintf(stderr, "rrfp-mm pack: --manifest, --images, --tokenizer and --out are required\n\n");
        pack_usage(stderr);
        return 2;
    }
    if (c.prep.size == 0) c.prep.size = 336;
    if (pins_text && c.prep.kind != IMAGE_PREP_ANYRES) {
        fprintf(stderr, "rrfp-mm pack: --grid-pinpoints is for --image-preprocess anyres\n");
        return 2;
    }
    if (c.prep.kind == IMAGE_PREP_ANYRES) {
        char perr[512];
        if (!pins_text) anyres_pinpoints_default(&c.prep.pins); /* LLaVA-1.6's */
        else if (anyres_pinpoints_parse(pins_text, c.prep.size, &c.prep.pins, perr, sizeof perr) != 0) {
            fprintf(stderr, "rrfp-mm pack: --grid-pinpoints: %s\n", perr);
            return 2;
        }
    }
    if (c.min_patches > c.max_patches) {
        fprintf(stderr, "rrfp-mm pack: --min-patches %d is above --max-patches %d\n", c.min_patches, c.max_patches);
        return 2;
    }
    PackSummary s;
    char err[2048];
    /* the output guard, before anything is read: the folder is not an input, a checkpoint or a file, and
     * holds no input among the shard-* files pack writes and removes there */
    GuardInputs in = {0};
    guard_inputs_add(&in, c.manifest, "the manifest", 0);
    guard_inputs_add(&in, c.tokenizer, "the tokenizer", 0);
    guard_inputs_add(&in, c.images_dir, "the --images folder", 0);
    int rc = guard_output("--out", c.out_dir, GUARD_OUT_FOLDER, "shard-*", &in, err, sizeof err);
    guard_inputs_free(&in);
    if (rc != 0) {
        fprintf(stderr, "rrfp-mm pack: %s\n", err);
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = pack_on_signal;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int k = 0; k < 2; k++) { /* a signal ignored by whoever started us (nohup, a shell's `&`) stays ignored */
        int sig = k ? SIGTERM : SIGINT;
        struct sigaction was;
        if (sigaction(sig, NULL, &was) == 0 && was.sa_handler != SIG_IGN) sigaction(sig, &sa, NULL);
    }
    c.stop = &pack_signal;
    rc = pack_run(&c, &s, err, sizeof err);
    if (rc != 0) {
        if (s.read) pack_summary_print(&s, stderr);
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
        return pack_signal ? 128 + (int)pack_signal : 1;
    }
    pack_summary_print(&s, stderr);
    return 0;
}
