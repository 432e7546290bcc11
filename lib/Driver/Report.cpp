//===- Report.cpp - the plan report of dtc compile --report --------------===//
#include "Report.h"
#include "dtc/Planner/Evaluate.h"
#include "dtc/artifact/MemoryPlan.h"

#include <cstdio>

using namespace mlir;
using json = nlohmann::json;

namespace {
/// How the plan was chosen: the search's record, a pinned strategy, or
/// (CompileOptions without either, as library callers may ask) data
/// parallelism over every device. With `--remat auto`, also what activation
/// checkpointing it chose and why.
json plannerJson(const ::dtc::CompileOptions &o, const json &plan) {
  json planner;
  if (!o.plannerRecord.empty())
    planner = json::parse(o.plannerRecord);
  else if (!o.autoPlan)
    planner = {
        {"mode", "strategy"},
        {"why",
         "degrees pinned by --strategy; shardings by Megatron's rules and "
         "propagation"}};
  else
    planner = {{"mode", "auto"},
               {"searched", false},
               {"chose", "dp=" + std::to_string(plan.value("dp", 1))},
               {"why", "neither a strategy nor the search was asked for: data "
                       "parallelism over every device"}};
  if (plan.contains("remat_choice"))
    planner["remat"] = plan["remat_choice"];
  return planner;
}

} // namespace

/// The plan report of spec/cli.md: the plan's cost (the planner's
/// evaluation) beside the choices that made the plan.
json mlir::dtc::buildReport(ModuleOp module, const json &artifact,
                            const ::dtc::CompileOptions &o,
                            ::dtc::cost::HardwareProfile &hw,
                            double compileSeconds) {
  mlir::dtc::PlanCost cost =
      mlir::dtc::evaluatePlan(module, artifact, hw, o.precision == "f32");
  const std::vector<int64_t> &mesh = cost.mesh;
  const int64_t params = cost.params;
  const json &memory = cost.memory, &comm = cost.comm,
             &commByName = cost.commByName, &calls = cost.calls;
  const double bubble = cost.bubble, stepSeconds = cost.stepSeconds,
               computeSeconds = cost.computeSeconds,
               commSeconds = cost.commSeconds, peak = cost.peakFlops;
  const json &plan = artifact["plan"];
  // Model flops utilisation as Megatron defines it: the model's flops per
  // step (plan.model_flops_per_step, before partitioning) over every
  // device, not what the busiest device computes (tp ranks computing the
  // same op would count it each). At most the busiest device's own count:
  // the step before partitioning still adds a tied weight's two gradients
  // where the emitted program accumulates them in place.
  const int64_t devices = artifact.value("devices", int64_t(1));
  const int64_t flops = cost.flops,
                modelFlops =
                    plan.contains("model_flops_per_step") && devices > 0
                        ? std::min(cost.modelFlops,
                                   plan["model_flops_per_step"].get<int64_t>() /
                                       devices)
                        : cost.modelFlops;
  json storedByLayer = json::object();
  for (auto [layer, bytes] : mlir::dtc::storedActivationBytesByLayer(module))
    storedByLayer[std::to_string(layer)] = bytes;
  return json{
      {"stored_activation_bytes_by_layer", storedByLayer},
      {"model_structure", plan.value("model_structure", json())},
      {"mesh", mesh},
      {"devices", artifact["devices"]},
      {"hw", hw.name},
      {"hw_profile", json::parse(::dtc::cost::profileJson(hw))},
      {"params", params},
      {"strategy",
       {{"dp", plan.value("dp", 1)},
        {"tp", plan.value("tp", 1)},
        {"pp", plan.value("pp", 1)},
        {"sp", o.sp},
        {"sp_layout", plan.value("sp_layout", std::string("none"))},
        {"tp_layout", o.tp > 1 ? o.tpLayout : std::string("none")},
        {"sequence_parallel", o.sequenceParallel},
        {"ep", o.ep},
        {"zero", plan.value("zero", 0)},
        {"microbatches", o.microbatches},
        {"schedule",
         artifact.contains("pipeline") ? o.schedule : std::string("none")},
        {"virtual_stages", o.virtualStages},
        {"remat", plan.value("remat", std::string("none"))},
        {"precision", o.precision},
        {"grad_accum", o.gradAccum}}},
      {"axes", plan.value("axes", json::object())},
      {"planner", plannerJson(o, plan)},
      // The optimizer and its learning-rate schedule, as the artifact has
      // them (docs/cli.md has the schedule's formula).
      {"optimizer", artifact.value("optimizer", json::object())},
      {"memory_bytes", memory},
      {"bubble_fraction", bubble},
      {"comm_bytes", comm},
      {"comm_bytes_by_comm", commByName},
      {"collective_calls", calls},
      {"predicted",
       {{"step_time_s", stepSeconds},
        {"compute_time_s", computeSeconds},
        {"comm_time_s", commSeconds},
        {"comm_hidden_s", cost.hiddenCommSeconds},
        {"flops_per_device", flops},
        {"model_flops_per_device", modelFlops},
        {"tflops_per_device",
         stepSeconds > 0 ? flops / stepSeconds / 1e12 : 0.0},
        // Model flops utilisation leaves recomputation out; hardware flops
        // utilisation counts everything the device executes.
        {"mfu", stepSeconds > 0 ? modelFlops / stepSeconds / peak : 0.0},
        {"hfu", stepSeconds > 0 ? flops / stepSeconds / peak : 0.0},
        {"kernel_time_by_op_s", cost.kernelSecondsByOp}}},
      {"compile_time_s", compileSeconds}};
}

