//===- Report.h - the plan report of dtc compile --report -------*- C++ -*-===//
//
// Internal to the driver: the report (docs/cli.md "Report") from the
// lowered module and its artifact, the planner's evaluation beside the
// choices that made the plan.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_LIB_DRIVER_REPORT_H
#define DTC_LIB_DRIVER_REPORT_H

#include "dtc/CostModel/CostModel.h"
#include "dtc/Driver/Compile.h"
#include "mlir/IR/BuiltinOps.h"

#include <nlohmann/json.hpp>

namespace mlir::dtc {

/// The plan report of spec/cli.md for the lowered `module` and its
/// `artifact`, compiled with `o` for `hw` in `compileSeconds`.
nlohmann::json buildReport(ModuleOp module, const nlohmann::json &artifact,
                           const ::dtc::CompileOptions &o,
                           ::dtc::cost::HardwareProfile &hw,
                           double compileSeconds);

} // namespace mlir::dtc

#endif // DTC_LIB_DRIVER_REPORT_H
