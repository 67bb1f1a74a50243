/* util.h — error checks, allocation and timing helpers shared by every folder.
 *
 * One check macro per library (llm.c style): each passes __FILE__/__LINE__ to one function that
 * prints and exits. Assertions (RR_ASSERT) stay on in release builds. Errors a user can cause
 * (bad recipe key, corrupt JPEG, truncated shard) are NOT assertions: report them with rr_die()
 * or return an error code with a message naming the file, line or sample. */
#ifndef RRFP_UTIL_H
#define RRFP_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RR_NORETURN __attribute__((noreturn))
#define RR_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RR_NORETURN
#define RR_PRINTF(a, b)
#endif

/* Print "rrfp-mm: error: <msg>" and exit(1). This function does not return. */
RR_NORETURN void rr_die(const char* fmt, ...) RR_PRINTF(1, 2);
/* Like rr_die but also prints "---> HINT: <hint>" on a second line. */
RR_NORETURN void rr_die_hint(const char* hint, const char* fmt, ...) RR_PRINTF(2, 3);
/* Print "rrfp-mm: warning: <msg>". */
void rr_warn(const char* fmt, ...) RR_PRINTF(1, 2);

RR_NORETURN void rr_assert_fail(const char* expr, const char* file, int line);
#define RR_ASSERT(x) ((x) ? (void)0 : rr_assert_fail(#x, __FILE__, __LINE__))

void* rr_malloc_check(size_t size, const char* file, int line);
void* rr_calloc_check(size_t n, size_t size, const char* file, int line);
void* rr_realloc_check(void* p, size_t size, const char* file, int line);
FILE* rr_fopen_check(const char* path, const char* mode, const char* file, int line);
#define mallocCheck(size) rr_malloc_check((size), __FILE__, __LINE__)
#define callocCheck(n, size) rr_calloc_check((n), (size), __FILE__, __LINE__)
#define reallocCheck(p, size) rr_realloc_check((p), (size), __FILE__, __LINE__)
#define fopenCheck(path, mode) rr_fopen_check((path), (mode), __FILE__, __LINE__)

/* Monotonic wall clock in seconds. */
double rr_now(void);

/* Test-only pause (docs/reliability.md, "Fault tests"): sleeps the milliseconds that the environment
 * variable `env` holds (RRFP_TEST_STEP_SLEEP_MS before each training step, RRFP_TEST_CKPT_SLEEP_MS inside
 * each checkpoint write, RRFP_TEST_GEN_SLEEP_MS after each answer generate writes), resuming after a signal so the pause keeps its length; does nothing when the
 * variable is unset or 0 (the default). Fault tests use it to make a short run long enough to aim a
 * fault at a chosen point of its progress. A value that is not an integer in 0..600000 is refused with
 * a warning, once, and ignored. */
void rr_test_pause(const char* env);

/* fsync folder `dir`, so that a rename or removal in it is durable. Returns 0, or -1 with errno when the folder
 * cannot be opened or its fsync fails (EINVAL, a file system that cannot fsync a folder, is 0: nothing to do).
 * Callers that made a file or folder appear in `dir` check it (docs/reliability.md "What is durable"). */
int rr_fsync_dir(const char* dir);
/* rr_fsync_dir of the folder holding `path` (a file or folder just renamed or created there). */
int rr_fsync_parent(const char* path);
/* Write `size` bytes to `path` atomically: write to "<path>.tmp.<pid>", fsync, rename, fsync the
 * directory. Returns 0 on success; on failure returns -1, sets errno, and leaves no temporary behind;
 * `path` is unchanged, except when the directory's fsync after the rename failed: `path` is then the new
 * file, whole, but its rename may not survive a power loss. */
int rr_write_file_atomic(const char* path, const void* data, size_t size);
/* The same for a file made of `n` parts written back to back, with no copy of the whole: part(ctx, i, &size)
 * gives part i's bytes (valid until the next call; a safetensors file is written from its tensors where they
 * lie, or one at a time: engine/safetensors.c). A part that returns NULL (errno set) fails the write as a
 * failed write(2) does. */
typedef const void* (*RrPartFn)(void* ctx, int i, size_t* size);
int rr_write_file_atomic_parts(const char* path, int n, RrPartFn part, void* ctx);

/* Size caps of whole-file reads: a file is read whole only up to the cap of its kind, so a crafted
 * or mistaken path (/dev/zero, a FIFO, a 40 GB file named as a recipe) is refused with a message, not
 * read until memory runs out. Each cap is far above any real file of its kind. */
#define RR_MiB ((size_t)1 << 20)
#define RR_GiB ((size_t)1 << 30)
#define RR_MAX_INI (4 * RR_MiB)         /* recipe .ini files */
#define RR_MAX_JSON (64 * RR_MiB)       /* config.json, model.safetensors.index.json, state.json, duration files */
#define RR_MAX_TOKENIZER (256 * RR_MiB) /* tokenizer.json (the largest published ones are ~35 MB) */
#define RR_MAX_JSONL RR_GiB             /* metrics.jsonl, predictions.jsonl, Chrome trace files, text to encode */
#define RR_MAX_MANIFEST (16 * RR_GiB)   /* LLaVA manifests (llava_v1_5_mix665k.json is ~1 GB) */
#define RR_MAX_IMAGE (256 * RR_MiB)     /* one JPEG */
#define RR_MAX_SAFETENSORS (1024 * RR_GiB) /* one .safetensors file (checkpoint shards, Hugging Face shards) */

