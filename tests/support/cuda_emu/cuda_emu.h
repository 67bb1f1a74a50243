/* cuda_emu.h — a CPU emulation of the slice of the CUDA runtime and cuBLAS that engine/cuda uses,
 * so that the CUDA backend's own source (kernels, launchers, table) runs on machines without a GPU.
 *
 * How: tests/support/cuda_emu/gen.py turns each engine/cuda/*.cu into C++ (a launch `k<<<cfg>>>(args)`
 * becomes `emu_launch("k", emu_cfg(cfg), [=] { k(args); })`, dynamic shared memory becomes a
 * pointer from emu_dynamic_smem()) compiled against this header instead of the toolkit's. Each
 * launch runs its blocks one after another; the threads of a block are fibers (ucontext) on one OS
 * thread, switched at __syncthreads and at every warp shuffle, in a shuffled order each round.
 *
 * What it checks, beyond the numbers (each failure is a sticky error returned by the next CUDA
 * call, so cudaCheck reports it with the kernel's name):
 *   - launch configuration: empty grid, more than 1024 threads, grid.y/z > 65535, dynamic shared
 *     memory above 48 KiB without cudaFuncAttributeMaxDynamicSharedMemorySize, or above the H100's
 *     227 KiB;
 *   - __syncthreads reached by some threads of a block while others wait at a shuffle or exited
 *     (divergent barrier), full-mask shuffles with inactive lanes, shuffles from a lane that did not
 *     take part;
 *   - writes past any cudaMalloc'd buffer (NaN guard zones, checked after every launch), copies and
 *     cuBLAS operands outside an allocation, cuBLAS argument rules (lda / ldb / ldc), kernel pointer
 *     arguments that are not device memory, copies whose host side is device memory;
 *   - dynamic shared memory starts as NaN each block, so reading a slot before writing it shows.
 * What it cannot check: real memory-model races between warps (threads run between barriers one at
 * a time, so a missing barrier shows only as wrong numbers in one of the orders tried), device
 * math precision (it calls the host's libm), performance, register / occupancy limits. */
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <type_traits>

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorUnsupportedPtxVersion = 222,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
};
typedef enum cudaError cudaError_t;
typedef struct EmuStream* cudaStream_t;
#define cudaStreamNonBlocking 1
/* Streams are ordered by the emulation trivially (everything runs at once, in call order), so what is
 * checked is the plumbing: emu_require_stream(s) makes every launch, copy, memset, synchronize and
 * cuBLAS(Lt) call on another stream an error naming it (tests/engine/cuda/test_cuda_ops.c --stream). */
extern "C" void emu_require_stream(cudaStream_t s);
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct cudaDeviceProp {
    char name[256];
    int major, minor;
};
struct cudaFuncAttributes {
    int maxThreadsPerBlock;
};

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static /* blocks run one at a time: one static instance is the block's */
#define __launch_bounds__(...)
/* device code that needs an instruction's emulation (inline PTX has none) tests this */
#define RR_CUDA_EMULATED 1

/* the running fiber's coordinates (set by the scheduler before each switch into a fiber) */
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

void __syncthreads(void);
void __threadfence(void);
float atomicAdd(float* p, float v);
int atomicCAS(int* p, int compare, int val);
/* exchange of 8-byte slots within a warp; src_lane is absolute, xor_mask relative */
uint64_t emu_shfl_bits(unsigned mask, uint64_t bits, int src_lane, int xor_mask);
template <class T>
static inline T __shfl_sync(unsigned mask, T v, int src_lane) {
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    b = emu_shfl_bits(mask, b, src_lane, -1);
    T r;
    memcpy(&r, &b, sizeof(T));
    return r;
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    b = emu_shfl_bits(mask, b, -1, lane_mask);
    T r;
    memcpy(&r, &b, sizeof(T));
    return r;
}

/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 with d as C and D, a warp-collective operation
 * with PTX's fragment layout (lane = 4 g + t; the lower 16 bits of a register hold the lower index):
 *   a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9];
 *   b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]; d[0..1] = D[g][2t, 2t+1], d[2..3] = D[g+8][2t, 2t+1].
 * Every lane of the warp must take part (the instruction is .aligned): a lane missing is an error, as a
 * shuffle's. The products of bf16 values are exact in f32; the 16 of a dot are summed in f32 in order. */
void emu_mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b);
/* ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16, warp-collective: lanes 8 i .. 8 i + 7 give the row
 * addresses (16 bytes each, 16-byte aligned, inside the block's dynamic shared memory) of 8x8 matrix i; lane l
 * gets r[i] = M_i[l / 4][2 (l % 4)], M_i[l / 4][2 (l % 4) + 1] (low, high half), with trans
 * M_i[2 (l % 4)][l / 4], M_i[2 (l % 4) + 1][l / 4]. A row address outside shared memory or misaligned is an
 * error. */
void emu_ldmatrix_x4(uint32_t* r, const void* row, int trans);
/* cp.async.cg.shared.global [dst], [src], 16, bytes: here a copy at once of `bytes` (0 or 16) from device
 * memory into the block's dynamic shared memory, the rest of the 16 zero-filled (commit / wait are no-ops, so
 * what the emulation checks is that the barriers keep every warp off a buffer being refilled). dst must be
 * 16-byte aligned inside shared memory, src inside an allocation. */
