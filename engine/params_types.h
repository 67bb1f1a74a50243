/* params_types.h — the parameter table's types (engine/params.h has its functions): a tensor's spec and the
 * table of them, shared by the table (engine/params.c) and its NF4 storage (engine/params_quant.c). */
#ifndef RRFP_PARAMS_TYPES_H
#define RRFP_PARAMS_TYPES_H

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
    int gemm_bias;   /* a 1-D GEMM bias (params_mark_gemm_bias): its compute copy in the table's Backend.weight_dtype */
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
    float* grad;   /* (gtotal) gradients of the trainable tensors, at goff; NULL on a forward-only table */
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
    /* set before params_alloc: the params_mark_act_table'd tensors are read as 2-byte activations (a stage whose
     * tower stores them so): their compute copy is 2-byte bf16 words where weight_dtype is */
    int act_tables_bf16;
    /* set before params_alloc (params_forward_only): every tensor frozen and no gradient buffer (grad NULL), so a
     * model that only runs forwards (eval, generate) holds its values alone; a backward, params_zero_grad,
     * params_alloc_optimizer or an optimiser step on the table is a programmer error (RR_ASSERT) */
    int forward_only;
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

#endif
