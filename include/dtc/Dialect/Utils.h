//===- Utils.h - small helpers shared by dtc's passes ----------*- C++ -*-===//
#ifndef DTC_DIALECT_UTILS_H
#define DTC_DIALECT_UTILS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include <string>

namespace mlir::dtc {

/// Every value dtc handles is a ranked tensor.
inline RankedTensorType tensorTypeOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// `arith.constant dense<value> : type` (a float splat).
Value createSplatConstant(OpBuilder &b, Location loc, RankedTensorType type,
                          double value);

/// The model-format name of @main's argument `index`: its dtc.name, or
/// "argN".
std::string argumentName(func::FuncOp main, unsigned index);

/// The shortest decimal that reads back as the same double (for messages
/// and canonical spellings).
std::string formatNumber(double value);

/// The module's training steps: the functions marked dtc.train_step (one,
/// or one per pipeline stage, in stage order), else @train_step for IR
/// written by hand without the marker.
SmallVector<func::FuncOp> trainSteps(ModuleOp module);
/// The training step when there is exactly one, else null.
func::FuncOp findTrainStep(ModuleOp module);

/// Key of the virtual micro-batch axis in dtc.plan's "axes".
constexpr StringLiteral kMicrobatchAxesKey = "mb";
/// The plan's grid axes for `key` ("dp", "pp", "mb", ...), empty if none.
SmallVector<int64_t> planAxes(ModuleOp module, StringRef key);
/// An integer entry of dtc.plan, or `fallback`.
int64_t planValue(ModuleOp module, StringRef key, int64_t fallback);

} // namespace mlir::dtc

#endif // DTC_DIALECT_UTILS_H
