"""io_faults.py — the write failures a full disk cannot produce (disk_full.py covers ENOSPC), under every command
that writes (docs/reliability.md "Nothing lost on write errors"): fsync failing with EIO, close failing with EIO (NFS
reports write-back errors there), rename failing (EXDEV, EACCES, EIO), mkdir and opendir failing (EACCES), and a
short write (fewer bytes than asked, no error). The faults come from tests/support/faultio.c, preloaded.

Each command is first run with room to spare and the injector tracing its calls: the paths it fsyncs, closes,
renames, creates and writes under its output are the targets (one per role: shard 3 stands for shard 7), and the
trace itself is checked: every folder a rename made a new name in is fsync'd after it (generate: the answers file's
folder after the file's fsync), what makes the output durable when the command returns 0 (docs/reliability.md
"What is durable when a command returns 0"). Then one run per (call, target) with that call failing there once:

  - the fault landed (the injector's log says so; a fault that never fired fails the case);
  - exit 1..125, no sanitizer report; stderr names the output (or the faulted path) and the errno's text;
    generate's summary ("N answers ... in FILE") is not printed;
  - no temporary left; the inputs unchanged; the output absent, or whole (a failure after the last rename: the
    files and sizes of the run with room), never partial; generate's answers file: whole lines, and --resume
    completes it once the fault is gone;
  - a short write: the writer writes the rest; exit 0 and the output of the run with room.

train: a run whose checkpoint of step 4 meets each fault (the temporary folder's mkdir, a tensor file's or
state.json's fsync / close / rename / short write, the folder's rename to step-N, the checkpoints folder's fsync after
it): exit 1 naming the cause, no half checkpoint, no temporary, and once the fault is gone the last checkpoint
resumes and the run ends bit for bit as the one with room (disk_full.py's train_case); the same for the run folder's
own files (the lock's pwrite, run.json and recipe.ini at the start, metrics.jsonl's fsync before a checkpoint and its
close, rank-0.json at the end); the trace shows metrics.jsonl fsync'd before each step folder's rename. A
resume from step 2 whose new step-4 cannot be renamed over the old one puts the old one back, whole; when the
put-back fails too, the error names the .old.PID folder that holds it. pp: the same for a 2-rank pipeline where rank
1's tensor file fsync fails, or rank 0's rename of the step folder: both ranks stop.

Usage: io_faults.py RRFP_MM SRC_DIR WORK_DIR MODE FAULTIO_SO   (MODE: commands, train, pp; exit 0 = every check passed)"""
import os
import re
import shutil
import sys

LIB = os.path.abspath(sys.argv[5]) if len(sys.argv) > 5 else ""
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import disk_full as df  # noqa: E402  (reads RRFP_MM SRC_DIR WORK_DIR MODE from sys.argv)
from hostile_lib import note, snapshot, SAN, FAILED, COUNT  # noqa: E402

TRACE = os.path.join(df.WORK, "calls.log")
LOG = os.path.join(df.WORK, "faults.log")
# the calls a target is taken from, each with the errnos it fails with (a list: one per target, in turn)
KINDS = {"mkdir": ["EACCES"], "opendir": ["EACCES"], "write": [None], "pwrite": [None], "fsync": ["EIO"],
         "close": ["EIO"],
         "rename": ["EXDEV", "EACCES", "EIO"]}
TEXT = {"EIO": os.strerror(5), "EXDEV": os.strerror(18), "EACCES": os.strerror(13)}


def fault_env(call, path, err, nth=1, count=1):
    e = {"LD_PRELOAD": LIB, "RRFP_FAULT_CALL": call, "RRFP_FAULT_PATH": path, "RRFP_FAULT_NTH": str(nth),
         "RRFP_FAULT_COUNT": str(count), "RRFP_FAULT_LOG": LOG}
    if err:
        e["RRFP_FAULT_ERRNO"] = err
    return e


