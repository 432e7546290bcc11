"""`stored-facts.test.py DIR MODEL MODE...`: the search's stored bytes of
each recomputation MODE against the compiled single-device plan's; with
`--split tp sp`, the closed forms' split of them over tp=2 (the residual
stream whole without sequence parallelism) against the tp=2 plans'."""
import json
import os
import sys

work, model, modes = sys.argv[1], sys.argv[2], sys.argv[3:]
split = modes[:1] == ["--split"]
if split:
    modes = modes[1:]


def load(name):
    with open(os.path.join(work, name)) as f:
        return json.load(f)


facts = load(f"{model}-auto.json")["planner"]["model_facts"]["stored_bytes"]
if split:
    # `--split tp sp`: the tp=2 plans without and with sequence parallelism.
    for name in modes:
        sequence = name == "sp"
        compiled = sum(load(f"{model}-{name}.json")["stored_activation_bytes_by_layer"].values())
        stream = facts["none_in_stream"]
        estimated = (facts["none"] - stream) / 2 + stream / (2 if sequence else 1)
        ok = abs(estimated / compiled - 1) <= 0.02
        print(f"tp=2{' --sequence-parallel' if sequence else ''}: estimated {estimated:.0f} per "
              f"device, compiled {compiled}: {'ok' if ok else 'FAIL'}")
    sys.exit(0)
for mode in modes:
    compiled = sum(load(f"{model}-{mode}.json")["stored_activation_bytes_by_layer"].values())
    ok = facts[mode] == compiled
    print(f"{model} {mode}: facts {facts[mode]:.0f} {'=' if ok else 'DIFFER FROM'} compiled {compiled}")
