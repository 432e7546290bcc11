//===- Evaluate.h - what a plan costs ---------------------------*- C++ -*-===//
//
// The planner's seam: one place evaluates a lowered plan (its emitted
// artifact and partitioned module) with the cost model and the artifact
// library's memory plan. `dtc compile --report`, `--remat auto` and the
// memory check call it; a search over plans will too.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLANNER_EVALUATE_H
#define DTC_PLANNER_EVALUATE_H

#include "dtc/CostModel/CostModel.h"
#include "dtc/Planner/Search.h"
#include "dtc/artifact/MemoryPlan.h"

#include "mlir/IR/BuiltinOps.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace mlir::dtc {

/// A plan's cost per device and per step, the maximum over devices (each
/// runs the program of its pipeline stage).
struct PlanCost {
  std::vector<int64_t> mesh;
  int64_t params = 0;
  /// Bytes by category (params, grads, optimizer, activations, inputs,
  /// constants, scalars; activations at the schedule's peak of micro-batch
  /// copies), the allocator's staging and workspace, its peak ("total",
  /// "peak_per_device") and the budget.
  nlohmann::json memory;
  /// The busiest device's bytes sent per collective kind and point to point;
  /// per communicator, its busiest member's; calls per kind.
  nlohmann::json comm, commByName, calls;
  /// The schedule's idle fraction (unit costs).
  double bubble = 0;
  /// The busiest device's flops per step as executed (recomputation
  /// included), and the model's share of them (without recomputation).
  int64_t flops = 0, modelFlops = 0;
  double peakFlops = 0;
  /// commSeconds: what the step waits for; hiddenCommSeconds: the
  /// communication the busiest device's kernels hide besides (see
  /// HardwareProfile::commOverlap).
  double computeSeconds = 0, commSeconds = 0, stepSeconds = 0;
  double hiddenCommSeconds = 0;
  /// The busiest device's kernel seconds per step by op name (without the
  /// dialect: the runtime's kernel names, as `dtc run --stats` reports
  /// them), before the pipeline bubble stretches them.
  std::map<std::string, double> kernelSecondsByOp;
};

/// Evaluates the plan `artifact` was emitted for (`module`: its partitioned
/// IR, for the flops). `artifact` must carry its memory record (planMemory).
/// `f32`: the step computes in f32 (else the hardware's bf16 peak applies).
PlanCost evaluatePlan(ModuleOp module, const nlohmann::json &artifact,
                      ::dtc::cost::HardwareProfile &hw, bool f32);

/// What each rank of `artifact` allocates (the artifact library's memory
/// plan, with the CPU kernels' workspace for the threads each rank gets
/// when `devices` ranks share this machine). Returns false with `error`
/// when the artifact does not validate.
bool planMemory(const nlohmann::json &artifact, const std::string &label,
                int64_t devices, std::vector<::dtc::rt::MemoryNeed> &needs,
                int &threads, std::string &error);

/// The artifact's "memory" record: the budget, the largest rank's peak and
/// its bytes by kind, and every program's own.
nlohmann::json memoryRecord(const std::vector<::dtc::rt::MemoryNeed> &needs,
                            uint64_t budget, int threads);

/// What one micro-batch keeps from its forward for its backward, per layer
/// (`dtc.layer`), in bytes on one device: every forward value some backward
/// op (B or W, recomputation included) reads, views counted once with the
/// value they view; a partitioned module's local shapes. docs/design.md
/// "Activation memory by hand" derives it for a transformer layer.
std::map<int64_t, int64_t> storedActivationBytesByLayer(ModuleOp module);

/// The facts of a training step (after dtc-assign-layers, before
/// planning: global shapes) the search's closed forms read.
::dtc::search::ModelFacts modelFacts(ModuleOp module);

/// Each pipeline stage's planned peak (the largest of its programs; a plan
/// without stages is stage 0), or empty after an error.
std::vector<int64_t> plannedPeakPerStage(const nlohmann::json &artifact,
                                         const std::string &label,
                                         int64_t devices, int64_t stages);

/// --remat auto, per pipeline stage: the least recomputation (none, else
/// selective, else full) with which each stage fits `budget` bytes per
/// device (0: no budget). In 1F1B stage i holds p - i micro-batches, so
/// early stages may need more than late ones. `peaksOf` lowers the plan
/// with one mode per stage and returns each stage's peak, or an empty
/// vector after reporting an error (the choice fails then). `record` says
/// what was tried and why.
bool chooseRecomputation(
    double budget, int64_t stages,
    const std::function<std::vector<int64_t>(const std::vector<std::string> &)>
        &peaksOf,
    std::vector<std::string> &chosen, nlohmann::json &record);

} // namespace mlir::dtc

#endif // DTC_PLANNER_EVALUATE_H
