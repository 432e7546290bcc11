"""Compares reports' predicted compute and communication times with a base
report's: `hw-profile.test.py BASE NAME=REPORT ...` prints for each
"NAME: compute same|slower|FASTER, comm same|slower|FASTER" (communication
in all, hidden or not).

`hw-profile.test.py --ramp S R ARTIFACT REPORT0 REPORT_R REPORT_2R`: the
sync overhead's share after a short computation (Link::syncRamp).
`hw-profile.test.py --sync S ARTIFACT REPORT0 REPORT1`: the artifact's
collective calls, its runs of calls with no kernel between them, and how
many sync overheads of S seconds the report made with S has beyond the one
made with none (they should be one per run)."""
import json
import sys


def sync_runs(artifact):
    """Collective calls and runs of them per step (a list of a pipeline's
    micro-batch chunks runs once per micro-batch)."""
    with open(artifact) as f:
        f.readline()
        a = json.load(f)
    microbatches = a.get("pipeline", {}).get("microbatches", 1)
    calls = runs = 0
    program = a["programs"][0]
    lists = [(program["instructions"], 1), (program.get("finish", []), 1)]
    for chunk in program.get("chunks", []):
        for key in ("forward", "backward_input", "backward_weight"):
            lists.append((chunk.get(key, []), microbatches))
    for instructions, times in lists:
        computed = True
        for inst in instructions:
            if inst["op"] in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
                bucket = inst.get("attrs", {}).get("bucket")
                members = [i for i in instructions
                           if bucket is not None and i.get("attrs", {}).get("bucket") == bucket]
                if members and inst is not members[-1]:
                    continue  # a bucket is one call, at its last member
                calls += times
                runs += times if computed else 0
                computed = False
            elif inst["op"] not in ("send", "recv"):
                computed = True
    return calls, runs


def first_calls(artifact):
    """The calls that open their list (per step): they count as after a
    long computation and pay the whole sync overhead whatever the ramp."""
    with open(artifact) as f:
        f.readline()
        a = json.load(f)
    microbatches = a.get("pipeline", {}).get("microbatches", 1)
    program = a["programs"][0]
    lists = [(program["instructions"], 1), (program.get("finish", []), 1)]
    for chunk in program.get("chunks", []):
        for key in ("forward", "backward_input", "backward_weight"):
            lists.append((chunk.get(key, []), microbatches))
    return sum(times for instructions, times in lists
               if any(i["op"] in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
                      for i in instructions))


if sys.argv[1] == "--ramp":
    # Reports made with sync_overhead S and sync_ramp R and 2R (every gap
    # between calls shorter than R): each call but the lists' first pays
    # S * (its gap's kernel seconds) / R, so doubling R halves what they
    # add, and all of them together add at most S * (the step's kernel
    # seconds) / R.
    seconds, ramp = float(sys.argv[2]), float(sys.argv[3])
    first = first_calls(sys.argv[4])
    none, at_ramp, at_double = (json.load(open(f))["predicted"] for f in sys.argv[5:8])
    rest = at_ramp["comm_time_s"] - none["comm_time_s"] - first * seconds
    rest_double = at_double["comm_time_s"] - none["comm_time_s"] - first * seconds
    halves = abs(rest - 2 * rest_double) <= 1e-6 * abs(rest)
    bounded = 0 < rest <= seconds * none["compute_time_s"] / ramp * (1 + 1e-9)
    print(f"{first} first calls pay it whole; the rest in proportion to their gaps: "
          f"{'yes' if halves else f'NO ({rest} vs 2 x {rest_double})'}, "
          f"within the step's kernels: {'yes' if bounded else f'NO ({rest})'}")
    sys.exit(0)

if sys.argv[1] == "--sync":
    seconds = float(sys.argv[2])
    calls, runs = sync_runs(sys.argv[3])
    none, some = (json.load(open(f))["predicted"]["comm_time_s"] for f in sys.argv[4:6])
    print(f"{calls} collective calls in {runs} runs; sync overhead paid: "
          f"{(some - none) / seconds:.6g} times")
    sys.exit(0)

base = json.load(open(sys.argv[1]))["predicted"]


def word(new, old, key):
    return "same" if new[key] == old[key] else ("slower" if new[key] > old[key] else "FASTER")


# Communication in all: what the step waits for and what kernels hide.
for report in [base]:
    report["comm_all_s"] = report["comm_time_s"] + report["comm_hidden_s"]


for arg in sys.argv[2:]:
    name, path = arg.split("=", 1)
    other = json.load(open(path))["predicted"]
    other["comm_all_s"] = other["comm_time_s"] + other["comm_hidden_s"]
    print(f"{name}: compute {word(other, base, 'compute_time_s')}, "
          f"comm {word(other, base, 'comm_all_s')}")
