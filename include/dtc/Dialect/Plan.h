//===- Plan.h - the parallel plan as C++ data -------------------*- C++ -*-===//
//
// `Plan` mirrors `#dtc.plan` (DtcAttrs.td) as a plain struct a planner can
// fill, compare and evaluate without building attributes. `verify` is the
// one check of what a valid plan is: the attribute's verifier calls it, so
// a plan read from the IR has passed it.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_DIALECT_PLAN_H
#define DTC_DIALECT_PLAN_H

#include "dtc/Dialect/DtcOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>
#include <string>

namespace mlir::dtc {

struct Plan {
  /// The shard.grid the axes refer to.
  std::string grid = "mesh";
  /// Degrees and the grid axes each kind of parallelism takes.
  int64_t dp = 1, tp = 1, pp = 1;
  SmallVector<int64_t> dpAxes, tpAxes, ppAxes;
  /// Micro-batches per step and their virtual grid axis (no devices: the
  /// emitter loops over it; present whenever the plan is pipelined).
  int64_t microbatches = 1;
  SmallVector<int64_t> microbatchAxes;
  /// Model chunks per pipeline stage (interleaved schedules).
  int64_t virtualStages = 1;
  /// ZeRO stage over the data-parallel axes (0 to 3).
  int64_t zero = 0;
  /// The pipeline schedule ("none" when the plan is not pipelined).
  std::string schedule = "none";
  /// Activation checkpointing per pipeline stage: one mode per stage, one
  /// for all, or empty for none anywhere.
  SmallVector<Recompute> recompute;
  /// The first layer of each virtual stage after the first (pp x
  /// virtualStages - 1 increasing entries); empty until decided.
  SmallVector<int64_t> stageCuts;
  Precision precision = Precision::F32;
  /// Megatron sequence parallelism inside tensor parallelism: the ops
  /// between the tensor-parallel blocks (norms, residual adds, element-wise
  /// ops) split the sequence over the tp axes.
  bool sequenceParallel = false;
  /// Ring-attention sequence parallelism (Megatron's context parallelism):
  /// every activation's sequence split over one grid axis of its own,
  /// attention run as a ring of blocks over it (lib/Dialect/RingAttention).
  int64_t sp = 1;
  SmallVector<int64_t> spAxes;
  /// The ring's sequence layout: "zigzag" (rank r holds chunks r and
  /// 2n - 1 - r of 2n) or "striped" (rank r holds positions r, r + n, ...),
  /// both balancing causal attention's work over the ring, or "contiguous"
  /// (rank r holds one chunk).
  std::string spLayout = "zigzag";
  /// Which factor of each op the tp axes split: "megatron" (Megatron's
  /// column and row pattern) or "ilp" (the intra-op integer program,
  /// include/dtc/Planner/TensorLayout.h).
  std::string tpLayout = "megatron";
  /// Expert parallelism: grid axes that split the batch (data parallelism
  /// for every dense op: the batch splits over dpAxes then epAxes) and
  /// the experts of the mixture-of-experts layers, whose tokens travel to
  /// their experts' ranks (dtc.moe_exchange).
  int64_t ep = 1;
  SmallVector<int64_t> epAxes;

  /// Whether the step runs per micro-batch (pipeline stages or
  /// accumulation): the micro-batch axis exists and the split applies.
  bool pipelined() const { return pp > 1 || microbatches > 1; }
  /// The grid axes that split the batch: the data-parallel ones, then the
  /// expert-parallel ones (minor).
  SmallVector<int64_t> batchAxes() const;
  int64_t virtualStageCount() const { return pp * virtualStages; }
  /// The recomputation of pipeline stage `stage`.
  Recompute recomputeOf(int64_t stage) const;
  /// The same recomputation on every stage (none when unset).
  void setRecompute(Recompute mode);
  /// How many micro-batches' weight gradients pipeline stage `stage` keeps
  /// pending under the zb schedule: ZB-H1's `stage`, but none on a stage
  /// that recomputes fully. A pending W keeps every gradient its B made
  /// for the weights (about 13 s·b·h values per transformer layer), while
  /// full recomputation keeps s·b·h per layer and micro-batch in flight:
  /// deferring even one W would undo the recomputation. 0 when the
  /// schedule is not zb.
  int64_t pendingWeightGradients(int64_t stage) const;
  /// The virtual stage of `layer` under stageCuts.
  int64_t virtualStageOfLayer(int64_t layer) const;

  /// The axes of each kind of parallelism by its short name: "dp" always,
  /// "tp", "pp" and "mb" (micro-batches) when they have axes (the
  /// artifact's communicator names and plan.axes).
  SmallVector<std::pair<std::string, SmallVector<int64_t>>> namedAxes() const;
  /// The plan's counts by the artifact's plan keys (dp, tp, pp,
  /// virtual_stages, microbatches, zero).
  SmallVector<std::pair<std::string, int64_t>> namedCounts() const;

  /// The one definition of a valid plan; reports through `emitError`.
  LogicalResult verify(function_ref<InFlightDiagnostic()> emitError) const;

  static Plan fromAttr(PlanAttr attr);
  PlanAttr toAttr(MLIRContext *ctx) const;
};

/// One mode when every stage has the same, none when that is `none` (the
/// attribute's canonical form).
void canonicalizeRecompute(SmallVectorImpl<Recompute> &modes);

/// The module's plan, or nothing when no planner has run.
std::optional<Plan> getPlan(ModuleOp module);
/// Writes `plan` as the module's dtc.plan.
void setPlan(ModuleOp module, const Plan &plan);

} // namespace mlir::dtc

#endif // DTC_DIALECT_PLAN_H
