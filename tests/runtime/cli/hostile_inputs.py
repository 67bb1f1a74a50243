#!/usr/bin/env python3
"""hostile_inputs.py — crafted files and arguments get a clean refusal (docs/reliability.md "What is checked").

Every case runs rrfp-mm on something an attacker (or an accident) could hand it — a Hugging Face folder
with an overflowing config.json or a forged index, a --out path with quotes and shell syntax, a
checkpoint whose tensor has 5 to 9 dimensions or whose slice description claims terabytes, state.json
values out of range or inconsistent, a step-N folder holding a file of step N+2 or of another job, NaN
weights, /dev/zero or a huge sparse file where a JSON, INI, trace, duration or metrics file belongs —
and asserts a clean refusal:
  - exit status in 1..125 (not a signal, not 0), and no sanitizer report, assertion or "internal error"
    on stderr (the sanitizer build runs this same script);
  - the message names the file and the field (or tensor) at fault: each case lists the words it needs;
  - nothing outside the command's own output folder changed (every other file under WORK keeps its
    size and mtime: a sentinel folder "keep/" sits beside every --out), and no partial output is left
    (the --out folder and its temporary X.tmp.PID do not exist).
A few cases that have a right answer (listing a 6-dimensional tensor, a successful import into a path
with quotes, spaces and $(...)) assert that answer instead.

Usage: hostile_inputs.py RRFP_MM SRC_DIR WORK_DIR [base|pp|llava]   (exit 0 = every case passed)
  base: one-process cases; pp: pipeline and tensor-parallel (mpirun -np 2) checkpoints holding one shard
  of another step; llava: import llava / import clip / export hf (the same rules for LLaVA and CLIP
  configs, indexes, --out paths, weights and files that are not files)."""
import json
import re
import os
import shutil
import struct
import subprocess
import sys

EXE, SRC, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
PART = sys.argv[4] if len(sys.argv) > 4 else "base"
RECIPE = os.path.join(SRC, "recipes", "test-synthetic.ini")
sys.path.insert(0, os.path.join(SRC, "tests", "support", "util"))
from hostile_lib import COUNT, FAILED, SAN, note  # noqa: E402
import hostile_lib  # noqa: E402


def run(args, timeout=120, env=None):
    try:
        p = subprocess.run(args, capture_output=True, timeout=timeout, env=hostile_lib.sanitizer_env(SRC, env), cwd=WORK)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return -999, "", "timed out after %d s" % timeout


def refused(name, args, must, outs=(), own=(), timeout=120, env=None):
    return hostile_lib.refused_run(name, WORK, lambda: run(args, timeout, env), must, outs, own)


def works(name, args, expect_out=None, timeout=120):
    return hostile_lib.works_run(name, lambda: run(args, timeout), expect_out)


# ---- safetensors by hand ----------------------------------------------------------------------------

def st_bytes(tensors, meta=None):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    header, at, blobs = {}, 0, []
    if meta:
        header["__metadata__"] = meta
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def st_read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def st_rewrite(path, edit):
    """Rewrite a file's header through edit(header) (dict, __metadata__ included); the data stays."""
    header, data = st_read(path)
    edit(header)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def json_edit(path, edit, raw=None):
    if raw is not None:
        open(path, "w").write(raw)
        return
    j = json.load(open(path))
    edit(j)
    open(path, "w").write(json.dumps(j))


# ---- a tiny Hugging Face Llama folder ------------------------------------------------------------------

D, L, H, F, V = 8, 1, 2, 12, 16


def llama_config(**over):
    c = {"model_type": "llama", "hidden_size": D, "num_hidden_layers": L, "num_attention_heads": H,
         "num_key_value_heads": H, "intermediate_size": F, "vocab_size": V, "hidden_act": "silu",
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}
    c.update(over)
    return c


