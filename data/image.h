/* image.h — image preprocessing exactly as docs/data.md "Image preprocessing": JPEG decode to RGB8 (TurboJPEG,
 * DCT-domain down-scaling where the target is at most half the source), Qwen2-VL smart_resize
 * dimensions with patch size p and [min_patches, max_patches], antialiased bilinear resize with
 * Pillow's Image.resize(BILINEAR) semantics (computed in float, not rounded through 8 bits), and
 * normalisation x/127.5 - 1 into row-major patches, each flattened (row, col, channel).
 *
 * A JpegCodec wraps one TurboJPEG handle: it is not thread-safe, so each thread keeps its own. A
 * failure never affects the next call: after any error the handle is replaced by a fresh one.
 *
 * Limits. A JPEG may declare up to 65535 x 65535 pixels in 2,000 bytes; the decode buffer is sized
 * from the header, so the header is bounded before anything is allocated: at most JPEG_MAX_SIDE
 * pixels per side (libjpeg-turbo's own limit) and JPEG_MAX_PIXELS in all (Pillow's default
 * MAX_IMAGE_PIXELS, its decompression-bomb threshold), and the file at most JPEG_MAX_BYTES. An
 * image beyond them is an error like a corrupt one (a rejected record), never an allocation. */
#ifndef RRFP_DATA_IMAGE_H
#define RRFP_DATA_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "data/anyres.h"

#define JPEG_MAX_SIDE 65500
#define JPEG_MAX_PIXELS 89478485
#define JPEG_MAX_BYTES (256 << 20)

typedef struct JpegCodec JpegCodec;

JpegCodec* jpeg_codec_new(void);
void jpeg_codec_free(JpegCodec* c);

/* Header of a JPEG: width, height, checked against the limits above. Returns 0, or -1 with the reason in
 * err ("not a JPEG (does not start with the JPEG marker ff d8: a PNG file)", "corrupt JPEG header: ...");
 * the file's bytes are never quoted. */
int jpeg_read_header(JpegCodec* c, const uint8_t* buf, size_t n, int* w, int* h, char* err, size_t err_len);

/* Decode to packed RGB8 at 1/scale of the full size (scale 1, 2, 4 or 8; the scaled size is
 * ceil(w/scale) x ceil(h/scale), TurboJPEG's TJSCALED). Greyscale is expanded to RGB; CMYK and YCCK
 * are decoded as CMYK and converted as Pillow's convert("RGB") of its "CMYK;I" reading (inverted
 * samples, then libImaging's cmyk2rgb; data/image.c cmyk_to_rgb). Any libjpeg
 * warning (a truncated file, corrupt data) is an error here: a damaged image is rejected, never
 * half-grey. Returns a malloc'd buffer and sets *ow, *oh; NULL with the reason in err. */
uint8_t* jpeg_decode_rgb(JpegCodec* c, const uint8_t* buf, size_t n, int scale, int* ow, int* oh, char* err,
                         size_t err_len);

/* PNG (data/png.c): the same limits as JPEG, checked on the IHDR chunk before any allocation;
 * decoded as PIL's convert("RGB") (palette / bit depths expanded, 16 -> 8 bits, alpha dropped). */
int image_is_png(const uint8_t* buf, size_t n);
int png_read_header(const uint8_t* buf, size_t n, int* w, int* h, char* err, size_t err_len);
uint8_t* png_decode_rgb(const uint8_t* buf, size_t n, int* ow, int* oh, char* err, size_t err_len);

/* GIF (data/gif.c): the first frame on its logical screen, as Pillow's Image.open(f).convert("RGB")
 * (docs/data.md "Image formats"); the size (the screen grown to hold the first frame) is checked against
 * the same limits before any allocation. */
int image_is_gif(const uint8_t* buf, size_t n);
int gif_read_header(const uint8_t* buf, size_t n, int* w, int* h, char* err, size_t err_len);
uint8_t* gif_decode_rgb(const uint8_t* buf, size_t n, int* ow, int* oh, char* err, size_t err_len);

