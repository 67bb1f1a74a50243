/* demo.c — the demo data set generator (see demo.h): scenes of coloured shapes, a rasteriser, JPEG
 * encoding, and captions / question-answer conversations whose answers depend on the image. */
#include "data/demo.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/image.h"
#include "engine/util.h"

/* ---- deterministic randomness (splitmix64) ------------------------------------------------------ */

typedef struct {
    uint64_t s;
} Rng;
static uint64_t rng_next(Rng* r) {
    return rr_splitmix64(&r->s);
}
static int rng_int(Rng* r, int n) { return (int)(rng_next(r) % (uint64_t)n); } /* 0 .. n-1 */
static double rng_unif(Rng* r) { return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

/* ---- the world ------------------------------------------------------------------------------------ */

enum { N_COLOURS = 6, N_KINDS = 3, N_CELLS = 9, MAX_SHAPES = 4 };
static const char* COLOUR_NAMES[N_COLOURS] = {"red", "green", "blue", "yellow", "purple", "orange"};
static const uint8_t COLOUR_RGB[N_COLOURS][3] = {{220, 30, 30},  {30, 160, 50},  {40, 70, 225},
                                                 {240, 215, 30}, {140, 50, 185}, {250, 130, 20}};
static const char* KIND_NAMES[N_KINDS] = {"circle", "square", "triangle"};
static const char* KIND_PLURAL[N_KINDS] = {"circles", "squares", "triangles"};
static const char* CELL_NAMES[N_CELLS] = {"top left",    "top",    "top right",    "left",        "center",
                                          "right",       "bottom left", "bottom", "bottom right"};
static const char* NUMBER_NAMES[] = {"zero", "one", "two", "three", "four", "five", "six", "seven", "eight"};

typedef struct {
    int kind, colour, cell, large;
} Shape;

typedef struct {
    int w, h;
    int n;
    Shape s[MAX_SHAPES];
    uint8_t bg;
} Scene;

/* square = 1: square scenes of 48..144 px (every one resizes to the same patch grid); 0: sizes
 * 64x48 .. 320x240 in several aspect ratios (w/h). */
static void scene_random(Rng* r, int square, Scene* sc) {
    if (square) {
        sc->w = sc->h = 48 + rng_int(r, 97);
    } else {
        static const double ratios[] = {4.0 / 3.0, 3.0 / 4.0, 1.0, 16.0 / 9.0, 2.0, 0.5, 3.0 / 2.0};
        double ratio = ratios[rng_int(r, 7)];
        int w = 64 + rng_int(r, 257);
        int h = (int)lround(w / ratio);
        if (h < 48) h = 48;
        if (h > 320) h = 320;
        sc->w = w, sc->h = h;
    }
    sc->n = 1 + rng_int(r, MAX_SHAPES);
    /* square scenes: one mid-grey background (128, about 0 after x/127.5 - 1), so that a patch of
     * background is the same input in every image; a background grey of 70..180 made shape-or-not a
     * function the tiny ViT learnt slowly (README "Demo") */
    sc->bg = square ? 128 : (uint8_t)(70 + rng_int(r, 110));
    int cells[N_CELLS];
    for (int i = 0; i < N_CELLS; i++) cells[i] = i;
    for (int i = N_CELLS - 1; i > 0; i--) {
        int j = rng_int(r, i + 1), t = cells[i];
        cells[i] = cells[j], cells[j] = t;
    }
    for (int i = 0; i < sc->n; i++) {
        sc->s[i].kind = rng_int(r, N_KINDS);
        sc->s[i].colour = rng_int(r, N_COLOURS);
        sc->s[i].cell = cells[i];
        sc->s[i].large = rng_int(r, 2);
    }
}

/* Draw the scene: noisy grey background, each shape filled inside its cell (centre jittered). */
static uint8_t* scene_draw(Rng* r, const Scene* sc) {
    int w = sc->w, h = sc->h;
    uint8_t* img = mallocCheck((size_t)w * h * 3);
    for (int i = 0; i < w * h; i++) {
        int v = sc->bg + rng_int(r, 17) - 8;
        img[3 * i] = img[3 * i + 1] = img[3 * i + 2] = (uint8_t)v;
    }
    double cw = w / 3.0, ch = h / 3.0, cmin = cw < ch ? cw : ch;
    for (int k = 0; k < sc->n; k++) {
        const Shape* s = &sc->s[k];
        double rad = cmin * (s->large ? 0.42 : 0.24);
        double cx = (s->cell % 3 + 0.5) * cw + (rng_unif(r) - 0.5) * (cw - 2 * rad) * 0.5;
        double cy = (s->cell / 3 + 0.5) * ch + (rng_unif(r) - 0.5) * (ch - 2 * rad) * 0.5;
        int x0 = (int)floor(cx - rad), x1 = (int)ceil(cx + rad), y0 = (int)floor(cy - rad), y1 = (int)ceil(cy + rad);
        if (x0 < 0) x0 = 0;
        if (y0 < 0) y0 = 0;
        if (x1 > w - 1) x1 = w - 1;
        if (y1 > h - 1) y1 = h - 1;
        for (int y = y0; y <= y1; y++)
            for (int x = x0; x <= x1; x++) {
                double dx = x + 0.5 - cx, dy = y + 0.5 - cy;
                int in = 0;
                if (s->kind == 0) in = dx * dx + dy * dy <= rad * rad;
                else if (s->kind == 1) in = fabs(dx) <= rad * 0.85 && fabs(dy) <= rad * 0.85;
                else in = dy >= -rad && dy <= rad && fabs(dx) <= (dy + rad) * 0.5;
                if (in) memcpy(img + ((size_t)y * w + x) * 3, COLOUR_RGB[s->colour], 3);
            }
    }
    return img;
}

static int count_kind(const Scene* sc, int kind) {
    int c = 0;
    for (int i = 0; i < sc->n; i++) c += sc->s[i].kind == kind;
    return c;
}
static int count_colour(const Scene* sc, int colour) {
    int c = 0;
    for (int i = 0; i < sc->n; i++) c += sc->s[i].colour == colour;
    return c;
}
static int count_kind_colour(const Scene* sc, int kind, int colour) {
    int c = 0;
    for (int i = 0; i < sc->n; i++) c += sc->s[i].kind == kind && sc->s[i].colour == colour;
    return c;
}

/* ---- questions -------------------------------------------------------------------------------------- */

typedef enum { Q_COLOUR = 0, Q_COUNT_KIND, Q_WHERE, Q_SHAPE_OF_COLOUR, Q_COUNT_ALL, Q_SIZE, Q_COUNT_COLOUR, Q_EXISTS,
               Q_COLOUR1, Q_KIND1, Q_SIZE1, Q_N } QType;
static const char* QTYPE_NAMES[Q_N] = {"colour", "count", "position", "shape", "count_all", "size", "count_colour", "exists",
                                       "lone_colour", "lone_shape", "lone_size"};

typedef struct {
    char q[160], a[96];
    QType type;
} QA;

int demo_question_type(const char* name) {
    for (int t = 0; t < Q_N; t++)
        if (!strcmp(name, QTYPE_NAMES[t])) return t;
    return -1;
}
const char* demo_question_types(void) {
    return "colour count position shape count_all size count_colour exists lone_colour lone_shape lone_size";
}

/* A random question about the scene whose answer is determined by it; `type` < 0 picks any kind.
 * Returns 0 when a forced type does not fit the scene (e.g. "What colour is the square?" with two
 * squares): the caller draws another scene. */

/* The question types drawn from: cfg->types (a mask of 1 << QType), else the square or the default set. */
static QType g_types[Q_N];
static int g_ntypes, g_maxq;
static unsigned g_types_mask;
static void types_init(const DemoConfig* cfg) {
    g_ntypes = 0, g_types_mask = 0;
    g_maxq = cfg->questions;
    for (int t = 0; t < Q_N; t++)
        if (cfg->types ? (cfg->types >> t) & 1 : t < Q_COUNT_COLOUR && (!cfg->square || t != Q_WHERE))
            g_types[g_ntypes++] = (QType)t, g_types_mask |= 1u << t;
}

static int question_random(Rng* r, const Scene* sc, int square, int type, QA* qa) {
    (void)square;
    for (int attempt = 0; attempt < 64; attempt++) {
        QType t = type >= 0 ? (QType)type : g_types[rng_int(r, g_ntypes)];
        const Shape* s = &sc->s[rng_int(r, sc->n)];
        qa->type = t;
        switch (t) {
        case Q_COLOUR:
            if (count_kind(sc, s->kind) != 1) break;
            snprintf(qa->q, sizeof qa->q, "What colour is the %s?", KIND_NAMES[s->kind]);
            snprintf(qa->a, sizeof qa->a, "%s", COLOUR_NAMES[s->colour]);
            return 1;
        case Q_COUNT_KIND: {
            int k = rng_int(r, N_KINDS);
            snprintf(qa->q, sizeof qa->q, "How many %s are there?", KIND_PLURAL[k]);
            snprintf(qa->a, sizeof qa->a, "%s", NUMBER_NAMES[count_kind(sc, k)]);
            return 1;
        }
        case Q_WHERE:
            if (count_kind_colour(sc, s->kind, s->colour) != 1) break;
            snprintf(qa->q, sizeof qa->q, "Where is the %s %s?", COLOUR_NAMES[s->colour], KIND_NAMES[s->kind]);
            snprintf(qa->a, sizeof qa->a, "%s", CELL_NAMES[s->cell]);
            return 1;
        case Q_SHAPE_OF_COLOUR:
            if (count_colour(sc, s->colour) != 1) break;
            snprintf(qa->q, sizeof qa->q, "What shape is %s?", COLOUR_NAMES[s->colour]);
            snprintf(qa->a, sizeof qa->a, "a %s", KIND_NAMES[s->kind]);
            return 1;
        case Q_COUNT_ALL:
            snprintf(qa->q, sizeof qa->q, "How many shapes are there?");
            snprintf(qa->a, sizeof qa->a, "%s", NUMBER_NAMES[sc->n]);
            return 1;
        case Q_COUNT_COLOUR: {
            int c = rng_int(r, 2) ? s->colour : rng_int(r, N_COLOURS); /* half the time a colour that is there */
            snprintf(qa->q, sizeof qa->q, "How many %s shapes are there?", COLOUR_NAMES[c]);
            snprintf(qa->a, sizeof qa->a, "%s", NUMBER_NAMES[count_colour(sc, c)]);
            return 1;
        }
        case Q_EXISTS: { /* yes half the time: a shape of the scene, else a random (colour, kind) */
            int c = s->colour, k = s->kind;
            if (rng_int(r, 2)) c = rng_int(r, N_COLOURS), k = rng_int(r, N_KINDS);
            snprintf(qa->q, sizeof qa->q, "Is there a %s %s?", COLOUR_NAMES[c], KIND_NAMES[k]);
            snprintf(qa->a, sizeof qa->a, "%s", count_kind_colour(sc, k, c) ? "yes" : "no");
            return 1;
        }
        case Q_COLOUR1: /* one-shape scenes: no question word to match against the image */
            if (sc->n != 1) break;
            snprintf(qa->q, sizeof qa->q, "What colour is the shape?");
            snprintf(qa->a, sizeof qa->a, "%s", COLOUR_NAMES[s->colour]);
            return 1;
        case Q_KIND1:
            if (sc->n != 1) break;
            snprintf(qa->q, sizeof qa->q, "What shape is it?");
            snprintf(qa->a, sizeof qa->a, "a %s", KIND_NAMES[s->kind]);
            return 1;
        case Q_SIZE1:
            if (sc->n != 1) break;
            snprintf(qa->q, sizeof qa->q, "Is the shape large or small?");
            snprintf(qa->a, sizeof qa->a, "%s", s->large ? "large" : "small");
            return 1;
        case Q_SIZE:
            if (count_kind(sc, s->kind) != 1) break;
            snprintf(qa->q, sizeof qa->q, "Is the %s large or small?", KIND_NAMES[s->kind]);
            snprintf(qa->a, sizeof qa->a, "%s", s->large ? "large" : "small");
            return 1;
        default: break;
        }
    }
    return 0;
}

/* Every answer a question of this type can have (eval chance level = 1 / count). */
static cJSON* question_choices(QType t) {
    cJSON* a = cJSON_CreateArray();
    char buf[64];
    switch (t) {
    case Q_COLOUR:
    case Q_COLOUR1:
        for (int i = 0; i < N_COLOURS; i++) cJSON_AddItemToArray(a, cJSON_CreateString(COLOUR_NAMES[i]));
        break;
    case Q_COUNT_KIND:
        for (int i = 0; i <= MAX_SHAPES; i++) cJSON_AddItemToArray(a, cJSON_CreateString(NUMBER_NAMES[i]));
        break;
    case Q_WHERE:
        for (int i = 0; i < N_CELLS; i++) cJSON_AddItemToArray(a, cJSON_CreateString(CELL_NAMES[i]));
        break;
    case Q_SHAPE_OF_COLOUR:
    case Q_KIND1:
        for (int i = 0; i < N_KINDS; i++) {
            snprintf(buf, sizeof buf, "a %s", KIND_NAMES[i]);
            cJSON_AddItemToArray(a, cJSON_CreateString(buf));
        }
        break;
    case Q_COUNT_ALL:
        for (int i = 1; i <= MAX_SHAPES; i++) cJSON_AddItemToArray(a, cJSON_CreateString(NUMBER_NAMES[i]));
        break;
    case Q_COUNT_COLOUR:
        for (int i = 0; i <= MAX_SHAPES; i++) cJSON_AddItemToArray(a, cJSON_CreateString(NUMBER_NAMES[i]));
        break;
    case Q_EXISTS:
        cJSON_AddItemToArray(a, cJSON_CreateString("yes"));
        cJSON_AddItemToArray(a, cJSON_CreateString("no"));
        break;
    case Q_SIZE:
    case Q_SIZE1:
        cJSON_AddItemToArray(a, cJSON_CreateString("large"));
        cJSON_AddItemToArray(a, cJSON_CreateString("small"));
        break;
    default: break;
    }
    return a;
}

/* "There are two shapes: a small red circle at the top left and a large blue square at the bottom." */
/* reading_order = 1 (square scenes) names the shapes row by row (top left first), so the caption is a
 * function of the image alone, without their places; 0 keeps the order they were drawn in, with places. */
static void caption(const Scene* sc, int reading_order, char* out, size_t n) {
    size_t k = 0;
    int order[MAX_SHAPES];
    for (int i = 0; i < sc->n; i++) order[i] = i;
    for (int i = 1; i < sc->n && reading_order; i++)
        for (int j = i; j > 0 && sc->s[order[j - 1]].cell > sc->s[order[j]].cell; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    k += snprintf(out + k, n - k, sc->n == 1 ? "There is one shape:" : "There are %s shapes:", NUMBER_NAMES[sc->n]);
    for (int i = 0; i < sc->n; i++) {
        const Shape* s = &sc->s[order[i]];
        const char* sep = i == 0 ? " " : (i == sc->n - 1 ? " and " : ", ");
        const char* at = s->cell == 4 ? "in the" : "at the";
        if (reading_order) /* square scenes: no place (see demo.h) */
            k += snprintf(out + k, n - k, "%sa %s %s %s", sep, s->large ? "large" : "small", COLOUR_NAMES[s->colour],
                          KIND_NAMES[s->kind]);
        else
            k += snprintf(out + k, n - k, "%sa %s %s %s %s %s", sep, s->large ? "large" : "small",
                          COLOUR_NAMES[s->colour], KIND_NAMES[s->kind], at, CELL_NAMES[s->cell]);
    }
    snprintf(out + k, n - k, ".");
}

static void add_turn(cJSON* conv, const char* from, const char* value) {
    cJSON* t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "from", from);
    cJSON_AddStringToObject(t, "value", value);
    cJSON_AddItemToArray(conv, t);
}

/* ---- files ------------------------------------------------------------------------------------------ */

static int write_image(JpegCodec* jc, Rng* r, const Scene* sc, const char* dir, const char* name, char* err,
                       size_t err_len) {
    uint8_t* rgb = scene_draw(r, sc);
    int progressive = rng_int(r, 10) == 0;
    int quality = 75 + rng_int(r, 21);
    size_t len;
    uint8_t* jpg = jpeg_encode_rgb(jc, rgb, sc->w, sc->h, quality, progressive, &len);
    free(rgb);
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/images/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    int ok = f && fwrite(jpg, 1, len, f) == len && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    if (f && fclose(f) != 0) ok = 0, e = errno; /* a buffered write's error shows at fclose */
    free(jpg);
    if (ok && rename(tmp, path) != 0) ok = 0, e = errno;
    if (!ok) {
        snprintf(err, err_len, "cannot write '%s': %s", path, strerror(e ? e : EIO));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Records joined as a JSON array with one record per line (so a line number names a record), or as
 * JSONL. */
static int write_records(const char* path, cJSON** recs, int n, int jsonl, char* err, size_t err_len) {
    size_t cap = 1 << 16, len = 0;
    char* buf = mallocCheck(cap);
    for (int i = -1; i <= n; i++) {
        char* s = NULL;
        const char* piece;
        if (i == -1) piece = jsonl ? "" : "[\n";
        else if (i == n) piece = jsonl ? "" : "]\n";
        else piece = s = cJSON_PrintUnformatted(recs[i]);
        size_t pl = strlen(piece);
        while (len + pl + 4 > cap) buf = reallocCheck(buf, cap *= 2);
        memcpy(buf + len, piece, pl);
        len += pl;
        if (s) {
            if (!jsonl && i < n - 1) buf[len++] = ',';
            buf[len++] = '\n';
        }
        free(s);
    }
    int rc = rr_write_file_atomic(path, buf, len);
    free(buf);
    if (rc != 0) {
        snprintf(err, err_len, "cannot write '%s': %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static const char* TEXT_ONLY_Q[] = {"How many sides does a triangle have?", "How many sides does a square have?",
                                    "What shape has no corners?", "What colour do you get by mixing blue and yellow?",
                                    "What colour do you get by mixing red and yellow?",
                                    "What colour do you get by mixing red and blue?"};
static const char* TEXT_ONLY_A[] = {"three", "four", "a circle", "green", "orange", "purple"};

/* One training record; images are written as they are made. */
static cJSON* train_record(JpegCodec* jc, Rng* r, int square, int idx, const char* dir, char* err, size_t err_len,
                            int* fail) {
    char id[32], name[64], name_b[64], text[1024];
    snprintf(id, sizeof id, "train_%05d", idx);
    cJSON* rec = cJSON_CreateObject();
    cJSON_AddStringToObject(rec, "id", id);
    cJSON* conv = cJSON_CreateArray();
    int kind = rng_int(r, 20); /* 0-10 QA, 11-13 caption, 14-15 caption + QA, 16-17 two images, 18-19 text only */
    if (square) {
        /* mostly questions about one image (16 in 20), where the supervision per LM token is highest */
        static const int square_kind[20] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 11, 14, 16, 18};
        kind = square_kind[kind];
    }
    if (kind >= 18) {
        /* text only: world knowledge, or counting of varied length */
        if (rng_int(r, 2)) {
            int q = rng_int(r, 6);
            add_turn(conv, "human", TEXT_ONLY_Q[q]);
            add_turn(conv, "gpt", TEXT_ONLY_A[q]);
        } else {
            int n = 2 + rng_int(r, 7);
            snprintf(text, sizeof text, "Count from one to %s.", NUMBER_NAMES[n]);
            add_turn(conv, "human", text);
            size_t k = 0;
            for (int i = 1; i <= n; i++) k += snprintf(text + k, sizeof text - k, i > 1 ? " %s" : "%s", NUMBER_NAMES[i]);
            add_turn(conv, "gpt", text);
        }
    } else if (kind >= 16) {
        Scene a, b;
        scene_random(r, square, &a);
        do scene_random(r, square, &b);
        while (b.n == a.n);
        snprintf(name, sizeof name, "%s.jpg", id);
        snprintf(name_b, sizeof name_b, "%s_b.jpg", id);
        if (write_image(jc, r, &a, dir, name, err, err_len) || write_image(jc, r, &b, dir, name_b, err, err_len)) {
            *fail = 1;
            cJSON_Delete(conv); /* not yet in rec: the caller frees rec */
            return rec;
        }
        cJSON* imgs = cJSON_CreateArray();
        cJSON_AddItemToArray(imgs, cJSON_CreateString(name));
        cJSON_AddItemToArray(imgs, cJSON_CreateString(name_b));
        cJSON_AddItemToObject(rec, "image", imgs);
        add_turn(conv, "human", "<image>\n<image>\nWhich image has more shapes?");
        add_turn(conv, "gpt", a.n > b.n ? "the first" : "the second");
        if (rng_int(r, 2)) {
            int which = rng_int(r, 2);
            snprintf(text, sizeof text, "How many shapes are in the %s image?", which ? "second" : "first");
            add_turn(conv, "human", text);
            add_turn(conv, "gpt", NUMBER_NAMES[which ? b.n : a.n]);
        }
    } else {
        Scene sc;
        QA first_qa;
        int have_first = 0;
        if (square && kind <= 10 && g_maxq == 1) {
            /* one question: its type first, then a scene it fits (as the held-out split draws them) */
            QType t = g_types[rng_int(r, g_ntypes)];
            do scene_random(r, square, &sc);
            while (!question_random(r, &sc, square, (int)t, &first_qa));
            have_first = 1;
        } else {
            scene_random(r, square, &sc);
        }
        snprintf(name, sizeof name, "%s.jpg", id);
        if (write_image(jc, r, &sc, dir, name, err, err_len)) {
            *fail = 1;
            cJSON_Delete(conv); /* not yet in rec: the caller frees rec */
            return rec;
        }
        cJSON_AddStringToObject(rec, "image", name);
        /* square scenes are cheap (few patches): more questions per image, more answers per LM token */
        int turns = kind <= 10 ? 1 + 2 * square + rng_int(r, 3) : (kind <= 13 ? 0 : 1 + rng_int(r, 2));
        if (g_maxq && turns > g_maxq) turns = g_maxq;
        int first = 1;
        if (kind >= 11) {
            add_turn(conv, "human", rng_int(r, 2) ? "<image>\nDescribe the image." : "Describe this picture.\n<image>");
            caption(&sc, square, text, sizeof text);
            add_turn(conv, "gpt", text);
            first = 0;
        }
        char asked[8][160];
        int n_asked = 0;
        for (int t = 0; t < turns; t++) {
            QA qa;
            /* square scenes: distinct questions in a record, or a repeated one's answer could be copied
             * from the text instead of read from the image (a few draws, then fewer questions) */
            int fresh = 0;
            if (have_first && t == 0) qa = first_qa, fresh = 1;
            for (int tries = 0; tries < (square ? 8 : 1) && !fresh; tries++) {
                if (!question_random(r, &sc, square, -1, &qa)) {
                    /* "How many shapes" always fits; without it among the types, each type in turn first */
                    int ok = 0;
                    for (int k = 0; k < g_ntypes && !ok && !(g_types_mask >> Q_COUNT_ALL & 1); k++)
                        ok = question_random(r, &sc, square, (int)g_types[k], &qa);
                    if (!ok) question_random(r, &sc, square, Q_COUNT_ALL, &qa);
                }
                fresh = 1;
                for (int i = 0; square && i < n_asked; i++) fresh &= strcmp(asked[i], qa.q) != 0;
            }
            if (!fresh) break;
            if (n_asked < 8) snprintf(asked[n_asked++], sizeof asked[0], "%s", qa.q);
            if (first) snprintf(text, sizeof text, "<image>\n%s", qa.q);
            else snprintf(text, sizeof text, "%s", qa.q);
            first = 0;
            add_turn(conv, "human", text);
            add_turn(conv, "gpt", qa.a);
        }
    }
    cJSON_AddItemToObject(rec, "conversations", conv);
    return rec;
}

int demo_data_write(const DemoConfig* cfg, char* err, size_t err_len) {
    if (cfg->samples < 1 || cfg->heldout < 0) {
        snprintf(err, err_len, "--samples must be >= 1 and --heldout >= 0 (got %d, %d)", cfg->samples, cfg->heldout);
        return -1;
    }
    /* A new folder is built as OUT.tmp.PID and renamed when every file is written, so that a failure (a full
     * disk) leaves no half data set under the name; an existing folder is written into, file by file. */
    char path[4200], dir[4096];
    struct stat sb;
    int fresh = lstat(cfg->out_dir, &sb) != 0 && errno == ENOENT;
    if (fresh) snprintf(dir, sizeof dir, "%s.tmp.%d", cfg->out_dir, (int)getpid());
    else snprintf(dir, sizeof dir, "%s", cfg->out_dir);
    if (fresh && mkdir(dir, 0755) != 0) {
        snprintf(err, err_len, "cannot create '%s': %s", dir, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof path, "%s/images", dir);
    if ((!fresh && mkdir(dir, 0755) != 0 && errno != EEXIST) || (mkdir(path, 0755) != 0 && errno != EEXIST)) {
        snprintf(err, err_len, "cannot create '%s': %s", path, strerror(errno));
        if (fresh) rr_remove_tree(dir);
        return -1;
    }
    types_init(cfg);
    JpegCodec* jc = jpeg_codec_new();
    int fail = 0;
    /* two independent streams, so the held-out split does not change with --samples */
    Rng rt = {cfg->seed * 0x9E3779B97F4A7C15ull + 1}, rh = {cfg->seed * 0x9E3779B97F4A7C15ull + 0x5bd1e995ull};
    cJSON** train = callocCheck((size_t)cfg->samples, sizeof(cJSON*));
    for (int i = 0; i < cfg->samples && !fail; i++) train[i] = train_record(jc, &rt, cfg->square, i, dir, err, err_len, &fail);

    int nh = cfg->heldout;
    cJSON** held = callocCheck((size_t)nh + 1, sizeof(cJSON*));
    cJSON** eval = callocCheck((size_t)nh + 1, sizeof(cJSON*));
    for (int i = 0; i < nh && !fail; i++) {
        char id[32], name[64], text[256];
        snprintf(id, sizeof id, "heldout_%05d", i);
        snprintf(name, sizeof name, "%s.jpg", id);
        Scene sc;
        QA qa;
        do scene_random(&rh, cfg->square, &sc);
        /* every question type equally often */
        while (!question_random(&rh, &sc, cfg->square, (int)g_types[i % g_ntypes], &qa));
        if (write_image(jc, &rh, &sc, dir, name, err, err_len)) {
            fail = 1;
            break;
        }
        snprintf(text, sizeof text, "<image>\n%s", qa.q);
        for (int k = 0; k < 2; k++) {
            cJSON* rec = cJSON_CreateObject();
            cJSON_AddStringToObject(rec, "id", id);
            cJSON_AddStringToObject(rec, "image", name);
            cJSON* conv = cJSON_CreateArray();
            add_turn(conv, "human", text);
            add_turn(conv, "gpt", qa.a);
            cJSON_AddItemToObject(rec, "conversations", conv);
            if (k == 1) {
                cJSON_AddStringToObject(rec, "type", QTYPE_NAMES[qa.type]);
                cJSON_AddStringToObject(rec, "question", qa.q);
                cJSON_AddStringToObject(rec, "answer", qa.a);
                cJSON_AddItemToObject(rec, "choices", question_choices(qa.type));
                eval[i] = rec;
            } else {
                held[i] = rec;
            }
        }
    }
    jpeg_codec_free(jc);
    snprintf(path, sizeof path, "%s/images", dir);
    if (!fail && rr_fsync_dir(path) != 0) { /* the images' renames durable */
        snprintf(err, err_len, "cannot fsync folder '%s' after renaming the images into it: %s", path, strerror(errno));
        fail = 1;
    }
    if (!fail) {
        snprintf(path, sizeof path, "%s/train.json", dir);
        fail = write_records(path, train, cfg->samples, 0, err, err_len) != 0;
    }
    if (!fail) {
        snprintf(path, sizeof path, "%s/heldout.json", dir);
        fail = write_records(path, held, nh, 0, err, err_len) != 0;
    }
    if (!fail) {
        snprintf(path, sizeof path, "%s/eval.jsonl", dir);
        fail = write_records(path, eval, nh, 1, err, err_len) != 0;
    }
    for (int i = 0; i < cfg->samples; i++) cJSON_Delete(train[i]);
    for (int i = 0; i < nh; i++) cJSON_Delete(held[i]), cJSON_Delete(eval[i]);
    free(train), free(held), free(eval);
    if (fresh && !fail && rename(dir, cfg->out_dir) != 0) {
        snprintf(err, err_len, "cannot rename '%s' to '%s': %s", dir, cfg->out_dir, strerror(errno));
        fail = 1;
    }
    if (fresh && fail) rr_remove_tree(dir);
    /* the rename is durable once the parent folder is (the files in it were fsync'd) */
    if (fresh && !fail && rr_fsync_parent(cfg->out_dir) != 0) {
        snprintf(err, err_len, "cannot fsync the folder holding '%s' after renaming it there: %s (it is complete, but "
                 "may not survive a power loss)", cfg->out_dir, strerror(errno));
        fail = 1;
    }
    return fail ? -1 : 0;
}
