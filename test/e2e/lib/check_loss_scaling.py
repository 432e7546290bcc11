#!/usr/bin/env python3
"""fp16-mixed survives an overflow: dynamic loss scaling skips the step,
halves the scale, and training continues (growing the scale back after a
run of good steps).

  check_loss_scaling.py ARTIFACT.dtc --work DIR --at K --window W
                        [--steps N] [--data FILE] [--dtc dtc]

ARTIFACT must be compiled with --precision fp16-mixed --loss-scale-window W.
Runs (DTC_INJECT_OVERFLOW=K poisons a gradient with +inf at step K):
  A: K steps, saved;  B: K+1 steps with the overflow at K, saved;
  C: N steps with the overflow at K, logged.
Checks: B's parameters (f32 master weights) and Adam moments are bitwise
A's (the step changed nothing), its update count is A's, and its loss
scale is half of A's; in C's
log step K says skipped at scale S, steps K+1.. run at S/2, no other step
is skipped, the scale is back at S after W good steps, and every loss is
finite. Prints one line per check; exits 1 on any failure.
"""
import argparse
import json
import math
import os
import subprocess
import tempfile
import sys

# {name: (shape, values)} of a safetensors file, and its metadata.
from compare_checkpoints import read as read_safetensors  # noqa: E402


def run(cmd, inject=None):
    env = dict(os.environ)
    env.pop("DTC_INJECT_OVERFLOW", None)
    if inject is not None:
        env["DTC_INJECT_OVERFLOW"] = str(inject)
    with tempfile.TemporaryDirectory(prefix="dtc-") as tmp:
        env["TMPDIR"] = tmp
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"FAILED ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}")
    return proc.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("artifact")
    p.add_argument("--work", required=True)
    p.add_argument("--at", type=int, required=True)
    p.add_argument("--window", type=int, required=True)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--data")
    p.add_argument("--dtc", default="dtc")
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    k, w = a.at, a.window
    steps = a.steps or k + 2 * w + 2
    data = ["--data", a.data] if a.data else []
    base = [a.dtc, "run", a.artifact, "--seed", "5"] + data
    ckpt_a, ckpt_b = os.path.join(a.work, "a.safetensors"), os.path.join(a.work, "b.safetensors")
    run(base + ["--steps", str(k), "--save", ckpt_a])
    out_b = run(base + ["--steps", str(k + 1), "--save", ckpt_b], inject=k)
    log = os.path.join(a.work, "c.jsonl")
    run(base + ["--steps", str(steps), "--log", log], inject=k)
    failed = False

    def check(ok, what):
        nonlocal failed
        failed |= not ok
        print(f"{'ok' if ok else 'FAIL'}: {what}")

    pa, _ = read_safetensors(ckpt_a)
    pb, _ = read_safetensors(ckpt_b)
    oa, ma = read_safetensors(ckpt_a + ".optim")
    ob, mb = read_safetensors(ckpt_b + ".optim")
    check(pa.keys() == pb.keys() and all(pa[n] == pb[n] for n in pa),
          f"the parameters after the overflowed step {k} are those before it")
    moments = [n for n in oa if n.endswith(":adam_m") or n.endswith(":adam_v")]
    check(bool(moments) and all(oa[n] == ob[n] for n in moments),
          f"Adam's moments ({len(moments)} tensors) are unchanged too")
    check(ob["loss_scale"][1][0] == oa["loss_scale"][1][0] / 2,
          f"the saved loss scale halved: {oa['loss_scale'][1][0]:g} -> {ob['loss_scale'][1][0]:g}")
    check(mb.get("dtc.step") == str(k + 1) and mb.get("dtc.optimizer_step") == ma.get("dtc.optimizer_step") == str(k),
          f"{k + 1} steps ran, {k} updates applied (Adam's bias corrections count updates)")
    check(f"step {k}: gradients overflowed" in out_b, "dtc run notes the skipped step")

    with open(log) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    check(len(rows) == steps and all(math.isfinite(r["loss"]) for r in rows),
          f"{steps} steps logged, every loss finite")
    scale = rows[k]["loss_scale"]
    skipped = [r["step"] for r in rows if r["skipped"]]
    check(skipped == [k], f"only step {k} is skipped (skipped: {skipped})")
    after = [r["loss_scale"] for r in rows[k + 1:k + 1 + w]]
    check(after == [scale / 2] * w,
          f"steps {k + 1}..{k + w} run at half the scale ({scale:g} -> {scale / 2:g})")
    check(rows[k + 1 + w]["loss_scale"] == scale,
          f"after {w} good steps the scale grows back to {scale:g}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
