#!/usr/bin/env python3
"""Checks Megatron sequence parallelism's bytes on the wire against tensor
parallelism's, exactly, from two plan reports of the same GPT.

  check_sp_comm.py TP.json SP.json --layers L --hidden H --seq S --batch B

TP.json is `dtc compile --strategy tp=T --report`, SP.json the same with
--sequence-parallel (f32, one data-parallel shard, no pipeline). With a
ring collective over t devices each device sends r = (t-1)/t of the
message per all-gather or reduce-scatter and 2r per all-reduce. Let
D = B*S*H*4 bytes (one activation) and n = 2L + 1 (the norms: two per
block and the final one). Tensor parallelism all-reduces A = 2(2n)·r·D
(each block's attention and MLP outputs in the forward and their input
gradients in the backward, plus the vocab-parallel embedding and the LM
head's input gradient) and the cross entropy's three row reductions
C = 3·B·S·4·2r. Sequence parallelism must send instead:
  - reduce-scatter: A / 2 (the first half of each all-reduce);
  - all-gather: A / 2 (the second half), plus n·r·D (the backward gathers
    each column-parallel block's input again for its weight gradient,
    instead of keeping it) plus the position table's gradient S·H·4·r
    (its rows are split along the sequence);
  - all-reduce: C, plus the norms' parameter gradients 2n·H·4·2r (each
    rank's part of the sequence gives a partial sum).
Prints each kind with both numbers; exits 1 on any difference.
"""
import argparse
import json
import sys


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tp")
    p.add_argument("sp")
    for k in ("layers", "hidden", "seq", "batch"):
        p.add_argument("--" + k, type=int, required=True)
    a = p.parse_args(argv)
    tp, sp = json.load(open(a.tp)), json.load(open(a.sp))
    t = tp["strategy"]["tp"]
    if sp["strategy"]["tp"] != t or not sp["strategy"].get("sequence_parallel") \
            or tp["strategy"].get("sequence_parallel"):
        sys.exit("expected a tp=T report and the same plan with --sequence-parallel")
    r_num, r_den = t - 1, t  # r = (t-1)/t, kept exact
    D = a.batch * a.seq * a.hidden * 4
    n = 2 * a.layers + 1
    A = 2 * (2 * n) * D * r_num // r_den
    C = 3 * a.batch * a.seq * 4 * 2 * r_num // r_den
    expected = {
        ("tp", "all_reduce"): A + C,
        ("sp", "reduce_scatter"): A // 2,
        ("sp", "all_gather"): A // 2 + n * D * r_num // r_den + a.seq * a.hidden * 4 * r_num // r_den,
        ("sp", "all_reduce"): C + 2 * n * a.hidden * 4 * 2 * r_num // r_den,
        ("tp", "all_gather"): 0,
        ("tp", "reduce_scatter"): 0,
    }
    failed = False
    for (which, kind), want in expected.items():
        got = (tp if which == "tp" else sp)["comm_bytes"][kind]
        status = "ok" if got == want else "DIFFER"
        failed |= got != want
        print(f"{which} {kind}: report {got} expected {want} {status}")
    # The activations' share: the same bytes as tensor parallelism.
    same = sp["comm_bytes"]["reduce_scatter"] * 2 == A
    print(f"activation collectives: tp all-reduce {A}, sp reduce-scatter + all-gather {2 * sp['comm_bytes']['reduce_scatter']}:"
          f" {'same' if same else 'DIFFER'}")
    return 1 if failed or not same else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
