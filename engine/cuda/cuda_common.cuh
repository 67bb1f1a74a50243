// cuda_common.cuh — what every CUDA op file shares: the check macros (llm.c style, with HINT lines),
// the backend context (one stream, one cuBLAS handle, a device error record), warp/block reductions
// and the deterministic column reduction used by every bias / norm-weight gradient.
//
// Device code never aborts: a kernel that meets bad user data (a target outside the vocabulary, a
// negative token id) writes what it saw into cuda_ctx.error and carries on; the host reports it, with
// the row and the value, at the next synchronize() or copy_d2h (see cuda_check_device_errors).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>

#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"

// ---- errors ------------------------------------------------------------------------------------

void cuda_check(cudaError_t err, const char* file, int line);
void cublas_check(cublasStatus_t st, const char* file, int line);
// The checks see the call's text: the profiler (cuda_backend.cu, runtime.profile) counts a launch for
// every cudaCheck(cudaGetLastError()) (the check after each kernel launch), cudaMemsetAsync and
// cudaMemcpyAsync, and every cuBLAS / cuBLASLt matmul call, inside an op.
void cuda_check_call(cudaError_t err, const char* file, int line, const char* call);
void cublas_check_call(cublasStatus_t st, const char* file, int line, const char* call);
#define cudaCheck(err) cuda_check_call((err), __FILE__, __LINE__, #err)
#define cublasCheck(st) cublas_check_call((st), __FILE__, __LINE__, #st)

// Kinds of bad data a kernel can meet (the first one met is recorded).
enum {
    CUDA_ERR_NONE = 0,
    CUDA_ERR_CE_TARGET = 1,   // cross-entropy target outside [0, V) and not -100: row, target, V
    CUDA_ERR_EMBEDDING_ID = 2 // negative token id: row, id
};
#define CUDA_ERR_WORDS 4 // kind, index (row), value, bound
// Record (kind, index, value, bound) unless an earlier error is already there.
static __device__ inline void cuda_report_error(int* rec, int kind, int index, int value, int bound) {
    if (atomicCAS(rec, 0, kind) == 0) {
        rec[1] = index;
        rec[2] = value;
        rec[3] = bound;
        __threadfence();
    }
}
// Dies with a clear message if a kernel recorded bad data (synchronises `stream` first).
void cuda_check_device_errors(cudaStream_t stream);

// Device memory of the backend: cudaMalloc / cudaFree with the bytes counted (Backend.memory's peak)
void cuda_malloc_tracked(void** p, size_t bytes);
void cuda_free_tracked(void* p);

// ---- context -----------------------------------------------------------------------------------

typedef struct {
    int device;
    cudaDeviceProp prop;
    cudaStream_t stream;
    cublasHandle_t cublas;
    cublasLtHandle_t cublaslt; // the bf16 GEMMs (engine/cuda/bf16.cu)
    // bf16 operand scratch of the bf16 GEMMs: grown (cudaMalloc) only when a larger product than any
    // before comes, so a step at a fixed token budget allocates nothing after its first microbatch
    uint16_t* bf16_scratch;
    size_t bf16_scratch_elems;
    float* attn_f32_scratch; // the bf16-activation table's attention calls that widen their inputs (bf16.cu)
    size_t attn_f32_scratch_elems;
    float* act_f32_scratch; // its fused linear + GELU where cuBLASLt's epilogue does not apply (bf16.cu)
    size_t act_f32_scratch_elems;
    int* error; // device int[CUDA_ERR_WORDS] (see cuda_report_error)
} CudaContext;
extern CudaContext cuda_ctx;

// The stream an op runs on: the one its table is bound to (backend_on_stream), else the compute stream.
static inline cudaStream_t cuda_stream(const Backend* be) {
    return be && be->stream ? (cudaStream_t)be->stream : cuda_ctx.stream;
}

