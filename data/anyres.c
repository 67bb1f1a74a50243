/* anyres.c — LLaVA-NeXT's tiling and position count (data/anyres.h; the rules in docs/anyres.md). Every
 * quantity is computed in the same IEEE double / integer steps as transformers' Python, so the results
 * agree for every image size (checked against an independent reference by tests/data/anyres_ref.py). */
#include "data/anyres.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"

void anyres_pinpoints_default(AnyresPinpoints* pp) {
    static const int d[5][2] = {{336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}};
    memset(pp, 0, sizeof *pp);
    pp->n = 5;
    memcpy(pp->hw, d, sizeof d);
}

int anyres_pinpoints_check(const AnyresPinpoints* pp, int tile, char* err, size_t err_len) {
    if (pp->n < 1 || pp->n > ANYRES_MAX_PINPOINTS)
        return rr_fail(err, err_len, "grid pinpoints: %d given, expected 1 .. %d [height, width] pairs", pp->n,
                       ANYRES_MAX_PINPOINTS);
    for (int i = 0; i < pp->n; i++)
        for (int k = 0; k < 2; k++) {
            int v = pp->hw[i][k];
            if (v < 1 || v > ANYRES_MAX_SIDE || (tile > 0 && v % tile != 0))
                return rr_fail(err, err_len,
                               "grid pinpoint %d: [%d, %d]: each side must be a positive multiple of the tile side %d, at "
                               "most %d",
                               i, pp->hw[i][0], pp->hw[i][1], tile, ANYRES_MAX_SIDE);
        }
    return 0;
}

static const char* skip_ws(const char* s) {
    while (*s && isspace((unsigned char)*s)) s++;
    return s;
}

int anyres_pinpoints_parse(const char* text, int tile, AnyresPinpoints* pp, char* err, size_t err_len) {
    memset(pp, 0, sizeof *pp);
    const char* s = skip_ws(text);
    if (*s != '[') return rr_fail(err, err_len, "grid pinpoints '%.80s': expected a list such as [[336,672],[672,336]]", text);
    s = skip_ws(s + 1);
    while (*s == '[') {
        if (pp->n == ANYRES_MAX_PINPOINTS)
            return rr_fail(err, err_len, "grid pinpoints: more than %d pairs", ANYRES_MAX_PINPOINTS);
        for (int k = 0; k < 2; k++) {
            s = skip_ws(s + 1);
            if (!isdigit((unsigned char)*s))
                return rr_fail(err, err_len, "grid pinpoints '%.80s': pair %d: expected two positive integers", text, pp->n);
            char* e;
            long v = strtol(s, &e, 10);
            if (v > ANYRES_MAX_SIDE) v = ANYRES_MAX_SIDE + 1; /* refused by the check below, never overflowed */
            pp->hw[pp->n][k] = (int)v;
            s = skip_ws(e);
            if (*s != (k == 0 ? ',' : ']'))
                return rr_fail(err, err_len, "grid pinpoints '%.80s': pair %d: expected [height, width]", text, pp->n);
        }
        pp->n++;
        s = skip_ws(s + 1);
        if (*s == ',') s = skip_ws(s + 1);
        else break;
    }
    if (*s != ']' || *skip_ws(s + 1) != '\0')
        return rr_fail(err, err_len, "grid pinpoints '%.80s': expected a list such as [[336,672],[672,336]]", text);
    return anyres_pinpoints_check(pp, tile, err, err_len);
}

void anyres_pinpoints_format(const AnyresPinpoints* pp, char* buf, size_t n) {
    size_t o = 0;
    if (n == 0) return;
    buf[0] = '\0';
    o += (size_t)snprintf(buf + o, o < n ? n - o : 0, "[");
    for (int i = 0; i < pp->n; i++)
        o += (size_t)snprintf(buf + o, o < n ? n - o : 0, "%s[%d,%d]", i ? "," : "", pp->hw[i][0], pp->hw[i][1]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* Python's int(round(x, 7)) for x >= 0: round to 7 decimals (correctly rounded, ties to even, as
 * Python's round and C's printf both are), then truncate. */
static int64_t round7_int(double x) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.7f", x);
    return strtoll(buf, NULL, 10); /* stops at the '.' */
}

/* Python's a // b for b > 0 */
static int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && (a < 0)) q--;
    return q;
}

