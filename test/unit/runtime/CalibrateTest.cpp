//===- CalibrateTest.cpp - dtc calibrate's fits and measurements ---------===//
#include "dtc/runtime/Calibrate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <set>
#include <thread>

using namespace dtc::rt;

// The sync overhead's fit: each length's median (six points around it, two
// far off), then overhead * min(1, length / ramp) through them.
TEST(Calibrate, FitSyncOverheadFindsTheOverheadAndItsRamp) {
  auto pointsOf = [](double overhead, double ramp) {
    std::vector<CalibrationPoint> points;
    for (double length : {2e-3, 4e-3, 8e-3, 16e-3}) {
      const double added = overhead * std::min(1.0, length / ramp);
      for (double off : {-3e-5, -1e-5, 1e-5, 3e-5, -5e-3, 5e-3})
        points.push_back({length, added + off});
    }
    return points;
  };
  SyncFit fit = fitSyncOverhead(pointsOf(2e-3, 8e-3));
  EXPECT_NEAR(fit.overhead, 2e-3, 1e-12);
  EXPECT_EQ(fit.ramp, 8e-3);
  // Still rising at the longest length: a ramp that long.
  fit = fitSyncOverhead(pointsOf(4e-3, 16e-3));
  EXPECT_NEAR(fit.overhead, 4e-3, 1e-12);
  EXPECT_EQ(fit.ramp, 16e-3);
  // Flat from the shortest.
  fit = fitSyncOverhead(pointsOf(1e-3, 2e-3));
  EXPECT_NEAR(fit.overhead, 1e-3, 1e-12);
  EXPECT_EQ(fit.ramp, 2e-3);
  // Groups that gain from computing apart (their waits overlap the other
  // groups' computation): no overhead.
  fit = fitSyncOverhead(pointsOf(-1e-3, 4e-3));
  EXPECT_EQ(fit.overhead, 0);
  EXPECT_EQ(fitSyncOverhead({}).overhead, 0);
}

TEST(Calibrate, FitLineRecoversTheLine) {
  // t = 3 us + size / (2 GB/s): exact points give the line back.
  std::vector<CalibrationPoint> points;
  for (double size : {1e3, 1e4, 1e5, 1e6, 1e7})
    points.push_back({size, 3e-6 + size / 2e9});
  LineFit fit = fitLine(points);
  EXPECT_NEAR(fit.intercept, 3e-6, 1e-12);
  EXPECT_NEAR(1.0 / fit.slope, 2e9, 1e3);
}

TEST(Calibrate, FitLineWeighsSmallAndLargePointsAlike) {
  // A 10% error on the largest point would move an unweighted fit's
  // intercept far more than the small points' own size; in log error each
  // point weighs by its own scale and the intercept stays near the small
  // points'.
  std::vector<CalibrationPoint> points = {{1e2, 1e-6 + 1e2 / 1e9},
                                          {1e3, 1e-6 + 1e3 / 1e9},
                                          {1e4, 1e-6 + 1e4 / 1e9},
                                          {1e8, 1.1 * (1e-6 + 1e8 / 1e9)}};
  LineFit fit = fitLine(points);
  EXPECT_NEAR(fit.intercept, 1e-6, 0.3e-6);
  EXPECT_GT(fit.slope, 0.0);
}

namespace {

double logRatioError(const LineFit &line,
                     const std::vector<CalibrationPoint> &points) {
  double sum = 0;
  for (const CalibrationPoint &p : points) {
    const double error =
        std::log((line.intercept + line.slope * p.size) / p.seconds);
    sum += error * error;
  }
  return sum;
}

/// The least log error over a grid of lines (intercept and slope each 0 or
/// one of 2000 geometric steps over 8 decades around the points' scale).
double gridLeastError(const std::vector<CalibrationPoint> &points) {
  double least = INFINITY;
  auto values = [](double around) {
    std::vector<double> out = {0};
    for (int i = 0; i < 2000; ++i)
      out.push_back(around * std::pow(10.0, -6 + 8.0 * i / 1999));
    return out;
  };
  const std::vector<double> intercepts = values(points.front().seconds);
  const std::vector<double> slopes =
      values(points.back().seconds / points.back().size);
  for (double intercept : intercepts)
    for (double slope : slopes)
      if (intercept > 0 || slope > 0)
        least = std::min(least, logRatioError({intercept, slope}, points));
  return least;
}

} // namespace

