#!/usr/bin/env python3
"""hostile_shapes.py — inputs of the wrong shape through the real CLI (docs/reliability.md "What is checked").

The fuzzers feed bytes to the readers; this feeds paths that are not files to every command that reads one,
and outputs that fail while they are written:
  - every input slot (a recipe, a duration file, a trace, a tokenizer, a manifest, a shard, a safetensors
    file, a checkpoint folder and its state.json / model file, an image, a run folder, a Hugging Face
    folder) given a directory, an unreadable file (a few), a FIFO with no writer (opening one blocks: it must not hang, and a training
    job catches SIGTERM, so a hang is killed with SIGKILL after the timeout and fails), /dev/zero and
    /dev/urandom (endless: refused unread), a symbolic link loop, an empty file and a missing path;
  - files cut at every section boundary (safetensors: inside the length, after it, inside the header, after
    it, inside the data; a shard: inside its header, frames, index and trailer; a duration file every 9
    bytes; state.json);
  - size fields of 2^63-1, 2^64-1, -1, 1e999 (infinity) and 1.5 in a safetensors header, a duration file,
    config.json, tokenizer.json and state.json;
  - JSON files with a second value, garbage or a NUL byte after their one value (was: read in part);
  - duration files written as another generator would from docs/scheduler.md "The simulator's
    semantics" alone (keys in another order, integers, exponents, unknown keys, W absent / null / present,
    CRLF and tabs, a UTF-8 byte-order mark: accepted with the same answer), and what it refuses (a key
    twice, "w" for "W", a NUL byte, trailing text);
  - outputs: --out equal to an input, inside an input folder, under a missing parent, /dev/full, and a write
    that fails half-way (RLIMIT_FSIZE: the disk-full-like EFBIG on the second block).
Each refusal: exit 1..125, the path (or the field) named on stderr, no sanitizer report, nothing under WORK
changed outside the command's own outputs, no output or temporary X.tmp.* left.

Usage: hostile_shapes.py RRFP_MM SRC_DIR WORK_DIR   (exit 0 = every check passed)"""
import ctypes
import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys

EXE, SRC, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
RECIPE = os.path.join(SRC, "recipes", "test-synthetic.ini")
# the checkpoint's model: a CLIP tower, which export hf writes (rrfp-mm's own rope2d tower has no HF class)
# trained on the demo data's shards with its tokenizer (generate needs a tokenizer), held-out shards for eval
CLIP_RECIPE = [RECIPE, "--set", "model.vision_arch=clip", "--set", "model.vision_feature_layer=-1",
               "--set", "data.source=shards", "--set", "data.shards=" + os.path.join(WORK, "shards"),
               "--set", "data.tokenizer=" + os.path.join(WORK, "tok.json"), "--set", "model.vocab=0",
               "--set", "data.eval_shards=" + os.path.join(WORK, "eval_shards")]
sys.path.insert(0, os.path.join(SRC, "tests", "support", "util"))
from hostile_lib import COUNT, FAILED, SAN, note  # noqa: E402
import hostile_lib  # noqa: E402


def fsize_limit(n):
    """preexec: files may grow to n bytes (a write past it fails with EFBIG, SIGXFSZ ignored)."""
    def f():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
    return f