/* Any format, by its signature: JPEG (jpeg_read_header / jpeg_decode_rgb at DCT scale `scale`), PNG or
 * GIF (full size: `scale` is a JPEG-only shortcut, as PIL's draft). Anything else is "not a JPEG, PNG or
 * GIF", naming what it looks like. */
int image_read_header(JpegCodec* c, const uint8_t* buf, size_t n, int* w, int* h, char* err, size_t err_len);
uint8_t* image_decode_rgb(JpegCodec* c, const uint8_t* buf, size_t n, int scale, int* ow, int* oh, char* err,
                          size_t err_len);

/* Encode packed RGB8 (quality 1..100, 4:2:0, progressive when asked). Returns a malloc'd buffer. */
uint8_t* jpeg_encode_rgb(JpegCodec* c, const uint8_t* rgb, int w, int h, int quality, int progressive,
                         size_t* out_len);

/* Qwen2-VL smart_resize with factor p, min_pixels = min_patches p^2, max_pixels = max_patches p^2:
 * each side rounded (half to even, as Python's round) to a multiple of p, at least p; if the area is
 * above max_pixels both sides are scaled by sqrt(h w / max_pixels) and floored to multiples of p (at
 * least p), if below min_pixels scaled up by sqrt(min_pixels / (h w)) and ceiled. Where that still
 * leaves more than max_patches (extreme aspect ratios, or min_patches close to max_patches), the
 * longer grid side loses one patch at a time: max_patches is a hard bound (a microbatch budget
 * depends on it), min_patches is met whenever the aspect ratio allows. Returns the grid. */
void image_smart_resize(int h, int w, int p, int min_patches, int max_patches, int* grid_h, int* grid_w);

/* DCT scale (1, 2, 4 or 8) used to decode a w x h JPEG for a ow x oh target: the largest a with
 * a <= min(w / ow, h / oh) (integer division), i.e. Pillow's Image.draft rule. */
int image_dct_scale(int w, int h, int ow, int oh);

/* Antialiased bilinear resize of packed RGB8 (w x h) to float RGB (ow x oh, values 0..255), with
 * Pillow's coefficients (triangle filter, support scaled by the down-scale factor, pixel centres at
 * +0.5, weights normalised per output pixel), horizontal pass then vertical pass. `out` holds
 * ow*oh*3 floats. */
void image_resize_bilinear(const uint8_t* rgb, int w, int h, float* out, int ow, int oh);

/* Normalise x/127.5 - 1 and cut the (gh*p) x (gw*p) float image into gh*gw patches, row-major over
 * the grid, each flattened (row, col, channel): out holds gh*gw*3*p*p floats. */
void image_patchify(const float* img, int gh, int gw, int p, float* out);

/* The whole pipeline for one JPEG: header, smart_resize grid, DCT-scaled decode, resize, patchify.
 * *patches is malloc'd (gh*gw*3p^2 floats). Returns 0, or -1 with the reason in err. */
int image_load_patches(JpegCodec* c, const uint8_t* jpeg, size_t n, int p, int min_patches, int max_patches,
                       float** patches, int* grid_h, int* grid_w, char* err, size_t err_len);

/* The same for an expected grid (from a shard index): writes gh*gw*3p^2 floats into out; a JPEG whose
 * own size gives another grid is an error (the index and the image disagree). */
int image_patches_into(JpegCodec* c, const uint8_t* jpeg, size_t n, int p, int min_patches, int max_patches, int gh,
                       int gw, float* out, char* err, size_t err_len);

/* ---- LLaVA-1.5's preprocessing (rrfp-mm pack --image-preprocess llava; recorded in the shard header) ----
 * As LLaVA's train.py (image_aspect_ratio = pad) and Hugging Face's CLIPImageProcessor do it: the decoded
 * RGB8 image (full scale: Pillow opens it without draft) is padded to a square of side max(w, h) with the
 * colour int(255 * CLIP mean) = (122, 116, 104), the image pasted at ((side - w) / 2, (side - h) / 2)
 * (expand2square); resized to size x size with Pillow's Image.resize(BICUBIC) (a = -0.5, support scaled
 * by the down-scale factor, 8-bit fixed point with 22 fraction bits, rounded to uint8 after each pass,
 * horizontal then vertical: the same bytes as Pillow); the centre crop of a square is the square
 * itself; then (x / 255 - mean) / std per channel with CLIP's mean (0.48145466, 0.4578275, 0.40821073)
 * and std (0.26862954, 0.26130258, 0.27577711), cut into (size / p)^2 patches flattened (row, col,
 * channel) as image_patchify. */
