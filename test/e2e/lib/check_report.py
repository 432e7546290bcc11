#!/usr/bin/env python3
"""Checks a `dtc compile --report` against calculations made from the model
alone (for data-parallel plans of models whose only batch reductions are the
loss's), and against the runtime's own measurement.

  check_report.py MODEL.mlir REPORT.json --mesh 2x2 --optimizer adam
                  [--hw a100] [--stats STATS.json]

  - params: the element count P of the dtc.param arguments;
  - mesh, devices, strategy (dp = devices, nothing else), axes (dp over
    every mesh axis larger than 1), no pipeline bubble;
  - memory per device: params 4P, grads 4P, optimizer 8P for Adam/AdamW and
    0 for SGD (16 bytes per parameter for f32 Adam), total the sum of the
    categories and no less than params + grads + optimizer + activations;
  - all-reduce bytes per device: the ring's 2(n-1)/n D for D = the
    gradients and the loss, 4P + 4 bytes; no other collective;
  - predicted: step time = compute + communication, compute at least
    flops / (the profile's f32 peak x its best GEMM efficiency) (no kernel
    is faster), tflops and MFU consistent with them, flops per
    device at least the matmuls' 2 M N K of the forward pass and of the
    weight gradients, divided over the devices; the kernel time by op
    positive, summing to the compute time, its matmuls no faster than
    those flops at the best GEMM efficiency;
  - with --stats (dtc run --stats): the runtime's memory per category and
    all-reduce wire bytes equal the report's, and every op the report
    prices is a kernel the runtime ran.
Prints the comparisons; exits 1 on any mismatch. Uses the reference's MLIR
parser (test/reference).
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "reference"))

from dtcref import mlir  # noqa: E402

# The builtin profiles' best GEMM efficiency (lib/CostModel/CostModel.cpp).
GEMM_MAX = {"a100": 0.80, "h100": 0.70, "h200": 0.70}
PEAK_F32 = {"a100": 19.5e12, "h100": 67e12, "h200": 67e12}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("report")
    p.add_argument("--mesh", required=True)
    p.add_argument("--optimizer", default="adam")
    p.add_argument("--hw")
    p.add_argument("--stats")
    a = p.parse_args()
    main_func = mlir.parse_module(open(a.model).read()).func("main")
    report = json.load(open(a.report))
    mesh = [int(x) for x in a.mesh.split("x")]
    n = math.prod(mesh)
    P = sum(t.numel for i, (_, t) in enumerate(main_func.args) if "dtc.param" in main_func.arg_attrs[i])
    types = dict(main_func.args)
    for op in main_func.ops:
        types.update(zip(op.results, op.result_types))
    # 2 M N K per matmul: output elements times the contracted length.
    matmul = sum(2 * op.result_types[0].numel * types[op.operands[0]].shape[-1]
                 for op in main_func.ops if op.name == "dtc.matmul")
    problems = []

    def expect(what, got, want, rel=0.0):
        ok = abs(got - want) <= rel * abs(want) if isinstance(want, (int, float)) else got == want
        print(f"{what}: report {got}, expected {want}{'' if ok else '  <-- MISMATCH'}")
        if not ok:
            problems.append(what)

    expect("params", report["params"], P)
    expect("mesh", report["mesh"], mesh)
    expect("devices", report["devices"], n)
    s = report["strategy"]
    expect("strategy", {k: s[k] for k in ("dp", "tp", "pp", "zero")}, {"dp": n, "tp": 1, "pp": 1, "zero": 0})
    expect("axes", report["axes"], {"dp": [i for i, size in enumerate(mesh) if size > 1]})
    expect("bubble_fraction", report["bubble_fraction"], 0.0)
    mem = report["memory_bytes"]
    expect("memory params", mem["params"], 4 * P)
    expect("memory grads", mem["grads"], 4 * P)
    expect("memory optimizer", mem["optimizer"], 8 * P if a.optimizer in ("adam", "adamw") else 0)
    if a.optimizer in ("adam", "adamw"):
        expect("params + grads + optimizer (16 bytes per parameter)",
               mem["params"] + mem["grads"] + mem["optimizer"], 16 * P)
    low = mem["params"] + mem["grads"] + mem["optimizer"] + mem["activations"]
    if not (mem["total"] >= low):
        problems.append("memory total")
        print(f"memory total: report {mem['total']} < the categories' sum {low}  <-- MISMATCH")
    ring = 2 * (n - 1) / n * (4 * P + 4)
    # The ring moves whole elements: each all-reduce's chunks are floor or
    # ceil of e/n, so a member sends 2(e - its chunk) elements, at most two
    # elements over 2(n-1)/n e.
    calls = report["collective_calls"].get("all_reduce", 0)  # none on one device
    got = report["comm_bytes"]["all_reduce"]
    ok = ring <= got <= ring + 8 * calls
    print(f"all_reduce bytes (ring 2(n-1)/n (4P + 4), whole elements): report {got}, expected "
          f"{ring} to {ring + 8 * calls}{'' if ok else '  <-- MISMATCH'}")
    if not ok:
        problems.append("all_reduce bytes")
    for kind in ("all_gather", "reduce_scatter", "all_to_all", "send_recv"):
        expect(f"{kind} bytes", report["comm_bytes"][kind], 0)
    pr = report["predicted"]
    expect("step time = compute + communication", pr["step_time_s"], pr["compute_time_s"] + pr["comm_time_s"], 1e-12)
    if a.hw in PEAK_F32:
        peak = PEAK_F32[a.hw]
        fastest = pr["flops_per_device"] / (peak * GEMM_MAX[a.hw])
        ok = pr["compute_time_s"] >= fastest * (1 - 1e-9)
        print(f"compute time: report {pr['compute_time_s']}, at least {fastest}{'' if ok else '  <-- MISMATCH'}")
        if not ok:
            problems.append("compute time")
        expect("mfu", pr["mfu"], pr["model_flops_per_device"] / pr["step_time_s"] / peak, 1e-9)
        expect("hfu", pr["hfu"], pr["flops_per_device"] / pr["step_time_s"] / peak, 1e-9)
    expect("tflops per device", pr["tflops_per_device"], pr["flops_per_device"] / pr["step_time_s"] / 1e12, 1e-9)
    low_flops = 2 * matmul / n
    ok = pr["flops_per_device"] >= low_flops
    print(f"flops per device: report {pr['flops_per_device']}, at least {low_flops:.0f} "
          f"(forward and weight-gradient matmuls){'' if ok else '  <-- MISMATCH'}")
    if not ok:
        problems.append("flops")
    by_op = pr["kernel_time_by_op_s"]
    ok = by_op and all(t > 0 for t in by_op.values())
    print(f"predicted kernel time by op: {sorted(by_op)}{'' if ok else '  <-- MISMATCH (none, or not positive)'}")
    if not ok:
        problems.append("kernel time by op")
    expect("compute time = the kernels' sum (no bubble)", pr["compute_time_s"], sum(by_op.values()), 1e-9)
    if a.hw in PEAK_F32:
        gemm = sum(t for op, t in by_op.items() if op.startswith("matmul"))
        fastest_gemm = low_flops / (PEAK_F32[a.hw] * GEMM_MAX[a.hw])
        ok = gemm >= fastest_gemm * (1 - 1e-9)
        print(f"matmul kernel time: report {gemm}, at least {fastest_gemm}{'' if ok else '  <-- MISMATCH'}")
        if not ok:
            problems.append("matmul kernel time")
    if a.stats:
        stats = json.load(open(a.stats))
        ran = set(stats["seconds_per_step_by_op"])
        ok = set(by_op) <= ran
        print(f"predicted ops the runtime ran: {'all' if ok else sorted(set(by_op) - ran)}"
              f"{'' if ok else '  <-- MISMATCH (not kernels of the runtime)'}")
        if not ok:
            problems.append("kernel names")
        names = {"params": "param", "grads": "grad", "optimizer": "optimizer", "activations": "activation",
                 "total": "total"}
        for key, cat in names.items():
            expect(f"measured memory {cat}", stats["memory_bytes"].get(cat, 0), mem[key])
        expect("measured all_reduce sent bytes", stats["collectives_per_step"]["all_reduce"]["sent_bytes"],
               report["comm_bytes"]["all_reduce"], 1e-12)
        expect("measured all_reduce data bytes (4P + 4 per step)",
               stats["collectives_per_step"]["all_reduce"]["bytes"], (4 * P + 4) if n > 1 else 0)
    print("FAIL: " + ", ".join(problems) if problems else "report ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
