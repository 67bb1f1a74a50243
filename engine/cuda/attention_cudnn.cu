// attention_cudnn.cu — attention through cuDNN's fused flash attention, built with cuDNN's C backend API
// (an operation graph of descriptors; no cudnn-frontend), for runtime.precision = bf16.
//
// STATUS: a first graph was accepted by cuDNN but disagreed with the own kernel on every ragged case. Reviewed
// against cudnn-frontend's sdpa lowering (see docs/cuda.md, "Attention"), it now sets ALPHA1 / ALPHA2 on every pointwise op, the masks' compute types
// (INT32 GEN_INDEX, BOOLEAN comparisons), the causal mask's own GEN_INDEX pair, the backward in the
// frontend's order, padded ragged buffers (T + Smax rows, finite tails), 16-byte aligned offsets arrays.
// Run after it on an H200 (cuDNN 9.19; docs/cuda.md "cuDNN's fused attention"): the forward agrees on every case of the op matrix (0
// values apart), the backward on every case of head dim 16, 64, 128 and not at head dim 8 (so it runs only
// at multiples of 16), and both run in training. Every outcome other than a checked success falls back to the own tensor-core kernel
// (flash_attention.cu), which is also what the CPU emulation runs (it builds this file without cuDNN):
//   - no cuDNN handle (cudnnCreate fails), RRFP_CUDNN_ATTENTION=0, head dim not a multiple of 8 or above
//     128, more than 2^31 elements, a call larger than the reserved scratch: not tried;
//   - a descriptor, the operation graph, the heuristics or every execution plan refused, or a failed
//     execution: that shape (S sequences, padded length, heads, head dim, causal) is remembered as refused;
//   - the first run of each plan (every run with RRFP_CUDNN_STRICT=1) is checked against the own kernel on
//     the same bf16 inputs; a mismatch turns cuDNN off for the process with a warning (strict: an error,
//     cuDNN stays on and its result is returned). So a graph that cuDNN accepts but that means something
//     else than this op costs one warning, not a model.
// Each call notes its path (attention_path.h). RRFP_CUDNN_DIAG=1: outputs poisoned before a run, rows left
// unwritten reported per sample.
//
// The graph (the frontend's composite SDPA pattern): packed sequences in the ragged layout (THD): Q, K, V,
// O of shape [B = S sequences, H, Smax, d] with strides [-, d, H d, 1] and a ragged offset tensor (element
// offset of each sequence: cu_seqlens[b] * H d); the stats [B, H, Smax, 1] with strides [-, 1, H, 1] and
// offsets cu_seqlens[b] * H: engine.h's (T, H) lse. S = Q K^T (GEMM M / N overridden by the sequence
// lengths), S *= 1/sqrt(d), the padding mask, for the LM the causal mask, max / exp / sum, stats = max +
// log(sum), P = exp / sum in bf16, O = P V. Inputs are converted to bf16 (exact: in bf16 precision they
// already are bf16 values) and O comes back rounded to bf16, the bf16 table's rounding point. Smax is the
// packed length T rounded up to 64 (the true maximum is on the device; plans are cached per shape).
//
// The backward graph (cuda_cudnn_attention_backward) is on by default for head dims that are multiples of 16
// (RRFP_CUDNN_ATTENTION_BWD=0: off): its gradients are bf16 and are added to the bf16 table's f32 gradients.
#include "engine/cuda/attention_path.h"
#include "engine/cuda/attention_scratch.h"
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"

#ifdef RRFP_HAVE_CUDNN
#include <cudnn.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

typedef cudnnBackendDescriptor_t Desc;

namespace {

// A graph under construction: every descriptor made, freed together; the first failure is kept.
struct Graph {
    std::vector<Desc> all;
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    const char* what = "";
    bool ok() const { return st == CUDNN_STATUS_SUCCESS; }
    ~Graph() {
        for (size_t i = all.size(); i-- > 0;) cudnnBackendDestroyDescriptor(all[i]);
    }
    Desc make(cudnnBackendDescriptorType_t t, const char* w) {
        Desc d = NULL;
        if (!ok()) return NULL;
        st = cudnnBackendCreateDescriptor(t, &d);
        if (!ok()) what = w;
        else all.push_back(d);
        return d;
    }
    void set(Desc d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v,
             const char* w) {
        if (!ok()) return;
        st = cudnnBackendSetAttribute(d, a, t, n, v);
        if (!ok()) what = w;
    }
    void fin(Desc d, const char* w) {
        if (!ok()) return;
        st = cudnnBackendFinalize(d);
        if (!ok()) what = w;
    }
    Desc tensor(int64_t uid, cudnnDataType_t dt, const int64_t dims[4], const int64_t strides[4], bool virt,
                bool by_value = false, Desc ragged = NULL) {
        Desc t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
        int64_t align = 16;
        set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
        set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor type");
        set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
        set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
        set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
        set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual");
        if (by_value) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value");
        if (ragged) set(t, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ragged, "ragged");
        fin(t, "tensor");
        return t;
    }
    // One pointwise op as cudnn-frontend's Pointwise node lowers it (node/pointwise.h): the mode, the math
    // precision (the frontend's compute_data_type: FLOAT by default, INT32 for the padding mask's GEN_INDEX,
    // BOOLEAN for CMP_LT / CMP_GE / LOGICAL_AND), the axis of GEN_INDEX, and ALPHA1 = ALPHA2 = 1 always.
    Desc pointwise(cudnnPointwiseMode_t mode, Desc x, Desc b, Desc y, Desc t = NULL, int64_t axis = -1,
                   cudnnDataType_t prec = CUDNN_DATA_FLOAT) {
        Desc p = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
        set(p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
        set(p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
        if (axis >= 0) set(p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
        fin(p, "pointwise");
        Desc op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p, "pointwise op");
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise x");
        if (b) set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "pointwise b");
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise y");
        if (t) set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "pointwise t");
        float one = 1.0f;
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha1");
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha2");
        fin(op, "pointwise op");
        return op;
    }
    // The masks as cudnn-frontend's sdpa lowers them (utils/attn_score_modifiers.h, node/diagonal_band_mask.h):
    // the padding mask: GEN_INDEX row (axis 2) and col (axis 3) at INT32, CMP_LT with the sequence lengths and
    // LOGICAL_AND at BOOLEAN, BINARY_SELECT (s where the mask holds, else neg_inf); then the causal mask
    // (top-left diagonal, right bound 0) with its own GEN_INDEX pair (the frontend's composite node: FLOAT
    // math, INT32 outputs), CMP_GE(row, col) at BOOLEAN, BINARY_SELECT. Returns the masked scores.
    Desc padding_mask(std::vector<Desc>& ops, Desc s, Desc seq_q, Desc seq_kv, Desc neg_inf, const int64_t* ds,
                      const int64_t* ss, int64_t& vid) {
        auto virt = [&](cudnnDataType_t t) { return tensor(vid++, t, ds, ss, true); };
        Desc row = virt(CUDNN_DATA_INT32), col = virt(CUDNN_DATA_INT32);
        ops.push_back(pointwise(CUDNN_POINTWISE_GEN_INDEX, s, NULL, row, NULL, 2, CUDNN_DATA_INT32));
        ops.push_back(pointwise(CUDNN_POINTWISE_GEN_INDEX, s, NULL, col, NULL, 3, CUDNN_DATA_INT32));
        Desc rm = virt(CUDNN_DATA_BOOLEAN), cm = virt(CUDNN_DATA_BOOLEAN), pm = virt(CUDNN_DATA_BOOLEAN);
        ops.push_back(pointwise(CUDNN_POINTWISE_CMP_LT, row, seq_q, rm, NULL, -1, CUDNN_DATA_BOOLEAN));
        ops.push_back(pointwise(CUDNN_POINTWISE_CMP_LT, col, seq_kv, cm, NULL, -1, CUDNN_DATA_BOOLEAN));
        ops.push_back(pointwise(CUDNN_POINTWISE_LOGICAL_AND, rm, cm, pm, NULL, -1, CUDNN_DATA_BOOLEAN));
        Desc s2 = virt(CUDNN_DATA_FLOAT);
        ops.push_back(pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, neg_inf, s2, pm));
        return s2;
    }
    Desc causal_mask(std::vector<Desc>& ops, Desc s, Desc neg_inf, const int64_t* ds, const int64_t* ss, int64_t& vid) {
        auto virt = [&](cudnnDataType_t t) { return tensor(vid++, t, ds, ss, true); };
        Desc crow = virt(CUDNN_DATA_INT32), ccol = virt(CUDNN_DATA_INT32), cz = virt(CUDNN_DATA_BOOLEAN);
        ops.push_back(pointwise(CUDNN_POINTWISE_GEN_INDEX, s, NULL, crow, NULL, 2));
        ops.push_back(pointwise(CUDNN_POINTWISE_GEN_INDEX, s, NULL, ccol, NULL, 3));
        ops.push_back(pointwise(CUDNN_POINTWISE_CMP_GE, crow, ccol, cz, NULL, -1, CUDNN_DATA_BOOLEAN));
        Desc s3 = virt(CUDNN_DATA_FLOAT);
        ops.push_back(pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, neg_inf, s3, cz));
        return s3;
    }
    Desc masks(std::vector<Desc>& ops, Desc s, Desc seq_q, Desc seq_kv, Desc neg_inf, int causal, const int64_t* ds,
               const int64_t* ss, int64_t& vid) {
        Desc s2 = padding_mask(ops, s, seq_q, seq_kv, neg_inf, ds, ss, vid);
        return causal ? causal_mask(ops, s2, neg_inf, ds, ss, vid) : s2;
    }
    Desc reduction(cudnnReduceTensorOp_t r, Desc x, Desc y) {
        Desc d = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
        cudnnDataType_t prec = CUDNN_DATA_FLOAT;
        set(d, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &r, "reduction operator");
        set(d, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec, "reduction precision");
        fin(d, "reduction");
        Desc op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction x");
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction y");
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d, "reduction desc");
        fin(op, "reduction op");
        return op;
    }
    Desc reshape(Desc x, Desc y) { // y: x's values seen through y's dims and strides (a transpose)
        Desc op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape op");
        set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reshape x");
        set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reshape y");
        fin(op, "reshape op");
        return op;
    }
    Desc matmul(Desc a, Desc b, Desc c, Desc m_override, Desc n_override, Desc k_override) {
        Desc d = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
        cudnnDataType_t prec = CUDNN_DATA_FLOAT;
        set(d, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec, "matmul precision");
        fin(d, "matmul");
        Desc op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op");
        set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
        set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "matmul b");
        set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
        set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d, "matmul desc");
        if (m_override)
            set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m_override, "m");
        if (n_override)
            set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n_override, "n");
        if (k_override)
            set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k_override, "k");
        fin(op, "matmul op");
        return op;
    }
};