def run(args, timeout=60, preexec=None):
    try:
        # a timeout kills with SIGKILL: training catches SIGTERM, so a hung open() would outlive SIGTERM
        p = subprocess.run(args, capture_output=True, timeout=timeout, env=hostile_lib.sanitizer_env(SRC), cwd=WORK,
                           preexec_fn=preexec, stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return -999, "", "timed out after %d s (a hang)" % timeout


def refused(name, args, must, outs=(), own=(), timeout=60, preexec=None):
    return hostile_lib.refused_run(name, WORK, lambda: run(args, timeout, preexec), must, outs, own, hidden_tmp=True)


def works(name, args, expect_out=None):
    return hostile_lib.works_run(name, lambda: run(args), expect_out)


def must_ok(what, args):
    rc, out, err = run(args)
    if rc != 0:
        print("FAIL  set-up: %s: exit %d: %s" % (what, rc, err[-600:]))
        sys.exit(1)
    return out


def w(path, data):
    os.makedirs(os.path.dirname(os.path.join(WORK, path)) or WORK, exist_ok=True)
    open(os.path.join(WORK, path), "wb").write(data if isinstance(data, bytes) else data.encode())


# ---- the shapes of a path that is not the file it should be ---------------------------------------

SHAPES = ["a directory", "a FIFO", "/dev/zero", "/dev/urandom", "a link loop", "an empty file", "missing"]


def make_shape(p, shape):
    """p (absolute) becomes the shape; returns the text a message must hold (the path as given)."""
    if os.path.lexists(p):
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.remove(p)
    loop = p + ".loop"
    if os.path.lexists(loop):
        os.remove(loop)
    if shape == "a directory":
        os.makedirs(p)
    elif shape == "a FIFO":
        os.mkfifo(p)
    elif shape in ("/dev/zero", "/dev/urandom"):
        os.symlink(shape, p)
    elif shape == "a link loop":
        os.symlink(os.path.basename(loop), p)
        os.symlink(os.path.basename(p), loop)
    elif shape == "an empty file":
        open(p, "wb").close()


def clear_shape(p):
    for q in (p, p + ".loop"):
        if os.path.lexists(q):
            if os.path.isdir(q) and not os.path.islink(q):
                shutil.rmtree(q)
            else:
                os.remove(q)


def slot(name, rel, args_of, outs=(), own=(), must_of=None, shapes=SHAPES):
    """Every shape at WORK/rel through the command args_of(WORK/rel)."""
    p = os.path.join(WORK, rel)
    for shape in shapes:
        make_shape(p, shape)
        must = must_of(p, shape) if must_of else [os.path.basename(rel)]
        refused("%s: %s" % (name, shape), args_of(p), must, outs=outs, own=list(own) + [p, p + ".loop"], timeout=30)
        clear_shape(p)


def shape_cases(ck, tok, shards):
    train_shards = [EXE, "train", RECIPE, "--set", "data.source=shards", "--set", "data.tokenizer=" + tok,
                    "--set", "model.vocab=0", "--set", "train.steps=1", "--set", "optim.warmup=1",
                    "--set", "train.run_dir=" + os.path.join(WORK, "run_sh")]
    # an empty recipe is every default (and a FIFO with no writer reads as empty): refused later, for the
    # default data's absence, which the message names instead
    slot("train RECIPE", "s/recipe.ini", lambda p: [EXE, "train", p, "--dry-run"],
         must_of=lambda p, shape: ["tokenizer"] if shape in ("a FIFO", "an empty file") else ["recipe.ini"])
    slot("sim --durations", "s/d.json", lambda p: [EXE, "sim", "--durations", p])
    slot("trace", "s/trace.json", lambda p: [EXE, "trace", p, "--svg", "o/t.svg"], outs=["o/t.svg"])
    slot("tokenizer info", "s/tok.json", lambda p: [EXE, "tokenizer", "info", "--tokenizer", p])
    slot("tokenizer encode --file", "s/text.txt", lambda p: [EXE, "tokenizer", "encode", "--tokenizer", tok,
                                                             "--file", p],
         shapes=[s for s in SHAPES if s not in ("an empty file", "a FIFO")])  # empty text encodes to nothing
    slot("tokenizer train --manifest", "s/m.json", lambda p: [EXE, "tokenizer", "train", "--vocab", "300",
                                                              "--manifest", p, "--out", "o/t.json"], outs=["o/t.json"])
    slot("pack --manifest", "s/m.json", lambda p: [EXE, "pack", "--manifest", p, "--images", "demo/images",
                                                   "--tokenizer", tok, "--out", "o/packed"], outs=["o/packed"])
    slot("pack --tokenizer", "s/tok.json", lambda p: [EXE, "pack", "--manifest", "demo/train.json", "--images",
                                                      "demo/images", "--tokenizer", p, "--out", "o/packed"],
         outs=["o/packed"])
    # a folder of safetensors files is a right input; a link loop is named as one (was: "no such file")
    slot("tensors ls", "s/m.safetensors", lambda p: [EXE, "tensors", "ls", p],
         shapes=[s for s in SHAPES if s != "a directory"],
         must_of=lambda p, shape: ["m.safetensors"] + (["symbolic links"] if shape == "a link loop" else []))
    slot("tensors diff", "s/m.safetensors", lambda p: [EXE, "tensors", "diff", p, os.path.join(ck, "model.safetensors")],
         shapes=[s for s in SHAPES if s != "a directory"])
    # a file that cannot be read (mode 000). Root reads it anyway through CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, so
    # as root the command runs without them: dropped from the bounding set before exec, where a root process's
    # capabilities become that set. It stays root, so it still reaches its own folders (a build under a mode-700
    # folder, as mktemp makes them, is out of reach of another user such as nobody).
    def without_dac_override():
        if os.geteuid() == 0:
            libc = ctypes.CDLL(None, use_errno=True)
            for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH (linux/capability.h)
                if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP (linux/prctl.h)
                    os.write(2, b"hostile_shapes: prctl(PR_CAPBSET_DROP) failed\n")
                    os._exit(3)
    for name, rel, data, args_of in [
            ("sim --durations", "s/ro_d.json", DUR_BASE, lambda p: [EXE, "sim", "--durations", p]),
            ("tokenizer info", "s/ro_tok.json", open(tok, "rb").read(), lambda p: [EXE, "tokenizer", "info", "--tokenizer", p]),
            ("tensors ls", "s/ro.safetensors", open(os.path.join(ck, "model.safetensors"), "rb").read(),
             lambda p: [EXE, "tensors", "ls", p])]:
        p = os.path.join(WORK, rel)
        open(p, "wb").write(data)
        os.chmod(p, 0)
        refused("%s: an unreadable file" % name, args_of(p), [os.path.basename(rel), "denied"], preexec=without_dac_override)
        os.remove(p)
    # a shard given by name, and a shard inside the data.shards folder (was: a FIFO hung in open())
    slot("train data.shards FILE", "s/shard-00000.rrs", lambda p: train_shards + ["--set", "data.shards=" + p],
         own=["run_sh"], shapes=[s for s in SHAPES if s not in ("a directory", "missing")])
    os.makedirs(os.path.join(WORK, "s/shdir"), exist_ok=True)
    slot("train data.shards DIR/shard", "s/shdir/shard-00000.rrs",
         lambda p: train_shards + ["--set", "data.shards=" + os.path.dirname(p)], own=["run_sh"],
         shapes=["a FIFO", "/dev/zero", "/dev/urandom", "a link loop", "an empty file"])
    # a checkpoint's own files, and the checkpoint folder
    for f in ["state.json", "model.safetensors"]:
        d = os.path.join(WORK, "s/ck_" + f.split(".")[0])
        if os.path.exists(d):
            shutil.rmtree(d)
        shutil.copytree(ck, d)
        slot("eval: checkpoint %s" % f, os.path.relpath(os.path.join(d, f), WORK),
             lambda p: [EXE, "eval", *CLIP_RECIPE, "--checkpoint", os.path.dirname(p), "--samples", "2"],
             shapes=[s for s in SHAPES if s != "missing" or f == "state.json"])
    slot("eval --checkpoint", "s/ckpt", lambda p: [EXE, "eval", *CLIP_RECIPE, "--checkpoint", p, "--samples", "2"])
    slot("generate --image", "s/img.jpg", lambda p: [EXE, "generate", *CLIP_RECIPE, "--checkpoint", ck, "--image", p,
                                                     "--prompt", "<image>\nWhat colour?", "--max-new-tokens", "2"])
    slot("import llama --hf", "s/hf", lambda p: [EXE, "import", "llama", "--hf", p, "--out", "o/imp"], outs=["o/imp"])
    slot("report RUN", "s/run", lambda p: [EXE, "report", p, "--out", "o/r.html"], outs=["o/r.html"])
    slot("export hf --tokenizer", "s/tok.json", lambda p: [EXE, "export", "hf", "--checkpoint", ck, "--tokenizer", p,
                                                           "--out", "o/hf"], outs=["o/hf"],
         shapes=[s for s in SHAPES if s not in ("an empty file", "missing")])


# ---- cut files and size fields --------------------------------------------------------------------

def st_parts(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    return raw, n


def cut_cases(ck, shard):
    raw, n = st_parts(os.path.join(ck, "model.safetensors"))
    data_mid = 8 + n + (len(raw) - 8 - n) // 2
    for at in sorted({0, 4, 8, 9, 8 + n // 2, 8 + n - 1, 8 + n, 8 + n + 1, data_mid, len(raw) - 1}):
        w("c/cut.safetensors", raw[:at])
        refused("tensors ls: safetensors cut at byte %d of %d" % (at, len(raw)), [EXE, "tensors", "ls",
                "c/cut.safetensors"], ["cut.safetensors"])
        if at not in (4, 8 + n // 2, 8 + n, data_mid):  # the checkpoint load: one cut inside each part
            continue
        d = os.path.join(WORK, "c/ck")
        if os.path.exists(d):
            shutil.rmtree(d)
        shutil.copytree(ck, d)
        open(os.path.join(d, "model.safetensors"), "wb").write(raw[:at])
        refused("eval: model.safetensors cut at byte %d" % at, [EXE, "eval", *CLIP_RECIPE, "--checkpoint", d, "--samples",
                "2"], ["model.safetensors"])
    # size fields in the header: the header length, a data offset, a dimension
    hdr = json.loads(raw[8:8 + n])
    name = next(k for k in hdr if k != "__metadata__")
    for v in [2 ** 63 - 1, 2 ** 64 - 1, -1, "1e999", 1.5]:
        for field in ["data_offsets", "shape"]:
            h = json.loads(raw[8:8 + n])
            if field == "data_offsets":
                h[name]["data_offsets"][1] = "@V@"
            else:
                h[name]["shape"][0] = "@V@"
            text = json.dumps(h).replace('"@V@"', str(v)).encode()
            w("c/size.safetensors", struct.pack("<Q", len(text)) + text + raw[8 + n:])
            refused("tensors ls: %s %s = %s" % (name, field, v), [EXE, "tensors", "ls", "c/size.safetensors"],
                    ["size.safetensors"])
    for hl in [2 ** 63 - 1, 2 ** 64 - 1, n + 1, len(raw)]:
        w("c/hl.safetensors", struct.pack("<Q", hl) + raw[8:])
        refused("tensors ls: header length %d" % hl, [EXE, "tensors", "ls", "c/hl.safetensors"], ["hl.safetensors"])
    # tokenizer.json ids and config.json sizes: 2^63-1, 2^64-1, -1, 1e999, 1.5
    tj = json.load(open(os.path.join(WORK, "tok.json")))
    first = next(iter(tj["model"]["vocab"]))
    for v in ["9223372036854775807", "18446744073709551615", "-1", "1e999", "1.5"]:
        for where in ["model.vocab", "added_tokens"]:
            j = json.loads(json.dumps(tj))
            if where == "model.vocab":
                j["model"]["vocab"][first] = "@V@"
            else:
                j["added_tokens"][0]["id"] = "@V@"
            w("c/tv.json", json.dumps(j).replace('"@V@"', v))
            refused("tokenizer.json: %s id %s" % (where, v), [EXE, "tokenizer", "info", "--tokenizer", "c/tv.json"],
                    ["tv.json", where])
        cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
               "intermediate_size": 172, "vocab_size": 300, "rms_norm_eps": 1e-5, "max_position_embeddings": 256}
        for key in ["hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size"]:
            w("c/hf/config.json", json.dumps(dict(cfg, **{key: "@V@"})).replace('"@V@"', v))
            refused("config.json: %s = %s" % (key, v), [EXE, "import", "llama", "--hf", "c/hf", "--out", "o/imp"],
                    ["config.json", key], outs=["o/imp"])
    # a duration file and state.json cut inside every value (a JSON text is whole or refused)
    for at in range(1, len(DUR_BASE), 9):
        w("c/d.json", DUR_BASE[:at])
        refused("sim: duration file cut at byte %d of %d" % (at, len(DUR_BASE)), [EXE, "sim", "--durations", "c/d.json"],
                ["d.json"])
    state = open(os.path.join(ck, "state.json"), "rb").read().rstrip()
    for at in [1, len(state) // 3, len(state) // 2, len(state) - 1]:
        d = os.path.join(WORK, "c/ck_state")
        if os.path.exists(d):
            shutil.rmtree(d)
        shutil.copytree(ck, d)
        open(os.path.join(d, "state.json"), "wb").write(state[:at])
        refused("eval: state.json cut at byte %d of %d" % (at, len(state)), [EXE, "eval", *CLIP_RECIPE, "--checkpoint",
                d, "--samples", "2"], ["state.json"])
    # a shard cut inside every part (header, frames, index, trailer: the index and trailer are at the end)
    sraw = open(shard, "rb").read()
    L = len(sraw)
    for at in sorted({8, 64, L // 2, L - 4096, L - 64, L - 8, L - 1}):
        if at <= 0 or at >= L:
            continue
        os.makedirs(os.path.join(WORK, "c/sh"), exist_ok=True)
        w("c/sh/shard-00000.rrs", sraw[:at])
        refused("train: shard cut at byte %d of %d" % (at, L), [EXE, "train", RECIPE, "--set", "data.source=shards",
                "--set", "data.shards=c/sh", "--set", "data.tokenizer=tok.json", "--set", "model.vocab=0",
                "--set", "train.steps=1", "--set", "optim.warmup=1", "--set", "train.run_dir=" + WORK + "/run_cut"],
                ["shard-00000.rrs"], own=["run_cut"])


def trailing_cases(ck, tok):
    """JSON files with something after their one value (was: read in part, the rest ignored)."""
    tails = [("a second object", b' {"x": 1}'), ("garbage", b"garbage"), ("a NUL byte", b"\0junk")]
    tok_text = open(tok, "rb").read()
    state = open(os.path.join(ck, "state.json"), "rb").read()
    for what, tail in tails:
        w("t/tok.json", tok_text + tail)
        refused("tokenizer.json + %s" % what, [EXE, "tokenizer", "info", "--tokenizer", "t/tok.json"], ["tok.json"])
        d = os.path.join(WORK, "t/ck")
        if os.path.exists(d):
            shutil.rmtree(d)
        shutil.copytree(ck, d)
        open(os.path.join(d, "state.json"), "wb").write(state + tail)
        refused("state.json + %s" % what, [EXE, "eval", *CLIP_RECIPE, "--checkpoint", d, "--samples", "2"], ["state.json"])
        w("t/d.json", DUR_BASE + tail)
        refused("duration file + %s" % what, [EXE, "sim", "--durations", "t/d.json"], ["d.json"])
        w("t/trace.json", b'{"traceEvents": []}' + tail)
        refused("trace + %s" % what, [EXE, "trace", "t/trace.json", "--svg", "o/t.svg"], ["trace.json"], outs=["o/t.svg"])
        w("t/hf/config.json", json.dumps({"model_type": "llama", "hidden_size": 64}).encode() + tail)
        refused("import llama: config.json + %s" % what, [EXE, "import", "llama", "--hf", "t/hf", "--out", "o/imp"],
                ["config.json"], outs=["o/imp"])


# ---- duration files of another generator ------------------------------------------------------------

DUR_BASE = b'{"stages": 2, "microbatches": 3, "latency": 0.25, "F": [[1, 2, 1], [1, 1, 1]], "B": [[2, 4, 2], [2, 2, 2]]}'


def sim_json(path, extra=()):
    rc, out, err = run([EXE, "sim", "--durations", path, "--json", "--mode", "fixed"] + list(extra))
    if rc != 0:
        return None, err
    return json.loads(out.strip().splitlines()[-1]), err


def duration_cases():
    w("g/base.json", DUR_BASE)
    ref, err = sim_json("g/base.json")
    note(ref is not None, "duration file as written by sim: %s" % err[-300:])
    split_ref = None
    accepted = [
        ("keys in another order", b'{"B": [[2, 4, 2], [2, 2, 2]], "F": [[1, 2, 1], [1, 1, 1]], "latency": 0.25, '
                                  b'"microbatches": 3, "stages": 2}'),
        ("integers written as floats and exponents", b'{"stages": 2.0, "microbatches": 3e0, "latency": 2.5E-1, '
                                                     b'"F": [[1.0, 2e0, 1], [1, 1, 1]], "B": [[2, 4, 2], [2, 2, 2.0]]}'),
        ("unknown keys", b'{"generator": "other tool 1.0", "units": "ms", "stages": 2, "microbatches": 3, '
                         b'"latency": 0.25, "F": [[1, 2, 1], [1, 1, 1]], "B": [[2, 4, 2], [2, 2, 2]], "notes": {"a": [1]}}'),
        ("W null", DUR_BASE[:-1] + b', "W": null}'),
        ("CRLF, tabs and a final newline", DUR_BASE.replace(b", ", b",\r\n\t") + b"\r\n"),
        ("a UTF-8 byte-order mark", b"\xef\xbb\xbf" + DUR_BASE),
    ]
    for what, text in accepted:
        w("g/x.json", text)
        got, err = sim_json("g/x.json")
        note(got is not None and ref is not None and got["makespan"] == ref["makespan"] and
             got["lower_bound"] == ref["lower_bound"], "duration file with %s: %s / %s: %s" % (what, got, ref, err[-200:]))
        if got is not None:
            print("ok    duration file with %s: makespan %s" % (what, got["makespan"]))
    # latency absent is 0: the same as latency 0
    w("g/l0.json", DUR_BASE.replace(b'"latency": 0.25, ', b'"latency": 0, '))
    w("g/lnone.json", DUR_BASE.replace(b'"latency": 0.25, ', b""))
    a, _ = sim_json("g/l0.json")
    b, _ = sim_json("g/lnone.json")
    note(a is not None and a == b, "latency absent is latency 0: %s / %s" % (a, b))
    # W present: a split backward (another makespan than without)
    w("g/w.json", DUR_BASE[:-1] + b', "W": [[1, 1, 1], [1, 1, 1]]}')
    split_ref, err = sim_json("g/w.json")
    note(split_ref is not None and ref is not None and split_ref["makespan"] != ref["makespan"],
         "W present is a split backward: %s / %s %s" % (split_ref, ref, err[-200:]))
    refusals = [
        ("a key twice", DUR_BASE[:-1] + b', "F": [[9, 9, 9], [9, 9, 9]]}', ["d.json", '"F"', "more than once"]),
        ("w for W", DUR_BASE[:-1] + b', "w": [[1, 1, 1], [1, 1, 1]]}', ["d.json", '"w"', "case"]),
        ("Latency for latency", DUR_BASE.replace(b'"latency"', b'"Latency"'), ["d.json", '"Latency"']),
        ("a NUL byte", DUR_BASE + b"\0{}", ["d.json", "NUL"]),
        ("trailing text", DUR_BASE + b" x", ["d.json"]),
        ("stages 2^63-1", DUR_BASE.replace(b'"stages": 2', b'"stages": 9223372036854775807'), ["d.json", '"stages"']),
        ("stages -1", DUR_BASE.replace(b'"stages": 2', b'"stages": -1'), ["d.json", '"stages"']),
        ("stages 1e999", DUR_BASE.replace(b'"stages": 2', b'"stages": 1e999'), ["d.json", '"stages"', "range"]),
        ("microbatches 2.5", DUR_BASE.replace(b'"microbatches": 3', b'"microbatches": 2.5'), ["d.json", '"microbatches"']),
        ("latency 1e999", DUR_BASE.replace(b'0.25', b'1e999'), ["d.json", '"latency"', "range"]),
        ("latency null", DUR_BASE.replace(b'0.25', b'null'), ["d.json", '"latency"']),
        ("F[0][1] = -1e-300", DUR_BASE.replace(b'[[1, 2, 1]', b'[[1, -1e-300, 1]'), ["d.json", "F[0][1]"]),
        ("F[1][2] = 1e999", DUR_BASE.replace(b'[1, 1, 1]], "B"', b'[1, 1, 1e999]], "B"'), ["d.json", "F[1][2]", "range"]),
        ("a duration as a string", DUR_BASE.replace(b'[[2, 4, 2]', b'[["2", 4, 2]'), ["d.json", "B[0][0]"]),
        ("NaN", DUR_BASE.replace(b'[[2, 4, 2]', b'[[NaN, 4, 2]'), ["d.json", "not valid JSON"]),
        ("a comment", DUR_BASE.replace(b'{', b'{ // x\n', 1), ["d.json", "not valid JSON"]),
        ("stages as a string", DUR_BASE.replace(b'"stages": 2', b'"stages": "2"'), ["d.json", '"stages"']),
        ("a top-level array", b"[" + DUR_BASE + b"]", ["d.json", "object"]),
    ]
    for what, text, must in refusals:
        w("g/d.json", text)
        refused("duration file with %s" % what, [EXE, "sim", "--durations", "g/d.json"], must)


# ---- outputs ------------------------------------------------------------------------------------

def output_cases(ck, tok):
    m = "demo/train.json"
    refused("tokenizer train --out = its --manifest", [EXE, "tokenizer", "train", "--vocab", "300", "--manifest", m,
            "--out", m], ["train.json"])
    refused("tokenizer add-special --out = its input", [EXE, "tokenizer", "add-special", "--tokenizer", tok, "--add",
            "<x>", "--out", tok], ["tok.json"])
    w("o2/trace.json", b'{"traceEvents": []}')
    refused("trace --svg = the trace", [EXE, "trace", "o2/trace.json", "--svg", "o2/trace.json"], ["trace.json"])
    refused("eval --predictions = the recipe", [EXE, "eval", *CLIP_RECIPE, "--checkpoint", ck, "--samples", "2",
            "--predictions", RECIPE], ["test-synthetic.ini"])
    refused("eval --predictions inside the checkpoint", [EXE, "eval", *CLIP_RECIPE, "--checkpoint", ck, "--samples", "2",
            "--predictions", os.path.join(ck, "p.jsonl")], ["p.jsonl"], outs=[os.path.join(ck, "p.jsonl")])
    refused("export hf --out inside the checkpoint", [EXE, "export", "hf", "--checkpoint", ck, "--out",
            os.path.join(ck, "hf")], ["hf"], outs=[os.path.join(ck, "hf")])
    refused("pack --out = the images folder", [EXE, "pack", "--manifest", m, "--images", "demo/images", "--tokenizer",
            tok, "--out", "demo/images"], ["images"])
    for out in ["/dev/full", "/dev/null"]:
        refused("tokenizer train --out %s" % out, [EXE, "tokenizer", "train", "--vocab", "300", "--manifest", m,
                "--out", out], [out])
        refused("trace --svg %s" % out, [EXE, "trace", "o2/trace.json", "--svg", out], [out])
    # a parent that does not exist: refused naming it, or written there; never half
    for args, out in [([EXE, "tokenizer", "train", "--vocab", "300", "--manifest", m, "--out", "nope/a/t.json"],
                       "nope/a/t.json"),
                      ([EXE, "sim", "--durations", "g/base.json", "--trace", "nope2/b/t.json"], "nope2/b/t.json")]:
        rc, o, err = run(args)
        p = os.path.join(WORK, out)
        note((rc == 0 and os.path.isfile(p)) or (1 <= rc <= 125 and out.split("/")[0] in err and
             not os.path.lexists(p)), "%s under a missing parent: exit %d, %s" % (out, rc, err.strip()[-200:]))
        note(not [x for x in SAN if x in err], "%s under a missing parent: a sanitizer report" % out)
        print("ok    --out under a missing parent (%s): exit %d" % (out, rc))
    # a write that fails half-way (files limited to 4 KiB: EFBIG, as a full disk fails): an error naming the
    # output, and no partial file or temporary left
    lim = fsize_limit(4096)
    refused("tokenizer train: the write fails", [EXE, "tokenizer", "train", "--vocab", "300", "--manifest", m,
            "--out", "f/t.json"], ["f/t.json"], outs=["f/t.json"], preexec=lim)
    refused("pack: the shard write fails", [EXE, "pack", "--manifest", m, "--images", "demo/images", "--tokenizer",
            tok, "--out", "f/packed"], ["f/packed"], outs=["f/packed"], preexec=lim)
    refused("sim --dump: the write fails", [EXE, "sim", "--stages", "8", "--microbatches", "64", "--dump",
            "f/d.json"], ["f/d.json"], outs=["f/d.json"], preexec=lim)
    refused("eval --predictions: the write fails", [EXE, "eval", *CLIP_RECIPE, "--checkpoint", ck, "--samples", "64",
            "--predictions", "f/p.jsonl"], ["f/p.jsonl"], outs=["f/p.jsonl"], preexec=fsize_limit(256))
    refused("export hf: the write fails", [EXE, "export", "hf", "--checkpoint", ck, "--out", "f/hf"], ["f/hf"],
            outs=["f/hf"], preexec=lim)
    refused("import llava: the write fails", [EXE, "import", "llava", "--hf", "o/hf_ok", "--out", "f/imp"], ["f/imp"],
            outs=["f/imp"], preexec=lim)


def main():
    if os.path.exists(WORK):
        shutil.rmtree(WORK)
    os.makedirs(WORK)
    for d in ["keep", "s", "o", "f", "c", "t", "g"]:
        os.makedirs(os.path.join(WORK, d))
    open(os.path.join(WORK, "keep", "precious.txt"), "w").write("must survive\n")
    must_ok("demo-data", [EXE, "demo-data", "--out", "demo", "--samples", "12", "--heldout", "2", "--seed", "5"])
    must_ok("tokenizer", [EXE, "tokenizer", "train", "--vocab", "300", "--manifest", "demo/train.json", "--out",
                          "tok.json"])
    must_ok("pack", [EXE, "pack", "--manifest", "demo/train.json", "--images", "demo/images", "--tokenizer", "tok.json",
                     "--out", "shards", "--quiet"])
    run_dir = os.path.join(WORK, "run")
    must_ok("pack held-out", [EXE, "pack", "--manifest", "demo/heldout.json", "--images", "demo/images", "--tokenizer",
                              "tok.json", "--out", "eval_shards", "--quiet"])
    must_ok("train", [EXE, "train", *CLIP_RECIPE, "--set", "train.steps=2", "--set", "optim.warmup=1", "--set",
                      "train.checkpoint_every=2", "--set", "checkpoint.keep=0", "--set", "train.run_dir=" + run_dir])
    ck = os.path.join(run_dir, "checkpoints", "step-00000002")
    tok = os.path.join(WORK, "tok.json")
    shard = os.path.join(WORK, "shards", "shard-00000.rrs")
    # an exported model re-imported is the Hugging Face folder of the import write-failure case
    must_ok("export", [EXE, "export", "hf", "--checkpoint", ck, "--out", "o/hf_ok"])
    duration_cases()
    shape_cases(ck, tok, shard)
    cut_cases(ck, shard)
    trailing_cases(ck, tok)
    output_cases(ck, tok)
    print("hostile shapes: %d checks, %d failed" % (COUNT[0], len(FAILED)))
    sys.exit(1 if FAILED else 0)


main()
