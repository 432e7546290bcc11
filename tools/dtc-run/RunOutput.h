//===- RunOutput.h - what dtc-run prints for a person -------------*- C++
//-*-===//
//
// The --print-every banner and throughput lines (stderr) and the --stats
// kernel table (stdout), both on rank 0.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TOOLS_DTC_RUN_RUNOUTPUT_H
#define DTC_TOOLS_DTC_RUN_RUNOUTPUT_H

#include "dtc/runtime/Trainer.h"

#include <chrono>
#include <string>

namespace dtc::rt {

/// --print-every: on rank 0, a banner (artifact, ranks, parameters, tokens
/// per step, steps per pass over the data) and, every N steps and at the
/// last, tokens/s over those steps, the time since the first step and the
/// time the remaining steps will take at that rate.
class Throughput {
public:
  Throughput(Trainer &trainer, int64_t every, int64_t steps,
             const std::string &artifact, int ranks, int rank)
      : every_(every), steps_(steps), tokens_(trainer.tokensPerStep()) {
    if (every_ <= 0 || rank != 0)
      return;
    int64_t params = 0;
    for (int t : trainer.artifact().tensorsWithRole(Role::Param))
      params += numel(trainer.artifact().tensors[size_t(t)].shape);
    std::string line = "dtc-run: " + artifact + ": " + std::to_string(ranks) +
                       " rank" + (ranks == 1 ? "" : "s") + ", " +
                       std::to_string(params) + " parameters, " +
                       std::to_string(tokens_) + " tokens per step";
    if (const double pass = trainer.stepsPerPass(); pass > 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, ", %.1f steps per pass over the data",
                    pass);
      line += buf;
    }
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }

  void step(const StepReport &r) {
    if (every_ <= 0)
      return;
    const auto now = std::chrono::steady_clock::now();
    if (done_ == 0)
      first_ =
          now - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(r.seconds));
    ++done_;
    windowSeconds_ += r.seconds;
    if (done_ % every_ != 0 && done_ != steps_)
      return;
    const int64_t windowSteps = (done_ - 1) % every_ + 1;
    const double rate = windowSeconds_ > 0
                            ? double(tokens_ * windowSteps) / windowSeconds_
                            : 0.0;
    const double elapsed = std::chrono::duration<double>(now - first_).count();
    const double perStep = windowSeconds_ / double(windowSteps);
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "dtc-run: step %lld/%lld: %.0f tokens/s, %.1f s elapsed",
                  (long long)r.step, (long long)(r.step + steps_ - done_), rate,
                  elapsed);
    std::string line = buf;
    if (done_ < steps_) {
      std::snprintf(buf, sizeof buf, ", ETA %.1f s",
                    perStep * double(steps_ - done_));
      line += buf;
    }
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    windowSeconds_ = 0;
  }

private:
  int64_t every_, steps_, tokens_, done_ = 0;
  double windowSeconds_ = 0;
  std::chrono::steady_clock::time_point first_;
};

/// The kernels (per operand shapes) that took longest in rank 0's timed
/// steps, with their share of the step and, for matmuls and attention,
/// GFLOP/s.
void printKernelTable(const RankExecutor &exec);

} // namespace dtc::rt

#endif // DTC_TOOLS_DTC_RUN_RUNOUTPUT_H
