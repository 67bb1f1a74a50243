/* tp.h — the tensor-parallel split of the LLaVA model (docs/parallel.md "Tensor parallelism"), as pure functions of the
 * global parameter name and shape: which elements TP rank t of T owns, the initialisation of a shard
 * as the slice of the one-process tensor, and the vocabulary-parallel cross-entropy. No MPI here: the
 * all-reduces the cross-entropy needs come through a callback (the pipeline passes the tp group's
 * all-reduce; tests pass an in-process one).
 *
 * Splits (Megatron's ColumnParallelLinear / RowParallelLinear; Linear weights are (out, in)):
 *   column  rows (dim 0) split, the bias split alike: q, k, v (k, v by key/value head under grouped-query
 *           attention), gate, up, fc1, projector.0; the ViT's
 *           fused qkv (3 Dv, Dv) as three row ranges, one per q | k | v part, so rank t holds heads
 *           [t H/T, (t+1) H/T) of each;
 *   row     columns (dim 1) split, the bias replicated (added once, by TP rank 0 before the all-reduce): attn o,
 *           mlp down, vision attn out, fc2, projector.2;
 *   vocab   rows (dim 0) split: text.embed (V, Dt) and text.lm_head (V, Dt): rank t holds tokens
 *           [t V/T, (t+1) V/T);
 *   replicated: norms, the patch embedding, the row-parallel biases. */
#ifndef RRFP_MODEL_TP_H
#define RRFP_MODEL_TP_H

#include <stddef.h>
#include <stdint.h>

typedef enum { TP_REPLICATED = 0, TP_COLUMN, TP_ROW, TP_VOCAB } TpSplit;

/* How global tensor `name` is split (names as in model.h). This function can't fail: an unknown name
 * is replicated. */
TpSplit tp_split_of(const char* name);
const char* tp_split_name(TpSplit s);

/* One contiguous range of a global tensor along dim (0: rows, 1: columns). */
typedef struct {
    int dim;
    int64_t offset, length;
} TpRange;
#define TP_MAX_RANGES 3

/* The ranges of global tensor `name` (ndim 1 or 2, shape) that rank t of T owns, in the order they
 * are stored in the shard (concatenated along dim). Returns the number of ranges (1 for a replicated
 * tensor: the whole of dim 0), or -1 with a message when the split dimension is not divisible by T. */
int tp_shard_ranges(const char* name, int ndim, const int64_t* shape, int T, int t, TpRange* out, char* err,
                    size_t err_len);
/* The shard's shape (the split dimension divided by T). */
void tp_shard_shape(const TpRange* r, int n, int ndim, const int64_t* shape, int64_t* out);

/* Fill shard (numel of the shard) with N(0, std) values of the one-process tensor at the shard's
 * global element indices (init_normal keyed by (seed, name, global index)), so a shard equals the
 * slice of the whole. */
void tp_init_normal_shard(float* shard, const char* name, int ndim, const int64_t* shape, const TpRange* r, int n,
                          uint64_t seed, float std);

/* ---- vocabulary-parallel cross-entropy (CPU reference) ----
 * The all-reduce over the TP ranks of one stage, in place on n doubles; op 0 = sum, 1 = max. Returns 0,
 * or -1 with a message. */
typedef int (*TpReduceFn)(void* ctx, double* buf, size_t n, int op_max, char* err, size_t err_len);

/* logits (N, Vs): this rank's vocabulary columns [v0, v0 + Vs) of the (N, V) logits; targets (N) global
 * ids or -100. Two all-reduces (the row max; then the sums of exponentials and the target logits
 * together) give every rank lse (N) of the full rows and *loss_sum = sum over supervised rows of
 * lse - logit[target] (row order, double), as the unsplit op, without gathering the logits.
 * scratch: 3N doubles. Returns 0, or -1 with a message (a target outside [0, V) that is not -100, or
 * the reduce's error). */
int tp_vocab_ce_forward(float* loss_sum, float* lse, const float* logits, const int* targets, int N, int Vs, int v0,
                        int V, TpReduceFn reduce, void* ctx, double* scratch, char* err, size_t err_len);
/* dlogits (N, Vs) += scale * (softmax - onehot(target)) on this rank's columns (no communication: lse
 * is of the full rows). */
void tp_vocab_ce_backward(float* dlogits, const float* logits, const float* lse, const int* targets, float scale,
                          int N, int Vs, int v0);

/* ---- vocabulary-parallel embedding (CPU reference) ----
 * out (T, D) = the rows of table (Vs, D), this rank's tokens [v0, v0 + Vs), for the ids it owns, 0
 * elsewhere (ids < 0, image positions, are 0 on every rank); the caller all-reduces out over the TP
 * group, after which every rank has the whole embedding. Returns 0, or -1 with a message for an id
 * outside [-1, V). */
int tp_vocab_embed_forward(float* out, const int32_t* ids, const float* table, int T, int D, int Vs, int v0, int V,
                           char* err, size_t err_len);
/* dtable (Vs, D) += dout rows of the ids this rank owns (dout: the whole gradient of the embedding). */
void tp_vocab_embed_backward(float* dtable, const int32_t* ids, const float* dout, int T, int D, int Vs, int v0);

#endif
