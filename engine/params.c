/* params.c — the parameter table (engine/params.h): register tensors by name and shape, then one
 * allocation each for values, gradients and the two AdamW moments on the chosen backend.
 *
 * Tensors are packed back to back in registration order (offset = sum of earlier numels), so a
 * global operation (grad norm, AdamW over all, the DP all-reduce) is one loop over `total` floats.
 * Values are generated on the host in chunks and copied to the backend; because init_normal is a
 * function of (seed, name, element index), chunking (and the parallel layout) changes nothing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/params.h"
#include "engine/cuda/kernel_math.h"

#define PARAMS_INIT_CHUNK ((size_t)1 << 20) /* floats generated per host chunk */

void params_init(ParamTable* pt) { memset(pt, 0, sizeof *pt); }

int params_add(ParamTable* pt, const char* name, int ndim, const int64_t* shape, ParamInit init, float init_std,
               int decay) {
    RR_ASSERT(pt->data == NULL && "params_add after params_alloc");
    RR_ASSERT(ndim >= 1 && ndim <= TENSOR_MAX_DIMS);
    if (strlen(name) >= sizeof pt->specs[0].name)
        rr_die("parameter name '%s' is longer than %zu characters", name, sizeof pt->specs[0].name - 1);
    if (params_find(pt, name) >= 0) rr_die("parameter '%s' is registered twice", name);
    if (pt->n == pt->cap) {
        pt->cap = pt->cap ? 2 * pt->cap : 64;
        pt->specs = reallocCheck(pt->specs, (size_t)pt->cap * sizeof(ParamSpec));
    }
    ParamSpec* s = &pt->specs[pt->n];
    memset(s, 0, sizeof *s);
    strcpy(s->name, name);
    s->ndim = ndim;
    s->numel = 1;
    for (int i = 0; i < ndim; i++) {
        RR_ASSERT(shape[i] > 0);
        s->shape[i] = shape[i];
        s->numel *= (size_t)shape[i];
    }
    s->offset = pt->total;
    s->moff = pt->total;
    s->goff = pt->total;
    s->slice.dim = -1;
    for (int i = 0; i < ndim; i++) s->slice.gshape[i] = shape[i];
    s->decay = decay;
    s->init = init;
    s->init_std = init_std;
    pt->total += s->numel;
    pt->mtotal += s->numel;
    return pt->n++;
}

int params_name_under(const char* name, const char* prefix) {
    size_t n = strlen(prefix);
    return n > 0 && strncmp(name, prefix, n) == 0 && (name[n] == 0 || name[n] == '.');
}

int params_freeze(ParamTable* pt, const char* prefix) {
    RR_ASSERT(pt->data == NULL && "params_freeze after params_alloc");
    int hits = 0;
    for (int i = 0; i < pt->n; i++)
        if (params_name_under(pt->specs[i].name, prefix)) {
            pt->specs[i].frozen = 1;
            hits++;
        }
    return hits;
}

void params_forward_only(ParamTable* pt) {
    RR_ASSERT(pt->data == NULL && "params_forward_only after params_alloc");
    for (int i = 0; i < pt->n; i++) pt->specs[i].frozen = 1;
    pt->forward_only = 1;
}

/* NF4 storage (engine/params_quant.c keeps it): frozen, and quantised whole, so never a slice */
void params_mark_quant(ParamTable* pt, const char* name) {
    int i = params_find(pt, name);
    if (i < 0 || pt->specs[i].ndim != 2) rr_die("internal: params_mark_quant: no 2-D tensor '%s'", name);
    RR_ASSERT(pt->data == NULL);               /* before params_alloc lays the table out */
    RR_ASSERT(!params_is_slice(&pt->specs[i])); /* quantised whole (a split would change its blocks) */
    pt->specs[i].quant = 1;
    pt->specs[i].frozen = 1;
}

