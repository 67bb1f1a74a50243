// bf16.cu — the CUDA backend's bf16 mixed precision (runtime.precision = bf16): the same rounding
// points as the CPU reference (engine/cpu/bf16.c, contract in engine.h's Precision), with every
// linear product a cublasLtMatmul described by a GemmLtDesc (engine/gemm_lt_desc.h): bf16 A and B,
// f32 C = D, f32 accumulate, the bias in the epilogue of the forward.
//
// What is 2-byte bf16 in device memory (Backend.weight_dtype = DTYPE_BF16): the compute copy of every
// 2-D parameter (engine/params.h), written by the AdamW kernel itself (optim.cu, adamw_copy_kernel), so a
// GEMM's weight operand goes to cuBLASLt as it is and the embedding reads its bf16 rows. On this (bf16)
// table activations and activation gradients are f32 words: a GEMM converts its activation / output-gradient
// operands into bf16 scratch (f32_to_bf16_kernel) right before the call, and a GEMM's f32 output is rounded
// by round_bf16_kernel after it (cuBLASLt's f32 D cannot round). Every other stored activation is rounded in
// its producing kernel's store (norm.cu, elementwise.cu, rope.cu, embedding.cu: the <R> / bf16 variants),
// with no separate pass. With 2-byte activations (end of this file) the table stores the
// activations as 2-byte bf16 words, so its forward GEMMs have neither pass: docs/cuda.md, "bf16 storage".
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/attention_path.h"
#include "engine/cuda/cuda_ops.cuh"
#include "engine/gemm_lt_desc.h"

#define BF16_BLOCK 256

// ---- conversions ---------------------------------------------------------------------------------

static __global__ void f32_to_bf16_kernel(uint16_t* out, const float* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = rr_f32_to_bf16(inp[i]);
}
static void f32_to_bf16_cuda(uint16_t* out, const float* inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    f32_to_bf16_kernel<<<ceil_div_z(n, BF16_BLOCK), BF16_BLOCK, 0, stream>>>(out, inp, n);
    cudaCheck(cudaGetLastError());
}

// two conversions in one launch (a GEMM with two f32 operands: the weight gradient's dout and inp)
static __global__ void f32_to_bf16_2_kernel(uint16_t* out_a, const float* a, size_t na, uint16_t* out_b, const float* b,
                                            size_t nb) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < na) out_a[i] = rr_f32_to_bf16(a[i]);
    else if (i < na + nb) out_b[i - na] = rr_f32_to_bf16(b[i - na]);
}
static void f32_to_bf16_2_cuda(uint16_t* out_a, const float* a, size_t na, uint16_t* out_b, const float* b, size_t nb,
                               cudaStream_t stream) {
    if (na + nb == 0) return;
    f32_to_bf16_2_kernel<<<ceil_div_z(na + nb, BF16_BLOCK), BF16_BLOCK, 0, stream>>>(out_a, a, na, out_b, b, nb);
    cudaCheck(cudaGetLastError());
}

// two in-place roundings of n values in one launch (the fused linear + GELU's out and pre)
static __global__ void round_bf16_2_kernel(float* x, float* y, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = rr_bf16_round(x[i]);
    else if (i < 2 * n) y[i - n] = rr_bf16_round(y[i - n]);
}
static void round_bf16_2_cuda(float* x, float* y, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    round_bf16_2_kernel<<<ceil_div_z(2 * n, BF16_BLOCK), BF16_BLOCK, 0, stream>>>(x, y, n);
    cudaCheck(cudaGetLastError());
}

static __global__ void round_bf16_kernel(float* out, const float* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = rr_bf16_round(inp[i]);
}
static void round_bf16_cuda(float* out, const float* inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    round_bf16_kernel<<<ceil_div_z(n, BF16_BLOCK), BF16_BLOCK, 0, stream>>>(out, inp, n);
    cudaCheck(cudaGetLastError());
}

void cuda_round_bf16(const Backend* be, float* out, const float* inp, size_t n) { round_bf16_cuda(out, inp, n, cuda_stream(be)); }
void cuda_to_bf16(const Backend* be, uint16_t* out, const float* inp, size_t n) { f32_to_bf16_cuda(out, inp, n, cuda_stream(be)); }

static void bf16_to_f32_cuda(float* out, const uint16_t* inp, size_t n, cudaStream_t stream); // below

// bf16 scratch of at least `elems` values (see CudaContext.bf16_scratch)
// One scratch per process: the bf16 GEMMs run on the compute stream only (a table bound to another
// stream must not run them concurrently with it).
static uint16_t* bf16_scratch(size_t elems) {
    if (elems > cuda_ctx.bf16_scratch_elems) {
        if (cuda_ctx.bf16_scratch) cuda_free_tracked(cuda_ctx.bf16_scratch); // waits for its users
        cuda_malloc_tracked((void**)&cuda_ctx.bf16_scratch, elems * sizeof(uint16_t));
        cuda_ctx.bf16_scratch_elems = elems;
    }
    return cuda_ctx.bf16_scratch;
}

void cuda_bf16_reserve(size_t gemm_elems) {
    if (gemm_elems) (void)bf16_scratch(gemm_elems);
}

// ---- GEMMs through cuBLASLt ----------------------------------------------------------------------

