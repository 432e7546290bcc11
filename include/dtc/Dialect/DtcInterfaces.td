//===- DtcInterfaces.td - gradient, sharding and cost rules -*- tablegen -*-===//
#ifndef DTC_DIALECT_DTCINTERFACES_TD
#define DTC_DIALECT_DTCINTERFACES_TD

include "mlir/IR/OpBase.td"

def Dtc_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    The op's reverse-mode rule (vector-Jacobian product). Autodiff walks the
    forward ops backwards and asks each op for the gradients of its operands
    given the gradients of its results. An op without this interface cannot
    be differentiated through.
  }];
  let methods = [
    InterfaceMethod<[{
        Builds, at the builder's insertion point, the gradient of every
        operand given `resultGrads` (one per result; a null Value means that
        result does not reach the loss). Fills `operandGrads` with one Value
        per operand, null where no gradient flows (integer operands). Shapes
        are the op's own (global) shapes.
      }],
      "::llvm::LogicalResult", "buildGradient",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
    InterfaceMethod<[{
        Like buildGradient, but only the operands with `wanted[i]` set need a
        gradient (null Values are fine for the others). The training step
        asks separately for the activation operands (B) and the parameter
        operands (W) of an op that has both, so an op whose rule builds one
        fused kernel for all operands (the norms) overrides this to build
        only the part asked for. The default builds every gradient; the
        unused ones are dead code the training step erases.
      }],
      "::llvm::LogicalResult", "buildGradientFor",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::ArrayRef<bool>":$wanted,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads),
      [{}], [{
        return $_op.buildGradient(builder, resultGrads, operandGrads);
      }]>
  ];
}

def Dtc_DecomposeOpInterface : OpInterface<"DecomposeOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    A composite model op (no kernel of its own) that states how it is
    written in other ops: dtc-decompose-composites replaces it before the
    training step is built, so autodiff, planning and partitioning see only
    the ops it becomes (docs/design.md "Composite ops").
  }];
  let methods = [
    InterfaceMethod<[{
        Builds, at the builder's insertion point, the ops that compute the
        op's single result and returns that value (null after emitting an
        error).
      }],
      "::mlir::Value", "decompose", (ins "::mlir::OpBuilder &":$builder)>
  ];
}

def Dtc_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    The op's sharding rule as factors (Shardy/Alpa style): every tensor
    dimension of every operand and result maps to an ordered list of factors
    (major first). A factor shards the same way wherever it appears. A factor
    missing from a result is reduced into it: `sum` and `mean` factors leave
    that result as a pending partial sum when sharded; `blocked` factors may
    not be sharded at all. See include/dtc/Sharding/ShardingRule.h.
  }];
  let methods = [
    InterfaceMethod<"Returns the op's sharding rule for its current types.",
      "::mlir::dtc::ShardingRule", "getShardingRule", (ins)>
  ];
}

def Dtc_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    The op's compute cost on its current (global or local) types, for the
    cost model, the planner and reports.
  }];
  let methods = [
    InterfaceMethod<"Floating-point operations the op performs.",
      "int64_t", "getFlopCount", (ins), [{}], [{
        // Elementwise default: one operation per result element.
        int64_t flops = 0;
        for (::mlir::Type type : $_op->getResultTypes())
          if (auto tensor = ::llvm::dyn_cast<::mlir::RankedTensorType>(type))
            flops += tensor.getNumElements();
        return flops;
      }]>,
    InterfaceMethod<[{
        How the op's kernel spends its time (a GEMM, fused attention, a
        stream or a row reduction over memory): the class whose rate the
        hardware profile prices it at. Stated once, by the kernel's rule
        (kernels/common/Rules.cpp), for the runtime and the compiler alike.
      }], "::dtc::kernels::CostClass", "getCostClass", (ins), [{}], [{
        return ::mlir::dtc::kernelCostClass($_op);
      }]>,
    InterfaceMethod<[{
        Into how many independent products the op's dense work splits (a
        fused attention: one per batch row and head). A dense kernel's
        efficiency follows the size of one: sixty-four heads of 64 queries
        run like small products, not like one product of their total flops.
      }], "int64_t", "getIndependentProducts", (ins), [{}], [{
        return 1;
      }]>

  ];
}

