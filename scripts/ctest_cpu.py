#!/usr/bin/python3
"""ctest_cpu.py — the CPU seconds of every test of a build folder, to see where CI's time goes.

The CI machine has 2 cores and the suite keeps both busy, so its wall time follows the tests' CPU time, not
their wall time (which depends on what else runs). This runs each test's command as ctest would (its
ENVIRONMENT, ENVIRONMENT_MODIFICATION and WORKING_DIRECTORY) and prints, tab-separated: name, CPU seconds
(user + system of the command and every process it waited for: ranks under mpirun, a script's children), wall
seconds, exit status.

    scripts/ctest_cpu.py BUILD_DIR [-L LABEL] [-R REGEX] [-j JOBS] > times.tsv
    sort -t$'\\t' -k2 -rn times.tsv | head -30

Fixtures and RESOURCE_LOCKs are not honoured (none of the suite's tests needs them for this).
"""
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time


def modify_env(env, entry):
    """Apply one ENVIRONMENT_MODIFICATION entry, NAME=OP:VALUE, as ctest does."""
    name, _, rest = entry.partition("=")
    op, _, value = rest.partition(":")
    cur = env.get(name)
    if op == "reset":
        if name in os.environ:
            env[name] = os.environ[name]
        else:
            env.pop(name, None)
    elif op == "set":
        env[name] = value
    elif op == "unset":
        env.pop(name, None)
    elif op == "string_append":
        env[name] = (cur or "") + value
    elif op == "string_prepend":
        env[name] = value + (cur or "")
    elif op == "path_list_append":
        env[name] = cur + os.pathsep + value if cur else value
    elif op == "path_list_prepend":
        env[name] = value + os.pathsep + cur if cur else value
    elif op == "cmake_list_append":
        env[name] = cur + ";" + value if cur else value
    elif op == "cmake_list_prepend":
        env[name] = value + ";" + cur if cur else value
    else:
        raise SystemExit("ctest_cpu.py: unknown ENVIRONMENT_MODIFICATION operation %r" % entry)


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    build, args = argv[0], argv[1:]
    label = args[args.index("-L") + 1] if "-L" in args else None
    rx = re.compile(args[args.index("-R") + 1]) if "-R" in args else None
    jobs = int(args[args.index("-j") + 1]) if "-j" in args else 2
    info = json.loads(subprocess.check_output(["ctest", "--show-only=json-v1"], cwd=build))
    work = queue.Queue()
    for t in info["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        if props.get("DISABLED") or (label and label not in props.get("LABELS", [])):
            continue
        if rx and not rx.search(t["name"]):
            continue
        work.put((t["name"], t["command"], props))
    lock = threading.Lock()

    def worker():
        while True:
            try:
                name, cmd, props = work.get_nowait()
            except queue.Empty:
                return
            env = dict(os.environ)
            for e in props.get("ENVIRONMENT", []):
                k, _, v = e.partition("=")
                env[k] = v
            for e in props.get("ENVIRONMENT_MODIFICATION", []):
                modify_env(env, e)
            t0 = time.time()
            p = subprocess.Popen(cmd, cwd=props.get("WORKING_DIRECTORY", build), env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, status, ru = os.wait4(p.pid, 0)
            with lock:
                print("%s\t%.1f\t%.1f\t%d" % (name, ru.ru_utime + ru.ru_stime, time.time() - t0,
                                             os.waitstatus_to_exitcode(status)), flush=True)

    threads = [threading.Thread(target=worker) for _ in range(jobs)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