def llama_tensors(nan_in=None, drop=None):
    shapes = [("model.embed_tokens.weight", (V, D))]
    for l in range(L):
        p = "model.layers.%d." % l
        shapes += [(p + "input_layernorm.weight", (D,)), (p + "self_attn.q_proj.weight", (D, D)),
                   (p + "self_attn.k_proj.weight", (D, D)), (p + "self_attn.v_proj.weight", (D, D)),
                   (p + "self_attn.o_proj.weight", (D, D)), (p + "post_attention_layernorm.weight", (D,)),
                   (p + "mlp.gate_proj.weight", (F, D)), (p + "mlp.up_proj.weight", (F, D)),
                   (p + "mlp.down_proj.weight", (D, F))]
    shapes += [("model.norm.weight", (D,)), ("lm_head.weight", (V, D))]
    out = []
    for i, (n, s) in enumerate(shapes):
        if n == drop:
            continue
        k = s[0] * (s[1] if len(s) > 1 else 1)
        vals = [((i * 7 + j * 3) % 11 - 5) * 0.01 for j in range(k)]
        if n == nan_in:
            vals[k // 2] = float("nan")
        out.append((n, "F32", s, f32(vals)))
    return out


def make_hf(d, config=None, raw_config=None, tensors=None, index=None, raw_index=None):
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    if raw_config is not None:
        open(os.path.join(d, "config.json"), "w").write(raw_config)
    else:
        json.dump(config if config is not None else llama_config(), open(os.path.join(d, "config.json"), "w"))
    name = "model.safetensors" if index is None and raw_index is None else "model-00001-of-00001.safetensors"
    open(os.path.join(d, name), "wb").write(st_bytes(tensors if tensors is not None else llama_tensors()))
    if raw_index is not None:
        open(os.path.join(d, "model.safetensors.index.json"), "w").write(raw_index)
    elif index is not None:
        json.dump(index, open(os.path.join(d, "model.safetensors.index.json"), "w"))
    return d


def import_cases():
    hf = os.path.join(WORK, "hf")
    make_hf(hf)
    works("import: the valid fixture imports", [EXE, "import", "llama", "--hf", hf, "--out", "imp/ok"],
          "imported 12 tensors")
    # 1. config.json values that overflow or leave the model's limits, for every key that sizes something
    keys = ["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"]
    values = [477218589, 2147483647, 2147483648, 4294967297, 9007199254740993, 1e300, -1, 0, 1.5, "8", None, True,
              [8], {"x": 8}]
    for k in keys:
        for v in values:
            make_hf(hf, llama_config(**{k: v}))
            refused("import: config %s = %s" % (k, json.dumps(v)),
                    [EXE, "import", "llama", "--hf", hf, "--out", "imp/o"], ["config.json", k], outs=["imp/o"])
    for k, raw in [("rope_theta", "1e400"), ("rms_norm_eps", "-1e400"), ("rms_norm_eps", "0")]:
        text = json.dumps(llama_config()).replace('"%s": ' % k, '"%s": %s, "x_%s": ' % (k, raw, k))
        make_hf(hf, raw_config=text)
        refused("import: config %s = %s" % (k, raw), [EXE, "import", "llama", "--hf", hf, "--out", "imp/o"],
                ["config.json", k], outs=["imp/o"])
    for k in ["num_key_value_heads", "head_dim"]:
        for v in [1e300, -7, 2.5, 4294967298]:
            make_hf(hf, llama_config(**{k: v}))
            refused("import: config %s = %s" % (k, v), [EXE, "import", "llama", "--hf", hf, "--out", "imp/o"],
                    ["config.json", k], outs=["imp/o"])
    for raw in ["", "{", "[]", "null", '"llama"', "{" * 100000]:
        make_hf(hf, raw_config=raw)
        refused("import: config.json %r" % raw[:12], [EXE, "import", "llama", "--hf", hf, "--out", "imp/o"],
                ["config.json"], outs=["imp/o"])
    # 2. sizes within the model's limits but not the tensors': sized from the file's tensor after its shape
    #    is checked, never from config.json alone (vocab 2^24 x hidden 65536 x 4 bytes is 4 TiB)
    for over, tensor in [({"vocab_size": 16777216, "hidden_size": 65536, "num_attention_heads": 1024,
                           "num_key_value_heads": 1024},
                          "model.embed_tokens.weight"),
                         ({"intermediate_size": 1048576}, "mlp.gate_proj.weight"),
                         ({"num_hidden_layers": 1024}, "model.layers.1.")]:
        make_hf(hf, llama_config(**over))
        refused("import: config %s against small tensors" % over, [EXE, "import", "llama", "--hf", hf, "--out",
                "imp/o"], [tensor], outs=["imp/o"])
    # 3. the index: every kind of weight_map value (the message once read freed memory)
    good = {"weight_map": {n: "model-00001-of-00001.safetensors" for n, _, _, _ in llama_tensors()}}
    make_hf(hf, index=good)
    works("import: a valid index imports", [EXE, "import", "llama", "--hf", hf, "--out", "imp/ok_index"])
    for v in [5, -1, 1e300, None, True, [], ["model.safetensors"], {}, "", ".", "..", "../hf/model.safetensors",
              "/etc/passwd", "sub/x.safetensors", ".hidden", "x" * 300]:
        idx = json.loads(json.dumps(good))
        idx["weight_map"]["model.embed_tokens.weight"] = v
        make_hf(hf, index=idx)
        refused("import: index weight_map value %s" % json.dumps(v)[:40],
                [EXE, "import", "llama", "--hf", hf, "--out", "imp/o"],
                ["model.safetensors.index.json", "weight_map", "model.embed_tokens.weight"], outs=["imp/o"])
    for raw in ["[]", "{", '{"weight_map": 5}', '{"weight_map": []}', '{"weight_map": {}}',
                json.dumps({"weight_map": {"t%d" % i: "model-00001-of-00001.safetensors" for i in range(20000)}})]:
        make_hf(hf, raw_index=raw)
        refused("import: index %s" % raw[:30], [EXE, "import", "llama", "--hf", hf, "--out", "imp/o"],
                ["model.safetensors.index.json"], outs=["imp/o"])
    # 4. NaN weights are not imported (a checkpoint never holds one)
    make_hf(hf, tensors=llama_tensors(nan_in="model.layers.0.mlp.up_proj.weight"))
    refused("import: a NaN weight", [EXE, "import", "llama", "--hf", hf, "--out", "imp/o"],
            ["model.layers.0.mlp.up_proj.weight", "NaN"], outs=["imp/o"])
    # 5. --out paths with quotes, spaces and shell syntax: a failing import (after making its temporary
    #    folder) removes only its own folder, and no command ever runs
    keep = os.path.join(WORK, "keep")
    os.makedirs(keep, exist_ok=True)
    open(os.path.join(keep, "precious.txt"), "w").write("must survive\n")
    make_hf(hf, tensors=llama_tensors(drop="lm_head.weight"))
    for out in [WORK + "/keep' '" + WORK + "/o", WORK + "/x'; touch " + WORK + "/PWNED; echo '",
                WORK + "/$(touch " + WORK + "/PWNED)", WORK + "/`touch " + WORK + "/PWNED`",
                WORK + '/a" "b', WORK + "/with space/and'quote", WORK + "/keep/../o2", WORK + "/-rf"]:
        refused("import: --out %r (failing import)" % out[len(WORK):],
                [EXE, "import", "llama", "--hf", hf, "--out", out], ["lm_head.weight"],
                outs=[out], own=[WORK + "/with space"])
        note(not os.path.exists(WORK + "/PWNED"), "import --out %r ran a command" % out)
        note(open(os.path.join(keep, "precious.txt")).read() == "must survive\n", "keep/ damaged by %r" % out)
    make_hf(hf)
    odd = WORK + "/out dir/it's \"quoted\" $(touch PWNED) `x`"
    os.makedirs(os.path.dirname(odd), exist_ok=True)
    works("import: into a path with quotes, spaces and $()", [EXE, "import", "llama", "--hf", hf, "--out", odd])
    works("import: that folder lists", [EXE, "tensors", "ls", odd], "text.lm_head.weight")
    note(not os.path.exists(WORK + "/PWNED") and not os.path.exists(os.path.join(WORK, "PWNED")), "PWNED exists")
    refused("import: --out exists", [EXE, "import", "llama", "--hf", hf, "--out", keep], ["already exists"])
    refused("import: config.json is /dev/zero", [EXE, "import", "llama", "--hf", "zero_hf", "--out", "imp/o"],
            ["config.json", "a device"], outs=["imp/o"])


def train_args(run_dir, steps=4, extra=()):
    return [EXE, "train", RECIPE, "--set", "train.steps=%d" % steps, "--set", "optim.warmup=1", "--set",
            "train.checkpoint_every=2", "--set", "checkpoint.keep=0", "--set", "train.run_dir=" + run_dir] + list(extra)


def checkpoint_cases():
    # two runs of the same recipe: checkpoints at steps 2 and 4 of each
    for r in ["runA", "runB"]:
        rc, out, err = run(train_args(os.path.join(WORK, r)))
        note(rc == 0, "training %s for the checkpoint cases: %s" % (r, err[-300:]))
    ck = lambda r, s: os.path.join(WORK, r, "checkpoints", "step-%08d" % s)
    n = [0]

    def fresh(src=None):
        n[0] += 1
        d = os.path.join(WORK, "ck%d" % n[0])
        shutil.copytree(src or ck("runA", 2), d)
        return d

    def resume_refused(name, d, must, evaluate=True, train=True):
        # a refused `train --resume` costs ~0.5 s (start-up), `eval` ~0.05 s: both where both read the
        # files in question, eval alone for what checkpoint_load checks by itself
        rd = os.path.join(WORK, "rr%d" % n[0])
        if train:
            refused("resume: " + name, train_args(rd, extra=["--set", "checkpoint.resume=" + d]), must, own=[rd])
        if evaluate:
            refused("eval: " + name, [EXE, "eval", RECIPE, "--checkpoint", d, "--samples", "2"], must)

    works("resume: the untouched checkpoint resumes", train_args(os.path.join(WORK, "rr0"),
          extra=["--set", "checkpoint.resume=" + fresh()]))
    # 1. a step-N folder holding step-(N+2)'s file, or another job's file of the same step
    for f in ["model.safetensors", "optimizer.safetensors"]:
        d = fresh()
        shutil.copy(os.path.join(ck("runA", 4), f), os.path.join(d, f))
        resume_refused("%s of step 4 in step 2's folder" % f, d, [f, "step", "another checkpoint"],
                       evaluate=f.startswith("model"))
        d = fresh()
        shutil.copy(os.path.join(ck("runB", 2), f), os.path.join(d, f))
        resume_refused("%s of another job's step 2" % f, d, [f, "run"], evaluate=f.startswith("model"))
    # a whole step-2 folder renamed step-4 in a run's checkpoints: `latest` goes by the name
    rl = os.path.join(WORK, "run_renamed")
    shutil.copytree(os.path.join(WORK, "runA"), rl)
    shutil.rmtree(os.path.join(rl, "checkpoints", "step-00000004"))
    os.rename(os.path.join(rl, "checkpoints", "step-00000002"), os.path.join(rl, "checkpoints", "step-00000004"))
    refused("resume latest: step 2's folder renamed step-00000004",
            train_args(rl, extra=["--set", "checkpoint.resume=latest"]), ["state.json", "step-00000004", "step"],
            own=[rl])
    d = fresh()
    st_rewrite(os.path.join(d, "model.safetensors"), lambda h: h["__metadata__"].update(layout="pp=2 tp=1 chunks=1"))
    resume_refused("model file of another layout", d, ["model.safetensors", "layout"])
    d = fresh()
    st_rewrite(os.path.join(d, "model.safetensors"), lambda h: h["__metadata__"].pop("step"))
    resume_refused("model file without its step", d, ["model.safetensors", "step"])
    d = fresh()
    shutil.copy(os.path.join(ck("runA", 4), "model.safetensors"), os.path.join(d, "model.safetensors"))
    rd = os.path.join(WORK, "if%d" % n[0])
    refused("init_from: model file of step 4 in step 2's folder",
            train_args(rd, extra=["--set", "train.init_from=" + d]), ["model.safetensors", "step"], own=[rd])
    # 2. state.json: every value checked for type, range and consistency
    state_cases = [
        ("optimizer_step", -5), ("optimizer_step", 1e300), ("optimizer_step", 3), ("optimizer_step", "2"),
        ("step", 1e300), ("step", -100), ("step", 1.5), ("step", "2"), ("step", None), ("step", 9007199254740993),
        ("step", 1000), ("seed", "-1"), ("seed", "7 "), ("seed", 7), ("seed", "99999999999999999999999"),
        ("data_seed", "0x3"), ("recipe_hash", "zz"), ("recipe_hash", "-1"), ("run", None), ("run", "12345"),
        ("layout", "pp=0 tp=1 chunks=1"), ("layout", "pp=1 tp=1 chunks=1 x"), ("layout", 5), ("version", 2),
        ("layout", "pp=99999999999 tp=1 chunks=1"), ("layout", "pp=65536 tp=65536 chunks=65536"),
        ("layout", "pp=2 tp=1 chunks=1"),
        ("version", 1e300), ("files", ["../runB/checkpoints/step-00000002/model.safetensors", "optimizer.safetensors"]),
        ("files", ["model.safetensors", "model.safetensors", "optimizer.safetensors"]),
        ("files", ["model.safetensors"]), ("files", "model.safetensors"), ("files", [5, "optimizer.safetensors"]),
        ("files", ["/etc/passwd", "optimizer.safetensors"]), ("loader", 5), ("loader", {"synthetic_step": 1e300}),
        ("loader", {"synthetic_step": 3}), ("loader", {"synthetic_step": -1}), ("loader", None)]
    for key, v in state_cases:
        d = fresh()
        p = os.path.join(d, "state.json")
        if key == "step" and v == 1000:  # consistent in itself (files, loader), past train.steps
            json_edit(p, lambda j: j.update(step=1000, optimizer_step=1000, loader={"synthetic_step": 1000}))
            for f in ["model.safetensors", "optimizer.safetensors"]:
                st_rewrite(os.path.join(d, f), lambda h: h["__metadata__"].update(step="1000"))
            must = ["state.json", "train.steps"]
        elif v is None and key != "loader":  # the key left out
            json_edit(p, lambda j: j.pop(key))
            must = ["state.json", key]
        else:
            json_edit(p, lambda j: j.update({key: v}))
            # a loader position of the wrong shape is the source's to refuse ("loader position ...")
            must = ["state.json", key] if key != "loader" or v == 5 else ["loader position"]
        recipe = key in ("loader", "seed", "data_seed", "recipe_hash") or v == 1000  # checked against the recipe
        resume_refused("state.json %s = %s" % (key, json.dumps(v)[:50]), d, must, evaluate=not recipe,
                       train=recipe or (key, v) in (("optimizer_step", -5), ("step", 1e300), ("step", -100)))
    d = fresh()
    os.remove(os.path.join(d, "state.json"))
    os.symlink("/dev/zero", os.path.join(d, "state.json"))
    resume_refused("state.json is /dev/zero", d, ["state.json", "a device"])
    # a forged list of 200,000 files (a layout of 100,000 shards), one listed twice: refused in n log n
    d = fresh()
    many = ["%s.s%d.safetensors" % (b, i) for b in ("model", "optimizer") for i in range(100000)]
    many[-1] = many[-2]
    json_edit(os.path.join(d, "state.json"), lambda j: j.update(layout="pp=1000 tp=100 chunks=1", files=many))
    resume_refused("state.json files: 200,000 names, one twice", d, ["state.json", "twice"], train=False)
    for f in ["model.safetensors", "optimizer.safetensors"]:
        d = fresh()
        os.remove(os.path.join(d, f))
        os.symlink("/dev/zero", os.path.join(d, f))
        resume_refused("%s is /dev/zero" % f, d, [f, "not a regular file"], evaluate=f.startswith("model"))
    refused("tensors ls /dev/zero", [EXE, "tensors", "ls", "/dev/zero"], ["/dev/zero", "not a regular file"])
    d = fresh()
    os.truncate(os.path.join(d, "state.json"), 100 << 20)  # sparse: 100 MiB that take no disk
    resume_refused("state.json of 100 MiB", d, ["state.json", "limit"])
    # 3. tensors of 5, 6, 8 and 9 dimensions (the format allows 8, this model's tensors have <= 4)
    for shape in [[64, 1, 1, 1, 1], [8, 8, 1, 1, 1, 1], [64, 1, 1, 1, 1, 1, 1, 1], [64] + [1] * 8]:
        for f, t in [("model.safetensors", "text.norm.weight"), ("optimizer.safetensors", "v.text.norm.weight")]:
            d = fresh()
            st_rewrite(os.path.join(d, f), lambda h: h[t].update(shape=shape))
            resume_refused("%s '%s' of %d dimensions" % (f, t, len(shape)), d, [f, t],
                           evaluate=f.startswith("model"), train=len(shape) == 6 or not f.startswith("model"))
        if len(shape) <= 8:
            works("tensors ls: a %d-dim tensor is listed" % len(shape), [EXE, "tensors", "ls", d],
                  "[" + ", ".join(str(s) for s in shape) + "]")
            refused("tensors diff: a %d-dim tensor against the 1-dim one" % len(shape),
                    [EXE, "tensors", "diff", d, ck("runA", 2)], ["v.text.norm.weight"])
        rd = os.path.join(WORK, "if%d" % n[0])
        rc, out, err = run(train_args(rd, extra=["--set", "train.init_from=" + d]))
        note(not [s for s in SAN if s in err] and (rc == 0 or (1 <= rc <= 125 and "text.norm.weight" in err)),
             "init_from a %d-dim tensor: exit %d: %s" % (len(shape), rc, err[-300:]))
    # 4. slice descriptions that claim more than the file holds, or cannot be parsed
    slices = ["dim=1;shape=4,4000000000000;ranges=0:2", "dim=1;shape=4,4,4,4,2;ranges=0:2",
              "dim=0;shape=-4,2;ranges=0:4", "dim=0;shape=99999999999999999999,2;ranges=0:4",
              "dim=0;shape=4,2;ranges=9223372036854775807:9223372036854775807", "dim=7;shape=4,2;ranges=0:4",
              "dim=0;shape=4611686018427387904,4;ranges=0:4", "dim=0;shape=4,2;ranges=0:4,0:4,0:4,0:4",
              "dim=-1;shape=4,2;ranges=0:4", "dim=0;shape=4,2;ranges=2:-1", "dim=0;shape=4,2", ""]
    for sl in slices:
        p = os.path.join(WORK, "slice.safetensors")
        open(p, "wb").write(st_bytes([("w", "F32", (4, 2), f32([1] * 8))], {"slice.w": sl}))
        refused("tensors ls: slice.w = %r" % sl[:40], [EXE, "tensors", "ls", p], ["slice.safetensors", "w", "slice"])
    d = fresh()
    st_rewrite(os.path.join(d, "model.safetensors"),
               lambda h: h["__metadata__"].update({"slice.text.norm.weight": "dim=0;shape=4000000000000;ranges=0:64"}))
    resume_refused("a forged slice description in the model file", d, ["model.safetensors", "text.norm.weight"])
    # 5. init_from: values are checked as a resume checks them, naming the tensor
    d = os.path.join(WORK, "nan_ckpt")
    os.makedirs(d)
    hdr, data = st_read(os.path.join(ck("runA", 2), "model.safetensors"))
    b, e = hdr["text.norm.weight"]["data_offsets"]
    data = data[:b] + f32([float("nan")]) + data[b + 4:]
    tensors = [(k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
               for k, v in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0] if kv[0] != "__metadata__" else -1)
               if k != "__metadata__"]
    open(os.path.join(d, "model.safetensors"), "wb").write(st_bytes(tensors))
    json.dump({"format": "rrfp-mm-checkpoint", "files": ["model.safetensors"]}, open(os.path.join(d, "state.json"), "w"))
    rd = os.path.join(WORK, "if_nan")
    refused("init_from: a NaN weight (another tool's folder, no checksums)",
            train_args(rd, extra=["--set", "train.init_from=" + d]), ["model.safetensors", "text.norm.weight", "NaN"],
            own=[rd])


