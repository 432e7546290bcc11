#!/usr/bin/env python3
"""Plans at the meeting of every two features: a generated pairwise
(strength 2) covering array of dtc's plan and training features, each plan
trained a few steps and checked against the float64 reference, and the
report's figures checked for it.

  feature_matrix.py generate [--strength 2] [--seed 1]
  feature_matrix.py run --work DIR [--strength 2] [--seed 1] [--steps 3]
                        [--only REGEX] [--dtc dtc] [--refpython PYTHON]

Factors (docs/testing.md "Feature matrix"): the layout (one device, dp,
tp, pp and their two-way products on 2 or 4 ranks; expert parallelism
alone, with dp and with pp), ZeRO 0-3,
micro-batches 1/2/4, gradient accumulation 1/2, the schedule (none when
not pipelined), recomputation, Megatron sequence parallelism, precision,
optimizer, clipping, the model (GPT with a tied embedding, LLaMA with an
untied head, a GPT of 4 experts per block, top-2, dropping tokens) and
even or uneven shards (vocabulary 257 and 3 heads:
padded pieces under tp and ZeRO). Constraints remove what is not a plan
(ZeRO without dp or ep, a schedule without a pipeline, interleaving
without pp > 1 or with a micro-batch count pp does not divide, sequence
parallelism without tp, ep without experts, experts with several
micro-batches). `generate` lists the plans and proves coverage:
every pair of values that some valid plan has appears in some listed plan
(for strength 3, every triple); it exits 1 otherwise.

`run` trains every plan for --steps steps (synthetic tokens, seed 3) and
checks, per plan:
  - losses, every parameter and the optimizer state against the float64
    reference (test/reference/refcheck.py), to tolerances derived from the
    rounding of this very computation: f32's, or for bf16-mixed the
    reference's own runs rounded to bf16 where dtc stores 16 bits
    (docs/testing.md); fp16-mixed plans: every loss finite and within 1%
    of the reference's, and f32 master weights in the checkpoint;
  - the report: 0 < MFU <= HFU <= 1 and the bubble and compute time
    against their formulas (check_utilisation.py), every collective's
    bytes equal to what the runtime's communicators counted in one step
    (compare_comm.py), and every rank's activation peak equal to what the
    artifact plans for it.
Prints one line per plan; exits 1 when any check fails.
"""
import argparse
import itertools
import json
import os
import random
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)
import check_memory_plans as cmp  # noqa: E402
import dp_equivalence as dpe  # noqa: E402

LAYOUTS = {  # name: (mesh, dp, tp, pp, ep)
    "one": ("1", 1, 1, 1, 1),
    "dp2": ("2", 2, 1, 1, 1),
    "tp2": ("2", 1, 2, 1, 1),
    "pp2": ("2", 1, 1, 2, 1),
    "dp2tp2": ("2x2", 2, 2, 1, 1),
    "dp2pp2": ("2x2", 2, 1, 2, 1),
    "tp2pp2": ("2x2", 1, 2, 2, 1),
    "ep2": ("2", 1, 1, 1, 2),
    "dp2ep2": ("2x2", 2, 1, 1, 2),
    "ep2pp2": ("2x2", 1, 1, 2, 2),
}
FACTORS = [
    ("layout", list(LAYOUTS)),
    ("zero", [0, 1, 2, 3]),
    ("microbatches", [1, 2, 4]),
    ("accum", [1, 2]),
    ("schedule", ["none", "1f1b", "gpipe", "interleaved", "zb"]),
    ("remat", ["none", "selective", "full"]),
    ("sp", [False, True]),
    ("precision", ["f32", "bf16-mixed", "fp16-mixed"]),
    ("optimizer", ["sgd", "adam", "adamw"]),
    ("clip", [False, True]),
    ("model", ["gpt", "llama", "moe"]),
    ("shards", ["even", "uneven"]),
]
NAMES = [name for name, _ in FACTORS]
BATCH, SEQ = 16, 8
FAST_LINKS = os.path.join(HERE, "fast-links.json")


