"""The collectives `dtc inspect --summary` lists (its table) against what
`dtc run --stats` measured: per communicator and kind, the calls per step
and the bytes (the summary prints them rounded, as every dtc message
does), the largest over the programs as the stats file takes the largest
over ranks; sends against the measured point-to-point calls."""
import json
import re
import sys

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def timed(args):
    """--timed A.json B.json NA NB: the stats files time NA and NB steps and
    count the same calls per step for every kernel row."""
    a, b = (json.load(open(p)) for p in args[:2])
    want = (int(args[2]), int(args[3]))
    if (a["timed_steps"], b["timed_steps"]) != want:
        sys.exit(f"MISMATCH timed steps {a['timed_steps']}, {b['timed_steps']}; expected {want}")
    rows_a = {r["kernel"]: r["calls_per_step"] for r in a["kernels"]}
    rows_b = {r["kernel"]: r["calls_per_step"] for r in b["kernels"]}
    if rows_a != rows_b:
        diff = sorted(k for k in set(rows_a) | set(rows_b) if rows_a.get(k) != rows_b.get(k))
        sys.exit(f"MISMATCH calls per step differ in {diff[:5]}")
    print(f"{want[0]} and {want[1]} timed steps, the same calls per step in {len(rows_a)} kernel rows")


def main():
    if sys.argv[1] == "--timed":
        return timed(sys.argv[2:])
    text, stats = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
    table = text.split("collectives per step (per rank)\n", 1)[1].splitlines()[1:]
    listed = {}
    for row in table:
        m = re.fullmatch(r"\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+([\d.]+) (\S+)", row)
        if not m:
            sys.exit(f"not a collective row: {row!r}")
        _, comm, kind, calls, size, unit = m.groups()
        key = (comm, kind)
        calls, size = int(calls), float(size) * UNITS[unit]
        old = listed.get(key, (0, 0))
        listed[key] = (max(old[0], calls), max(old[1], size))
    measured = {}
    for comm, kinds in stats["collectives_per_step_by_comm"].items():
        for kind, c in kinds.items():
            if c["calls"]:
                measured[(comm, kind)] = (c["calls"], c["bytes"])
    sends = {k: v for k, v in listed.items() if k[1] == "send"}
    listed = {k: v for k, v in listed.items() if k[1] != "send"}
    if set(listed) != set(measured):
        sys.exit(f"MISMATCH: listed {sorted(listed)}, measured {sorted(measured)}")
    for key, (calls, size) in listed.items():
        got_calls, got_bytes = measured[key]
        if calls != got_calls or abs(size - got_bytes) > 0.01 * got_bytes:
            sys.exit(f"MISMATCH {key}: listed {calls} calls {size:.0f} B, measured {got_calls} calls {got_bytes} B")
    p2p = stats["collectives_per_step"]["send_recv"]["calls"]
    if sum(c for c, _ in sends.values()) != p2p:
        sys.exit(f"MISMATCH sends: listed {sends}, measured {p2p} calls")
    print("the summary's collectives are the measured ones")


if __name__ == "__main__":
    main()
