//===- CausalityTest.cpp - a language model's losses do not see the future ===//
//
// A two-layer causal language model whose loss is the sum of per-position
// cross entropies weighted by a data input `mask` [B, S]: with a one-hot
// mask, one run gives the loss of one (row, position). Compiled by the real
// pipeline (the `none` optimizer, so parameters stay put) and run by the CPU
// runtime on one device and on two (data parallel, as threads):
//   - changing the token ids after position t leaves the losses of every
//     position <= t unchanged, and changes some later one (so the check can
//     fail);
//   - changing one row's ids leaves every other row's losses unchanged.
//
//===----------------------------------------------------------------------===//
#include "dtc/Driver/Compile.h"
#include "dtc/runtime/LocalRunner.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kB = 2, kS = 8, kV = 16;

std::string identity() {
  std::string rows;
  for (int i = 0; i < kV; ++i) {
    rows += i ? ", [" : "[";
    for (int j = 0; j < kV; ++j)
      rows += std::string(j ? ", " : "") + (i == j ? "1.0" : "0.0");
    rows += "]";
  }
  return "dense<[" + rows + "]>";
}

std::string layer(int l, const std::string &x) {
  std::string L = std::to_string(l), p = "%l" + L + "_";
  auto proj = [&](const std::string &w, const std::string &out) {
    return "  " + p + out + "0 = \"dtc.matmul\"(" + x + ", %" + w + L +
           ") : (tensor<2x8x8xf32>, tensor<8x8xf32>) -> tensor<2x8x8xf32>\n  " +
           p + out + "1 = \"dtc.reshape\"(" + p + out +
           "0) : (tensor<2x8x8xf32>) -> tensor<2x8x2x4xf32>\n  " + p + out +
           " = \"dtc.transpose\"(" + p + out +
           "1) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x4xf32>) "
           "-> tensor<2x2x8x4xf32>\n";
  };
  return proj("wq", "q") + proj("wk", "k") + proj("wv", "v") + "  " + p +
         "a = \"dtc.attention\"(" + p + "q, " + p + "k, " + p +
         "v) {causal = true} : (tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>, "
         "tensor<2x2x8x4xf32>) -> tensor<2x2x8x4xf32>\n"
         "  " +
         p + "t = \"dtc.transpose\"(" + p +
         "a) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x8x4xf32>) -> "
         "tensor<2x8x2x4xf32>\n"
         "  " +
         p + "r = \"dtc.reshape\"(" + p +
         "t) : (tensor<2x8x2x4xf32>) -> tensor<2x8x8xf32>\n"
         "  " +
         p + "n = \"dtc.rms_norm\"(" + p + "r, %g" + L +
         ") {epsilon = 1.0e-5 : f32} : (tensor<2x8x8xf32>, tensor<8xf32>) -> "
         "tensor<2x8x8xf32>\n"
         "  " +
         p + "out = \"dtc.add\"(" + x + ", " + p +
         "n) : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>\n";
}

std::string modelText() {
  std::string params;
  for (int l = 0; l < 2; ++l)
    for (const char *w : {"wq", "wk", "wv"})
      params += std::string(",\n    %") + w + std::to_string(l) +
                ": tensor<8x8xf32> {dtc.param, dtc.name = \"" + w +
                std::to_string(l) + "\", dtc.init = \"normal(0.6)\"}";
  for (int l = 0; l < 2; ++l)
    params += ",\n    %g" + std::to_string(l) +
              ": tensor<8xf32> {dtc.param, dtc.name = \"g" + std::to_string(l) +
              "\", dtc.init = \"ones\"}";
  return "func.func @main(%ids: tensor<2x8xi32> {dtc.name = \"ids\", dtc.max = "
         "16 : i64},\n"
         "    %labels: tensor<2x8xi32> {dtc.name = \"labels\", dtc.max = 16 : "
         "i64},\n"
         "    %mask: tensor<2x8xf32> {dtc.name = \"mask\"},\n"
         "    %wte: tensor<16x8xf32> {dtc.param, dtc.name = \"wte\", dtc.init "
         "= \"normal(1)\"},\n"
         "    %head: tensor<8x16xf32> {dtc.param, dtc.name = \"head\", "
         "dtc.init = \"normal(0.5)\"}" +
         params +
         ") -> tensor<f32> {\n"
         "  %e = \"dtc.embedding\"(%wte, %ids) : (tensor<16x8xf32>, "
         "tensor<2x8xi32>) -> tensor<2x8x8xf32>\n" +
         layer(0, "%e") + layer(1, "%l0_out") +
         "  %logits = \"dtc.matmul\"(%l1_out, %head) : (tensor<2x8x8xf32>, "
         "tensor<8x16xf32>) -> tensor<2x8x16xf32>\n"
         "  %p = \"dtc.softmax\"(%logits) {axis = 2 : i64} : "
         "(tensor<2x8x16xf32>) -> tensor<2x8x16xf32>\n"
         "  %lp = \"dtc.log\"(%p) : (tensor<2x8x16xf32>) -> "
         "tensor<2x8x16xf32>\n"
         "  %eye = arith.constant " +
         identity() +
         " : tensor<16x16xf32>\n"
         "  %onehot = \"dtc.embedding\"(%eye, %labels) : (tensor<16x16xf32>, "
         "tensor<2x8xi32>) -> tensor<2x8x16xf32>\n"
         "  %picked = \"dtc.mul\"(%onehot, %lp) : (tensor<2x8x16xf32>, "
         "tensor<2x8x16xf32>) -> tensor<2x8x16xf32>\n"
         "  %nll = \"dtc.reduce_sum\"(%picked) {axes = array<i64: 2>} : "
         "(tensor<2x8x16xf32>) -> tensor<2x8xf32>\n"
         "  %masked = \"dtc.mul\"(%nll, %mask) : (tensor<2x8xf32>, "
         "tensor<2x8xf32>) -> tensor<2x8xf32>\n"
         "  %total = \"dtc.reduce_sum\"(%masked) {axes = array<i64: 0, 1>} : "
         "(tensor<2x8xf32>) -> tensor<f32>\n"
         "  %loss = \"dtc.neg\"(%total) : (tensor<f32>) -> tensor<f32>\n"
         "  return %loss : tensor<f32>\n}\n";
}

