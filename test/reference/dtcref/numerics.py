"""Three ways to evaluate the same op definitions (dtcref.ops):

- float64 numpy arrays: the reference values;
- float32 numpy arrays: an independent f32 implementation, whose distance
  from float64 measures how much f32 rounding moves a result (the e2e
  tolerances scale with it);
- `Bounded`: float64 values plus a first-order bound of the error an f32
  implementation of the same formula can make, from the standard model of
  floating-point arithmetic, fl(a op b) = (a op b)(1 + d), |d| <= u = 2^-24
  (Higham, "Accuracy and Stability of Numerical Algorithms", ch. 2-3):

      a +- b    E = Ea + Eb + u|a +- b|
      a * b     E = |b| Ea + |a| Eb + u|ab|
      a / b     E = Ea/|b| + |a| Eb/b^2 + u|a/b|
      f(a)      E = |f'(a)| Ea + k_f u |f(a)|     (k_f: the function's accuracy)
      sum of n  E = sum Ea + gamma(n-1) sum |a|    gamma(m) = m u / (1 - m u)
      A @ B     E = |A| @ EB + EA @ |B| + gamma(K) |A| @ |B|

  The kernel checks (check_kernels.py) allow |dtc - reference| <= SAFETY * E:
  a tolerance derived from f32 rounding and the reduction lengths of each
  kernel, not a round number.

The op definitions call only the functions below and Python operators, so
one definition serves all three modes.
"""
import numpy as np

U = 2.0 ** -24  # unit roundoff of f32 (round to nearest)

# Accuracy of the elementwise functions, in units of u. Correctly rounded
# operations are 1; libm's expf/logf are within 1 ulp (2u); the CPU
# kernels' tanh is a rational approximation within 4e-7 relative (about 7u).
K_EXP, K_LOG, K_SQRT, K_TANH = 2.0, 2.0, 1.0, 8.0


def gamma(m):
    m = np.asarray(m, dtype=np.float64)
    return m * U / (1.0 - m * U)


class Bounded:
    """float64 values `v` and a bound `e` of the absolute error an f32
    evaluation of the same formula may have."""

    __array_priority__ = 1000

    def __init__(self, v, e=None):
        self.v = np.asarray(v, dtype=np.float64)
        self.e = np.zeros_like(self.v) if e is None else np.broadcast_to(
            np.asarray(e, dtype=np.float64), self.v.shape).copy()

    shape = property(lambda self: self.v.shape)
    ndim = property(lambda self: self.v.ndim)
    size = property(lambda self: self.v.size)

    def __repr__(self):
        return f"Bounded(v={self.v!r}, e={self.e!r})"

    @staticmethod
    def lift(x):
        return x if isinstance(x, Bounded) else Bounded(x, 0.0)

    def __add__(self, o):
        o = Bounded.lift(o)
        v = self.v + o.v
        return Bounded(v, self.e + o.e + U * np.abs(v))

    __radd__ = __add__

    def __sub__(self, o):
        o = Bounded.lift(o)
        v = self.v - o.v
        return Bounded(v, self.e + o.e + U * np.abs(v))

    def __rsub__(self, o):
        return Bounded.lift(o) - self

    def __mul__(self, o):
        o = Bounded.lift(o)
        v = self.v * o.v
        return Bounded(v, np.abs(o.v) * self.e + np.abs(self.v) * o.e + U * np.abs(v))

    __rmul__ = __mul__

    def __truediv__(self, o):
        o = Bounded.lift(o)
        v = self.v / o.v
        return Bounded(v, self.e / np.abs(o.v) + np.abs(self.v) * o.e / (o.v * o.v) + U * np.abs(v))

    def __rtruediv__(self, o):
        return Bounded.lift(o) / self

    def __neg__(self):
        return Bounded(-self.v, self.e)

    def __getitem__(self, idx):
        return Bounded(self.v[idx], self.e[idx])


# ---- elementwise functions --------------------------------------------------

def _unary(x, f, df, k):
    if isinstance(x, Bounded):
        y = f(x.v)
        return Bounded(y, np.abs(df(x.v, y)) * x.e + k * U * np.abs(y))
    return f(x)


def exp(x):
    return _unary(x, np.exp, lambda a, y: y, K_EXP)


def log(x):
    return _unary(x, np.log, lambda a, y: 1.0 / a, K_LOG)


def tanh(x):
    return _unary(x, np.tanh, lambda a, y: 1.0 - y * y, K_TANH)


def sqrt(x):
    return _unary(x, np.sqrt, lambda a, y: 0.5 / y, K_SQRT)


def val(x):
    """The float64 values (for data-dependent decisions such as masks)."""
    if isinstance(x, Bounded):
        return x.v
    return np.asarray(x, dtype=np.float64)


def const(c, like):
    """A constant in `like`'s mode: rounded to f32 in f32 mode; in Bounded
    mode exact when f32 holds it exactly, else carrying its rounding."""
    if isinstance(like, Bounded):
        c = np.asarray(c, dtype=np.float64)
        exact = np.float32(c).astype(np.float64) == c
        return Bounded(c, np.where(exact, 0.0, U * np.abs(c)))
    if np.asarray(like).dtype == np.float32:
        return np.asarray(c, dtype=np.float32)
    return np.asarray(c, dtype=np.float64)


