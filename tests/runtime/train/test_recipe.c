/* test_recipe.c — recipe loading, overrides and validation: the shipped recipes load and validate,
 * every bad input gets an error naming FILE:LINE (or --set), the key and what is allowed, every key
 * is documented in recipes/README.md, and printing a recipe loads back to the same recipe.
 * Usage: test_recipe SOURCE_DIR WORK_DIR */
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/train/recipe.h"
#include "runtime/train/trainer.h"

#include "tests/support/check.h"

static const char* work;

static void write_file(const char* path, const char* text) {
    FILE* f = fopenCheck(path, "w");
    fputs(text, f);
    fclose(f);
}

/* Load `text` as a recipe file (plus optional --set), validate, and require that the first error
 * contains every one of the `want` strings (NULL-terminated); want[0] == NULL means "must pass". */
static void expect(const char* label, const char* text, const char* set, const char* const* want) {
    char path[1024], err[2048] = "";
    snprintf(path, sizeof path, "%s/%s.ini", work, label);
    write_file(path, text);
    Recipe r;
    int rc = recipe_load(&r, path, err, sizeof err);
    if (rc == 0 && set) rc = recipe_set(&r, set, err, sizeof err);
    if (rc == 0) rc = recipe_validate(&r, err, sizeof err);
    if (!want[0]) {
        CHECK(rc == 0, "%s: expected success, got: %s", label, err);
        return;
    }
    CHECK(rc != 0, "%s: expected an error", label);
    if (rc == 0) return;
    for (int i = 0; want[i]; i++) {
        char w[1200];
        /* "@" stands for the file's path */
        if (!strcmp(want[i], "@")) snprintf(w, sizeof w, "%s", path);
        else if (!strncmp(want[i], "@:", 2)) snprintf(w, sizeof w, "%s%s", path, want[i] + 1);
        else snprintf(w, sizeof w, "%s", want[i]);
        CHECK(strstr(err, w) != NULL, "%s: error lacks '%s':\n  %s", label, w, err);
    }
    printf("%-22s -> %s\n", label, err);
}

#define W(...) ((const char* const[]){__VA_ARGS__, NULL})
#define OK ((const char* const[]){NULL})

