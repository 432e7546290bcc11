//===- MemoryPlanTest.cpp - planned memory vs. the counting allocator
//------===//
//
// The peak a rank's plan predicts (MemoryPlan.h, what dtc compile checks
// against the device budget) equals what the executor's counting allocator
// measures, per memory kind, for artifacts that use every collective and
// the kernels with scratch; sizes parse as documented; "did you mean".
//
//===----------------------------------------------------------------------===//
#include "TestArtifacts.h"

#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/kernels/Kernel.h"
#include "dtc/runtime/LocalRunner.h"
#include "dtc/runtime/MemoryPlan.h"
#include "dtc/runtime/Suggest.h"

#include <gtest/gtest.h>

using namespace dtc::rt;
using dtc::test::json;

namespace {

void expectPlanMatchesMeasured(const json &body, const char *what,
                               int threads = 1) {
  std::vector<MemoryNeed> needs;
  std::string err;
  ASSERT_TRUE(artifactMemoryNeeds(
      body, "m.dtc", threads, dtc::kernels::cpu::workspaceModel(), needs, err))
      << err;
  LocalRunnerOptions options;
  options.threads = threads;
  auto r = LocalRunner::loadBytes(encodeArtifact(body), "m.dtc", err, options);
  ASSERT_TRUE(r) << err;
  ASSERT_TRUE(r->initialize(1, err)) << err;
  std::vector<float> losses;
  ASSERT_TRUE(r->train(2, losses, err)) << err;
  LocalRunStats s = r->stats();
  uint64_t peak = 0;
  for (int k = 0; k < kNumMemKinds; ++k) {
    uint64_t planned = 0;
    for (const MemoryNeed &n : needs)
      planned = std::max(planned, n.bytes[k]);
    EXPECT_EQ(s.memoryBytes[memKindName(k)], planned)
        << what << ": " << memKindName(k);
  }
  for (const MemoryNeed &n : needs)
    peak = std::max(peak, n.peak);
  EXPECT_EQ(s.memoryBytes["total"], peak) << what;
}

TEST(MemoryPlan, PlannedPeakIsMeasuredPeak) {
  // all_gather and reduce_scatter off axis 0 and all_to_all stage through
  // workspace; attention and reduce take kernel scratch.
  expectPlanMatchesMeasured(dtc::test::collectivesArtifact(), "collectives");
  dtc::test::LmConfig lm;
  lm.mesh = {2};
  expectPlanMatchesMeasured(dtc::test::lmArtifact(lm), "lm");
  dtc::test::MlpConfig mlp;
  mlp.mesh = {2, 2};
  mlp.dpAxes = {0};
  mlp.tpAxis = 1;
  expectPlanMatchesMeasured(dtc::test::mlpArtifact(mlp), "mlp dp x tp");
  // The fused attention's tiles and layer_norm's rows are per thread.
  dtc::test::LmConfig wide;
  wide.seq = 80; // two row blocks of the attention
  expectPlanMatchesMeasured(dtc::test::lmArtifact(wide), "lm, 1 thread", 1);
  expectPlanMatchesMeasured(dtc::test::lmArtifact(wide), "lm, 3 threads", 3);
}

// Per kernel: what scratchBytes and contextWorkspaceBytes state is what one
// call of the CPU kernel takes (counted ScratchVector allocations, the
// context's workspace), with 1, 2 and 5 threads.
TEST(MemoryPlan, KernelScratchIsWhatTheKernelTakes) {
  using dtc::kernels::TensorDesc;
  struct Case {
    const char *name;
    std::vector<Shape> in, out;
    json attrs;
  };
  const json eps = {{"epsilon", 1e-5}};
  const std::vector<Case> cases = {
      {"attention",
       {{2, 3, 130, 8}, {2, 3, 70, 8}, {2, 3, 70, 8}},
       {{2, 3, 130, 8}},
       {{"causal", false}}},
      {"attention_grad",
       {{1, 2, 70, 16}, {1, 2, 70, 16}, {1, 2, 70, 16}, {1, 2, 70, 16}},
       {{1, 2, 70, 16}, {1, 2, 70, 16}, {1, 2, 70, 16}},
       {{"causal", true}}},
      {"layer_norm_grad",
       {{100, 24}, {24}, {100, 24}},
       {{100, 24}, {24}, {24}},
       eps},
      {"layer_norm_input_grad", {{100, 24}, {24}, {100, 24}}, {{100, 24}}, eps},
      {"layer_norm_param_grad", {{100, 24}, {100, 24}}, {{24}, {24}}, eps},
      {"rms_norm_grad", {{70, 24}, {24}, {70, 24}}, {{70, 24}, {24}}, eps},
      {"rms_norm_input_grad", {{70, 24}, {24}, {70, 24}}, {{70, 24}}, eps},
      {"rms_norm_param_grad", {{70, 24}, {70, 24}}, {{24}}, eps},
      {"reduce_sum",
       {{6, 5, 4}},
       {{6, 1, 4}},
       {{"axes", {1}}, {"keep_dims", true}}},
      {"matmul", {{3, 2, 4, 5}, {2, 5, 6}}, {{3, 2, 4, 6}}, json::object()},
      {"matmul", {{3, 4, 5}, {5, 6}}, {{3, 4, 6}}, json::object()},
      // A tall a^T b: computed transposed in scratch.
      {"matmul", {{40, 1100}, {40, 70}}, {{1100, 70}}, {{"transpose_a", true}}},
      {"matmul",
       {{40, 1100}, {40, 600}},
       {{1100, 600}},
       {{"transpose_a", true}}},
      {"matmul_gelu",
       {{3, 2, 4, 5}, {2, 5, 6}, {6}},
       {{3, 2, 4, 6}, {3, 2, 4, 6}},
       json::object()},
      {"matmul_bias",
       {{40, 1100}, {40, 70}, {70}},
       {{1100, 70}},
       {{"transpose_a", true}}},
  };
  struct Meter final : dtc::kernels::ScratchCounter {
    uint64_t now = 0, peak = 0;
    void allocated(size_t b) override { peak = std::max(peak, now += b); }
    void released(size_t b) override { now -= b; }
  };
  for (const Case &c : cases)
    for (int threads : {1, 2, 5}) {
      const std::string what =
          std::string(c.name) + " on " + std::to_string(threads) + " threads";
      std::vector<TensorDesc> in, out;
      std::vector<std::vector<float>> data;
      data.reserve(c.in.size() + c.out.size());
      dtc::kernels::KernelArgs args;
      for (const Shape &s : c.in) {
        in.push_back({DType::F32, s});
        data.emplace_back(size_t(numel(s)), 0.5f);
        args.in.push_back({DType::F32, s, data.back().data(), numel(s)});
      }
      for (const Shape &s : c.out) {
        out.push_back({DType::F32, s});
        data.emplace_back(size_t(numel(s)), 0.0f);
        args.out.push_back({DType::F32, s, data.back().data(), numel(s)});
      }
      // data never reallocates after the pointers were taken: reserve first.
      ASSERT_NO_THROW(dtc::kernels::findKernel(c.name)->check(in, out, c.attrs))
          << what;
      dtc::kernels::KernelContext ctx(threads);
      args.ctx = &ctx;
      args.attrs = &c.attrs;
      Meter meter;
      auto *previous = dtc::kernels::setThreadScratchCounter(&meter);
      dtc::kernels::cpu::findKernel(c.name)(args);
      dtc::kernels::setThreadScratchCounter(previous);
      EXPECT_EQ(meter.peak,
                dtc::kernels::scratchBytes(c.name, in, out, c.attrs, threads))
          << what;
      EXPECT_EQ(uint64_t(ctx.workspaceFloats()) * 4,
                dtc::kernels::cpu::contextWorkspaceBytes(c.name, in, out,
                                                         c.attrs, threads))
          << what;
    }
}

// Each collective alone, so the staging is that collective's: a packing
// buffer for all_gather/reduce_scatter off the outermost dimension and for
// all_to_all, ring scratch for all_reduce and reduce_scatter; only the
// all_gather along dimension 0, the all_slice and the shifts (straight from
// input to output) need none.
TEST(MemoryPlan, EachCollectivesStagingIsMeasured) {
  const json full = dtc::test::collectivesArtifact();
  const json &instructions = full["programs"][0]["instructions"];
  std::vector<std::string> unstaged;
  for (size_t i = 0; i < instructions.size(); ++i) {
    CollKind kind;
    if (!parseCollKind(instructions[i]["op"].get<std::string>(), kind))
      continue;
    json one = full;
    one["programs"][0]["instructions"] = json::array({instructions[i]});
    std::vector<MemoryNeed> needs;
    std::string err;
    ASSERT_TRUE(artifactMemoryNeeds(
        one, "one.dtc", 1, dtc::kernels::cpu::workspaceModel(), needs, err))
        << err;
    if (needs[0].bytes[kStagingKind] == 0)
      unstaged.push_back(
          instructions[i]["op"].get<std::string>() + " " +
          instructions[i]["attrs"].value("axis", json(-1)).dump());
    expectPlanMatchesMeasured(one, instructions[i].dump().c_str());
  }
  EXPECT_EQ(unstaged, (std::vector<std::string>{"all_gather 0", "all_slice 0",
                                                "shift -1", "shift -1"}));
}

TEST(MemoryPlan, WorkspaceIsTheLargestScratch) {
  std::vector<MemoryNeed> needs;
  std::string err;
  dtc::test::LmConfig lm;
  lm.seq = 8;
  ASSERT_TRUE(artifactMemoryNeeds(dtc::test::lmArtifact(lm), "lm.dtc", 1,
                                  dtc::kernels::cpu::workspaceModel(), needs,
                                  err))
      << err;
  ASSERT_EQ(needs.size(), 1u);
  // The attention's tiles (no seq x seq scores: two 64 x 128 tiles, 64 rows
  // of the head and three 64-row vectors, f32, on one thread) plus the
  // largest temporaries of one call.
  const uint64_t tiles = (2 * 64 * 128 + 64 * 16 + 3 * 64) * 4;
  EXPECT_GE(needs[0].bytes[kWorkspaceKind], tiles);
  EXPECT_LT(needs[0].bytes[kWorkspaceKind], tiles + 4096);
  EXPECT_GE(needs[0].workspaceInstruction, 0);
  uint64_t sum = 0;
  for (uint64_t b : needs[0].bytes)
    sum += b;
  EXPECT_EQ(needs[0].peak, sum);
  EXPECT_EQ(slotAllocationBytes(1), 128u);
  EXPECT_EQ(slotAllocationBytes(64), 128u);
  EXPECT_EQ(slotAllocationBytes(65), 192u);
}

TEST(MemoryPlan, InvalidArtifactIsAnError) {
  json body = dtc::test::collectivesArtifact();
  body["programs"][0]["instructions"][0]["op"] = "conv2d";
  std::vector<MemoryNeed> needs;
  std::string err;
  EXPECT_FALSE(artifactMemoryNeeds(
      body, "bad.dtc", 1, dtc::kernels::cpu::workspaceModel(), needs, err));
  EXPECT_NE(err.find("bad.dtc: "), std::string::npos) << err;
}

TEST(MemoryPlan, ParseByteSize) {
  auto parse = [](const char *text) {
    uint64_t v = 0;
    return parseByteSize(text, v) ? v : 0;
  };
  EXPECT_EQ(parse("1000000"), 1000000u);
  EXPECT_EQ(parse("80GiB"), 80ull << 30);
  EXPECT_EQ(parse("80gib"), 80ull << 30);
  EXPECT_EQ(parse("80Gi"), 80ull << 30);
  EXPECT_EQ(parse("16G"), 16000000000ull);
  EXPECT_EQ(parse("16GB"), 16000000000ull);
  EXPECT_EQ(parse("512MiB"), 512ull << 20);
  EXPECT_EQ(parse("2K"), 2000u);
  EXPECT_EQ(parse("2KiB"), 2048u);
  EXPECT_EQ(parse("1.5GiB"), 3ull << 29);
  EXPECT_EQ(parse("3T"), 3000000000000ull);
  EXPECT_EQ(parse("1TiB"), 1ull << 40);
  EXPECT_EQ(parse("100B"), 100u);
  for (const char *bad : {"", "0", "GiB", "-1", "1e9", "1.3", "80 GiB", "80XB",
                          "1.2.3", "80GiBs", "9999999999TiB", "."})
    EXPECT_EQ(parse(bad), 0u) << bad;
}

TEST(MemoryPlan, FormatBytes) {
  EXPECT_EQ(formatBytes(100), "100 B");
  EXPECT_EQ(formatBytes(1536), "1.50 KiB");
  EXPECT_EQ(formatBytes(uint64_t(80) << 30), "80.00 GiB");
}

TEST(Suggest, ClosestNameWithinATypo) {
  using dtc::closestMatch;
  const std::vector<std::string> flags = {"--steps", "--seed", "--save",
                                          "--stats", "--data"};
  EXPECT_EQ(closestMatch("--stpes", flags),
            "--steps"); // swapped letters: one edit
  EXPECT_EQ(closestMatch("--step", flags), "--steps");
  EXPECT_EQ(closestMatch("--seeds", flags), "--seed");
  EXPECT_EQ(closestMatch("--frobnicate", flags), "");
  EXPECT_EQ(closestMatch("casual", {"causal"}), "causal");
  EXPECT_EQ(closestMatch("keepdims", {"axes", "keep_dims"}), "keep_dims");
  EXPECT_EQ(closestMatch("eps", {"epsilon"}), "");
  EXPECT_EQ(dtc::didYouMean("--dat", flags), "; did you mean '--data'?");
  EXPECT_EQ(dtc::didYouMean("--zzz", flags), "");
  EXPECT_EQ(dtc::editDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(dtc::editDistance("", "abc"), 3u);
  EXPECT_EQ(dtc::editDistance("ab", "ba"), 1u);
}

} // namespace