// elements of a column-major (rows, cols) operand with leading dimension ld
static size_t lt_span(int rows, int cols, int ld) { return rows <= 0 || cols <= 0 ? 0 : (size_t)(cols - 1) * ld + rows; }

// One described GEMM: A and B are the bf16 operands (already converted), C = D in place: f32 (ctype CUDA_R_32F)
// or 2-byte bf16 (CUDA_R_16BF, a forward output into a 2-byte activation: cuBLASLt rounds its f32 result, bias
// included, to bf16 in its own store, the value round_bf16_kernel gave after an f32 D). The bias is in D's type:
// f32 words with an f32 D, 2-byte bf16 with a bf16 D (cuBLASLt takes no f32 bias with a bf16 D: CUBLAS_STATUS_
// INVALID_VALUE on an H200). The bf16 tables' GEMM biases are 2-byte compute copies (Backend.weight_dtype,
// written by AdamW), given as they are to a bf16 D and widened (exact) for an f32 D.
// aux: the Aux output of GEMM_LT_EPI_GELU_AUX_BIAS (leading dimension d->aux_ld, D's type), else NULL.
static void gemm_lt_desc_run_cuda(const Backend* be, const GemmLtDesc* d, const uint16_t* A, const uint16_t* B, void* C,
                                  const void* bias, void* aux = NULL, cudaDataType ctype = CUDA_R_32F) {
    const GemmDesc* g = &d->g;
    RR_ASSERT(gemm_desc_valid(g));
    cublasLtMatmulDesc_t op;
    cublasCheck(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = g->opA ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->opB ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (d->epilogue == GEMM_LT_EPI_BIAS) {
        RR_ASSERT(bias);
        epi = CUBLASLT_EPILOGUE_BIAS;
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    } else if (d->epilogue == GEMM_LT_EPI_GELU_AUX_BIAS) {
        // D = gelu(AB + bias), Aux = AB + bias (both in D's type, the bias too): cuBLASLt wants aux_ld a multiple of 8
        RR_ASSERT(bias && aux && d->aux_ld >= g->m && d->aux_ld % 8 == 0);
        epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        int64_t ld = d->aux_ld;
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    // layouts of the operands as stored (before op): A is (m, k) or, transposed, (k, m)
    cublasLtMatrixLayout_t la, lb, lc;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, g->opA ? g->k : g->m, g->opA ? g->m : g->k, g->lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, g->opB ? g->n : g->k, g->opB ? g->k : g->n, g->ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, ctype, g->m, g->n, g->ldc));
    // algo NULL: cuBLASLt runs its own heuristic query; no workspace (the fastest kernels for large
    // shapes may want one: a fixed workspace in CudaContext is the next step)
    cublasCheck(cublasLtMatmul(cuda_ctx.cublaslt, op, &g->alpha, A, la, B, lb, &g->beta, C, lc, C, lc, NULL, NULL, 0,
                               cuda_stream(be)));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(lc));
    cublasCheck(cublasLtMatmulDescDestroy(op));
}

// Run the desc with its A, B and C from `ops`, each a typed buffer (GemmOperands, engine/gemm_desc.h): a 2-byte bf16
// operand (the weight's compute copy; a 2-byte activation; an output gradient stored 2-byte by
// the kernel that produced it) goes to cuBLASLt as it is; an f32 one (an activation or an output gradient in f32 words)
// is converted into bf16 scratch first. C in 2-byte bf16 (a forward output into a 2-byte activation; an input gradient
// stored 2-byte, with the desc's beta 0) is a bf16 D: cuBLASLt rounds the f32 product in its own store; else an f32 D.
// aux: GELU_AUX_BIAS's.
static void gemm_lt_run_operands(const Backend* be, const GemmLtDesc* d, const GemmOperands* ops, const uint16_t* bias,
                                 void* aux = NULL) {
    const GemmDesc* g = &d->g;
    Buf A, B, C;
    gemm_desc_operands(g, ops, &A, &B, &C);
    int a_f32 = A.dt == DTYPE_F32, b_f32 = B.dt == DTYPE_F32;
    RR_ASSERT((a_f32 || A.dt == DTYPE_BF16) && (b_f32 || B.dt == DTYPE_BF16) &&
              (C.dt == DTYPE_F32 || C.dt == DTYPE_BF16) && "a GEMM operand in f32 or bf16");
    cudaDataType ctype = C.dt == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    size_t na = a_f32 ? lt_span(g->opA ? g->k : g->m, g->opA ? g->m : g->k, g->lda) : 0;
    size_t nb = b_f32 ? lt_span(g->opB ? g->n : g->k, g->opB ? g->k : g->n, g->ldb) : 0;
    /* the bias 2-byte (its type: the compute copy AdamW writes, handed over from a bf16 Buf by the table's edge): a
     * bf16 D takes it as it is; an f32 D (the f32-word bf16 table) takes it in f32, widened (exact) after the operands */
    int bias32 = bias && ctype == CUDA_R_32F;
    size_t boff = (na + nb + 7) & ~(size_t)7; /* 16-byte aligned f32 words */
    uint16_t* s = bf16_scratch(bias32 ? boff + 2 * (size_t)g->m : na + nb);
    const void* bias_d = bias;
    if (bias32) {
        bf16_to_f32_cuda((float*)(s + boff), bias, (size_t)g->m, cuda_stream(be));
        bias_d = s + boff;
    }
    const uint16_t* a16 = a_f32 ? NULL : buf_bf16p(A);
    const uint16_t* b16 = b_f32 ? NULL : buf_bf16p(B);
    if (a_f32 && b_f32) { // one launch for both
        f32_to_bf16_2_cuda(s, buf_f32p(A), na, s + na, buf_f32p(B), nb, cuda_stream(be));
        a16 = s, b16 = s + na;
    } else if (a_f32) {
        f32_to_bf16_cuda(s, buf_f32p(A), na, cuda_stream(be));
        a16 = s;
    } else if (b_f32) {
        f32_to_bf16_cuda(s + na, buf_f32p(B), nb, cuda_stream(be));
        b16 = s + na;
    }
    gemm_lt_desc_run_cuda(be, d, a16, b16, C.p, bias_d, aux, ctype);
}

