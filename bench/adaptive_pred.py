#!/usr/bin/env python3
"""adaptive_pred.py — how well adaptive's one-step plan predicts ready against fixed (the choice bench/adaptive.sh checks).

Reads the per-case TSV that `rrfp-bench-adaptive --all` writes on stderr (one step per case, --steps 1)
and prints: the cases above the target (MODE / min(fixed, ready) > 1.005) with what the plan predicted;
the error of the plan's predicted log(ready / fixed) against the true one (bias, RMS, 5th and 95th
percentiles); and how many cases have fixed and ready within 0.5% of each other (any choice meets the
target there), 0.5-3% apart (the plan must be right) and further apart.

Usage: rrfp-bench-adaptive --all ... 2> cases.tsv; bench/adaptive_pred.py cases.tsv [more.tsv ...]
"""
import math
import sys


def main(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                x = line.rstrip("\n").split("\t")
                if len(x) != 14:
                    sys.exit(f"{path}:{n}: expected 14 tab-separated fields (rrfp-bench-adaptive --all), got {len(x)}")
                rows.append(x)
    if not rows:
        sys.exit("no cases")
    errs, over, zone = [], [], [0, 0, 0]
    for x in rows:
        f, r, a, ratio = map(float, x[6:10])
        pr, pf = float(x[10]), float(x[12])
        gap = abs(math.log(f / r))
        zone[0 if gap <= math.log(1.005) else 1 if gap <= math.log(1.03) else 2] += 1
        if pr > 0 and pf > 0:
            errs.append(math.log(pr / pf) - math.log(r / f))
        if ratio > 1.005:
            over.append(x)
    print(f"{len(rows)} cases; fixed and ready within 0.5%: {zone[0]}, 0.5-3% apart: {zone[1]}, further: {zone[2]}")
    print(f"{len(over)} above 1.005:")
    for x in over:
        f, r, a, ratio = map(float, x[6:10])
        pr, pf = float(x[10]), float(x[12])
        pred = f"predicted ready/fixed {pr / pf:.4f}" if pr > 0 and pf > 0 else "no prediction"
        print(f"  {x[0]} P={x[1]} M={x[2]} {x[3]} {x[4]} seed {x[5]}: {ratio:.4f}, ran {x[13]}, "
              f"fixed/ready {f / r:.4f}, {pred}")
    if errs:
        errs.sort()
        m = sum(errs) / len(errs)
        rms = math.sqrt(sum(e * e for e in errs) / len(errs))
        p5, p95 = errs[len(errs) // 20], errs[(len(errs) * 19) // 20]
        print(f"plan's error on log(ready / fixed) over {len(errs)} cases with both predicted: bias {m * 100:+.2f}%, "
              f"RMS {rms * 100:.2f}%, 5th .. 95th percentile {p5 * 100:+.2f}% .. {p95 * 100:+.2f}%")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    main(sys.argv[1:])