// Tensor uids of the forward graph's device buffers (the variant pack's order).
enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_SCALE, U_SEQ_Q, U_SEQ_KV, U_OFF_QKV, U_OFF_Q, U_OFF_K, U_OFF_V, U_OFF_O,
       U_OFF_STATS, U_NEG_INF,
       // backward: dO in, dQ dK dV out, K and V seen untransposed, the row sums of dO * O
       U_DO, U_DQ, U_DK, U_DV, U_VT, U_DSUM, U_OFF_DO, U_OFF_DQ, U_OFF_DK, U_OFF_DV, U_ONE, U_DQ_ACC, U_VIRT = 100 };

struct Plan {
    int S, Smax, H, d, causal, backward;
    int refused;     // 1: cuDNN said no for this shape
    int checked;     // the first run was compared with the own kernel
    Desc plan;       // execution plan (owned: its graph's descriptors are kept in `keep`)
    Graph* keep;
    int64_t workspace;
};

struct State {
    int tried, disabled;
    cudnnHandle_t handle;
    std::vector<Plan> plans;
    void* scratch; // bf16 copies, offsets, workspace, check buffers: attention_scratch.h's layout
    size_t scratch_bytes; // reserved by BackendDevice.reserve (cuda_cudnn_attention_reserve), never grown in a step
    int over_warned;      // the one warning of a call that did not fit
};
State g_state;

const double SELF_CHECK_TOL = 2.0 / 128.0; // outputs are rounded to bf16 (2^-8 relative) by both paths,
                                            // after sums in another order: a few bf16 ulps

bool cudnn_ready() {
    State& s = g_state;
    if (s.disabled) return false;
    if (!s.tried) {
        s.tried = 1;
        const char* e = getenv("RRFP_CUDNN_ATTENTION");
        if (e && !strcmp(e, "0")) {
            s.disabled = 1;
            return false;
        }
        if (cudnnCreate(&s.handle) != CUDNN_STATUS_SUCCESS) {
            (void)cudaGetLastError();
            s.disabled = 1;
            return false;
        }
    }
    return true;
}

// The operation graph of `ops`, cuDNN's heuristics, and the first execution plan that finalises: into
// p (p->refused stays 1 when none does; g is then freed, else kept with the plan).
void finish_plan(Graph* g, std::vector<Desc>& ops, Plan* pp) {
    State& s = g_state;
    Plan& p = *pp;
    Desc graph = g->make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    g->set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, (int64_t)ops.size(), ops.data(), "ops");
    g->set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &s.handle, "graph handle");
    g->fin(graph, "operation graph");
    Desc heur = g->make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    g->set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "heur graph");
    g->set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heur mode");
    g->fin(heur, "heuristics");
    Desc cfg[8];
    int64_t n_cfg = 0;
    for (int i = 0; i < 8; i++) cfg[i] = g->make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
    if (g->ok()) {
        g->st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 8, &n_cfg, cfg);
        if (!g->ok()) g->what = "heuristics results";
    }
    for (int64_t i = 0; g->ok() && i < n_cfg && !p.plan; i++) {
        Desc plan = NULL;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS) break;
        if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &s.handle) ==
                CUDNN_STATUS_SUCCESS &&
            cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &cfg[i]) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS) {
            int64_t got = 0;
            cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                                     &p.workspace);
            p.plan = plan;
        } else {
            cudnnBackendDestroyDescriptor(plan);
        }
    }
    if (g->ok() && p.plan) {
        p.refused = 0;
        p.keep = g;
        g->all.push_back(p.plan);
    } else {
        if (getenv("RRFP_CUDNN_VERBOSE"))
            fprintf(stderr, "rrfp-mm: cuDNN attention refused (S %d, Smax %d, H %d, d %d, causal %d) at %s: %s\n", p.S, p.Smax,
                    p.H, p.d, p.causal, g->ok() ? "execution plan" : g->what, cudnnGetErrorString(g->st));
        delete g;
    }
}

// The plan of this shape and direction when one was built (*hit 1; NULL: cuDNN refused it), else *hit 0.
Plan* cached_plan(int S, int Smax, int H, int d, int causal, int backward, int* hit) {
    for (auto& p : g_state.plans)
        if (p.S == S && p.Smax == Smax && p.H == H && p.d == d && p.causal == causal && p.backward == backward) {
            *hit = 1;
            return p.refused ? NULL : &p;
        }
    *hit = 0;
    return NULL;
}

// The dims and strides both graphs describe their tensors with (B = S sequences of Smax rows, H heads of dim d): Q,
// O and their gradients [B, H, Smax, d] (THD), K^T [B, H, d, Smax], the scores [B, H, Smax, Smax], the stats
// [B, H, Smax, 1] (and a row of them), the scalars, the sequence lengths and the ragged offsets.
struct PlanShapes {
    int64_t dq[4], sq[4], dkt[4], skt[4], ds[4], ss[4], dst[4], sst[4], srow[4], dsc[4], ssc[4], dseq[4], sseq[4], doff[4];
};
PlanShapes plan_shapes(int S, int Smax, int H, int d) {
    int64_t B = S, L = Smax, HD = (int64_t)H * d;
    PlanShapes t = {{B, H, L, d}, {L * HD, d, HD, 1}, {B, H, d, L}, {L * HD, d, 1, HD}, {B, H, L, L},
                    {(int64_t)H * L * L, L * L, L, 1}, {B, H, L, 1}, {L * H, 1, H, 1}, {H * L, L, 1, 1}, {1, 1, 1, 1},
                    {1, 1, 1, 1}, {B, 1, 1, 1}, {1, 1, 1, 1}, {B + 1, 1, 1, 1}};
    return t;
}