/* Read a whole file into a malloc'd buffer (NUL-terminated for convenience; *size excludes the NUL),
 * refusing a file of more than `max` bytes (one of the RR_MAX_* caps) before reading it, or, when its
 * size is not known in advance (a pipe, a FIFO), as soon as more than `max` bytes arrive. A character or
 * block device (/dev/zero) is refused unread. Returns NULL with errno set on failure (EISDIR for a
 * directory, ENODEV for a device, EFBIG over the cap). */
char* rr_read_file(const char* path, size_t* size, size_t max);
/* The same for an open stream (stdin), from its current position; the stream stays open. */
char* rr_read_stream(FILE* f, size_t* size, size_t max);

/* The reason rr_read_file failed with errno errnum, for "PATH: <reason>": strerror, except for a
 * directory: "is a directory, expected <expected>" (expected = "a JPEG file"), a device: "a device, not a
 * regular file or pipe; expected <expected>", and over the cap: "larger
 * than 4 MiB, the limit for <expected>" (the cap of this thread's last rr_read_file). The text is in buf
 * or static. This function can't fail. */
const char* rr_read_file_why(int errnum, const char* expected, char* buf, size_t n);
/* rr_read_file, with the message of a failure in err: fmt takes two %s, the path then the reason
 * (rr_read_file_why with `expected`), e.g. "cannot read manifest '%s': %s". */
char* rr_read_file_err(const char* path, size_t* size, size_t max, const char* expected, char* err, size_t err_len,
                       const char* fmt);

/* err = the formatted message (nothing when err is NULL or err_len is 0). Returns -1, so that a library
 * function can `return rr_fail(err, err_len, ...)`. This function can't fail. */
int rr_fail(char* err, size_t err_len, const char* fmt, ...) RR_PRINTF(3, 4);

/* Format a byte count the way the caps are written ("4 MiB", "1.5 GiB", "300 bytes"). */
void rr_fmt_bytes(char* buf, size_t n, uint64_t bytes);

/* Remove `path` and, when it is a folder, everything under it, without following symbolic links and
 * without leaving its file system: nftw with FTW_DEPTH | FTW_PHYS | FTW_MOUNT, never a shell. A missing
 * path is success. Returns 0, or -1 with errno set (what could be removed is gone). */
int rr_remove_tree(const char* path);

/* The longest part of `path` that exists, cut back at a '/' until lstat (nofollow) or stat finds it: pre holds path
 * on entry (a caller may have cut trailing '/' off it) and that part on return; returns the rest of path after it
 * ("" when all of it exists). When nothing of a relative path exists, pre is "." (n bytes) and the rest all of path. */
const char* rr_path_existing_part(const char* path, char* pre, size_t n, int nofollow);

/* Checked 64-bit arithmetic for sizes computed from a file's or an argument's numbers: *out = a * b or
 * a + b; returns 0, or -1 when the result leaves [0, INT64_MAX] (either operand negative included). */
int rr_mul_i64(int64_t a, int64_t b, int64_t* out);
int rr_add_i64(int64_t a, int64_t b, int64_t* out);

/* 64-bit FNV-1a hash of a byte string (used for parameter-name keyed init, tokenizer hashes). */
uint64_t rr_fnv1a64(const void* data, size_t n);
/* Incremental FNV-1a 64: h = RR_FNV1A64_INIT, then h = rr_fnv1a64_add(h, ...) over the pieces. */
#define RR_FNV1A64_INIT 14695981039346656037ull /* offset basis 0xcbf29ce484222325 */
uint64_t rr_fnv1a64_add(uint64_t h, const void* data, size_t n);
/* The FNV-1a step for one 64-bit value folded in as one "byte" (h ^ v) * prime, as the eval keys use. */
static inline uint64_t rr_fnv1a64_word(uint64_t h, uint64_t v) { return (h ^ v) * 1099511628211ull; }

/* SplitMix64 (Steele, Lea, Flood 2014): rr_mix64 is its output finaliser, rr_splitmix64 one step of
 * the generator (state += golden gamma, then the finaliser). The one copy every generator uses. */
static inline uint64_t rr_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline uint64_t rr_splitmix64(uint64_t* state) { return rr_mix64(*state += 0x9E3779B97F4A7C15ull); }

/* mkdir -p: create `path` and its missing parents (mode 0755). Returns 0, or -1 with errno set. */
int rr_mkdirs(const char* path);

/* XXH64 (xxHash, 64-bit, as the reference XXH64(data, n, seed) on a little-endian host): a checksum
 * of checkpoint tensors, ~10x faster than FNV-1a on large buffers. */
uint64_t rr_xxh64(const void* data, size_t n, uint64_t seed);
/* The same hash over bytes given in pieces (a tensor read from its file a chunk at a time): init, update with
 * each piece in order, digest; equal to rr_xxh64 of the pieces joined. */
typedef struct {
    uint64_t v[4], total, seed;
    unsigned char buf[32];
    unsigned nbuf;
} RrXxh64;
void rr_xxh64_init(RrXxh64* s, uint64_t seed);
void rr_xxh64_update(RrXxh64* s, const void* data, size_t n);
uint64_t rr_xxh64_digest(const RrXxh64* s);

/* Open the shared object `soname` that this build puts beside its executables (the CUDA backend, the NCCL
 * transport), looking in order at $env_var (a path), the running executable's folder, ../lib/ from it,
 * and the dynamic linker's own search. NULL on failure, with every attempt's reason in `err`. */
void* rr_dlopen_beside_exe(const char* env_var, const char* soname, char* err, size_t err_len);

/* The optimal string alignment distance of a and b (insertions, deletions, substitutions and swaps of two
 * neighbouring characters, each 1), for "did you mean" suggestions; strings over 63 bytes count as 64 apart. */
int rr_edit_distance(const char* a, const char* b);

#ifdef __cplusplus
}
#endif
#endif
