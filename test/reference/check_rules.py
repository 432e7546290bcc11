#!/usr/bin/env python3
"""Checks dtc's gradient rules and optimizer step in float64.

  check_rules.py --cases all|NAME,...          one model per rule (gradcases.py)
  check_rules.py --model MODEL.mlir ...        whole models
  check_rules.py --model MODEL.mlir --step -- dtc compile flags
                                               the optimizer part of the step

For each model, `dtc compile --optimizer none --emit-mlir training-step
--emit-generic` gives dtc's training step: the forward ops, the backward ops
its rules built (matmuls of transposes, `*_grad` ops, broadcasts, ...) and
the returned gradients. The reference evaluates that IR in float64 (so no
f32 kernel is involved) and requires:
  - its loss to equal the reference forward's (1e-10 relative);
  - every gradient to match the reference's own autodiff (2e-7 relative to
    the tensor's largest gradient: dtc's rules hold constants such as 1/n
    as f32 numbers, 6e-8 relative);
  - every gradient to match float64 central differences of the reference
    forward, Richardson-extrapolated (error O(h^4); h = 1e-5 max(1, |x|),
    rounding about 2e-11 |loss|), along two random directions per parameter
    and at up to 6 elements: 1e-6 relative (+ 1e-9 |loss| absolute).
    An element whose one-sided slopes disagree (a kink of relu/max between
    x-h and x+h) is skipped and counted.
With --step, the step is compiled with the given optimizer flags and
evaluated from a state with nonzero moments at optimizer step 2; the
updated parameters and moments must match dtcref.train (1e-6 relative to
each tensor's update / moment: dtc keeps the clip limit in f32).
Prints one line per model; exits 1 on any failure.
"""
import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import gradcases  # noqa: E402
from dtcref import compare, interp, mlir, rng, tools, train  # noqa: E402

SEED = 11


def training_step(dtc, model_path, flags, work):
    text = tools.emit(dtc, model_path, "training-step", flags, work)
    return mlir.parse_module(text).func("train_step")


def step_args(step_func, params, inputs, extra=None):
    """Argument values of @train_step by role and name."""
    values = []
    for i, (_, t) in enumerate(step_func.args):
        attrs = step_func.arg_attrs[i]
        role, name = attrs.get("dtc.role"), attrs.get("dtc.name")
        if role == "param":
            values.append(params[name])
        elif role == "input":
            values.append(inputs[name])
        elif extra is not None and name in extra:
            values.append(extra[name])
        else:
            raise ValueError(f"no value for argument {name} ({role})")
    return values


def richardson(f, x0, direction, h):
    """d/dt f(x0 + t d) at 0 with central differences at h and h/2,
    extrapolated; also returns the two estimates' disagreement."""
    def central(step):
        return (f(x0 + step * direction) - f(x0 - step * direction)) / (2 * step)
    d1, d2 = central(h), central(h / 2)
    return (4 * d2 - d1) / 3, abs(d2 - d1)


def check_model(rep, label, dtc, model_path, work, rtol=1e-6):
    model = train.Model.from_text(open(model_path).read())
    step = training_step(dtc, model_path, ["--optimizer", "none"], work)
    params = {n: v.astype(np.float64) for n, v in model.init_params(SEED).items()}
    inputs = model.inputs_for_step(SEED, 0)
    results = interp.evaluate(step, step_args(step, params, inputs), "f64")
    ir_loss = float(results[0])
    ir_grads = {}
    for value, attrs in zip(results[1:], step.result_attrs[1:]):
        ir_grads[attrs.get("dtc.of")] = value
    ref_loss, ref_grads = model.loss_and_grads(params, inputs)
    if not (abs(ir_loss - ref_loss) <= 1e-10 * max(1.0, abs(ref_loss))):
        rep.fail(f"{label}: dtc's forward gives loss {ir_loss!r}, the reference {ref_loss!r}")
    if set(ir_grads) != set(params):
        rep.fail(f"{label}: the step returns gradients of {sorted(ir_grads)}, parameters are {sorted(params)}")
    gen = np.random.default_rng(5)
    skipped = checked = 0
    for name in model.param_names:
        if name not in ir_grads:
            continue
        g = np.asarray(ir_grads[name], dtype=np.float64)
        compare.compare_close(rep, f"{label}: d loss/d {name} (dtc's rules vs the reference's VJPs)",
                              g, ref_grads[name], 2e-7, 1e-300)
        x0 = params[name]
        scale = float(np.max(np.abs(g))) if g.size else 0.0

        def f(x, name=name):
            moved = dict(params)
            moved[name] = x
            return model.loss(moved, inputs)

        # Small steps: a relu/max kink between x-h and x+h is then rare, and
        # caught by the disagreement of the h and h/2 estimates; rounding
        # adds about eps64 |loss| / h = 2e-11 |loss|.
        h = 1e-5 * max(1.0, float(np.max(np.abs(x0)))) if x0.size else 1e-5
        atol = 1e-9 * max(1.0, abs(ref_loss))
        for k in range(2):
            d = gen.standard_normal(x0.shape)
            d /= max(np.linalg.norm(d), 1e-300)
            fd, disagreement = richardson(f, x0, d, h)
            if disagreement > 1e-7 * (abs(fd) + scale) + atol:
                skipped += 1
                continue
            want = float(np.sum(g * d))
            err = abs(fd - want)
            tol = rtol * float(np.linalg.norm(g)) + atol
            checked += 1
            r = rep.ratio(f"{label}: {name} direction {k}", err, tol)
            if not (r <= 1.0):
                rep.fail(f"{label}: d loss/d {name} along a random direction: dtc's rule gives "
                         f"{want:.12g}, central differences {fd:.12g} (|diff| {err:.3e} > {tol:.3e})")
        flat = x0.reshape(-1)
        picks = np.unique(np.linspace(0, flat.size - 1, min(6, flat.size)).astype(int)) if flat.size else []
        for i in picks:
            e = np.zeros(flat.size)
            e[i] = 1.0
            fd, disagreement = richardson(f, x0, e.reshape(x0.shape), 1e-5 * max(1.0, abs(flat[i])))
            if disagreement > 1e-7 * (abs(fd) + scale) + atol:
                skipped += 1
                continue
            err = abs(fd - g.reshape(-1)[i])
            tol = rtol * scale + atol
            checked += 1
            r = rep.ratio(f"{label}: {name}[{i}]", err, tol)
            if not (r <= 1.0):
                where = list(np.unravel_index(i, x0.shape))
                rep.fail(f"{label}: d loss/d {name}{where}: dtc's rule gives {g.reshape(-1)[i]:.12g}, "
                         f"central differences {fd:.12g} (|diff| {err:.3e} > {tol:.3e})")
    if checked == 0:
        rep.fail(f"{label}: no derivative could be checked")
    return checked, skipped


