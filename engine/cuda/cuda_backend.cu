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

#include <initializer_list>

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

// ---- the profiler (runtime.profile; engine.h, BackendProfile) -------------------------------------
// An op called through a table of this backend opens a ProfScope (the prof_* wrappers of the tables
// below): with profiling on, the outermost scope records a timing event pair around the op on its
// stream and makes its kind current, and the check macros count the launches made inside it.

struct ProfRec {
    int kind;
    cudaEvent_t a, b;
};
static struct {
    int on, depth, kind;
    long launches[PROF_KINDS], ops[PROF_KINDS];
    ProfRec* recs;
    size_t n, cap;
    cudaEvent_t* pool; // events with timing, reused
    size_t npool, cappool;
} prof;

static cudaEvent_t prof_event(void) {
    if (prof.npool) return prof.pool[--prof.npool];
    cudaEvent_t e;
    cudaCheck(cudaEventCreate(&e));
    return e;
}
static void prof_release(cudaEvent_t e) {
    if (prof.npool == prof.cappool) {
        prof.cappool = prof.cappool ? 2 * prof.cappool : 256;
        prof.pool = (cudaEvent_t*)realloc(prof.pool, prof.cappool * sizeof *prof.pool);
        if (!prof.pool) rr_die("out of host memory (profiler events)");
    }
    prof.pool[prof.npool++] = e;
}

static void prof_count(const char* call, int cublas) {
    if (!prof.on || prof.depth == 0) return;
    if (cublas ? (!strncmp(call, "cublasLtMatmul(", 15) || !strncmp(call, "cublasSgemm(", 12))
               : (!strncmp(call, "cudaGetLastError(", 17) || !strncmp(call, "cudaMemsetAsync(", 16) ||
                  !strncmp(call, "cudaMemcpyAsync(", 16)))
        prof.launches[prof.kind]++;
}
void cuda_check_call(cudaError_t err, const char* file, int line, const char* call) {
    prof_count(call, 0);
    cuda_check(err, file, line);
}

// RR_CUDA_EMU_RUNTIME (the emulation's cuda_runtime.h): its traffic log names each launch's op
// (emu_traffic_label, tests/engine/cuda/test_traffic.c)

struct ProfScope {
    int entered, outer;
    ProfRec r;
    cudaStream_t st;
    ProfScope(const Backend* be, int kind, const char* name) : entered(prof.on), outer(0), st(cuda_stream(be)) {
        (void)name;
        if (!entered) return;
        outer = prof.depth++ == 0;
        if (!outer) return;
        prof.kind = kind;
        prof.ops[kind]++;
#ifdef RR_CUDA_EMU_RUNTIME
        ::emu_traffic_label(name, kind);
#endif
        r.kind = kind;
        r.a = prof_event();
        r.b = prof_event();
        cudaCheck(cudaEventRecord(r.a, st));
    }
    ~ProfScope() {
        if (!entered) return;
        prof.depth--;
        if (!outer) return;
        cudaCheck(cudaEventRecord(r.b, st));
#ifdef RR_CUDA_EMU_RUNTIME
        ::emu_traffic_label(NULL, -1);
#endif
        if (prof.n == prof.cap) {
            prof.cap = prof.cap ? 2 * prof.cap : 256;
            prof.recs = (ProfRec*)realloc(prof.recs, prof.cap * sizeof *prof.recs);
            if (!prof.recs) rr_die("out of host memory (profiler records)");
        }
        prof.recs[prof.n++] = r;
    }
};

static void cuda_profile(int on) { prof.on = on; }
static void cuda_profile_take(BackendProfile* out) {
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < prof.n; i++) {
        ProfRec* r = &prof.recs[i];
        cudaCheck(cudaEventSynchronize(r->b));
        float ms = 0.0f;
        cudaCheck(cudaEventElapsedTime(&ms, r->a, r->b));
        out->ms[r->kind] += ms;
        prof_release(r->a);
        prof_release(r->b);
    }
    prof.n = 0;
    for (int k = 0; k < PROF_KINDS; k++) {
        out->launches[k] = prof.launches[k];
        out->ops[k] = prof.ops[k];
        prof.launches[k] = prof.ops[k] = 0;
    }
}

// A typed buffer handed to an implementation that takes its address (or the Buf itself): an f32 pointer only from an
// f32 buffer, a 2-byte pointer only from a bf16 one (each entry declares what it reads: cuda_ops.cuh), so a buffer of
// the other dtype stops here instead of being read as the wrong words.
struct BufAddr {
    Buf b;
    operator float*() const { return buf_f32p(b); }
    operator const float*() const { return buf_f32p(b); }
    operator uint16_t*() const { return buf_bf16p(b); }
    operator const uint16_t*() const { return buf_bf16p(b); }
    operator Buf() const { return b; } // an implementation that takes the typed buffer itself
};
static inline BufAddr op_arg(Buf b) { return BufAddr{b}; }
template <typename T> static inline T op_arg(T a) { return a; }

// An op run inside a ProfScope of kind K (the tables point at these), its typed buffers passed as addresses
#define PROF_OP(K, fn)                                                                  \
    template <typename... A>                                                            \
    static auto prof_##fn(const Backend* be, A... a)->decltype(fn(be, op_arg(a)...)) {  \
        ProfScope scope(be, K, #fn);                                                    \
        return fn(be, op_arg(a)...);                                                    \
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
        fprintf(stderr, "---> HINT: a GemmDesc has an inconsistent m/n/k/ld; tests/engine/test_gemm_desc.c checks them on the CPU\n");
    else if (st == CUBLAS_STATUS_ALLOC_FAILED || st == CUBLAS_STATUS_NOT_INITIALIZED)
        fprintf(stderr, "---> HINT: the GPU is out of memory or unusable; check nvidia-smi\n");
    exit(1);
}