def landed():
    """The injector's log lines of the last run (then cleared)."""
    if not os.path.exists(LOG):
        return []
    lines = open(LOG).read().splitlines()
    os.unlink(LOG)
    return lines


def traced(run_it):
    """Run with the injector tracing; the (call, path) pairs it saw, in order (rename: the new name's pair too)."""
    if os.path.exists(TRACE):
        os.unlink(TRACE)
    r = run_it({"LD_PRELOAD": LIB, "RRFP_FAULT_TRACE": TRACE})
    calls = []
    for l in open(TRACE).read().splitlines() if os.path.exists(TRACE) else []:
        c, _, rest = l.partition(" ")
        calls.append((c, rest))
    return r, calls


def target(path):
    """The injector's RRFP_FAULT_PATH (a glob) for a traced path: its temporaries' pids (X.tmp.PID,
    .step-N.tmp.PID, .step-N.tmp.shards.PID) any number."""
    return re.sub(r"\.tmp\.(shards\.)?\d+", r".tmp.\1*", path)


def targets(calls, under, keep=None, fold=True):
    """(call, RRFP_FAULT_PATH, errno) for each call kind at each distinct path under `under` (a rename: its new
    name's), one per path role (fold: digits folded, shard 3 stands for shard 7); keep: a test on the path."""
    seen, out, turn = set(), [], {k: 0 for k in KINDS}
    for c, rest in calls:
        if c not in KINDS:
            continue
        p = rest.split(" ")[-1] if c == "rename" else rest
        if not (p == under or p.startswith(under + "/")) or (keep and not keep(p)):
            continue
        key = (c, re.sub(r"\d+", "#", target(p)) if fold else target(p))
        if key in seen:
            continue
        seen.add(key)
        errs = KINDS[c]
        out.append((c, target(p), errs[turn[c] % len(errs)]))
        turn[c] += 1
    return out


def shape(o):
    """What a whole output is: a file's size, or a folder's relative names with sizes."""
    if os.path.isfile(o):
        return os.path.getsize(o)
    return sorted((os.path.relpath(os.path.join(d, f), o), os.path.getsize(os.path.join(d, f)))
                  for d, _, fs in os.walk(o) for f in fs)


# ------------------------------------------------------------------------------------------------ commands

