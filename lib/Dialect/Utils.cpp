//===- Utils.cpp - small helpers shared by dtc's passes ------------------===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Dialect/DtcDialect.h"

#include <cstdio>
#include <cstdlib>

using namespace mlir;

Value mlir::dtc::createSplatConstant(OpBuilder &b, Location loc,
                                     RankedTensorType type, double value) {
  return arith::ConstantOp::create(
      b, loc, type,
      DenseElementsAttr::get(type, b.getFloatAttr(type.getElementType(), value)));
}

std::string mlir::dtc::argumentName(func::FuncOp main, unsigned index) {
  if (auto name = main.getArgAttrOfType<StringAttr>(index, DtcDialect::kNameAttr))
    return name.getValue().str();
  return "arg" + std::to_string(index);
}

std::string mlir::dtc::formatNumber(double value) {
  char buffer[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value)
      break;
  }
  return buffer;
}
