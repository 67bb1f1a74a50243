/* engine.h — the engine's front door: tensors, arenas, the backend op table, optimiser, init.
 *
 * Conventions (every op, every backend):
 *   - Row-major buffers with named dimensions (llm.c style): float* where a buffer is f32 words by the
 *     numerics contract (gradients, statistics), a typed buffer (Buf: address and dtype) where it may
 *     hold 2-byte values (activations, weights, GEMM biases).
 *   - N = rows (tokens in the packed microbatch), C = input channels, OC = output channels,
 *     T = total packed tokens, S = number of packed sequences, H = heads, d = head dim, V = vocab.
 *   - Argument order: outputs, saved statistics, inputs, weights, dimensions.
 *   - Backward ADDS (+=) into every gradient it writes, input gradients included; zeroing is an
 *     explicit step by the caller. A NULL gradient pointer means "not needed, skip it" — this is how
 *     a split backward computes input gradients (B) and weight gradients (W) separately.
 *   - Forward ops may run in place where noted.
 *   - Packed variable-length sequences are described by cu_seqlens (S+1 ints, cu_seqlens[0] = 0,
 *     cu_seqlens[S] = T), FlashAttention style.
 */
#ifndef RRFP_ENGINE_H
#define RRFP_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------
 * Tensors and arenas */

typedef enum { DTYPE_F32 = 0, DTYPE_BF16 = 1, DTYPE_I32 = 2, DTYPE_F16 = 3, DTYPE_U8 = 4 } DType; /* F16: read only (imports); U8: stored bytes (quantised weights) */
size_t dtype_size(DType t);
const char* dtype_name(DType t);

/* A typed buffer: an address in a backend's memory and the dtype of the values stored there. The ops
 * take every buffer that may hold 2-byte values (activations, 2-D weights and embedding tables, GEMM
 * biases) as a Buf, so what a buffer holds travels with it; buffers that are f32 by the numerics
 * contract (gradients, norm statistics, lse, the optimiser's state) stay float*. A new storage format
 * (fp8, 4-bit blocks) is a new DType. A Buf carries no constness: an op's contract says which it
 * writes. */
typedef struct {
    void* p;
    DType dt;
} Buf;
static inline Buf buf_of(const void* p, DType dt) {
    Buf b;
    b.p = (void*)p;
    b.dt = dt;
    return b;
}
static inline Buf buf_f32(const float* p) { return buf_of(p, DTYPE_F32); }
static inline Buf buf_bf16(const uint16_t* p) { return buf_of(p, DTYPE_BF16); }
static inline Buf buf_none(void) { return buf_of(NULL, DTYPE_F32); } /* an absent optional buffer */
/* The buffer i values past b (pointer arithmetic by b's dtype); NULL stays NULL. */
static inline Buf buf_at(Buf b, size_t i) {
    if (b.p) b.p = (char*)b.p + i * dtype_size(b.dt);
    return b;
}
/* b's address as f32 words / 2-byte words: refuses a buffer of another dtype (NULL passes). */
static inline float* buf_f32p(Buf b) {
    RR_ASSERT((!b.p || b.dt == DTYPE_F32) && "an f32 buffer");
    return (float*)b.p;
}
static inline uint16_t* buf_bf16p(Buf b) {
    RR_ASSERT((!b.p || b.dt == DTYPE_BF16) && "a 2-byte bf16 buffer");
    return (uint16_t*)b.p;
}
/* An f32 gradient g as a backward GEMM reads it (linear_backward's dout): its 2-byte mirror m16 where the pass that
 * finished g stored one (BackendOps, "2-byte output gradients"), else g's f32 words; buf_grad32 is the f32 dout32
 * that goes with it (g where the GEMMs read the mirror, so that a bias sums the f32 values; else NULL). */
static inline Buf buf_grad(const float* g, const uint16_t* m16) { return m16 ? buf_bf16(m16) : buf_f32(g); }
static inline const float* buf_grad32(const float* g, const uint16_t* m16) { return m16 ? g : NULL; }

#define TENSOR_MAX_DIMS 4 /* safetensors entries and parameter shapes */

/* A bump allocator over one big block. Allocations are 64-byte aligned (a stage's activations are laid
 * out in one, sized from the microbatch token budget). */
typedef struct {
    char* base;
    size_t size;
    size_t used;
    size_t peak;
    const char* name;
    int device; /* 0 = host memory, 1 = CUDA device memory */
} Arena;
void arena_init(Arena* a, const char* name, size_t size); /* host; dies with a clear message on OOM */
void* arena_alloc(Arena* a, size_t bytes);                 /* dies naming the arena if it overflows */
float* arena_alloc_f32(Arena* a, size_t n);
void arena_free(Arena* a);

/* ------------------------------------------------------------------------------------------------
 * Compute precision of a Backend's ops (recipe key runtime.precision).
 * PRECISION_BF16 is mixed precision as Megatron runs it: parameters, gradients and AdamW moments stay
 * f32 (the ParamTable's master copy); the ops round to bf16 (nearest even) exactly where the GPU
 * stores bf16: every GEMM operand (activation, weight and output gradient), and every activation an
 * op writes (linear, norm, GELU, SwiGLU, residual add, RoPE, embedding and attention outputs).
 * Norm statistics (mean, rstd), softmax and its lse, RoPE angles, cross-entropy, activation and
 * weight gradients, reductions and the optimiser stay f32. Buffers are f32 words (a bf16 value is
 * exactly representable in f32, so the numerics are those of bf16 storage; engine/cpu/bf16.c) except where
 * a table's weight_dtype says 2-byte bf16 and where a stage stores its activations as 2-byte bf16 Bufs on a
 * table that takes them (the CUDA bf16 table: Backend.weight_dtype, BackendOps.bf16_activations below). */
