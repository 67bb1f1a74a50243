/* cuda_emu_entry.h — what a test or benchmark program built on the CPU emulation of the CUDA runtime
 * (rrfp_emu_executable in tests/support/support.cmake, which defines RR_CUDA_EMU) calls in it: the emulated CUDA
 * backend and the emulation's hooks (tests/support/cuda_emu). Under RR_CUDA_EMU, backend_cuda_get names the
 * emulated backend, so the program that asks a device for its backend runs unchanged on the emulation. */
#ifndef RRFP_TESTS_CUDA_EMU_ENTRY_H
#define RRFP_TESTS_CUDA_EMU_ENTRY_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine.h"

#ifdef __cplusplus
extern "C" {
#endif
const Backend* backend_cuda_emu_get(char* why, size_t why_len);
void emu_stats_print(void);
void emu_require_stream(void* stream); /* cudaStream_t: see tests/support/cuda_emu/cuda_emu.h */
#ifdef __cplusplus
}
#endif

/* the emulated CUDA backend, or a line "PROG: FAIL: no emulated CUDA backend: <why>" and exit 1 */
static inline const Backend* cuda_emu_backend_or_exit(const char* prog) {
    char why[256];
    const Backend* be = backend_cuda_emu_get(why, sizeof why);
    if (!be) {
        fprintf(stderr, "%s: FAIL: no emulated CUDA backend: %s\n", prog, why);
        exit(1);
    }
    return be;
}

#ifdef RR_CUDA_EMU
#define backend_cuda_get backend_cuda_emu_get
#endif

#endif
