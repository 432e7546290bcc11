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

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <sched.h>
#include <stdexcept>
#include <thread>

using json = nlohmann::json;

namespace dtc::rt {

LineFit fitLine(const std::vector<CalibrationPoint> &points) {
  // Weighted least squares, weight 1/t^2: the relative error of each point.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const CalibrationPoint &p : points) {
    if (p.seconds <= 0)
      continue;
    const double w = 1.0 / (p.seconds * p.seconds);
    sw += w;
    sx += w * p.size;
    sy += w * p.seconds;
    sxx += w * p.size * p.size;
    sxy += w * p.size * p.seconds;
  }
  LineFit fit;
  if (sw == 0)
    return fit;
  const double det = sw * sxx - sx * sx;
  if (std::fabs(det) > 1e-300 * sw * sxx) {
    fit.slope = (sw * sxy - sx * sy) / det;
    fit.intercept = (sy - fit.slope * sx) / sw;
    if (fit.intercept >= 0 && fit.slope > 0)
      return fit;
  }
  // The constrained optimum lies on the boundary, on whichever edge fits
  // better: a line through the origin (clamping only a negative intercept
  // would keep a slope fitted for a line that no longer exists and
  // under-predict every small point), or a flat line (times that fall with
  // size: noise on a latency-bound curve).
  auto squaredError = [&](const LineFit &line) {
    double sum = 0;
    for (const CalibrationPoint &p : points)
      if (p.seconds > 0) {
        const double relative =
            (line.intercept + line.slope * p.size) / p.seconds - 1;
        sum += relative * relative;
      }
    return sum;
  };
  const LineFit throughOrigin{0, sxx > 0 ? std::max(0.0, sxy / sxx) : 0};
  const LineFit flat{sy / sw, 0};
  return squaredError(throughOrigin) <= squaredError(flat) ? throughOrigin
                                                           : flat;
}

namespace {

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
  const int64_t reps = std::clamp<int64_t>(
      int64_t(std::ceil(minSeconds / kTimingRounds / std::max(trial, 1e-9))), 1,
      1000000);
  double fastest = INFINITY;
  for (int round = 0; round < kTimingRounds; ++round) {
    world.barrier();
    start = now();
    for (int64_t i = 0; i < reps; ++i)
      op();
    fastest =
        std::min(fastest, maxOverRanks(world, (now() - start) / double(reps)));
  }
  return fastest;
}

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

/// Copies of one operation's operands, enough that cycling through them
/// takes them from memory rather than from the caches each call, as the
/// kernels of a training step find them.
int64_t coldCopies(int64_t bytesPerCall) {
  constexpr int64_t kBeyondCaches = int64_t(48) << 20;
  return std::clamp<int64_t>(kBeyondCaches / std::max<int64_t>(bytesPerCall, 1),
                             1, 64);
}

/// One f32 operand of a timed kernel: its shape and the value it holds.
struct Operand {
  kernels::Shape shape;
  float value;
};

/// Seconds per call of `kernel` (two f32 inputs, one f32 output, `attrs`)
/// while every rank calls it at once, on enough copies of its operands,
/// cycled through, that they come cold (coldCopies).
double timeCold(Communicator &world, const CalibrationOptions &options,
                kernels::KernelContext &ctx, kernels::RunFn kernel,
                const json &attrs, const std::array<Operand, 3> &operands) {
  int64_t bytesPerCall = 0;
  for (const Operand &operand : operands)
    bytesPerCall += 4 * numel(operand.shape);
  const int64_t copies = coldCopies(bytesPerCall);
  std::vector<std::vector<float>> buffers;
  std::vector<kernels::KernelArgs> calls(static_cast<size_t>(copies));
  buffers.reserve(size_t(3 * copies));
  for (kernels::KernelArgs &args : calls) {
    std::vector<kernels::TensorArg> tensors;
    for (const Operand &operand : operands) {
      const int64_t elements = numel(operand.shape);
      buffers.emplace_back(size_t(elements), operand.value);
      tensors.push_back(
          {DType::F32, operand.shape, buffers.back().data(), elements});
    }
    args.in = {tensors[0], tensors[1]};
    args.out = {tensors[2]};
    args.attrs = &attrs;
    args.ctx = &ctx;
  }
  size_t next = 0;
  return timeTogether(world, options.secondsPerPoint, [&] {
    kernel(calls[next]);
    next = (next + 1) % calls.size();
  });
}