typedef enum { PRECISION_FP32 = 0, PRECISION_BF16 = 1 } Precision;
const char* precision_name(Precision p);

/* Activation recompute of the blocks' backward (train.recompute, docs/training.md "Activation recompute"):
 * RECOMPUTE_NONE keeps every activation the backward reads; RECOMPUTE_SELECTIVE drops the MLP activation's output
 * (SwiGLU's, GELU's: recomputed elementwise from the kept activation input, which its backward reads anyway);
 * RECOMPUTE_FULL keeps each block's input only and re-runs the block's forward inside the backward. Kept and
 * recomputed values are bitwise the same (the same ops on the same inputs). */
typedef enum { RECOMPUTE_NONE = 0, RECOMPUTE_SELECTIVE = 1, RECOMPUTE_FULL = 2 } Recompute;

/* ------------------------------------------------------------------------------------------------
 * AdamW hyper-parameters (floats: beta1 = 0.9 means float(0.9), see engine/adamw.c). */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
} AdamWConfig;
/* One tensor of a multi-tensor AdamW (BackendOps.adamw_multi): adamw_update's param, grad, m, v and n, its
 * decay flag, which of the call's configurations it takes (cfg: an index, e.g. 1 for the projector's
 * optim.projector_lr) and its compute copy (adamw_update_copy's; copy.p NULL: none). */
typedef struct {
    float* param;
    const float* grad;
    float *m, *v;
    size_t n;
    int decay, cfg;
    Buf copy;
} AdamwTensor;


/* Elementwise activations of BackendOps.act_forward / act_backward (the CLIP tower and Hugging Face's
 * projector): GELU_TANH is gelu_forward's; GELU_ERF the exact 0.5 x (1 + erf(x / sqrt 2)) (torch's
 * nn.GELU(), LLaVA's `gelu`); QUICK_GELU x * sigmoid(1.702 x) (OpenAI CLIP's). */
typedef enum { ACT_GELU_TANH = 0, ACT_GELU_ERF = 1, ACT_QUICK_GELU = 2 } Act;
const char* act_name(Act a);
/* The 1-D RoPE's frequencies (model.rope_*): pair j of a head of dim n turns by pos * inv_freq_j with
 * inv_freq_j = theta^(-2j/n); with llama3 set, Llama-3's rescaling (transformers'
 * _compute_llama3_parameters): wavelen = 2 pi / inv_freq; wavelen > L / low_freq_factor: inv_freq / factor;
 * wavelen < L / high_freq_factor: inv_freq; between: (1 - s) inv_freq / factor + s inv_freq with
 * s = (L / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor), L = original_max_pos.
 * rr_rope_inv_freq (engine/cuda/kernel_math.h) computes it, for both backends. */
typedef struct {
    double theta;
    int llama3;
    double factor, low_freq_factor, high_freq_factor, original_max_pos;
} RopeFreq;

/* The largest attention call of one kind a stage makes (BackendDevice.reserve): at most max_T packed tokens in
 * at most max_S sequences, H heads of dim d, q / k / v rows of stride ld_qkv. rope: the RoPE its q and k take
 * (0 none; 1 the 1-D RoPE of rope_freq, the LM's; 2 the ViT's 2-D RoPE), whose cos / sin table of max_T positions
 * the CUDA backend builds at the reservation (engine/cuda/rope.cu), not in a step. */
typedef struct {
    int max_T, max_S, H, d, ld_qkv;
    int rope;
    RopeFreq rope_freq;
    DType act; /* the storage of the call's q, k, v and out (the stage's activations; DTYPE_F32 when left 0) */
} AttnReserve;

/* ------------------------------------------------------------------------------------------------
 * The backend's profiler (runtime.profile) and device memory. Op kinds: every op belongs to one
 * (gemm: linear*; attention; norm: LayerNorm / RMSNorm; elementwise: GELU, SwiGLU, add, RoPE,
 * embedding, cross-entropy; optimiser: sum_squares, scale, adamw*; copies: memset0, copy_*, to_bf16, from_bf16;
 * communication: the NCCL transfers of runtime/comm). */
typedef enum {
    PROF_GEMM = 0,
    PROF_ATTENTION,
    PROF_NORM,
    PROF_ELEMENTWISE,
    PROF_OPTIMISER,
    PROF_COPIES,
    PROF_COMM,
    PROF_KINDS
} ProfKind;
const char* prof_kind_name(int kind); /* "gemm", "attention", ... */
/* What ran between two profile_take calls: per kind, the GPU time of its ops (each op from a CUDA event
 * recorded before its first launch to one after its last, on its stream; ops on different streams may
 * overlap), the launches they made (kernels, memsets and copies, and one per cuBLAS / cuBLASLt matmul
 * call) and the op calls. */
typedef struct {
    double ms[PROF_KINDS];
    long launches[PROF_KINDS];
    long ops[PROF_KINDS];
} BackendProfile;
/* Device memory: the backend's own high-water mark (bytes it holds through alloc and its scratch), what
 * it holds now, and the device's free / total bytes (cudaMemGetInfo: other processes and the CUDA
 * context included). */
/* What an allocation holds, for the split of the high-water mark (BackendMemory.peak_by): a parameter table's
 * masters and compute copies, its gradients, its optimiser moments, a stage's activations (and recompute
 * workspace), and everything else (scratch, staging, the backend's own buffers). be_alloc_as counts an allocation
 * as one; a plain alloc counts as MEM_WORKSPACE. */
typedef enum { MEM_WORKSPACE = 0, MEM_WEIGHTS, MEM_GRADS, MEM_OPTIM, MEM_ACTS, MEM_TAGS } MemTag;
const char* mem_tag_name(int tag); /* "workspace", "weights", "grads", "optim", "acts" */
typedef struct {
    size_t peak_bytes, used_bytes, device_free, device_total;
    size_t peak_by[MEM_TAGS]; /* what each kind held when peak_bytes was reached (sums to peak_bytes) */
} BackendMemory;

