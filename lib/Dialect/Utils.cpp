//===- Utils.cpp - small helpers shared by dtc's passes ------------------===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Dialect/DtcDialect.h"
#include "dtc/Dialect/DtcOps.h"
#include "llvm/ADT/DenseSet.h"

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

llvm::SetVector<Operation *>
mlir::dtc::recomputedOps(ArrayRef<Operation *> layerOps, bool selective) {
  llvm::DenseSet<Operation *> inLayer(layerOps.begin(), layerOps.end());
  // Kept: what forward ops of other layers (or the return) read.
  auto isKept = [&](Operation *op) {
    for (Value r : op->getResults())
      for (Operation *user : r.getUsers())
        if (!isAfterForward(user) && !inLayer.contains(user))
          return true;
    return false;
  };
  llvm::SetVector<Operation *> candidates;
  for (Operation *op : layerOps)
    if (!isKept(op) && (!selective || op->hasTrait<CheapToRecompute>()))
      candidates.insert(op);
  if (!selective)
    return candidates;
  // An op stays a candidate only if each operand it reads from this layer
  // stays alive anyway; otherwise recomputing it would keep a value alive
  // that the forward could free.
  auto readByBackward = [](Value v) {
    return llvm::any_of(v.getUsers(), isAfterForward);
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (Operation *op : llvm::to_vector(candidates)) {
      bool operandsAlive = llvm::all_of(op->getOperands(), [&](Value v) {
        Operation *def = v.getDefiningOp();
        return !def || !inLayer.contains(def) || isKept(def) ||
               candidates.contains(def) || readByBackward(v);
      });
      if (!operandsAlive) {
        candidates.remove(op);
        changed = true;
      }
    }
  }
  return candidates;
}
