#!/usr/bin/env python3
"""Checks the traces of `dtc run --trace DIR` against the trace-event format
(the JSON that chrome://tracing and Perfetto load) and against the run.

  check_trace.py DIR --ranks N [--stats STATS.json] [--steps K] [--stages] [--overlap [--min-overlap F]]
  check_trace.py --file TRACE.json ...     (one file; for the negative tests)

Format, per file: a JSON object with a "traceEvents" list and a
"displayTimeUnit" of "ms" or "ns"; every event has "ph", "name", "pid" and
"tid" (integers) and, except metadata, a numeric "ts" >= 0; complete events
("X") have "dur" >= 0; begin/end events ("B"/"E") are balanced per thread;
the complete and begin/end events of one thread nest (no partial overlap);
counter events ("C") have numeric args; one process per file, named by a
process_name metadata event, and a different process in every file.

Against the run: every rank shows K "step" events, kernels on a compute
thread and, when --stats is given, per step exactly the collectives the
stats counted (calls and data bytes per kind and communicator), each with a
communicator and its bytes; and memory counters per category. With
--stages (pipeline stages run different programs) each rank stays within
the stats, which are maxima over ranks, some rank reaches each maximum, and
the sends and receives carry a communicator, an operand and their bytes.
With --overlap every rank's trace shows a gradient bucket's all-reduce
(a collective with a "bucket" argument) running while a kernel of a later
instruction runs: the buckets overlap the rest of the backward; with
--min-overlap F, at least F of the buckets' reduction time does.
Prints one line per finding and "trace ok" at the end; exits 1 on any
finding.
"""
import argparse
import collections
import json
import os
import sys

problems = []


def problem(msg):
    problems.append(msg)
    print("PROBLEM: " + msg)


def check_format(path, data):
    """The trace-event format; returns the events or None."""
    if not isinstance(data, dict):
        problem(f"{path}: the top level is not an object")
        return None
    events = data.get("traceEvents")
    if not isinstance(events, list):
        problem(f"{path}: no traceEvents list")
        return None
    if data.get("displayTimeUnit") not in ("ms", "ns"):
        problem(f"{path}: displayTimeUnit is {data.get('displayTimeUnit')!r}, not ms or ns")
    open_b = collections.defaultdict(list)
    spans = collections.defaultdict(list)
    for i, e in enumerate(events):
        where = f"{path}: event {i}"
        if not isinstance(e, dict):
            problem(f"{where}: not an object")
            continue
        ph = e.get("ph")
        if ph not in ("X", "B", "E", "C", "M", "i", "I"):
            problem(f"{where}: unknown phase {ph!r}")
            continue
        for key in ("name", "pid", "tid"):
            if key not in e:
                problem(f"{where} ({ph}): no {key}")
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            problem(f"{where}: pid and tid must be integers")
        if not isinstance(e.get("name"), str):
            problem(f"{where}: name must be a string")
        if ph == "M":
            continue
        ts = e.get("ts")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool) or ts < 0:
            problem(f"{where} ({e.get('name')}): ts is {ts!r}")
            continue
        thread = (e.get("pid"), e.get("tid"))
        if ph == "X":
            dur = e.get("dur")
            if not isinstance(dur, (int, float)) or isinstance(dur, bool) or dur < 0:
                problem(f"{where} ({e.get('name')}): dur is {dur!r}")
                continue
            # Whole nanoseconds, as Perfetto keeps them (so sums of decimal
            # microseconds do not differ in the last bit).
            start = round(ts * 1000)
            spans[thread].append((start, start + round(dur * 1000), e.get("name"), i))
        elif ph == "B":
            open_b[thread].append((round(ts * 1000), e.get("name"), i))
        elif ph == "E":
            if not open_b[thread]:
                problem(f"{where}: an end event without a begin on thread {thread}")
                continue
            start, name, j = open_b[thread].pop()
            ts = round(ts * 1000)
            if ts < start:
                problem(f"{where}: ends before its begin (event {j})")
            spans[thread].append((start, ts, name, j))
        elif ph == "C":
            args = e.get("args")
            if not isinstance(args, dict) or not args or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in args.values()):
                problem(f"{where}: a counter needs numeric args")
    for thread, stack in open_b.items():
        for _, name, j in stack:
            problem(f"{path}: event {j} ({name}) begins on thread {thread} and never ends")
    # Nesting: sorted by start (longer first), each span lies inside the
    # enclosing one or starts after it ended.
    for thread, ss in spans.items():
        ss.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for start, end, name, i in ss:
            while stack and start >= stack[-1][1]:
                stack.pop()
            if stack and end > stack[-1][1]:
                problem(f"{path}: event {i} ({name}, {start}..{end} ns) overlaps event "
                        f"{stack[-1][3]} ({stack[-1][2]}, ..{stack[-1][1]} ns) on thread {thread} "
                        "without nesting")
            stack.append((start, end, name, i))
    return events


