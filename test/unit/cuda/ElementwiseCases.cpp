//===- ElementwiseCases.cpp - CUDA kernel cases (see KernelCases.h)
//---------------===//
//
// kernels/cuda/Elementwise.cu: the binary ops with broadcasting (F and I,
// wrap-around, truncating division, division by zero), the unary ops, the
// activation gradients, max_grad, copy, reshape (in place too), broadcast
// and cast between every pair of dtypes (truncation, saturation, overflow
// to infinity, subnormals).
//
// The operand generator draws finite values in [lo, hi] only, so NaN inputs
// are not covered here; infinities come from f16 inputs drawn beyond 65504
// (they round to +-inf), which also reach the i64 saturation of cast. The
// generator converts lo and hi to int64_t for every dtype, so no bound here
// leaves the i64 range (floats beyond 9.2e18 cannot be drawn).
//
//===----------------------------------------------------------------------===//
#include "KernelCases.h"

namespace dtc::test {
namespace {
using rt::DType;
using rt::Shape;

constexpr DType F32 = DType::F32, BF16 = DType::BF16, F16 = DType::F16,
                I32 = DType::I32, I64 = DType::I64;

constexpr double kI32Min = -2147483648.0, kI32Max = 2147483647.0;
// The widest i64 range the generator can take (its bounds go through int64_t).
constexpr double kI64Lo = -9.2e18, kI64Hi = 9.2e18;
constexpr double kI64Min = -9223372036854775808.0; // -2^63, exact

OperandSpec op(DType t, Shape s, double lo = -1.0, double hi = 1.0) {
  return OperandSpec{t, std::move(s), lo, hi};
}

/// numpy broadcast of two shapes (the cases only use valid pairs).
Shape bcast(const Shape &a, const Shape &b) {
  const size_t r = std::max(a.size(), b.size());
  Shape s(r, 1);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    s[r - 1 - i] = da == 1 ? db : da;
  }
  return s;
}

KernelCase binary(std::string label, std::string kernel, DType t, Shape l,
                  Shape r, double llo = -1.0, double lhi = 1.0,
                  double rlo = -1.0, double rhi = 1.0) {
  const Shape o = bcast(l, r);
  return KernelCase{
      std::move(label),
      std::move(kernel),
      {op(t, std::move(l), llo, lhi), op(t, std::move(r), rlo, rhi)},
      {op(t, o)}};
}

KernelCase unary(std::string label, std::string kernel, DType t, Shape s,
                 double lo = -1.0, double hi = 1.0) {
  return KernelCase{
      std::move(label), std::move(kernel), {op(t, s, lo, hi)}, {op(t, s)}};
}

/// x in [lo, hi], dy in [-1, 1].
KernelCase actGrad(std::string label, std::string kernel, DType t, Shape s,
                   double lo = -1.0, double hi = 1.0) {
  return KernelCase{std::move(label),
                    std::move(kernel),
                    {op(t, s, lo, hi), op(t, s)},
                    {op(t, s)}};
}

/// lhs, rhs in [lo, hi] (a narrow range of a low-precision dtype makes ties).
KernelCase maxGrad(std::string label, DType t, Shape l, Shape r,
                   double lo = -1.0, double hi = 1.0) {
  const Shape o = bcast(l, r);
  return KernelCase{
      std::move(label),
      "max_grad",
      {op(t, std::move(l), lo, hi), op(t, std::move(r), lo, hi), op(t, o)},
      {op(t, o), op(t, o)}};
}

KernelCase move(std::string label, std::string kernel, DType t, Shape in,
                Shape out, double lo = -1.0, double hi = 1.0) {
  return KernelCase{std::move(label),
                    std::move(kernel),
                    {op(t, std::move(in), lo, hi)},
                    {op(t, std::move(out))}};
}

KernelCase reshapeInPlace(std::string label, DType t, Shape in, Shape out,
                          double lo = -1.0, double hi = 1.0) {
  return KernelCase{std::move(label),
                    "reshape",
                    {op(t, std::move(in), lo, hi)},
                    {op(t, std::move(out))},
                    nlohmann::json::object(),
                    -1,
                    -1,
                    {{0, 0}}};
}

/// A case with its own tolerances (KernelCase::rtol, atol; negative: the
/// dtype's default). Used where the CPU reference itself is only good to
/// about 1e-6 absolute: VecMath.h's rational tanhF is within 4e-7 of tanh,
/// and whether its Horner steps are contracted to fused multiply-adds
/// (which CPU clone runs) moves it by a few more ulp near +-1, and
/// tanhF(+-7.905), its clamp, between +-1 and +-(1 - 2.4e-7). gelu
/// multiplies that by 0.5 |x| where 1 + tanh cancels (x < -3.5: two CPU
/// builds differ by up to ~1.5e-6 at |x| <= 12), gelu_grad by about
/// |x|^3 / 40 (a few 1e-5 at |x| = 8), whatever the kernel under test does.
KernelCase withTol(KernelCase c, double rtol, double atol) {
  c.rtol = rtol;
  c.atol = atol;
  return c;
}

KernelCase divByZero(std::string label, DType t, Shape l, Shape r, double rlo,
                     double rhi) {
  KernelCase c = binary(std::move(label), "div", t, std::move(l), std::move(r),
                        -100, 100, rlo, rhi);
  c.expectError = "div: integer division by zero";
  return c;
}

const char *dtypeLabel(DType t) { return rt::dtypeName(t); }

KernelCase cast(DType from, DType to, Shape s, double lo, double hi,
                std::string what = "") {
  std::string label =
      std::string("cast ") + dtypeLabel(from) + " to " + dtypeLabel(to);
  if (!what.empty())
    label += " " + what;
  return KernelCase{
      std::move(label), "cast", {op(from, s, lo, hi)}, {op(to, s)}};
}

/// Every (from, to) pair with a range that exercises the target's limits:
/// saturation of ints, overflow of f16 (and bf16) to infinity, rounding of
/// large ints to floats.
std::vector<KernelCase> castPairs() {
  struct Range {
    double lo, hi;
  };
  auto range = [](DType from, DType to) -> Range {
    switch (from) {
    case DType::F32:
      if (to == DType::I32)
        return {-3e9, 3e9};
      if (to == DType::I64)
        return {-1e15, 1e15};
      if (to == DType::F16)
        return {-1e5, 1e5};
      if (to == DType::BF16)
        return {kI64Lo, kI64Hi};
      return {-1e3, 1e3};
    case DType::BF16:
      if (to == DType::I32)
        return {-3e9, 3e9};
      if (to == DType::I64)
        return {-1e15, 1e15};
      if (to == DType::F16)
        return {-1e5, 1e5};
      if (to == DType::F32)
        return {kI64Lo, kI64Hi};
      return {-10, 10};
    case DType::F16: // beyond 65504 the drawn values are +-inf
      return {-1e5, 1e5};
    case DType::I32:
      return {kI32Min, kI32Max};
    case DType::I64:
      if (to == DType::I32)
        return {-1e10, 1e10};
      if (to == DType::F16)
        return {-1e5, 1e5};
      return {kI64Lo, kI64Hi};
    }
    return {-1, 1};
  };
  std::vector<KernelCase> v;
  const DType all[] = {F32, BF16, F16, I32, I64};
  for (DType from : all)
    for (DType to : all) {
      const Range r = range(from, to);
      v.push_back(cast(from, to, {37, 29}, r.lo, r.hi));
    }
  return v;
}

std::vector<KernelCase> makeCases() {
  std::vector<KernelCase> v = {
      // ---- binary, f32 ----
      binary("add f32 same shape", "add", F32, {7, 33}, {7, 33}),
      binary("add f32 flat odd length", "add", F32, {3001}, {3001}),
      binary("add f32 bias 4x256x1024 + 1024", "add", F32, {4, 256, 1024},
             {1024}),
      binary("add f32 leading ones", "add", F32, {1, 4, 3}, {4, 3}),
      binary("add f32 scalars", "add", F32, {}, {}),
      binary("add f32 ones", "add", F32, {1}, {1, 1}),
      binary("add f32 column 1100x3 + 1100x1", "add", F32, {1100, 3},
             {1100, 1}),
      binary("add f32 empty", "add", F32, {0, 5}, {0, 5}),
      binary("sub f32 3x1x4 - 2x1", "sub", F32, {3, 1, 4}, {2, 1}),
      binary("sub f32 rank 5", "sub", F32, {2, 1, 3, 1, 5}, {3, 4, 1}),
      binary("mul f32 scalar * 4x3", "mul", F32, {}, {4, 3}),
      binary("mul f32 4x3 * scalar", "mul", F32, {4, 3}, {}),
      binary("mul f32 outer 37x1 * 1x41", "mul", F32, {37, 1}, {1, 41}),
      binary("div f32 5x6 / 6", "div", F32, {5, 6}, {6}, -1, 1, 0.5, 2),
      binary("div f32 6 / 5x6 negative", "div", F32, {6}, {5, 6}, -1, 1, -2,
             -0.5),
      binary("div f32 same 1031", "div", F32, {1031}, {1031}, -10, 10, 0.25, 4),
      binary("max f32 rank 4", "max", F32, {2, 3, 4, 5}, {3, 1, 5}),
      binary("max f32 same 1030", "max", F32, {1030}, {1030}),
      binary("max f32 with scalar", "max", F32, {17, 9}, {}),
      // ---- binary, bf16 / f16 ----
      binary("add bf16 33x65 + 65", "add", BF16, {33, 65}, {65}),
      binary("sub bf16 scalar - 300", "sub", BF16, {}, {300}),
      binary("mul bf16 same 129x7", "mul", BF16, {129, 7}, {129, 7}),
      binary("div bf16 8x1x16 / 5x1", "div", BF16, {8, 1, 16}, {5, 1}, -4, 4, 1,
             3),
      binary("max bf16 ties", "max", BF16, {64, 50}, {64, 50}, 1, 1.05, 1,
             1.05),
      binary("add f16 same 1029", "add", F16, {1029}, {1029}),
      binary("sub f16 5x7x9 - 7x1", "sub", F16, {5, 7, 9}, {7, 1}),
      binary("mul f16 2x2 * scalar", "mul", F16, {2, 2}, {}, -100, 100, -100,
             100),
      binary("div f16 same 1000", "div", F16, {1000}, {1000}, -10, 10, 0.5, 2),
      binary("max f16 ties", "max", F16, {3, 40}, {40}, 2, 2.02, 2, 2.02),
      // ---- binary, i32 / i64 ----
      binary("add i32 wraps", "add", I32, {1000}, {1000}, -2.1e9, 2.1e9, -2.1e9,
             2.1e9),
      binary("sub i32 wraps broadcast", "sub", I32, {10, 100}, {100}, -2.1e9,
             2.1e9, -2.1e9, 2.1e9),
      binary("mul i32 wraps", "mul", I32, {513}, {513}, -2.1e9, 2.1e9, -2.1e9,
             2.1e9),
      binary("mul i32 small", "mul", I32, {3, 1, 4}, {2, 1}, -1000, 1000, -1000,
             1000),
      binary("max i32 5x6 6", "max", I32, {5, 6}, {6}, -1e9, 1e9, -1e9, 1e9),
      binary("max i32 ties", "max", I32, {300}, {300}, -3, 3, -3, 3),
      binary("add i64 wraps", "add", I64, {257}, {257}, kI64Lo, kI64Hi, kI64Lo,
             kI64Hi),
      binary("sub i64 3x1x4 - 2x1", "sub", I64, {3, 1, 4}, {2, 1}, -1e12, 1e12,
             -1e12, 1e12),
      binary("mul i64 wraps broadcast", "mul", I64, {4, 33}, {33}, kI64Lo,
             kI64Hi, kI64Lo, kI64Hi),
      binary("max i64 scalar 9", "max", I64, {}, {9}, kI64Lo, kI64Hi, kI64Lo,
             kI64Hi),
      binary("div i32 negative divisor", "div", I32, {37, 5}, {5}, -1000, 1000,
             -9, -1),
      binary("div i32 positive divisor", "div", I32, {6, 5}, {5}, -100, 100, 1,
             9),
      binary("div i32 mixed signs same", "div", I32, {777}, {777}, kI32Min,
             kI32Max, 1, 1000),
      binary("div i32 INT_MIN by -1", "div", I32, {64}, {64}, kI32Min,
             kI32Min + 2, -1, -1),
      binary("div i64 negative divisor", "div", I64, {300}, {300}, kI64Lo,
             kI64Hi, -7, -1),
      binary("div i64 positive divisor broadcast", "div", I64, {3, 1, 4},
             {2, 1}, -1e6, 1e6, 1, 1000),
      binary("div i64 INT64_MIN by -1", "div", I64, {16}, {}, kI64Min, kI64Min,
             -1, -1),
      divByZero("div i32 by zero", I32, {100}, {100}, 0, 0),
      divByZero("div i64 by some zeros", I64, {4, 64}, {64}, 0, 2),
      divByZero("div i32 by zero scalar", I32, {3, 5}, {}, 0, 0),
      // ---- unary ----
      unary("neg f32", "neg", F32, {7, 33}),
      unary("neg bf16", "neg", BF16, {100}, -10, 10),
      unary("neg f16", "neg", F16, {3, 5}, -10, 10),
      unary("neg i32", "neg", I32, {1000}, kI32Min, kI32Max),
      unary("neg i32 INT_MIN", "neg", I32, {8}, kI32Min, kI32Min + 1),
      unary("neg i64", "neg", I64, {65}, kI64Lo, kI64Hi),
      unary("neg i64 INT64_MIN", "neg", I64, {3}, kI64Min, kI64Min),
      unary("exp f32", "exp", F32, {4, 1000}, -20, 20),
      unary("exp f32 wide", "exp", F32, {1500}, -87, 88),
      unary("exp f32 scalar", "exp", F32, {}),
      unary("exp f32 empty", "exp", F32, {0}),
      unary("exp bf16", "exp", BF16, {33, 33}, -10, 10),
      unary("exp f16", "exp", F16, {257}, -8, 8),
      unary("log f32", "log", F32, {1025}, 1e-3, 100),
      unary("log bf16", "log", BF16, {3, 100}, 1e-2, 100),
      unary("log f16", "log", F16, {99}, 1e-2, 100),
      unary("tanh f32", "tanh", F32, {3, 1000}, -10, 10),
      unary("tanh f32 near zero", "tanh", F32, {513}, -1e-3, 1e-3),
      unary("tanh bf16", "tanh", BF16, {77}, -5, 5),
      unary("tanh f16", "tanh", F16, {5, 5}, -5, 5),
      unary("sqrt f32", "sqrt", F32, {2, 1111}, 0, 100),
      unary("sqrt bf16", "sqrt", BF16, {70}, 0, 100),
      unary("sqrt f16", "sqrt", F16, {71}, 0, 100),
      unary("rsqrt f32", "rsqrt", F32, {1, 1031}, 1e-3, 100),
      unary("rsqrt bf16", "rsqrt", BF16, {40}, 1e-2, 100),
      unary("rsqrt f16", "rsqrt", F16, {41}, 1e-2, 100),
      unary("relu f32", "relu", F32, {2, 3, 4, 5}),
      unary("relu bf16", "relu", BF16, {1000}),
      unary("relu f16", "relu", F16, {31}),
      unary("gelu f32", "gelu", F32, {7, 33}),
      withTol(unary("gelu f32 2048x512", "gelu", F32, {2048, 512}, -6, 6), -1,
              3e-6),
      withTol(unary("gelu f32 tails", "gelu", F32, {4097}, -12, 12), -1, 3e-6),
      unary("gelu bf16", "gelu", BF16, {33, 65}, -6, 6),
      unary("gelu f16", "gelu", F16, {1000}, -6, 6),
      unary("silu f32", "silu", F32, {4, 1000}, -20, 20),
      unary("silu f32 small", "silu", F32, {9}),
      unary("silu bf16", "silu", BF16, {500}, -10, 10),
      unary("silu f16", "silu", F16, {3, 67}, -10, 10),
      // ---- activation gradients ----
      actGrad("relu_grad f32", "relu_grad", F32, {7, 33}),
      actGrad("relu_grad bf16", "relu_grad", BF16, {1000}),
      actGrad("relu_grad f16", "relu_grad", F16, {3, 7}),
      actGrad("gelu_grad f32", "gelu_grad", F32, {4099}, -3, 3),
      withTol(actGrad("gelu_grad f32 tails", "gelu_grad", F32, {4099}, -8, 8),
              -1, 5e-5),
      actGrad("gelu_grad f32 2x3x4x5", "gelu_grad", F32, {2, 3, 4, 5}),
      actGrad("gelu_grad bf16", "gelu_grad", BF16, {65, 17}, -6, 6),
      actGrad("gelu_grad f16", "gelu_grad", F16, {1001}, -6, 6),
      actGrad("silu_grad f32", "silu_grad", F32, {4, 1000}, -20, 20),
      actGrad("silu_grad bf16", "silu_grad", BF16, {130}, -10, 10),
      actGrad("silu_grad f16", "silu_grad", F16, {3, 43}, -10, 10),
      maxGrad("max_grad f32 same", F32, {7, 33}, {7, 33}),
      maxGrad("max_grad f32 3x1x4 2x1", F32, {3, 1, 4}, {2, 1}),
      maxGrad("max_grad f32 scalar rhs", F32, {5, 6}, {}),
      maxGrad("max_grad f32 scalar lhs", F32, {}, {5, 6}),
      maxGrad("max_grad f32 5x6 6", F32, {5, 6}, {6}),
      maxGrad("max_grad f32 column", F32, {1100, 1}, {1100, 3}),
      maxGrad("max_grad bf16 ties", BF16, {64, 50}, {50}, 1, 1.05),
      maxGrad("max_grad f16 ties", F16, {2, 3, 40}, {3, 1}, 2, 2.02),
      maxGrad("max_grad bf16 same", BF16, {333}, {333}),
      // ---- copy, reshape, broadcast ----
      move("copy f32", "copy", F32, {7, 33}, {7, 33}),
      move("copy f32 scalar", "copy", F32, {}, {}),
      move("copy bf16", "copy", BF16, {1001}, {1001}),
      move("copy f16", "copy", F16, {3}, {3}),
      move("copy i32", "copy", I32, {5, 5}, {5, 5}, kI32Min, kI32Max),
      move("copy i64", "copy", I64, {17}, {17}, kI64Lo, kI64Hi),
      move("reshape f32", "reshape", F32, {6, 4}, {4, 6}),
      move("reshape bf16", "reshape", BF16, {2, 3, 4}, {24}),
      move("reshape f16 to scalar", "reshape", F16, {1, 1}, {}),
      move("reshape i32", "reshape", I32, {10}, {2, 5}, kI32Min, kI32Max),
      move("reshape i64", "reshape", I64, {3, 5}, {15}, kI64Lo, kI64Hi),
      reshapeInPlace("reshape f32 in place", F32, {6, 4}, {24}),
      reshapeInPlace("reshape i64 in place", I64, {3, 5}, {5, 3}, kI64Lo,
                     kI64Hi),
      reshapeInPlace("reshape f16 in place", F16, {1000}, {10, 100}),
      move("broadcast f32 4 to 3x4", "broadcast", F32, {4}, {3, 4}),
      move("broadcast f32 3x1 to 3x5", "broadcast", F32, {3, 1}, {3, 5}),
      move("broadcast f32 scalar to 2x3", "broadcast", F32, {}, {2, 3}),
      move("broadcast f32 2x1x4 to 3x2x5x4", "broadcast", F32, {2, 1, 4},
           {3, 2, 5, 4}),
      move("broadcast f32 same shape", "broadcast", F32, {4, 5}, {4, 5}),
      move("broadcast f32 leading one", "broadcast", F32, {5}, {1, 5}),
      move("broadcast f32 1024 to 1024x1024", "broadcast", F32, {1024},
           {1024, 1024}),
      move("broadcast bf16 65 to 33x65", "broadcast", BF16, {65}, {33, 65}),
      move("broadcast f16 7x1 to 7x300", "broadcast", F16, {7, 1}, {7, 300}),
      move("broadcast i32 5 to 4x5", "broadcast", I32, {5}, {4, 5}, kI32Min,
           kI32Max),
      move("broadcast i64 3x1 to 2x3x7", "broadcast", I64, {3, 1}, {2, 3, 7},
           kI64Lo, kI64Hi),
      // ---- cast: special ranges (every pair follows) ----
      cast(F32, I32, {1000}, -10, 10, "truncation"),
      cast(F32, I64, {1000}, -10, 10, "truncation"),
      cast(BF16, I32, {300}, -300, 300, "truncation"),
      cast(F16, I64, {300}, -100, 100, "truncation"),
      cast(F32, F16, {1000}, -1e-6, 1e-6, "subnormals"),
      cast(F32, BF16, {1000}, -1e-38, 1e-38, "subnormals"),
      cast(F32, BF16, {1000}, -100, 100, "rounding"),
      cast(F32, BF16, {2049, 1027}, -100, 100, "four at a time, a tail of 3"),
      cast(F32, F16, {1000}, -10, 10, "rounding"),
      cast(I32, F16, {1000}, -70000, 70000, "overflow"),
      cast(I64, I32, {1000}, -3e9, 3e9, "near limits"),
      cast(F32, I32, {0, 3}, -1, 1, "empty"),
      cast(F32, F32, {}, -1, 1, "scalar"),
  };
  for (KernelCase &c : castPairs())
    v.push_back(std::move(c));
  return v;
}

AddKernelCases cases(makeCases());

} // namespace
} // namespace dtc::test