static void test_errors(void) {
    expect("good", "[model]\ntext_layers = 2\n[train]\nsteps = 5\n[optim]\nwarmup = 2\n", NULL, OK);
    expect("unknown_key", "[model]\n; comment\n\ntext_layerz = 2\n", NULL,
           W("@:4:", "unknown key 'text_layerz' in [model]", "text_layers"));
    expect("unknown_section", "[trian]\nsteps = 2\n", NULL, W("@:2:", "unknown section [trian]", "allowed sections"));
    expect("out_of_range", "[train]\nsteps = 5\n[optim]\nbeta2 = 1.5\n", NULL,
           W("@:4:", "optim.beta2 = 1.5 is out of range", "allowed: a number in [0, 0.999999]"));
    expect("not_integer", "[model]\ntext_layers = 4.5\n", NULL,
           W("@:2:", "model.text_layers = '4.5' is not an integer", "allowed: an integer in [1, 1024]"));
    expect("bad_enum", "[data]\npolicy = random\n", NULL,
           W("@:2:", "data.policy = 'random' is not allowed", "one of fifo|ffd|balanced"));
    expect("bad_bool", "[runtime]\ntrace = maybe\n", NULL, W("@:2:", "not a boolean"));
    expect("twice", "[model]\npatch = 8\npatch = 14\n", NULL, W("@:3:", "set twice", "@:2"));
    expect("syntax", "[model]\npatch 8\n", NULL, W("@:2:", "syntax error"));
    /* sizes that do not divide: the error points at the line of the key */
    expect("heads_divide", "[model]\ntext_width = 256\ntext_heads = 5\n", NULL,
           W("@:3:", "model.text_heads = 5", "not divisible", "a divisor of 256"));
    expect("rope1d_even", "[model]\ntext_width = 12\ntext_heads = 4\n", NULL,
           W("@:2:", "model.text_width = 12", "odd (1-D RoPE"));
    expect("rope2d_div4", "[model]\nvision_width = 24\nvision_heads = 4\n", NULL,
           W("@:2:", "model.vision_width = 24", "not divisible by 4 (2-D RoPE"));
    expect("pp_vs_layers", "[model]\nvision_layers = 1\ntext_layers = 3\n[parallel]\npp = 4\n", NULL,
           W("@:5:", "parallel.pp = 4", "only 3 layers", "pp x chunks <= 3"));
    expect("layers_sum", "[model]\ntext_layers = 4\n[parallel]\npp = 2\nlayers = 1,2\n", NULL,
           W("@:5:", "parallel.layers = 1,2", "summing to 4"));
    expect("layers_ok", "[model]\ntext_layers = 4\n[parallel]\npp = 2\nlayers = 1,3\n", NULL, OK);
    expect("tp_divides", "[model]\ntext_heads = 4\n[parallel]\ntp = 3\n", NULL,
           W("@:4:", "parallel.tp = 3", "model.vision_heads (4) is not divisible"));
    expect("cap_mult", "[runtime]\ncap = 1.5x\n", NULL, OK);
    expect("cap_bad", "[runtime]\ncap = lots\n", NULL, W("@:2:", "runtime.cap = 'lots'", "such as 1.5x"));
    expect("cap_mode", "[parallel]\nmode = fixed\n[runtime]\ncap = 2\n", NULL, W("@:4:", "only `ready`, `lookahead` and `adaptive` modes"));
    expect("warmup", "[train]\nsteps = 5\n[optim]\nwarmup = 6\n", NULL, W("@:4:", "optim.warmup = 6", "<= 5"));
    expect("min_lr", "[optim]\nlr = 1e-3\nmin_lr = 1e-2\n", NULL, W("@:3:", "optim.min_lr", "<= 0.001"));
    expect("dump_step", "[optim]\nwarmup = 0\n[train]\nsteps = 5\ndump_step = 9\n", NULL, W("@:5:", "train.dump_step = 9", "1 .. 5"));
    /* a cross-key error on an untouched default names "default" */
    expect("set_pp", "[model]\nvision_layers = 1\ntext_layers = 2\n", "parallel.pp=3",
           W("--set: parallel.pp = 3", "only 2 layers"));
    /* --set */
    expect("set_ok", "[model]\n", "train.steps=70", OK);
    expect("set_warmup", "[model]\n", "train.steps=7", W("default: optim.warmup = 10", "longer than train.steps (7)"));
    expect("set_unknown", "[model]\n", "train.stpes=7", W("--set train.stpes=7", "unknown key 'train.stpes'"));
    expect("set_range", "[model]\n", "model.patch=0", W("--set model.patch=0", "out of range", "[1, 64]"));
    /* numbers beyond a double or a 64-bit integer are out of range, not "not a number" */
    expect("set_underflow", "[model]\n", "optim.lr=1e-400", W("--set optim.lr=1e-400", "out of range", "a number in"));
    expect("set_overflow", "[model]\n", "optim.lr=1e400", W("--set optim.lr=1e400", "out of range"));
    expect("int_overflow", "[train]\nsteps = 99999999999999999999\n", NULL,
           W("@:2:", "train.steps = 99999999999999999999 is out of range", "an integer in"));
    /* a value that would read back as a comment (found by fuzz_recipe): refused, not printed wrong */
    expect("semicolon", "[train]\ninit_from =; lla\n", NULL, W("@:2:", "train.init_from = '; lla'", "start a comment"));
    expect("set_semicolon", "[model]\n", "train.init_from=a ;b", W("--set train.init_from=a ;b", "start a comment"));
    expect("semicolon_inside", "[train]\ninit_from = a;b\n", NULL, OK);
    expect("set_nan", "[model]\n", "optim.lr=nan", W("--set optim.lr=nan", "is not a number"));
    expect("set_syntax", "[model]\n", "steps=7", W("--set steps=7", "expected section.key=value"));
    expect("set_divide", "[model]\n", "model.text_heads=3", W("--set: model.text_heads = 3", "not divisible"));
    expect("default_vs_set", "[model]\n", "model.vision_heads=64",
           W("default: model.vision_width = 128", "head dim 128 / 64 = 2"));

    /* AdamW's betas are in [0, 1): a beta of 1 never forgets and divides by 0 in the bias correction (stated
     * here, not read from the table, so a bound raised in the table is caught) */
    expect("beta1_one", "[model]\n", "optim.beta1=1", W("--set optim.beta1=1", "out of range"));
    expect("beta2_one", "[model]\n", "optim.beta2=1", W("--set optim.beta2=1", "out of range"));
    expect("beta1_high", "[model]\n", "optim.beta1=1.5", W("--set optim.beta1=1.5", "out of range"));
    /* a line break cannot be printed into one recipe line */
    expect("set_newline", "[model]\n", "train.run_dir=a\nb", W("train.run_dir", "line break"));

    char err[512];
    Recipe r;
    CHECK(recipe_load(&r, "/nonexistent/recipe.ini", err, sizeof err) != 0 && strstr(err, "/nonexistent/recipe.ini"),
          "%s", err);

    /* lines of any length: a 300-byte comment and a 250-byte value (inih stopped at 198 bytes) */
    char long_text[2048], dir[300];
    memset(dir, 'd', 250);
    dir[250] = 0;
    snprintf(long_text, sizeof long_text, "; %0300d\n[train]\nrun_dir = /tmp/%s\nsteps = 20\n", 0, dir);
    expect("long_lines", long_text, NULL, OK);
    /* a NUL byte inside a value is an error naming the line, never a shorter value */
    {
        static const char nul[] = "[train]\nsteps = 5\0junk\n";
        char path[1024];
        snprintf(path, sizeof path, "%s/nul.ini", work);
        FILE* f = fopenCheck(path, "wb");
        fwrite(nul, 1, sizeof nul - 1, f);
        fclose(f);
        char e[2048] = "";
        CHECK(recipe_load(&r, path, e, sizeof e) != 0, "steps = 5\\0junk loaded (steps = %d)", r.steps);
        CHECK(strstr(e, ":2:") && strstr(e, "NUL"), "NUL error lacks the line: %s", e);
        printf("%-22s -> %s\n", "nul_byte", e);
    }
    /* a directory is not an empty recipe */
    {
        char e[2048] = "";
        CHECK(recipe_load(&r, work, e, sizeof e) != 0, "a directory loaded as a recipe");
        CHECK(strstr(e, "is a directory, expected a recipe .ini file") != NULL, "directory error: %s", e);
        printf("%-22s -> %s\n", "directory", e);
    }
}