int params_add_slice(ParamTable* pt, const char* name, int ndim, const int64_t* gshape, const ParamSlice* sl,
                     ParamInit init, float init_std, int decay) {
    RR_ASSERT(sl->dim >= 0 && sl->dim < ndim && sl->n >= 1 && sl->n <= PARAM_MAX_RANGES);
    int64_t shape[TENSOR_MAX_DIMS] = {0}, len = 0;
    for (int k = 0; k < sl->n; k++) {
        RR_ASSERT(sl->off[k] >= 0 && sl->len[k] > 0 && sl->off[k] + sl->len[k] <= gshape[sl->dim]);
        len += sl->len[k];
    }
    for (int i = 0; i < ndim; i++) shape[i] = i == sl->dim ? len : gshape[i];
    int idx = params_add(pt, name, ndim, shape, init, init_std, decay);
    ParamSpec* s = &pt->specs[idx];
    s->slice = *sl;
    for (int i = 0; i < ndim; i++) s->slice.gshape[i] = gshape[i];
    return idx;
}

int params_slice_format(const ParamSpec* s, char* val, size_t n) {
    if (!params_is_slice(s)) return 0;
    size_t o = (size_t)snprintf(val, n, "dim=%d;shape=", s->slice.dim);
    for (int i = 0; i < s->ndim && o < n; i++) o += (size_t)snprintf(val + o, n - o, "%s%lld", i ? "," : "", (long long)s->slice.gshape[i]);
    if (o < n) o += (size_t)snprintf(val + o, n - o, ";ranges=");
    for (int k = 0; k < s->slice.n && o < n; k++)
        o += (size_t)snprintf(val + o, n - o, "%s%lld:%lld", k ? "," : "", (long long)s->slice.off[k], (long long)s->slice.len[k]);
    return 1;
}

/* One decimal integer in [lo, hi] at *p (a file's text: no overflow, no sign games); advances *p. */
static int slice_num(const char** p, int64_t lo, int64_t hi, int64_t* out) {
    char* end;
    errno = 0;
    long long v = strtoll(*p, &end, 10);
    if (end == *p || errno || v < lo || v > hi) return -1;
    *p = end;
    *out = v;
    return 0;
}

int params_slice_parse(const char* val, ParamSlice* sl, int* ndim) {
    memset(sl, 0, sizeof *sl);
    if (!val) return -1;
    const char* p = val;
    int64_t v, numel = 1;
    if (strncmp(p, "dim=", 4)) return -1;
    p += 4;
    if (slice_num(&p, 0, TENSOR_MAX_DIMS - 1, &v)) return -1;
    sl->dim = (int)v;
    if (strncmp(p, ";shape=", 7)) return -1;
    p += 7;
    int nd = 0;
    for (;;) {
        if (nd >= TENSOR_MAX_DIMS) return -1; /* more dimensions than any tensor of the model */
        if (slice_num(&p, 1, INT64_MAX, &sl->gshape[nd]) || rr_mul_i64(numel, sl->gshape[nd], &numel)) return -1;
        nd++;
        if (*p != ',') break;
        p++;
    }
    if (strncmp(p, ";ranges=", 8)) return -1;
    p += 8;
    for (;;) {
        if (sl->n >= PARAM_MAX_RANGES) return -1;
        if (slice_num(&p, 0, INT64_MAX, &sl->off[sl->n]) || *p != ':') return -1;
        p++;
        if (slice_num(&p, 1, INT64_MAX, &sl->len[sl->n])) return -1;
        sl->n++;
        if (*p != ',') break;
        p++;
    }
    if (*p || sl->dim >= nd) return -1;
    for (int k = 0; k < sl->n; k++) {
        int64_t end;
        if (rr_add_i64(sl->off[k], sl->len[k], &end) || end > sl->gshape[sl->dim]) return -1;
    }
    *ndim = nd;
    return 0;
}

/* Values [at, at + n) of tensor i from host array h: into its master, or (a tensor without one) rounded to bf16
 * on the host into its compute copy (rr_f32_to_bf16: the rounding of the backends' to_bf16 / round_bf16). */