// column n of dout for the dbias column sum
struct Bf16RowsOf {
    const float* x;
    int ld;
    __device__ float operator()(int n, int c) const { return x[(size_t)n * ld + c]; }
};

// out = x W^T + b from the bf16 operands, f32, not rounded (k = 0: out = bias or 0, as the CPU's BLAS gives)
static void bf16_linear_unrounded(const Backend* be, float* out, const float* inp, const uint16_t* weight,
                                  const uint16_t* bias, int N, int C, int OC) {
    if (C == 0) {
        const float* b32 = NULL; // the bias widened (exact) into f32 words; no weight is read (k = 0)
        if (bias) {
            float* t = (float*)bf16_scratch(2 * (size_t)OC);
            bf16_to_f32_cuda(t, bias, (size_t)OC, cuda_stream(be));
            b32 = t;
        }
        cuda_linear_forward(be, out, inp, NULL, b32, N, C, OC);
        return;
    }
    GemmOperands ops = {};
    ops.ptr[GEMM_PTR_INP] = buf_f32(inp);
    ops.ptr[GEMM_PTR_WEIGHT] = buf_bf16(weight);
    ops.ptr[GEMM_PTR_OUT] = buf_f32(out);
    GemmLtDesc d = gemm_lt_desc_linear_forward(N, C, OC, bias != NULL);
    gemm_lt_run_operands(be, &d, &ops, bias);
}

void cuda_bf16_linear_forward(const Backend* be, float* out, const float* inp, const uint16_t* weight, const uint16_t* bias, int N, int C,
                              int OC) {
    if (N == 0 || OC == 0) return;
    bf16_linear_unrounded(be, out, inp, weight, bias, N, C, OC);
    round_bf16_cuda(out, out, (size_t)N * OC, cuda_stream(be));
}

// Linear then GELU (engine.h's contract for bf16 tables; the CPU's is engine/cpu/bf16.c): one cublasLtMatmul
// with the GELU_AUX_BIAS epilogue writes gelu(pre) into out and the f32 pre-activation pre = x W^T + b
// into pre (Aux, leading dimension OC); both are then rounded to bf16. cuBLASLt needs a bias and an Aux
// leading dimension that is a multiple of 8: otherwise (and for C = 0) the same values come from the
// bias epilogue into pre and the GELU kernel, unrounded in between. The backward reads the rounded pre
// (gelu_backward's kernel; the DGELU epilogue is not used: the model's backward adds into dfc1, which
// the split backward's W pass reads).
void cuda_bf16_linear_gelu_forward(const Backend* be, float* out, float* pre, const float* inp, const uint16_t* weight,
                                   const uint16_t* bias, int N, int C, int OC) {
    if (N == 0 || OC == 0) return;
    size_t n = (size_t)N * OC;
    if (C > 0 && bias && OC % 8 == 0) {
        GemmOperands ops = {};
        ops.ptr[GEMM_PTR_INP] = buf_f32(inp);
        ops.ptr[GEMM_PTR_WEIGHT] = buf_bf16(weight);
        ops.ptr[GEMM_PTR_OUT] = buf_f32(out);
        GemmLtDesc d = gemm_lt_desc_linear_gelu_forward(N, C, OC);
        gemm_lt_run_operands(be, &d, &ops, bias, pre);
    } else {
        bf16_linear_unrounded(be, pre, inp, weight, bias, N, C, OC);
        cuda_bf16_gelu_forward(be, out, pre, n); // out rounded in the GELU's store
        round_bf16_cuda(pre, pre, n, cuda_stream(be));
        return;
    }
    round_bf16_2_cuda(out, pre, n, cuda_stream(be)); // both stored values, one launch
}

// linear_backward of both bf16 tables: inp 2-byte (2-byte activations) or f32 words, as its dtype says
static void linear_backward_tables(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, Buf inp,
                                   const uint16_t* weight, int N, int C, int OC) {
    if (N == 0 || OC == 0) return;
    GemmOperands ops = {};
    ops.ptr[GEMM_PTR_INP] = inp;
    ops.ptr[GEMM_PTR_WEIGHT] = buf_bf16(weight);
    ops.ptr[GEMM_PTR_DOUT] = buf_f32(dout);
    ops.ptr[GEMM_PTR_DINP] = buf_f32(dinp);
    ops.ptr[GEMM_PTR_DWEIGHT] = buf_f32(dweight);
    if (dinp && C > 0) {
        GemmLtDesc d = gemm_lt_desc_linear_backward_input(N, C, OC);
        gemm_lt_run_operands(be, &d, &ops, NULL);
    }
    if (dweight && C > 0) {
        GemmLtDesc d = gemm_lt_desc_linear_backward_weight(N, C, OC);
        gemm_lt_run_operands(be, &d, &ops, NULL);
    }
    // the f32 dout, as the CPU reference (engine/cpu/bf16.c)
    if (dbias) column_sum_cuda(dbias, Bf16RowsOf{dout, OC}, N, OC, cuda_stream(be));
}

