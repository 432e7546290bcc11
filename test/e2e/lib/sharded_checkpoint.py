#!/usr/bin/env python3
"""Sharded checkpoints (`dtc run --save DIR/`), checked from outside dtc.

  sharded_checkpoint.py resume --dir WORK --model M.mlir --data TOKENS
      --save-plan "MESH [compile flags]" [--load-plan "MESH [flags]"]...
      [--compile-args "..."] [--steps K] [--block-bytes N]
    1. an uninterrupted 2K-step run on one device (full.out, full.safetensors);
    2. K steps under the save plan, saved sharded (WORK/ckpt/), and the same
       K steps saved as one file (single.safetensors): this script's own
       reader of the sharded format assembles ckpt/ and must find the single
       file's tensors and step bit for bit;
    3. ckpt/ loaded on one device and saved as one file (--steps 0) equals
       single.safetensors bit for bit;
    4. for each load plan and for one device: K more steps from ckpt/, saved
       sharded again under that plan; the losses of both halves match the
       uninterrupted run (compare_losses.py, relative 1e-5) and so do the
       saved parameters and optimizer state (compare_checkpoints.py, 1e-5,
       after converting the new checkpoint to one file on one device).
    Adding a plan is one more --save-plan / --load-plan argument.

  sharded_checkpoint.py compare DIR FILE.safetensors
    Step 2's exact comparison on its own.
  sharded_checkpoint.py flip FILE OFFSET
    Flips the bits of the byte at OFFSET of FILE's safetensors data section.

Standard library only. Runs `dtc` from PATH.
"""
import argparse
import json
import os
import shlex
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_checkpoints import _FORMATS, read_raw as read_safetensors  # noqa: E402

_DTYPES = {"f32": "F32", "i32": "I32", "i64": "I64"}


def assemble(directory):
    """The sharded checkpoint as {role: {name: (dtype, shape, bytes)}}, from
    the index's slices alone; every element must come from exactly one
    piece."""
    index = json.load(open(os.path.join(directory, "index.json")))
    assert index["format"] == "dtc-sharded-checkpoint" and index["version"] == 1, index["format"]
    files = {}
    for f in index["files"]:
        path = os.path.join(directory, f["name"])
        assert os.path.getsize(path) == f["bytes"], f"{path}: size differs from the index"
        files[f["name"]] = read_safetensors(path)
        assert files[f["name"]][1]["dtc.checkpoint_id"] == index["id"]
    out = {"param": {}, "optimizer_state": {}}
    for t in index["tensors"]:
        dtype = _DTYPES[t["dtype"]]
        size = struct.calcsize(_FORMATS[dtype])
        shape = t["shape"]
        count = 1
        for d in shape:
            count *= d
        whole = bytearray(count * size)
        filled = [0] * count
        strides = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
        for p in t["pieces"]:
            fdtype, fshape, data = files[p["file"]][0][t["name"]]
            extent = [b - a for a, b in zip(p["start"], p["stop"])]
            assert fdtype == dtype and fshape == extent, (t["name"], fdtype, fshape, extent)
            # Every element of the piece, row-major over its extent.
            pcount = 1
            for e in extent:
                pcount *= e
            for i in range(pcount):
                rest, g = i, 0
                for d in range(len(extent) - 1, -1, -1):
                    g += (p["start"][d] + rest % extent[d]) * strides[d]
                    rest //= extent[d]
                whole[g * size:(g + 1) * size] = data[i * size:(i + 1) * size]
                filled[g] += 1
        assert all(c == 1 for c in filled), f"{t['name']}: pieces do not tile the tensor"
        out[t["role"]][t["name"]] = (dtype, shape, bytes(whole))
    return out, index


def compare_exact(directory, single):
    ours, index = assemble(directory)
    problems = []
    for role, path in (("param", single), ("optimizer_state", single + ".optim")):
        theirs, meta, _ = read_safetensors(path)
        if set(ours[role]) != set(theirs):
            problems.append(f"{role}: tensors differ: {sorted(set(ours[role]) ^ set(theirs))}")
        for name in sorted(set(ours[role]) & set(theirs)):
            if ours[role][name] != tuple(theirs[name]):
                problems.append(f"{name}: differs from {os.path.basename(path)}")
        if meta.get("dtc.step") != str(index["step"]):
            problems.append(f"step {index['step']} vs {os.path.basename(path)}'s {meta.get('dtc.step')}")
        if role == "optimizer_state" and meta.get("dtc.optimizer_step") != str(index["optimizer_step"]):
            problems.append(f"optimizer step {index['optimizer_step']} vs {meta.get('dtc.optimizer_step')}")
    return problems


