/* params.h — the parameter table: every tensor of a model (or of one pipeline stage) by name and
 * shape, laid out in one block for values, one for gradients and two for AdamW moments (llm.c's
 * malloc_and_point_parameters). Names follow docs/model.md "Parameters" ("vision.blocks.0.attn.qkv.weight"). */
#ifndef RRFP_PARAMS_H
#define RRFP_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

/* PARAM_INIT_UNIFORM: U(-init_std, init_std) by init_uniform (a LoRA A matrix; init_std holds the bound) */
typedef enum { PARAM_INIT_NORMAL = 0, PARAM_INIT_ONES = 1, PARAM_INIT_ZEROS = 2, PARAM_INIT_UNIFORM = 3 } ParamInit;

/* The part of a global tensor that a table holds (tensor parallelism): ranges along one dimension,
 * stored concatenated in that order. dim = -1: the whole tensor. */
#define PARAM_MAX_RANGES 3
typedef struct {
    int dim;
    int n;
    int64_t off[PARAM_MAX_RANGES], len[PARAM_MAX_RANGES];
    int64_t gshape[TENSOR_MAX_DIMS]; /* the global tensor's shape */
} ParamSlice;

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    size_t numel;
    size_t offset;  /* in floats: the tensor's place in a host array of every value (ParamTable.total) */
    size_t moff;    /* in floats, into data (params_data): == offset unless frozen tensors hold no master */
    size_t goff;    /* in floats, into grad/m/v (trainable tensors only; == offset when nothing is frozen) */
    size_t coff;    /* in bytes, into compute (params_compute_dtype gives its storage) */
    int frozen;     /* no gradient, no AdamW state, no update (train.freeze) */
    int decay;      /* AdamW weight decay applies (2-D weights only) */
    int f32_compute; /* the compute copy stays f32 words even when 2-D (params_keep_f32_compute) */
    int gemm_bias;   /* a 1-D GEMM bias (params_mark_gemm_bias): its compute copy in the table's Backend.bias_dtype */
    int act_table;   /* a gather's table read in the activation storage (params_mark_act_table) */
    ParamInit init;
    float init_std; /* for PARAM_INIT_NORMAL */
    ParamSlice slice; /* which part of the global tensor `name` this is (dim -1: all of it) */
    /* A copy of a tensor that another pipeline stage also holds and writes (the tied embedding's copy on the
     * last stage, model.tie_embeddings): checkpoints and dumps leave it out and the gradient norm does not
     * count it; it loads by name like any tensor. */
    int shared_copy;
    /* The compute copy does not hold this tensor's master yet: set by params_master_written, cleared by
     * params_refresh_compute; a step refuses to run while any is set (params_compute_stale). */
    int compute_stale;
    /* Stored as bitsandbytes' NF4 with double-quantised absmaxes (params_mark_quant in engine/params.c; the storage: engine/params_quant.c): no
     * master, no compute copy, no gradient; the ops read it dequantised (params_quant_dequantize) */
    int quant;
} ParamSpec;

typedef struct {
    ParamSpec* specs;
    int n, cap;
    size_t total;  /* floats of every tensor (the host layout at ParamSpec.offset) */
    size_t mtotal; /* floats in data: the tensors that hold an f32 master (params_has_master) */
    size_t gtotal; /* floats of the trainable tensors (== total when nothing is frozen) */
    float* data;   /* (mtotal) f32 masters at moff */
    float* grad;   /* (gtotal) gradients of the trainable tensors, at goff */
    float* m;      /* (gtotal) AdamW first moment (allocated by params_alloc_optimizer) */
    float* v;      /* (gtotal) AdamW second moment */
    /* The bf16 compute copy of `data`, only when the backend computes in bf16 (NULL in fp32): the
     * weights the forward and backward read (params_weights), on the backend. Tensor i sits at byte coff
     * in params_compute_dtype(pt, i): 2-byte bf16 words for a 2-D tensor on a table whose weight_dtype is
     * DTYPE_BF16 (the CUDA bf16 table: the GEMMs read it as it is), else f32 words holding bf16 values.
     * `data` stays the f32 master and the copy is derived state: the optimiser writes both in one pass
     * (adamw_update_copy); every other write of `data` (allocation, checkpoint load, train.init_from) marks
     * the tensors it wrote with params_master_written and then calls params_refresh_compute, which rebuilds
     * exactly those copies. docs/engine.md "The compute copy". */
    void* compute;
    size_t compute_bytes;
    const Backend* be;
    /* Tensor parallelism: a TP rank other than 0 holds copies of the replicated tensors that TP rank 0
     * also holds; checkpoints and dumps leave them out here (TP rank 0 writes them), so a union of the
     * TP ranks' files holds every tensor once. */
    int omit_replicated;
    /* set before params_alloc: the params_mark_act_table'd tensors are read by a table with 2-byte activations
     * (the bf16-activation table): their compute copy is 2-byte bf16 words where weight_dtype is */
    int act_tables_bf16;
    /* The NF4 storage of the params_mark_quant'd tensors (engine/params_quant.c; NULL when none): one entry per
     * tensor, on the backend, with the dynamic map's 256 values (quant_map8); quant_gen counts quantisations, so
     * a dequantised copy knows when it went stale */
    struct ParamQuant* quant;
    float* quant_map8;
    unsigned quant_gen;
} ParamTable;