void cuda_bf16_linear_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const uint16_t* weight, int N, int C, int OC) {
    linear_backward_tables(be, dinp, dweight, dbias, dout, buf_f32(inp), weight, N, C, OC);
}

// ---- attention: cuDNN's or the own tensor-core kernel's, each rounding its own store (no pass) ----------

void cuda_bf16_attention_forward(const Backend* be, float* out, float* lse, const float* q, const float* k, const float* v,
                                 const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal) {
    // cuDNN's fused attention where it takes the shape (attention_cudnn.cu, self-checked on first use); its
    // output is bf16 already. Multi-head only: grouped-query attention and separate q / kv strides never ask
    // cuDNN (counted as cudnn_not_tried). Else the own tensor-core kernel (flash_attention.cu, GQA-ready), which
    // rounds its store.
    if (Hkv == H && ld_q == ld_kv) {
        if (cuda_cudnn_attention_forward(be, buf_f32(out), lse, buf_f32(q), buf_f32(k), buf_f32(v), cu_seqlens, S, T, H, d,
                                         ld_q, causal))
            return;
    } else {
        cuda_attention_path_note(RR_ATTN_CUDNN_NOT_TRIED);
    }
    cuda_flash_attention_forward_f32(cuda_stream(be), out, lse, q, k, v, cu_seqlens, S, T, H, Hkv, d, ld_q, ld_kv, H * d,
                                     causal, 1);
    cuda_attention_path_note(RR_ATTN_OWN_TC_FWD);
}

// The backward: cuDNN's where it takes the shape (attention_cudnn.cu: multi-head, head dims that are multiples
// of 16), else the own tensor-core kernel (GQA-ready).
void cuda_bf16_attention_backward(const Backend* be, float* dq, float* dk, float* dv, const float* dout, const float* out,
                                  const float* lse, const float* q, const float* k, const float* v,
                                  const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal) {
    if (Hkv == H && ld_q == ld_kv) {
        if (cuda_cudnn_attention_backward(be, dq, dk, dv, buf_f32(dout), buf_f32(out), lse, buf_f32(q), buf_f32(k),
                                          buf_f32(v), cu_seqlens, S, T, H, d, ld_q, causal, NULL, NULL, NULL, 0))
            return;
    } else {
        cuda_attention_path_note(RR_ATTN_CUDNN_NOT_TRIED);
    }
    cuda_flash_attention_backward_f32(cuda_stream(be), dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T, H, Hkv, d,
                                      ld_q, ld_kv, H * d, causal);
    cuda_attention_path_note(RR_ATTN_OWN_TC_BWD);
}

// ---- 2-byte activations (Bufs of DTYPE_BF16 on the bf16 table) --------------------------------------------
// The bf16 table's numerics with its activations stored as 2-byte bf16 words (engine.h lists which pointer of
// each slot is one): the GEMMs hand the activation operand to cuBLASLt as it is and let cuBLASLt store the
// forward's output in bf16, so no conversion or rounding pass runs in a forward GEMM (a biased one reads its bias as the
// 2-byte compute copy AdamW wrote: Backend.weight_dtype). Its backward GEMMs and attention backward read 2-byte output
// gradients stored by their producers (bf16 gradient Bufs: the *_b16 functions here and in norm.cu, elementwise.cu, rope.cu,
// clip_ops.cu); linear_backward with an f32 dout (converted to bf16 scratch) remains for the gaps (docs/cuda.md,
// "2-byte output gradients"). What else remains: a cuDNN run checked against the own kernel widens its inputs into f32
// scratch.

static __global__ void bf16_to_f32_kernel(float* out, const uint16_t* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = rr_bf16_to_f32(inp[i]);
}
static void bf16_to_f32_cuda(float* out, const uint16_t* inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    bf16_to_f32_kernel<<<ceil_div_z(n, BF16_BLOCK), BF16_BLOCK, 0, stream>>>(out, inp, n);
    cudaCheck(cudaGetLastError());
}
void cuda_from_bf16(const Backend* be, float* out, const uint16_t* inp, size_t n) { bf16_to_f32_cuda(out, inp, n, cuda_stream(be)); }

// out (N rows of OC) = the bias in every row, 2-byte (a product over k = 0; the bias is 2-byte: weight_dtype)
static __global__ void bias_rows_bf16_kernel(uint16_t* out, const uint16_t* bias, size_t n, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = bias[i % OC];
}

