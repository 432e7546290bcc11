"""Token files (`dtc run --data`), as the command-line contract defines them:
raw little-endian tokens; step k fills global row r of the model's first
integer [B, S] input (ids) from the window starting at
((k*B + r)*S) mod (n - S - 1), and the second (labels) from the window
shifted by one token."""
import numpy as np


def read_tokens(path, dtype="uint16"):
    return np.fromfile(path, dtype=np.dtype(dtype).newbyteorder("<")).astype(np.int64)


def window_starts(step, B, S, n):
    return np.array([((step * B + r) * S) % (n - S - 1) for r in range(B)], dtype=np.int64)


def batch(tokens, step, B, S):
    """(ids, labels) of global step `step`, each [B, S]."""
    n = len(tokens)
    if n < S + 2:
        raise ValueError(f"token file of {n} tokens is shorter than S + 2 = {S + 2}")
    starts = window_starts(step, B, S, n)
    idx = starts[:, None] + np.arange(S)[None, :]
    return tokens[idx], tokens[idx + 1]
