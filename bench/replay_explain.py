# replay_explain.py BIN OUT HOP_S [SCALE]: what the replay's remainder is (bench/README.md, Replay).
# OUT: bench/replay.sh's output (SAVE=FILE keeps it). Each row is re-simulated with its durations x its
# busy/work (the waits' overshoot) and the latency raised by HOP_S seconds per hop (the measured extra
# cost of a message + wake-up), regenerating the same files (seed 1, M = 2P; the calibrated kinds with their recipe's
# generator, bench/replay.sh's `# calibrated:` line); it prints measured /
# re-simulated next to measured / simulated. BIN: rrfp-mm; SCALE: bench/replay.sh's (default 0.05).
import json, subprocess, sys, os, statistics, tempfile
BIN, OUT, HOP = sys.argv[1], sys.argv[2], float(sys.argv[3])
SCALE = float(sys.argv[4]) if len(sys.argv) > 4 else 0.05
T = tempfile.mkdtemp()
cur = None; res = {}
def gen(P, kind, split):
    f = f"{T}/{P}-{kind}-{split}.json"
    if not os.path.exists(f):
        if kind.startswith("calibrated-"):  # bench/replay.sh's calibrated kinds: seed 1, M = the recipe's
            a = [BIN, "sim", "--calibrated", recipe[kind], "--stages", str(P), "--workload", kind[len("calibrated-"):],
                 "--seed", "1", "--dump", f, "--json"]
        else:
            a = [BIN, "sim", "--stages", str(P), "--microbatches", str(2 * P), "--kind", kind, "--seed", "1", "--dump", f, "--json"]
        if split: a.insert(-3, "--split-backward")
        subprocess.run(a, check=True, capture_output=True)
    return json.load(open(f))
def unit(P, kind):  # seconds per unit of the file: SCALE, or for a calibrated kind SCALE / its mean forward (whole file)
    if not kind.startswith("calibrated-"): return SCALE
    F = [x for r in gen(P, kind, False)["F"] for x in r]
    return SCALE * len(F) / sum(F)
recipe = {}
for line in open(OUT):
    f = line.split()
    if line.startswith("# calibrated: "):  # the generator's line before a calibrated block names its recipe and workload
        recipe["calibrated-" + f[3]] = f[2].rstrip(",")
    if line.startswith("## P="):
        cur = (int(f[1][2:]), f[2][5:]); res[cur] = []; continue
    if not cur or len(f) < 8 or f[0] not in ("fixed-sync", "fixed", "ready", "lookahead", "adaptive"): continue
    mode, hint, cap, meas, sim, ratio, waits, bw = f[:8]
    P, kind = cur
    d = gen(P, kind, hint != "1f1b")
    k = float(bw)
    e = dict(d)
    for key in ("F", "B", "W"):
        if key in e: e[key] = [[x * k for x in row] for row in e[key]]
    e["latency"] = d["latency"] + HOP / unit(P, kind)
    fn = f"{T}/x.json"; json.dump(e, open(fn, "w"))
    a = [BIN, "sim", "--durations", fn, "--mode", mode, "--hint", hint, "--json"]
    if cap != "-": a += ["--cap", cap]
    if mode in ("lookahead", "adaptive"): a += ["--estimate-error", "0.2", "--estimate-seed", "1"]
    if mode == "adaptive": a += ["--keep-order"]  # as rrfp-bench-replay's simulated column (the replay keeps the order)
    r = json.loads(subprocess.run(a, check=True, capture_output=True, text=True).stdout)
    resim = r["makespan"] * unit(P, kind)
    res[cur].append((mode, hint, cap, float(meas), float(sim), float(ratio), resim))
for key, rows in res.items():
    if not rows: continue
    print(f"P={key[0]} {key[1]}: median measured/sim {statistics.median(r[5] for r in rows):.3f}, "
          f"median measured/re-sim {statistics.median(r[3] / r[6] for r in rows):.3f}, "
          f"within 5% of re-sim {sum(abs(r[3] / r[6] - 1) <= 0.05 for r in rows)}/{len(rows)}")
    for r in rows:
        print(f"   {r[0]:10} {r[1]:6} {r[2]:5} meas {r[3]:8.3f} sim {r[4]:8.3f} ({r[5]:.3f}) re-sim {r[6]:8.3f} ({r[3] / r[6]:.3f})")
