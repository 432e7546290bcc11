//===- Passes.h - dtc passes ------------------------------------*- C++ -*-===//
#ifndef DTC_PASSES_PASSES_H
#define DTC_PASSES_PASSES_H

#include "dtc/CostModel/CostModel.h"
#include "dtc/Dialect/DtcOps.h"
#include "mlir/Pass/Pass.h"
#include <memory>

namespace mlir::dtc {
#define GEN_PASS_DECL
#include "dtc/Passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "dtc/Passes/Passes.h.inc"

/// Checks the training-step options as the values the optimizer ops will
/// hold (f32). On failure returns false, names the offending option in
/// `option` (its pass-option and command-line flag name, e.g. "lr") and
/// explains in `message`. The pass and `dtc compile` share it.
bool checkTrainingStepOptions(const BuildTrainingStepOptions &options,
                              std::string &option, std::string &message);

/// dtc-materialize-plan costing a tp_layout = "ilp" program on `hardware`
/// (already fitted to the mesh) instead of the profile its option names:
/// the driver's profile, calibrated or from a file.
std::unique_ptr<Pass>
createMaterializePlan(const MaterializePlanOptions &options,
                      const ::dtc::cost::HardwareProfile &hardware);
} // namespace mlir::dtc

#endif // DTC_PASSES_PASSES_H
