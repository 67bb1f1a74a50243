// quant.cu — a QLoRA base weight dequantized to bf16 (engine/cuda/nf4_math.h, the CPU's rr_nf4_dq_dequantize_bf16):
// one thread per packed byte (two values), each restoring its block's absmax from the double-quantized codes. The
// bf16 words feed the existing bf16 GEMMs as any 2-byte weight does.
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"
#include "engine/cuda/nf4_math.h"

#define NF4_DQ_BLOCK 256

static __global__ void nf4_dequantize_bf16_kernel(uint16_t* out, const uint8_t* q, const uint8_t* q8,
                                                  const float* absmax2, const float* map8, float offset, size_t n) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; // byte j: values 2j, 2j + 1 (one block: 64 is even)
    size_t i = 2 * j;
    if (i >= n) return;
    float a = rr_nf4_absmax_at(q8, absmax2, map8, offset, i / RR_NF4_BLOCK);
    out[i] = rr_nf4_bf16_at(q, a, i);
    if (i + 1 < n) out[i + 1] = rr_nf4_bf16_at(q, a, i + 1);
}

extern "C" void cuda_nf4_dequantize_bf16(const Backend* be, uint16_t* out, const uint8_t* q, const uint8_t* q8,
                                         const float* absmax2, const float* map8, float offset, size_t n) {
    if (n == 0) return;
    unsigned grid = ceil_div_z((n + 1) / 2, NF4_DQ_BLOCK);
    nf4_dequantize_bf16_kernel<<<grid, NF4_DQ_BLOCK, 0, cuda_stream(be)>>>(out, q, q8, absmax2, map8, offset, n);
    cudaCheck(cudaGetLastError());
}

// the f32-word tables (weight_dtype f32): the same bf16 words widened
static __global__ void nf4_dequantize_f32_kernel(float* out, const uint8_t* q, const uint8_t* q8, const float* absmax2,
                                                 const float* map8, float offset, size_t n) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t i = 2 * j;
    if (i >= n) return;
    float a = rr_nf4_absmax_at(q8, absmax2, map8, offset, i / RR_NF4_BLOCK);
    out[i] = rr_bf16_to_f32(rr_nf4_bf16_at(q, a, i));
    if (i + 1 < n) out[i + 1] = rr_bf16_to_f32(rr_nf4_bf16_at(q, a, i + 1));
}

// BackendOps.nf4_dequantize: into a weight of the table's weight_dtype
void cuda_nf4_dequantize(const Backend* be, Buf out, const uint8_t* q, const uint8_t* q8, const float* absmax2,
                         const float* map8, float offset, size_t n) {
    if (out.dt == DTYPE_BF16) {
        cuda_nf4_dequantize_bf16(be, (uint16_t*)out.p, q, q8, absmax2, map8, offset, n);
        return;
    }
    if (n == 0) return;
    unsigned grid = ceil_div_z((n + 1) / 2, NF4_DQ_BLOCK);
    nf4_dequantize_f32_kernel<<<grid, NF4_DQ_BLOCK, 0, cuda_stream(be)>>>((float*)out.p, q, q8, absmax2, map8, offset, n);
    cudaCheck(cudaGetLastError());
}
