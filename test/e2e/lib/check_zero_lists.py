#!/usr/bin/env python3
"""Prints where ZeRO's collectives run in pipeline artifacts.

  check_zero_lists.py ART.dtc ... [--dtc dtc]

For every program (pipeline stage) of each artifact: the kinds of
data-parallel all-gathers and reduce-scatters (communicator "dp") in each
instruction list: before the micro-batches, per micro-batch forward,
backward_input and backward_weight (any chunk), and finish (after the
flush); "-" for none. One line per program. Standard library only.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_equivalence as dpe  # noqa: E402

KINDS = ("all_gather", "reduce_scatter")


def kinds(instructions):
    found = sorted({i["op"] for i in instructions
                    if i["op"] in KINDS and i.get("attrs", {}).get("comm") == "dp"})
    return " ".join(found) or "-"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("artifacts", nargs="+")
    p.add_argument("--dtc", default="dtc")
    a = p.parse_args(argv)
    for path in a.artifacts:
        body = dpe.inspect_artifact(a.dtc, path)
        for program in body["programs"]:
            if "chunks" not in program:
                raise SystemExit(f"{path}: program {program['name']} has no micro-batch lists")
            parts = [f"before: {kinds(program['instructions'])}"]
            for phase in ("forward", "backward_input", "backward_weight"):
                merged = [i for chunk in program["chunks"] for i in chunk[phase]]
                parts.append(f"{phase}: {kinds(merged)}")
            parts.append(f"finish: {kinds(program['finish'])}")
            print(f"{os.path.basename(path)} {program['name']}: {' '.join(parts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