/* The print of r, loaded back and printed again: the same bytes (0), else -1. */
static int print_reload_print(const Recipe* r, const char* label, char* first, size_t first_len) {
    char path[1024], err[2048];
    snprintf(path, sizeof path, "%s/%s.ini", work, label);
    FILE* f = fopenCheck(path, "w");
    recipe_print(r, f);
    fclose(f);
    FILE* fa = fmemopen(first, first_len, "w");
    recipe_print(r, fa);
    fclose(fa);
    static Recipe q;
    if (recipe_load(&q, path, err, sizeof err) != 0) {
        fprintf(stderr, "%s: the print does not load: %s\n", label, err);
        return -1;
    }
    static char again[64 << 10];
    FILE* fb = fmemopen(again, sizeof again, "w");
    recipe_print(&q, fb);
    fclose(fb);
    return strcmp(first, again) == 0 && recipe_hash(&q) == recipe_hash(r) ? 0 : -1;
}

/* White space around a value is no part of it, wherever the value comes from: a --set value is read as the
 * INI reader reads the file's, so a recipe printed after `--set "parallel.layers= 2"` prints the same once
 * loaded back (the fuzzer's property, files_fuzz: it found this one). */
static void test_whitespace(void) {
    static const struct {
        const char *set, *line;
    } cases[] = {{"parallel.layers= 2", "\nlayers = 2\n"},
                 {"train.run_dir= run dir ", "\nrun_dir = run dir\n"},
                 {"train.run_dir=\tr ", "\nrun_dir = r\n"},
                 {"data.policy= balanced", "\npolicy = balanced\n"},
                 {"runtime.trace=true ", "\ntrace = true\n"},
                 {"train.steps= 7 ", "\nsteps = 7\n"},
                 {"optim.lr= 0.5 ", "\nlr = 0.5\n"},
                 {"runtime.cap= 1.5x", "\ncap = 1.5x\n"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Recipe r;
        char err[2048];
        recipe_defaults(&r);
        CHECK(recipe_set(&r, "model.text_layers=2", err, sizeof err) == 0, "%s", err);
        CHECK(recipe_set(&r, cases[i].set, err, sizeof err) == 0, "--set '%s': %s", cases[i].set, err);
        static char first[64 << 10];
        char label[32];
        snprintf(label, sizeof label, "ws%zu", i);
        CHECK(print_reload_print(&r, label, first, sizeof first) == 0, "--set '%s': the printed recipe does not print "
              "the same once loaded back", cases[i].set);
        CHECK(strstr(first, cases[i].line) != NULL, "--set '%s': the print lacks the line '%s'", cases[i].set,
              cases[i].line + 1);
    }
    /* the file's value and --set's are one value: the same hash */
    Recipe a, b;
    char err[2048];
    recipe_defaults(&a);
    recipe_defaults(&b);
    CHECK(recipe_set(&a, "train.freeze= vision ", err, sizeof err) == 0 && recipe_set(&b, "train.freeze=vision", err,
          sizeof err) == 0, "%s", err);
    CHECK(recipe_hash(&a) == recipe_hash(&b), "train.freeze ' vision ' and 'vision' hash differently");
}

static void test_shipped(const char* src) {
    /* every shipped recipe, with a long run folder (a line over inih's 198 bytes) */
    char rdir[1024];
    snprintf(rdir, sizeof rdir, "%s/recipes", src);
    DIR* d = opendir(rdir);
    CHECK(d != NULL, "cannot list %s", rdir);
    char names[64][256];
    int n_names = 0;
    for (struct dirent* e; d && (e = readdir(d)) && n_names < 64;) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".ini")) snprintf(names[n_names++], 256, "%s", e->d_name);
    }
    if (d) closedir(d);
    CHECK(n_names >= 3, "only %d recipes in %s", n_names, rdir);
    for (int i = 0; i < n_names; i++) {
        char path[17408], err[2048];
        snprintf(path, sizeof path, "%s/recipes/%s", src, names[i]);
        Recipe r;
        CHECK(recipe_load(&r, path, err, sizeof err) == 0, "%s", err);
        CHECK(recipe_validate(&r, err, sizeof err) == 0, "%s", err);
        char set[512];
        snprintf(set, sizeof set, "train.run_dir=run/%0240d", i);
        CHECK(recipe_set(&r, set, err, sizeof err) == 0, "%s", err);
        /* printing loads back to the same recipe */
        char out[17408];
        snprintf(out, sizeof out, "%s/printed-%s", work, names[i]);
        FILE* f = fopenCheck(out, "w");
        recipe_print(&r, f);
        fclose(f);
        Recipe q;
        CHECK(recipe_load(&q, out, err, sizeof err) == 0, "%s", err);
        CHECK(recipe_hash(&q) == recipe_hash(&r), "%s: printed recipe hashes differently", names[i]);
        char a[64 << 10], b[64 << 10];
        FILE* fa = fmemopen(a, sizeof a, "w");
        FILE* fb = fmemopen(b, sizeof b, "w");
        recipe_print(&r, fa);
        recipe_print(&q, fb);
        fclose(fa);
        fclose(fb);
        CHECK(!strcmp(a, b), "%s: printed recipe does not round-trip", names[i]);
    }
    char path[1024], err[2048];
    snprintf(path, sizeof path, "%s/recipes/llava-1.5-7b.ini", src);
    Recipe r;
    recipe_load(&r, path, err, sizeof err);
    CHECK(r.vision_width == 1024 && r.vision_layers == 24 && r.vision_heads == 16 && r.patch == 14 &&
              r.max_patches == 576,
          "7b vision");
    CHECK(r.text_width == 4096 && r.text_layers == 32 && r.text_heads == 32 && r.ffn_hidden == 11008 && r.vocab == 32064 &&
              !strcmp(r.vision_arch, "clip") && r.vision_feature_layer == -2 && r.vision_image_size == 336 &&
              !strcmp(r.projector_act, "gelu"),
          "7b text");
    /* the hash follows the math, not the bookkeeping */
    uint64_t h = recipe_hash(&r);
    CHECK(recipe_set(&r, "train.log_every=7", err, sizeof err) == 0, "%s", err);
    CHECK(recipe_hash(&r) == h, "log_every changed the hash");
    CHECK(recipe_set(&r, "optim.lr=1e-4", err, sizeof err) == 0, "%s", err);
    CHECK(recipe_hash(&r) != h, "lr did not change the hash");

    /* FNV-1a 64 with the published offset basis (test vectors from the FNV reference: "" and "a"); the
     * recipe hash was once computed with a mistyped basis (1469598103934665603, a digit short). */
    CHECK(rr_fnv1a64("", 0) == 0xcbf29ce484222325ull, "FNV-1a(\"\") = %016llx", (unsigned long long)rr_fnv1a64("", 0));
    CHECK(rr_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull, "FNV-1a(\"a\") = %016llx", (unsigned long long)rr_fnv1a64("a", 1));
    /* the global batch, not its split over replicas: dp 2 x 2 microbatches is dp 1 x 4, not dp 1 x 2 */
    {
        Recipe a = r, b = r, c = r;
        a.dp = 2, a.microbatches = 2;
        b.dp = 1, b.microbatches = 4;
        c.dp = 1, c.microbatches = 2;
        CHECK(recipe_hash(&a) == recipe_hash(&b), "dp 2 x 2 microbatches hashes unlike dp 1 x 4");
        CHECK(recipe_hash(&a) != recipe_hash(&c), "dp 2 x 2 microbatches hashes like dp 1 x 2");
    }
    /* recipe_hash = FNV-1a over "section.key=value\n" of the hashed keys in table order, rebuilt here, with
     * data.microbatches as microbatches x dp and parallel.dp as 1; a key hashed 2 (added after checkpoints
     * were written) only away from its default. Checked with every such key at its default and away from it. */
    for (int away = 0; away < 2; away++) {
    if (away) CHECK(recipe_set(&r, "optim.schedule=linear", err, sizeof err) == 0 &&
                    recipe_set(&r, "optim.projector_lr=0.5", err, sizeof err) == 0, "set: %s", err);
    Recipe* dflt = callocCheck(1, sizeof *dflt);
    recipe_defaults(dflt);
    char* text = callocCheck(1, 1 << 16);
    size_t off = 0;
    int n2 = 0;
    for (int i = 0; i < recipe_key_count(); i++) {
        const RecipeKey* k = recipe_key_get(i);
        if (!k->hashed) continue;
        const char* f = (const char*)&r + k->offset;
        if (k->hashed == 2) {
            const char* df = (const char*)dflt + k->offset;
            int same = k->type == RKEY_FLOAT ? *(const double*)f == *(const double*)df
                       : k->type == RKEY_STRING || k->type == RKEY_ENUM ? !strcmp(f, df)
                       : k->type == RKEY_I64 ? *(const int64_t*)f == *(const int64_t*)df
                                             : *(const int*)f == *(const int*)df;
            if (same) continue;
            n2++;
        }
        switch (k->type) {
        case RKEY_INT:
        case RKEY_BOOL: {
            int v = *(const int*)f;
            if (!strcmp(k->key, "microbatches")) v *= r.dp;
            if (!strcmp(k->section, "parallel") && !strcmp(k->key, "dp")) v = 1;
            off += (size_t)snprintf(text + off, (1 << 16) - off, "%s.%s=%d\n", k->section, k->key, v);
            break;
        }
        case RKEY_I64:
            off += (size_t)snprintf(text + off, (1 << 16) - off, "%s.%s=%lld\n", k->section, k->key,
                                    (long long)*(const int64_t*)f);
            break;
        case RKEY_FLOAT: off += (size_t)snprintf(text + off, (1 << 16) - off, "%s.%s=%a\n", k->section, k->key, *(const double*)f); break;
        case RKEY_STRING:
        case RKEY_ENUM: off += (size_t)snprintf(text + off, (1 << 16) - off, "%s.%s=%s\n", k->section, k->key, f); break;
        }
    }
    CHECK(recipe_hash(&r) == rr_fnv1a64(text, off), "recipe_hash is not FNV-1a of the hashed keys (%s)",
          away ? "keys hashed 2 away from their defaults" : "keys hashed 2 at their defaults");
    CHECK(n2 == (away ? 2 : 0), "%d keys hashed 2 away from their defaults, expected %d", n2, away ? 2 : 0);
    free(text);
    free(dflt);
    }
}

