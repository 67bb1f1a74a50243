// cuda_backend.cu — the CUDA backend's entry: device detection, the context (stream, cuBLAS handle,
// device error record), the check functions, memory, and the op table (ops live in one .cu file per
// op family, see cuda_ops.cuh).
//
// A machine without a usable GPU gets one clear line ("no CUDA device: ...") from backend_cuda_get
// instead of a crash. Every op runs on the stream of the table it is called through (cuda_stream:
// backend_on_stream's, else the compute stream cuda_ctx.stream); the copies to and from the host
// synchronise that stream (the host buffers may be pageable and reused at once).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"

CudaContext cuda_ctx;

// ---- errors ------------------------------------------------------------------------------------

void cuda_check(cudaError_t err, const char* file, int line) {
    if (err == cudaSuccess) return;
    fprintf(stderr, "rrfp-mm: error: CUDA error at %s:%d: %s (%s)\n", file, line, cudaGetErrorString(err),
            cudaGetErrorName(err));
    if (err == cudaErrorMemoryAllocation)
        fprintf(stderr, "---> HINT: the GPU is out of memory: lower data.microbatch_tokens or use more pipeline stages\n");
    else if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorUnsupportedPtxVersion)
        fprintf(stderr, "---> HINT: rebuild for this GPU: cmake -DCMAKE_CUDA_ARCHITECTURES=<its sm, e.g. 80> ...\n");
    else if (err == cudaErrorInsufficientDriver)
        fprintf(stderr, "---> HINT: the NVIDIA driver is older than this CUDA toolkit; update the driver\n");
    else if (err == cudaErrorIllegalAddress || err == cudaErrorLaunchFailure)
        fprintf(stderr, "---> HINT: rerun under compute-sanitizer to find the kernel and index\n");
    exit(1);
}

static const char* cublas_status_name(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "unknown cuBLAS status";
    }
}

void cublas_check(cublasStatus_t st, const char* file, int line) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "rrfp-mm: error: cuBLAS error at %s:%d: %s (%d)\n", file, line, cublas_status_name(st), (int)st);
    if (st == CUBLAS_STATUS_INVALID_VALUE)
        fprintf(stderr, "---> HINT: a GemmDesc has an inconsistent m/n/k/ld; tests/test_gemm_desc.c checks them on the CPU\n");
    else if (st == CUBLAS_STATUS_ALLOC_FAILED || st == CUBLAS_STATUS_NOT_INITIALIZED)
        fprintf(stderr, "---> HINT: the GPU is out of memory or unusable; check nvidia-smi\n");
    exit(1);
}

void cuda_check_device_errors(cudaStream_t stream) {
    int rec[CUDA_ERR_WORDS];
    cudaCheck(cudaMemcpyAsync(rec, cuda_ctx.error, sizeof rec, cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    switch (rec[0]) {
    case CUDA_ERR_NONE: return;
    case CUDA_ERR_CE_TARGET: // the CPU backend's words (engine/cpu/crossentropy.c)
        rr_die("cross-entropy: target %d of row %d is outside [0, %d) and is not the ignore index -100", rec[2], rec[1],
               rec[3]);
    case CUDA_ERR_EMBEDDING_ID: rr_die("embedding: token id %d of row %d is negative", rec[2], rec[1]);
    default: rr_die("CUDA backend: unknown device error record %d (row %d, value %d)", rec[0], rec[1], rec[2]);
    }
}

// ---- memory --------------------------------------------------------------------------------------

static void* cuda_alloc(size_t bytes) {
    void* p = NULL;
    if (bytes == 0) return NULL;
    cudaCheck(cudaMalloc(&p, bytes));
    return p;
}
static void cuda_free(void* p) {
    if (p) cudaCheck(cudaFree(p));
}
static void cuda_memset0(const Backend* be, void* p, size_t bytes) {
    if (bytes) cudaCheck(cudaMemsetAsync(p, 0, bytes, cuda_stream(be)));
}
static void cuda_copy_h2d(const Backend* be, void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_stream(be)));
    cudaCheck(cudaStreamSynchronize(cuda_stream(be)));
}
static void cuda_copy_d2h(const Backend* be, void* dst, const void* src, size_t bytes) {
    if (bytes) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_stream(be)));
    cuda_check_device_errors(cuda_stream(be)); // synchronises: dst is complete on return
}
static void cuda_copy_d2d(const Backend* be, void* dst, const void* src, size_t bytes) {
    if (bytes) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_stream(be)));
}
static void cuda_synchronize(const Backend* be) { cuda_check_device_errors(cuda_stream(be)); }
static void* cuda_stream_create(void) {
    cudaStream_t s = NULL;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return (void*)s;
}
static void cuda_stream_destroy(void* stream) {
    if (stream) cudaCheck(cudaStreamDestroy((cudaStream_t)stream));
}
// Events: timing off (cudaEventDisableTiming), the cheapest kind to record and query.
static void* cuda_event_create(void) {
    cudaEvent_t e = NULL;
    cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return (void*)e;
}
static void cuda_event_record(const Backend* be, void* ev) { cudaCheck(cudaEventRecord((cudaEvent_t)ev, cuda_stream(be))); }
static int cuda_event_query(void* ev) {
    if (!ev) return 1;
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError(); // not an error: clear it so the next check does not see it
        return 0;
    }
    cudaCheck(e);
    return 1;
}
static void cuda_event_wait(const Backend* be, void* ev) {
    if (ev) cudaCheck(cudaStreamWaitEvent(cuda_stream(be), (cudaEvent_t)ev, 0));
}
static void cuda_event_destroy(void* ev) {
    if (ev) cudaCheck(cudaEventDestroy((cudaEvent_t)ev));
}