def check_optimizer_step(rep, label, dtc, model_path, flags, work):
    model = train.Model.from_text(open(model_path).read())
    opt = train.Optimizer.from_flags(flags)
    step = training_step(dtc, model_path, flags, work)
    params = {n: v.astype(np.float64) for n, v in model.init_params(SEED).items()}
    inputs = model.inputs_for_step(SEED, 0)
    gen = np.random.default_rng(9)
    state = train.State(params)
    state.step = 2
    extra = {"optimizer_step": np.array(2, dtype=np.int64)}
    for name in model.param_names:
        state.m[name] = 1e-3 * gen.standard_normal(params[name].shape)
        state.v[name] = 1e-6 * (1 + gen.random(params[name].shape))
        extra[f"{name}:adam_m"] = state.m[name]
        extra[f"{name}:adam_v"] = state.v[name]
    results = interp.evaluate(step, step_args(step, params, inputs, extra), "f64")
    _, grads = model.loss_and_grads(params, inputs)
    before = {n: v.copy() for n, v in params.items()}
    m_before = {n: v.copy() for n, v in state.m.items()}
    v_before = {n: v.copy() for n, v in state.v.items()}
    state.apply(opt, grads)
    updated = {}
    for value, attrs in zip(results[1:], step.result_attrs[1:]):
        target = step.arg_attrs[int(attrs["dtc.updates"].value)]["dtc.name"]
        updated[target] = value
    expected = {}
    for name in model.param_names:
        expected[name] = (state.params[name], before[name])
        if opt.adam:
            expected[f"{name}:adam_m"] = (state.m[name], m_before[name])
            expected[f"{name}:adam_v"] = (state.v[name], v_before[name])
    if set(updated) != set(expected):
        rep.fail(f"{label}: the step updates {sorted(updated)}, expected {sorted(expected)}")
    for key, (want, old) in expected.items():
        if key in updated:
            # The change, not the value: an update is small next to the parameter.
            compare.compare_close(rep, f"{label}: change of {key}", updated[key] - old, want - old, 1e-6, 1e-300)


def main(argv):
    extra = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="", help="'all' or comma-separated gradcases.py names")
    p.add_argument("--model", action="append", default=[])
    p.add_argument("--step", action="store_true", help="check the optimizer step (flags after --)")
    p.add_argument("--dtc", default="dtc")
    a = p.parse_args(argv)
    names = list(gradcases.CASES) if a.cases == "all" else [c for c in a.cases.split(",") if c]
    work = tempfile.mkdtemp(prefix="dtc-rules-")
    failed = False
    try:
        jobs = [(n, None) for n in names] + [(os.path.basename(m), m) for m in a.model]
        for label, path in jobs:
            if path is None:
                path = os.path.join(work, f"{label}.mlir")
                with open(path, "w") as f:
                    f.write(gradcases.case_text(label))
            rep = compare.Report()
            try:
                if a.step:
                    check_optimizer_step(rep, label, a.dtc, path, extra, work)
                    detail = f"optimizer step {' '.join(extra)}"
                else:
                    checked, skipped = check_model(rep, label, a.dtc, path, work)
                    detail = f"{checked} derivatives" + (f", {skipped} at kinks skipped" if skipped else "")
            except (tools.DtcError, interp.EvalError, mlir.ParseError, ValueError) as e:
                rep.fail(f"{label}: {e}")
                detail = "error"
            status = "ok" if rep.ok else "FAIL"
            print(f"{label}: {status}: {detail}, worst {rep.worst:.2g} of the tolerance")
            for problem in rep.problems:
                print(f"  {problem}")
            failed |= not rep.ok
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
