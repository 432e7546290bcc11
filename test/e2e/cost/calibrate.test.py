"""Checks on dtc calibrate's file and the plans made with it (calibrate.test)."""
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def fit(path):
    """Each entry's fitted lines against the points measured: the median
    ratio of line to point within a factor 2 (timings on a loaded 2-core
    machine have outliers; a wrong unit or formula is off by far more)."""
    for ranks, p in sorted(load(path)["profiles"].items(), key=lambda kv: int(kv[0])):
        peak = p["peak_flops"]["f32"]
        half = p["gemm_efficiency"]["half_flops"]
        overhead = p["kernel_overhead"]
        gemm = p["points"]["gemm_flops_seconds"]
        ratio = median([((f + half) / peak + overhead) / s for f, s in gemm])
        line = f"entry {ranks}: gemm {len(gemm)} points within a factor 2 (median)" + (
            "" if 0.5 <= ratio <= 2 else f" OFF: median {ratio:.2f}")
        for group, points in p["points"]["all_reduce_sent_bytes_seconds"].items():
            link = p["group_links"][group]
            g = int(group)
            ratio = median([(2 * (g - 1) * link["latency"] + b / link["bandwidth"]) / s for b, s in points])
            line += f"; all-reduce group {group} {len(points)} points within a factor 2 (median)" + (
                "" if 0.5 <= ratio <= 2 else f" OFF: median {ratio:.2f}")
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