void cuda_reserve(const Backend* be, size_t gemm_elems, size_t sumsq_n, const AttnReserve* attn, int n_attn) {
    cuda_bf16_reserve(gemm_elems);
    cuda_sum_squares_reserve(sumsq_n);
    // cuDNN runs only in the bf16 table (attention_cudnn.cu): the fp32 one never needs its scratch
    if (be->precision == PRECISION_BF16) cuda_cudnn_attention_reserve(attn, n_attn);
}

// ---- the table -----------------------------------------------------------------------------------

extern const Backend backend_cuda_bf16; // below (a const object is declared ahead only as extern in C++)
static const Backend backend_cuda = {
    "cuda",
    cuda_alloc,
    cuda_free,
    cuda_memset0,
    cuda_copy_h2d,
    cuda_copy_d2h,
    cuda_copy_d2d,
    cuda_synchronize,
    cuda_stream_create,
    cuda_stream_destroy,
    cuda_event_create,
    cuda_event_record,
    cuda_event_query,
    cuda_event_wait,
    cuda_event_destroy,
    cuda_reserve,
    cuda_linear_forward,
    cuda_linear_backward,
    cuda_linear_gelu_forward,
    cuda_layernorm_forward,
    cuda_layernorm_backward,
    cuda_rmsnorm_forward,
    cuda_rmsnorm_backward,
    cuda_gelu_forward,
    cuda_gelu_backward,
    cuda_swiglu_forward,
    cuda_swiglu_backward,
    cuda_add_forward,
    cuda_rope_forward,
    cuda_rope_backward,
    cuda_rope2d_forward,
    cuda_rope2d_backward,
    cuda_embedding_forward,
    cuda_embedding_backward,
    cuda_crossentropy_forward,
    cuda_crossentropy_backward,
    cuda_attention_forward,
    cuda_attention_backward,
    cuda_sum_squares,
    cuda_scale,
    cuda_adamw_update,
    cuda_round_bf16,
    &backend_cuda_bf16,
    PRECISION_FP32,
    NULL, // stream
    DTYPE_F32,
    cuda_adamw_update_copy,
    cuda_to_bf16,
};

// runtime.precision = bf16 (engine/cuda/bf16.cu): the forward ops round where the GPU stores bf16 and
// the GEMMs go through cuBLASLt; backward ops, cross-entropy and the step end are backend_cuda's.
extern const Backend backend_cuda_bf16;
const Backend backend_cuda_bf16 = {
    "cuda",
    cuda_alloc,
    cuda_free,
    cuda_memset0,
    cuda_copy_h2d,
    cuda_copy_d2h,
    cuda_copy_d2d,
    cuda_synchronize,
    cuda_stream_create,
    cuda_stream_destroy,
    cuda_event_create,
    cuda_event_record,
    cuda_event_query,
    cuda_event_wait,
    cuda_event_destroy,
    cuda_reserve,
    cuda_bf16_linear_forward,
    cuda_bf16_linear_backward,
    cuda_bf16_linear_gelu_forward,
    cuda_bf16_layernorm_forward,
    cuda_layernorm_backward,
    cuda_bf16_rmsnorm_forward,
    cuda_rmsnorm_backward,
    cuda_bf16_gelu_forward,
    cuda_gelu_backward,
    cuda_bf16_swiglu_forward,
    cuda_swiglu_backward,
    cuda_bf16_add_forward,
    cuda_bf16_rope_forward,
    cuda_rope_backward,
    cuda_bf16_rope2d_forward,
    cuda_rope2d_backward,
    cuda_bf16_embedding_forward,
    cuda_embedding_backward,
    cuda_crossentropy_forward,
    cuda_crossentropy_backward,
    cuda_bf16_attention_forward,
    cuda_bf16_attention_backward,
    cuda_sum_squares,
    cuda_scale,
    cuda_adamw_update,
    cuda_round_bf16,
    &backend_cuda_bf16,
    PRECISION_BF16,
    NULL, // stream
    DTYPE_BF16, // the 2-D parameters' compute copy: 2-byte bf16 (engine.h, weight_dtype)
    cuda_adamw_update_copy,
    cuda_to_bf16,
};

