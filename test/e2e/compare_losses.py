#!/usr/bin/env python3
"""Compares the `step K loss X` lines of two dtc run outputs."""
import argparse
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
worst = max(abs(x[k] - y[k]) / max(abs(x[k]), 1e-30) for k in x)
print(f"{len(x)} steps, worst relative difference {worst:.2e}")
sys.exit(0 if worst <= a.rtol else 1)
