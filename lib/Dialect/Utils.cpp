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
      DenseElementsAttr::get(type,
                             b.getFloatAttr(type.getElementType(), value)));
}

std::string mlir::dtc::argumentName(func::FuncOp main, unsigned index) {
  if (auto name =
          main.getArgAttrOfType<StringAttr>(index, DtcDialect::kNameAttr))
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

SmallVector<func::FuncOp> mlir::dtc::trainSteps(ModuleOp module) {
  SmallVector<func::FuncOp> steps;
  for (auto func : module.getOps<func::FuncOp>())
    if (func->hasAttr(DtcDialect::kTrainStepAttr))
      steps.push_back(func);
  if (steps.empty())
    if (auto step = module.lookupSymbol<func::FuncOp>("train_step"))
      steps.push_back(step);
  auto stageOf = [](func::FuncOp f) {
    auto stage = f->getAttrOfType<IntegerAttr>(DtcDialect::kPipelineStageAttr);
    return stage ? stage.getInt() : 0;
  };
  llvm::stable_sort(steps, [&](func::FuncOp a, func::FuncOp b) {
    return stageOf(a) < stageOf(b);
  });
  return steps;
}

func::FuncOp mlir::dtc::findTrainStep(ModuleOp module) {
  SmallVector<func::FuncOp> steps = trainSteps(module);
  return steps.size() == 1 ? steps.front() : func::FuncOp();
}

bool mlir::dtc::inSamePlace(Operation *a, Operation *b) {
  for (StringRef name : {DtcDialect::kPhaseAttr, DtcDialect::kStageAttr,
                         DtcDialect::kRecomputeAttr})
    if (a->getAttr(name) != b->getAttr(name))
      return false;
  return true;
}

void mlir::dtc::copyPlaceAttrs(Operation *from, Operation *to, bool identity) {
  for (NamedAttribute attr : from->getDiscardableAttrs())
    if ((identity || attr.getName() != DtcDialect::kIdAttr) &&
        !to->hasAttr(attr.getName()))
      to->setAttr(attr.getName(), attr.getValue());
}