/* ------------------------------------------------------------------------------------------------
 * The backend, in two parts. A BackendDevice owns memory and ordering: allocation, copies, memset,
 * synchronisation, streams, events, the scratch reservation, the profiler and the memory report, and
 * says whether its memory is host-addressable. A BackendOps holds the math: the model's ops and the
 * optimiser's. What callers hold is a Backend: a device, an ops table, the precision and storage facts
 * the ops follow, and the stream they run on. Model code calls ops only through a Backend, so it never
 * branches on the device. All pointers passed to a backend's ops and device calls live in that
 * backend's memory (but where said otherwise: adamw's cfg, RoPE's rf, the host side of a copy). */

struct Backend;

typedef struct BackendDevice {
    const char* name; /* "cpu" or "cuda": for messages only */
    /* 1: what alloc returns is the process's own memory, read and written by the host directly (the CPU
     * device); 0: device memory, reached only through copy_* (CUDA). Code that needs to know where a
     * table's buffers live asks this, never the name. */
    int host_addressable;
    void* (*alloc)(size_t bytes);
    void (*free)(void* p);
    /* The calls that take a Backend order their work on its stream (Backend.stream). */
    void (*memset0)(const struct Backend* be, void* p, size_t bytes);
    void (*copy_h2d)(const struct Backend* be, void* dst, const void* src, size_t bytes);
    void (*copy_d2h)(const struct Backend* be, void* dst, const void* src, size_t bytes);
    void (*copy_d2d)(const struct Backend* be, void* dst, const void* src, size_t bytes);
    void (*synchronize)(const struct Backend* be);
    /* Streams: a new stream, ordered independently of the compute stream (a cudaStream_t on CUDA; NULL on
     * the CPU, whose ops all run in call order), and its release. A Backend bound to it with
     * backend_on_stream runs its ops there: the communication streams of a stage. */
    void* (*stream_create)(void);
    void (*stream_destroy)(void* stream);
    /* Events: completion markers the pipeline polls instead of synchronising. A cudaEvent_t on CUDA
     * (timing off); NULL on the CPU, whose ops complete in call order, so there every event is complete
     * at once. event_record marks the work enqueued so far on be's stream; event_query never blocks: 1
     * when everything before the record has completed (or ev is NULL), 0 while it runs; event_wait makes
     * be's stream wait for ev without blocking the host; event_destroy releases it (NULL allowed).
     * Created once, re-recorded at will: a wait captures the record it was called after. */
    void* (*event_create)(void);
    void (*event_record)(const struct Backend* be, void* ev);
    int (*event_query)(void* ev);
    void (*event_wait)(const struct Backend* be, void* ev);
    void (*event_destroy)(void* ev);
    /* Allocate now the backend's own scratch for GEMM operands of up to gemm_elems values (the bf16
     * GEMMs' conversion buffer), for sum_squares over up to sumsq_n values and for the attention calls
     * bounded by attn[0 .. n_attn) (cuDNN's fused attention: its bf16 copies, offsets, workspace and
     * first-run check, engine/cuda/attention_scratch.h), so that no training step allocates device
     * memory (a stage's memory comes from its budget, allocated once). Scratch only grows; a call with
     * smaller sizes does nothing. An attention call larger than its reservation runs the backend's own
     * kernel (no scratch) instead of allocating. What is reserved follows be's precision and each attention
     * call's storage (AttnReserve.act). The CPU device has none. */
    void (*reserve)(const struct Backend* be, size_t gemm_elems, size_t sumsq_n, const AttnReserve* attn, int n_attn);
    /* The profiler, process-wide (NULL on the CPU device): profile(1) starts recording every op called
     * through a Backend on this device, profile(0) stops; profile_take waits for the recorded work and
     * moves what was recorded since the last take into *out (zeroed first). */
    void (*profile)(int on);
    void (*profile_take)(BackendProfile* out);
    /* Device memory now (NULL on the CPU device, whose memory is the process's RSS). */
    void (*memory)(BackendMemory* out);
    /* Graphs (runtime.cuda_graphs; NULL on a device without them, the CPU's): graph_begin starts recording the work
     * enqueued on be's stream instead of running it, graph_end stops and returns the recorded work instantiated,
     * graph_launch runs it again on be's stream (one launch), graph_free releases it. A replay reruns the work with
     * the host values it was recorded with (pointers, sizes, scalars): only work whose host values are the same at
     * every replay may be recorded, and nothing recorded may synchronise, allocate or copy to the host. */
    void (*graph_begin)(const struct Backend* be);
    void* (*graph_end)(const struct Backend* be);
    void (*graph_launch)(const struct Backend* be, void* graph);
    void (*graph_free)(void* graph);
    /* What the device's next allocations hold (MemTag), for BackendMemory.peak_by; NULL on a device that does
     * not report memory (the CPU's). Set through be_alloc_as. */
    void (*memory_tag)(int tag);
} BackendDevice;

/* The math. Every op takes the Backend it was called through as its first argument
 * (`be->ops->linear_forward(be, ...)`), so the same ops run on the stream that Backend is bound to and
 * see its storage facts. An op a table does not have is NULL (said at the op).
 *
 * 2-byte output gradients (with 2-byte activations, BackendOps.bf16_activations): a backward GEMM and the attention
 * backward can read an output gradient stored as 2-byte bf16 words by the kernel that produced it, in its own store,
 * with no conversion pass. Such a gradient is a Buf of dtype DTYPE_BF16 (linear_backward's dout and dinp,
 * swiglu_backward's dgate and dup, attention_backward's dout, crossentropy_backward's dlogits) or a 2-byte mirror
 * (uint16_t*: a copy of an f32 gradient's final value, stored in the same pass: *_backward's dinp16, dq16, ...). Each
 * 2-byte value is rr_f32_to_bf16 of the f32 gradient the op would leave in a zeroed f32 buffer, so the numerics are
 * exactly the f32 gradients'. The ops dispatch on the gradients' dtypes; they take 2-byte gradients and mirrors only
 * with 2-byte activations on a table with bf16_activations: every other call refuses them (RR_ASSERT), so its
 * callers pass f32 Bufs, NULL mirrors and 0 for the flags that go with them. */
