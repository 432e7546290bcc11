//===- KernelGradTest.cpp - *_grad kernels vs finite differences ----------===//
//
// For a forward kernel f and an upstream gradient w, the objective
// L = sum(f(inputs) * w) has dL/d(input) = the gradient kernel's output.
// Central differences of the (f32) forward kernel, with the actual float
// step, give the reference.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"

using namespace dtc::test;

namespace {

double objective(const std::string &fwd, const std::vector<HostTensor> &ins,
                 const OutSpec &out, const json &attrs, const HostTensor &w) {
  HostTensor y = run1(fwd, ins, out, attrs);
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i)
    s += y[i] * w[i];
  return s;
}

HostTensor finiteDiff(const std::string &fwd, std::vector<HostTensor> ins,
                      size_t arg, const OutSpec &out, const json &attrs,
                      const HostTensor &w, double h) {
  HostTensor g = ins[arg];
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double x0 = ins[arg][i];
    const double xp = double(float(x0 + h)), xm = double(float(x0 - h));
    ins[arg][i] = xp;
    const double lp = objective(fwd, ins, out, attrs, w);
    ins[arg][i] = xm;
    const double lm = objective(fwd, ins, out, attrs, w);
    ins[arg][i] = x0;
    g[i] = (lp - lm) / (xp - xm);
  }
  return g;
}

// Checks grad kernel outputs [outIdx] against FD of forward wrt ins[arg].
struct GradCheck {
  std::string fwd, grad;
  std::vector<HostTensor> fwdIns;
  OutSpec fwdOut;
  json attrs;
};

void checkActivation(const std::string &name, double lo, double hi,
                     uint32_t seed) {
  HostTensor x = randF({4, 6}, seed, lo, hi);
  if (name == "relu")
    for (double &v : x.v)
      if (std::fabs(v) < 0.05)
        v = 0.3; // stay away from the kink
  HostTensor w = randF({4, 6}, seed + 1);
  HostTensor dx = run1(name + "_grad", {x, w}, {DType::F32, x.shape});
  expectNear(dx, finiteDiff(name, {x}, 0, {DType::F32, x.shape}, {}, w, 1e-2),
             2e-3, 1e-2, name);
}

TEST(KernelGrad, Activations) {
  checkActivation("relu", -2, 2, 1);
  checkActivation("gelu", -3, 3, 3);
  checkActivation("silu", -4, 4, 5);
}

TEST(KernelGrad, MaxGradWithBroadcast) {
  HostTensor l = randF({3, 4}, 7), r = randF({4}, 8);
  // dlhs/drhs have dy's shape: compare against FD wrt the broadcast operands.
  HostTensor rb{DType::F32, {3, 4}, std::vector<double>(12)};
  for (int i = 0; i < 12; ++i)
    rb[i] = r[i % 4];
  for (int i = 0; i < 12; ++i)
    if (std::fabs(l[i] - rb[i]) < 0.05)
      l[i] += 0.2; // no ties within the FD step
  HostTensor w = randF({3, 4}, 9);
  auto outs = runKernel("max_grad", {l, r, w},
                        {{DType::F32, {3, 4}}, {DType::F32, {3, 4}}});
  expectNear(outs[0],
             finiteDiff("max", {l, rb}, 0, {DType::F32, {3, 4}}, {}, w, 1e-2),
             1e-4, 1e-3, "dlhs");
  expectNear(outs[1],
             finiteDiff("max", {l, rb}, 1, {DType::F32, {3, 4}}, {}, w, 1e-2),
             1e-4, 1e-3, "drhs");
  // Ties go to lhs.
  auto tie = runKernel("max_grad", {F({2}, {1, 2}), F({}, {1}), F({2}, {5, 6})},
                       {{DType::F32, {2}}, {DType::F32, {2}}});
  EXPECT_EQ(tie[0].v, (std::vector<double>{5, 6}));
  EXPECT_EQ(tie[1].v, (std::vector<double>{0, 0}));
}

TEST(KernelGrad, Softmax) {
  HostTensor x = randF({3, 5}, 10, -2, 2);
  for (int64_t axis : {0, 1}) {
    json at = {{"axis", axis}};
    HostTensor y = run1("softmax", {x}, {DType::F32, x.shape}, at);
    HostTensor w = randF(x.shape, 11);
    HostTensor dx = run1("softmax_grad", {y, w}, {DType::F32, x.shape}, at);
    expectNear(
        dx, finiteDiff("softmax", {x}, 0, {DType::F32, x.shape}, at, w, 1e-2),
        2e-4, 1e-2);
  }
}

TEST(KernelGrad, LayerNorm) {
  HostTensor x = randF({2, 3, 6}, 12, -2, 2), g = randF({6}, 13, 0.5, 1.5),
             b = randF({6}, 14);
  HostTensor w = randF(x.shape, 15);
  json at = {{"epsilon", 1e-5}};
  auto outs = runKernel(
      "layer_norm_grad", {x, g, w},
      {{DType::F32, x.shape}, {DType::F32, {6}}, {DType::F32, {6}}}, at);
  const OutSpec o{DType::F32, x.shape};
  expectNear(outs[0], finiteDiff("layer_norm", {x, g, b}, 0, o, at, w, 1e-2),
             3e-3, 1e-2, "dx");
  expectNear(outs[1], finiteDiff("layer_norm", {x, g, b}, 1, o, at, w, 1e-2),
             3e-3, 1e-2, "dgamma");
  expectNear(outs[2], finiteDiff("layer_norm", {x, g, b}, 2, o, at, w, 1e-2),
             3e-3, 1e-2, "dbeta");
}

