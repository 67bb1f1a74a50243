// cuda_backend.cu — CUDA backend entry: device detection. A machine without a GPU gets one clear
// line ("no CUDA device: ...") instead of a crash.
#include <cuda_runtime.h>
#include <stdio.h>

#include "engine/engine.h"

extern "C" const Backend* backend_cuda_get(char* why, size_t why_len) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        if (why && why_len)
            snprintf(why, why_len, "no CUDA device: %s (cudaGetDeviceCount returned %d)",
                     err != cudaSuccess ? cudaGetErrorString(err) : "zero devices", (int)err);
        return NULL;
    }
    if (why && why_len) snprintf(why, why_len, "CUDA ops are not built yet in this version");
    return NULL;
}
