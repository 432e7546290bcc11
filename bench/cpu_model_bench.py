#!/usr/bin/env python3
"""The cost model on this machine: predicted against measured step times of
many plans on CPU ranks, ranked side by side.

  bench/cpu_model_bench.py [--calibration FILE] [--recalibrate] [--steps 12]
                           [--repeats 2] [--only gpt|llama] [--meshes 2x2,8]
                           [--hidden 256] [--seq 128]

Uses the calibration `dtc calibrate` keeps for `--hw cpu` (or FILE, or runs
`dtc calibrate --ranks 1,2,4,8` first when there is none or with
--recalibrate). For each plan of a small GPT and a small LLaMA (4 layers,
4 heads, batch 16, --hidden and --seq: steps of 0.1-0.3 s, long enough that
4 and 8 ranks sharing 2 cores repeat a plan's time within a few per cent,
docs/cost-model.md) on each mesh
(data, tensor, pipeline parallelism and their mixes, ZeRO, sequence
parallelism, recomputation, micro-batches) it compiles with --report (the
prediction) and trains on synthetic data with `dtc run --log` (the
measurement: the median step time after the first two steps, the lowest of
--repeats runs, which run after one another through all plans: the
machine's other work only ever slows a run), then prints
every plan's predicted and measured time, their ratio and how far apart
its runs were, ranked by measured time, and per model and mesh Kendall's
tau between the two rankings. The
search issue asks for every plan within 10% and tau >= 0.8.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from benchlib import ROOT, sh  # noqa: E402

MODELS = ["gpt", "llama"]


def model_args(name, hidden, seq):
    return [name, "--layers", "4", "--hidden", str(hidden), "--heads", "4", "--seq", str(seq),
            "--vocab", "256", "--batch", "16"]
PLANS = {
    "2x2": ["dp=4", "dp=2,tp=2", "tp=4", "dp=2,pp=2 --microbatches 4", "pp=2,tp=2 --microbatches 4",
            "dp=4,zero=1", "dp=2,tp=2 --sequence-parallel", "dp=4 --remat full", "dp=4 --microbatches 4"],
    "8": ["dp=8", "tp=8", "pp=8 --microbatches 8", "dp=8,zero=3", "dp=8 --remat full"],
}


def kendall_tau(xs, ys):
    pairs = concordant = discordant = 0
    for i in range(len(xs)):
        for j in range(i + 1, len(xs)):
            s = (xs[i] - xs[j]) * (ys[i] - ys[j])
            pairs += 1
            concordant += s > 0
            discordant += s < 0
    return (concordant - discordant) / pairs if pairs else 1.0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtc", default=os.path.join(ROOT, "build", "bin", "dtc"))
    p.add_argument("--calibration", help="a dtc calibrate file (default: the --hw cpu cache)")
    p.add_argument("--recalibrate", action="store_true", help="run dtc calibrate first")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--repeats", type=int, default=2,
                   help="runs of every plan; the fastest run's median counts")
    p.add_argument("--only", choices=sorted(MODELS))
    p.add_argument("--meshes", default="2x2,8")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--seq", type=int, default=128)
    a = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="dtc-cpu-model-bench-")
    env = dict(os.environ)
    if a.calibration:
        cache = os.path.join(work, "cache")
        os.makedirs(cache)
        os.symlink(os.path.abspath(a.calibration), os.path.join(cache, "cpu-calibration.json"))
        env["DTC_CACHE_DIR"] = cache
    def hardware_source():
        """What --hw cpu plans with: the report's hw_profile.source."""
        probe = subprocess.run([a.dtc, "compile", os.path.join(ROOT, "examples", "models", "mlp.mlir"),
                                "--strategy", "dp=1", "--report", os.path.join(work, "probe.json"),
                                "-o", os.path.join(work, "probe.dtc")], env=env, capture_output=True, text=True)
        return json.load(open(os.path.join(work, "probe.json")))["hw_profile"].get("source", "") \
            if probe.returncode == 0 else ""
    source = hardware_source()
    if a.recalibrate or not source.startswith("calibrated"):
        print("calibrating (dtc calibrate --ranks 1,2,4,8) ...", file=sys.stderr, flush=True)
        sh([a.dtc, "calibrate", "--ranks", "1,2,4,8"] +
           (["-o", a.calibration] if a.calibration else []))
        source = hardware_source()
    plans = []
    for name in ([a.only] if a.only else sorted(MODELS)):
        model = os.path.join(work, f"{name}.mlir")
        sh([sys.executable, os.path.join(ROOT, "examples", "gen_model.py")] + model_args(name, a.hidden, a.seq)
           + ["-o", model])
        for mesh in a.meshes.split(","):
            for plan in PLANS[mesh]:
                strategy, *flags = plan.split(" ", 1)
                tag = f"{name}-{mesh}-{len(plans)}"
                report = os.path.join(work, tag + ".json")
                art = os.path.join(work, tag + ".dtc")
                compiled = subprocess.run([a.dtc, "compile", model, "--mesh", mesh, "--strategy", strategy,
                                           "--report", report, "-o", art] + (flags[0].split() if flags else []),
                                          env=env, capture_output=True, text=True)
                if compiled.returncode:
                    print(f"  {name} {mesh} {plan}: does not compile: {compiled.stderr.strip()}", file=sys.stderr)
                    continue
                predicted = json.load(open(report))["predicted"]["step_time_s"]
                plans.append(dict(name=name, mesh=mesh, plan=plan, tag=tag, art=art,
                                  predicted=predicted, measured=float("inf"), runs=[]))
    # Every plan once, then every plan again: a slow spell of the machine
    # slows one run of several plans, not every run of one.
    for repeat in range(a.repeats):
        for p in plans:
            log = os.path.join(work, f"{p['tag']}-{repeat}.jsonl")
            sh([a.dtc, "run", p["art"], "--steps", str(a.steps), "--log", log])
            times = [json.loads(line)["step_time_s"] for line in open(log)][2:]
            p["measured"] = min(p["measured"], statistics.median(times))
            p["runs"].append(statistics.median(times))
            print(f"  {p['name']} {p['mesh']} {p['plan']} (run {repeat + 1}): predicted "
                  f"{p['predicted'] * 1e3:.1f} ms, measured {statistics.median(times) * 1e3:.1f} ms",
                  file=sys.stderr, flush=True)
    rows = [(p["name"], p["mesh"], p["plan"], p["predicted"], p["measured"]) for p in plans]
    spread = {(p["name"], p["mesh"], p["plan"]): max(p["runs"]) / min(p["runs"]) - 1 for p in plans}
    print(f"hardware: {source}")
    print(f"{'model':6} {'mesh':4} {'plan':34} {'predicted ms':>12} {'measured ms':>11} {'ratio':>6} {'runs apart':>10}")
    errors = []
    for group in sorted({(r[0], r[1]) for r in rows}):
        members = sorted([r for r in rows if (r[0], r[1]) == group], key=lambda r: r[4])
        for name, mesh, plan, predicted, measured in members:
            errors.append(abs(predicted / measured - 1))
            print(f"{name:6} {mesh:4} {plan:34} {predicted * 1e3:12.2f} {measured * 1e3:11.2f} "
                  f"{predicted / measured:6.2f} {spread[(name, mesh, plan)]:10.1%}")
        tau = kendall_tau([r[3] for r in members], [r[4] for r in members])
        print(f"{group[0]} on {group[1]}: Kendall tau {tau:.2f} over {len(members)} plans\n")
    if errors:
        print(f"all {len(errors)} plans: mean |predicted/measured - 1| {statistics.mean(errors):.1%}, "
              f"worst {max(errors):.1%}, within 10%: {sum(e <= 0.10 for e in errors)}")
        print(f"Kendall tau over all plans: "
              f"{kendall_tau([r[3] for r in rows], [r[4] for r in rows]):.2f}")
        # The machine's own noise: how far apart the runs of one plan are
        # (the slowest over the fastest) bounds what the ratios can show.
        if a.repeats > 1:
            apart = sorted(spread.values())
            print(f"runs of one plan apart: median {statistics.median(apart):.1%}, "
                  f"worst {apart[-1]:.1%}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
