/* cmd_tensors.c — `rrfp-mm tensors ls|diff`: inspect and compare safetensors files or directories of
 * them (checkpoint shards of several pipeline ranks are merged by name). `diff` is how the pipeline
 * equivalence tests compare a parallel step with the single-process step. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/checkpoint.h"
#include "engine/safetensors.h"
#include "runtime/cli/cli.h"
#include "runtime/cli/args.h"

typedef struct {
    StFile* files;
    int n;
} StSet;

/* tensors diff reads both tensors this many elements at a time */
#define DIFF_CHUNK ((int64_t)1 << 20)

static int ends_with(const char* s, const char* suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int cmp_str(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

static int stset_assemble(StSet* s);
static void stset_free(StSet* s);

/* A file, or every *.safetensors in a directory (sorted, so output is stable). `prefix` filters the
 * directory's file names (e.g. "model" to skip optimiser files). */
static int stset_open(StSet* s, const char* path, const char* file_prefix) {
    memset(s, 0, sizeof *s);
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "rrfp-mm: error: cannot open '%s': %s\n", path, strerror(errno)); /* ELOOP, EACCES too */
        return -1;
    }
    char** names = NULL;
    int nn = 0;
    if (S_ISDIR(st.st_mode)) {
        DIR* d = opendir(path);
        struct dirent* e;
        while (d && (e = readdir(d))) {
            if (!ends_with(e->d_name, ".safetensors")) continue;
            if (file_prefix && strncmp(e->d_name, file_prefix, strlen(file_prefix))) continue;
            names = reallocCheck(names, sizeof(char*) * (size_t)(nn + 1));
            size_t len = strlen(path) + strlen(e->d_name) + 2;
            names[nn] = mallocCheck(len);
            snprintf(names[nn], len, "%s/%s", path, e->d_name);
            nn++;
        }
        if (d) closedir(d);
        qsort(names, (size_t)nn, sizeof *names, cmp_str);
        if (nn == 0) {
            fprintf(stderr, "rrfp-mm: error: no .safetensors files in '%s'\n", path);
            free(names);
            return -1;
        }
    } else {
        names = mallocCheck(sizeof(char*));
        names[0] = strdup(path);
        nn = 1;
    }
    s->files = callocCheck((size_t)nn, sizeof *s->files);
    s->n = nn;
    int rc = 0;
    for (int i = 0; i < nn; i++) {
        char err[512];
        if (st_load(&s->files[i], names[i], err, sizeof err) != 0) {
            fprintf(stderr, "rrfp-mm: error: %s\n", err);
            rc = -1;
        } else if (nn > ST_KEEP_OPEN) {
            st_close_fd(&s->files[i]); /* a folder of many shards: each read reopens its file */
        }
        free(names[i]);
    }
    free(names);
    if (rc == 0) rc = stset_assemble(s);
    if (rc != 0) { /* a refusal frees what it read (the files loaded before the bad one) */
        stset_free(s);
        memset(s, 0, sizeof *s);
    }
    return rc;
}

/* A tensor stored as a slice of a global tensor (tensor-parallel shards: "slice.<name>" metadata). */
/* "slice.<name>", whole however long the name (a 200-byte buffer cut long names, and a cut key could
 * name another tensor's slice) */
static const char* slice_meta(const StFile* f, const char* name) {
    size_t n = strlen(name) + 7;
    char* key = mallocCheck(n);
    snprintf(key, n, "slice.%s", name);
    const char* v = st_meta(f, key);
    free(key);
    return v;
}

static int is_piece(const StFile* f, const char* name) { return slice_meta(f, name) != NULL; }

/* Tensor-parallel shards hold slices of global tensors: assemble every sliced tensor (by its global
 * name, from all the set's pieces) into one more file of the set, so layouts compare by global name. */
