//===- DtcAttrs.td - dtc attributes ------------------------*- tablegen -*-===//
#ifndef DTC_DIALECT_DTCATTRS_TD
#define DTC_DIALECT_DTCATTRS_TD

include "dtc/Dialect/DtcDialect.td"

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

#endif // DTC_DIALECT_DTCATTRS_TD
