#!/usr/bin/env python3
"""ZeRO-1/2's optimizer working memory, read from the emitted program.

  check_optimizer_memory.py ART.dtc [--report REPORT.json] [--max-pieces K]

Under ZeRO-1/2 a parameter is stored whole: its update computes the rank's
piece and an all-gather over dp writes the new value back. The optimizer's
working memory is what the optimizer part of a program (from its first
optimizer instruction to the end of its last list: the whole step's list,
or a pipeline stage's list after the flush) allocates and keeps alive at
once: `activation` buffers first written there, each slot counted once
while any buffer viewing it is live (first write to last read); scalars
(the loss, the clipping norm) and received messages (a tied parameter's
summed gradient, kept whole by design) aside. Per
program this prints that peak W, the largest updated piece P (the input of
a dp all-gather of the optimizer) and the sum S of all pieces.

Fails unless W <= K * P (default K = 3: a parameter's piece, its
gradient's piece and the update's result, as when each gather runs right
after its update) and,
with --report, unless the report's activation bytes are below S: were the
gathers left at the end of the step, every piece would be live at once and
W >= S. Standard library only.
"""
import argparse
import json
import sys

DTYPE_BYTES = {"f32": 4, "f64": 8, "bf16": 2, "f16": 2, "i32": 4, "i64": 8, "i8": 1, "i1": 1}


def buffer_bytes(buffer):
    n = 1
    for d in buffer["shape"]:
        n *= d
    return n * DTYPE_BYTES[buffer["dtype"]]


def optimizer_part(program):
    last = program["finish"] if "finish" in program else program["instructions"]
    for i, inst in enumerate(last):
        if inst.get("phase") == "optimizer":
            return last[i:]
    return []


def analyse(program):
    buffers, slots = program["buffers"], program["slots"]
    part = optimizer_part(program)
    first, last = {}, {}
    written_before = set()
    lists = [program.get("instructions", [])]
    for chunk in program.get("chunks", []):
        lists += list(chunk.values())
    if "finish" in program:
        lists.append(program["finish"][:len(program["finish"]) - len(part)])
    else:
        lists = [program["instructions"][:len(program["instructions"]) - len(part)]]
    for lst in lists:
        for inst in lst:
            written_before.update(inst["out"])
    for t, inst in enumerate(part):
        for b in inst["out"]:
            first.setdefault(b, t)
            last[b] = max(last.get(b, t), t)
        for b in inst["in"]:
            last[b] = max(last.get(b, t), t)
    received = {b for inst in part if inst["op"] == "recv" for b in inst["out"]}
    working = [b for b in first
               if b not in written_before and b not in received and buffers[b]["shape"] and
               slots[buffers[b]["slot"]]["category"] == "activation"]
    peak = 0
    for t in range(len(part)):
        per_slot = {}
        for b in working:
            if first[b] <= t <= last[b]:
                s = buffers[b]["slot"]
                per_slot[s] = max(per_slot.get(s, 0), buffer_bytes(buffers[b]))
        peak = max(peak, sum(per_slot.values()))
    pieces = [buffer_bytes(buffers[inst["in"][0]]) for inst in part
              if inst["op"] == "all_gather" and inst.get("attrs", {}).get("comm") == "dp"]
    return peak, max(pieces, default=0), sum(pieces)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("artifact")
    p.add_argument("--report")
    p.add_argument("--max-pieces", type=float, default=3)
    a = p.parse_args(argv)
    with open(a.artifact, "rb") as f:
        f.readline()
        artifact = json.loads(f.read())
    ok = True
    total_pieces = 0
    for program in artifact["programs"]:
        peak, largest, total = analyse(program)
        total_pieces = max(total_pieces, total)
        good = largest > 0 and peak <= a.max_pieces * largest
        ok &= good
        print(f"{program['name']}: optimizer working memory {peak} bytes, largest piece {largest}, "
              f"all pieces {total}: {'ok' if good else 'FAIL'} "
              f"(x{peak / max(largest, 1):.2f} the largest piece)")
    if a.report:
        with open(a.report) as f:
            activations = json.load(f)["memory_bytes"]["activations"]
        good = activations < total_pieces
        ok &= good
        print(f"report activations {activations} {'<' if good else '>='} all pieces "
              f"{total_pieces}: {'ok' if good else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
