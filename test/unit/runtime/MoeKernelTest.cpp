//===- MoeKernelTest.cpp - the mixture-of-experts kernels, by hand --------===//
//
// Small cases worked out by hand: ties, token-order capacity, dropped
// slots, the renormalisation's gradient against a finite difference, and
// corrupt slots as one error. (The whole dtc.moe is checked against the
// float64 reference in test/e2e/moe.)
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"

using namespace dtc::test;
using dtc::rt::Error;

namespace {

using json = nlohmann::json;

std::vector<HostTensor> route(const HostTensor &probs, int64_t k,
                              int64_t capacity) {
  const int64_t T = probs.shape[0];
  return runKernel(
      "moe_route", {probs},
      {{DType::I32, {T, k}}, {DType::I32, {T, k}}, {DType::F32, {T, k}}},
      json{{"top_k", k}, {"capacity", capacity}});
}

TEST(MoeKernels, RouteTakesTopKWithTiesToTheLowerExpert) {
  // Token 0: experts 2 and 0 tie behind 1 -> {1, 0}; token 1: {3, 2}.
  HostTensor probs = F({2, 4}, {0.25, 0.5, 0.25, 0.0, 0.1, 0.2, 0.3, 0.4});
  auto out = route(probs, 2, 2);
  EXPECT_EQ(out[0].v, (std::vector<double>{1, 0, 3, 2}));
  expectNear(out[2], F({2, 2}, {0.5 / 0.75, 0.25 / 0.75, 0.4 / 0.7, 0.3 / 0.7}),
             1e-7, 1e-6, "weights sum to 1 per token");
}

TEST(MoeKernels, RouteFillsCapacityInTokenOrder) {
  // Every token prefers expert 0; capacity 2: tokens 0 and 1 get rows 0
  // and 1 of expert 0, tokens 2 and 3 are dropped there (-1); their second
  // choice, expert 1, takes all four.
  HostTensor probs = F({4, 2}, {0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.6, 0.4});
  auto out = route(probs, 2, 4);
  EXPECT_EQ(out[1].v, (std::vector<double>{0, 0, 1, 1, 2, 2, 3, 3}));
  out = route(probs, 2, 2);
  EXPECT_EQ(out[0].v, (std::vector<double>{0, 1, 0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(out[1].v, (std::vector<double>{0, 0, 1, 1, -1, -1, -1, -1}));
  // Dropping does not change the weights (renormalised before it).
  expectNear(out[2], F({4, 2}, {0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.6, 0.4}), 1e-7,
             1e-6);
}

TEST(MoeKernels, DispatchAndCombineAreTransposes) {
  // <combine(y), a> == <y, dispatch(a)> for the same slots and weights.
  const int64_t T = 5, D = 3, E = 3, C = 2, k = 2;
  HostTensor experts = I32({T, k}, {0, 1, 1, 2, 0, 2, 0, 1, 2, 0});
  HostTensor positions = I32({T, k}, {0, 0, 1, 0, 1, 1, -1, -1, -1, -1});
  HostTensor weights = randF({T, k}, 7, 0.1, 1.0);
  HostTensor a = randF({T, D}, 8), y = randF({E, C, D}, 9);
  HostTensor buffer = run1("moe_dispatch", {a, experts, positions, weights},
                           {DType::F32, {E, C, D}});
  HostTensor rows = run1("moe_combine", {y, experts, positions, weights},
                         {DType::F32, {T, D}});
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < T * D; ++i)
    lhs += rows[i] * a[i];
  for (int64_t i = 0; i < E * C * D; ++i)
    rhs += y[i] * buffer[i];
  EXPECT_NEAR(lhs, rhs, 1e-5 * std::max(1.0, std::fabs(lhs)));
  // Token 1's first slot is expert 1, row 1: scaled by its weight.
  for (int64_t d = 0; d < D; ++d)
    EXPECT_NEAR(buffer[(1 * C + 1) * D + d], weights[2] * a[1 * D + d], 1e-6);
  // Dropped tokens (3 and 4) get nothing back.
  for (int64_t d = 0; d < D; ++d) {
    EXPECT_EQ(rows[3 * D + d], 0.0);
    EXPECT_EQ(rows[4 * D + d], 0.0);
  }
  // moe_slot_dot: the weights' gradient of combine, 0 for dropped slots.
  HostTensor dots =
      run1("moe_slot_dot", {a, y, experts, positions}, {DType::F32, {T, k}});
  double want = 0;
  for (int64_t d = 0; d < D; ++d)
    want += a[2 * D + d] * y[(2 * C + 1) * D + d]; // token 2, slot 1: (2, 1)
  EXPECT_NEAR(dots[5], want, 1e-6);
  EXPECT_EQ(dots[6], 0.0);
}

TEST(MoeKernels, RouteGradMatchesAFiniteDifference) {
  // L = sum_j c_j w_j(p) for fixed choices: d L / d p from moe_route_grad
  // against central differences of the renormalised weights.
  HostTensor probs = F({1, 4}, {0.1, 0.4, 0.3, 0.2});
  HostTensor experts = I32({1, 2}, {1, 2});
  HostTensor c = F({1, 2}, {0.7, -1.3});
  HostTensor grad =
      run1("moe_route_grad", {probs, experts, c}, {DType::F32, {1, 4}});
  auto loss = [&](std::vector<double> p) {
    const double s = p[1] + p[2];
    return c[0] * p[1] / s + c[1] * p[2] / s;
  };
  for (int e = 0; e < 4; ++e) {
    std::vector<double> plus = probs.v, minus = probs.v;
    plus[size_t(e)] += 1e-6;
    minus[size_t(e)] -= 1e-6;
    EXPECT_NEAR(grad[e], (loss(plus) - loss(minus)) / 2e-6, 1e-5) << e;
  }
}

TEST(MoeKernels, FirstChoiceFractionCountsColumnZero) {
  HostTensor experts = I32({4, 2}, {2, 0, 2, 1, 0, 2, 1, 2});
  HostTensor f =
      run1("moe_first_choice_fraction", {experts}, {DType::F32, {3}});
  EXPECT_EQ(f.v, (std::vector<double>{0.25, 0.25, 0.5}));
}

TEST(MoeKernels, CorruptSlotsAreOneError) {
  HostTensor experts = I32({1, 1}, {3}), positions = I32({1, 1}, {0});
  HostTensor x = F({1, 2}, {1, 2}), w = F({1, 1}, {1});
  try {
    run1("moe_dispatch", {x, experts, positions, w}, {DType::F32, {3, 1, 2}});
    FAIL() << "expert 3 of 3 accepted";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "moe_dispatch: expert 3 at position [0, 0] is "
                           "outside [0, 3)");
  }
  EXPECT_EQ(
      checkKernel(
          "moe_route", {F({2, 3}, {0, 0, 0, 0, 0, 0})},
          {{DType::I32, {2, 4}}, {DType::I32, {2, 4}}, {DType::F32, {2, 4}}},
          json{{"top_k", 4}, {"capacity", 1}}),
      "attribute 'top_k' = 4 exceeds the 3 experts");
}

} // namespace
