//===- ModelStructure.cpp - a model as prologue, blocks, epilogue ---------===//
#include "dtc/Planner/ModelStructure.h"
#include "dtc/Dialect/Utils.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/Support/raw_ostream.h"
#include <map>

using namespace mlir;
using namespace mlir::dtc;

int64_t ModelStructure::distinctLayers() const {
  llvm::DenseSet<uint64_t> seen(fingerprints.begin(), fingerprints.end());
  return int64_t(seen.size());
}

namespace {

std::string printed(Attribute attr) {
  std::string text;
  llvm::raw_string_ostream os(text);
  attr.print(os);
  return text;
}

/// What an operand refers to, independent of which tensor it is.
llvm::hash_code sourceOf(Value v, int64_t layer,
                         const llvm::DenseMap<Operation *, int64_t> &position,
                         func::FuncOp step) {
  llvm::hash_code type = mlir::hash_value(v.getType());
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    std::optional<Role> role = argRole(step, arg.getArgNumber());
    return llvm::hash_combine(1, role ? int(*role) : -1, type);
  }
  Operation *def = v.getDefiningOp();
  auto defLayer = def->getAttrOfType<IntegerAttr>(DtcDialect::kLayerAttr);
  if (defLayer && defLayer.getInt() == layer && position.count(def))
    return llvm::hash_combine(2, position.lookup(def),
                              cast<OpResult>(v).getResultNumber());
  // Another layer's value (the residual stream) or a constant.
  return llvm::hash_combine(3, def->getName().getStringRef(), type);
}

} // namespace

FailureOr<ModelStructure> mlir::dtc::analyzeModelStructure(func::FuncOp step) {
  std::map<int64_t, SmallVector<Operation *>> forwardOf;
  int64_t layers = 0;
  for (Operation &op : step.front()) {
    if (isa<func::ReturnOp>(op))
      continue;
    auto layer = op.getAttrOfType<IntegerAttr>(DtcDialect::kLayerAttr);
    if (!layer)
      return op.emitError() << "the model's structure needs every op's "
                               "dtc.layer (run dtc-assign-layers first)";
    layers = std::max(layers, layer.getInt() + 1);
    if (isPhase(&op, Phase::Forward))
      forwardOf[layer.getInt()].push_back(&op);
  }
  ModelStructure structure;
  structure.fingerprints.assign(size_t(layers), 0);
  for (auto &[layer, ops] : forwardOf) {
    llvm::DenseMap<Operation *, int64_t> position;
    llvm::hash_code hash = llvm::hash_value(ops.size());
    for (Operation *op : ops) {
      position[op] = int64_t(position.size());
      hash = llvm::hash_combine(hash, op->getName().getStringRef());
      // Inherent attributes only: dtc.* annotations name ids and layers.
      for (NamedAttribute attr : op->getAttrs())
        if (!attr.getName().strref().starts_with("dtc."))
          hash = llvm::hash_combine(hash, attr.getName().strref(),
                                    printed(attr.getValue()));
      for (Type type : op->getResultTypes())
        hash = llvm::hash_combine(hash, mlir::hash_value(type));
      for (Value operand : op->getOperands())
        hash =
            llvm::hash_combine(hash, sourceOf(operand, layer, position, step));
    }
    structure.fingerprints[size_t(layer)] = uint64_t(size_t(hash));
  }

  // The run of repeated blocks covering the most layers (then the shortest
  // block, then the earliest start).
  const SmallVector<uint64_t> &f = structure.fingerprints;
  int64_t bestCovered = 0;
  for (int64_t period = 1; period <= layers / 2; ++period)
    for (int64_t start = 0; start + 2 * period <= layers; ++start) {
      int64_t count = 1;
      while (start + (count + 1) * period <= layers &&
             std::equal(f.begin() + start, f.begin() + start + period,
                        f.begin() + start + count * period))
        ++count;
      if (count >= 2 && count * period > bestCovered) {
        bestCovered = count * period;
        structure.firstBlockLayer = start;
        structure.blockLayers = period;
        structure.blockCount = count;
      }
    }
  return structure;
}
