//===- GemmCases.cpp - CUDA kernel cases (see KernelCases.h)
//---------------===//
//
// matmul, matmul_bias and matmul_gelu (kernels/cuda/Gemm.cu): every
// transpose combination of test/reference/check_kernels.py's shapes (plain,
// batched, broadcast batches, the folded single-weight product, a tall
// a^T b), the fused epilogues with and without bias, bf16 and f16, empty
// and K = 0 products, and realistic sizes.
//
// Tolerances: the CPU (oneDNN / OpenBLAS sgemm) and cuBLASLt sum in
// different orders, so f32 results differ by a few units of the partial
// sums' rounding: rtol 1e-4 and atol 2e-6 sqrt(K) (values in [-1, 1] give
// sums of size about sqrt(K) / 3). bf16 / f16 results are the same f32 sums
// rounded once, which can land one unit in the last place apart (two where
// GELU reads a rounded pre-activation): rtol / atol 2e-2 for bf16, 5e-3
// for f16.
//
//===----------------------------------------------------------------------===//
#include "KernelCases.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace dtc::test {
namespace {
using rt::DType;
using rt::Shape;

/// A product in logical terms: a [..., M, K] times b [..., K, N].
struct Mm {
  Shape a, b;
};

/// The stored shape of a logical operand (the last two dims swapped when
/// the kernel reads it transposed).
Shape stored(Shape s, bool transposed) {
  if (transposed)
    std::swap(s[s.size() - 1], s[s.size() - 2]);
  return s;
}

/// numpy's broadcast of the batch dims, then [M, N].
Shape resultShape(const Shape &a, const Shape &b) {
  const Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  const size_t r = std::max(ba.size(), bb.size());
  Shape out(r, 1);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < ba.size() ? ba[ba.size() - 1 - i] : 1;
    const int64_t db = i < bb.size() ? bb[bb.size() - 1 - i] : 1;
    out[r - 1 - i] = da == 1 ? db : da;
  }
  out.push_back(a[a.size() - 2]);
  out.push_back(b.back());
  return out;
}

std::string shapeText(const Shape &s) { return rt::shapeStr(s); }

std::string dtypeText(DType t) { return rt::dtypeName(t); }

nlohmann::json transposeAttrs(bool ta, bool tb) {
  nlohmann::json attrs = nlohmann::json::object();
  if (ta)
    attrs["transpose_a"] = true;
  if (tb)
    attrs["transpose_b"] = true;
  return attrs;
}

/// rtol / atol for a product of contraction length K in `dtype`.
std::pair<double, double> tolerance(DType dtype, int64_t K) {
  if (dtype == DType::BF16)
    return {2e-2, 2e-2};
  if (dtype == DType::F16)
    return {5e-3, 5e-3};
  return {1e-4, 2e-6 * std::sqrt(double(std::max<int64_t>(K, 1)))};
}

enum class Kind { Matmul, Bias, Gelu, GeluBias };

/// One case of `kind` on the logical product `m`, with operands drawn from
/// [lo, hi] (the bias from [2 lo, 2 hi]).
KernelCase product(Kind kind, const Mm &m, bool ta, bool tb, DType dtype,
                   double lo = -1.0, double hi = 1.0,
                   const std::string &note = "") {
  const Shape out = resultShape(m.a, m.b);
  const int64_t K = m.a.back();
  const char *kernel = kind == Kind::Matmul ? "matmul"
                       : kind == Kind::Bias ? "matmul_bias"
                                            : "matmul_gelu";
  KernelCase c;
  c.label = std::string(kernel) + (kind == Kind::GeluBias ? " bias " : " ") +
            dtypeText(dtype) + " " + shapeText(m.a) + "x" + shapeText(m.b) +
            (ta ? " ta" : "") + (tb ? " tb" : "") +
            (note.empty() ? "" : " " + note);
  c.kernel = kernel;
  c.in = {{dtype, stored(m.a, ta), lo, hi}, {dtype, stored(m.b, tb), lo, hi}};
  if (kind == Kind::Bias || kind == Kind::GeluBias)
    c.in.push_back({dtype, {out.back()}, 2 * lo, 2 * hi});
  c.out = {{dtype, out}};
  if (kind == Kind::Gelu || kind == Kind::GeluBias)
    c.out.push_back({dtype, out});
  c.attrs = transposeAttrs(ta, tb);
  std::tie(c.rtol, c.atol) = tolerance(dtype, K);
  return c;
}

