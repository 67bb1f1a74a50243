/* shard.h — the .rrs shard format (docs/data.md "Shard format"). All integers little-endian.
 *
 *   header (80 bytes)
 *     0  magic "RRFPSHRD"            8  u32 version (1)          12 u32 header size (80)
 *     16 u64 sample count            24 u64 tokenizer hash       32 u64 index offset
 *     40 u64 index size              48 i32 <image> token id     52 u32 patch p
 *     56 u32 min_patches             60 u32 max_patches          64 u64 FNV-1a 64 of the index bytes
 *     72 u64 FNV-1a 64 of header bytes 0..71
 *   frames: one zstd frame per sample (zstd content checksum on, content size in the frame header);
 *     decompressed payload: "RRSF", u32 n_tokens, u32 n_images, i32 ids[n_tokens],
 *     u8 mask[n_tokens] (1 = token of a gpt turn), u32 jpeg_size[n_images], the JPEG bytes in order
 *   index (at the index offset, after the last frame), per sample in order:
 *     u64 frame offset, u32 frame size, u32 n_tokens, u32 n_supervised, u16 n_images, u16 id length,
 *     id bytes, then per image u16 width, u16 height, u16 grid_h, u16 grid_w (the smart_resize grid
 *     for the header's p / min / max, so a packer plans without decoding)
 *   version 2 (written by `pack --image-preprocess llava` or `--template` other than rrfp; a default pack
 *   stays version 1, byte for byte): the index ends with a 16-byte record of how the samples were made:
 *   "IPRP", u32 image preprocessing (0 = smart_resize, 1 = LLaVA-1.5's, data/image.h), u32 output side
 *   (336; 0 with kind 0), u32 chat template (data/template.h's TemplateKind: 0 rrfp, 1 vicuna_v1, 2
 *   llama_3, 3 chatml, 4 plain); under kind 1 the grids above are (side / p) x (side / p). Covered by the
 *   index checksum like the entries. Version 1 shards, and version 2 shards of builds that wrote 0 there,
 *   read as the rrfp template.
 *   version 3 (`pack --image-preprocess anyres`, LLaVA-NeXT's any-resolution images, docs/anyres.md): as version 2
 *   with preprocessing 2 and the tile side as the output side, the record preceded by the grid pinpoints:
 *   n x (u32 height, u32 width), then u32 n (1 .. ANYRES_MAX_PINPOINTS); each image's grid_h x grid_w is its tile
 *   grid (rows x cols), w x h its original size: the loader plans tiles and positions without decoding.
 *
 * Damage is local: a bad header or index makes the whole shard unreadable (reported by file); a
 * frame that fails zstd's checksum or does not match its index entry loses that sample only. */
#ifndef RRFP_DATA_SHARD_H
#define RRFP_DATA_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <zstd.h>

#include "data/anyres.h"

#define SHARD_MAGIC "RRFPSHRD"
#define SHARD_VERSION 1
#define SHARD_VERSION_PREP 2 /* with the record of the image preprocessing and chat template */
#define SHARD_VERSION_ANYRES 3 /* --image-preprocess anyres: the grid pinpoints before that record */
#define SHARD_MAX_TEMPLATE 4 /* the largest chat template number a record holds (TEMPLATE_PLAIN) */
#define SHARD_HEADER_SIZE 80
#define SHARD_MAX_IMAGES 16

typedef struct {
    uint16_t w, h;          /* source JPEG size */
    uint16_t grid_h, grid_w; /* patch grid at the shard's (patch, min_patches, max_patches) */
} ShardImage;

typedef struct {
    uint64_t offset;
    uint32_t size;
    uint32_t n_tokens, n_supervised;
    uint32_t n_images;
    uint32_t image0; /* first ShardImage of this sample in Shard.images */
    uint32_t id_off; /* sample id: Shard.ids + id_off, NUL-terminated */
} ShardEntry;

typedef struct {
    uint64_t tokenizer_hash;
    int32_t image_token;
    uint32_t patch, min_patches, max_patches;
    uint32_t prep, prep_size; /* ImagePrepKind (0 = smart_resize, version 1) and the LLaVA output side */
    uint32_t chat_template;   /* TemplateKind the pack applied (0 = rrfp, version 1) */
    AnyresPinpoints pins;     /* prep 2 (any-resolution, version 3): the grid pinpoints */
} ShardInfo;

