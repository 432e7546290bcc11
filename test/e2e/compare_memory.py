#!/usr/bin/env python3
"""Compares the plan report's memory with what the runtime's counting
allocator measured (`dtc run --stats`).

  compare_memory.py REPORT.json STATS.json [--tolerance 0.10]

The report's peak per device must be within the tolerance of the measured
high-water mark, and so must each memory kind the report plans (parameters,
gradients, optimizer state, activations, inputs, constants, scalars,
collective staging and kernel workspace, whose planned values are the
largest over the artifact's `memory.programs`). Prints one line per quantity and exits 1 on any
miss.
"""
import argparse
import json
import sys


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("report")
    p.add_argument("stats")
    p.add_argument("--artifact", help="the .dtc, for the planned bytes of every kind")
    p.add_argument("--tolerance", type=float, default=0.10)
    a = p.parse_args(argv)
    report = json.load(open(a.report))["memory_bytes"]
    stats = json.load(open(a.stats))
    measured = stats["memory_bytes"]
    allocated = stats["allocated_bytes"]
    pairs = [("peak", report["peak_per_device"], measured["total"])]
    if not a.artifact:  # the largest program's kinds (per kind: --artifact)
        pairs += [("staging", report["staging"], measured["staging"]),
                  ("workspace", report["workspace"], measured["workspace"])]
    if a.artifact:
        with open(a.artifact, "rb") as f:
            f.readline()
            memory = json.loads(f.read())["memory"]
        # The runtime reports each kind's maximum over ranks: so does this,
        # over the programs (pipeline stages differ).
        planned = {kind: max(p["by_kind"][kind] for p in memory["programs"])
                   for kind in memory["peak_by_kind"]}
        pairs += [(kind, planned[kind], allocated[kind]) for kind in sorted(planned)]
    ok = True
    for name, want, got in pairs:
        good = got > 0 and abs(want - got) <= a.tolerance * got if want or got else True
        ok &= good
        print(f"{name}: report {want} measured {got} {'ok' if good else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
