/* params.h — the parameter table: every tensor of a model (or of one pipeline stage) by name and
 * shape, laid out in one block for values, one for gradients and two for AdamW moments (llm.c's
 * malloc_and_point_parameters). Names follow DESIGN.md section 4 ("vision.blocks.0.attn.qkv.weight"). */
#ifndef RRFP_PARAMS_H
#define RRFP_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

typedef enum { PARAM_INIT_NORMAL = 0, PARAM_INIT_ONES = 1, PARAM_INIT_ZEROS = 2 } ParamInit;

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
    size_t offset;  /* in floats, into data/grad/m/v */
    int decay;      /* AdamW weight decay applies (2-D weights only) */
    ParamInit init;
    float init_std; /* for PARAM_INIT_NORMAL */
    ParamSlice slice; /* which part of the global tensor `name` this is (dim -1: all of it) */
} ParamSpec;

typedef struct {
    ParamSpec* specs;
    int n, cap;
    size_t total; /* floats */
    float* data;  /* (total) values */
    float* grad;  /* (total) gradients */
    float* m;     /* (total) AdamW first moment (allocated by params_alloc_optimizer) */
    float* v;     /* (total) AdamW second moment */
    const Backend* be;
} ParamTable;

void params_init(ParamTable* pt);
/* Register a tensor; returns its index. decay = 1 for 2-D weights. Dies on a duplicate name. */
int params_add(ParamTable* pt, const char* name, int ndim, const int64_t* shape, ParamInit init, float init_std,
               int decay);
/* One allocation for values and one for gradients on backend `be`, then fill values from the
 * (seed, name)-keyed initialiser and zero the gradients. */
void params_alloc(ParamTable* pt, const Backend* be, uint64_t seed);
/* Register the slice sl of global tensor `name` (shape gshape): the table holds only the slice, whose
 * values params_alloc draws at their global element indices, so the slice equals that part of the
 * whole tensor registered with params_add. Returns its index. */
int params_add_slice(ParamTable* pt, const char* name, int ndim, const int64_t* gshape, const ParamSlice* sl,
                     ParamInit init, float init_std, int decay);
void params_alloc_optimizer(ParamTable* pt);
int params_find(const ParamTable* pt, const char* name); /* index or -1 */
float* params_data(const ParamTable* pt, int i);
float* params_grad(const ParamTable* pt, int i);
void params_zero_grad(ParamTable* pt);
void params_free(ParamTable* pt);

#endif
