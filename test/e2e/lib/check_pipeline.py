#!/usr/bin/env python3
"""Prints what a pipelined artifact and its report say, for FileCheck.

  check_pipeline.py OUT.dtc REPORT.json [STATS.json]

Checks on the way that every message is sent once and received once with
the same shape, between the stages its attributes name. With STATS.json
(`dtc run --stats`) also prints the report's activation bytes beside the
peak the runtime's allocator measured. Standard library.
"""
import json
import sys


def body(path):
    with open(path, "rb") as f:
        header = f.readline().split()
        return json.loads(f.read(int(header[2])))


def main(artifact_path, report_path, stats_path=None):
    a = body(artifact_path)
    report = json.load(open(report_path))
    programs = a["programs"]
    print(f"{len(programs)} programs, stages {[p['stage'] for p in programs]}, "
          f"ranks {[p['ranks'] for p in programs]}")
    print("communicators " + ", ".join(f"{c['name']} {c['mesh_axes']}" for c in a["communicators"]))
    print(f"{len(programs[0]['chunks'])} chunks per stage")
    sends, recvs = {}, {}
    for p in programs:
        lists = [p["instructions"], p["finish"]]
        for chunk in p["chunks"]:
            lists += [chunk["forward"], chunk["backward_input"], chunk["backward_weight"]]
        for lst in lists:
            for inst in lst:
                if inst["op"] in ("send", "recv"):
                    buf = p["buffers"][(inst["in"] + inst["out"])[0]]
                    side = sends if inst["op"] == "send" else recvs
                    msg = inst["attrs"]["message"]
                    if msg in side:
                        sys.exit(f"message {msg} {inst['op']} twice")
                    side[msg] = (p["stage"], inst["attrs"]["peer"], buf["shape"])
    if set(sends) != set(recvs) or not sends:
        sys.exit(f"unpaired messages: sent {sorted(sends)}, received {sorted(recvs)}")
    for msg, (stage, peer, shape) in sends.items():
        rstage, rpeer, rshape = recvs[msg]
        if peer != rstage or rpeer != stage or shape != rshape:
            sys.exit(f"message {msg}: {sends[msg]} vs {recvs[msg]}")
    # Micro-batches held by stage 0 at once, from its own schedule.
    live, peak = set(), 0
    schedule = programs[0]["schedule"]
    last = {}
    for i, (kind, mb, chunk) in enumerate(schedule):
        last[(mb, chunk)] = i
    for i, (kind, mb, chunk) in enumerate(schedule):
        live.add((mb, chunk))
        peak = max(peak, len(live))
        if last[(mb, chunk)] == i:
            live.discard((mb, chunk))
    print(f"messages paired; bubble_fraction {report['bubble_fraction']:.6f}; "
          f"stage 0 holds {peak} micro-batches")
    if stats_path:
        stats = json.load(open(stats_path))
        reported = report["memory_bytes"]["activations"]
        measured = stats["activation_peak_bytes"]
        print(f"activations: reported {reported} measured {measured} "
              f"{'ok' if reported == measured else 'DIFFER'}; "
              f"{stats['microbatches_in_flight_peak']} micro-batches in flight")


if __name__ == "__main__":
    main(*sys.argv[1:])
