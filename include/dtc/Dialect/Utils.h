//===- Utils.h - small helpers shared by dtc's passes ----------*- C++ -*-===//
#ifndef DTC_DIALECT_UTILS_H
#define DTC_DIALECT_UTILS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
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

} // namespace mlir::dtc

#endif // DTC_DIALECT_UTILS_H
