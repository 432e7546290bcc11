#!/usr/bin/env python3
"""The cost model against published iteration times of published plans.

  bench/published_plans_bench.py [--only NAME] [--dtc build/bin/dtc] [--json OUT]

Each row compiles a model with the plan its paper used (`--hw a100
--precision bf16-mixed --optimizer adam`; `--device-memory 16TiB`, so a
plan dtc thinks too big is still costed, its memory marked) and prints the report's predicted
seconds per iteration beside the measured one, their ratio, the predicted
model FLOPs utilisation and where the time goes (compute, communication,
bubble). Rows:

- Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
  Transformer Models", Table 5; models from its Table 3): 22B on 8 A100s
  (t=8, p=1), 175B on 64 (t=8, p=8), 530B on 280 (t=8, p=35), 1T on 512
  (t=8, p=64); sequence 2048, micro-batch 1, vocabulary 51200; global
  batch 4, 64, 280 and 512 (Table 3: the GPU count except for 22B; with
  batch 4 the published times give the paper's MFU of 41.5% for 22B, as
  64, 280 and 512 give 51.4%, 56.0% and 56.3% for the others). Two columns: full recomputation, and sequence
  parallelism with selective recomputation.
- Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on
  GPU Clusters Using Megatron-LM"): GPT-3 175B on 1024 A100s
  (dp=8, pp=16, tp=8, batch 1536, micro-batch 1, 1F1B, full recomputation)
  at about 140 TFLOP/s per GPU, 31.5 s per iteration.

The summary line gives the mean and worst relative error; the search issue
asks for at most 5% on average and 10% at worst over Table 5, and 10% for
the Megatron row. Every plan ran on 80 GB A100s, so dtc's plan of it
should fit 80 GB too (`--device-memory 80e9` fails the run when one does
not).
"""
import argparse
import json
import os
import sys
import tempfile
import time

from benchlib import ROOT, sh  # noqa: E402

# (name, layers, hidden, heads, devices, tp, pp, batch, measured seconds
#  full recompute, measured seconds sp + selective)
TABLE5 = [
    ("22B", 48, 6144, 64, 8, 8, 1, 4, 1.42, 1.10),
    ("175B", 96, 12288, 96, 64, 8, 8, 64, 18.13, 13.75),
    ("530B", 105, 20480, 128, 280, 8, 35, 280, 49.05, 37.83),
    ("1T", 128, 25600, 160, 512, 8, 64, 512, 94.42, 71.49),
]


def rows():
    for name, layers, hidden, heads, devices, tp, pp, batch, full, selective in TABLE5:
        model = dict(layers=layers, hidden=hidden, heads=heads, batch=batch)
        common = dict(mesh=f"{devices // (tp)}x{tp}" if pp > 1 else f"{tp}",
                      strategy=f"pp={pp},tp={tp}" if pp > 1 else f"tp={tp}",
                      microbatches=batch)
        yield dict(name=f"table5 {name} full", model=model, measured=full,
                   remat="full", sp=False, **common)
        yield dict(name=f"table5 {name} sp+sel", model=model, measured=selective,
                   remat="selective", sp=True, **common)
    yield dict(name="megatron 175B 1024", model=dict(layers=96, hidden=12288, heads=96, batch=1536),
               measured=31.5, remat="full", sp=False, mesh="8x16x8",
               strategy="dp=8,pp=16,tp=8", microbatches=192)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", help="run the rows whose name contains this")
    p.add_argument("--dtc", default=os.path.join(ROOT, "build", "bin", "dtc"))
    p.add_argument("--json", help="write every row's numbers here")
    p.add_argument("--hw", default="a100", help="the profile to cost with (a100 or a JSON file)")
    p.add_argument("--max-mean-error", type=float, metavar="PCT",
                   help="exit 1 when Table 5's mean |error| exceeds PCT percent")
    p.add_argument("--max-worst-error", type=float, metavar="PCT",
                   help="exit 1 when a Table 5 row's |error| exceeds PCT percent")
    p.add_argument("--device-memory", type=float, metavar="BYTES",
                   help="exit 1 when a plan's planned peak per device exceeds BYTES (the "
                        "papers ran every plan on 80 GB A100s)")
    a = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="dtc-published-")
    print(f"{'plan':<22} {'measured s':>10} {'predicted s':>11} {'ratio':>6} {'MFU':>5} "
          f"{'compute s':>9} {'comm s':>7} {'bubble':>6} {'GiB/dev':>7}")
    results, errors, over = [], [], []
    for row in rows():
        if a.only and a.only not in row["name"]:
            continue
        m = row["model"]
        model = os.path.join(work, f"gpt-{m['layers']}-{m['hidden']}-{m['batch']}.mlir")
        if not os.path.exists(model):
            sh([sys.executable, os.path.join(ROOT, "examples", "gen_model.py"), "gpt",
                "--layers", str(m["layers"]), "--hidden", str(m["hidden"]), "--heads", str(m["heads"]),
                "--seq", "2048", "--vocab", "51200", "--batch", str(m["batch"]), "-o", model])
        report = os.path.join(work, "report.json")
        cmd = [a.dtc, "compile", model, "--mesh", row["mesh"], "--strategy", row["strategy"],
               "--hw", a.hw, "--precision", "bf16-mixed", "--optimizer", "adam",
               "--remat", row["remat"], "--device-memory", "16TiB", "--report", report, "-o", os.path.join(work, "plan.dtc")]
        if row["microbatches"] > 1:
            cmd += ["--microbatches", str(row["microbatches"]), "--schedule", "1f1b"]
        if row["sp"]:
            cmd.append("--sequence-parallel")
        start = time.time()
        sh(cmd)
        r = json.load(open(report))
        pred = r["predicted"]
        step = pred["step_time_s"]
        ratio = step / row["measured"]
        errors.append((abs(ratio - 1), row["name"]))
        gib = r["memory_bytes"]["peak_per_device"] / 2**30
        fits = "" if gib * 2**30 <= 80e9 else " (over 80 GB)"
        if a.device_memory is not None and gib * 2**30 > a.device_memory:
            over.append(row["name"])
        print(f"{row['name']:<22} {row['measured']:>10.2f} {step:>11.2f} {ratio:>6.3f} "
              f"{pred['mfu']:>5.2f} {pred['compute_time_s']:>9.2f} {pred['comm_time_s']:>7.2f} "
              f"{r['bubble_fraction']:>6.3f} {gib:>7.1f}{fits}", flush=True)
        results.append(dict(name=row["name"], measured_s=row["measured"], predicted_s=step,
                            ratio=ratio, predicted=pred, compile_s=time.time() - start))
    table5 = [e for e, n in errors if n.startswith("table5")]
    if table5:
        print(f"Table 5: mean |error| {100 * sum(table5) / len(table5):.1f}%, "
              f"worst {100 * max(table5):.1f}% over {len(table5)} rows")
    mega = [e for e, n in errors if n.startswith("megatron")]
    if mega:
        print(f"Megatron GPT-3 1024 GPUs: |error| {100 * mega[0]:.1f}%")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    failed = False
    if table5 and a.max_mean_error is not None and 100 * sum(table5) / len(table5) > a.max_mean_error:
        print(f"FAIL: Table 5 mean error above {a.max_mean_error}%")
        failed = True
    if table5 and a.max_worst_error is not None and 100 * max(table5) > a.max_worst_error:
        print(f"FAIL: a Table 5 row's error above {a.max_worst_error}%")
        failed = True
    for name in over:
        print(f"FAIL: {name} plans more than {a.device_memory:.3g} bytes per device")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
