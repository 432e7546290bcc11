"""`stored-facts.test.py DIR MODEL MODE...`: the search's stored bytes of
each recomputation MODE against the compiled single-device plan's."""
import json
import os
import sys

work, model, modes = sys.argv[1], sys.argv[2], sys.argv[3:]


def load(name):
    with open(os.path.join(work, name)) as f:
        return json.load(f)


facts = load(f"{model}-auto.json")["planner"]["model_facts"]["stored_bytes"]
for mode in modes:
    compiled = sum(load(f"{model}-{mode}.json")["stored_activation_bytes_by_layer"].values())
    ok = facts[mode] == compiled
    print(f"{model} {mode}: facts {facts[mode]:.0f} {'=' if ok else 'DIFFER FROM'} compiled {compiled}")
