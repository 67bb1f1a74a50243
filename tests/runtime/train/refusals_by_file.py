#!/usr/bin/env python3
"""refusals_by_file.py RRFP_MM SRC_DIR WORK_DIR [files|shard]  — damage that only a checksum or the
checkpoint identity can see is refused: `rrfp-mm` exits 1 (an error, not a crash, not a success), and its
error line names the damaged file's path. Asserted by exit code and path, not by a message's wording.
Each case is paired with its control: the same command on the undamaged copy exits 0, so the refusal is
the damage's.

  files: (one process)
    - one bit of a checkpoint tensor (the lowest mantissa bit of one element: a plausible value that
      only the tensor's xxh64 checksum sees), in model.safetensors and in optimizer.safetensors:
      `train --resume` and `eval` (model file only: eval loads no optimizer state) refuse it;
    - one byte of a sample id in a .rrs shard's index (only the index's checksum sees it: the id is
      not used to locate anything): `train` on that shard refuses it.
  shard: (mpirun -np 2) a pp 2 checkpoint whose two model files are swapped (renamed into each other's
    names): every other check passes, since the folder holds all tensors, of the same step, job and
    layout; only the `shard` key of each file's identity says that model.pp0c0.safetensors holds stage 1.
    One-process `eval` and `train --resume` refuse it.
Exit 0 when every case passed, 77 (skipped) for `shard` without mpirun."""
import json, os, shutil, struct, subprocess, sys

EXE, SRC, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
PART = sys.argv[4] if len(sys.argv) > 4 else "files"
RECIPE = os.path.join(SRC, "recipes", "test-synthetic.ini")
FAILED = []


def run(args, timeout=180):
    try:
        p = subprocess.run(args, capture_output=True, timeout=timeout, cwd=WORK)
        return p.returncode, p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return -999, "timed out after %d s" % timeout


def check(ok, msg):
    print(("ok    " if ok else "FAIL  ") + msg)
    if not ok:
        FAILED.append(msg)


def refused(name, args, path):
    """args exits 1 and its error line names path."""
    rc, err = run(args)
    lines = [l for l in err.splitlines() if "error:" in l]
    named = any(path in l for l in lines)
    check(rc == 1 and named, "%s: exit %d (expected 1), error names %s: %s" % (name, rc, path,
                                                                           (lines[:1] or [err.strip()[-300:]])[0]))


def works(name, args):
    rc, err = run(args)
    check(rc == 0, "%s (control): exit %d%s" % (name, rc, "" if rc == 0 else ": " + err.strip()[-300:]))


def train(run_dir, extra=()):
    return [EXE, "train", RECIPE, "--set", "train.steps=3", "--set", "optim.warmup=1", "--set", "train.checkpoint_every=2",
            "--set", "checkpoint.keep=0", "--set", "train.run_dir=" + run_dir] + list(extra)


def flip_lowest_bit(path, tensor, elem):
    """The lowest mantissa bit of element elem of F32 tensor `tensor` (safetensors: u64 header size, JSON
    header, data; offsets are from the data's start)."""
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        t = hdr[tensor]
        assert t["dtype"] == "F32", t
        at = 8 + n + t["data_offsets"][0] + 4 * elem
        f.seek(at)
        b = bytearray(f.read(4))
        b[0] ^= 1
        f.seek(at)
        f.write(b)


def copy(src, name):
    d = os.path.join(WORK, name)
    shutil.copytree(src, d)
    return d