def valid(c):
    _, dp, tp, pp, ep = LAYOUTS[c["layout"]]
    pipelined = pp > 1 or c["microbatches"] > 1 or c["accum"] > 1
    if c["zero"] > 0 and dp * ep == 1:
        return False
    # Experts split only a mixture of experts, which routes the whole batch
    # at once (one micro-batch, pipelines included).
    if ep > 1 and c["model"] != "moe":
        return False
    if c["model"] == "moe" and c["microbatches"] * c["accum"] > 1:
        return False
    if (c["schedule"] == "none") == pipelined:
        return False
    if c["schedule"] == "interleaved" and (pp == 1 or (c["microbatches"] * c["accum"]) % pp):
        return False
    if c["sp"] and tp == 1:
        return False
    return BATCH % (dp * ep * c["microbatches"] * c["accum"]) == 0


def all_valid():
    levels = [values for _, values in FACTORS]
    return [c for c in (dict(zip(NAMES, combo)) for combo in itertools.product(*levels)) if valid(c)]


def tuples_of(c, strength):
    return [tuple((NAMES[i], c[NAMES[i]]) for i in idx)
            for idx in itertools.combinations(range(len(NAMES)), strength)]


def generate(strength, seed):
    """Two covering arrays, one for the dense models and one for the
    mixture of experts (the only model ep and its layouts apply to): every
    tuple of values some valid plan has is in one of them, and adding the
    experts left the dense plans as they were."""
    configs = all_valid()
    dense = [c for c in configs if c["model"] != "moe"]
    experts = [c for c in configs if c["model"] == "moe"]
    plans, needed = [], set()
    for block in (dense, experts):
        block_plans, block_needed = cover(block, strength, seed)
        plans += block_plans
        needed |= block_needed
    covered = set()
    for c in plans:
        covered.update(tuples_of(c, strength))
    assert covered >= needed
    every = set()
    for c in configs:
        every.update(tuples_of(c, strength))
    assert needed == every
    return plans, needed, len(configs)


def cover(configs, strength, seed):
    """Greedy covering array (AETG-style): each round takes the first
    uncovered tuple, draws candidate plans that contain it and keeps the
    one covering most uncovered tuples; deterministic for a seed."""
    rng = random.Random(seed)
    needed = set()
    for c in configs:
        needed.update(tuples_of(c, strength))
    uncovered, plans = set(needed), []
    while uncovered:
        target = min(uncovered, key=repr)
        pool = [c for c in configs if all(c[k] == v for k, v in target)]
        candidates = rng.sample(pool, min(len(pool), 300))
        best = max(candidates, key=lambda c: len(uncovered.intersection(tuples_of(c, strength))))
        plans.append(best)
        uncovered.difference_update(tuples_of(best, strength))
    return plans, needed


def with_ilp_twins(plans):
    """Every plan with tp (and without Megatron's sequence parallelism,
    which needs Megatron's layout) once more with --tp-layout ilp: the
    program's layouts meet every value the tp plans of the covering array
    have."""
    twins = []
    for c in plans:
        if LAYOUTS[c["layout"]][2] > 1 and not c["sp"]:
            twins.append(dict(c, tp_layout="ilp"))
    return plans + twins


def plan_name(i, c):
    return f"p{i:02d}"


def compile_flags(c):
    mesh, dp, tp, pp, ep = LAYOUTS[c["layout"]]
    flags = ["--mesh", mesh, "--strategy",
             f"dp={dp},tp={tp},pp={pp},zero={c['zero']}" + (f",ep={ep}" if ep > 1 else "")]
    if c["microbatches"] > 1:
        flags += ["--microbatches", str(c["microbatches"])]
    if c["accum"] > 1:
        flags += ["--grad-accum", str(c["accum"])]
    if c["schedule"] != "none":
        flags += ["--schedule", c["schedule"]]
        if c["schedule"] == "interleaved":
            flags += ["--virtual-stages", "2"]
    if c["remat"] != "none":
        flags += ["--remat", c["remat"]]
    if c["sp"]:
        flags += ["--sequence-parallel"]
    if c.get("tp_layout") == "ilp":
        # Nearly free links: the program splits every op it can.
        flags += ["--tp-layout", "ilp", "--hw", FAST_LINKS]
    return flags


