//===- CostModelTest.cpp - collective bytes and times
//-----------------------===//
//
// The byte counts the report and the resharding planner use are the
// runtime's algorithms (checked against its counters in test/e2e), and they
// reduce to the textbook ring formulas when sizes divide.
//
//===----------------------------------------------------------------------===//
#include "dtc/CostModel/CostModel.h"
#include "dtc/Planner/Search.h"
#include "dtc/artifact/Schedule.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <unistd.h>

namespace {

using dtc::cost::CollectiveKind;
using dtc::cost::collectiveSentBytes;
using dtc::cost::collectiveSentBytesOf;
using dtc::cost::CostClass;

TEST(CostModel, RingFormulasWhenSizesDivide) {
  // All-reduce of D bytes on n devices: 2(n-1)/n D.
  EXPECT_EQ(collectiveSentBytes(CollectiveKind::AllReduce, 8, 1024, 1024, 4),
            2 * 7 * 1024 * 4 / 8);
  // All-gather of pieces of D/n, reduce-scatter into them: (n-1)/n D.
  EXPECT_EQ(collectiveSentBytes(CollectiveKind::AllGather, 4, 256, 1024, 4),
            3 * 256 * 4);
  EXPECT_EQ(collectiveSentBytes(CollectiveKind::ReduceScatter, 4, 1024, 256, 4),
            3 * 256 * 4);
  // All-to-all: (n-1)/n of its input.
  EXPECT_EQ(collectiveSentBytes(CollectiveKind::AllToAll, 4, 1024, 1024, 4),
            3 * 256 * 4);
  // Shift: its whole input to the next member, whatever the group size.
  EXPECT_EQ(collectiveSentBytes(CollectiveKind::Shift, 4, 1024, 1024, 4),
            1024 * 4);
  EXPECT_EQ(collectiveSentBytes(CollectiveKind::Shift, 1, 1024, 1024, 4), 0);
  // One device sends nothing.
  EXPECT_EQ(collectiveSentBytes(CollectiveKind::AllReduce, 1, 1024, 1024, 4),
            0);
}

TEST(CostModel, RingChunksThatDoNotDivide) {
  // 7 elements on 4 devices: chunks 2, 2, 2, 1. Member r skips chunks r+1
  // and r+2: 14-4, 14-3, 14-3, 14-4 elements.
  const int64_t want[] = {10, 11, 11, 10};
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(collectiveSentBytesOf(CollectiveKind::AllReduce, 4, r, 7, 7, 4),
              want[r] * 4)
        << r;
  EXPECT_EQ(collectiveSentBytes(CollectiveKind::AllReduce, 4, 7, 7, 4), 11 * 4);
  // A scalar on 3 devices: chunks 1, 0, 0.
  EXPECT_EQ(collectiveSentBytes(CollectiveKind::AllReduce, 3, 1, 1, 4), 2 * 4);
}

TEST(CostModel, AlphaBetaTime) {
  dtc::cost::Link link{1e9, 1e-6};
  // 2(n-1) latency steps for the all-reduce ring, n-1 for the others.
  EXPECT_DOUBLE_EQ(
      dtc::cost::collectiveTime(CollectiveKind::AllReduce, 4, 1e9, link),
      6e-6 + 1.0);
  EXPECT_DOUBLE_EQ(
      dtc::cost::collectiveTime(CollectiveKind::AllGather, 4, 1e9, link),
      3e-6 + 1.0);
  EXPECT_EQ(dtc::cost::collectiveTime(CollectiveKind::AllGather, 1, 1e9, link),
            0);
  // The link's efficiency scales its bandwidth, not its latency.
  link.efficiency = 0.5;
  EXPECT_DOUBLE_EQ(
      dtc::cost::collectiveTime(CollectiveKind::AllGather, 4, 1e9, link),
      3e-6 + 2.0);
  EXPECT_DOUBLE_EQ(dtc::cost::sendRecvTime(1e9, link), 1e-6 + 2.0);
  // Ranks sharing cores: every collective call resumes its group once, a
  // point-to-point message (a pipeline's) waits for one peer only.
  link.syncOverhead = 1e-3;
  EXPECT_DOUBLE_EQ(
      dtc::cost::collectiveTime(CollectiveKind::AllGather, 4, 1e9, link),
      1e-3 + 3e-6 + 2.0);
  EXPECT_EQ(dtc::cost::collectiveTime(CollectiveKind::AllGather, 1, 1e9, link),
            0);
  EXPECT_DOUBLE_EQ(dtc::cost::sendRecvTime(1e9, link), 1e-6 + 2.0);
}

// The sync overhead after a computation between calls: none right after
// the previous call, all of it after `syncRamp` seconds or more, a share in
// proportion below (no ramp: all of it after any computation).
TEST(CostModel, SyncOverheadRampsWithTheComputationBetweenCalls) {
  dtc::cost::Link link{1e9, 1e-6};
  link.syncOverhead = 2e-3;
  EXPECT_EQ(link.syncOverheadAfter(0), 0);
  EXPECT_EQ(link.syncOverheadAfter(1e-9), 2e-3);
  EXPECT_EQ(link.syncOverheadAfter(10), 2e-3);
  link.syncRamp = 10e-3;
  EXPECT_EQ(link.syncOverheadAfter(0), 0);
  EXPECT_DOUBLE_EQ(link.syncOverheadAfter(2.5e-3), 0.5e-3);
  EXPECT_DOUBLE_EQ(link.syncOverheadAfter(5e-3), 1e-3);
  EXPECT_EQ(link.syncOverheadAfter(10e-3), 2e-3);
  EXPECT_EQ(link.syncOverheadAfter(1), 2e-3);
  // The profile writes it back.
  std::string error;
  dtc::cost::HardwareProfile hw = *dtc::cost::loadHardware("a100", error);
  hw.forMesh({2});
  hw.axes[0] = link;
  const nlohmann::json written =
      nlohmann::json::parse(dtc::cost::profileJson(hw));
  EXPECT_EQ(written["axes"][0]["sync_ramp"], 10e-3);
  EXPECT_EQ(written["axes"][0]["sync_overhead"], 2e-3);
}

TEST(CostModel, GemmEfficiencyCurve) {
  dtc::cost::GemmEfficiency curve{0.8, 1e10};
  EXPECT_DOUBLE_EQ(curve.at(1e10), 0.4); // half of the best at halfFlops
  EXPECT_DOUBLE_EQ(curve.at(3e10), 0.6);
  EXPECT_NEAR(curve.at(1e15), 0.8, 1e-5);
  EXPECT_LT(curve.at(1e8), 0.01);
}

TEST(CostModel, KernelRoofline) {
  dtc::cost::HardwareProfile hw;
  hw.peakFlopsF32 = 1e12;
  hw.peakFlopsBf16 = 4e12;
  hw.memoryBandwidth = 1e11;
  hw.gemm = {0.5, 1e9};
  hw.memoryEfficiency = 0.5;
  hw.kernelOverhead = 1e-6;
  // A dense kernel of 1e9 flops runs at 0.25 of the bf16 peak: 1 ms, more
  // than its 1 MB at 50 GB/s (20 us).
  EXPECT_DOUBLE_EQ(dtc::cost::kernelTime(1e9, 1e6, CostClass::Gemm, hw, false),
                   1e-3 + 1e-6);
  // f32 runs at its own peak.
  EXPECT_DOUBLE_EQ(dtc::cost::kernelTime(1e9, 1e6, CostClass::Gemm, hw, true),
                   4e-3 + 1e-6);
  // An element-wise kernel is bound by its traffic; its flops count at the
  // best efficiency, not at the curve's (which would make every small
  // kernel cost halfFlops / peak).
  EXPECT_DOUBLE_EQ(
      dtc::cost::kernelTime(1e6, 8e6, CostClass::Stream, hw, false),
      8e6 / 5e10 + 1e-6);
  EXPECT_DOUBLE_EQ(dtc::cost::kernelTime(0, 0, CostClass::Stream, hw, false),
                   1e-6);
}

// Each kernel class at its own rate: fused attention on its own curves,
// per head, the row reductions on their own line; without them, attention
// follows the GEMM curve over the whole kernel's flops and the row
// reductions the memory line, as before the classes existed.
TEST(CostModel, KernelClassesHaveTheirOwnRates) {
  dtc::cost::HardwareProfile hw;
  hw.peakFlopsF32 = hw.peakFlopsBf16 = 1e12;
  hw.memoryBandwidth = 1e11;
  hw.gemm = {0.5, 1e9};
  hw.memoryEfficiency = 0.5;
  hw.kernelOverhead = 1e-6;
  using dtc::cost::kernelTime;
  // 16 heads of 1e8 flops: on the GEMM curve by the total (0.5 * 1.6e9 /
  // 2.6e9 of the peak); the products do not matter.
  const double gemmRate = 1e12 * 0.5 * 1.6e9 / 2.6e9;
  EXPECT_DOUBLE_EQ(kernelTime(1.6e9, 0, CostClass::Attention, hw, true, 16),
                   1.6e9 / gemmRate + 1e-6);
  EXPECT_DOUBLE_EQ(kernelTime(1.6e9, 0, CostClass::Attention, hw, true, 1),
                   kernelTime(1.6e9, 0, CostClass::Gemm, hw, true));
  // Attention's own curve, forward and backward apart: 0.25 * 1e8 / 2e8 of
  // the peak per head for the forward, 0.2 * 1e8 / 1.5e8 for the backward.
  hw.attention = dtc::cost::GemmEfficiency{0.25, 1e8};
  hw.attentionGrad = dtc::cost::GemmEfficiency{0.2, 5e7};
  EXPECT_DOUBLE_EQ(kernelTime(1.6e9, 0, CostClass::Attention, hw, true, 16),
                   1.6e9 / (1e12 * 0.125) + 1e-6);
  EXPECT_DOUBLE_EQ(kernelTime(1.6e9, 0, CostClass::AttentionGrad, hw, true, 16),
                   1.6e9 / (1e12 * 0.2 * 1e8 / 1.5e8) + 1e-6);
  // The GEMM and the stream kernels keep their rates.
  EXPECT_DOUBLE_EQ(kernelTime(1.6e9, 0, CostClass::Gemm, hw, true),
                   1.6e9 / gemmRate + 1e-6);
  EXPECT_DOUBLE_EQ(kernelTime(0, 5e6, CostClass::RowReduction, hw, true),
                   5e6 / 5e10 + 1e-6);
  EXPECT_DOUBLE_EQ(kernelTime(0, 5e6, CostClass::Optimizer, hw, true),
                   5e6 / 5e10 + 1e-6);
  // The row reductions' own line: 10 GB/s and 3 us a call; the Adam
  // update's: 20 GB/s and 2 us; a stream kernel of the same bytes is
  // unchanged.
  hw.rowReduction = dtc::cost::MemoryLine{1e10, 3e-6};
  hw.optimizer = dtc::cost::MemoryLine{2e10, 2e-6};
  EXPECT_DOUBLE_EQ(kernelTime(0, 5e6, CostClass::RowReduction, hw, true),
                   5e6 / 1e10 + 3e-6);
  EXPECT_DOUBLE_EQ(kernelTime(0, 5e6, CostClass::Optimizer, hw, true),
                   5e6 / 2e10 + 2e-6);
  EXPECT_DOUBLE_EQ(kernelTime(0, 5e6, CostClass::Stream, hw, true),
                   5e6 / 5e10 + 1e-6);
}

// `kernel_classes` in a profile file: read, written back by profileJson,
// and each bad field one error naming it.
TEST(CostModel, KernelClassesInAProfileFile) {
  const std::string dir = ::testing::TempDir();
  auto load = [&](const std::string &text, std::string &error) {
    const std::string path = dir + "/dtc-kernel-classes.json";
    std::ofstream(path) << text;
    std::optional<dtc::cost::HardwareProfile> hw =
        dtc::cost::loadHardware(path, error);
    std::remove(path.c_str());
    return hw;
  };
  std::string error;
  std::optional<dtc::cost::HardwareProfile> hw = load(
      R"({"base": "a100", "kernel_classes": {
            "attention": {"max": 0.5, "half_flops": 2e8},
            "attention_grad": {"max": 0.4, "half_flops": 3e8},
            "row_reduction": {"bandwidth": 4e11, "overhead": 5e-6},
            "optimizer": {"bandwidth": 7e11, "overhead": 4e-6}}})",
      error);
  ASSERT_TRUE(hw) << error;
  ASSERT_TRUE(hw->attention && hw->attentionGrad && hw->rowReduction &&
              hw->optimizer);
  EXPECT_EQ(hw->attention->max, 0.5);
  EXPECT_EQ(hw->attention->halfFlops, 2e8);
  EXPECT_EQ(hw->attentionGrad->max, 0.4);
  EXPECT_EQ(hw->attentionGrad->halfFlops, 3e8);
  EXPECT_EQ(hw->rowReduction->bandwidth, 4e11);
  EXPECT_EQ(hw->rowReduction->overhead, 5e-6);
  EXPECT_EQ(hw->optimizer->bandwidth, 7e11);
  EXPECT_EQ(hw->optimizer->overhead, 4e-6);
  const nlohmann::json written =
      nlohmann::json::parse(dtc::cost::profileJson(*hw))["kernel_classes"];
  EXPECT_EQ(written["attention"]["half_flops"], 2e8);
  EXPECT_EQ(written["attention_grad"]["max"], 0.4);
  EXPECT_EQ(written["row_reduction"]["overhead"], 5e-6);
  EXPECT_EQ(written["optimizer"]["bandwidth"], 7e11);
  // The builtin profiles have none.
  EXPECT_FALSE(
      nlohmann::json::parse(
          dtc::cost::profileJson(*dtc::cost::loadHardware("a100", error)))
          .contains("kernel_classes"));
  const std::pair<const char *, const char *> bad[] = {
      {R"({"base": "a100", "kernel_classes": {"gemm": {"max": 0.5}}})",
       "kernel_classes.gemm: not a class with its own rate"},
      {R"({"base": "a100", "kernel_classes": {"attention": {"max": 2}}})",
       "kernel_classes.attention: field 'max' must be a number in (0, 1]"},
      {R"({"base": "a100", "kernel_classes": {"row_reduction": {"bandwidth": 1e9}}})",
       "kernel_classes.row_reduction: field 'overhead' must be a number of "
       "seconds >= 0"},
      {R"({"base": "a100", "kernel_classes": {"row_reduction": {"overhead": 0}}})",
       "kernel_classes.row_reduction: field 'bandwidth' must be a positive "
       "number"},
      {R"({"base": "a100", "kernel_classes": {"optimizer": {"bandwidth": 1e9}}})",
       "kernel_classes.optimizer: field 'overhead' must be a number of "
       "seconds >= 0"},
      {R"({"base": "a100", "kernel_classes": []})",
       "kernel_classes: must be an object"}};
  for (auto [text, message] : bad) {
    error.clear();
    EXPECT_FALSE(load(text, error)) << text;
    EXPECT_NE(error.find(message), std::string::npos) << error;
  }
}