// Build (once per shape) the forward plan, or remember that cuDNN refused it.
Plan* forward_plan(int S, int Smax, int H, int d, int causal) {
    State& s = g_state;
    int hit;
    Plan* cached = cached_plan(S, Smax, H, d, causal, 0, &hit);
    if (hit) return cached;
    Plan p = {S, Smax, H, d, causal, 0, 1, 0, NULL, NULL, 0};
    Graph* g = new Graph();
    PlanShapes sh = plan_shapes(S, Smax, H, d);
    int64_t *dq = sh.dq, *sq = sh.sq, *dkt = sh.dkt, *skt = sh.skt, *ds = sh.ds, *ss = sh.ss, *dst = sh.dst, *sst = sh.sst;
    int64_t *dsc = sh.dsc, *ssc = sh.ssc, *dseq = sh.dseq, *sseq = sh.sseq, *doff = sh.doff;
    Desc off_q = g->tensor(U_OFF_Q, CUDNN_DATA_INT32, doff, sseq, false);
    Desc off_k = g->tensor(U_OFF_K, CUDNN_DATA_INT32, doff, sseq, false);
    Desc off_v = g->tensor(U_OFF_V, CUDNN_DATA_INT32, doff, sseq, false);
    Desc off_o = g->tensor(U_OFF_O, CUDNN_DATA_INT32, doff, sseq, false);
    Desc off_st = g->tensor(U_OFF_STATS, CUDNN_DATA_INT32, doff, sseq, false);
    Desc q = g->tensor(U_Q, CUDNN_DATA_BFLOAT16, dq, sq, false, false, off_q);
    Desc kt = g->tensor(U_K, CUDNN_DATA_BFLOAT16, dkt, skt, false, false, off_k);
    Desc v = g->tensor(U_V, CUDNN_DATA_BFLOAT16, dq, sq, false, false, off_v);
    Desc o = g->tensor(U_O, CUDNN_DATA_BFLOAT16, dq, sq, false, false, off_o);
    Desc stats = g->tensor(U_STATS, CUDNN_DATA_FLOAT, dst, sst, false, false, off_st);
    Desc scale = g->tensor(U_SCALE, CUDNN_DATA_FLOAT, dsc, ssc, false, true);
    Desc neg_inf = g->tensor(U_NEG_INF, CUDNN_DATA_FLOAT, dsc, ssc, false, true);
    Desc seq_q = g->tensor(U_SEQ_Q, CUDNN_DATA_INT32, dseq, sseq, false);
    Desc seq_kv = g->tensor(U_SEQ_KV, CUDNN_DATA_INT32, dseq, sseq, false);
    int64_t vid = U_VIRT;
    auto virt = [&](cudnnDataType_t t, const int64_t* dims, const int64_t* strides) {
        return g->tensor(vid++, t, dims, strides, true);
    };
    std::vector<Desc> ops;
    Desc s0 = virt(CUDNN_DATA_FLOAT, ds, ss);
    ops.push_back(g->matmul(q, kt, s0, seq_q, seq_kv, NULL));
    Desc s1 = virt(CUDNN_DATA_FLOAT, ds, ss);
    ops.push_back(g->pointwise(CUDNN_POINTWISE_MUL, s0, scale, s1));
    Desc s3 = g->masks(ops, s1, seq_q, seq_kv, neg_inf, causal, ds, ss, vid);
    int64_t* srow = sh.srow;
    Desc mx = virt(CUDNN_DATA_FLOAT, dst, srow);
    ops.push_back(g->reduction(CUDNN_REDUCE_TENSOR_MAX, s3, mx));
    Desc s4 = virt(CUDNN_DATA_FLOAT, ds, ss), e = virt(CUDNN_DATA_FLOAT, ds, ss);
    ops.push_back(g->pointwise(CUDNN_POINTWISE_SUB, s3, mx, s4));
    ops.push_back(g->pointwise(CUDNN_POINTWISE_EXP, s4, NULL, e));
    Desc z = virt(CUDNN_DATA_FLOAT, dst, srow), lz = virt(CUDNN_DATA_FLOAT, dst, srow);
    ops.push_back(g->reduction(CUDNN_REDUCE_TENSOR_ADD, e, z));
    ops.push_back(g->pointwise(CUDNN_POINTWISE_LOG, z, NULL, lz));
    ops.push_back(g->pointwise(CUDNN_POINTWISE_ADD, mx, lz, stats));
    Desc pr = virt(CUDNN_DATA_BFLOAT16, ds, ss);
    ops.push_back(g->pointwise(CUDNN_POINTWISE_DIV, e, z, pr));
    ops.push_back(g->matmul(pr, v, o, seq_q, NULL, seq_kv));

    finish_plan(g, ops, &p);
    s.plans.push_back(p);
    return p.refused ? NULL : &s.plans.back();
}