/* Frozen tensors on a table with a compute copy (a bf16 run) hold only that copy: no f32 master, no gradient,
 * no AdamW state (their master was never updated, and the copy is what the ops read). A value written to such a
 * tensor (initialisation, a checkpoint or init_from read, an f32 file) is rounded once to bf16; the table reports it
 * back as that bf16 value widened to f32 (params_host_values), so checkpoints, dumps and exports write it exactly.
 * Set by params_alloc; before it, and on fp32 tables, every tensor has its master. */
static inline int params_has_master(const ParamTable* pt, int i) {
    return !(pt->specs[i].frozen && pt->compute) && !pt->specs[i].quant;
}

/* Whether spec s holds a slice of its global tensor (a table built without params_add may leave the
 * slice zeroed: no ranges means the whole tensor). */
static inline int params_is_slice(const ParamSpec* s) { return s->slice.dim >= 0 && s->slice.n >= 1; }

void params_init(ParamTable* pt);
/* Register a tensor; returns its index. decay = 1 for 2-D weights. Dies on a duplicate name. */
int params_add(ParamTable* pt, const char* name, int ndim, const int64_t* shape, ParamInit init, float init_std,
               int decay);
/* Freeze every registered tensor whose name is `prefix` or starts with `prefix` followed by '.'
 * (so "text.blocks.1" freezes block 1 and not block 10). Before params_alloc. Returns how many
 * tensors matched (0 is not an error here: a pipeline stage may hold none of them). */
int params_freeze(ParamTable* pt, const char* prefix);
/* 1 when tensor name `name` lies under `prefix` in the sense of params_freeze. */
int params_name_under(const char* name, const char* prefix);
/* One allocation for values and one for the gradients of the trainable tensors on backend `be` (plus
 * the bf16 compute copy when be->precision is bf16), then fill values from the (seed, name)-keyed
 * initialiser, refresh the compute copy and zero the gradients. */
void params_alloc(ParamTable* pt, const Backend* be, uint64_t seed);
/* Register the slice sl of global tensor `name` (shape gshape): the table holds only the slice, whose
 * values params_alloc draws at their global element indices, so the slice equals that part of the
 * whole tensor registered with params_add. Returns its index. */
int params_add_slice(ParamTable* pt, const char* name, int ndim, const int64_t* gshape, const ParamSlice* sl,
                     ParamInit init, float init_std, int decay);
void params_alloc_optimizer(ParamTable* pt);
/* The most values the two operands of one GEMM of a 2-D tensor (OC, C) of the table take with N rows:
 * max over them of N (C + OC) + OC C (see bf16_weights below), which bounds the forward (x, W), the input gradient (dy, W) and
 * the weight gradient (dy, x) alike. What BackendDevice.reserve needs for the bf16 GEMMs' operand scratch. */
/* bf16_weights: the weights are 2-byte bf16 already (Backend.weight_dtype) and need no scratch: max of
 * N (C + OC) (params_keep_f32_compute'd tensors still count their OC C). */
size_t params_gemm_operand_elems(const ParamTable* pt, int N, int bf16_weights);
/* The slice description stored beside a sliced tensor in checkpoints and dumps: metadata key
 * "slice.<stored name>" with value "dim=D;shape=G0,G1;ranges=OFF:LEN,OFF:LEN" (the global shape, the
 * dimension and the ranges in storage order). Returns 0 for a whole tensor (nothing to store). */
int params_slice_format(const ParamSpec* s, char* val, size_t n);
/* Parse such a value into sl (ndim from the shape list). Returns 0, or -1 when malformed: more than
 * TENSOR_MAX_DIMS dimensions, a number out of range (a dimension < 1, a product of the global shape or an
 * offset + length past INT64_MAX), a range outside the global shape. */