std::vector<KernelCase> gemmCases() {
  std::vector<KernelCase> cases;
  // check_kernels.py's matmul shapes, every transpose combination, f32.
  const std::vector<Mm> shapes = {
      {{7, 33}, {33, 5}},
      {{3, 4, 17}, {17, 6}},
      {{4, 9}, {2, 9, 3}},
      {{2, 1, 5, 8}, {3, 8, 4}},
      {{1, 1}, {1, 7}},
      {{2, 64, 48}, {2, 48, 40}},
      {{1100, 24}, {24, 70}},
      // More batch patterns: b broadcast over the outer dim only (two
      // launches of a strided batch), equal batches (one merged batch), a
      // broadcast on both sides, K = 1, and a row > 1024 elements.
      {{2, 3, 4, 5}, {1, 3, 5, 6}},
      {{2, 3, 4, 5}, {2, 3, 5, 6}},
      {{3, 1, 6, 5}, {1, 4, 5, 2}},
      {{5, 1}, {1, 3}},
      {{3, 40}, {40, 1500}}};
  for (const Mm &m : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        cases.push_back(product(Kind::Matmul, m, ta, tb, DType::F32));

  // bf16 and f16: folded, broadcast, batched-transposed, tall a^T b.
  for (DType t : {DType::BF16, DType::F16}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        cases.push_back(product(Kind::Matmul, {{7, 33}, {33, 5}}, ta, tb, t));
    cases.push_back(
        product(Kind::Matmul, {{2, 1, 5, 8}, {3, 8, 4}}, false, true, t));
    cases.push_back(
        product(Kind::Matmul, {{2, 64, 48}, {2, 48, 40}}, true, false, t));
    cases.push_back(
        product(Kind::Matmul, {{1100, 24}, {24, 70}}, true, false, t));
    cases.push_back(
        product(Kind::Matmul, {{4, 16, 64}, {64, 32}}, false, false, t));
  }

  // Realistic sizes: a GPT projection in bf16 (plain and with the weight
  // stored [N, K]), its weight gradient a^T b, and an f32 one with K = 1024.
  cases.push_back(product(Kind::Matmul, {{512, 1024}, {1024, 768}}, false,
                          false, DType::BF16));
  cases.push_back(product(Kind::Matmul, {{512, 1024}, {1024, 768}}, false, true,
                          DType::BF16));
  cases.push_back(product(Kind::Matmul, {{768, 512}, {512, 1024}}, true, false,
                          DType::BF16));
  cases.push_back(product(Kind::Matmul, {{256, 1024}, {1024, 384}}, false,
                          false, DType::F32));
  cases.push_back(product(Kind::Matmul, {{384, 1024}, {1024, 256}}, true, false,
                          DType::F32));

  // Empty results and an empty contraction (all zeros).
  cases.push_back(
      product(Kind::Matmul, {{0, 5}, {5, 3}}, false, false, DType::F32));
  cases.push_back(
      product(Kind::Matmul, {{2, 0, 4, 5}, {5, 3}}, false, false, DType::F32));
  cases.push_back(
      product(Kind::Matmul, {{3, 0}, {0, 4}}, false, false, DType::F32));
  cases.push_back(
      product(Kind::Matmul, {{3, 0}, {0, 4}}, true, true, DType::BF16));

  // The fused epilogues on check_kernels.py's shapes (f32, values in
  // [-1.5, 1.5], bias in [-3, 3]).
  struct Fused {
    Mm m;
    bool ta, tb;
  };
  const std::vector<Fused> fused = {{{{7, 33}, {33, 5}}, false, false},
                                    {{{3, 4, 17}, {17, 6}}, false, true},
                                    {{{2, 64, 48}, {2, 48, 40}}, true, false},
                                    {{{600, 9}, {9, 20}}, false, false},
                                    {{{2, 1, 5, 8}, {3, 8, 4}}, false, true},
                                    {{{4, 9}, {2, 9, 3}}, true, true},
                                    {{{1100, 24}, {24, 72}}, true, false},
                                    {{{5, 1}, {1, 3}}, false, false}};
  for (const Fused &f : fused)
    for (Kind k : {Kind::Bias, Kind::Gelu, Kind::GeluBias})
      cases.push_back(product(k, f.m, f.ta, f.tb, DType::F32, -1.5, 1.5));
  // Low precision: N a multiple of 8 and one product (cuBLASLt's GELU_AUX
  // epilogues), N odd (BIAS and this file's GELU), batched and transposed.
  for (DType t : {DType::BF16, DType::F16}) {
    for (Kind k : {Kind::Bias, Kind::Gelu, Kind::GeluBias}) {
      cases.push_back(
          product(k, {{96, 40}, {40, 64}}, false, false, t, -1.5, 1.5));
      cases.push_back(
          product(k, {{4, 24, 40}, {40, 64}}, false, true, t, -1.5, 1.5));
      cases.push_back(
          product(k, {{7, 33}, {33, 5}}, false, false, t, -1.5, 1.5));
      cases.push_back(
          product(k, {{2, 64, 48}, {2, 48, 40}}, true, false, t, -1.5, 1.5));
      cases.push_back(
          product(k, {{2, 1, 5, 8}, {3, 8, 16}}, false, true, t, -1.5, 1.5));
    }
  }
  // A GPT MLP's first product (bf16, bias, GELU) and projections with bias.
  // These take cuBLASLt's fused epilogues (their plan says so), so a wrong
  // epilogue shows in their numbers rather than going unused.
  cases.push_back(product(Kind::GeluBias, {{256, 512}, {512, 2048}}, false,
                          false, DType::BF16, -1.0, 1.0));
  cases.back().expectPlan = "fast GELU_AUX_BIAS";
  cases.push_back(product(Kind::GeluBias, {{256, 512}, {512, 2048}}, false,
                          true, DType::F16, -0.5, 0.5));
  cases.back().expectPlan = "fast GELU_AUX_BIAS";
  cases.push_back(product(Kind::Bias, {{512, 1024}, {1024, 256}}, false, true,
                          DType::BF16));
  cases.back().expectPlan = "fast BIAS";
  cases.push_back(product(Kind::Bias, {{512, 1024}, {1024, 256}}, false, false,
                          DType::F32));
  cases.back().expectPlan = "fast BIAS";
  cases.push_back(product(Kind::GeluBias, {{128, 512}, {512, 1024}}, false,
                          false, DType::F32, -1.0, 1.0));
  // Empty contraction: pre = bias, result = gelu(bias); an empty result.
  cases.push_back(
      product(Kind::GeluBias, {{3, 0}, {0, 4}}, false, false, DType::F32));
  cases.push_back(
      product(Kind::Bias, {{3, 0}, {0, 4}}, false, false, DType::F32));
  cases.push_back(
      product(Kind::GeluBias, {{0, 5}, {5, 3}}, false, false, DType::F32));
  return cases;
}

AddKernelCases cases(gemmCases());

} // namespace
} // namespace dtc::test
