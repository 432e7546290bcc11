"""Compares three reports' predicted compute and communication times: the
base profile's, one with a slower GEMM curve, one with a slower link."""
import json
import sys

base, gemm, link = (json.load(open(p))["predicted"] for p in sys.argv[1:4])


def word(new, old, key):
    return "same" if new[key] == old[key] else ("slower" if new[key] > old[key] else "FASTER")


print(f"slow gemm: compute {word(gemm, base, 'compute_time_s')}, comm {word(gemm, base, 'comm_time_s')}")
print(f"slow link: compute {word(link, base, 'compute_time_s')}, comm {word(link, base, 'comm_time_s')}")
