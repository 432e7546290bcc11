#!/usr/bin/env python3
"""The inputs of the pass tests that need a training step.

A pass's lit test starts from that pass's own input. For the passes that
run on a training step (layers assigned, a plan materialised, partitioned)
that input is long and is not written by hand: it is the earlier passes'
output on a small model (the @main functions of the test file itself, or a
model of examples/gen_model.py), checked in under test/Passes/Inputs/.

  scripts/pass-inputs.py write [--dtc-opt PATH]   regenerate them
  scripts/pass-inputs.py check [--dtc-opt PATH]   fail when one is stale

test/Passes/pass-inputs.test runs `check`, so a change to an earlier pass
shows up as a stale input (with this command to renew it) rather than as a
pass test quietly checking yesterday's IR.
"""
import argparse
import difflib
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INPUTS = os.path.join(ROOT, "test", "Passes", "Inputs")

# name: (model, dtc-opt flags). A model is a file of the repository or
# examples/gen_model.py's arguments.
TRAIN = ["--dtc-build-training-step"]
LAYERS = TRAIN + ["--dtc-assign-layers"]
SGD_LAYERS = ["--dtc-build-training-step=optimizer=sgd", "--dtc-assign-layers"]
GPT_1 = ["gpt", "--layers", "1", "--hidden", "32", "--heads", "4", "--seq", "16", "--vocab", "64", "--batch", "8"]
MLP_2 = ["mlp", "--layers", "2", "--hidden", "8", "--features", "4", "--classes", "3", "--batch", "4"]
PARTITIONED = ["--dtc-materialize-plan", "--dtc-partition"]
ILP_TP8 = ["--dtc-apply-strategy=mesh=8 tp=8 tp-layout=ilp"]
ENTRIES = {
    "assign-layers": ("test/Passes/assign-layers.mlir", ["--split-input-file"] + TRAIN),
    "rematerialize": ("test/Passes/rematerialize.mlir", LAYERS),
    "merge-duplicate-backward-ops": ("test/Passes/merge-duplicate-backward-ops.mlir", LAYERS),
    "split-pipeline.pp2": ("test/Passes/split-pipeline.mlir",
                           ["--split-input-file"] + SGD_LAYERS +
                           ["--dtc-apply-strategy=mesh=2 pp=2 microbatches=2", "--dtc-materialize-plan",
                            "--dtc-balance-stages"]),
    "split-pipeline.dp2": ("test/Passes/split-pipeline.mlir",
                           ["--split-input-file"] + SGD_LAYERS +
                           ["--dtc-apply-strategy=mesh=2", "--dtc-materialize-plan", "--dtc-balance-stages"]),
    "partition.2x2": ("test/Passes/partition.mlir",
                      SGD_LAYERS + ["--dtc-apply-strategy=mesh=2,2", "--dtc-materialize-plan"]),
    "partition.1": ("test/Passes/partition.mlir",
                    SGD_LAYERS + ["--dtc-apply-strategy=mesh=1", "--dtc-materialize-plan"]),
    "pin-sharding": (GPT_1, LAYERS),
    "schedule-collectives.dp2": (MLP_2, LAYERS + ["--dtc-apply-strategy=mesh=2"] + PARTITIONED),
    "schedule-collectives.mb2": (MLP_2, LAYERS + ["--dtc-apply-strategy=mesh=2 microbatches=2"] + PARTITIONED),
    "schedule-collectives.zero1": (MLP_2, LAYERS + ["--dtc-apply-strategy=mesh=2 zero=1"] + PARTITIONED),
    "test-print-model-structure.gpt": (["gpt", "--layers", "4", "--hidden", "32", "--heads", "4", "--seq", "8",
                                        "--vocab", "64", "--batch", "4"], LAYERS),
    "test-print-model-structure.llama": (["llama", "--layers", "4", "--hidden", "32", "--heads", "4", "--seq", "8",
                                          "--vocab", "64", "--batch", "4"], LAYERS),
    "test-print-model-structure.everyop": (["everyop", "--hidden", "16", "--heads", "4", "--seq", "8", "--vocab",
                                            "10", "--batch", "8"], LAYERS),
    "test-print-tensor-layout.gpt": (["gpt", "--layers", "1", "--hidden", "4096", "--heads", "32", "--seq", "512",
                                      "--vocab", "32000", "--batch", "1"], LAYERS + ILP_TP8),
    "test-print-tensor-layout.wide": (["mlp", "--layers", "2", "--hidden", "8192", "--features", "1024",
                                       "--classes", "16", "--batch", "65536"], LAYERS + ILP_TP8),
}


def header(model, flags):
    source = model if isinstance(model, str) else "examples/gen_model.py " + " ".join(model)
    return ("// The input of a pass test: dtc-opt " + " ".join(f"'{f}'" if " " in f else f for f in flags) +
            f"\n// on {source}. Written by scripts/pass-inputs.py write; do not edit.\n")


def generate(name, dtc_opt, scratch):
    model, flags = ENTRIES[name]
    if isinstance(model, str):
        path = os.path.join(ROOT, model)
    else:
        path = os.path.join(scratch, name + ".model.mlir")
        subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gen_model.py")] + model + ["-o", path],
                       check=True)
    out = subprocess.run([dtc_opt, path] + flags, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"pass-inputs: {name}: dtc-opt failed:\n{out.stderr}")
    return header(model, flags) + out.stdout


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["write", "check"])
    p.add_argument("--dtc-opt", default=os.path.join(ROOT, "build", "bin", "dtc-opt"))
    a = p.parse_args(argv)
    stale = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in ENTRIES:
            text = generate(name, a.dtc_opt, scratch)
            target = os.path.join(INPUTS, name + ".input.mlir")
            if a.command == "write":
                os.makedirs(INPUTS, exist_ok=True)
                with open(target + ".tmp", "w") as f:
                    f.write(text)
                os.replace(target + ".tmp", target)
                continue
            old = open(target).read() if os.path.exists(target) else ""
            if old != text:
                stale.append(name)
                diff = difflib.unified_diff(old.splitlines(), text.splitlines(), "checked in", "now", lineterm="", n=1)
                print(f"pass-inputs: {name}: stale; the first differences:")
                for line in list(diff)[:12]:
                    print("  " + line[:200])
    if a.command == "check":
        if stale:
            print(f"pass-inputs: {len(stale)} of {len(ENTRIES)} stale; renew them with "
                  "scripts/pass-inputs.py write (and read the pass tests' diffs)")
            return 1
        print(f"pass-inputs: all {len(ENTRIES)} up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
