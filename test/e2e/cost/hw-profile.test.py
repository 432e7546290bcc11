"""Compares reports' predicted compute and communication times with a base
report's: `hw-profile.test.py BASE NAME=REPORT ...` prints for each
"NAME: compute same|slower|FASTER, comm same|slower|FASTER"."""
import json
import sys

base = json.load(open(sys.argv[1]))["predicted"]


def word(new, old, key):
    return "same" if new[key] == old[key] else ("slower" if new[key] > old[key] else "FASTER")


for arg in sys.argv[2:]:
    name, path = arg.split("=", 1)
    other = json.load(open(path))["predicted"]
    print(f"{name}: compute {word(other, base, 'compute_time_s')}, "
          f"comm {word(other, base, 'comm_time_s')}")