def command_cases():
    for name, out, argv, kind in df.command_list():
        o = os.path.join(df.FS, out)

        def reset():
            shutil.rmtree(df.FS, ignore_errors=True)
            os.makedirs(df.FS)
        reset()
        (rc, sout, err), calls = traced(lambda env: df.run(argv(o), env=env))
        note(rc == 0 and not [s for s in SAN if s in err], "%s traced: exit %d: %s" % (name, rc, err.strip()[-300:]))
        if rc != 0:
            continue
        whole = shape(o)
        complete = open(o, "rb").read() if kind == "answers" else None
        # durable when it returns 0: each folder that got a new name (a rename into it) is fsync'd after it
        # (generate: the answers file's folder, after the file's fsync)
        news = [(i, os.path.dirname(r.split(" ")[-1])) for i, (c, r) in enumerate(calls) if c == "rename" and
                r.split(" ")[-1].startswith(df.FS + "/")]
        if kind == "answers":
            synced = [i for i, (c, r) in enumerate(calls) if (c, r) == ("fsync", o)]
            note(synced, "%s: the answers file is never fsync'd" % name)
            news.append((max(synced) if synced else len(calls), df.FS))
        lost = sorted({d for i, d in news if ("fsync", d) not in calls[i:]})
        note(news and not lost, "%s: folders not fsync'd after a rename into them (not durable at exit 0): %s" %
             (name, lost or "no rename traced"))
        cases = targets(calls, df.FS)
        # (a write through stdio is not seen: its buffer's writes are the C library's own calls)
        want = {"fsync", "close"} | ({"rename"} if kind != "answers" else set())
        note({c for c, _, _ in cases} >= want, "%s: the trace lacks a call under its output (%s): %s" %
             (name, sorted(want), cases))
        for call, path, err_name in cases:
            reset()
            before = snapshot(df.IN)
            rc, sout, err = df.run(argv(o), env=fault_env(call, path, err_name))
            tag = "%s, %s %s %s" % (name, call, err_name or "short", path)
            hit = landed()
            note(len(hit) == 1, "%s: the fault did not land: %s" % (tag, hit))
            note(df.snapshot(df.IN) == before, "%s: an input changed" % tag)
            left = df.temporaries(df.FS)
            note(not left, "%s: temporaries left: %s" % (tag, left[:4]))
            if call in ("write", "pwrite"):  # a short write is no error: the writer writes the rest
                ok = rc == 0 and not [s for s in SAN if s in err] and shape(o) == whole
                note(ok, "%s: exit %d, output %s of %s: %s" % (tag, rc, "whole" if shape(o) == whole else "not whole",
                                                             o, err.strip()[-300:]))
                if ok:
                    print("ok    %s: exit 0, the output whole" % tag)
                continue
            named = o if o in err else (hit[0].split(" ")[2] if hit else o)
            df.failed_check(tag, rc, err, named, TEXT[err_name])
            if kind == "answers":
                note(not os.path.lexists(o) or df.whole_lines(o), "%s: the answers file holds a torn line" % tag)
                note(" answers (" not in err, "%s: the summary says the answers are written: %s" % (tag, err[-300:]))
                rc, sout, err = df.run(argv(o) + (["--resume"] if os.path.lexists(o) else []))
                note(rc == 0 and os.path.isfile(o) and open(o, "rb").read() == complete,
                     "%s: --resume once the fault is gone does not give the complete answers (exit %d): %s" %
                     (tag, rc, err.strip()[-300:]))
            else:
                note(not os.path.lexists(o) or shape(o) == whole, "%s: '%s' left partial under its final name" %
                     (tag, o))


# ------------------------------------------------------------------------------------------------ train