typedef struct BackendOps {
    /* out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be NULL. */
    void (*linear_forward)(const struct Backend* be, Buf out, Buf inp, Buf weight, Buf bias, int N, int C,
                           int OC);
    /* dinp (N, C) += dout @ weight; dweight (OC, C) += dout^T @ inp; dbias (OC) += sum_n dout.
     * Any of dinp (dinp.p) / dweight / dbias may be NULL. set = 1: an f32 dinp is written, not added (its first
     * write: no memset before it; the GEMM's beta 0). A 2-byte dout (N, OC) is read by the GEMMs as it is, and dbias
     * then sums dout32, the f32 dout (needed only with dbias; NULL otherwise, and with an f32 dout). A 2-byte dinp is
     * always written: rr_f32_to_bf16(dout @ weight) (the attention backward's dout, from the o-projection). dweight
     * and dbias add (they accumulate over microbatches). */
    void (*linear_backward)(const struct Backend* be, Buf dinp, float* dweight, float* dbias, Buf dout, const float* dout32,
                            Buf inp, Buf weight, int N, int C, int OC, int set);
    /* Linear then GELU (tanh), one op where the backend can fuse them (the ViT MLP's fc1 and the
     * projector's first linear): pre (N, OC) = inp @ weight^T + bias, the pre-activation saved for
     * gelu_backward, and out (N, OC) = gelu(pre); bias may be NULL. fp32 tables: exactly linear_forward
     * into pre, then gelu_forward into out. bf16 tables: the GELU reads the f32 pre-activation (as
     * cuBLASLt's GELU_AUX_BIAS epilogue does, in the GEMM's f32 output), then out and pre are each
     * rounded to bf16 (out the stored activation, pre what the backward reads); the two ops would round
     * pre before the GELU, so out can differ from theirs by one bf16 ulp. The backward is gelu_backward on
     * pre, then linear_backward. */
    void (*linear_gelu_forward)(const struct Backend* be, Buf out, Buf pre, Buf inp, Buf weight,
                                Buf bias, int N, int C, int OC);

    /* LayerNorm over C, eps 1e-5. mean, rstd: (N) saved for backward. */
    void (*layernorm_forward)(const struct Backend* be, Buf out, float* mean, float* rstd, Buf inp, const float* weight,
                              const float* bias, int N, int C);
    /* backward: dinp, dweight, dbias += (each may be NULL); dinp16 (2-byte tables; NULL: none): dinp's final value
     * also stored as 2-byte words in the same pass (the residual stream's gradient, kept f32 because later ops add
     * into it, with the 2-byte copy the next GEMM reads). */
    void (*layernorm_backward)(const struct Backend* be, float* dinp, uint16_t* dinp16, float* dweight, float* dbias,
                               const float* dout, Buf inp, const float* weight, const float* mean, const float* rstd,
                               int N, int C);

    /* RMSNorm over C: out = x / sqrt(mean(x^2) + eps) * w (eps: model.rms_eps, 1e-5 by default). rstd: (N)
     * saved; the backward needs only rstd. */
    void (*rmsnorm_forward)(const struct Backend* be, Buf out, float* rstd, Buf inp, const float* weight, int N, int C, double eps);
    /* dinp16: as layernorm_backward's */
    void (*rmsnorm_backward)(const struct Backend* be, float* dinp, uint16_t* dinp16, float* dweight, const float* dout,
                             Buf inp, const float* weight, const float* rstd, int N, int C);

    /* GELU, tanh approximation, elementwise over n values. In place allowed (out == inp). */
    void (*gelu_forward)(const struct Backend* be, Buf out, Buf inp, size_t n);
    void (*gelu_backward)(const struct Backend* be, float* dinp, const float* dout, Buf inp, size_t n);

    /* SwiGLU: out = silu(gate) * up, elementwise over n. backward: f32 dgate, dup += the gradients; 2-byte dgate,
     * dup (either may be NULL there) are OVERWRITTEN with the gradients narrowed (read only by GEMMs). */
    void (*swiglu_forward)(const struct Backend* be, Buf out, Buf gate, Buf up, size_t n);
    void (*swiglu_backward)(const struct Backend* be, Buf dgate, Buf dup, const float* dout, Buf gate, Buf up, size_t n);

    /* Residual add: out = a + b (in place allowed). */
    void (*add_forward)(const struct Backend* be, Buf out, Buf a, Buf b, size_t n);

    /* 1-D RoPE (NeoX rotate-half) applied to N rows of H heads of dim d, row stride `ld` floats
     * (head h of row i starts at x + i*ld + h*d). Position of row i: pos[i]. In place.
     * Backward applies the inverse rotation to the gradient, in place (RoPE is linear and
     * orthogonal, so nothing needs saving). */
    /* Pair j rotates by pos * rr_rope_inv_freq(rf, j, d): theta^(-2j/d) (theta: model.rope_base), rescaled
     * by Llama-3's rule when rf->llama3 (RopeFreq above). rf is a host pointer, like adamw_update's cfg. */
    void (*rope_forward)(const struct Backend* be, Buf x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf);
    void (*rope_backward)(const struct Backend* be, float* dx, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf);
    /* 2-D RoPE: within each head, dims [0, d/2) rotate by pos_row[i] as 1-D RoPE of dim d/2, dims
     * [d/2, d) rotate by pos_col[i] as 1-D RoPE of dim d/2. */
    void (*rope2d_forward)(const struct Backend* be, Buf x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld);
    /* backward: dx rotated in place; with dx16 (2-byte tables; NULL: none) the rotated values are stored as 2-byte
     * words into dx16 (rows of stride ld16) instead, and dx is rotated too only with keep_f32 (a bias gradient reads
     * it), else left as it was. */
    void (*rope2d_backward)(const struct Backend* be, uint16_t* dx16, int ld16, float* dx, const int* pos_row,
                            const int* pos_col, int N, int H, int d, int ld, int keep_f32);

    /* out (N, C) = table[ids[n]]; dtable (V, C) += scatter of dout. */
    void (*embedding_forward)(const struct Backend* be, Buf out, const int* ids, Buf table, int N, int C);
    void (*embedding_backward)(const struct Backend* be, float* dtable, const float* dout, const int* ids, int N, int C);

    /* Cross-entropy with ignore index -100, SUM reduction.
     * forward: *loss_sum (one float, host or device per backend) = sum over n with targets[n] != -100
     *          of (lse[n] - logits[n, targets[n]]); lse (N) saved.
     * backward: dlogits (N, V) += scale * (softmax(logits) - onehot(target)) for supervised rows
     *          (rows with target -100 get nothing). `scale` is 1 / (supervised targets in the step). A 2-byte
     *          dlogits is OVERWRITTEN: every row the f32 value over a zeroed buffer, narrowed (rows with target
     *          -100: zeros); read only by the head's GEMMs. */
    void (*crossentropy_forward)(const struct Backend* be, float* loss_sum, float* lse, Buf logits, const int* targets, int N, int V);
    void (*crossentropy_backward)(const struct Backend* be, Buf dlogits, Buf logits, const float* lse, const int* targets,
                                  float scale, int N, int V);

    /* Attention over S packed sequences (cu_seqlens), H query heads of dim d and Hkv key/value heads
     * (grouped-query attention: Hkv divides H, query head h reads key/value head h / (H / Hkv); Hkv = H is
     * plain multi-head attention).
     * q: rows of stride ld_q floats, head h of token t at q + t*ld_q + h*d; k, v: rows of stride ld_kv,
     * head g at k + t*ld_kv + g*d.
     * out: (T, H*d) contiguous. lse: (T, H) log-sum-exp of the scaled scores, saved for backward.
     * Scale 1/sqrt(d). causal = 1: token i attends to j <= i of its own sequence; 0: to all of it.
     * Never materialises more than a block of the T x T score matrix (online softmax); backward
     * recomputes scores from q, k and lse.
     * backward: dq (stride ld_q), dk, dv (stride ld_kv) += gradients; a key/value head's gradient is the
     * sum over the query heads of its group. dout f32 or 2-byte (T, H d). On the 2-byte tables, dq16, dk16, dv16
     * (rows of stride ld16; NULL: none) are optional 2-byte mirrors that get rr_f32_to_bf16 of the final f32 value
     * in the store that wrote it (a gradient a bias sums in f32 and a GEMM reads in 2 bytes); dv NULL with dv16: dv
     * is 2-byte only, dv16 = rr_f32_to_bf16(dv16 + the f32 gradient) in the kernel's store (zero it first: it then
     * holds the f32 dv narrowed; dq16, dk16 must then be NULL). */
    void (*attention_forward)(const struct Backend* be, Buf out, float* lse, Buf q, Buf k, Buf v,
                              const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal);
    void (*attention_backward)(const struct Backend* be, float* dq, float* dk, float* dv, uint16_t* dq16, uint16_t* dk16,
                               uint16_t* dv16, int ld16, Buf dout, Buf out, const float* lse, Buf q, Buf k, Buf v,
                               const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal);

    /* The step end (the trainer's global gradient norm, clipping and AdamW), so that parameters,
     * gradients and moments never leave the backend's memory. */
    /* Sum of x[i]^2 over n values, accumulated in double; returned to the host (the call waits for
     * the backend). Deterministic: the same bits for the same values on every call, whatever the
     * thread count or launch. Both backends cut x into the chunks of rr_sumsq_chunk_range
     * (engine/cuda/kernel_math.h: 64Ki values each, or 64 equal chunks when n <= 64Ki) and add the
     * chunk sums in chunk order (rr_sumsq_partials). Within a chunk the CPU adds the values in index
     * order (its bits are those of the trainer before this op existed); the GPU adds each thread's
     * strided values in order and the 256 thread sums in a fixed pairwise tree, so CPU and GPU agree
     * to double round-off (~n * 1e-16 relative), not bitwise. */
    double (*sum_squares)(const struct Backend* be, const float* x, size_t n);
    /* x *= s, elementwise over n values (gradient clipping). */
    void (*scale)(const struct Backend* be, float* x, float s, size_t n);
    /* One AdamW update of n parameters at optimiser step t (1-based), as torch.optim.AdamW (formula in
     * engine/adamw.c): param, m, v updated in place from grad. `decay` selects decoupled weight decay
     * (2-D weights only). `cfg` is a host pointer (the one exception to "pointers live in the
     * backend's memory"): the hyper-parameters, not data. The per-element math is
     * rr_adamw_element (kernel_math.h) on both backends. */
    void (*adamw_update)(const struct Backend* be, float* param, const float* grad, float* m, float* v, size_t n, const AdamWConfig* cfg, int t,
                         int decay);

    /* out[i] = inp[i] rounded to bf16 (nearest, ties to even: rr_f32_to_bf16), held in an f32 word;
     * in place allowed. Refreshes the ParamTable's bf16 compute copy after each optimiser step. */
    void (*round_bf16)(const struct Backend* be, float* out, const float* inp, size_t n);
    /* ---- the CLIP tower's ops (vision/vit.c, model.vision_arch = clip) */
    /* out = act(inp) elementwise over n values (in place allowed); backward: dinp += act'(inp) * dout, and with
     * dinp16 (2-byte tables, ACT_GELU_TANH; NULL: none) dinp's final value also stored as 2-byte words in the same
     * pass (a bias gradient sums the f32 dinp, the next GEMM reads the copy). */
    void (*act_forward)(const struct Backend* be, Buf out, Buf inp, size_t n, Act act);
    void (*act_backward)(const struct Backend* be, float* dinp, uint16_t* dinp16, const float* dout, Buf inp, size_t n,
                         Act act);
    /* Weighted row gather: out (N, C) += sum over k < K of w[n K + k] * table[idx[n K + k], :] (w NULL:
     * every weight 1; idx < 0: the tap is skipped). The class token, the patch rows' placement among the
     * tokens, the bicubic-interpolated position embeddings (K = 16 taps) and the features without the
     * class token are all this op. backward: dtable[idx[n K + k], :] += w[n K + k] * dout[n, :]
     * (deterministic: the same bits whatever the threads). */
    void (*rows_gather_forward)(const struct Backend* be, Buf out, const int* idx, const float* w, Buf table, int N,
                                int K, int C);
    void (*rows_gather_backward)(const struct Backend* be, float* dtable, const float* dout, const int* idx, const float* w, int N,
                                 int K, int C);

    /* Generation with a KV cache (rrfp-mm generate): n new queries q (rows of stride ld_q,
     * query head h at column h*d), the last n of Tk positions, against the cache's Tk key and value rows
     * k, v (stride ld_kv, Hkv heads: the rows attention_forward's k and v hold after RoPE; query head h
     * reads key/value head h / (H / Hkv), grouped-query attention; Hkv = H: multi-head); causal: query i
     * sees keys 0 .. Tk - n + i. out (n, H*d) contiguous. Scale 1/sqrt(d); the softmax is exact (the max
     * subtracted first), so each row is attention_forward's row for that query to float round-off. May
     * be NULL on a table that has none (generation refuses it, naming the backend). */
    void (*attention_decode)(const struct Backend* be, float* out, const float* q, const float* k, const float* v, int n,
                             int Tk, int H, int Hkv, int d, int ld_q, int ld_kv);
    /* adamw_update, then the updated parameter rounded to bf16 (rr_f32_to_bf16) stored into `copy` in
     * copy_dtype (DTYPE_BF16: 2-byte words; DTYPE_F32: f32 words holding the bf16 value): the compute
     * copy written by the optimiser's own pass, once per step (no separate rounding pass). */
    void (*adamw_update_copy)(const struct Backend* be, float* param, const float* grad, float* m, float* v, size_t n,
                              const AdamWConfig* cfg, int t, int decay, Buf copy);
    /* out[i] = rr_f32_to_bf16(inp[i]), 2-byte words: the compute copy after a write of the master outside
     * the optimiser (allocation, checkpoint load); never called in a training step. */
    void (*to_bf16)(const struct Backend* be, uint16_t* out, const float* inp, size_t n);
    /* out[i] = rr_bf16_to_f32(inp[i]): 2-byte bf16 words widened (exact) to f32 words; with to_bf16, the
     * conversion of a stage's hidden states at its entry and exit (the pipeline's transfers stay f32). NULL
     * where bf16_activations is 0 and nothing needs it. */
    void (*from_bf16)(const struct Backend* be, float* out, const uint16_t* inp, size_t n);
    /* out = a + b with out and a activations (either storage on a table with bf16_activations) and b f32 words:
     * the residual add after a TP all-reduce, which sums the row-parallel partial outputs in f32 (under tp > 1;
     * the value and rounding point add_forward's with b's f32 value). NULL on a table without 2-byte activations
     * (add_forward does it there). */
    void (*add_f32_forward)(const struct Backend* be, Buf out, Buf a, const float* b, size_t n);
    /* 1-D RoPE over the LM's q and k in one pass: rope_forward of q (N rows of H heads, stride
     * ld_q) and of k (Hkv heads, stride ld_k) at the same positions, the same values in one launch on CUDA;
     * rope_qk_backward the same over the f32 gradients dq and dk (rope_backward's). q and k are activations,
     * dq and dk f32. NULL: the caller calls rope_forward / rope_backward twice (lm_rope_qk_*). With dq16,
     * dk16 (2-byte tables; NULL: none) the backward stores the rotated values as 2-byte words there (rows of stride
     * ldq16, ldk16) instead, and rotates dq / dk in place too only with keep_q / keep_k (a bias gradient reads it). */
    void (*rope_qk_forward)(const struct Backend* be, Buf q, Buf k, const int* pos, int N, int H, int Hkv, int d, int ld_q,
                            int ld_k, const RopeFreq* rf);
    void (*rope_qk_backward)(const struct Backend* be, uint16_t* dq16, int ldq16, float* dq, uint16_t* dk16, int ldk16,
                             float* dk, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k, const RopeFreq* rf,
                             int keep_q, int keep_k);
    /* LoRA's dropout (text/lm_lora.c) over an activation matrix inp (N, C) that is columns [c0, c0 + C) of a
     * matrix of global width ld_g (a tensor-parallel rank's share; c0 = 0, ld_g = C unsplit): out = inp where
     * the mask keeps an element, scaled by 1 / (1 - p), else 0; the mask is a pure function of (seed, the
     * element's global index n ld_g + c0 + c), engine/cuda/dropout_math.h, the same on every backend. out may
     * be inp. f32-word activations only (a stage with LoRA keeps f32 words; the bf16 tables round out to bf16).
     * backward: dinp += the same mask and scale applied to dout. */
    void (*dropout_forward)(const struct Backend* be, Buf out, Buf inp, int N, int C, int ld_g, int c0, float p,
                            uint64_t seed);
    void (*dropout_backward)(const struct Backend* be, float* dinp, const float* dout, int N, int C, int ld_g, int c0,
                             float p, uint64_t seed);
    /* AdamW over n tensors in one pass (one launch on CUDA, over a device-side table of chunks of the tensors,
     * kept between calls while the tensors are the same): each tensor as adamw_update (copy.p NULL) or
     * adamw_update_copy would update it with cfgs[ts[i].cfg], bit for bit. NULL: the caller calls those per
     * tensor. */
    void (*adamw_multi)(const struct Backend* be, const AdamwTensor* ts, int n, const AdamWConfig* cfgs, int ncfg, int t);
    /* sum_squares over n tensors (xs[i], ns[i] values) in one pass: each tensor's sum as sum_squares gives it, the
     * sums added in tensor order in double from 0, so bitwise the loop `ss += sum_squares(be, xs[i], ns[i])` (CUDA:
     * one launch over a device-side table of every tensor's chunks, kept between calls while the list is the same,
     * one launch adding the chunk sums, one copy back; the gradient norm under tensor parallelism and with a tied
     * embedding's copy, whose tensors count apart). NULL: the caller loops. */
    double (*sum_squares_multi)(const struct Backend* be, const float* const* xs, const size_t* ns, int n);
    /* QLoRA: a double-quantised NF4 weight of n values (engine/quant.h; q, q8, absmax2 and map8, the dynamic map's
     * 256 values, backend memory) dequantised into out as a weight of the table (weight_dtype): the bf16 words of
     * engine/cuda/nf4_math.h, 2-byte or widened to f32 words. q8 NULL: absmax2 holds each block's absmax restored
     * (a tensor-parallel slice's, engine/params_quant.c). */
    void (*nf4_dequantize)(const struct Backend* be, Buf out, const uint8_t* q, const uint8_t* q8, const float* absmax2,
                           const float* map8, float offset, size_t n);
    /* The ACTIVATION storage the ops take (docs/cuda.md "bf16 storage"). 1: either storage, f32 words (in a bf16
     * table holding bf16 values) or 2-byte bf16 words (Bufs of DTYPE_BF16: n values in 2n bytes, each the word
     * rr_f32_to_bf16 gives), each entry dispatching on its activation Bufs' dtypes (the CUDA bf16 table); the
     * numerics are the same, the same values at the same rounding points, only the storage differs. A call must not
     * mix the storages (refused, naming the op). 0: f32 words only (every other table: a 2-byte activation is
     * refused, RR_ASSERT). The table describes the ops, not a model: a stage chooses its storage (LmConfig.act_bytes,
     * VitConfig.act_bytes; runtime/model/model.c stage_init_tp asks this) and allocates its activations so. The
     * activations are the Buf arguments of the ops but `weight` / `table` and a linear's `bias` (Backend.weight_dtype);
     * both of rows_gather_forward's `out` and `table` are activations (a caller with an f32-word table, a
     * parameter's compute copy holding bf16 values, narrows it first with to_bf16; the input patches arrive
     * 2-byte, narrowed on the host: vision.h vit_forward). Every float* of the ops is f32 words: activation
     * GRADIENTS d*, which stay f32 by the numerics contract, norm statistics mean / rstd, attention and
     * cross-entropy lse, loss_sum, 1-D weights, the optimiser's buffers. With 2-byte activations linear_backward
     * and attention_backward convert an f32 dout to bf16 scratch; the model passes the 2-byte dout its producer
     * stored instead ("2-byte output gradients" above). attention_decode takes f32 words (generation keeps f32-word
     * activations). The device's reserve takes each attention call's storage from its AttnReserve.act. */
    int bf16_activations;
} BackendOps;

