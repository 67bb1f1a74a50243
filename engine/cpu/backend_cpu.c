/* backend_cpu.c — the CPU backend: its device (host memory) and its ops tables (the cpu_* ops of engine/cpu/).
 * Memory is 64-byte aligned (one cache line, one AVX-512 vector) and allocation failure is fatal with
 * the size named, like every other allocation in the engine. */
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"

static void* cpu_alloc(size_t bytes) {
    void* p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        rr_die("out of memory: cannot allocate %.1f MiB of host memory", (double)bytes / (1 << 20));
    return p;
}
static void cpu_free(void* p) { free(p); }
static void cpu_memset0(const Backend* be, void* p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_copy(const Backend* be, void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_synchronize(const Backend* be) { (void)be; }
static void* cpu_stream_create(void) { return NULL; }
static void cpu_stream_destroy(void* stream) { (void)stream; }
/* events: every op has completed when it returns */
static void* cpu_event_create(void) { return NULL; }
static void cpu_event_record(const Backend* be, void* ev) { (void)be, (void)ev; }
static int cpu_event_query(void* ev) { (void)ev; return 1; }
static void cpu_event_wait(const Backend* be, void* ev) { (void)be, (void)ev; }
static void cpu_event_destroy(void* ev) { (void)ev; }
static void cpu_reserve(const Backend* be, size_t gemm_elems, size_t sumsq_n, const AttnReserve* attn, int n_attn) {
    (void)be, (void)gemm_elems, (void)sumsq_n, (void)attn, (void)n_attn;
}
/* the step end's ops are engine/adamw.c's, callable on host buffers without a table */
static double cpu_sum_squares(const Backend* be, const float* x, size_t n) {
    (void)be;
    return sum_squares(x, n);
}
static void cpu_adamw_update(const Backend* be, float* param, const float* grad, float* m, float* v, size_t n,
                             const AdamWConfig* cfg, int t, int decay) {
    (void)be;
    adamw_update(param, grad, m, v, n, cfg, t, decay);
}

/* Linear then GELU (engine.h): the two ops, so the fp32 results are those of the unfused model. */
void cpu_linear_gelu_forward(const Backend* be, float* out, float* pre, const float* inp, const float* weight, const float* bias,
                             int N, int C, int OC) {
    cpu_linear_forward(be, pre, inp, weight, bias, N, C, OC);
    cpu_gelu_forward(be, out, pre, (size_t)N * OC);
}

/* The tables' entries: every CPU buffer is f32 words (bf16 values held in f32 words under bf16), so a
 * typed buffer reaches the cpu_* ops as its f32 address (buf_f32p refuses any other dtype). */
static void buf_cpu_linear_forward(const Backend* be, Buf out, Buf inp, Buf weight, Buf bias, int N, int C, int OC) {
    cpu_linear_forward(be, buf_f32p(out), buf_f32p(inp), buf_f32p(weight), buf_f32p(bias), N, C, OC);
}
static void buf_cpu_linear_gelu_forward(const Backend* be, Buf out, Buf pre, Buf inp, Buf weight, Buf bias, int N,
                                        int C, int OC) {
    cpu_linear_gelu_forward(be, buf_f32p(out), buf_f32p(pre), buf_f32p(inp), buf_f32p(weight), buf_f32p(bias), N, C,
                            OC);
}
/* The CPU tables keep f32 gradients: a 2-byte gradient or mirror (engine.h, "2-byte output gradients") is refused
 * here, loudly, and set = 1 is the f32 dinp zeroed before the adding op. */
#define CPU_NO_MIRROR(p) RR_ASSERT(!(p) && "a 2-byte gradient mirror on a CPU table (f32 gradients only)")
static float* cpu_set_dinp(Buf dinp, int set, int N, int C) {
    float* d = buf_f32p(dinp);
    if (set && d) memset(d, 0, (size_t)N * C * sizeof(float));
    return d;
}
static void buf_cpu_linear_backward(const Backend* be, Buf dinp, float* dweight, float* dbias, Buf dout,
                                    const float* dout32, Buf inp, Buf weight, int N, int C, int OC, int set) {
    (void)dout32; /* dout is f32 here: dbias sums it */
    cpu_linear_backward(be, cpu_set_dinp(dinp, set, N, C), dweight, dbias, buf_f32p(dout), buf_f32p(inp),
                        buf_f32p(weight), N, C, OC);
}
static void buf_cpu_layernorm_forward(const Backend* be, Buf out, float* mean, float* rstd, Buf inp,
                                      const float* weight, const float* bias, int N, int C) {
    cpu_layernorm_forward(be, buf_f32p(out), mean, rstd, buf_f32p(inp), weight, bias, N, C);
}
static void buf_cpu_layernorm_backward(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, float* dbias,
                                       const float* dout, Buf inp, const float* weight, const float* mean,
                                       const float* rstd, int N, int C) {
    CPU_NO_MIRROR(dinp16);
    cpu_layernorm_backward(be, dinp, dweight, dbias, dout, buf_f32p(inp), weight, mean, rstd, N, C);
}
static void buf_cpu_rmsnorm_forward(const Backend* be, Buf out, float* rstd, Buf inp, const float* weight, int N, int C,
                                    double eps) {
    cpu_rmsnorm_forward(be, buf_f32p(out), rstd, buf_f32p(inp), weight, N, C, eps);
}
static void buf_cpu_rmsnorm_backward(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, const float* dout,
                                     Buf inp, const float* weight, const float* rstd, int N, int C) {
    CPU_NO_MIRROR(dinp16);
    cpu_rmsnorm_backward(be, dinp, dweight, dout, buf_f32p(inp), weight, rstd, N, C);
}
static void buf_cpu_gelu_forward(const Backend* be, Buf out, Buf inp, size_t n) {
    cpu_gelu_forward(be, buf_f32p(out), buf_f32p(inp), n);
}
static void buf_cpu_gelu_backward(const Backend* be, float* dinp, const float* dout, Buf inp, size_t n) {
    cpu_gelu_backward(be, dinp, dout, buf_f32p(inp), n);
}
static void buf_cpu_swiglu_forward(const Backend* be, Buf out, Buf gate, Buf up, size_t n) {
    cpu_swiglu_forward(be, buf_f32p(out), buf_f32p(gate), buf_f32p(up), n);
}
static void buf_cpu_swiglu_backward(const Backend* be, Buf dgate, Buf dup, const float* dout, Buf gate, Buf up,
                                    size_t n) {
    cpu_swiglu_backward(be, buf_f32p(dgate), buf_f32p(dup), dout, buf_f32p(gate), buf_f32p(up), n);
}
static void buf_cpu_add_forward(const Backend* be, Buf out, Buf a, Buf b, size_t n) {
    cpu_add_forward(be, buf_f32p(out), buf_f32p(a), buf_f32p(b), n);
}
static void buf_cpu_rope_forward(const Backend* be, Buf x, const int* pos, int N, int H, int d, int ld,
                                 const RopeFreq* rf) {
    cpu_rope_forward(be, buf_f32p(x), pos, N, H, d, ld, rf);
}
static void buf_cpu_rope2d_forward(const Backend* be, Buf x, const int* pos_row, const int* pos_col, int N, int H,
                                   int d, int ld) {
    cpu_rope2d_forward(be, buf_f32p(x), pos_row, pos_col, N, H, d, ld);
}
static void buf_cpu_rope_qk_forward(const Backend* be, Buf q, Buf k, const int* pos, int N, int H, int Hkv, int d,
                                    int ld_q, int ld_k, const RopeFreq* rf) {
    cpu_rope_qk_forward(be, buf_f32p(q), buf_f32p(k), pos, N, H, Hkv, d, ld_q, ld_k, rf);
}
static void buf_cpu_rope2d_backward(const Backend* be, uint16_t* dx16, int ld16, float* dx, const int* pos_row,
                                    const int* pos_col, int N, int H, int d, int ld, int keep_f32) {
    CPU_NO_MIRROR(dx16);
    (void)ld16, (void)keep_f32;
    cpu_rope2d_backward(be, dx, pos_row, pos_col, N, H, d, ld);
}
static void buf_cpu_rope_qk_backward(const Backend* be, uint16_t* dq16, int ldq16, float* dq, uint16_t* dk16, int ldk16,
                                     float* dk, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k,
                                     const RopeFreq* rf, int keep_q, int keep_k) {
    CPU_NO_MIRROR(dq16 || dk16);
    (void)ldq16, (void)ldk16, (void)keep_q, (void)keep_k;
    cpu_rope_qk_backward(be, dq, dk, pos, N, H, Hkv, d, ld_q, ld_k, rf);
}
static void buf_cpu_embedding_forward(const Backend* be, Buf out, const int* ids, Buf table, int N, int C) {
    cpu_embedding_forward(be, buf_f32p(out), ids, buf_f32p(table), N, C);
}
static void buf_cpu_crossentropy_forward(const Backend* be, float* loss_sum, float* lse, Buf logits, const int* targets,
                                         int N, int V) {
    cpu_crossentropy_forward(be, loss_sum, lse, buf_f32p(logits), targets, N, V);
}
static void buf_cpu_crossentropy_backward(const Backend* be, Buf dlogits, Buf logits, const float* lse,
                                          const int* targets, float scale, int N, int V) {
    cpu_crossentropy_backward(be, buf_f32p(dlogits), buf_f32p(logits), lse, targets, scale, N, V);
}
static void buf_cpu_attention_forward(const Backend* be, Buf out, float* lse, Buf q, Buf k, Buf v,
                                      const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv,
                                      int causal) {
    cpu_attention_forward(be, buf_f32p(out), lse, buf_f32p(q), buf_f32p(k), buf_f32p(v), cu_seqlens, S, T, H, Hkv, d,
                          ld_q, ld_kv, causal);
}
static void buf_cpu_attention_backward(const Backend* be, float* dq, float* dk, float* dv, uint16_t* dq16,
                                       uint16_t* dk16, uint16_t* dv16, int ld16, Buf dout, Buf out, const float* lse,
                                       Buf q, Buf k, Buf v, const int* cu_seqlens, int S, int T, int H, int Hkv, int d,
                                       int ld_q, int ld_kv, int causal) {
    CPU_NO_MIRROR(dq16 || dk16 || dv16);
    (void)ld16;
    cpu_attention_backward(be, dq, dk, dv, buf_f32p(dout), buf_f32p(out), lse, buf_f32p(q), buf_f32p(k), buf_f32p(v), cu_seqlens,
                           S, T, H, Hkv, d, ld_q, ld_kv, causal);
}
static void buf_cpu_act_forward(const Backend* be, Buf out, Buf inp, size_t n, Act act) {
    cpu_act_forward(be, buf_f32p(out), buf_f32p(inp), n, act);
}
static void buf_cpu_act_backward(const Backend* be, float* dinp, uint16_t* dinp16, const float* dout, Buf inp, size_t n,
                                 Act act) {
    CPU_NO_MIRROR(dinp16);
    cpu_act_backward(be, dinp, dout, buf_f32p(inp), n, act);
}
static void buf_cpu_rows_gather_forward(const Backend* be, Buf out, const int* idx, const float* w, Buf table, int N,
                                        int K, int C) {
    cpu_rows_gather_forward(be, buf_f32p(out), idx, w, buf_f32p(table), N, K, C);
}
static void buf_cpu_bf16_linear_forward(const Backend* be, Buf out, Buf inp, Buf weight, Buf bias, int N, int C,
                                        int OC) {
    cpu_bf16_linear_forward(be, buf_f32p(out), buf_f32p(inp), buf_f32p(weight), buf_f32p(bias), N, C, OC);
}
static void buf_cpu_bf16_linear_gelu_forward(const Backend* be, Buf out, Buf pre, Buf inp, Buf weight, Buf bias, int N,
                                             int C, int OC) {
    cpu_bf16_linear_gelu_forward(be, buf_f32p(out), buf_f32p(pre), buf_f32p(inp), buf_f32p(weight), buf_f32p(bias), N,
                                 C, OC);
}
static void buf_cpu_bf16_linear_backward(const Backend* be, Buf dinp, float* dweight, float* dbias, Buf dout,
                                         const float* dout32, Buf inp, Buf weight, int N, int C, int OC, int set) {
    (void)dout32; /* dout is f32 here: dbias sums it */
    cpu_bf16_linear_backward(be, cpu_set_dinp(dinp, set, N, C), dweight, dbias, buf_f32p(dout), buf_f32p(inp),
                             buf_f32p(weight), N, C, OC);
}
static void buf_cpu_bf16_layernorm_forward(const Backend* be, Buf out, float* mean, float* rstd, Buf inp,
                                           const float* weight, const float* bias, int N, int C) {
    cpu_bf16_layernorm_forward(be, buf_f32p(out), mean, rstd, buf_f32p(inp), weight, bias, N, C);
}
static void buf_cpu_bf16_rmsnorm_forward(const Backend* be, Buf out, float* rstd, Buf inp, const float* weight, int N,
                                         int C, double eps) {
    cpu_bf16_rmsnorm_forward(be, buf_f32p(out), rstd, buf_f32p(inp), weight, N, C, eps);
}
static void buf_cpu_bf16_gelu_forward(const Backend* be, Buf out, Buf inp, size_t n) {
    cpu_bf16_gelu_forward(be, buf_f32p(out), buf_f32p(inp), n);
}
static void buf_cpu_bf16_swiglu_forward(const Backend* be, Buf out, Buf gate, Buf up, size_t n) {
    cpu_bf16_swiglu_forward(be, buf_f32p(out), buf_f32p(gate), buf_f32p(up), n);
}
static void buf_cpu_bf16_add_forward(const Backend* be, Buf out, Buf a, Buf b, size_t n) {
    cpu_bf16_add_forward(be, buf_f32p(out), buf_f32p(a), buf_f32p(b), n);
}
static void buf_cpu_bf16_rope_forward(const Backend* be, Buf x, const int* pos, int N, int H, int d, int ld,
                                      const RopeFreq* rf) {
    cpu_bf16_rope_forward(be, buf_f32p(x), pos, N, H, d, ld, rf);
}
static void buf_cpu_bf16_rope2d_forward(const Backend* be, Buf x, const int* pos_row, const int* pos_col, int N, int H,
                                        int d, int ld) {
    cpu_bf16_rope2d_forward(be, buf_f32p(x), pos_row, pos_col, N, H, d, ld);
}
static void buf_cpu_bf16_rope_qk_forward(const Backend* be, Buf q, Buf k, const int* pos, int N, int H, int Hkv, int d,
                                         int ld_q, int ld_k, const RopeFreq* rf) {
    cpu_bf16_rope_qk_forward(be, buf_f32p(q), buf_f32p(k), pos, N, H, Hkv, d, ld_q, ld_k, rf);
}
static void buf_cpu_bf16_embedding_forward(const Backend* be, Buf out, const int* ids, Buf table, int N, int C) {
    cpu_bf16_embedding_forward(be, buf_f32p(out), ids, buf_f32p(table), N, C);
}
static void buf_cpu_bf16_attention_forward(const Backend* be, Buf out, float* lse, Buf q, Buf k, Buf v,
                                           const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q,
                                           int ld_kv, int causal) {
    cpu_bf16_attention_forward(be, buf_f32p(out), lse, buf_f32p(q), buf_f32p(k), buf_f32p(v), cu_seqlens, S, T, H, Hkv,
                               d, ld_q, ld_kv, causal);
}
static void buf_cpu_bf16_act_forward(const Backend* be, Buf out, Buf inp, size_t n, Act act) {
    cpu_bf16_act_forward(be, buf_f32p(out), buf_f32p(inp), n, act);
}
static void buf_cpu_bf16_rows_gather_forward(const Backend* be, Buf out, const int* idx, const float* w, Buf table,
                                             int N, int K, int C) {
    cpu_bf16_rows_gather_forward(be, buf_f32p(out), idx, w, buf_f32p(table), N, K, C);
}

static const BackendDevice cpu_device = {
    .name = "cpu",
    .host_addressable = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset0 = cpu_memset0,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .copy_d2d = cpu_copy,
    .synchronize = cpu_synchronize,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .event_create = cpu_event_create,
    .event_record = cpu_event_record,
    .event_query = cpu_event_query,
    .event_wait = cpu_event_wait,
    .event_destroy = cpu_event_destroy,
    .reserve = cpu_reserve,
};

/* The f32 ops: the base of both CPU ops tables. */
#define CPU_OPS_F32                                          \
    .linear_forward = buf_cpu_linear_forward,                    \
    .linear_gelu_forward = buf_cpu_linear_gelu_forward,          \
    .linear_backward = buf_cpu_linear_backward,                  \
    .layernorm_forward = buf_cpu_layernorm_forward,              \
    .layernorm_backward = buf_cpu_layernorm_backward,            \
    .rmsnorm_forward = buf_cpu_rmsnorm_forward,                  \
    .rmsnorm_backward = buf_cpu_rmsnorm_backward,                \
    .gelu_forward = buf_cpu_gelu_forward,                        \
    .gelu_backward = buf_cpu_gelu_backward,                      \
    .swiglu_forward = buf_cpu_swiglu_forward,                    \
    .swiglu_backward = buf_cpu_swiglu_backward,                  \
    .add_forward = buf_cpu_add_forward,                          \
    .rope_forward = buf_cpu_rope_forward,                        \
    .rope_backward = cpu_rope_backward,                      \
    .rope2d_forward = buf_cpu_rope2d_forward,                    \
    .rope2d_backward = buf_cpu_rope2d_backward,                  \
    .rope_qk_forward = buf_cpu_rope_qk_forward,                  \
    .rope_qk_backward = buf_cpu_rope_qk_backward,                \
    .embedding_forward = buf_cpu_embedding_forward,              \
    .embedding_backward = cpu_embedding_backward,            \
    .crossentropy_forward = buf_cpu_crossentropy_forward,        \
    .crossentropy_backward = buf_cpu_crossentropy_backward,      \
    .attention_forward = buf_cpu_attention_forward,              \
    .attention_backward = buf_cpu_attention_backward,            \
    .attention_decode = cpu_attention_decode,                \
    .act_forward = buf_cpu_act_forward,                          \
    .act_backward = buf_cpu_act_backward,                        \
    .rows_gather_forward = buf_cpu_rows_gather_forward,          \
    .rows_gather_backward = cpu_rows_gather_backward,        \
    .sum_squares = cpu_sum_squares,                          \
    .scale = cpu_scale,                                      \
    .adamw_update = cpu_adamw_update,                        \
    .adamw_update_copy = cpu_adamw_update_copy,              \
    .round_bf16 = cpu_round_bf16,                            \
    .to_bf16 = cpu_to_bf16,                                  \
    .dropout_forward = cpu_dropout_forward,                  \
    .dropout_backward = cpu_dropout_backward,                \
    .nf4_dequantize = cpu_nf4_dequantize

static const BackendOps cpu_ops = {CPU_OPS_F32};

/* runtime.precision = bf16: the forward ops round where the GPU stores bf16 (engine/cpu/bf16.c);
 * backward ops, cross-entropy, generation's attention_decode and the step end are the f32 ones. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init" /* the base's entries, then the overrides */
static const BackendOps cpu_bf16_ops = {
    CPU_OPS_F32,
    .linear_forward = buf_cpu_bf16_linear_forward,
    .linear_gelu_forward = buf_cpu_bf16_linear_gelu_forward,
    .linear_backward = buf_cpu_bf16_linear_backward,
    .layernorm_forward = buf_cpu_bf16_layernorm_forward,
    .rmsnorm_forward = buf_cpu_bf16_rmsnorm_forward,
    .gelu_forward = buf_cpu_bf16_gelu_forward,
    .swiglu_forward = buf_cpu_bf16_swiglu_forward,
    .add_forward = buf_cpu_bf16_add_forward,
    .rope_forward = buf_cpu_bf16_rope_forward,
    .rope2d_forward = buf_cpu_bf16_rope2d_forward,
    .rope_qk_forward = buf_cpu_bf16_rope_qk_forward,
    .embedding_forward = buf_cpu_bf16_embedding_forward,
    .attention_forward = buf_cpu_bf16_attention_forward,
    .act_forward = buf_cpu_bf16_act_forward,
    .rows_gather_forward = buf_cpu_bf16_rows_gather_forward,
    .dropout_forward = cpu_bf16_dropout_forward,
};
#pragma GCC diagnostic pop

/* Every CPU buffer is f32 words (bf16 values held in f32 words under bf16): the ops take f32-word activations only
 * (BackendOps.bf16_activations 0; a 2-byte Buf is refused). */
const Backend backend_cpu = {
    .dev = &cpu_device,
    .ops = &cpu_ops,
    .precision = PRECISION_FP32,
    .bf16_variant = &backend_cpu_bf16,
    .weight_dtype = DTYPE_F32,
};

const Backend backend_cpu_bf16 = {
    .dev = &cpu_device,
    .ops = &cpu_bf16_ops,
    .precision = PRECISION_BF16,
    .bf16_variant = &backend_cpu_bf16,
    .weight_dtype = DTYPE_F32,
};
