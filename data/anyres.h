/* anyres.h — LLaVA-NeXT's any-resolution images (docs/anyres.md): which grid of tiles an image gets, how
 * it is resized and padded into it, and how many `<image>` positions it takes in the LM, exactly as
 * transformers' LlavaNextImageProcessor, LlavaNextProcessor and LlavaNextForConditionalGeneration compute
 * them. The one place these rules live: pack, the loader, the model and generation all call it.
 *
 * An image of h x w pixels (rows x columns) gets:
 *   - the resolution (bh, bw) select_best_resolution picks among the pinpoints, each read as [height, width]:
 *     scale = min(pw / w, ph / h) in doubles, effective = min(int(w scale) int(h scale), w h), wasted =
 *     ph pw - effective; the largest effective wins, then the least wasted, the first in list order on a tie;
 *   - a grid of rows = bh / tile by cols = bw / tile tiles (every pinpoint a multiple of the tile side);
 *   - the resize keeping the aspect ratio (get_patch_output_size): with sw = bw / w, sh = bh / h, when
 *     sw < sh it is bw wide and min(ceil(h sw), bh) high, else bh high and min(ceil(w sh), bw) wide;
 *     pasted at (pad_top, pad_left) = ((bh - rh) / 2, (bw - rw) / 2) (floored) into zeros;
 *   - the tower passes: the base image (the whole image resized to tile x tile) first, then the tiles in
 *     row-major order, each g x g patches (g = tile / patch);
 *   - the LM positions: the base image's g^2 features (+1, the class token, under the `full` select
 *     strategy), then the (rows g) x (cols g) grid of the tiles' features with the rows or columns that
 *     are padding removed (unpad_image: where w / h > (cols g) / (rows g), new = int(round(h (cols g) / w, 7))
 *     rows of features, p = (rows g - new) // 2 rows dropped at the top and at the bottom; otherwise the
 *     same over columns), each remaining row followed by one image_newline. */
#ifndef RRFP_DATA_ANYRES_H
#define RRFP_DATA_ANYRES_H

#include <stddef.h>
#include <stdint.h>

#define ANYRES_MAX_PINPOINTS 64
#define ANYRES_MAX_SIDE 8192 /* the largest pinpoint side accepted */

typedef struct {
    int n;
    int hw[ANYRES_MAX_PINPOINTS][2]; /* [height, width] */
} AnyresPinpoints;

/* LLaVA-1.6's default: [[336,672],[672,336],[672,672],[1008,336],[336,1008]] */
void anyres_pinpoints_default(AnyresPinpoints* pp);
/* Parse "[[336,672],[672,336],...]" (JSON: a non-empty list of [height, width] pairs of positive integers,
 * each a multiple of `tile` and at most ANYRES_MAX_SIDE). Returns 0, or -1 with the reason in err. */
int anyres_pinpoints_parse(const char* text, int tile, AnyresPinpoints* pp, char* err, size_t err_len);
/* Check an already filled list against the tile (as the parser does). */
int anyres_pinpoints_check(const AnyresPinpoints* pp, int tile, char* err, size_t err_len);
/* Write it back as "[[336,672],...]" (the form the parser reads). */
void anyres_pinpoints_format(const AnyresPinpoints* pp, char* buf, size_t n);

typedef enum { ANYRES_SELECT_DEFAULT = 0, ANYRES_SELECT_FULL = 1 } AnyresSelect;

typedef struct {
    int best_h, best_w;       /* select_best_resolution */
    int rows, cols;           /* the tile grid */
    int resized_h, resized_w; /* the image resized into (best_h, best_w) keeping its aspect ratio */
    int pad_top, pad_left;    /* where it is pasted */
    int g;                    /* features per tile side (tile / patch) */
    int feat_top, feat_h;     /* the unpadded feature rows [feat_top, feat_top + feat_h) of rows * g */
    int feat_left, feat_w;    /* the unpadded feature columns [feat_left, feat_left + feat_w) of cols * g */
    int base;                 /* the base image's features (g^2, +1 under `full`) */
    int n_tiles;              /* tower passes: 1 + rows * cols */
    int n_positions;          /* base + feat_h * feat_w + feat_h (one image_newline a row) */
} AnyresLayout;

/* The layout of an orig_h x orig_w image. tile: the tower's image side (336); patch: its patch side (14).
 * Returns 0, or -1 with the reason (sizes not positive, tile not a multiple of patch, no pinpoints). */
int anyres_layout(int orig_h, int orig_w, const AnyresPinpoints* pp, int tile, int patch, AnyresSelect select,
                  AnyresLayout* out, char* err, size_t err_len);
/* The same for a known tile grid (rows x cols, e.g. from a shard index): everything but the resize and paste
 * (resized_*, pad_* zero; best_* = the grid's pixels). anyres_layout computes the grid and then calls this:
 * the one place the unpadded features and the position count are worked out. */
int anyres_layout_grid(int orig_h, int orig_w, int rows, int cols, int tile, int patch, AnyresSelect select,
                       AnyresLayout* out, char* err, size_t err_len);
/* The number of `<image>` positions of the image (AnyresLayout.n_positions), or -1 on bad arguments. */
int anyres_num_positions(int orig_h, int orig_w, const AnyresPinpoints* pp, int tile, int patch, AnyresSelect select);

/* The feature of each of the layout's n_positions positions, in LM order (the strategy `default`): the
 * base image's features 0 .. g^2 - 1, then the unpadded grid row by row, feature (r, c) of the grid being
 * tile k = (r / g) cols + c / g's feature (r % g) g + c % g, written as (1 + k) g^2 + (r % g) g + c % g (the
 * tower images' features laid end to end, the base image first), and -1 for each row's image_newline.
 * src holds n_positions values. */
void anyres_feature_map(const AnyresLayout* l, int32_t* src);

/* ---- the pixels (data/image_anyres.c): LlavaNextImageProcessor's tiles, Pillow-exact ----
 * The decoded RGB8 image (w x h, full size as Pillow opens it) resized to (resized_w, resized_h) with Pillow's
 * resize(BICUBIC) (image_resize_bicubic_u8: the same bytes), pasted at (pad_left, pad_top) onto a black
 * best_w x best_h canvas, cut into rows x cols tiles of tile x tile, row-major; before them the base image,
 * the whole image resized to tile x tile. out: n_tiles * tile * tile * 3 bytes, tile after tile. */
void anyres_tiles_rgb8(const uint8_t* rgb, int w, int h, const AnyresLayout* l, int tile, uint8_t* out);
/* The tiles as the tower's images: each tile's (tile / p)^2 patches row-major, each flattened (row, col,
 * channel), CLIP's (x / 255 - mean) / std (data/image.h image_clip_mean / _std). out: n_tiles (tile / p)^2
 * 3 p^2 floats. */
void anyres_tiles_patches(const uint8_t* tiles, const AnyresLayout* l, int tile, int p, float* out);
struct JpegCodec;
/* The whole path for one image (JPEG, PNG or GIF by its signature, data/image.h image_decode_rgb at full size):
 * its layout (under the `default` strategy) into *l, its patches into out (sized from the layout: call
 * anyres_layout on the header's size first). The image must be orig_w x orig_h (the index's), else an error.
 * Returns 0, or -1 with the reason. */
int anyres_patches_into(struct JpegCodec* c, const uint8_t* bytes, size_t n, const AnyresPinpoints* pp, int tile, int p,
                        int orig_w, int orig_h, float* out, char* err, size_t err_len);

#endif
