"""Unit tests of the float64 reference itself: cases computed by hand,
published test vectors, its VJPs against float64 central differences, its
error bounds against real f32 evaluations, and NaN-safe comparisons.

    python3 -m unittest discover -s test/reference/tests
"""
import math
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

import gradcases  # noqa: E402
from dtcref import compare, data, interp, mlir, ops, rng, train  # noqa: E402
from dtcref import numerics as N  # noqa: E402


class Random(unittest.TestCase):
    def test_philox_known_answers(self):
        # Random123's kat_vectors for philox4x32_10.
        cases = [((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
                 ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
                 ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
                  (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
        for ctr, key, want in cases:
            got = tuple(int(x) for x in rng.philox4x32_10(*ctr, *key))
            self.assertEqual(got, want)

    def test_hashes(self):
        self.assertEqual(rng.fnv1a64(""), 0xcbf29ce484222325)
        self.assertEqual(rng.fnv1a64("a"), 0xaf63dc4c8601ec8c)
        # splitmix64's first outputs from state 0 (Vigna's reference code).
        self.assertEqual(rng.splitmix64(0), 0xe220a8397b1dcdaf)

    def test_init_specs(self):
        self.assertTrue(np.all(rng.init_values("zeros", 1, "w", (3,)) == 0))
        self.assertTrue(np.all(rng.init_values("ones", 1, "w", (3,)) == 1))
        u = rng.init_values("uniform(2,3)", 1, "w", (1000,))
        self.assertTrue(np.all((u >= 2) & (u <= 3)))
        n = rng.init_values("normal(0.5)", 1, "w", (20000,))
        self.assertAlmostEqual(float(np.std(n)), 0.5, delta=0.02)
        self.assertAlmostEqual(float(np.mean(n)), 0.0, delta=0.02)
        # Values depend on the name and the global index only.
        a = rng.init_values("normal(1)", 7, "x", (4, 5))
        b = rng.init_values("normal(1)", 7, "x", (20,))
        self.assertTrue(np.array_equal(a.reshape(-1), b))
        self.assertFalse(np.array_equal(a, rng.init_values("normal(1)", 7, "y", (4, 5))))
        ids = rng.synthetic_input(3, "ids", (1000,), "i32", 0, 7)
        self.assertEqual(set(np.unique(ids)), set(range(7)))


class HandComputed(unittest.TestCase):
    def test_matmul_and_flags(self):
        a = np.array([[1.0, 2.0], [3.0, 4.0]])
        b = np.array([[5.0, 6.0], [7.0, 8.0]])
        self.assertTrue(np.array_equal(ops.matmul(a, b), [[19, 22], [43, 50]]))
        self.assertTrue(np.array_equal(ops.matmul(a.T, b, transpose_a=True), [[19, 22], [43, 50]]))
        self.assertTrue(np.array_equal(ops.matmul(a, b.T, transpose_b=True), [[19, 22], [43, 50]]))
        self.assertTrue(np.array_equal(ops.matmul(a.T, b.T, True, True), [[19, 22], [43, 50]]))
        batched = ops.matmul(np.stack([a, 2 * a]), b)
        self.assertTrue(np.array_equal(batched[1], [[38, 44], [86, 100]]))

    def test_softmax_norms(self):
        self.assertTrue(np.allclose(ops.softmax(np.array([0.0, math.log(2)]), 0), [1 / 3, 2 / 3], 0, 1e-15))
        ln = ops.layer_norm(np.array([1.0, 2.0, 3.0]), np.ones(3), np.zeros(3), 0.0)
        self.assertTrue(np.allclose(ln, [-math.sqrt(1.5), 0, math.sqrt(1.5)], 0, 1e-15))
        ln = ops.layer_norm(np.array([1.0, 3.0]), np.array([2.0, 2.0]), np.array([1.0, 0.0]), 3.0)
        self.assertTrue(np.allclose(ln, [-1 / 2 * 2 + 1, 1 / 2 * 2], 0, 1e-15))  # var 1 + eps 3
        rn = ops.rms_norm(np.array([3.0, 4.0]), np.ones(2), 0.0)
        self.assertTrue(np.allclose(rn, np.array([3.0, 4.0]) / math.sqrt(12.5), 0, 1e-15))

    def test_activations(self):
        self.assertAlmostEqual(float(ops.gelu(np.array(1.0))), 0.8411919906082768, places=15)
        self.assertAlmostEqual(float(ops.silu(np.array(1.0))), 0.7310585786300049, places=15)
        self.assertEqual(float(ops.relu(np.array(-0.5))), 0.0)

    def test_attention_causal(self):
        q = np.zeros((1, 1, 2, 1))
        v = np.array([1.0, 3.0]).reshape(1, 1, 2, 1)
        self.assertTrue(np.array_equal(ops.attention(q, q, v, True).reshape(-1), [1.0, 2.0]))
        self.assertTrue(np.array_equal(ops.attention(q, q, v, False).reshape(-1), [2.0, 2.0]))
        # scores scale by 1/sqrt(Dh): q.k = 2 with Dh = 4 -> 1.
        q = np.full((1, 1, 1, 4), 1.0 / math.sqrt(2))
        k = np.stack([np.full(4, 1.0 / math.sqrt(2)), np.zeros(4)]).reshape(1, 1, 2, 4)
        v = np.stack([np.ones(4), np.zeros(4)]).reshape(1, 1, 2, 4)
        want = math.e / (math.e + 1)
        self.assertTrue(np.allclose(ops.attention(q, k, v, False), want, 0, 1e-15))

    def test_cross_entropy(self):
        self.assertAlmostEqual(float(ops.cross_entropy(np.zeros((1, 2)), np.array([0]))), math.log(2), places=15)
        z = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
        want = (-(1 - math.log(math.exp(1) + math.exp(2) + math.exp(3))) + math.log(3)) / 2
        self.assertAlmostEqual(float(ops.cross_entropy(z, np.array([0, 1]))), want, places=14)
        with self.assertRaises(ValueError):
            ops.cross_entropy(z, np.array([0, 3]))

    def test_reductions_and_cast(self):
        x = np.arange(6.0).reshape(2, 3)
        self.assertTrue(np.array_equal(ops.reduce_sum(x, [0], False), [3, 5, 7]))
        self.assertTrue(np.array_equal(ops.reduce_mean(x, [1], True), [[1], [4]]))
        self.assertTrue(np.array_equal(ops.reduce_sum(x, [], False), x))
        c = ops.cast_value(np.array([2.7, -2.7, np.nan, 3e9, -3e9]), "i32")
        self.assertEqual(c.tolist(), [2, -2, 0, 2**31 - 1, -2**31])

    def test_kinks(self):
        model = train.Model.from_text(gradcases.model_text(
            [gradcases.W("a", "tensor<3xf32>"), gradcases.W("b", "tensor<3xf32>")],
            '  %m = "dtc.max"(%a, %b) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>\n'
            '  %out = "dtc.relu"(%m) : (tensor<3xf32>) -> tensor<3xf32>', "tensor<3xf32>"))
        params = {"a": np.array([1.0, 0.0, -1.0]), "b": np.array([1.0, 0.0, 2.0])}
        _, g = model.loss_and_grads(params, {"r": np.ones(3)})
        # max ties: all to lhs; relu'(0) = 0.
        self.assertEqual(g["a"].tolist(), [1.0, 0.0, 0.0])
        self.assertEqual(g["b"].tolist(), [0.0, 0.0, 1.0])

    def test_optimizers(self):
        p, g = np.array([1.0]), np.array([0.1])
        self.assertAlmostEqual(float(ops.sgd_update(p, g, 0.5, 0.2)[0]), 1 - 0.5 * (0.1 + 0.2), places=15)
        new_p, m, v = ops.adam_update(p, g, np.zeros(1), np.zeros(1), 0, 1e-3, 0.9, 0.999, 1e-8, 0.0, False)
        self.assertAlmostEqual(float(m[0]), 0.01, places=15)
        self.assertAlmostEqual(float(v[0]), 1e-5, places=18)
        self.assertAlmostEqual(float(new_p[0]), 1 - 1e-3 * 0.1 / (0.1 + 1e-8), places=15)
        # Second step: bias corrections with t = 2.
        p2, m2, v2 = ops.adam_update(new_p, g, m, v, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, False)
        mhat, vhat = (0.9 * 0.01 + 0.01) / (1 - 0.81), (0.999 * 1e-5 + 1e-5) / (1 - 0.999**2)
        self.assertAlmostEqual(float(p2[0]), float(new_p[0]) - 1e-3 * mhat / (math.sqrt(vhat) + 1e-8), places=15)
        # AdamW decays the parameter by lr * wd before the step; Adam adds wd p to g.
        pw, _, _ = ops.adam_update(p, g, np.zeros(1), np.zeros(1), 0, 1e-2, 0.9, 0.999, 1e-8, 0.5, True)
        self.assertAlmostEqual(float(pw[0]), 1 * (1 - 1e-2 * 0.5) - 1e-2 * 0.1 / (0.1 + 1e-8), places=14)
        pa, ma, _ = ops.adam_update(p, g, np.zeros(1), np.zeros(1), 0, 1e-2, 0.9, 0.999, 1e-8, 0.5, False)
        self.assertAlmostEqual(float(ma[0]), 0.1 * (0.1 + 0.5), places=15)

    def test_clipping(self):
        grads = {"a": np.array([3.0]), "b": np.array([[4.0]])}
        clipped = train.clip_by_global_norm(grads, 1.0)
        self.assertAlmostEqual(float(clipped["a"][0]), 3 / (5 + 1e-6), places=15)
        self.assertAlmostEqual(float(clipped["b"][0, 0]), 4 / (5 + 1e-6), places=15)
        same = train.clip_by_global_norm(grads, 10.0)
        self.assertEqual(float(same["a"][0]), 3.0)

    def test_token_windows(self):
        tokens = np.arange(20)
        ids, labels = data.batch(tokens, 1, 2, 4)  # starts ((1*2 + r)*4) mod 15 = 8, 12
        self.assertEqual(ids.tolist(), [[8, 9, 10, 11], [12, 13, 14, 15]])
        self.assertEqual(labels.tolist(), [[9, 10, 11, 12], [13, 14, 15, 16]])
        ids, _ = data.batch(tokens, 2, 2, 4)  # 16 mod 15 = 1, 20 mod 15 = 5
        self.assertEqual(ids[:, 0].tolist(), [1, 5])


class Parser(unittest.TestCase):
    def test_generic_module(self):
        text = '''"builtin.module"() ({
  "func.func"() <{arg_attrs = [{dtc.name = "w", dtc.role = "param"}], function_type = (tensor<2xf32>) -> tensor<f32>, sym_name = "train_step"}> ({
  ^bb0(%arg0: tensor<2xf32>):
    %0 = "arith.constant"() <{value = dense<"0x0000803F00000040"> : tensor<2xf32>}> : () -> tensor<2xf32>
    %1:2 = "dtc.max_grad"(%arg0, %0, %0) : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
    %2 = "dtc.reduce_sum"(%1#1) <{axes = array<i64: 0>, keep_dims = false}> : (tensor<2xf32>) -> tensor<f32>
    "func.return"(%2) : (tensor<f32>) -> ()
  }) : () -> ()
}) : () -> ()'''
        f = mlir.parse_module(text).func("train_step")
        self.assertEqual(f.arg_name(0), "w")
        self.assertEqual(f.ops[1].results, ["%1#0", "%1#1"])
        self.assertEqual(f.ops[0].attr("value").array.tolist(), [1.0, 2.0])
        (out,) = interp.evaluate(f, [np.array([0.5, 2.5])])
        self.assertEqual(float(out), 1.0)  # rhs wins only where rhs > lhs: element 0

    def test_pretty_func_and_constants(self):
        text = '''func.func @main(%x: tensor<2xf32> {dtc.param, dtc.init = "ones"}) -> tensor<f32> {
  %c = arith.constant dense<[1.0e-1, 0x7F800000]> : tensor<2xf32>
  %s = arith.constant dense<3> : tensor<2xi64>
  %l = "dtc.reduce_sum"(%x) {axes = array<i64: 0>} : (tensor<2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}'''
        f = mlir.parse_module(text).func("main")
        self.assertIn("dtc.param", f.arg_attrs[0])
        c = f.ops[0].attr("value").array
        self.assertEqual(c[0], float(np.float32(0.1)))  # f32 constants are f32 numbers
        self.assertEqual(c[1], math.inf)
        self.assertEqual(f.ops[1].attr("value").array.tolist(), [3, 3])


class Gradients(unittest.TestCase):
    """The reference's VJPs against float64 central differences."""

    def test_every_rule_against_central_differences(self):
        gen = np.random.default_rng(0)
        for name in gradcases.CASES:
            with self.subTest(case=name):
                model = train.Model.from_text(gradcases.case_text(name))
                params = {k: v.astype(np.float64) for k, v in model.init_params(4).items()}
                inputs = model.inputs_for_step(4, 0)
                loss, grads = model.loss_and_grads(params, inputs)
                for pname, x0 in params.items():
                    d = gen.standard_normal(x0.shape)

                    def f(t):
                        moved = dict(params)
                        moved[pname] = x0 + t * d
                        return model.loss(moved, inputs)
                    h = 1e-4
                    d1 = (f(h) - f(-h)) / (2 * h)
                    d2 = (f(h / 2) - f(-h / 2)) / h
                    fd = (4 * d2 - d1) / 3
                    want = float(np.sum(grads[pname] * d))
                    tol = 1e-7 * float(np.linalg.norm(grads[pname]) * np.linalg.norm(d)) + 1e-10 * max(1, abs(loss))
                    self.assertLessEqual(abs(fd - want), tol, f"{name}: d/d{pname}: {want} vs {fd}")

    def test_float32_mode_stays_float32(self):
        model = train.Model.from_text(gradcases.case_text("composite_block"))
        params = model.init_params(1)
        inputs = model.inputs_for_step(1, 0)
        _, grads = model.loss_and_grads(params, inputs, "f32")
        for g in grads.values():
            self.assertEqual(g.dtype, np.float32)


class Bounds(unittest.TestCase):
    """The f32 error bounds hold for a real f32 evaluation (numpy float32)."""

    def check(self, fn, *arrays):
        b = fn(*[N.Bounded(a.astype(np.float64)) for a in arrays])
        f32 = fn(*[a.astype(np.float32) for a in arrays])
        outs = b if isinstance(b, tuple) else (b,)
        f32s = f32 if isinstance(f32, tuple) else (f32,)
        for bo, fo in zip(outs, f32s):
            err = np.abs(np.asarray(fo, dtype=np.float64) - bo.v)
            self.assertTrue(np.all(err <= bo.e + 1e-37), f"{np.max(err / (bo.e + 1e-37))}x the bound")
            self.assertTrue(np.all(bo.e < 1e-3 * (np.abs(bo.v) + 1)))  # and is not vacuous

    def test_bounds(self):
        gen = np.random.default_rng(3)
        x = gen.uniform(-3, 3, (4, 6, 40)).astype(np.float32)
        g = gen.uniform(0.5, 1.5, 40).astype(np.float32)
        self.check(lambda a, b: ops.matmul(a, b), x, gen.uniform(-1, 1, (40, 7)).astype(np.float32))
        self.check(lambda a: ops.softmax(a, 2), x)
        self.check(lambda a, w: ops.layer_norm(a, w, w, 1e-5), x, g)
        self.check(lambda a, w: ops.rms_norm(a, w, 1e-5), x, g)
        self.check(lambda a, w, dy: ops.layer_norm_vjp(a, w, dy, 1e-5), x, g, x)
        q = gen.uniform(-2, 2, (2, 2, 9, 8)).astype(np.float32)
        self.check(lambda a, b, c: ops.attention(a, b, c, True), q, q[::-1], q[:, ::-1])
        self.check(lambda a, b, c, d: ops.attention_vjp(a, b, c, d, True), q, q[::-1], q[:, ::-1], q)
        self.check(lambda a: ops.reduce_mean(a, [1, 2], False), x)


class MixedPrecision(unittest.TestCase):
    def test_bf16_rounds_to_nearest_even(self):
        x = np.array([1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -8 + 2.0 ** -20,
                      -2.5e-3, 65504.0], dtype=np.float32)
        got = interp.round_low(x, "bf16")
        # ties go to the even significand; above the tie rounds up
        self.assertEqual(list(got[:4]), [1.0, 1.0, 1.0 + 2 * 2.0 ** -7, 1.0 + 2.0 ** -7])
        self.assertTrue(np.all(np.abs(got - x) <= 2.0 ** -8 * np.abs(x)))
        self.assertEqual(got.dtype, np.float32)

    def test_f16_scaled_gradients_keep_small_values(self):
        tiny = np.array([3e-7], dtype=np.float32)
        unscaled = interp.round_low(tiny, "f16")
        scaled = interp.round_low(tiny, "f16", scale=1024.0)
        # f16's subnormals are 2^-24 apart; scaled, 3e-7 is a normal number
        self.assertGreater(abs(unscaled[0] - 3e-7), abs(scaled[0] - 3e-7))
        self.assertLess(abs(scaled[0] - 3e-7), 3e-7 * 2.0 ** -10)

    def test_other_modes_unchanged(self):
        x = np.array([1.0 + 2.0 ** -20], dtype=np.float32)
        self.assertEqual(interp.round_low(x, "f32")[0], x[0])


class Comparisons(unittest.TestCase):
    def test_nan_fails_with_location(self):
        ref = np.ones((2, 3))
        bad = ref.copy()
        bad[1, 2] = np.nan
        rep = compare.Report()
        compare.compare_tensor(rep, "w", bad, ref, ref)
        self.assertFalse(rep.ok)
        self.assertIn("[1, 2]", rep.problems[0])
        rep = compare.Report()
        compare.compare_losses(rep, [1.0, float("nan")], [1.0, 1.0], [1.0, 1.0])
        self.assertFalse(rep.ok)
        self.assertIn("step 1", rep.problems[0])
        rep = compare.Report()
        compare.compare_close(rep, "g", np.array([np.inf]), np.array([1.0]), 1e-6)
        self.assertFalse(rep.ok)

    def test_tolerance_follows_f32_noise(self):
        ref64 = np.linspace(1, 2, 100)
        ref32 = ref64.astype(np.float32).astype(np.float64)
        rep = compare.Report()
        compare.compare_tensor(rep, "w", ref64 + 0.5 * (ref32 - ref64), ref64, ref32)
        self.assertTrue(rep.ok, rep.problems)
        rep = compare.Report()
        compare.compare_tensor(rep, "w", ref64 * (1 + 1e-5), ref64, ref32)
        self.assertFalse(rep.ok)


if __name__ == "__main__":
    unittest.main()
