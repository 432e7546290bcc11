#!/usr/bin/env python3
"""Ring-attention sequence parallelism: a long-sequence GPT on 1, 2 and 4 CPU
ranks (sp=1, 2, 4), side by side.

  bench/sp_bench.py [--plans "1;2:sp=2|--sp-layout=contiguous;2:sp=2;..."]
                    [--seq 2048] [--steps 12] [any other bench/dp_bench.py option]

The measurements are bench/dp_bench.py's, for these plans and a long
sequence: step time and tokens/s per plan; memory per rank by category,
the compile-time plan against the runtime allocator's high-water (the
activations shrink about sp-fold: every activation's sequence is split);
and the bytes each rank sends per step per collective kind, the report
against what the communicators counted (ring attention's key/value blocks
show as `shift`). Each sp plan runs with the three sequence layouts:
contiguous chunks, where causal attention leaves the last rank about twice
the average work and the others waiting for it, the striped layout and
the default zigzag one, which both give every rank the same work. On a
machine with fewer cores than ranks the step times measure overhead, not
scaling.
"""
import sys

import dp_bench

DEFAULTS = ["--plans", "1;2:sp=2|--sp-layout=contiguous;2:sp=2|--sp-layout=striped;2:sp=2;"
            "4:sp=4|--sp-layout=contiguous;4:sp=4|--sp-layout=striped;4:sp=4",
            "--layers", "2", "--hidden", "128",
            "--heads", "4", "--seq", "2048", "--batch", "2", "--steps", "12"]

if __name__ == "__main__":
    sys.exit(dp_bench.main(DEFAULTS + sys.argv[1:]))
