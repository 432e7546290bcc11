//===- LocalLowering.h - what an op's local lowering may ask for -*- C++
//-*-===//
//
// An op whose per-device computation differs from its global one when some
// factor is sharded (a vocab-split embedding needs an id offset and a mask;
// a vocab-split cross entropy needs a max and a sum across devices)
// implements LocalLoweringOpInterface::buildLocal. The partitioner calls it
// with the op's local operands (already resharded to what the op's factor
// sharding requires) and the local result types; the op builds its local
// computation through this context, which gives it the rank's coordinates
// and the collectives of the grid. This mirrors upstream
// ShardingInterface::partition, on dtc's factor shardings.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_SHARDING_LOCALLOWERING_H
#define DTC_SHARDING_LOCALLOWERING_H

#include "dtc/Sharding/TensorSharding.h"
#include "mlir/IR/Builders.h"

namespace mlir::dtc {

class LocalLoweringContext {
public:
  virtual ~LocalLoweringContext();
  /// Inserts at the op's place in the local function.
  virtual OpBuilder &builder() = 0;
  virtual ArrayRef<int64_t> grid() const = 0;
  /// This rank's offset along a dimension split over `axes` into (padded)
  /// pieces of `pieceSize` elements: a `tensor<i64>` holding the rank's
  /// row-major index over `axes` times `pieceSize` (dtc.shard_offset).
  virtual Value shardOffset(Location loc, ArrayRef<int64_t> axes,
                            int64_t pieceSize) = 0;
  /// The offset of the piece `shift` ring steps have brought (the piece of
  /// the member `shift` places before the rank on the ring of one `axis`):
  /// ((index - shift) mod n) * pieceSize (dtc.shard_offset's `shift`).
  virtual Value ringOffset(Location loc, int64_t axis, int64_t pieceSize,
                           int64_t shift) = 0;
  /// A ring step over one grid axis: every rank passes `local` to the next
  /// rank along `axis` (wrapping around) and gets its predecessor's
  /// (shard.shift, offset 1, rotate).
  virtual Value shiftToNext(Location loc, Value local, int64_t axis) = 0;
  /// Resolves a local value that is pending over `axes` (all-reduce).
  virtual Value allReduce(Location loc, Value local, ArrayRef<int64_t> axes,
                          PartialKind kind) = 0;
  /// This rank's piece of `whole` (the same on every rank of `axes`) along
  /// `dim`, split over `axes` (shard.all_slice: no communication).
  virtual Value sliceAlong(Location loc, Value whole, ArrayRef<int64_t> axes,
                           int64_t dim) = 0;
  /// `local` gathered along `dim` over `axes` (shard.all_gather).
  virtual Value gatherAlong(Location loc, Value local, ArrayRef<int64_t> axes,
                            int64_t dim) = 0;
  /// The grid's symbol, for the collectives a lowering builds itself
  /// (dtc.moe_exchange).
  virtual FlatSymbolRefAttr gridSymbol() = 0;
  /// Values one lowering leaves for a later one (a forward's softmax
  /// statistics reused by its gradient), keyed by a local value and a name.
  virtual Value lookupShared(Value key, StringRef name) = 0;
  virtual void share(Value key, StringRef name, Value value) = 0;
};

} // namespace mlir::dtc

#endif // DTC_SHARDING_LOCALLOWERING_H