namespace {
std::string countText(double n) {
  const char *units[] = {"", " K", " M", " B", " T"};
  int u = 0;
  while (n >= 1000 && u < 4) {
    n /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s" : "%.3g%s", n, units[u]);
  return buf;
}

std::string secondsText(double s) {
  char buf[32];
  if (s < 1)
    std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

double number(const json &j, const char *key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

/// Bytes of the report, as every dtc message writes them (rt::formatBytes).
std::string bytesText(const json &j, const char *key) {
  return ::dtc::rt::formatBytes(uint64_t(number(j, key)));
}
} // namespace

namespace dtc {
std::string degreesText(const json &degrees, const json &axes) {
  std::string text;
  for (const char *degree : {"dp", "tp", "pp", "sp", "ep"}) {
    const int64_t d = degrees.value(degree, int64_t(1));
    if (d <= 1)
      continue;
    std::string on;
    for (const json &axis : axes.value(degree, json::array()))
      on += (on.empty() ? "" : ",") + std::to_string(axis.get<int64_t>());
    text += (text.empty() ? "" : ", ") + std::string(degree) + "=" +
            std::to_string(d) + (on.empty() ? "" : " on axis " + on);
  }
  return text;
}

std::string planChoicesText(const json &plan) {
  const int64_t micro = plan.value("microbatches", int64_t(1));
  return "zero " + std::to_string(plan.value("zero", 0)) + ", " +
         std::to_string(micro) + " micro-batch" + (micro == 1 ? "" : "es") +
         ", schedule " + plan.value("schedule", std::string("none")) +
         ", remat " + plan.value("remat", std::string("none")) + ", " +
         plan.value("precision", std::string("f32"));
}

std::string planSummary(const json &report, const std::string &model,
                        const std::string &output) {
  std::string out = "dtc: compiled " + model + " -> " + output + " in " +
                    secondsText(number(report, "compile_time_s")) + "\n";
  // mesh 2x2, 4 devices: dp=2 on axis 0, tp=2 on axis 1
  std::string mesh;
  for (const json &size : report.value("mesh", json::array()))
    mesh += (mesh.empty() ? "" : "x") + std::to_string(size.get<int64_t>());
  const json &strategy = report.value("strategy", json::object());
  const std::string degrees =
      degreesText(strategy, report.value("axes", json::object()));
  const std::string mode =
      report.value("planner", json::object()).value("mode", "");
  out += "  mesh       " + mesh + ", " +
         std::to_string(report.value("devices", int64_t(1))) + " device" +
         (report.value("devices", int64_t(1)) == 1 ? "" : "s") + ": " +
         (degrees.empty() ? "one device" : degrees) +
         (mode.empty() ? "" : " (" + mode + ")") + "\n";
  out += "  plan       " + planChoicesText(strategy) + "\n";
  out += "  parameters " + countText(number(report, "params")) + "\n";
  const json &memory = report.value("memory_bytes", json::object());
  std::string parts;
  using ::dtc::artifact::MemCategory;
  for (MemCategory kind : {MemCategory::Param, MemCategory::Grad,
                           MemCategory::Optimizer, MemCategory::Activation})
    parts += (parts.empty() ? "" : ", ") +
             std::string(::dtc::artifact::memKindDescription(int(kind))) + " " +
             bytesText(memory, ::dtc::artifact::memKindReportKey(int(kind)));
  out += "  memory     " + bytesText(memory, "peak_per_device") +
         " per device of " + bytesText(memory, "budget_per_device") + ": " +
         parts + "\n";
  const json &comm = report.value("comm_bytes", json::object());
  const json &calls = report.value("collective_calls", json::object());
  std::string moved;
  for (auto &[kind, bytes] : comm.items())
    if (bytes.is_number() && bytes.get<double>() > 0)
      moved +=
          (moved.empty() ? "" : ", ") + kind + " " +
          ::dtc::rt::formatBytes(uint64_t(bytes.get<double>())) +
          (calls.contains(kind)
               ? " in " + std::to_string(calls[kind].get<int64_t>()) + " calls"
               : std::string());
  out += "  comm/step  " + (moved.empty() ? std::string("none") : moved) + "\n";
  const json &predicted = report.value("predicted", json::object());
  char mfu[32];
  std::snprintf(mfu, sizeof mfu, "%.2f", number(predicted, "mfu"));
  out += "  predicted  " + secondsText(number(predicted, "step_time_s")) +
         " per step on " + report.value("hw", std::string("?")) + ", MFU " +
         mfu + "\n";
  return out;
}
} // namespace dtc
