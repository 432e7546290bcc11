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
}

} // namespace