static void params_put(ParamTable* pt, int i, size_t at, const float* h, size_t n) {
    const Backend* be = pt->be;
    if (pt->specs[i].quant) {
        params_quant_put(pt, i, at, h, n);
        return;
    }
    if (params_has_master(pt, i)) {
        be->dev->copy_h2d(be, pt->data + pt->specs[i].moff + at, h, n * sizeof(float));
        return;
    }
    int two = params_compute_dtype(pt, i) == DTYPE_BF16;
    size_t es = two ? 2 : 4;
    void* tmp = mallocCheck((n ? n : 1) * es);
    for (size_t k = 0; k < n; k++) {
        uint16_t b = rr_f32_to_bf16(h[k]);
        if (two) ((uint16_t*)tmp)[k] = b;
        else ((float*)tmp)[k] = rr_bf16_to_f32(b);
    }
    be->dev->copy_h2d(be, (char*)params_compute_ptr(pt, i) + at * es, tmp, n * es);
    free(tmp);
}

void params_alloc(ParamTable* pt, const Backend* be, uint64_t seed) {
    RR_ASSERT(pt->data == NULL);
    pt->be = be;
    /* gradients and moments exist for the trainable tensors only, packed in registration order; so do the
     * masters on a bf16 table (a frozen tensor keeps only its compute copy) */
    int lean = be->precision == PRECISION_BF16;
    pt->gtotal = pt->mtotal = 0;
    for (int i = 0; i < pt->n; i++) {
        ParamSpec* s = &pt->specs[i];
        s->goff = pt->gtotal;
        if (!s->frozen) pt->gtotal += s->numel;
        s->moff = (lean && s->frozen) || s->quant ? SIZE_MAX : pt->mtotal;
        if (s->moff != SIZE_MAX) pt->mtotal += s->numel;
    }
    if (lean) {
        /* each tensor 256-byte aligned (cuBLASLt wants 16 bytes; 256 keeps every row start of a sliced
         * read aligned as cudaMalloc's are) */
        size_t cb = 0;
        for (int i = 0; i < pt->n; i++) {
            ParamSpec* s = &pt->specs[i];
            s->coff = cb;
            if (!s->quant) cb += (s->numel * dtype_size(params_compute_dtype(pt, i)) + 255) & ~(size_t)255;
        }
        pt->compute_bytes = cb;
        pt->compute = be_alloc_as(be, MEM_WEIGHTS, cb ? cb : 256);
    }
    size_t bytes = pt->mtotal * sizeof(float), gbytes = pt->gtotal * sizeof(float);
    pt->data = be_alloc_as(be, MEM_WEIGHTS, bytes ? bytes : sizeof(float));
    if (pt->forward_only) {
        RR_ASSERT(pt->gtotal == 0); /* params_forward_only froze every tensor, and nothing registers one after it */
        pt->grad = NULL;
    } else {
        pt->grad = be_alloc_as(be, MEM_GRADS, gbytes ? gbytes : sizeof(float));
        be->dev->memset0(be, pt->grad, gbytes);
    }
    params_quant_alloc(pt);
    float* chunk = mallocCheck(PARAMS_INIT_CHUNK * sizeof(float));
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (s->slice.dim >= 0 && s->init == PARAM_INIT_NORMAL) {
            /* a slice: its values at their global indices, in one host buffer */
            float* h = mallocCheck(s->numel * sizeof(float));
            init_normal_slice(h, s->name, s->ndim, s->slice.gshape, s->slice.dim, s->slice.n, s->slice.off,
                              s->slice.len, seed, s->init_std);
            params_put(pt, i, 0, h, s->numel);
            free(h);
            continue;
        }
        if (s->slice.dim >= 0 && s->init == PARAM_INIT_UNIFORM) {
            /* a slice of a uniform tensor (LoRA's A: small): the whole drawn, the slice's ranges copied */
            int64_t rows = s->slice.gshape[0], cols = s->ndim > 1 ? s->slice.gshape[1] : 1;
            float* whole = mallocCheck((size_t)(rows * cols) * sizeof(float));
            float* h = mallocCheck(s->numel * sizeof(float));
            init_uniform(whole, (size_t)(rows * cols), 0, seed, s->name, s->init_std);
            size_t o = 0;
            for (int64_t r0 = 0; r0 < (s->slice.dim == 0 ? 1 : rows); r0++)
                for (int k = 0; k < s->slice.n; k++) {
                    size_t len = (size_t)(s->slice.dim == 0 ? s->slice.len[k] * cols : s->slice.len[k]);
                    size_t from = (size_t)(s->slice.dim == 0 ? s->slice.off[k] * cols : r0 * cols + s->slice.off[k]);
                    memcpy(h + o, whole + from, len * sizeof(float));
                    o += len;
                }
            params_put(pt, i, 0, h, s->numel);
            free(h);
            free(whole);
            continue;
        }
        for (size_t done = 0; done < s->numel; done += PARAMS_INIT_CHUNK) {
            size_t n = s->numel - done < PARAMS_INIT_CHUNK ? s->numel - done : PARAMS_INIT_CHUNK;
            switch (s->init) {
            case PARAM_INIT_NORMAL: init_normal(chunk, n, done, seed, s->name, s->init_std); break;
            case PARAM_INIT_ONES:
                for (size_t j = 0; j < n; j++) chunk[j] = 1.0f;
                break;
            case PARAM_INIT_ZEROS: memset(chunk, 0, n * sizeof(float)); break;
            case PARAM_INIT_UNIFORM: init_uniform(chunk, n, done, seed, s->name, s->init_std); break;
            }
            params_put(pt, i, done, chunk, n);
        }
    }
    free(chunk);
    params_master_written(pt, -1);
    params_refresh_compute(pt);
    be->dev->synchronize(be);
}

