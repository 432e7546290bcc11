//===- Artifact.h - emit the .dtc artifact from a partitioned module --*- C++
//-*-===//
//
// Lowers a partitioned @train_step (local shapes, shard collectives) to the
// artifact body of docs/artifact.md: global tensors, communicators, and a
// program of kernel calls and collectives over a liveness-planned set of
// memory slots.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TARGET_ARTIFACT_H
#define DTC_TARGET_ARTIFACT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include <nlohmann/json.hpp>
#include <string>

namespace mlir::dtc {

struct ArtifactOptions {
  /// Recorded as "source".
  std::string sourceName;
  /// Merged into "plan" (strategy choices beyond the module's dtc.plan).
  nlohmann::json planExtras = nlohmann::json::object();
  /// Recorded as "optimizer".
  nlohmann::json optimizer = nlohmann::json::object();
  /// Pipelines and micro-batches: {"schedule", "stages", "virtual_stages",
  /// "microbatches", "per_stage": [actions of stage 0, ...]} (null: none).
  /// Each stage's program gets its actions; the rest is the artifact's
  /// "pipeline" section.
  nlohmann::json pipeline;
};

/// Builds the artifact body. Errors are emitted as diagnostics on the module.
FailureOr<nlohmann::json> buildArtifact(ModuleOp module,
                                        const ArtifactOptions &options);

/// Flops one device computes per step in a partitioned step function: what
/// runs per micro-batch counts `microbatches` times. Without
/// `countRecomputation`, the model's flops: recomputed forward ops
/// (dtc.recompute) are left out, as MFU's definition leaves them out.
int64_t flopsPerStep(func::FuncOp step, int64_t microbatches,
                     bool countRecomputation = true);

/// The model's flops in one step of `module`'s training step on global
/// shapes (before partitioning; recomputation left out), 0 without one:
/// Megatron's MFU divides them by the devices, where a partitioned device's
/// own count would hold what tp ranks compute alike and a pipeline's
/// busiest stage.
int64_t modelFlopsPerStep(ModuleOp module);

/// Whether `op` is a transpose swapping the last two dims whose every reader
/// is a matmul (plain or with a fused epilogue) reading it as `a` or `b`:
/// the emitter folds it into them (transpose_a / transpose_b), so it runs
/// no kernel of its own.
bool foldsIntoMatmuls(Operation *op);

/// Whether the emitted program runs a kernel for `op`: not for a transpose
/// folded into its matmuls, nor for a view (ViewOpInterface) of an
/// activation, which aliases its operand's bytes; a view of an argument or
/// a constant is a copy (their slots hold nothing else).
bool runsKernel(Operation *op);

/// Calls `visit(op, times)` for every op of a partitioned step function that
/// has a cost (CostOpInterface) and runs a kernel (runsKernel), with how many
/// times it runs per step (what runs per micro-batch runs `microbatches`
/// times); flopsPerStep's walk.
void walkCostedOps(func::FuncOp step, int64_t microbatches,
                   bool countRecomputation,
                   llvm::function_ref<void(Operation *, int64_t)> visit);

} // namespace mlir::dtc

#endif // DTC_TARGET_ARTIFACT_H