void cuda_bf16a_linear_forward(const Backend* be, uint16_t* out, const uint16_t* inp, const uint16_t* weight, const uint16_t* bias, int N, int C,
                               int OC) {
    if (N == 0 || OC == 0) return;
    if (C == 0) { // out = bias or 0, stored as bf16 (no GEMM: k = 0), as the CPU's BLAS gives
        if (!bias) {
            cudaCheck(cudaMemsetAsync(out, 0, (size_t)N * OC * sizeof(uint16_t), cuda_stream(be)));
            return;
        }
        size_t n = (size_t)N * OC;
        bias_rows_bf16_kernel<<<ceil_div_z(n, BF16_BLOCK), BF16_BLOCK, 0, cuda_stream(be)>>>(out,
                                                                                      bias, n, OC);
        cudaCheck(cudaGetLastError());
        return;
    }
    GemmOperands ops = {};
    ops.ptr[GEMM_PTR_INP] = buf_bf16(inp);
    ops.ptr[GEMM_PTR_WEIGHT] = buf_bf16(weight);
    ops.ptr[GEMM_PTR_OUT] = buf_bf16(out);
    GemmLtDesc d = gemm_lt_desc_linear_forward(N, C, OC, bias != NULL);
    gemm_lt_run_operands(be, &d, &ops, bias);
}

void cuda_bf16a_linear_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const uint16_t* inp,
                                const uint16_t* weight, int N, int C, int OC) {
    linear_backward_tables(be, dinp, dweight, dbias, dout, buf_bf16(inp), weight, N, C, OC);
}

// linear_backward_b16 (engine.h): the GEMMs read the 2-byte output gradient dout16 as it is (no conversion: its producer
// stored rr_f32_to_bf16 of the f32 value the converting path would narrow, so the products are the same); dbias sums
// the f32 dout (the CPU reference's). dinp16: the input gradient stored as a 2-byte bf16 D (beta 0: overwritten, not
// added), the value rr_f32_to_bf16 gives of the f32 sum over a zeroed dinp. set: the f32 dinp written by the GEMM's
// beta 0 too (its first write: no memset before it; the f32 sum over a zeroed dinp), else added (beta 1).
void cuda_bf16a_linear_backward_b16(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, float* dbias,
                                    const uint16_t* dout16, const float* dout, const uint16_t* inp, const uint16_t* weight, int N,
                                    int C, int OC, int set) {
    RR_ASSERT(!(dinp && dinp16) && (!dbias || dout) && dout16);
    if (set && dinp && N > 0 && C > 0 && OC == 0) // an empty product written: dinp = 0
        cudaCheck(cudaMemsetAsync(dinp, 0, (size_t)N * C * sizeof(float), cuda_stream(be)));
    if (N == 0 || OC == 0) return;
    GemmOperands ops = {};
    ops.ptr[GEMM_PTR_INP] = buf_bf16(inp);
    ops.ptr[GEMM_PTR_WEIGHT] = buf_bf16(weight);
    ops.ptr[GEMM_PTR_DOUT] = buf_bf16(dout16);
    ops.ptr[GEMM_PTR_DINP] = dinp16 ? buf_bf16(dinp16) : buf_f32(dinp);
    ops.ptr[GEMM_PTR_DWEIGHT] = buf_f32(dweight);
    if (dinp16 && C == 0) return;
    if ((dinp || dinp16) && C > 0) {
        GemmLtDesc d = gemm_lt_desc_linear_backward_input(N, C, OC);
        if (dinp16 || set) d.g.beta = 0.0f; // written, not added: C is not read
        gemm_lt_run_operands(be, &d, &ops, NULL);
    }
    if (dweight && C > 0) {
        GemmLtDesc d = gemm_lt_desc_linear_backward_weight(N, C, OC);
        gemm_lt_run_operands(be, &d, &ops, NULL);
    }
    if (dbias) column_sum_cuda(dbias, Bf16RowsOf{dout, OC}, N, OC, cuda_stream(be));
}

// Linear then GELU with 2-byte activations (engine.h's contract for bf16 tables): one cublasLtMatmul with the
// GELU_AUX_BIAS epilogue and a bf16 D and Aux: out = bf16(gelu(pre)) and pre = bf16(x W^T + b) from the f32 result,
// the values the bf16 table stores after its rounding pass. Where cuBLASLt's epilogue does not apply (no bias, an
// Aux leading dimension not a multiple of 8, C = 0) the f32 pre-activation goes through f32 scratch (grown on first
// use, as the attention's) into one kernel that stores both: the bf16 table's values.
static float* act_f32_scratch(size_t elems) {
    if (elems > cuda_ctx.act_f32_scratch_elems) {
        if (cuda_ctx.act_f32_scratch) cuda_free_tracked(cuda_ctx.act_f32_scratch);
        cuda_malloc_tracked((void**)&cuda_ctx.act_f32_scratch, elems * sizeof(float));
        cuda_ctx.act_f32_scratch_elems = elems;
    }
    return cuda_ctx.act_f32_scratch;
}
static __global__ void gelu_f32_to_bf16_2_kernel(uint16_t* out, uint16_t* pre16, const float* pre, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = rr_f32_to_bf16(rr_gelu_tanh(pre[i]));
        pre16[i] = rr_f32_to_bf16(pre[i]);
    }
}
void cuda_bf16a_linear_gelu_forward(const Backend* be, uint16_t* out, uint16_t* pre, const uint16_t* inp, const uint16_t* weight,
                                    const uint16_t* bias, int N, int C, int OC) {
    if (N == 0 || OC == 0) return;
    size_t n = (size_t)N * OC;
    if (C > 0 && bias && OC % 8 == 0) {
        GemmOperands ops = {};
        ops.ptr[GEMM_PTR_INP] = buf_bf16(inp);
        ops.ptr[GEMM_PTR_WEIGHT] = buf_bf16(weight);
        ops.ptr[GEMM_PTR_OUT] = buf_bf16(out);
        GemmLtDesc d = gemm_lt_desc_linear_gelu_forward(N, C, OC);
        gemm_lt_run_operands(be, &d, &ops, bias, pre);
        return;
    }
    // the f32 pre-activation: the bf16 table's unrounded product, from the 2-byte input widened into the scratch
    float* w = act_f32_scratch(n + (size_t)N * C);
    float *p32 = w, *x32 = w + n;
    bf16_to_f32_cuda(x32, inp, (size_t)N * C, cuda_stream(be));
    bf16_linear_unrounded(be, p32, x32, weight, bias, N, C, OC);
    gelu_f32_to_bf16_2_kernel<<<ceil_div_z(n, BF16_BLOCK), BF16_BLOCK, 0, cuda_stream(be)>>>(out, pre,
                                                                                          p32, n);
    cudaCheck(cudaGetLastError());
}

