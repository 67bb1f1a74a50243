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
    .linear_forward = cpu_linear_forward,                    \
    .linear_gelu_forward = cpu_linear_gelu_forward,          \
    .linear_backward = cpu_linear_backward,                  \
    .layernorm_forward = cpu_layernorm_forward,              \
    .layernorm_backward = cpu_layernorm_backward,            \
    .rmsnorm_forward = cpu_rmsnorm_forward,                  \
    .rmsnorm_backward = cpu_rmsnorm_backward,                \
    .gelu_forward = cpu_gelu_forward,                        \
    .gelu_backward = cpu_gelu_backward,                      \
    .swiglu_forward = cpu_swiglu_forward,                    \
    .swiglu_backward = cpu_swiglu_backward,                  \
    .add_forward = cpu_add_forward,                          \
    .rope_forward = cpu_rope_forward,                        \
    .rope_backward = cpu_rope_backward,                      \
    .rope2d_forward = cpu_rope2d_forward,                    \
    .rope2d_backward = cpu_rope2d_backward,                  \
    .rope_qk_forward = cpu_rope_qk_forward,                  \
    .rope_qk_backward = cpu_rope_qk_backward,                \
    .embedding_forward = cpu_embedding_forward,              \
    .embedding_backward = cpu_embedding_backward,            \
    .crossentropy_forward = cpu_crossentropy_forward,        \
    .crossentropy_backward = cpu_crossentropy_backward,      \
    .attention_forward = cpu_attention_forward,              \
    .attention_backward = cpu_attention_backward,            \
    .attention_decode = cpu_attention_decode,                \
    .act_forward = cpu_act_forward,                          \
    .act_backward = cpu_act_backward,                        \
    .rows_gather_forward = cpu_rows_gather_forward,          \
    .rows_gather_backward = cpu_rows_gather_backward,        \
    .sum_squares = cpu_sum_squares,                          \
    .scale = cpu_scale,                                      \
    .adamw_update = cpu_adamw_update,                        \
    .adamw_update_copy = cpu_adamw_update_copy,              \
    .round_bf16 = cpu_round_bf16,                            \
    .to_bf16 = cpu_to_bf16

static const BackendOps cpu_ops = {CPU_OPS_F32};

/* runtime.precision = bf16: the forward ops round where the GPU stores bf16 (engine/cpu/bf16.c);
 * backward ops, cross-entropy, generation's attention_decode and the step end are the f32 ones. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init" /* the base's entries, then the overrides */
static const BackendOps cpu_bf16_ops = {
    CPU_OPS_F32,
    .linear_forward = cpu_bf16_linear_forward,
    .linear_gelu_forward = cpu_bf16_linear_gelu_forward,
    .linear_backward = cpu_bf16_linear_backward,
    .layernorm_forward = cpu_bf16_layernorm_forward,
    .rmsnorm_forward = cpu_bf16_rmsnorm_forward,
    .gelu_forward = cpu_bf16_gelu_forward,
    .swiglu_forward = cpu_bf16_swiglu_forward,
    .add_forward = cpu_bf16_add_forward,
    .rope_forward = cpu_bf16_rope_forward,
    .rope2d_forward = cpu_bf16_rope2d_forward,
    .rope_qk_forward = cpu_bf16_rope_qk_forward,
    .embedding_forward = cpu_bf16_embedding_forward,
    .attention_forward = cpu_bf16_attention_forward,
    .act_forward = cpu_bf16_act_forward,
    .rows_gather_forward = cpu_bf16_rows_gather_forward,
};
#pragma GCC diagnostic pop

/* Every CPU buffer is f32 words (bf16 values held in f32 words under bf16). */
const Backend backend_cpu = {
    .dev = &cpu_device,
    .ops = &cpu_ops,
    .precision = PRECISION_FP32,
    .bf16_variant = &backend_cpu_bf16,
    .weight_dtype = DTYPE_F32,
    .act_dtype = DTYPE_F32,
    .bias_dtype = DTYPE_F32,
};

const Backend backend_cpu_bf16 = {
    .dev = &cpu_device,
    .ops = &cpu_bf16_ops,
    .precision = PRECISION_BF16,
    .bf16_variant = &backend_cpu_bf16,
    .weight_dtype = DTYPE_F32,
    .act_dtype = DTYPE_F32,
    .bias_dtype = DTYPE_F32,
};
