//===- ModelStructure.h - a model as prologue, blocks, epilogue -*- C++ -*-===//
//
// The search's first step (docs/design.md "The search"): a transformer is
// a prologue (embeddings), N identical blocks and an epilogue (final norm,
// LM head, loss). Identical layers are solved once, so the search's cost
// grows with the number of distinct layers, not with the depth. Layers
// (dtc.layer, dtc-assign-layers) are compared by a structural fingerprint
// of their forward ops: op names, inherent attributes, result types, and
// where each operand comes from (an op of the same layer by position, a
// parameter or input by type, another layer by type). Names, ids and
// locations do not count, so the blocks of a model are identical even
// though their parameters are different tensors.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLANNER_MODELSTRUCTURE_H
#define DTC_PLANNER_MODELSTRUCTURE_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LLVM.h"

namespace mlir::dtc {

struct ModelStructure {
  /// One fingerprint per layer (equal fingerprints: identical layers).
  SmallVector<uint64_t> fingerprints;
  /// The repeated region: `blockCount` consecutive blocks of `blockLayers`
  /// layers each, starting at layer `firstBlockLayer`; the layers before
  /// form the prologue, those after the epilogue. blockCount is 0 when no
  /// layer sequence repeats.
  int64_t firstBlockLayer = 0, blockLayers = 0, blockCount = 0;

  int64_t layers() const { return int64_t(fingerprints.size()); }
  int64_t epilogueStart() const {
    return firstBlockLayer + blockLayers * blockCount;
  }
  /// How many different layers there are (what a search solves).
  int64_t distinctLayers() const;
};

/// Fingerprints the forward layers of a training step (every op carries
/// dtc.layer) and finds the longest run of repeated blocks (the most layers
/// covered; then the shortest block). Errors at an op without a layer.
FailureOr<ModelStructure> analyzeModelStructure(func::FuncOp step);

} // namespace mlir::dtc

#endif // DTC_PLANNER_MODELSTRUCTURE_H
