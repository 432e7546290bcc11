#!/usr/bin/env python3
"""The plan report's memory per category against what the runtime's
allocator measured, for several plans of one model.

  check_memory.py MODEL.mlir --work DIR --plan MESH[:STRATEGY] ...
                  [--rtol 0.1] [--drop "A B FACTOR" ...] [-- extra compile flags]

For each plan: `dtc compile --report`, then `dtc run --steps 1 --stats`
(every rank's allocator; the file holds the maximum over ranks). Each of
params, grads, optimizer and activations must agree within --rtol. `--drop "A B F"` also
checks that plan B's measured parameter memory is plan A's divided by F
(within 5%): ZeRO-3 really stores 1/N of the parameters. Prints one line
per plan; exits 1 on any failure. Standard library only.
"""
import argparse
import json
import os
import subprocess
import tempfile
import sys

PAIRS = [("params", "param"), ("grads", "grad"), ("optimizer", "optimizer"),
         ("activations", "activation")]


def run(cmd):
    with tempfile.TemporaryDirectory(prefix="dtc-") as tmp:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=dict(os.environ, TMPDIR=tmp))
    if proc.returncode != 0:
        raise SystemExit(f"FAILED ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}")
    return proc.stdout


def main(argv):
    extra = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--work", required=True)
    p.add_argument("--plan", action="append", required=True)
    p.add_argument("--rtol", type=float, default=0.1)
    p.add_argument("--drop", action="append", default=[])
    p.add_argument("--dtc", default="dtc")
    a = p.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    measured = {}
    failed = False
    for plan in a.plan:
        mesh, _, strategy = plan.partition(":")
        tag = plan.replace(":", "-").replace(",", "-").replace("=", "")
        artifact = os.path.join(a.work, tag + ".dtc")
        report = os.path.join(a.work, tag + ".report.json")
        stats = os.path.join(a.work, tag + ".stats.json")
        cmd = [a.dtc, "compile", a.model, "--mesh", mesh, "-o", artifact, "--report", report]
        if strategy:
            cmd += ["--strategy", strategy]
        run(cmd + extra)
        run([a.dtc, "run", artifact, "--steps", "1", "--stats", stats])
        with open(report) as f:
            want = json.load(f)["memory_bytes"]
        with open(stats) as f:
            got = json.load(f)["memory_bytes"]
        measured[plan] = got
        parts, bad = [], []
        for rkey, skey in PAIRS:
            w, g = want[rkey], got[skey]
            rel = abs(g - w) / max(w, 1)
            parts.append(f"{rkey} {w} vs {g} ({rel:.1%})")
            if rel > a.rtol:
                bad.append(rkey)
        failed |= bool(bad)
        print(f"plan {plan}: {'FAIL ' + ','.join(bad) if bad else 'ok'}: " + "; ".join(parts))
    for drop in a.drop:
        base, other, factor = drop.split()
        ratio = measured[base]["param"] / max(measured[other]["param"], 1)
        ok = abs(ratio / float(factor) - 1) <= 0.05
        failed |= not ok
        print(f"params {base} / {other}: {'ok' if ok else 'FAIL'}: {ratio:.3f} (expected {factor})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
