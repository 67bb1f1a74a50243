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