int params_lean(const ParamTable* pt) {
    for (int i = 0; i < pt->n; i++)
        if (!params_has_master(pt, i)) return 1;
    return 0;
}

void params_values_to_host(const ParamTable* pt, int i, float* dst) {
    const ParamSpec* s = &pt->specs[i];
    const Backend* be = pt->be;
    if (s->quant) {
        params_quant_values(pt, i, dst);
        return;
    }
    if (params_has_master(pt, i)) {
        be->dev->copy_d2h(be, dst, pt->data + s->moff, s->numel * sizeof(float));
        return;
    }
    int two = params_compute_dtype(pt, i) == DTYPE_BF16;
    if (!two) { /* f32 words holding the bf16 values */
        be->dev->copy_d2h(be, dst, params_compute_ptr(pt, i), s->numel * sizeof(float));
        return;
    }
    uint16_t* tmp = mallocCheck((s->numel ? s->numel : 1) * 2);
    be->dev->copy_d2h(be, tmp, params_compute_ptr(pt, i), s->numel * 2);
    for (size_t k = 0; k < s->numel; k++) dst[k] = rr_bf16_to_f32(tmp[k]);
    free(tmp);
}

float* params_host_values(const ParamTable* pt, int* owned) {
    *owned = 0;
    if (!pt->be) return pt->data;
    const Backend* be = pt->be;
    int lean = params_lean(pt);
    if (!lean && be->dev->host_addressable) return pt->data;
    float* h = mallocCheck((pt->total ? pt->total : 1) * sizeof(float));
    *owned = 1;
    if (!lean) {
        be->dev->copy_d2h(be, h, pt->data, pt->total * sizeof(float));
        return h;
    }
    for (int i = 0; i < pt->n; i++) params_values_to_host(pt, i, h + pt->specs[i].offset);
    return h;
}

void params_set_host_values(ParamTable* pt, float* h, int owned) {
    if (!owned) return; /* h is pt->data: written where it is */
    const Backend* be = pt->be;
    if (!params_lean(pt)) be->dev->copy_h2d(be, pt->data, h, pt->total * sizeof(float));
    else
        for (int i = 0; i < pt->n; i++) params_put(pt, i, 0, h + pt->specs[i].offset, pt->specs[i].numel);
    free(h);
}