def training_flags(c):
    """The flags the float64 reference needs too (refcheck.py reads them)."""
    flags = []
    if c["precision"] != "f32":
        flags += ["--precision", c["precision"]]
        if c["precision"] == "fp16-mixed":
            flags += ["--loss-scale", "1024"]
    flags += ["--optimizer", c["optimizer"]]
    if c["optimizer"] == "sgd":
        flags += ["--lr", "0.1"]
    if c["clip"]:
        flags += ["--grad-clip", "0.05"]
    return flags


def model_args(c):
    hidden, heads, vocab = (32, 4, 256) if c["shards"] == "even" else (48, 3, 257)
    # moe: a GPT whose every block's MLP is 4 experts, top-2, at a capacity
    # that drops tokens, with the load-balancing loss.
    family = "gpt" if c["model"] == "moe" else c["model"]
    experts = ["--experts", "4", "--top-k", "2", "--capacity-factor", "1.0"] if c["model"] == "moe" else []
    return [family, "--layers", "2", "--hidden", str(hidden), "--heads", str(heads),
            "--seq", str(SEQ), "--vocab", str(vocab), "--batch", str(BATCH)] + experts


def describe(c):
    return " ".join(f"{k}={c[k]}" for k in NAMES + (["tp_layout"] if "tp_layout" in c else []))


def run_plans(a, plans):
    os.makedirs(a.work, exist_ok=True)
    failed = False
    refpython = a.refpython or sys.executable
    groups = {}
    for i, c in enumerate(plans):
        if a.only and not re.search(a.only, describe(c)):
            continue
        key = (tuple(model_args(c)), tuple(training_flags(c)))
        groups.setdefault(key, []).append((i, c))
    for (margs, tflags), members in sorted(groups.items()):
        family = margs[0] + ("-moe" if "--experts" in margs else "")
        gdir = os.path.join(a.work, "-".join((family, margs[4], margs[8])) + "-" +
                            "-".join(f.lstrip("-") for f in tflags))
        os.makedirs(gdir, exist_ok=True)
        model = os.path.join(gdir, "model.mlir")
        dpe.run([sys.executable, os.path.join(ROOT, "examples", "gen_model.py")] + list(margs) + ["-o", model],
                os.path.join(gdir, "gen.log"))
        # fp16 plans, and bf16 ones of a mixture of experts: the losses only
        # (docs/testing.md "Feature matrix").
        full = [(i, c) for i, c in members if not losses_only(c)]
        cmd = [refpython, os.path.join(ROOT, "test", "reference", "refcheck.py"), model, "--work",
               os.path.join(gdir, "ref"), "--steps", str(a.steps), "--meshes", ""]
        for i, c in full or members[:1]:
            cmd += ["--plan", f"{plan_name(i, c)}=" + shlex.join(compile_flags(c))]
        cmd += ["--dtc", a.dtc, "--"] + list(tflags)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = proc.stdout
        ref = re.search(r"^reference: .*losses (.*)$", out, re.M)
        ref_losses = [float(x) for x in ref.group(1).split(", ")] if ref else []
        for i, c in members:
            if losses_only(c):
                verdict = check_losses(a, gdir, model, i, c, tflags, ref_losses)
            else:
                line = re.search(rf"^plan {plan_name(i, c)}: (.*)$", out, re.M)
                verdict = line.group(1) if line else "no result:\n" + out[-2000:]
            ok = verdict.startswith("ok")
            failed |= not ok
            what = "reference losses" if losses_only(c) else "reference"
            print(f"{plan_name(i, c)} {what}: {'ok' if ok else 'FAIL ' + verdict} [{describe(c)}]")
            if ok:
                failed |= not check_report(a, gdir, model, i, c, tflags)
    return 0 if not failed else 1


def losses_only(c):
    """Plans checked by their losses alone: fp16 (loss scaling skips steps),
    and bf16 with experts, whose top-k routing is discontinuous: a token
    whose experts' scores differ by less than bf16's rounding goes to either
    (Adam's first step then moves the weights it feeds by +-lr), which no
    tolerance built from rounding noise covers."""
    return c["precision"] == "fp16-mixed" or (c["precision"] == "bf16-mixed" and c["model"] == "moe")


