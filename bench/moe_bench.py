#!/usr/bin/env python3
"""Expert parallelism: a mixture-of-experts GPT on 4 CPU ranks under ep=1
(data parallelism: every rank holds and runs every expert), ep=2 (dp=2 x
ep=2) and ep=4, beside the dense GPT of the same active parameters, side by
side.

  bench/moe_bench.py [--experts 8] [--top-k 2] [--capacity-factor 1.25]
                     [--layers 2 --hidden 128 --heads 4 --ffn 256 --seq 128
                     --batch 16 --vocab 256] [--steps 20]

The dense model's MLP is top_k times as wide as one expert (--ffn): every
token meets the same number of weights in both. For each plan it compiles
(`dtc compile --report`), trains on the GPL text (`dtc run --log --stats`,
the first 5 steps dropped) and prints step time and tokens/s; memory per
rank, the report's peak against the runtime allocator's high-water, and
the parameters' share of it (the experts' weights divide by ep); and the
bytes each rank sends per step: moe_exchange (the report's estimate, every
slot kept and spread evenly, against what the routing really moved) and
the rest. On a machine with fewer cores than ranks the step times measure
overhead, not scaling.
"""
import argparse
import json
import os
import sys
import tempfile

from benchlib import ROOT, sh  # noqa: E402

PLANS = [("moe", "4", "dp=4"), ("moe", "2x2", "dp=2,ep=2"), ("moe", "4", "ep=4"),
         ("dense", "4", "dp=4")]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--capacity-factor", type=float, default=1.25)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=256)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dtc", default=os.path.join(ROOT, "build", "bin", "dtc"))
    a = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="dtc-moe-bench-")
    shape = ["--layers", str(a.layers), "--hidden", str(a.hidden), "--heads", str(a.heads),
             "--seq", str(a.seq), "--batch", str(a.batch), "--vocab", str(a.vocab)]
    gen = [sys.executable, os.path.join(ROOT, "examples", "gen_model.py"), "gpt"] + shape
    models = {"moe": os.path.join(work, "moe.mlir"), "dense": os.path.join(work, "dense.mlir")}
    sh(gen + ["--ffn", str(a.ffn), "--experts", str(a.experts), "--top-k", str(a.top_k),
              "--capacity-factor", str(a.capacity_factor), "-o", models["moe"]])
    sh(gen + ["--ffn", str(a.top_k * a.ffn), "-o", models["dense"]])
    tokens = os.path.join(work, "tokens")
    sh([sys.executable, os.path.join(ROOT, "examples", "char_tokens.py"),
        "/usr/share/common-licenses/GPL-3", "-o", tokens])

    rows = []
    for model, mesh, strategy in PLANS:
        tag = f"{model}_{strategy.replace(',', '_').replace('=', '')}"
        art, report, log, stats = (os.path.join(work, f"{tag}.{ext}")
                                   for ext in ("dtc", "report.json", "log.jsonl", "stats.json"))
        sh([a.dtc, "compile", models[model], "--mesh", mesh, "--strategy", strategy,
            "--report", report, "-o", art])
        sh([a.dtc, "run", art, "--steps", str(a.steps), "--data", tokens, "--log", log,
            "--stats", stats])
        steps = [json.loads(line) for line in open(log)][5:]
        rows.append({"plan": f"{model} {strategy}",
                     "tps": sum(s["tokens_per_s"] for s in steps) / len(steps),
                     "step": sum(s["step_time_s"] for s in steps) / len(steps),
                     "report": json.load(open(report)), "stats": json.load(open(stats))})

    print(f"gpt: layers={a.layers} hidden={a.hidden} heads={a.heads} seq={a.seq} "
          f"batch={a.batch} vocab={a.vocab}; moe: {a.experts} experts of width {a.ffn}, "
          f"top-{a.top_k}, capacity factor {a.capacity_factor}; dense: MLP width "
          f"{a.top_k * a.ffn}; 4 ranks, {a.steps} steps (5 warm-up dropped), "
          f"{os.cpu_count()} cores\n")
    print(f"{'plan':>16} {'params':>10} {'tokens/s':>9} {'step ms':>8} {'vs dense':>9} "
          f"{'peak MB':>8} {'alloc MB':>9} {'params MB':>10} {'exchange B':>11} "
          f"{'counted B':>10} {'other B':>10}")
    dense = rows[-1]
    for r in rows:
        report, stats = r["report"], r["stats"]
        sent = report["comm_bytes"]
        other = sum(v for k, v in sent.items() if k != "moe_exchange")
        counted = stats["collectives_per_step"].get("moe_exchange", {}).get("sent_bytes", 0)
        print(f"{r['plan']:>16} {report['params']:>10} {r['tps']:>9.0f} {r['step'] * 1e3:>8.1f} "
              f"{dense['step'] / r['step']:>8.2f}x "
              f"{report['memory_bytes']['peak_per_device'] / 1e6:>8.2f} "
              f"{stats['memory_bytes'].get('total', 0) / 1e6:>9.2f} "
              f"{report['memory_bytes']['params'] / 1e6:>10.2f} "
              f"{sent.get('moe_exchange', 0):>11} {counted:>10} {other:>10}")
    print("\nvs dense: the dense model's step time over the plan's (above 1: faster). "
          "exchange B: moe_exchange bytes per rank and step, the report's estimate; "
          "counted: what the routing moved (busiest rank); other B: every other "
          "collective's bytes in the report.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