DType params_compute_dtype(const ParamTable* pt, int i) {
    RR_ASSERT(i >= 0 && i < pt->n && pt->be);
    const ParamSpec* sp = &pt->specs[i];
    if (sp->act_table && pt->act_tables_bf16) return pt->be->weight_dtype;
    if (sp->ndim == 1 && sp->gemm_bias) return pt->be->weight_dtype;
    return sp->ndim == 2 && !sp->f32_compute ? pt->be->weight_dtype : DTYPE_F32;
}

void params_mark_gemm_bias(ParamTable* pt, const char* name) {
    int i = params_find(pt, name);
    if (i < 0 || pt->specs[i].ndim != 1) rr_die("internal: params_mark_gemm_bias: no 1-D tensor '%s'", name);
    RR_ASSERT(pt->data == NULL); /* before params_alloc lays the copy out */
    pt->specs[i].gemm_bias = 1;
}

void params_mark_act_table(ParamTable* pt, const char* name) {
    int i = params_find(pt, name);
    if (i < 0) rr_die("internal: params_mark_act_table: no tensor '%s'", name);
    RR_ASSERT(pt->data == NULL); /* before params_alloc lays the copy out */
    pt->specs[i].act_table = 1;
}

void params_keep_f32_compute(ParamTable* pt, const char* name) {
    int i = params_find(pt, name);
    if (i < 0) rr_die("internal: params_keep_f32_compute: no tensor '%s'", name);
    RR_ASSERT(pt->data == NULL); /* before params_alloc lays the copy out */
    pt->specs[i].f32_compute = 1;
}

void* params_compute_ptr(const ParamTable* pt, int i) {
    RR_ASSERT(i >= 0 && i < pt->n && pt->compute);
    return (char*)pt->compute + pt->specs[i].coff;
}

Buf params_compute_buf(const ParamTable* pt, int i) { return buf_of(params_compute_ptr(pt, i), params_compute_dtype(pt, i)); }

void params_master_written(ParamTable* pt, int i) {
    if (!pt->compute) return;
    RR_ASSERT(i < pt->n);
    for (int k = i < 0 ? 0 : i; k < (i < 0 ? pt->n : i + 1); k++) pt->specs[k].compute_stale = 1;
}

void params_refresh_compute(ParamTable* pt) {
    if (!pt->compute) return;
    for (int i = 0; i < pt->n; i++) {
        ParamSpec* s = &pt->specs[i];
        if (!s->compute_stale) continue;
        s->compute_stale = 0;
        if (!params_has_master(pt, i)) continue; /* the copy is the value itself (written by params_put) */
        if (params_compute_dtype(pt, i) == DTYPE_BF16)
            pt->be->ops->to_bf16(pt->be, (uint16_t*)params_compute_ptr(pt, i), pt->data + s->moff, s->numel);
        else
            pt->be->ops->round_bf16(pt->be, (float*)params_compute_ptr(pt, i), pt->data + s->moff, s->numel);
    }
}

int params_compute_stale(const ParamTable* pt) {
    if (!pt->compute) return -1;
    for (int i = 0; i < pt->n; i++)
        if (pt->specs[i].compute_stale) return i;
    return -1;
}