class Causality : public ::testing::TestWithParam<int64_t> {
protected:
  void SetUp() override {
    dtc::CompileOptions options;
    options.optimizer = "none";
    options.mesh = {GetParam()};
    nlohmann::json artifact;
    std::string error;
    ASSERT_TRUE(dtc::compileToArtifact(modelText(), "causal_lm.mlir", options,
                                       artifact, error))
        << error << "\n"
        << modelText();
    run = dtc::rt::LocalRunner::loadJson(artifact, "causal_lm", error);
    ASSERT_TRUE(run) << error;
    ASSERT_TRUE(run->initialize(/*seed=*/5, error)) << error;
    std::mt19937 gen(17);
    ids.resize(kB * kS);
    labels.resize(kB * kS);
    for (int i = 0; i < kB * kS; ++i) {
      ids[i] = int32_t(gen() % kV);
      labels[i] = int32_t(gen() % kV);
    }
  }

  /// The loss of every (row, position), one run each.
  std::vector<float> perPositionLosses(const std::vector<int32_t> &tokens) {
    std::string error;
    std::vector<float> out;
    EXPECT_TRUE(run->setTensor("ids", tokens, error)) << error;
    EXPECT_TRUE(run->setTensor("labels", labels, error)) << error;
    for (int i = 0; i < kB * kS; ++i) {
      std::vector<float> mask(kB * kS, 0.0f);
      mask[i] = 1.0f;
      float loss = NAN;
      EXPECT_TRUE(run->setTensor("mask", mask, error)) << error;
      EXPECT_TRUE(run->runStep(error)) << error;
      EXPECT_TRUE(run->loss(loss, error)) << error;
      EXPECT_TRUE(std::isfinite(loss))
          << "row " << i / kS << " position " << i % kS;
      out.push_back(loss);
    }
    return out;
  }

  std::unique_ptr<dtc::rt::LocalRunner> run;
  std::vector<int32_t> ids, labels;
};

// Equal up to a few roundings: a causal computation of position t reads
// nothing after t, so in practice the numbers are identical.
bool same(float a, float b) {
  return std::fabs(a - b) <= 8 * FLT_EPSILON * std::fabs(a);
}

TEST_P(Causality, FutureTokensDoNotChangeEarlierLosses) {
  const std::vector<float> base = perPositionLosses(ids);
  for (int t : {0, 2, 5}) {
    std::vector<int32_t> changed = ids;
    for (int r = 0; r < kB; ++r)
      for (int s = t + 1; s < kS; ++s)
        changed[r * kS + s] = (ids[r * kS + s] + 1 + s) % kV;
    const std::vector<float> after = perPositionLosses(changed);
    int moved = 0;
    for (int r = 0; r < kB; ++r)
      for (int s = 0; s < kS; ++s) {
        const int i = r * kS + s;
        if (s <= t)
          EXPECT_TRUE(same(after[i], base[i]))
              << "row " << r << " position " << s << ": ids after position "
              << t << " changed its loss from " << base[i] << " to "
              << after[i];
        else
          moved += !same(after[i], base[i]);
      }
    EXPECT_GT(moved, 0) << "changing ids after position " << t
                        << " changed no later loss";
  }
}

TEST_P(Causality, RowsDoNotSeeEachOther) {
  const std::vector<float> base = perPositionLosses(ids);
  std::vector<int32_t> changed = ids;
  for (int s = 0; s < kS; ++s)
    changed[s] = (ids[s] + 3) % kV; // row 0 only
  const std::vector<float> after = perPositionLosses(changed);
  for (int s = 0; s < kS; ++s)
    EXPECT_TRUE(same(after[kS + s], base[kS + s])) << "row 1 position " << s;
  int moved = 0;
  for (int s = 0; s < kS; ++s)
    moved += !same(after[s], base[s]);
  EXPECT_EQ(moved, kS);
}

INSTANTIATE_TEST_SUITE_P(Meshes, Causality, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int64_t> &info) {
                           return "mesh" + std::to_string(info.param);
                         });

} // namespace