void cublas_check_call(cublasStatus_t st, const char* file, int line, const char* call) {
    prof_count(call, 1);
    cublas_check(st, file, line);
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

// Every cudaMalloc of the backend (its alloc, the scratch of bf16.cu / optim.cu / attention_cudnn.cu)
// goes through cuda_malloc_tracked / cuda_free_tracked: the bytes held now and their high-water mark
// (BackendDevice.memory). Sizes by pointer in an open-addressing table (allocations are few and long-lived).
static struct {
    void** key;
    size_t* bytes;
    unsigned char* tags; // MemTag of each allocation
    size_t cap, n;
    size_t used, peak;
    size_t used_by[MEM_TAGS], at_peak[MEM_TAGS]; // held now per kind, and when `peak` was reached
    int tag;                                      // what the next allocations are counted as (memory_tag)
} mem;
static size_t mem_slot(void* p) {
    size_t h = ((uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h % mem.cap);
}
static void mem_put(void* p, size_t bytes, int tag) {
    if (2 * (mem.n + 1) > mem.cap) { // grow to keep the table at most half full
        void** ok = mem.key;
        size_t* ob = mem.bytes;
        unsigned char* ot = mem.tags;
        size_t oc = mem.cap;
        mem.cap = oc ? 2 * oc : 1024;
        mem.key = (void**)calloc(mem.cap, sizeof *mem.key);
        mem.bytes = (size_t*)calloc(mem.cap, sizeof *mem.bytes);
        mem.tags = (unsigned char*)calloc(mem.cap, sizeof *mem.tags);
        if (!mem.key || !mem.bytes || !mem.tags) rr_die("out of host memory (device allocation table)");
        mem.n = 0;
        for (size_t i = 0; i < oc; i++)
            if (ok[i]) mem_put(ok[i], ob[i], ot[i]);
        free(ok);
        free(ob);
        free(ot);
    }
    size_t i = mem_slot(p);
    while (mem.key[i]) i = (i + 1) % mem.cap;
    mem.key[i] = p;
    mem.bytes[i] = bytes;
    mem.tags[i] = (unsigned char)tag;
    mem.n++;
}
static size_t mem_take(void* p, int* tag) {
    if (!mem.cap) return 0;
    size_t i = mem_slot(p);
    while (mem.key[i] && mem.key[i] != p) i = (i + 1) % mem.cap;
    if (!mem.key[i]) return 0;
    size_t b = mem.bytes[i];
    *tag = mem.tags[i];
    // backward-shift deletion keeps every probe chain intact
    size_t j = i;
    for (;;) {
        j = (j + 1) % mem.cap;
        if (!mem.key[j]) break;
        size_t h = mem_slot(mem.key[j]);
        if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
            mem.key[i] = mem.key[j];
            mem.bytes[i] = mem.bytes[j];
            mem.tags[i] = mem.tags[j];
            i = j;
        }
    }
    mem.key[i] = NULL;
    mem.n--;
    return b;
}
void cuda_malloc_tracked(void** p, size_t bytes) {
    cudaCheck(cudaMalloc(p, bytes));
    mem_put(*p, bytes, mem.tag);
    mem.used += bytes;
    mem.used_by[mem.tag] += bytes;
    if (mem.used > mem.peak) {
        mem.peak = mem.used;
        memcpy(mem.at_peak, mem.used_by, sizeof mem.at_peak);
    }
}
void cuda_free_tracked(void* p) {
    if (!p) return;
    int tag = MEM_WORKSPACE;
    size_t b = mem_take(p, &tag);
    mem.used -= b;
    mem.used_by[tag] -= b;
    cudaCheck(cudaFree(p));
}
static void cuda_memory_tag(int tag) { mem.tag = tag >= 0 && tag < MEM_TAGS ? tag : MEM_WORKSPACE; }
static void cuda_memory(BackendMemory* out) {
    out->peak_bytes = mem.peak;
    out->used_bytes = mem.used;
    for (int k = 0; k < MEM_TAGS; k++) out->peak_by[k] = mem.at_peak[k];
    out->device_free = out->device_total = 0;
    cudaCheck(cudaMemGetInfo(&out->device_free, &out->device_total));
}

static void* cuda_alloc(size_t bytes) {
    void* p = NULL;
    if (bytes == 0) return NULL;
    cuda_malloc_tracked(&p, bytes);
    return p;
}
static void cuda_free(void* p) { cuda_free_tracked(p); }
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
    // an attention on 2-byte activations widens its inputs where it calls f32-input kernels (bf16.cu): the calls
    // whose AttnReserve.act is DTYPE_BF16
    cuda_bf16a_attn_reserve(attn, n_attn);
    cuda_bf16_reserve(gemm_elems);
    cuda_sum_squares_reserve(sumsq_n);
    // RoPE's cos / sin tables: the positions of the largest call (a sample's positions are below its T), built now
    cuda_rope_reserve(be, attn, n_attn);
    cuda_column_sum_reserve(); // the column sums' partials (cuda_common.cuh): a fixed 2 MiB
    // cuDNN runs only in the bf16 table (attention_cudnn.cu): the fp32 one never needs its scratch
    if (be->precision == PRECISION_BF16) cuda_cudnn_attention_reserve(attn, n_attn);
    // the own tensor-core kernel (the bf16 table's attention where cuDNN does not run): its backward's scratch
    if (be->precision == PRECISION_BF16) cuda_flash_attention_reserve(attn, n_attn);
}

