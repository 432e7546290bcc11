//===- OptimizerTest.cpp - sgd_update / adam_update vs PyTorch formulas ---===//
#include "KernelTestUtil.h"

#include "dtc/kernels/LearningRate.h"

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

// Learning-rate schedules (include/dtc/kernels/LearningRate.h), values
// worked out by hand: lr 1, min 0.1, warmup 2, decay ends at update 6.
TEST(Optimizer, ScheduleFormulas) {
  using dtc::kernels::LearningRateSchedule;
  using dtc::kernels::LrScheduleKind;
  LearningRateSchedule cosine{LrScheduleKind::Cosine, 1.0, 2, 6, 0.1};
  LearningRateSchedule linear{LrScheduleKind::Linear, 1.0, 2, 6, 0.1};
  LearningRateSchedule warm{LrScheduleKind::Constant, 1.0, 4, 0, 0.0};
  // Warmup: lr (t+1)/W, the same for every kind.
  for (const LearningRateSchedule &s : {cosine, linear}) {
    EXPECT_DOUBLE_EQ(s.at(0), 0.5);
    EXPECT_DOUBLE_EQ(s.at(1), 1.0);
    EXPECT_DOUBLE_EQ(s.at(2), 1.0); // p = 0: the peak
    EXPECT_DOUBLE_EQ(s.at(6), 0.1); // p = 1: the minimum
    EXPECT_DOUBLE_EQ(s.at(50), 0.1);
  }
  // p = 1/2: cosine 0.1 + 0.9 (1 + cos(pi/2))/2 = 0.55; p = 1/4: 0.1 + 0.9
  // (1 + 1/sqrt 2)/2.
  EXPECT_DOUBLE_EQ(cosine.at(4), 0.55);
  EXPECT_NEAR(cosine.at(3), 0.1 + 0.45 * (1 + std::sqrt(0.5)), 1e-15);
  EXPECT_DOUBLE_EQ(linear.at(4), 0.55);
  EXPECT_DOUBLE_EQ(linear.at(3), 1.0 - 0.9 * 0.25);
  EXPECT_DOUBLE_EQ(warm.at(0), 0.25);
  EXPECT_DOUBLE_EQ(warm.at(2), 0.75);
  EXPECT_DOUBLE_EQ(warm.at(3), 1.0);
  EXPECT_DOUBLE_EQ(warm.at(1000), 1.0);
  EXPECT_TRUE(warm.varies());
  EXPECT_FALSE((LearningRateSchedule{LrScheduleKind::Constant, 1.0}).varies());
}

// The kernels apply the scheduled rate of the step they are given: sgd
// (step as input 2) and adam (input 4), at a step inside the decay.
TEST(Optimizer, UpdatesApplyTheScheduledRate) {
  const json schedule = {{"lr", 0.2},         {"lr_schedule", "cosine"},
                         {"warmup_steps", 2}, {"decay_steps", 6},
                         {"min_lr", 0.02},    {"weight_decay", 0.0}};
  const double rate = 0.02 + 0.18 * 0.5; // update 4: p = 1/2
  HostTensor p = randF({6}, 7), g = randF({6}, 8);
  HostTensor sgd =
      run1("sgd_update", {p, g, I64({}, {4})}, {DType::F32, {6}}, schedule);
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(sgd[i], p[i] - rate * g[i], 1e-7) << i;
  json at = schedule;
  at.update(
      {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"decoupled", false}});
  HostTensor zeros = F({6}, std::vector<double>(6, 0));
  auto outs =
      runKernel("adam_update", {p, g, zeros, zeros, I64({}, {4})},
                {{DType::F32, {6}}, {DType::F32, {6}}, {DType::F32, {6}}}, at);
  for (int i = 0; i < 6; ++i) {
    TorchAdam ref{rate, 0.9, 0.999, 1e-8, 0.0, false, p[i]};
    ref.t = 4; // the bias corrections of update 4 (t = 5); m = v = 0 before
    ref.step(g[i]);
    EXPECT_NEAR(outs[0][i], ref.p, 1e-6) << i;
  }
}

TEST(Optimizer, ScheduleCheckRule) {
  HostTensor p = randF({3}, 1);
  auto check = [&](const std::vector<HostTensor> &ins, const json &a) {
    std::vector<dtc::kernels::TensorDesc> di;
    for (const auto &t : ins)
      di.push_back({t.dtype, t.shape});
    try {
      dtc::kernels::findKernel("sgd_update")->check(di, {{DType::F32, {3}}}, a);
    } catch (const dtc::rt::Error &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const json cosine = {
      {"lr", 0.1},         {"weight_decay", 0.0}, {"lr_schedule", "cosine"},
      {"warmup_steps", 2}, {"decay_steps", 5},    {"min_lr", 0.0}};
  EXPECT_EQ(check({p, p, I64({}, {0})}, cosine), "");
  // A rate that changes needs the step; a constant one takes none.
  EXPECT_NE(check({p, p}, cosine), "");
  EXPECT_EQ(check({p, p}, {{"lr", 0.1}, {"weight_decay", 0.0}}), "");
  EXPECT_NE(check({p, p, I64({}, {0})}, {{"lr", 0.1}, {"weight_decay", 0.0}}),
            "");
  json bad = cosine;
  bad["decay_steps"] = 2;
  EXPECT_EQ(check({p, p, I64({}, {0})}, bad),
            "the cosine schedule needs decay_steps > warmup_steps, got "
            "decay_steps 2 and warmup_steps 2");
  bad = cosine;
  bad["lr_schedule"] = "cosin";
  EXPECT_NE(check({p, p, I64({}, {0})}, bad), "");
  bad = cosine;
  bad["min_lr"] = 0.2;
  EXPECT_NE(check({p, p, I64({}, {0})}, bad), "");
  bad = cosine;
  bad["warmup_steps"] = -1;
  EXPECT_NE(check({p, p, I64({}, {0})}, bad), "");
}

} // namespace
