//===- OptimizerTest.cpp - sgd_update / adam_update vs PyTorch formulas ---===//
#include "KernelTestUtil.h"

using namespace dtc::test;

namespace {

TEST(Optimizer, Sgd) {
  HostTensor p = randF({7}, 1), g = randF({7}, 2);
  const double lr = 0.1, wd = 0.01;
  HostTensor got = run1("sgd_update", {p, g}, {DType::F32, {7}},
                        {{"lr", lr}, {"weight_decay", wd}});
  for (int i = 0; i < 7; ++i)
    EXPECT_NEAR(got[i], p[i] - lr * (g[i] + wd * p[i]), 1e-7);
}

// torch.optim.Adam / AdamW, one element, written out by hand.
struct TorchAdam {
  double lr, b1, b2, eps, wd;
  bool decoupled;
  double p, m = 0, v = 0;
  int t = 0;
  void step(double g) {
    ++t;
    if (decoupled)
      p *= 1 - lr * wd;
    else
      g += wd * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    const double denom = std::sqrt(v) / std::sqrt(bc2) + eps;
    p -= (lr / bc1) * m / denom;
  }
};

TEST(Optimizer, AdamAndAdamWOverSeveralSteps) {
  for (bool decoupled : {false, true}) {
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    json at = {{"lr", lr},   {"beta1", b1},        {"beta2", b2},
               {"eps", eps}, {"weight_decay", wd}, {"decoupled", decoupled}};
    HostTensor p = randF({5}, 3), m = F({5}, std::vector<double>(5, 0)), v = m;
    std::vector<TorchAdam> ref;
    for (int i = 0; i < 5; ++i)
      ref.push_back({lr, b1, b2, eps, wd, decoupled, p[i]});
    for (int step = 0; step < 6; ++step) {
      HostTensor g = randF({5}, 100 + uint32_t(step));
      auto outs = runKernel(
          "adam_update", {p, g, m, v, I64({}, {double(step)})},
          {{DType::F32, {5}}, {DType::F32, {5}}, {DType::F32, {5}}}, at);
      p = outs[0];
      m = outs[1];
      v = outs[2];
      for (int i = 0; i < 5; ++i) {
        ref[size_t(i)].step(g[i]);
        EXPECT_NEAR(p[i], ref[size_t(i)].p, 1e-6)
            << "decoupled=" << decoupled << " step " << step;
        EXPECT_NEAR(m[i], ref[size_t(i)].m, 1e-7);
        EXPECT_NEAR(v[i], ref[size_t(i)].v, 1e-8);
      }
    }
  }
}

TEST(Optimizer, AdamCheckRule) {
  json at = {{"lr", 1e-3},  {"beta1", 0.9},        {"beta2", 0.999},
             {"eps", 1e-8}, {"weight_decay", 0.0}, {"decoupled", false}};
  HostTensor p = randF({3}, 1);
  const std::vector<OutSpec> outs = {
      {DType::F32, {3}}, {DType::F32, {3}}, {DType::F32, {3}}};
  auto check = [&](const std::vector<HostTensor> &ins, const json &a) {
    const auto *k = dtc::kernels::findKernel("adam_update");
    std::vector<dtc::kernels::TensorDesc> di, dout;
    for (const auto &t : ins)
      di.push_back({t.dtype, t.shape});
    for (const auto &t : outs)
      dout.push_back({t.dtype, t.shape});
    try {
      k->check(di, dout, a);
    } catch (const dtc::rt::Error &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(check({p, p, p, p, I64({}, {0})}, at), "");
  EXPECT_NE(check({p, p, p, p, I32({}, {0})}, at), "");
  EXPECT_NE(check({p, p, p, p, I64({1}, {0})}, at), "");
  json bad = at;
  bad["beta1"] = 1.0;
  EXPECT_NE(check({p, p, p, p, I64({}, {0})}, bad), "");
  bad = at;
  bad.erase("decoupled");
  EXPECT_NE(check({p, p, p, p, I64({}, {0})}, bad), "");
  // eps must be positive (the compiler's verifier runs this same rule and
  // words it alike: test/Dialect/invalid.mlir).
  for (double eps : {0.0, -1e-8}) {
    bad = at;
    bad["eps"] = eps;
    EXPECT_EQ(check({p, p, p, p, I64({}, {0})}, bad),
              "attribute 'eps' must be > 0")
        << eps;
  }
  bad["eps"] = 1e-30;
  EXPECT_EQ(check({p, p, p, p, I64({}, {0})}, bad), "");
}

} // namespace
