"""dtc's random numbers (docs/artifact.md, "Random numbers"), reimplemented
from that page: Philox-4x32-10 keyed by the seed and the tensor's name,
counted by the element's global index and a stream (0 for parameter
initialisation, step + 1 for the synthetic inputs of a step).

Its unit tests check Philox against Random123's known-answer vectors.
"""
import math

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF


def fnv1a64(text):
    h = 0xCBF29CE484222325
    for byte in text.encode("utf-8"):
        h ^= byte
        h = (h * 0x100000001B3) & MASK64
    return h


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def tensor_key(seed, name):
    k = splitmix64((seed ^ fnv1a64(name)) & MASK64)
    return k & MASK32, k >> 32


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Vectorized over numpy uint64 arrays holding 32-bit words."""
    c = [np.asarray(x, dtype=np.uint64) & np.uint64(MASK32) for x in (c0, c1, c2, c3)]
    k0, k1 = np.uint64(k0), np.uint64(k1)
    m0, m1, mask = np.uint64(M0), np.uint64(M1), np.uint64(MASK32)
    for r in range(10):
        if r > 0:
            k0 = (k0 + np.uint64(W0)) & mask
            k1 = (k1 + np.uint64(W1)) & mask
        p0 = m0 * c[0]
        p1 = m1 * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & mask
        hi1, lo1 = p1 >> np.uint64(32), p1 & mask
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
    return c


def uniform_pair(seed, name, count, stream):
    """(u, u') for elements 0..count-1: u in [0, 1), u' in (0, 1]."""
    k0, k1 = tensor_key(seed, name)
    idx = np.arange(count, dtype=np.uint64)
    x = philox4x32_10(idx & np.uint64(MASK32), idx >> np.uint64(32),
                      np.full(count, stream & MASK32, dtype=np.uint64),
                      np.full(count, stream >> 32, dtype=np.uint64), k0, k1)
    scale = 2.0 ** -24
    u = (x[0] >> np.uint64(8)).astype(np.float64) * scale
    u2 = ((x[1] >> np.uint64(8)) + np.uint64(1)).astype(np.float64) * scale
    return u, u2


def parse_init(spec):
    """'normal(STD)', 'uniform(LO,HI)', 'fill(V)', 'zeros', 'ones' -> (kind, a, b)."""
    spec = spec.strip()
    if spec in ("zeros", "ones"):
        return spec, 0.0, 0.0
    for kind in ("normal", "uniform", "fill"):
        if spec.startswith(kind + "(") and spec.endswith(")"):
            nums = [float(x) for x in spec[len(kind) + 1:-1].split(",")]
            if kind in ("normal", "fill") and len(nums) == 1:
                return kind, nums[0], 0.0
            if kind == "uniform" and len(nums) == 2:
                return kind, nums[0], nums[1]
    raise ValueError(f"bad init spec {spec!r}")


def init_values(spec, seed, name, shape, stream=0):
    """Initial values of a parameter (float32, as the runtime stores them)."""
    kind, a, b = parse_init(spec)
    count = int(np.prod(shape)) if shape else 1
    if kind == "zeros":
        return np.zeros(shape, dtype=np.float32)
    if kind == "ones":
        return np.ones(shape, dtype=np.float32)
    if kind == "fill":
        return np.full(shape, a, dtype=np.float32)
    u, u2 = uniform_pair(seed, name, count, stream)
    if kind == "normal":
        v = a * np.sqrt(-2.0 * np.log(u2)) * np.cos(2.0 * math.pi * u)
    else:
        v = a + (b - a) * u
    return v.astype(np.float32).reshape(shape)


def synthetic_input(seed, name, shape, elem, step, max_value=None):
    """The synthetic batch of step `step` for one input: normal(1.0) floats,
    or floor(u * max) integers."""
    count = int(np.prod(shape)) if shape else 1
    if elem in ("i32", "i64"):
        u, _ = uniform_pair(seed, name, count, step + 1)
        v = np.floor(u * float(max_value)).astype(np.int64)
        v = np.minimum(v, int(max_value) - 1)
        return v.reshape(shape)
    return init_values("normal(1.0)", seed, name, shape, stream=step + 1)
