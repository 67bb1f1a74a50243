/* safetensors.h — reader and writer of the safetensors format (Hugging Face), used for checkpoints
 * and for the step dumps that an external implementation checks.
 *
 * Layout: 8-byte little-endian header length n, then n bytes of JSON, then the data buffer.
 * The JSON maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
 * to the start of the data buffer) plus an optional "__metadata__" map of string to string.
 * The writer pads the header with spaces so the data buffer starts 8-byte aligned, and lays the
 * tensors out back to back in the order they were added. Supported dtypes: F32, BF16, I32 (and F16 for
 * reading: Hugging Face checkpoints).
 *
 * The reader validates everything a damaged or hand-made file can get wrong (sizes, JSON, dtypes,
 * shapes against byte counts, offsets in range, overlaps and holes, duplicate names) and reports it
 * naming the file and the tensor. */
#ifndef RRFP_SAFETENSORS_H
#define RRFP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER (100u << 20) /* same limit as the reference implementation */

typedef struct {
    char* name;
    DType dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t begin, end;  /* byte offsets into the data buffer */
    const void* data;   /* reader: points into the file buffer (may be unaligned; use st_read_*) */
} StTensor;

/* ---- writer ---------------------------------------------------------------------------------- */
typedef struct StWriter StWriter;
StWriter* st_writer_new(void);
/* Add a tensor. `data` holds numel * dtype_size bytes already in `dtype`, and must stay valid until
 * st_writer_write (it is not copied). Dies on a duplicate name (a programmer error). */
void st_writer_add(StWriter* w, const char* name, DType dtype, int ndim, const int64_t* shape, const void* data);
/* Shorthands for 1-4 dims. */
void st_writer_add_f32(StWriter* w, const char* name, const float* data, int ndim, int64_t d0, int64_t d1, int64_t d2,
                       int64_t d3);
void st_writer_add_i32(StWriter* w, const char* name, const int32_t* data, int ndim, int64_t d0, int64_t d1,
                       int64_t d2, int64_t d3);
/* A __metadata__ entry (both strings copied). */
void st_writer_meta(StWriter* w, const char* key, const char* value);
/* Write the file atomically (temporary name, fsync, rename). Returns 0, or -1 with a message in err. */
int st_writer_write(const StWriter* w, const char* path, char* err, size_t err_len);
void st_writer_free(StWriter* w);

/* ---- reader ---------------------------------------------------------------------------------- */
typedef struct {
    char* path;
    char* buf; /* whole file */
    size_t size;
    const char* data; /* start of the data buffer inside buf */
    size_t data_size;
    int n;
    StTensor* tensors; /* in the order of data_offsets */
    int n_meta;
    char** meta_keys;
    char** meta_vals;
    int* by_name; /* tensor indices sorted by name: st_find's binary search (NULL when n < 2) */
    int* meta_by_key; /* metadata indices sorted by key: st_meta's (NULL when n_meta < 2) */
} StFile;

/* Read and validate a file. Returns 0, or -1 with a message naming the file (and the tensor) in err;
 * on failure nothing needs freeing. */
int st_load(StFile* f, const char* path, char* err, size_t err_len);
/* Same, from memory (the bytes are copied); `path` is used in messages. */
int st_load_buffer(StFile* f, const char* path, const void* bytes, size_t size, char* err, size_t err_len);
void st_free(StFile* f);
const StTensor* st_find(const StFile* f, const char* name); /* NULL when absent */
const char* st_meta(const StFile* f, const char* key);     /* NULL when absent */

/* Whether tensor `name` exists with exactly the expected shape: 0, or -1 with a message naming the file,
 * the tensor and both shapes. (Check before sizing a buffer from the expected shape.) */
int st_expect_shape(const StFile* f, const char* name, int ndim, const int64_t* shape, char* err, size_t err_len);
/* Copy tensor `name` into out as f32 (F32 copied, BF16 widened), checking that it exists and has
 * exactly the expected shape. Returns 0, or -1 with a message naming the file and tensor. */
int st_read_f32(const StFile* f, const char* name, float* out, int ndim, const int64_t* shape, char* err,
                size_t err_len);
int st_read_i32(const StFile* f, const char* name, int32_t* out, int ndim, const int64_t* shape, char* err,
                size_t err_len);

/* bf16 <-> f32 (round to nearest even; NaN stays NaN). */
uint16_t st_f32_to_bf16(float x);
float st_bf16_to_f32(uint16_t h);
/* IEEE half -> f32 (exact). */
float st_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
