//===- Calibrate.cpp - the cpu hardware profile, measured ----------------===//
//
// What each measurement feeds in the cost model (lib/CostModel,
// docs/cost-model.md):
//   kernelTime = max(flops / (peak * eff(flops)), bytes / bandwidth)
//                + kernel_overhead,   eff(f) = f / (f + half_flops)
// so a GEMM of f flops takes (f + half_flops) / peak + overhead: a line in
// f whose slope is 1/peak. The add kernel's line in bytes has slope
// 1/bandwidth and the overhead as intercept. A ring all-reduce of a group
// of g sends 2(g-1)/g of the bytes in 2(g-1) steps: a line in the bytes
// sent, slope 1/link bandwidth, intercept 2(g-1) latencies.
//
//===----------------------------------------------------------------------===//
#include "dtc/runtime/Calibrate.h"
#include "dtc/artifact/MemoryPlan.h"
#include "dtc/kernels/CpuKernels.h"
#include "dtc/kernels/Flops.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <sched.h>
#include <stdexcept>
#include <thread>

using json = nlohmann::json;

namespace dtc::rt {

namespace {

/// Sum over the points of log(line / point)^2: a point predicted twice as
/// slow costs what one predicted twice as fast does ("within a factor" is
/// what a cost model needs; relative error caps an under-prediction's cost
/// at 1 and so favours lines below the points). Infinite for a line that
/// predicts a non-positive time.
double logRatioError(const LineFit &line,
                     const std::vector<CalibrationPoint> &points) {
  double sum = 0;
  for (const CalibrationPoint &p : points) {
    if (p.seconds <= 0)
      continue;
    const double predicted = line.intercept + line.slope * p.size;
    if (!(predicted > 0))
      return INFINITY;
    const double error = std::log(predicted / p.seconds);
    sum += error * error;
  }
  return sum;
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// The largest of every rank's `value`.
double maxOverRanks(Communicator &comm, double value) {
  std::vector<double> all(size_t(comm.size()));
  comm.allGather(&value, all.data(), sizeof(double));
  return *std::max_element(all.begin(), all.end());
}

/// Rounds of each timed point; the fastest counts. A rank preempted by
/// another process (the machine's other work, another test) slows a round,
/// never speeds one up, so the minimum is the operation's own time.
constexpr int kTimingRounds = 3;
/// The most repetitions of one operation in a round.
constexpr int64_t kMaxReps = 1000000;

/// The best line of the form slope * (knee + size), knee >= 0, with
/// intercept slope * knee >= `minIntercept`. For a fixed knee the log error
/// is a convex quadratic in log(slope), least at the mean of
/// log(seconds / (knee + size)); the bound only raises it, so the clamped
/// slope is that ray's exact optimum.
LineFit bestLineWithKnee(const std::vector<CalibrationPoint> &timed,
                         double knee, double minIntercept) {
  double sumLog = 0;
  for (const CalibrationPoint &p : timed)
    sumLog += std::log(p.seconds / (knee + p.size));
  const double slope = std::exp(sumLog / double(timed.size()));
  if (slope * knee < minIntercept)
    return {minIntercept, minIntercept / knee};
  return {slope * knee, slope};
}

} // namespace

LineFit fitLine(const std::vector<CalibrationPoint> &points,
                double minIntercept) {
  std::vector<CalibrationPoint> timed;
  for (const CalibrationPoint &p : points)
    if (p.seconds > 0 && p.size >= 0)
      timed.push_back(p);
  if (timed.empty())
    return {minIntercept, 0};
  // The error is not convex in (intercept, slope), and a search over the
  // plane lands in the wrong valley where two kernels of a class scatter at
  // each size (the row reductions'). Every line with a positive intercept
  // and slope is slope * (knee + size) for one knee, and each knee's best
  // line is exact (bestLineWithKnee): the fit is a search over one variable,
  // log(knee), whose error is smooth. A dense grid finds the valley, a
  // golden-section search between its neighbours the bottom. The lines
  // with a zero slope or intercept are the two ends, taken exactly.
  double meanLogSeconds = 0;
  double smallest = INFINITY, largest = 0;
  for (const CalibrationPoint &p : timed) {
    meanLogSeconds += std::log(p.seconds);
    if (p.size > 0)
      smallest = std::min(smallest, p.size);
    largest = std::max(largest, p.size);
  }
  meanLogSeconds /= double(timed.size());
  LineFit best{std::max(minIntercept, std::exp(meanLogSeconds)), 0};
  double bestError = logRatioError(best, timed);
  if (largest <= 0)
    return best;
  auto consider = [&](const LineFit &line) {
    const double error = logRatioError(line, timed);
    if (error < bestError) {
      best = line;
      bestError = error;
    }
    return error;
  };
  // A knee of 0: the line through the origin.
  if (minIntercept <= 0 &&
      std::all_of(timed.begin(), timed.end(),
                  [](const CalibrationPoint &p) { return p.size > 0; }))
    consider(bestLineWithKnee(timed, 0, minIntercept));
  // Knees from far below the smallest size (a line through the origin) to
  // far above the largest (a flat line), 1.2% apart.
  constexpr int kKneeSteps = 2400;
  const double logLo = std::log(smallest * 1e-6),
               logHi = std::log(largest * 1e6);
  auto errorAt = [&](double logKnee) {
    return consider(bestLineWithKnee(timed, std::exp(logKnee), minIntercept));
  };
  std::vector<double> grid(kKneeSteps);
  for (int i = 0; i < kKneeSteps; ++i)
    grid[size_t(i)] =
        errorAt(logLo + (logHi - logLo) * double(i) / (kKneeSteps - 1));
  // Every local minimum of the grid is refined: two valleys can lie within
  // the grid's resolution of the same error.
  const double step = (logHi - logLo) / (kKneeSteps - 1);
  for (int i = 0; i < kKneeSteps; ++i) {
    const bool lowest =
        (i == 0 || grid[size_t(i)] <= grid[size_t(i - 1)]) &&
        (i == kKneeSteps - 1 || grid[size_t(i)] <= grid[size_t(i + 1)]);
    if (!lowest)
      continue;
    const double invPhi = (std::sqrt(5.0) - 1) / 2;
    double lo = logLo + step * (i - 1), hi = logLo + step * (i + 1);
    double x1 = hi - invPhi * (hi - lo), x2 = lo + invPhi * (hi - lo);
    double e1 = errorAt(x1), e2 = errorAt(x2);
    for (int iteration = 0; iteration < 60; ++iteration) {
      if (e1 < e2) {
        hi = x2;
        x2 = x1;
        e2 = e1;
        x1 = hi - invPhi * (hi - lo);
        e1 = errorAt(x1);
      } else {
        lo = x1;
        x1 = x2;
        e1 = e2;
        x2 = lo + invPhi * (hi - lo);
        e2 = errorAt(x2);
      }
    }
  }
  return best;
}

/// Seconds per call of `op` while every rank of `world` calls it at once,
/// the slowest rank's: after a warm-up and a trial call, all ranks repeat it
/// the same number of times (enough for `minSeconds` over all rounds on the
/// slowest), in kTimingRounds rounds; the fastest round's.
double timeTogether(Communicator &world, double minSeconds,
                    const std::function<void()> &op) {
  op();
  world.barrier();
  double start = now();
  op();
  const double trial = maxOverRanks(world, now() - start);
  const double roundSeconds = minSeconds / kTimingRounds;
  int64_t reps = std::clamp<int64_t>(
      int64_t(std::ceil(roundSeconds / std::max(trial, 1e-9))), 1, kMaxReps);
  double fastest = INFINITY;
  for (int round = 0; round < kTimingRounds;) {
    world.barrier();
    start = now();
    for (int64_t i = 0; i < reps; ++i)
      op();
    const double elapsed = maxOverRanks(world, now() - start);
    // A round much shorter than asked comes from a trial call that was
    // preempted (with more ranks than cores, milliseconds): so short a
    // round fits in one time slice, where the rank has its core to
    // itself, and measures a small kernel as on an idle machine (4 ranks
    // on 2 cores: 0.5 MFLOP GEMMs at 182 GFLOP/s a rank, the large ones at
    // 120). It is run again with the repetitions it needed; every rank
    // decides from the same maximum, so a collective `op` runs alike.
    if (elapsed < roundSeconds / 2 && reps < kMaxReps) {
      reps = std::min<int64_t>(kMaxReps,
                               int64_t(std::ceil(double(reps) * roundSeconds /
                                                 std::max(elapsed, 1e-9))));
      continue;
    }
    fastest = std::min(fastest, elapsed / double(reps));
    ++round;
  }
  return fastest;
}

namespace {

json pointsJson(const std::vector<CalibrationPoint> &points) {
  json out = json::array();
  for (const CalibrationPoint &p : points)
    out.push_back({p.size, p.seconds});
  return out;
}

/// The slope of `fit` as a rate (size per second); where the points do not
/// give a positive slope (no positive time), the largest point's rate.
double rateOf(const LineFit &fit, const std::vector<CalibrationPoint> &points) {
  if (fit.slope > 0)
    return 1.0 / fit.slope;
  const CalibrationPoint &last = points.back();
  return last.size / std::max(last.seconds, 1e-12);
}

/// Points measured and the line fitted through them.
struct Curve {
  std::vector<CalibrationPoint> points;
  LineFit fit;
};

/// One point to measure: its size and how to time it (again).
struct PointToTime {
  double size;
  std::function<double()> time;
};

/// Passes that time again the points their line misses by more than a
/// factor of 2. A point slowed by the machine's other work (every round of
/// it) lies far above the line of the others; timed again it usually comes
/// in at the operation's own time, and the faster time counts. Every rank
/// holds the same times (the slowest rank's), so all decide alike.
constexpr int kRetimingPasses = 2;

/// Times `points`, fits their line and times again the points it misses;
/// the points sorted by size. The line's intercept is at least
/// `minIntercept`.
Curve measureCurve(std::vector<PointToTime> toTime, double minIntercept = 0) {
  std::sort(toTime.begin(), toTime.end(),
            [](const PointToTime &x, const PointToTime &y) {
              return x.size < y.size;
            });
  Curve curve;
  for (const PointToTime &point : toTime)
    curve.points.push_back({point.size, point.time()});
  curve.fit = fitLine(curve.points, minIntercept);
  for (int pass = 0; pass < kRetimingPasses; ++pass) {
    bool retimed = false;
    for (size_t i = 0; i < toTime.size(); ++i) {
      CalibrationPoint &point = curve.points[i];
      const double ratio =
          (curve.fit.intercept + curve.fit.slope * point.size) / point.seconds;
      if (ratio >= 0.5 && ratio <= 2)
        continue;
      point.seconds = std::min(point.seconds, toTime[i].time());
      retimed = true;
    }
    if (!retimed)
      break;
    curve.fit = fitLine(curve.points, minIntercept);
  }
  return curve;
}

/// Copies of one operation's operands, enough that cycling through them
/// takes them from memory rather than from the caches each call, as the
/// kernels of a training step find them.
int64_t coldCopies(int64_t bytesPerCall) {
  constexpr int64_t kBeyondCaches = int64_t(48) << 20;
  return std::clamp<int64_t>(kBeyondCaches / std::max<int64_t>(bytesPerCall, 1),
                             1, 64);
}

/// One operand of a timed kernel: its shape and the value every element
/// holds; f32, or an i64 (the optimizer's step).
struct Operand {
  kernels::Shape shape;
  float value;
  DType dtype = DType::F32;
};

/// The arguments of `copies` calls of a kernel: inputs `in` and outputs
/// `out` of their own, `attrs`, `ctx`. The tensors live in `buffers` (a
/// deque keeps every buffer where it was made; an i64 takes two floats'
/// room).
std::vector<kernels::KernelArgs>
kernelCalls(std::deque<std::vector<float>> &buffers,
            kernels::KernelContext &ctx, const json &attrs,
            const std::vector<Operand> &in, const std::vector<Operand> &out,
            int64_t copies) {
  std::vector<kernels::KernelArgs> calls(static_cast<size_t>(copies));
  auto tensor = [&](const Operand &operand) {
    const int64_t elements = numel(operand.shape);
    if (operand.dtype == DType::I64) {
      buffers.emplace_back(size_t(2 * elements), 0.0f);
      std::fill_n(reinterpret_cast<int64_t *>(buffers.back().data()), elements,
                  int64_t(operand.value));
    } else {
      buffers.emplace_back(size_t(elements), operand.value);
    }
    return kernels::TensorArg{operand.dtype, operand.shape,
                              buffers.back().data(), elements};
  };
  for (kernels::KernelArgs &args : calls) {
    for (const Operand &operand : in)
      args.in.push_back(tensor(operand));
    for (const Operand &operand : out)
      args.out.push_back(tensor(operand));
    args.attrs = &attrs;
    args.ctx = &ctx;
  }
  return calls;
}

/// Seconds per call of `kernel` (inputs `in`, outputs `out`, `attrs`)
/// while every rank calls it at once, on enough copies of its
/// operands, cycled through, that they come cold (coldCopies).
double timeCold(Communicator &world, const CalibrationOptions &options,
                kernels::KernelContext &ctx, kernels::RunFn kernel,
                const json &attrs, const std::vector<Operand> &in,
                const std::vector<Operand> &out) {
  int64_t bytesPerCall = 0;
  for (const std::vector<Operand> *side : {&in, &out})
    for (const Operand &operand : *side)
      bytesPerCall += int64_t(dtypeSize(operand.dtype)) * numel(operand.shape);
  std::deque<std::vector<float>> buffers;
  const std::vector<kernels::KernelArgs> calls =
      kernelCalls(buffers, ctx, attrs, in, out, coldCopies(bytesPerCall));
  size_t next = 0;
  return timeTogether(world, options.secondsPerPoint, [&] {
    kernel(calls[next]);
    next = (next + 1) % calls.size();
  });
}

/// The CPU kernel `name`; the calibration needs every one it times.
kernels::RunFn cpuKernel(const char *name) {
  kernels::RunFn kernel = kernels::cpu::findKernel(name);
  if (!kernel)
    throw std::runtime_error(std::string("the CPU kernels have no ") + name);
  return kernel;
}

/// The matmul kernel on the shapes of transformer layers, operands cold:
/// points of (flops, seconds). Every product a layer's MLP makes, forward
/// and weight gradient (tokens x hidden times hidden x hidden or 4 hidden,
/// tokens x 4 hidden times 4 hidden x hidden, the transposed products of
/// the weight gradients): ranks sharing a core run them far apart (4 ranks
/// on 2 cores: the down-projection at 75 GFLOP/s a rank, the up-projection
/// at 146), where one rank runs all of them alike.
Curve measureGemm(Communicator &world, kernels::KernelContext &ctx,
                  const CalibrationOptions &options, double overhead) {
  kernels::RunFn matmul = cpuKernel("matmul");
  const json plain = json::object(), weightGrad = {{"transpose_a", true}};
  struct Shape {
    int64_t m, k, n;
    bool transposeA;
  };
  std::vector<Shape> shapes;
  for (int64_t hidden : {64, 128, 256, 512})
    for (int64_t tokens : {64, 256, 1024, 4096}) {
      shapes.push_back({tokens, hidden, hidden, false});
      shapes.push_back({tokens, hidden, 4 * hidden, false});
      shapes.push_back({tokens, 4 * hidden, hidden, false});
      shapes.push_back({hidden, tokens, 4 * hidden, true});
      shapes.push_back({4 * hidden, tokens, hidden, true});
    }
  std::vector<PointToTime> points;
  for (const Shape &shape : shapes) {
    const kernels::Shape aShape = shape.transposeA
                                      ? kernels::Shape{shape.k, shape.m}
                                      : kernels::Shape{shape.m, shape.k};
    points.push_back({2.0 * double(shape.m) * double(shape.k) * double(shape.n),
                      [&, shape, aShape] {
                        return timeCold(world, options, ctx, matmul,
                                        shape.transposeA ? weightGrad : plain,
                                        {Operand{aShape, 0.5f},
                                         Operand{{shape.k, shape.n}, 0.25f}},
                                        {Operand{{shape.m, shape.n}, 0.0f}});
                      }});
  }
  // The cost model's GEMM line starts at the kernel overhead (its
  // efficiency term adds half_flops / peak >= 0 to it).
  return measureCurve(std::move(points), overhead);
}

/// The element-wise add kernel, operands cold: points of (bytes, seconds).
Curve measureAdd(Communicator &world, kernels::KernelContext &ctx,
                 const CalibrationOptions &options) {
  kernels::RunFn add = cpuKernel("add");
  const json attrs = json::object();
  std::vector<PointToTime> points;
  for (int64_t n : {1 << 10, 1 << 13, 1 << 16, 1 << 18, 1 << 20, 1 << 22})
    // Two operands read, one result written.
    points.push_back({12.0 * double(n), [&, n] {
                        return timeCold(
                            world, options, ctx, add, attrs,
                            {Operand{{n}, 1.0f}, Operand{{n}, 2.0f}},
                            {Operand{{n}, 0.0f}});
                      }});
  return measureCurve(std::move(points));
}

/// Batch rows times heads of the attention calibrateCpu times: its
/// efficiency curve is per head (CostOpInterface::getIndependentProducts).
constexpr int64_t kAttentionBatch = 4, kAttentionHeads = 4;

/// The fused causal attention kernel (`gradient`: its backward) on the
/// shapes of transformer heads (sequence 64-512, head size 32 and 64),
/// operands cold: points of (flops, seconds), the flops the cost model
/// charges it (include/dtc/kernels/Flops.h).
Curve measureAttention(Communicator &world, kernels::KernelContext &ctx,
                       const CalibrationOptions &options, double overhead,
                       bool gradient) {
  kernels::RunFn attention =
      cpuKernel(gradient ? "attention_grad" : "attention");
  const json attrs = {{"causal", true}};
  constexpr int64_t kBatch = kAttentionBatch, kHeads = kAttentionHeads;
  std::vector<PointToTime> points;
  for (int64_t headDim : {32, 64})
    for (int64_t seq : {64, 128, 256, 512}) {
      const kernels::Shape shape{kBatch, kHeads, seq, headDim};
      const int tensors = gradient ? 4 : 3, results = gradient ? 3 : 1;
      points.push_back(
          {kernels::attentionFlops(kBatch, kHeads, seq, seq, headDim, true,
                                   gradient),
           [&, shape, tensors, results] {
             return timeCold(
                 world, options, ctx, attention, attrs,
                 std::vector<Operand>(size_t(tensors), Operand{shape, 0.5f}),
                 std::vector<Operand>(size_t(results), Operand{shape, 0.0f}));
           }});
    }
  return measureCurve(std::move(points), overhead);
}

/// The row reductions: layer_norm and its input gradient on rows of 128 to
/// 2048 elements, operands cold: points of (bytes, seconds), one line for
/// the class, from at least the kernel overhead.
Curve measureRowReduction(Communicator &world, kernels::KernelContext &ctx,
                          const CalibrationOptions &options, double overhead) {
  kernels::RunFn norm = cpuKernel("layer_norm"),
                 inputGrad = cpuKernel("layer_norm_input_grad");
  const json attrs = {{"epsilon", 1e-5}};
  std::vector<PointToTime> points;
  for (int64_t hidden : {128, 512, 2048})
    for (int64_t elements : {1 << 14, 1 << 17, 1 << 20}) {
      const kernels::Shape x{elements / hidden, hidden}, row{hidden};
      // x, gamma, beta -> y; x, gamma, dy -> dx.
      const double bytes = 4.0 * double(3 * elements + 2 * hidden);
      points.push_back({bytes, [&, x, row] {
                          return timeCold(world, options, ctx, norm, attrs,
                                          {Operand{x, 0.5f}, Operand{row, 1.0f},
                                           Operand{row, 0.0f}},
                                          {Operand{x, 0.0f}});
                        }});
      points.push_back({bytes, [&, x, row] {
                          return timeCold(world, options, ctx, inputGrad, attrs,
                                          {Operand{x, 0.5f}, Operand{row, 1.0f},
                                           Operand{x, 0.25f}},
                                          {Operand{x, 0.0f}});
                        }});
    }
  return measureCurve(std::move(points), overhead);
}

/// The Adam update on 16K-4M parameters (a layer's weights), operands
/// cold: points of (bytes, seconds), p, g, m and v read and p', m', v'
/// written, as the cost model counts them. Its own line, from at least the
/// kernel overhead: per element a division and a square root in double,
/// which a core computes slower than it streams the bytes (one core: 14
/// GB/s where the add streams 28).
Curve measureOptimizer(Communicator &world, kernels::KernelContext &ctx,
                       const CalibrationOptions &options, double overhead) {
  kernels::RunFn adam = cpuKernel("adam_update");
  const json attrs = {{"lr", 1e-3},           {"beta1", 0.9},
                      {"beta2", 0.999},       {"eps", 1e-8},
                      {"weight_decay", 0.01}, {"decoupled", true}};
  std::vector<PointToTime> points;
  for (int64_t n : {1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22}) {
    const kernels::Shape shape{n};
    points.push_back({28.0 * double(n), [&, shape] {
                        return timeCold(
                            world, options, ctx, adam, attrs,
                            {Operand{shape, 0.5f}, Operand{shape, 0.01f},
                             Operand{shape, 0.001f}, Operand{shape, 1e-4f},
                             Operand{{}, 0.0f, DType::I64}},
                            std::vector<Operand>(3, Operand{shape, 0.0f}));
                      }});
  }
  return measureCurve(std::move(points), overhead);
}

/// The ring all-reduce of groups of `g` consecutive ranks, all at once:
/// points of (bytes one member sends, seconds). Up to 16 MB, the size of a
/// gradient bucket, and cold, as a step's buckets are (the backward wrote
/// them among everything else): a hot 4 MB buffer reduced at 3.5 GB/s on 4
/// ranks sharing 2 cores where the step's 13 MB bucket took 1.7.
Curve measureAllReduce(World &world, int g, const CalibrationOptions &options) {
  std::unique_ptr<Communicator> group =
      world.split(world.rank() / g, world.rank() % g);
  std::vector<PointToTime> points;
  for (int64_t count :
       {1 << 8, 1 << 12, 1 << 15, 1 << 18, 1 << 20, 1 << 21, 1 << 22}) {
    const double sent = 2.0 * (g - 1) / g * 4.0 * double(count);
    points.push_back(
        {sent, [&, count] {
           std::vector<std::vector<float>> copies(
               size_t(coldCopies(4 * count)),
               std::vector<float>(size_t(count), 1.0f));
           size_t next = 0;
           return timeTogether(world.world(), options.secondsPerPoint, [&] {
             std::vector<float> &data = copies[next];
             next = (next + 1) % copies.size();
             group->allReduce(data.data(), data.data(), size_t(count),
                              DType::F32, ReduceOp::Sum);
           });
         }});
  }
  return measureCurve(std::move(points));
}

/// Points of the sync overhead (Link::syncOverhead, syncRamp) of each group
/// size in `groups`: what an all-reduce costs beyond its own time when every
/// rank computes between calls, as the steps of a plan do. Each rank runs 1, 2,
/// 4 or 8 matmuls (a layer's up-projection shape), then its group
/// all-reduces; a point is that loop's time less the matmuls' and the
/// all-reduce's, each timed alone, for a small and a tensor-parallel-sized
/// all-reduce, three times each: (seconds of matmuls, seconds added). The
/// more a rank computes between calls, the further the ranks sharing a
/// core come apart, up to a few time slices: 8 ranks on 2 cores added
/// about 0.8, 1.4, 4 and 6 ms after 4.6, 9, 18 and 37 ms of matmuls; 2
/// ranks on 2 cores 0.3, 0.6 and 1 ms after 1.3, 5 and 20 ms. The lengths
/// a plan's many-call collectives see (tensor parallelism, ZeRO-3: 2-15
/// ms); a longer one, timed in as many rounds, only adds noise.
std::map<int, std::vector<CalibrationPoint>>
measureSyncOverhead(World &world, const std::vector<int> &groups,
                    kernels::KernelContext &ctx,
                    const CalibrationOptions &options) {
  Communicator &all = world.world();
  kernels::RunFn matmul = cpuKernel("matmul");
  const json attrs = json::object();
  constexpr int64_t kTokens = 256, kHidden = 256, kCopies = 4;
  std::deque<std::vector<float>> buffers;
  const std::vector<kernels::KernelArgs> calls =
      kernelCalls(buffers, ctx, attrs,
                  {Operand{{kTokens, kHidden}, 0.5f},
                   Operand{{kHidden, 4 * kHidden}, 0.25f}},
                  {Operand{{kTokens, 4 * kHidden}, 0.0f}}, kCopies);
  const double seconds = 10 * options.secondsPerPoint;
  const std::array<int64_t, 4> lengths = {1, 2, 4, 8};
  auto segmentOf = [&](int64_t matmuls) {
    return [&, matmuls] {
      for (int64_t i = 0; i < matmuls; ++i)
        matmul(calls[size_t(i % kCopies)]);
    };
  };
  // The matmuls alone, once: every group's points share their lengths, so
  // an entry's fit takes the median of all of them at each.
  std::array<double, lengths.size()> work{};
  for (size_t l = 0; l < lengths.size(); ++l)
    work[l] = timeTogether(all, seconds, segmentOf(lengths[l]));
  std::map<int, std::vector<CalibrationPoint>> points;
  for (int g : groups) {
    std::unique_ptr<Communicator> group =
        world.split(world.rank() / g, world.rank() % g);
    for (int repeat = 0; repeat < 3; ++repeat)
      for (int64_t count : {int64_t(1) << 10, int64_t(1) << 19}) {
        std::vector<float> data(size_t(count), 1.0f);
        auto allReduce = [&] {
          group->allReduce(data.data(), data.data(), size_t(count), DType::F32,
                           ReduceOp::Sum);
        };
        const double alone = timeTogether(all, seconds, allReduce);
        for (size_t l = 0; l < lengths.size(); ++l) {
          auto segment = segmentOf(lengths[l]);
          const double together = timeTogether(all, seconds, [&] {
            segment();
            allReduce();
          });
          points[g].push_back({work[l], together - work[l] - alone});
        }
      }
  }
  return points;
}

/// The median of the points' seconds (the mean of the middle two of an
/// even count).
double medianSeconds(std::vector<CalibrationPoint> points) {
  std::sort(points.begin(), points.end(),
            [](const CalibrationPoint &a, const CalibrationPoint &b) {
              return a.seconds < b.seconds;
            });
  const size_t n = points.size();
  return n == 0 ? 0 : (points[(n - 1) / 2].seconds + points[n / 2].seconds) / 2;
}

/// The cores the ranks of `world` may run on together (dtc run starts
/// every rank of a mesh on this machine): the union of their affinities.
/// One rank's own affinity is not it: with no more ranks than cores the
/// launcher binds each rank to a core of its own.
int coresOfAllRanks(Communicator &world) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof cpus, &cpus) != 0)
    return std::max(1, int(std::thread::hardware_concurrency()));
  std::vector<float> mine(CPU_SETSIZE, 0.0f);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &cpus))
      mine[size_t(cpu)] = 1.0f;
  world.allReduce(mine.data(), mine.data(), mine.size(), DType::F32,
                  ReduceOp::Max);
  return std::max(1, int(std::count(mine.begin(), mine.end(), 1.0f)));
}

} // namespace

