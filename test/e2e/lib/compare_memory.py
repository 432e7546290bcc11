#!/usr/bin/env python3
"""Compares the plan report's memory with what the runtime's counting
allocator measured (`dtc run --stats`).

  compare_memory.py REPORT.json STATS.json [--tolerance 0.10]
                    [--artifact A.dtc [--trace DIR]]

The report's peak per device must be within the tolerance of the measured
high-water mark, and so must each memory kind the report plans (parameters,
gradients, optimizer state, activations, inputs, constants, scalars,
collective staging and kernel workspace, whose planned values are the
largest over the artifact's `memory.programs`). With --trace, each rank's
memory counters (peak, parameters, gradients, optimizer state, staging)
against the plan of its own program. Prints one line per quantity and exits
1 on any miss.
"""
import argparse
import json
import os
import sys


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("report")
    p.add_argument("stats")
    p.add_argument("--artifact", help="the .dtc, for the planned bytes of every kind")
    p.add_argument("--tolerance", type=float, default=0.10)
    p.add_argument("--trace", help="the run's --trace DIR (with --artifact): every rank "
                   "against its own program's plan")
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
    if a.trace:
        # Per rank: its program's plan against the rank's own memory
        # counters (the stats above are maxima over ranks, which would hide
        # a stage that needs more than planned behind a larger one).
        with open(a.artifact, "rb") as f:
            f.readline()
            artifact = json.loads(f.read())
        planned = {p["name"]: p for p in artifact["memory"]["programs"]}
        for program in artifact["programs"]:
            plan = planned[program["name"]]
            for rank in program["ranks"]:
                with open(os.path.join(a.trace, f"rank-{rank}.json")) as f:
                    events = json.load(f)["traceEvents"]
                counters = [e["args"] for e in events
                            if e.get("ph") == "C" and e.get("name") == "memory bytes"]
                got = {k: max(c.get(k, 0) for c in counters) for k in counters[-1]} if counters else {}
                pairs.append((f"rank {rank} ({program['name']}) peak", plan["peak_bytes"],
                              got.get("total", 0)))
                pairs += [(f"rank {rank} ({program['name']}) {kind}", plan["by_kind"][kind],
                           got.get(kind, 0))
                          for kind in ("param", "grad", "optimizer", "staging")]
    ok = True
    for name, want, got in pairs:
        good = got > 0 and abs(want - got) <= a.tolerance * got if want or got else True
        ok &= good
        print(f"{name}: report {want} measured {got} {'ok' if good else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
