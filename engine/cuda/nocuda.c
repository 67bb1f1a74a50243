/* nocuda.c — the CUDA backend entry of a CPU-only build (-DRRFP_CUDA=OFF or no nvcc). */
#include <stdio.h>

#include "engine/engine.h"

const Backend* backend_cuda_get(char* why, size_t why_len) {
    if (why && why_len) snprintf(why, why_len, "built without CUDA (configure with nvcc present and RRFP_CUDA=ON)");
    return NULL;
}

#include "engine/memory.h"
int backend_cuda_mem_free(size_t* bytes, char* err, size_t err_len) {
    *bytes = 0;
    snprintf(err, err_len, "built without CUDA");
    return -1;
}
