#!/usr/bin/env python3
"""Data-parallel benchmark: throughput per mesh and the plan report's
predictions against the runtime's measurements, side by side.

  bench/dp_bench.py [--meshes 1,2,4] [--steps 30] [--model gpt|llama]
                    [--layers 2 --hidden 128 --heads 4 --seq 128 --batch 16]

For each mesh it compiles a generated model (`dtc compile --report`), trains
it on the GPL text (`dtc run --log --stats`, first 5 steps dropped as
warm-up) and prints:
  - tokens/s and the speed-up over the first mesh (on a machine with fewer
    cores than ranks this measures overhead, not scaling);
  - memory per device by category: report (compile-time plan) vs measured
    (runtime allocation), and their ratio (1.00 = the report is exact);
  - all-reduce bytes per device per step: report (ring formula) vs measured.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stdout}")
    return proc.stdout


def devices(mesh):
    n = 1
    for part in mesh.split("x"):
        n *= int(part)
    return n


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--meshes", default="1,2,4")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--model", choices=["gpt", "llama"], default="gpt")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--dtc", default=os.path.join(ROOT, "build", "bin", "dtc"))
    a = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="dtc-bench-")
    model = os.path.join(work, "model.mlir")
    tokens = os.path.join(work, "tokens")
    sh([sys.executable, os.path.join(ROOT, "examples", "gen_model.py"), a.model,
        "--layers", str(a.layers), "--hidden", str(a.hidden), "--heads", str(a.heads),
        "--seq", str(a.seq), "--batch", str(a.batch), "-o", model])
    sh([sys.executable, os.path.join(ROOT, "examples", "char_tokens.py"),
        "/usr/share/common-licenses/GPL-3", "-o", tokens])

    rows = []
    for mesh in a.meshes.split(","):
        tag = mesh.replace("x", "_")
        art, report, log, stats = (os.path.join(work, f"{tag}.{ext}")
                                   for ext in ("dtc", "report.json", "log.jsonl", "stats.json"))
        sh([a.dtc, "compile", model, "--mesh", mesh, "--strategy", f"dp={devices(mesh)}",
            "--report", report, "-o", art])
        sh([a.dtc, "run", art, "--steps", str(a.steps), "--data", tokens, "--log", log,
            "--stats", stats])
        steps = [json.loads(line) for line in open(log)][5:]
        tps = sum(s["tokens_per_s"] for s in steps) / len(steps)
        step_time = sum(s["step_time_s"] for s in steps) / len(steps)
        rows.append((mesh, tps, step_time, json.load(open(report)), json.load(open(stats))))

    print(f"{a.model}: layers={a.layers} hidden={a.hidden} seq={a.seq} batch={a.batch}, "
          f"{rows[0][3]['params']} parameters, {a.steps} steps (5 warm-up dropped), "
          f"{os.cpu_count()} cores\n")
    print(f"{'mesh':>6} {'tokens/s':>10} {'step ms':>9} {'speed-up':>9}")
    for mesh, tps, step_time, _, _ in rows:
        print(f"{mesh:>6} {tps:>10.0f} {step_time * 1e3:>9.1f} {tps / rows[0][1]:>8.2f}x")

    print(f"\nmemory per device, bytes: report vs measured")
    print(f"{'mesh':>6} {'category':>12} {'report':>12} {'measured':>12} {'ratio':>7}")
    mapping = {"params": "param", "grads": "grad", "optimizer": "optimizer",
               "activations": "activation"}
    for mesh, _, _, report, stats in rows:
        measured = stats["memory_bytes"]
        for key, cat in mapping.items():
            r, m = report["memory_bytes"][key], measured.get(cat, 0)
            print(f"{mesh:>6} {key:>12} {r:>12} {m:>12} {r / m if m else float('nan'):>7.2f}")
        r, m = report["memory_bytes"]["total"], measured["total"]
        print(f"{mesh:>6} {'total':>12} {r:>12} {m:>12} {r / m if m else float('nan'):>7.2f}")

    print(f"\nall-reduce bytes sent per device per step: report (ring 2(n-1)/n D) vs measured")
    print(f"{'mesh':>6} {'report':>12} {'measured':>12} {'ratio':>7}")
    for mesh, _, _, report, stats in rows:
        r = report["comm_bytes"]["all_reduce"]
        m = stats["collectives_per_step"]["all_reduce"]["wire_bytes"]
        ratio = f"{r / m:7.2f}" if m else "    n/a"
        print(f"{mesh:>6} {r:>12.0f} {m:>12} {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