def zeros(shape, like):
    if isinstance(like, Bounded):
        return Bounded(np.zeros(shape))
    return np.zeros(shape, dtype=np.asarray(like).dtype)


def astype_like(x, like):
    """Plain data (e.g. a 0/1 mask) as an exact value in `like`'s mode."""
    if isinstance(like, Bounded):
        return Bounded(np.asarray(x, dtype=np.float64))
    return np.asarray(x, dtype=np.asarray(like).dtype)


# ---- selection (no arithmetic, so no new error) -------------------------------

def where(mask, a, b):
    if isinstance(a, Bounded) or isinstance(b, Bounded):
        a, b = Bounded.lift(a), Bounded.lift(b)
        return Bounded(np.where(mask, a.v, b.v), np.where(mask, a.e, b.e))
    return np.where(mask, a, b)


def maximum(a, b):
    """max(a, b) with ties taken from a."""
    return where(val(a) >= val(b), a, b)


def max_stop(x, axis, keepdims=True):
    """The maximum along `axis` as a constant shift (softmax-style
    stabilization: the exact result does not depend on the shift, so its
    error is not propagated)."""
    if isinstance(x, Bounded):
        return Bounded(np.max(x.v, axis=axis, keepdims=keepdims))
    return np.max(x, axis=axis, keepdims=keepdims)


def reshape(x, shape):
    if isinstance(x, Bounded):
        return Bounded(x.v.reshape(shape), x.e.reshape(shape))
    return np.reshape(x, shape)


def transpose(x, perm):
    if isinstance(x, Bounded):
        return Bounded(np.transpose(x.v, perm), np.transpose(x.e, perm))
    return np.transpose(x, perm)


def broadcast_to(x, shape):
    if isinstance(x, Bounded):
        return Bounded(np.broadcast_to(x.v, shape), np.broadcast_to(x.e, shape))
    return np.broadcast_to(x, shape).copy()


def take_rows(table, ids):
    """table[ids, ...] (embedding lookup)."""
    if isinstance(table, Bounded):
        return Bounded(table.v[ids], table.e[ids])
    return table[ids]


def take_last(x, idx):
    """x[..., idx[...]] along the last axis."""
    if isinstance(x, Bounded):
        return Bounded(np.take_along_axis(x.v, idx[..., None], -1)[..., 0],
                       np.take_along_axis(x.e, idx[..., None], -1)[..., 0])
    return np.take_along_axis(x, idx[..., None], -1)[..., 0]


def concat(xs, axis):
    if any(isinstance(x, Bounded) for x in xs):
        xs = [Bounded.lift(x) for x in xs]
        return Bounded(np.concatenate([x.v for x in xs], axis), np.concatenate([x.e for x in xs], axis))
    return np.concatenate(xs, axis)


# ---- reductions and products ------------------------------------------------------

def sum(x, axis=None, keepdims=False):
    if isinstance(x, Bounded):
        axes = tuple(range(x.ndim)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
        n = 1
        for a in axes:
            n *= x.shape[a]
        v = np.sum(x.v, axis=axes, keepdims=keepdims)
        e = np.sum(x.e, axis=axes, keepdims=keepdims) + gamma(max(n - 1, 0)) * np.sum(
            np.abs(x.v), axis=axes, keepdims=keepdims)
        return Bounded(v, e)
    return np.sum(x, axis=axis, keepdims=keepdims)


def matmul(a, b):
    if isinstance(a, Bounded) or isinstance(b, Bounded):
        a, b = Bounded.lift(a), Bounded.lift(b)
        K = a.shape[-1]
        av, bv = np.abs(a.v), np.abs(b.v)
        return Bounded(np.matmul(a.v, b.v),
                       np.matmul(av, b.e) + np.matmul(a.e, bv) + gamma(K) * np.matmul(av, bv))
    return np.matmul(a, b)


def scatter_add_rows(ids, rows, count):
    """zeros([count, D]), then out[ids[p]] += rows[p] for every position p."""
    flat_ids = np.asarray(ids).reshape(-1)
    if isinstance(rows, Bounded):
        D = rows.shape[-1]
        rv, re = rows.v.reshape(-1, D), rows.e.reshape(-1, D)
        v, e, a = np.zeros((count, D)), np.zeros((count, D)), np.zeros((count, D))
        np.add.at(v, flat_ids, rv)
        np.add.at(e, flat_ids, re)
        np.add.at(a, flat_ids, np.abs(rv))
        hits = np.bincount(flat_ids, minlength=count)[:, None]
        return Bounded(v, e + gamma(np.maximum(hits - 1, 0)) * a)
    D = rows.shape[-1]
    out = np.zeros((count, D), dtype=rows.dtype)
    np.add.at(out, flat_ids, rows.reshape(-1, D))
    return out


def is_bounded(x):
    return isinstance(x, Bounded)