TEST(Calibrate, FitLineIsTheBestInLogError) {
  // Timings of a loaded machine: the 128 KB point slowed 5x, the largest
  // spilled out of the caches. Least squares on relative error caps an
  // under-prediction's cost at 1 and lands below most points (median ratio
  // 0.23 here); in log error too slow costs what too fast does, and the
  // median point is within a factor of 2.
  const std::vector<CalibrationPoint> points = {{1024, 1.5e-6},
                                                {16384, 1.8e-5},
                                                {131072, 1.6e-4},
                                                {1048576, 1.4e-4},
                                                {4194304, 6.3e-3}};
  const LineFit fit = fitLine(points);
  EXPECT_LE(logRatioError(fit, points), gridLeastError(points) * (1 + 1e-6));
  std::vector<double> ratios;
  for (const CalibrationPoint &p : points)
    ratios.push_back((fit.intercept + fit.slope * p.size) / p.seconds);
  std::sort(ratios.begin(), ratios.end());
  EXPECT_GT(ratios[2], 0.5);
  EXPECT_LT(ratios[2], 2.0);
}

TEST(Calibrate, FitLineLeavesTheBoundWhenTheOptimumDoes) {
  // A class of two kernels (layer_norm and its input gradient, measured
  // together): two points at each size, a factor 2-3 apart. The best
  // starting line sits at the intercept's bound, the optimum above it.
  const std::vector<CalibrationPoint> points = {
      {197632, 1.67e-5},   {197632, 2.82e-5},   {200704, 1.36e-5},
      {200704, 1.60e-5},   {212992, 1.37e-5},   {212992, 1.55e-5},
      {1573888, 6.66e-5},  {1573888, 1.54e-4},  {1576960, 5.93e-5},
      {1576960, 1.33e-4},  {1589248, 7.61e-5},  {1589248, 2.05e-4},
      {12583936, 4.37e-4}, {12583936, 1.15e-3}, {12587008, 3.63e-4},
      {12587008, 9.71e-4}, {12599296, 4.61e-4}, {12599296, 1.48e-3}};
  auto expectBestLineAbove = [](const std::vector<CalibrationPoint> &set,
                                double intercept) {
    const LineFit fit = fitLine(set);
    EXPECT_GT(fit.intercept, intercept);
    EXPECT_LE(logRatioError(fit, set), gridLeastError(set) * (1 + 1e-6));
  };
  expectBestLineAbove(points, 0.0);
  // Another machine's: the search from the best starts slid to the bound
  // (an intercept of 1e-20 s, 6.246 against the optimum's 6.196 at 2 us).
  const std::vector<CalibrationPoint> scattered = {
      {197632, 1.249e-5},   {197632, 3.210e-5},   {200704, 9.117e-6},
      {200704, 2.575e-5},   {212992, 9.161e-6},   {212992, 2.984e-5},
      {1573888, 9.955e-5},  {1573888, 2.597e-4},  {1576960, 5.552e-5},
      {1576960, 2.200e-4},  {1589248, 8.428e-5},  {1589248, 1.831e-4},
      {12583936, 5.876e-4}, {12583936, 1.903e-3}, {12587008, 3.846e-4},
      {12587008, 1.479e-3}, {12599296, 4.858e-4}, {12599296, 1.714e-3}};
  expectBestLineAbove(scattered, 1e-6);
}

