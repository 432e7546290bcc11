"""Checks of dtc run --shuffle against the documented order (shuffle.test):
an independent implementation of shuffledWindowStart
(include/dtc/runtime/TokenData.h, docs/cli.md)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "reference"))
from dtcref import safetensors  # noqa: E402

M64 = (1 << 64) - 1


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def feistel(x, half, key):
    mask = (1 << half) - 1
    left, right = x >> half, x & mask
    for rnd in range(4):
        left, right = right, left ^ (mix64(key ^ mix64(rnd ^ right)) & mask)
    return (left << half) | right


def window_start(step, row, B, S, n, seed):
    windows = (n - S - 1) // S + 1
    w = step * B + row
    pass_, position = divmod(w, windows)
    bits = max(1, (windows - 1).bit_length())
    half = (bits + 1) // 2
    key = mix64(seed ^ mix64(pass_ ^ 0x53485546464C45))
    x = feistel(position, half, key)
    while x >= windows:
        x = feistel(x, half, key)
    return x * S


def int_inputs(path):
    tensors, meta = safetensors.read(path)
    ints = [t for name, t in sorted(tensors.items()) if t.dtype.kind == "i" and t.ndim == 2]
    return ints, int(meta["dtc.step"])


def main(argv):
    if argv[0] == "windows":
        (ids, labels), step = int_inputs(argv[1])
        tokens = np.fromfile(argv[2], dtype="<u2").astype(np.int64)
        seed = int(argv[3])
        B, S = ids.shape
        bad = 0
        for r in range(B):
            start = window_start(step, r, B, S, len(tokens), seed)
            if not (np.array_equal(ids[r], tokens[start:start + S]) and
                    np.array_equal(labels[r], tokens[start + 1:start + S + 1])):
                bad += 1
                print(f"MISMATCH row {r}: expected the window at {start}")
        print(f"step {step}: {B - bad} rows are the shuffled windows")
        return 1 if bad else 0
    if argv[0] == "differ":
        (a, _), _ = int_inputs(argv[1])
        (b, _), _ = int_inputs(argv[2])
        same = np.array_equal(a, b)
        print("the shuffled step's ids " + ("ARE the file's order" if same else "differ from the file's order"))
        return 1 if same else 0
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