TEST(KernelGrad, RmsNorm) {
  // Rows shorter than the kernel's 8 partial sums, and rows of whole
  // groups of 8 plus a tail.
  for (int64_t D : {5, 21}) {
    HostTensor x = randF({4, D}, 16, -2, 2), g = randF({D}, 17, 0.5, 1.5);
    HostTensor w = randF(x.shape, 18);
    json at = {{"epsilon", 1e-6}};
    auto outs = runKernel("rms_norm_grad", {x, g, w},
                          {{DType::F32, x.shape}, {DType::F32, {D}}}, at);
    const OutSpec o{DType::F32, x.shape};
    expectNear(outs[0], finiteDiff("rms_norm", {x, g}, 0, o, at, w, 1e-2), 3e-3,
               1e-2, "dx, D " + std::to_string(D));
    expectNear(outs[1], finiteDiff("rms_norm", {x, g}, 1, o, at, w, 1e-2), 3e-3,
               1e-2, "dgamma, D " + std::to_string(D));
  }
}

// The split kernels (input part for B, parameter part for W) compute the
// same numbers as the fused gradient, bit for bit.
TEST(KernelGrad, NormSplitsMatchFused) {
  HostTensor x = randF({2, 3, 6}, 21, -2, 2), g = randF({6}, 22, 0.5, 1.5);
  HostTensor w = randF(x.shape, 23);
  json at = {{"epsilon", 1e-5}};
  const OutSpec dx{DType::F32, x.shape}, vec{DType::F32, {6}};
  auto ln = runKernel("layer_norm_grad", {x, g, w}, {dx, vec, vec}, at);
  HostTensor lnDx = run1("layer_norm_input_grad", {x, g, w}, dx, at);
  auto lnParams = runKernel("layer_norm_param_grad", {x, w}, {vec, vec}, at);
  expectNear(lnDx, ln[0], 0, 0, "layer_norm dx");
  expectNear(lnParams[0], ln[1], 0, 0, "layer_norm dgamma");
  expectNear(lnParams[1], ln[2], 0, 0, "layer_norm dbeta");
  auto rms = runKernel("rms_norm_grad", {x, g, w}, {dx, vec}, at);
  HostTensor rmsDx = run1("rms_norm_input_grad", {x, g, w}, dx, at);
  HostTensor rmsDg = run1("rms_norm_param_grad", {x, w}, vec, at);
  expectNear(rmsDx, rms[0], 0, 0, "rms_norm dx");
  expectNear(rmsDg, rms[1], 0, 0, "rms_norm dgamma");
}

TEST(KernelGrad, Embedding) {
  HostTensor table = randF({6, 3}, 19);
  for (DType dt : {DType::I32, DType::I64}) {
    HostTensor ids{dt, {2, 3}, {1, 4, 1, 0, 5, 1}}; // repeated ids accumulate
    HostTensor w = randF({2, 3, 3}, 20);
    HostTensor dt_ = run1("embedding_grad", {ids, w}, {DType::F32, {6, 3}});
    expectNear(dt_,
               finiteDiff("embedding", {table, ids}, 0, {DType::F32, {2, 3, 3}},
                          {}, w, 1e-2),
               1e-4, 1e-3);
    EXPECT_THROW(run1("embedding_grad",
                      {HostTensor{dt, {1}, {6}}, randF({1, 3}, 1)},
                      {DType::F32, {6, 3}}),
                 dtc::rt::Error);
  }
  EXPECT_NE(checkKernel("embedding_grad", {I32({2}, {0, 1}), randF({2, 4}, 1)},
                        {{DType::F32, {6, 3}}}, {}),
            "");
}

TEST(KernelGrad, Attention) {
  const Shape s{1, 2, 4, 3};
  HostTensor q = randF(s, 21), k = randF(s, 22), v = randF(s, 23),
             w = randF(s, 24);
  for (bool causal : {false, true}) {
    json at = {{"causal", causal}};
    auto outs =
        runKernel("attention_grad", {q, k, v, w},
                  {{DType::F32, s}, {DType::F32, s}, {DType::F32, s}}, at);
    const OutSpec o{DType::F32, s};
    expectNear(outs[0], finiteDiff("attention", {q, k, v}, 0, o, at, w, 1e-2),
               1e-3, 1e-2, "dq");
    expectNear(outs[1], finiteDiff("attention", {q, k, v}, 1, o, at, w, 1e-2),
               1e-3, 1e-2, "dk");
    expectNear(outs[2], finiteDiff("attention", {q, k, v}, 2, o, at, w, 1e-2),
               1e-3, 1e-2, "dv");
  }
}

TEST(KernelGrad, CrossEntropy) {
  HostTensor z = randF({3, 2, 5}, 25, -2, 2);
  HostTensor y = randInt(DType::I64, {3, 2}, 26, 5);
  const double dloss = 0.7;
  // scale = 1/positions reproduces the gradient of the mean.
  HostTensor dz = run1("cross_entropy_grad", {z, y, F({}, {dloss})},
                       {DType::F32, z.shape}, {{"scale", 1.0 / 6.0}});
  HostTensor fd = finiteDiff("cross_entropy", {z, y}, 0, {DType::F32, {}}, {},
                             F({}, {dloss}), 1e-2);
  expectNear(dz, fd, 2e-4, 1e-2);
  // A batch shard with the GLOBAL scale gets its share: scale 1/12 halves it.
  HostTensor half = run1("cross_entropy_grad", {z, y, F({}, {dloss})},
                         {DType::F32, z.shape}, {{"scale", 1.0 / 12.0}});
  for (int64_t i = 0; i < z.numel(); ++i)
    EXPECT_NEAR(half[i], dz[i] / 2, 1e-7);
}

} // namespace
