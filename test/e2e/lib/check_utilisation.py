#!/usr/bin/env python3
"""Report invariants of the predicted utilisation, for any kind of plan.

  check_utilisation.py REPORT.json ... [--same-model] [--one-device REPORT.json]

For every report: 0 < mfu <= hfu <= 1 (model flops utilisation leaves
recomputation out, hardware flops utilisation counts it), model flops at
most the executed flops, step time = compute + communication time, compute
time no less than the executed flops at the profile's best GEMM efficiency
stretched by the bubble (compute time x (1 - bubble) x gemm max >= hfu x
step time; no kernel is faster than that), and the bubble of GPipe and 1F1B
(p-1)/(n+p-1), of interleaved 1F1B (p-1)/(v n+p-1), n = micro-batches x
accumulation steps, v the virtual stages. With
--same-model (the reports are one model under plans that differ only in
recomputation): every report's model flops equal the first's, and a report
that executes more flops than the first has a lower MFU. With --one-device
(the same model on one device): every report's model flops per device times
its devices are the one device's (within 0.5%: mixed precision's casts),
Megatron's MFU, not the busiest device's own count (tp ranks computing an
op alike, a pipeline's busiest stage). Prints a line per report; exits 1 on
any violation. Standard library only.
"""
import json
import sys


def main(argv):
    same = "--same-model" in argv
    argv = [p for p in argv if p != "--same-model"]
    one_device = None
    if "--one-device" in argv:
        at = argv.index("--one-device")
        with open(argv[at + 1]) as f:
            one_device = json.load(f)["predicted"]["model_flops_per_device"]
        argv = argv[:at] + argv[at + 2:]
    paths = argv
    ok = True
    first = None
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        pr = report["predicted"]
        problems = []
        if not 0 < pr["mfu"] <= pr["hfu"] <= 1:
            problems.append(f"not 0 < mfu {pr['mfu']:.4f} <= hfu {pr['hfu']:.4f} <= 1")
        if pr["model_flops_per_device"] > pr["flops_per_device"]:
            problems.append("model flops above the executed flops")
        if abs(pr["step_time_s"] - pr["compute_time_s"] - pr["comm_time_s"]) > 1e-12 * max(pr["step_time_s"], 1):
            problems.append("step time is not compute + communication")
        bubble = report["bubble_fraction"]
        gemm_max = report["hw_profile"]["gemm_efficiency"]["max"]
        if pr["compute_time_s"] * (1 - bubble) * gemm_max < pr["hfu"] * pr["step_time_s"] * (1 - 1e-9):
            problems.append("compute time below the executed flops at the best GEMM efficiency over (1 - bubble)")
        st = report["strategy"]
        p, n = st.get("pp", 1), st.get("microbatches", 1) * st.get("grad_accum", 1)
        v = st.get("virtual_stages", 1)
        expected = {"gpipe": (p - 1) / (n + p - 1), "1f1b": (p - 1) / (n + p - 1),
                    "interleaved": (p - 1) / (v * n + p - 1)}.get(st.get("schedule"))
        if p > 1 and expected is not None and abs(bubble - expected) > 1e-12:
            problems.append(f"bubble {bubble}, the schedule's formula {expected}")
        if same and first is not None:
            if pr["model_flops_per_device"] != first["model_flops_per_device"]:
                problems.append(f"model flops {pr['model_flops_per_device']}, the first plan's "
                                f"{first['model_flops_per_device']}")
            if pr["flops_per_device"] > first["flops_per_device"] and not pr["mfu"] < first["mfu"]:
                problems.append("more executed flops but no lower MFU")
        if one_device is not None:
            total = pr["model_flops_per_device"] * report["devices"]
            if abs(total / one_device - 1) > 0.005:
                problems.append(f"model flops x {report['devices']} devices {total}, "
                                f"one device's {one_device}")
        first = first or pr
        ok &= not problems
        print(f"{path.rsplit('/', 1)[-1]}: mfu {pr['mfu']:.4f} hfu {pr['hfu']:.4f} model flops "
              f"{pr['model_flops_per_device']} executed {pr['flops_per_device']}: "
              f"{'ok' if not problems else 'FAIL: ' + '; '.join(problems)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
