// optim.cu — the step end on CUDA: sum of squares (the global gradient norm), scaling (clipping) and
// AdamW, so that the trainer never reads or writes parameters, gradients or moments from the host.
// The per-element math and the chunk layout are kernel_math.h's (rr_adamw_*, rr_sumsq_*), shared
// with the CPU backend (engine/adamw.c).
//
// sum_squares is deterministic: one block per chunk of rr_sumsq_chunk_range; thread j of the block
// adds the chunk's values j, j + 256, j + 512, ... in that order (in double), the 256 thread sums are
// combined in a fixed pairwise tree in shared memory, and one thread adds the chunk sums in chunk
// order (rr_sumsq_partials, the CPU's: the other threads of its block stage the partials in shared memory
// for it). No atomics: the bits depend only on the values and n, never on scheduling. They are not the
// CPU's bits (the CPU sums a chunk in index order); the two agree to double round-off.
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"

#define SUMSQ_BLOCK 256 // a power of two (the tree halves it)
#define OPTIM_BLOCK 256

// ---- sum of squares ------------------------------------------------------------------------------

// part[c] = sum of squares of chunk c (blockIdx.x)
static __device__ void sum_squares_chunk(double* part, const float* x, size_t n, size_t c);
static __global__ void sum_squares_chunk_kernel(double* part, const float* x, size_t n) {
    sum_squares_chunk(part + blockIdx.x, x, n, blockIdx.x);
}
// *out = sum of squares of chunk c of x (n values): one block, the single and the multi-tensor kernels' one code
static __device__ void sum_squares_chunk(double* out, const float* x, size_t n, size_t c) {
    __shared__ double s[SUMSQ_BLOCK];
    size_t i0, i1;
    rr_sumsq_chunk_range(n, c, &i0, &i1);
    double acc = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += SUMSQ_BLOCK) acc += rr_sumsq_term(x[i]);
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int k = SUMSQ_BLOCK / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = s[0];
}

// *total = the nc chunk sums added in chunk order (rr_sumsq_partials: a serial chain of double adds, the
// contract the CPU shares, so one thread adds them all). What is parallel is the reading: the block's other
// warps copy the next tile of SUMSQ_TILE partials into shared memory (coalesced) while thread 0 adds the tile
// before it from shared memory, so the chain waits on no global load (was one thread reading ~12k partials one
// load at a time: 0.8 ms for an 800M-parameter stage on an H100).
#define SUMSQ_TILE 256 // partials a tile: thread 0 adds one (~1 us) while the loaders fetch the next
#define SUMSQ_TOTAL_BLOCK 512
// With first (the multi-tensor sum: first[c] = 1 where chunk c begins a tensor, NULL for one tensor) each tensor's
// chunk sums are added in order from 0 and the tensor sums added in tensor order from 0 (sum_squares_multi's
// contract: the per-tensor loop's bits).
static __global__ void sum_squares_total_kernel(double* total, const double* part, size_t nc, const unsigned char* first) {
    __shared__ double tile[2][SUMSQ_TILE];
    __shared__ unsigned char tfirst[2][SUMSQ_TILE];
    size_t ntiles = (nc + SUMSQ_TILE - 1) / SUMSQ_TILE;
    int loader = (int)threadIdx.x - 32, nloaders = (int)blockDim.x - 32; // warps 1.. load; warp 0 adds
    if (loader >= 0)
        for (size_t i = loader; i < SUMSQ_TILE && i < nc; i += nloaders) {
            tile[0][i] = part[i];
            if (first) tfirst[0][i] = first[i];
        }
    __syncthreads();
    double s = 0.0, ss = 0.0;
    for (size_t t = 0; t < ntiles; t++) {
        if (loader >= 0 && t + 1 < ntiles) {
            size_t b = (t + 1) * SUMSQ_TILE;
            for (size_t i = loader; i < SUMSQ_TILE && b + i < nc; i += nloaders) {
                tile[(t + 1) & 1][i] = part[b + i];
                if (first) tfirst[(t + 1) & 1][i] = first[b + i];
            }
        }
        if (threadIdx.x == 0) {
            size_t m = nc - t * SUMSQ_TILE < SUMSQ_TILE ? nc - t * SUMSQ_TILE : SUMSQ_TILE;
            const double* p = tile[t & 1];
            if (first) {
                const unsigned char* f = tfirst[t & 1];
                for (size_t i = 0; i < m; i++) {
                    if (f[i] && t * SUMSQ_TILE + i > 0) ss += s, s = 0.0; // the previous tensor's sum is complete
                    s += p[i];
                }
            } else {
                for (size_t i = 0; i < m; i++) s += p[i];
            }
        }
        __syncthreads(); // tile t + 1 is in; tile t is free for t + 2
    }
    if (threadIdx.x == 0) *total = first ? ss + s : s;
}

