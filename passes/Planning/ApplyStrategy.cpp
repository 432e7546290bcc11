//===- ApplyStrategy.cpp - a strategy's degrees as a plan -----------------===//
//
// Strategy -> Plan: the degrees of `--strategy` (or `--auto`) become a
// `#dtc.plan` on the module and the device grid it refers to; what the plan
// means for each value is dtc-materialize-plan's business, so a search can
// write a Plan the same way and reuse everything after.
//
// Degrees map to mesh axes: tensor parallelism takes the innermost (fastest)
// axes whose sizes multiply to tp, pipeline stages the next ones multiplying
// to pp, data parallelism the remaining outer ones. Micro-batches are one
// more, virtual grid axis (no devices; the emitter loops over it), the
// minor split of the batch inside each dp shard.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_APPLYSTRATEGY
#include "dtc/Passes/Passes.h.inc"

namespace {

constexpr StringLiteral kGridName = "mesh";

/// "4x2": a grid shape as the command line writes it.
std::string shapeString(ArrayRef<int64_t> grid) {
  std::string shape;
  for (int64_t size : grid)
    shape += (shape.empty() ? "" : "x") + std::to_string(size);
  return shape;
}

/// Takes whole axes, innermost first from `axis` down, whose sizes multiply
/// to `degree` (size-1 axes add nothing and are skipped). False when no
/// such run exists.
bool takeAxes(ArrayRef<int64_t> grid, int64_t &axis, int64_t degree,
              SmallVectorImpl<int64_t> &taken) {
  int64_t covered = 1;
  for (; axis >= 0 && covered < degree; --axis) {
    if (grid[axis] == 1)
      continue;
    taken.insert(taken.begin(), axis);
    covered *= grid[axis];
  }
  return covered == degree;
}

struct ApplyStrategyPass : impl::ApplyStrategyBase<ApplyStrategyPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!findTrainStep(module)) {
      module.emitError()
          << "no training step to plan (run dtc-build-training-step first)";
      return signalPassFailure();
    }
    FailureOr<Plan> plan = planFromDegrees(module);
    if (failed(plan) || failed(createGrid(module, *plan)))
      return signalPassFailure();
    setPlan(module, *plan);
  }

  /// The degrees checked against the mesh and mapped to its axes.
  FailureOr<Plan> planFromDegrees(ModuleOp module) {
    if (zero < 0 || zero > 3)
      return module.emitError()
             << "zero must be 0, 1, 2 or 3, got " << static_cast<int64_t>(zero);
    SmallVector<int64_t> grid(mesh.begin(), mesh.end());
    if (grid.empty())
      grid = {1};
    int64_t devices = 1;
    for (int64_t size : grid) {
      if (size <= 0)
        return module.emitError() << "mesh axis sizes must be positive";
      devices *= size;
    }
    Plan plan;
    plan.grid = kGridName.str();
    plan.tp = tp;
    plan.pp = pp;
    plan.sp = sp;
    plan.ep = ep;
    plan.microbatches = microbatches;
    plan.virtualStages = virtualStages;
    plan.zero = zero;
    if (plan.tp < 1)
      return module.emitError() << "tp must be >= 1, got " << plan.tp;
    if (plan.pp < 1 || plan.sp < 1 || plan.ep < 1 || plan.microbatches < 1 ||
        plan.virtualStages < 1)
      return module.emitError()
             << "pp, sp, ep, virtual-stages and microbatches must be >= 1";
    const int64_t model = plan.tp * plan.pp * plan.sp * plan.ep;
    const std::string sp =
        (plan.sp > 1 ? " x sp=" + std::to_string(plan.sp) : std::string()) +
        (plan.ep > 1 ? " x ep=" + std::to_string(plan.ep) : std::string());
    if (devices % model != 0)
      return module.emitError()
             << "tp=" << plan.tp << " x pp=" << plan.pp << sp
             << " does not divide the " << devices << " devices of the mesh";
    plan.dp = dp == 0 ? devices / model : static_cast<int64_t>(dp);
    if (plan.dp * model != devices)
      return module.emitError()
             << "dp=" << plan.dp << " x tp=" << plan.tp << " x pp=" << plan.pp
             << sp << " uses " << plan.dp * model
             << " devices but the mesh has " << devices;

    // Tensor parallelism takes the innermost axes (the fastest links),
    // pipeline stages the next, data parallelism the rest.
    int64_t axis = (int64_t)grid.size() - 1;
    if (!takeAxes(grid, axis, plan.tp, plan.tpAxes))
      return module.emitError()
             << "tp=" << plan.tp
             << " is not a product of the innermost mesh axes of "
             << shapeString(grid)
             << " (tensor parallelism takes whole axes from the last, "
             << "fastest one; e.g. --mesh " << devices / plan.tp << "x"
             << plan.tp << ")";
    // Ring-attention sequence parallelism: one whole axis next, so the
    // ring's neighbours are close.
    if (!takeAxes(grid, axis, plan.sp, plan.spAxes) ||
        (plan.sp > 1 && plan.spAxes.size() != 1))
      return module.emitError()
             << "sp=" << plan.sp << " must be one whole mesh axis of "
             << shapeString(grid)
             << " inside data parallelism's and pipeline stages' and outside "
                "tensor parallelism's (e.g. --mesh "
             << devices / (plan.sp * plan.tp) << "x" << plan.sp
             << (plan.tp > 1 ? "x" + std::to_string(plan.tp) : std::string())
             << ")";
    if (!takeAxes(grid, axis, plan.pp, plan.ppAxes))
      return module.emitError()
             << "pp=" << plan.pp << " is not a product of the mesh axes of "
             << shapeString(grid)
             << " inside the data-parallel ones (pipeline stages take whole "
                "axes between "
             << "tensor parallelism's and data parallelism's; e.g. --mesh "
             << devices / (plan.pp * plan.tp) << "x" << plan.pp
             << (plan.tp > 1 ? "x" + std::to_string(plan.tp) : std::string())
             << ")";
    // Expert parallelism: whole axes outside the pipeline's; the batch
    // splits over them after the data-parallel ones.
    if (!takeAxes(grid, axis, plan.ep, plan.epAxes))
      return module.emitError()
             << "ep=" << plan.ep << " is not a product of the mesh axes of "
             << shapeString(grid)
             << " inside the data-parallel ones (expert parallelism takes "
                "whole axes between pipeline stages' and data "
                "parallelism's; e.g. --mesh "
             << devices / (plan.ep * plan.pp * plan.sp * plan.tp) << "x"
             << plan.ep << ")";
    for (int64_t a = 0; a <= axis; ++a)
      if (grid[a] != 1)
        plan.dpAxes.push_back(a);
    // Micro-batches: a virtual grid axis after the device axes. A pipeline
    // always has it (of size 1 for one micro-batch): stages run their
    // forward and backward per micro-batch.
    if (plan.pipelined()) {
      plan.microbatchAxes.push_back(static_cast<int64_t>(grid.size()));
      plan.schedule = schedule;
    }
    std::optional<Recompute> mode = symbolizeRecompute(recompute);
    std::optional<Precision> numerics = symbolizePrecision(precision);
    if (!mode || !numerics)
      return module.emitError() << "unknown recompute mode \"" << recompute
                                << "\" or precision \"" << precision << "\"";
    plan.setRecompute(*mode);
    plan.precision = *numerics;
    plan.sequenceParallel = sequenceParallel;
    plan.spLayout = spLayout;
    plan.tpLayout = tpLayout;
    if (failed(plan.verify([&] { return module.emitError(); })))
      return failure();
    return plan;
  }

  /// The device grid plus the virtual micro-batch axis.
  LogicalResult createGrid(ModuleOp module, const Plan &plan) {
    SmallVector<int64_t> grid(mesh.begin(), mesh.end());
    if (grid.empty())
      grid = {1};
    if (!plan.microbatchAxes.empty())
      grid.push_back(plan.microbatches);
    if (auto existing = module.lookupSymbol<shard::GridOp>(plan.grid)) {
      if (existing.getShape() != ArrayRef<int64_t>(grid))
        return existing.emitError()
               << "a different grid @" << plan.grid << " already exists";
      return success();
    }
    OpBuilder b(module.getContext());
    b.setInsertionPointToStart(module.getBody());
    shard::GridOp::create(b, module.getLoc(), plan.grid, grid);
    return success();
  }
};

} // namespace
} // namespace mlir::dtc
