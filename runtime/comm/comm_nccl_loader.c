/* comm_nccl_loader.c — comm_nccl_create's entry: the NCCL implementation (comm_nccl.c, with cudart and
 * NCCL) is a shared object, librrfp-nccl.so, opened on first use, so that a process that never asks for
 * NCCL (every CPU run, every tool) never maps it. Looked for as librrfp-cuda.so is (engine/cuda/
 * cuda_loader.c): $RRFP_NCCL_LIB, beside the executable, ../lib/ from it, then the dynamic linker's
 * search. A build without CUDA or NCCL has no such library and says so. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "engine/util.h"
#include "runtime/comm/comm.h"

#define RRFP_NCCL_SO "librrfp-nccl.so"

typedef Comm* (*CreateFn)(Comm*, int, char*, size_t);

#ifdef RRFP_HAVE_NCCL
static int state = 0; /* 0 untried, 1 loaded, -1 failed */
static char load_error[1024];
static CreateFn create_fn;
static void* lib; /* the loaded librrfp-nccl.so */

static void load(void) {
    if (state) return;
    state = -1;
    char tried[768];
    void* h = rr_dlopen_beside_exe("RRFP_NCCL_LIB", RRFP_NCCL_SO, tried, sizeof tried);
    if (!h) {
        snprintf(load_error, sizeof load_error, "cannot load the NCCL transport (%s): %s", RRFP_NCCL_SO, tried);
        return;
    }
    lib = h;
    create_fn = (CreateFn)dlsym(h, "rrfp_nccl_comm_create");
    if (!create_fn) {
        snprintf(load_error, sizeof load_error, "%s is not this build's NCCL transport (no rrfp_nccl_comm_create)",
                 RRFP_NCCL_SO);
        return;
    }
    state = 1;
}
#endif

void comm_nccl_profile(int on) {
#ifdef RRFP_HAVE_NCCL
    if (state > 0) {
        void (*f)(int) = (void (*)(int))dlsym(lib, "rrfp_nccl_profile");
        if (f) f(on);
    }
#else
    (void)on;
#endif
}

void comm_nccl_profile_take(double* ms, long* ops) {
    *ms = 0, *ops = 0;
#ifdef RRFP_HAVE_NCCL
    if (state > 0) {
        void (*f)(double*, long*) = (void (*)(double*, long*))dlsym(lib, "rrfp_nccl_profile_take");
        if (f) f(ms, ops);
    }
#endif
}

Comm* comm_nccl_create(Comm* host, int links, char* err, size_t err_len) {
#ifdef RRFP_HAVE_NCCL
    load();
    if (state > 0) return create_fn(host, links, err, err_len);
    snprintf(err, err_len, "%s", load_error);
#else
    (void)links;
    snprintf(err, err_len, "runtime.comm = nccl: this build has no NCCL (it needs the CUDA toolkit and libnccl)");
#endif
    host->ops->free(host);
    return NULL;
}