// Device scratch for the chunk sums and the total, kept between calls (grown when a bigger n comes):
// the trainer calls this every step, and cudaMalloc / cudaFree would synchronise the device each time.
static double* sumsq_scratch;
static size_t sumsq_scratch_n;

static double* sum_squares_scratch(size_t need) {
    if (need > sumsq_scratch_n) {
        if (sumsq_scratch) cuda_free_tracked(sumsq_scratch);
        cuda_malloc_tracked((void**)&sumsq_scratch, need * sizeof(double));
        sumsq_scratch_n = need;
    }
    return sumsq_scratch;
}

void cuda_sum_squares_reserve(size_t n) {
    if (n) (void)sum_squares_scratch(rr_sumsq_chunks(n) + 1);
}

static void sum_squares_cuda(double* total, double* part, const float* x, size_t n, size_t nc, cudaStream_t stream) {
    sum_squares_chunk_kernel<<<(unsigned)nc, SUMSQ_BLOCK, 0, stream>>>(part, x, n);
    cudaCheck(cudaGetLastError());
    sum_squares_total_kernel<<<1, SUMSQ_TOTAL_BLOCK, 0, stream>>>(total, part, nc, NULL);
    cudaCheck(cudaGetLastError());
}

double cuda_sum_squares(const Backend* be, const float* x, size_t n) {
    if (n == 0) return 0.0;
    size_t nc = rr_sumsq_chunks(n);
    RR_ASSERT(nc <= 0x7fffffffu); // grid.x (2^31 - 1 chunks of 64Ki values: 1.4e14 values)
    double* part = sum_squares_scratch(nc + 1);
    sum_squares_cuda(part + nc, part, x, n, nc, cuda_stream(be));
    double total = 0.0;
    cudaCheck(cudaMemcpyAsync(&total, part + nc, sizeof total, cudaMemcpyDeviceToHost, cuda_stream(be)));
    cuda_check_device_errors(cuda_stream(be)); // synchronises: total is complete on return
    return total;
}

// ---- scale ---------------------------------------------------------------------------------------

static __global__ void scale_kernel(float* x, float s, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}
static void scale_cuda(float* x, float s, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    scale_kernel<<<ceil_div_z(n, OPTIM_BLOCK), OPTIM_BLOCK, 0, stream>>>(x, s, n);
    cudaCheck(cudaGetLastError());
}
void cuda_scale(const Backend* be, float* x, float s, size_t n) { scale_cuda(x, s, n, cuda_stream(be)); }

// ---- AdamW ---------------------------------------------------------------------------------------

// The step's scalars (rr_adamw_step) are computed once on the host, in double as on the CPU, and
// passed by value; each thread updates one element.
static __global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, size_t n, RrAdamwStep c) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) rr_adamw_element(&param[i], &m[i], &v[i], grad[i], &c);
}
static void adamw_cuda(float* param, const float* grad, float* m, float* v, size_t n, RrAdamwStep c,
                       cudaStream_t stream) {
    if (n == 0) return;
    adamw_kernel<<<ceil_div_z(n, OPTIM_BLOCK), OPTIM_BLOCK, 0, stream>>>(param, grad, m, v, n, c);
    cudaCheck(cudaGetLastError());
}
void cuda_adamw_update(const Backend* be, float* param, const float* grad, float* m, float* v, size_t n, const AdamWConfig* cfg, int t,
                       int decay) {
    RR_ASSERT(t >= 1);
    RrAdamwStep c = rr_adamw_step(cfg->lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay, t, decay);
    adamw_cuda(param, grad, m, v, n, c, cuda_stream(be));
}