static int stset_assemble(StSet* s) {
    StWriter* w = NULL;
    float** bufs = NULL;
    int nb = 0, rc = 0;
    for (int f = 0; f < s->n && rc == 0; f++)
        for (int i = 0; i < s->files[f].n && rc == 0; i++) {
            const char* name = s->files[f].tensors[i].name;
            if (!is_piece(&s->files[f], name)) continue;
            int seen = 0; /* assembled already from an earlier file's piece */
            /* (names are unique within a file: the reader refuses a repeated one) */
            for (int g = 0; g < f && !seen; g++) seen = st_find(&s->files[g], name) != NULL;
            if (seen) continue;
            ParamSlice sl, whole = {.dim = -1};
            int ndim;
            char err[512];
            if (params_slice_parse(slice_meta(&s->files[f], name), &sl, &ndim) != 0) {
                fprintf(stderr, "rrfp-mm: error: %s: tensor %s: malformed slice description\n", s->files[f].path, name);
                rc = -1;
                break;
            }
            /* the global tensor is assembled from its pieces, so it can hold no more values than they do
             * together (their bytes are in the files): a slice description claiming more is refused before
             * anything is sized from it */
            int64_t n = 1, held = 0;
            for (int d = 0; d < ndim; d++) n *= sl.gshape[d]; /* no overflow: params_slice_parse checked it */
            for (int g = 0; g < s->n; g++) {
                const StTensor* t = st_find(&s->files[g], name);
                if (t) held += (int64_t)((t->end - t->begin) / dtype_size(t->dtype));
            }
            if (n > held) {
                fprintf(stderr, "rrfp-mm: error: %s: tensor %s: its slice description (%s) gives a global tensor of %lld "
                        "values, but the pieces read hold %lld: the other tensor-parallel ranks' files are not among "
                        "those read (give the checkpoint folder, which holds every rank's file), or the slice "
                        "description is damaged\n", s->files[f].path, name, slice_meta(&s->files[f], name),
                        (long long)n, (long long)held);
                rc = -1;
                break;
            }
            bufs = reallocCheck(bufs, sizeof(float*) * (size_t)(nb + 1));
            bufs[nb] = mallocCheck((size_t)n * sizeof(float) + 1);
            if (checkpoint_read_assembled(s->files, s->n, name, &whole, ndim, sl.gshape, bufs[nb], 0, 0, err, sizeof err) != 0) {
                fprintf(stderr, "rrfp-mm: error: %s\n", err);
                free(bufs[nb]);
                rc = -1;
                break;
            }
            if (!w) w = st_writer_new();
            st_writer_add(w, name, DTYPE_F32, ndim, sl.gshape, bufs[nb]);
            nb++;
        }
    if (rc == 0 && w) {
        char path[] = "/tmp/rrfp-tensors-XXXXXX", err[512];
        int fd = mkstemp(path);
        if (fd < 0) {
            fprintf(stderr, "rrfp-mm: error: cannot create a temporary file for the assembled tensors\n");
            rc = -1;
        } else {
            close(fd);
            s->files = reallocCheck(s->files, sizeof *s->files * (size_t)(s->n + 1));
            memset(&s->files[s->n], 0, sizeof s->files[s->n]);
            if (st_writer_write(w, path, err, sizeof err) != 0 || st_load(&s->files[s->n], path, err, sizeof err) != 0) {
                fprintf(stderr, "rrfp-mm: error: %s\n", err);
                rc = -1;
            } else {
                s->n++;
            }
            unlink(path);
        }
    }
    if (w) st_writer_free(w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(bufs);
    return rc;
}

static const StTensor* stset_find(const StSet* s, const char* name, const StFile** file) {
    for (int i = 0; i < s->n; i++) {
        const StTensor* t = st_find(&s->files[i], name);
        if (t && is_piece(&s->files[i], name)) continue;
        if (t) {
            if (file) *file = &s->files[i];
            return t;
        }
    }
    return NULL;
}

static void stset_free(StSet* s) {
    for (int i = 0; i < s->n; i++) st_free(&s->files[i]);
    free(s->files);
}

static int64_t numel(const StTensor* t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static void usage(FILE* f) {
    fprintf(f, "usage: rrfp-mm tensors ls PATH\n"
               "       rrfp-mm tensors diff A B [--rtol R] [--atol A] [--files PREFIX] [--quiet]\n\n"
               "PATH, A, B: a .safetensors file or a directory of them (merged by tensor name; the slices of a\n"
               "tensor-parallel layout's shards are assembled into their global tensors).\n"
               "diff compares every tensor of A with the same-named tensor of B (both must hold the same names\n"
               "and shapes) and fails (exit 1) when any element has |a-b| > atol + rtol*|b|. Defaults: rtol 0,\n"
               "atol 0 (bitwise equality). --files PREFIX only reads files whose name starts with PREFIX.\n");
}

/* A QLoRA base weight's NF4 form (engine/params_quant_st.c): its blocks, after the tensor's own line */
static void ls_nf4(const StFile* f, const char* name) {
    char key[200];
    snprintf(key, sizeof key, "nf4.%s", name);
    const char* meta = st_meta(f, key);
    long long oc = 0, ic = 0;
    int block = 0, nested = 0;
    if (!meta || sscanf(meta, "shape=%lld,%lld;block=%d;nested_block=%d", &oc, &ic, &block, &nested) != 4 || block < 1 ||
        nested < 1)
        return;
    snprintf(key, sizeof key, "%s.nf4.offset", name);
    const StTensor* o = st_find(f, key);
    float off = 0;
    char err[512];
    if (o && o->dtype == DTYPE_F32 && o->end - o->begin == 4 && st_read_raw(f, o, 0, 4, &off, err, sizeof err) != 0)
        fprintf(stderr, "rrfp-mm: warning: %s\n", err);
    long long nb = (oc * ic + block - 1) / block;
    printf("%-56s NF4  [%lld, %lld]  %lld blocks of %d, absmax U8 double-quantised (%lld of %d), offset %g\n", name, oc, ic,
           nb, block, (nb + nested - 1) / nested, nested, (double)off);
}

static int tensors_ls(const char* path) {
    StSet s;
    if (stset_open(&s, path, NULL) != 0) return 1;
    for (int f = 0; f < s.n; f++) {
        printf("# %s\n", s.files[f].path);
        for (int i = 0; i < s.files[f].n; i++) {
            const StTensor* t = &s.files[f].tensors[i];
            printf("%-56s %-4s [", t->name, dtype_name(t->dtype));
            for (int d = 0; d < t->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)t->shape[d]);
            printf("]\n");
            ls_nf4(&s.files[f], t->name);
        }
    }
    stset_free(&s);
    return 0;
}

static int tensors_diff(const char* a_path, const char* b_path, double rtol, double atol, const char* prefix,
                        int quiet) {
    StSet a, b;
    if (stset_open(&a, a_path, prefix) != 0) return 1;
    if (stset_open(&b, b_path, prefix) != 0) {
        stset_free(&a);
        return 1;
    }
    int bad = 0, compared = 0;
    double worst = 0;
    char worst_name[160] = "";
    for (int f = 0; f < a.n; f++)
        for (int i = 0; i < a.files[f].n; i++) {
            const StTensor* ta = &a.files[f].tensors[i];
            if (is_piece(&a.files[f], ta->name)) continue; /* compared assembled */
            const StFile* fb = NULL;
            const StTensor* tb = stset_find(&b, ta->name, &fb);
            if (!tb) {
                fprintf(stderr, "tensors diff: %s is in %s but not in %s\n", ta->name, a_path, b_path);
                bad++;
                continue;
            }
            int same_shape = ta->ndim == tb->ndim;
            for (int d = 0; same_shape && d < ta->ndim; d++) same_shape = ta->shape[d] == tb->shape[d];
            if (!same_shape || ta->dtype != tb->dtype) {
                fprintf(stderr, "tensors diff: %s has another shape or dtype in %s\n", ta->name, b_path);
                bad++;
                continue;
            }
            int64_t n = numel(ta);
            double maxabs = 0, maxrel = 0;
            int64_t at = -1, nbad = 0;
            /* both tensors are read a chunk at a time (memory: two chunks, whatever size the files claim) */
            int exact = ta->dtype == DTYPE_I32 || ta->dtype == DTYPE_U8;
            int codes = ta->dtype == DTYPE_U8 && ends_with(ta->name, ".nf4.codes");
            int64_t blocks = 0, last = -1, chunk = DIFF_CHUNK;
            size_t es = dtype_size(ta->dtype);
            void* ca = mallocCheck((size_t)(n < chunk ? n : chunk) * (exact ? es : sizeof(float)) + 1);
            void* cb = mallocCheck((size_t)(n < chunk ? n : chunk) * (exact ? es : sizeof(float)) + 1);
            char err[512];
            int read_failed = 0;
            for (int64_t k0 = 0; k0 < n && !read_failed; k0 += chunk) {
                int64_t m = n - k0 < chunk ? n - k0 : chunk;
                read_failed = exact ? st_read_raw(&a.files[f], ta, (uint64_t)k0 * es, (uint64_t)m * es, ca, err, sizeof err) != 0 ||
                                          st_read_raw(fb, tb, (uint64_t)k0 * es, (uint64_t)m * es, cb, err, sizeof err) != 0
                                    : st_read_f32_range(&a.files[f], ta, (uint64_t)k0, (uint64_t)m, ca, err, sizeof err) != 0 ||
                                          st_read_f32_range(fb, tb, (uint64_t)k0, (uint64_t)m, cb, err, sizeof err) != 0;
                if (read_failed) break;
                if (ta->dtype == DTYPE_I32) {
                    for (int64_t i = 0; i < m; i++) {
                        int32_t x, y;
                        memcpy(&x, (const char*)ca + 4 * i, 4);
                        memcpy(&y, (const char*)cb + 4 * i, 4);
                        if (x != y) {
                            nbad++;
                            if (at < 0) at = k0 + i;
                        }
                    }
                } else if (ta->dtype == DTYPE_U8) { /* stored bytes (a QLoRA base's NF4 codes): equal or not */
                    for (int64_t i = 0; i < m; i++)
                        if (((const uint8_t*)ca)[i] != ((const uint8_t*)cb)[i]) {
                            int64_t k = k0 + i;
                            nbad++;
                            if (at < 0) at = k;
                            if (k / 32 != last) blocks++, last = k / 32; /* 32 bytes: one block of 64 codes */
                        }
                } else {
                    const float* xa = ca;
                    const float* xb = cb;
                    for (int64_t i = 0; i < m; i++) {
                        double d = fabs((double)xa[i] - (double)xb[i]);
                        int nan_mismatch = isnan(xa[i]) != isnan(xb[i]);
                        double rel = d / (fabs((double)xb[i]) + 1e-30);
                        if (d > maxabs) maxabs = d;
                        if (d > 0 && rel > maxrel) maxrel = rel;
                        if (nan_mismatch || d > atol + rtol * fabs((double)xb[i])) {
                            nbad++;
                            if (at < 0) at = k0 + i;
                        }
                    }
                }
            }
            free(ca), free(cb);
            if (read_failed) {
                fprintf(stderr, "rrfp-mm: error: %s\n", err);
                bad++;
                continue;
            }
            if (codes && nbad)
                fprintf(stderr, "tensors diff: %s: %lld of %lld NF4 blocks of 64 hold other codes\n", ta->name,
                        (long long)blocks, (long long)((n + 31) / 32));
            if (!exact && maxabs > worst) {
                worst = maxabs;
                snprintf(worst_name, sizeof worst_name, "%s", ta->name);
            }
            compared++;
            if (nbad) {
                bad++;
                fprintf(stderr, "tensors diff: %s: %lld of %lld elements differ beyond atol %g + rtol %g (first at %lld; max abs %.3g, max rel %.3g)\n",
                        ta->name, (long long)nbad, (long long)n, atol, rtol, (long long)at, maxabs, maxrel);
            } else if (!quiet) {
                printf("%-56s ok  max abs %.3g  max rel %.3g\n", ta->name, maxabs, maxrel);
            }
        }
    for (int f = 0; f < b.n; f++)
        for (int i = 0; i < b.files[f].n; i++)
            if (!is_piece(&b.files[f], b.files[f].tensors[i].name) && !stset_find(&a, b.files[f].tensors[i].name, NULL)) {
                fprintf(stderr, "tensors diff: %s is in %s but not in %s\n", b.files[f].tensors[i].name, b_path, a_path);
                bad++;
            }
    printf("tensors diff: %d tensors compared, %d differ (largest abs difference %.3g in %s)\n", compared, bad, worst,
           worst_name[0] ? worst_name : "-");
    stset_free(&a);
    stset_free(&b);
    return bad ? 1 : 0;
}

int cmd_tensors(int argc, char** argv) {
    int rc;
    if (cli_sub_help(argc, argv, usage, &rc)) return rc;
    if (!strcmp(argv[1], "ls")) {
        if (argc != 3 || argv[2][0] == '-') {
            int bad = 2; /* the first option, else the word after PATH */
            while (bad < argc - 1 && argv[bad][0] != '-') bad++;
            if (argc > 2) cli_unknown_option("tensors ls", argv[bad], usage, "rrfp-mm tensors ls ");
            else usage(stderr);
            return 2;
        }
        return tensors_ls(argv[2]);
    }
    if (!strcmp(argv[1], "diff")) {
        const char* paths[2] = {NULL, NULL};
        int np = 0, quiet = 0;
        double rtol = 0, atol = 0;
        const char* prefix = NULL;
        for (int i = 2; i < argc; i++) {
            if ((!strcmp(argv[i], "--rtol") || !strcmp(argv[i], "--atol")) && i + 1 < argc) {
                /* a tolerance is a finite number >= 0: NaN compares false with every difference, so
                 * `--atol nan` would pass any two files (and atof read "1e-3x" as 0.001, "abc" as 0) */
                char* end;
                double x = strtod(argv[i + 1], &end);
                if (end == argv[i + 1] || *end || !isfinite(x) || x < 0) {
                    fprintf(stderr, "rrfp-mm tensors diff: %s expects a finite number >= 0, got '%s'\n", argv[i],
                            argv[i + 1]);
                    return 2;
                }
                *(argv[i][2] == 'r' ? &rtol : &atol) = x;
                i++;
            } else if (!strcmp(argv[i], "--files") && i + 1 < argc) prefix = argv[++i];
            else if (!strcmp(argv[i], "--quiet")) quiet = 1;
            else if (argv[i][0] == '-' || np == 2) {
                cli_unknown_option("tensors diff", argv[i], usage, "rrfp-mm tensors diff ");
                return 2;
            } else paths[np++] = argv[i];
        }
        if (np != 2) {
            usage(stderr);
            return 2;
        }
        return tensors_diff(paths[0], paths[1], rtol, atol, prefix, quiet);
    }
    fprintf(stderr, "rrfp-mm tensors: unknown action '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
