#!/usr/bin/env python3
"""Compile-time benchmark: how `dtc compile` scales with the number of ops.

  bench/compile_scaling_bench.py [--ops 1000,10000,100000,200000] [--mesh 2]
                         [--repeat 1] [--dtc build/bin/dtc]

For each size it generates a deep, narrow GPT (examples/gen_model.py: 20
model ops per block, tiny tensors, so the time is the compiler's own and not
the data's), compiles it (best of --repeat runs) and prints, side by side:
  - the model's op count, the compile's wall time and CPU time (user + sys;
    on a shared machine the CPU time is the one to compare);
  - CPU microseconds per op and its ratio to the first (smallest) model's:
    1.0 is linear growth, n log n from 1k to 200k ops would be about 1.8;
  - the compiler's peak resident memory, and per op;
  - the CPU time of each stage (from `dtc compile --timing`), so a
    regression points at its stage.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS_PER_BLOCK = 20  # gen_model.py gpt: model ops of one transformer block
STAGES = ["parse+verify", "check-model", "training-step", "planned",
          "partitioned", "emit", "check-memory", "write"]
STAGE_LINE = re.compile(r"^dtc: time: (\S+) [0-9.]+ s \(cpu ([0-9.]+) s\)$", re.M)


def generate(ops, path):
    layers = max(1, round(ops / OPS_PER_BLOCK))
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gen_model.py"), "gpt",
                    "--layers", str(layers), "--hidden", "8", "--heads", "2", "--seq", "4",
                    "--vocab", "16", "--batch", "2", "-o", path], check=True)
    with open(path) as f:
        return sum(1 for line in f if '"dtc.' in line)


def compile_once(cmd):
    """(wall s, cpu s, {stage: cpu s}, peak RSS bytes) of one compile."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{err}")
    stages = {m.group(1): float(m.group(2)) for m in STAGE_LINE.finditer(err)}
    return wall, usage.ru_utime + usage.ru_stime, stages, usage.ru_maxrss * 1024


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="1000,10000,100000,200000",
                   help="model sizes in ops, smallest first (default: %(default)s)")
    p.add_argument("--mesh", default="2", help="mesh to compile for (default: 2)")
    p.add_argument("--repeat", type=int, default=1, help="runs per size, best kept (default: 1)")
    p.add_argument("--dtc", default=os.path.join(ROOT, "build", "bin", "dtc"))
    a = p.parse_args(argv)
    sizes = [int(s) for s in a.ops.split(",")]
    # Older builds have no --timing: then only the totals are printed.
    helptext = subprocess.run([a.dtc, "compile", "--help"], stdout=subprocess.PIPE,
                              text=True).stdout
    timing = ["--timing"] if "--timing" in helptext else []
    work = tempfile.mkdtemp(prefix="dtc-compile-bench-")
    rows = []
    for size in sizes:
        model = os.path.join(work, f"m{size}.mlir")
        ops = generate(size, model)
        # Data parallelism pinned: the stages of one compilation, not a search.
        devices = 1
        for size_of_axis in a.mesh.split("x"):
            devices *= int(size_of_axis)
        cmd = [a.dtc, "compile", model, "--mesh", a.mesh, "--strategy", f"dp={devices}", "-o",
               os.path.join(work, "out.dtc")] + timing
        runs = [compile_once(cmd) for _ in range(a.repeat)]
        rows.append((ops,) + min(runs, key=lambda r: r[1]))
        os.remove(model)
        print(f"  {ops} ops compiled", file=sys.stderr, flush=True)

    base = rows[0][2] / rows[0][0]
    print(f"dtc compile --mesh {a.mesh}: deep GPT, {OPS_PER_BLOCK} model ops per block")
    print(f"{'ops':>8} {'wall s':>7} {'cpu s':>7} {'cpu us/op':>9} {'vs first':>8} "
          f"{'RSS MiB':>8} {'KiB/op':>7}" + ("  cpu s per stage: " + " ".join(STAGES) if timing else ""))
    for ops, wall, cpu, stages, rss in rows:
        per_op = cpu / ops
        line = (f"{ops:>8} {wall:>7.2f} {cpu:>7.2f} {per_op * 1e6:>9.1f} {per_op / base:>8.2f} "
                f"{rss / 2**20:>8.0f} {rss / ops / 1024:>7.1f}")
        if timing:
            line += "  " + " ".join(f"{stages.get(s, 0.0):.2f}" for s in STAGES)
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