// Build (once per shape) the backward plan: dQ, dK, dV from Q, K, V, O, dO and the stats (cuDNN's
// composite SDPA backward: P recomputed as exp(S - stats), dV = P^T dO, dP = dO V^T,
// dS = P (dP - rowsum(dO O)) / sqrt(d), dQ = dS K, dK = dS^T Q; transposes as reshapes).
Plan* backward_plan(int S, int Smax, int H, int d, int causal) {
    State& s = g_state;
    int hit;
    Plan* cached = cached_plan(S, Smax, H, d, causal, 1, &hit);
    if (hit) return cached;
    Plan p = {S, Smax, H, d, causal, 1, 1, 0, NULL, NULL, 0};
    Graph* g = new Graph();
    int64_t B = S, L = Smax;
    PlanShapes sh = plan_shapes(S, Smax, H, d);
    int64_t *dq = sh.dq, *sq = sh.sq, *dkt = sh.dkt, *skt = sh.skt, *ds = sh.ds, *ss = sh.ss, *dst = sh.dst, *sst = sh.sst;
    int64_t *srow = sh.srow, *dsc = sh.dsc, *ssc = sh.ssc, *dseq = sh.dseq, *sseq = sh.sseq, *doff = sh.doff;
    int64_t sdense[4] = {H * L * d, L * d, d, 1};
    int64_t sst_t[4] = {(int64_t)H * L * L, L * L, 1, L};
    auto off = [&](int64_t uid) { return g->tensor(uid, CUDNN_DATA_INT32, doff, sseq, false); };
    Desc off_k = off(U_OFF_K);
    Desc q = g->tensor(U_Q, CUDNN_DATA_BFLOAT16, dq, sq, false, false, off(U_OFF_Q));
    Desc kt = g->tensor(U_K, CUDNN_DATA_BFLOAT16, dkt, skt, false, false, off_k);
    Desc vt = g->tensor(U_VT, CUDNN_DATA_BFLOAT16, dkt, skt, false, false, off(U_OFF_V));
    Desc o = g->tensor(U_O, CUDNN_DATA_BFLOAT16, dq, sq, false, false, off(U_OFF_O));
    Desc dout = g->tensor(U_DO, CUDNN_DATA_BFLOAT16, dq, sq, false, false, off(U_OFF_DO));
    Desc off_dq = off(U_OFF_DQ), off_st = off(U_OFF_STATS);
    Desc dqt = g->tensor(U_DQ, CUDNN_DATA_BFLOAT16, dq, sq, false, false, off_dq);
    Desc dkd = g->tensor(U_DK, CUDNN_DATA_BFLOAT16, dq, sq, false, false, off(U_OFF_DK));
    Desc dvd = g->tensor(U_DV, CUDNN_DATA_BFLOAT16, dq, sq, false, false, off(U_OFF_DV));
    Desc stats = g->tensor(U_STATS, CUDNN_DATA_FLOAT, dst, sst, false, false, off_st);
    Desc dsum = g->tensor(U_DSUM, CUDNN_DATA_FLOAT, dst, sst, false, false, off_st);
    Desc dq_acc = g->tensor(U_DQ_ACC, CUDNN_DATA_FLOAT, dq, sq, false, false, off_dq);
    Desc scale = g->tensor(U_SCALE, CUDNN_DATA_FLOAT, dsc, ssc, false, true);
    Desc one = g->tensor(U_ONE, CUDNN_DATA_FLOAT, dsc, ssc, false, true);
    Desc neg_inf = g->tensor(U_NEG_INF, CUDNN_DATA_FLOAT, dsc, ssc, false, true);
    Desc seq_q = g->tensor(U_SEQ_Q, CUDNN_DATA_INT32, dseq, sseq, false);
    Desc seq_kv = g->tensor(U_SEQ_KV, CUDNN_DATA_INT32, dseq, sseq, false);
    int64_t vid = U_VIRT;
    auto virt = [&](cudnnDataType_t t, const int64_t* dims, const int64_t* strides) {
        return g->tensor(vid++, t, dims, strides, true);
    };
    // in cudnn-frontend's order (scaled_dot_product_flash_attention.h, the backward node's expansion, ragged
    // with max_total_seq_len, cuDNN >= 9: no dP workspace): softmax_sum = rowsum(dO O) * 1 (a pointwise
    // output, non-virtual, in the stats' ragged layout);
    std::vector<Desc> ops;
    Desc doo = virt(CUDNN_DATA_FLOAT, dq, sdense), dsum0 = virt(CUDNN_DATA_FLOAT, dst, srow);
    ops.push_back(g->pointwise(CUDNN_POINTWISE_MUL, dout, o, doo));
    ops.push_back(g->reduction(CUDNN_REDUCE_TENSOR_ADD, doo, dsum0));
    ops.push_back(g->pointwise(CUDNN_POINTWISE_MUL, dsum0, one, dsum));
    // P = exp(mask_causal(mask_padding(scale Q K^T) - stats));
    Desc s0 = virt(CUDNN_DATA_FLOAT, ds, ss), s1 = virt(CUDNN_DATA_FLOAT, ds, ss);
    ops.push_back(g->matmul(q, kt, s0, seq_q, seq_kv, NULL));
    ops.push_back(g->pointwise(CUDNN_POINTWISE_MUL, s0, scale, s1));
    Desc s2 = g->padding_mask(ops, s1, seq_q, seq_kv, neg_inf, ds, ss, vid);
    Desc s3 = virt(CUDNN_DATA_FLOAT, ds, ss);
    ops.push_back(g->pointwise(CUDNN_POINTWISE_SUB, s2, stats, s3));
    Desc s4 = causal ? g->causal_mask(ops, s3, neg_inf, ds, ss, vid) : s3;
    Desc pr = virt(CUDNN_DATA_FLOAT, ds, ss);
    ops.push_back(g->pointwise(CUDNN_POINTWISE_EXP, s4, NULL, pr));
    // dV = P^T dO (P^T: a reshape to bf16);
    int64_t dst_t[4] = {B, H, L, L};
    Desc p16t = virt(CUDNN_DATA_BFLOAT16, dst_t, sst_t);
    ops.push_back(g->reshape(pr, p16t));
    ops.push_back(g->matmul(p16t, dout, dvd, seq_kv, NULL, seq_q));
    // dS = (dO V^T - softmax_sum) P scale; dK = dS^T Q (a reshape to bf16); dQ = dS K (K^T reshaped back)
    // accumulated in f32 (dQ_accum, ragged like dQ), then IDENTITY to bf16
    Desc dp = virt(CUDNN_DATA_FLOAT, ds, ss);
    ops.push_back(g->matmul(dout, vt, dp, seq_q, seq_kv, NULL));
    Desc t1 = virt(CUDNN_DATA_FLOAT, ds, ss), t2 = virt(CUDNN_DATA_FLOAT, ds, ss), t3 = virt(CUDNN_DATA_FLOAT, ds, ss);
    ops.push_back(g->pointwise(CUDNN_POINTWISE_SUB, dp, dsum, t1));
    ops.push_back(g->pointwise(CUDNN_POINTWISE_MUL, t1, pr, t2));
    ops.push_back(g->pointwise(CUDNN_POINTWISE_MUL, t2, scale, t3));
    Desc ds16t = virt(CUDNN_DATA_BFLOAT16, dst_t, sst_t);
    ops.push_back(g->reshape(t3, ds16t));
    ops.push_back(g->matmul(ds16t, q, dkd, seq_kv, NULL, seq_q));
    Desc kn = g->tensor(vid++, CUDNN_DATA_BFLOAT16, dq, sq, true, false, off_k);
    ops.push_back(g->reshape(kt, kn));
    ops.push_back(g->matmul(t3, kn, dq_acc, seq_q, NULL, seq_kv)); // into the f32 accumulator, then dQ
    ops.push_back(g->pointwise(CUDNN_POINTWISE_IDENTITY, dq_acc, NULL, dqt));
    finish_plan(g, ops, &p);
    s.plans.push_back(p);
    return p.refused ? NULL : &s.plans.back();
}

// ---- small kernels: bf16 packing, offsets --------------------------------------------------------

__global__ void pack_bf16_kernel(uint16_t* out, const float* in, int T, int W, int ld) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)T * W) out[i] = rr_f32_to_bf16(in[(i / W) * (size_t)ld + i % W]);
}
// the same from 2-byte bf16 rows (2-byte activations): a copy
__global__ void pack_b16_kernel(uint16_t* out, const uint16_t* in, int T, int W, int ld) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)T * W) out[i] = in[(i / W) * (size_t)ld + i % W];
}
// out (rows of stride ld) += in (compact bf16, W per row)
__global__ void add_bf16_rows_kernel(float* out, const uint16_t* in, int T, int W, int ld) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)T * W) out[(i / W) * (size_t)ld + i % W] += rr_bf16_to_f32(in[i]);
}
// out (rows of stride ld) += in, and its 2-byte mirror m16 (stride ld16) = bf16 of the sum
__global__ void add_bf16_rows_m16_kernel(float* out, uint16_t* m16, const uint16_t* in, int T, int W, int ld, int ld16) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * W) return;
    size_t r = i / W, c = i % W;
    float v = out[r * (size_t)ld + c] + rr_bf16_to_f32(in[i]);
    out[r * (size_t)ld + c] = v;
    m16[r * (size_t)ld16 + c] = rr_f32_to_bf16(v);
}
// out (2-byte rows of stride ld) = bf16(out + in): a zeroed out gets in as it is
__global__ void add_b16_rows_kernel(uint16_t* out, const uint16_t* in, int T, int W, int ld) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * W) return;
    size_t o = (i / W) * (size_t)ld + i % W;
    out[o] = rr_f32_to_bf16(rr_bf16_to_f32(out[o]) + rr_bf16_to_f32(in[i]));
}
// *mx = max |y| over T rows of W values (stride ld): atomicMax on the bits (non-negative floats order as ints;
// a NaN is larger than any finite value, so it shows as a disagreement)
__global__ void absmax_rows_kernel(int* mx, const float* y, int T, int W, int ld) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)T * W) atomicMax(mx, __float_as_int(fabsf(y[(i / W) * (size_t)ld + i % W])));
}
// bad += count of |x - y| > frac * (*mx), x compact bf16 (W per row), y f32 rows of stride ld
__global__ void compare_rows_kernel(float* bad, const uint16_t* x16, const float* y, int T, int W, int ld, const int* mx,
                                    float frac) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)T * W) {
        float x = rr_bf16_to_f32(x16[i]), r = y[(i / W) * (size_t)ld + i % W];
        if (!(fabsf(x - r) <= frac * __int_as_float(*mx))) atomicAdd(bad, 1.0f);
    }
}
__global__ void unpack_bf16_kernel(float* out, const uint16_t* in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = rr_bf16_to_f32(in[i]);
}
// off_qkvo[b] = cu[b] * HD, off_stats[b] = cu[b] * H (b <= S), seq[b] = cu[b + 1] - cu[b] (b < S)
__global__ void offsets_kernel(int* off_x, int* off_st, int* seq, const int* cu, int S, int H, int HD) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b <= S) {
        off_x[b] = cu[b] * HD;
        off_st[b] = cu[b] * H;
    }
    if (b < S) seq[b] = cu[b + 1] - cu[b];
}
__global__ void compare_kernel(float* bad, const float* a, const float* b, size_t n, float tol) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = a[i], y = b[i];
        if (!(fabsf(x - y) <= tol * (1.0f + fabsf(y)))) atomicAdd(bad, 1.0f);
    }
}

