#!/usr/bin/env python3
"""Checks that a pipeline artifact keeps per micro-batch only what a
micro-batch carries from one of its lists to a later one.

  check_microbatch_slots.py ARTIFACT.dtc [...] [--dtc dtc]

The runtime allocates every `"scope": "microbatch"` slot of a chunk once per
micro-batch of that chunk in flight (1F1B's first stage: P copies), so a
value there costs P times its bytes. docs/artifact.md says what belongs
there: a value a later list of its micro-batch reads (a forward activation
kept for the backward, an input gradient kept for W). A value that its own
list makes and reads (a gradient received and used in the backward, an
activation computed and sent on) is working memory with one copy.

For every program and chunk, every per-micro-batch slot but the inputs'
micro-batch slices (their own slots by design) must hold a buffer written
in one list of the chunk (forward, backward-input, backward-weight) and
read in a later one. Prints, per artifact, the per-micro-batch bytes of
each program and "ok", or each slot that breaks the rule and "FAIL".
Standard library only.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_equivalence as dpe  # noqa: E402

LISTS = ("forward", "backward_input", "backward_weight")


def check_program(program):
    """The per-micro-batch slots of `program` no later list reads, as
    (chunk, slot, bytes, what writes it) tuples, and the per-micro-batch
    bytes of each chunk."""
    buffers = program["buffers"]
    slots = program["slots"]
    bad, per_chunk = [], {}
    for chunk_index, chunk in enumerate(program["chunks"]):
        writes, reads, writers, slices = {}, {}, {}, set()
        for list_index, name in enumerate(LISTS):
            for ins in chunk.get(name, []):
                op = ins.get("op", "?")
                for b in ins.get("out", []):
                    slot = buffers[b]["slot"]
                    writes.setdefault(slot, []).append(list_index)
                    writers.setdefault(slot, set()).add(op)
                    if op == "microbatch_slice":
                        slices.add(slot)
                for b in ins.get("in", []):
                    reads.setdefault(buffers[b]["slot"], []).append(list_index)
        for s, slot in enumerate(slots):
            if slot.get("chunk") != chunk_index:
                continue
            per_chunk[chunk_index] = per_chunk.get(chunk_index, 0) + slot["bytes"]
            if s in slices:
                continue
            first_write = min(writes.get(s, [len(LISTS)]))
            if not any(r > first_write for r in reads.get(s, [])):
                bad.append((chunk_index, s, slot["bytes"], sorted(writers.get(s, {"nothing"}))))
    return bad, per_chunk


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("artifacts", nargs="+")
    p.add_argument("--dtc", default="dtc")
    a = p.parse_args(argv)
    ok = True
    for path in a.artifacts:
        inspect = dpe.inspect_artifact(a.dtc, path)
        pipelined = [prog for prog in inspect["programs"] if prog.get("chunks")]
        if not pipelined:
            print(f"{path}: FAIL: no program has micro-batch chunks")
            ok = False
            continue
        sizes = []
        for prog in pipelined:
            bad, per_chunk = check_program(prog)
            sizes.append(f"{prog['name']} {sum(per_chunk.values())}")
            for chunk, slot, size, writers in bad:
                print(f"{path}: FAIL: program {prog['name']} chunk {chunk} keeps slot {slot} "
                      f"({size} bytes, written by {', '.join(writers)}) per micro-batch, "
                      f"but no later list reads it")
                ok = False
        print(f"{path}: per-micro-batch bytes: {', '.join(sizes)}: {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