// AdamW and the compute copy in one pass (BackendOps.adamw_update_copy): the updated value rounded to bf16
// (rr_f32_to_bf16) into a 2-byte copy (B) or an f32 word holding it
template <bool B>
static __global__ void adamw_copy_kernel(float* param, const float* grad, float* m, float* v, size_t n, RrAdamwStep c,
                                         void* copy) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    rr_adamw_element(&param[i], &m[i], &v[i], grad[i], &c);
    if (B)
        ((uint16_t*)copy)[i] = rr_f32_to_bf16(param[i]);
    else
        ((float*)copy)[i] = rr_bf16_round(param[i]);
}
void cuda_adamw_update_copy(const Backend* be, float* param, const float* grad, float* m, float* v, size_t n,
                            const AdamWConfig* cfg, int t, int decay, Buf copy) {
    RR_ASSERT(t >= 1 && (copy.dt == DTYPE_BF16 || copy.dt == DTYPE_F32));
    if (n == 0) return;
    RrAdamwStep c = rr_adamw_step(cfg->lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay, t, decay);
    unsigned g = ceil_div_z(n, OPTIM_BLOCK);
    if (copy.dt == DTYPE_BF16) {
        adamw_copy_kernel<true><<<g, OPTIM_BLOCK, 0, cuda_stream(be)>>>(param, grad, m, v, n, c, copy.p);
    } else {
        adamw_copy_kernel<false><<<g, OPTIM_BLOCK, 0, cuda_stream(be)>>>(param, grad, m, v, n, c, copy.p);
    }
    cudaCheck(cudaGetLastError());
}

// ---- multi-tensor AdamW (BackendOps.adamw_multi) -------------------------------------------------
// Every tensor of a stage in one launch: the tensors are cut into chunks of at most ADAMW_CHUNK values, one
// block a chunk, over a device-side table of the chunks (the tensor's pointers advanced to the chunk's first
// value, its length, which step scalars it takes and its compute copy's kind). Each value goes through
// rr_adamw_element with the RrAdamwStep its tensor's per-tensor call would compute (rr_adamw_step of the
// same configuration, t and decay flag), so the bits are adamw_update's / adamw_update_copy's. The table
// depends only on the tensors (their pointers, lengths, flags): it is built and copied to the device the
// first time a list of tensors comes and reused while the same list comes again (every step), so a step
// costs one launch and no copy; the step's scalars (lr, t) travel by value in the launch.
#define ADAMW_CHUNK 16384     // values a block: 64 per thread, 5 MB of table for 7e9 values
#define ADAMW_MAX_CFGS 4      // configurations a call (the trainer uses 2: the rest and the projector)
#define ADAMW_TABLE_CACHE 8   // tables kept (a process runs a few stages at most)

struct AdamwChunk {
    float* param;
    const float* grad;
    float *m, *v;
    void* copy;            // the compute copy's first value of the chunk, or NULL
    unsigned n;            // values in the chunk (<= ADAMW_CHUNK)
    unsigned char step;    // index into AdamwSteps.s: 2 cfg + decay
    unsigned char copy_dt; // 0 none, 1 bf16 (2-byte words), 2 f32 words holding the bf16 value
};
struct AdamwSteps {
    RrAdamwStep s[2 * ADAMW_MAX_CFGS];
};

static __global__ void adamw_multi_kernel(const AdamwChunk* table, AdamwSteps steps) {
    const AdamwChunk* ch = &table[blockIdx.x];
    const RrAdamwStep* c = &steps.s[ch->step];
    for (unsigned i = threadIdx.x; i < ch->n; i += OPTIM_BLOCK) {
        rr_adamw_element(&ch->param[i], &ch->m[i], &ch->v[i], ch->grad[i], c);
        if (ch->copy_dt == 1)
            ((uint16_t*)ch->copy)[i] = rr_f32_to_bf16(ch->param[i]);
        else if (ch->copy_dt == 2)
            ((float*)ch->copy)[i] = rr_bf16_round(ch->param[i]);
    }
}

struct AdamwTable {
    AdamwTensor* ts; // the list it was built from (the cache's key)
    int n;
    AdamwChunk* dev;
    size_t nchunks;
    unsigned long last_use;
};
static AdamwTable adamw_tables[ADAMW_TABLE_CACHE];
static unsigned long adamw_clock;

static int adamw_same_list(const AdamwTable* tb, const AdamwTensor* ts, int n) {
    if (!tb->ts || tb->n != n) return 0;
    for (int i = 0; i < n; i++) {
        const AdamwTensor *a = &tb->ts[i], *b = &ts[i];
        if (a->param != b->param || a->grad != b->grad || a->m != b->m || a->v != b->v || a->n != b->n ||
            a->decay != b->decay || a->cfg != b->cfg || a->copy.p != b->copy.p || (a->copy.p && a->copy.dt != b->copy.dt))
            return 0;
    }
    return 1;
}