// f32 scratch for the attention calls that widen their inputs (reserved by BackendDevice.reserve; grows only)
static float* attn_f32_scratch(size_t elems) {
    if (elems > cuda_ctx.attn_f32_scratch_elems) {
        if (cuda_ctx.attn_f32_scratch) cuda_free_tracked(cuda_ctx.attn_f32_scratch);
        cuda_malloc_tracked((void**)&cuda_ctx.attn_f32_scratch, elems * sizeof(float));
        cuda_ctx.attn_f32_scratch_elems = elems;
    }
    return cuda_ctx.attn_f32_scratch;
}
// values from the first of T rows of stride ld to the last of their W (the ViT's q, k, v are views of one qkv row)
static size_t rows_span(int T, int ld, int W) { return T <= 0 ? 0 : (size_t)(T - 1) * ld + W; }

// q, k, v (2-byte) widened into f32 scratch with their strides, and room for an f32 out of T H d values after them:
// one pass over the whole qkv rows where they are views of one buffer (the ViT's: k = q + H d, v = k + H d, one
// stride), else one per tensor (the LM's separate q, k, v). Returns the scratch; *q32, *k32, *v32, *o32 point in it.
static float* widen_qkv(const uint16_t* q16, const uint16_t* k16, const uint16_t* v16, int T, int H, int Hkv, int d,
                        int ld_q, int ld_kv, float** q32, float** k32, float** v32, float** o32, cudaStream_t st) {
    size_t no = (size_t)T * H * d;
    if (Hkv == H && ld_q == ld_kv && k16 == q16 + (size_t)H * d && v16 == k16 + (size_t)H * d) {
        size_t n = rows_span(T, ld_q, 3 * H * d);
        float* w = attn_f32_scratch(n + no);
        bf16_to_f32_cuda(w, q16, n, st);
        *q32 = w, *k32 = w + (size_t)H * d, *v32 = w + 2 * (size_t)H * d, *o32 = w + n;
        return w;
    }
    size_t nq = rows_span(T, ld_q, H * d), nkv = rows_span(T, ld_kv, Hkv * d);
    float* w = attn_f32_scratch(nq + 2 * nkv + no);
    *q32 = w, *k32 = w + nq, *v32 = w + nq + nkv, *o32 = w + nq + 2 * nkv;
    bf16_to_f32_cuda(*q32, q16, nq, st);
    bf16_to_f32_cuda(*k32, k16, nkv, st);
    bf16_to_f32_cuda(*v32, v16, nkv, st);
    return w;
}


// out (2-byte rows of stride ldo) = bf16(out + in) for T rows of W f32 values (stride ldi)
static __global__ void add_f32_rows_b16_kernel(uint16_t* out, int ldo, const float* in, int ldi, int T, int W) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * W) return;
    size_t r = i / W, c = i % W, o = r * (size_t)ldo + c;
    out[o] = rr_f32_to_bf16(rr_bf16_to_f32(out[o]) + in[r * (size_t)ldi + c]);
}

void cuda_bf16a_attn_reserve(const AttnReserve* attn, int n_attn) {
    size_t most = 0;
    for (int i = 0; i < n_attn; i++) {
        if (attn[i].act != DTYPE_BF16) continue; // f32-word calls read their inputs as they are
        size_t e = (size_t)attn[i].max_T * (3 * (size_t)attn[i].ld_qkv + (size_t)attn[i].H * attn[i].d);
        if (e > most) most = e;
    }
    if (most) (void)attn_f32_scratch(most);
}