// The reserved scratch when a call's layout fits in it, else NULL: the caller runs the backend's own
// kernel (which needs no scratch) instead of allocating in a step. Said once per process, and per call
// with RRFP_CUDNN_VERBOSE=1.
char* scratch_for(size_t bytes, const char* what, int S, int T, int H, int d) {
    State& s = g_state;
    if (bytes <= s.scratch_bytes && s.scratch) return (char*)s.scratch;
    if (!s.over_warned || getenv("RRFP_CUDNN_VERBOSE"))
        fprintf(stderr, "rrfp-mm: %scuDNN attention %s (S %d, T %d, H %d, d %d) needs %zu bytes of scratch, %zu are "
                "reserved (BackendDevice.reserve): the backend's own kernel runs it%s\n", s.over_warned ? "" : "warning: ",
                what, S, T, H, d, bytes, s.scratch_bytes, s.over_warned ? "" : " (said once; RRFP_CUDNN_VERBOSE=1 says "
                "it for every call)");
    s.over_warned = 1;
    return NULL;
}

// ---- the runs: layout, execution, diagnosis, self-check, which path ran --------------------------------

// RRFP_CUDNN_STRICT=1 (the gpu tests): every run, not only a plan's first, is compared with the own kernel, a
// disagreement is an error (said, counted as RR_ATTN_CUDNN_DISAGREED) and cuDNN's result is what the caller
// gets, so that its own comparison sees it too; cuDNN stays on, so every later case is compared as well.
// Without it (training): a plan's first run is compared, and a disagreement turns cuDNN off for the process
// (a warning; the caller gets the own kernel's result).
// cuDNN's backward: on unless RRFP_CUDNN_ATTENTION_BWD=0
int cudnn_backward_on() {
    const char* e = getenv("RRFP_CUDNN_ATTENTION_BWD");
    return !(e && !strcmp(e, "0"));
}
bool strict_mode() {
    const char* e = getenv("RRFP_CUDNN_STRICT");
    return e && !strcmp(e, "1");
}
// RRFP_CUDNN_DIAG=1: the outputs cuDNN writes (out or dQ / dK / dV, and the stats) are filled with 0xFF bytes
// (NaN) before each run, and afterwards every value of rows < T still NaN is reported per sample: rows cuDNN
// never wrote tell a layout / mask problem from a numeric one. (With CUDNN_LOGLEVEL_DBG=3 and
// CUDNN_LOGDEST_DBG=file cuDNN itself logs the engine it picked.) Copies to the host: a diagnosis, not a step.
bool diag_mode() {
    const char* e = getenv("RRFP_CUDNN_DIAG");
    return e && !strcmp(e, "1");
}
bool verbose() { return getenv("RRFP_CUDNN_VERBOSE") != NULL; }

// NaN values left in rows [0, T) of a bf16 (b16) or f32 buffer of W values per row, per sample: printed.
void diag_report(const char* what, const void* dev, int is_f32, const int* cu_dev, int S, int T, int W, cudaStream_t st) {
    size_t n = (size_t)T * W, es = is_f32 ? 4 : 2;
    std::vector<unsigned char> h(n * es);
    std::vector<int> cu(S + 1);
    cudaCheck(cudaMemcpyAsync(h.data(), dev, n * es, cudaMemcpyDeviceToHost, st));
    cudaCheck(cudaMemcpyAsync(cu.data(), cu_dev, (S + 1) * sizeof(int), cudaMemcpyDeviceToHost, st));
    cudaCheck(cudaStreamSynchronize(st));
    size_t total = 0;
    int shown = 0;
    for (int s = 0; s < S; s++) {
        size_t bad = 0, first = (size_t)-1;
        for (size_t i = (size_t)cu[s] * W; i < (size_t)cu[s + 1] * W; i++) {
            int nan;
            if (is_f32) {
                float x;
                memcpy(&x, &h[i * 4], 4);
                nan = x != x;
            } else {
                uint16_t x;
                memcpy(&x, &h[i * 2], 2);
                nan = (x & 0x7f80) == 0x7f80 && (x & 0x7f);
            }
            if (nan) bad++, first = first == (size_t)-1 ? i : first;
        }
        total += bad;
        if (bad && shown++ < 8)
            fprintf(stderr, "rrfp-mm: cuDNN diag: %s: sample %d (rows %d..%d): %zu of %zu values never written (NaN), "
                    "the first at row %zu col %zu\n", what, s, cu[s], cu[s + 1] - 1, bad,
                    (size_t)(cu[s + 1] - cu[s]) * W, first / W, first % W);
    }
    fprintf(stderr, "rrfp-mm: cuDNN diag: %s: %zu of %zu values in rows < T never written%s\n", what, total, n,
            total ? "" : " (every value written)");
}

// Execute a plan on stream st; a failed cudnnSetStream is a failure (before, it skipped the execution and
// the caller compared stale output).
cudnnStatus_t execute(Plan* p, Graph& g, Desc vp, cudaStream_t st, const char** what) {
    *what = "variant pack";
    if (!g.ok()) return g.st;
    cudnnStatus_t r = cudnnSetStream(g_state.handle, st);
    *what = "cudnnSetStream";
    if (r != CUDNN_STATUS_SUCCESS) return r;
    *what = "cudnnBackendExecute";
    return cudnnBackendExecute(g_state.handle, p->plan, vp);
}

float neg_inf_value() { return cudnnGetVersion() >= 91000 ? -INFINITY : -FLT_MAX; } // as cudnn-frontend

} // namespace

// What a forward and a backward run share before they pack their inputs: the shape gates, the plan (built once per
// shape), whether this run is checked against the own kernel, the scratch's layout and the sequences' offsets.
struct Run {
    Plan* p;
    cudaStream_t st;
    int strict, check, Smax;
    size_t n, HD, R;
    RrAttnScratch L;
    char* base;
    float* stats;
    int *off_x, *off_st, *seq;
    void* work;
};

// 1: *r is ready (the offsets computed on its stream); 0: the caller runs its own kernel (the path noted); -1: a run
// on 2-byte inputs (b16) that must be checked (a plan's first, every one in strict mode), noting nothing: the caller
// widens its inputs and calls the f32 entry, which checks (so the check is the f32 entry's, on the same values).
static int run_begin(const Backend* be, int bwd, int b16, const int* cu_seqlens, int S, int T, int H, int d, int ld_qkv,
                     int causal, Run* r) {
    int off = bwd ? !cudnn_backward_on() || d % 16 != 0 : d % 8 != 0;
    if (off || d > 128 || S < 1 || T < 1 || rr_cudnn_attn_rows(T) * H * d >= ((size_t)1 << 31) || !cudnn_ready()) {
        cuda_attention_path_note(RR_ATTN_CUDNN_NOT_TRIED);
        return 0;
    }
    r->Smax = rr_cudnn_attn_smax(T);
    r->p = bwd ? backward_plan(S, r->Smax, H, d, causal) : forward_plan(S, r->Smax, H, d, causal);
    if (!r->p) {
        cuda_attention_path_note(RR_ATTN_CUDNN_REFUSED);
        return 0;
    }
    r->st = cuda_stream(be);
    r->strict = strict_mode();
    r->check = r->strict || !r->p->checked;
    if (b16 && r->check) return -1;
    r->n = (size_t)T * H * d, r->HD = (size_t)H * d, r->R = rr_cudnn_attn_rows(T);
    r->L = rr_cudnn_attn_scratch(bwd, T, S, H, d, ld_qkv, (size_t)r->p->workspace, r->check);
    r->base = scratch_for(r->L.total, bwd ? "backward" : "forward", S, T, H, d);
    if (!r->base) {
        cuda_attention_path_note(RR_ATTN_CUDNN_NOT_TRIED);
        return 0;
    }
    r->stats = (float*)(r->base + r->L.stats_at);
    r->off_x = (int*)(r->base + r->L.offsets_at);
    r->off_st = r->off_x + rr_cudnn_attn_off_stride(S);
    r->seq = r->off_st + rr_cudnn_attn_off_stride(S);
    r->work = r->base + r->L.work_at;
    offsets_kernel<<<ceil_div(S + 1, 128), 128, 0, r->st>>>(r->off_x, r->off_st, r->seq, cu_seqlens, S, H, (int)r->HD);
    cudaCheck(cudaGetLastError());
    return 1;
}