def check_overlap(path, x, colls, min_fraction):
    """Gradient buckets reduced while the backward computes: the reduction
    of a bucket (a collective with a "bucket" argument) overlaps in time a
    kernel of a later instruction (the rest of the backward), and at least
    min_fraction of the buckets' time is so overlapped. Prints how much
    of the buckets' time overlapped such kernels."""
    buckets = [e for e in colls if "bucket" in e.get("args", {})]
    if not buckets:
        problem(f"{path}: no gradient bucket's all_reduce (--overlap needs a "
                f"data-parallel plan compiled with buckets)")
        return
    kernels = [e for e in x if e.get("cat") == "kernel"]
    total = overlapped = 0.0
    overlapping = 0
    for b in buckets:
        b0, b1 = b["ts"], b["ts"] + b["dur"]
        after = b["args"].get("instruction", -1)
        spans = sorted((max(b0, k["ts"]), min(b1, k["ts"] + k["dur"])) for k in kernels
                       if k.get("args", {}).get("instruction", -1) > after
                       and k["ts"] < b1 and k["ts"] + k["dur"] > b0)
        covered, end = 0.0, b0
        for s, e in spans:  # the union of the overlapping kernels' spans
            s = max(s, end)
            if e > s:
                covered += e - s
                end = e
        total += b1 - b0
        overlapped += covered
        overlapping += covered > 0
    print(f"{path}: {len(buckets)} bucket reductions, {overlapping} overlapping later kernels; "
          f"{overlapped:.1f} of {total:.1f} us of bucket time overlapped")
    if overlapping == 0:
        problem(f"{path}: no gradient bucket's reduction overlaps a later kernel "
                f"(the backward waited for the buckets)")
    elif overlapped < min_fraction * total:
        problem(f"{path}: {overlapped / total:.1%} of the buckets' time overlapped later kernels, "
                f"less than --min-overlap {min_fraction:g}")


