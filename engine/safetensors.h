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
    size_t begin, end;  /* byte offsets into the data buffer (the bytes are read on demand: st_read_*) */
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
/* Tensor `name` (added) is not held by the caller until st_writer_write: its bytes are made when the file is
 * written, fill(ctx, buf, err, err_len) writing its numel * dtype_size bytes into buf (a buffer of the writer's,
 * one tensor's size, reused), returning 0, or -1 with a message (the write fails with it, nothing written). An
 * import writes a shard holding one converted tensor at a time so (docs/engine.md "Peak memory of the
 * whole-model commands"). */
typedef int (*StFill)(void* ctx, void* buf, char* err, size_t err_len);
void st_writer_defer(StWriter* w, const char* name, StFill fill, void* ctx);
/* A __metadata__ entry (both strings copied). */
void st_writer_meta(StWriter* w, const char* key, const char* value);
/* Write the file atomically (temporary name, fsync, rename). Returns 0, or -1 with a message in err. */
int st_writer_write(const StWriter* w, const char* path, char* err, size_t err_len);
void st_writer_free(StWriter* w);

/* ---- reader ----------------------------------------------------------------------------------
 * A file opened for reading holds its parsed header and an open descriptor, not its bytes: a tensor's
 * bytes are read (pread) when a st_read_* call asks for them, into the caller's buffer, so reading a
 * file costs the memory of what is read, not of the file (docs/engine.md "Safetensors files"). Every
 * read checks that the file still has the size it had when opened (a file truncated, grown or replaced
 * while open is an error naming the file and the tensor, never a crash: no mmap, no SIGBUS). */
typedef struct {
    char* path;
    int fd;            /* st_load: the open descriptor; -1 after st_close_fd (reads reopen the path) or in memory */
    uint64_t dev, ino; /* the file opened (a reopen must find the same one) */
    char* mem;         /* st_load_buffer: the whole bytes (copied); NULL for a file */
    uint64_t size;     /* the file's size when opened */
    uint64_t data_off; /* where the data buffer starts in the file (8 + header length) */
    size_t data_size;
    int n;
    StTensor* tensors; /* in the order of data_offsets */
    int n_meta;
    char** meta_keys;
    char** meta_vals;
    int* by_name; /* tensor indices sorted by name: st_find's binary search (NULL when n < 2) */
    int* meta_by_key; /* metadata indices sorted by key: st_meta's (NULL when n_meta < 2) */
} StFile;

/* Open and validate a file: reads its header (and its size), checks everything the header can get wrong
 * against the file's size, and keeps the descriptor open for the reads. Returns 0, or -1 with a message
 * naming the file (and the tensor) in err; on failure nothing needs freeing (and nothing stays open). */
int st_load(StFile* f, const char* path, char* err, size_t err_len);
/* Same, from memory (the bytes are copied); `path` is used in messages. */
int st_load_buffer(StFile* f, const char* path, const void* bytes, size_t size, char* err, size_t err_len);
/* Close the descriptor and free everything. */
void st_free(StFile* f);
/* Close the descriptor but keep the header: a later read reopens the path for its own duration, and refuses
 * a file that is not the one opened (another inode) or has another size. For callers that hold more files
 * than the open-file limit allows (checkpoints of many shards). */
void st_close_fd(StFile* f);
/* How many files a caller keeps open at once before it closes their descriptors (st_close_fd): well under the
 * usual limit of 1024 descriptors a process. */
#define ST_KEEP_OPEN 64
const StTensor* st_find(const StFile* f, const char* name); /* NULL when absent */
const char* st_meta(const StFile* f, const char* key);     /* NULL when absent */

/* Whether tensor `name` exists with exactly the expected shape: 0, or -1 with a message naming the file,
 * the tensor and both shapes. (Check before sizing a buffer from the expected shape.) */
int st_expect_shape(const StFile* f, const char* name, int ndim, const int64_t* shape, char* err, size_t err_len);
/* Copy tensor `name` into out as f32 (F32 copied, BF16 and F16 widened), checking that it exists and has
 * exactly the expected shape. Returns 0, or -1 with a message naming the file and tensor (a read error,
 * a file that changed since it was opened). */
int st_read_f32(const StFile* f, const char* name, float* out, int ndim, const int64_t* shape, char* err,
                size_t err_len);
int st_read_i32(const StFile* f, const char* name, int32_t* out, int ndim, const int64_t* shape, char* err,
                size_t err_len);
/* Bytes [off, off + len) of tensor t (of f) as stored, into out (len bytes). off + len must lie inside the
 * tensor (a programmer error otherwise). 0, or -1 with a message naming the file and the tensor. */
int st_read_raw(const StFile* f, const StTensor* t, uint64_t off, uint64_t len, void* out, char* err, size_t err_len);
/* Elements [first, first + count) of tensor t (F32, BF16 or F16) as f32, into out: only those bytes are
 * read (the rows of a slice along dimension 0). 0, or -1 with a message. */
int st_read_f32_range(const StFile* f, const StTensor* t, uint64_t first, uint64_t count, float* out, char* err,
                      size_t err_len);
/* rr_xxh64 of tensor t's stored bytes, read a chunk at a time (memory: one chunk, not the tensor). */
int st_tensor_xxh64(const StFile* f, const StTensor* t, uint64_t* hash, char* err, size_t err_len);

/* bf16 <-> f32 (round to nearest even; NaN stays NaN). */
uint16_t st_f32_to_bf16(float x);
float st_bf16_to_f32(uint16_t h);
/* IEEE half -> f32 (exact). */
float st_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
