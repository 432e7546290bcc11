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
    a pending partial sum. The upstream `shard.sharding` has no partial state,
    which data parallelism (gradients), ZeRO (reduce-scatter) and Megatron row
    splits all need, hence this attribute.

    ```mlir
    #dtc.sharding<@mesh, [[0, 1], []]>             // dim 0 split over axes 0 and 1
    #dtc.sharding<@mesh, [[], []], partial = [0]>  // replicated shape, sum pending over axis 0
    ```
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$grid,
    ArrayRefParameter<"::mlir::DenseI64ArrayAttr">:$dims,
    OptionalArrayRefParameter<"int64_t">:$partial
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