SyncFit fitSyncOverhead(const std::vector<CalibrationPoint> &points) {
  std::map<double, std::vector<CalibrationPoint>> byLength;
  for (const CalibrationPoint &p : points)
    byLength[p.size].push_back(p);
  // Each length's points are differences of timings tens of times their
  // size: their median, not the points, is fitted.
  std::vector<std::pair<double, double>> medians;
  for (const auto &[length, at] : byLength)
    medians.push_back({length, medianSeconds(at)});
  SyncFit best;
  double bestError = INFINITY;
  for (const auto &[ramp, unused] : medians) {
    double wy = 0, ww = 0;
    for (const auto &[length, added] : medians) {
      const double w = std::min(1.0, length / ramp);
      wy += w * added;
      ww += w * w;
    }
    const double overhead = std::max(0.0, wy / ww);
    double error = 0;
    for (const auto &[length, added] : medians) {
      const double miss = added - overhead * std::min(1.0, length / ramp);
      error += miss * miss;
    }
    if (error < bestError) {
      bestError = error;
      best = {overhead, ramp};
    }
  }
  return best;
}

json calibrateCpu(World &world, const CalibrationOptions &options) {
  kernels::KernelContext ctx(options.threads);
  kernels::cpu::bindThreads(ctx);
  Communicator &all = world.world();
  const int cores = coresOfAllRanks(all);
  const int ranks = world.size();

  const Curve add = measureAdd(all, ctx, options);
  const double overhead = std::max(0.0, add.fit.intercept);
  const double bandwidth = rateOf(add.fit, add.points);

  const Curve gemm = measureGemm(all, ctx, options, overhead);
  const double peak = rateOf(gemm.fit, gemm.points);
  const double halfFlops =
      std::max(0.0, (gemm.fit.intercept - overhead) * peak);

  // Fused attention's own curves: max its rate over the GEMM peak, and as
  // for the GEMM the intercept beyond the overhead as half_flops, here per
  // head (the intercept is every head's).
  json classes = json::object(), classPoints = json::object();
  for (bool gradient : {false, true}) {
    const Curve curve = measureAttention(all, ctx, options, overhead, gradient);
    const double rate = rateOf(curve.fit, curve.points);
    const char *name = gradient ? "attention_grad" : "attention";
    classes[name] = {
        {"max", std::min(1.0, rate / peak)},
        {"half_flops",
         std::max(0.0, (curve.fit.intercept - overhead) * rate /
                           double(kAttentionBatch * kAttentionHeads))}};
    classPoints[std::string(name) + "_flops_seconds"] =
        pointsJson(curve.points);
  }
  const Curve rows = measureRowReduction(all, ctx, options, overhead);
  classes["row_reduction"] = {{"bandwidth", rateOf(rows.fit, rows.points)},
                              {"overhead", rows.fit.intercept}};
  classPoints["row_reduction_bytes_seconds"] = pointsJson(rows.points);
  const Curve optimizer = measureOptimizer(all, ctx, options, overhead);
  classes["optimizer"] = {
      {"bandwidth", rateOf(optimizer.fit, optimizer.points)},
      {"overhead", optimizer.fit.intercept}};
  classPoints["optimizer_bytes_seconds"] = pointsJson(optimizer.points);

  json links = json::object(), linkPoints = json::object(),
       syncPoints = json::object();
  std::vector<int> groups;
  for (int g = 2; g <= ranks; ++g)
    if (ranks % g == 0)
      groups.push_back(g);
  for (int g : groups) {
    const Curve allReduce = measureAllReduce(world, g, options);
    links[std::to_string(g)] = {
        {"bandwidth", rateOf(allReduce.fit, allReduce.points)},
        {"latency", allReduce.fit.intercept / (2.0 * (g - 1))}};
    linkPoints[std::to_string(g)] = pointsJson(allReduce.points);
  }
  // One sync overhead for every group of an entry, fitted to all their
  // points: on the second machine the 4-rank entry's groups of 2 and of 4
  // fitted 0.43 and 0.47, 0.11 and 1.52, 0.93 and 0.27, 1.64 and 0.76 ms
  // in four calibrations of one afternoon, no order between them, and a
  // group's 24 points are noisier than an entry's 48-72.
  std::vector<CalibrationPoint> everySyncPoint;
  for (const auto &[g, points] :
       measureSyncOverhead(world, groups, ctx, options)) {
    everySyncPoint.insert(everySyncPoint.end(), points.begin(), points.end());
    syncPoints[std::to_string(g)] = pointsJson(points);
  }
  const SyncFit syncFit = fitSyncOverhead(everySyncPoint);
  for (auto &[group, link] : links.items()) {
    link["sync_overhead"] = syncFit.overhead;
    link["sync_ramp"] = syncFit.ramp;
  }

  // The matmul runs in f32 whatever the operands' precision (the CPU
  // kernels convert bf16/f16 operands to f32 around it).
  return {{"ranks", ranks},
          {"shared_cores", cores},
          {"threads", options.threads},
          {"peak_flops", {{"f32", peak}, {"bf16", peak}}},
          {"gemm_efficiency", {{"max", 1.0}, {"half_flops", halfFlops}}},
          {"kernel_classes", classes},
          {"memory_bytes", double(physicalMemoryBytes()) / ranks},
          {"memory_bandwidth", bandwidth},
          {"memory_efficiency", 1.0},
          {"kernel_overhead", overhead},
          {"group_links", links},
          {"gemm_library", kernels::cpu::gemmLibrary()},
          {"points",
           {{"gemm_flops_seconds", pointsJson(gemm.points)},
            {"add_bytes_seconds", pointsJson(add.points)},
            {"kernel_classes", classPoints},
            {"all_reduce_sent_bytes_seconds", linkPoints},
            {"sync_overhead_compute_seconds", syncPoints}}}};
}

} // namespace dtc::rt