int anyres_layout(int orig_h, int orig_w, const AnyresPinpoints* pp, int tile, int patch, AnyresSelect select,
                  AnyresLayout* out, char* err, size_t err_len) {
    memset(out, 0, sizeof *out);
    if (orig_h < 1 || orig_w < 1) return rr_fail(err, err_len, "any-resolution image: size %d x %d is not positive", orig_w, orig_h);
    if (tile < 1 || patch < 1 || tile % patch != 0)
        return rr_fail(err, err_len, "any-resolution image: tile side %d is not a positive multiple of the patch side %d", tile, patch);
    if (anyres_pinpoints_check(pp, tile, err, err_len) != 0) return -1;
    /* select_best_resolution (original size and pinpoints as (height, width)) */
    int64_t best_eff = 0;
    double best_waste = INFINITY;
    int bh = 0, bw = 0;
    for (int i = 0; i < pp->n; i++) {
        int ph = pp->hw[i][0], pw = pp->hw[i][1];
        double sw = (double)pw / (double)orig_w, sh = (double)ph / (double)orig_h;
        double scale = sh < sw ? sh : sw; /* Python's min(sw, sh): the first on a tie, the same value */
        int64_t dw = (int64_t)((double)orig_w * scale), dh = (int64_t)((double)orig_h * scale);
        int64_t eff = dw * dh, full = (int64_t)orig_w * orig_h;
        if (full < eff) eff = full;
        int64_t waste = (int64_t)pw * ph - eff;
        if (eff > best_eff || (eff == best_eff && (double)waste < best_waste)) {
            best_eff = eff;
            best_waste = (double)waste;
            bh = ph;
            bw = pw;
        }
    }
    if (anyres_layout_grid(orig_h, orig_w, bh / tile, bw / tile, tile, patch, select, out, err, err_len) != 0) return -1;
    out->best_h = bh;
    out->best_w = bw;
    /* get_patch_output_size */
    double scw = (double)bw / (double)orig_w, sch = (double)bh / (double)orig_h;
    if (scw < sch) {
        out->resized_w = bw;
        double v = ceil((double)orig_h * scw);
        out->resized_h = v < (double)bh ? (int)v : bh;
    } else {
        out->resized_h = bh;
        double v = ceil((double)orig_w * sch);
        out->resized_w = v < (double)bw ? (int)v : bw;
    }
    out->pad_top = (bh - out->resized_h) / 2;
    out->pad_left = (bw - out->resized_w) / 2;
    return 0;
}

int anyres_layout_grid(int orig_h, int orig_w, int rows, int cols, int tile, int patch, AnyresSelect select,
                       AnyresLayout* out, char* err, size_t err_len) {
    memset(out, 0, sizeof *out);
    if (orig_h < 1 || orig_w < 1) return rr_fail(err, err_len, "any-resolution image: size %d x %d is not positive", orig_w, orig_h);
    if (tile < 1 || patch < 1 || tile % patch != 0)
        return rr_fail(err, err_len, "any-resolution image: tile side %d is not a positive multiple of the patch side %d", tile, patch);
    if (rows < 1 || cols < 1 || rows > ANYRES_MAX_SIDE / tile || cols > ANYRES_MAX_SIDE / tile)
        return rr_fail(err, err_len, "any-resolution image: a %d x %d grid of %d-pixel tiles (1 .. %d a side)", rows, cols, tile,
                       ANYRES_MAX_SIDE / tile);
    out->rows = rows;
    out->cols = cols;
    out->best_h = rows * tile;
    out->best_w = cols * tile;
    /* the features: the base image, then the grid unpadded (unpad_image / _get_unpadded_features) */
    int g = tile / patch;
    out->g = g;
    out->base = g * g + (select == ANYRES_SELECT_FULL ? 1 : 0);
    int64_t ch = (int64_t)out->rows * g, cw = (int64_t)out->cols * g;
    double orig_ar = (double)orig_w / (double)orig_h, cur_ar = (double)cw / (double)ch;
    out->feat_top = out->feat_left = 0;
    out->feat_h = (int)ch;
    out->feat_w = (int)cw;
    if (orig_ar > cur_ar) {
        int64_t nh = round7_int((double)orig_h * ((double)cw / (double)orig_w));
        int64_t pad = floordiv(ch - nh, 2);
        out->feat_top = (int)pad;
        out->feat_h = (int)(ch - 2 * pad > 0 ? ch - 2 * pad : 0);
    } else {
        int64_t nw = round7_int((double)orig_w * ((double)ch / (double)orig_h));
        int64_t pad = floordiv(cw - nw, 2);
        out->feat_left = (int)pad;
        out->feat_w = (int)(cw - 2 * pad > 0 ? cw - 2 * pad : 0);
    }
    out->n_tiles = 1 + out->rows * out->cols;
    out->n_positions = out->base + out->feat_h * out->feat_w + out->feat_h;
    return 0;
}

int anyres_num_positions(int orig_h, int orig_w, const AnyresPinpoints* pp, int tile, int patch, AnyresSelect select) {
    AnyresLayout l;
    char e[256];
    if (anyres_layout(orig_h, orig_w, pp, tile, patch, select, &l, e, sizeof e) != 0) return -1;
    return l.n_positions;
}

void anyres_feature_map(const AnyresLayout* l, int32_t* src) {
    int g = l->g, gg = g * g, k = 0;
    for (int q = 0; q < gg; q++) src[k++] = q;
    for (int r = l->feat_top; r < l->feat_top + l->feat_h; r++) {
        for (int c = l->feat_left; c < l->feat_left + l->feat_w; c++) {
            int tile = (r / g) * l->cols + c / g;
            src[k++] = (1 + tile) * gg + (r % g) * g + c % g;
        }
        src[k++] = -1;
    }
}