def check_losses(a, gdir, model, i, c, tflags, ref_losses):
    """Every loss finite and within 1% of the float64 reference's; the
    checkpoint holds f32 master weights."""
    work = os.path.join(gdir, plan_name(i, c))
    os.makedirs(work, exist_ok=True)
    artifact, ckpt = os.path.join(work, "train.dtc"), os.path.join(work, "final.safetensors")
    try:
        dpe.run([a.dtc, "compile", model, "-o", artifact] + compile_flags(c) + list(tflags),
                os.path.join(work, "compile-train.log"))
        out = dpe.run([a.dtc, "run", artifact, "--steps", str(a.steps), "--seed", "3", "--save", ckpt],
                      os.path.join(work, "train.log"))
        dpe.read_safetensors(ckpt)  # every tensor F32, or it raises
    except SystemExit as e:
        return str(e)[-1500:]
    losses = dpe.losses_of(out)
    if len(losses) != len(ref_losses) or not ref_losses:
        return f"losses {losses}, reference {ref_losses}"
    worst = max(abs(x - r) / abs(r) if x == x else float("inf") for x, r in zip(losses, ref_losses))
    if not worst <= 0.01:
        return f"losses {losses} vs float64 {ref_losses} (worst relative {worst:.2e} > 0.01)"
    return f"ok: worst relative loss difference {worst:.1e}"


def check_report(a, gdir, model, i, c, tflags):
    """Compiles (again, with a report) and runs one step with --stats."""
    name = plan_name(i, c)
    work = os.path.join(gdir, name)
    os.makedirs(work, exist_ok=True)
    artifact, report = os.path.join(work, "plan.dtc"), os.path.join(work, "report.json")
    problems = []
    try:
        dpe.run([a.dtc, "compile", model, "-o", artifact, "--report", report] + compile_flags(c) + list(tflags),
                os.path.join(work, "compile.log"))
        stats = os.path.join(work, "stats.json")
        dpe.run([a.dtc, "run", artifact, "--steps", "1", "--seed", "3", "--stats", stats],
                os.path.join(work, "stats.log"))
        for script in ("check_utilisation.py",):
            dpe.run([sys.executable, os.path.join(HERE, script), report], os.path.join(work, script + ".log"))
        dpe.run([sys.executable, os.path.join(HERE, "compare_comm.py"), report, stats],
                os.path.join(work, "compare_comm.log"))
        inspected = json.loads(dpe.run([a.dtc, "inspect", artifact], os.path.join(work, "inspect.log")))
        measured = json.load(open(stats)).get("activation_peak_bytes_by_rank") or []
        planned = [cmp.planned_activation_bytes(inspected["programs"][p]) for p in program_of_ranks(inspected)]
        if measured != planned:
            problems.append(f"activation peak per rank {measured}, planned {planned}")
    except SystemExit as e:
        problems.append(str(e)[-1500:])
    print(f"{name} report, comm and memory: {'ok' if not problems else 'FAIL ' + '; '.join(problems)} [{describe(c)}]")
    return not problems


def program_of_ranks(artifact):
    """The index of each rank's program, in rank order."""
    owner = {}
    for p, program in enumerate(artifact["programs"]):
        for r in program.get("ranks", []):
            owner[r] = p
    return [owner[r] for r in sorted(owner)]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["generate", "run"])
    p.add_argument("--strength", type=int, default=2, choices=[2, 3])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--work")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--only", help="run only the plans whose description matches")
    p.add_argument("--dtc", default="dtc")
    p.add_argument("--refpython", help="the Python (with numpy) that runs the float64 reference")
    a = p.parse_args(argv)
    plans, needed, count = generate(a.strength, a.seed)
    covering = len(plans)
    plans = with_ilp_twins(plans)
    if a.command == "generate":
        for i, c in enumerate(plans):
            print(f"{plan_name(i, c)}: {describe(c)}")
        print(f"{covering} plans cover all {len(needed)} {'pairs' if a.strength == 2 else 'triples'} "
              f"of values that the {count} valid plans have; "
              f"{len(plans) - covering} of them with tp run again with --tp-layout ilp")
        return 0
    if not a.work:
        p.error("run needs --work")
    return run_plans(a, plans)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