/* ---- every key's range, from the key table itself ---- */

/* Set key k to `value` by --set on a recipe of defaults: 0 and the value read back as recipe_print writes
 * it, or -1 with the refusal in err. */
static int set_one(const RecipeKey* k, const char* value, char* got, size_t got_len, char* err, size_t err_len) {
    static Recipe r;
    recipe_defaults(&r);
    char set[2048];
    snprintf(set, sizeof set, "%s.%s=%s", k->section, k->key, value);
    err[0] = 0;
    if (recipe_set(&r, set, err, err_len) != 0) return -1;
    recipe_key_format(&r, k, got, got_len);
    return 0;
}

static void expect_taken(const RecipeKey* k, const char* value, const char* want) {
    char got[1024], err[2048];
    int rc = set_one(k, value, got, sizeof got, err, sizeof err);
    CHECK(rc == 0, "%s.%s = '%s' (inside the table's range) refused: %s", k->section, k->key, value, err);
    CHECK(rc != 0 || !strcmp(got, want), "%s.%s = '%s' read as '%s', expected '%s'", k->section, k->key, value, got,
          want);
}

static void expect_refused(const RecipeKey* k, const char* value, const char* why) {
    char got[1024], err[2048], name[160];
    int rc = set_one(k, value, got, sizeof got, err, sizeof err);
    snprintf(name, sizeof name, "%s.%s", k->section, k->key);
    CHECK(rc != 0, "%s = '%s' (outside the table's range) taken as '%s'", name, value, got);
    CHECK(rc == 0 || (strstr(err, name) && strstr(err, why)), "%s = '%s': the refusal lacks '%s' or the key: %s",
          name, value, why, err);
}

