/* main.c — the rrfp-mm executable: dispatches to subcommands (see cli.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "runtime/cli/args.h"
#include "runtime/cli/cli.h"

static const CliCommand commands[] = {
    {"version", cmd_version, "print version, BLAS and backends"},
    {"train", cmd_train, "train a recipe (single process), or --dry-run to size it"},
    {"eval", cmd_eval, "answer held-out questions with a checkpoint; accuracy vs chance"},
    {"generate", cmd_generate, "answer questions about images with a checkpoint (KV-cache decoding)"},
    {"tensors", cmd_tensors, "list or compare safetensors files (checkpoints, dumps)"},
    {"tokenizer", cmd_tokenizer, "train a byte-level BPE tokenizer; encode and decode text"},
    {"sim", cmd_sim, "simulate a pipeline step: hint x dispatch mode on a virtual clock"},
    {"trace", cmd_trace, "merge per-rank Chrome traces and draw an SVG timeline"},
    {"demo-data", cmd_demo_data, "write the demo data set: coloured-shape scenes, questions, held-out split"},
    {"pack", cmd_pack, "pack a LLaVA manifest and its JPEG, PNG and GIF images into .rrs shards"},
    {"import", cmd_import, "import a Hugging Face Llama LM, LLaVA or CLIP tower as a checkpoint for train.init_from"},
    {"export", cmd_export, "export a checkpoint as a Hugging Face LlavaForConditionalGeneration folder"},
    {"report", cmd_report, "one self-contained HTML page of a run: curves, recipe, timeline, held-out answers"},
};
static const int n_commands = (int)(sizeof(commands) / sizeof(commands[0]));

static void usage(FILE* f) {
    fprintf(f, "usage: rrfp-mm <command> [options]\n\n"
               "rrfp-mm trains LLaVA-style multimodal models with the RRFP pipeline runtime.\n\ncommands:\n");
    for (int i = 0; i < n_commands; i++) fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nRun 'rrfp-mm <command> --help' for a command's options.\n");
}

/* What a command prints on standard output is its result (tensors ls, tokenizer encode, sim --json, ...): when it
 * cannot all be written (a redirection onto a full disk), the command fails naming it, instead of exiting 0 with
 * a cut file (docs/reliability.md "Nothing lost on write errors"). A command that failed already keeps its status. */
static int stdout_check(int rc) {
    errno = 0;
    int bad = fflush(stdout) != 0;
    int e = errno;
    bad |= ferror(stdout) != 0;
    if (!bad || rc != 0) return rc;
    char where[4200] = "";
    ssize_t n = readlink("/proc/self/fd/1", where, sizeof where - 1);
    where[n > 0 ? n : 0] = 0;
    fprintf(stderr, "rrfp-mm: error: cannot write standard output%s%s%s: %s\n", n > 0 ? " ('" : "", where,
            n > 0 ? "')" : "", strerror(e ? e : EIO));
    return 1;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return stdout_check(0);
    }
    if (!strcmp(argv[1], "--version")) return stdout_check(cmd_version(argc - 1, argv + 1));
    for (int i = 0; i < n_commands; i++)
        if (!strcmp(argv[1], commands[i].name)) return stdout_check(commands[i].fn(argc - 1, argv + 1));
    const char* names[sizeof(commands) / sizeof(commands[0])];
    for (int i = 0; i < n_commands; i++) names[i] = commands[i].name;
    const char* near = cli_nearest(argv[1], names, n_commands);
    if (near)
        fprintf(stderr, "rrfp-mm: unknown command '%s'; did you mean '%s'? ('rrfp-mm %s --help' for its options)\n\n",
                argv[1], near, near);
    else
        fprintf(stderr, "rrfp-mm: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
