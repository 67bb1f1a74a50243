/* The argument idioms every subcommand shares (args.h). */
#include "runtime/cli/args.h"

#include <ctype.h>
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

const char* cli_nearest(const char* word, const char* const* names, int n) {
    size_t wl = strlen(word);
    int best = -1, best_d = 1 << 30, n_prefix = 0, prefix = -1;
    for (int i = 0; i < n; i++) {
        int d = rr_edit_distance(word, names[i]);
        if (d < best_d) best_d = d, best = i;
        if (wl >= 4 && wl < strlen(names[i]) && !strncmp(word, names[i], wl)) n_prefix++, prefix = i;
    }
    int limit = wl >= 6 ? 2 : 1;
    if (best >= 0 && best_d > 0 && best_d <= limit && 2 * (size_t)best_d < wl) return names[best];
    return n_prefix == 1 ? names[prefix] : NULL;
}

/* The distinct "--name" words of the usage text (of its lines in scope, when given), at most cap, in *opts (one
 * allocation, *text, freed by the caller). */
static int usage_options(void (*usage)(FILE*), const char* scope, const char** opts, int cap, char** text) {
    size_t len = 0;
    *text = NULL;
    FILE* m = open_memstream(text, &len);
    if (!m) return 0;
    usage(m);
    fclose(m);
    if (scope) { /* blank the lines out of scope: keep a line holding scope and the indented lines after it */
        int keep = 0;
        for (char* line = *text; line && *line;) {
            char* nl = strchr(line, '\n');
            if (nl) *nl = 0;
            int indented = line[0] == ' ' && !strstr(line, "rrfp-mm ");
            keep = strstr(line, scope) != NULL || (keep && indented);
            if (!keep) memset(line, ' ', strlen(line));
            if (!nl) break;
            *nl = '\n';
            line = nl + 1;
        }
    }
    int n = 0;
    for (char* p = *text; p && *p && n < cap;) {
        int starts = p[0] == '-' && p[1] == '-' && p[2] >= 'a' && p[2] <= 'z' &&
                     (p == *text || !(isalnum((unsigned char)p[-1]) || p[-1] == '-' || p[-1] == '_'));
        if (!starts) {
            p++;
            continue;
        }
        char* e = p + 2;
        while (isalnum((unsigned char)*e) || *e == '-') e++;
        while (e[-1] == '-') e--;
        char c = *e;
        *e = 0;
        int seen = 0;
        for (int i = 0; i < n; i++) seen |= !strcmp(opts[i], p);
        if (!seen) opts[n++] = p;
        if (c == 0) break;
        p = e + 1;
    }
    return n;
}

void cli_unknown_option(const char* cmd, const char* arg, void (*usage)(FILE*), const char* scope) {
    const char* opts[256];
    char* text;
    int n = usage_options(usage, scope, opts, 256, &text);
    char name[128];
    snprintf(name, sizeof name, "%s", arg);
    char* eq = strchr(name, '=');
    if (eq) *eq = 0;
    int shown = 0;
    for (int i = 0; i < n; i++) shown |= !strcmp(opts[i], name);
    const char* near = arg[0] == '-' && !shown ? cli_nearest(name, opts, n) : NULL;
    if (arg[0] != '-')
        fprintf(stderr, "rrfp-mm %s: unexpected argument '%s'\n\n", cmd, arg);
    else if (shown && eq)
        fprintf(stderr, "rrfp-mm %s: unknown option '%s': give the value as the next argument (%s %s)\n\n", cmd, arg,
                name, eq + 1);
    else if (shown)
        fprintf(stderr, "rrfp-mm %s: %s needs a value\n\n", cmd, arg);
    else if (near)
        fprintf(stderr, "rrfp-mm %s: unknown option '%s'; did you mean '%s'?\n\n", cmd, arg, near);
    else
        fprintf(stderr, "rrfp-mm %s: unknown option '%s'\n\n", cmd, arg);
    free(text);
    usage(stderr);
}

void cli_second_recipe(const char* cmd, const char* first, const char* second, void (*usage)(FILE*)) {
    fprintf(stderr, "rrfp-mm %s: more than one recipe ('%s', '%s')\n\n", cmd, first, second);
    usage(stderr);
}
