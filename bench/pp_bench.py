#!/usr/bin/env python3
"""Pipeline benchmark: one model on 4 ranks (pp=4), every schedule, measured
step time beside the schedule's predicted bubble.

  bench/pp_bench.py [--steps 12] [--microbatches 8] [--model gpt|llama]
                    [--layers 8 --hidden 64 --heads 4 --seq 64 --batch 16]

For each schedule (gpipe, 1f1b, zb, interleaved with 2 virtual stages) it
compiles the model with `--mesh 4 --strategy pp=4` (`--report`), trains it
on the GPL text (`dtc run --log --stats`, the first 2 steps dropped as
warm-up) and prints:
  - the bubble of the emitted schedule (unit costs: F 1, B 1, W 1, B+W 2)
    and the step time the bubble alone predicts relative to 1f1b's
    ((1 - b_1f1b) / (1 - b)), beside the measured step time and its ratio
    to 1f1b's;
  - the first stage's activation memory: the runtime's measured peak and
    the micro-batches it held at once (GPipe: all M; 1F1B: P);
  - point-to-point bytes per device per step: report vs measured.
On a machine with fewer cores than ranks the ranks share cores and idle
ranks spin, so measured times show overheads more than bubbles.
"""
import argparse
import json
import os
import sys
import tempfile

from benchlib import ROOT, sh  # noqa: E402


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--model", choices=["gpt", "llama"], default="gpt")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--dtc", default=os.path.join(ROOT, "build", "bin", "dtc"))
    a = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="dtc-pp-bench-")
    model = os.path.join(work, "model.mlir")
    tokens = os.path.join(work, "tokens")
    sh([sys.executable, os.path.join(ROOT, "examples", "gen_model.py"), a.model,
        "--layers", str(a.layers), "--hidden", str(a.hidden), "--heads", str(a.heads),
        "--seq", str(a.seq), "--batch", str(a.batch), "-o", model])
    sh([sys.executable, os.path.join(ROOT, "examples", "char_tokens.py"),
        "/usr/share/common-licenses/GPL-3", "-o", tokens])

    plans = [("gpipe", []), ("1f1b", []), ("zb", []),
             ("interleaved", ["--virtual-stages", "2"])]
    rows = []
    for schedule, extra in plans:
        art, report, log, stats = (os.path.join(work, f"{schedule}.{ext}")
                                   for ext in ("dtc", "report.json", "log.jsonl", "stats.json"))
        sh([a.dtc, "compile", model, "--mesh", "4", "--strategy", "pp=4", "--microbatches",
            str(a.microbatches), "--schedule", schedule, "--report", report, "-o", art] + extra)
        sh([a.dtc, "run", art, "--steps", str(a.steps), "--data", tokens, "--log", log,
            "--stats", stats])
        steps = sorted(json.loads(line)["step_time_s"] for line in open(log))[:]
        measured = [json.loads(line)["step_time_s"] for line in open(log)][2:]
        measured.sort()
        median = measured[len(measured) // 2]
        rows.append((schedule + (" v=2" if extra else ""), json.load(open(report)), median,
                     json.load(open(stats))))

    report0 = rows[0][1]
    print(f"{a.model}: layers={a.layers} hidden={a.hidden} seq={a.seq} batch={a.batch}, "
          f"{report0['params']} parameters; pp=4, {a.microbatches} micro-batches; "
          f"{a.steps} steps (2 warm-up dropped, median); {os.cpu_count()} cores\n")
    base = next(r for r in rows if r[0] == "1f1b")
    b1, t1 = base[1]["bubble_fraction"], base[2]
    print(f"{'schedule':>15} {'bubble':>8} {'predicted':>10} {'step ms':>9} {'measured':>9} "
          f"{'stage-0 act. bytes':>19} {'held':>5} {'p2p report':>11} {'p2p meas.':>10}")
    for name, report, median, stats in rows:
        b = report["bubble_fraction"]
        print(f"{name:>15} {b:>8.4f} {(1 - b1) / (1 - b):>9.2f}x {median * 1e3:>9.1f} "
              f"{median / t1:>8.2f}x {stats['activation_peak_bytes']:>19} "
              f"{stats['microbatches_in_flight_peak']:>5} "
              f"{report['comm_bytes']['send_recv']:>11.0f} "
              f"{stats['collectives_per_step']['send_recv']['bytes']:>10}")
    print("\n(predicted and measured: step time relative to 1f1b; activation bytes and "
          "micro-batches held are the most over the ranks, which is the first stage)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
