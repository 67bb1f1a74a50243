"""disk_full.py — every command that writes, on a file system that fills (docs/reliability.md "Nothing lost on write
errors"): a tmpfs of a chosen size mounted in a private mount namespace (`unshare -m`; root only: exit 77 without
it), filled by a filler file so that only F bytes are free, F at several levels below what the command needs (none,
one page, a quarter, a half, three quarters, all but one page), so the failure lands in the first file, in the
middle of a big one, in the last small one; and an exhausted inode table (mkdir and create fail). Each failure:

  - exit 1..125, no sanitizer report or crash;
  - stderr names a path under the output and says "No space left on device";
  - no output under its final name, no temporary (`X.tmp.PID`, `.step-N.tmp*`) left anywhere on the file system;
  - the inputs (outside the tmpfs) unchanged.

Each command is first run with room to spare (it must work there: the control, and how much it writes).

Modes:
  commands  demo-data, tokenizer train, pack, sim --dump / --trace, trace --svg / --json / --durations-dir,
            report, eval --predictions, generate --out (the answers file is written as it goes, whole lines only:
            what is left is a resumable answers file, checked line by line, and --resume completes it once space is
            freed), export hf, export hf --adapter, import llava
  train     train into a run folder on the tmpfs (checkpoints every 2 steps): the error names the file and the
            disk; every step-N folder left is complete (state.json, every file it lists whole); no .step-*.tmp; the
            last checkpoint, if any, resumes once space is freed and the run then ends bit for bit as one that had
            room (every metrics row's loss_hex, and the last checkpoint's tensors)
  pp        (mpi) the same for a 2-rank pipeline (pp 2, runtime.trace) whose second checkpoint fills the disk while
            the ranks write their shards (or state.json, or a rank's trace file at the end): both ranks stop with an
            error (under a timeout: no hang), no half checkpoint

Usage: disk_full.py RRFP_MM SRC_DIR WORK_DIR MODE   (exit 0 = every check passed, 77 = no tmpfs to be had)"""
import json
import os
import shutil
import struct
import subprocess
import sys

EXE, SRC, WORK, MODE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3]), sys.argv[4]
RECIPE = os.path.join(SRC, "recipes", "test-synthetic.ini")
sys.path.insert(0, os.path.join(SRC, "tests", "support", "util"))
import hostile_lib  # noqa: E402
from hostile_lib import note, snapshot, SAN, FAILED, COUNT  # noqa: E402

IN = os.path.join(WORK, "in")   # inputs, on the ordinary disk
FS = os.path.join(WORK, "fs")   # the tmpfs mount point
PAGE = 4096
ENOSPC = "No space left on device"
NS_ENV = "RRFP_DISK_FULL_NAMESPACE"
CLIP = ["--set", "model.vision_arch=clip", "--set", "model.vision_feature_layer=-1", "--set", "data.source=shards",
        "--set", "data.shards=" + os.path.join(IN, "shards"), "--set", "data.tokenizer=" + os.path.join(IN, "tok.json"),
        "--set", "model.vocab=0", "--set", "data.eval_shards=" + os.path.join(IN, "eval_shards")]


def skip(why):
    print("skipped: " + why)
    sys.exit(77)


def enter_namespace():
    """Re-run this script in a private mount namespace (its mounts are seen by nothing outside it, and vanish with
    it); exit 77 saying why when that cannot be had."""
    if os.environ.get(NS_ENV) == "1":
        return
    if os.geteuid() != 0:
        skip("mounting a tmpfs needs root (CAP_SYS_ADMIN)")
    if not shutil.which("unshare"):
        skip("no unshare(1) to make a private mount namespace")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        skip("unshare -m refused: " + probe.stderr.strip())
    env = dict(os.environ, **{NS_ENV: "1"})
    os.execvpe("unshare", ["unshare", "-m", "--propagation", "private", sys.executable] + sys.argv, env)


def mounted():
    return any(line.split()[1] == FS for line in open("/proc/self/mounts"))


