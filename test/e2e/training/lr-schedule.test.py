"""Checks a `dtc run --log` against the learning-rate schedule of
docs/cli.md, written out here independently of dtc.

  lr-schedule.test.py LOG.jsonl KIND LR WARMUP DECAY MIN [--skipped K,...]

Every logged step's "lr" must equal the formula at the update it applied,
exactly (both are the same double arithmetic): update t counts the updates
applied before the step, so a step skipped by loss scaling (--skipped) does
not advance it.
"""
import json
import math
import sys


def rate(kind, lr, warmup, decay, min_lr, t):
    if t < warmup:
        return lr * ((t + 1) / warmup)
    if kind == "constant":
        return lr
    p = min(1.0, (t - warmup) / (decay - warmup))
    if kind == "cosine":
        return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * p)) / 2
    return lr - (lr - min_lr) * p


def main(argv):
    log, kind = argv[0], argv[1]
    lr, warmup, decay, min_lr = float(argv[2]), int(argv[3]), int(argv[4]), float(argv[5])
    skipped = set()
    if len(argv) > 7 and argv[6] == "--skipped":
        skipped = {int(k) for k in argv[7].split(",")}
    update, steps, bad = 0, 0, 0
    for line in open(log):
        entry = json.loads(line)
        want = rate(kind, lr, warmup, decay, min_lr, update)
        if entry.get("lr") != want:
            print(f"MISMATCH step {entry['step']}: lr {entry.get('lr')!r}, formula {want!r}")
            bad += 1
        if not isinstance(entry.get("loss"), float) or not math.isfinite(entry["loss"]):
            print(f"MISMATCH step {entry['step']}: loss {entry.get('loss')!r}")
            bad += 1
        if entry["step"] not in skipped:
            update += 1
        steps += 1
    print(f"{kind}: {steps} steps follow the formula" if not bad else f"{bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
