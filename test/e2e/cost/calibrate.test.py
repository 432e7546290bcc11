"""Checks on dtc calibrate's file and the plans made with it (calibrate.test)."""
import json
import sys

import numpy as np


def load(path):
    with open(path) as f:
        return json.load(f)


def log_error(intercept, slope, points):
    """Sum of log(line / point)^2 over the points, for arrays of lines."""
    sizes = np.array([size for size, _ in points])
    seconds = np.array([s for _, s in points])
    predicted = intercept[..., None] + slope[..., None] * sizes
    with np.errstate(divide="ignore", invalid="ignore"):
        error = np.log(predicted / seconds) ** 2
    return np.where(predicted > 0, error, np.inf).sum(axis=-1)


def best_line_error(points, min_intercept):
    """The least log error of any line through `points` with an intercept
    of at least `min_intercept` and a non-negative slope: a grid over the
    slope and the intercept's excess (0 and a geometric range each),
    zoomed in three times around its best."""
    sizes = [size for size, _ in points]
    seconds = [s for _, s in points]
    a_lo, a_hi = min(seconds) * 1e-4, max(seconds) * 4
    b_lo, b_hi = min(seconds) / max(sizes) * 1e-4, max(seconds) / min(sizes) * 4
    best = np.inf
    for _ in range(4):
        a = np.concatenate([[0.0], np.geomspace(a_lo, a_hi, 300)])
        b = np.concatenate([[0.0], np.geomspace(b_lo, b_hi, 300)])
        grid = log_error(min_intercept + a[:, None] + 0 * b[None, :],
                         0 * a[:, None] + b[None, :], points)
        i, j = np.unravel_index(np.argmin(grid), grid.shape)
        best = min(best, grid[i, j])
        # Zoom: a factor of 4 either way of the best (from 0: the low end).
        a_c = a[i] if a[i] > 0 else a_lo
        b_c = b[j] if b[j] > 0 else b_lo
        a_lo, a_hi = a_c / 4, a_c * 4
        b_lo, b_hi = b_c / 4, b_c * 4
    return best


def check(name, intercept, slope, points, min_intercept=0.0):
    """Whether the file's line, as the cost model reads it, is the best line
    through its points (to 0.1%): a wrong unit, a wrong formula or a poor
    fit all make it worse than the best."""
    mine = float(log_error(np.array(intercept), np.array(slope), points))
    best = best_line_error(points, min_intercept)
    verdict = "best fit" if mine <= best * 1.001 + 1e-9 else f"OFF: {mine:.4g} > {best:.4g}"
    return f"{name} {len(points)} points: {verdict}"


def median(values):
    values = sorted(values)
    n = len(values)
    return (values[(n - 1) // 2] + values[n // 2]) / 2


def sync_check(link, points):
    """The file's (sync_overhead, sync_ramp) against a fit of its own: the
    least squared error of overhead * min(1, length / ramp) through each
    length's median, for each measured length as the ramp."""
    by_length = {}
    for length, seconds in points:
        by_length.setdefault(length, []).append(seconds)
    medians = sorted((x, median(ys)) for x, ys in by_length.items())
    best = None
    for ramp, _ in medians:
        w = [min(1.0, x / ramp) for x, _ in medians]
        overhead = max(0.0, sum(wi * y for wi, (_, y) in zip(w, medians)) / sum(wi * wi for wi in w))
        error = sum((y - overhead * wi) ** 2 for wi, (_, y) in zip(w, medians))
        if best is None or error < best[0]:
            best = (error, overhead, ramp)
    _, overhead, ramp = best
    close = lambda a, b: abs(a - b) <= 1e-12 + 1e-9 * abs(b)
    verdict = "fit" if close(link["sync_overhead"], overhead) and close(link["sync_ramp"], ramp) \
        else f"OFF: ({link['sync_overhead']}, {link['sync_ramp']}) is not ({overhead}, {ramp})"
    return f"{len(points)} points at {len(by_length)} lengths: {verdict}"


def fit(path):
    """Each entry's fitted lines against the points measured: the line the
    cost model reads from the profile's fields (docs/cost-model.md) is the
    best of all lines through the points in log error (the GEMM line starts
    at the kernel overhead). Noise (a loaded 2-core machine) moves the
    points, never this."""
    for ranks, p in sorted(load(path)["profiles"].items(), key=lambda kv: int(kv[0])):
        peak = p["peak_flops"]["f32"]
        half = p["gemm_efficiency"]["half_flops"]
        overhead = p["kernel_overhead"]
        line = f"entry {ranks}: " + check(
            "gemm", half / peak + overhead, 1 / peak, p["points"]["gemm_flops_seconds"],
            overhead)
        line += "; " + check("add", overhead, 1 / p["memory_bandwidth"],
                             p["points"]["add_bytes_seconds"])
        # Attention's curves are per head: calibrate times 4 x 4 heads a
        # call, so the line's intercept holds 16 half_flops.
        classes, points = p["kernel_classes"], p["points"]["kernel_classes"]
        for name in ("attention", "attention_grad"):
            rate = peak * classes[name]["max"]
            line += "; " + check(name, overhead + 16 * classes[name]["half_flops"] / rate,
                                 1 / rate, points[name + "_flops_seconds"], overhead)
        rows = classes["row_reduction"]
        line += "; " + check("row_reduction", rows["overhead"], 1 / rows["bandwidth"],
                             points["row_reduction_bytes_seconds"], overhead)
        adam = classes["optimizer"]
        line += "; " + check("optimizer", adam["overhead"], 1 / adam["bandwidth"],
                             points["optimizer_bytes_seconds"], overhead)
        for group, points in p["points"]["all_reduce_sent_bytes_seconds"].items():
            link = p["group_links"][group]
            g = int(group)
            line += "; " + check(f"all-reduce group {group}", 2 * (g - 1) * link["latency"],
                                 1 / link["bandwidth"], points)
            # The sync overhead after 1, 2, 4 and 8 matmuls between calls
            # (two all-reduce sizes, three times each, every group size):
            # sync_overhead, never below zero, reached after sync_ramp
            # seconds of computation.
            # One fit of all the entry's groups' points, every group's.
            every = [pt for pts in p["points"]["sync_overhead_compute_seconds"].values() for pt in pts]
            line += f"; sync group {group} " + sync_check(link, every)
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
