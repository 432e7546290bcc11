//===- RunOutput.cpp - the --stats kernel table
//-----------------------------===//
#include "RunOutput.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

namespace dtc::rt {

void printKernelTable(const RankExecutor &exec) {
  const ExecStats &s = exec.stats();
  if (s.timedRuns == 0)
    return;
  const double runs = double(s.timedRuns);
  double step = 0;
  for (const auto &[op, seconds] : s.secondsByOp)
    step += seconds;
  std::vector<std::pair<std::string, ExecStats::KernelShapeStats>> rows(
      s.byKernelShape.begin(), s.byKernelShape.end());
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
    return a.second.seconds > b.second.seconds;
  });
  const size_t shown = std::min<size_t>(rows.size(), 12);
  // The first step is a warm-up (ExecStats::timedRuns).
  std::printf("kernels, rank 0, per step (%.2f ms: kernels and collectives; "
              "%s; %s), top %zu of "
              "%zu by time:\n",
              step / runs * 1e3, exec.backend().description().c_str(),
              s.runs > s.timedRuns ? "after the first step" : "one step", shown,
              rows.size());
  std::printf("  %6s %9s %8s %6s  %s\n", "share", "ms", "GFLOP/s", "calls",
              "kernel and operand shapes");
  for (size_t i = 0; i < shown; ++i) {
    const auto &[key, k] = rows[i];
    char gflops[32] = "-";
    if (k.flops > 0 && k.seconds > 0)
      std::snprintf(gflops, sizeof gflops, "%.1f", k.flops / k.seconds / 1e9);
    std::printf("  %5.1f%% %9.3f %8s %6.0f  %s\n",
                step > 0 ? 100.0 * k.seconds / step : 0.0,
                k.seconds / runs * 1e3, gflops, double(k.calls) / runs,
                key.c_str());
  }
  std::fflush(stdout);
}

} // namespace dtc::rt