def cap_cases():
    os.symlink("/dev/zero", os.path.join(WORK, "zero.json"))
    os.makedirs(os.path.join(WORK, "zero_hf"))
    os.symlink("/dev/zero", os.path.join(WORK, "zero_hf", "config.json"))
    big = os.path.join(WORK, "big.ini")
    open(big, "w").write("[train]\nsteps = 4\n")
    os.truncate(big, 5 << 20)
    refused("train /dev/zero --dry-run", [EXE, "train", "/dev/zero", "--dry-run"], ["/dev/zero", "a device", "recipe"])
    refused("train: a 5 MiB recipe", [EXE, "train", big, "--dry-run"], ["big.ini", "limit"])
    refused("sim --durations /dev/zero", [EXE, "sim", "--durations", "/dev/zero"], ["/dev/zero", "a device"])
    # the caps through sparse files, which take no disk and no time (a device such as /dev/zero is refused
    # unread: read up to its cap it would cost 16 GiB as a manifest)
    huge = os.path.join(WORK, "huge.json")
    open(huge, "w").write("{}")
    os.truncate(huge, 5 << 30)
    refused("trace of a 5 GiB file", [EXE, "trace", "huge.json", "--svg", "t.svg"], ["huge.json", "limit"],
            outs=["t.svg"])
    refused("sim: a 5 GiB duration file", [EXE, "sim", "--durations", "huge.json"], ["huge.json", "limit"])
    refused("tokenizer info of /dev/zero", [EXE, "tokenizer", "info", "--tokenizer", "/dev/zero"],
            ["/dev/zero", "a device"])
    # trace spans whose microbatch or chunk would size --durations' tables (or overflow "mb + 1")
    for key, v in [("mb", 2147483647), ("mb", 1e300), ("mb", -1), ("mb", 1.5), ("mb", "3"), ("chunk", 1e300),
                   ("chunk", -1), ("chunk", 2147483647)]:
        ev = [{"ph": "X", "cat": k, "pid": 0, "ts": i, "dur": 1, "args": {"mb": 0}} for i, k in enumerate("FB")]
        ev[1]["args"][key] = v
        json.dump({"traceEvents": ev}, open(os.path.join(WORK, "tr.json"), "w"))
        refused("trace --durations: args.%s = %s" % (key, json.dumps(v)),
                [EXE, "trace", "tr.json", "--durations", "d.json"], ["tr.json", "traceEvents[1]", key], outs=["d.json"])
    # tokenizer.json: an added token's id far past the vocabulary must not size the id tables (2^28 x 12
    # bytes): it gets the next id, as Hugging Face gives it, with a warning (the right answer); out of
    # range, it is refused
    tok = os.path.join(WORK, "tok.json")
    rc, out, err = run([EXE, "tokenizer", "train", "--vocab", "300", "--manifest",
                        os.path.join(SRC, "tests", "support", "fixtures", "tokenizer_manifest.json"), "--out", tok])
    note(rc == 0, "tokenizer train for the tokenizer cases: %s" % err[-300:])
    for bad_id in [268435455, 100000, 2 ** 31, -1]:
        j = json.load(open(tok))
        j["added_tokens"].append(dict(j["added_tokens"][0], id=bad_id, content="<x%s>" % bad_id))
        json.dump(j, open(os.path.join(WORK, "tok_bad.json"), "w"))
        name = "tokenizer: added token id %s" % bad_id
        if bad_id < 0 or bad_id >= 2 ** 28:
            refused(name, [EXE, "tokenizer", "info", "--tokenizer", "tok_bad.json"], ["tok_bad.json", "added_tokens"])
        else:
            rc, out, err = run([EXE, "tokenizer", "info", "--tokenizer", "tok_bad.json"])
            note(rc == 0 and "gets id 285" in err and not [x for x in SAN if x in err],
                 "%s: exit %d, expected 0 with the id reassigned: %s" % (name, rc, err[-300:]))
    # the dry run takes the vocabulary from the tokenizer as training does (was: the largest id + 1, with
    # no check: 2^31 - 1 overflowed to a garbage message)
    llava = os.path.join(SRC, "recipes", "llava.ini")
    for bad_id, ok in [(2 ** 31 - 1, False), (268435455, True)]:
        j = json.load(open(tok))
        j["added_tokens"].append(dict(j["added_tokens"][0], id=bad_id, content="<y>"))
        json.dump(j, open(os.path.join(WORK, "tok_dry.json"), "w"))
        args = [EXE, "train", llava, "--set", "data.tokenizer=" + os.path.join(WORK, "tok_dry.json"), "--dry-run"]
        if ok:
            works("train --dry-run: an added token id %d gets the next id" % bad_id, args, "V 286")
        else:
            refused("train --dry-run: an added token id %d" % bad_id, args, ["tok_dry.json", "added_tokens"])
    rd = os.path.join(WORK, "run_zero")
    os.makedirs(rd)
    os.symlink(huge, os.path.join(rd, "metrics.jsonl"))
    refused("report: metrics.jsonl of 5 GiB", [EXE, "report", rd, "--out", "rep.html"], ["metrics.jsonl", "limit"],
            outs=["rep.html"])
    rz = os.path.join(WORK, "run_zero_recipe")
    os.makedirs(rz)
    open(os.path.join(rz, "metrics.jsonl"), "w").write('{"step":1,"loss":4.0,"lr":0.001,"grad_norm":1.0}\n')
    os.symlink("/dev/zero", os.path.join(rz, "recipe.ini"))
    # the report draws what it can and warns about a damaged part (its contract): the right answer here
    rc, out, err = run([EXE, "report", rz, "--out", "rep.html"])
    note(rc == 0 and "recipe.ini" in err and "a device" in err and not [x for x in SAN if x in err],
         "report: recipe.ini is /dev/zero: exit %d, expected 0 with a warning naming it: %s" % (rc, err[-300:]))
    rr = os.path.join(WORK, "run_zero_resume")
    rc, out, err = run(train_args(rr))
    note(rc == 0, "training run_zero_resume: %s" % err[-300:])
    os.remove(os.path.join(rr, "metrics.jsonl"))
    os.symlink(huge, os.path.join(rr, "metrics.jsonl"))
    refused("resume: metrics.jsonl of 5 GiB", train_args(rr, extra=["--set", "checkpoint.resume=latest"]),
            ["metrics.jsonl", "limit"], own=[os.path.join(rr, "checkpoints"), os.path.join(rr, ".lock"),
                                            os.path.join(rr, "recipe.ini")])
    refused("pack: tokenizer /dev/zero", [EXE, "pack", "--manifest", "huge.json", "--images", WORK, "--tokenizer",
            "/dev/zero", "--out", "packed"], ["/dev/zero", "a device"], outs=["packed"])



