//===- LearningRate.cpp - the update ops' schedule attributes -------------===//
#include "dtc/kernels/LearningRate.h"

#include <nlohmann/json.hpp>

namespace dtc::kernels {

bool parseLrScheduleKind(const std::string &name, LrScheduleKind &kind) {
  for (LrScheduleKind k : {LrScheduleKind::Constant, LrScheduleKind::Cosine,
                           LrScheduleKind::Linear})
    if (name == lrScheduleKindName(k)) {
      kind = k;
      return true;
    }
  return false;
}

const char *lrScheduleKindName(LrScheduleKind kind) {
  switch (kind) {
  case LrScheduleKind::Constant:
    return "constant";
  case LrScheduleKind::Cosine:
    return "cosine";
  case LrScheduleKind::Linear:
    return "linear";
  }
  return "?";
}

std::string learningRateSchedule(const nlohmann::json &attrs,
                                 LearningRateSchedule &schedule) {
  LearningRateSchedule s;
  auto number = [&](const char *key, double &out) -> std::string {
    auto it = attrs.find(key);
    if (it == attrs.end())
      return "";
    if (!it->is_number() || !std::isfinite(it->get<double>()))
      return std::string("attribute '") + key + "' must be a finite number";
    out = it->get<double>();
    return "";
  };
  auto integer = [&](const char *key, int64_t &out) -> std::string {
    auto it = attrs.find(key);
    if (it == attrs.end())
      return "";
    if (!it->is_number_integer())
      return std::string("attribute '") + key + "' must be an integer";
    out = it->get<int64_t>();
    return "";
  };
  if (auto it = attrs.find("lr_schedule"); it != attrs.end())
    if (!it->is_string() ||
        !parseLrScheduleKind(it->get<std::string>(), s.kind))
      return "attribute 'lr_schedule' must be \"constant\", \"cosine\" or "
             "\"linear\", got " +
             it->dump();
  for (std::string problem : {number("lr", s.lr), number("min_lr", s.minLr),
                              integer("warmup_steps", s.warmupSteps),
                              integer("decay_steps", s.decaySteps)})
    if (!problem.empty())
      return problem;
  if (s.warmupSteps < 0)
    return "attribute 'warmup_steps' must be >= 0, got " +
           std::to_string(s.warmupSteps);
  const bool decays = s.kind != LrScheduleKind::Constant;
  if (decays && s.decaySteps <= s.warmupSteps)
    return std::string("the ") + lrScheduleKindName(s.kind) +
           " schedule needs decay_steps > warmup_steps, got decay_steps " +
           std::to_string(s.decaySteps) + " and warmup_steps " +
           std::to_string(s.warmupSteps);
  if (!decays && (s.decaySteps != 0 || s.minLr != 0))
    return "a constant schedule has no decay: decay_steps and min_lr must be "
           "0";
  if (s.minLr < 0 || s.minLr > s.lr)
    return "attribute 'min_lr' must be in [0, lr], got " +
           nlohmann::json(s.minLr).dump();
  schedule = s;
  return "";
}

LearningRateSchedule learningRateSchedule(const nlohmann::json &attrs) {
  LearningRateSchedule schedule;
  learningRateSchedule(attrs, schedule);
  return schedule;
}

} // namespace dtc::kernels