/* IMAGE_PREP_ANYRES: LLaVA-NeXT's any-resolution tiles (data/anyres.h, docs/anyres.md): size is the tile side, the
 * "grid" of an image its tile rows x cols, its patches those of its base image and tiles (anyres_patches_into). */
typedef enum { IMAGE_PREP_SMART = 0, IMAGE_PREP_LLAVA = 1, IMAGE_PREP_ANYRES = 2 } ImagePrepKind;
typedef struct {
    ImagePrepKind kind;
    int size; /* IMAGE_PREP_LLAVA: the output side (336); IMAGE_PREP_ANYRES: the tile side */
    AnyresPinpoints pins; /* IMAGE_PREP_ANYRES: the grid pinpoints */
} ImagePrep;
extern const double image_clip_mean[3], image_clip_std[3];
/* "smart" / "llava" -> kind; 0, or -1 for another name. */
int image_prep_parse(const char* name, ImagePrepKind* kind);
const char* image_prep_name(ImagePrepKind kind);

/* expand2square: out (side x side x 3, side = max(w, h)) */
void image_expand2square(const uint8_t* rgb, int w, int h, uint8_t* out);
/* Pillow's Image.resize((ow, oh), BICUBIC) of packed RGB8, exactly (see above). */
void image_resize_bicubic_u8(const uint8_t* rgb, int w, int h, uint8_t* out, int ow, int oh);
/* The grid an image of w x h gets under prep (smart_resize for IMAGE_PREP_SMART). */
void image_prep_grid(const ImagePrep* prep, int h, int w, int p, int min_patches, int max_patches, int* grid_h,
                     int* grid_w);
/* The one decode of every reader of images (pack's check, the loader's patches, generate's through
 * image_load_patches): the image, JPEG, PNG or GIF by its signature (image_read_header, so any format pack
 * accepts), decoded to packed RGB8 as `prep` takes it for a gh x gw grid of p-pixel patches: LLaVA's
 * (IMAGE_PREP_LLAVA) at full size, as Pillow opens it; smart_resize's (prep NULL or IMAGE_PREP_SMART)
 * DCT-scaled by image_dct_scale for the (gw p) x (gh p) target. A PNG or GIF is always decoded at full size (the
 * DCT scale is a JPEG-only shortcut, as PIL's draft). Returns a malloc'd buffer of *ow x *oh pixels, or
 * NULL with the reason in err. */
uint8_t* image_decode_prep(JpegCodec* c, const uint8_t* buf, size_t n, const ImagePrep* prep, int p, int gh, int gw,
                           int* ow, int* oh, char* err, size_t err_len);
/* image_patches_into under prep (IMAGE_PREP_SMART: exactly image_patches_into), JPEG, PNG or GIF. */
int image_patches_into_prep(JpegCodec* c, const uint8_t* jpeg, size_t n, const ImagePrep* prep, int p, int min_patches,
                            int max_patches, int gh, int gw, float* out, char* err, size_t err_len);
/* One image (JPEG, PNG or GIF) as the loader preprocesses a shard's under prep, for an image that comes with no
 * index (rrfp-mm generate): its grid from its header (image_prep_grid), then image_patches_into_prep, the
 * loader's own pipeline. *patches is malloc'd (gh*gw*3p^2 floats). Returns 0, or -1 with the reason. */
int image_load_patches_prep(JpegCodec* c, const uint8_t* bytes, size_t n, const ImagePrep* prep, int p, int min_patches,
                            int max_patches, float** patches, int* grid_h, int* grid_w, char* err, size_t err_len);

#endif