typedef struct Backend {
    const BackendDevice* dev;
    const BackendOps* ops;
    /* Compute precision of the ops (Precision above). */
    Precision precision;
    /* The same device's Backend that computes in bf16 (its own bf16_variant is itself). */
    const struct Backend* bf16_variant;
    /* The storage of the compute copies the ops read as weights: every 2-D parameter (GEMM weights, embedding
     * tables: the ops' `weight` / `table` buffers, engine/params.h) and every GEMM bias (params_mark_gemm_bias:
     * linear_forward's and linear_gelu_forward's `bias`). DTYPE_BF16 (the CUDA bf16 table): n values take 2n
     * bytes, each the bf16 word rr_f32_to_bf16 gives, written by adamw_update_copy, and the GEMMs hand them to
     * cuBLASLt as they are (no conversion in a step; cuBLASLt's epilogue takes a bf16 D's bias as it is, and a GEMM
     * on f32-word activations widens it, exact). DTYPE_F32 (every other table, the CPU's bf16 reference included): f32
     * words, in bf16 tables holding bf16 values. Other 1-D parameters (norm weights and biases) are f32 words on
     * every table. */
    DType weight_dtype;
    /* The stream the ops and the device's ordered calls run on: on CUDA a cudaStream_t (NULL: the
     * backend's compute stream), ordered with the other work of that stream only; the CPU runs everything
     * in call order and ignores it. The static tables have NULL; backend_on_stream makes a bound copy. */
    void* stream;
} Backend;

