#!/usr/bin/python3
"""targets.py BUILD_DIR [LABEL] — the build targets that the tests of LABEL (default asan) run, one per line.

`make build-asan` builds only these (the sanitizer build's selection, tests/asan/asan.cmake): every
executable a selected test names on its command line or in its environment, read from the commands ctest
runs (BUILD_DIR/CTestTestfile.cmake, written by cmake's generate step), and kept when BUILD_DIR has a target
of that name (BUILD_DIR/CMakeFiles/NAME.dir). A test whose script reaches an executable that is not on its
command line fails in that build with "No such file" (every test of the selection passes its executables as
arguments today). Exit 1 when the label selects no test or no target.
"""
import os
import re
import sys


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    build = os.path.realpath(argv[0])
    label = argv[1] if len(argv) > 1 else "asan"
    testfile = os.path.join(build, "CTestTestfile.cmake")
    try:
        text = open(testfile, encoding="utf-8").read()
    except OSError as e:
        print("targets.py: cannot read %s: %s (configure the build first)" % (testfile, e), file=sys.stderr)
        return 1
    # add_test([=[NAME]=] "cmd" "arg" ...) and set_tests_properties([=[NAME]=] PROPERTIES ... LABELS "a;b" ...)
    # are one line each; a test's lines are its command and its properties (ENVIRONMENT included)
    lines = {}
    for line in text.splitlines():
        m = re.match(r"(add_test|set_tests_properties)\(\[=\[(.*?)\]=\]", line)
        if m:
            lines.setdefault(m.group(2), []).append(line)
    selected = []
    for name, ls in lines.items():
        for line in ls:
            m = re.search(r' LABELS "([^"]*)"', line) if line.startswith("set_tests_properties") else None
            if m and label in m.group(1).split(";"):
                selected.append(name)
    if not selected:
        print("targets.py: no test labelled '%s' in %s" % (label, testfile), file=sys.stderr)
        return 1
    path = re.compile(re.escape(build) + r"/([A-Za-z0-9_.+-]+)")
    found = set()
    for name in selected:
        for line in lines[name]:
            for m in path.finditer(line):
                if os.path.isdir(os.path.join(build, "CMakeFiles", m.group(1) + ".dir")):
                    found.add(m.group(1))
    if not found:
        print("targets.py: the tests labelled '%s' name no target of %s" % (label, build), file=sys.stderr)
        return 1
    print("\n".join(sorted(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
