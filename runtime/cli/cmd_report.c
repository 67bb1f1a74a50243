/* cmd_report.c — `rrfp-mm report RUN_DIR [--out FILE.html]`: one self-contained HTML page of a run
 * (runtime/report/report.h): curves, recipe, pipeline timeline, held-out questions with their images. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cli/args.h"
#include "runtime/cli/cli.h"
#include "runtime/train/outguard.h"
#include "runtime/train/recipe.h"
#include "runtime/report/report.h"

static void report_usage(FILE* f) {
    fprintf(f, "usage: rrfp-mm report RUN_DIR [--out FILE.html] [--predictions FILE.jsonl] [--questions N]\n\n"
               "Writes one self-contained HTML page (inline SVG and CSS, no network, no JavaScript), by default\n"
               "RUN_DIR/report.html: loss, learning-rate, grad-norm and tokens/s curves (RUN_DIR/metrics.jsonl,\n"
               "required); the recipe as trained (RUN_DIR/recipe.ini); for pipelined runs traced with\n"
               "runtime.trace = true, the timeline of the last step and the bubble (RUN_DIR/trace-rank*.json);\n"
               "for an evaluated run (RUN_DIR/predictions.jsonl from `rrfp-mm eval ... --predictions`), N\n"
               "held-out questions (default 24, half right and half wrong) with their image, the reference\n"
               "answer and the model's, read from the recipe's data.eval_shards and data.tokenizer; with\n"
               "RUN_DIR/zero-shot.jsonl (`rrfp-mm eval --checkpoint IMPORT --predictions`), the zero-shot score and\n"
               "answers beside the fine-tuned ones.\n"
               "Parts whose files are absent are left out with a note; damaged ones with a warning.\n"
               "--out is refused before anything is read when it is one of the files the page is drawn from, a\n"
               "run folder's own file (metrics.jsonl, recipe.ini, ...), a file in a checkpoint, or a folder\n"
               "(docs/reliability.md); the page is written to a temporary name and renamed.\n");
}

int cmd_report(int argc, char** argv) {
    ReportConfig c = {.questions = 24, .warn = stderr};
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            report_usage(stdout);
            return 0;
        } else if ((!strcmp(a, "--out") || !strcmp(a, "--predictions") || !strcmp(a, "--questions")) && i + 1 < argc) {
            const char* v = argv[++i];
            if (!strcmp(a, "--out")) c.out = v;
            else if (!strcmp(a, "--predictions")) c.predictions = v;
            else {
                char* end;
                long n = strtol(v, &end, 10);
                if (!*v || *end || n < 0 || n > 100000) {
                    fprintf(stderr, "rrfp-mm report: --questions expects an integer in [0, 100000], got '%s'\n", v);
                    return 2;
                }
                c.questions = (int)n;
            }
        } else if (a[0] == '-') {
            cli_unknown_option("report", a, report_usage, NULL);
            return 2;
        } else if (c.run_dir) {
            fprintf(stderr, "rrfp-mm report: one RUN_DIR only (got '%s' and '%s')\n", c.run_dir, a);
            return 2;
        } else {
            c.run_dir = a;
        }
    }
    if (!c.run_dir) {
        fprintf(stderr, "rrfp-mm report: RUN_DIR is required\n\n");
        report_usage(stderr);
        return 2;
    }
    char out[4096], err[2048];
    /* the output guard, before anything is read: never onto what the page is drawn from (the run's files,
     * the predictions, the held-out shards and tokenizer of its recipe) */
    GuardInputs in = {0};
    char path[4200];
    snprintf(path, sizeof path, "%s/predictions.jsonl", c.run_dir);
    guard_inputs_add(&in, c.predictions ? c.predictions : path, "the predictions", 0);
    snprintf(path, sizeof path, "%s/recipe.ini", c.run_dir);
    Recipe* r = malloc(sizeof *r);
    if (r && recipe_load(r, path, err, sizeof err) == 0) guard_inputs_add_recipe(&in, r);
    free(r);
    if (!c.out) snprintf(out, sizeof out, "%s/report.html", c.run_dir);
    int rc = guard_output("--out", c.out ? c.out : out, GUARD_OUT_FILE, NULL, &in, err, sizeof err);
    guard_inputs_free(&in);
    if (rc != 0) {
        fprintf(stderr, "rrfp-mm report: %s\n", err);
        return 2;
    }
    if (report_write(&c, out, sizeof out, err, sizeof err) != 0) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
        return 1;
    }
    printf("report: %s\n", out);
    return 0;
}
