//===- Passes.h - dtc passes ------------------------------------*- C++ -*-===//
#ifndef DTC_PASSES_PASSES_H
#define DTC_PASSES_PASSES_H

#include "dtc/Dialect/DtcOps.h"
#include "mlir/Pass/Pass.h"
#include <memory>

namespace mlir::dtc {
#define GEN_PASS_DECL
#include "dtc/Passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "dtc/Passes/Passes.h.inc"
} // namespace mlir::dtc

#endif // DTC_PASSES_PASSES_H
