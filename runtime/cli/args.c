/* The argument idioms every subcommand shares (args.h). */
#include "runtime/cli/args.h"

#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/cli/cli.h"

/* The recipe file with its --set overrides, validated; NULL after printing the error (a usage error). */
Recipe* cli_recipe_from_args(const char* path, const char** sets, int n_sets) {
    Recipe* r = mallocCheck(sizeof(Recipe));
    char err[2048];
    int rc = recipe_load(r, path, err, sizeof err);
    for (int i = 0; rc == 0 && i < n_sets; i++) rc = recipe_set(r, sets[i], err, sizeof err);
    if (rc == 0) rc = recipe_validate(r, err, sizeof err);
    if (rc == 0) return r;
    fprintf(stderr, "rrfp-mm: error: %s\n", err);
    free(r);
    return NULL;
}

int cli_is_help(const char* a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

int cli_parse_long(const char* cmd, const char* opt, const char* s, long lo, long hi, long* out) {
    char* end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end != 0 || v < lo || v > hi) {
        fprintf(stderr, "rrfp-mm %s: %s expects an integer in [%ld, %ld], got '%s'\n", cmd, opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_sub_help(int argc, char** argv, void (*usage)(FILE*), int* rc) {
    if (argc < 2 || cli_is_help(argv[1])) {
        usage(argc < 2 ? stderr : stdout);
        *rc = argc < 2 ? 2 : 0;
        return 1;
    }
    for (int i = 2; i < argc; i++) /* `tokenizer encode --help`: the usage, as for every command */
        if (cli_is_help(argv[i])) {
            usage(stdout);
            *rc = 0;
            return 1;
        }
    return 0;
}

Recipe* cli_recipe_given(int given, const char* path, const char** sets, int n_sets, void (*usage)(FILE*)) {
    if (!given) {
        usage(stderr);
        free(sets);
        return NULL;
    }
    Recipe* r = cli_recipe_from_args(path, sets, n_sets);
    free(sets);
    return r;
}

void cli_second_recipe(const char* cmd, const char* first, const char* second, void (*usage)(FILE*)) {
    fprintf(stderr, "rrfp-mm %s: more than one recipe ('%s', '%s')\n\n", cmd, first, second);
    usage(stderr);
}
