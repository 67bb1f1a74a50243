#!/usr/bin/env python3
"""make_seeds.py OUT_DIR [SIM_TRACE.json] — the committed seed corpora of the file-input fuzz targets
(tests/fuzz/seeds/, run_fuzz_files.sh): small valid inputs of each format, and the reproductions of
hostile inputs (docs/reliability.md "What is checked") that the targets must keep refusing. Written with the standard library only (an independent
writer of the formats). Run again after a format change: python3 tests/fuzz/make_seeds.py tests/fuzz/seeds"""
import json, os, struct, sys

SEP = b"\n--8<--\n"
out = sys.argv[1]


def put(target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, meta=None):
    """tensors: [(name, dtype, shape, bytes)]"""
    hdr, off, blobs = {}, 0, []
    if meta:
        hdr["__metadata__"] = meta
    for name, dt, shape, b in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


f32 = lambda *v: struct.pack("<%df" % len(v), *v)
# safetensors: every dtype, a scalar, an empty tensor; tensor-parallel slices; hostile shapes
put("safetensors", "dtypes", safetensors([
    ("a.f32", "F32", [3, 2], f32(*range(6))), ("b.bf16", "BF16", [4], struct.pack("<4H", 0x3f80, 0xc020, 0x4049, 0x477f)),
    ("c.i32", "I32", [2, 1], struct.pack("<2i", 7, -20)), ("d.f16", "F16", [2], struct.pack("<2H", 0x3c00, 0xc000)),
    ("e.scalar", "F32", [], f32(42.5)), ("f.empty", "F32", [0, 4], b"")], {"format": "pt"}))
put("safetensors", "slices", safetensors([
    ("text.blocks.0.attn.q.weight", "F32", [2, 4], f32(*range(8))), ("text.blocks.0.mlp.down.weight", "F32", [4, 1], f32(*range(4)))],
    {"slice.text.blocks.0.attn.q.weight": "dim=0;shape=4,4;ranges=0:2",
     "slice.text.blocks.0.mlp.down.weight": "dim=1;shape=4,2;ranges=0:1",
     "xxh64.text.blocks.0.attn.q.weight": "0"}))
put("safetensors", "slice_qkv", safetensors([("w", "F32", [6, 2], f32(*range(12)))],
    {"slice.w": "dim=0;shape=12,2;ranges=0:2,4:2,8:2"}))
put("safetensors", "slice_huge_shape", safetensors([("w", "F32", [4, 1], f32(1, 2, 3, 4))],
    {"slice.w": "dim=1;shape=4,4000000000000;ranges=0:1"}))
put("safetensors", "six_dims", safetensors([("w", "F32", [32, 48, 1, 1, 1, 1], f32(*([0.5] * (32 * 48))))]))
put("safetensors", "duplicate", b"")  # replaced below: json.dumps cannot write a duplicate key
dup = b'{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'
dup += b" " * ((-len(dup)) % 8)
put("safetensors", "duplicate", struct.pack("<Q", len(dup)) + dup + b"\0" * 8)

# import: a two-layer Llama folder (config.json, index, model.safetensors), and hostile configs
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1,
       "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 16, "vocab_size": 16,
       "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False}
D, F, V = 8, 16, 16
lt = [("model.embed_tokens.weight", [V, D]), ("model.norm.weight", [D]), ("lm_head.weight", [V, D])]
for k, sh in [("input_layernorm.weight", [D]), ("self_attn.q_proj.weight", [D, D]), ("self_attn.k_proj.weight", [D, D]),
              ("self_attn.v_proj.weight", [D, D]), ("self_attn.o_proj.weight", [D, D]),
              ("post_attention_layernorm.weight", [D]), ("mlp.gate_proj.weight", [F, D]), ("mlp.up_proj.weight", [F, D]),
              ("mlp.down_proj.weight", [D, F])]:
    lt.append(("model.layers.0." + k, sh))
tens = []
for name, sh in lt:
    n = 1
    for s in sh:
        n *= s
    tens.append((name, "F32", sh, f32(*[0.01 * (i % 13) for i in range(n)])))
model = safetensors(tens)
index = json.dumps({"metadata": {"total_size": len(model)}, "weight_map": {n: "model.safetensors" for n, _ in lt}})
put("import", "llama_index", json.dumps(cfg).encode() + SEP + index.encode() + SEP + model)
put("import", "llama_single", json.dumps(cfg).encode() + SEP + SEP + model)
put("import", "layers_overflow", json.dumps(dict(cfg, num_hidden_layers=477218589)))
put("import", "index_not_string", json.dumps(cfg).encode() + SEP + b'{"weight_map": {"model.embed_tokens.weight": 5}}')
put("import", "vocab_huge", json.dumps(dict(cfg, vocab_size=2147483647, hidden_size=16384, num_attention_heads=128))
    .encode() + SEP + SEP + model)