/* Every numeric key: its min and max are taken (and read back as those numbers), the values just outside
 * are refused as out of range; every enum: each choice taken, one other refused; every bool: its spellings;
 * every string: the longest that fits taken, one byte more refused. All from the table, so a key added or
 * a bound changed is tested with no edit here (recipes/README.md's column is compared with it below). */
static void test_ranges(void) {
    int n_num = 0, n_enum = 0, n_str = 0, n_bool = 0;
    for (int i = 0; i < recipe_key_count(); i++) {
        const RecipeKey* k = recipe_key_get(i);
        char a[64], b[64];
        switch (k->type) {
        case RKEY_INT:
        case RKEY_I64: {
            CHECK(k->min == floor(k->min) && k->max == floor(k->max) && k->min < k->max, "%s.%s: bounds %g .. %g",
                  k->section, k->key, k->min, k->max);
            if (k->type == RKEY_INT)
                CHECK(k->min >= INT_MIN && k->max <= INT_MAX, "%s.%s: bounds %g .. %g do not fit an int", k->section,
                      k->key, k->min, k->max);
            else /* every integer up to 2^53 - 1 is exact in the double the parser compares */
                CHECK(k->min >= -9007199254740991.0 && k->max <= 9007199254740991.0, "%s.%s: bounds %g .. %g",
                      k->section, k->key, k->min, k->max);
            snprintf(a, sizeof a, "%.0f", k->min);
            snprintf(b, sizeof b, "%.0f", k->max);
            expect_taken(k, a, a);
            expect_taken(k, b, b);
            snprintf(a, sizeof a, "%.0f", k->min - 1);
            snprintf(b, sizeof b, "%.0f", k->max + 1);
            expect_refused(k, a, "out of range");
            expect_refused(k, b, "out of range");
            n_num++;
            break;
        }
        case RKEY_FLOAT: {
            CHECK(k->min < k->max && isfinite(k->min) && isfinite(k->max), "%s.%s: bounds %g .. %g", k->section,
                  k->key, k->min, k->max);
            char fa[64], fb[64];
            snprintf(a, sizeof a, "%.17g", k->min);
            snprintf(b, sizeof b, "%.17g", k->max);
            /* read back in recipe_print's shortest form of the same double */
            snprintf(fa, sizeof fa, "%g", k->min);
            snprintf(fb, sizeof fb, "%g", k->max);
            for (int prec = 6; strtod(fa, NULL) != k->min && prec <= 17; prec++) snprintf(fa, sizeof fa, "%.*g", prec, k->min);
            for (int prec = 6; strtod(fb, NULL) != k->max && prec <= 17; prec++) snprintf(fb, sizeof fb, "%.*g", prec, k->max);
            expect_taken(k, a, fa);
            expect_taken(k, b, fb);
            /* the neighbouring doubles; below 0 also the smallest normal number (the neighbour of 0 is a
             * subnormal, which strtod reports as an underflow) */
            snprintf(a, sizeof a, "%.17g", nextafter(k->min, -INFINITY));
            snprintf(b, sizeof b, "%.17g", nextafter(k->max, INFINITY));
            expect_refused(k, a, "out of range");
            expect_refused(k, b, "out of range");
            if (k->min == 0) expect_refused(k, "-2.2250738585072014e-308", "out of range");
            n_num++;
            break;
        }
        case RKEY_ENUM: {
            int n = 0;
            for (const char* c = k->choices; *c;) {
                const char* bar = strchr(c, '|');
                size_t l = bar ? (size_t)(bar - c) : strlen(c);
                snprintf(a, sizeof a, "%.*s", (int)l, c);
                expect_taken(k, a, a);
                n++;
                c += l + (bar ? 1 : 0);
            }
            CHECK(n >= 2, "%s.%s: %d choices", k->section, k->key, n);
            snprintf(a, sizeof a, "%.*sX", (int)strcspn(k->choices, "|"), k->choices);
            expect_refused(k, a, "is not allowed");
            n_enum++;
            break;
        }
        case RKEY_BOOL: {
            const char* yes[] = {"true", "1", "yes"};
            const char* no[] = {"false", "0", "no"};
            for (int j = 0; j < 3; j++) expect_taken(k, yes[j], "true"), expect_taken(k, no[j], "false");
            expect_refused(k, "2", "not a boolean");
            expect_refused(k, "True", "not a boolean");
            n_bool++;
            break;
        }
        case RKEY_STRING: {
            CHECK(k->size >= 2 && k->size <= RECIPE_STR, "%s.%s: size %zu", k->section, k->key, k->size);
            char* v = mallocCheck(k->size + 1);
            memset(v, 'x', k->size);
            v[k->size - 1] = 0;
            expect_taken(k, v, v);
            v[k->size - 1] = 'x';
            v[k->size] = 0;
            expect_refused(k, v, "too long");
            free(v);
            n_str++;
            break;
        }
        }
    }
    /* the kinds are all there (a table whose numbers all became strings tests nothing above) */
    CHECK(n_num >= 40 && n_enum >= 8 && n_bool >= 8 && n_str >= 8, "keys tested: %d numeric, %d enum, %d bool, %d string",
          n_num, n_enum, n_bool, n_str);
    printf("ranges: %d numeric keys at min, max and just outside; %d enums, %d bools, %d strings\n", n_num, n_enum,
           n_bool, n_str);
}