// src (T rows of W values, row stride ld: f32 words or 2-byte bf16, as its dtype says) packed into dst as compact bf16
// rows (f32 rounded, 2-byte copied), rows T .. R zero: cuDNN reads a sequence's rows up to Smax past its start
static void pack_rows(uint16_t* dst, Buf src, int T, int W, int ld, size_t R, cudaStream_t st) {
    size_t n = (size_t)T * W;
    const unsigned B = 256;
    if (src.dt == DTYPE_BF16) pack_b16_kernel<<<ceil_div_z(n, B), B, 0, st>>>(dst, buf_bf16p(src), T, W, ld);
    else pack_bf16_kernel<<<ceil_div_z(n, B), B, 0, st>>>(dst, buf_f32p(src), T, W, ld);
    cudaCheck(cudaMemsetAsync(dst + n, 0, (R - T) * (size_t)W * 2, st));
}

// Execute r's plan on the variant pack of nv (uid, pointer) pairs. 0: it failed (said; the shape is refused from now
// on and the path noted: the caller runs its own kernel); 1: it ran.
static int run_execute(Run* r, const char* dir, const int64_t* uids, void** ptrs, int64_t nv, int S, int T, int H, int d,
                       int causal) {
    Graph g;
    Desc vp = g.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    g.set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, nv, uids, "uids");
    g.set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, nv, ptrs, "pointers");
    g.set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &r->work, "workspace");
    g.fin(vp, "variant pack");
    const char* what = "";
    cudnnStatus_t e = execute(r->p, g, vp, r->st, &what);
    if (e == CUDNN_STATUS_SUCCESS) return 1;
    fprintf(stderr, "rrfp-mm: %scuDNN attention %s (S %d, T %d, H %d, d %d, causal %d) failed at %s: %s; the "
            "backend's own kernel runs this shape from now on\n", r->strict ? "error: " : "", dir, S, T, H, d, causal,
            what, cudnnGetErrorString(e));
    (void)cudaGetLastError();
    r->p->refused = 1;
    cuda_attention_path_note(RR_ATTN_CUDNN_REFUSED);
    return 0;
}

// Returns 1 when out (rounded to bf16) and lse hold a result (cuDNN's, or on a disagreement without strict
// mode the own kernel's); 0 when the caller must run its own kernel. Notes the path (attention_path.h).
// q, k, v and out f32 words (the bf16 table: rounded to bf16 on packing, cuDNN's output widened) or 2-byte bf16 words
// (2-byte activations: packed by a copy, cuDNN's bf16 output copied out as it is; a run that must be checked
// against the own kernel returns -1 instead: run_begin).
static int cudnn_forward(const Backend* be, Buf out, float* lse, Buf q, Buf k, Buf v, const int* cu_seqlens, int S, int T,
                         int H, int d, int ld_qkv, int causal) {
    int b16 = q.dt == DTYPE_BF16;
    RR_ASSERT(k.dt == q.dt && v.dt == q.dt && out.dt == q.dt && "q, k, v and out in one storage");
    Run r;
    int ready = run_begin(be, 0, b16, cu_seqlens, S, T, H, d, ld_qkv, causal, &r);
    if (ready != 1) return ready;
    cudaStream_t st = r.st;
    size_t n = r.n, HD = r.HD, R = r.R;
    char* base = r.base;
    uint16_t* q16 = (uint16_t*)(base + r.L.bf16_at[0]);
    uint16_t* k16 = (uint16_t*)(base + r.L.bf16_at[1]);
    uint16_t* v16 = (uint16_t*)(base + r.L.bf16_at[2]);
    uint16_t* out16 = (uint16_t*)(base + r.L.bf16_at[3]);
    float* stats = r.stats;
    const unsigned B = 256;
    uint16_t* in16[3] = {q16, k16, v16};
    Buf src[3] = {q, k, v};
    for (int i = 0; i < 3; i++) pack_rows(in16[i], src[i], T, (int)HD, ld_qkv, R, st);
    int diag = diag_mode();
    cudaCheck(cudaMemsetAsync(out16, diag ? 0xff : 0, R * HD * 2, st));
    cudaCheck(cudaMemsetAsync(stats, diag ? 0xff : 0, R * H * sizeof(float), st));
    float scale = 1.0f / sqrtf((float)d), neg_inf = neg_inf_value();
    int64_t uids[] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEG_INF, U_SEQ_Q, U_SEQ_KV,
                      U_OFF_Q, U_OFF_K, U_OFF_V, U_OFF_O, U_OFF_STATS};
    void* ptrs[] = {q16, k16, v16, out16, stats, &scale, &neg_inf, r.seq, r.seq, r.off_x, r.off_x, r.off_x, r.off_x,
                    r.off_st};
    if (!run_execute(&r, "forward", uids, ptrs, 14, S, T, H, d, causal)) return 0;
    if (diag) {
        fprintf(stderr, "rrfp-mm: cuDNN diag: forward S %d T %d Smax %d H %d d %d causal %d, cuDNN %zu\n", S, T, r.Smax, H,
                d, causal, (size_t)cudnnGetVersion());
        diag_report("forward out", out16, 0, cu_seqlens, S, T, (int)HD, st);
        diag_report("forward stats", stats, 1, cu_seqlens, S, T, H, st);
    }
    if (b16) { // not checked (run_begin): cuDNN's bf16 output is the stored activation as it is
        cudaCheck(cudaMemcpyAsync(buf_bf16p(out), out16, n * sizeof(uint16_t), cudaMemcpyDeviceToDevice, st));
        cudaCheck(cudaMemcpyAsync(lse, stats, (size_t)T * H * sizeof(float), cudaMemcpyDeviceToDevice, st));
        cuda_attention_path_note(RR_ATTN_CUDNN_FWD);
        return 1;
    }
    float* out32 = buf_f32p(out);
    // cuDNN's result into check buffers first when it is to be compared, else straight into out / lse
    float* o_dst = out32;
    float* lse_dst = lse;
    int check = r.check, strict = r.strict;
    if (check) {
        o_dst = (float*)(base + r.L.check_at);
        lse_dst = o_dst + n;
    }
    unpack_bf16_kernel<<<ceil_div_z(n, B), B, 0, st>>>(o_dst, out16, n);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaMemcpyAsync(lse_dst, stats, (size_t)T * H * sizeof(float), cudaMemcpyDeviceToDevice, st));
    if (!check) {
        cuda_attention_path_note(RR_ATTN_CUDNN_FWD);
        return 1;
    }
    Plan* p = r.p;
    // the own tensor-core kernel on the same bf16 inputs (q, k, v hold bf16 values in the bf16 table: the
    // kernel's conversion on load is exact, as pack_bf16 is), its output rounded as the bf16 table rounds
    cuda_flash_attention_forward_f32(st, out32, lse, buf_f32p(q), buf_f32p(k), buf_f32p(v), cu_seqlens, S, T, H, H, d, ld_qkv,
                                     ld_qkv, (int)HD, causal, 1);
    float* bad = lse_dst + (size_t)T * H;
    cudaCheck(cudaMemsetAsync(bad, 0, sizeof(float), st));
    compare_kernel<<<ceil_div_z(n, B), B, 0, st>>>(bad, o_dst, out32, n, (float)SELF_CHECK_TOL);
    compare_kernel<<<ceil_div_z((size_t)T * H, B), B, 0, st>>>(bad, lse_dst, lse, (size_t)T * H, 1e-3f);
    cudaCheck(cudaGetLastError());
    float nbad = 0;
    cudaCheck(cudaMemcpyAsync(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost, st));
    cudaCheck(cudaStreamSynchronize(st));
    p->checked = 1;
    if (verbose())
        fprintf(stderr, "rrfp-mm: cuDNN attention (S %d, T %d, H %d, d %d, causal %d): %s %s the own kernel (%.0f values "
                "apart)\n", S, T, H, d, causal, strict ? "run" : "first run", nbad > 0 ? "DIFFERS from" : "matches", nbad);
    if (nbad > 0) {
        cuda_attention_path_note(RR_ATTN_CUDNN_DISAGREED);
        if (!strict) {
            fprintf(stderr, "rrfp-mm: warning: cuDNN attention (S %d, T %d, H %d, d %d, causal %d) differs from the "
                    "backend's own kernel in %.0f values on its first run: cuDNN attention is off for this process\n",
                    S, T, H, d, causal, nbad);
            g_state.disabled = 1;
            cuda_attention_path_note(RR_ATTN_OWN_TC_FWD);
            return 1; // out and lse hold the own kernel's results
        }
        fprintf(stderr, "rrfp-mm: error: cuDNN attention (S %d, T %d, H %d, d %d, causal %d) differs from the backend's "
                "own kernel in %.0f values (RRFP_CUDNN_STRICT=1: cuDNN's result is returned)\n", S, T, H, d, causal, nbad);
    }
    // cuDNN's result is the call's
    cudaCheck(cudaMemcpyAsync(out32, o_dst, n * sizeof(float), cudaMemcpyDeviceToDevice, st));
    cudaCheck(cudaMemcpyAsync(lse, lse_dst, (size_t)T * H * sizeof(float), cudaMemcpyDeviceToDevice, st));
    cuda_attention_path_note(RR_ATTN_CUDNN_FWD);
    return 1;
}
int cuda_cudnn_attention_forward(const Backend* be, Buf out, float* lse, Buf q, Buf k, Buf v, const int* cu_seqlens, int S,
                                 int T, int H, int d, int ld_qkv, int causal) {
    return cudnn_forward(be, out, lse, q, k, v, cu_seqlens, S, T, H, d, ld_qkv, causal);
}

