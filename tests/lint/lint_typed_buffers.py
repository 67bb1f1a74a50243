#!/usr/bin/env python3
"""lint_typed_buffers.py SRC — a 2-byte buffer never travels as float* (engine/engine.h "Buf", docs/design.md
"The backend").

1. The op table has no 2-byte twins (no BackendB16, no BackendOps.b16: a 2-byte gradient is a Buf of the plain op,
   or a uint16_t* mirror). Every float* parameter of an op slot of engine/engine.h's op tables is f32 by the numerics contract: a gradient
   (a name d...), a statistic (mean, rstd, lse, loss_sum), a norm's 1-D weight or bias, the optimiser's buffers, the
   f32 side of a conversion, a gather's weights, NF4's f32 tables, or the f32-only generation op (the table below).
   Any other buffer an op takes (an activation, a 2-D weight, a GEMM bias, an embedding table) is a Buf, whose dtype
   says what it holds: a float* there fails, naming the slot and the parameter.
2. The CUDA backend's entries (engine/cuda/cuda_ops.cuh) follow their slots: an entry for 2-byte activations
   (cuda_bf16a_*) takes no float* but those of rule 1 (its activations are 2-byte: uint16_t* or Buf), and no entry of
   the bf16 table (cuda_bf16_*, cuda_bf16a_*) takes a GEMM's weight or bias or an embedding table (2-byte compute
   copies) as float*.
3. The model code (vision/, text/lm*, runtime/model/) calls no 2-byte twin op (->b16->) and carves and addresses its activations as typed buffers: no cast
   to a 2-byte pointer ((uint16_t*), (const uint16_t*): a 2-byte buffer arrives typed), no float* carved out of an
   arena by a cast, and no float* computed from a byte offset ((float*)((char*)...), the "float* that is only an
   address" idiom).
4. Inside the CUDA backend's GEMMs and cuDNN attention (engine/gemm_desc.h, engine/gemm_desc.c, engine/cuda/linear.cu,
   bf16.cu, attention_cudnn.cu) an operand travels typed too: GemmOperands holds Bufs (no float member), and no
   float* is made by casting a bare pointer or another pointer cast ((float*)out_, (const float*)dout16,
   (const float*)(const void*)p: the "only an address" idiom) or declared with a 2-byte name (float* dout16). A
   float* carved from scratch ((float*)(base + off), (float*)scratch(n)) holds f32 words and passes.
5. The model's blocks (text/lm*, vision/) have one path per block for both activation storages: no 2-byte twin
   function (a name ending _b16, as lm_block_backward_input_b16 was) and no branch on the configured storage (an if
   whose condition compares act_bytes or an act_dtype of the config: if (lm_act_bytes(c) == 2) {...}). A step chooses
   by its buffers' dtypes instead (x.dt, buf_grad, be_dinp_first); carving (a ternary in a layout) is not a branch.
6. One CUDA bf16 table for both activation storages: the activations' storage is a stage's choice (LmConfig.act_bytes,
   VitConfig.act_bytes), not a table's. No C / CUDA source of the tree (engine/, runtime/, text/, vision/, tests/,
   bench/, dev/, device/) names a table's activation dtype or its 2-byte variant (a member act_dtype, act_bf16_variant,
   be_act(), backend_cuda_bf16a, cuda_bf16a_ops), and engine/cuda/cuda_backend.cu defines one bf16 ops table and one
   Backend of PRECISION_BF16 (what a table says is BackendOps.bf16_activations: whether its ops take 2-byte ones).
7. The paths that carry buffers between the model and the outside (the optimiser, the parameter table and the
   checkpoint, the executors, the pipeline's and the collectives' transport: engine/*.c, runtime/{train,pipeline,comm}/)
   make no float* from a byte offset, from a cast of a 2-byte or untyped pointer, or under a 2-byte name.
The script first proves on texts of its own that each rule fails what it should and passes a clean text, so a
broken pattern cannot pass. Exit 0: clean; 1: a finding (printed)."""
import os
import re
import sys