namespace {

/// The least log error of any line with intercept >= `minIntercept` and
/// slope >= 0, as calibrate.test.py finds it: a 300 x 300 grid over the
/// slope and the intercept's excess (each 0 or a geometric range), zoomed
/// in 4 times around its best.
double zoomedGridLeastError(const std::vector<CalibrationPoint> &points,
                            double minIntercept) {
  double fewest = INFINITY, most = 0, smallest = INFINITY, largest = 0;
  for (const CalibrationPoint &p : points) {
    fewest = std::min(fewest, p.seconds);
    most = std::max(most, p.seconds);
    smallest = std::min(smallest, p.size);
    largest = std::max(largest, p.size);
  }
  double aLo = fewest * 1e-4, aHi = most * 4;
  double bLo = fewest / largest * 1e-4, bHi = most / smallest * 4;
  double least = INFINITY;
  auto range = [](double lo, double hi) {
    std::vector<double> out = {0};
    for (int i = 0; i < 300; ++i)
      out.push_back(lo * std::pow(hi / lo, i / 299.0));
    return out;
  };
  for (int zoom = 0; zoom < 4; ++zoom) {
    double bestA = 0, bestB = 0, bestError = INFINITY;
    for (double a : range(aLo, aHi))
      for (double b : range(bLo, bHi))
        if (minIntercept + a > 0 || b > 0)
          if (double e = logRatioError({minIntercept + a, b}, points);
              e < bestError) {
            bestError = e;
            bestA = a;
            bestB = b;
          }
    least = std::min(least, bestError);
    const double aCentre = bestA > 0 ? bestA : aLo,
                 bCentre = bestB > 0 ? bestB : bLo;
    aLo = aCentre / 4, aHi = aCentre * 4;
    bLo = bCentre / 4, bHi = bCentre * 4;
  }
  return least;
}

} // namespace

TEST(Calibrate, FitLineIsTheBestOnScatteredClasses) {
  // Classes of two kernels measured together (the row reductions: layer
  // norm and its input gradient) scatter a factor 1-4 apart at each size,
  // and a loaded machine moves each point further. The error has several
  // valleys there; calibrate.test failed twice on a clean clone where the
  // fit ended in a worse one (4.467 against the best line's 4.409). On 60
  // such sets, with and without a bound on the intercept, the fit is at
  // least as good as an independent grid search.
  std::mt19937 random(20261128);
  std::uniform_real_distribution<double> uniform(0, 1);
  for (int set = 0; set < 60; ++set) {
    const double overhead = 1e-6 * (0.5 + uniform(random));
    const double bandwidth = 1e10 * (0.3 + uniform(random));
    std::vector<CalibrationPoint> points;
    for (double size :
         {2e5, 2.1e5, 2.2e5, 1.57e6, 1.58e6, 1.59e6, 1.258e7, 1.259e7, 1.26e7})
      for (double kernelFactor : {1.0, 1.0 + 3 * uniform(random)})
        points.push_back({size, (overhead + size / bandwidth) * kernelFactor *
                                    std::exp(0.6 * (uniform(random) - 0.3))});
    for (double minIntercept : {0.0, overhead}) {
      const LineFit fit = fitLine(points, minIntercept);
      EXPECT_GE(fit.intercept, minIntercept);
      EXPECT_GE(fit.slope, 0.0);
      EXPECT_LE(logRatioError(fit, points),
                zoomedGridLeastError(points, minIntercept) * (1 + 1e-9))
          << "set " << set << " bound " << minIntercept;
    }
  }
}

TEST(Calibrate, RoundsLastAsLongAsAskedThoughTheTrialCallWasSlow) {
  // The trial call (the second) is held up 30 ms, as a rank preempted on a
  // machine with more ranks than cores is; every other call takes ~20 us.
  // Rounds sized from the trial alone would be one call each, short enough
  // to fit in one time slice; each timed round must last about 10 ms (30 ms
  // over 3 rounds), so about 500 calls.
  std::unique_ptr<World> world = makeLocalWorld();
  int64_t calls = 0;
  const double seconds = timeTogether(world->world(), 0.03, [&] {
    ++calls;
    const auto start = std::chrono::steady_clock::now();
    const auto length = std::chrono::microseconds(calls == 2 ? 30000 : 20);
    while (std::chrono::steady_clock::now() - start < length) {
    }
  });
  EXPECT_GT(calls, 3 * 250);
  EXPECT_LT(seconds, 1e-3);
  EXPECT_GE(seconds, 20e-6);
}

