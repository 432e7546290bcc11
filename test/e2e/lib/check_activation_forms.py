#!/usr/bin/env python3
"""Prints the plan report's stored activation bytes per transformer layer
beside the closed forms of docs/design.md "Activation memory by hand", and
fails when one is more than 5% off.

  check_activation_forms.py --layers L --hidden H --heads A --seq S --batch B
      [--vocab V] --work DIR --plan NAME='COMPILE FLAGS' ...

Generates the GPT (examples/gen_model.py), compiles every plan with
`--report`, and compares, for each transformer block k (the attention
sub-layer 2 + 2k and the MLP sub-layer 3 + 2k of `dtc.layer`), the sum of
`stored_activation_bytes_by_layer` with

  none       (4 s b h + 12 s b h / t) e
  selective  (4 s b h +  7 s b h / t) e
  full       (2 s b h) e

and with Megatron sequence parallelism (--sequence-parallel)

  none       (16 s b h / t) e
  selective  (11 s b h / t) e
  full       ( 2 s b h / t) e

for a block with an MLP of width 4h, s the sequence, b the micro-batch's
rows on one device, t the tensor-parallel degree (from `strategy.tp`) and
e the activations' element bytes (4 in f32, 2 in bf16/f16 mixed precision).
Plans must not be pipelined (a stage's last layer sends its output rather
than keeping it). Standard library only.
"""
import argparse
import json
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_equivalence as dpe  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "examples", "gen_model.py")

FORMS = {  # (replicated, divided by t) multiples of s*b*h per block
    "none": (4, 12),
    "selective": (4, 7),
    "full": (2, 0),
}
SEQUENCE_PARALLEL_FORMS = {
    "none": (0, 16),
    "selective": (0, 11),
    "full": (0, 2),
}


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for k in ("layers", "hidden", "heads", "seq", "batch"):
        p.add_argument("--" + k, type=int, required=True)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--work", required=True)
    p.add_argument("--plan", action="append", required=True, help="NAME=COMPILE FLAGS")
    p.add_argument("--dtc", default="dtc")
    a = p.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(a.work, "gpt.mlir")
    dpe.run([sys.executable, GEN, "gpt", "--layers", str(a.layers), "--hidden", str(a.hidden), "--heads",
             str(a.heads), "--seq", str(a.seq), "--batch", str(a.batch), "--vocab", str(a.vocab), "-o", model],
            os.path.join(a.work, "gen.log"))
    ok = True
    for plan in a.plan:
        name, _, flags = plan.partition("=")
        tag = "".join(c if c.isalnum() else "_" for c in name)
        report_path = os.path.join(a.work, f"{tag}.report.json")
        dpe.run([a.dtc, "compile", model, "-o", os.path.join(a.work, f"{tag}.dtc"), "--report", report_path]
                + shlex.split(flags), os.path.join(a.work, f"compile_{tag}.log"))
        with open(report_path) as f:
            report = json.load(f)
        strategy = report["strategy"]
        if strategy.get("pp", 1) != 1:
            sys.exit(f"plan {name}: pipelined plans are not covered by the closed forms")
        mode = strategy["remat"]
        t = strategy.get("tp", 1)
        rows = a.batch // (strategy.get("dp", 1) * max(strategy.get("microbatches", 1), 1))
        e = 4 if strategy["precision"] == "f32" else 2
        sbh = a.seq * rows * a.hidden
        sp = strategy.get("sequence_parallel", False)
        replicated, divided = (SEQUENCE_PARALLEL_FORMS if sp else FORMS)[mode]
        form = (replicated * sbh + divided * sbh // t) * e
        by_layer = {int(k): v for k, v in report["stored_activation_bytes_by_layer"].items()}
        for k in range(a.layers):
            got = by_layer.get(2 + 2 * k, 0) + by_layer.get(3 + 2 * k, 0)
            off = abs(got - form) / form
            status = "ok" if off <= 0.05 else "FAIL"
            ok &= status == "ok"
            print(f"plan {name} ({mode}{', sequence-parallel' if sp else ''}, t={t}, {e}-byte activations) "
                  f"layer {k}: report {got} bytes, "
                  f"closed form {form} ({off:.1%} off): {status}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