# slot -> float* parameters that are f32 words by contract (beyond gradients d*, which every slot may take)
F32_BY_CONTRACT = {
    "*": {"mean", "rstd", "lse", "loss_sum"},
    "layernorm_forward": {"weight", "bias"},
    "layernorm_backward": {"weight"},
    "rmsnorm_forward": {"weight"},
    "rmsnorm_backward": {"weight"},
    "sum_squares": {"x"},
    "sum_squares_multi": {"xs"},
    "scale": {"x"},
    "adamw_update": {"param", "grad", "m", "v"},
    "adamw_update_copy": {"param", "grad", "m", "v"},
    "round_bf16": {"out", "inp"},  # f32 words holding bf16 values: the rounding pass of f32-word tables
    "to_bf16": {"inp"},  # the f32 side of the conversions
    "from_bf16": {"out"},
    "add_f32_forward": {"b"},  # the f32 TP sum added to a stored activation
    "rows_gather_forward": {"w"},  # the taps' f32 weights
    "rows_gather_backward": {"w"},
    "nf4_dequantize": {"absmax2", "map8"},
    # generation's decode: f32-word activations only (its KV cache)
    "attention_decode": {"out", "q", "k", "v"},
}
GRADIENT = re.compile(r"^d[a-z0-9_]*$")
TABLES = ("BackendOps",)


def strip_comments(s):
    s = re.sub(r"/\*.*?\*/", " ", s, flags=re.S)
    return re.sub(r"//[^\n]*", " ", s)


def op_findings(header_text):
    """float* parameters of op slots that are not f32 by contract; also an error when no op table is found."""
    s = strip_comments(header_text)
    out, slots = [], 0
    for tab in TABLES:
        m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (tab, tab), s, re.S)
        if not m:
            continue
        for decl in m.group(1).split(";"):
            f = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\((.*)\)\s*$", " ".join(decl.split()))
            if not f:
                continue
            slots += 1
            slot = f.group(1)
            for p in f.group(2).split(","):
                p = p.strip()
                if not re.match(r"(const\s+)?float\s*\*", p):
                    continue
                name = p.split("*")[-1].strip()
                ok = GRADIENT.match(name) or name in F32_BY_CONTRACT["*"] or name in F32_BY_CONTRACT.get(slot, ())
                if not ok:
                    out.append("%s.%s: parameter '%s' is float* but not f32 by contract: take a Buf" % (tab, slot, name))
    if slots == 0:
        out.append("no op table (struct BackendOps) found: the scan cannot check anything")
    if re.search(r"\bBackendB16\b|\bb16\s*;", s):
        out.append("a 2-byte twin table (BackendB16, BackendOps.b16): a 2-byte gradient is a Buf of the plain op")
    return out


MODEL_RULES = [
    (re.compile(r"\(\s*(const\s+)?u?int16_t\s*\*\s*\)"), "a cast to a 2-byte pointer (a 2-byte buffer arrives typed)"),
    (re.compile(r"\(\s*float\s*\*\s*\)\s*arena_alloc\s*\("), "a float* carved by a cast (carve a Buf of the storage's dtype)"),
    (re.compile(r"->\s*b16\s*->|\bBackendB16\b"), "a 2-byte twin op (the plain op takes 2-byte gradient Bufs)"),
    (re.compile(r"\(\s*(const\s+)?float\s*\*\s*\)\s*\(\s*\(\s*(const\s+)?char\s*\*\s*\)"),
     "a float* computed from a byte offset (buf_at on a Buf)"),
]


# rule 5: the model's blocks, one path for both activation storages
TWIN_FN = re.compile(r"\b\w+_b16\s*\(")
STORAGE_TEST = re.compile(r"act_bytes\b\s*(\([^()]*\))?\s*[!=<>]=?\s*\d|\d\s*[!=<>]=?\s*[\w>.-]*act_bytes\b|"
                          r"act_dtype\s*\([^()]*\)\s*[!=]=")


