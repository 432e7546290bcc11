"""Compares reports' predicted compute and communication times with a base
report's: `hw-profile.test.py BASE NAME=REPORT ...` prints for each
"NAME: compute same|slower|FASTER, comm same|slower|FASTER" (communication
in all, hidden or not)."""
import json
import sys

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
