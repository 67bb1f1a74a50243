// emu_checks.cu — kernels that break the rules a GPU does not forgive, for tests/engine/cuda/test_emu_checks.c: the
// CPU emulation of the CUDA runtime (tests/support/cuda_emu) must report each. Compiled only for the emulation.
#include <cuda_runtime.h>
#include <string.h>

// block b reads what block b - 1 wrote: blocks run in no fixed order on a GPU, so the result depends on theirs
static __global__ void emu_checks_chain(float* x) {
    if (threadIdx.x == 0) x[blockIdx.x + 1] = x[blockIdx.x] + 1.0f;
}
// thread t reads its neighbour's shared-memory word with no __syncthreads between the write and the read
static __global__ void emu_checks_race(float* out) {
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}
// one thread past the end: n + 1 elements written into n
static __global__ void emu_checks_overrun(float* x, int n) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t <= n) x[t] = 1.0f;
}

// what: "chain", "race" or "overrun" on x, n floats of device memory (n >= 64); returns the launch's error
extern "C" int emu_checks_launch(const char* what, float* x, int n) {
    if (!strcmp(what, "chain")) {
        emu_checks_chain<<<n - 1, 32>>>(x);
    } else if (!strcmp(what, "race")) {
        emu_checks_race<<<1, 64>>>(x);
    } else {
        emu_checks_overrun<<<(n + 64) / 64, 64>>>(x, n);
    }
    cudaStreamSynchronize(0);
    return (int)cudaGetLastError();
}