def branch_findings(path, text):
    """rule 5 over one file of text/lm* or vision/: a _b16 twin function, an if on the configured storage"""
    code = strip_comments(text)
    out = rule_findings(path, code, [(TWIN_FN, "a 2-byte twin function (one path per block: dispatch on the Bufs' dtypes)")])
    for m in re.finditer(r"\bif\s*\(", code):
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        if STORAGE_TEST.search(code[m.end():i - 1]):
            line = code.count("\n", 0, m.start()) + 1
            out.append("%s:%d: a branch on the configured activation storage (choose by the Bufs' dtypes: x.dt, buf_grad, "
                       "be_dinp_first)" % (path, line))
    return out


def branch_files(src):
    for path in model_files(src):
        rel = os.path.relpath(path, src)
        if rel.startswith(("vision" + os.sep, "text" + os.sep)):
            yield path


# the compute copies a bf16 table stores in 2 bytes: the GEMMs' weights and biases, the embedding table
WEIGHT_LIKE = {"weight": ("linear_forward", "linear_backward", "linear_gelu_forward"),
               "bias": ("linear_forward", "linear_gelu_forward"), "table": ("embedding_forward",)}


def entry_findings(text):
    """float* parameters of the CUDA entries (cuda_ops.cuh) that hold 2-byte values; an error when none is found."""
    s = strip_comments(text)
    out, n = [], 0
    for m in re.finditer(r"\b(?:void|int|double)\s+cuda_(bf16a_|bf16_)?(\w+?)(_b16)?\s*\(([^)]*)\)\s*;", s):
        n += 1
        table, slot = m.group(1) or "", m.group(2)
        if not table:
            continue  # the f32 table: f32 words throughout
        for p in m.group(4).split(","):
            p = " ".join(p.split())
            if not re.match(r"(const\s+)?float\s*\*", p):
                continue
            name = p.split("*")[-1].strip()
            if slot in WEIGHT_LIKE.get(name, ()):
                out.append("cuda_%s%s: '%s' is a 2-byte compute copy on the bf16 tables but float*" % (table, slot, name))
            elif table == "bf16a_" and not (GRADIENT.match(name) or name in F32_BY_CONTRACT["*"] or
                                            name in F32_BY_CONTRACT.get(slot, ())):
                out.append("cuda_bf16a_%s: '%s' is a 2-byte activation but float*" % (slot, name))
    if n == 0:
        out.append("no CUDA entry found: the scan cannot check anything")
    return out


# the CUDA backend's files whose operands rule 4 checks, relative to the source root
TYPED_BACKEND_FILES = ("engine/gemm_desc.h", "engine/gemm_desc.c", "engine/cuda/linear.cu", "engine/cuda/bf16.cu",
                       "engine/cuda/attention_cudnn.cu")
BACKEND_RULES = [
    (re.compile(r"\(\s*(const\s+)?float\s*\*\s*\)\s*(\(\s*(const\s+)?(void|char|u?int16_t|__nv_bfloat16)\s*\*\s*\)|"
                r"[A-Za-z_]\w*\s*[;,)\]])"),
     "a float* made by casting a bare pointer or a pointer cast (a 2-byte operand travels as a Buf or uint16_t*)"),
    (re.compile(r"\bfloat\s*\*\s*(const\s+)?\w*16\b"), "a float* with a 2-byte name (take uint16_t* or a Buf)"),
]


def rule_findings(path, code, rules):
    """path:line: why for every match of each (regex, why) of rules in code (comments stripped)"""
    out = []
    for rx, why in rules:
        for m in rx.finditer(code):
            line = code.count("\n", 0, m.start()) + 1
            out.append("%s:%d: %s" % (path, line, why))
    return out


def backend_findings(path, text):
    """rule 4 over one of TYPED_BACKEND_FILES; gemm_desc.h must also hold GemmOperands with no float member."""
    code = strip_comments(text)
    out = rule_findings(path, code, BACKEND_RULES)
    if path.endswith("gemm_desc.h"):
        m = re.search(r"typedef struct \{([^{}]*)\} GemmOperands;", code)
        if not m:
            out.append("%s: no GemmOperands found: the scan cannot check it" % path)
        elif re.search(r"\bfloat\b", m.group(1)):
            out.append("%s: GemmOperands holds a float* operand (take a Buf: its dtype says what it holds)" % path)
    return out


