/* cuda_emu_entry.h — what a test or benchmark program built on the CPU emulation of the CUDA runtime
 * (rrfp_emu_executable in tests/support/support.cmake, which defines RR_CUDA_EMU) calls in it: the emulated CUDA
 * backend and the emulation's hooks (tests/support/cuda_emu). Under RR_CUDA_EMU, backend_cuda_get names the
 * emulated backend, so the program that asks a device for its backend runs unchanged on the emulation. */
#ifndef RRFP_TESTS_CUDA_EMU_ENTRY_H
#define RRFP_TESTS_CUDA_EMU_ENTRY_H

#include <stddef.h>

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

#ifdef RR_CUDA_EMU
#define backend_cuda_get backend_cuda_emu_get
#endif

#endif
