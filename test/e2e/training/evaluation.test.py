"""Checks of dtc's evaluation (evaluation.test).

  reference MODEL TOKENS K OUT STEP (--load CKPT | --seed S)
      the `eval step STEP` line of OUT against the float64 reference: the
      model's loss averaged over the token file's first K batches in the
      file's order, with the checkpoint's (or the seed's initial) parameters
  same A B RTOL        every step and eval line of A and B agree
  same-eval A B RTOL   B's one eval line equals A's of the same step
  same-steps A B RTOL  the step lines agree (B may lack A's eval lines)
"""
import math
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "reference"))
from dtcref import data, safetensors, train  # noqa: E402


def lines(path):
    steps, evals = {}, {}
    for line in open(path):
        m = re.fullmatch(r"(eval )?step (\d+) loss (\S+)\n", line)
        if not m:
            sys.exit(f"{path}: not a step or eval line: {line!r}")
        (evals if m.group(1) else steps)[int(m.group(2))] = float(m.group(3))
    return steps, evals


def close(a, b, rtol):
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rtol * abs(b)


def agree(what, a, b, rtol):
    if sorted(a) != sorted(b):
        sys.exit(f"{what}: steps {sorted(a)} against {sorted(b)}")
    for k in a:
        if not close(a[k], b[k], rtol):
            sys.exit(f"MISMATCH {what} {k}: {a[k]!r} against {b[k]!r} (rtol {rtol})")


def reference(args):
    model_path, tokens_path, k, out, step = args[:5]
    k, step = int(k), int(step)
    model = train.Model.from_text(open(model_path).read())
    if args[5] == "--load":
        params, meta = safetensors.read(args[6])
        if meta.get("dtc.step") != str(step):
            sys.exit(f"{args[6]}: step {meta.get('dtc.step')}, expected {step}")
        seed = 0
    else:
        seed = int(args[6])
        params = model.init_params(seed)
    tokens = data.read_tokens(tokens_path)
    losses = [model.loss(params, model.inputs_for_step(seed, j, tokens)) for j in range(k)]
    want = sum(losses) / k
    _, evals = lines(out)
    if step not in evals:
        sys.exit(f"{out}: no eval step {step}")
    if not close(evals[step], want, 2e-6):
        sys.exit(f"MISMATCH eval step {step}: {evals[step]!r}, the reference {want!r}")
    print(f"eval step {step}: the float64 reference agrees")


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "reference":
        return reference(args)
    a_steps, a_evals = lines(args[0])
    b_steps, b_evals = lines(args[1])
    rtol = float(args[2])
    if mode == "same":
        agree("eval step", a_evals, b_evals, rtol)
        agree("step", a_steps, b_steps, rtol)
        print(f"{len(a_evals)} evaluations and {len(a_steps)} steps agree")
    elif mode == "same-eval":
        (step,) = b_evals
        agree("eval step", {step: a_evals.get(step, math.nan)}, b_evals, rtol)
        print(f"eval step {step} agrees")
    elif mode == "same-steps":
        agree("step", a_steps, b_steps, rtol)
        print(f"{len(a_steps)} steps agree")


if __name__ == "__main__":
    main()