/* recipes/README.md's "allowed" column of key k, as the table gives it (the form of `train --list-keys`). */
static void doc_allowed(const RecipeKey* k, char* s, size_t n) {
    switch (k->type) {
    case RKEY_INT:
    case RKEY_I64:
        if (k->max >= 9007199254740991.0) snprintf(s, n, ">= %.0f", k->min);
        else snprintf(s, n, "%.0f .. %.0f", k->min, k->max);
        break;
    case RKEY_FLOAT: snprintf(s, n, "%g .. %g", k->min, k->max); break;
    case RKEY_STRING: snprintf(s, n, "path / text (< %zu bytes)", k->size); break;
    case RKEY_BOOL: snprintf(s, n, "`true`, `false`"); break;
    case RKEY_ENUM: {
        size_t o = 0;
        s[0] = 0;
        for (const char* c = k->choices; *c && o < n;) {
            const char* bar = strchr(c, '|');
            size_t l = bar ? (size_t)(bar - c) : strlen(c);
            o += (size_t)snprintf(s + o, n - o, "%s`%.*s`", o ? ", " : "", (int)l, c);
            c += l + (bar ? 1 : 0);
        }
        break;
    }
    }
}

/* Every key appears in recipes/README.md as a table row "| `section.key` | type | default | ...". */
static void test_documented(const char* src) {
    char path[1024];
    snprintf(path, sizeof path, "%s/recipes/README.md", src);
    size_t n;
    char* doc = rr_read_file(path, &n, RR_MAX_JSONL);
    CHECK(doc != NULL, "cannot read %s", path);
    if (!doc) return;
    for (int i = 0; i < recipe_key_count(); i++) {
        const RecipeKey* k = recipe_key_get(i);
        char row[256];
        snprintf(row, sizeof row, "| `%s.%s` | %s |", k->section, k->key, recipe_key_type_name(k->type));
        char* at = strstr(doc, row);
        CHECK(at != NULL, "recipes/README.md does not document %s.%s (expected a row starting '%s')", k->section,
              k->key, row);
        if (!at) continue;
        /* the default column follows */
        char def[600];
        snprintf(def, sizeof def, "%s `%s` |", row, k->def);
        CHECK(!strncmp(at, def, strlen(def)), "recipes/README.md: %s.%s default is not `%s`", k->section, k->key,
              k->def);
        if (strncmp(at, def, strlen(def)) != 0) continue;
        /* then the allowed column: the table's range or choices, as written there */
        const char* col = at + strlen(def) + 1;
        const char* end = strstr(col, " |");
        char want[256], got[256] = "";
        doc_allowed(k, want, sizeof want);
        if (end) snprintf(got, sizeof got, "%.*s", (int)(end - col), col);
        CHECK(end && !strcmp(got, want), "recipes/README.md: %s.%s is documented as allowing '%s', the key table "
              "allows '%s'", k->section, k->key, got, want);
    }
    free(doc);
}

