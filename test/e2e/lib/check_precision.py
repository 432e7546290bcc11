#!/usr/bin/env python3
"""Mixed precision tracks f32: trains one model in f32 on one device (the
reference) and under each plan in a low precision, and compares losses.

  check_precision.py MODEL.mlir --work DIR --steps N [--data FILE]
                     --plan MESH:STRATEGY:PRECISION ... [--rtol 0.03]
                     [--min-drop D] [-- extra dtc compile flags]

Each plan (e.g. `2:dp=2,zero=1:bf16-mixed`, `1::fp16-mixed`) is compiled
with `--strategy` (when given) and `--precision`, run for N steps with
`--save`, and must give:
  - every step's loss within --rtol (relative) of the f32 reference's, the
    reference's mean loss falling by at least --min-drop over the run (so
    the comparison covers real training, not a flat line);
  - finite losses;
  - a checkpoint of f32 master weights: every tensor F32 with the model's
    shape, and some element of every matrix not representable in the
    plan's 16-bit format (a rounded bf16/f16 copy would be).
Prints one line per plan; exits 1 on any failure. Standard library only.
"""
import argparse
import math
import os
import struct
import subprocess
import tempfile
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dp_equivalence import read_safetensors, devices, losses_of  # noqa: E402


def run(cmd):
    with tempfile.TemporaryDirectory(prefix="dtc-") as tmp:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=dict(os.environ, TMPDIR=tmp))
    if proc.returncode != 0:
        raise SystemExit(f"FAILED ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}")
    return proc.stdout


def representable(x, precision):
    """Whether the f32 value x is exactly a bf16 (fp16) value."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if precision == "bf16-mixed":
        return bits & 0xFFFF == 0
    try:
        return struct.unpack("<e", struct.pack("<e", x))[0] == x
    except OverflowError:
        return False


def main(argv):
    extra = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--work", required=True)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--data")
    p.add_argument("--plan", action="append", required=True)
    p.add_argument("--rtol", type=float, default=0.03)
    p.add_argument("--min-drop", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--dtc", default="dtc")
    a = p.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)

    def train(name, mesh, strategy, precision):
        artifact = os.path.join(a.work, name + ".dtc")
        cmd = [a.dtc, "compile", a.model, "--mesh", mesh, "--precision", precision, "-o", artifact]
        if strategy:
            cmd += ["--strategy", strategy]
        run(cmd + extra)
        ckpt = os.path.join(a.work, name + ".safetensors")
        cmd = [a.dtc, "run", artifact, "--steps", str(a.steps), "--seed", str(a.seed), "--save", ckpt]
        if a.data:
            cmd += ["--data", a.data]
        return losses_of(run(cmd)), ckpt

    ref, ref_ckpt = train("reference", "1", "", "f32")
    ref_params, _ = read_safetensors(ref_ckpt)
    window = max(1, min(10, a.steps // 5))
    drop = sum(ref[:window]) / window - sum(ref[-window:]) / window
    ok_ref = len(ref) == a.steps and drop >= a.min_drop
    print(f"reference f32: {'ok' if ok_ref else 'FAIL'}: {len(ref)} steps, "
          f"loss {ref[0]:.4f} -> {ref[-1]:.4f} (mean drop {drop:.4f})")
    failed = not ok_ref
    for plan in a.plan:
        mesh, strategy, precision = plan.split(":")
        name = "plan_" + plan.replace(":", "_").replace(",", "-").replace("=", "")
        losses, ckpt = train(name, mesh, strategy, precision)
        problems = []
        if len(losses) != len(ref):
            problems.append(f"{len(losses)} steps, expected {len(ref)}")
        if not all(math.isfinite(x) for x in losses):
            problems.append("a non-finite loss")
        worst = max((abs(x - y) / abs(y) for x, y in zip(losses, ref)), default=math.inf)
        if not worst <= a.rtol:
            problems.append(f"losses differ by up to {worst:.3g} relative")
        params, _ = read_safetensors(ckpt)  # refuses anything but F32
        for tensor, (shape, values) in params.items():
            if tensor not in ref_params or ref_params[tensor][0] != shape:
                problems.append(f"{tensor}: shape {shape} is not the model's")
            elif len(shape) >= 2 and all(representable(x, precision) for x in values):
                problems.append(f"{tensor}: saved values are all {precision[:4]} numbers, "
                                "not f32 master weights")
        print(f"plan {plan}: {'ok' if not problems else 'FAIL'}: worst loss difference "
              f"{worst:.2e} relative over {len(losses)} steps" +
              ("" if not problems else "; " + "; ".join(problems[:3])))
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
