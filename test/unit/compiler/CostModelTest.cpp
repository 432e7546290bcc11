//===- CostModelTest.cpp - collective bytes and times
//-----------------------===//
//
// The byte counts the report and the resharding planner use are the
// runtime's algorithms (checked against its counters in test/e2e), and they
// reduce to the textbook ring formulas when sizes divide.
//
//===----------------------------------------------------------------------===//
#include "dtc/CostModel/CostModel.h"

#include <gtest/gtest.h>

namespace {

using dtc::cost::CollectiveKind;
using dtc::cost::collectiveSentBytes;
using dtc::cost::collectiveSentBytesOf;

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
  EXPECT_DOUBLE_EQ(dtc::cost::kernelTime(1e9, 1e6, true, hw, false),
                   1e-3 + 1e-6);
  // f32 runs at its own peak.
  EXPECT_DOUBLE_EQ(dtc::cost::kernelTime(1e9, 1e6, true, hw, true),
                   4e-3 + 1e-6);
  // An element-wise kernel is bound by its traffic; its flops count at the
  // best efficiency, not at the curve's (which would make every small
  // kernel cost halfFlops / peak).
  EXPECT_DOUBLE_EQ(dtc::cost::kernelTime(1e6, 8e6, false, hw, false),
                   8e6 / 5e10 + 1e-6);
  EXPECT_DOUBLE_EQ(dtc::cost::kernelTime(0, 0, false, hw, false), 1e-6);
}

} // namespace
