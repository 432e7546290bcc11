#!/usr/bin/env python3
"""Trains a model with dtc on several meshes and checks every run against
the float64 reference (test/reference/dtcref).

  refcheck.py MODEL.mlir --work DIR [--steps N] [--seed S] [--meshes 1,2,4,2x2]
              [--data FILE [--data-dtype uint16]] [--auto] [--resume-at K
              [--resume-plans]] [-- dtc compile flags (optimizer, lr, clipping...)]

Checks, each a failure with its location when violated:
  - the initial parameters (`dtc run --steps 0 --save`) equal the reference's
    Philox initialisation bit for bit;
  - per mesh (`dtc compile --mesh M --strategy dp=<devices>`, or --auto): every
    step's loss, every saved parameter and (Adam) every moment m, v and the
    optimizer step against the float64 reference, to the f32-derived
    tolerance of dtcref/compare.py; NaN/Inf anywhere fails;
  - per --plan NAME=FLAGS (repeatable, after the meshes): the same, for
    `dtc compile` with those flags (mesh, strategy, micro-batches,
    schedule...) instead of a data-parallel mesh;
  - with --resume-at K: training K steps on one mesh, saving, and resuming
    on the next mesh of the list (cyclically) ends at the same reference
    numbers (parameters AND optimizer state); with --resume-plans the list
    is the meshes then the plans.
Prints one line per mesh; exits 1 on any mismatch.
"""
import argparse
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from dtcref import compare, data, interp, safetensors, tools, train  # noqa: E402


def check_checkpoint(rep, label, path, model, opt, ref64, ref32, steps_done):
    if not os.path.exists(path):
        rep.fail(f"{label}: no checkpoint {path}")
        return
    params, meta = safetensors.read(path)
    if meta.get("dtc.step") != str(steps_done):
        rep.fail(f"{label}: checkpoint dtc.step {meta.get('dtc.step')!r}, expected {steps_done}")
    if set(params) != set(model.param_names):
        rep.fail(f"{label}: checkpoint tensors {sorted(params)} != parameters {sorted(model.param_names)}")
    for name in model.param_names:
        if name in params:
            compare.compare_tensor(rep, f"{label} parameter {name}", params[name],
                                   ref64.params[name], [r.params[name] for r in ref32])
    if not opt.adam:
        return
    side = path + ".optim"
    if not os.path.exists(side):
        rep.fail(f"{label}: no optimizer state {side}")
        return
    state, smeta = safetensors.read(side)
    if smeta.get("dtc.optimizer_step") != str(ref64.step):
        rep.fail(f"{label}: dtc.optimizer_step {smeta.get('dtc.optimizer_step')!r}, expected {ref64.step}")
    for name in model.param_names:
        for kind in ("m", "v"):
            key = f"{name}:adam_{kind}"
            if key not in state:
                rep.fail(f"{label}: optimizer state has no {key}")
                continue
            compare.compare_tensor(rep, f"{label} {key}", state[key], getattr(ref64, kind)[name],
                                   [getattr(r, kind)[name] for r in ref32])


