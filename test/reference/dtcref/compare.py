"""Comparisons of dtc's numbers with the reference that fail on NaN/Inf.

Tolerance model (docs/testing.md): dtc computes in f32, the reference in
float64. For every compared quantity X the reference also runs the same
computation in f32 (numpy float32: independent f32 implementations, one as
is and some from initial values moved by one rounding); their distance from
float64 is the noise f32 rounding causes on this very computation,
including what training steps amplify (Adam divides each gradient by its
running RMS). With X_32 ranging over those runs, dtc passes when

    ||X_dtc - X_64||  <=  K * max(max ||X_32 - X_64||, u ||X_64||)       (per tensor, L2)
    max|X_dtc - X_64| <=  K * max(max |X_32 - X_64|, u max|X_64|)      (per element)

with u = 2^-24 (one rounding of every element) and K = 8 (dtc and numpy sum
in different orders; agreement is typically within 1.5x of the f32 noise).
Losses use the running maximum of the per-step noise. A non-finite value in
dtc's output is always a failure, reported with its step or element.
"""
import math

import numpy as np

U = 2.0 ** -24
K = 8.0


def first_nonfinite(arr):
    """Index (tuple) of the first NaN/Inf, or None."""
    arr = np.asarray(arr, dtype=np.float64)
    bad = np.argwhere(~np.isfinite(arr))
    if bad.size == 0:
        return None
    return tuple(int(i) for i in bad[0])


def _at(arr, idx):
    return float(np.asarray(arr, dtype=np.float64)[idx])


class Report:
    """Collects problems and the worst error-to-tolerance ratio."""

    def __init__(self):
        self.problems = []
        self.worst = 0.0
        self.worst_what = ""

    def ratio(self, what, err, tol):
        # `not (a <= b)` is True for NaN: a NaN error is a failure.
        r = err / tol if tol > 0 else (0.0 if err == 0 else math.inf)
        if not (r <= self.worst) or math.isnan(r):
            self.worst, self.worst_what = r, what
        return r

    def fail(self, text):
        self.problems.append(text)

    @property
    def ok(self):
        return not self.problems


def _runs(ref32):
    """One f32 run or a list of them."""
    return ref32 if isinstance(ref32, (list, tuple)) else [ref32]


def compare_tensor(rep, name, got, ref64, ref32, k=K):
    """dtc's tensor `got` against the float64 reference and its f32 runs."""
    got = np.asarray(got, dtype=np.float64)
    ref64 = np.asarray(ref64, dtype=np.float64)
    runs = [np.asarray(r, dtype=np.float64) for r in _runs(ref32)]
    if got.shape != ref64.shape:
        rep.fail(f"{name}: shape {list(got.shape)}, reference {list(ref64.shape)}")
        return
    idx = first_nonfinite(got)
    if idx is not None:
        rep.fail(f"{name}: non-finite value {_at(got, idx)} at {list(idx)}")
        return
    if got.size == 0:
        return
    diff = got - ref64
    noise_l2 = max(float(np.linalg.norm(r - ref64)) for r in runs)
    noise_el = max(float(np.max(np.abs(r - ref64))) for r in runs)
    tol_l2 = k * max(noise_l2, U * float(np.linalg.norm(ref64)))
    err_l2 = float(np.linalg.norm(diff))
    r = rep.ratio(f"{name} (L2)", err_l2, tol_l2)
    if not (r <= 1.0):
        rep.fail(f"{name}: L2 error {err_l2:.3e} > {tol_l2:.3e} ({r:.1f}x the f32 tolerance; "
                 f"reference norm {np.linalg.norm(ref64):.3e})")
    tol_el = k * max(noise_el, U * float(np.max(np.abs(ref64))))
    worst = int(np.argmax(np.abs(diff)))
    err_el = float(np.abs(diff).reshape(-1)[worst])
    r = rep.ratio(f"{name} (element)", err_el, tol_el)
    if not (r <= 1.0):
        where = list(np.unravel_index(worst, got.shape))
        rep.fail(f"{name}: element {where} is {got.reshape(-1)[worst]:.9g}, reference "
                 f"{ref64.reshape(-1)[worst]:.9g} (error {err_el:.3e} > {tol_el:.3e})")


def compare_losses(rep, got, ref64, ref32, k=K, label="loss"):
    """Per-step losses: |dtc - ref64| <= k * (running max of the f32 noise
    + u |ref64|) at every step. ref32: one f32 run's losses or a list."""
    if len(got) != len(ref64):
        rep.fail(f"{label}: {len(got)} steps, reference has {len(ref64)}")
        return
    runs = ref32 if ref32 and isinstance(ref32[0], (list, tuple)) else [ref32]
    noise = 0.0
    for step, (g, r64) in enumerate(zip(got, ref64)):
        if not math.isfinite(g):
            rep.fail(f"{label}: non-finite value {g} at step {step}")
            continue
        noise = max([noise] + [abs(r[step] - r64) for r in runs])
        tol = k * (noise + U * abs(r64))
        r = rep.ratio(f"{label} step {step}", abs(g - r64), tol)
        if not (r <= 1.0):
            rep.fail(f"{label} at step {step}: {g:.9g}, reference {r64:.9g} "
                     f"(error {abs(g - r64):.3e} > {tol:.3e})")


def compare_close(rep, name, got, want, rtol, atol=0.0):
    """Two float64 computations of the same thing (e.g. dtc's gradient rule
    evaluated in float64 vs central differences): per element
    |got - want| <= rtol * max|want| + atol. Non-finite values fail."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        rep.fail(f"{name}: shape {list(got.shape)}, expected {list(want.shape)}")
        return
    for arr, who in ((got, "value"), (want, "expected value")):
        idx = first_nonfinite(arr)
        if idx is not None:
            rep.fail(f"{name}: non-finite {who} {_at(arr, idx)} at {list(idx)}")
            return
    if got.size == 0:
        return
    scale = float(np.max(np.abs(want)))
    tol = rtol * scale + atol
    diff = np.abs(got - want)
    worst = int(np.argmax(diff))
    r = rep.ratio(name, float(diff.reshape(-1)[worst]), tol)
    if not (r <= 1.0):
        where = list(np.unravel_index(worst, got.shape))
        rep.fail(f"{name}: element {where} is {got.reshape(-1)[worst]:.12g}, expected "
                 f"{want.reshape(-1)[worst]:.12g} (|diff| {diff.reshape(-1)[worst]:.3e} > "
                 f"{rtol:g} * {scale:.3e} + {atol:g})")
