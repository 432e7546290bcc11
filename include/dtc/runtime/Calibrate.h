//===- Calibrate.h - the cpu hardware profile, measured ---------*- C++ -*-===//
//
// `dtc calibrate` (docs/cost-model.md "Calibrating the cpu profile") runs
// calibrateCpu on R ranks of this machine, placed as `dtc run` places the
// ranks of an R-device artifact, for each R a mesh will use. Every
// measurement runs on all ranks at once, because that is how a plan's ranks
// share the cores, the memory bus and the links: the result is what one
// device of an R-device mesh gets, in the cost model's own terms.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CALIBRATE_H
#define DTC_RUNTIME_CALIBRATE_H

#include "dtc/runtime/Communicator.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <vector>

namespace dtc::rt {

struct CalibrationOptions {
  /// Kernel threads of each rank (as `dtc run` gives them).
  int threads = 1;
  /// Each timed point repeats its operation for at least this long, in
  /// kTimingRounds rounds whose fastest counts.
  double secondsPerPoint = 0.05;
};

/// One measured point: the operation's size and its time (the slowest
/// rank's, per call).
struct CalibrationPoint {
  double size = 0, seconds = 0;
};

/// The line t = intercept + slope * size through `points` with the least
/// sum of log(line / point)^2 (each point predicted within the smallest
/// factor, small and large points alike, too slow as bad as too fast),
/// with intercept >= `minIntercept` (>= 0) and slope >= 0 as the cost
/// model reads them (a latency and a rate).
struct LineFit {
  double intercept = 0, slope = 0;
};
LineFit fitLine(const std::vector<CalibrationPoint> &points,
                double minIntercept = 0);

/// A group's sync overhead (cost::Link::syncOverhead, syncRamp): the
/// seconds a collective call adds after `overhead`'s worth of computation
/// or more, and after less a part in proportion, reaching all of it at
/// `ramp` seconds of computation.
struct SyncFit {
  double overhead = 0, ramp = 0;
};
/// Fits SyncFit to points (size: the seconds each rank computed between
/// calls; seconds: what a call added), several per computation length:
/// overhead * min(1, length / ramp) through the lengths' medians in least
/// squares, `ramp` one of the lengths (the shortest of equal fits) and
/// `overhead` at least 0.
SyncFit fitSyncOverhead(const std::vector<CalibrationPoint> &points);

/// Measures, on every rank of `world` at once: the f32 matmul kernel on
/// square GEMMs (its peak and the flops at which it reaches half of it),
/// the element-wise add kernel (memory bandwidth and the per-kernel
/// overhead), and for every group size g > 1 dividing the world the ring
/// all-reduce of the communicators the runtime uses, all groups at once
/// (latency and bandwidth of a link of g ranks). Collective over `world`;
/// every rank returns the same profile JSON, with the points measured.
nlohmann::json calibrateCpu(World &world, const CalibrationOptions &options);

/// Seconds per call of `op` while every rank of `world` calls it at once,
/// the slowest rank's, from rounds of at least about `minSeconds` / 3 each
/// (runtime/cpu/Calibrate.cpp says why).
double timeTogether(Communicator &world, double minSeconds,
                    const std::function<void()> &op);

} // namespace dtc::rt

#endif // DTC_RUNTIME_CALIBRATE_H
