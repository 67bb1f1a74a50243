/* params.h — the parameter table: every tensor of a model (or of one pipeline stage) by name and
 * shape, laid out in one block for values, one for gradients and two for AdamW moments (llm.c's
 * malloc_and_point_parameters). Names follow docs/model.md "Parameters" ("vision.blocks.0.attn.qkv.weight"). */
#ifndef RRFP_PARAMS_H
#define RRFP_PARAMS_H

#include "engine/params_quant.h"
#include "engine/params_types.h"

void params_init(ParamTable* pt);
/* Register a tensor; returns its index. decay = 1 for 2-D weights. Dies on a duplicate name. */
int params_add(ParamTable* pt, const char* name, int ndim, const int64_t* shape, ParamInit init, float init_std,
               int decay);
/* Freeze every registered tensor whose name is `prefix` or starts with `prefix` followed by '.'
 * (so "text.blocks.1" freezes block 1 and not block 10). Before params_alloc. Returns how many
 * tensors matched (0 is not an error here: a pipeline stage may hold none of them). */
int params_freeze(ParamTable* pt, const char* prefix);
/* A table for the forward only (the model eval and generate read): every registered tensor frozen, and params_alloc
 * makes no gradient buffer (pt->grad stays NULL: no gradient at all, where a table whose tensors happen to be all
 * frozen, a pipeline stage of frozen blocks that still runs its backward, keeps a one-word one) and, on a bf16
 * table, no f32 master (params_has_master). params_zero_grad, params_alloc_optimizer and the optimiser and backward
 * calls on it are programmer errors (RR_ASSERT). Before params_alloc. */
void params_forward_only(ParamTable* pt);
/* 1 when tensor name `name` lies under `prefix` in the sense of params_freeze. */
int params_name_under(const char* name, const char* prefix);
/* One allocation for values and one for the gradients of the trainable tensors on backend `be` (none on a
 * params_forward_only table), plus the bf16 compute copy when be->precision is bf16; then fill values from the
 * (seed, name)-keyed initialiser, refresh the compute copy and zero the gradients. */
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

/* The gradient of tensor i, or NULL when it is frozen (every tensor of a params_forward_only table). */
float* params_grad(const ParamTable* pt, int i);
/* The values the ops compute with, typed by their storage: the bf16 compute copy when there is one, else the master. */
Buf params_weights_buf(const ParamTable* pt, int i);
/* The same as f32 words: refuses a 2-byte compute copy (a 1-D norm weight, say, which is f32 on every table). */
float* params_weights(const ParamTable* pt, int i);
/* Storage of tensor i's compute copy (see ParamTable.compute) and its address. A 2-D tensor is 2-byte
 * bf16 on a table whose weight_dtype is DTYPE_BF16 (the CUDA bf16 table; a params_mark_gemm_bias'd 1-D one where
 * weight_dtype is), so every op that reads it must
 * take it as a GEMM weight or an embedding table; a 2-D tensor read any other way (a position embedding
 * added to activations, say) must be marked with params_keep_f32_compute before params_alloc. */
void params_keep_f32_compute(ParamTable* pt, const char* name); /* dies if no such tensor */
/* Mark 1-D tensor `name` as a GEMM's bias (read only as linear_forward / linear_gelu_forward's `bias`): its compute
 * copy takes the table's Backend.weight_dtype (2-byte bf16 words on the CUDA bf16 tables, written by AdamW's own pass,
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

/* NF4 storage (engine/params_quant.h): mark tensor `name` for it; before params_alloc; dies if no such 2-D tensor. */
void params_mark_quant(ParamTable* pt, const char* name);

#endif