// On by default (RRFP_CUDNN_ATTENTION_BWD=0 turns it off) for head dims that are multiples of 16: measured on
// an H200 with cuDNN 9.19, its backward agrees with the own kernel at d 16, 64 and 128 and
// disagrees at d 8 (1,635 of 1,856 values; its forward agrees there). cuDNN's gradients come back in bf16
// (the GPU's usual flash attention backward) and are added to the f32 gradients; dO is rounded to bf16 on
// the way in (as the own tensor-core kernel rounds it). Returns 1 when dq, dk, dv (each may be NULL) got cuDNN's
// gradients added, 0 when the caller must run its own kernel. Notes the path as the forward does.
// q, k, v and out f32 words or 2-byte bf16 words, as cudnn_forward's (-1: a checked run on 2-byte inputs, call the f32
// entry on widened inputs); dout f32 or 2-byte (packed as it is), as its dtype says. dv16 with dv NULL: dv is 2-byte
// bf16 words of row stride ld_dv, and gets bf16(dv + cuDNN's bf16 dv); dq16, dk16, dv16 with their f32 gradient:
// 2-byte mirrors (stride ld_dv) of the f32 sums (the 2-byte output gradients that go with 2-byte activations; 2-byte inputs
// only)
static int cudnn_backward(const Backend* be, float* dq, float* dk, float* dv, Buf dout, Buf out, const float* lse, Buf q,
                          Buf k, Buf v, const int* cu_seqlens, int S, int T, int H, int d, int ld_qkv, int causal,
                          uint16_t* dq16, uint16_t* dk16, uint16_t* dv16, int ld_dv) {
    int b16 = q.dt == DTYPE_BF16;
    RR_ASSERT(k.dt == q.dt && v.dt == q.dt && out.dt == q.dt && "q, k, v and out in one storage");
    RR_ASSERT((b16 || (dout.dt == DTYPE_F32 && !dq16 && !dk16 && !dv16)) && "2-byte gradients with 2-byte inputs only");
    Run r;
    int ready = run_begin(be, 1, b16, cu_seqlens, S, T, H, d, ld_qkv, causal, &r);
    if (ready != 1) return ready;
    cudaStream_t st = r.st;
    size_t n = r.n, HD = r.HD, R = r.R;
    char* base = r.base;
    int check = r.check, strict = r.strict;
    Plan* p = r.p;
    uint16_t* bb[8];
    for (int i = 0; i < 8; i++) bb[i] = (uint16_t*)(base + r.L.bf16_at[i]); // q k v o do dq dk dv
    float* dsum = (float*)(base + r.L.dsum_at);
    float* dq_acc = (float*)(base + r.L.dqacc_at);
    float* stats = r.stats;
    const unsigned B = 256;
    Buf src[5] = {q, k, v, out, dout};
    int lds[5] = {ld_qkv, ld_qkv, ld_qkv, (int)HD, (int)HD};
    for (int i = 0; i < 5; i++) pack_rows(bb[i], src[i], T, (int)HD, lds[i], R, st);
    int diag = diag_mode();
    for (int i = 5; i < 8; i++) cudaCheck(cudaMemsetAsync(bb[i], diag ? 0xff : 0, R * HD * 2, st));
    // the dQ accumulator zeroed (cudnn-frontend memsets it before cuDNN 9.6), softmax_sum finite everywhere
    cudaCheck(cudaMemsetAsync(dq_acc, 0, R * HD * sizeof(float), st));
    cudaCheck(cudaMemsetAsync(dsum, 0, R * H * sizeof(float), st));
    // the stats (the forward's lse) with a finite tail
    cudaCheck(cudaMemcpyAsync(stats, lse, (size_t)T * H * sizeof(float), cudaMemcpyDeviceToDevice, st));
    cudaCheck(cudaMemsetAsync(stats + (size_t)T * H, 0, (R - T) * H * sizeof(float), st));
    float scale = 1.0f / sqrtf((float)d), neg_inf = neg_inf_value(), one = 1.0f;
    int64_t uids[] = {U_Q, U_K, U_VT, U_O, U_DO, U_DQ, U_DK, U_DV, U_STATS, U_DSUM, U_DQ_ACC, U_SCALE, U_ONE, U_NEG_INF,
                      U_SEQ_Q, U_SEQ_KV, U_OFF_Q, U_OFF_K, U_OFF_V, U_OFF_O, U_OFF_DO, U_OFF_DQ,
                      U_OFF_DK, U_OFF_DV, U_OFF_STATS};
    void* ptrs[] = {bb[0], bb[1], bb[2], bb[3], bb[4], bb[5], bb[6], bb[7], stats, dsum, dq_acc, &scale, &one, &neg_inf,
                    r.seq, r.seq, r.off_x, r.off_x, r.off_x, r.off_x, r.off_x, r.off_x, r.off_x, r.off_x, r.off_st};
    const int64_t nv = (int64_t)(sizeof uids / sizeof uids[0]);
    if (!run_execute(&r, "backward", uids, ptrs, nv, S, T, H, d, causal)) return 0;
    if (diag) {
        fprintf(stderr, "rrfp-mm: cuDNN diag: backward S %d T %d Smax %d H %d d %d causal %d, cuDNN %zu\n", S, T, r.Smax,
                H, d, causal, (size_t)cudnnGetVersion());
        diag_report("backward dQ", bb[5], 0, cu_seqlens, S, T, (int)HD, st);
        diag_report("backward dK", bb[6], 0, cu_seqlens, S, T, (int)HD, st);
        diag_report("backward dV", bb[7], 0, cu_seqlens, S, T, (int)HD, st);
    }
    if (check) {
        // the own tensor-core kernel's gradients of the same inputs, into zeroed buffers of the same stride;
        // a value is off when it is further than 2^-6 of its tensor's largest from the own kernel's (both
        // multiply bf16 operands; cuDNN's gradients are rounded to bf16 besides)
        float* own = (float*)(base + r.L.check_at);
        float* bad = own + (size_t)3 * T * ld_qkv;
        size_t one = (size_t)T * ld_qkv;
        cudaCheck(cudaMemsetAsync(own, 0, (3 * one + 4) * sizeof(float), st));
        cuda_flash_attention_backward_f32(st, own, own + one, own + 2 * one, buf_f32p(dout), buf_f32p(out), lse,
                                          buf_f32p(q), buf_f32p(k), buf_f32p(v), cu_seqlens, S, T, H, H, d, ld_qkv, ld_qkv,
                                          (int)HD, causal);
        int* mx = (int*)(bad + 1); // three maxima after the counter (the check region holds 3 one + 4 floats)
        cudaCheck(cudaMemsetAsync(mx, 0, 3 * sizeof(int), st));
        for (int i = 0; i < 3; i++) {
            absmax_rows_kernel<<<ceil_div_z(n, B), B, 0, st>>>(mx + i, own + (size_t)i * one, T, (int)HD, ld_qkv);
            compare_rows_kernel<<<ceil_div_z(n, B), B, 0, st>>>(bad, bb[5 + i], own + (size_t)i * one, T, (int)HD,
                                                               ld_qkv, mx + i, 1.0f / 64.0f);
        }
        cudaCheck(cudaGetLastError());
        float nbad = 0;
        cudaCheck(cudaMemcpyAsync(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost, st));
        cudaCheck(cudaStreamSynchronize(st));
        p->checked = 1;
        if (verbose())
            fprintf(stderr, "rrfp-mm: cuDNN attention backward (S %d, T %d, H %d, d %d, causal %d): %s %s the own "
                    "kernel (%.0f values apart)\n", S, T, H, d, causal, strict ? "run" : "first run",
                    nbad > 0 ? "DIFFERS from" : "matches", nbad);
        if (nbad > 0) {
            cuda_attention_path_note(RR_ATTN_CUDNN_DISAGREED);
            if (!strict) {
                fprintf(stderr, "rrfp-mm: warning: cuDNN attention backward differs from the backend's own kernel in "
                        "%.0f values on its first run: cuDNN attention is off for this process\n", nbad);
                g_state.disabled = 1;
                return 0; // the caller's own kernel adds the gradients
            }
            fprintf(stderr, "rrfp-mm: error: cuDNN attention backward (S %d, T %d, H %d, d %d, causal %d) differs from "
                    "the backend's own kernel in %.0f values (RRFP_CUDNN_STRICT=1: cuDNN's gradients are returned)\n", S, T,
                    H, d, causal, nbad);
        }
    }
    float* outs[3] = {dq, dk, dv};
    uint16_t* mirror[3] = {dq16, dk16, dv ? dv16 : NULL};
    for (int i = 0; i < 3; i++) {
        if (outs[i] && mirror[i]) {
            add_bf16_rows_m16_kernel<<<ceil_div_z(n, B), B, 0, st>>>(outs[i], mirror[i], bb[5 + i], T, (int)HD, ld_qkv, ld_dv);
        } else if (outs[i]) {
            add_bf16_rows_kernel<<<ceil_div_z(n, B), B, 0, st>>>(outs[i], bb[5 + i], T, (int)HD, ld_qkv);
        }
    }
    if (dv16 && !dv) {
        add_b16_rows_kernel<<<ceil_div_z(n, B), B, 0, st>>>(dv16, bb[7], T, (int)HD, ld_dv);
    }
    cudaCheck(cudaGetLastError());
    cuda_attention_path_note(RR_ATTN_CUDNN_BWD);
    return 1;
}
int cuda_cudnn_attention_backward(const Backend* be, float* dq, float* dk, float* dv, Buf dout, Buf out, const float* lse,
                                  Buf q, Buf k, Buf v, const int* cu_seqlens, int S, int T, int H, int d, int ld_qkv,
                                  int causal, uint16_t* dq16, uint16_t* dk16, uint16_t* dv16, int ld_dv) {
    return cudnn_backward(be, dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T, H, d, ld_qkv, causal, dq16, dk16, dv16,
                          ld_dv);
}

