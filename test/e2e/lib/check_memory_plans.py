#!/usr/bin/env python3
"""Compiles and runs one model under several plans and checks that activation
memory falls in the order given, in the plan report and as the runtime
measures it.

  check_memory_plans.py MODEL.mlir --work DIR --plan NAME='FLAGS' --plan ...

Plans are listed from the most activation memory to the least: each must
report strictly fewer `memory_bytes.activations` than the one before, and
its measured `activation_peak_bytes` (dtc run --stats, one step) must be
strictly lower too and equal to what the report predicts. Prints one line
per plan with both numbers and the ratio to the first. With --auto-check
NAME=MODE, the report of plan NAME must say `--remat auto` chose MODE (one
per pipeline stage, comma-separated, where the stages differ). With
--at-most NAME=F, plan NAME must report at most F times the first plan's
activations. With --per-rank, every rank's measured peak
(`activation_peak_bytes_by_rank`) must equal what the artifact plans for
that rank's program, computed here from the artifact (`dtc inspect`): its
one-copy activation slots plus, at the schedule's worst moment, each
chunk's per-micro-batch slots once per micro-batch of it in flight
(pipeline stages differ).
A flag `@HW:BYTES` in a plan is replaced by the path of a hardware profile
(CPU-like) whose device memory is BYTES. Standard library only.
"""
import argparse
import json
import os
import re
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_equivalence as dpe  # noqa: E402


def planned_activation_bytes(program):
    """The most activation bytes live at once: the one-copy activation
    slots, plus each chunk's micro-batch slots once per micro-batch of that
    chunk in flight (from its first action to its last) at the schedule's
    worst moment."""
    one_copy, per_chunk = 0, {}
    for slot in program["slots"]:
        if slot["category"] != "activation":
            continue
        chunk = slot.get("chunk", -1)
        if chunk < 0:
            one_copy += slot["bytes"]
        else:
            per_chunk[chunk] = per_chunk.get(chunk, 0) + slot["bytes"]
    schedule = program.get("schedule", [])
    last = {(chunk, mb): i for i, (_, mb, chunk) in enumerate(schedule)}
    live, seen, most = set(), set(), 0
    for i, (_, mb, chunk) in enumerate(schedule):
        if (chunk, mb) not in seen:
            seen.add((chunk, mb))
            live.add((chunk, mb))
        most = max(most, sum(per_chunk.get(c, 0) for c, _ in live))
        if last[(chunk, mb)] == i:
            live.discard((chunk, mb))
    return one_copy + most


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--work", required=True)
    p.add_argument("--plan", action="append", required=True, help="NAME=COMPILE FLAGS")
    p.add_argument("--auto-check", action="append", default=[], help="NAME=CHOSEN MODE")
    p.add_argument("--at-most", action="append", default=[], help="NAME=FRACTION of the first plan")
    p.add_argument("--per-rank", action="store_true", help="each rank's peak against its program's plan")
    p.add_argument("--dtc", default="dtc")
    a = p.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)

    def hw_profile(match):
        path = os.path.join(a.work, f"hw-{match.group(1)}.json")
        with open(path, "w") as f:
            json.dump({"name": f"mem{match.group(1)}", "peak_flops": {"f32": 1e11},
                       "memory_bytes": float(match.group(1)), "memory_bandwidth": 2e10,
                       "axes": [{"bandwidth": 1e10, "latency": 1e-6}] * 4}, f)
        return path

    ok = True
    rows = []
    reports = {}
    for plan in a.plan:
        name, _, flags = plan.partition("=")
        flags = re.sub(r"@HW:(\d+)", hw_profile, flags)
        tag = "".join(c if c.isalnum() else "_" for c in name)
        artifact = os.path.join(a.work, f"{tag}.dtc")
        report_path = os.path.join(a.work, f"{tag}.report.json")
        stats_path = os.path.join(a.work, f"{tag}.stats.json")
        dpe.run([a.dtc, "compile", a.model, "-o", artifact, "--report", report_path]
                + shlex.split(flags), os.path.join(a.work, f"compile_{tag}.log"))
        dpe.run([a.dtc, "run", artifact, "--steps", "1", "--stats", stats_path],
                os.path.join(a.work, f"run_{tag}.log"))
        with open(report_path) as f:
            report = json.load(f)
        with open(stats_path) as f:
            stats = json.load(f)
        reports[name] = report
        reported = report["memory_bytes"]["activations"]
        measured = stats["activation_peak_bytes"]
        rows.append((name, reported, measured))
        if reported != measured:
            print(f"plan {name}: FAIL: report says {reported} activation bytes, the runtime "
                  f"measured {measured}")
            ok = False
        if a.per_rank:
            inspect = json.loads(dpe.run([a.dtc, "inspect", artifact],
                                         os.path.join(a.work, f"inspect_{tag}.log")))
            planned = {p["name"]: planned_activation_bytes(p) for p in inspect["programs"]}
            by_rank = stats.get("activation_peak_bytes_by_rank") or []
            expected = {}
            for prog in inspect["programs"]:
                for r in prog.get("ranks", []):
                    expected[r] = planned[prog["name"]]
            if len(by_rank) != len(expected) or any(by_rank[r] != expected[r] for r in expected):
                print(f"plan {name}: FAIL: per rank the runtime measured {by_rank}, the artifact "
                      f"plans {[expected[r] for r in sorted(expected)]}")
                ok = False
            else:
                print(f"plan {name}: per rank measured = planned: {by_rank}")

    first_reported, first_measured = rows[0][1], rows[0][2]
    for i, (name, reported, measured) in enumerate(rows):
        status = "ok"
        if i > 0 and not (reported < rows[i - 1][1] and measured < rows[i - 1][2]):
            status = f"FAIL (not below plan {rows[i - 1][0]})"
            ok = False
        print(f"plan {name}: {status}: activations reported {reported}, measured {measured} "
              f"({measured / first_measured:.3f} of {rows[0][0]})")
    for check in a.at_most:
        name, _, fraction = check.partition("=")
        reported = next(r for n, r, _ in rows if n == name)
        status = "ok" if reported <= float(fraction) * first_reported else "FAIL"
        ok &= status == "ok"
        print(f"plan {name}: {reported / first_reported:.3f} of plan {rows[0][0]}'s activations "
              f"(at most {fraction}): {status}")
    for check in a.auto_check:
        name, _, mode = check.partition("=")
        planner = reports[name].get("planner", {}).get("remat", {})
        chose = planner.get("chose")
        if isinstance(chose, list):  # one mode per pipeline stage
            chose = ",".join(chose)
        strategy = reports[name]["strategy"]["remat"]
        status = "ok" if chose == mode and strategy == mode else "FAIL"
        ok &= status == "ok"
        print(f"plan {name}: remat auto chose {chose} (strategy.remat {strategy}): {status}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
