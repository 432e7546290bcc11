#!/usr/bin/env python3
"""Compares the plan report's collective bytes with the runtime's count.

  compare_comm.py REPORT.json STATS.json

REPORT.json is `dtc compile --report` (comm_bytes and comm_bytes_by_comm:
bytes each device sends per step, from the emitted program and the
runtime's algorithms); STATS.json is `dtc run --stats` (bytes the
communicators really sent in one step, maximum over ranks). Every kind, in
total and per communicator, must agree exactly. Prints one line per
communicator and kind; exits 1 on any difference. Standard library only.
"""
import json
import sys

KINDS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "shift"]


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    report = json.load(open(argv[0]))
    stats = json.load(open(argv[1]))
    failed = False
    rows = [("total", kind, report["comm_bytes"][kind],
             stats["collectives_per_step"][kind]["sent_bytes"]) for kind in KINDS]
    # Pipelines: the messages between stages, counted the same way.
    if "send_recv" in stats["collectives_per_step"]:
        rows.append(("total", "send_recv", report["comm_bytes"]["send_recv"],
                     stats["collectives_per_step"]["send_recv"]["sent_bytes"]))
    comms = set(report.get("comm_bytes_by_comm", {})) | set(stats.get("collectives_per_step_by_comm", {}))
    for comm in sorted(comms):
        for kind in KINDS:
            rows.append((comm, kind,
                         report.get("comm_bytes_by_comm", {}).get(comm, {}).get(kind, 0),
                         stats.get("collectives_per_step_by_comm", {}).get(comm, {}).get(kind, {}).get("sent_bytes", 0)))
    for comm, kind, reported, counted in rows:
        status = "ok" if reported == counted else "DIFFER"
        failed |= reported != counted
        print(f"{comm} {kind}: reported {reported} counted {counted} {status}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
