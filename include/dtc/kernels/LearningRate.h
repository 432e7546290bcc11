//===- LearningRate.h - the learning-rate schedule of the updates -*- C++
//-*-===//
//
// The schedule is part of the update ops (dtc.sgd_update, dtc.adam_update:
// attributes lr, lr_schedule, warmup_steps, decay_steps, min_lr) and the
// rate of update t (0-based, the optimizer step: updates applied) is
// computed from them where it is used: by the CPU and CUDA kernels, in
// double, and by the runtime for the log. One formula, written here once;
// it compiles for the device too.
//
//   t < W:                 lr·((t+1)/W)
//   otherwise, constant:   lr
//              cosine:     M + (lr − M)·(1 + cos(π·p))/2
//              linear:     lr − (lr − M)·p
//   p = min(1, (t − W)/(D − W))
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_LEARNINGRATE_H
#define DTC_KERNELS_LEARNINGRATE_H

#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "dtc/kernels/HostDevice.h"

namespace dtc::kernels {

enum class LrScheduleKind : int { Constant, Cosine, Linear };

struct LearningRateSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  double lr = 0;           ///< the peak rate (--lr)
  int64_t warmupSteps = 0; ///< W
  int64_t decaySteps = 0;  ///< D: the update at which the rate reaches M
  double minLr = 0;        ///< M

  /// The rate the update with 0-based index `update` applies.
  DTC_HOST_DEVICE double at(int64_t update) const {
    if (update < warmupSteps)
      return lr * (double(update + 1) / double(warmupSteps));
    if (kind == LrScheduleKind::Constant)
      return lr;
    double p = double(update - warmupSteps) / double(decaySteps - warmupSteps);
    if (p > 1.0)
      p = 1.0;
    if (kind == LrScheduleKind::Cosine)
      return minLr +
             (lr - minLr) * (1.0 + cos(3.14159265358979323846 * p)) / 2.0;
    return lr - (lr - minLr) * p;
  }

  /// Whether the rate depends on the update (the op then needs the step).
  DTC_HOST_DEVICE bool varies() const {
    return kind != LrScheduleKind::Constant || warmupSteps > 0;
  }
};

/// "constant", "cosine", "linear"; false for anything else.
bool parseLrScheduleKind(const std::string &name, LrScheduleKind &kind);
const char *lrScheduleKindName(LrScheduleKind kind);

/// The schedule of an update op's attributes (lr; lr_schedule, warmup_steps,
/// decay_steps, min_lr, each defaulting to a constant rate). Returns "" or
/// what is wrong: an unknown kind, W < 0, D <= W for cosine/linear, D or M
/// given to a schedule that has no decay, M outside [0, lr].
std::string learningRateSchedule(const nlohmann::json &attrs,
                                 LearningRateSchedule &schedule);
/// The schedule of attributes the kernel rule has accepted (the kernels and
/// the runtime read it so; rejected attributes give the constant default).
LearningRateSchedule learningRateSchedule(const nlohmann::json &attrs);

} // namespace dtc::kernels

#endif // DTC_KERNELS_LEARNINGRATE_H