# durations: a hand-computed file, split backward, and the overflow case
put("durations", "p2m2", json.dumps({"stages": 2, "microbatches": 2, "latency": 0.5, "F": [[1, 1], [1, 1]],
                                     "B": [[2, 2], [2, 2]]}))
put("durations", "split", json.dumps({"stages": 2, "microbatches": 3, "latency": 0, "F": [[1, 2, 1], [1, 1, 3]],
                                      "B": [[1, 1, 1], [2, 1, 1]], "W": [[1, 1, 1], [1, 1, 2]]}))
put("durations", "overflow", json.dumps({"stages": 1, "microbatches": 2, "F": [[1e308, 1e308]], "B": [[1, 1]]}))
# duration files another generator could write (docs/scheduler.md "The simulator's semantics"): a key twice
# (the first was taken), "w" for "W" (was ignored: unsplit), text after the object, a byte-order mark and
# unknown keys (accepted), 1e999 (refused as beyond the double range)
P2 = '"stages": 2, "microbatches": 2, "F": [[1, 1], [1, 1]], "B": [[2, 2], [2, 2]]'
put("durations", "dup_key", "{" + P2 + ', "F": [[9, 9], [9, 9]]}')
put("durations", "case_key", "{" + P2 + ', "w": [[1, 1], [1, 1]]}')
put("durations", "trailing", "{" + P2 + "} {}")
put("durations", "bom_unknown", b"\xef\xbb\xbf{" + P2.encode() + b', "generator": "x", "units": "ms"}\r\n')
put("durations", "inf", "{" + P2.replace('"microbatches": 2', '"microbatches": 2, "latency": 1e999') + "}")

# recipes: the synthetic test recipe's keys with --set lines after the separator
put("recipe", "small", "[model]\ntext_layers = 2\ntext_width = 64\ntext_heads = 2\nvocab = 64\n[train]\nsteps = 5\n"
    "[optim]\nwarmup = 2\nlr = 3e-3\n" + SEP.decode() + "optim.lr=1e-400\ndata.microbatches=512\nparallel.pp=2\n")
put("recipe", "sets", "[data]\nsource = synthetic\n" + SEP.decode() +
    "data.microbatch_tokens=4194304\ntrain.steps=99999999999999999999\nruntime.cap=1.5x\nparallel.layers=1,1\n")
# values with white space around them (the INI reader trims it; --set once kept it, and the print of
# `layers =  2` loaded back as `layers = 2`)
put("recipe", "spaces", "[model]\ntext_layers = 2\n" + SEP.decode() +
    "parallel.layers= 2\ntrain.run_dir= run dir \ndata.policy=\tbalanced \n")

# a trace with a second value after it (was: read in part, the rest ignored)
put("trace", "trailing", '{"traceEvents": [{"ph": "X", "cat": "F", "pid": 0, "ts": 0, "dur": 1, "args": {"mb": 0}}]} '
    '{"traceEvents": []}')

# traces: what `rrfp-mm sim --trace` writes, and rank 0's part of it (a 2-stage run's one file)
if len(sys.argv) > 2:
    ev = json.load(open(sys.argv[2]))["traceEvents"]
    put("trace", "sim_p2", json.dumps({"traceEvents": ev}))
    put("trace", "rank0", json.dumps({"traceEvents": [e for e in ev if e.get("pid") == 0]}))
# a run of two steps on one rank (step spans, as the runtime writes them), with a forward outside both steps
steps2 = [{"name": "step %d" % n, "cat": "step", "ph": "X", "ts": 100.0 * n, "dur": 50.0, "pid": 0, "tid": 2,
           "args": {"step": n}} for n in (0, 1)]
for n in (0, 1):
    for m in (0, 1):
        for k, (c, d) in enumerate((("F", 5.0), ("B", 9.0))):
            steps2.append({"name": "%s%d" % (c, m), "cat": c, "ph": "X", "ts": 100.0 * n + 1 + 20 * m + 6 * k,
                           "dur": d + n, "pid": 0, "tid": 0, "args": {"chunk": 0, "mb": m, "stage": 0, "stages": 1}})
steps2.append({"name": "F0", "cat": "F", "ph": "X", "ts": 70.0, "dur": 3.0, "pid": 0, "tid": 0,
               "args": {"chunk": 0, "mb": 0, "stage": 0, "stages": 1}})
put("trace", "steps2", json.dumps({"traceEvents": steps2}))
put("trace", "bare_array", json.dumps([{"name": "F0", "cat": "F", "ph": "X", "ts": 0, "dur": 5, "pid": 0, "tid": 0,
                                        "args": {"chunk": 0, "mb": 0, "stage": 0, "stages": 1}},
                                       {"name": "B0", "cat": "B", "ph": "X", "ts": 5, "dur": 9, "pid": 0, "tid": 0,
                                        "args": {"chunk": 0, "mb": 0}}]))