// Positional initialisation leaves a slot added to engine.h's Backend NULL without a word: count them
// (name + 41 function pointers + the bf16 variant + the precision, padded to a pointer, + the stream,
// + weight_dtype, padded, + adamw_update_copy + to_bf16).
static_assert(sizeof(Backend) == 48 * sizeof(void*), "engine/engine.h's Backend changed: update backend_cuda");

// A probe whose attributes tell whether this binary has code the device can run.
static __global__ void probe_kernel(int* x) {
    if (x) *x = 1;
}

// Which GPU this process uses: RRFP_CUDA_DEVICE, else the MPI local rank modulo the device count
// (one process per GPU under mpirun), else 0.
static int cuda_pick_device(int count) {
    const char* env = getenv("RRFP_CUDA_DEVICE");
    if (env && *env) return atoi(env) % count;
    const char* local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!local) local = getenv("MPI_LOCALRANKID");
    if (local && *local) return atoi(local) % count;
    return 0;
}

static int cuda_init(char* why, size_t why_len) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        snprintf(why, why_len, "no CUDA device: %s (cudaGetDeviceCount returned %d)",
                 err != cudaSuccess ? cudaGetErrorString(err) : "zero devices", (int)err);
        return 0;
    }
    memset(&cuda_ctx, 0, sizeof cuda_ctx);
    cuda_ctx.device = cuda_pick_device(n);
    cudaCheck(cudaSetDevice(cuda_ctx.device));
    cudaCheck(cudaGetDeviceProperties(&cuda_ctx.prop, cuda_ctx.device));
    cudaFuncAttributes attr;
    err = cudaFuncGetAttributes(&attr, probe_kernel);
    if (err != cudaSuccess) {
        snprintf(why, why_len, "no CUDA device: %s (sm_%d%d) cannot run this build: %s; rebuild with -DCMAKE_CUDA_ARCHITECTURES=%d%d",
                 cuda_ctx.prop.name, cuda_ctx.prop.major, cuda_ctx.prop.minor, cudaGetErrorString(err),
                 cuda_ctx.prop.major, cuda_ctx.prop.minor);
        return 0;
    }
    cudaCheck(cudaStreamCreateWithFlags(&cuda_ctx.stream, cudaStreamNonBlocking));
    cublasCheck(cublasCreate(&cuda_ctx.cublas));
    cublasCheck(cublasSetStream(cuda_ctx.cublas, cuda_ctx.stream));
    cublasCheck(cublasLtCreate(&cuda_ctx.cublaslt)); // the bf16 GEMMs (bf16.cu); the stream is per call
    // TF32 off unless asked for: results must match the fp32 CPU backend to fp32 round-off (TF32
    // keeps 10 mantissa bits and would differ at ~1e-3). RRFP_TF32=1 trades that for speed.
    const char* tf32 = getenv("RRFP_TF32");
    cublasCheck(cublasSetMathMode(cuda_ctx.cublas, (tf32 && !strcmp(tf32, "1")) ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                               : CUBLAS_DEFAULT_MATH));
    cudaCheck(cudaMalloc(&cuda_ctx.error, CUDA_ERR_WORDS * sizeof(int)));
    // on our stream: a non-blocking stream does not wait for work on the legacy default stream
    cudaCheck(cudaMemsetAsync(cuda_ctx.error, 0, CUDA_ERR_WORDS * sizeof(int), cuda_ctx.stream));
    cudaCheck(cudaStreamSynchronize(cuda_ctx.stream));
    return 1;
}

extern "C" __attribute__((visibility("default"))) const Backend* rrfp_cuda_backend_get(char* why, size_t why_len) {
    static int state = 0; // 0 untried, 1 ready, -1 unavailable
    static char reason[256];
    if (state == 0) state = cuda_init(reason, sizeof reason) ? 1 : -1;
    if (state < 0) {
        if (why && why_len) snprintf(why, why_len, "%s", reason);
        return NULL;
    }
    return &backend_cuda;
}

extern "C" __attribute__((visibility("default"))) int rrfp_cuda_mem_free(size_t* bytes, char* err, size_t err_len) {
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cudaMemGetInfo: %s", cudaGetErrorString(e));
        return -1;
    }
    *bytes = free_b;
    return 0;
}
