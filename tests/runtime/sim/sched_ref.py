#!/usr/bin/env python3
"""sched_ref.py — an independent Python reading of docs/scheduler.md "Tasks, hints and dispatch modes" and
"The simulator's semantics" (one chunk per rank), checked
against `rrfp-mm sim --json` on random duration files.

Written from the design text, not from runtime/sim/sim.c: hints are rebuilt from their definitions; fixed
and fixed-sync are computed by relaxation (each stage advances whenever the times it needs are known,
no event queue); ready steps a global clock over the distinct event times and lets every idle stage
take its smallest-ranked eligible task after all completions at that time. Makespan, lower_bound,
efficiency and bubble must agree to 1e-9 relative (the same sums in a possibly different order).

Usage: sched_ref.py path/to/rrfp-mm [trials]
"""
import json
import os
import random
import subprocess
import sys
import tempfile


# ---- hints (docs/scheduler.md; zb-h1 as Megatron-DeepSpeed's ZeroBubbleH1Pipeline) --------------
def hint(name, P, M, r, split):
    out = []

    def bw(m):
        out.append(("B", m))
        if split:
            out.append(("W", m))

    if name == "gpipe":
        out += [("F", m) for m in range(M)]
        for m in range(M):
            bw(m)
    elif name == "1f1b" or (name == "zb-h1" and not split):
        w = min(P - 1 - r, M)
        out += [("F", m) for m in range(w)]
        b = 0
        for f in range(w, M):
            out.append(("F", f))
            bw(b)
            b += 1
        for m in range(b, M):
            bw(m)
    elif name == "zb-h1":
        f = b = w = 0
        for _ in range(min(P - r - 1, M)):
            out.append(("F", f)); f += 1
        for _ in range(r):
            if f == M:
                break
            out += [("F", f), ("B", b)]; f += 1; b += 1
        while f < M:
            out += [("F", f), ("B", b), ("W", w)]; f += 1; b += 1; w += 1
        while b < M:
            out += [("B", b), ("W", w)]; b += 1; w += 1
        while w < M:
            out.append(("W", w)); w += 1
    elif name == "bf":
        for m in range(M):
            bw(m)
        out += [("F", m) for m in range(M)]
    elif name == "bfw":
        out += [("B", m) for m in range(M)] + [("F", m) for m in range(M)]
        if split:
            out += [("W", m) for m in range(M)]
    assert len(out) == M * (3 if split else 2), (name, len(out))
    return out


def megatron_interleaved(P, M, V, r, split):
    """Megatron-LM forward_backward_pipelining_with_interleaving: get_schedule_table with
    microbatch_group_size_per_vp_stage = P, warm-up (P - r - 1) * 2 + (V - 1) * P clamped to the total,
    then one forward and one backward per step, then the remaining backwards; the backward walks the
    table with chunk V - 1 - c. Tasks are (kind, mb, chunk)."""
    table = []
    for lo in range(0, M, P):
        hi = min(lo + P, M) if lo + P < M else M
        table += [(m, c) for c in range(V) for m in range(lo, hi)]
    total = M * V
    warm = min((P - r - 1) * 2 + (V - 1) * P, total)
    out = []

    def fwd(k):
        m, c = table[k]
        out.append(("F", m, c))

    def bwd(k):
        m, c = table[k]
        out.append(("B", m, V - 1 - c))
        if split:
            out.append(("W", m, V - 1 - c))

    for k in range(warm):
        fwd(k)
    for k in range(total - warm):
        fwd(k + warm)
        bwd(k)
    for k in range(total - warm, total):
        bwd(k)
    return out


