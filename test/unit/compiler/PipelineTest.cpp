//===- PipelineTest.cpp - pipelines compiled and run in process -----------===//
//
// What the allocator of each rank measures while a pipeline runs: GPipe's
// first stage keeps every micro-batch's activations until its backwards
// start, 1F1B's at most as many as there are stages; zero bubble as many
// as 1F1B's first stage. The numbers come from the runtime's copies of
// micro-batch slots (taken at a forward, given back after the last
// backward part), not from the compiler's plan.
//
//===----------------------------------------------------------------------===//
#include "dtc/Driver/Compile.h"
#include "dtc/runtime/LocalRunner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <tuple>

namespace {

std::string generate(const std::string &args) {
  std::string command = "python3 " DTC_EXAMPLES_DIR "/gen_model.py " + args;
  std::string text;
  FILE *pipe = popen(command.c_str(), "r");
  if (!pipe)
    return "";
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0)
    text.append(buffer, n);
  return pclose(pipe) == 0 ? text : "";
}

struct Measured {
  std::vector<int> stage, microbatches;
  std::vector<uint64_t> bytes;
  std::vector<float> losses;
};

Measured runPlan(const std::string &model, int stages, int microbatches,
                 const std::string &schedule) {
  dtc::CompileOptions o;
  o.mesh = {stages};
  o.autoPlan = false;
  o.dp = 1;
  o.pp = stages;
  o.microbatches = microbatches;
  o.schedule = schedule;
  nlohmann::json artifact;
  std::string error;
  Measured m;
  EXPECT_TRUE(dtc::compileToArtifact(model, "gpt.mlir", o, artifact, error))
      << error;
  auto run = dtc::rt::LocalRunner::loadJson(artifact, schedule, error);
  EXPECT_TRUE(run) << error;
  if (!run)
    return m;
  EXPECT_TRUE(run->initialize(5, error)) << error;
  EXPECT_TRUE(run->train(2, m.losses, error)) << error;
  dtc::rt::LocalRunStats stats = run->stats();
  m.stage = stats.stageOfRank;
  m.microbatches = stats.microbatchesPeak;
  m.bytes = stats.activationPeakBytes;
  return m;
}

TEST(Pipeline, ActivationMemoryGPipeHoldsEveryMicrobatch1F1BAtMostTheStages) {
  std::string model = generate(
      "gpt --layers 8 --hidden 16 --heads 2 --seq 8 --vocab 32 --batch 16");
  ASSERT_FALSE(model.empty());
  const int M = 8;
  for (int P : {2, 4}) {
    SCOPED_TRACE("pp=" + std::to_string(P));
    Measured gpipe = runPlan(model, P, M, "gpipe");
    Measured oneF = runPlan(model, P, M, "1f1b");
    Measured zb = runPlan(model, P, M, "zb");
    ASSERT_EQ(gpipe.stage.size(), size_t(P));
    for (int r = 0; r < P; ++r) {
      int d = oneF.stage[size_t(r)];
      EXPECT_EQ(gpipe.microbatches[size_t(r)], M) << "stage " << d;
      EXPECT_EQ(oneF.microbatches[size_t(r)], P - d) << "stage " << d;
      EXPECT_EQ(zb.microbatches[size_t(r)], P) << "stage " << d;
    }
    // Stage 0 (rank 0): the bytes follow the copies held.
    EXPECT_EQ(gpipe.stage[0], 0);
    EXPECT_GT(gpipe.bytes[0], oneF.bytes[0]);
    std::cout << "pp=" << P << " M=" << M << " stage 0 peak activations: gpipe "
              << gpipe.bytes[0] << " bytes (" << gpipe.microbatches[0]
              << " micro-batches), 1f1b " << oneF.bytes[0] << " bytes ("
              << oneF.microbatches[0] << "), zb " << zb.bytes[0] << " bytes ("
              << zb.microbatches[0] << ")\n";
    // The same numbers either way.
    for (size_t i = 0; i < gpipe.losses.size(); ++i) {
      EXPECT_NEAR(gpipe.losses[i], oneF.losses[i],
                  1e-6 * std::abs(oneF.losses[i]));
      EXPECT_NEAR(zb.losses[i], oneF.losses[i],
                  1e-6 * std::abs(oneF.losses[i]));
    }
  }
}

