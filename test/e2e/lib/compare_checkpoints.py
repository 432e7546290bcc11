#!/usr/bin/env python3
"""Compares two dtc checkpoints: the parameters (CKPT) and, when either has
one, the optimizer state (CKPT.optim), tensor by tensor, plus their step
metadata.

  compare_checkpoints.py A.safetensors B.safetensors [--rtol R]

Every element must satisfy |a - b| <= R * max|a| over its tensor (R = 0:
bit for bit; the metadata must agree, except the data checksum, which also
depends on the order of the tensors in the file).
A NaN or Inf anywhere is a failure; the first offending
tensor and element are named. Standard library only.
"""
import argparse
import json
import math
import os
import struct
import sys

_FORMATS = {"F32": "f", "I32": "i", "I64": "q"}


def read_raw(path):
    """The tensors of a safetensors file as (dtype, shape, bytes), its
    metadata, and where its data section starts."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = (info["dtype"], info["shape"], data[8 + n + begin:8 + n + end])
    return tensors, header.get("__metadata__", {}), 8 + n


def read(path):
    raw, metadata, _ = read_raw(path)
    tensors = {}
    for name, (dtype, shape, data) in raw.items():
        code = _FORMATS[dtype]
        count = len(data) // struct.calcsize(code)
        tensors[name] = (shape, struct.unpack_from(f"<{count}{code}", data))
    return tensors, metadata


def index(i, shape):
    out = []
    for d in reversed(shape):
        out.append(i % d)
        i //= d
    return list(reversed(out))


def compare(a_path, b_path, rtol, problems):
    a, ma = read(a_path)
    b, mb = read(b_path)
    for key in sorted(set(ma) | set(mb)):
        # The checksum hashes the data section in file order, which follows
        # the writing artifact's tensor order; the tensors are compared below.
        if key == "dtc.data_crc32c":
            continue
        if ma.get(key) != mb.get(key):
            problems.append(f"{os.path.basename(a_path)}: metadata {key}: {ma.get(key)!r} vs {mb.get(key)!r}")
    if set(a) != set(b):
        problems.append(f"{os.path.basename(a_path)}: tensors differ: {sorted(set(a) ^ set(b))}")
    for name in sorted(set(a) & set(b)):
        (sa, va), (sb, vb) = a[name], b[name]
        if sa != sb:
            problems.append(f"{name}: shape {sa} vs {sb}")
            continue
        scale = max((abs(x) for x in va if math.isfinite(x)), default=0.0)
        for i, (x, y) in enumerate(zip(va, vb)):
            if not (math.isfinite(x) and math.isfinite(y)):
                problems.append(f"{name}{index(i, sa)}: non-finite value ({x!r} vs {y!r})")
                break
            # `not (<=)`: a NaN difference fails too.
            if not (abs(x - y) <= rtol * scale):
                problems.append(f"{name}{index(i, sa)}: {x!r} vs {y!r} (tolerance {rtol * scale:.3g})")
                break


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rtol", type=float, default=0.0)
    args = p.parse_args()
    problems = []
    compare(args.a, args.b, args.rtol, problems)
    sides = [os.path.exists(path + ".optim") for path in (args.a, args.b)]
    if any(sides):
        if not all(sides):
            problems.append("only one checkpoint has an optimizer state (.optim)")
        else:
            compare(args.a + ".optim", args.b + ".optim", args.rtol, problems)
    for problem in problems:
        print(f"FAIL: {problem}")
    if not problems:
        print("checkpoints agree" + (" bit for bit" if args.rtol == 0 else f" within {args.rtol:g}"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
