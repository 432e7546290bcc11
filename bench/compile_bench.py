#!/usr/bin/env python3
"""Compile benchmark: GPT-2 124M under Megatron tensor parallelism and
GPT-3 175B under data x tensor parallelism, as `dtc compile` plans them.

  bench/compile_bench.py [--only gpt2|gpt3] [--dtc build/bin/dtc]

For each model it generates the forward (examples/gen_model.py), runs
`dtc compile --report` and prints the wall-clock compile time, the report's
compile_time_s, the artifact's size and instruction count, and the plan's
collectives: calls and bytes each device sends per step by kind and
communicator. GPT-2 (12 layers, vocabulary 50257, --mesh 8 --strategy tp=8)
should show Megatron's all-reduces only: 4 per layer, the embedding, the LM
head and the vocab-parallel cross entropy's three row reductions, and no
gather. GPT-3 175B (96 layers, --mesh 8x16x8 --strategy dp=128,tp=8) needs
more memory than one device has without pipeline stages or ZeRO; when dtc
knows --device-memory the benchmark passes 16TiB so the plan is emitted.
"""
import argparse
import json
import os
import sys
import tempfile
import time

from benchlib import ROOT, sh  # noqa: E402

MODELS = {
    "gpt2": dict(title="GPT-2 124M", gen=["gpt", "--layers", "12", "--hidden", "768", "--heads", "12",
                                          "--seq", "1024", "--vocab", "50257", "--batch", "8"],
                 mesh="8", strategy="tp=8"),
    "gpt3": dict(title="GPT-3 175B", gen=["gpt", "--layers", "96", "--hidden", "12288", "--heads", "96",
                                          "--seq", "2048", "--vocab", "50257", "--batch", "128"],
                 mesh="8x16x8", strategy="dp=128,tp=8"),
}


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=sorted(MODELS))
    p.add_argument("--dtc", default=os.path.join(ROOT, "build", "bin", "dtc"))
    a = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="dtc-compile-bench-")
    memory_flag = "--device-memory" in sh([a.dtc, "compile", "--help"])
    for key, m in MODELS.items():
        if a.only and key != a.only:
            continue
        model = os.path.join(work, f"{key}.mlir")
        art, report = os.path.join(work, f"{key}.dtc"), os.path.join(work, f"{key}.json")
        sh([sys.executable, os.path.join(ROOT, "examples", "gen_model.py")] + m["gen"] + ["-o", model])
        cmd = [a.dtc, "compile", model, "--mesh", m["mesh"], "--strategy", m["strategy"],
               "--report", report, "-o", art]
        if memory_flag and key == "gpt3":
            cmd += ["--device-memory", "16TiB"]
        start = time.perf_counter()
        sh(cmd)
        wall = time.perf_counter() - start
        r = json.load(open(report))
        body = json.loads(sh([a.dtc, "inspect", art]))
        instructions = len(body["programs"][0]["instructions"])
        print(f"{m['title']}: --mesh {m['mesh']} --strategy {m['strategy']}, {r['params']} parameters")
        print(f"  compile: {wall:.2f} s wall, report compile_time_s {r['compile_time_s']:.2f}")
        print(f"  artifact: {os.path.getsize(art) / 1e6:.2f} MB, {instructions} instructions, "
              f"{os.path.getsize(model) / 1e3:.0f} kB of model text")
        mem = r["memory_bytes"]
        print(f"  memory per device: params {mem['params'] / 2**30:.2f} GiB, grads "
              f"{mem['grads'] / 2**30:.2f} GiB, optimizer {mem['optimizer'] / 2**30:.2f} GiB, "
              f"activations {mem['activations'] / 2**30:.2f} GiB, total {mem['total'] / 2**30:.2f} GiB")
        calls = r.get("collective_calls", {})
        print(f"  collective calls per step: " +
              ", ".join(f"{k} {v}" for k, v in sorted(calls.items())) or "none")
        for comm, kinds in sorted(r.get("comm_bytes_by_comm", {}).items()):
            moved = {k: v for k, v in kinds.items() if k != "mesh_axes" and v}
            print(f"  bytes sent per device per step on {comm} (mesh axes {kinds['mesh_axes']}): " +
                  ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in moved.items()))
        print(f"  predicted step: {r['predicted']['step_time_s']:.3f} s on {r['hw']}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