/* --dry-run's component counts (recipe_param_counts, from the formulas) add up to the model's own
 * parameter table (model_stage_param_count), exactly, for every shipped recipe. */
static void test_param_counts(const char* src) {
    const char* names[] = {"llava.ini", "llava-1.5-7b.ini", "test-synthetic.ini", "demo.ini"};
    for (int i = 0; i < 4; i++) {
        char path[1024], err[2048];
        snprintf(path, sizeof path, "%s/recipes/%s", src, names[i]);
        Recipe r;
        CHECK(recipe_load(&r, path, err, sizeof err) == 0, "%s", err);
        int V = r.vocab ? r.vocab : 2048;
        ModelConfig mc = train_model_config(&r, V);
        ModelParamCounts c;
        model_param_counts(&mc, &c);
        double model = (double)model_stage_param_count(&mc, 0, r.text_layers);
        CHECK(c.total == model, "%s: dry-run counts %.0f parameters, the model registers %.0f", names[i], c.total, model);
        /* and split over two stages the parts add up to the whole */
        if (r.text_layers >= 2) {
            double two = (double)model_stage_param_count(&mc, 0, 1) + (double)model_stage_param_count(&mc, 1, r.text_layers);
            CHECK(two == model, "%s: stage split changes the count", names[i]);
        }
    }
    /* the LM variants: grouped-query attention, biases, tied embeddings (the last stage's copy of the
     * embedding is a second copy of one tensor, counted once by the formulas) */
    char path[1024], err[2048];
    snprintf(path, sizeof path, "%s/recipes/test-synthetic.ini", src);
    Recipe r;
    CHECK(recipe_load(&r, path, err, sizeof err) == 0, "%s", err);
    const char* sets[] = {"model.text_heads=4", "model.text_kv_heads=2", "model.text_qkv_bias=true", "model.text_o_bias=true",
                          "model.tie_embeddings=true"};
    for (int i = 0; i < 5; i++) CHECK(recipe_set(&r, sets[i], err, sizeof err) == 0, "%s", err);
    ModelConfig mc = train_model_config(&r, r.vocab);
    ModelParamCounts c;
    model_param_counts(&mc, &c);
    double model = (double)model_stage_param_count(&mc, 0, r.text_layers);
    CHECK(c.total == model, "LM variants: dry-run counts %.0f parameters, the model registers %.0f", c.total, model);
    double two = (double)model_stage_param_count(&mc, 0, 1) + (double)model_stage_param_count(&mc, 1, r.text_layers);
    CHECK(two == model + (double)mc.V * mc.Dt, "LM variants over two stages: %.0f = %.0f + the embedding's copy", two, model);
}