int params_slice_parse(const char* val, ParamSlice* sl, int* ndim);
int params_find(const ParamTable* pt, const char* name); /* index or -1 */
/* The f32 master of tensor i; NULL for a frozen tensor of a bf16 table (params_has_master). */
float* params_data(const ParamTable* pt, int i);
/* Every tensor's values in one host array of pt->total floats at ParamSpec.offset: the masters, and the
 * frozen tensors' compute copies widened to f32 (exact). *owned = 1 when the array was allocated (free it, or
 * hand it to params_set_host_values); 0 when it is pt->data itself (the CPU backend with every master, or a
 * table whose be is NULL: the distributed optimizer's host view of the whole state while a checkpoint is
 * written). */
float* params_host_values(const ParamTable* pt, int* owned);
/* The values of host array h (as params_host_values lays them out) into the table: the masters, and the
 * frozen tensors without a master straight into their compute copy (rounded to bf16). Frees h when owned.
 * The compute copies of tensors with a master are left to params_master_written / params_refresh_compute,
 * as after any write of data. */
void params_set_host_values(ParamTable* pt, float* h, int owned);
/* Tensor i's values (numel floats) into host memory dst: its master, or its compute copy widened. */
void params_values_to_host(const ParamTable* pt, int i, float* dst);
/* 1 when some tensor of pt holds no master (params_has_master). */
int params_lean(const ParamTable* pt);

/* The gradient of tensor i, or NULL when it is frozen. */
float* params_grad(const ParamTable* pt, int i);
/* The values the ops compute with, typed by their storage: the bf16 compute copy when there is one, else the master. */
Buf params_weights_buf(const ParamTable* pt, int i);
/* The same as f32 words: refuses a 2-byte compute copy (a 1-D norm weight, say, which is f32 on every table). */
float* params_weights(const ParamTable* pt, int i);
/* Storage of tensor i's compute copy (see ParamTable.compute) and its address. A 2-D tensor is 2-byte
 * bf16 on a table whose weight_dtype is DTYPE_BF16 (the CUDA bf16 table; a params_mark_gemm_bias'd 1-D one where
 * bias_dtype is), so every op that reads it must
 * take it as a GEMM weight or an embedding table; a 2-D tensor read any other way (a position embedding
 * added to activations, say) must be marked with params_keep_f32_compute before params_alloc. */
void params_keep_f32_compute(ParamTable* pt, const char* name); /* dies if no such tensor */
/* Mark 1-D tensor `name` as a GEMM's bias (read only as linear_forward / linear_gelu_forward's `bias`): its compute
 * copy takes the table's Backend.bias_dtype (2-byte bf16 words on the CUDA bf16 tables, written by AdamW's own pass,
 * so no step converts it); other 1-D tensors keep f32 words. Before params_alloc; dies if no such 1-D tensor. */
void params_mark_gemm_bias(ParamTable* pt, const char* name);
/* Mark tensor `name` as a gather's table read in the activation storage (CLIP's class and position embeddings,
 * rows_gather's tables): with ParamTable.act_tables_bf16 set its compute copy is 2-byte bf16 words where the
 * table's weight_dtype is (written by AdamW's own pass, as a 2-D weight's: no step narrows it), else as unmarked
 * (f32 words holding bf16 values on the bf16 table: the same values). Before params_alloc; dies if no such tensor. */
void params_mark_act_table(ParamTable* pt, const char* name);
DType params_compute_dtype(const ParamTable* pt, int i);
void* params_compute_ptr(const ParamTable* pt, int i);
Buf params_compute_buf(const ParamTable* pt, int i); /* the two as one typed buffer */
/* The master of tensor i (every tensor when i < 0) was written outside the optimiser: its compute copy is
 * stale until params_refresh_compute. Every writer of `data` other than AdamW calls it (no-op in fp32). */
void params_master_written(ParamTable* pt, int i);
/* Rebuild the compute copy of every tensor marked stale from its master (rounded to bf16, in the
 * storage params_compute_dtype gives) and clear the marks; no-op in fp32. */
void params_refresh_compute(ParamTable* pt);
/* The index of the first tensor whose compute copy is stale, or -1 (always -1 in fp32). */
int params_compute_stale(const ParamTable* pt);
/* The compute copy checked against the master on the host: writes into `name` (n bytes) the first
 * tensor whose copy is not bit for bit the master rounded to bf16 and returns how many differ (0 in
 * fp32). A diagnostic (one pass over every weight through the host), not a per-step check. */