def precision_of(flags):
    """The --precision and --loss-scale of `dtc compile` flags."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--precision", default="f32")
    p.add_argument("--loss-scale", type=float, default=65536.0)
    known, _ = p.parse_known_args(flags)
    return known.precision, known.loss_scale


def main(argv):
    extra = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--work", required=True, help="scratch directory")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--meshes", default="1")
    p.add_argument("--plan", action="append", default=[],
                   help="NAME=FLAGS: dtc compile flags of a plan, e.g. "
                        "'pp2=--mesh 2x2 --strategy dp=2,pp=2,zero=3 --microbatches 4'")
    p.add_argument("--data")
    p.add_argument("--data-dtype", default="uint16")
    p.add_argument("--auto", action="store_true", help="let dtc choose the plan (--auto)")
    p.add_argument("--resume-at", type=int, default=0)
    p.add_argument("--resume-plans", action="store_true",
                   help="--resume-at goes around the meshes and the plans")
    p.add_argument("--dtc", default="dtc")
    p.add_argument("--tamper", choices=["loss", "param"],
                   help="test hook: make step 1's loss / fc1.weight[0, 1] NaN after the first run")
    a = p.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)

    model = train.Model.from_text(open(a.model).read())
    opt = train.Optimizer.from_flags(extra)
    tokens = data.read_tokens(a.data, a.data_dtype) if a.data else None
    init = model.init_params(a.seed)
    l64, s64, _ = train.train(model, opt, init, a.steps, a.seed, tokens, "f64")
    # Mixed precision (--precision in the compile flags): the noise runs
    # round to 16 bits where dtc stores values in 16 bits, and the floor of
    # the tolerance is that format's unit roundoff.
    precision, loss_scale = precision_of(extra)
    low = {"bf16-mixed": "bf16", "fp16-mixed": "f16"}.get(precision)
    if low:
        compare.U = 2.0 ** -8 if low == "bf16" else 2.0 ** -11
        interp.F16_GRADIENT_SCALE = loss_scale
    # 16-bit rounding flips the sign of more near-zero gradients, which Adam
    # turns into whole steps: more runs sample that noise.
    runs32 = train.f32_runs(model, opt, init, a.steps, a.seed, tokens,
                            nudges=8 if low else 2, mode=low or "f32")
    l32 = [r[0] for r in runs32]
    s32 = [r[1] for r in runs32]
    print(f"reference: {len(init)} parameters, {opt.kind}, losses "
          + ", ".join(f"{x:.7g}" for x in l64))

    meshes = a.meshes.split(",") if a.meshes else []
    plans = {}
    for plan in a.plan:
        name, sep, flags = plan.partition("=")
        if not sep or not name or not flags.strip():
            raise SystemExit(f"--plan {plan!r}: expected NAME=FLAGS")
        plans[name] = shlex.split(flags)
    failed = False
    data_flags = ["--data", a.data, "--data-dtype", a.data_dtype] if a.data else []

    def compile_for(mesh):
        if mesh in plans:
            tag = "plan-" + mesh
            flags = plans[mesh]
        else:
            tag = mesh.replace("x", "_")
            flags = ["--mesh", mesh] + (["--auto"] if a.auto
                                        else ["--strategy", f"dp={tools.devices(mesh)}"])
        artifact = os.path.join(a.work, f"mesh{tag}.dtc")
        tools.run([a.dtc, "compile", a.model, "-o", artifact] + flags + extra,
                  os.path.join(a.work, f"compile{tag}.log"))
        return artifact, tag

    artifacts = {}
    for i, mesh in enumerate(meshes + list(plans)):
        artifact, tag = compile_for(mesh)
        artifacts[mesh] = artifact
        rep = compare.Report()
        if i == 0:
            init_path = os.path.join(a.work, "init.safetensors")
            tools.run([a.dtc, "run", artifact, "--steps", "0", "--seed", str(a.seed), "--save", init_path])
            saved, _ = safetensors.read(init_path)
            for name, values in init.items():
                if name not in saved:
                    rep.fail(f"init: {name} missing from {init_path}")
                elif not np.array_equal(saved[name], values):
                    idx = np.argwhere(saved[name] != values)[0]
                    rep.fail(f"init: {name}{list(idx)} is {saved[name][tuple(idx)]!r}, the Philox "
                             f"initialisation gives {values[tuple(idx)]!r}")
        ckpt = os.path.join(a.work, f"mesh{tag}.safetensors")
        out = tools.run([a.dtc, "run", artifact, "--steps", str(a.steps), "--seed", str(a.seed),
                         "--save", ckpt] + data_flags, os.path.join(a.work, f"run{tag}.log"))
        losses = tools.losses_of(out)
        if i == 0 and a.tamper == "loss":
            losses[1] = float("nan")
        if i == 0 and a.tamper == "param":
            tensors, meta = safetensors.read(ckpt)
            tensors[model.param_names[0]] = tensors[model.param_names[0]].copy()
            tensors[model.param_names[0]].reshape(-1)[1] = np.nan
            safetensors.write(ckpt, tensors, meta)
        if sorted(losses) != list(range(a.steps)):
            rep.fail(f"expected loss lines for steps 0..{a.steps - 1}, got {sorted(losses)}")
        compare.compare_losses(rep, [losses.get(k, float("nan")) for k in range(a.steps)], l64, l32)
        check_checkpoint(rep, "", ckpt, model, opt, s64, s32, a.steps)
        status = "ok" if rep.ok else "FAIL"
        label = f"plan {mesh}" if mesh in plans else f"mesh {mesh}"
        print(f"{label}: {status}: worst {rep.worst:.2f} of the tolerance ({rep.worst_what.strip()})")
        for problem in rep.problems:
            print(f"  {problem}")
        failed |= not rep.ok

    if a.resume_at:
        ring = meshes + list(plans) if a.resume_plans else meshes
        for i, mesh in enumerate(ring):
            other = ring[(i + 1) % len(ring)]
            rep = compare.Report()
            mid = os.path.join(a.work, f"resume{i}.mid.safetensors")
            end = os.path.join(a.work, f"resume{i}.end.safetensors")
            first = tools.run([a.dtc, "run", artifacts[mesh], "--steps", str(a.resume_at), "--seed",
                               str(a.seed), "--save", mid] + data_flags)
            second = tools.run([a.dtc, "run", artifacts[other], "--steps", str(a.steps - a.resume_at),
                                "--seed", str(a.seed), "--load", mid, "--save", end] + data_flags)
            losses = tools.losses_of(first)
            losses.update(tools.losses_of(second))
            if sorted(losses) != list(range(a.steps)):
                rep.fail(f"expected loss lines for steps 0..{a.steps - 1}, got {sorted(losses)}")
            compare.compare_losses(rep, [losses.get(k, float("nan")) for k in range(a.steps)], l64, l32)
            check_checkpoint(rep, "resumed", end, model, opt, s64, s32, a.steps)
            status = "ok" if rep.ok else "FAIL"
            print(f"resume {mesh} -> {other} at step {a.resume_at}: {status}: worst {rep.worst:.2f} "
                  f"of the tolerance ({rep.worst_what.strip()})")
            for problem in rep.problems:
                print(f"  {problem}")
            failed |= not rep.ok
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except tools.DtcError as e:
        print(e)
        sys.exit(1)