def train_cases(pp):
    steps, ranks, timeout = 4, (2 if pp else 1), (120 if pp else 60)
    run_dir = os.path.join(df.FS, "run")
    argv = [df.EXE, "train", df.RECIPE, "--set", "train.run_dir=" + run_dir, "--set", "train.steps=%d" % steps,
            "--set", "train.checkpoint_every=2", "--set", "optim.warmup=1", "--set", "train.log_every=1", "--set",
            "checkpoint.keep=0"]
    if pp:
        argv = ["timeout", "-s", "KILL", str(timeout), "mpirun", "--allow-run-as-root", "--oversubscribe", "-x",
                "OMP_NUM_THREADS=1", "-x", "LD_PRELOAD", "-x", "RRFP_FAULT_CALL", "-x", "RRFP_FAULT_PATH", "-x",
                "RRFP_FAULT_NTH", "-x", "RRFP_FAULT_ERRNO", "-x", "RRFP_FAULT_LOG", "-x", "RRFP_FAULT_TRACE",
                "-np", "2"] + argv + ["--set", "parallel.pp=2", "--set", "runtime.trace=true"]
    # mpirun -x of a variable not set is an error: every one is set (empty: the injector ignores it)
    blank = {k: "" for k in ("LD_PRELOAD", "RRFP_FAULT_CALL", "RRFP_FAULT_PATH", "RRFP_FAULT_NTH",
                             "RRFP_FAULT_ERRNO", "RRFP_FAULT_LOG", "RRFP_FAULT_TRACE")} if pp else {}
    os.environ.update(blank)
    shutil.rmtree(df.FS, ignore_errors=True)
    os.makedirs(df.FS)
    (rc, out, err), calls = traced(lambda env: df.run(argv, timeout=timeout, env=env))
    if rc != 0:
        print("FAIL  train with room: exit %d\n%s\n%s" % (rc, out[-2000:], err[-2000:]))
        sys.exit(1)
    ref_rows = [(df.json.loads(l)["step"], df.json.loads(l)["loss_hex"])
                for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    last = os.path.join(run_dir, "checkpoints", "step-%08d" % steps)
    ref_tensors = {f: df.st_tensors(os.path.join(last, f)) for f in sorted(os.listdir(last))
                   if f.endswith(".safetensors")}
    ck_root = os.path.join(run_dir, "checkpoints")
    # a checkpoint's steps' metrics rows are on the disk before it is: metrics.jsonl fsync'd (by the log rank) before
    # each step folder is renamed in, so a checkpoint that survives a power loss never lacks its rows
    mpath, synced, renamed = os.path.join(run_dir, "metrics.jsonl"), False, 0
    for c, rest in calls:
        if c == "fsync" and rest == mpath:
            synced = True
        elif c == "rename" and re.search(r"/checkpoints/step-\d+$", rest.split(" ")[-1]):
            renamed += 1
            note(synced, "train%s: %s renamed in before metrics.jsonl was fsync'd" % (" pp 2" if pp else "",
                                                                                      rest.split(" ")[-1]))
            synced = False
    note(renamed == steps // 2, "train: the trace shows %d checkpoint renames, expected %d" % (renamed, steps // 2))
    # the second checkpoint's writes: its temporary folder and what is in it, its rename to step-4; then the
    # checkpoints folder's fsync after that rename (the second of the run: RRFP_FAULT_NTH 2)
    cases = [(c, p, e, 1) for c, p, e in targets(calls, ck_root, lambda p: "step-00000004" in p, fold=False)
             if c != "opendir"]
    cases.append(("fsync", ck_root, "EIO", 2))
    if not pp:  # the run folder's own files: its lock, run.json and recipe.ini at the start, metrics.jsonl, rank-0.json
        # (the lock's close at exit is no write failure: it only names the holder, and the lock goes with the fd)
        cases += [(c, p, e, 1) for c, p, e in targets(calls, run_dir, lambda p: "/checkpoints" not in p, fold=False)
                  if c not in ("opendir", "mkdir") and p != run_dir and (c, p) != ("close", run_dir + "/.lock")]
    if pp:  # one rank's failure: rank 1's tensor file fsync, rank 0's rename of the step folder
        cases = [(c, p, e, n) for c, p, e, n in cases
                 if (c == "fsync" and "model.pp1" in p) or (c == "rename" and p.endswith("step-00000004"))]
        note(len(cases) == 2, "train pp 2: the trace lacks rank 1's fsync or the step folder's rename: %s" % cases)
    kinds = {c for c, _, _, _ in cases}
    # (the tensor files are written through stdio: no write of the engine's own to shorten)
    note(pp or kinds >= {"mkdir", "fsync", "close", "rename"},
         "train: the trace of the second checkpoint lacks a call kind: %s" % sorted(kinds))
    for call, path, err_name, nth in cases:
        shutil.rmtree(df.FS, ignore_errors=True)
        os.makedirs(df.FS)
        tag = "train%s, %s %s %s" % (" pp 2" if pp else "", call, err_name or "short", path)
        env = fault_env(call, path, err_name, nth)
        if call in ("write", "pwrite"):  # a short write: the run ends as the one with room
            rc, out, err = df.run(argv, timeout=timeout, env=env)
            note(len(landed()) == 1, "%s: the fault did not land" % tag)
            if rc == 0:
                print("ok    %s: exit 0" % tag)
            got = [(df.json.loads(l)["step"], df.json.loads(l)["loss_hex"])
                   for l in open(os.path.join(run_dir, "metrics.jsonl"))] if rc == 0 else None
            note(rc == 0 and got == ref_rows, "%s: exit %d: %s" % (tag, rc, err.strip()[-300:]))
            continue
        df.train_case(tag, argv, run_dir, ref_rows, ref_tensors, steps, timeout, ranks, TEXT[err_name], env)
        hit = landed()
        note(len(hit) >= 1, "%s: the fault did not land" % tag)
    if not pp:
        put_back(argv, run_dir, ref_tensors, steps, timeout)


def put_back(argv, run_dir, ref_tensors, steps, timeout):
    """A resume from step 2 replaces this run's own step-4: moved aside (.old.PID), the new one renamed in; that
    rename fails (the second rename naming step-4): the old step-4 is put back, whole, and nothing is left aside."""
    ck_root = os.path.join(run_dir, "checkpoints")
    last = os.path.join(ck_root, "step-%08d" % steps)
    shutil.rmtree(df.FS, ignore_errors=True)
    os.makedirs(df.FS)
    rc, out, err = df.run(argv, timeout=timeout)
    note(rc == 0, "put-back: the run with room: exit %d: %s" % (rc, err.strip()[-300:]))
    tag = "train, put-back: rename EIO of the new step-4 over the old one"
    rc, out, err = df.run(argv + ["--resume", os.path.join(ck_root, "step-00000002")], timeout=timeout,
                          env=fault_env("rename", last, "EIO", 2))
    hit = landed()
    note(len(hit) == 1 and ".tmp." in hit[0], "%s: the fault did not land on the new folder's rename: %s" % (tag, hit))
    df.failed_check(tag, rc, err, last, TEXT["EIO"])
    note(not df.temporaries(df.FS), "%s: temporaries left: %s" % (tag, df.temporaries(df.FS)[:4]))
    back = os.path.isdir(last) and {f: df.st_tensors(os.path.join(last, f)) for f in sorted(os.listdir(last))
                                    if f.endswith(".safetensors")} == ref_tensors
    note(back, "%s: the old step-4 is not back, whole, under its name" % tag)
    if back:
        print("ok    %s: the old step-4 is back" % tag)
    # and the put-back fails too (the third rename naming step-4): the error says where the old one is, whole
    tag = "train, put-back fails: rename EIO of the new step-4 and of the old one back"
    rc, out, err = df.run(argv + ["--resume", os.path.join(ck_root, "step-00000002")], timeout=timeout,
                          env=fault_env("rename", last, "EIO", 2, 2))
    hit = landed()
    note(len(hit) == 2 and ".old." in hit[1], "%s: the faults did not land on both renames: %s" % (tag, hit))
    df.failed_check(tag, rc, err, last, TEXT["EIO"])
    aside = [n for n in os.listdir(ck_root) if n.startswith(".old.")]
    named = len(aside) == 1 and "nor put this run's earlier checkpoint of step 4 back from '%s'" % \
        os.path.join(ck_root, aside[0]) in err
    note(named, "%s: the error does not name where the old step-4 is (%s): %s" % (tag, aside, err.strip()[-400:]))
    kept = named and {f: df.st_tensors(os.path.join(ck_root, aside[0], f)) for f in sorted(os.listdir(
        os.path.join(ck_root, aside[0]))) if f.endswith(".safetensors")} == ref_tensors
    note(kept, "%s: the old step-4 is not whole where the error says" % tag)
    if kept:
        print("ok    %s: named, whole, at %s" % (tag, aside[0]))


def main():
    if not os.path.isfile(LIB):
        print("FAIL  no fault injector at '%s' (RRFP_FAULTIO_SO)" % LIB)
        sys.exit(1)
    if os.path.exists(df.WORK):
        shutil.rmtree(df.WORK)
    os.makedirs(df.FS)
    if df.MODE == "commands":
        df.make_inputs()
        command_cases()
    elif df.MODE in ("train", "pp"):
        train_cases(df.MODE == "pp")
    else:
        print("unknown mode " + df.MODE)
        sys.exit(2)
    print("io faults %s: %d checks, %d failed" % (df.MODE, COUNT[0], len(FAILED)))
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