int params_verify_compute(const ParamTable* pt, char* name, size_t n);
void params_zero_grad(ParamTable* pt);
void params_free(ParamTable* pt);

/* ---- NF4 storage of frozen base weights (QLoRA; engine/params_quant.c, docs/training.md "QLoRA") ----
 * A tensor marked with params_mark_quant (frozen, whole: not a slice) holds no master and no compute copy: the
 * values written to it (initialisation, a checkpoint or init_from read) are quantised once, over the whole
 * tensor flattened row-major as bitsandbytes' quantize_4bit(blocksize 64, quant_type nf4, compress_statistics)
 * does (engine/quant.h), when its last value arrives; the table reports it back dequantised (bf16 values widened
 * to f32: params_values_to_host), and a write of exactly those values back (a load that leaves the tensor as it
 * is) keeps the quantised form. */
typedef struct ParamQuant {
    uint8_t* q;       /* backend: (numel + 1) / 2 packed NF4 codes, value 2j in the high nibble of byte j */
    uint8_t* q8;      /* backend: nb 8-bit codes of the absmaxes minus offset (dynamic map), nb = blocks of 64 */
    float* absmax2;   /* backend: nb2 second-level absmaxes, one per 256 absmaxes */
    float offset;     /* the absmaxes' mean */
    size_t nb, nb2;
    float* stage;     /* host: values written since the last quantisation (NULL: none pending) */
    size_t staged;    /* how many of them */
    int set;          /* holds a quantised form (a write of exactly its dequantised values keeps it) */
    /* A tensor-parallel slice (params_is_slice): the quantisation is the whole weight's (bitsandbytes quantises the
     * whole flattened weight). The backend holds the slice's codes (q, local order) and one f32 absmax per block of
     * 64 of its values (absmax2, nb of them; q8 NULL), restored from the whole form, which stays on the host (hq,
     * hq8, habsmax2, offset: what checkpoints write); every block of the slice lies inside one block of the whole
     * (model_tp_check refuses a split that cuts one). Values are staged until the whole weight's are given
     * (params_quant_pending, params_quant_put_whole). */
    int split;
    size_t gnumel, gnb, gnb2;
    const Backend* be; /* where q, q8, absmax2 live (ParamTable.be is NULL while a table points at host copies) */
    uint8_t *hq, *hq8;
    float* habsmax2;
} ParamQuant;
/* Mark tensor `name` for NF4 storage; before params_alloc; dies if no such 2-D tensor. */
void params_mark_quant(ParamTable* pt, const char* name);
/* Tensor i's dequantised values into out, a weight in the storage be->weight_dtype gives (2-byte bf16 words, or
 * f32 words holding the bf16 values), by be's nf4_dequantize (be: the table's backend, possibly bound to a stream). */
void params_quant_dequantize(const ParamTable* pt, const Backend* be, int i, Buf out);
/* Tensor i's quantised form to / from host memory: q ((numel + 1) / 2 bytes), q8 (nb), absmax2 (nb2 floats),
 * offset, of the whole tensor (params_quant_sizes; a tensor-parallel slice's setter keeps its slice). The setter
 * replaces the stored form as it is (a checkpoint's: no quantisation). */
void params_quant_get(const ParamTable* pt, int i, uint8_t* q, uint8_t* q8, float* absmax2, float* offset);
void params_quant_set(ParamTable* pt, int i, const uint8_t* q, const uint8_t* q8, const float* absmax2, float offset);
/* The whole tensor's values, blocks of 64 and blocks of 256 absmaxes (a slice: its global tensor's). */
void params_quant_sizes(const ParamTable* pt, int i, size_t* numel, size_t* nb, size_t* nb2);
/* A tensor-parallel slice whose values were all written and not yet quantised: those values (local order), else
 * NULL. The caller gathers every rank's slice into the whole weight (row-major, the global shape) and gives it to
 * params_quant_put_whole, which quantises it (or keeps the form it holds when the values are its own) and keeps
 * the slice. */
const float* params_quant_pending(const ParamTable* pt, int i);
void params_quant_put_whole(ParamTable* pt, int i, const float* whole);
/* Internal to params.c: storage after the table's layout, a write of values [at, at + n), the host values, the
 * storage freed */
void params_quant_alloc(ParamTable* pt);
void params_quant_put(ParamTable* pt, int i, size_t at, const float* h, size_t n);
void params_quant_values(const ParamTable* pt, int i, float* dst);
void params_quant_free(ParamTable* pt);

#endif
