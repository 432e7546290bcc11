//===- GradCheckTest.cpp - every op's gradient vs central differences ----===//
//
// For each differentiable op: a tiny model whose loss is sum(op(...) * R)
// with R a random data input, compiled by the real pipeline with the `none`
// optimizer (the step returns the gradients), run in process by the CPU
// runtime, and compared with central finite differences of the same loss.
// This checks each op's gradient rule (compiler) and kernels (runtime)
// together.
//
//===----------------------------------------------------------------------===//
#include "dtc/Driver/Compile.h"
#include "dtc/runtime/LocalRunner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

struct GradCase {
  const char *name;
  /// Arguments of @main before the projection input %r (params and data).
  const char *args;
  /// Ops computing %out from the arguments.
  const char *body;
  /// Type of %out.
  const char *outType;
  /// Rank of %out.
  int outRank;
};

void PrintTo(const GradCase &c, std::ostream *os) { *os << c.name; }

std::string modelText(const GradCase &c) {
  std::string axes;
  for (int i = 0; i < c.outRank; ++i)
    axes += (i ? ", " : "") + std::to_string(i);
  // A data input needs a batch dimension, so a scalar output meets a [1].
  std::string projType = c.outRank == 0 ? "tensor<1xf32>" : c.outType;
  if (c.outRank == 0)
    axes = "0";
  return "func.func @main(" + std::string(c.args) + ", %r: " + projType +
         " {dtc.name = \"r\"}) -> tensor<f32> {\n" + c.body +
         "\n  %proj = \"dtc.mul\"(%out, %r) : (" + c.outType + ", " + projType +
         ") -> " + projType +
         "\n  %loss = \"dtc.reduce_sum\"(%proj) {axes = array<i64: " + axes +
         ">} : (" + projType +
         ") -> tensor<f32>\n  return %loss : tensor<f32>\n}\n";
}

class GradCheck : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradCheck, MatchesCentralDifferences) {
  const GradCase &c = GetParam();
  std::string source = modelText(c);
  dtc::CompileOptions options;
  options.optimizer = "none";
  nlohmann::json artifact;
  std::string error;
  ASSERT_TRUE(dtc::compileToArtifact(source, std::string(c.name) + ".mlir",
                                     options, artifact, error))
      << error << "\n"
      << source;
  auto run = dtc::rt::LocalRunner::loadJson(artifact, c.name, error);
  ASSERT_TRUE(run) << error;
  ASSERT_TRUE(run->initialize(/*seed=*/7, error)) << error;
  ASSERT_TRUE(run->fillSyntheticInputs(/*step=*/3, error)) << error;

  auto lossAt = [&]() {
    float loss = 0;
    EXPECT_TRUE(run->runStep(error)) << error;
    EXPECT_TRUE(run->loss(loss, error)) << error;
    return double(loss);
  };

  std::vector<std::string> params = run->tensorNames("param");
  ASSERT_FALSE(params.empty());
  int checked = 0;
  for (const std::string &param : params) {
    std::vector<float> values, grad;
    ASSERT_TRUE(run->getTensor(param, values, error)) << error;
    lossAt();
    ASSERT_TRUE(run->getTensor(param + ":grad", grad, error)) << error;
    ASSERT_EQ(grad.size(), values.size());
    // Up to 24 elements spread over the tensor.
    size_t stride = std::max<size_t>(1, values.size() / 24);
    for (size_t i = 0; i < values.size(); i += stride) {
      const double h = 2e-3 * std::max(1.0, std::fabs(double(values[i])));
      auto at = [&](double delta) {
        std::vector<float> moved = values;
        moved[i] = float(double(values[i]) + delta);
        EXPECT_TRUE(run->setTensor(param, moved, error)) << error;
        return lossAt();
      };
      double plus = at(h), minus = at(-h), center = at(0);
      double central = (plus - minus) / (2 * h);
      // A kink (relu, max) between x-h and x+h makes the one-sided slopes
      // disagree; central differences mean nothing there.
      double right = (plus - center) / h, left = (center - minus) / h;
      if (std::fabs(right - left) >
          0.05 * (std::fabs(right) + std::fabs(left)) + 0.05)
        continue;
      double analytic = grad[i];
      double tolerance =
          1e-2 * std::max(std::fabs(central), std::fabs(analytic)) +
          2e-3 * std::max(1.0, std::fabs(center));
      EXPECT_NEAR(analytic, central, tolerance)
          << c.name << ": d loss / d " << param << "[" << i << "]";
      ++checked;
    }
    ASSERT_TRUE(run->setTensor(param, values, error)) << error;
  }
  EXPECT_GT(checked, 0) << "no element was checked";
}

