//===- MatmulEpilogueTest.cpp - fused epilogues equal the separate kernels
//---===//
//
// matmul_bias and matmul_gelu (what dtc-fuse-matmul-epilogues emits) must
// give what matmul, add and gelu give one after the other: bit for bit on
// one thread (the same products, the same float operations on the same
// values), within the products' rounding on several (the library may split
// K differently for a block of rows than for the whole matrix), and both
// within f32 rounding of a float64 evaluation. Shapes cover the one-GEMM
// path with several row blocks and a remainder, transposed operands, and
// batches of products (broadcast, and one product per thread).
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"

#include <cmath>

using namespace dtc::test;
namespace rt = dtc::rt;

namespace {

struct Case {
  Shape a, b; // as the kernel holds them (transposed operands transposed)
  bool ta = false, tb = false;
};

/// [..., M, N] of a product, from the kernel's operands.
Shape productShape(const Case &c) {
  Shape ba(c.a.begin(), c.a.end() - 2), bb(c.b.begin(), c.b.end() - 2), out;
  EXPECT_TRUE(dtc::kernels::broadcastShapes(ba, bb, out));
  const size_t ra = c.a.size(), rb = c.b.size();
  out.push_back(c.a[ra - (c.ta ? 1 : 2)]);
  out.push_back(c.b[rb - (c.tb ? 2 : 1)]);
  return out;
}

json flags(const Case &c) {
  json attrs = json::object();
  if (c.ta)
    attrs["transpose_a"] = true;
  if (c.tb)
    attrs["transpose_b"] = true;
  return attrs;
}

/// float64: op(a) op(b) (+ bias), and its GELU in the tanh form.
void reference(const Case &c, const HostTensor &a, const HostTensor &b,
               const HostTensor *bias, HostTensor &pre, HostTensor &gelu) {
  const Shape out = productShape(c);
  const size_t r = out.size();
  const int64_t M = out[r - 2], N = out[r - 1],
                K = c.a[c.a.size() - (c.ta ? 2 : 1)];
  pre = F(out, std::vector<double>(size_t(rt::numel(out))));
  gelu = pre;
  const Shape batch(out.begin(), out.end() - 2);
  const Shape ba(c.a.begin(), c.a.end() - 2), bb(c.b.begin(), c.b.end() - 2);
  for (int64_t p = 0; p < rt::numel(batch); ++p) {
    const Shape idx = unravel(p, batch);
    const int64_t pa = bcastIndex(idx, ba), pb = bcastIndex(idx, bb);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double x = a[pa * M * K + (c.ta ? k * M + i : i * K + k)];
          const double y = b[pb * K * N + (c.tb ? j * K + k : k * N + j)];
          s += x * y;
        }
        if (bias)
          s += (*bias)[j];
        const int64_t o = (p * M + i) * N + j;
        pre[o] = s;
        gelu[o] =
            0.5 * s *
            (1 + std::tanh(std::sqrt(2 / M_PI) * (s + 0.044715 * s * s * s)));
      }
  }
}

void expectSameBits(const HostTensor &got, const HostTensor &want,
                    const std::string &what) {
  ASSERT_EQ(got.shape, want.shape) << what;
  size_t diff = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    diff += got[i] != want[i];
  EXPECT_EQ(diff, 0u) << what
                      << ": elements that differ from the separate kernels";
}

const std::vector<Case> &cases() {
  static const std::vector<Case> all = {
      {{5, 7}, {7, 3}},                      // odd, smaller than a vector
      {{3, 200, 33}, {33, 17}},              // 600 rows: blocks of 512 and 88
      {{2, 300, 40}, {24, 40}, false, true}, // b transposed, one GEMM
      {{1100, 9}, {9, 130}},                 // three row blocks, N past 128
      {{2, 11, 6}, {11, 5}, true, false}, // a transposed: a batch of products
      {{2, 3, 6, 11}, {3, 11, 13}},       // batch dims broadcast
      {{4, 9, 11}, {4, 13, 11}, false, true}, // per-product, transposed b
      {{40, 1100}, {40, 70}, true, false},    // tall a^T b: computed transposed
  };
  return all;
}

