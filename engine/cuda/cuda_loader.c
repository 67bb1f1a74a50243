/* cuda_loader.c — the CUDA backend's entry in a CUDA build: the backend itself (engine/cuda/ sources, with
 * cudart, cuBLAS and cuBLASLt) is a shared object, librrfp-cuda.so, opened on first use. A command that
 * never asks for the CUDA backend (tokenize, pack, sim, trace, a CPU training run) then never maps the
 * CUDA libraries, whose loading costs most of a second per process (several per test under mpirun).
 *
 * Where it is looked for (rr_dlopen_beside_exe, engine/util.h), first found wins:
 *   1. $RRFP_CUDA_LIB (a path);
 *   2. beside the running executable (the build folder: every rrfp-mm binary and test lives there);
 *   3. ../lib/ from the executable's folder (an installed layout);
 *   4. the dynamic linker's own search (LD_LIBRARY_PATH, ld.so.cache).
 * A build whose backend cannot be opened reports why in the one-line reason of backend_cuda_get. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "engine/engine.h"
#include "engine/memory.h"

#define RRFP_CUDA_SO "librrfp-cuda.so"

typedef const Backend* (*GetFn)(char*, size_t);
typedef int (*MemFreeFn)(size_t*, char*, size_t);

static int state = 0; /* 0 untried, 1 loaded, -1 failed */
static char load_error[1024];
static GetFn get_fn;
static MemFreeFn mem_free_fn;

static void load(void) {
    if (state) return;
    state = -1;
    char tried[768];
    void* h = rr_dlopen_beside_exe("RRFP_CUDA_LIB", RRFP_CUDA_SO, tried, sizeof tried);
    if (!h) {
        snprintf(load_error, sizeof load_error, "cannot load the CUDA backend (%s): %s", RRFP_CUDA_SO, tried);
        return;
    }
    get_fn = (GetFn)dlsym(h, "rrfp_cuda_backend_get");
    mem_free_fn = (MemFreeFn)dlsym(h, "rrfp_cuda_mem_free");
    if (!get_fn || !mem_free_fn) {
        snprintf(load_error, sizeof load_error, "%s is not this build's CUDA backend (no rrfp_cuda_backend_get)",
                 RRFP_CUDA_SO);
        return;
    }
    state = 1;
}

const Backend* backend_cuda_get(char* why, size_t why_len) {
    load();
    if (state < 0) {
        if (why && why_len) snprintf(why, why_len, "%s", load_error);
        return NULL;
    }
    return get_fn(why, why_len);
}

int backend_cuda_mem_free(size_t* bytes, char* err, size_t err_len) {
    load();
    if (state < 0) {
        *bytes = 0;
        snprintf(err, err_len, "%s", load_error);
        return -1;
    }
    return mem_free_fn(bytes, err, err_len);
}