// The gradients themselves (the `none` optimizer returns them): summed over
// micro-batches and across the stages holding the tied embedding, they are
// one device's.
TEST(Pipeline, GradientsEqualOneDevice) {
  for (const char *kind : {"gpt", "llama"}) {
    SCOPED_TRACE(kind);
    std::string model = generate(
        std::string(kind) +
        " --layers 4 --hidden 16 --heads 2 --seq 8 --vocab 32 --batch 8");
    ASSERT_FALSE(model.empty());
    // tp > 1: tensor parallelism inside every stage (mesh stages x tp).
    auto gradients = [&](int stages, int microbatches,
                         const std::string &schedule, int tp = 1) {
      dtc::CompileOptions o;
      o.optimizer = "none";
      o.mesh = tp > 1 ? std::vector<int64_t>{stages, tp}
                      : std::vector<int64_t>{stages};
      o.autoPlan = false;
      o.dp = 1;
      o.tp = tp;
      o.pp = stages;
      o.microbatches = microbatches;
      o.schedule = schedule;
      nlohmann::json artifact;
      std::string error;
      std::map<std::string, std::vector<float>> out;
      EXPECT_TRUE(dtc::compileToArtifact(model, "gpt.mlir", o, artifact, error))
          << error;
      auto run = dtc::rt::LocalRunner::loadJson(artifact, "gpt", error);
      EXPECT_TRUE(run) << error;
      if (!run)
        return out;
      EXPECT_TRUE(run->initialize(9, error)) << error;
      EXPECT_TRUE(run->fillSyntheticInputs(0, error)) << error;
      EXPECT_TRUE(run->runStep(error)) << error;
      for (const std::string &param : run->tensorNames("param"))
        EXPECT_TRUE(run->getTensor(param + ":grad", out[param], error))
            << error;
      return out;
    };
    auto reference = gradients(1, 1, "1f1b");
    // GPT: wte, wpe, 10 per block, ln_f weight and bias; LLaMA: the embedding,
    // 9 per block, the final norm and the head.
    ASSERT_EQ(reference.size(), std::string(kind) == "gpt" ? 44u : 39u);
    for (auto [stages, microbatches, schedule, tp] :
         {std::tuple{1, 4, "1f1b", 1}, std::tuple{2, 4, "zb", 1},
          std::tuple{4, 2, "gpipe", 1}, std::tuple{2, 2, "1f1b", 2}}) {
      SCOPED_TRACE(std::to_string(stages) + " stages, " +
                   std::to_string(microbatches) + " micro-batches, " +
                   schedule + ", tp=" + std::to_string(tp));
      auto got = gradients(stages, microbatches, schedule, tp);
      ASSERT_EQ(got.size(), reference.size());
      for (const auto &[name, want] : reference) {
        const std::vector<float> &g = got[name];
        ASSERT_EQ(g.size(), want.size()) << name;
        double diff = 0, norm = 0;
        for (size_t i = 0; i < g.size(); ++i) {
          diff += (double(g[i]) - want[i]) * (double(g[i]) - want[i]);
          norm += double(want[i]) * want[i];
        }
        EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm) + 1e-9) << name;
      }
    }
  }
}

TEST(Pipeline, CompileErrorsAreOneLine) {
  std::string model = generate(
      "gpt --layers 1 --hidden 16 --heads 2 --seq 8 --vocab 32 --batch 8");
  ASSERT_FALSE(model.empty());
  dtc::CompileOptions o;
  o.autoPlan = false;
  o.mesh = {8};
  o.dp = 1;
  o.pp = 8;
  nlohmann::json artifact;
  std::string error;
  // One block: embedding, position, two sublayers, final norm, head.
  EXPECT_FALSE(dtc::compileToArtifact(model, "gpt.mlir", o, artifact, error));
  EXPECT_NE(error.find("the model has 6 layers but pp=8 needs at least 8"),
            std::string::npos)
      << error;
  o.mesh = {2};
  o.pp = 2;
  o.microbatches = 3;
  o.schedule = "interleaved";
  o.virtualStages = 2;
  EXPECT_FALSE(dtc::compileToArtifact(model, "gpt.mlir", o, artifact, error));
  EXPECT_NE(error.find("multiple of the pipeline stages"), std::string::npos)
      << error;
}

} // namespace
