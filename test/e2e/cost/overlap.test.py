"""Checks the reports of overlap.test: `overlap.test.py DIR`."""
import json
import os
import sys

work = sys.argv[1]


def predicted(name):
    with open(os.path.join(work, name + ".json")) as f:
        return json.load(f)["predicted"]


def hides_some(label, name):
    p = predicted(name)
    hidden, exposed = p["comm_hidden_s"], p["comm_time_s"]
    total = hidden + exposed
    # The step is compute plus what it waits for; at most 90% of the
    # communication hides (a100's comm_overlap), and some of it does.
    ok = (0 < hidden <= 0.9 * total * (1 + 1e-12)
          and abs(p["step_time_s"] - p["compute_time_s"] - exposed) <= 1e-12 * p["step_time_s"])
    print(f"{label}: hidden {hidden * 1e6:.2f} of {total * 1e6:.2f} us: {'ok' if ok else 'FAIL'}")


def hides_none(label, name):
    p = predicted(name)
    ok = p["comm_hidden_s"] == 0 and p["comm_time_s"] > 0
    print(f"{label}: nothing hidden: {'ok' if ok else 'FAIL %r' % p}")


hides_some("per gradient", "each")
each, none = predicted("each"), predicted("each-none")
ok = (none["comm_hidden_s"] == 0
      and abs(none["step_time_s"] - each["step_time_s"] - each["comm_hidden_s"])
      <= 1e-9 * none["step_time_s"]
      and abs(none["comm_time_s"] - each["comm_time_s"] - each["comm_hidden_s"])
      <= 1e-9 * none["comm_time_s"])
print("per gradient, comm_overlap 0: nothing hidden, step longer by what a100 hides: "
      + ("ok" if ok else f"FAIL {each} {none}"))
hides_none("one bucket", "one")
hides_none("zero=1", "zero1")
hides_none("pipeline", "pp")
hides_none("micro-batches", "mb")
hides_some("zero=3", "zero3")
