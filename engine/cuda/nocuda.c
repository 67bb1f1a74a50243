/* nocuda.c — the CUDA backend entry of a CPU-only build (-DRRFP_CUDA=OFF or no nvcc). */
#include <stdio.h>

#include "engine/engine.h"

const Backend* backend_cuda_get(char* why, size_t why_len) {
    if (why && why_len) snprintf(why, why_len, "built without CUDA (configure with nvcc present and RRFP_CUDA=ON)");
    return NULL;
}
