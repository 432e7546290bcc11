//===- UnitMicroBatchAxes.h - one micro-batch's collectives -----*- C++ -*-===//
//
// Part of the Partition pass (Partition.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PASSES_PARTITIONING_UNITMICROBATCHAXES_H
#define DTC_PASSES_PARTITIONING_UNITMICROBATCHAXES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::dtc {

/// A pipeline of one micro-batch has a micro-batch axis of size 1, over
/// which a collective moves nothing. Work that mixes the batch's examples
/// (a mixture of experts' routing and expert buffers) is legal inside a
/// micro-batch and, with one micro-batch, that is the whole batch: its
/// collectives in the partitioned step `local` lose the axis, so that they
/// stay in the micro-batch, and what the optimizer reads of it is summed
/// over the (one) micro-batch, as the gradients are. Nothing changes for a
/// plan without such work, or with several micro-batches.
LogicalResult fixUnitMicroBatchAxes(func::FuncOp local, StringRef gridName,
                                    ArrayRef<int64_t> gridShape,
                                    ArrayRef<int64_t> mbAxes);

} // namespace mlir::dtc

#endif // DTC_PASSES_PARTITIONING_UNITMICROBATCHAXES_H
