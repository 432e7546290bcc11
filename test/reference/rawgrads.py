#!/usr/bin/env python3
"""Checks the raw gradients dtc returns with `--optimizer none`.

  rawgrads.py MODEL.mlir --work DIR [--meshes 1,2,4,2x2] [--step K] [--seed S]
              [--data FILE] [--clip-factors F,...] [-- dtc compile flags]

Per mesh: `dtc compile --optimizer none --mesh M --strategy dp=<devices>`,
`dtc run --steps K+1 --save-step` (step K's inputs and returned gradients,
NAME:grad), then:
  - the inputs dtc fed at step K equal the reference's exactly (Philox
    synthetic inputs, or the token windows of --data);
  - the loss and every gradient agree with the float64 reference to the
    f32-derived tolerance of dtcref/compare.py (so a gradient scaled by the
    mesh size, e.g. an all-reduce that averages, fails; Adam cannot hide
    it);
  - with --clip-factors: for each F, compiled again with --grad-clip C,
    C = F * ||g|| of the reference (F < 1: clipped; F > 1: unchanged), the
    returned gradients equal g * min(1, C / (||g|| + 1e-6)) computed from
    the unclipped gradients g of the same run (1e-5 relative to each
    tensor's largest element; both from dtc's f32 kernels), and the scale
    matches the reference's. A factor a little above 1 also catches a norm
    that is too large (e.g. summed per tensor).
Exits 1 on any mismatch.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from dtcref import compare, data, safetensors, tools, train  # noqa: E402


def run_step(a, mesh, flags, tag, data_flags):
    artifact = os.path.join(a.work, f"{tag}.dtc")
    tools.run([a.dtc, "compile", a.model, "--mesh", mesh, "--strategy", f"dp={tools.devices(mesh)}",
               "--optimizer", "none", "-o", artifact] + flags, os.path.join(a.work, f"{tag}.compile.log"))
    out_path = os.path.join(a.work, f"{tag}.step.safetensors")
    out = tools.run([a.dtc, "run", artifact, "--steps", str(a.step + 1), "--seed", str(a.seed),
                     "--save-step", out_path] + data_flags, os.path.join(a.work, f"{tag}.run.log"))
    tensors, meta = safetensors.read(out_path)
    return tools.losses_of(out), tensors, meta


def main(argv):
    extra = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--work", required=True)
    p.add_argument("--meshes", default="1")
    p.add_argument("--step", type=int, default=0, help="check this global step")
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--data")
    p.add_argument("--data-dtype", default="uint16")
    p.add_argument("--clip-factors", default="", help="comma-separated multiples of the gradient norm")
    p.add_argument("--dtc", default="dtc")
    p.add_argument("--tamper", choices=["grad"], help="test hook: make element 2 of the second gradient NaN")
    a = p.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    model = train.Model.from_text(open(a.model).read())
    tokens = data.read_tokens(a.data, a.data_dtype) if a.data else None
    data_flags = ["--data", a.data, "--data-dtype", a.data_dtype] if a.data else []
    params = model.init_params(a.seed)
    inputs = model.inputs_for_step(a.seed, a.step, tokens)
    l64, g64 = model.loss_and_grads(params, inputs, "f64")
    l32, g32 = model.loss_and_grads(params, inputs, "f32")
    norm64 = math.sqrt(sum(float(np.sum(g * g)) for g in g64.values()))
    print(f"reference: step {a.step} loss {l64:.7g}, gradient norm {norm64:.6g}")
    failed = False
    for mesh in a.meshes.split(","):
        tag = "mesh" + mesh.replace("x", "_")
        rep = compare.Report()
        losses, tensors, meta = run_step(a, mesh, extra, tag, data_flags)
        if meta.get("dtc.step") != str(a.step):
            rep.fail(f"--save-step wrote step {meta.get('dtc.step')!r}, expected {a.step}")
        compare.compare_losses(rep, [losses.get(a.step, float("nan"))], [l64], [l32])
        for name, want in inputs.items():
            got = tensors.get(name)
            if got is None:
                rep.fail(f"input {name} missing from the step file")
            elif got.shape != want.shape or not np.array_equal(got.astype(want.dtype), want):
                idx = np.argwhere(got.astype(want.dtype) != want)[0] if got.shape == want.shape else None
                where = f" first at {list(idx)}: {got[tuple(idx)]} vs {want[tuple(idx)]}" if idx is not None else ""
                rep.fail(f"input {name} of step {a.step} differs from the reference's{where}")
        if a.tamper == "grad":
            key = f"{model.param_names[1]}:grad"
            tensors[key] = tensors[key].copy()
            tensors[key].reshape(-1)[2] = np.nan
        grads = {}
        for name in model.param_names:
            got = tensors.get(f"{name}:grad")
            if got is None:
                rep.fail(f"no gradient {name}:grad in the step file")
                continue
            grads[name] = got
            compare.compare_tensor(rep, f"d loss/d {name}", got, g64[name], g32[name])
        for clip in [float(f) * norm64 for f in a.clip_factors.split(",") if f]:
            _, clipped, _ = run_step(a, mesh, extra + ["--grad-clip", repr(clip)], f"{tag}.clip{clip:g}", data_flags)
            norm = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads.values()))
            scale = min(1.0, clip / (norm + 1e-6))
            ref_scale = min(1.0, clip / (norm64 + 1e-6))
            if not (abs(scale - ref_scale) <= 1e-5 * ref_scale):
                rep.fail(f"clip {clip:g}: dtc's gradient norm {norm:.9g} gives scale {scale:.9g}, "
                         f"the reference's {ref_scale:.9g}")
            for name, g in grads.items():
                got = clipped.get(f"{name}:grad")
                want = g.astype(np.float64) * scale
                if got is None:
                    rep.fail(f"clip {clip:g}: no gradient {name}:grad")
                    continue
                compare.compare_close(rep, f"clip {clip:g}: {name}:grad vs g * min(1, C / (|g| + 1e-6))",
                                      got, want, 1e-5, 1e-30)
            print(f"  clip {clip:g}: |g| = {norm:.6g}, {'clipped' if scale < 1 else 'unchanged'} "
                  f"(scale {scale:.6g})")
        status = "ok" if rep.ok else "FAIL"
        print(f"mesh {mesh}: {status}: worst {rep.worst:.2f} of the tolerance ({rep.worst_what})")
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
