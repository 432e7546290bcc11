//===- PlanRecords.cpp - what the flags make of a plan ------------------===//
#include "PlanRecords.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Planner/Evaluate.h"
#include "dtc/Planner/ModelStructure.h"

using json = nlohmann::json;
using dtc::CompileOptions;

namespace {

/// The optimizer as the artifact records it.
json optimizerJson(const dtc::CompileOptions &o, double weightDecay) {
  json j = {{"kind", o.optimizer},
            {"lr", o.lr},
            {"weight_decay", weightDecay},
            {"grad_clip", o.gradClip},
            {"lr_schedule",
             {{"kind", o.lrSchedule},
              {"warmup_steps", o.warmupSteps},
              {"decay_steps", o.decaySteps},
              {"min_lr", o.minLr}}}};
  if (o.optimizer == "adam" || o.optimizer == "adamw") {
    j["beta1"] = o.beta1;
    j["beta2"] = o.beta2;
    j["eps"] = o.eps;
  }
  return j;
}

} // namespace

dtc::CompileOptions dtc::driver::withSequenceLayout(const CompileOptions &given,
                                                    mlir::ModuleOp module) {
  CompileOptions o = given;
  if (!o.spLayout.empty())
    return o;
  o.spLayout = "zigzag";
  if (o.sp <= 1)
    return o;
  module.walk([&](mlir::func::FuncOp model) {
    for (mlir::Type type : model.getArgumentTypes())
      if (auto tensor = mlir::dyn_cast<mlir::RankedTensorType>(type))
        if (tensor.getRank() == 2 &&
            mlir::isa<mlir::IntegerType>(tensor.getElementType()) &&
            tensor.getDimSize(1) % (2 * o.sp) != 0)
          o.spLayout = "striped";
  });
  return o;
}

mlir::dtc::ApplyStrategyOptions
dtc::driver::strategyOptions(const CompileOptions &o) {
  mlir::dtc::ApplyStrategyOptions planOptions;
  planOptions.mesh.assign(o.mesh.begin(), o.mesh.end());
  planOptions.dp = o.autoPlan ? 0 : o.dp;
  planOptions.tp = o.autoPlan ? 1 : o.tp;
  planOptions.zero = o.autoPlan ? 0 : o.zero;
  planOptions.pp = o.autoPlan ? 1 : o.pp;
  planOptions.sp = o.autoPlan ? 1 : o.sp;
  planOptions.ep = o.autoPlan ? 1 : o.ep;
  planOptions.virtualStages = o.virtualStages;
  // Gradient accumulation is more micro-batches: each of the K micro-steps
  // runs the M micro-batches of the pipeline, so M·K go through the
  // schedule, their gradients summed before the one reduction and update.
  planOptions.microbatches = o.microbatches * o.gradAccum;
  planOptions.schedule = o.schedule;
  // --remat auto settles the plan's recomputation below, once lowered.
  planOptions.recompute = o.remat == "auto" ? "none" : o.remat;
  planOptions.precision = o.precision;
  planOptions.sequenceParallel = o.sequenceParallel;
  planOptions.spLayout = o.spLayout.empty() ? "zigzag" : o.spLayout;
  planOptions.tpLayout = o.tpLayout;
  return planOptions;
}

json dtc::driver::modelStructureJson(mlir::ModuleOp module) {
  mlir::FailureOr<mlir::dtc::ModelStructure> s =
      mlir::dtc::analyzeModelStructure(mlir::dtc::findTrainStep(module));
  if (mlir::failed(s))
    return json();
  return {{"layers", s->layers()},
          {"distinct_layers", s->distinctLayers()},
          {"prologue_layers", s->firstBlockLayer},
          {"blocks", s->blockCount},
          {"layers_per_block", s->blockLayers},
          {"epilogue_layers", s->layers() - s->epilogueStart()}};
}

mlir::dtc::ArtifactOptions dtc::driver::emitOptions(const CompileOptions &o,
                                                    double weightDecay,
                                                    bool pipelined,
                                                    const std::string &remat,
                                                    const std::string &hwName) {
  mlir::dtc::ArtifactOptions artifactOptions;
  artifactOptions.sourceName = o.input;
  artifactOptions.optimizer = optimizerJson(o, weightDecay);
  artifactOptions.planExtras = {
      {"planner", !o.plannerRecord.empty() ? "search"
                  : o.autoPlan ? "auto (data parallelism over every device)"
                               : "strategy"},
      {"sp", o.sp},
      {"sp_layout", o.sp <= 1            ? std::string("none")
                    : o.spLayout.empty() ? std::string("zigzag")
                                         : o.spLayout},
      {"tp_layout", o.tp > 1 ? o.tpLayout : std::string("none")},
      {"sequence_parallel", o.sequenceParallel},
      {"ep", o.ep},
      {"microbatches", o.microbatches},
      {"schedule", pipelined ? o.schedule : std::string("none")},
      {"virtual_stages", o.virtualStages},
      {"remat", remat},
      {"precision", o.precision},
      {"grad_accum", o.gradAccum},
      {"hw", hwName}};
  return artifactOptions;
}
