#!/usr/bin/env python3
"""Trains one model under several plans and checks they match one device.

  pp_equivalence.py MODEL.mlir --work DIR [--steps N] [--rtol 1e-5]
                    --plan NAME='--mesh 1' --plan NAME='--mesh 2 --strategy pp=2 ...' ...

Each --plan is NAME=FLAGS: the dtc compile flags of that plan. The first plan
is the reference; every other one must reproduce its per-step losses and
saved parameters (dp_equivalence.py's per-tensor rule: relative L2 error
within --rtol, every element within --elem-rtol of its tensor's scale).
With --exact every plan must reproduce the reference bit for bit (losses as
printed and every parameter element). Prints one line per plan; exits 1 on
any mismatch. With --stats, each run
also writes dtc-run's --stats file next to its checkpoint. Standard library
only.
"""
import argparse
import math
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_equivalence as dpe  # noqa: E402


def compare_exact(name, losses, params, ref_losses, ref_params):
    problems = []
    if losses != ref_losses:
        problems.append(f"losses differ: {losses} vs {ref_losses}")
    if set(params) != set(ref_params):
        problems.append(f"parameter names differ: {sorted(set(params) ^ set(ref_params))}")
    differing = sorted(n for n in ref_params if n in params and params[n] != ref_params[n])
    if differing:
        problems.append(f"parameters not bit-identical: {differing}")
    print(f"plan {name}: {'FAIL' if problems else 'ok'}: {len(params)} parameters, "
          f"bit-identical: {not problems}")
    for problem in problems:
        print(f"  {problem}")
    return not problems


def compare(name, losses, params, ref_losses, ref_params, a):
    worst_loss = max(abs(l - r) / max(abs(r), 1e-30) for l, r in zip(losses, ref_losses))
    problems = []
    if worst_loss > a.rtol:
        problems.append(f"losses differ (worst relative {worst_loss:.2e}): {losses} vs {ref_losses}")
    if set(params) != set(ref_params):
        problems.append(f"parameter names differ: {sorted(set(params) ^ set(ref_params))}")
    worst_norm, worst_elem = 0.0, 0.0
    for pname, (shape, values) in ref_params.items():
        if pname not in params:
            continue
        other_shape, other = params[pname]
        if other_shape != shape:
            problems.append(f"{pname}: shape {other_shape} vs {shape}")
            continue
        scale = max(max(abs(x) for x in values), 1e-30)
        diff2 = sum((x - y) ** 2 for x, y in zip(values, other))
        norm2 = max(sum(x * x for x in values), 1e-60)
        allowed = a.rtol * math.sqrt(norm2) + a.atol * math.sqrt(len(values))
        rel_norm = math.sqrt(diff2) / allowed * a.rtol
        rel_elem = max(abs(x - y) for x, y in zip(values, other)) / (
            a.elem_rtol * scale + a.atol) * a.elem_rtol
        worst_norm, worst_elem = max(worst_norm, rel_norm), max(worst_elem, rel_elem)
        if rel_norm > a.rtol:
            problems.append(f"parameter {pname}: relative L2 error {rel_norm:.2e} > {a.rtol}")
        if rel_elem > a.elem_rtol:
            problems.append(f"parameter {pname}: an element differs by {rel_elem:.2e} of the "
                            f"tensor's scale > {a.elem_rtol}")
    status = "FAIL" if problems else "ok"
    print(f"plan {name}: {status}: {len(params)} parameters, worst loss rel diff "
          f"{worst_loss:.1e}, worst parameter rel L2 {worst_norm:.1e}, worst element "
          f"{worst_elem:.1e} of scale")
    for problem in problems:
        print(f"  {problem}")
    return not problems


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--work", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--plan", action="append", required=True, help="NAME=COMPILE FLAGS")
    p.add_argument("--rtol", type=float, default=1e-5)
    p.add_argument("--atol", type=float, default=1e-6)
    p.add_argument("--elem-rtol", type=float, default=1e-3)
    p.add_argument("--exact", action="store_true", help="require bit-identical results")
    p.add_argument("--dtc", default="dtc")
    a = p.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)

    results = []
    for plan in a.plan:
        name, _, flags = plan.partition("=")
        tag = "".join(c if c.isalnum() else "_" for c in name)
        artifact = os.path.join(a.work, f"{tag}.dtc")
        ckpt = os.path.join(a.work, f"{tag}.safetensors")
        dpe.run([a.dtc, "compile", a.model, "-o", artifact] + shlex.split(flags),
                os.path.join(a.work, f"compile_{tag}.log"))
        out = dpe.run([a.dtc, "run", artifact, "--steps", str(a.steps), "--seed", str(a.seed),
                       "--save", ckpt], os.path.join(a.work, f"run_{tag}.log"))
        losses = dpe.losses_of(out)
        if len(losses) != a.steps or not all(math.isfinite(l) for l in losses):
            raise SystemExit(f"plan {name}: expected {a.steps} finite losses, got {losses}:\n{out}")
        params, meta = dpe.read_safetensors(ckpt)
        if meta.get("dtc.step") != str(a.steps):
            raise SystemExit(f"plan {name}: checkpoint step {meta.get('dtc.step')} != {a.steps}")
        results.append((name, losses, params))

    ref_name, ref_losses, ref_params = results[0]
    print(f"plan {ref_name}: reference, losses {', '.join(f'{l:.7g}' for l in ref_losses)}")
    ok = True
    for name, losses, params in results[1:]:
        if a.exact:
            ok &= compare_exact(name, losses, params, ref_losses, ref_params)
        else:
            ok &= compare(name, losses, params, ref_losses, ref_params, a)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