# report: a run folder (metrics.jsonl, recipe.ini, predictions.jsonl, zero-shot.jsonl, trace-rank0.json,
# checkpoints/step-1/state.json); the recipes name the held-out shards and tokenizer run_fuzz_files.sh makes in
# the folder the target runs in
def run_folder(metrics, recipe="", preds="", zero="", trace="", state=""):
    return SEP.join(x.encode() for x in (metrics, recipe, preds, zero, trace, state))


def rows(*r):
    return "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in r)


METRICS = rows(*[{"step": s, "loss": 6.5 / s, "lr": 1e-4 * s, "grad_norm": 9.5 / s, "tokens_per_s": 1000 + s,
                  "peak_mem_mb": 100 + s, "device_peak_mb": 50.5, "device_used_mb": 80,
                  "profile": {"gemm": {"ms": 1.5, "launches": 12}, "attention": {"ms": 0.5, "launches": 4}},
                  **({"eval_loss": 3.0 / s} if s % 2 == 0 else {})} for s in (1, 2, 3, 4)])
PREDS = rows({"sample_index": 0, "correct": True, "predicted": [72, 101, 299, 300, -1]},
             {"sample_index": 1, "correct": False, "predicted": [2147483647, 1e20, "x", 5]},
             {"sample_index": 2, "correct": True, "predicted": []},
             {"sample_index": 3, "correct": False, "predicted": [33, 34]},
             {"sample_index": 9007199254740992, "correct": False, "predicted": [1]})
ZERO = rows({"sample_index": 1, "correct": True, "predicted": [40]}, {"sample_index": 3, "correct": False, "predicted": []})
RECIPE = "[model]\npatch = 14\n[data]\neval_shards = %s\ntokenizer = tok.json\n[train]\nsteps = 4\n"
put("report", "run", run_folder(METRICS, RECIPE % "heldout", PREDS, ZERO, json.dumps({"traceEvents": steps2})))
put("report", "anyres", run_folder(METRICS, RECIPE % "heldout_ar", PREDS))
put("report", "synthetic", run_folder(METRICS, "[data]\nsource = synthetic\n", PREDS))
put("report", "torn", run_folder(METRICS + '{"step":5,"lo'))
# ticks of values too close for their magnitude (a tick loop of "v += step" added nothing and never ended) and
# of spans past the largest double
put("report", "far_steps", run_folder(rows({"step": 10 ** 17, "loss": 1}, {"step": 10 ** 17 + 32, "loss": 2})))
put("report", "far_loss", run_folder(rows({"step": 1, "loss": 10 ** 17, "lr": 1e17}, {"step": 2, "loss": 10 ** 17 + 32, "lr": 1e17 + 32})))
put("report", "far_range", run_folder(rows({"step": -1e308, "loss": -1e308, "grad_norm": 1e-320},
                                           {"step": 1e308, "loss": 1e308, "grad_norm": 1e308})))
# a checkpoint's record of its training data (runtime/train/trained.h), and numbers past int64 where it wants a
# whole number (was: converted to int64 before the range check, undefined behaviour)
REC = {"template": "vicuna_v1", "image_preprocess": "anyres", "image_size": 28, "grid_pinpoints": "[[28,56],[56,56]]",
       "tokenizer": "tok.json", "tokenizer_hash": "216f3e7f406cc707", "shards": "heldout", "image_token_id": 258}
put("report", "ckpt_record", run_folder(METRICS, RECIPE % "heldout", "", "", "", json.dumps({"step": 1, "data": REC})))
put("report", "ckpt_token_huge", run_folder(METRICS, "", "", "", "", json.dumps({"image_token_id": 1e300})))
put("report", "ckpt_size_huge", run_folder(METRICS, "", "", "", "", json.dumps({"data": dict(REC, image_size=-1e300)})))
put("report", "ckpt_data_token_huge", run_folder(METRICS, "", "", "", "", json.dumps({"data": dict(REC, image_token_id=1e19)})))
# an empty zero-shot.jsonl beside predictions (was: qsort and bsearch handed a NULL array)
put("report", "zero_shot_blank", run_folder(METRICS, "[data]\nsource = synthetic\n", PREDS, "\n"))

# lora: adapter_config.json variants (then an empty adapter file; run_fuzz_files.sh adds a real adapter as "real"):
# r out of range or not whole, targets not a list, a regular expression, DoRA, patterns
LC = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "lora_dropout": 0.0, "bias": "none",
      "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
for name, over in [("r_huge", {"r": 65536}), ("r_1e300", {"r": 1e300}), ("r_half", {"r": 1.5}),
                   ("targets_regex", {"target_modules": ".*proj"}), ("targets_tower", {"target_modules": ["fc1", "out_proj"]}),
                   ("dora", {"use_dora": True}), ("pattern", {"rank_pattern": {"q_proj": 8}}), ("alpha_nan", {"lora_alpha": None})]:
    put("lora", name, json.dumps(dict(LC, **over)).encode() + SEP)