def files_cases():
    rc, err = run(train(os.path.join(WORK, "run")))
    check(rc == 0, "training the checkpoint of step 2%s" % ("" if rc == 0 else ": " + err.strip()[-300:]))
    ck = os.path.join(WORK, "run", "checkpoints", "step-00000002")
    evaluate = lambda d: [EXE, "eval", RECIPE, "--checkpoint", d, "--samples", "2"]
    resume = lambda d, n: train(os.path.join(WORK, "resume-" + n), ["--set", "checkpoint.resume=" + d])
    good = copy(ck, "good")
    works("train --resume of the undamaged checkpoint", resume(good, "good"))
    works("eval of the undamaged checkpoint", evaluate(good))
    for f, tensor in [("model.safetensors", "text.norm.weight"), ("optimizer.safetensors", "m.text.norm.weight")]:
        d = copy(ck, "bit-" + f)
        flip_lowest_bit(os.path.join(d, f), tensor, 3)
        refused("train --resume, one bit of %s in %s" % (tensor, f), resume(d, f), os.path.join(d, f))
        if f.startswith("model"):
            refused("eval, one bit of %s in %s" % (tensor, f), evaluate(d), os.path.join(d, f))

    # a shard whose index differs in one byte of a sample id
    run([EXE, "demo-data", "--out", os.path.join(WORK, "data"), "--samples", "12", "--heldout", "2"])
    tok = os.path.join(WORK, "tok.json")
    run([EXE, "tokenizer", "train", "--vocab", "300", "--manifest", os.path.join(WORK, "data", "train.json"), "--out", tok,
         "--quiet"])
    rc, err = run([EXE, "pack", "--manifest", os.path.join(WORK, "data", "train.json"), "--images",
                   os.path.join(WORK, "data", "images"), "--tokenizer", tok, "--out", os.path.join(WORK, "shards")])
    check(rc == 0, "pack%s" % ("" if rc == 0 else ": " + err.strip()[-300:]))
    shards = lambda d, n: [EXE, "train", os.path.join(SRC, "recipes", "llava.ini"), "--set", "data.shards=" + d,
                           "--set", "data.tokenizer=" + tok, "--set", "data.microbatch_tokens=512", "--set",
                           "data.microbatches=1", "--set", "model.vision_width=32", "--set", "model.vision_heads=2",
                           "--set", "model.vision_layers=1", "--set", "model.text_width=32", "--set",
                           "model.text_heads=2", "--set", "model.text_layers=1", "--set", "model.ffn_hidden=64",
                           "--set", "train.steps=1", "--set", "optim.warmup=0", "--set", "train.checkpoint_every=-1",
                           "--set", "runtime.threads=1", "--set", "train.run_dir=" + os.path.join(WORK, "shards-" + n)]
    works("train on the undamaged shard", shards(os.path.join(WORK, "shards"), "good"))
    d = copy(os.path.join(WORK, "shards"), "shards-id")
    rrs = [f for f in sorted(os.listdir(d)) if f.endswith(".rrs")]
    check(len(rrs) == 1, "one shard: %s" % rrs)
    p = os.path.join(d, rrs[0])
    with open(p, "r+b") as f:
        h = f.read(80)
        ioff = struct.unpack_from("<Q", h, 32)[0]
        f.seek(ioff + 22)
        idl = struct.unpack("<H", f.read(2))[0]
        check(idl > 0, "the first sample has an id (%d bytes)" % idl)
        b = f.read(1)
        f.seek(ioff + 24)
        f.write(b"x" if b != b"x" else b"y")  # the id's first byte, in the index only
    refused("train, one byte of a sample id in the shard's index", shards(d, "id"), p)


def shard_cases():
    mpi = shutil.which("mpirun")
    if not mpi:
        print("skipped: no mpirun")
        sys.exit(77)
    rd = os.path.join(WORK, "pp")
    rc, err = run([mpi, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "OMP_NUM_THREADS=1"] +
                  train(rd, ["--set", "parallel.pp=2"]), timeout=240)
    check(rc == 0, "pp 2 training for the checkpoint of step 2%s" % ("" if rc == 0 else ": " + err.strip()[-300:]))
    ck = os.path.join(rd, "checkpoints", "step-00000002")
    model = sorted(f for f in os.listdir(ck) if f.startswith("model.") and f.endswith(".safetensors"))
    check(model == ["model.pp0c0.safetensors", "model.pp1c0.safetensors"], "the pp 2 model files: %s" % model)
    evaluate = lambda d: [EXE, "eval", RECIPE, "--checkpoint", d, "--samples", "2"]
    resume = lambda d, n: train(os.path.join(WORK, "resume-" + n), ["--set", "checkpoint.resume=" + d])
    good = copy(ck, "pp-good")
    works("eval of the undamaged pp 2 checkpoint", evaluate(good))
    works("one-process train --resume of the undamaged pp 2 checkpoint", resume(good, "good"))
    d = copy(ck, "pp-swapped")
    a, b = [os.path.join(d, f) for f in model]
    os.rename(a, a + ".tmp")
    os.rename(b, a)
    os.rename(a + ".tmp", b)
    refused("eval, the pp 2 model files swapped", evaluate(d), a)
    refused("one-process train --resume, the pp 2 model files swapped", resume(d, "swapped"), a)


def main():
    if os.path.exists(WORK):
        shutil.rmtree(WORK)
    os.makedirs(WORK)
    files_cases() if PART == "files" else shard_cases()
    print("%d case(s) failed" % len(FAILED) if FAILED else "refusals by file: ok")
    sys.exit(1 if FAILED else 0)


main()