// the device table for this list: the cached one, else built, copied (on the call's stream) and cached in the
// least recently used slot
static const AdamwTable* adamw_table(const AdamwTensor* ts, int n, cudaStream_t stream) {
    AdamwTable* slot = &adamw_tables[0];
    for (int k = 0; k < ADAMW_TABLE_CACHE; k++) {
        AdamwTable* tb = &adamw_tables[k];
        if (adamw_same_list(tb, ts, n)) {
            tb->last_use = ++adamw_clock;
            return tb;
        }
        if (tb->last_use < slot->last_use) slot = tb;
    }
    size_t nchunks = 0;
    for (int i = 0; i < n; i++) nchunks += (ts[i].n + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
    RR_ASSERT(nchunks <= 0x7fffffffu); // grid.x
    AdamwChunk* host = (AdamwChunk*)malloc((nchunks ? nchunks : 1) * sizeof(AdamwChunk));
    AdamwTensor* key = (AdamwTensor*)malloc((n ? n : 1) * sizeof(AdamwTensor));
    if (!host || !key) rr_die("out of host memory (the multi-tensor AdamW's table of %zu chunks)", nchunks);
    memcpy(key, ts, (size_t)n * sizeof(AdamwTensor));
    size_t c = 0;
    for (int i = 0; i < n; i++) {
        const AdamwTensor* t = &ts[i];
        int dt = !t->copy.p ? 0 : t->copy.dt == DTYPE_BF16 ? 1 : 2;
        for (size_t o = 0; o < t->n; o += ADAMW_CHUNK, c++) {
            AdamwChunk* ch = &host[c];
            ch->param = t->param + o;
            ch->grad = t->grad + o;
            ch->m = t->m + o;
            ch->v = t->v + o;
            ch->copy = dt == 0 ? NULL : dt == 1 ? (void*)((uint16_t*)t->copy.p + o) : (void*)((float*)t->copy.p + o);
            ch->n = (unsigned)(t->n - o < ADAMW_CHUNK ? t->n - o : ADAMW_CHUNK);
            ch->step = (unsigned char)(2 * t->cfg + (t->decay ? 1 : 0));
            ch->copy_dt = (unsigned char)dt;
        }
    }
    if (slot->ts) { // evict: the table may still be read by a queued launch, which cudaFree waits for
        free(slot->ts);
        if (slot->dev) cuda_free_tracked(slot->dev);
    }
    slot->ts = key;
    slot->n = n;
    slot->nchunks = nchunks;
    slot->dev = NULL;
    if (nchunks) {
        cuda_malloc_tracked((void**)&slot->dev, nchunks * sizeof(AdamwChunk));
        // pageable source: the copy has read it when the call returns
        cudaCheck(cudaMemcpyAsync(slot->dev, host, nchunks * sizeof(AdamwChunk), cudaMemcpyHostToDevice, stream));
    }
    free(host);
    slot->last_use = ++adamw_clock;
    return slot;
}

void cuda_adamw_multi(const Backend* be, const AdamwTensor* ts, int n, const AdamWConfig* cfgs, int ncfg, int t) {
    RR_ASSERT(t >= 1 && n >= 0 && ncfg >= 1 && ncfg <= ADAMW_MAX_CFGS);
    for (int i = 0; i < n; i++)
        RR_ASSERT(ts[i].cfg >= 0 && ts[i].cfg < ncfg && (!ts[i].copy.p || ts[i].copy.dt == DTYPE_BF16 || ts[i].copy.dt == DTYPE_F32));
    cudaStream_t stream = cuda_stream(be);
    const AdamwTable* tb = adamw_table(ts, n, stream);
    if (tb->nchunks == 0) return;
    AdamwSteps steps;
    memset(&steps, 0, sizeof steps);
    for (int k = 0; k < ncfg; k++)
        for (int d = 0; d < 2; d++) {
            const AdamWConfig* c = &cfgs[k];
            steps.s[2 * k + d] = rr_adamw_step(c->lr, c->beta1, c->beta2, c->eps, c->weight_decay, t, d);
        }
    adamw_multi_kernel<<<(unsigned)tb->nchunks, OPTIM_BLOCK, 0, stream>>>(tb->dev, steps);
    cudaCheck(cudaGetLastError());
}

// ---- multi-tensor sum of squares (BackendOps.sum_squares_multi) ----------------------------------
// Every tensor's chunks (rr_sumsq_chunk_range of its own length: the chunks sum_squares would make of it) in one
// launch of one block a chunk, over a device-side table built the first time a list of tensors comes and reused
// while the same list comes again (every step: the first step's call copies it, later ones only launch); then the
// total kernel adds each tensor's chunk sums in order and the tensor sums in tensor order (the flags mark where a
// tensor begins), and one copy brings the total back. Each chunk's sum is sum_squares_chunk's, as in cuda_sum_squares:
// the bits are the per-tensor loop's.
#define SUMSQ_TABLE_CACHE 8
struct SumsqChunk {
    const float* x; // the tensor's first value
    size_t n;       // the tensor's length
    size_t c;       // the chunk of it
};
static __global__ void sum_squares_multi_chunk_kernel(double* part, const SumsqChunk* table) {
    const SumsqChunk* ch = &table[blockIdx.x];
    sum_squares_chunk(part + blockIdx.x, ch->x, ch->n, ch->c);
}
struct SumsqTable {
    const float** xs; // the list it was built from (the cache's key)
    size_t* ns;
    int n;
    SumsqChunk* dev;       // nchunks entries, then nchunks first-flags (bytes)
    size_t nchunks;
    unsigned long last_use;
};
static SumsqTable sumsq_tables[SUMSQ_TABLE_CACHE];
static unsigned long sumsq_clock;

static const SumsqTable* sumsq_table(const float* const* xs, const size_t* ns, int n, cudaStream_t stream) {
    SumsqTable* slot = &sumsq_tables[0];
    for (int k = 0; k < SUMSQ_TABLE_CACHE; k++) {
        SumsqTable* tb = &sumsq_tables[k];
        if (tb->xs && tb->n == n && !memcmp(tb->xs, xs, (size_t)n * sizeof *xs) && !memcmp(tb->ns, ns, (size_t)n * sizeof *ns)) {
            tb->last_use = ++sumsq_clock;
            return tb;
        }
        if (tb->last_use < slot->last_use) slot = tb;
    }
    size_t nchunks = 0;
    for (int i = 0; i < n; i++) nchunks += ns[i] ? rr_sumsq_chunks(ns[i]) : 0;
    RR_ASSERT(nchunks <= 0x7fffffffu); // grid.x
    size_t bytes = nchunks * (sizeof(SumsqChunk) + 1);
    char* host = (char*)malloc(bytes ? bytes : 1);
    const float** kx = (const float**)malloc((n ? n : 1) * sizeof *kx);
    size_t* kn = (size_t*)malloc((n ? n : 1) * sizeof *kn);
    if (!host || !kx || !kn) rr_die("out of host memory (the multi-tensor sum of squares' table of %zu chunks)", nchunks);
    memcpy(kx, xs, (size_t)n * sizeof *kx);
    memcpy(kn, ns, (size_t)n * sizeof *kn);
    SumsqChunk* hc = (SumsqChunk*)host;
    unsigned char* hf = (unsigned char*)(hc + nchunks);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        size_t nc = ns[i] ? rr_sumsq_chunks(ns[i]) : 0; // an empty tensor adds 0: no chunk
        for (size_t c = 0; c < nc; c++, k++) {
            hc[k].x = xs[i], hc[k].n = ns[i], hc[k].c = c;
            hf[k] = c == 0;
        }
    }
    if (slot->xs) { // evict: a queued launch may still read the table, which cudaFree waits for
        free(slot->xs), free(slot->ns);
        if (slot->dev) cuda_free_tracked(slot->dev);
    }
    slot->xs = kx, slot->ns = kn, slot->n = n, slot->nchunks = nchunks, slot->dev = NULL;
    if (nchunks) {
        cuda_malloc_tracked((void**)&slot->dev, bytes);
        // pageable source: the copy has read it when the call returns
        cudaCheck(cudaMemcpyAsync(slot->dev, host, bytes, cudaMemcpyHostToDevice, stream));
    }
    free(host);
    slot->last_use = ++sumsq_clock;
    return slot;
}

double cuda_sum_squares_multi(const Backend* be, const float* const* xs, const size_t* ns, int n) {
    RR_ASSERT(n >= 0);
    cudaStream_t stream = cuda_stream(be);
    const SumsqTable* tb = sumsq_table(xs, ns, n, stream);
    size_t nc = tb->nchunks;
    if (nc == 0) return 0.0;
    double* part = sum_squares_scratch(nc + 1);
    sum_squares_multi_chunk_kernel<<<(unsigned)nc, SUMSQ_BLOCK, 0, stream>>>(part, tb->dev);
    cudaCheck(cudaGetLastError());
    sum_squares_total_kernel<<<1, SUMSQ_TOTAL_BLOCK, 0, stream>>>(part + nc, part, nc, (const unsigned char*)(tb->dev + nc));
    cudaCheck(cudaGetLastError());
    double total = 0.0;
    cudaCheck(cudaMemcpyAsync(&total, part + nc, sizeof total, cudaMemcpyDeviceToHost, stream));
    cuda_check_device_errors(stream); // synchronises: total is complete on return
    return total;
}