# ---- import llava / import clip / export hf (the same rules for the LLaVA and CLIP importers) ---

DV, LV, HV, PV, IMG = 8, 2, 2, 2, 4  # a CLIP tower of 2 blocks, 2 x 2 patches of 2 x 2 pixels
VT = 16                              # the LM above: D 8, L 1, H 2, F 12, vocab 16


def llava_config(vision=None, text=None, **top):
    vc = {"model_type": "clip_vision_model", "hidden_size": DV, "intermediate_size": 4 * DV, "num_hidden_layers": LV,
          "num_attention_heads": HV, "image_size": IMG, "patch_size": PV, "hidden_act": "quick_gelu",
          "layer_norm_eps": 1e-5}
    vc.update(vision or {})
    tc = llama_config()
    tc.update(text or {})
    c = {"model_type": "llava", "image_token_index": 3, "projector_hidden_act": "gelu", "vision_feature_layer": -2,
         "vision_feature_select_strategy": "default", "vision_config": vc, "text_config": tc}
    c.update(top)
    return c


def clip_config(**over):
    c = dict(llava_config()["vision_config"])
    c.update(over)
    return c


def vision_shapes(prefix):
    G = IMG // PV
    out = [(prefix + "embeddings.patch_embedding.weight", (DV, 3, PV, PV)),
           (prefix + "embeddings.class_embedding", (DV,)),
           (prefix + "embeddings.position_embedding.weight", (1 + G * G, DV)),
           (prefix + "pre_layrnorm.weight", (DV,)), (prefix + "pre_layrnorm.bias", (DV,))]
    for l in range(LV):
        q = prefix + "encoder.layers.%d." % l
        for n in ["layer_norm1", "layer_norm2"]:
            out += [(q + n + ".weight", (DV,)), (q + n + ".bias", (DV,))]
        for n in ["q_proj", "k_proj", "v_proj", "out_proj"]:
            out += [(q + "self_attn.%s.weight" % n, (DV, DV)), (q + "self_attn.%s.bias" % n, (DV,))]
        out += [(q + "mlp.fc1.weight", (4 * DV, DV)), (q + "mlp.fc1.bias", (4 * DV,)),
                (q + "mlp.fc2.weight", (DV, 4 * DV)), (q + "mlp.fc2.bias", (DV,))]
    return out


