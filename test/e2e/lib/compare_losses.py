#!/usr/bin/env python3
"""Compares the `step K loss X` lines of two dtc run outputs: every step's
relative difference must be <= --rtol. A NaN or Inf loss (dtc prints them
as nan, -nan, inf) fails, naming its step."""
import argparse
import math
import sys

p = argparse.ArgumentParser(description=__doc__)
p.add_argument("a")
p.add_argument("b")
p.add_argument("--rtol", type=float, default=1e-5)
a = p.parse_args()


def read(path):
    out = {}
    for line in open(path):
        parts = line.split()
        if len(parts) == 4 and parts[0] == "step" and parts[2] == "loss":
            out[int(parts[1])] = float(parts[3])
    return out


x, y = read(a.a), read(a.b)
if sorted(x) != sorted(y) or not x:
    sys.exit(f"steps differ: {sorted(x)} vs {sorted(y)}")
worst, failed = 0.0, False
for k in sorted(x):
    if not (math.isfinite(x[k]) and math.isfinite(y[k])):
        print(f"FAIL: step {k}: non-finite loss ({x[k]} vs {y[k]})")
        failed = True
        continue
    rel = abs(x[k] - y[k]) / max(abs(x[k]), 1e-30)
    worst = max(worst, rel)
    if not (rel <= a.rtol):
        print(f"FAIL: step {k}: loss {y[k]!r} vs {x[k]!r} (relative {rel:.2e} > {a.rtol})")
        failed = True
print(f"{len(x)} steps, worst relative difference {worst:.2e}")
sys.exit(1 if failed else 0)