/// The matmul kernel on the shapes of transformer layers (tokens x hidden
/// times hidden x hidden or 4 hidden, and the weight gradient's transposed
/// product), operands cold: points of (flops, seconds).
std::vector<CalibrationPoint> measureGemm(Communicator &world,
                                          kernels::KernelContext &ctx,
                                          const CalibrationOptions &options) {
  kernels::RunFn matmul = kernels::cpu::findKernel("matmul");
  if (!matmul)
    throw std::runtime_error("the CPU kernels have no matmul");
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
      shapes.push_back({hidden, tokens, 4 * hidden, true});
    }
  std::vector<CalibrationPoint> points;
  for (const Shape &shape : shapes) {
    const kernels::Shape aShape = shape.transposeA
                                      ? kernels::Shape{shape.k, shape.m}
                                      : kernels::Shape{shape.m, shape.k};
    points.push_back(
        {2.0 * double(shape.m) * double(shape.k) * double(shape.n),
         timeCold(world, options, ctx, matmul,
                  shape.transposeA ? weightGrad : plain,
                  {Operand{aShape, 0.5f}, Operand{{shape.k, shape.n}, 0.25f},
                   Operand{{shape.m, shape.n}, 0.0f}})});
  }
  std::sort(points.begin(), points.end(),
            [](const CalibrationPoint &x, const CalibrationPoint &y) {
              return x.size < y.size;
            });
  return points;
}

/// The element-wise add kernel, operands cold: points of (bytes, seconds).
std::vector<CalibrationPoint> measureAdd(Communicator &world,
                                         kernels::KernelContext &ctx,
                                         const CalibrationOptions &options) {
  kernels::RunFn add = kernels::cpu::findKernel("add");
  if (!add)
    throw std::runtime_error("the CPU kernels have no add");
  const json attrs = json::object();
  std::vector<CalibrationPoint> points;
  for (int64_t n : {1 << 10, 1 << 13, 1 << 16, 1 << 18, 1 << 20, 1 << 22})
    // Two operands read, one result written.
    points.push_back(
        {12.0 * double(n), timeCold(world, options, ctx, add, attrs,
                                    {Operand{{n}, 1.0f}, Operand{{n}, 2.0f},
                                     Operand{{n}, 0.0f}})});
  return points;
}

/// The ring all-reduce of groups of `g` consecutive ranks, all at once:
/// points of (bytes one member sends, seconds).
std::vector<CalibrationPoint>
measureAllReduce(World &world, int g, const CalibrationOptions &options) {
  std::unique_ptr<Communicator> group =
      world.split(world.rank() / g, world.rank() % g);
  std::vector<CalibrationPoint> points;
  for (int64_t count : {1 << 8, 1 << 12, 1 << 15, 1 << 18, 1 << 20}) {
    std::vector<float> data(size_t(count), 1.0f);
    const double sent = 2.0 * (g - 1) / g * 4.0 * double(count);
    points.push_back(
        {sent, timeTogether(world.world(), options.secondsPerPoint, [&] {
           group->allReduce(data.data(), data.data(), size_t(count), DType::F32,
                            ReduceOp::Sum);
         })});
  }
  return points;
}

} // namespace

json calibrateCpu(World &world, const CalibrationOptions &options) {
  kernels::KernelContext ctx(options.threads);
  kernels::cpu::bindThreads(ctx);
  Communicator &all = world.world();
  const int ranks = world.size();

  const std::vector<CalibrationPoint> add = measureAdd(all, ctx, options);
  const LineFit addFit = fitLine(add);
  const double overhead = std::max(0.0, addFit.intercept);
  const double bandwidth = rateOf(addFit, add);

  const std::vector<CalibrationPoint> gemm = measureGemm(all, ctx, options);
  const LineFit gemmFit = fitLine(gemm);
  const double peak = rateOf(gemmFit, gemm);
  const double halfFlops = std::max(0.0, (gemmFit.intercept - overhead) * peak);

  json links = json::object(), linkPoints = json::object();
  for (int g = 2; g <= ranks; ++g) {
    if (ranks % g != 0)
      continue;
    const std::vector<CalibrationPoint> points =
        measureAllReduce(world, g, options);
    const LineFit fit = fitLine(points);
    links[std::to_string(g)] = {
        {"bandwidth", rateOf(fit, points)},
        {"latency", std::max(0.0, fit.intercept) / (2.0 * (g - 1))}};
    linkPoints[std::to_string(g)] = pointsJson(points);
  }

  // The matmul runs in f32 whatever the operands' precision (the CPU
  // kernels convert bf16/f16 operands to f32 around it).
  // The ranks share the cores this process may run on (dtc run starts
  // every rank of a mesh on this machine).
  cpu_set_t cpus;
  const int cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0
                        ? CPU_COUNT(&cpus)
                        : int(std::thread::hardware_concurrency());
  return {{"ranks", ranks},
          {"shared_cores", std::max(1, cores)},
          {"threads", options.threads},
          {"peak_flops", {{"f32", peak}, {"bf16", peak}}},
          {"gemm_efficiency", {{"max", 1.0}, {"half_flops", halfFlops}}},
          {"memory_bytes", double(physicalMemoryBytes()) / ranks},
          {"memory_bandwidth", bandwidth},
          {"memory_efficiency", 1.0},
          {"kernel_overhead", overhead},
          {"group_links", links},
          {"gemm_library", kernels::cpu::gemmLibrary()},
          {"points",
           {{"gemm_flops_seconds", pointsJson(gemm)},
            {"add_bytes_seconds", pointsJson(add)},
            {"all_reduce_sent_bytes_seconds", linkPoints}}}};
}

} // namespace dtc::rt