void emu_cp_async16(void* dst, const void* src, int bytes);
/* the vector types the kernels load and store through (16 bytes) */
struct uint4 {
    unsigned x, y, z, w;
};
struct float4 {
    float x, y, z, w;
};

/* launches (written by gen.py) */
struct EmuCfg {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
};
static inline EmuCfg emu_cfg(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = 0) {
    EmuCfg c = {grid, block, smem, stream};
    return c;
}
void emu_launch(const char* kernel, EmuCfg cfg, const std::function<void()>& body);
/* Every pointer argument of a launch must be NULL or point into a cudaMalloc'd buffer: a host
 * pointer handed to a kernel crashes a GPU (or reads garbage) but would work here, since emulated
 * device memory is host memory. (Pointers inside functor arguments are not seen.) */
int emu_is_device_ptr(const void* p);
void emu_bad_arg(const char* kernel, int index);
static inline void emu_check_arg(const char*, int) {}
template <class T, class... Rest>
static inline void emu_check_arg(const char* kernel, int index, T first, Rest... rest) {
    if constexpr (std::is_pointer<T>::value) {
        if (first && !emu_is_device_ptr((const void*)first)) emu_bad_arg(kernel, index);
    }
    emu_check_arg(kernel, index + 1, rest...);
}
template <class... Args>
static inline void emu_check_args(const char* kernel, Args... args) {
    emu_check_arg(kernel, 1, args...);
}
void* emu_dynamic_smem(void);
cudaError_t emu_func_set_attribute(const char* kernel, cudaFuncAttribute attr, int value);

/* runtime */
cudaError_t cudaGetLastError(void);
cudaError_t emu_malloc(void** p, size_t bytes);
template <class T>
static inline cudaError_t cudaMalloc(T** p, size_t bytes) {
    return emu_malloc((void**)p, bytes);
}
cudaError_t cudaFree(void* p);
/* The emulated device reports 16 GiB free of 16 GiB (the start-up memory check). */
/* an emulated 16 GiB device: free = 16 GiB - the bytes cudaMalloc holds */
cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b);
cudaError_t cudaMemset(void* p, int v, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int v, size_t bytes, cudaStream_t s = 0);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = 0);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d);
const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);
template <class F>
static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F f) {
    (void)f;
    a->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}

/* cuBLAS */
typedef struct EmuCublas* cublasHandle_t;
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
cublasStatus_t cublasCreate(cublasHandle_t* h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc);

/* cuBLASLt: the slice the bf16 GEMMs use (engine/cuda/bf16.cu). Values of the enums as the toolkit's. */
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;
typedef cudaDataType_t cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
} cublasLtMatmulDescAttributes_t;
/* GELU_AUX_BIAS (bf16.cu's fused linear + GELU): D = gelu(pre) with rr_gelu_tanh, Aux = pre (f32, the D
 * type), pre = the product + bias; the Aux pointer must be set and its ld >= m and a multiple of 8 */
typedef enum { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164 } cublasLtEpilogue_t;
typedef struct EmuLt* cublasLtHandle_t;
typedef struct EmuLtDesc* cublasLtMatmulDesc_t;
typedef struct EmuLtLayout* cublasLtMatrixLayout_t;
typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l);
/* D = alpha op(A) op(B) + beta C (+ bias over rows with CUBLASLT_EPILOGUE_BIAS; GELU_AUX_BIAS above). Emulated for A, B
 * bf16, C, D f32, compute 32F, scale f32: A and B widened exactly to f32, column-major cblas_sgemm,
 * then the epilogue; any other type combination is CUBLAS_STATUS_NOT_SUPPORTED. Checks shapes
 * against the ops (op(A) m x k, op(B) k x n, C and D m x n), ld >= rows, every operand (and the
 * bias) inside one allocation, and algo == NULL with no workspace (what bf16.cu passes). */
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb, const void* beta,
                              const void* C, cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream);

/* Events and the streams' queues. Kernels, cuBLAS calls and copies run when they are called (a launch
 * first waits until its stream's queue is empty), unless RR_EMU_COMPUTE_DELAY=N is set: then they are
 * enqueued on their stream and each runs N .. 2N polls after reaching its head (emu.cpp,
 * enqueue_compute), so work on another stream that does not wait for the producer's event reads stale
 * data. What can be pending otherwise is communication (the NCCL
 * emulation, nccl_emu.cpp): an NCCL operation sits in its stream's queue until its MPI message has
 * completed, and the copies, waits and event records enqueued after it on that stream wait behind it.
 * cudaEventQuery reports cudaErrorNotReady while any operation enqueued on the event's stream before
 * its record is pending; cudaStreamWaitEvent makes a stream's later work wait for it.
 * RR_EMU_COMM_DELAY=N (N > 0): each NCCL receive, once its message has arrived, stays pending for a
 * pseudo-random N .. 2N further polls (cudaEventQuery, cudaEventSynchronize, a wait in
 * cudaStreamSynchronize: emu_poll_epoch), and its destination holds NaN until it completes, so a
 * reader that does not wait for the receive's event reads NaN (tests/runtime/comm/test_nccl_emu.c, the control;
 * tests/runtime/train/train_nccl_emu.sh). */
