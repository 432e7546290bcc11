#!/usr/bin/env python3
"""Trains one model under several plans and checks they match one device.

  dp_equivalence.py MODEL.mlir --work DIR [--steps N] [--meshes 1,2,4,2x2]
                    [--plan MESH:STRATEGY ...] [--data FILE] [--rtol 1e-5]
                    [-- extra dtc compile flags]

Plans: each mesh of --meshes is data parallel over all its devices
(`--strategy dp=<devices>`); each --plan (repeatable, e.g. `--plan 1
--plan 2x4:dp=2,tp=4`) pins a strategy on a mesh. The first plan is the
reference. For each: `dtc compile MODEL --mesh M --strategy S`, then
`dtc run --steps N --seed S --save` (ranks through mpirun). Every plan must
reproduce the reference run:
  - each step's loss within --rtol (relative);
  - each saved parameter tensor within --rtol relative L2 error
    (||x - y|| <= rtol ||x|| + atol sqrt(n)), and every element within
    --elem-rtol of the tensor's largest magnitude (+ atol): a wrong or
    misplaced shard is an O(1) error. The absolute floor --atol covers
    tensors that stay at rounding-noise level (a key bias: softmax is
    shift-invariant, so its gradient is exactly zero in exact arithmetic).
Why per tensor: meshes sum gradients in different orders, and Adam divides
each gradient by its running RMS, so the rounding noise of a near-zero
gradient is amplified for that element alone (seen: one element of 2720 off
by 1e-3 relative while the tensor agrees to 2e-6). Prints one line per
mesh; exits 1 on any mismatch. Standard library only.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import tempfile
import sys


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} has dtype {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        count = (end - begin) // 4
        tensors[name] = (info["shape"], struct.unpack_from(f"<{count}f", data, base + begin))
    return tensors, header.get("__metadata__", {})


def devices(mesh):
    n = 1
    for part in mesh.split("x"):
        n *= int(part)
    return n


def run(cmd, log):
    with open(log, "w") as out:
        with tempfile.TemporaryDirectory(prefix="dtc-") as tmp:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=dict(os.environ, TMPDIR=tmp))
        out.write(" ".join(cmd) + "\n" + proc.stdout)
    if proc.returncode != 0:
        raise SystemExit(f"FAILED ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}")
    return proc.stdout


def inspect_artifact(dtc, path):
    """The JSON body of the artifact at `path` (`dtc inspect`)."""
    return json.loads(subprocess.run([dtc, "inspect", path], check=True,
                                     stdout=subprocess.PIPE, text=True).stdout)


def losses_of(output):
    losses = []
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "step" and parts[2] == "loss":
            losses.append(float(parts[3]))
    return losses


def main(argv):
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    else:
        extra = []
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--work", required=True, help="scratch directory")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--meshes", default="1,2,4",
                   help="comma-separated data-parallel meshes; the first is the reference")
    p.add_argument("--plan", action="append", default=[],
                   help="MESH[:STRATEGY] [FLAG ...], e.g. 2x4:dp=2,tp=4 or "
                        "'2:tp=2 --sequence-parallel' (repeatable; replaces --meshes; "
                        "the flags go to this plan's dtc compile only)")
    p.add_argument("--data", help="token file for dtc run --data")
    p.add_argument("--rtol", type=float, default=1e-5)
    p.add_argument("--atol", type=float, default=1e-6, help="absolute floor per element")
    p.add_argument("--elem-rtol", type=float, default=1e-3,
                   help="bound of any element's difference, relative to its tensor's largest magnitude")
    p.add_argument("--dtc", default="dtc")
    a = p.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)

    plans = []
    for plan in a.plan or a.meshes.split(","):
        head, *flags = plan.split()
        mesh, _, strategy = head.partition(":")
        plans.append((plan, mesh, strategy or f"dp={devices(mesh)}", flags))
    results = {}
    for plan, mesh, strategy, flags in plans:
        tag = "".join(c if c.isalnum() or c == "_" else "-" for c in plan.replace("x", "_").replace("=", ""))
        artifact = os.path.join(a.work, f"plan{tag}.dtc")
        ckpt = os.path.join(a.work, f"plan{tag}.safetensors")
        run([a.dtc, "compile", a.model, "--mesh", mesh, "--strategy", strategy,
             "-o", artifact] + flags + extra, os.path.join(a.work, f"compile{tag}.log"))
        cmd = [a.dtc, "run", artifact, "--steps", str(a.steps), "--seed", str(a.seed), "--save", ckpt]
        if a.data:
            cmd += ["--data", a.data]
        out = run(cmd, os.path.join(a.work, f"run{tag}.log"))
        losses = losses_of(out)
        if len(losses) != a.steps:
            raise SystemExit(f"plan {plan}: expected {a.steps} loss lines, got {len(losses)}:\n{out}")
        if not all(math.isfinite(l) for l in losses):
            raise SystemExit(f"plan {plan}: non-finite loss {losses}")
        params, meta = read_safetensors(ckpt)
        if meta.get("dtc.step") != str(a.steps):
            raise SystemExit(f"plan {plan}: checkpoint step {meta.get('dtc.step')} != {a.steps}")
        results[plan] = (losses, params)

    ref_plan = plans[0][0]
    ref_losses, ref_params = results[ref_plan]
    failed = False
    for plan, (losses, params) in results.items():
        # Data-parallel meshes print as "mesh M" (as they always have).
        label = f"plan {plan}" if a.plan else f"mesh {plan}"
        if plan == ref_plan:
            print(f"{label}: reference, losses {', '.join(f'{l:.7g}' for l in losses)}")
            continue
        worst_loss = 0.0
        for l, r in zip(losses, ref_losses):
            rel = abs(l - r) / max(abs(r), 1e-30)
            # max() would skip a NaN: make it the worst.
            worst_loss = rel if not (rel <= worst_loss) else worst_loss
        problems = []
        if not (worst_loss <= a.rtol):
            problems.append(f"losses differ (worst relative {worst_loss:.2e}): {losses} vs {ref_losses}")
        if set(params) != set(ref_params):
            problems.append(f"parameter names differ: {sorted(set(params) ^ set(ref_params))}")
        worst_norm, worst_elem = 0.0, 0.0
        for name, (shape, values) in ref_params.items():
            if name not in params:
                continue
            other_shape, other = params[name]
            if other_shape != shape:
                problems.append(f"{name}: shape {other_shape} vs {shape}")
                continue
            scale = max(max(abs(x) for x in values), 1e-30)
            diff2 = sum((x - y) ** 2 for x, y in zip(values, other))
            norm2 = max(sum(x * x for x in values), 1e-60)
            # Errors as fractions of their allowance (<= 1 passes), so the
            # absolute floor applies to both.
            allowed = a.rtol * math.sqrt(norm2) + a.atol * math.sqrt(len(values))
            rel_norm = math.sqrt(diff2) / allowed * a.rtol
            rel_elem = max(abs(x - y) for x, y in zip(values, other)) / (
                a.elem_rtol * scale + a.atol) * a.elem_rtol
            worst_norm, worst_elem = max(worst_norm, rel_norm), max(worst_elem, rel_elem)
            bad = [i for i, (x, y) in enumerate(zip(values, other))
                   if not (math.isfinite(x) and math.isfinite(y))]
            if bad:
                problems.append(f"parameter {name}: non-finite value at flat index {bad[0]} "
                                f"({other[bad[0]]!r}, reference {values[bad[0]]!r})")
                continue
            if not (rel_norm <= a.rtol):
                problems.append(f"parameter {name}: relative L2 error {rel_norm:.2e} > {a.rtol} "
                                f"(with atol {a.atol})")
            if not (rel_elem <= a.elem_rtol):
                problems.append(f"parameter {name}: an element differs by {rel_elem:.2e} of the "
                                f"tensor's scale > {a.elem_rtol}")
        status = "FAIL" if problems else "ok"
        print(f"{label}: {status}: {len(params)} parameters, worst loss rel diff "
              f"{worst_loss:.1e}, worst parameter rel L2 {worst_norm:.1e}, worst element "
              f"{worst_elem:.1e} of scale")
        for problem in problems:
            print(f"  {problem}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