def llava_tensors(llava=True, nan_in=None, drop=None, shape_of=None):
    """The hub's llava-hf naming (or CLIPVisionModel's vision_model.*); shape_of = (name, shape): that
    tensor's shape rewritten, same bytes."""
    shapes = vision_shapes("vision_tower.vision_model." if llava else "vision_model.")
    if llava:
        shapes += [("multi_modal_projector.linear_1.weight", (D, DV)), ("multi_modal_projector.linear_1.bias", (D,)),
                   ("multi_modal_projector.linear_2.weight", (D, D)), ("multi_modal_projector.linear_2.bias", (D,))]
        for n, dt, s, raw in llama_tensors():
            shapes.append(("language_model." + n, s))
    out = []
    for i, (n, s) in enumerate(shapes):
        if n == drop:
            continue
        k = 1
        for x in s:
            k *= x
        vals = [((i * 5 + j * 3) % 13 - 6) * 0.01 for j in range(k)]
        if n == nan_in:
            vals[k // 2] = float("nan")
        if shape_of and shape_of[0] == n:
            s = shape_of[1]
        out.append((n, "F32", s, f32(vals)))
    return out


def llava_cases():
    hf, cf = os.path.join(WORK, "lhf"), os.path.join(WORK, "chf")
    make_hf(hf, llava_config(), tensors=llava_tensors())
    works("import llava: the valid fixture imports", [EXE, "import", "llava", "--hf", hf, "--out", "imp/llava_ok"],
          "imported")
    make_hf(cf, clip_config(), tensors=llava_tensors(llava=False))
    works("import clip: the valid fixture imports", [EXE, "import", "clip", "--hf", cf, "--out", "imp/clip_ok"],
          "imported")
    imp = lambda kind, d: [EXE, "import", kind, "--hf", d, "--out", "imp/o"]
    values = [477218589, 2147483647, 2147483648, 4294967297, 9007199254740993, 1e300, -1, 0, 1.5, "8", True, [8],
              {"x": 8}]
    # 1. every vision_config number that sizes something (import llava and import clip), every text_config one
    for k in ["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "image_size",
              "patch_size", "num_channels"]:
        for v in values:
            make_hf(hf, llava_config(vision={k: v}), tensors=llava_tensors())
            refused("import llava: vision_config %s = %s" % (k, json.dumps(v)), imp("llava", hf),
                    ["config.json", "vision_config", k], outs=["imp/o"])
            make_hf(cf, clip_config(**{k: v}), tensors=llava_tensors(llava=False))
            refused("import clip: %s = %s" % (k, json.dumps(v)), imp("clip", cf), ["config.json", k], outs=["imp/o"])
    for k in ["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"]:
        for v in values + [None]:
            make_hf(hf, llava_config(text={k: v}), tensors=llava_tensors())
            refused("import llava: text_config %s = %s" % (k, json.dumps(v)), imp("llava", hf),
                    ["config.json", "text_config", k], outs=["imp/o"])
    # an old llava-hf config keeps vocab_size at the top
    c = llava_config(vocab_size=2147483647)
    del c["text_config"]["vocab_size"]
    make_hf(hf, c, tensors=llava_tensors())
    refused("import llava: top-level vocab_size 2147483647", imp("llava", hf), ["config.json", "vocab_size"],
            outs=["imp/o"])
    for k, vs in [("vision_feature_layer", [1e300, 2147483648, -2147483649, 1.5, "-2", 3, -4, 0, [-2]]),
                  ("image_token_index", [1e300, -1, VT, 2147483648, 1.5, "3", [3]]),
                  ("image_token_id", [VT, 1e300]),
                  ("vision_config", [5, "clip", [1]]), ("text_config", [5, "llama", [1]])]:
        for v in vs:
            c = llava_config(**{k: v})
            if k == "image_token_id":
                del c["image_token_index"]
            make_hf(hf, c, tensors=llava_tensors())
            refused("import llava: %s = %s" % (k, json.dumps(v)), imp("llava", hf), ["config.json", k], outs=["imp/o"])
    make_hf(cf, {"model_type": "clip", "vision_config": 5}, tensors=llava_tensors(llava=False))
    refused("import clip: a CLIPModel's vision_config = 5", imp("clip", cf), ["config.json", "vision_config"],
            outs=["imp/o"])
    # 2. sizes within the model's limits but not the tensors': the buffers come from the file's checked shapes
    for vis, txt, tensor in [({"hidden_size": 65536, "num_attention_heads": 1024, "intermediate_size": 262144}, {},
                              "patch_embedding"),
                             ({"num_hidden_layers": 1024}, {}, "encoder.layers.2."),
                             ({"image_size": 65536}, {}, "position_embedding"),
                             ({}, {"vocab_size": 16777216, "hidden_size": 65536, "num_attention_heads": 1024,
                                   "num_key_value_heads": 1024}, "linear_1"),
                             ({}, {"num_hidden_layers": 1024}, "model.layers.1.")]:
        make_hf(hf, llava_config(vision=vis, text=txt), tensors=llava_tensors())
        refused("import llava: config %s %s against small tensors" % (vis, txt), imp("llava", hf), [tensor],
                outs=["imp/o"])
    # 3. the index: every kind of weight_map value (the message once read the freed JSON), counts
    good = {"weight_map": {n: "model-00001-of-00001.safetensors" for n, _, _, _ in llava_tensors()}}
    make_hf(hf, llava_config(), tensors=llava_tensors(), index=good)
    works("import llava: a valid index imports", [EXE, "import", "llava", "--hf", hf, "--out", "imp/llava_index"])
    first = "vision_tower.vision_model.embeddings.class_embedding"
    for v in [5, -1, 1e300, None, True, [], ["model.safetensors"], {}, "", ".", "..", "../lhf/model.safetensors",
              "/etc/passwd", "sub/x.safetensors", ".hidden", "x" * 300]:
        idx = json.loads(json.dumps(good))
        idx["weight_map"][first] = v
        make_hf(hf, llava_config(), tensors=llava_tensors(), index=idx)
        refused("import llava: index weight_map value %s" % json.dumps(v)[:40], imp("llava", hf),
                ["model.safetensors.index.json", "weight_map", first], outs=["imp/o"])
    for raw in ["[]", "{", '{"weight_map": 5}', '{"weight_map": {"x": 5}}', '{"weight_map": []}', '{"weight_map": {}}',
                json.dumps({"weight_map": {"t%d" % i: "model-00001-of-00001.safetensors" for i in range(200000)}}),
                json.dumps({"weight_map": {"t%d" % i: "f%d.safetensors" % i for i in range(100000)}})]:
        make_hf(cf, clip_config(), tensors=llava_tensors(llava=False), raw_index=raw)
        refused("import clip: index %s" % raw[:30], imp("clip", cf), ["model.safetensors.index.json"], outs=["imp/o"],
                timeout=30)
    # 4. NaN and infinite weights, each kind of tensor (the fused q / k / v, the patch conv, projector, LM)
    for name in ["vision_tower.vision_model.encoder.layers.0.self_attn.k_proj.weight",
                 "vision_tower.vision_model.encoder.layers.1.self_attn.q_proj.bias",
                 "vision_tower.vision_model.embeddings.patch_embedding.weight",
                 "multi_modal_projector.linear_2.weight", "language_model.model.layers.0.mlp.up_proj.weight"]:
        make_hf(hf, llava_config(), tensors=llava_tensors(nan_in=name))
        refused("import llava: a NaN in %s" % name, imp("llava", hf), [name, "NaN"], outs=["imp/o"])
    make_hf(cf, clip_config(), tensors=llava_tensors(llava=False, nan_in="vision_model.encoder.layers.1.mlp.fc2.bias"))
    refused("import clip: a NaN weight", imp("clip", cf), ["vision_model.encoder.layers.1.mlp.fc2.bias", "NaN"],
            outs=["imp/o"])
    # 5. tensors of 5..9 dimensions (same bytes)
    for name, shape in [("vision_tower.vision_model.embeddings.patch_embedding.weight", (DV, 3, PV, PV, 1)),
                        ("vision_tower.vision_model.encoder.layers.0.self_attn.v_proj.weight", (DV, DV, 1, 1, 1)),
                        ("multi_modal_projector.linear_1.bias", (D, 1, 1, 1, 1, 1, 1, 1)),
                        ("language_model.lm_head.weight", (VT, D, 1, 1, 1, 1))]:
        make_hf(hf, llava_config(), tensors=llava_tensors(shape_of=(name, shape)))
        refused("import llava: %s of %d dims" % (name, len(shape)), imp("llava", hf), [name, "shape"], outs=["imp/o"])
    # 6. files that are not files: a FIFO with no writer (was: waited forever), /dev/zero
    for what in ["config.json", "model.safetensors", "model.safetensors.index.json"]:
        for kind in ["fifo", "zero"]:
            make_hf(hf, llava_config(), tensors=llava_tensors())
            p = os.path.join(hf, what)
            if os.path.exists(p):
                os.remove(p)
            if kind == "fifo":
                os.mkfifo(p)
            else:
                os.symlink("/dev/zero", p)
            refused("import llava: %s is %s" % (what, "a FIFO" if kind == "fifo" else "/dev/zero"), imp("llava", hf),
                    [what], outs=["imp/o"], timeout=30)
            os.remove(p)
    # 7. --out: quotes and spaces (a failing import removes only what it made, parents included), existing
    #    paths, links, a trailing '/', inside --hf
    make_hf(hf, llava_config(), tensors=llava_tensors(drop="language_model.lm_head.weight"))
    keep = os.path.join(WORK, "keep")
    for out in [WORK + "/keep' '" + WORK + "/lo", WORK + "/x'; touch " + WORK + "/PWNED; echo '",
                WORK + "/$(touch " + WORK + "/PWNED)", WORK + '/la" "b', WORK + "/new one/new 'two'/o",
                WORK + "/keep/../lo2", WORK + "/-rf"]:
        refused("import llava: --out %r (failing import)" % out[len(WORK):],
                [EXE, "import", "llava", "--hf", hf, "--out", out], ["lm_head.weight"], outs=[out],
                own=[WORK + "/new one"])
        note(not os.path.exists(WORK + "/new one"), "import llava --out %r left the parents it made" % out)
        note(not os.path.exists(WORK + "/PWNED"), "import llava --out %r ran a command" % out)
        note(open(os.path.join(keep, "precious.txt")).read() == "must survive\n", "keep/ damaged by %r" % out)
    make_hf(hf, llava_config(), tensors=llava_tensors())
    os.symlink(os.path.join(WORK, "nowhere"), os.path.join(WORK, "dangling"))
    for out, must in [(keep, "already exists"), ("dangling", "already exists"), ("imp/new/", "trailing"),
                      (os.path.join(hf, "inside"), "inside"), (hf + "/../lhf/x", "inside"),
                      ("imp/nope/../o", "'..'")]:
        refused("import llava: --out %s" % out.replace(WORK, "WORK"), [EXE, "import", "llava", "--hf", hf, "--out", out],
                [must], outs=[] if out in (keep, "dangling") else [out.rstrip("/")])
    # 8. export hf: a CLIP-tower run of 2 steps to export
    rd = os.path.join(WORK, "xrun")
    clip = ["--set", "model.vision_arch=clip", "--set", "model.vision_image_size=16", "--set", "model.vision_layers=2"]
    rc, out, err = run(train_args(rd, steps=2, extra=clip))
    note(rc == 0, "training a CLIP-tower run for the export cases: %s" % err[-300:])
    ck = os.path.join(rd, "checkpoints", "step-00000002")
    exp = lambda c, o, *more: [EXE, "export", "hf", "--checkpoint", c, "--out", o, "--image-token-id", "1"] + list(more)
    works("export hf: the run's checkpoint exports", exp(ck, "xout/ok"), "exported")
    n = [0]

    def xfresh():
        n[0] += 1
        d = os.path.join(rd, "checkpoints", "step-x%d" % n[0])  # beside the real one: ../../recipe.ini is the run's
        shutil.copytree(ck, d)
        return d

    d = xfresh()
    st_rewrite(os.path.join(d, "model.safetensors"), lambda h: h["text.norm.weight"].update(shape=[64, 1, 1, 1, 1]))
    refused("export hf: a 5-dim tensor", exp(d, "xout/o"), ["text.norm.weight", "(64, 1, 1, 1, 1)"], outs=["xout/o"])
    d = xfresh()
    p = os.path.join(d, "model.safetensors")
    (hn,) = struct.unpack("<Q", open(p, "rb").read(8))
    hdr, data = st_read(p)
    with open(p, "r+b") as f:  # in place: the file's checksum no longer matches either
        f.seek(8 + hn + hdr["vision.blocks.0.attn.qkv.weight"]["data_offsets"][0])
        f.write(f32([float("nan")]))
    refused("export hf: a NaN weight", exp(d, "xout/o"), ["model.safetensors", "vision.blocks.0.attn.qkv.weight"],
            outs=["xout/o"])
    nan_ck = d
    for kind in ["fifo", "zero"]:
        d = xfresh()
        os.remove(os.path.join(d, "model.safetensors"))
        if kind == "fifo":
            os.mkfifo(os.path.join(d, "model.safetensors"))
        else:
            os.symlink("/dev/zero", os.path.join(d, "model.safetensors"))
        refused("export hf: model.safetensors is %s" % kind, exp(d, "xout/o"), ["model.safetensors"], outs=["xout/o"],
                timeout=30)
    # the recipe of a far larger model: refused before the model is allocated from it
    big = os.path.join(WORK, "big_clip.ini")
    text = open(os.path.join(rd, "recipe.ini")).read()
    for k, v in [("text_width", 65536), ("text_heads", 1024), ("ffn_hidden", 1048576), ("text_layers", 1024),
                 ("vocab", 16777216)]:
        text, k_n = re.subn(r"(?m)^%s\s*=.*$" % k, "%s = %d" % (k, v), text)
        note(k_n == 1, "big_clip.ini: model.%s not set once in the run's recipe.ini" % k)
    open(big, "w").write(text)
    refused("export hf: the recipe of a 2^40-parameter model", exp(ck, "xout/o", "--recipe", big),
            ["big_clip.ini", "parameters"], outs=["xout/o"], timeout=60)
    for out, must in [(os.path.join(ck, "hf"), "inside"), (ck + "/../step-00000002/x", "inside"),
                      ("xout/ok", "already exists"), ("dangling", "already exists"), ("xout/new/", "trailing")]:
        refused("export hf: --out %s" % out.replace(WORK, "WORK"), exp(ck, out), [must],
                outs=[] if must == "already exists" else [out.rstrip("/")])
    # a failing export into paths with quotes and spaces removes only what it made
    for out in [WORK + "/keep' '" + WORK + "/xo", WORK + "/x2'; touch " + WORK + "/PWNED; echo '",
                WORK + "/xnew one/two/o"]:
        refused("export hf: --out %r (failing export)" % out[len(WORK):], exp(nan_ck, out),
                ["vision.blocks.0.attn.qkv.weight"],
                outs=[out], own=[WORK + "/xnew one"])
        note(not os.path.exists(WORK + "/xnew one"), "export --out %r left the parents it made" % out)
        note(not os.path.exists(WORK + "/PWNED"), "export --out %r ran a command" % out)
    # tokenizer files that are not files
    fifo = os.path.join(WORK, "tok_fifo.json")
    os.mkfifo(fifo)
    refused("export hf: --tokenizer a FIFO", exp(ck, "xout/o", "--tokenizer", fifo), ["tok_fifo.json"],
            outs=["xout/o"], timeout=30)
    refused("export hf: --tokenizer /dev/zero", exp(ck, "xout/o", "--tokenizer", "/dev/zero"), ["/dev/zero"],
            outs=["xout/o"], timeout=30)
    refused("export hf: --image-token-id past the vocabulary",
            [EXE, "export", "hf", "--checkpoint", ck, "--out", "xout/o", "--image-token-id", "64"],
            ["image_token_index", "vocab"], outs=["xout/o"])


def pp_cases():
    """A pipeline checkpoint (mpirun -np 2, pp 2): one pp shard of another step is refused by name."""
    mpi = shutil.which("mpirun")
    if not mpi:
        print("SKIP: no mpirun")
        sys.exit(77)
    base = [mpi, "--allow-run-as-root", "--oversubscribe", "-np", "2"]
    for kind, setting, shard in [("pp", "parallel.pp=2", ".pp1"), ("tp", "parallel.tp=2", "tp1")]:
        rd = os.path.join(WORK, kind)
        rc, out, err = run(base + train_args(rd, extra=["--set", setting]), timeout=300)
        note(rc == 0, "%s 2 training for the shard case: %s" % (kind, err[-400:]))
        ck = os.path.join(rd, "checkpoints")
        files = sorted(f for f in os.listdir(os.path.join(ck, "step-00000002")) if f.endswith(".safetensors"))
        note(len(files) == 4, "%s 2 checkpoint files: %s" % (kind, files))
        for f in [x for x in files if shard in x]:
            d = os.path.join(WORK, kind + "_mixed_" + f)
            shutil.copytree(os.path.join(ck, "step-00000002"), d)
            shutil.copy(os.path.join(ck, "step-00000004", f), os.path.join(d, f))
            rr = os.path.join(WORK, kind + "_rr_" + f)
            refused("%s 2 resume: %s of step 4 in step 2's folder" % (kind, f),
                    base + train_args(rr, extra=["--set", setting, "--set", "checkpoint.resume=" + d]),
                    [f, "step"], own=[rr], timeout=300)
            refused("one process resume of that %s 2 folder" % kind,
                    train_args(rr + "_1", extra=["--set", "checkpoint.resume=" + d]), [f, "step"], own=[rr + "_1"])
        # the same step's shards swapped: each file says which shard it is
        d = os.path.join(WORK, kind + "_swapped")
        shutil.copytree(os.path.join(ck, "step-00000002"), d)
        a, b = [x for x in files if x.startswith("model.")]
        shutil.copy(os.path.join(ck, "step-00000002", a), os.path.join(d, b))
        refused("%s 2 folder with %s copied over %s" % (kind, a, b), [EXE, "eval", RECIPE, "--checkpoint", d,
                "--samples", "2"], [b, "shard"])


def main():
    if os.path.exists(WORK):
        shutil.rmtree(WORK)
    os.makedirs(WORK)
    os.makedirs(os.path.join(WORK, "imp"))
    os.makedirs(os.path.join(WORK, "keep"))
    open(os.path.join(WORK, "keep", "precious.txt"), "w").write("must survive\n")
    import time
    if PART == "pp":
        pp_cases()
    elif PART == "llava":
        t0 = time.time()
        llava_cases()
        print("llava_cases: %.1f s" % (time.time() - t0))
    else:
        for part in [cap_cases, import_cases, checkpoint_cases]:
            t0 = time.time()
            part()
            print("%s: %.1f s" % (part.__name__, time.time() - t0))
    print("hostile inputs (%s): %d checks, %d failed" % (PART, COUNT[0], len(FAILED)))
    sys.exit(1 if FAILED else 0)


main()
