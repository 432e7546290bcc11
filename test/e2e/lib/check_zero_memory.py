#!/usr/bin/env python3
"""Checks the plan report's persistent memory per device against ZeRO's
accounting for every stage.

  check_zero_memory.py MODEL.mlir --mesh 64 --dp 64 --work DIR
                       [--precision f32|bf16-mixed] [--dtc dtc]

Compiles MODEL with `--strategy dp=D,zero=Z` for Z = 0..3 (Adam) and reads
`memory_bytes` from `--report`. With Psi the parameter count, N the
data-parallel degree and (p, g, o) the bytes per parameter of parameters,
gradients and optimizer state ((4, 4, 8) in f32; (2, 2, 12) in
bf16-mixed: bf16 weights and gradients, fp32 master weights and moments),
params + grads + optimizer must be exactly
  zero=0: (p + g + o) Psi          zero=1: (p + g + o/N) Psi
  zero=2: (p + (g + o)/N) Psi      zero=3: (p + g + o) Psi / N
and each category must be its own term. Prints one line per stage; exits 1
on any difference. Standard library only.
"""
import argparse
import json
import os
import subprocess
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--mesh", required=True)
    p.add_argument("--dp", type=int, required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--precision", default="f32")
    p.add_argument("--dtc", default="dtc")
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    per = {"f32": (4, 4, 8), "bf16-mixed": (2, 2, 12), "fp16-mixed": (2, 2, 12)}[a.precision]
    n = a.dp
    failed = False
    for zero in range(4):
        report = os.path.join(a.work, f"zero{zero}.json")
        cmd = [a.dtc, "compile", a.model, "--mesh", a.mesh, "--strategy", f"dp={n},zero={zero}",
               "--precision", a.precision, "-o", os.path.join(a.work, f"zero{zero}.dtc"),
               "--report", report,
               # The report's byte counts are the point, not running it: the
               # activations of batch 64 x 2048 tokens fit no real device.
               "--device-memory", "16TiB"]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            print(f"FAILED: {' '.join(cmd)}\n{proc.stdout}")
            return 1
        with open(report) as f:
            r = json.load(f)
        psi = r["params"]
        m = r["memory_bytes"]
        pb, gb, ob = per
        want = {
            0: (pb, gb, ob),
            1: (pb, gb, ob / n),
            2: (pb, gb / n, ob / n),
            3: (pb / n, gb / n, ob / n),
        }[zero]
        got = (m["params"] / psi, m["grads"] / psi, m["optimizer"] / psi)
        total = sum(got)
        ok = all(abs(x - y) <= 1e-9 * max(y, 1) for x, y in zip(got, want))
        failed |= not ok
        print(f"zero={zero}: {'ok' if ok else 'FAIL'}: params+grads+optimizer = {total:.6g} Psi "
              f"(params {got[0]:.6g}, grads {got[1]:.6g}, optimizer {got[2]:.6g}; "
              f"expected {want[0]:.6g}, {want[1]:.6g}, {want[2]:.6g})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