// BackendDevice.reserve's share (cuda_reserve): the scratch for the largest attention calls of the stage, once,
// before the first step. Nothing when cuDNN will not run (no handle, RRFP_CUDNN_ATTENTION=0): the own
// kernel needs no scratch. Only grows; a reservation happens outside the steps, never inside one.
void cuda_cudnn_attention_reserve(const AttnReserve* attn, int n_attn) {
    if (n_attn <= 0 || !cudnn_ready()) return;
    int bwd = cudnn_backward_on();
    size_t most = 0;
    for (int i = 0; i < n_attn; i++) {
        const AttnReserve* a = &attn[i];
        if (a->max_T < 1 || a->max_S < 1 || a->d % 8 != 0 || a->d > 128) continue; // never cuDNN's (see the gates)
        size_t b = rr_cudnn_attn_reserve_bytes(a->max_T, a->max_S, a->H, a->d, a->ld_qkv, bwd);
        if (b > most) most = b;
    }
    State& s = g_state;
    if (most <= s.scratch_bytes) return;
    if (s.scratch) cuda_free_tracked(s.scratch);
    cuda_malloc_tracked((void**)&s.scratch, most);
    s.scratch_bytes = most;
    if (getenv("RRFP_CUDNN_VERBOSE"))
        fprintf(stderr, "rrfp-mm: cuDNN attention: %zu bytes of scratch reserved (%s)\n", most,
                bwd ? "forward and backward" : "forward");
}

#else // no cuDNN in this build

int cuda_cudnn_attention_forward(const Backend* be, Buf out, float* lse, Buf q, Buf k, Buf v, const int* cu_seqlens, int S,
                                 int T, int H, int d, int ld_qkv, int causal) {
    (void)be, (void)out, (void)lse, (void)q, (void)k, (void)v, (void)cu_seqlens, (void)S, (void)T, (void)H, (void)d;
    (void)ld_qkv, (void)causal;
    cuda_attention_path_note(RR_ATTN_CUDNN_NOT_TRIED);
    return 0;
}

int cuda_cudnn_attention_backward(const Backend* be, float* dq, float* dk, float* dv, Buf dout, Buf out, const float* lse,
                                  Buf q, Buf k, Buf v, const int* cu_seqlens, int S, int T, int H, int d, int ld_qkv,
                                  int causal, uint16_t* dq16, uint16_t* dk16, uint16_t* dv16, int ld_dv) {
    (void)be, (void)dq, (void)dk, (void)dv, (void)dout, (void)out, (void)lse, (void)q, (void)k, (void)v;
    (void)cu_seqlens, (void)S, (void)T, (void)H, (void)d, (void)ld_qkv, (void)causal, (void)dq16, (void)dk16, (void)dv16;
    (void)ld_dv;
    cuda_attention_path_note(RR_ATTN_CUDNN_NOT_TRIED);
    return 0;
}

void cuda_cudnn_attention_reserve(const AttnReserve* attn, int n_attn) { (void)attn, (void)n_attn; }

#endif

// Whether this build has cuDNN attention and it is not turned off (tests: what the gpu test compares).
int cuda_cudnn_attention_available(void) {
#ifdef RRFP_HAVE_CUDNN
    return cudnn_ready() ? 1 : 0;
#else
    return 0;
#endif
}