def fs_reset(free, size_kb=32768, inodes=None):
    """A fresh tmpfs at FS with `free` bytes (rounded down to pages) left free; with `inodes`, that many inodes
    left (the filler takes one)."""
    if mounted():
        subprocess.run(["umount", FS], check=True)
    os.makedirs(FS, exist_ok=True)
    opts = "size=%dk" % size_kb + (",nr_inodes=%d" % inodes if inodes else "")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", FS], capture_output=True, text=True)
    if p.returncode != 0:
        skip("cannot mount a tmpfs: " + p.stderr.strip())
    st = os.statvfs(FS)
    fill = st.f_bavail * st.f_frsize - free // PAGE * PAGE
    with open(os.path.join(FS, "filler"), "wb") as f:
        f.write(b"\0" * max(fill, 0))
    if inodes:  # take every inode left: the command's first create or mkdir fails
        k = 0
        while os.statvfs(FS).f_favail > 0:
            open(os.path.join(FS, "inode.%d" % k), "wb").close()
            k += 1
    st = os.statvfs(FS)
    return st.f_bavail * st.f_frsize


def fs_used():
    st = os.statvfs(FS)
    return (st.f_blocks - st.f_bavail) * st.f_frsize


def free_space():
    if os.path.exists(os.path.join(FS, "filler")):
        os.unlink(os.path.join(FS, "filler"))