# rule 6: the activations' storage is a stage's choice, one CUDA bf16 table
STORAGE_FIELD = re.compile(r"(?:\.|->)\s*act_dtype\b|\bDType\s+act_dtype\b|\bact_bf16_variant\b|\bbe_act\s*\(|"
                           r"\bbackend_cuda_bf16a\b|\bcuda_bf16a_ops\b")
STORAGE_DIRS = ("engine", "runtime", "text", "vision", "tests", "bench", "dev", "device")


def storage_findings(path, text):
    """rule 6 over one C / CUDA source: a table's activation storage or its 2-byte variant named"""
    return rule_findings(path, strip_comments(text), [(STORAGE_FIELD, "a table's activation storage or its 2-byte variant "
                                                       "(one bf16 table takes both storages; a stage chooses: "
                                                       "lm_act_dtype, vit_act_dtype, BackendOps.bf16_activations)")])


def cuda_table_findings(text):
    """rule 6 over engine/cuda/cuda_backend.cu: one bf16 ops table, one Backend of PRECISION_BF16"""
    code = strip_comments(text)
    ops = re.findall(r"\bBackendOps\s+(\w+)\s*=", code)
    bf16_ops = [t for t in ops if "bf16" in t]
    bf16_backends = [n for n, body in re.findall(r"\bBackend\s+(\w+)\s*=\s*\{(.*?)\};", code, re.S)
                     if "PRECISION_BF16" in body]
    out = []
    if not ops:
        out.append("no BackendOps table found: the scan cannot check it")
    if len(bf16_ops) != 1:
        out.append("%d bf16 ops tables (%s): one table takes both activation storages" % (len(bf16_ops), ", ".join(bf16_ops)))
    if len(bf16_backends) != 1:
        out.append("%d Backends of PRECISION_BF16 (%s): one" % (len(bf16_backends), ", ".join(bf16_backends)))
    return out


def storage_files(src):
    for d in STORAGE_DIRS:
        for dirpath, _, names in os.walk(os.path.join(src, d)):
            for n in sorted(names):
                if n.endswith((".c", ".h", ".cu", ".cuh", ".cpp", ".hpp")):
                    yield os.path.join(dirpath, n)


# 7. The paths that carry buffers between the model and the outside (the optimiser, the parameter table and the
#    checkpoint, the executors, the pipeline's and the collectives' transport: engine/*.c, runtime/{train,pipeline,
#    comm}/) move f32 words as float* and other bytes as void* or a typed pointer: no float* made from a byte offset,
#    from a cast of a 2-byte or untyped pointer ((float*)(void*)p, (float*)(uint16_t*)p), or declared with a 2-byte
#    name (float* grad16): a 2-byte buffer would then travel as float* again, "only an address".
TRANSPORT_DIRS = ("engine", os.path.join("runtime", "train"), os.path.join("runtime", "pipeline"),
                  os.path.join("runtime", "comm"))
TRANSPORT_RULES = [
    (re.compile(r"\(\s*(const\s+)?float\s*\*\s*\)\s*\(\s*\(\s*(const\s+)?(char|u?int8_t|unsigned char)\s*\*\s*\)"),
     "a float* computed from a byte offset (f32 words are addressed as float*; other bytes stay void* or typed)"),
    (re.compile(r"\(\s*(const\s+)?float\s*\*\s*\)\s*\(\s*(const\s+)?(void|u?int16_t|__nv_bfloat16)\s*\*\s*\)"),
     "a float* made by casting a 2-byte or untyped pointer (the \"only an address\" idiom)"),
    (re.compile(r"\bfloat\s*\*\s*(const\s+)?\w*(16|_b16|_bf16)\b"), "a float* with a 2-byte name (take uint16_t* or a Buf)"),
]


def transport_files(src):
    for d in TRANSPORT_DIRS:
        root = os.path.join(src, d)
        for dirpath, _, names in os.walk(root):
            if d == "engine" and dirpath != root:
                continue  # engine/cpu and engine/cuda: the ops themselves (rules 1, 2 and 4)
            for n in sorted(names):
                if n.endswith((".c", ".h")):
                    yield os.path.join(dirpath, n)