def check_run(files, args):
    pids = {}
    counted = collections.defaultdict(collections.Counter)
    for path, events in files.items():
        procs = {e["pid"] for e in events if isinstance(e, dict) and "pid" in e}
        if len(procs) != 1:
            problem(f"{path}: {len(procs)} processes, expected one (its rank)")
            continue
        pid = procs.pop()
        if pid in pids:
            problem(f"{path}: process {pid} is also the process of {pids[pid]}")
        pids[pid] = path
        names = [e for e in events if e.get("ph") == "M" and e.get("name") == "process_name"]
        if len(names) != 1 or not str(names[0].get("args", {}).get("name", "")).startswith("rank "):
            problem(f"{path}: no process_name metadata 'rank R'")
        x = [e for e in events if e.get("ph") == "X"]
        steps = [e for e in x if e.get("cat") == "step"]
        if args.steps is not None and len(steps) != args.steps:
            problem(f"{path}: {len(steps)} step events, expected {args.steps}")
        if not any(e.get("cat") == "kernel" for e in x):
            problem(f"{path}: no kernel events")
        memory = [e for e in events if e.get("ph") == "C" and e.get("name") == "memory bytes"]
        if not memory or not all(k in memory[-1].get("args", {})
                                 for k in ("param", "grad", "optimizer", "activation", "staging")):
            problem(f"{path}: no memory counters per category")
        elif memory[-1]["args"]["param"] <= 0:
            problem(f"{path}: the param memory counter is {memory[-1]['args']['param']}")
        colls = [e for e in x if e.get("cat") == "collective"]
        if args.overlap:
            check_overlap(path, x, colls, args.min_overlap)
        for e in (e for e in x if e.get("cat") == "send_recv"):
            a = e.get("args", {})
            if not isinstance(a.get("communicator"), str) or not isinstance(a.get("bytes"), int) \
                    or a["bytes"] <= 0 or not isinstance(a.get("operand"), str):
                problem(f"{path}: {e.get('name')} without communicator, operand and bytes: {a}")
            counted[path][("send_recv", e.get("name"), "calls")] += 1
            counted[path][("send_recv", e.get("name"), "bytes")] += a.get("bytes", 0)
        for e in colls:
            a = e.get("args", {})
            if not isinstance(a.get("communicator"), str) or not isinstance(a.get("bytes"), int) \
                    or a["bytes"] <= 0 or not isinstance(a.get("sent_bytes"), int):
                problem(f"{path}: collective {e.get('name')} without communicator and bytes: {a}")
        if args.stats:
            with open(args.stats) as f:
                stats = json.load(f)
            want = collections.Counter()
            for comm, kinds in stats.get("collectives_per_step_by_comm", {}).items():
                for kind, c in kinds.items():
                    if c["calls"]:
                        want[(comm, kind, "calls")] = c["calls"]
                        want[(comm, kind, "bytes")] = c["bytes"]
            got = counted[path]
            for e in colls:
                a = e.get("args", {})
                got[(a.get("communicator"), e.get("name"), "calls")] += 1
                got[(a.get("communicator"), e.get("name"), "bytes")] += a.get("bytes", 0)
            n = args.steps or 1
            for key in set(want) | {k for k in got if k[0] != "send_recv"}:
                if args.stages:
                    if got[key] > want[key] * n:
                        problem(f"{path}: {key[1]} on '{key[0]}' {key[2]}: {got[key]} in the "
                                f"trace, more than the stats' maximum {want[key]} per step x {n}")
                elif got[key] != want[key] * n:
                    problem(f"{path}: {key[1]} on '{key[0]}' {key[2]}: {got[key]} in the trace, "
                            f"the stats count {want[key]} per step x {n} steps")
            if not want:
                problem(f"{args.stats}: the run counted no collectives")
            else:
                for (comm, kind, what), v in sorted(want.items()):
                    if what == "bytes" and path == min(files):
                        print(f"{kind} on '{comm}': {want[(comm, kind, 'calls')]} per step, "
                              f"{v} bytes per step")
    if args.stats and args.stages:
        # Pipeline stages run different programs: the stats hold each
        # quantity's maximum over the ranks, which some rank's trace reaches.
        with open(args.stats) as f:
            stats = json.load(f)
        n = args.steps or 1
        want = {}
        for comm, kinds in stats.get("collectives_per_step_by_comm", {}).items():
            for kind, c in kinds.items():
                if c["calls"]:
                    want[(comm, kind, "calls")] = c["calls"]
                    want[(comm, kind, "bytes")] = c["bytes"]
        sends = stats.get("collectives_per_step", {}).get("send_recv", {})
        if not sends.get("calls"):
            problem(f"{args.stats}: the run counted no pipeline sends")
        want[("send_recv", "send", "calls")] = sends.get("calls", 0)
        want[("send_recv", "send", "bytes")] = sends.get("bytes", 0)
        for key, v in sorted(want.items()):
            most = max((c[key] for c in counted.values()), default=0)
            if most != v * n:
                problem(f"{key[1]} on '{key[0]}' {key[2]}: at most {most} on a rank's trace, "
                        f"the stats' maximum over ranks is {v} per step x {n} steps")
        print(f"send on pipeline stages: {sends.get('calls', 0)} per step, "
              f"{sends.get('bytes', 0)} bytes per step")
    if args.ranks is not None and len(files) != args.ranks:
        problem(f"{len(files)} trace files, expected {args.ranks}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--file")
    ap.add_argument("--ranks", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--stats")
    ap.add_argument("--overlap", action="store_true",
                    help="every rank reduces some gradient bucket while later kernels run")
    ap.add_argument("--min-overlap", type=float, default=0.0, metavar="FRACTION",
                    help="with --overlap: on every rank, at least this fraction of the buckets' "
                         "reduction time overlaps later kernels")
    ap.add_argument("--stages", action="store_true",
                    help="pipeline stages: ranks differ, the stats are maxima over ranks; "
                         "also checks the sends and receives")
    args = ap.parse_args()
    if not args.file and not os.path.isdir(args.dir or ""):
        ap.error(f"{args.dir}: not a directory of traces (or give --file)")
    paths = [args.file] if args.file else sorted(
        os.path.join(args.dir, n) for n in os.listdir(args.dir) if n.endswith(".json"))
    if args.dir and args.ranks is not None:
        expected = sorted(os.path.join(args.dir, f"rank-{r}.json") for r in range(args.ranks))
        if paths != expected:
            problem(f"trace files {paths}, expected {expected}")
    files = {}
    for p in paths:
        try:
            with open(p) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            problem(f"{p}: not JSON: {e}")
            continue
        events = check_format(p, data)
        if events is not None:
            files[p] = events
    if not args.file:
        check_run(files, args)
    if problems:
        print(f"{len(problems)} problem(s)")
        sys.exit(1)
    print("trace ok")


if __name__ == "__main__":
    main()