TEST(Calibrate, FitLineKeepsTheInterceptAtItsBound) {
  // Exact points of t = 1 us + size / 1 GB/s with the intercept held at
  // 2 us or more: the intercept sits on the bound, the slope below 1/1e9.
  std::vector<CalibrationPoint> points;
  for (double size : {1e3, 1e4, 1e5})
    points.push_back({size, 1e-6 + size / 1e9});
  const LineFit fit = fitLine(points, 2e-6);
  EXPECT_EQ(fit.intercept, 2e-6);
  EXPECT_GT(fit.slope, 0.0);
  EXPECT_LT(fit.slope, 1e-9);
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
  // line between them, never a negative latency or rate.
  LineFit flat = fitLine({{1e3, 2e-6}, {1e4, 1.9e-6}, {1e5, 1.8e-6}});
  EXPECT_GE(flat.intercept, 1.8e-6);
  EXPECT_LE(flat.intercept, 2e-6);
  EXPECT_EQ(flat.slope, 0.0);
}

namespace {

/// Every rank's profile from calibrateCpu on `count` ranks as threads.
std::vector<nlohmann::json> calibrateOnThreads(int count,
                                               double secondsPerPoint) {
  ThreadWorld world(count);
  std::vector<nlohmann::json> profiles;
  profiles.resize(size_t(count));
  std::vector<std::thread> ranks;
  for (int r = 0; r < count; ++r)
    ranks.emplace_back([&, r] {
      CalibrationOptions options;
      options.secondsPerPoint = secondsPerPoint;
      profiles[size_t(r)] = calibrateCpu(world.rankView(r), options);
    });
  for (std::thread &t : ranks)
    t.join();
  return profiles;
}

} // namespace

// Four ranks as threads: groups of 2 and of 4, one sync overhead for both,
// fitted to all their points (which share their computation lengths).
TEST(Calibrate, SyncOverheadIsOneFitOfEveryGroupsPoints) {
  const std::vector<nlohmann::json> profiles = calibrateOnThreads(4, 0.001);
  const nlohmann::json &p = profiles[0];
  const nlohmann::json &points = p["points"]["sync_overhead_compute_seconds"];
  ASSERT_TRUE(points.contains("2") && points.contains("4"));
  std::vector<CalibrationPoint> every;
  std::set<double> lengths;
  for (const auto &[group, groupPoints] : points.items()) {
    EXPECT_EQ(groupPoints.size(), 24u) << group;
    for (const auto &point : groupPoints) {
      every.push_back({point[0].get<double>(), point[1].get<double>()});
      lengths.insert(point[0].get<double>());
    }
  }
  EXPECT_EQ(lengths.size(), 4u);
  const SyncFit fit = fitSyncOverhead(every);
  for (const char *group : {"2", "4"}) {
    EXPECT_EQ(p["group_links"][group]["sync_overhead"].get<double>(),
              fit.overhead);
    EXPECT_EQ(p["group_links"][group]["sync_ramp"].get<double>(), fit.ramp);
  }
}

TEST(Calibrate, ProfileFieldsAreTheFittedLines) {
  // Two ranks as threads: a profile with a link for groups of 2 whose
  // fields are the lines fitted through what was measured.
  const std::vector<nlohmann::json> profiles = calibrateOnThreads(2, 0.002);
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
  // The profile's fields are the fitted lines as the cost model reads them
  // (whether those lines are the best is FitLineIsTheBestInLogError's).
  auto pointsOf = [](const nlohmann::json &json) {
    std::vector<CalibrationPoint> points;
    for (const auto &point : json)
      points.push_back({point[0].get<double>(), point[1].get<double>()});
    return points;
  };
  const LineFit add = fitLine(pointsOf(p["points"]["add_bytes_seconds"]));
  EXPECT_DOUBLE_EQ(overhead, add.intercept);
  EXPECT_DOUBLE_EQ(1 / bandwidth, add.slope);
  const LineFit gemm =
      fitLine(pointsOf(p["points"]["gemm_flops_seconds"]), overhead);
  EXPECT_NEAR(half / peak + overhead, gemm.intercept, 1e-9 * gemm.intercept);
  EXPECT_DOUBLE_EQ(1 / peak, gemm.slope);
  const nlohmann::json &link = p["group_links"]["2"];
  const LineFit allReduce =
      fitLine(pointsOf(p["points"]["all_reduce_sent_bytes_seconds"]["2"]));
  EXPECT_DOUBLE_EQ(2 * link["latency"].get<double>(), allReduce.intercept);
  EXPECT_DOUBLE_EQ(1 / link["bandwidth"].get<double>(), allReduce.slope);
}