/* runtime.precision = auto (the default): bf16 on cuda, fp32 on the cpu, an explicit value kept; resolved by
 * recipe_validate, so the recipe as printed (and hashed) holds the value that trained. */
static void test_precision_default(void) {
    const struct { const char* text; const char* want; } cases[] = {
        {"[runtime]\nbackend = cuda\n", "bf16"},
        {"[runtime]\nbackend = cpu\n", "fp32"},
        {"[runtime]\nbackend = cuda\nprecision = fp32\n", "fp32"},
        {"[runtime]\nbackend = cpu\nprecision = bf16\n", "bf16"},
        {"[runtime]\nbackend = cuda\nprecision = auto\n", "bf16"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char path[1024], err[2048] = "";
        snprintf(path, sizeof path, "%s/precision%zu.ini", work, k);
        write_file(path, cases[k].text);
        Recipe r;
        int rc = recipe_load(&r, path, err, sizeof err);
        if (rc == 0) rc = recipe_validate(&r, err, sizeof err);
        CHECK(rc == 0 && !strcmp(r.precision, cases[k].want), "%s: precision '%s', expected '%s' (%s)", cases[k].text,
              r.precision, cases[k].want, err);
    }
    Recipe r;
    char err[256];
    recipe_defaults(&r);
    CHECK(!strcmp(r.precision, "auto"), "the default is '%s', not auto", r.precision);
    CHECK(recipe_set(&r, "runtime.backend=cuda", err, sizeof err) == 0 && recipe_validate(&r, err, sizeof err) == 0 &&
          !strcmp(r.precision, "bf16"), "--set runtime.backend=cuda: precision '%s'", r.precision);
    printf("precision default: ok\n");
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_recipe SOURCE_DIR WORK_DIR\n");
        return 2;
    }
    work = argv[2];
    test_errors();
    test_ranges();
    test_whitespace();
    test_shipped(argv[1]);
    test_documented(argv[1]);
    test_param_counts(argv[1]);
    test_precision_default();
    if (check_failures) fprintf(stderr, "%d failure(s)\n", check_failures);
    else printf("recipe tests: ok\n");
    return check_failures ? 1 : 0;
}