def transport_self_check():
    clean = ("float* h = mallocCheck(n * sizeof(float));\nfloat* st = (float*)c->stg + p;\n"
             "uint16_t* w = (uint16_t*)((char*)base + off);\nvoid* p = (char*)dst + off;\nconst float* g = grad + o;\n")
    if rule_findings("x.c", clean, TRANSPORT_RULES):
        return "the transport scan flags clean code: %s" % rule_findings("x.c", clean, TRANSPORT_RULES)
    for bad in ("float* x = (float*)((char*)base + off);", "return (const float*)((const uint8_t*)p + i);",
                "send((const float*)(const void*)act, n);", "float* v = (float *)(uint16_t*)copy;",
                "static void put(float* grad16, size_t n);", "const float *act_bf16 = a->x;"):
        if not rule_findings("x.c", clean + bad, TRANSPORT_RULES):
            return "the transport scan misses: %s" % bad
    return None


def model_findings(path, text):
    return rule_findings(path, strip_comments(text), MODEL_RULES)


def model_files(src):
    for d in ("vision", "text", os.path.join("runtime", "model")):
        root = os.path.join(src, d)
        for dirpath, _, names in os.walk(root):
            for n in sorted(names):
                if not n.endswith((".c", ".h")):
                    continue
                if d == "text" and not n.startswith("lm"):
                    continue  # the tokenizer holds no activations
                yield os.path.join(dirpath, n)