static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }
static inline unsigned ceil_div_z(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

// ---- activation storage (Backend.act_dtype) -------------------------------------------------------
// An activation is an f32 word (float) or a 2-byte bf16 word (uint16_t, the bf16-activation table's): act_ld
// widens it (exact), act_st<R> stores a value computed in f32. R: the bf16 tables' rounding point; into an
// f32 word that is rr_bf16_round, into a bf16 word rr_f32_to_bf16 (the same value), so one kernel template
// serves the fp32 table (float, R false), the bf16 table (float, R true) and the bf16-activation table
// (uint16_t) with the same numerics.
static __device__ inline float act_ld(const float* p, size_t i) { return p[i]; }
static __device__ inline float act_ld(const uint16_t* p, size_t i) { return rr_bf16_to_f32(p[i]); }
template <bool R>
static __device__ inline void act_st(float* p, size_t i, float v) { p[i] = R ? rr_bf16_round(v) : v; }
template <bool R>
static __device__ inline void act_st(uint16_t* p, size_t i, float v) { p[i] = rr_f32_to_bf16(v); }

// ---- reductions ----------------------------------------------------------------------------------

static __device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds 32 floats; the function synchronises before reusing it, so it can be called
// repeatedly with the same buffer.
static __device__ inline float block_sum(float v, float* shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads(); // the previous call's readers are done with `shared`
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared[lane] : 0.0f;
    return warp_sum(v);
}
static __device__ inline float block_max(float v, float* shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared[lane] : -INFINITY;
    return warp_max(v);
}

// out[c] += sum_n f(n, c) for c < C, rows summed in a fixed order (deterministic, no atomics).
// Block (32, 8): 32 columns, 8 row lanes that stride over N; a shared transpose sums the 8 lanes.
// Used for dbias (f = dout), LayerNorm / RMSNorm weight gradients.
#define COLUMN_SUM_ROWS 8
template <typename F>
static __global__ void column_sum_kernel(float* out, F f, int N, int C) {
    __shared__ float part[COLUMN_SUM_ROWS][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (c < C)
        for (int n = threadIdx.y; n < N; n += COLUMN_SUM_ROWS) acc += f(n, c);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float s = 0.0f;
        for (int r = 0; r < COLUMN_SUM_ROWS; r++) s += part[r][threadIdx.x];
        out[c] += s;
    }
}
template <typename F>
static void column_sum_cuda(float* out, F f, int N, int C, cudaStream_t stream) {
    if (N == 0 || C == 0) return;
    dim3 block(32, COLUMN_SUM_ROWS);
    column_sum_kernel<<<ceil_div(C, 32), block, 0, stream>>>(out, f, N, C);
    cudaCheck(cudaGetLastError());
}

// Two column sums over the same rows in one pass (LayerNorm's dweight and dbias read dout once): out1[c]
// += sum_n f1(n, c), out2[c] += sum_n f2(n, c), each in column_sum_kernel's order (the same bits).
template <typename F1, typename F2>
static __global__ void column_sum2_kernel(float* out1, F1 f1, float* out2, F2 f2, int N, int C) {
    __shared__ float part1[COLUMN_SUM_ROWS][33];
    __shared__ float part2[COLUMN_SUM_ROWS][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float acc1 = 0.0f, acc2 = 0.0f;
    if (c < C)
        for (int n = threadIdx.y; n < N; n += COLUMN_SUM_ROWS) {
            acc1 += f1(n, c);
            acc2 += f2(n, c);
        }
    part1[threadIdx.y][threadIdx.x] = acc1;
    part2[threadIdx.y][threadIdx.x] = acc2;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float s1 = 0.0f, s2 = 0.0f;
        for (int r = 0; r < COLUMN_SUM_ROWS; r++) {
            s1 += part1[r][threadIdx.x];
            s2 += part2[r][threadIdx.x];
        }
        out1[c] += s1;
        out2[c] += s2;
    }
}
template <typename F1, typename F2>
static void column_sum2_cuda(float* out1, F1 f1, float* out2, F2 f2, int N, int C, cudaStream_t stream) {
    if (N == 0 || C == 0) return;
    dim3 block(32, COLUMN_SUM_ROWS);
    column_sum2_kernel<<<ceil_div(C, 32), block, 0, stream>>>(out1, f1, out2, f2, N, C);
    cudaCheck(cudaGetLastError());
}