/* be->dev->alloc(bytes) counted as `tag` (MemTag) in the device's memory split; later allocations count as
 * MEM_WORKSPACE again. */
static inline void* be_alloc_as(const Backend* be, int tag, size_t bytes) {
    if (be->dev->memory_tag) be->dev->memory_tag(tag);
    void* p = be->dev->alloc(bytes);
    if (be->dev->memory_tag) be->dev->memory_tag(MEM_WORKSPACE);
    return p;
}
/* The first write of an input gradient dinp (n values) by linear_backward from dout: returns its `set`. A GEMM that
 * reads a 2-byte dout or stores a 2-byte dinp writes it (1: the GEMM's beta 0, no memset); between f32 words dinp
 * is zeroed here and added into (0). Later GEMMs into the same dinp pass set = 0. */
static inline int be_dinp_first(const Backend* be, Buf dinp, Buf dout, size_t n) {
    if (dout.dt != DTYPE_F32 || dinp.dt != DTYPE_F32) return 1;
    be->dev->memset0(be, dinp.p, n * sizeof(float));
    return 0;
}
/* The typed buffer at p of what a Backend's ops take there: a 2-D weight's compute copy or an embedding table
 * (weight_dtype), a GEMM bias's compute copy (weight_dtype too). An activation's storage is its stage's choice
 * (LmConfig.act_bytes, VitConfig.act_bytes: lm_act_dtype, vit_act_dtype), 2-byte only where the table's
 * ops.bf16_activations says it takes them. */
