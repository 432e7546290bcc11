//===- ExecutorParts.h - what the executor's source files share -*- C++ -*-===//
//
// RankExecutor is defined in several files (Executor.cpp: loading, host
// views and enqueueing; ExecutorCollectives.cpp: collectives and pipeline
// messages on the communication stream; ExecutorPipeline.cpp: a pipeline
// stage's step; ExecutorAccounting.cpp: counters and the trace). This is
// what they share; it is not part of the runtime's interface.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_EXEC_EXECUTORPARTS_H
#define DTC_RUNTIME_EXEC_EXECUTORPARTS_H

#include "dtc/runtime/Executor.h"

#include <tuple>

namespace dtc::rt {

struct RankExecutor::Prepared {
  const InstrDecl *decl = nullptr;
  std::unique_ptr<BoundKernel> kernel;
  kernels::KernelArgs args;
  /// The slots its operands live in (each once): what it must not touch
  /// while a collective on them is in flight.
  std::vector<int> slots;
  /// --stats: seconds of its kind; for kernels the row of its operand
  /// shapes (whose key the trace shows).
  double *opSeconds = nullptr;
  ExecStats::KernelShapeStats *shapeStats = nullptr;
  const std::string *shapeKey = nullptr;
  double flops = 0;
  // collectives
  DeviceCommunicator *comm = nullptr;
  uint64_t dataBytes = 0;
  /// A gradient bucket's member: the bucket and its place in it; the last
  /// member's collective is the bucket's (dataBytes: the whole bucket).
  const BucketDecl *bucket = nullptr;
  size_t bucketPosition = 0;
  bool lastInBucket() const {
    return bucket && bucketPosition + 1 == bucket->members.size();
  }
  std::string
      where; ///< "all_reduce on communicator 'dp' (ranks 0, 1) of f32[8, 4]"
  std::string members; ///< "ranks 0, 1"
  // shard_offset: this rank's value, from its mesh coordinates
  bool isShardOffset = false;
  int64_t shardOffset = 0;
  // Pipelines: operands in a micro-batch slot (output?, operand, slot),
  // pointed at the running micro-batch's copy before every enqueue.
  std::vector<std::tuple<bool, int, int>> perMicroBatch;
};

/// A tensor seen as blocks along one axis: `outer` rows of `mid` steps of
/// `innerBytes` each (the packing of axis-wise collectives and micro-batch
/// slices, done with Backend::copy2D).
struct AxisBlocks {
  int64_t outer = 1, mid = 1; ///< mid = size along the axis
  size_t innerBytes = 1;      ///< bytes of one step along the axis
};
AxisBlocks blocks(const Shape &s, int axis, size_t elem);
// dst (contiguous, shape s with axis size len) = src[..., start:start+len, ...]
void extractAxis(Backend &be, Stream &st, const char *src, const AxisBlocks &b,
                 int64_t start, int64_t len, char *dst);
// dst[..., start:start+len, ...] = src (contiguous piece)
void insertAxis(Backend &be, Stream &st, const char *src, const AxisBlocks &b,
                int64_t start, int64_t len, char *dst);

} // namespace dtc::rt

#endif // DTC_RUNTIME_EXEC_EXECUTORPARTS_H
