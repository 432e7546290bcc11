#!/usr/bin/env python3
"""Prices the kernels an artifact adds to the step's ops (accumulate,
fill, microbatch_slice) from the artifact alone, as the a100 profile
does, and compares them with the report's predicted.kernel_time_by_op_s.

  added-kernels.test.py ARTIFACT.dtc REPORT.json --dtc dtc
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from check_optimizer_memory import buffer_bytes  # noqa: E402
from dp_equivalence import inspect_artifact  # noqa: E402

# The a100 profile (lib/CostModel/CostModel.cpp): HBM bandwidth, the share
# element-wise kernels reach, the kernel overhead.
BANDWIDTH, EFFICIENCY, OVERHEAD = 2.0e12, 0.70, 4e-6
ADDED = ("accumulate", "fill", "microbatch_slice")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("artifact")
    p.add_argument("report")
    p.add_argument("--dtc", required=True)
    a = p.parse_args()
    art = inspect_artifact(a.dtc, a.artifact)
    m = art["pipeline"]["microbatches"] if art.get("pipeline") else 1
    busiest, calls_of_busiest = {}, {}
    for program in art["programs"]:
        lists = [(program["instructions"], 1), (program.get("finish", []), 1)]
        for chunk in program.get("chunks", []):
            lists += [(chunk.get(k, []), m) for k in ("forward", "backward_input", "backward_weight")]
        seconds, calls = {}, {}
        for insts, times in lists:
            for inst in insts:
                if inst["op"] not in ADDED:
                    continue
                out = buffer_bytes(program["buffers"][inst["out"][0]])
                moved = {"accumulate": 3 * out, "fill": out, "microbatch_slice": 2 * out}[inst["op"]]
                seconds[inst["op"]] = seconds.get(inst["op"], 0) + times * (
                    moved / (BANDWIDTH * EFFICIENCY) + OVERHEAD)
                calls[inst["op"]] = calls.get(inst["op"], 0) + times
        if sum(seconds.values()) > sum(busiest.values()):
            busiest, calls_of_busiest = seconds, calls
    report = json.load(open(a.report))
    predicted = report["predicted"]["kernel_time_by_op_s"]
    problems = 0
    if report["bubble_fraction"] == 0:
        total, compute = sum(predicted.values()), report["predicted"]["compute_time_s"]
        ok = abs(total - compute) <= 1e-9 * compute
        problems += not ok
        print(f"no bubble: compute {compute:.9g} s, the kernels' sum {total:.9g} s"
              f"{'' if ok else '  <-- MISMATCH'}")
    for op in ADDED:
        want, got = busiest.get(op, 0.0), predicted.get(op, 0.0)
        ok = abs(got - want) <= 1e-9 * max(want, 1e-12)
        problems += not ok
        print(f"{op}: {calls_of_busiest.get(op, 0)} per step, report {got:.9g} s, "
              f"from the artifact {want:.9g} s{'' if ok else '  <-- MISMATCH'}")
    print("added kernels ok" if not problems else f"FAIL: {problems} mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