long emu_poll_epoch(void);
/* an environment variable's count (RR_EMU_COMPUTE_DELAY, RR_EMU_COMM_DELAY): 0 when unset or negative */
int emu_env_count(const char* name);
typedef struct EmuEvent* cudaEvent_t;
#define cudaEventDefault 0
#define cudaEventDisableTiming 2
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
/* the host time between the two records (the emulation runs each operation at its call) */
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
/* pinned host memory (plain host memory here) and pointer kinds */
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2,
                      cudaMemoryTypeManaged = 3 };
struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void* devicePointer;
    void* hostPointer;
};
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p);
/* for the NCCL emulation: enqueue `step` on s (it is called until it returns 1, in stream order);
 * copies between device memory and the host, opening the device memory's protection */
void emu_stream_enqueue(cudaStream_t s, std::function<int()> step);
void emu_progress(void);
void emu_device_read(void* host_dst, const void* dev_src, size_t bytes);
void emu_device_write(void* dev_dst, const void* host_src, size_t bytes);
void emu_device_fill_nan(void* dev, size_t bytes);
int emu_in_alloc(const void* p, size_t bytes);
/* cudaMalloc calls so far (tests: a stage allocates nothing after its first step) */
extern "C" long emu_malloc_count(void);

/* Traffic of each device operation (tests/engine/cuda/test_traffic.c): emu_traffic(1) clears the log and starts
 * counting, per launch, memset, copy and cuBLAS(Lt) product, the bytes of device memory it read and
 * wrote (every page it touched, within its allocation: see emu.cpp), labelled with the backend op that
 * ran it (emu_traffic_label, from the CUDA backend's profiler scope, which must be on). */
#define RR_CUDA_EMU_RUNTIME 1
struct EmuTraffic {
    const char* op;   /* the backend op ("cuda_bf16_linear_forward"), "(no op)" outside one */
    int kind;         /* its ProfKind, -1 outside one */
    const char* what; /* the kernel's name, "cudaMemsetAsync", "cudaMemcpyAsync", "cublasSgemm", "cublasLtMatmul" */
    size_t read, written;
};
extern "C" void emu_traffic(int on);
extern "C" size_t emu_traffic_n(void);
extern "C" const EmuTraffic* emu_traffic_at(size_t i);
void emu_traffic_label(const char* op, int kind);

/* CUDA graphs: stream capture and replay. Between cudaStreamBeginCapture(s) and cudaStreamEndCapture(s) the
 * kernel launches, cuBLAS(Lt) products, memsets and copies enqueued on s are recorded in order instead of run
 * (their launch configurations and pointer arguments checked at the call, as always); cudaGraphLaunch runs the
 * recorded operations again, in order, on its stream, each with the device memory protection, guard checks and
 * traffic counting of an ordinary one. What a capture may not contain is an error naming it, as a GPU refuses it
 * or would give the host a value that is not there yet: a synchronisation of the captured stream, a copy to the
 * host, cudaMalloc / cudaFree, an event record or wait on the captured stream (not emulated), a second capture. A
 * host source of a copy is read at each replay (as a graph's memcpy node reads its pointer). */
typedef struct EmuGraph* cudaGraph_t;
typedef struct EmuGraph* cudaGraphExec_t; /* an instantiated graph: a copy of the recorded list */
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1,
                             cudaStreamCaptureModeRelaxed = 2 };
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
/* the operations a graph holds (tests: the replay ran what the capture recorded) */
extern "C" long emu_graph_nodes(cudaGraphExec_t e);

/* Device operations accepted so far, per kind (the launches a GPU would see): kernel launches, cuBLAS /
 * cuBLASLt products, memsets, copies, graph launches (cudaGraphLaunch: one each, whatever the graph holds).
 * A step's count is the difference of two reads (RR_EMU_STEP_LAUNCHES, wrap.c). */
enum { EMU_OP_KERNEL, EMU_OP_BLAS, EMU_OP_MEMSET, EMU_OP_COPY, EMU_OP_GRAPH, EMU_OPS };
extern "C" void emu_op_counts(long* out);
/* FLOPs (2 m n k) of the cuBLAS / cuBLASLt products run so far, replays included (RR_EMU_STEP_FLOPS, wrap.c:
 * bench/gpu_train.sh checks its model-FLOP formula against them) */
extern "C" long long emu_blas_flops(void);

/* how device memory is closed to host code: "pkey" (protection keys), "mprotect", or "off" (RR_EMU_PROTECT=0);
 * tests/engine/cuda/test_emu_checks.c (its protect mode) */
extern "C" const char* emu_protect_mode(void);

/* statistics of the emulation (for the test's summary line) */
struct EmuStats {
    long launches, blocks, fibers, switches;
};
extern "C" void emu_stats_print(void);
