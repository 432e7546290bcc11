//===- Pipeline.h - dtc compile's passes, part by part ----------*- C++ -*-===//
//
// The compiler's pipeline as populate functions (as CIRCT's firtool
// does): `dtc compile` runs them in order, printing the module after each
// part for --emit-mlir; a planner lowers candidate plans with the same
// parts. Check the model (dtc-check-model) -> training step -> planning ->
// stage split -> partitioning -> emission (include/dtc/Target/Artifact.h).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_DRIVER_PIPELINE_H
#define DTC_DRIVER_PIPELINE_H

#include "dtc/Passes/Passes.h"

#include "mlir/Pass/PassManager.h"

#include <string>

namespace mlir::dtc {

/// The model's forward and loss become a training step (autodiff and the
/// optimizer), its ops assigned to layers, duplicate backward ops merged.
void populateTrainingPipeline(PassManager &pm,
                              const BuildTrainingStepOptions &stepOptions);

/// The strategy becomes the module's #dtc.plan (dtc-apply-strategy), which
/// is pinned and propagated (dtc-materialize-plan); `pins` are the user's
/// parameter shardings (--pin), applied first. `hardware` (fitted to the
/// mesh) and `deviceMemory` cost a tp_layout = "ilp" program; with
/// `leastMemory` a program that fits nothing takes the least memory.
void populatePlanningPipeline(PassManager &pm, ArrayRef<std::string> pins,
                              const ApplyStrategyOptions &strategy,
                              const ::dtc::cost::HardwareProfile &hardware,
                              double deviceMemory, bool leastMemory = false);

/// Recomputation as the plan says, the plan's stage cuts, and the split of
/// the step into pipeline stages.
void populateStageSplitPipeline(PassManager &pm);

/// Local shapes and collectives (data-parallel gradients reduced in
/// buckets of at most `bucketBytes`); with `keepAttentionStats` attention's
/// backward reads the forward's output and logsumexp; the matmul epilogues
/// fused last.
void populatePartitioningPipeline(PassManager &pm, bool fuseEpilogues,
                                  int64_t bucketBytes,
                                  bool keepAttentionStats = false);

} // namespace mlir::dtc

#endif // DTC_DRIVER_PIPELINE_H
