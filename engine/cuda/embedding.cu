// embedding.cu — token embedding on CUDA: out (N, C) = table[ids[n]], dtable (V, C) += scatter of dout.
//
// The backward uses float atomicAdd, one thread per (row, channel): the same id occurs many times
// in a microbatch and the adds into its row race otherwise. The order of those adds varies from run
// to run, so dtable can differ in the last bits between runs (within fp32 round-off of the CPU's
// in-order sum); everything else in this backend is deterministic.
// A negative id is recorded in the device error record (reported at the next synchronize) and its
// row reads / writes nothing.
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"

// A table's value into an output: as it is (f32 words, or 2-byte rows of 2-byte activations), or 2-byte bf16
// widened exactly to f32 (the bf16 table's rows into f32 words: bf16-valued, no rounding step)
static __device__ __forceinline__ float emb_value(float x, float*) { return x; }
static __device__ __forceinline__ uint16_t emb_value(uint16_t x, uint16_t*) { return x; }
static __device__ __forceinline__ float emb_value(uint16_t x, float*) { return rr_bf16_to_f32(x); }

// TO, TT: the output's and the table's storage (float or uint16_t)
template <typename TO, typename TT>
static __global__ void embedding_forward_kernel(TO* out, const int* ids, const TT* table, int N, int C, int* err) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C);
    int id = ids[n];
    if (id < 0) {
        if (c == 0) cuda_report_error(err, CUDA_ERR_EMBEDDING_ID, n, id, 0);
        out[i] = TO(0);
        return;
    }
    out[i] = emb_value(table[(size_t)id * C + c], out);
}
static void embedding_forward_cuda(float* out, const int* ids, const float* table, int N, int C, cudaStream_t stream) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    embedding_forward_kernel<<<ceil_div_z(n, 256), 256, 0, stream>>>(out, ids, table, N, C, cuda_ctx.error);
    cudaCheck(cudaGetLastError());
}

static __global__ void embedding_backward_kernel(float* dtable, const float* dout, const int* ids, int N, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C);
    int id = ids[n];
    if (id < 0) return; // reported by the forward
    atomicAdd(&dtable[(size_t)id * C + c], dout[i]);
}
static void embedding_backward_cuda(float* dtable, const float* dout, const int* ids, int N, int C,
                                    cudaStream_t stream) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    embedding_backward_kernel<<<ceil_div_z(n, 256), 256, 0, stream>>>(dtable, dout, ids, N, C);
    cudaCheck(cudaGetLastError());
}

// The bf16 table (Backend.weight_dtype = DTYPE_BF16): its 2-byte rows widened exactly, so the output is
// bf16-valued with no rounding step.
void cuda_bf16_embedding_forward(const Backend* be, float* out, const int* ids, const uint16_t* table, int N, int C) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    embedding_forward_kernel<<<ceil_div_z(n, 256), 256, 0, cuda_stream(be)>>>(out, ids, table, N, C,
                                                                                   cuda_ctx.error);
    cudaCheck(cudaGetLastError());
}

void cuda_embedding_forward(const Backend* be, float* out, const int* ids, const float* table, int N, int C) {
    embedding_forward_cuda(out, ids, table, N, C, cuda_stream(be));
}
void cuda_embedding_backward(const Backend* be, float* dtable, const float* dout, const int* ids, int N, int C) {
    embedding_backward_cuda(dtable, dout, ids, N, C, cuda_stream(be));
}

// 2-byte activations (Bufs of DTYPE_BF16 on the bf16 table): the 2-byte rows copied as they are into a
// 2-byte activation (the bf16 table's values, no rounding step).
void cuda_bf16a_embedding_forward(const Backend* be, uint16_t* out, const int* ids, const uint16_t* table, int N, int C) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    embedding_forward_kernel<<<ceil_div_z(n, 256), 256, 0, cuda_stream(be)>>>(out, ids, table,
                                                                                  N, C, cuda_ctx.error);
    cudaCheck(cudaGetLastError());
}
