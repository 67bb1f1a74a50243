"""hostile_lib.py — the bookkeeping the hostile-input tests share (tests/runtime/cli/hostile_inputs.py,
hostile_shapes.py): each check counted and its failure kept, the words of a sanitizer report or a crash, and a
snapshot of a work folder to tell which paths a refused command touched."""
import os

FAILED = []
COUNT = [0]
SAN = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "internal error", "assertion", "Segmentation fault")


def note(ok, msg):
    COUNT[0] += 1
    if not ok:
        print("FAIL  " + msg)
        FAILED.append(msg)


def snapshot(work):
    """Every path under work with its type, size and mtime (what 'touched' means here)."""
    snap = {}
    for root, dirs, files in os.walk(work):
        for n in dirs + files:
            p = os.path.join(root, n)
            st = os.lstat(p)
            # a folder's own mtime changes when an entry comes and goes beside an output (X.tmp.PID):
            # its entries are compared instead
            isdir = os.path.isdir(p) and not os.path.islink(p)
            snap[p] = (st.st_mode >> 12, 0 if isdir else st.st_size, 0 if isdir else st.st_mtime_ns)
    return snap


def under(p, roots):
    return any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots)


def sanitizer_env(src, extra=None):
    """The environment a command under test runs in: a sanitizer build checks leaks too (a refusal frees what it
    allocated). Open MPI keeps memory of its own at exit, suppressed by library (tests/support/lsan.supp), which needs
    the full stacks of the slow unwinder (its plugins are unloaded before the leak check, so a short stack names no
    library)."""
    e = dict(os.environ)
    e.setdefault("ASAN_OPTIONS", "detect_leaks=1:fast_unwind_on_malloc=0")
    e.setdefault("LSAN_OPTIONS", "print_suppressions=0:suppressions=" + os.path.join(src, "tests", "support", "lsan.supp"))
    if extra:
        e.update(extra)
    return e


def refused_run(name, work, run_it, must, outs=(), own=(), hidden_tmp=False):
    """run_it() -> (rc, out, err) must exit 1..125 with every word of `must` in its stderr, no sanitizer report,
    nothing changed under work outside `own` (and `outs`), and no path of `outs` left, nor outs' X.tmp.* (with
    hidden_tmp also .X.tmp*). Returns its stderr."""
    outs = [os.path.abspath(os.path.join(work, o)) for o in outs]
    own = [os.path.abspath(os.path.join(work, o)) for o in own] + outs
    before = snapshot(work)
    rc, out, err = run_it()
    after = snapshot(work)
    short = err.strip().replace("\n", " | ")[:400]
    note(1 <= rc <= 125, "%s: exit status %d, expected a refusal (1..125): %s" % (name, rc, short))
    bad = [s for s in SAN if s in err]
    note(not bad, "%s: %s on stderr: %s" % (name, bad, short))
    missing = [m for m in must if m not in err]
    note(not missing, "%s: the message does not name %s: %s" % (name, missing, short))
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p) and not under(p, own))
    note(not changed, "%s: touched outside its outputs: %s" % (name, changed[:5]))
    for o in outs:
        left = [o] if os.path.lexists(o) else []
        d, b = os.path.split(o)
        if os.path.isdir(d):
            left += [os.path.join(d, n) for n in os.listdir(d)
                     if n.startswith(b + ".tmp.") or (hidden_tmp and n.startswith(".%s.tmp" % b))]
        note(not left, "%s: partial output left: %s" % (name, left))
    if 1 <= rc <= 125 and not bad and not missing:
        print("ok    %s: %s" % (name, err.strip().splitlines()[-1][:160] if err.strip() else ""))
    return err


def works_run(name, run_it, expect_out=None):
    """run_it() -> (rc, out, err) must exit 0 with no sanitizer report (and expect_out in its stdout). Returns stdout."""
    rc, out, err = run_it()
    bad = [s for s in SAN if s in err]
    note(rc == 0 and not bad, "%s: exit %d, expected 0: %s" % (name, rc, err.strip()[-300:]))
    if expect_out is not None:
        note(expect_out in out, "%s: '%s' not in the output: %s" % (name, expect_out, out[:300]))
    if rc == 0 and not bad:
        print("ok    %s" % name)
    return out