def run(args, timeout=120, cwd=None, env=None):
    """(exit status, stdout, stderr) of args; env: variables added to the test's environment."""
    try:
        p = subprocess.run(args, capture_output=True, timeout=timeout, env=hostile_lib.sanitizer_env(SRC, env),
                           cwd=cwd or WORK, stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return -999, "", "timed out after %d s (a hang)" % timeout


def must_ok(name, args, cwd=None):
    rc, out, err = run(args, cwd=cwd)
    if rc != 0:
        print("FAIL  setup %s: exit %d\n%s\n%s" % (name, rc, out[-2000:], err[-2000:]))
        sys.exit(1)
    return out


def temporaries(root):
    """Every temporary a writer makes, left under root."""  # (the filler and inode.K are the test's own)
    left = []
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            if ".tmp" in n or n.startswith(".old.") or ".kept." in n:
                left.append(os.path.join(d, n))
    return left


def levels(need):
    """Free-space levels below `need` bytes, in pages: none, one page, a quarter, a half, three quarters, all but
    one page (duplicates dropped)."""
    pages = max(need // PAGE, 1)
    got = sorted({0, 1, pages // 4, pages // 2, pages * 3 // 4, pages - 1})
    return [p * PAGE for p in got if p * PAGE < need]


def failed_check(name, rc, err, out_path, why=ENOSPC):
    """The verdict every failure shares: a refusal, no sanitizer report, the path and the cause (`why`, the errno's
    text: the full disk's unless told) named."""
    short = err.strip().replace("\n", " | ")[-400:]
    note(1 <= rc <= 125, "%s: exit %d, expected an error (1..125): %s" % (name, rc, short))
    bad = [s for s in SAN if s in err]
    note(not bad, "%s: %s on stderr: %s" % (name, bad, short))
    note(why in err, "%s: the message does not say '%s': %s" % (name, why, short))
    note(out_path in err, "%s: the message does not name '%s': %s" % (name, out_path, short))
    if 1 <= rc <= 125 and not bad and why in err and out_path in err:
        print("ok    %s: %s" % (name, [l for l in err.strip().splitlines() if why in l][-1][:200]))


# ------------------------------------------------------------------------------------------------ commands

def make_inputs():
    os.makedirs(IN)
    must_ok("demo-data", [EXE, "demo-data", "--out", "demo", "--samples", "12", "--heldout", "3", "--seed", "5"], IN)
    must_ok("tokenizer", [EXE, "tokenizer", "train", "--vocab", "300", "--manifest", "demo/train.json", "--out",
                          "tok.json"], IN)
    for m, o in [("train", "shards"), ("heldout", "eval_shards")]:
        must_ok("pack " + m, [EXE, "pack", "--manifest", "demo/%s.json" % m, "--images", "demo/images", "--tokenizer",
                              "tok.json", "--out", o, "--quiet"], IN)
    must_ok("train", [EXE, "train", RECIPE, *CLIP, "--set", "train.steps=2", "--set", "optim.warmup=1", "--set",
                      "train.checkpoint_every=2", "--set", "train.run_dir=" + os.path.join(IN, "run")])
    must_ok("train lora", [EXE, "train", RECIPE, *CLIP, "--set", "train.steps=1", "--set", "optim.warmup=1", "--set",
                           "lora.r=4", "--set", "train.freeze=vision,projector", "--set",
                           "train.run_dir=" + os.path.join(IN, "lora")])
    must_ok("export", [EXE, "export", "hf", "--checkpoint", os.path.join(IN, "run", "checkpoints", "step-00000002"),
                       "--out", "hf"], IN)
    must_ok("sim --trace", [EXE, "sim", "--stages", "4", "--microbatches", "16", "--trace", "trace.json"], IN)


def whole_lines(path):
    """Every line of path a whole JSON object ending in a newline (what a resumable answers file holds)."""
    text = open(path, encoding="utf-8").read()
    if text and not text.endswith("\n"):
        return False
    try:
        [json.loads(l) for l in text.splitlines()]
    except ValueError:
        return False
    return True


def command_list():
    """Every command that writes a file or folder of its own: (name, output under FS, argument vector given the
    output's path, kind)."""
    ck = os.path.join(IN, "run", "checkpoints", "step-00000002")
    lck = os.path.join(IN, "lora", "checkpoints", "step-00000001")
    gen = [EXE, "generate", RECIPE, *CLIP, "--checkpoint", ck, "--max-new-tokens", "4", "--manifest",
           os.path.join(IN, "demo", "heldout.json"), "--images", os.path.join(IN, "demo", "images")]
    # (name, output under FS, argument vector given the output's path, kind): kind "file" / "folder" is an output
    # that must be absent after a failure; "answers" is generate's file written as it goes
    cases = [
        ("demo-data", "demo", lambda o: [EXE, "demo-data", "--out", o, "--samples", "12", "--heldout", "3", "--seed", "5"],
         "folder"),
        ("tokenizer train", "tok.json", lambda o: [EXE, "tokenizer", "train", "--vocab", "300", "--manifest",
                                                   os.path.join(IN, "demo", "train.json"), "--out", o], "file"),
        ("pack", "shards", lambda o: [EXE, "pack", "--manifest", os.path.join(IN, "demo", "train.json"), "--images",
                                      os.path.join(IN, "demo", "images"), "--tokenizer", os.path.join(IN, "tok.json"),
                                      "--out", o, "--quiet", "--shard-size", "0.05"], "folder"),
        ("sim --dump", "d.json", lambda o: [EXE, "sim", "--stages", "8", "--microbatches", "64", "--dump", o], "file"),
        ("sim --trace", "t.json", lambda o: [EXE, "sim", "--stages", "8", "--microbatches", "64", "--trace", o], "file"),
        ("trace --svg", "t.svg", lambda o: [EXE, "trace", os.path.join(IN, "trace.json"), "--svg", o], "file"),
        ("trace --json", "m.json", lambda o: [EXE, "trace", os.path.join(IN, "trace.json"), "--svg",
                                              os.path.join(WORK, "scratch.svg"), "--json", o], "file"),
        ("trace --durations-dir", "dd", lambda o: [EXE, "trace", os.path.join(IN, "trace.json"), "--svg",
                                                   os.path.join(WORK, "scratch.svg"), "--durations-dir", o], "folder"),
        ("report", "r.html", lambda o: [EXE, "report", os.path.join(IN, "run"), "--out", o], "file"),
        ("eval --predictions", "p.jsonl", lambda o: [EXE, "eval", RECIPE, *CLIP, "--checkpoint", ck, "--samples", "3",
                                                     "--predictions", o], "file"),
        ("generate --out", "a.jsonl", lambda o: gen + ["--out", o], "answers"),
        ("export hf", "hf", lambda o: [EXE, "export", "hf", "--checkpoint", ck, "--out", o], "folder"),
        ("export hf --adapter", "ad", lambda o: [EXE, "export", "hf", "--checkpoint", lck, "--adapter", o], "folder"),
        ("import llava", "imp", lambda o: [EXE, "import", "llava", "--hf", os.path.join(IN, "hf"), "--out", o],
         "folder"),
    ]
    return cases


def command_cases():
    for name, out, argv, kind in command_list():
        o = os.path.join(FS, out)
        # the control: with room, it works; what it leaves is what it needs
        fs_reset(1 << 40)
        base = fs_used()
        rc, sout, err = run(argv(o))
        note(rc == 0 and not [s for s in SAN if s in err], "%s with room: exit %d: %s" % (name, rc, err.strip()[-300:]))
        need = fs_used() - base
        if rc != 0:
            continue
        note(need > 0, "%s wrote nothing" % name)
        complete = open(o, "rb").read() if kind == "answers" else None
        for free in levels(need):
            fs_reset(free)
            before = snapshot(IN)
            rc, sout, err = run(argv(o))
            tag = "%s, %d of %d bytes free" % (name, free, need)
            failed_check(tag, rc, err, o)
            note(snapshot(IN) == before, "%s: an input changed" % tag)
            left = temporaries(FS)
            note(not left, "%s: temporaries left: %s" % (tag, left[:4]))
            if kind == "answers":
                # the answers written before the disk filled, whole lines only; --resume completes the file
                note(not os.path.lexists(o) or whole_lines(o), "%s: the answers file holds a torn line" % tag)
                free_space()
                rc, sout, err = run(argv(o) + (["--resume"] if os.path.lexists(o) else []))
                note(rc == 0 and os.path.isfile(o) and open(o, "rb").read() == complete,
                     "%s: --resume once space is freed does not give the complete answers (exit %d): %s" %
                     (tag, rc, err.strip()[-300:]))
            else:
                note(not os.path.lexists(o), "%s: '%s' left under its final name" % (tag, o))
        # an exhausted inode table: the first create or mkdir fails (ENOSPC)
        fs_reset(1 << 40, inodes=16)
        before = snapshot(IN)
        rc, sout, err = run(argv(o))
        tag = "%s, no inode free" % name
        failed_check(tag, rc, err, o)
        note(snapshot(IN) == before, "%s: an input changed" % tag)
        note(not temporaries(FS), "%s: temporaries left: %s" % (tag, temporaries(FS)[:4]))
        note(kind == "answers" or not os.path.lexists(o), "%s: '%s' left under its final name" % (tag, o))


def stdout_cases():
    """A command whose result is its standard output, redirected to a file on the full disk: it fails naming the
    file (was: exit 0 with the file cut where the disk filled). The file is the caller's (the shell's redirection),
    not the command's own output: what it holds is not checked."""
    ck = os.path.join(IN, "run", "checkpoints", "step-00000002")
    cases = [
        ("tensors ls", [EXE, "tensors", "ls", os.path.join(ck, "optimizer.safetensors")]),
        ("tokenizer encode", [EXE, "tokenizer", "encode", "--tokenizer", os.path.join(IN, "tok.json"), "--file",
                              os.path.join(IN, "demo", "train.json")]),
        ("sim --json", [EXE, "sim", "--stages", "8", "--microbatches", "64", "--json"]),
    ]
    for name, argv in cases:
        o = os.path.join(FS, "stdout.txt")
        fs_reset(1 << 40)
        with open(o, "wb") as f:
            p = subprocess.run(argv, stdout=f, stderr=subprocess.PIPE, env=hostile_lib.sanitizer_env(SRC), cwd=WORK)
        need = os.path.getsize(o)
        note(p.returncode == 0 and need > 0, "%s > file with room: exit %d, %d bytes" % (name, p.returncode, need))
        for free in sorted({0, need // PAGE // 2 * PAGE}):
            fs_reset(free)
            with open(o, "wb") as f:
                p = subprocess.run(argv, stdout=f, stderr=subprocess.PIPE, env=hostile_lib.sanitizer_env(SRC), cwd=WORK)
            failed_check("%s > file, %d of %d bytes free" % (name, free, need), p.returncode,
                         p.stderr.decode("utf-8", "replace"), o)


# ------------------------------------------------------------------------------------------------ train

def st_tensors(path):
    """name -> raw bytes of every tensor of a safetensors file (its metadata, which names the run, left out)."""
    b = open(path, "rb").read()
    hl = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + hl])
    return {k: b[8 + hl + v["data_offsets"][0]:8 + hl + v["data_offsets"][1]] for k, v in h.items()
            if k != "__metadata__"}


def checkpoints_whole(tag, root):
    """Every step-N folder under root holds state.json and every file it lists, each whole; returns the steps."""
    steps = []
    if not os.path.isdir(root):
        return steps
    for n in sorted(os.listdir(root)):
        if not n.startswith("step-"):
            continue
        d = os.path.join(root, n)
        ok = os.path.isfile(os.path.join(d, "state.json"))
        try:
            st = json.load(open(os.path.join(d, "state.json")))
            for f in st["files"]:
                b = open(os.path.join(d, f), "rb").read()
                hl = struct.unpack("<Q", b[:8])[0]
                h = json.loads(b[8:8 + hl])
                end = max([v["data_offsets"][1] for k, v in h.items() if k != "__metadata__"] + [0])
                ok = ok and len(b) == 8 + hl + end
        except (OSError, ValueError, KeyError, struct.error):
            ok = False
        note(ok, "%s: %s is a half checkpoint" % (tag, d))
        steps.append(int(n[5:]))
    return steps


LANDED = []  # the lines saying ENOSPC of each train case: where the failure landed


def train_case(tag, argv, run_dir, ref_rows, ref_tensors, steps, timeout, ranks, why=ENOSPC, env=None):
    """One run that fails (env: the failure's set-up, beside the full disk's; why: the errno's text it says), then
    the checks of a failed training run and its resume once the cause is gone."""
    rc, out, err = run(argv, timeout=timeout, env=env)
    text = out + err
    if os.environ.get("RRFP_DISK_FULL_VERBOSE"):
        print(text)
    hit = [l for l in text.splitlines() if why in l]
    LANDED.append("\n".join(hit))  # every such line: a pipeline's ranks each say where theirs failed
    note(rc != -999, "%s: a hang (killed after %d s)" % (tag, timeout))
    failed_check(tag, rc, text, FS, why)
    note(not temporaries(FS), "%s: temporaries left: %s" % (tag, temporaries(FS)[:4]))
    ck_root = os.path.join(run_dir, "checkpoints")
    have = checkpoints_whole(tag, ck_root)
    # a checkpoint that could not be written stops the run, naming its step and the one a resume starts from
    for n in (2, 4):
        if LANDED[-1] and ".step-%08d.tmp" % n in LANDED[-1]:
            then = ("the last complete checkpoint is %s/step-%08d (resume with --resume latest once there is room)" %
                    (ck_root, have[-1]) if have else "no checkpoint of this run was written before it")
            note("checkpoint of step %d could not be written" % n in err and then in err,
                 "%s: the error does not say that the checkpoint of step %d failed and that %s: %s" %
                 (tag, n, then, err.strip()[-500:]))
            note(have == [n - 2] if n == 4 else not have, "%s: checkpoints %s after step %d's failed" % (tag, have, n))
            # and no step after it was trained (the log prints every step: train.log_every = 1)
            note("step     %d/%d" % (n + 1, steps) not in out, "%s: training went on after step %d's checkpoint failed" %
                 (tag, n))
    if ranks > 1 and LANDED[-1] and ".tmp.shards" in LANDED[-1]:
        # both ranks stop saying so: the one whose shard (or commit) failed, and the other
        errs = [l for l in text.splitlines() if "checkpoint of step 4 could not be written" in l]
        note(len(errs) == 2, "%s: not every rank stopped with an error: %s" % (tag, errs))
    # once space is freed, the last checkpoint resumes and the run ends as the one that had room did
    free_space()
    if not have:
        print("ok    %s: no checkpoint was written before the disk filled" % tag)
        return
    rrc, rout, rerr = run(argv + ["--resume", "latest"], timeout=timeout)
    note(rrc == 0, "%s: --resume latest from step %d once space is freed: exit %d: %s" %
         (tag, have[-1], rrc, rerr.strip()[-400:]))
    if rrc != 0:
        return
    # rows past the checkpoint that an attempt wrote stay, and the resumed run's follow them: readers take the last
    # row of each step (runtime/train/metrics.h), so the steps in order with their last rows are the run
    last_row = {}
    for l in open(os.path.join(run_dir, "metrics.jsonl")):
        r = json.loads(l)
        last_row[r["step"]] = r["loss_hex"]
    got = sorted(last_row.items())
    note(got == ref_rows, "%s: resumed from step %d, the losses differ from a run with room: %s vs %s" %
         (tag, have[-1], got, ref_rows))
    last = os.path.join(ck_root, "step-%08d" % steps)
    tensors = {f: st_tensors(os.path.join(last, f)) for f in sorted(os.listdir(last)) if f.endswith(".safetensors")}
    note(tensors == ref_tensors, "%s: resumed from step %d, the last checkpoint's tensors differ from a run with room" %
         (tag, have[-1]))
    if got == ref_rows and tensors == ref_tensors:
        print("ok    %s: resumed from step %d, bit for bit" % (tag, have[-1]))


def train_cases(pp):
    steps, ranks, timeout = 4, (2 if pp else 1), (120 if pp else 60)
    run_dir = os.path.join(FS, "run")
    argv = [EXE, "train", RECIPE, "--set", "train.run_dir=" + run_dir, "--set", "train.steps=%d" % steps, "--set",
            "train.checkpoint_every=2", "--set", "optim.warmup=1", "--set", "train.log_every=1", "--set",
            "checkpoint.keep=0"]
    if pp:
        argv = ["timeout", "-s", "KILL", str(timeout), "mpirun", "--allow-run-as-root", "--oversubscribe", "-x",
                "OMP_NUM_THREADS=1", "-np", "2"] + argv + ["--set", "parallel.pp=2", "--set", "runtime.trace=true"]
    fs_reset(1 << 40)
    base = fs_used()
    rc, out, err = run(argv, timeout=timeout)
    if rc != 0:
        print("FAIL  train with room: exit %d\n%s\n%s" % (rc, out[-2000:], err[-2000:]))
        sys.exit(1)
    need = fs_used() - base
    ref_rows = [(json.loads(l)["step"], json.loads(l)["loss_hex"]) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    last = os.path.join(run_dir, "checkpoints", "step-%08d" % steps)
    ref_tensors = {f: st_tensors(os.path.join(last, f)) for f in sorted(os.listdir(last)) if f.endswith(".safetensors")}
    pages = {f: -(-os.path.getsize(os.path.join(last, f)) // PAGE) for f in os.listdir(last)}
    ck = sum(pages.values())
    need_p = need // PAGE
    # the run folder's own files (locks, run.json, recipe.ini, metrics.jsonl) come first, rank-0.json last; the
    # pages before a checkpoint: all but the two checkpoints, and the files of the run's end: trace-rankR.json
    # (pp 2: runtime.trace), then rank-R.json (one page each)
    traces = [os.path.join(run_dir, f) for f in os.listdir(run_dir) if f.startswith("trace-rank")]
    tr = sum(-(-os.path.getsize(f) // PAGE) for f in traces)
    pre = need_p - 2 * ck - ranks - tr
    tensors = sorted(f for f in pages if f.endswith(".safetensors"))   # model* before optimizer*
    if pp:
        # the second checkpoint fills the disk while the two ranks write their shards (each rank writes its model
        # shard, then its optimizer shard): in the first files, half-way, in the last ones, at state.json
        frees = [pre + ck + k * (ck - 1) // 4 for k in range(4)] + [pre + ck + ck - 1]
        # then the trace files at the run's end, half-way (a rank's trace, its rename)
        frees += [pre + 2 * ck + tr // 2]
        want = ["model.pp", "optimizer.pp", "state.json", "trace-rank"]
    else:
        m, o = pages[tensors[0]], pages[tensors[1]]
        # every page count up to the first metrics row (the run folder's files, one by one); each checkpoint's
        # model file half-way, its optimizer file half-way and at its last page, its state.json; rank-0.json
        frees = list(range(0, pre + 2))
        for base in (pre, pre + ck):
            frees += [base + m // 2, base + m + o // 2, base + m + o - 1, base + m + o]
        frees.append(need_p - 1)
        want = [".lock", "run.json", "metrics.jsonl", "step-00000002.tmp", "step-00000004.tmp", "model.safetensors",
                "optimizer.safetensors", "state.json", "rank-0.json"]
    del LANDED[:]
    for free in sorted(set(frees)):
        free = max(free, 0) * PAGE
        fs_reset(free)
        train_case("train%s, %d of %d bytes free" % (" pp 2" if pp else "", free, need), argv, run_dir, ref_rows,
                   ref_tensors, steps, timeout, ranks)
    # the levels reach every file the run writes (a failure in each), or this test checks less than it says
    for w in want:
        note(any(w in l for l in LANDED), "train%s: no level made the failure land in %s: %s" %
             (" pp 2" if pp else "", w, sorted(set(LANDED))))
    if not pp:
        fs_reset(1 << 40, inodes=16)
        rc, out, err = run(argv, timeout=timeout)
        failed_check("train, no inode free", rc, out + err, FS)
        note(not temporaries(FS), "train, no inode free: temporaries left: %s" % temporaries(FS)[:4])


def main():
    enter_namespace()
    if os.path.exists(WORK):
        shutil.rmtree(WORK)
    os.makedirs(FS)
    fs_reset(1 << 40)  # 77 here, before any work, when no tmpfs can be mounted
    if MODE == "commands":
        make_inputs()
        command_cases()
        stdout_cases()
    elif MODE in ("train", "pp"):
        train_cases(MODE == "pp")
    else:
        print("unknown mode " + MODE)
        sys.exit(2)
    subprocess.run(["umount", FS])
    print("disk full %s: %d checks, %d failed" % (MODE, COUNT[0], len(FAILED)))
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
