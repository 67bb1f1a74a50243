/* wrap.c — for executables linked with -Wl,--wrap=backend_cuda_get (rrfp-mm-emu): every call of
 * backend_cuda_get in the engine, the trainer and the CLI gets the emulated CUDA backend instead,
 * without recompiling them. */
#include "engine/engine.h"

const Backend* backend_cuda_emu_get(char* why, size_t why_len);
const Backend* __wrap_backend_cuda_get(char* why, size_t why_len);

const Backend* __wrap_backend_cuda_get(char* why, size_t why_len) { return backend_cuda_emu_get(why, why_len); }