int params_verify_compute(const ParamTable* pt, char* name, size_t n) {
    if (n) name[0] = 0;
    if (!pt->compute) return 0;
    const Backend* be = pt->be;
    float* master = mallocCheck((pt->mtotal ? pt->mtotal : 1) * sizeof(float));
    unsigned char* copy = mallocCheck(pt->compute_bytes ? pt->compute_bytes : 1);
    be->dev->copy_d2h(be, master, pt->data, pt->mtotal * sizeof(float));
    be->dev->copy_d2h(be, copy, pt->compute, pt->compute_bytes);
    int bad = 0;
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (!params_has_master(pt, i)) continue; /* the copy is the value: nothing to derive it from */
        const float* m = master + s->moff;
        const unsigned char* c = copy + s->coff;
        int two = params_compute_dtype(pt, i) == DTYPE_BF16, same = 1;
        for (size_t k = 0; k < s->numel && same; k++) {
            uint16_t want = rr_f32_to_bf16(m[k]);
            if (two) {
                uint16_t got;
                memcpy(&got, c + 2 * k, 2);
                same = got == want;
            } else { /* an f32 word holding the bf16 value */
                uint32_t got;
                memcpy(&got, c + 4 * k, 4);
                same = got == (uint32_t)want << 16;
            }
        }
        if (!same && bad++ == 0 && n) snprintf(name, n, "%s", s->name);
    }
    free(copy);
    free(master);
    return bad;
}

Buf params_weights_buf(const ParamTable* pt, int i) {
    RR_ASSERT(i >= 0 && i < pt->n && pt->data);
    if (pt->specs[i].quant) return buf_none(); /* read dequantised: params_quant_dequantize */
    return pt->compute ? params_compute_buf(pt, i) : buf_f32(pt->data + pt->specs[i].moff);
}

float* params_weights(const ParamTable* pt, int i) { return buf_f32p(params_weights_buf(pt, i)); }

void params_alloc_optimizer(ParamTable* pt) {
    RR_ASSERT(pt->be && pt->m == NULL);
    RR_ASSERT(!pt->forward_only && "params_alloc_optimizer on a forward-only table");
    size_t bytes = pt->gtotal * sizeof(float);
    pt->m = be_alloc_as(pt->be, MEM_OPTIM, bytes ? bytes : sizeof(float));
    pt->v = be_alloc_as(pt->be, MEM_OPTIM, bytes ? bytes : sizeof(float));
    pt->be->dev->memset0(pt->be, pt->m, bytes);
    pt->be->dev->memset0(pt->be, pt->v, bytes);
}

int params_find(const ParamTable* pt, const char* name) {
    for (int i = 0; i < pt->n; i++)
        if (strcmp(pt->specs[i].name, name) == 0) return i;
    return -1;
}

float* params_data(const ParamTable* pt, int i) {
    RR_ASSERT(i >= 0 && i < pt->n && pt->data);
    return params_has_master(pt, i) ? pt->data + pt->specs[i].moff : NULL;
}

float* params_grad(const ParamTable* pt, int i) {
    RR_ASSERT(i >= 0 && i < pt->n);
    if (pt->specs[i].frozen) return NULL; /* every tensor of a forward-only table */
    RR_ASSERT(pt->grad); /* allocated (params_alloc), and not a forward-only table's */
    return pt->grad + pt->specs[i].goff;
}

void params_zero_grad(ParamTable* pt) {
    RR_ASSERT(pt->grad && "params_zero_grad on a forward-only table");
    pt->be->dev->memset0(pt->be, pt->grad, pt->gtotal * sizeof(float));
}

void params_free(ParamTable* pt) {
    if (pt->be) {
        if (pt->data) pt->be->dev->free(pt->data);
        if (pt->grad) pt->be->dev->free(pt->grad);
        if (pt->m) pt->be->dev->free(pt->m);
        if (pt->v) pt->be->dev->free(pt->v);
        if (pt->compute) pt->be->dev->free(pt->compute);
    }
    params_quant_free(pt);
    free(pt->specs);
    memset(pt, 0, sizeof *pt);
}

size_t params_gemm_operand_elems(const ParamTable* pt, int N, int bf16_weights) {
    size_t most = 0;
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* sp = &pt->specs[i];
        if (sp->ndim != 2) continue;
        size_t oc = (size_t)sp->shape[0], c = (size_t)sp->shape[1];
        size_t e = (size_t)N * (c + oc) + (bf16_weights && !sp->f32_compute ? 0 : oc * c);
        if (e > most) most = e;
    }
    return most;
}