def self_check():
    clean_h = """typedef struct BackendOps {
        /* out = inp */
        void (*linear_backward)(const struct Backend* be, float* dinp, const float* dout, Buf inp, Buf weight, int N);
        void (*layernorm_forward)(const struct Backend* be, Buf out, float* mean, float* rstd, Buf inp, const float* weight,
                                  const float* bias, int N, int C);
    } BackendOps;"""
    if op_findings(clean_h):
        return "the op scan flags a clean table: %s" % op_findings(clean_h)
    for bad in ("void (*linear_forward)(const struct Backend* be, float* out, Buf inp, Buf weight, int N);",
                "void (*rope_forward)(const struct Backend* be, float *x, const int* pos, int N);",
                "void (*embedding_forward)(const struct Backend* be, Buf out, const int* ids, const float* table, int N);"):
        t = clean_h.replace("} BackendOps;", bad + "\n} BackendOps;")
        if not op_findings(t):
            return "the op scan misses: %s" % bad
    if not op_findings(clean_h.replace("} BackendOps;", "const BackendB16* b16;\n} BackendOps;")):
        return "the op scan passes a 2-byte twin table"
    if not op_findings("struct Other { int x; };"):
        return "the op scan passes a header without the op table"
    clean_e = """void cuda_linear_forward(const Backend* be, float* out, const float* inp, const float* weight, int N);
    void cuda_bf16_linear_forward(const Backend* be, float* out, const float* inp, const uint16_t* weight, int N);
    void cuda_bf16a_layernorm_forward(const Backend* be, uint16_t* out, float* mean, float* rstd, const uint16_t* inp,
                                      const float* weight, const float* bias, int N, int C);
    void cuda_bf16a_linear_backward_b16(const Backend* be, float* dinp, const uint16_t* dout16, const float* dout,
                                        const uint16_t* inp, const uint16_t* weight, int N);"""
    if entry_findings(clean_e):
        return "the entry scan flags clean entries: %s" % entry_findings(clean_e)
    for bad in ("void cuda_bf16_linear_forward(const Backend* be, float* out, const float* inp, const float* weight, int N);",
                "void cuda_bf16a_gelu_forward(const Backend* be, float* out, const uint16_t* inp, size_t n);",
                "void cuda_bf16a_linear_backward_b16(const Backend* be, float* dinp, const float* inp, int N);",
                "void cuda_bf16_embedding_forward(const Backend* be, float* out, const int* ids, const float *table, int N);"):
        if not entry_findings(clean_e + "\n" + bad):
            return "the entry scan misses: %s" % bad
    clean_g = """typedef struct {
        Buf ptr[GEMM_PTR_COUNT];
    } GemmOperands;
    float* t = (float*)bf16_scratch(2 * (size_t)OC);
    float* stats = (float*)(base + L.stats_at);
    bf16_to_f32_cuda((float*)(s + boff), bias, n, st);
    void f(const uint16_t* dout16, Buf out, float* dq);"""
    if backend_findings("engine/gemm_desc.h", clean_g):
        return "the backend scan flags clean code: %s" % backend_findings("engine/gemm_desc.h", clean_g)
    if not backend_findings("engine/gemm_desc.h", "float* x = (float*)(base + 4);"):
        return "the backend scan passes a gemm_desc.h without GemmOperands"
    bad_g = clean_g.replace("Buf ptr[GEMM_PTR_COUNT];", "const float* ptr[GEMM_PTR_COUNT];")
    if not backend_findings("engine/gemm_desc.h", bad_g):
        return "the backend scan misses a float* GemmOperands"
    for bad in ("float* out = (float*)out_;", "return (const float*)(const void*)p;",
                "cudnn_backward(be, (const float*)dout16, q);", "static int f(const float* dout16, int n);",
                "ops.ptr[0] = (const float *) (uint16_t*)w;"):
        if not backend_findings("engine/cuda/bf16.cu", clean_g.split("\n", 3)[3] + "\n" + bad):
            return "the backend scan misses: %s" % bad
    clean_c = "static Buf row(Buf b, size_t t) { return buf_at(b, t); }\nfloat* g = arena_alloc_f32(ar, n);\n"
    if model_findings("x.c", clean_c):
        return "the model scan flags clean code: %s" % model_findings("x.c", clean_c)
    for bad in ("be->ops->to_bf16(be, (uint16_t*)x0, h, n);", "f((const uint16_t *)a->dlogits);",
                "a->x = (float*)arena_alloc(ar, n * ab);",
                "return (float*)((char*)base + i * ab);", "be->ops->b16->linear_backward(be, x);", "return (const float*)((const char*)base + i * ab);"):
        if not model_findings("x.c", bad):
            return "the model scan misses: %s" % bad
    clean_b = """static void f(const Backend* be, const LmConfig* c, Buf x) {
        int b16 = lm_act_bytes(c) == 2;
        g->dq16 = b16 ? arena_alloc(ar, n * 2) : NULL;
        RR_ASSERT(lm_act_bytes(c) == 4 && "f32 words");
        if (x.dt == DTYPE_BF16) be->ops->to_bf16(be, buf_bf16p(x), h, n);
        if (c->tp > 1 && (n + 1) * 2 > 4) g(buf_bf16(m16), rr_f32_to_bf16(v));
    }"""
    if branch_findings("text/lm.c", clean_b):
        return "the branch scan flags clean code: %s" % branch_findings("text/lm.c", clean_b)
    for bad in ("static void lm_block_backward_input_b16(const Backend* be) {}", "if (lm_act_bytes(c) == 2) {",
                "if (c->tp > 1 && vit_act_bytes(c) == 2) { x(); }", "} else if (vit_act_bytes(c)==2) f();",
                "if (c->act_bytes != 4) f();", "if (lm_act_dtype(c) == DTYPE_BF16) f();", "if (2 == c->act_bytes) f();"):
        if not branch_findings("text/lm.c", clean_b + "\n" + bad):
            return "the branch scan misses: %s" % bad
    clean_s = """st->lc.act_bytes = 2;
        DType adt = lm_act_dtype(&st->lc);
        if (be->ops->bf16_activations) f(vit_act_dtype(c), buf_of(p, adt));
        // be->act_dtype in a comment
        AttnReserve ar = {.act = DTYPE_BF16};"""
    if storage_findings("x.c", clean_s):
        return "the storage scan flags clean code: %s" % storage_findings("x.c", clean_s)
    for bad in ("if (be->act_dtype == DTYPE_BF16) f();", "const Backend* b = be->act_bf16_variant;",
                "    DType act_dtype;", ".act_dtype = DTYPE_F32,", "f(be_act(be, x));", "extern const Backend backend_cuda_bf16a;",
                "o = cuda_bf16a_ops;"):
        if not storage_findings("x.c", clean_s + "\n" + bad):
            return "the storage scan misses: %s" % bad
    clean_t = """static const BackendOps cuda_ops = {.linear_forward = f};
    static const BackendOps cuda_bf16_ops = [] { BackendOps o = cuda_ops; o.bf16_activations = 1; return o; }();
    static const Backend backend_cuda = {.ops = &cuda_ops, .precision = PRECISION_FP32};
    const Backend backend_cuda_bf16 = {.ops = &cuda_bf16_ops, .precision = PRECISION_BF16};"""
    if cuda_table_findings(clean_t):
        return "the CUDA table scan flags clean code: %s" % cuda_table_findings(clean_t)
    for bad in ("static const BackendOps cuda_bf16x_ops = [] { BackendOps o = cuda_bf16_ops; return o; }();",
                "const Backend backend_cuda_b16 = {.ops = &cuda_bf16_ops, .precision = PRECISION_BF16};"):
        if not cuda_table_findings(clean_t + "\n" + bad):
            return "the CUDA table scan misses: %s" % bad
    if not cuda_table_findings("int x;"):
        return "the CUDA table scan passes a file without tables"
    return None