TEST(MatmulEpilogue, EqualsMatmulAddGelu) {
  uint32_t seed = 1;
  for (const Case &c : cases()) {
    const std::string what = "a " + rt::shapeStr(c.a) + " b " +
                             rt::shapeStr(c.b) + (c.ta ? " ta" : "") +
                             (c.tb ? " tb" : "");
    const Shape out = productShape(c);
    const OutSpec o{DType::F32, out};
    const json attrs = flags(c);
    // Products of size ~1 and spread biases: the GELU sees both tails.
    const HostTensor a = randF(c.a, seed++, -1.5, 1.5),
                     b = randF(c.b, seed++, -1.5, 1.5);
    const HostTensor bias = randF({out.back()}, seed++, -2, 2);
    for (int threads : {1, 2, 3}) {
      const std::string at =
          what + ", " + std::to_string(threads) + " thread(s)";
      const HostTensor product =
          runKernel("matmul", {a, b}, {o}, attrs, threads)[0];
      const HostTensor biased =
          runKernel("add", {product, bias}, {o}, {}, threads)[0];
      const HostTensor geluBiased =
          runKernel("gelu", {biased}, {o}, {}, threads)[0];
      const HostTensor geluPlain =
          runKernel("gelu", {product}, {o}, {}, threads)[0];

      const HostTensor fusedBias =
          runKernel("matmul_bias", {a, b, bias}, {o}, attrs, threads)[0];
      const std::vector<HostTensor> fusedGelu =
          runKernel("matmul_gelu", {a, b, bias}, {o, o}, attrs, threads);
      const std::vector<HostTensor> fusedGeluPlain =
          runKernel("matmul_gelu", {a, b}, {o, o}, attrs, threads);
      if (threads == 1) {
        expectSameBits(fusedBias, biased, "matmul_bias " + at);
        expectSameBits(fusedGelu[0], geluBiased, "matmul_gelu result " + at);
        expectSameBits(fusedGelu[1], biased,
                       "matmul_gelu pre_activation " + at);
        expectSameBits(fusedGeluPlain[0], geluPlain,
                       "matmul_gelu (no bias) result " + at);
        expectSameBits(fusedGeluPlain[1], product,
                       "matmul_gelu (no bias) pre_activation " + at);
      } else {
        expectNear(fusedBias, biased, 1e-5, 1e-5, "matmul_bias " + at);
        expectNear(fusedGelu[0], geluBiased, 1e-5, 1e-5,
                   "matmul_gelu result " + at);
        expectNear(fusedGelu[1], biased, 1e-5, 1e-5,
                   "matmul_gelu pre_activation " + at);
      }

      // And against float64: K products of size <= 2.25 and the tanh
      // approximation (4e-7 relative) stay well inside these bounds.
      HostTensor pre, gelu, prePlain, geluPlainRef;
      reference(c, a, b, &bias, pre, gelu);
      reference(c, a, b, nullptr, prePlain, geluPlainRef);
      expectNear(fusedBias, pre, 2e-5, 1e-5, "matmul_bias vs float64 " + at);
      expectNear(fusedGelu[1], pre, 2e-5, 1e-5,
                 "matmul_gelu pre_activation vs float64 " + at);
      expectNear(fusedGelu[0], gelu, 2e-5, 1e-5,
                 "matmul_gelu vs float64 " + at);
      expectNear(fusedGeluPlain[0], geluPlainRef, 2e-5, 1e-5,
                 "matmul_gelu (no bias) vs float64 " + at);
    }
  }
}

TEST(MatmulEpilogue, RulesNameTheOperandAtFault) {
  const HostTensor a = randF({4, 8}, 1), b = randF({8, 3}, 2);
  const OutSpec o{DType::F32, {4, 3}};
  EXPECT_EQ(checkKernel("matmul_bias", {a, b, randF({3}, 3)}, {o}, {}), "");
  EXPECT_EQ(checkKernel("matmul_bias", {a, b, randF({4}, 3)}, {o}, {}),
            "bias must have shape [3], got f32[4]");
  EXPECT_EQ(checkKernel("matmul_bias", {a, b, randF({1, 3}, 3)}, {o}, {}),
            "bias must have shape [3], got f32[1, 3]");
  EXPECT_EQ(checkKernel("matmul_bias", {a, b, I32({3}, {0, 0, 0})}, {o}, {}),
            "bias must be f32, got i32[3]");
  EXPECT_EQ(
      checkKernel("matmul_bias", {a, randF({7, 3}, 4), randF({3}, 3)}, {o}, {}),
      "contraction sizes differ: a is f32[4, 8], b is f32[7, 3]");
  EXPECT_EQ(checkKernel("matmul_gelu", {a, b}, {o, o}, {}), "");
  EXPECT_EQ(checkKernel("matmul_gelu", {a, b}, {o, {DType::F32, {4, 4}}}, {}),
            "pre_activation must match the result (f32[4, 3]), got f32[4, 4]");
  EXPECT_EQ(checkKernel("matmul_gelu", {a, b}, {o}, {}), "arity");
  EXPECT_EQ(checkKernel("matmul_gelu", {a, b, randF({2}, 3)}, {o, o}, {}),
            "bias must have shape [3], got f32[2]");
}

} // namespace