TEST(CostModel, BubbleFraction) {
  // GPipe and 1F1B idle (p-1)/(m+p-1) of the time.
  EXPECT_DOUBLE_EQ(dtc::cost::bubbleFraction(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(dtc::cost::bubbleFraction(4, 1), 0.75);
  EXPECT_DOUBLE_EQ(dtc::cost::bubbleFraction(16, 192), 15.0 / 207.0);
}

/// The builtin A100 profile with its links for `mesh`.
dtc::cost::HardwareProfile a100For(const std::vector<int64_t> &mesh) {
  std::string error;
  dtc::cost::HardwareProfile hw = *dtc::cost::loadHardware("a100", error);
  hw.forMesh(mesh);
  return hw;
}

// Without measured groups a collective runs on the slowest of its axes'
// links, by bandwidth x efficiency; over no axis it costs nothing.
TEST(CostModel, LinkOverAxes) {
  dtc::cost::HardwareProfile hw = a100For({4, 8});
  EXPECT_EQ(hw.linkOver({1}).bandwidth, 300e9);
  EXPECT_EQ(hw.linkOver({0, 1}).bandwidth, 25e9);
  EXPECT_EQ(hw.linkOver(0, 2).bandwidth, 25e9);
  hw.axes[0] = {400e9, 1e-6, 0.1}; // faster, but 40 GB/s in effect
  EXPECT_EQ(hw.linkOver({0, 1}).bandwidth, 400e9);
  const dtc::cost::Link none = hw.linkOver(std::vector<int64_t>{});
  EXPECT_EQ(none.latency, 0);
  EXPECT_EQ(none.syncOverhead, 0);
  EXPECT_GE(none.bandwidth, 1e300);
}

/// A small step the search tests start from: 4 layers, a million
/// parameters, a batch of 8, 3 TFLOP a step, 4 MB kept for the backward (2
/// MB under selective recomputation, 1 MB under full).
dtc::search::ModelFacts smallFacts() {
  dtc::search::ModelFacts facts;
  facts.params = 1000000;
  facts.batch = 8;
  facts.layers = 4;
  facts.forwardFlops = 1e12;
  facts.backwardFlops = 2e12;
  facts.storedNone = 4e6;
  facts.storedSelective = 2e6;
  facts.storedFull = 1e6;
  facts.boundaryBytes = 2.5e5;
  return facts;
}

TEST(Search, EstimatesFollowTheClosedForms) {
  dtc::search::ModelFacts facts = smallFacts();
  dtc::search::Space space;
  space.mesh = {2};
  space.optimizer = "adam";
  const dtc::cost::HardwareProfile hw = a100For(space.mesh);
  std::vector<dtc::search::Candidate> all =
      dtc::search::enumerateCandidates(facts, space, hw);
  ASSERT_FALSE(all.empty());
  for (size_t i = 1; i < all.size(); ++i)
    EXPECT_LE(all[i - 1].seconds, all[i].seconds); // no budget: all fit
  // Data parallelism over 2, no micro-batches: f32 Adam keeps 16 bytes per
  // parameter, ZeRO-1 splits the 8 of the optimizer, ZeRO-3 all 16.
  auto find = [&](int64_t dp, int64_t zero) {
    for (const dtc::search::Candidate &c : all)
      if (c.dp == dp && c.zero == zero && c.microbatches == 1 &&
          c.remat == "none")
        return c;
    ADD_FAILURE() << "no dp=" << dp << " zero=" << zero;
    return dtc::search::Candidate();
  };
  const double activations = 4e6 / 2;
  EXPECT_DOUBLE_EQ(find(2, 0).bytes, 16e6 + activations);
  EXPECT_DOUBLE_EQ(find(2, 1).bytes, 12e6 + activations);
  EXPECT_DOUBLE_EQ(find(2, 3).bytes, 8e6 + activations);
  // Compute: the step's flops over both devices at the best GEMM
  // efficiency of the f32 peak.
  EXPECT_DOUBLE_EQ(find(2, 0).computeSeconds, 3e12 / 2 / (19.5e12 * 0.8));
  // Two pipeline stages of layers of uneven flops: the balancer puts the
  // first three on one stage and the last on the other. The busiest stage
  // computes 5/8 of the flops, stretched by 1F1B's bubble of one
  // micro-batch (1/2), and the first stage keeps 3/4 of the activations.
  facts.layerFlops = {1, 1, 1, 5};
  facts.layerStoredBytes = {1e6, 1e6, 1e6, 1e6};
  all = dtc::search::enumerateCandidates(facts, space, hw);
  const dtc::search::Candidate *pp2 = nullptr;
  for (const dtc::search::Candidate &c : all)
    if (c.pp == 2 && c.microbatches == 1 && c.schedule == "1f1b" &&
        c.remat == "none")
      pp2 = &c;
  ASSERT_TRUE(pp2);
  EXPECT_DOUBLE_EQ(pp2->computeSeconds, 3e12 * 5 / 8 / (19.5e12 * 0.8) * 2);
  EXPECT_DOUBLE_EQ(pp2->bytes, 16e6 / 2 + 3e6);
  // A tied embedding of 400000 read by the first layer and the last, and
  // 150000 parameters a layer: the first stage holds 850000 of them, not
  // half of the 1000000.
  facts.paramUses = {
      {4e5, {0, 3}}, {1.5e5, {0}}, {1.5e5, {1}}, {1.5e5, {2}}, {1.5e5, {3}}};
  all = dtc::search::enumerateCandidates(facts, space, hw);
  pp2 = nullptr;
  for (const dtc::search::Candidate &c : all)
    if (c.pp == 2 && c.microbatches == 1 && c.schedule == "1f1b" &&
        c.remat == "none")
      pp2 = &c;
  ASSERT_TRUE(pp2);
  EXPECT_DOUBLE_EQ(pp2->bytes, 16 * 8.5e5 + 3e6);
  // A budget below every plan: none fits, the smallest first.
  space.budget = 1;
  all = dtc::search::enumerateCandidates(facts, space, hw);
  for (size_t i = 1; i < all.size(); ++i) {
    EXPECT_FALSE(all[i].fits);
    EXPECT_LE(all[i - 1].bytes, all[i].bytes);
  }
}

// Overlap in the closed forms: without micro-batches the gradients' buckets
// reduce while the backward goes on, all but the last, at the profile's
// comm_overlap (a100: 0.9); ZeRO-1 reduce-scatters in the optimizer, and
// micro-batches and pipelines reduce after the last backward, so nothing
// hides there. The step is compute plus the communication not hidden.
TEST(Search, OverlapHidesAllButTheLastBucket) {
  dtc::search::ModelFacts facts = smallFacts();
  facts.params = 100000000; // f32 gradients: 400 MB, 16 buckets of 25 MiB
  dtc::search::Space space;
  space.mesh = {2};
  space.optimizer = "adam";
  const dtc::cost::HardwareProfile hw = a100For(space.mesh);
  ASSERT_DOUBLE_EQ(hw.commOverlap, 0.9);
  const auto all = dtc::search::enumerateCandidates(facts, space, hw);
  auto find = [&](int64_t zero, int64_t microbatches) {
    for (const dtc::search::Candidate &c : all)
      if (c.dp == 2 && c.zero == zero && c.microbatches == microbatches &&
          c.remat == "none")
        return c;
    ADD_FAILURE() << "no dp=2 zero=" << zero << " mb=" << microbatches;
    return dtc::search::Candidate();
  };
  const double reduce = dtc::cost::collectiveTime(
      CollectiveKind::AllReduce, 2, 2.0 * 1 / 2 * 4e8, hw.axes[0]);
  const dtc::search::Candidate dp = find(0, 1);
  EXPECT_DOUBLE_EQ(dp.commSeconds, reduce);
  EXPECT_DOUBLE_EQ(dp.hiddenSeconds, 0.9 * reduce * 15 / 16);
  EXPECT_DOUBLE_EQ(dp.seconds,
                   dp.computeSeconds + dp.commSeconds - dp.hiddenSeconds);
  EXPECT_EQ(find(1, 1).hiddenSeconds, 0.0);
  EXPECT_EQ(find(0, 2).hiddenSeconds, 0.0);
  for (const dtc::search::Candidate &c : all)
    if (c.pp > 1)
      EXPECT_EQ(c.hiddenSeconds, 0.0) << c.describe();
  // Never more than the compute that could hide it.
  dtc::cost::HardwareProfile slow = hw;
  slow.axes[0].bandwidth = 1e6;
  for (const dtc::search::Candidate &c :
       dtc::search::enumerateCandidates(facts, space, slow))
    EXPECT_LE(c.hiddenSeconds, 0.9 * c.computeSeconds) << c.describe();
}

// With micro-batches the artifact zeroes every gradient of the stage (a
// fill) and adds each micro-batch's into it (out += in, the add kernel: it
// reads both and writes one), kernels the step function does not have.
TEST(Search, MicroBatchesAccumulateTheGradients) {
  dtc::search::ModelFacts facts = smallFacts();
  using Split = dtc::search::KernelClass::Split;
  // Four parameter tensors: a million f32 parameters, 1 MB of gradient each.
  facts.optimizerKernels = {
      {1e6, 8e6, CostClass::Stream, 1, false, false, 4, Split::Batch}};
  dtc::search::Space space;
  space.mesh = {2};
  const dtc::cost::HardwareProfile hw = a100For(space.mesh);
  const auto all = dtc::search::enumerateCandidates(facts, space, hw);
  auto find = [&](int64_t microbatches) {
    for (const dtc::search::Candidate &c : all)
      if (c.dp == 2 && c.zero == 0 && c.microbatches == microbatches &&
          c.remat == "none")
        return c;
    ADD_FAILURE() << "no dp=2 mb=" << microbatches;
    return dtc::search::Candidate();
  };
  using dtc::cost::kernelTime;
  const double accumulate = kernelTime(0, 3e6, CostClass::Stream, hw, true),
               fill = kernelTime(0, 1e6, CostClass::Stream, hw, true);
  // The step's flops do not depend on the micro-batches here (no kernel
  // classes), so the difference is what the micro-batches add.
  const double added2 = 4 * (2 * accumulate + fill),
               added4 = 4 * (4 * accumulate + fill);
  EXPECT_NEAR(find(2).computeSeconds - find(1).computeSeconds, added2,
              1e-9 * added2);
  EXPECT_NEAR(find(4).computeSeconds - find(1).computeSeconds, added4,
              1e-9 * added4);
}

// Ranks that share cores pay a sync overhead per collective call: tensor
// parallelism makes one per layer, direction and micro-batch (two with
// sequence parallelism, a reduce-scatter and a gather).
TEST(Search, TensorParallelCallsPayTheSyncOverhead) {
  dtc::search::ModelFacts facts = smallFacts();
  facts.sequenceInputs = true; // so sequence parallelism is a choice
  facts.sequence = 64;
  dtc::search::Space space;
  space.mesh = {2};
  const dtc::cost::HardwareProfile plain = a100For(space.mesh);
  dtc::cost::HardwareProfile shared = plain;
  shared.axes[0].syncOverhead = 1e-3;
  auto comm = [&](const dtc::cost::HardwareProfile &hw, int64_t microbatches,
                  bool sequenceParallel) {
    for (const dtc::search::Candidate &c :
         dtc::search::enumerateCandidates(facts, space, hw))
      if (c.tp == 2 && c.microbatches == microbatches &&
          c.sequenceParallel == sequenceParallel && c.remat == "none" &&
          c.zero == 0)
        return c.commSeconds;
    ADD_FAILURE() << "no tp=2 mb=" << microbatches
                  << " sp=" << sequenceParallel;
    return 0.0;
  };
  // 4 layers, forward and backward.
  for (int64_t m : {1, 2})
    for (bool sp : {false, true}) {
      const double added = 4 * 2 * double(m) * (sp ? 2 : 1) * 1e-3;
      EXPECT_NEAR(comm(shared, m, sp) - comm(plain, m, sp), added, 1e-9 * added)
          << "mb=" << m << " sp=" << sp;
    }
}

// A micro-batched plan reduces its data-parallel gradients one tensor at
// a time after the flush, back to back: their group pays the link's sync
// overhead once, not once per tensor. Without micro-batches each bucket
// is issued during the backward, after kernels, and pays its own; ZeRO-1's
// reduce-scatters after the flush alternate with the updates and pay each.
TEST(Search, GradientsAfterTheFlushPayTheSyncOverheadOnce) {
  using Split = dtc::search::KernelClass::Split;
  dtc::search::ModelFacts facts = smallFacts();
  facts.optimizerKernels = {
      {0, 4e6, CostClass::Optimizer, 1, false, false, 8, Split::Batch}};
  dtc::search::Space space;
  space.mesh = {2};
  const dtc::cost::HardwareProfile plain = a100For(space.mesh);
  dtc::cost::HardwareProfile shared = plain;
  shared.axes[0].syncOverhead = 1e-3;
  auto comm = [&](const dtc::cost::HardwareProfile &hw, int64_t microbatches,
                  int zero) {
    for (const dtc::search::Candidate &c :
         dtc::search::enumerateCandidates(facts, space, hw))
      if (c.dp == 2 && c.microbatches == microbatches && c.zero == zero &&
          c.remat == "none")
        return c.commSeconds;
    ADD_FAILURE() << "no dp=2 mb=" << microbatches << " zero=" << zero;
    return 0.0;
  };
  EXPECT_NEAR(comm(shared, 2, 0) - comm(plain, 2, 0), 1e-3, 1e-12);
  EXPECT_GE(comm(shared, 1, 0) - comm(plain, 1, 0), 1e-3 - 1e-12);
  EXPECT_GT(comm(shared, 2, 1) - comm(plain, 2, 1), 2e-3);
}

// With a ramp longer than every gap between calls, a call adds the sync
// overhead times its gap over the ramp: tensor parallelism's calls (a
// layer's forward or backward share of the kernels apart), ZeRO-3's gathers
// (a layer's) and the data-parallel gradients' bucket (after the backward)
// add the overhead times the step's computation over the ramp each,
// however many calls they split into. With a ramp shorter than every gap,
// each call adds the whole overhead.
TEST(Search, CallsPayTheSyncOverheadInProportionToTheirGaps) {
  dtc::search::ModelFacts facts = smallFacts();
  facts.sequenceInputs = true;
  facts.sequence = 64;
  dtc::search::Space space;
  space.mesh = {2};
  const dtc::cost::HardwareProfile plain = a100For(space.mesh);
  const double ramp = 1e3;
  dtc::cost::HardwareProfile longRamp = plain, shortRamp = plain;
  longRamp.axes[0].syncOverhead = shortRamp.axes[0].syncOverhead = 1e-3;
  longRamp.axes[0].syncRamp = ramp;
  shortRamp.axes[0].syncRamp = 1e-12;
  auto find = [&](const dtc::cost::HardwareProfile &hw, int64_t tp,
                  int64_t microbatches, bool sequenceParallel, int zero) {
    for (const dtc::search::Candidate &c :
         dtc::search::enumerateCandidates(facts, space, hw))
      if (c.tp == tp && c.microbatches == microbatches &&
          c.sequenceParallel == sequenceParallel && c.remat == "none" &&
          c.zero == zero)
        return c;
    ADD_FAILURE() << "no tp=" << tp << " mb=" << microbatches;
    return dtc::search::Candidate();
  };
  for (int64_t m : {1, 2})
    for (bool sp : {false, true}) {
      const dtc::search::Candidate base = find(plain, 2, m, sp, 0);
      const double added =
          find(longRamp, 2, m, sp, 0).commSeconds - base.commSeconds;
      const double proportional = 1e-3 * base.computeSeconds / ramp;
      EXPECT_NEAR(added, proportional, 1e-9 * proportional)
          << "mb=" << m << " sp=" << sp;
      const double whole = 4 * 2 * double(m) * (sp ? 2 : 1) * 1e-3;
      EXPECT_NEAR(find(shortRamp, 2, m, sp, 0).commSeconds - base.commSeconds,
                  whole, 1e-9 * whole);
    }
  for (int zero : {0, 3}) {
    const dtc::search::Candidate base = find(plain, 1, 1, false, zero);
    const double added =
        find(longRamp, 1, 1, false, zero).commSeconds - base.commSeconds;
    const double proportional =
        (zero == 3 ? 2 : 1) * 1e-3 * base.computeSeconds / ramp;
    EXPECT_NEAR(added, proportional, 1e-9 * proportional) << "zero=" << zero;
  }
  // ZeRO-1 reduce-scatters its gradients in the optimizer, one tensor's
  // update between calls, not the backward: a far smaller share.
  facts.optimizerKernels = {{0, 4e6, CostClass::Optimizer, 1, false, false, 8,
                             dtc::search::KernelClass::Split::Batch}};
  auto added = [&](int zero) {
    return find(longRamp, 1, 1, false, zero).commSeconds -
           find(plain, 1, 1, false, zero).commSeconds;
  };
  EXPECT_GT(added(1), 0);
  EXPECT_LT(added(1), 0.01 * added(0));
}

// Tensor parallelism splits what a layer keeps but the residual stream (the
// values in the shapes between layers: the norms' inputs and outputs, the
// residual sums), which stays whole on every rank unless sequence
// parallelism splits it too.
TEST(Search, TensorParallelismKeepsTheResidualStreamWhole) {
  dtc::search::ModelFacts facts = smallFacts();
  facts.storedInStreamNone = 1e6;
  facts.storedInStreamSelective = 5e5;
  facts.sequenceInputs = true;
  facts.sequence = 64;
  dtc::search::Space space;
  space.mesh = {2};
  space.optimizer = "adam";
  const dtc::cost::HardwareProfile hw = a100For(space.mesh);
  auto bytesOf = [&](const char *remat, bool sequenceParallel) {
    for (const dtc::search::Candidate &c :
         dtc::search::enumerateCandidates(facts, space, hw))
      if (c.tp == 2 && c.zero == 0 && c.microbatches == 1 &&
          c.remat == std::string(remat) &&
          c.sequenceParallel == sequenceParallel)
        return c.bytes;
    ADD_FAILURE() << "no tp=2 " << remat;
    return 0.0;
  };
  const double state = 16e6 / 2; // f32 Adam, each rank half of each weight
  EXPECT_DOUBLE_EQ(bytesOf("none", false), state + 3e6 / 2 + 1e6);
  EXPECT_DOUBLE_EQ(bytesOf("none", true), state + 3e6 / 2 + 1e6 / 2);
  // Recomputation keeps besides the layer being recomputed (a quarter of
  // storedNone, split); full recomputation keeps the stream alone.
  EXPECT_DOUBLE_EQ(bytesOf("selective", false),
                   state + 1.5e6 / 2 + 5e5 + 4e6 / 4 / 2);
  EXPECT_DOUBLE_EQ(bytesOf("full", false), state + 1e6 + 4e6 / 4 / 2);
  EXPECT_DOUBLE_EQ(bytesOf("full", true), state + 1e6 / 2 + 4e6 / 4 / 2);
}

// Ring attention in the search: sp takes the one axis after pp's, only for
// a model with attention whose sequence divides; it divides the compute
// and the activations by sp, keeps the parameters whole, sums the
// gradients over the ring, and shifts 6(n-1)+2 key/value blocks per
// attention layer (2(n-1) more when the forward is recomputed).
TEST(Search, RingAttentionIsAPlanChoice) {
  dtc::search::ModelFacts facts = smallFacts();
  facts.batch = 2;
  facts.storedNone = 8e6;
  facts.storedSelective = 4e6;
  facts.sequenceInputs = true;
  facts.sequence = 1024;
  facts.attentionKeyBytes = 4e6;
  facts.attentionLayers = 4;
  dtc::search::Space space;
  space.mesh = {2, 4};
  const dtc::cost::HardwareProfile hw = a100For(space.mesh);
  auto all = dtc::search::enumerateCandidates(facts, space, hw);
  auto find = [&](int64_t dp, int64_t pp, int64_t sp, int64_t tp,
                  const char *remat) -> const dtc::search::Candidate * {
    for (const dtc::search::Candidate &c : all)
      if (c.dp == dp && c.pp == pp && c.sp == sp && c.tp == tp && c.zero == 0 &&
          c.microbatches == 1 && c.remat == std::string(remat) &&
          !c.sequenceParallel)
        return &c;
    return nullptr;
  };
  // sp on the inner axis (4), or on the outer one with tp inside it.
  const dtc::search::Candidate *sp4 = find(2, 1, 4, 1, "none"),
                               *sp2tp4 = find(1, 1, 2, 4, "none"),
                               *dp2tp4 = find(2, 1, 1, 4, "none");
  ASSERT_TRUE(sp4 && sp2tp4 && dp2tp4);
  EXPECT_EQ(sp4->describe(), "dp=2,tp=1,pp=1,sp=4 --remat none");
  EXPECT_EQ(find(1, 2, 4, 1, "none") != nullptr, true); // pp=2, sp=4
  for (const dtc::search::Candidate &c : all)
    EXPECT_FALSE(c.sp > 1 && c.sequenceParallel) << c.describe();
  // Compute over all 8 devices; activations divided by dp and sp;
  // parameters whole (f32 Adam: 16 bytes each).
  EXPECT_DOUBLE_EQ(sp4->computeSeconds, 3e12 / 8 / (19.5e12 * 0.8));
  EXPECT_DOUBLE_EQ(sp4->bytes, 16e6 + 8e6 / 2 / 4);
  // Communication: the gradients' all-reduce over dp x sp, and the ring:
  // 6 * 3 + 2 blocks of 4e6 / 4 layers / (2 dp * 4 sp) bytes per layer.
  const dtc::cost::Link ring = hw.axes[1], outer = hw.axes[0];
  const dtc::cost::Link &slow =
      outer.bandwidth * outer.efficiency < ring.bandwidth * ring.efficiency
          ? outer
          : ring;
  const double grads = 2.0 * 7 / 8 * 4e6;
  const double shifts = 4 * 20 * dtc::cost::sendRecvTime(4e6 / 4 / 8, ring);
  EXPECT_DOUBLE_EQ(sp4->commSeconds,
                   dtc::cost::collectiveTime(
                       dtc::cost::CollectiveKind::AllReduce, 8, grads, slow) +
                       shifts);
  // Recomputation runs the forward ring again.
  const dtc::search::Candidate *full = find(2, 1, 4, 1, "full");
  ASSERT_TRUE(full);
  EXPECT_DOUBLE_EQ(full->commSeconds - sp4->commSeconds,
                   4 * 6 * dtc::cost::sendRecvTime(4e6 / 4 / 8, ring));
  // No attention, or a sequence that does not divide: no sp plan.
  facts.attentionLayers = 0;
  for (const dtc::search::Candidate &c :
       dtc::search::enumerateCandidates(facts, space, hw))
    EXPECT_EQ(c.sp, 1);
  facts.attentionLayers = 4;
  facts.sequence = 1022;
  for (const dtc::search::Candidate &c :
       dtc::search::enumerateCandidates(facts, space, hw))
    EXPECT_NE(c.sp, 4);
}

// Expert parallelism in the search: ep takes whole axes between dp's and
// pp's, only for a mixture of experts whose every layer's expert count it
// divides; it splits the batch as dp does and the experts' weights (their
// gradients are summed over dp alone, and ZeRO splits them over dp alone),
// and each token-slot move is an all-to-all of (ep-1)/ep of the rank's
// slots. The routing reads the whole batch: one micro-batch, no ring.
TEST(Search, ExpertParallelismIsAPlanChoice) {
  dtc::search::ModelFacts facts = smallFacts();
  facts.expertParams = 800000;
  facts.experts = 8;
  facts.slotMoves = 10;
  facts.slotMoveElements = 10 * 65536.0;
  facts.layers = 2;
  facts.sequenceInputs = true;
  facts.sequence = 64;
  facts.attentionKeyBytes = 4e6;
  facts.attentionLayers = 2;
  dtc::search::Space space;
  space.mesh = {2, 4};
  const dtc::cost::HardwareProfile hw = a100For(space.mesh);
  auto all = dtc::search::enumerateCandidates(facts, space, hw);
  auto find = [&](int64_t dp, int64_t ep, int64_t tp,
                  int64_t zero) -> const dtc::search::Candidate * {
    for (const dtc::search::Candidate &c : all)
      if (c.dp == dp && c.ep == ep && c.tp == tp && c.pp == 1 &&
          c.zero == zero && c.remat == "none" && !c.sequenceParallel)
        return &c;
    return nullptr;
  };
  const dtc::search::Candidate *ep4 = find(2, 4, 1, 0),
                               *ep4zero3 = find(2, 4, 1, 3);
  ASSERT_TRUE(ep4 && ep4zero3);
  const dtc::search::Candidate *ep2tp4 = find(1, 2, 4, 0); // tp inside ep
  ASSERT_TRUE(ep2tp4);
  EXPECT_TRUE(find(1, 8, 1, 0)); // ep on both axes
  EXPECT_EQ(ep4->describe(), "dp=2,tp=1,pp=1,ep=4 --remat none");
  for (const dtc::search::Candidate &c : all) {
    EXPECT_EQ(c.microbatches, 1) << c.describe();
    EXPECT_EQ(c.sp, 1) << c.describe();
  }
  // f32 Adam, 16 bytes per parameter: the dense 200k whole, the experts'
  // 800k over ep=4; activations over the 8 batch shards. ZeRO-3 splits the
  // dense state over all 8, the experts' over dp=2.
  EXPECT_DOUBLE_EQ(ep4->bytes, 200e3 * 16 + 800e3 / 4 * 16 + 4e6 / 8);
  EXPECT_DOUBLE_EQ(ep4zero3->bytes,
                   200e3 * 16 / 8 + 800e3 / 4 * 16 / 2 + 4e6 / 8);
  // Tensor parallelism splits the dense weights, not the experts' (whole
  // in Megatron's pattern), and the activations.
  EXPECT_DOUBLE_EQ(ep2tp4->bytes,
                   200e3 / 4 * 16 + 800e3 / 2 * 16 + 4e6 / 2 / 4);
  // Communication: the dense gradients over all 8, the experts' over dp's
  // 2, and 10 all-to-alls of 3/4 of the rank's 65536 / 8 slot elements.
  const dtc::cost::Link outer = hw.axes[0], inner = hw.axes[1];
  const dtc::cost::Link &slow =
      outer.bandwidth * outer.efficiency < inner.bandwidth * inner.efficiency
          ? outer
          : inner;
  using dtc::cost::CollectiveKind;
  const double dense = dtc::cost::collectiveTime(CollectiveKind::AllReduce, 8,
                                                 2.0 * 7 / 8 * 200e3 * 4, slow);
  const double experts = dtc::cost::collectiveTime(
      CollectiveKind::AllReduce, 2, 2.0 * 1 / 2 * 200e3 * 4, outer);
  const double exchanges =
      10 * dtc::cost::collectiveTime(CollectiveKind::AllToAll, 4,
                                     65536.0 / 8 * 3 / 4 * 4, inner);
  EXPECT_DOUBLE_EQ(ep4->commSeconds, dense + experts + exchanges);
  // Compute over all 8 devices, as dp=8 would.
  EXPECT_DOUBLE_EQ(ep4->computeSeconds, 3e12 / 8 / (19.5e12 * 0.8));
  // ep must divide every layer's experts (6: not 4 nor 8), and a model
  // without experts has no ep.
  facts.experts = 6;
  for (const dtc::search::Candidate &c :
       dtc::search::enumerateCandidates(facts, space, hw))
    EXPECT_TRUE(c.ep == 1 || c.ep == 2) << c.describe();
  facts.experts = 0;
  facts.expertParams = 0;
  for (const dtc::search::Candidate &c :
       dtc::search::enumerateCandidates(facts, space, hw))
    EXPECT_EQ(c.ep, 1) << c.describe();
}

// The schedule terms of the closed forms are the emitted schedules' own:
// the simulated bubble, and the micro-batches the busiest stage keeps in
// flight (interleaved: chunk micro-batches over the chunk count).
TEST(Search, ScheduleTermsAreTheSimulatedSchedules) {
  for (int p : {2, 4, 8})
    for (int m : {1, 2, 3, 4, 8, 12, 16, 32})
      for (const char *name : {"1f1b", "zb", "gpipe", "interleaved"})
        for (int v : {1, 2, 4}) {
          if ((std::string(name) == "interleaved") != (v > 1) ||
              (v > 1 && m % p != 0))
            continue;
          SCOPED_TRACE(std::string(name) + " P=" + std::to_string(p) +
                       " M=" + std::to_string(m) + " v=" + std::to_string(v));
          dtc::sched::Schedule s;
          std::string error;
          ASSERT_TRUE(dtc::sched::generate(name, p, m, v, s, error)) << error;
          dtc::sched::Simulation sim = dtc::sched::simulate(s);
          ASSERT_TRUE(sim.ok) << sim.error;
          const dtc::search::ScheduleTerms t =
              dtc::search::scheduleTerms(name, p, m, v);
          EXPECT_NEAR(t.bubble, sim.bubble, 1e-12);
          const int most = *std::max_element(sim.peakInFlight.begin(),
                                             sim.peakInFlight.end());
          EXPECT_NEAR(t.inFlight * v, most, 1e-12);
        }
  EXPECT_EQ(dtc::search::scheduleTerms("zb", 1, 8, 1).bubble, 0.0);
}

// The closed forms charge a pipeline's busiest stage: the stage balancer's
// contiguous split of the layers' flops, chunk k on stage k mod pp.
TEST(Search, BusiestStageShareFollowsTheStageBalancer) {
  dtc::search::ModelFacts facts;
  facts.layerFlops = {5, 1, 5, 1};
  auto flops = [&](int64_t stages, int64_t chunks) {
    return dtc::search::busiestStageShares(facts, stages, chunks).flops;
  };
  EXPECT_DOUBLE_EQ(flops(1, 1), 1.0);
  // Two stages: [5, 1 | 5, 1].
  EXPECT_DOUBLE_EQ(flops(2, 1), 6.0 / 12.0);
  // Four stages: a layer each; the busiest holds 5 of 12, not 1/4.
  EXPECT_DOUBLE_EQ(flops(4, 1), 5.0 / 12.0);
  // Two stages of two chunks: chunks 0 and 2 (both 5s) on stage 0.
  EXPECT_DOUBLE_EQ(flops(2, 2), 10.0 / 12.0);
  // Fewer layers than chunks (a plan the enumeration never makes): even.
  EXPECT_DOUBLE_EQ(flops(8, 1), 1.0 / 8.0);
  // The stored activations follow the same split, stage by stage: on four
  // stages the last layer's 6 of 9 bytes are one stage's.
  EXPECT_DOUBLE_EQ(dtc::search::busiestStageShares(facts, 4, 1).stored,
                   1.0 / 4.0);
  facts.layerStoredBytes = {1, 1, 1, 6};
  EXPECT_DOUBLE_EQ(dtc::search::busiestStageShares(facts, 4, 1).stored,
                   6.0 / 9.0);
  // Two stages split by flops as [5, 1 | 5, 1]: 2 and 7 bytes.
  EXPECT_DOUBLE_EQ(dtc::search::busiestStageShares(facts, 2, 1).stored,
                   7.0 / 9.0);
  // The parameters a stage holds are those its layers read, a parameter
  // read on two stages (a tied embedding: layers 0 and 3) on both.
  EXPECT_DOUBLE_EQ(dtc::search::busiestStageShares(facts, 2, 1).params, 0.5);
  facts.paramUses = {{40, {0, 3}}, {10, {0}}, {10, {1}}, {20, {2}}, {20, {3}}};
  // [5, 1 | 5, 1]: 40 + 10 + 10 on stage 0, 20 + 20 + 40 on stage 1, of
  // 100 in all.
  EXPECT_DOUBLE_EQ(dtc::search::busiestStageShares(facts, 2, 1).params, 0.8);
  // A layer a stage: 40 + 20 on the last.
  EXPECT_DOUBLE_EQ(dtc::search::busiestStageShares(facts, 4, 1).params, 0.6);
  // Two stages of two chunks: layers 0 and 2 on stage 0 (40 + 10 + 20).
  EXPECT_DOUBLE_EQ(dtc::search::busiestStageShares(facts, 2, 2).params, 0.7);
}

// The search chooses the schedule: with few micro-batches per stage the
// bubble decides (zb, or interleaved where the messages are cheap), and
// the plan says so as flags.
TEST(Search, SchedulesArePlanChoices) {
  dtc::search::ModelFacts facts;
  facts.params = 1000000;
  facts.batch = 4;
  facts.layers = 8;
  facts.forwardFlops = 1e13;
  facts.backwardFlops = 2e13;
  facts.storedNone = 4e6;
  facts.storedSelective = 2e6;
  facts.storedFull = 1e6;
  facts.boundaryBytes = 2.5e5;
  dtc::search::Space space;
  space.mesh = {4};
  const dtc::cost::HardwareProfile hw = a100For(space.mesh);
  auto all = dtc::search::enumerateCandidates(facts, space, hw);
  auto find = [&](const char *schedule, int64_t v, const char *remat,
                  int64_t m) -> const dtc::search::Candidate * {
    for (const dtc::search::Candidate &c : all)
      if (c.pp == 4 && c.schedule == schedule && c.virtualStages == v &&
          c.remat == std::string(remat) && c.microbatches == m)
        return &c;
    return nullptr;
  };
  const dtc::search::Candidate *oneF = find("1f1b", 1, "none", 4),
                               *zb = find("zb", 1, "none", 4),
                               *il2 = find("interleaved", 2, "none", 4);
  ASSERT_TRUE(oneF && zb && il2);
  EXPECT_EQ(zb->describe(), "dp=1,tp=1,pp=4 --microbatches 4 --schedule zb "
                            "--remat none");
  EXPECT_EQ(il2->describe(), "dp=1,tp=1,pp=4 --microbatches 4 --schedule "
                             "interleaved --virtual-stages 2 --remat none");
  // zb with full recomputation is 1f1b; interleaving needs M by pp and a
  // layer per chunk (v=4: 16 chunks of 8 layers, none).
  EXPECT_FALSE(find("zb", 1, "full", 4));
  EXPECT_FALSE(find("interleaved", 2, "none", 2));
  EXPECT_FALSE(find("interleaved", 4, "none", 4));
  for (const dtc::search::Candidate &c : all)
    EXPECT_TRUE(c.pp > 1 || (c.schedule == "1f1b" && c.virtualStages == 1))
        << c.describe();
  // Bubbles (P-1)/(M+P-1) = 3/7, (P-1)/(3M+P-1) = 3/15, (P-1)/(vM+P-1) =
  // 3/11; the same flops, so zb is faster, then interleaved, then 1f1b.
  EXPECT_DOUBLE_EQ(oneF->bubble, 3.0 / 7);
  EXPECT_DOUBLE_EQ(zb->bubble, 3.0 / 15);
  EXPECT_DOUBLE_EQ(il2->bubble, 3.0 / 11);
  EXPECT_LT(zb->seconds, il2->seconds);
  EXPECT_LT(il2->seconds, oneF->seconds);
  EXPECT_DOUBLE_EQ(zb->computeSeconds / oneF->computeSeconds,
                   (1 / (1 - 3.0 / 15)) / (1 / (1 - 3.0 / 7)));
  // Interleaving sends v times the pipeline messages.
  EXPECT_GT(il2->commSeconds, oneF->commSeconds);
  // Memory: zb and 1f1b keep min(P, M) micro-batches in flight;
  // interleaved (2(P-1) + (v-1)P + 1)/v = 6.5, capped at M = 4.
  EXPECT_DOUBLE_EQ(zb->bytes, oneF->bytes);
}

// With the step's kernels known, compute is what the plan evaluation
// charges them: each kernel's roofline at its per-device, per-micro-batch
// size plus the per-kernel overhead, once per micro-batch, forward kernels
// again under recomputation. Small GEMMs and more launches make
// micro-batches and tensor parallelism cost compute time.
TEST(Search, KernelsCostTheirSizeAndLaunches) {
  dtc::search::ModelFacts facts;
  facts.params = 1000;
  facts.batch = 8;
  facts.layers = 2;
  facts.forwardFlops = 2 * 1e9;
  facts.backwardFlops = 2 * 2e9;
  facts.storedNone = 1e5;
  facts.storedSelective = 5e4;
  facts.storedFull = 1e4;
  facts.boundaryBytes = 5e3;
  // Two forward GEMMs, a cheap forward element-wise op, two backward GEMMs.
  facts.kernels = {{1e9, 1e6, CostClass::Gemm, 1, true, false, 2},
                   {0, 4e6, CostClass::Stream, 1, true, true, 1},
                   {2e9, 2e6, CostClass::Gemm, 1, false, false, 2}};
  dtc::search::Space space;
  space.mesh = {2};
  const dtc::cost::HardwareProfile hw = a100For(space.mesh);
  auto all = dtc::search::enumerateCandidates(facts, space, hw);
  auto find = [&](int64_t dp, int64_t tp, int64_t m,
                  const char *remat) -> const dtc::search::Candidate * {
    for (const dtc::search::Candidate &c : all)
      if (c.dp == dp && c.tp == tp && c.pp == 1 && c.microbatches == m &&
          c.zero == 0 && c.remat == std::string(remat) && !c.sequenceParallel)
        return &c;
    return nullptr;
  };
  auto kernels = [&](double share, int64_t times, bool again) {
    using dtc::cost::kernelTime;
    return double(times) *
           (2 *
                kernelTime(1e9 / share, 1e6 / share, CostClass::Gemm, hw,
                           true) *
                (again ? 2 : 1) +
            kernelTime(0, 4e6 / share, CostClass::Stream, hw, true) *
                (again ? 2 : 1) +
            2 * kernelTime(2e9 / share, 2e6 / share, CostClass::Gemm, hw,
                           true));
  };
  const dtc::search::Candidate *dp2 = find(2, 1, 1, "none"),
                               *dp2m4 = find(2, 1, 4, "none"),
                               *tp2 = find(1, 2, 1, "none"),
                               *full = find(2, 1, 1, "full");
  ASSERT_TRUE(dp2 && dp2m4 && tp2 && full);
  EXPECT_DOUBLE_EQ(dp2->computeSeconds, kernels(2, 1, false));
  EXPECT_DOUBLE_EQ(dp2m4->computeSeconds, kernels(8, 4, false));
  EXPECT_DOUBLE_EQ(tp2->computeSeconds, kernels(2, 1, false));
  EXPECT_DOUBLE_EQ(full->computeSeconds, kernels(2, 1, true));
  // Four micro-batches of quarter-size GEMMs: lower efficiency, four
  // times the launches.
  EXPECT_GT(dp2m4->computeSeconds, dp2->computeSeconds);
  EXPECT_GT(full->computeSeconds, dp2->computeSeconds);
}

// The optimizer runs once per step on each stage's parameters: tp splits a
// dense parameter's update, ep an expert weight's, and ZeRO the state over
// the ranks that split the batch (dp and ep for dense, dp for experts).
TEST(Search, OptimizerKernelsRunOnTheParametersShards) {
  dtc::search::ModelFacts facts;
  facts.params = 1000;
  facts.batch = 8;
  facts.layers = 4;
  facts.forwardFlops = 2 * 1e9;
  facts.backwardFlops = 2 * 2e9;
  facts.storedNone = 1e5;
  facts.storedSelective = 5e4;
  facts.storedFull = 1e4;
  facts.boundaryBytes = 5e3;
  facts.kernels = {{1e9, 1e6, CostClass::Gemm, 1, true, false, 2}};
  using Split = dtc::search::KernelClass::Split;
  // Three dense updates of 8 MB each, one expert update of 4 MB.
  facts.optimizerKernels = {
      {1e6, 8e6, CostClass::Stream, 1, false, false, 3, Split::Batch},
      {5e5, 4e6, CostClass::Stream, 1, false, false, 1, Split::Experts}};
  dtc::search::Space space;
  space.mesh = {2, 2};
  const dtc::cost::HardwareProfile hw = a100For(space.mesh);
  auto all = dtc::search::enumerateCandidates(facts, space, hw);
  auto find = [&](int64_t dp, int64_t tp, int64_t pp, int64_t zero,
                  int64_t microbatches = 1) -> const dtc::search::Candidate * {
    for (const dtc::search::Candidate &c : all)
      if (c.dp == dp && c.tp == tp && c.pp == pp && c.ep == 1 &&
          c.microbatches == microbatches && c.zero == zero &&
          c.remat == "none" && !c.sequenceParallel && c.schedule == "1f1b")
        return &c;
    return nullptr;
  };
  using dtc::cost::kernelTime;
  auto updates = [&](double dense, double experts) {
    return 3 * kernelTime(1e6 / dense, 8e6 / dense, CostClass::Stream, hw,
                          true) +
           kernelTime(5e5 / experts, 4e6 / experts, CostClass::Stream, hw,
                      true);
  };
  const dtc::search::Candidate *dp4 = find(4, 1, 1, 0),
                               *dp4zero = find(4, 1, 1, 1),
                               *dp2tp2 = find(2, 2, 1, 0),
                               *dp2tp2zero = find(2, 2, 1, 2);
  ASSERT_TRUE(dp4 && dp4zero && dp2tp2 && dp2tp2zero);
  const double gemms = [&](double share) {
    return 2 * kernelTime(1e9 / share, 1e6 / share, CostClass::Gemm, hw, true);
  }(4);
  EXPECT_DOUBLE_EQ(dp4->computeSeconds, gemms + updates(1, 1));
  EXPECT_DOUBLE_EQ(dp4zero->computeSeconds, gemms + updates(4, 4));
  EXPECT_DOUBLE_EQ(dp2tp2->computeSeconds, gemms + updates(2, 1));
  EXPECT_DOUBLE_EQ(dp2tp2zero->computeSeconds, gemms + updates(4, 2));
  // ZeRO makes the update cheaper, which the search now sees.
  EXPECT_LT(dp4zero->computeSeconds, dp4->computeSeconds);
  dtc::cost::Link slowest = hw.axes[0];
  for (const dtc::cost::Link &link : hw.axes)
    if (link.bandwidth * link.efficiency <
        slowest.bandwidth * slowest.efficiency)
      slowest = link;
  // Without micro-batches ZeRO-2's reduce-scatters and gathers share
  // buckets (these 1000 parameters' gradients fit one each way): the same
  // bytes as the one bucketed all-reduce, in as many calls, so the same
  // time. ZeRO-1's reduce-scatters stay a call per tensor: two more
  // dense reduce-scatters, (4 - 1) latencies each.
  const dtc::search::Candidate *dp4zero2 = find(4, 1, 1, 2);
  ASSERT_TRUE(dp4zero2);
  EXPECT_NEAR(dp4zero2->commSeconds, dp4->commSeconds, 1e-12);
  EXPECT_NEAR(dp4zero->commSeconds - dp4->commSeconds,
              2 * (4 - 1) * slowest.latency, 1e-12);
  // With micro-batches they move per parameter, a reduce-scatter and an
  // all-gather each (2 (4 - 1) latencies per tensor), where without ZeRO
  // the dense ones still share one bucketed all-reduce: two more dense
  // calls' worth of latency over the slowest of the two axes.
  const dtc::search::Candidate *dp4mb = find(4, 1, 1, 0, 2),
                               *dp4zeroMb = find(4, 1, 1, 1, 2);
  ASSERT_TRUE(dp4mb && dp4zeroMb);
  EXPECT_NEAR(dp4zeroMb->commSeconds - dp4mb->commSeconds,
              2 * 2 * (4 - 1) * slowest.latency, 1e-12);
}

TEST(CostModel, BubbleStretchOnSharedCores) {
  dtc::cost::HardwareProfile own;
  EXPECT_DOUBLE_EQ(dtc::cost::bubbleStretch(0.5, 8, own), 2.0);
  // 8 ranks on 2 cores: a stage idle half the time gives its core away;
  // the work of all ranks over the cores (the shared rates) is the step.
  dtc::cost::HardwareProfile shared;
  shared.sharedCores = 2;
  EXPECT_DOUBLE_EQ(dtc::cost::bubbleStretch(0.5, 8, shared), 1.0);
  // 4 ranks on 2 cores and a bubble of 3/4: one stage's critical path at a
  // whole core (2/4 of the shared time, stretched 4x) is longer.
  EXPECT_DOUBLE_EQ(dtc::cost::bubbleStretch(0.75, 4, shared), 2.0);
  // No more ranks than cores: nothing shared.
  EXPECT_DOUBLE_EQ(dtc::cost::bubbleStretch(0.5, 2, shared), 2.0);
}

// Stages of unequal work: on devices of their own the busiest one sets
// the pace; on shared cores the lighter stages' cores go to the busier
// ones, and the step is all ranks' work over the cores (the mean), unless
// the busiest stage's critical path at a whole core is longer.
TEST(CostModel, UnequalStagesOnSharedCores) {
  dtc::cost::HardwareProfile own, shared;
  shared.sharedCores = 2;
  using dtc::cost::pipelineCompute;
  EXPECT_DOUBLE_EQ(pipelineCompute(4.0, 3.0, 0.5, 8, own), 8.0);
  EXPECT_DOUBLE_EQ(pipelineCompute(4.0, 3.0, 0.5, 8, shared), 3.0);
  // 8 ranks on 2 cores, bubble 7/8: the busiest stage at a whole core
  // (4 x 2/8), stretched 8x, is 8 s.
  EXPECT_DOUBLE_EQ(pipelineCompute(4.0, 3.0, 0.875, 8, shared), 8.0);
  // Equal stages: the bubble's stretch of one.
  EXPECT_DOUBLE_EQ(pipelineCompute(3.0, 3.0, 0.5, 4, shared),
                   3.0 * dtc::cost::bubbleStretch(0.5, 4, shared));
}

/// A calibration file with entries measured on 1, 2 and 8 ranks.
std::string writeCalibration(const std::string &body) {
  char path[] = "/tmp/dtc-calibration-test-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << body;
  return path;
}

std::string entry(double peak, const std::string &links) {
  return R"({"peak_flops": {"f32": )" + std::to_string(peak) +
         R"(}, "memory_bytes": 1e9, "memory_bandwidth": 5e9,
             "gemm_efficiency": {"max": 1, "half_flops": 1e6},
             "kernel_overhead": 2e-6, "group_links": {)" +
         links + "}}";
}

TEST(CostModel, CpuCalibrationEntryPerRankCount) {
  const std::string path = writeCalibration(
      R"({"format": "dtc-cpu-calibration", "profiles": {"1": )" +
      entry(40e9, "") + R"(, "2": )" +
      entry(30e9, R"("2": {"bandwidth": 4e9, "latency": 1e-6})") +
      R"(, "8": )" + entry(10e9, R"("2": {"bandwidth": 2e9, "latency": 2e-6},
                     "8": {"bandwidth": 1e9, "latency": 5e-6,
                           "sync_overhead": 1.5e-3, "sync_ramp": 4e-3})") +
      "}}");
  std::string error;
  // The entry for the mesh's ranks; else the fewest above; else the most.
  for (auto [devices, peak] : std::vector<std::pair<int64_t, double>>{
           {1, 40e9}, {2, 30e9}, {4, 10e9}, {8, 10e9}, {16, 10e9}}) {
    auto hw = dtc::cost::loadCpuCalibration(path, devices, error);
    ASSERT_TRUE(hw) << error;
    EXPECT_EQ(hw->peakFlopsF32, peak) << devices;
    EXPECT_EQ(hw->kernelOverhead, 2e-6);
    EXPECT_EQ(hw->source.find("(no entry for") == std::string::npos,
              devices == 1 || devices == 2 || devices == 8)
        << hw->source;
  }
  // Each mesh axis gets the link of the smallest measured group at least
  // its size: 2 -> group 2, 4 -> group 8.
  auto hw = dtc::cost::loadCpuCalibration(path, 8, error);
  ASSERT_TRUE(hw);
  ASSERT_EQ(hw->forMesh({2, 4}), "");
  EXPECT_EQ(hw->axes[0].bandwidth, 2e9);
  EXPECT_EQ(hw->axes[1].bandwidth, 1e9);
  EXPECT_EQ(hw->axes[1].latency, 5e-6);
  EXPECT_EQ(hw->axes[0].syncOverhead, 0);
  EXPECT_EQ(hw->axes[1].syncOverhead, 1.5e-3);
  EXPECT_EQ(hw->axes[1].syncRamp, 4e-3);
  EXPECT_EQ(hw->axes[0].syncRamp, 0);
  // A collective over both axes is a group of 8: the link measured for 8,
  // not the slower of the axes' (each group size has its own ring and its
  // own sharing of the cores).
  EXPECT_EQ(hw->linkOver({0, 1}).bandwidth, 1e9);
  EXPECT_EQ(hw->linkOver({0, 1}).syncOverhead, 1.5e-3);
  EXPECT_EQ(hw->linkOver(0, 1).bandwidth, 2e9);
  ASSERT_EQ(hw->forMesh({2, 2}), "");
  EXPECT_EQ(hw->linkOver({0, 1}).bandwidth, 1e9); // 4 devices: group 8
  EXPECT_EQ(hw->linkOver({1}).bandwidth, 2e9);
  std::remove(path.c_str());
}

TEST(CostModel, CpuCalibrationThatIsNotOne) {
  std::string error;
  for (
      const char *body :
      {"{}", R"({"format": "dtc-cpu-calibration", "profiles": {}})",
       R"({"format": "dtc-cpu-calibration", "profiles": {"x": {}}})",
       R"({"format": "dtc-cpu-calibration", "profiles": {"2": {"peak_flops": 5}}})",
       "not json"}) {
    const std::string path = writeCalibration(body);
    error.clear();
    EXPECT_FALSE(dtc::cost::loadCpuCalibration(path, 2, error)) << body;
    EXPECT_FALSE(error.empty()) << body;
    std::remove(path.c_str());
  }
}

} // namespace
