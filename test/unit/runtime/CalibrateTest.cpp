//===- CalibrateTest.cpp - dtc calibrate's fits and measurements ---------===//
#include "dtc/runtime/Calibrate.h"

#include <gtest/gtest.h>

#include <thread>

using namespace dtc::rt;

TEST(Calibrate, FitLineRecoversTheLine) {
  // t = 3 us + size / (2 GB/s): exact points give the line back.
  std::vector<CalibrationPoint> points;
  for (double size : {1e3, 1e4, 1e5, 1e6, 1e7})
    points.push_back({size, 3e-6 + size / 2e9});
  LineFit fit = fitLine(points);
  EXPECT_NEAR(fit.intercept, 3e-6, 1e-12);
  EXPECT_NEAR(1.0 / fit.slope, 2e9, 1e3);
}

TEST(Calibrate, FitLineWeighsPointsByRelativeError) {
  // A 10% error on the largest point would move an unweighted fit's
  // intercept far more than the small points' own size; weighted by
  // relative error the intercept stays near the small points'.
  std::vector<CalibrationPoint> points = {{1e2, 1e-6 + 1e2 / 1e9},
                                          {1e3, 1e-6 + 1e3 / 1e9},
                                          {1e4, 1e-6 + 1e4 / 1e9},
                                          {1e8, 1.1 * (1e-6 + 1e8 / 1e9)}};
  LineFit fit = fitLine(points);
  EXPECT_NEAR(fit.intercept, 1e-6, 0.3e-6);
  EXPECT_GT(fit.slope, 0.0);
}

TEST(Calibrate, ProfileOfTwoRanksPredictsItsOwnPoints) {
  // Two ranks as threads: a profile with a link for groups of 2, and fitted
  // lines that reproduce what was measured (within a factor 3: timing on a
  // shared machine is noisy, a wrong unit or formula is off by far more).
  ThreadWorld world(2);
  nlohmann::json profiles[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      CalibrationOptions options;
      options.secondsPerPoint = 0.002;
      profiles[r] = calibrateCpu(world.rankView(r), options);
    });
  for (std::thread &t : ranks)
    t.join();
  const nlohmann::json &p = profiles[0];
  EXPECT_EQ(p["ranks"], 2);
  EXPECT_EQ(p["peak_flops"], profiles[1]["peak_flops"]);
  const double peak = p["peak_flops"]["f32"].get<double>();
  const double half = p["gemm_efficiency"]["half_flops"].get<double>();
  const double overhead = p["kernel_overhead"].get<double>();
  const double bandwidth = p["memory_bandwidth"].get<double>();
  EXPECT_GT(peak, 1e8);
  EXPECT_LT(peak, 1e14);
  EXPECT_GT(bandwidth, 1e7);
  ASSERT_TRUE(p["group_links"].contains("2"));
  for (const auto &point : p["points"]["gemm_flops_seconds"]) {
    const double flops = point[0], seconds = point[1];
    const double predicted = (flops + half) / peak + overhead;
    EXPECT_LT(predicted / seconds, 3.0) << flops;
    EXPECT_GT(predicted / seconds, 1.0 / 3) << flops;
  }
  const nlohmann::json &link = p["group_links"]["2"];
  for (const auto &point : p["points"]["all_reduce_sent_bytes_seconds"]["2"]) {
    const double sent = point[0], seconds = point[1];
    const double predicted = 2 * link["latency"].get<double>() +
                             sent / link["bandwidth"].get<double>();
    EXPECT_LT(predicted / seconds, 3.0) << sent;
    EXPECT_GT(predicted / seconds, 1.0 / 3) << sent;
  }
}
