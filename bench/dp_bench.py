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
  - memory per device by category: report (compile-time plan), measured
    (runtime allocation) and the usual accounting from the parameter count
    P alone (f32 Adam: params 4P, grads 4P, optimizer 8P: "16 bytes per
    parameter"), with report / expected;
  - all-reduce bytes sent per device per step: report, the runtime's
    count, and the ring formula 2(n-1)/n D for D = the gradients and the
    loss (4P + 4 bytes), with report / expected.
The report and the runtime account the same emitted plan, so they agree
by construction; the expected columns are what says the plan is right.
"""
import argparse
import json
import os
import shutil
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
    try:
        return run(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(a, work):
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

    def ratio(r, e):
        return f"{r / e:7.2f}" if e else ("   1.00" if r == 0 else "    inf")

    params = rows[0][3]["params"]
    expected = {"params": 4 * params, "grads": 4 * params, "optimizer": 8 * params}
    print(f"\nmemory per device, bytes: report, measured, expected (16 bytes per parameter, Adam f32)")
    print(f"{'mesh':>6} {'category':>12} {'report':>12} {'measured':>12} {'expected':>12} {'rep/exp':>7}")
    mapping = {"params": "param", "grads": "grad", "optimizer": "optimizer",
               "activations": "activation"}
    for mesh, _, _, report, stats in rows:
        measured = stats["memory_bytes"]
        for key, cat in mapping.items():
            r, m = report["memory_bytes"][key], measured.get(cat, 0)
            e = expected.get(key)
            print(f"{mesh:>6} {key:>12} {r:>12} {m:>12} {'-' if e is None else e:>12} "
                  f"{'    n/a' if e is None else ratio(r, e)}")
        r, m = report["memory_bytes"]["total"], measured["total"]
        print(f"{mesh:>6} {'total':>12} {r:>12} {m:>12} {'-':>12} {'    n/a'}")

    print(f"\nall-reduce bytes sent per device per step: report, measured, expected "
          f"2(n-1)/n (4P + 4)")
    print(f"{'mesh':>6} {'report':>12} {'measured':>12} {'expected':>12} {'rep/exp':>7}")
    for mesh, _, _, report, stats in rows:
        n = devices(mesh)
        r = report["comm_bytes"]["all_reduce"]
        m = stats["collectives_per_step"]["all_reduce"]["wire_bytes"]
        e = 2 * (n - 1) / n * (4 * params + 4)
        print(f"{mesh:>6} {r:>12.0f} {m:>12} {e:>12.0f} {ratio(r, e)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
