//===- PlanRecords.h - what the flags make of a plan -------------*- C++
//-*-===//
//
// The compile driver's translations of its options: the strategy
// dtc-apply-strategy writes the plan from, and the records the artifact
// keeps beside it (optimizer, plan extras, model structure). Internal to
// lib/Driver.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_LIB_DRIVER_PLANRECORDS_H
#define DTC_LIB_DRIVER_PLANRECORDS_H

#include "dtc/Driver/Compile.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Target/Artifact.h"
#include "mlir/IR/BuiltinOps.h"

#include <nlohmann/json.hpp>
#include <string>

namespace dtc::driver {

/// `given` with --sp-layout's default made explicit: zigzag, or striped
/// where a token input's sequence divides into the sp ranks but not into
/// twice as many chunks (so every sequence sp splits has a balanced layout).
CompileOptions withSequenceLayout(const CompileOptions &given,
                                  mlir::ModuleOp module);

/// The strategy the plan is written from (dtc-apply-strategy).
mlir::dtc::ApplyStrategyOptions strategyOptions(const CompileOptions &o);

/// Prologue, repeated blocks and epilogue of the planned training step:
/// what a search solves once per distinct layer (the artifact's plan and
/// the report show it); null when the step has none.
nlohmann::json modelStructureJson(mlir::ModuleOp module);

/// What the emitter records beside the plan (the artifact's "plan").
mlir::dtc::ArtifactOptions emitOptions(const CompileOptions &o,
                                       double weightDecay, bool pipelined,
                                       const std::string &remat,
                                       const std::string &hwName);

} // namespace dtc::driver

#endif // DTC_LIB_DRIVER_PLANRECORDS_H