// ---- the backward ops that take 2-byte gradients (engine.h, "2-byte output gradients"): one slot each, dispatched on
// the gradients' dtypes. The fp32 table, and the bf16 table on f32-word activations, take f32 gradients only (buf_f32p
// refuses a 2-byte one; a mirror is refused); on 2-byte activations the bf16 table runs its 2-byte entries (the *_b16
// functions) where a gradient is 2-byte or a mirror is asked for, else its f32-gradient entries. set
// (linear_backward): an f32 dinp written, not added.
#define CUDA_F32_GRADS(mirrors) RR_ASSERT(!(mirrors) && "a 2-byte gradient mirror with f32-word activations (or on the fp32 table)")
static float* grad_set(const Backend* be, Buf dinp, int set, int N, int C) {
    float* d = buf_f32p(dinp);
    if (set && d) cudaCheck(cudaMemsetAsync(d, 0, (size_t)N * C * sizeof(float), cuda_stream(be)));
    return d;
}
static void cuda_linear_backward_g(const Backend* be, Buf dinp, float* dweight, float* dbias, Buf dout, const float* dout32,
                                   Buf inp, Buf weight, int N, int C, int OC, int set) {
    (void)dout32; // dout is f32 here: dbias sums it
    cuda_linear_backward(be, grad_set(be, dinp, set, N, C), dweight, dbias, buf_f32p(dout), buf_f32p(inp),
                         buf_f32p(weight), N, C, OC);
}
static void cuda_bf16a_linear_backward_g(const Backend* be, Buf dinp, float* dweight, float* dbias, Buf dout,
                                         const float* dout32, Buf inp, Buf weight, int N, int C, int OC, int set) {
    if (dout.dt == DTYPE_BF16) {
        int d16 = dinp.dt == DTYPE_BF16;
        cuda_bf16a_linear_backward_b16(be, d16 ? NULL : buf_f32p(dinp), d16 ? buf_bf16p(dinp) : NULL, dweight, dbias,
                                       buf_bf16p(dout), dout32, buf_bf16p(inp), buf_bf16p(weight), N, C, OC, set);
        return;
    }
    cuda_bf16a_linear_backward(be, grad_set(be, dinp, set, N, C), dweight, dbias, buf_f32p(dout), buf_bf16p(inp),
                               buf_bf16p(weight), N, C, OC);
}
static void cuda_swiglu_backward_g(const Backend* be, Buf dgate, Buf dup, const float* dout, Buf gate, Buf up, size_t n) {
    cuda_swiglu_backward(be, buf_f32p(dgate), buf_f32p(dup), dout, buf_f32p(gate), buf_f32p(up), n);
}
static void cuda_bf16a_swiglu_backward_g(const Backend* be, Buf dgate, Buf dup, const float* dout, Buf gate, Buf up,
                                         size_t n) {
    if (dgate.dt == DTYPE_BF16 || dup.dt == DTYPE_BF16)
        cuda_bf16a_swiglu_backward_b16(be, buf_bf16p(dgate), buf_bf16p(dup), dout, buf_bf16p(gate), buf_bf16p(up), n);
    else
        cuda_bf16a_swiglu_backward(be, buf_f32p(dgate), buf_f32p(dup), dout, buf_bf16p(gate), buf_bf16p(up), n);
}
static void cuda_rmsnorm_backward_g(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, const float* dout,
                                    Buf inp, const float* weight, const float* rstd, int N, int C) {
    CUDA_F32_GRADS(dinp16);
    cuda_rmsnorm_backward(be, dinp, dweight, dout, buf_f32p(inp), weight, rstd, N, C);
}
static void cuda_bf16a_rmsnorm_backward_g(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight,
                                          const float* dout, Buf inp, const float* weight, const float* rstd, int N,
                                          int C) {
    if (dinp16) cuda_bf16a_rmsnorm_backward_b16(be, dinp, dinp16, dweight, dout, buf_bf16p(inp), weight, rstd, N, C);
    else cuda_bf16a_rmsnorm_backward(be, dinp, dweight, dout, buf_bf16p(inp), weight, rstd, N, C);
}
static void cuda_layernorm_backward_g(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, float* dbias,
                                      const float* dout, Buf inp, const float* weight, const float* mean,
                                      const float* rstd, int N, int C) {
    CUDA_F32_GRADS(dinp16);
    cuda_layernorm_backward(be, dinp, dweight, dbias, dout, buf_f32p(inp), weight, mean, rstd, N, C);
}
static void cuda_bf16a_layernorm_backward_g(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight,
                                            float* dbias, const float* dout, Buf inp, const float* weight,
                                            const float* mean, const float* rstd, int N, int C) {
    if (dinp16)
        cuda_bf16a_layernorm_backward_b16(be, dinp, dinp16, dweight, dbias, dout, buf_bf16p(inp), weight, mean, rstd, N,
                                          C);
    else cuda_bf16a_layernorm_backward(be, dinp, dweight, dbias, dout, buf_bf16p(inp), weight, mean, rstd, N, C);
}
static void cuda_act_backward_g(const Backend* be, float* dinp, uint16_t* dinp16, const float* dout, Buf inp, size_t n,
                                Act act) {
    CUDA_F32_GRADS(dinp16);
    cuda_act_backward(be, dinp, dout, buf_f32p(inp), n, act);
}
static void cuda_bf16a_act_backward_g(const Backend* be, float* dinp, uint16_t* dinp16, const float* dout, Buf inp,
                                      size_t n, Act act) {
    if (dinp16) cuda_bf16a_act_backward_b16(be, dinp, dinp16, dout, buf_bf16p(inp), n, act);
    else cuda_bf16a_act_backward(be, dinp, dout, buf_bf16p(inp), n, act);
}
static void cuda_rope_qk_backward_g(const Backend* be, uint16_t* dq16, int ldq16, float* dq, uint16_t* dk16, int ldk16,
                                    float* dk, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k,
                                    const RopeFreq* rf, int keep_q, int keep_k) {
    CUDA_F32_GRADS(dq16 || dk16);
    (void)ldq16, (void)ldk16, (void)keep_q, (void)keep_k;
    cuda_rope_qk_backward(be, dq, dk, pos, N, H, Hkv, d, ld_q, ld_k, rf);
}
static void cuda_bf16_rope_qk_backward_g(const Backend* be, uint16_t* dq16, int ldq16, float* dq, uint16_t* dk16,
                                          int ldk16, float* dk, const int* pos, int N, int H, int Hkv, int d, int ld_q,
                                          int ld_k, const RopeFreq* rf, int keep_q, int keep_k) {
    if (dq16 || dk16)
        cuda_bf16a_rope_qk_backward_b16(be, dq16, ldq16, dq, dk16, ldk16, dk, pos, N, H, Hkv, d, ld_q, ld_k, rf, keep_q,
                                        keep_k);
    else cuda_rope_qk_backward(be, dq, dk, pos, N, H, Hkv, d, ld_q, ld_k, rf);
}
static void cuda_rope2d_backward_g(const Backend* be, uint16_t* dx16, int ld16, float* dx, const int* pos_row,
                                   const int* pos_col, int N, int H, int d, int ld, int keep_f32) {
    CUDA_F32_GRADS(dx16);
    (void)ld16, (void)keep_f32;
    cuda_rope2d_backward(be, dx, pos_row, pos_col, N, H, d, ld);
}
static void cuda_bf16_rope2d_backward_g(const Backend* be, uint16_t* dx16, int ld16, float* dx, const int* pos_row,
                                         const int* pos_col, int N, int H, int d, int ld, int keep_f32) {
    if (dx16) cuda_bf16a_rope2d_backward_b16(be, dx16, ld16, dx, pos_row, pos_col, N, H, d, ld, keep_f32);
    else cuda_rope2d_backward(be, dx, pos_row, pos_col, N, H, d, ld);
}
static void cuda_crossentropy_backward_g(const Backend* be, Buf dlogits, Buf logits, const float* lse, const int* targets,
                                         float scale, int N, int V) {
    cuda_crossentropy_backward(be, buf_f32p(dlogits), buf_f32p(logits), lse, targets, scale, N, V);
}
static void cuda_bf16a_crossentropy_backward_g(const Backend* be, Buf dlogits, Buf logits, const float* lse,
                                               const int* targets, float scale, int N, int V) {
    if (dlogits.dt == DTYPE_BF16)
        cuda_bf16a_crossentropy_backward_b16(be, buf_bf16p(dlogits), buf_bf16p(logits), lse, targets, scale, N, V);
    else cuda_bf16a_crossentropy_backward(be, buf_f32p(dlogits), buf_bf16p(logits), lse, targets, scale, N, V);
}
static void cuda_attention_backward_g(const Backend* be, float* dq, float* dk, float* dv, uint16_t* dq16, uint16_t* dk16,
                                      uint16_t* dv16, int ld16, Buf dout, Buf out, const float* lse, Buf q, Buf k, Buf v,
                                      const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv,
                                      int causal) {
    CUDA_F32_GRADS(dq16 || dk16 || dv16);
    (void)ld16;
    cuda_attention_backward(be, dq, dk, dv, buf_f32p(dout), buf_f32p(out), lse, buf_f32p(q), buf_f32p(k), buf_f32p(v),
                            cu_seqlens, S, T, H, Hkv, d, ld_q, ld_kv, causal);
}
static void cuda_bf16a_attention_backward_g(const Backend* be, float* dq, float* dk, float* dv, uint16_t* dq16,
                                            uint16_t* dk16, uint16_t* dv16, int ld16, Buf dout, Buf out,
                                            const float* lse, Buf q, Buf k, Buf v, const int* cu_seqlens, int S, int T,
                                            int H, int Hkv, int d, int ld_q, int ld_kv, int causal) {
    if (dout.dt == DTYPE_BF16)
        cuda_bf16a_attention_backward_b16(be, dq, dk, dv, dq16, dk16, dv16, ld16, buf_bf16p(dout), buf_bf16p(out), lse,
                                          buf_bf16p(q), buf_bf16p(k), buf_bf16p(v), cu_seqlens, S, T, H, Hkv, d, ld_q,
                                          ld_kv, causal);
    else {
        RR_ASSERT(!(dq16 || dk16 || dv16) && "2-byte gradient mirrors with a 2-byte dout only");
        cuda_bf16a_attention_backward(be, dq, dk, dv, buf_f32p(dout), buf_bf16p(out), lse, buf_bf16p(q), buf_bf16p(k),
                                      buf_bf16p(v), cu_seqlens, S, T, H, Hkv, d, ld_q, ld_kv, causal);
    }
}