def main():
    if len(sys.argv) != 2:
        print("usage: lint_typed_buffers.py SRC")
        return 2
    src = sys.argv[1]
    why = self_check()
    if why:
        print("FAIL (self-check): " + why)
        return 1
    findings = []
    header = os.path.join(src, "engine", "engine.h")
    with open(header, encoding="utf-8") as f:
        findings += ["engine/engine.h: " + x for x in op_findings(f.read())]
    with open(os.path.join(src, "engine", "cuda", "cuda_ops.cuh"), encoding="utf-8") as f:
        findings += ["engine/cuda/cuda_ops.cuh: " + x for x in entry_findings(f.read())]
    for rel in TYPED_BACKEND_FILES:
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            findings += backend_findings(rel, f.read())
    why = transport_self_check()
    if why:
        print("FAIL (self-check): " + why)
        return 1
    nt = 0
    for path in transport_files(src):
        nt += 1
        with open(path, encoding="utf-8") as f:
            findings += rule_findings(os.path.relpath(path, src), strip_comments(f.read()), TRANSPORT_RULES)
    if nt == 0:
        findings.append("no optimiser, checkpoint or transport source found under %s (engine/, runtime/train/, ...)" % src)
    n = 0
    for path in model_files(src):
        n += 1
        with open(path, encoding="utf-8") as f:
            findings += model_findings(os.path.relpath(path, src), f.read())
    nb = 0
    for path in branch_files(src):
        nb += 1
        with open(path, encoding="utf-8") as f:
            findings += branch_findings(os.path.relpath(path, src), f.read())
    if n == 0 or nb == 0:
        findings.append("no model source found under %s (vision/, text/, runtime/model/)" % src)
    ns = 0
    for path in storage_files(src):
        ns += 1
        with open(path, encoding="utf-8") as f:
            findings += storage_findings(os.path.relpath(path, src), f.read())
    if ns == 0:
        findings.append("no C / CUDA source found under %s (%s)" % (src, ", ".join(STORAGE_DIRS)))
    with open(os.path.join(src, "engine", "cuda", "cuda_backend.cu"), encoding="utf-8") as f:
        findings += ["engine/cuda/cuda_backend.cu: " + x for x in cuda_table_findings(f.read())]
    if findings:
        print("FAIL: a 2-byte buffer may travel as float* (engine/engine.h, Buf):")
        print("\n".join(findings))
        return 1
    print("lint typed buffers: ok (engine.h op tables, the CUDA entries, the GEMM and cuDNN operands, %d model files, "
          "%d of them with one path per block, %d sources with no table-level activation storage, one CUDA bf16 table)"
          % (n, nb, ns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