def run(cmd, out=None, env=None):
    print("$ " + " ".join(shlex.quote(c) for c in cmd) + (f" > {out}" if out else ""), flush=True)
    with open(out, "w") if out else open(os.devnull, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"FAIL: exit status {r.returncode}: {r.stderr.strip()}")


def resume(a):
    os.makedirs(a.dir, exist_ok=True)
    w = lambda name: os.path.join(a.dir, name)
    env = dict(os.environ)
    if a.block_bytes:
        env["DTC_CHECKPOINT_CRC_BLOCK_BYTES"] = str(a.block_bytes)
    common = shlex.split(a.compile_args)
    data = ["--data", a.data]

    def compile(plan, out):
        mesh, *flags = shlex.split(plan)
        run(["dtc", "compile", a.model, "--mesh", mesh, *flags, *common, "-o", out])

    def check(tool, *args):
        print(f"$ {tool} " + " ".join(args), flush=True)
        r = subprocess.run([sys.executable, os.path.join(HERE, tool), *args], capture_output=True, text=True)
        print(r.stdout.strip())
        if r.returncode != 0:
            sys.exit(f"FAIL: {tool} {' '.join(args)}")

    k = str(a.steps)
    compile("1", w("one.dtc"))
    run(["dtc", "run", w("one.dtc"), "--steps", str(2 * a.steps), *data, "--save", w("full.safetensors")], w("full.out"))
    compile(a.save_plan, w("save.dtc"))
    run(["dtc", "run", w("save.dtc"), "--steps", k, *data, "--save", w("ckpt") + "/"], w("first.out"), env)
    run(["dtc", "run", w("save.dtc"), "--steps", k, *data, "--save", w("single.safetensors")], w("first-single.out"))
    problems = compare_exact(w("ckpt"), w("single.safetensors"))
    for p in problems:
        print(f"FAIL: {w('ckpt')}: {p}")
    if problems:
        sys.exit(1)
    print("sharded checkpoint assembles to the single-file checkpoint bit for bit")
    run(["dtc", "run", w("one.dtc"), "--steps", "0", "--load", w("ckpt"), "--save", w("converted.safetensors")], None, env)
    check("compare_checkpoints.py", w("converted.safetensors"), w("single.safetensors"))
    for i, plan in enumerate(a.load_plan + ["1"]):
        load = w(f"load{i}.dtc")
        compile(plan, load)
        run(["dtc", "run", load, "--steps", k, *data, "--load", w("ckpt"), "--save", w(f"resumed{i}") + "/"],
            w(f"second{i}.out"), env)
        with open(w(f"resumed{i}.out"), "w") as f:
            f.write(open(w("first.out")).read() + open(w(f"second{i}.out")).read())
        check("compare_losses.py", w("full.out"), w(f"resumed{i}.out"), "--rtol", "1e-5")
        run(["dtc", "run", w("one.dtc"), "--steps", "0", "--load", w(f"resumed{i}"),
             "--save", w(f"resumed{i}.safetensors")], None, env)
        check("compare_checkpoints.py", w("full.safetensors"), w(f"resumed{i}.safetensors"), "--rtol", "1e-5")
        print(f"plan '{a.save_plan}' -> '{plan}': losses and checkpoint match the uninterrupted run")


def flip(path, offset):
    _, _, start = read_safetensors(path)
    with open(path, "r+b") as f:
        f.seek(start + offset)
        b = f.read(1)
        f.seek(start + offset)
        f.write(bytes([b[0] ^ 0xFF]))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("resume")
    r.add_argument("--dir", required=True)
    r.add_argument("--model", required=True)
    r.add_argument("--data", required=True)
    r.add_argument("--save-plan", required=True)
    r.add_argument("--load-plan", action="append", default=[])
    r.add_argument("--compile-args", default="")
    r.add_argument("--steps", type=int, default=3)
    r.add_argument("--block-bytes", type=int, default=0)
    c = sub.add_parser("compare")
    c.add_argument("directory")
    c.add_argument("single")
    f = sub.add_parser("flip")
    f.add_argument("file")
    f.add_argument("offset", type=int)
    a = p.parse_args()
    if a.cmd == "resume":
        resume(a)
    elif a.cmd == "compare":
        problems = compare_exact(a.directory, a.single)
        for q in problems:
            print(f"FAIL: {q}")
        if problems:
            return 1
        print("sharded checkpoint assembles to the single-file checkpoint bit for bit")
    else:
        flip(a.file, a.offset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
