/* cmd_demo_data.c — `rrfp-mm demo-data`: write the demo data set (data/demo.h): a LLaVA manifest of
 * coloured-shape scenes with image-dependent questions, a held-out split and its eval file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/demo.h"
#include "runtime/cli/cli.h"
#include "runtime/cli/args.h"

static void demo_usage(FILE* f) {
    fprintf(f, "usage: rrfp-mm demo-data --out DIR [--samples N] [--seed S] [--heldout K] [--square]\n"
               "                         [--types T1,T2,...] [--questions Q]\n"
               "\n"
               "Writes DIR/train.json (LLaVA manifest, N records, default 2000), DIR/heldout.json (K held-out\n"
               "single-question records, default N/10), DIR/eval.jsonl (the held-out records with \"answer\",\n"
               "\"choices\" and \"type\") and DIR/images/*.jpg. The same arguments give the same bytes.\n"
               "--square: square scenes of 48..144 px (default: 64x48 .. 320x240 in seven aspect ratios), so every\n"
               "image resizes to the same patch grid; most records ask 3-5 questions about one image; captions name\n"
               "the shapes in reading order. make demo uses it.\n"
               "--types: the question types asked (training and held-out), of: %s.\n"
               "  Default: colour count shape count_all size, and position without --square. lone_* ask about a scene\n"
               "  with one shape (\"What colour is the shape?\").\n"
               "--questions Q: at most Q questions about one image in a training record (1: each question its own\n"
               "  record, its type drawn first and then a scene it fits, as the held-out split does; 0 = no limit).\n",
            demo_question_types());
}

static int parse_int(const char* opt, const char* s, long lo, long hi, long* out) {
    return cli_parse_long("demo-data", opt, s, lo, hi, out);
}

int cmd_demo_data(int argc, char** argv) {
    DemoConfig c = {.out_dir = NULL, .samples = 2000, .heldout = -1, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        long v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            demo_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--out") && i + 1 < argc) {
            c.out_dir = argv[++i];
        } else if (!strcmp(a, "--samples") && i + 1 < argc) {
            if (parse_int(a, argv[++i], 1, 10000000, &v)) return 2;
            c.samples = (int)v;
        } else if (!strcmp(a, "--heldout") && i + 1 < argc) {
            if (parse_int(a, argv[++i], 0, 10000000, &v)) return 2;
            c.heldout = (int)v;
        } else if (!strcmp(a, "--types") && i + 1 < argc) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", argv[++i]);
            for (char* tk = strtok(buf, ","); tk; tk = strtok(NULL, ",")) {
                int k = demo_question_type(tk);
                if (k < 0) {
                    fprintf(stderr, "rrfp-mm demo-data: --types: unknown question type '%s'; allowed: %s\n", tk,
                            demo_question_types());
                    return 2;
                }
                c.types |= 1u << k;
            }
        } else if (!strcmp(a, "--questions") && i + 1 < argc) {
            if (parse_int(a, argv[++i], 0, 8, &v)) return 2;
            c.questions = (int)v;
        } else if (!strcmp(a, "--square")) {
            c.square = 1;
        } else if (!strcmp(a, "--seed") && i + 1 < argc) {
            if (parse_int(a, argv[++i], 0, 2147483647L, &v)) return 2;
            c.seed = (uint64_t)v;
        } else {
            cli_unknown_option("demo-data", a, demo_usage, NULL);
            return 2;
        }
    }
    if (!c.out_dir) {
        fprintf(stderr, "rrfp-mm demo-data: --out DIR is required\n\n");
        demo_usage(stderr);
        return 2;
    }
    if (c.heldout < 0) c.heldout = c.samples / 10 > 0 ? c.samples / 10 : 1;
    char err[1024];
    if (demo_data_write(&c, err, sizeof err) != 0) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
        return 1;
    }
    fprintf(stderr, "rrfp-mm demo-data: wrote %d training and %d held-out records to %s\n", c.samples, c.heldout,
            c.out_dir);
    return 0;
}
