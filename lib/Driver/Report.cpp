//===- Report.cpp - the plan report of dtc compile --report --------------===//
#include "Report.h"
#include "dtc/Planner/Evaluate.h"

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
  const int64_t flops = cost.flops, modelFlops = cost.modelFlops;
  const json &plan = artifact["plan"];
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
        {"flops_per_device", flops},
        {"model_flops_per_device", modelFlops},
        {"tflops_per_device",
         stepSeconds > 0 ? flops / stepSeconds / 1e12 : 0.0},
        // Model flops utilisation leaves recomputation out; hardware flops
        // utilisation counts everything the device executes.
        {"mfu", stepSeconds > 0 ? modelFlops / stepSeconds / peak : 0.0},
        {"hfu", stepSeconds > 0 ? flops / stepSeconds / peak : 0.0}}},
      {"compile_time_s", compileSeconds}};
}