// ---- the bf16 table's two activation storages (engine.h, BackendOps.bf16_activations): one entry per op, whose
// activation Bufs' dtypes pick the kernel: 2-byte bf16 words the cuda_bf16a_* ones, f32 words holding bf16 values the
// cuda_bf16_* ones (or the f32 entries the bf16 numerics share: the backward ops, cross-entropy's forward). A call
// whose activations mix the two storages (or hold another dtype), which no kernel takes, stops naming the op.
static int acts16_of(const char* op, const char* file, int line, std::initializer_list<Buf> bs) {
    int n16 = 0, n32 = 0, other = 0;
    for (Buf b : bs) {
        if (!b.p) continue;
        if (b.dt == DTYPE_BF16) n16++;
        else if (b.dt == DTYPE_F32) n32++;
        else other++;
    }
    if ((n16 && n32) || other) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s: activations all f32 words or all 2-byte bf16 (this call %s, which no kernel of the "
                 "bf16 table takes)", op, other ? "holds another dtype" : "mixes them");
        rr_assert_fail(msg, file, line);
    }
    return n16 > 0;
}
#define ACTS16(op, ...) acts16_of(op, __FILE__, __LINE__, {__VA_ARGS__})
// a 2-byte gradient Buf g (read or written only with 2-byte activations): counted with them; an f32 one is not
static inline Buf grad16(Buf g) { return g.dt == DTYPE_F32 ? buf_none() : g; }