# ---- the V hints, ported from torch.distributed.pipelining's schedules.py (ScheduleZBVZeroBubble and
# ScheduleDualPipeV, _calculate_single_rank_operations), in stage terms: chunk 0 of rank r is stage r,
# chunk 1 is stage 2P-1-r. An overlapped (F, full backward) pair runs as F then B W; a full backward is
# B then W. Tasks are (kind, mb, chunk).
def torch_zbv(P, M, r):
    n = max(2 * P - 1, M)
    acts = []
    f0 = f1 = b0 = b1 = 0
    for _ in range(2 * (P - r) - 1):
        acts.append(("F", f0, 0)); f0 += 1
    for _ in range(r):
        acts.append(("F", f1, 1)); f1 += 1
        acts.append(("F", f0, 0)); f0 += 1
    for _ in range(P - r):
        acts += [("F", f1, 1), ("B", b1, 1), ("W", b1, 1)]; f1 += 1; b1 += 1
    while f1 < f0 or f0 < n:
        if f0 < n:
            acts.append(("F", f0, 0)); f0 += 1
        acts += [("B", b0, 0), ("W", b0, 0)]; b0 += 1
        acts += [("F", f1, 1), ("B", b1, 1), ("W", b1, 1)]; f1 += 1; b1 += 1
    w0, w1 = b0, b1
    for _ in range(r):
        acts.append(("B", b0, 0)); b0 += 1
        acts.append(("B", b1, 1)); b1 += 1
    for _ in range(P - r):
        acts.append(("B", b0, 0)); b0 += 1
        acts.append(("W", w0, 0)); w0 += 1
    while w1 < b1:
        acts.append(("W", w1, 1)); w1 += 1
    while w0 < b0:
        acts.append(("W", w0, 0)); w0 += 1
    return [a for a in acts if a[1] < M]


def torch_dualpipev(P, M, r):
    acts, cnt, wq = [], {}, []

    def add(c, kind):  # kind F, B (backward input), FB (full backward)
        key = (c, "F") if kind == "F" else (c, "B")
        m = cnt.get(key, 0)
        cnt[key] = m + 1
        if kind == "F":
            acts.append(("F", m, c))
        elif kind == "FB":
            acts.extend([("B", m, c), ("W", m, c)])
        else:
            acts.append(("B", m, c))
            wq.append((c, m))

    def pending_w():
        if wq:
            c, m = wq.pop(0)
            acts.append(("W", m, c))

    for _ in range((P - r - 1) * 2):
        add(0, "F")
    for _ in range(r + 1):
        add(0, "F"); add(1, "F")
    for _ in range(P - r - 1):
        add(1, "B"); pending_w(); add(1, "F")
    for _ in range(M - 2 * P + r + 1):
        add(0, "F"); add(1, "FB")   # overlapped (or, on rank P-1's first, F then full backward)
        add(1, "F"); add(0, "FB")
    for _ in range(P - r - 1):
        add(1, "FB")
        add(1, "F"); add(0, "FB")
    zb = False
    for i in range(r + 1):
        if i == (r + 1) // 2 and r % 2 == 1:
            zb = True
        add(1, "B" if zb else "FB")
        if i == (r + 1) // 2 and r % 2 == 0:
            zb = True
        add(0, "B" if zb else "FB")
    for _ in range(P - r - 1):
        pending_w()
        add(0, "B" if zb else "FB")
    for _ in range(r + 1):
        pending_w()
    return acts


def stage_of(P, s, c, vshape):
    return (s if c == 0 else 2 * P - 1 - s) if vshape else c * P + s


