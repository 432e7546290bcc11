//===- DtcAttrs.td - dtc attributes ------------------------*- tablegen -*-===//
#ifndef DTC_DIALECT_DTCATTRS_TD
#define DTC_DIALECT_DTCATTRS_TD

include "dtc/Dialect/DtcDialect.td"
include "dtc/Dialect/DtcEnums.td"

def Dtc_ShardingAttr : AttrDef<Dtc_Dialect, "Sharding"> {
  let mnemonic = "sharding";
  let summary = "How a global tensor is laid out over a device grid";
  let description = [{
    One entry per tensor dimension listing the grid axes that split it (major
    first; empty when not split), plus the grid axes over which the value is
    a pending partial result and the reduction resolving it (`sum` unless
    `max` follows the list). The upstream `shard.sharding` has no partial
    state, which data parallelism (gradients), ZeRO (reduce-scatter),
    Megatron row splits and vocab-parallel cross entropy (max) all need,
    hence this attribute. A split that does not divide its dimension pads
    the pieces (include/dtc/Sharding/TensorSharding.h).

    ```mlir
    #dtc.sharding<@mesh, [[0, 1], []]>                 // dim 0 split over axes 0 and 1
    #dtc.sharding<@mesh, [[], []], partial = [0]>      // replicated shape, sum pending over axis 0
    #dtc.sharding<@mesh, [[0]], partial = [1] max>     // max pending over axis 1
    #dtc.sharding<@mesh, [[], [0]], pieces = [0, 128]> // dim 1 in padded pieces of 128
    ```
    `pieces` gives, per dimension, a piece size other than the default
    ceil(size / pieces) (0 keeps the default).
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$grid,
    ArrayRefParameter<"::mlir::DenseI64ArrayAttr">:$dims,
    OptionalArrayRefParameter<"int64_t">:$partial,
    DefaultValuedParameter<"::mlir::dtc::PartialKind", "::mlir::dtc::PartialKind::Sum">:$partialKind,
    OptionalArrayRefParameter<"int64_t">:$pieces
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Axes splitting dimension `dim`.
    ::llvm::ArrayRef<int64_t> getDimAxes(unsigned dim) const {
      return getDims()[dim].asArrayRef();
    }
    bool isReplicated() const;
    bool isPartial() const { return !getPartial().empty(); }
  }];
}

def Dtc_PlanAttr : AttrDef<Dtc_Dialect, "Plan"> {
  let mnemonic = "plan";
  let summary = "The parallel plan of a module: what every later pass applies";
  let description = [{
    Written by a planner (`dtc-apply-strategy` from the strategy's degrees,
    or a search) on the module as `dtc.plan`, read by every pass after it
    and by the emitter. `Plan` (include/dtc/Dialect/Plan.h) is its C++
    mirror; both are checked by `Plan::verify`, the one place that says what
    a valid plan is.

    ```mlir
    #dtc.plan<@mesh, dp = 2 on [0], tp = 2 on [1], pp = 2 on [2],
              microbatches = 4 on [3], virtual_stages = 1, zero = 1,
              schedule = "1f1b", recompute = full, stage_cuts = [3],
              precision = "f32">
    ```
    Per parallel kind its degree and the grid axes it takes (`on [...]`,
    left out when none); `microbatches`' axis is the virtual one the emitter
    loops over. `recompute` is one mode per pipeline stage (a single mode
    when they agree); `stage_cuts` the first layer of every virtual stage
    after the first (left out until a planner decides them). Every entry but
    the grid may be left out and takes its default (degrees 1, zero 0,
    schedule "none", recompute none, precision "f32").
    `sequence_parallel = true` (only with tp > 1) is Megatron's sequence
    parallelism: the regions between tensor-parallel blocks split their
    sequence over the tp axes. `sp = S on [a]` (printed when S > 1) is
    ring-attention sequence parallelism: every activation's sequence split
    over grid axis a, attention run as a ring of blocks over it;
    `sp_layout` its layout of the sequence, "zigzag" (the default: rank r
    holds the chunks r and 2n - 1 - r of the sequence cut into 2n, one from
    each end, which balances causal attention's work), "striped" (rank r
    holds positions r, r + n, ...: balanced too) or "contiguous" (rank r
    holds one chunk), printed when not the default.
    `tp_layout` says which factor of each op the tp axes split: "megatron"
    (the default: Megatron's column- and row-parallel pattern) or "ilp"
    (Alpa's intra-op integer program over the ops' sharding rules), printed
    when not the default. `ep = E on [a]` (printed when E > 1) is expert
    parallelism: grid axes that split the batch as data parallelism does
    and the experts of every mixture-of-experts layer too.
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$grid,
    "int64_t":$dp,
    OptionalArrayRefParameter<"int64_t">:$dpAxes,
    "int64_t":$tp,
    OptionalArrayRefParameter<"int64_t">:$tpAxes,
    "int64_t":$pp,
    OptionalArrayRefParameter<"int64_t">:$ppAxes,
    "int64_t":$microbatches,
    OptionalArrayRefParameter<"int64_t">:$microbatchAxes,
    "int64_t":$virtualStages,
    "int64_t":$zero,
    StringRefParameter<"pipeline schedule">:$schedule,
    OptionalArrayRefParameter<"::mlir::dtc::Recompute">:$recompute,
    OptionalArrayRefParameter<"int64_t">:$stageCuts,
    "::mlir::dtc::Precision":$precision,
    "bool":$sequenceParallel,
    "int64_t":$sp,
    OptionalArrayRefParameter<"int64_t">:$spAxes,
    StringRefParameter<"ring attention's sequence layout">:$spLayout,
    StringRefParameter<"tensor-parallel layout">:$tpLayout,
    "int64_t":$ep,
    OptionalArrayRefParameter<"int64_t">:$epAxes
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif // DTC_DIALECT_DTCATTRS_TD
