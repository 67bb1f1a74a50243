/* fuzz_recipe.c — libFuzzer target for recipes (runtime/train/recipe.c): the input is a recipe INI file,
 * then (after a "--8<--" line) `--set section.key=value` assignments, one a line. The file loads or is
 * refused naming FILE:LINE; each assignment is applied or refused; a recipe that validates prints
 * (--print-recipe) to a text that loads back to the same recipe (the same print and hash). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/train/recipe.h"
#include "fuzz_util.h"

static char* print_of(const Recipe* r, size_t* n) {
    char* buf = NULL;
    FILE* f = open_memstream(&buf, n);
    recipe_print(r, f);
    fclose(f);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const uint8_t* part[2];
    size_t len[2];
    int np = fuzz_split(data, size, part, len, 2);
    char path[600], err[2048];
    snprintf(path, sizeof path, "%s/recipe.ini", fuzz_scratch());
    fuzz_write(path, part[0], len[0]);
    static Recipe r, back;
    recipe_defaults(&r);
    if (recipe_load(&r, path, err, sizeof err) != 0) {
        if (!strstr(err, path) && !strstr(err, "recipe.ini")) {
            fprintf(stderr, "fuzz_recipe: a refusal that does not name the file: %s\n", err);
            abort();
        }
        return 0;
    }
    if (np > 1) {
        char* sets = malloc(len[1] + 1);
        memcpy(sets, part[1], len[1]);
        sets[len[1]] = 0;
        for (char *line = sets, *nl; line; line = nl) {
            nl = strchr(line, '\n');
            if (nl) *nl++ = 0;
            if (*line) recipe_set(&r, line, err, sizeof err);
        }
        free(sets);
    }
    if (recipe_validate(&r, err, sizeof err) != 0) return 0;
    size_t n1, n2;
    char* p1 = print_of(&r, &n1);
    char p2path[700];
    snprintf(p2path, sizeof p2path, "%s/printed.ini", fuzz_scratch());
    fuzz_write(p2path, p1, n1);
    recipe_defaults(&back);
    if (recipe_load(&back, p2path, err, sizeof err) != 0 || recipe_validate(&back, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_recipe: a valid recipe's print does not load back: %s\n--- print:\n%s\n", err, p1);
        abort();
    }
    char* p2 = print_of(&back, &n2);
    if (n1 != n2 || memcmp(p1, p2, n1) || recipe_hash(&r) != recipe_hash(&back)) {
        fprintf(stderr, "fuzz_recipe: the print of a loaded print differs:\n%s\n--- then:\n%s\n", p1, p2);
        abort();
    }
    free(p1), free(p2);
    return 0;
}
