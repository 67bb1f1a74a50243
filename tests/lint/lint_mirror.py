#!/usr/bin/env python3
"""lint_mirror.py SRC — tests/ mirrors the source tree (CONTRIBUTING.md "Tests"):

1. tests/ itself holds folders and README.md only.
2. Every folder under tests/ but the shared ones (support/, lint/, fuzz/, asan/, and what is below them) is a folder
   of the source tree (tests/runtime/sched/ for runtime/sched/).
3. Such a folder that holds tests (.c, .cu, .sh, .py, .js) registers them in the one .cmake beside them, named after
   the folder (tests/runtime/sched/sched.cmake), and holds no other .cmake.
4. The test named after a source file (test_Y.c where the source tree has a Y.c or Y.cu) sits in the mirror
   folder of that file (tests/engine/test_safetensors.c for engine/safetensors.c).
5. A folder's .cmake runs the files of its own folder and tests/support/ only (outside comments): a test lives beside
   the .cmake that registers it.
The script first proves on trees of its own that each rule fails what it should and passes a clean tree, so a broken
rule cannot pass. Exit 0: clean; 1: a finding (printed)."""
import os
import re
import shutil
import sys
import tempfile

SHARED = ("support", "lint", "fuzz", "asan")
SOURCE_TOPS = ("engine", "text", "vision", "data", "runtime")
TEST_EXT = (".c", ".cu", ".sh", ".py", ".js")


def source_files(src):
    """name without extension -> folders (relative) of the .c / .cu files of the source tree"""
    out = {}
    for top in SOURCE_TOPS:
        for dirpath, _, names in os.walk(os.path.join(src, top)):
            for n in names:
                if n.endswith((".c", ".cu")):
                    out.setdefault(os.path.splitext(n)[0], set()).add(os.path.relpath(dirpath, src))
    return out


def findings(src):
    out = []
    tests = os.path.join(src, "tests")
    if not os.path.isdir(tests):
        return ["no tests/ folder under %s" % src]
    for n in sorted(os.listdir(tests)):
        if os.path.isfile(os.path.join(tests, n)) and n != "README.md":
            out.append("tests/%s: a file at the top of tests/ (put it in the folder of what it tests, or tests/support/)" % n)
    sources = source_files(src)
    folders = 0
    for dirpath, dirs, names in os.walk(tests):
        rel = os.path.relpath(dirpath, tests)
        dirs.sort()
        if rel == ".":
            continue
        if rel.split(os.sep)[0] in SHARED:
            continue
        folders += 1
        if not os.path.isdir(os.path.join(src, rel)):
            out.append("tests/%s/: mirrors no folder of the source tree (there is no %s/)" % (rel, rel))
        cmakes = sorted(n for n in names if n.endswith(".cmake"))
        own = os.path.basename(rel) + ".cmake"
        if any(n.endswith(TEST_EXT) for n in names) and own not in cmakes:
            out.append("tests/%s/: tests without their %s beside them" % (rel, own))
        for c in cmakes:
            if c != own:
                out.append("tests/%s/%s: a .cmake not named after its folder (%s)" % (rel, c, own))
        for n in sorted(names):
            m = re.match(r"test_(\w+)\.c$", n)
            if m and m.group(1) in sources and rel not in sources[m.group(1)]:
                out.append("tests/%s/%s: the test of %s lives in tests/%s/" %
                           (rel, n, " / ".join(sorted(d + "/" + m.group(1) for d in sources[m.group(1)])),
                            sorted(sources[m.group(1)])[0]))
        if own in cmakes:
            with open(os.path.join(dirpath, own), encoding="utf-8") as f:
                code = "\n".join(line.split("#", 1)[0] for line in f.read().split("\n"))
            for p in sorted(set(re.findall(r"\btests/([\w./-]+\.\w+)", code))):
                d = os.path.dirname(p)
                if d != rel.replace(os.sep, "/") and not d.startswith("support"):
                    out.append("tests/%s/%s: runs tests/%s, which lives in another folder (register it there)" %
                               (rel, own, p))
    if folders == 0:
        out.append("no test folder found under %s/tests: the scan cannot check anything" % src)
    return out


def self_check():
    root = tempfile.mkdtemp()
    try:
        def tree(files):
            d = tempfile.mkdtemp(dir=root)
            for path, text in files.items():
                os.makedirs(os.path.join(d, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(d, path), "w", encoding="utf-8") as f:
                    f.write(text)
            return d
        clean = {"engine/safetensors.c": "", "runtime/sched/hints.c": "", "tests/README.md": "",
                 "tests/engine/engine.cmake": "add_test(NAME st COMMAND test_safetensors)\n"
                                             "# the reference of tests/data/ref.py\n"
                                             "add_test(NAME p COMMAND x ${S}/tests/engine/peer.py ${S}/tests/support/u.sh)\n",
                 "tests/engine/test_safetensors.c": "", "tests/engine/peer.py": "",
                 "tests/runtime/sched/sched.cmake": "", "tests/runtime/sched/test_sched.c": "",
                 "tests/support/check.h": "", "tests/lint/lint.cmake": "", "tests/fuzz/seeds/x/a.bin": ""}
        got = findings(tree(clean))
        if got:
            return "the scan flags a clean tree: %s" % got
        bad = [("a file at the top", {"tests/test_x.c": ""}),
               ("a folder mirroring nothing", {"tests/frob/frob.cmake": "", "tests/frob/test_a.c": ""}),
               ("tests without their .cmake", {"tests/runtime/sched/sched.cmake": None, "tests/runtime/sched/other.cmake": ""}),
               ("a test away from its source", {"tests/runtime/sched/test_safetensors.c": ""}),
               ("a .cmake running another folder's file",
                {"tests/runtime/sched/sched.cmake": "add_test(NAME x COMMAND bash ${S}/tests/engine/peer.py)\n"})]
        for why, change in bad:
            files = dict(clean)
            for k, v in change.items():
                if v is None:
                    files.pop(k)
                else:
                    files[k] = v
            if not findings(tree(files)):
                return "the scan misses %s" % why
        return None
    finally:
        shutil.rmtree(root)


def main():
    if len(sys.argv) != 2:
        print("usage: lint_mirror.py SRC")
        return 2
    why = self_check()
    if why:
        print("FAIL (self-check): " + why)
        return 1
    got = findings(sys.argv[1])
    if got:
        print("FAIL: tests/ does not mirror the source tree (CONTRIBUTING.md, Tests):")
        print("\n".join(got))
        return 1
    print("lint mirror: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
