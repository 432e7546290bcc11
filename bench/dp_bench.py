#!/usr/bin/env python3
"""Parallelism benchmark: throughput per plan and the plan report's numbers
against the runtime's own measurements, side by side.

  bench/dp_bench.py [--plans 1,4:dp=4,4:tp=4,2x2:dp=2,tp=2] [--steps 30]
                    [--model gpt|llama] [--layers 2 --hidden 128 --heads 4
                    --seq 128 --batch 16 --vocab 256]

Plans are `MESH[:STRATEGY]` separated by spaces or ';' (a mesh alone is data
parallel over all its devices). For each plan it compiles the same generated
model (`dtc compile --report`), trains it on the GPL text (`dtc run --log
--stats`, first 5 steps dropped as warm-up) and prints:
  - tokens/s and the speed-up over the first plan (on a machine with fewer
    cores than ranks this measures overhead, not scaling);
  - memory per device by category: the report (compile-time plan) vs what
    the runtime's allocator handed out (high-water; slots are 64-byte
    aligned, and collective staging is its own category);
  - collective bytes each device sends per step, per kind and per
    communicator: the report (from the emitted program and the runtime's
    algorithms) vs what the communicators counted while sending. Exits 1 if
    any of these differ.
"""
import argparse
import json
import os
import re
import sys
import tempfile

from benchlib import ROOT, sh  # noqa: E402
KINDS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "shift"]


def devices(mesh):
    n = 1
    for part in mesh.split("x"):
        n *= int(part)
    return n


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plans", default="1;4:dp=4;4:tp=4;2x2:dp=2,tp=2",
                   help="MESH[:STRATEGY][|--FLAG=VALUE,...] items separated by ';' or "
                        "spaces (the flags after '|' go to dtc compile)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--model", choices=["gpt", "llama"], default="gpt")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--dtc", default=os.path.join(ROOT, "build", "bin", "dtc"))
    a = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="dtc-bench-")
    model = os.path.join(work, "model.mlir")
    tokens = os.path.join(work, "tokens")
    sh([sys.executable, os.path.join(ROOT, "examples", "gen_model.py"), a.model,
        "--layers", str(a.layers), "--hidden", str(a.hidden), "--heads", str(a.heads),
        "--seq", str(a.seq), "--batch", str(a.batch), "--vocab", str(a.vocab), "-o", model])
    sh([sys.executable, os.path.join(ROOT, "examples", "char_tokens.py"),
        "/usr/share/common-licenses/GPL-3", "-o", tokens])

    rows = []
    for plan in [x for x in re.split(r"[;\s]+", a.plans) if x]:
        plan_part, _, flags = plan.partition("|")
        mesh, _, strategy = plan_part.partition(":")
        strategy = strategy or f"dp={devices(mesh)}"
        extra = []
        for flag in [f for f in flags.split(",") if f]:
            extra += flag.split("=", 1)
        tag = re.sub(r"[^A-Za-z0-9]+", "_", plan)
        art, report, log, stats = (os.path.join(work, f"{tag}.{ext}")
                                   for ext in ("dtc", "report.json", "log.jsonl", "stats.json"))
        sh([a.dtc, "compile", model, "--mesh", mesh, "--strategy", strategy,
            "--report", report, "-o", art] + extra)
        sh([a.dtc, "run", art, "--steps", str(a.steps), "--data", tokens, "--log", log,
            "--stats", stats])
        steps = [json.loads(line) for line in open(log)][5:]
        tps = sum(s["tokens_per_s"] for s in steps) / len(steps)
        step_time = sum(s["step_time_s"] for s in steps) / len(steps)
        label = f"{mesh}:{strategy}" + (f" {' '.join(extra)}" if extra else "")
        rows.append((label, tps, step_time, json.load(open(report)),
                     json.load(open(stats))))

    print(f"{a.model}: layers={a.layers} hidden={a.hidden} heads={a.heads} seq={a.seq} "
          f"batch={a.batch} vocab={a.vocab}, {rows[0][3]['params']} parameters, {a.steps} "
          f"steps (5 warm-up dropped), {os.cpu_count()} cores\n")
    width = max(len(r[0]) for r in rows)
    print(f"{'plan':>{width}} {'tokens/s':>10} {'step ms':>9} {'speed-up':>9}")
    for plan, tps, step_time, _, _ in rows:
        print(f"{plan:>{width}} {tps:>10.0f} {step_time * 1e3:>9.1f} {tps / rows[0][1]:>8.2f}x")

    print("\nmemory per device, bytes: report vs allocated (runtime high-water)")
    print(f"{'plan':>{width}} {'category':>12} {'report':>12} {'allocated':>12} {'ratio':>7}")
    mapping = {"params": "param", "grads": "grad", "optimizer": "optimizer",
               "activations": "activation"}
    for plan, _, _, report, stats in rows:
        measured = stats["memory_bytes"]
        for key, cat in mapping.items():
            r, m = report["memory_bytes"][key], measured.get(cat, 0)
            print(f"{plan:>{width}} {key:>12} {r:>12} {m:>12} {r / m if m else float('nan'):>7.3f}")
        # The report's slot bytes are unaligned; staging, workspace and the
        # peak are what the runtime allocates (MemoryPlan.h).
        for key, r in [("staging", report["memory_bytes"]["staging"]),
                       ("workspace", report["memory_bytes"]["workspace"]),
                       ("total", report["memory_bytes"]["peak_per_device"])]:
            m = measured.get(key, 0)
            print(f"{plan:>{width}} {key:>12} {r:>12} {m:>12} {r / m if m else float('nan'):>7.3f}")

    print("\ncollective bytes sent per device per step: report vs counted by the communicators")
    print(f"{'plan':>{width}} {'comm':>6} {'kind':>14} {'calls':>6} {'report':>12} {'counted':>12}  ")
    differ = False
    for plan, _, _, report, stats in rows:
        lines = [("all", kind, stats["collectives_per_step"][kind]["calls"],
                  report["comm_bytes"][kind], stats["collectives_per_step"][kind]["sent_bytes"])
                 for kind in KINDS]
        by_comm = stats.get("collectives_per_step_by_comm", {})
        for comm in sorted(by_comm):
            for kind in KINDS:
                lines.append((comm, kind, by_comm[comm][kind]["calls"],
                              report.get("comm_bytes_by_comm", {}).get(comm, {}).get(kind, 0),
                              by_comm[comm][kind]["sent_bytes"]))
        for comm, kind, calls, r, m in lines:
            if calls == 0 and r == 0 and m == 0:
                continue
            mark = "" if r == m else "  DIFFER"
            differ |= r != m
            print(f"{plan:>{width}} {comm:>6} {kind:>14} {calls:>6} {r:>12} {m:>12}{mark}")
    if differ:
        print("\nreport and counted bytes differ")
        return 1
    print("\nreport and counted bytes agree for every plan, kind and communicator")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