/* ---- writer ---- */
typedef struct ShardWriter ShardWriter;

typedef struct {
    const char* id;
    int n_tokens;
    const int32_t* ids;
    const uint8_t* mask;
    int n_supervised;
    int n_images;
    const uint8_t* jpeg[SHARD_MAX_IMAGES];
    size_t jpeg_len[SHARD_MAX_IMAGES];
    ShardImage img[SHARD_MAX_IMAGES];
} ShardSampleIn;

/* A sample's frame can be made apart from the writer, so that many threads compress while one writes (pack's
 * workers): shard_frame_make with the thread's own context, then shard_writer_add_frame in sample order;
 * shard_writer_add is the two in one. The bytes are the same whichever context made the frame (one zstd level
 * and parameter set, no zstd threads). */
typedef struct {
    uint8_t* frame; /* the zstd frame, frame_n bytes */
    size_t frame_n, frame_cap;
    uint8_t* payload; /* scratch: the uncompressed payload */
    size_t payload_cap;
} ShardFrame;
ZSTD_CCtx* shard_cctx_new(void); /* the shards' zstd settings: level 3, content checksum and size */
/* Returns 0, or -1 with err (a frame larger than an entry holds). */
int shard_frame_make(ZSTD_CCtx* cctx, const ShardSampleIn* s, ShardFrame* f, char* err, size_t err_len);
void shard_frame_free(ShardFrame* f);
/* s: the sample the frame was made from (its id, counts and images go to the index; its bytes are not read). */
int shard_writer_add_frame(ShardWriter* w, const ShardSampleIn* s, const ShardFrame* f, char* err, size_t err_len);

/* Create `path` (the caller passes a temporary name and renames it once closed). */
ShardWriter* shard_writer_open(const char* path, const ShardInfo* info, char* err, size_t err_len);
int shard_writer_add(ShardWriter* w, const ShardSampleIn* s, char* err, size_t err_len);
uint64_t shard_writer_bytes(const ShardWriter* w); /* bytes written so far */
uint64_t shard_writer_count(const ShardWriter* w);
/* Write the index and the header, fsync, close. Returns 0, or -1 with err (the file is removed). */
int shard_writer_close(ShardWriter* w, char* err, size_t err_len);
/* Close and remove without finishing (after an error). */
void shard_writer_abort(ShardWriter* w);

/* ---- reader ---- */
typedef struct {
    char path[1024];
    int fd;               /* -1 when reading from memory */
    const uint8_t* mem;   /* in-memory shard (fuzzing, tests) */
    uint64_t file_size;
    ShardInfo info;
    uint64_t n;
    ShardEntry* entries; /* (n) */
    ShardImage* images;
    char* ids;
} Shard;

/* Open a shard: header (magic, version, checksum), index (checksum, every entry inside the file and
 * before the index, ids, image sizes). Returns 0, or -1 with "PATH: what is wrong" in err. */
int shard_open(const char* path, Shard* s, char* err, size_t err_len);
int shard_open_mem(const uint8_t* buf, size_t n, const char* name, Shard* s, char* err, size_t err_len);
void shard_close(Shard* s);

/* One decoded sample; ids/mask/jpeg point into `buf`. */
typedef struct {
    uint8_t* buf;
    int n_tokens;
    int32_t* ids;
    uint8_t* mask;
    int n_images;
    const uint8_t* jpeg[SHARD_MAX_IMAGES];
    size_t jpeg_len[SHARD_MAX_IMAGES];
} ShardSample;

/* Read, decompress and check sample i (zstd checksum, payload layout, agreement with the index).
 * dctx: the caller's (one per thread). Returns 0, or -1 with the reason in err (the caller names
 * the shard and index). */
int shard_read_sample(const Shard* s, uint64_t i, ZSTD_DCtx* dctx, ShardSample* out, char* err, size_t err_len);
void shard_sample_free(ShardSample* s);

#endif
