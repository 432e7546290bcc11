//===- EmitArtifact.cpp - partitioned module -> .dtc artifact body -------===//
//
// The entry point of the emitter: reads the plan, emits the program of
// every step function (one SPMD program, or one per pipeline stage) and
// assembles the artifact body around them with the tensors and
// communicators the programs declared. EmitterInternal.h describes the
// steps.
//
//===----------------------------------------------------------------------===//
#include "EmitterInternal.h"
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Sharding/Sharding.h"
#include "dtc/Version.h"
#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/artifact/Evaluation.h"

using namespace mlir;
using namespace mlir::dtc;
using namespace mlir::dtc::emitter;

//===----------------------------------------------------------------------===//
// Tensors and communicators
//===----------------------------------------------------------------------===//

void ArtifactTables::declareTensor(const json &tensor) {
  std::string name = tensor["name"].get<std::string>();
  if (tensorNames.insert(name).second)
    tensors.push_back(tensor);
}

FailureOr<std::string> ArtifactTables::communicator(ArrayRef<int16_t> axes) {
  std::vector<int16_t> key(axes.begin(), axes.end());
  auto it = commNames.find(key);
  if (it != commNames.end())
    return it->second;
  for (int16_t axis : axes)
    if (axis < 0 || axis >= (int64_t)plan.grid.size())
      return module.emitError() << "collective on grid axis " << axis
                                << " of a " << plan.grid.size() << "-axis grid";
  // Name it after the parallel dimension it serves when the plan says so.
  std::string name;
  for (const auto &[dimension, dimensionAxes] : plan.namedAxes)
    if (std::equal(dimensionAxes.begin(), dimensionAxes.end(), key.begin(),
                   key.end()))
      name = dimension;
  if (name.empty()) {
    name = "axes";
    for (int16_t axis : axes)
      name += "_" + std::to_string(axis);
  }
  communicators.push_back(
      {{"name", name},
       {"mesh_axes", std::vector<int64_t>(key.begin(), key.end())}});
  commNames[key] = name;
  return name;
}

//===----------------------------------------------------------------------===//
// The plan
//===----------------------------------------------------------------------===//

namespace {

/// Everything the emitter reads of the module's dtc.plan.
FailureOr<PlanInfo> readPlan(ModuleOp module) {
  std::optional<Plan> plan = getPlan(module);
  if (!plan)
    return module.emitError()
           << "the module has no dtc.plan grid (not partitioned)";
  FailureOr<SmallVector<int64_t>> grid = getGridShape(module, plan->grid);
  if (failed(grid))
    return failure();
  PlanInfo info;
  info.grid = std::move(*grid);
  info.microBatchAxes = plan->microbatchAxes;
  info.pipelineAxes = plan->ppAxes;
  for (const auto &[key, count] : plan->namedCounts())
    info.record[key] = count;
  json axesJson = json::object();
  for (const auto &[kind, axes] : plan->namedAxes()) {
    info.namedAxes.push_back({kind, axes});
    axesJson[kind] = std::vector<int64_t>(axes.begin(), axes.end());
  }
  info.record["axes"] = axesJson;
  return info;
}

} // namespace

//===----------------------------------------------------------------------===//
// The artifact body
//===----------------------------------------------------------------------===//

FailureOr<json> mlir::dtc::buildArtifact(ModuleOp module,
                                         const ArtifactOptions &options) {
  SmallVector<func::FuncOp> steps = trainSteps(module);
  if (steps.empty())
    return module.emitError() << "no training step to emit";
  FailureOr<PlanInfo> plan = readPlan(module);
  if (failed(plan))
    return failure();
  // Devices: the grid without its virtual micro-batch axes (the last ones).
  SmallVector<int64_t> mesh(plan->grid.begin(),
                            plan->grid.end() - plan->microBatchAxes.size());
  int64_t devices = 1;
  for (int64_t size : mesh)
    devices *= size;

  ArtifactTables tables(module, *plan);
  json programs = json::array();
  bool pipelined = steps.size() > 1 || !plan->microBatchAxes.empty();
  if (pipelined && options.pipeline.is_null())
    return module.emitError() << "a pipelined step needs a schedule to emit";
  for (func::FuncOp step : steps) {
    ProgramEmitter emitter(module, step, *plan, tables);
    FailureOr<json> program = pipelined
                                  ? emitStageProgram(emitter, options.pipeline)
                                  : emitter.emitSpmdProgram();
    if (failed(program))
      return failure();
    programs.push_back(std::move(*program));
  }
  json planJson = plan->record;
  for (auto &[key, value] : options.planExtras.items())
    planJson[key] = value;
  json body{{"format", "dtc-artifact"},
            {"version", ::dtc::rt::kArtifactVersion},
            {"producer", std::string("dtc ") + DTC_VERSION_STRING},
            {"source", options.sourceName},
            {"mesh", std::vector<int64_t>(mesh.begin(), mesh.end())},
            {"devices", devices},
            {"plan", planJson},
            {"optimizer", options.optimizer}};
  body["communicators"] = std::move(tables.communicators);
  body["tensors"] = std::move(tables.tensors);
  body["programs"] = std::move(programs);
  if (pipelined) {
    json pipeline = options.pipeline;
    pipeline.erase("per_stage");
    body["pipeline"] = pipeline;
  }
  // Beside the step, what evaluating the loss runs of it (no backward, no
  // update), derived from the programs just emitted.
  std::string error;
  if (!::dtc::artifact::addEvaluation(body, "the emitted artifact", error))
    return module.emitError()
           << "internal error: cannot derive the evaluation: " << error;
  return body;
}

bool mlir::dtc::runsKernel(Operation *op) {
  if (foldsIntoMatmuls(op))
    return false;
  if (!isa<ViewOpInterface>(op) || op->getNumOperands() == 0)
    return true;
  Value operand = op->getOperand(0);
  return isa<BlockArgument>(operand) ||
         isa_and_nonnull<arith::ConstantOp>(operand.getDefiningOp());
}

void mlir::dtc::walkCostedOps(
    func::FuncOp step, int64_t microbatches, bool countRecomputation,
    llvm::function_ref<void(Operation *, int64_t)> visit) {
  auto module = step->getParentOfType<ModuleOp>();
  std::optional<Plan> plan = getPlan(module);
  SmallVector<int64_t> mbAxes =
      plan ? plan->microbatchAxes : SmallVector<int64_t>();
  llvm::DenseMap<Value, ValueScope> scope;
  bool perMicroBatch =
      !mbAxes.empty() && succeeded(classifyScopes(step, mbAxes, scope));
  step.walk([&](CostOpInterface op) {
    if ((!countRecomputation && op->hasAttr(DtcDialect::kRecomputeAttr)) ||
        !runsKernel(op))
      return;
    int64_t times =
        perMicroBatch && op->getNumResults() &&
                scope.lookup(op->getResult(0)) == ValueScope::MicroBatch
            ? microbatches
            : 1;
    visit(op, times);
  });
}

int64_t mlir::dtc::modelFlopsPerStep(ModuleOp module) {
  func::FuncOp step = findTrainStep(module);
  return step ? flopsPerStep(step, /*microbatches=*/1,
                             /*countRecomputation=*/false)
              : 0;
}

int64_t mlir::dtc::flopsPerStep(func::FuncOp step, int64_t microbatches,
                                bool countRecomputation) {
  int64_t flops = 0;
  walkCostedOps(step, microbatches, countRecomputation,
                [&](Operation *op, int64_t times) {
                  flops += cast<CostOpInterface>(op).getFlopCount() * times;
                });
  return flops;
}
