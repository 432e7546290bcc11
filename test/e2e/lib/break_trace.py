#!/usr/bin/env python3
"""Writes a broken copy of a trace file, for the negative tests of
check_trace.py:  break_trace.py IN OUT KIND
  no-dur      the first kernel loses its "dur"
  overlap     the first kernel ends in the middle of a later one on its
              thread (a partial overlap)
  unbalanced  a begin event ("B") that never ends
  no-pid      the first collective loses its "pid"
  drop-allreduce  the last all_reduce is gone
  overlap-bucket  the first gradient bucket's all_reduce ends inside the
              next kernel of a later instruction (as on a GPU, where the
              buckets overlap the backward)
"""
import json
import sys

src, dst, kind = sys.argv[1:4]
with open(src) as f:
    data = json.load(f)
events = data["traceEvents"]
kernels = [e for e in events if e.get("cat") == "kernel"]
colls = [e for e in events if e.get("cat") == "collective"]
if kind == "no-dur":
    del kernels[0]["dur"]
elif kind == "overlap":
    k = kernels[0]
    later = [e for e in events if e.get("ph") == "X" and e["tid"] == k["tid"] and
             e["ts"] > k["ts"] + k["dur"] and e["dur"] >= 0.01]
    k["dur"] = round(later[0]["ts"] - k["ts"] + later[0]["dur"] / 2, 3)
elif kind == "unbalanced":
    events.append({"ph": "B", "pid": kernels[0]["pid"], "tid": kernels[0]["tid"],
                   "ts": kernels[0]["ts"], "name": "open"})
elif kind == "no-pid":
    del colls[0]["pid"]
elif kind == "drop-allreduce":
    events.remove([e for e in colls if e["name"] == "all_reduce"][-1])
elif kind == "overlap-bucket":
    b = [e for e in colls if "bucket" in e.get("args", {})][0]
    k = min((e for e in kernels if e["args"]["instruction"] > b["args"]["instruction"]
             and e["ts"] >= b["ts"] + b["dur"]), key=lambda e: e["ts"])
    b["dur"] = round(k["ts"] - b["ts"] + k["dur"] / 2, 3)
else:
    sys.exit(f"unknown kind {kind}")
with open(dst, "w") as f:
    json.dump(data, f)