def Dtc_InPlaceOpInterface : OpInterface<"InPlaceOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    Results the op's kernel may write into the buffer of one of its operands
    (docs/kernels.md "in place ok"), read from the op's kernel rule
    (kernels/common/Rules.cpp). The emitter uses it to update parameters
    and optimizer state without a copy.
  }];
  let methods = [
    InterfaceMethod<"Operand whose buffer result `resultIdx` may reuse, or -1.",
      "int64_t", "getInPlaceOperand", (ins "unsigned":$resultIdx), [{}], [{
        // The kernel table's "in place ok" pairs, the one list of them.
        return ::mlir::dtc::kernelInPlaceOperand($_op, resultIdx);
      }]>
  ];
}

def Dtc_IndexOperandsOpInterface : OpInterface<"IndexOperandsOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    Integer operands the op uses as indices (token ids, labels) and the
    exclusive bound their values must respect, so a model whose inputs can
    exceed it (its dtc.max) is rejected at compile time.
  }];
  let methods = [
    InterfaceMethod<"Exclusive bound of operand `operandIdx` used as an index, or 0 if it is not one.",
      "int64_t", "getIndexBound", (ins "unsigned":$operandIdx)>
  ];
}

def Dtc_LocalLoweringOpInterface : OpInterface<"LocalLoweringOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    An op whose per-device computation differs from its global one when
    some of its factors are sharded (include/dtc/Sharding/LocalLowering.h):
    the partitioner clones every other op onto local shapes, but asks this
    one to build its local computation whenever one of its lowered factors
    is sharded. The lowering also handles uneven (padded) splits of those
    factors.
  }];
  let methods = [
    InterfaceMethod<[{
        Factors (of getShardingRule()) whose sharding this op's local
        lowering implements.
      }],
      "::llvm::SmallVector<int64_t>", "getLoweredFactors", (ins)>,
    InterfaceMethod<[{
        Builds the op's local computation at `ctx.builder()` from
        `localOperands` (resharded to what `factors` require of each operand)
        and fills `localResults` with values of `localResultTypes`: each is
        what the result's sharding under `factors` says (a pending partial
        sum where a Sum factor is sharded, before any mean rescaling the
        partitioner adds).
      }],
      "::llvm::LogicalResult", "buildLocal",
      (ins "::mlir::dtc::LocalLoweringContext &":$ctx,
           "::llvm::ArrayRef<::mlir::Value>":$localOperands,
           "::mlir::TypeRange":$localResultTypes,
           "const ::mlir::dtc::FactorAxes &":$factors,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$localResults)>
  ];
}

def Dtc_KernelRuleOpInterface : OpInterface<"KernelRuleOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    The op is the runtime kernel `getKernelName()`, and its verifier is that
    kernel's check rule in the MLIR-free kernel library
    (include/dtc/kernels/Kernel.h, kernels/common/Rules.cpp), which the
    runtime also applies to every instruction it loads: the op's operand and
    result types become the rule's tensor descriptions and its inherent
    attributes the artifact's JSON attribute object (the emitter's own
    conversion, include/dtc/Dialect/KernelRule.h), and the rule's message
    becomes the op's error. So the shape and attribute rules of an op are
    written once; ODS keeps only its type constraints.
  }];
  let methods = [
    InterfaceMethod<"The kernel this op is emitted as (its name without `dtc.`).",
      "::llvm::StringRef", "getKernelName", (ins), [{}], [{
        return $_op->getName().stripDialect();
      }]>
  ];
  let verify = [{
    return ::mlir::dtc::verifyKernelRule(
        $_op, ::llvm::cast<::mlir::dtc::KernelRuleOpInterface>($_op).getKernelName());
  }];
}

def Dtc_ViewOpInterface : OpInterface<"ViewOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    The op's result has exactly the bytes of its first operand, reinterpreted
    (e.g. a reshape). The emitter makes it a view of the operand's memory and
    emits no instruction, unless that memory is bound to a tensor.
  }];
}

#endif // DTC_DIALECT_DTCINTERFACES_TD