// cuDNN's fused attention on the 2-byte inputs where it takes the shape (multi-head; attention_cudnn.cu packs them by
// a copy), else the own tensor-core kernel's bf16 instantiation (bf16 q, k, v in, bf16 out, no conversion). A cuDNN
// run that is checked against the own kernel (a plan's first; every one under RRFP_CUDNN_STRICT=1) goes through the
// bf16 table's f32 entry on inputs widened (exact) into scratch, which checks it, and its output narrowed (exact):
// the same values, with the bf16 table's check.
void cuda_bf16a_attention_forward(const Backend* be, uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                  const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal) {
    cudaStream_t st = cuda_stream(be);
    uint16_t* o16 = out;
    const uint16_t *q16 = q, *k16 = k, *v16 = v;
    if (Hkv == H && ld_q == ld_kv) {
        int r = cuda_cudnn_attention_forward(be, buf_bf16(o16), lse, buf_bf16(q16), buf_bf16(k16), buf_bf16(v16), cu_seqlens,
                                             S, T, H, d, ld_q, causal);
        if (r == 1) return;
        if (r < 0) {
            size_t no = (size_t)T * H * d;
            float *q32, *k32, *v32, *o32;
            widen_qkv(q16, k16, v16, T, H, Hkv, d, ld_q, ld_kv, &q32, &k32, &v32, &o32, st);
            cuda_bf16_attention_forward(be, o32, lse, q32, k32, v32, cu_seqlens, S, T, H, Hkv, d, ld_q, ld_kv, causal);
            f32_to_bf16_cuda(o16, o32, no, st);
            return;
        }
    } else {
        cuda_attention_path_note(RR_ATTN_CUDNN_NOT_TRIED);
    }
    cuda_flash_attention_forward_bf16(st, (__nv_bfloat16*)o16, lse, (const __nv_bfloat16*)q16, (const __nv_bfloat16*)k16,
                                      (const __nv_bfloat16*)v16, cu_seqlens, S, T, H, Hkv, d, ld_q, ld_kv, H * d, causal);
    cuda_attention_path_note(RR_ATTN_OWN_TC_FWD);
}

// cuDNN's backward on the 2-byte inputs where it takes the shape (no widening); else the own kernel's bf16-input /
// f32-gradient entry (dout narrowed: one pass); a checked cuDNN run (as the forward) through the bf16 table's f32
// entry on inputs widened (exact) into f32 scratch.
void cuda_bf16a_attention_backward(const Backend* be, float* dq, float* dk, float* dv, const float* dout, const uint16_t* out,
                                   const float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                   const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal) {
    cudaStream_t st = cuda_stream(be);
    const uint16_t *o16 = out, *q16 = q, *k16 = k, *v16 = v;
    int r = 0; // 1: cuDNN ran; -1: a checked cuDNN run, through the f32 entry; 0: the own kernel
    if (Hkv == H && ld_q == ld_kv)
        r = cuda_cudnn_attention_backward(be, dq, dk, dv, buf_f32(dout), buf_bf16(o16), lse, buf_bf16(q16), buf_bf16(k16),
                                          buf_bf16(v16), cu_seqlens, S, T, H, d, ld_q, causal, NULL, NULL, NULL, 0);
    else
        cuda_attention_path_note(RR_ATTN_CUDNN_NOT_TRIED);
    if (r == 1) return;
    if (r == 0) {
        // the own kernel's bf16-input / f32-gradient entry (flash_attention.cu) on the 2-byte q, k, v and out as they are; only
        // dout, an f32 gradient, is narrowed to bf16 (one pass of T H d values: the kernel rounds dO to bf16 on load in
        // every storage, so the values are the same), into the widening scratch (reserved for more than that)
        size_t no = (size_t)T * H * d;
        uint16_t* do16 = (uint16_t*)attn_f32_scratch((no + 1) / 2);
        f32_to_bf16_cuda(do16, dout, no, st);
        cuda_flash_attention_backward_bf16_f32grad(st, dq, dk, dv, (const __nv_bfloat16*)do16, (const __nv_bfloat16*)o16, lse,
                                                   (const __nv_bfloat16*)q16, (const __nv_bfloat16*)k16,
                                                   (const __nv_bfloat16*)v16, cu_seqlens, S, T, H, Hkv, d, ld_q, ld_kv, H * d,
                                                   ld_q, ld_kv, causal);
        cuda_attention_path_note(RR_ATTN_OWN_TC_BWD);
        return;
    }
    // a checked cuDNN run (a plan's first; every one under RRFP_CUDNN_STRICT=1): the bf16 table's f32 entry, which
    // compares cuDNN with the own kernel, on inputs widened (exact) into scratch
    float *q32, *k32, *v32, *o32;
    widen_qkv(q16, k16, v16, T, H, Hkv, d, ld_q, ld_kv, &q32, &k32, &v32, &o32, st);
    bf16_to_f32_cuda(o32, o16, (size_t)T * H * d, st);
    cuda_bf16_attention_backward(be, dq, dk, dv, dout, o32, lse, q32, k32, v32, cu_seqlens, S, T, H, Hkv, d, ld_q, ld_kv,
                                 causal);
}