static inline Buf be_weight(const Backend* be, const void* p) { return buf_of(p, be->weight_dtype); }
static inline Buf be_bias(const Backend* be, const void* p) { return buf_of(p, be->weight_dtype); }

/* A copy of `be` (either precision) whose ops run on `stream` (a cudaStream_t on CUDA; NULL: the
 * backend's compute stream). */
Backend backend_on_stream(const Backend* be, void* stream);

extern const Backend backend_cpu;
extern const Backend backend_cpu_bf16; /* engine/cpu/bf16.c: the CPU ops with the bf16 rounding points */
/* `be`'s table for precision `p` (be itself for PRECISION_FP32 when be is fp32). Never NULL. */
const Backend* backend_with_precision(const Backend* be, Precision p);
/* "fp32" / "bf16" -> Precision; 0 on success, -1 for any other name. */
int precision_parse(const char* name, Precision* p);
/* Returns the CUDA backend, or NULL with a one-line reason in `why` ("no CUDA device: ...",
 * "built without CUDA"). */
const Backend* backend_cuda_get(char* why, size_t why_len);
/* "cpu" or "cuda"; dies with a clear message when the backend cannot be had. */
const Backend* backend_select(const char* name);
/* The same, or NULL with a one-line reason in `why` (an unknown name, or the device cannot be had). */
const Backend* backend_open(const char* name, char* why, size_t why_len);
/* What the device table of the backend `name` names says of its memory (BackendDevice.host_addressable: 1 the
 * process's own, 0 device memory), known without opening it: for a memory estimate, a plan or a recipe check on
 * a machine without that device. -1: no backend has that name. Code decides by this, never by the name. */
