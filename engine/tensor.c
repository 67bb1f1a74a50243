/* tensor.c — dtypes and the bump arena (one big block per purpose, llm.c style). */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

size_t dtype_size(DType t) {
    switch (t) {
    case DTYPE_F32: return 4;
    case DTYPE_BF16: return 2;
    case DTYPE_I32: return 4;
    case DTYPE_F16: return 2;
    case DTYPE_U8: return 1;
    }
    RR_ASSERT(0 && "unknown dtype");
    return 0;
}

const char* dtype_name(DType t) {
    switch (t) {
    case DTYPE_F32: return "F32";
    case DTYPE_BF16: return "BF16";
    case DTYPE_I32: return "I32";
    case DTYPE_F16: return "F16";
    case DTYPE_U8: return "U8";
    }
    return "?";
}

void arena_init(Arena* a, const char* name, size_t size) {
    memset(a, 0, sizeof *a);
    a->name = name;
    a->size = size;
    if (size == 0) return;
    if (posix_memalign((void**)&a->base, 64, size) != 0)
        rr_die("out of memory: cannot allocate the %s arena (%.1f MiB)", name, (double)size / (1 << 20));
}

void* arena_alloc(Arena* a, size_t bytes) {
    size_t off = (a->used + 63) & ~(size_t)63;
    if (off + bytes > a->size)
        rr_die("the %s arena is full: need %zu more bytes, %zu of %zu used", a->name, bytes, a->used, a->size);
    a->used = off + bytes;
    if (a->used > a->peak) a->peak = a->used;
    return a->base + off;
}

float* arena_alloc_f32(Arena* a, size_t n) { return (float*)arena_alloc(a, n * sizeof(float)); }

void arena_free(Arena* a) {
    free(a->base);
    memset(a, 0, sizeof *a);
}