// Arguments for the cases: W is a parameter, X a data input.
#define W(name, type, init)                                                    \
  "%" name ": " type " {dtc.param, dtc.name = \"" name                         \
  "\", dtc.init = \"" init "\"}"
#define X(name, type) "%" name ": " type " {dtc.name = \"" name "\"}"
#define IDS(name, type, max)                                                   \
  "%" name ": " type " {dtc.name = \"" name "\", dtc.max = " max " : i64}"

const GradCase kCases[] = {
    {"add_broadcast",
     W("a", "tensor<3x4xf32>", "normal(1)") ", " W("b", "tensor<4xf32>",
                                                   "normal(1)"),
     "  %out = \"dtc.add\"(%a, %b) : (tensor<3x4xf32>, tensor<4xf32>) -> "
     "tensor<3x4xf32>",
     "tensor<3x4xf32>", 2},
    {"sub_broadcast",
     W("a", "tensor<3x1xf32>", "normal(1)") ", " W("b", "tensor<2x3x4xf32>",
                                                   "normal(1)"),
     "  %out = \"dtc.sub\"(%a, %b) : (tensor<3x1xf32>, tensor<2x3x4xf32>) -> "
     "tensor<2x3x4xf32>",
     "tensor<2x3x4xf32>", 3},
    {"mul_broadcast",
     W("a", "tensor<3x4xf32>", "normal(1)") ", " W("b", "tensor<f32>",
                                                   "normal(1)"),
     "  %out = \"dtc.mul\"(%a, %b) : (tensor<3x4xf32>, tensor<f32>) -> "
     "tensor<3x4xf32>",
     "tensor<3x4xf32>", 2},
    {"div",
     W("a", "tensor<3x4xf32>", "normal(1)") ", " W("b", "tensor<3x1xf32>",
                                                   "uniform(1,2)"),
     "  %out = \"dtc.div\"(%a, %b) : (tensor<3x4xf32>, tensor<3x1xf32>) -> "
     "tensor<3x4xf32>",
     "tensor<3x4xf32>", 2},
    {"max",
     W("a", "tensor<3x4xf32>", "normal(1)") ", " W("b", "tensor<4xf32>",
                                                   "normal(1)"),
     "  %out = \"dtc.max\"(%a, %b) : (tensor<3x4xf32>, tensor<4xf32>) -> "
     "tensor<3x4xf32>",
     "tensor<3x4xf32>", 2},
    {"neg", W("a", "tensor<5xf32>", "normal(1)"),
     "  %out = \"dtc.neg\"(%a) : (tensor<5xf32>) -> tensor<5xf32>",
     "tensor<5xf32>", 1},
    {"exp", W("a", "tensor<5xf32>", "normal(1)"),
     "  %out = \"dtc.exp\"(%a) : (tensor<5xf32>) -> tensor<5xf32>",
     "tensor<5xf32>", 1},
    {"log", W("a", "tensor<5xf32>", "uniform(0.5,3)"),
     "  %out = \"dtc.log\"(%a) : (tensor<5xf32>) -> tensor<5xf32>",
     "tensor<5xf32>", 1},
    {"tanh", W("a", "tensor<5xf32>", "normal(1)"),
     "  %out = \"dtc.tanh\"(%a) : (tensor<5xf32>) -> tensor<5xf32>",
     "tensor<5xf32>", 1},
    {"sqrt", W("a", "tensor<5xf32>", "uniform(0.5,3)"),
     "  %out = \"dtc.sqrt\"(%a) : (tensor<5xf32>) -> tensor<5xf32>",
     "tensor<5xf32>", 1},
    {"rsqrt", W("a", "tensor<5xf32>", "uniform(0.5,3)"),
     "  %out = \"dtc.rsqrt\"(%a) : (tensor<5xf32>) -> tensor<5xf32>",
     "tensor<5xf32>", 1},
    {"relu", W("a", "tensor<12xf32>", "normal(1)"),
     "  %out = \"dtc.relu\"(%a) : (tensor<12xf32>) -> tensor<12xf32>",
     "tensor<12xf32>", 1},
    {"gelu", W("a", "tensor<12xf32>", "normal(2)"),
     "  %out = \"dtc.gelu\"(%a) : (tensor<12xf32>) -> tensor<12xf32>",
     "tensor<12xf32>", 1},
    {"silu", W("a", "tensor<12xf32>", "normal(2)"),
     "  %out = \"dtc.silu\"(%a) : (tensor<12xf32>) -> tensor<12xf32>",
     "tensor<12xf32>", 1},
    {"matmul",
     W("a", "tensor<3x5xf32>", "normal(1)") ", " W("b", "tensor<5x4xf32>",
                                                   "normal(1)"),
     "  %out = \"dtc.matmul\"(%a, %b) : (tensor<3x5xf32>, tensor<5x4xf32>) -> "
     "tensor<3x4xf32>",
     "tensor<3x4xf32>", 2},
    {"matmul_shared_weight",
     W("a", "tensor<2x3x5xf32>", "normal(1)") ", " W("b", "tensor<5x4xf32>",
                                                     "normal(1)"),
     "  %out = \"dtc.matmul\"(%a, %b) : (tensor<2x3x5xf32>, tensor<5x4xf32>) "
     "-> tensor<2x3x4xf32>",
     "tensor<2x3x4xf32>", 3},
    {"matmul_batch_broadcast",
     W("a", "tensor<2x1x3x5xf32>", "normal(1)") ", " W("b", "tensor<3x5x4xf32>",
                                                       "normal(1)"),
     "  %out = \"dtc.matmul\"(%a, %b) : (tensor<2x1x3x5xf32>, "
     "tensor<3x5x4xf32>) -> tensor<2x3x3x4xf32>",
     "tensor<2x3x3x4xf32>", 4},
    {"softmax_last", W("a", "tensor<3x6xf32>", "normal(1)"),
     "  %out = \"dtc.softmax\"(%a) {axis = 1 : i64} : (tensor<3x6xf32>) -> "
     "tensor<3x6xf32>",
     "tensor<3x6xf32>", 2},
    {"softmax_first", W("a", "tensor<4x3xf32>", "normal(1)"),
     "  %out = \"dtc.softmax\"(%a) {axis = 0 : i64} : (tensor<4x3xf32>) -> "
     "tensor<4x3xf32>",
     "tensor<4x3xf32>", 2},
    {"layer_norm",
     W("x", "tensor<3x8xf32>", "normal(1)") ", " W(
         "g", "tensor<8xf32>", "normal(1)") ", " W("b", "tensor<8xf32>",
                                                   "normal(1)"),
     "  %out = \"dtc.layer_norm\"(%x, %g, %b) {epsilon = 1.0e-5 : f32} : "
     "(tensor<3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<3x8xf32>",
     "tensor<3x8xf32>", 2},
    {"rms_norm",
     W("x", "tensor<2x3x8xf32>", "normal(1)") ", " W("g", "tensor<8xf32>",
                                                     "normal(1)"),
     "  %out = \"dtc.rms_norm\"(%x, %g) {epsilon = 1.0e-5 : f32} : "
     "(tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>",
     "tensor<2x3x8xf32>", 3},
    // Norms whose input is an activation (computed from data): the
    // gradient splits into the input part (reaching `w` through x) and the
    // parameter part.
    {"layer_norm_split",
     X("d", "tensor<3x8xf32>") ", " W("w", "tensor<8xf32>", "normal(1)") ", " W(
         "g", "tensor<8xf32>", "normal(1)") ", " W("b", "tensor<8xf32>",
                                                   "normal(1)"),
     "  %x = \"dtc.mul\"(%d, %w) : (tensor<3x8xf32>, tensor<8xf32>) -> "
     "tensor<3x8xf32>\n"
     "  %out = \"dtc.layer_norm\"(%x, %g, %b) {epsilon = 1.0e-5 : f32} : "
     "(tensor<3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<3x8xf32>",
     "tensor<3x8xf32>", 2},
    {"rms_norm_split",
     X("d", "tensor<3x8xf32>") ", " W("w", "tensor<8xf32>", "normal(1)") ", " W(
         "g", "tensor<8xf32>", "normal(1)"),
     "  %x = \"dtc.mul\"(%d, %w) : (tensor<3x8xf32>, tensor<8xf32>) -> "
     "tensor<3x8xf32>\n"
     "  %out = \"dtc.rms_norm\"(%x, %g) {epsilon = 1.0e-5 : f32} : "
     "(tensor<3x8xf32>, tensor<8xf32>) -> tensor<3x8xf32>",
     "tensor<3x8xf32>", 2},
    {"embedding",
     W("t", "tensor<7x4xf32>", "normal(1)") ", " IDS("ids", "tensor<3x5xi32>",
                                                     "7"),
     "  %out = \"dtc.embedding\"(%t, %ids) : (tensor<7x4xf32>, "
     "tensor<3x5xi32>) -> tensor<3x5x4xf32>",
     "tensor<3x5x4xf32>", 3},
    {"attention_causal",
     W("q", "tensor<2x2x5x4xf32>", "normal(1)") ", " W(
         "k", "tensor<2x2x5x4xf32>",
         "normal(1)") ", " W("v", "tensor<2x2x5x4xf32>", "normal(1)"),
     "  %out = \"dtc.attention\"(%q, %k, %v) {causal = true} : "
     "(tensor<2x2x5x4xf32>, tensor<2x2x5x4xf32>, tensor<2x2x5x4xf32>) -> "
     "tensor<2x2x5x4xf32>",
     "tensor<2x2x5x4xf32>", 4},
    {"attention_full",
     W("q", "tensor<1x2x3x4xf32>", "normal(1)") ", " W(
         "k", "tensor<1x2x6x4xf32>",
         "normal(1)") ", " W("v", "tensor<1x2x6x4xf32>", "normal(1)"),
     "  %out = \"dtc.attention\"(%q, %k, %v) : (tensor<1x2x3x4xf32>, "
     "tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x3x4xf32>",
     "tensor<1x2x3x4xf32>", 4},
    {"cross_entropy",
     W("logits", "tensor<3x4x6xf32>",
       "normal(1)") ", " IDS("y", "tensor<3x4xi32>", "6"),
     "  %out = \"dtc.cross_entropy\"(%logits, %y) : (tensor<3x4x6xf32>, "
     "tensor<3x4xi32>) -> tensor<f32>",
     "tensor<f32>", 0},
    {"reduce_sum", W("a", "tensor<2x3x4xf32>", "normal(1)"),
     "  %out = \"dtc.reduce_sum\"(%a) {axes = array<i64: 0, 2>} : "
     "(tensor<2x3x4xf32>) -> tensor<3xf32>",
     "tensor<3xf32>", 1},
    {"reduce_sum_keep", W("a", "tensor<2x3x4xf32>", "normal(1)"),
     "  %out = \"dtc.reduce_sum\"(%a) {axes = array<i64: 1>, keep_dims = true} "
     ": (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>",
     "tensor<2x1x4xf32>", 3},
    {"reduce_mean", W("a", "tensor<2x3x4xf32>", "normal(1)"),
     "  %out = \"dtc.reduce_mean\"(%a) {axes = array<i64: 1, 2>} : "
     "(tensor<2x3x4xf32>) -> tensor<2xf32>",
     "tensor<2xf32>", 1},
    {"reshape", W("a", "tensor<2x6xf32>", "normal(1)"),
     "  %out = \"dtc.reshape\"(%a) : (tensor<2x6xf32>) -> tensor<3x4xf32>",
     "tensor<3x4xf32>", 2},
    {"transpose", W("a", "tensor<2x3x4xf32>", "normal(1)"),
     "  %out = \"dtc.transpose\"(%a) {permutation = array<i64: 2, 0, 1>} : "
     "(tensor<2x3x4xf32>) -> tensor<4x2x3xf32>",
     "tensor<4x2x3xf32>", 3},
    {"cast", W("a", "tensor<5xf32>", "normal(1)"),
     "  %out = \"dtc.cast\"(%a) : (tensor<5xf32>) -> tensor<5xf32>",
     "tensor<5xf32>", 1},
    {"broadcast", W("a", "tensor<3x1xf32>", "normal(1)"),
     "  %out = \"dtc.broadcast\"(%a) : (tensor<3x1xf32>) -> tensor<2x3x4xf32>",
     "tensor<2x3x4xf32>", 3},
    // Composite: a transformer-style block mixing the rules above, with a
    // parameter used twice (its gradients accumulate).
    {"composite_block",
     W("x", "tensor<2x4x8xf32>",
       "normal(1)") ", " W("w", "tensor<8x8xf32>",
                           "normal(0.3)") ", " W("g", "tensor<8xf32>", "ones"),
     "  %n = \"dtc.rms_norm\"(%x, %g) {epsilon = 1.0e-5 : f32} : "
     "(tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>\n"
     "  %h = \"dtc.matmul\"(%n, %w) : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> "
     "tensor<2x4x8xf32>\n"
     "  %s = \"dtc.silu\"(%h) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>\n"
     "  %h2 = \"dtc.matmul\"(%s, %w) : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> "
     "tensor<2x4x8xf32>\n"
     "  %out = \"dtc.add\"(%x, %h2) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) "
     "-> tensor<2x4x8xf32>",
     "tensor<2x4x8xf32>", 3},
};

INSTANTIATE_TEST_SUITE_P(EveryOp, GradCheck, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<GradCase> &info) {
                           return std::string(info.param.name);
                         });

} // namespace