// attention_backward with a 2-byte dout (engine.h, "2-byte output gradients"): dout16 2-byte (stored so by its producer, the o-projection's /
// attn.out's input-gradient GEMM); dq, dk, dv f32 with optional 2-byte mirrors dq16, dk16, dv16 (stride ld16), or dv
// 2-byte only (dv NULL, dv16 = bf16(dv16 + the f32 gradient) in the kernel's own store: zeroed, it gets rr_f32_to_bf16
// of attention_backward's dv). cuDNN where it takes the shape (dout packed as it is; its bf16 gradients added into the
// f32 ones with their mirrors, or into dv16); else the own kernel's bf16-input / f32-gradient entry with the 2-byte
// stores. A checked cuDNN run (a plan's first) goes through the bf16 table's f32 entry on widened inputs (f32 dv in
// scratch where dv is 2-byte only), its 2-byte results narrowed after (once per plan).
static __global__ void narrow_rows_kernel(uint16_t* out, int ldo, const float* in, int ldi, int T, int W) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * W) return;
    size_t r = i / W, c = i % W;
    out[r * (size_t)ldo + c] = rr_f32_to_bf16(in[r * (size_t)ldi + c]);
}
void cuda_bf16a_attention_backward_b16(const Backend* be, float* dq, float* dk, float* dv, uint16_t* dq16, uint16_t* dk16,
                                       uint16_t* dv16, int ld16, const uint16_t* dout16, const uint16_t* out, const float* lse,
                                       const uint16_t* q, const uint16_t* k, const uint16_t* v, const int* cu_seqlens, int S, int T,
                                       int H, int Hkv, int d, int ld_q, int ld_kv, int causal) {
    cudaStream_t st = cuda_stream(be);
    const uint16_t *o16 = out, *q16 = q, *k16 = k, *v16 = v;
    RR_ASSERT(dv || !(dq16 || dk16) || !dv16); /* dv 2-byte only: no other mirror */
    RR_ASSERT((!dq16 || dq) && (!dk16 || dk));
    int r = 0;
    if (Hkv == H && ld_q == ld_kv)
        r = cuda_cudnn_attention_backward(be, dq, dk, dv, buf_bf16(dout16), buf_bf16(o16), lse, buf_bf16(q16), buf_bf16(k16),
                                          buf_bf16(v16), cu_seqlens, S, T, H, d, ld_q, causal, dq16, dk16, dv16, ld16);
    else
        cuda_attention_path_note(RR_ATTN_CUDNN_NOT_TRIED);
    if (r == 1) return;
    if (r == 0) {
        if (dv16 && !dv)
            cuda_flash_attention_backward_bf16_f32grad_dv16(st, dq, dk, (__nv_bfloat16*)dv16, ld16,
                                                            (const __nv_bfloat16*)dout16, (const __nv_bfloat16*)o16, lse,
                                                            (const __nv_bfloat16*)q16, (const __nv_bfloat16*)k16,
                                                            (const __nv_bfloat16*)v16, cu_seqlens, S, T, H, Hkv, d, ld_q,
                                                            ld_kv, H * d, ld_q, ld_kv, causal);
        else
            cuda_flash_attention_backward_bf16_f32grad_m16(st, dq, dk, dv, (__nv_bfloat16*)dq16, (__nv_bfloat16*)dk16,
                                                           (__nv_bfloat16*)dv16, ld16, (const __nv_bfloat16*)dout16,
                                                           (const __nv_bfloat16*)o16, lse, (const __nv_bfloat16*)q16,
                                                           (const __nv_bfloat16*)k16, (const __nv_bfloat16*)v16, cu_seqlens,
                                                           S, T, H, Hkv, d, ld_q, ld_kv, H * d, ld_q, ld_kv, causal);
        cuda_attention_path_note(RR_ATTN_OWN_TC_BWD);
        return;
    }
    // the checked cuDNN run: the f32 entry on widened q, k, v, out and dout (dv in f32 scratch where it is 2-byte only,
    // then added into dv16 with the 2-byte add's rounding), the mirrors narrowed after
    size_t no = (size_t)T * H * d, nv = (size_t)T * Hkv * d;
    float *q32, *k32, *v32, *o32;
    widen_qkv(q16, k16, v16, T, H, Hkv, d, ld_q, ld_kv, &q32, &k32, &v32, &o32, st);
    bf16_to_f32_cuda(o32, o16, no, st);
    int dv_only16 = dv16 && !dv;
    size_t nv32 = rows_span(T, ld_kv, Hkv * d); /* dv in f32 with dk's stride, as the f32 entry takes it */
    float* extra = act_f32_scratch(no + (dv_only16 ? nv32 : 0));
    float *do32 = extra, *dv32 = dv_only16 ? extra + no : dv;
    bf16_to_f32_cuda(do32, dout16, no, st);
    if (dv_only16) cudaCheck(cudaMemsetAsync(dv32, 0, nv32 * sizeof(float), st));
    cuda_bf16_attention_backward(be, dq, dk, dv32, do32, o32, lse, q32, k32, v32, cu_seqlens, S, T, H, Hkv, d, ld_q, ld_kv,
                                 causal);
    if (dv_only16) {
        add_f32_rows_b16_kernel<<<ceil_div_z(nv, BF16_BLOCK), BF16_BLOCK, 0, st>>>(dv16, ld16, dv32, ld_kv, T, Hkv * d);
        cudaCheck(cudaGetLastError());
        return;
    }
    uint16_t* m[3] = {dq16, dk16, dv16};
    const float* f[3] = {dq, dk, dv};
    int ldf[3] = {ld_q, ld_kv, ld_kv}, W[3] = {H * d, Hkv * d, Hkv * d};
    for (int i = 0; i < 3; i++)
        if (m[i]) {
            narrow_rows_kernel<<<ceil_div_z((size_t)T * W[i], BF16_BLOCK), BF16_BLOCK, 0, st>>>(m[i], ld16, f[i], ldf[i], T,
                                                                                               W[i]);
            cudaCheck(cudaGetLastError());
        }
}
