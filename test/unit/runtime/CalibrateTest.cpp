//===- CalibrateTest.cpp - dtc calibrate's fits and measurements ---------===//
#include "dtc/runtime/Calibrate.h"

#include <gtest/gtest.h>

#include <algorithm>

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

TEST(Calibrate, FitLineKeepsALatencyAndARate) {
  // The smallest point came in faster than the line through the others
  // (noise): the free fit's intercept is negative. Clamping only the
  // intercept would keep a slope fitted for that steeper line; the
  // constrained fit is the best line through the origin, which predicts
  // every other point within 10% here.
  std::vector<CalibrationPoint> points = {
      {1e3, 0.8e-6}, {1e4, 1e-5}, {1e5, 1e-4}, {1e6, 1e-3}};
  LineFit fit = fitLine(points);
  EXPECT_EQ(fit.intercept, 0.0);
  EXPECT_GT(fit.slope, 0.0);
  for (const CalibrationPoint &p : points) {
    if (p.size == 1e3)
      continue;
    EXPECT_NEAR(fit.slope * p.size / p.seconds, 1.0, 0.1) << p.size;
  }
  // Times that fall with size (noise on a flat curve) give no rate: a flat
  // line at their weighted mean, never a negative latency or rate.
  LineFit flat = fitLine({{1e3, 2e-6}, {1e4, 1.9e-6}, {1e5, 1.8e-6}});
  EXPECT_GE(flat.intercept, 1.7e-6);
  EXPECT_GE(flat.slope, 0.0);
}

TEST(Calibrate, ProfileOfTwoRanksPredictsItsOwnPoints) {
  // Two ranks as threads: a profile with a link for groups of 2, and fitted
  // lines that describe what was measured. Timings on a loaded machine have
  // outliers, so the check is on the median ratio of line to point (a wrong
  // unit or formula is off by orders of magnitude, not a factor of 2).
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
  auto medianRatio = [](std::vector<double> ratios) {
    std::sort(ratios.begin(), ratios.end());
    return ratios[ratios.size() / 2];
  };
  std::vector<double> gemm, allReduce;
  for (const auto &point : p["points"]["gemm_flops_seconds"])
    gemm.push_back(((point[0].get<double>() + half) / peak + overhead) /
                   point[1].get<double>());
  const nlohmann::json &link = p["group_links"]["2"];
  for (const auto &point : p["points"]["all_reduce_sent_bytes_seconds"]["2"])
    allReduce.push_back(
        (2 * link["latency"].get<double>() +
         point[0].get<double>() / link["bandwidth"].get<double>()) /
        point[1].get<double>());
  EXPECT_GT(medianRatio(gemm), 0.5);
  EXPECT_LT(medianRatio(gemm), 2.0);
  EXPECT_GT(medianRatio(allReduce), 0.5);
  EXPECT_LT(medianRatio(allReduce), 2.0);
}
