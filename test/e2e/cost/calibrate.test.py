"""Checks on dtc calibrate's file and the plans made with it (calibrate.test)."""
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def within(predicted, measured, factor=3.0):
    return measured > 0 and 1 / factor <= predicted / measured <= factor


def fit(path):
    """Each entry's fitted lines against the points measured (a factor 3:
    timings on a shared 2-core machine are noisy; a wrong unit or formula is
    off by far more)."""
    for ranks, p in sorted(load(path)["profiles"].items(), key=lambda kv: int(kv[0])):
        peak = p["peak_flops"]["f32"]
        half = p["gemm_efficiency"]["half_flops"]
        overhead = p["kernel_overhead"]
        gemm = p["points"]["gemm_flops_seconds"]
        bad = [f for f, s in gemm if not within((f + half) / peak + overhead, s)]
        line = f"entry {ranks}: gemm {len(gemm)} points within a factor 3" + (f" OFF at {bad}" if bad else "")
        for group, points in p["points"]["all_reduce_sent_bytes_seconds"].items():
            link = p["group_links"][group]
            g = int(group)
            off = [b for b, s in points
                   if not within(2 * (g - 1) * link["latency"] + b / link["bandwidth"], s)]
            line += f"; all-reduce group {group} {len(points)} points within a factor 3" + (
                f" OFF at {off}" if off else "")
        print(line)


def uses(path, report, entry):
    profile = load(path)["profiles"][entry]
    hw = load(report)["hw_profile"]
    print("peak from entry", entry + ":", hw["peak_flops"]["f32"] == profile["peak_flops"]["f32"])
    for axis, link in enumerate(hw.get("axes", [])):
        group = str(len(load(report)["mesh"]) and load(report)["mesh"][axis])
        measured = profile["group_links"].get(group)
        if measured:
            print(f"axis {axis} link from group {group}:",
                  link["bandwidth"] == measured["bandwidth"] and link["latency"] == measured["latency"])
    print("source:", hw.get("source"))


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "fit":
        fit(sys.argv[2])
    elif what == "uses":
        uses(*sys.argv[2:5])
    else:
        sys.exit(2)