static void cuda_bf16_linear_forward_g(const Backend* be, Buf out, Buf inp, Buf weight, Buf bias, int N, int C, int OC) {
    if (ACTS16("linear_forward", out, inp))
        cuda_bf16a_linear_forward(be, buf_bf16p(out), buf_bf16p(inp), buf_bf16p(weight), buf_bf16p(bias), N, C, OC);
    else cuda_bf16_linear_forward(be, buf_f32p(out), buf_f32p(inp), buf_bf16p(weight), buf_bf16p(bias), N, C, OC);
}
static void cuda_bf16_linear_backward_g(const Backend* be, Buf dinp, float* dweight, float* dbias, Buf dout,
                                        const float* dout32, Buf inp, Buf weight, int N, int C, int OC, int set) {
    if (ACTS16("linear_backward", inp, grad16(dout), grad16(dinp))) {
        cuda_bf16a_linear_backward_g(be, dinp, dweight, dbias, dout, dout32, inp, weight, N, C, OC, set);
        return;
    }
    (void)dout32; // dout is f32 here: dbias sums it
    cuda_bf16_linear_backward(be, grad_set(be, dinp, set, N, C), dweight, dbias, buf_f32p(dout), buf_f32p(inp),
                              buf_bf16p(weight), N, C, OC);
}
static void cuda_bf16_linear_gelu_forward_g(const Backend* be, Buf out, Buf pre, Buf inp, Buf weight, Buf bias, int N,
                                            int C, int OC) {
    if (ACTS16("linear_gelu_forward", out, pre, inp))
        cuda_bf16a_linear_gelu_forward(be, buf_bf16p(out), buf_bf16p(pre), buf_bf16p(inp), buf_bf16p(weight),
                                       buf_bf16p(bias), N, C, OC);
    else
        cuda_bf16_linear_gelu_forward(be, buf_f32p(out), buf_f32p(pre), buf_f32p(inp), buf_bf16p(weight), buf_bf16p(bias),
                                      N, C, OC);
}
static void cuda_bf16_layernorm_forward_g(const Backend* be, Buf out, float* mean, float* rstd, Buf inp,
                                          const float* weight, const float* bias, int N, int C) {
    if (ACTS16("layernorm_forward", out, inp))
        cuda_bf16a_layernorm_forward(be, buf_bf16p(out), mean, rstd, buf_bf16p(inp), weight, bias, N, C);
    else cuda_bf16_layernorm_forward(be, buf_f32p(out), mean, rstd, buf_f32p(inp), weight, bias, N, C);
}
static void cuda_bf16_layernorm_backward_g(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight,
                                           float* dbias, const float* dout, Buf inp, const float* weight,
                                           const float* mean, const float* rstd, int N, int C) {
    if (ACTS16("layernorm_backward", inp))
        cuda_bf16a_layernorm_backward_g(be, dinp, dinp16, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    else cuda_layernorm_backward_g(be, dinp, dinp16, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
static void cuda_bf16_rmsnorm_forward_g(const Backend* be, Buf out, float* rstd, Buf inp, const float* weight, int N,
                                        int C, double eps) {
    if (ACTS16("rmsnorm_forward", out, inp))
        cuda_bf16a_rmsnorm_forward(be, buf_bf16p(out), rstd, buf_bf16p(inp), weight, N, C, eps);
    else cuda_bf16_rmsnorm_forward(be, buf_f32p(out), rstd, buf_f32p(inp), weight, N, C, eps);
}
static void cuda_bf16_rmsnorm_backward_g(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight,
                                         const float* dout, Buf inp, const float* weight, const float* rstd, int N,
                                         int C) {
    if (ACTS16("rmsnorm_backward", inp))
        cuda_bf16a_rmsnorm_backward_g(be, dinp, dinp16, dweight, dout, inp, weight, rstd, N, C);
    else cuda_rmsnorm_backward_g(be, dinp, dinp16, dweight, dout, inp, weight, rstd, N, C);
}
static void cuda_bf16_gelu_forward_g(const Backend* be, Buf out, Buf inp, size_t n) {
    if (ACTS16("gelu_forward", out, inp)) cuda_bf16a_gelu_forward(be, buf_bf16p(out), buf_bf16p(inp), n);
    else cuda_bf16_gelu_forward(be, buf_f32p(out), buf_f32p(inp), n);
}
static void cuda_bf16_gelu_backward_g(const Backend* be, float* dinp, const float* dout, Buf inp, size_t n) {
    if (ACTS16("gelu_backward", inp)) cuda_bf16a_gelu_backward(be, dinp, dout, buf_bf16p(inp), n);
    else cuda_gelu_backward(be, dinp, dout, buf_f32p(inp), n);
}
static void cuda_bf16_swiglu_forward_g(const Backend* be, Buf out, Buf gate, Buf up, size_t n) {
    if (ACTS16("swiglu_forward", out, gate, up))
        cuda_bf16a_swiglu_forward(be, buf_bf16p(out), buf_bf16p(gate), buf_bf16p(up), n);
    else cuda_bf16_swiglu_forward(be, buf_f32p(out), buf_f32p(gate), buf_f32p(up), n);
}
static void cuda_bf16_swiglu_backward_g(const Backend* be, Buf dgate, Buf dup, const float* dout, Buf gate, Buf up,
                                        size_t n) {
    if (ACTS16("swiglu_backward", gate, up, grad16(dgate), grad16(dup)))
        cuda_bf16a_swiglu_backward_g(be, dgate, dup, dout, gate, up, n);
    else cuda_swiglu_backward_g(be, dgate, dup, dout, gate, up, n);
}
static void cuda_bf16_add_forward_g(const Backend* be, Buf out, Buf a, Buf b, size_t n) {
    if (ACTS16("add_forward", out, a, b)) cuda_bf16a_add_forward(be, buf_bf16p(out), buf_bf16p(a), buf_bf16p(b), n);
    else cuda_bf16_add_forward(be, buf_f32p(out), buf_f32p(a), buf_f32p(b), n);
}
// f32 words: add_forward's value (b is f32 words either way)
static void cuda_bf16_add_f32_forward_g(const Backend* be, Buf out, Buf a, const float* b, size_t n) {
    if (ACTS16("add_f32_forward", out, a)) cuda_bf16a_add_f32_forward(be, buf_bf16p(out), buf_bf16p(a), b, n);
    else cuda_bf16_add_forward(be, buf_f32p(out), buf_f32p(a), b, n);
}
static void cuda_bf16_rope_forward_g(const Backend* be, Buf x, const int* pos, int N, int H, int d, int ld,
                                     const RopeFreq* rf) {
    if (ACTS16("rope_forward", x)) cuda_bf16a_rope_forward(be, buf_bf16p(x), pos, N, H, d, ld, rf);
    else cuda_bf16_rope_forward(be, buf_f32p(x), pos, N, H, d, ld, rf);
}
static void cuda_bf16_rope2d_forward_g(const Backend* be, Buf x, const int* pos_row, const int* pos_col, int N, int H,
                                       int d, int ld) {
    if (ACTS16("rope2d_forward", x)) cuda_bf16a_rope2d_forward(be, buf_bf16p(x), pos_row, pos_col, N, H, d, ld);
    else cuda_bf16_rope2d_forward(be, buf_f32p(x), pos_row, pos_col, N, H, d, ld);
}
static void cuda_bf16_rope_qk_forward_g(const Backend* be, Buf q, Buf k, const int* pos, int N, int H, int Hkv, int d,
                                        int ld_q, int ld_k, const RopeFreq* rf) {
    if (ACTS16("rope_qk_forward", q, k))
        cuda_bf16a_rope_qk_forward(be, buf_bf16p(q), buf_bf16p(k), pos, N, H, Hkv, d, ld_q, ld_k, rf);
    else cuda_bf16_rope_qk_forward(be, buf_f32p(q), buf_f32p(k), pos, N, H, Hkv, d, ld_q, ld_k, rf);
}
static void cuda_bf16_embedding_forward_g(const Backend* be, Buf out, const int* ids, Buf table, int N, int C) {
    if (ACTS16("embedding_forward", out)) cuda_bf16a_embedding_forward(be, buf_bf16p(out), ids, buf_bf16p(table), N, C);
    else cuda_bf16_embedding_forward(be, buf_f32p(out), ids, buf_bf16p(table), N, C);
}
static void cuda_bf16_crossentropy_forward_g(const Backend* be, float* loss_sum, float* lse, Buf logits,
                                             const int* targets, int N, int V) {
    if (ACTS16("crossentropy_forward", logits))
        cuda_bf16a_crossentropy_forward(be, loss_sum, lse, buf_bf16p(logits), targets, N, V);
    else cuda_crossentropy_forward(be, loss_sum, lse, buf_f32p(logits), targets, N, V);
}
static void cuda_bf16_crossentropy_backward_g(const Backend* be, Buf dlogits, Buf logits, const float* lse,
                                              const int* targets, float scale, int N, int V) {
    if (ACTS16("crossentropy_backward", logits, grad16(dlogits)))
        cuda_bf16a_crossentropy_backward_g(be, dlogits, logits, lse, targets, scale, N, V);
    else cuda_crossentropy_backward_g(be, dlogits, logits, lse, targets, scale, N, V);
}
static void cuda_bf16_attention_forward_g(const Backend* be, Buf out, float* lse, Buf q, Buf k, Buf v,
                                          const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv,
                                          int causal) {
    if (ACTS16("attention_forward", out, q, k, v))
        cuda_bf16a_attention_forward(be, buf_bf16p(out), lse, buf_bf16p(q), buf_bf16p(k), buf_bf16p(v), cu_seqlens, S, T,
                                     H, Hkv, d, ld_q, ld_kv, causal);
    else
        cuda_bf16_attention_forward(be, buf_f32p(out), lse, buf_f32p(q), buf_f32p(k), buf_f32p(v), cu_seqlens, S, T, H,
                                    Hkv, d, ld_q, ld_kv, causal);
}
static void cuda_bf16_attention_backward_g(const Backend* be, float* dq, float* dk, float* dv, uint16_t* dq16,
                                           uint16_t* dk16, uint16_t* dv16, int ld16, Buf dout, Buf out, const float* lse,
                                           Buf q, Buf k, Buf v, const int* cu_seqlens, int S, int T, int H, int Hkv,
                                           int d, int ld_q, int ld_kv, int causal) {
    if (ACTS16("attention_backward", out, q, k, v, grad16(dout))) {
        cuda_bf16a_attention_backward_g(be, dq, dk, dv, dq16, dk16, dv16, ld16, dout, out, lse, q, k, v, cu_seqlens, S, T,
                                        H, Hkv, d, ld_q, ld_kv, causal);
        return;
    }
    CUDA_F32_GRADS(dq16 || dk16 || dv16);
    (void)ld16;
    cuda_bf16_attention_backward(be, dq, dk, dv, buf_f32p(dout), buf_f32p(out), lse, buf_f32p(q), buf_f32p(k),
                                 buf_f32p(v), cu_seqlens, S, T, H, Hkv, d, ld_q, ld_kv, causal);
}
static void cuda_bf16_act_forward_g(const Backend* be, Buf out, Buf inp, size_t n, Act act) {
    if (ACTS16("act_forward", out, inp)) cuda_bf16a_act_forward(be, buf_bf16p(out), buf_bf16p(inp), n, act);
    else cuda_bf16_act_forward(be, buf_f32p(out), buf_f32p(inp), n, act);
}
static void cuda_bf16_act_backward_g(const Backend* be, float* dinp, uint16_t* dinp16, const float* dout, Buf inp,
                                     size_t n, Act act) {
    if (ACTS16("act_backward", inp)) cuda_bf16a_act_backward_g(be, dinp, dinp16, dout, inp, n, act);
    else cuda_act_backward_g(be, dinp, dinp16, dout, inp, n, act);
}
static void cuda_bf16_rows_gather_forward_g(const Backend* be, Buf out, const int* idx, const float* w, Buf table,
                                            int N, int K, int C) {
    if (ACTS16("rows_gather_forward", out, table))
        cuda_bf16a_rows_gather_forward(be, buf_bf16p(out), idx, w, buf_bf16p(table), N, K, C);
    else cuda_bf16_rows_gather_forward(be, buf_f32p(out), idx, w, buf_f32p(table), N, K, C);
}

// every op slot inside its profiler scope
PROF_OP(PROF_COPIES, cuda_memset0)
PROF_OP(PROF_COPIES, cuda_copy_h2d)
PROF_OP(PROF_COPIES, cuda_copy_d2h)
PROF_OP(PROF_COPIES, cuda_copy_d2d)
PROF_OP(PROF_GEMM, cuda_linear_forward)
PROF_OP(PROF_GEMM, cuda_linear_backward_g)
PROF_OP(PROF_GEMM, cuda_linear_gelu_forward)
PROF_OP(PROF_NORM, cuda_layernorm_forward)
PROF_OP(PROF_NORM, cuda_layernorm_backward_g)
PROF_OP(PROF_NORM, cuda_rmsnorm_forward)
PROF_OP(PROF_NORM, cuda_rmsnorm_backward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_gelu_forward)
PROF_OP(PROF_ELEMENTWISE, cuda_gelu_backward)
PROF_OP(PROF_ELEMENTWISE, cuda_swiglu_forward)
PROF_OP(PROF_ELEMENTWISE, cuda_swiglu_backward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_add_forward)
PROF_OP(PROF_ELEMENTWISE, cuda_rope_forward)
PROF_OP(PROF_ELEMENTWISE, cuda_rope_backward)
PROF_OP(PROF_ELEMENTWISE, cuda_rope2d_forward)
PROF_OP(PROF_ELEMENTWISE, cuda_rope2d_backward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_rope_qk_forward)
PROF_OP(PROF_ELEMENTWISE, cuda_rope_qk_backward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_embedding_forward)
PROF_OP(PROF_ELEMENTWISE, cuda_embedding_backward)
PROF_OP(PROF_ELEMENTWISE, cuda_crossentropy_forward)
PROF_OP(PROF_ELEMENTWISE, cuda_crossentropy_backward_g)
PROF_OP(PROF_ATTENTION, cuda_attention_forward)
PROF_OP(PROF_ATTENTION, cuda_attention_backward_g)
PROF_OP(PROF_OPTIMISER, cuda_sum_squares)
PROF_OP(PROF_OPTIMISER, cuda_scale)
PROF_OP(PROF_OPTIMISER, cuda_adamw_update)
PROF_OP(PROF_OPTIMISER, cuda_adamw_update_copy)
PROF_OP(PROF_OPTIMISER, cuda_adamw_multi)
PROF_OP(PROF_OPTIMISER, cuda_sum_squares_multi)
PROF_OP(PROF_ELEMENTWISE, cuda_act_forward)
PROF_OP(PROF_ELEMENTWISE, cuda_act_backward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_rows_gather_forward)
PROF_OP(PROF_ELEMENTWISE, cuda_rows_gather_backward)
PROF_OP(PROF_COPIES, cuda_from_bf16)
PROF_OP(PROF_COPIES, cuda_to_bf16)
PROF_OP(PROF_ELEMENTWISE, cuda_dropout_forward)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_dropout_forward)
PROF_OP(PROF_GEMM, cuda_bf16_linear_forward_g)
PROF_OP(PROF_GEMM, cuda_bf16_linear_backward_g)
PROF_OP(PROF_GEMM, cuda_bf16_linear_gelu_forward_g)
PROF_OP(PROF_NORM, cuda_bf16_layernorm_forward_g)
PROF_OP(PROF_NORM, cuda_bf16_layernorm_backward_g)
PROF_OP(PROF_NORM, cuda_bf16_rmsnorm_forward_g)
PROF_OP(PROF_NORM, cuda_bf16_rmsnorm_backward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_gelu_forward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_gelu_backward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_swiglu_forward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_swiglu_backward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_add_forward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_add_f32_forward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_rope_forward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_rope2d_forward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_rope2d_backward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_rope_qk_forward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_rope_qk_backward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_embedding_forward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_crossentropy_forward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_crossentropy_backward_g)
PROF_OP(PROF_ATTENTION, cuda_bf16_attention_forward_g)
PROF_OP(PROF_ATTENTION, cuda_bf16_attention_backward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_act_forward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_act_backward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_bf16_rows_gather_forward_g)
PROF_OP(PROF_ELEMENTWISE, cuda_dropout_backward)
PROF_OP(PROF_ELEMENTWISE, cuda_nf4_dequantize)


// ---- the tables ----------------------------------------------------------------------------------

// ---- graphs (BackendDevice.graph_*; runtime.cuda_graphs) ------------------------------------------
// Global capture mode: any call that is unsafe during a capture (a synchronisation, cudaMalloc) fails it
// instead of passing silently.
static void cuda_graph_begin(const Backend* be) {
    cudaCheck(cudaStreamBeginCapture(cuda_stream(be), cudaStreamCaptureModeGlobal));
}
static void* cuda_graph_end(const Backend* be) {
    cudaGraph_t g;
    cudaCheck(cudaStreamEndCapture(cuda_stream(be), &g));
    cudaGraphExec_t e;
    cudaCheck(cudaGraphInstantiate(&e, g, 0));
    cudaCheck(cudaGraphDestroy(g));
    return (void*)e;
}
static void cuda_graph_launch(const Backend* be, void* graph) {
    cudaCheck(cudaGraphLaunch((cudaGraphExec_t)graph, cuda_stream(be)));
}
static void cuda_graph_free(void* graph) { cudaCheck(cudaGraphExecDestroy((cudaGraphExec_t)graph)); }

static const BackendDevice cuda_device = {
    .name = "cuda",
    .host_addressable = 0, // device memory, reached through copy_*
    .alloc = cuda_alloc,
    .free = cuda_free,
    .memset0 = prof_cuda_memset0,
    .copy_h2d = prof_cuda_copy_h2d,
    .copy_d2h = prof_cuda_copy_d2h,
    .copy_d2d = prof_cuda_copy_d2d,
    .synchronize = cuda_synchronize,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .event_create = cuda_event_create,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_wait = cuda_event_wait,
    .event_destroy = cuda_event_destroy,
    .reserve = cuda_reserve,
    .profile = cuda_profile,
    .profile_take = cuda_profile_take,
    .memory = cuda_memory,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
    .memory_tag = cuda_memory_tag,
};

// the f32 ops: the base of the bf16 tables below
static const BackendOps cuda_ops = {
    .linear_forward = prof_cuda_linear_forward,
    .linear_backward = prof_cuda_linear_backward_g,
    .linear_gelu_forward = prof_cuda_linear_gelu_forward,
    .layernorm_forward = prof_cuda_layernorm_forward,
    .layernorm_backward = prof_cuda_layernorm_backward_g,
    .rmsnorm_forward = prof_cuda_rmsnorm_forward,
    .rmsnorm_backward = prof_cuda_rmsnorm_backward_g,
    .gelu_forward = prof_cuda_gelu_forward,
    .gelu_backward = prof_cuda_gelu_backward,
    .swiglu_forward = prof_cuda_swiglu_forward,
    .swiglu_backward = prof_cuda_swiglu_backward_g,
    .add_forward = prof_cuda_add_forward,
    .rope_forward = prof_cuda_rope_forward,
    .rope_backward = prof_cuda_rope_backward,
    .rope2d_forward = prof_cuda_rope2d_forward,
    .rope2d_backward = prof_cuda_rope2d_backward_g,
    .embedding_forward = prof_cuda_embedding_forward,
    .embedding_backward = prof_cuda_embedding_backward,
    .crossentropy_forward = prof_cuda_crossentropy_forward,
    .crossentropy_backward = prof_cuda_crossentropy_backward_g,
    .attention_forward = prof_cuda_attention_forward,
    .attention_backward = prof_cuda_attention_backward_g,
    .sum_squares = prof_cuda_sum_squares,
    .scale = prof_cuda_scale,
    .adamw_update = prof_cuda_adamw_update,
    .round_bf16 = cuda_round_bf16,
    .act_forward = prof_cuda_act_forward,
    .act_backward = prof_cuda_act_backward_g,
    .rows_gather_forward = prof_cuda_rows_gather_forward,
    .rows_gather_backward = prof_cuda_rows_gather_backward,
    .attention_decode = cuda_attention_decode,
    .adamw_update_copy = prof_cuda_adamw_update_copy,
    .to_bf16 = prof_cuda_to_bf16,
    .from_bf16 = prof_cuda_from_bf16,
    .rope_qk_forward = prof_cuda_rope_qk_forward,
    .rope_qk_backward = prof_cuda_rope_qk_backward_g,
    .dropout_forward = prof_cuda_dropout_forward,
    .dropout_backward = prof_cuda_dropout_backward,
    .adamw_multi = prof_cuda_adamw_multi,
    .sum_squares_multi = prof_cuda_sum_squares_multi,
    .nf4_dequantize = prof_cuda_nf4_dequantize,
};

// runtime.precision = bf16 (engine/cuda/bf16.cu): the forward ops round where the GPU stores bf16 and the GEMMs go
// through cuBLASLt (reading 2-byte weights and GEMM biases); the other backward ops, cross-entropy and the step end are
// the f32 ones. Activations in either storage (BackendOps.bf16_activations): each entry dispatches on its activation
// Bufs' dtypes (the _g entries above), 2-byte bf16 words or f32 words holding bf16 values; generation's attention_decode
// takes f32 words (its KV cache).
static const BackendOps cuda_bf16_ops = [] {
    BackendOps o = cuda_ops;
    o.linear_forward = prof_cuda_bf16_linear_forward_g;
    o.linear_backward = prof_cuda_bf16_linear_backward_g;
    o.linear_gelu_forward = prof_cuda_bf16_linear_gelu_forward_g;
    o.layernorm_forward = prof_cuda_bf16_layernorm_forward_g;
    o.layernorm_backward = prof_cuda_bf16_layernorm_backward_g;
    o.rmsnorm_forward = prof_cuda_bf16_rmsnorm_forward_g;
    o.rmsnorm_backward = prof_cuda_bf16_rmsnorm_backward_g;
    o.gelu_forward = prof_cuda_bf16_gelu_forward_g;
    o.gelu_backward = prof_cuda_bf16_gelu_backward_g;
    o.swiglu_forward = prof_cuda_bf16_swiglu_forward_g;
    o.swiglu_backward = prof_cuda_bf16_swiglu_backward_g;
    o.add_forward = prof_cuda_bf16_add_forward_g;
    o.rope_forward = prof_cuda_bf16_rope_forward_g;
    o.rope2d_forward = prof_cuda_bf16_rope2d_forward_g;
    o.rope2d_backward = prof_cuda_bf16_rope2d_backward_g;
    o.embedding_forward = prof_cuda_bf16_embedding_forward_g;
    o.crossentropy_forward = prof_cuda_bf16_crossentropy_forward_g;
    o.crossentropy_backward = prof_cuda_bf16_crossentropy_backward_g;
    o.attention_forward = prof_cuda_bf16_attention_forward_g;
    o.attention_backward = prof_cuda_bf16_attention_backward_g;
    o.act_forward = prof_cuda_bf16_act_forward_g;
    o.act_backward = prof_cuda_bf16_act_backward_g;
    o.rows_gather_forward = prof_cuda_bf16_rows_gather_forward_g;
    o.add_f32_forward = prof_cuda_bf16_add_f32_forward_g;
    o.rope_qk_forward = prof_cuda_bf16_rope_qk_forward_g;
    o.rope_qk_backward = prof_cuda_bf16_rope_qk_backward_g;
    o.dropout_forward = prof_cuda_bf16_dropout_forward;
    o.bf16_activations = 1;
    return o;
}();


// C++ designated initialisers follow the declaration order of engine.h's structs; a variant is its base
// copied, with the entries it overrides named.
extern const Backend backend_cuda_bf16; // below (a const object is declared ahead only as extern in C++)
static const Backend backend_cuda = {
    .dev = &cuda_device,
    .ops = &cuda_ops,
    .precision = PRECISION_FP32,
    .bf16_variant = &backend_cuda_bf16,
    .weight_dtype = DTYPE_F32,
};

// the bf16 table: weights and GEMM biases 2-byte; activations in the storage each stage chose (cuda_bf16_ops)
const Backend backend_cuda_bf16 = {
    .dev = &cuda_device,
    .ops = &cuda_bf16_ops,
    .precision = PRECISION_BF16,
    .bf16_variant = &backend_cuda_bf16,
    .weight_dtype = DTYPE_BF16,
};

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