def owner_of(P, u, vshape):
    if vshape:
        return (u, 0) if u < P else (2 * P - 1 - u, 1)
    return (u % P, u // P)


def chunk_of(task):
    return task[2] if len(task) > 2 else 0


def dur(d, s, task):
    return d[task[0]][s][task[1]] / d.get("_V", 1)


def neighbour(P, s, task, V, vshape, step):
    """(stage, task) of task (s, task)'s kind on the virtual stage step (+1 / -1) from its own in the forward order,
    or None (past either end, or not a forward / backward)."""
    k, m, c = task[0], task[1], chunk_of(task)
    if k not in ("F", "B"):
        return None
    u = stage_of(P, s, c, vshape) + step
    if not 0 <= u < P * V:
        return None
    rk, ck = owner_of(P, u, vshape)
    t = (k, m) if V == 1 else (k, m, ck)
    return (rk, t)


def producer(P, s, task, V=1, vshape=False):
    """(stage, task) whose message task (s, task) needs, or None (virtual stage v = c * P + s, or the V)."""
    return neighbour(P, s, task, V, vshape, -1 if task[0] == "F" else 1)


def consumer(P, s, task, V=1, vshape=False):
    return neighbour(P, s, task, V, vshape, 1 if task[0] == "F" else -1)


# ---- fixed and fixed-sync by relaxation -----------------------------------------------------------
def run_fixed(d, orders, sync, V=1, vs=False):
    P, L = d["stages"], d.get("latency", 0)
    n = len(orders[0])
    pos = {(s, t): i for s in range(P) for i, t in enumerate(orders[s])}
    comp = [[None] * n for _ in range(P)]   # compute finish
    free = [[None] * n for _ in range(P)]   # time the stage can start its next task
    start = [[None] * n for _ in range(P)]
    arrival = {}                            # (stage, consumer task) -> arrival time
    nxt = [0] * P
    progress = True
    while progress:
        progress = False
        for s in range(P):
            while nxt[s] < n:
                i = nxt[s]
                t = orders[s][i]
                if start[s][i] is None:
                    prev_free = 0.0 if i == 0 else free[s][i - 1]
                    if prev_free is None:
                        break
                    pr = producer(P, s, t, V, vs)
                    if pr is not None and (s, t) not in arrival:
                        break
                    start[s][i] = max(prev_free, arrival[(s, t)]) if pr else prev_free
                    comp[s][i] = start[s][i] + dur(d, s, t)
                    progress = True
                # free time: after the compute, and (fixed-sync) after the send completes
                c = consumer(P, s, t, V, vs)
                if c is None:
                    free[s][i] = comp[s][i]
                elif not sync:
                    arrival[c] = comp[s][i] + L
                    free[s][i] = comp[s][i]
                else:
                    ds, dt = c
                    j = pos[c]
                    post = 0.0 if j == 0 else comp[ds][j - 1]   # posted when the task before it is computed
                    if post is None:
                        break
                    done = max(comp[s][i], post)
                    arrival[c] = done + L
                    free[s][i] = done
                nxt[s] += 1
                progress = True
    if any(x < n for x in nxt):
        return None
    return max(comp[s][i] for s in range(P) for i in range(n))


# ---- ready on a global clock ----------------------------------------------------------------------
def run_ready(d, orders, caps, V=1, vs=False):
    P, L = d["stages"], d.get("latency", 0)
    n = len(orders[0])
    finish = {}      # (s, task) -> finish time
    started = set()
    running = [None] * P   # (finish time, task)
    times = {0.0}
    t = 0.0
    done = 0
    while done < P * n:
        # completions at or before t are visible; then every idle stage chooses
        for s in range(P):
            if running[s] and running[s][0] <= t:
                running[s] = None
                done += 1
        for s in range(P):
            if running[s]:
                continue
            # in flight: microbatches whose first-chunk F started and first-chunk B has not finished
            def first(k, m):
                return (k, m) if V == 1 else (k, m, 0)
            inflight = sum(1 for (ss, tk) in started if ss == s and tk[0] == "F" and chunk_of(tk) == 0
                           and not ((s, first("B", tk[1])) in finish and finish[(s, first("B", tk[1]))] <= t))
            for task in orders[s]:
                if (s, task) in started:
                    continue
                k, m = task[0], task[1]
                pre = {"B": "F", "W": "B"}.get(k)
                if pre:
                    pt = (s, (pre,) + tuple(task[1:]))
                    if not (pt in finish and finish[pt] <= t):
                        continue
                pr = producer(P, s, task, V, vs)
                if pr and not (pr in finish and finish[pr] + L <= t):
                    continue
                if k == "F" and chunk_of(task) == 0 and inflight >= caps[s] and inflight > 0:
                    continue
                started.add((s, task))
                f = t + dur(d, s, task)
                finish[(s, task)] = f
                running[s] = (f, task)
                times.add(f)
                c = consumer(P, s, task, V, vs)
                if c:
                    times.add(f + L)
                break
        later = [x for x in times if x > t]
        if not later:
            if done < P * n and all(r is None for r in running):
                return None
            if not later:
                break
        t = min(later)
    return max(finish.values())


def lower_bound(d):
    P, M, L = d["stages"], d["microbatches"], d.get("latency", 0)
    F, B = d["F"], d["B"]
    W = d.get("W") or [[0.0] * M for _ in range(P)]
    lb = 0.0
    for s in range(P):
        h = min(sum(F[x][m] for x in range(s)) for m in range(M)) + s * L
        t = min(sum(B[x][m] for x in range(s)) for m in range(M)) + s * L
        fb = sum(F[s][m] + B[s][m] for m in range(M))
        fbw = sum(F[s][m] + B[s][m] + W[s][m] for m in range(M))
        lb = max(lb, h + fb + t, h + fbw)
    for m in range(M):
        lb = max(lb, sum(F[s][m] for s in range(P)) + sum(B[s][m] for s in range(P)) + 2 * (P - 1) * L + W[0][m])
    return lb


def chunk0_peak(order):
    """The most forwards of chunk 0 in flight at once in one rank's order."""
    cur = best = 0
    for (k, m, c) in order:
        if c == 0 and k in "FB":
            cur += 1 if k == "F" else -1
            best = max(best, cur)
    return best


def check_makespans(exe, path, d, orders, hint, V, vs, label, where):
    """fixed's and ready's makespans (cap 1x: each rank's chunk-0 peak of its order) from `rrfp-mm sim` on the durations
    in path, hint over V chunks (vs: the V layout), against the reference's; (runs compared, mismatches)."""
    checked = fails = 0
    for mode in ("fixed", "ready"):
        out = subprocess.run([exe, "sim", "--durations", path, "--mode", mode, "--hint", hint,
                              "--chunks", str(V), "--cap", "1x", "--json"], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"FAIL {label} {mode}: {out.stderr.strip()}")
            fails += 1
            continue
        got = json.loads(out.stdout)["makespan"]
        if mode == "fixed":
            want = run_fixed(d, orders, False, V, vs)
        else:
            want = run_ready(d, orders, [chunk0_peak(o) for o in orders], V, vs)
        checked += 1
        if want is None or abs(got - want) > 1e-9 * max(1.0, want):
            print(f"FAIL {label} {mode} {where}: makespan {got} != reference {want}")
            fails += 1
    return checked, fails


def main():
    exe = sys.argv[1]
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    rng = random.Random(20261122)
    fails = checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for trial in range(trials):
            P, M = rng.randint(1, 5), rng.randint(1, 7)
            split = rng.random() < 0.5
            lat = rng.choice([0.0, 0.0, 0.1, 0.37])
            # durations on a 1/8 grid half the time (exact ties between events), else continuous
            def r():
                return rng.randint(1, 24) / 8 if trial % 2 == 0 else rng.uniform(0.1, 3.0)
            d = {"stages": P, "microbatches": M, "latency": lat,
                 "F": [[r() for _ in range(M)] for _ in range(P)],
                 "B": [[r() for _ in range(M)] for _ in range(P)]}
            if split:
                d["W"] = [[r() for _ in range(M)] for _ in range(P)]
            path = os.path.join(tmp, f"d{trial}.json")
            with open(path, "w") as f:
                json.dump(d, f)
            work = sum(sum(map(sum, d[k])) for k in ("F", "B", "W") if k in d)
            lb = lower_bound(d)
            for name in ("gpipe", "1f1b", "zb-h1", "bf", "bfw"):
                orders = [hint(name, P, M, s, split) for s in range(P)]
                for mode in ("fixed-sync", "fixed", "ready"):
                    if mode != "ready" and name in ("bf", "bfw"):
                        continue
                    for cap in ([None] if mode != "ready" else [None, 1, 2]):
                        args = [exe, "sim", "--durations", path, "--mode", mode, "--hint", name, "--json"]
                        if cap:
                            args += ["--cap", str(cap)]
                        out = subprocess.run(args, capture_output=True, text=True)
                        if out.returncode != 0:
                            print(f"FAIL {name} {mode} cap {cap}: exit {out.returncode}: {out.stderr.strip()}")
                            fails += 1
                            continue
                        got = json.loads(out.stdout)
                        if mode == "ready":
                            caps = [cap if cap else P - s for s in range(P)]
                            want = run_ready(d, orders, caps)
                        else:
                            want = run_fixed(d, orders, mode == "fixed-sync")
                        checked += 1
                        exp = {"makespan": want, "lower_bound": lb, "efficiency": lb / want,
                               "bubble": 1 - work / (P * want)}
                        for k, v in exp.items():
                            if abs(got[k] - v) > 1e-9 * max(1.0, abs(v)):
                                print(f"FAIL trial {trial} {name} {mode} cap {cap}: {k} {got[k]!r} != reference {v!r}"
                                      f" (file {json.dumps(d)})")
                                fails += 1
                                break
        # interleaved-1f1b: the hint grid against Megatron's table, and fixed / ready makespans on
        # virtual stages (each rank's durations split evenly over its V chunks, --chunks V).
        for trial in range(max(4, trials // 4)):
            P, V = rng.randint(2, 4), rng.randint(2, 3)
            M = P * rng.randint(1, 3)
            split = trial % 2 == 1
            lat = rng.choice([0.0, 0.25])
            d = {"stages": P, "microbatches": M, "latency": lat,
                 "F": [[rng.randint(1, 16) / 4 for _ in range(M)] for _ in range(P)],
                 "B": [[rng.randint(1, 16) / 4 for _ in range(M)] for _ in range(P)]}
            if split:
                d["W"] = [[rng.randint(1, 16) / 4 for _ in range(M)] for _ in range(P)]
            path = os.path.join(tmp, f"i{trial}.json")
            with open(path, "w") as f:
                json.dump(d, f)
            d["_V"] = V
            orders = [megatron_interleaved(P, M, V, s, split) for s in range(P)]
            out = subprocess.run([exe, "sim", "--durations", path, "--mode", "fixed", "--hint", "interleaved-1f1b",
                                  "--chunks", str(V), "--grid"], capture_output=True, text=True)
            rows = [l.split()[1:] for l in out.stdout.splitlines() if l.strip().startswith("r")][:P]
            for s_ in range(P):
                want = [f"{c * P + s_}{k}{m}" for (k, m, c) in orders[s_]]
                checked += 1
                if rows[s_] != want:
                    print(f"FAIL interleaved P={P} V={V} M={M} rank {s_}:\n  got  {rows[s_]}\n  want {want}")
                    fails += 1
            c, f_ = check_makespans(exe, path, d, orders, "interleaved-1f1b", V, False, "interleaved", f"P={P} V={V} M={M}")
            checked, fails = checked + c, fails + f_
        # zbv and dualpipev: the grid against the port of torch's orders, and fixed / ready makespans on the
        # V layout (two chunks per rank, each rank's durations split evenly over them, split backward).
        for trial in range(max(4, trials // 4)):
            P = rng.randint(1, 4)
            M = 2 * P + rng.randint(0, 3)
            lat = rng.choice([0.0, 0.25])
            q = lambda: rng.randint(1, 16) / 4
            d = {"stages": P, "microbatches": M, "latency": lat,
                 "F": [[q() for _ in range(M)] for _ in range(P)], "B": [[q() for _ in range(M)] for _ in range(P)],
                 "W": [[q() for _ in range(M)] for _ in range(P)]}
            path = os.path.join(tmp, f"v{trial}.json")
            with open(path, "w") as f:
                json.dump(d, f)
            d["_V"] = 2
            for name, build in (("zbv", torch_zbv), ("dualpipev", torch_dualpipev)):
                orders = [build(P, M, s_) for s_ in range(P)]
                out = subprocess.run([exe, "sim", "--durations", path, "--mode", "fixed", "--hint", name,
                                      "--chunks", "2", "--grid"], capture_output=True, text=True)
                rows = [l.split()[1:] for l in out.stdout.splitlines() if l.strip().startswith("r")][:P]
                for s_ in range(P):
                    want = [f"{stage_of(P, s_, c, True)}{k}{m}" for (k, m, c) in orders[s_]]
                    checked += 1
                    if len(rows) <= s_ or rows[s_] != want:
                        print(f"FAIL {name} P={P} M={M} rank {s_}:\n  got  {rows[s_] if len(rows) > s_ else out.stderr}"
                              f"\n  want {want}")
                        fails += 1
                c, f_ = check_makespans(exe, path, d, orders, name, 2, True, name, f"P={P} M={M}")
                checked, fails = checked + c, fails + f_
    print(f"sched_ref: {checked} runs compared, {fails} mismatches")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
