#!/usr/bin/env python3
"""Checks that training made progress: mean loss of the last K steps of a
`dtc run --log` file is at least --min-drop below the mean of the first K."""
import argparse
import json
import sys

p = argparse.ArgumentParser(description=__doc__)
p.add_argument("log")
p.add_argument("--window", type=int, default=10)
p.add_argument("--min-drop", type=float, required=True)
a = p.parse_args()
with open(a.log) as f:
    rows = [json.loads(line) for line in f if line.strip()]
for row in rows:
    for key in ("step", "loss", "step_time_s", "tokens_per_s"):
        if key not in row:
            sys.exit(f"{a.log}: line without '{key}': {row}")
losses = [row["loss"] for row in rows]
if len(losses) < 2 * a.window:
    sys.exit(f"{a.log}: only {len(losses)} steps")
first = sum(losses[:a.window]) / a.window
last = sum(losses[-a.window:]) / a.window
print(f"mean loss of the first {a.window} steps {first:.4f}, last {a.window} {last:.4f}, drop {first - last:.4f}")
sys.exit(0 if first - last >= a.min_drop else 1)