int backend_name_host_addressable(const char* name);

/* CPU GEMM entry (row-major, via CBLAS): C (M, N) = alpha * op(A) @ op(B) + beta * C. */
void cpu_sgemm(int transA, int transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
               int ldb, float beta, float* C, int ldc);
/* Name of the BLAS library linked ("blis", "openblas"). */
const char* cpu_blas_name(void);
/* Threads for the CPU backend's OpenMP loops and its BLAS (engine/cpu/threads.c); n <= 0 means one
 * per core. Returns the count set. Without this call BLIS runs single-threaded unless
 * BLIS_NUM_THREADS or OMP_NUM_THREADS is set. */
int cpu_set_num_threads(int n);

/* ------------------------------------------------------------------------------------------------
 * Initialisation: counter-based Philox4x32-10 keyed by (seed, parameter name), never by layout. */

typedef struct { uint32_t v[4]; } Philox4x32;
/* One Philox4x32-10 block: 4 random words for `counter` under `key`. */
Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1);
/* out[i] ~ N(0, std^2) for i in [offset, offset + n) of the parameter's stream keyed by
 * (seed, rr_fnv1a64(name)). Element i of a parameter is the same value whatever slice of it is
 * generated, so a TP shard can generate only its own part. */
void init_normal(float* out, size_t n, size_t offset, uint64_t seed, const char* name, float std);
/* The values of init_normal's whole tensor `name` (shape gshape, row-major) at ranges [off[k], off[k] +
 * len[k]) of dimension dim (0 or 1), concatenated along dim: a tensor-parallel slice equals that part
 * of the whole. */
/* out[i] ~ U(-bound, bound) for i in [offset, offset + n) of the stream keyed by (seed, name) as init_normal's
 * (element i from word i mod 4 of Philox block i / 4: (w + 0.5) / 2^32 mapped to [-bound, bound]): PEFT's
 * Kaiming-uniform init of a LoRA A matrix (bound 1 / sqrt(fan_in)). */
void init_uniform(float* out, size_t n, size_t offset, uint64_t seed, const char* name, float bound);
void init_normal_slice(float* out, const char* name, int ndim, const int64_t* gshape, int dim, int n,
                       const int64_t* off, const int64_t* len, uint64_t seed, float std);

/* ------------------------------------------------------------------------------------------------
 * Optimiser (AdamWConfig is above, with the Backend that takes it) */

/* The CPU backend's adamw_update and sum_squares (backend_cpu's ops adamw_update, sum_squares), callable
 * directly on host buffers; contracts at the BackendOps entries. */
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, const AdamWConfig* cfg, int t,
                  int decay);
double sum_squares(const float* x, size_t n);
/* LR at step `step` (0-based): linear warm-up over `warmup` steps from 0 to max_lr (step+1)/warmup,
 * then cosine decay to min_lr at total_steps. */
float lr_schedule(int step, int warmup, int total_steps, float max_lr, float min_lr);
/* optim.schedule: the same linear warm-up, then cosine (lr_schedule), linear decay to min_lr at
 * total_steps, or constant max_lr. */
typedef enum { LR_SCHEDULE_COSINE = 0, LR_SCHEDULE_LINEAR, LR_SCHEDULE_CONSTANT } LrSchedule;
float lr_schedule_kind(LrSchedule kind, int step, int warmup, int total_steps, float max_lr, float min_lr);

#ifdef __cplusplus
}
#endif
#endif
