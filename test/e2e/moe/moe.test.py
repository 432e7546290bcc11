"""Checks on mixture-of-experts models for moe.test, with the float64
reference (test/reference/dtcref).

  moe.test.py drops MODEL.mlir SEED   each dtc.moe's routing at step 0 of
                                      the reference run: slots kept and
                                      dropped
  moe.test.py aux MODEL.mlir SEED     each dtc.load_balancing_loss at step 0
                                      and its gradient against central
                                      differences
  moe.test.py vjp MODEL.mlir SEED     the reference's dtc.moe gradients
                                      against central differences (so the
                                      reference that checks dtc is checked)
  moe.test.py exchange MODEL.mlir SEED EP REPORT.json STATS.json
                                      expert parallelism's moe_exchange
                                      bytes of step 0 over EP ranks: the
                                      report's against the formula, the
                                      runtime's against the rows the
                                      reference's routing moves
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "reference"))

import numpy as np  # noqa: E402

from dtcref import interp, moe, train  # noqa: E402


def step0(path, seed):
    model = train.Model.from_text(open(path).read())
    params = model.init_params(seed)
    args = model.args(params, model.inputs_for_step(seed, 0))
    _, env = interp.evaluate(model.func, args, "f64", keep=True)
    return model, env


def drops(path, seed):
    model, env = step0(path, seed)
    for op in model.func.ops:
        if op.name != "dtc.moe":
            continue
        x, router = env[op.operands[0]], env[op.operands[1]]
        top_k = int(interp._attr(op, "top_k"))
        T, E = x.shape[0], router.shape[1]
        cap = moe.capacity(float(interp._attr(op, "capacity_factor")), T, top_k, E)
        probs = moe._router(x, router)
        _, positions, _ = moe.route(probs, top_k, cap)
        dropped = int(np.sum(positions < 0))
        print(f"{op.results[0]}: capacity {cap}, {positions.size - dropped} slots kept, "
              f"{dropped} dropped")


def aux(path, seed):
    """The loss's value and its gradient with respect to the router, against
    central differences of the loss (f is piecewise constant: a step small
    enough to keep every token's first choice)."""
    model, env = step0(path, seed)
    for op in model.func.ops:
        if op.name != "dtc.load_balancing_loss":
            continue
        x, router = env[op.operands[0]], env[op.operands[1]]
        loss = moe.load_balancing_loss(x, router)
        _, drouter = moe.load_balancing_loss_vjp(x, router, 1.0)
        h = 1e-6
        numeric = np.zeros_like(router)
        for idx in np.ndindex(router.shape):
            plus, minus = router.copy(), router.copy()
            plus[idx] += h
            minus[idx] -= h
            numeric[idx] = (moe.load_balancing_loss(x, plus) - moe.load_balancing_loss(x, minus)) / (2 * h)
        err = np.max(np.abs(numeric - drouter)) / max(np.max(np.abs(numeric)), 1e-30)
        print(f"{op.results[0]}: loss {loss:.4f} (1 when balanced), gradient "
              f"{'matches' if err < 1e-5 else 'DIFFERS'} central differences (relative {err:.1e})")


def vjp(path, seed):
    """<moe(...), r> for a fixed random r: its gradient by moe_vjp against
    central differences on 40 random elements of each operand. The routing
    is piecewise constant, so the step (1e-6) must keep every choice and
    every drop: the check says when one moved."""
    model, env = step0(path, seed)
    rng = np.random.default_rng(seed)
    for op in model.func.ops:
        if op.name != "dtc.moe":
            continue
        args = [np.array(env[o]) for o in op.operands]
        top_k, cf = int(interp._attr(op, "top_k")), float(interp._attr(op, "capacity_factor"))
        r = rng.standard_normal(args[0].shape)
        grads = moe.moe_vjp(*args, top_k, cf, r)
        routing = moe.moe(*args, top_k, cf)[1][1:3]

        def f(values):
            y, cache = moe.moe(*values, top_k, cf)
            same = all(np.array_equal(a, b) for a, b in zip(cache[1:3], routing))
            return float(np.sum(y * r)), same

        worst, moved = 0.0, False
        for k, name in enumerate(["x", "router", "w_in", "w_out"]):
            for _ in range(40):
                idx = tuple(rng.integers(0, n) for n in args[k].shape)
                plus = [a.copy() for a in args]
                minus = [a.copy() for a in args]
                plus[k][idx] += 1e-6
                minus[k][idx] -= 1e-6
                (fp, same_p), (fm, same_m) = f(plus), f(minus)
                moved |= not (same_p and same_m)
                numeric = (fp - fm) / 2e-6
                worst = max(worst, abs(numeric - grads[k][idx]) / max(abs(numeric), 1e-3))
        print(f"{op.results[0]}: gradients {'match' if worst < 1e-5 else 'DIFFER FROM'} central "
              f"differences (worst relative {worst:.1e}){' (routing moved)' if moved else ''}")


# The exchanges of one dtc.moe per step: the forward sends each token slot
# to its expert (dispatch) and the result back (combine); the backward sends
# the result's gradient to the experts (combine's gradient), the experts'
# outputs to the tokens again (their weights' gradient) and the buffer's
# gradient back to the tokens (dispatch's gradient).
TO_EXPERTS, TO_TOKENS = 2, 3


def exchange(path, seed, ep, report_path, stats_path):
    """Report: every member sends (ep - 1)/ep of its T/ep tokens' k slots,
    D values each, per exchange (balanced routing, nothing dropped): the
    formula tokens * top_k * hidden * bytes * (ep - 1)/ep^2. Runtime: the
    rows the routing really moves between members (kept slots whose token
    and expert are on different members), the busiest member's."""
    model, env = step0(path, seed)
    report = json.load(open(report_path))
    stats = json.load(open(stats_path))
    formula = 0
    sent = np.zeros(ep, dtype=np.int64)
    for op in model.func.ops:
        if op.name != "dtc.moe":
            continue
        x, router = env[op.operands[0]], env[op.operands[1]]
        top_k = int(interp._attr(op, "top_k"))
        T, D = x.shape
        E = router.shape[1]
        cap = moe.capacity(float(interp._attr(op, "capacity_factor")), T, top_k, E)
        experts, positions, _ = moe.route(moe._router(x, router), top_k, cap)
        row = D * 4
        formula += (TO_EXPERTS + TO_TOKENS) * T * top_k * row * (ep - 1) // ep ** 2
        token_owner = np.repeat(np.arange(T) // (T // ep), top_k).reshape(T, top_k)
        expert_owner = experts // (E // ep)
        moved = (positions >= 0) & (token_owner != expert_owner)
        for m in range(ep):
            sent[m] += TO_EXPERTS * row * int(np.sum(moved & (token_owner == m)))
            sent[m] += TO_TOKENS * row * int(np.sum(moved & (expert_owner == m)))
    reported = report["comm_bytes"]["moe_exchange"]
    counted = stats["collectives_per_step"]["moe_exchange"]["sent_bytes"]
    print(f"report {reported}, formula {formula}: {'equal' if reported == formula else 'DIFFER'}")
    print(f"runtime {counted}, routed rows {int(sent.max())}: "
          f"{'equal' if counted == int(sent.max()) else 'DIFFER'}")
    # The two meet when routing is even and nothing is dropped (e.g. every
    # token to every expert: top_k = E, capacity T).
    print(f"report {reported}, runtime {counted}: "
          f"{'equal' if reported == counted else 'differ (routing uneven or slots dropped)'}")


if __name__ == "__main__":
    if sys.argv[1] == "exchange":
        exchange(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6])
    else:
        {"drops": drops, "aux": aux, "vjp": vjp}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
