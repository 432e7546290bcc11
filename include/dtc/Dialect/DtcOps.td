//===- DtcOps.td - dtc ops ---------------------------------*- tablegen -*-===//
//
// Model ops (docs/model-format.md: names, operand order and attribute
// names are a public contract), then the internal ops the training-step pass
// adds: gradient kernels and optimizer updates. docs/kernels.md says what the
// runtime computes for each.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_DIALECT_DTCOPS_TD
#define DTC_DIALECT_DTCOPS_TD

include "dtc/Dialect/DtcDialect.td"
include "dtc/Dialect/DtcAttrs.td"
include "dtc/Dialect/DtcInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Dtc_FloatTensor : RankedTensorOf<[F32, BF16, F16]>;
def Dtc_IdTensor : RankedTensorOf<[I32, I64]>;
def Dtc_AnyTensor : RankedTensorOf<[F32, BF16, F16, I32, I64]>;
def Dtc_LossTensor : 0DTensorOf<[F32]>;
def Dtc_FloatScalar : 0DTensorOf<[F32, BF16, F16]>;
def Dtc_StepTensor : 0DTensorOf<[I64]>;

def Dtc_ShardingRule : DeclareOpInterfaceMethods<Dtc_ShardingRuleOpInterface>;
def Dtc_Gradient : DeclareOpInterfaceMethods<Dtc_GradientOpInterface>;
def Dtc_Cost : DeclareOpInterfaceMethods<Dtc_CostOpInterface, ["getFlopCount"]>;
// Fused attention: one product per batch row and head.
def Dtc_AttentionCost : DeclareOpInterfaceMethods<Dtc_CostOpInterface,
    ["getFlopCount", "getIndependentProducts"]>;
def Dtc_LocalLowering : DeclareOpInterfaceMethods<Dtc_LocalLoweringOpInterface>;
// Cheap to compute again from its operands relative to the memory its
// result holds (elementwise ops, data movement, softmax, fused attention):
// what `--remat selective` recomputes in the backward instead of keeping
// (Megatron's selective recompute; matmuls and norms are kept).
def Dtc_CheapToRecompute : NativeOpTrait<"CheapToRecompute"> {
  let cppNamespace = "::mlir::dtc";
}
// Its float results are f32 in every precision (a loss, a count, a
// fraction): mixed precision does not lower them to 16 bits.
def Dtc_F32Results : NativeOpTrait<"F32Results"> {
  let cppNamespace = "::mlir::dtc";
}

//===----------------------------------------------------------------------===//
// Elementwise model ops
//===----------------------------------------------------------------------===//

class Dtc_BinaryOp<string mnemonic, string doc>
    : Dtc_Op<mnemonic, [Pure, InferTypeOpAdaptor, Dtc_Gradient,
                        Dtc_ShardingRule, Dtc_CostOpInterface, Dtc_CheapToRecompute]> {
  let summary = doc;
  let description = [{
    Elementwise with numpy broadcasting (shapes aligned on the right; a
    dimension of size 1 stretches). Both operands have the same element type.
  }];
  let arguments = (ins Dtc_FloatTensor:$lhs, Dtc_FloatTensor:$rhs);
  let results = (outs Dtc_FloatTensor:$result);
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location> location,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &inferred) {
      return inferBroadcastElementwiseType(location, adaptor.getLhs().getType(),
                                           adaptor.getRhs().getType(), inferred);
    }
    ::mlir::dtc::ShardingRule $cppClass::getShardingRule() {
      return buildElementwiseRule(getOperation(), linearOperandGroups());
    }
  }];
}

def Dtc_AddOp : Dtc_BinaryOp<"add", "elementwise addition"> {
  let extraClassDeclaration = [{
    static ::mlir::dtc::LinearGroups linearOperandGroups() { return {{0, 1}}; }
  }];
}
def Dtc_SubOp : Dtc_BinaryOp<"sub", "elementwise subtraction"> {
  let extraClassDeclaration = [{
    static ::mlir::dtc::LinearGroups linearOperandGroups() { return {{0, 1}}; }
  }];
}
def Dtc_MulOp : Dtc_BinaryOp<"mul", "elementwise multiplication"> {
  let extraClassDeclaration = [{
    static ::mlir::dtc::LinearGroups linearOperandGroups() { return {{0}, {1}}; }
  }];
}
def Dtc_DivOp : Dtc_BinaryOp<"div", "elementwise division"> {
  let extraClassDeclaration = [{
    static ::mlir::dtc::LinearGroups linearOperandGroups() { return {{0}}; }
  }];
}
def Dtc_MaxOp : Dtc_BinaryOp<"max", "elementwise maximum"> {
  let extraClassDeclaration = [{
    static ::mlir::dtc::LinearGroups linearOperandGroups() { return {}; }
  }];
}

class Dtc_UnaryOp<string mnemonic, string doc, bit linear = 0>
    : Dtc_Op<mnemonic, [Pure, SameOperandsAndResultType, Dtc_Gradient,
                        Dtc_ShardingRule, Dtc_CostOpInterface, Dtc_CheapToRecompute]> {
  let summary = doc;
  let arguments = (ins Dtc_FloatTensor:$x);
  let results = (outs Dtc_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  let extraClassDefinition = [{
    ::mlir::dtc::ShardingRule $cppClass::getShardingRule() {
      return buildElementwiseRule(getOperation(), }] #
      !if(linear, "{{0}}", "{}") # [{);
    }
  }];
}

def Dtc_NegOp : Dtc_UnaryOp<"neg", "elementwise negation", 1>;
def Dtc_ExpOp : Dtc_UnaryOp<"exp", "elementwise e^x">;
def Dtc_LogOp : Dtc_UnaryOp<"log", "elementwise natural logarithm">;
def Dtc_TanhOp : Dtc_UnaryOp<"tanh", "elementwise hyperbolic tangent">;
def Dtc_SqrtOp : Dtc_UnaryOp<"sqrt", "elementwise square root">;
def Dtc_RsqrtOp : Dtc_UnaryOp<"rsqrt", "elementwise 1/sqrt(x)">;
def Dtc_ReluOp : Dtc_UnaryOp<"relu", "elementwise max(x, 0)">;
def Dtc_GeluOp : Dtc_UnaryOp<"gelu", "GELU, tanh approximation">;
def Dtc_SiluOp : Dtc_UnaryOp<"silu", "x * sigmoid(x)">;

//===----------------------------------------------------------------------===//
// Structured model ops
//===----------------------------------------------------------------------===//

def Dtc_MatmulOp : Dtc_Op<"matmul", [Pure, InferTypeOpAdaptor, Dtc_Gradient,
                                     Dtc_ShardingRule, Dtc_Cost]> {
  let summary = "batched matrix product";
  let description = [{
    `a [..., M, K] x b [..., K, N] -> [..., M, N]`. The leading (batch)
    dimensions broadcast numpy-style; commonly `b` is a rank-2 weight.
  }];
  let arguments = (ins Dtc_FloatTensor:$a, Dtc_FloatTensor:$b);
  let results = (outs Dtc_FloatTensor:$result);
}

// Matmuls with a fused epilogue. Not model ops: dtc-fuse-matmul-epilogues
// makes them from a matmul and the broadcast bias add and GELU after it,
// on the partitioned (local) program just before emission, so no gradient
// or sharding rule is ever asked of them. The kernel applies the epilogue
// to each block of output rows right after the product (docs/kernels.md).
def Dtc_MatmulBiasOp : Dtc_Op<"matmul_bias", [Pure, Dtc_Cost]> {
  let summary = "matrix product plus a bias over its last dimension";
  let description = [{
    `matmul(a, b) + bias`, bias `[N]` broadcast over the rows of the
    `[..., M, N]` product: what `dtc.add(dtc.matmul(a, b), bias)` computes.
  }];
  let arguments = (ins Dtc_FloatTensor:$a, Dtc_FloatTensor:$b, Dtc_FloatTensor:$bias);
  let results = (outs Dtc_FloatTensor:$result);
}

def Dtc_MatmulGeluOp : Dtc_Op<"matmul_gelu", [Pure, Dtc_Cost]> {
  let summary = "GELU of a matrix product (plus an optional bias), and its input";
  let description = [{
    `pre_activation = matmul(a, b) (+ bias)` and `result =
    gelu(pre_activation)`. Both are results because the backward's
    `gelu_grad` reads the pre-activation.
  }];
  let arguments = (ins Dtc_FloatTensor:$a, Dtc_FloatTensor:$b,
                       Optional<Dtc_FloatTensor>:$bias);
  let results = (outs Dtc_FloatTensor:$result, Dtc_FloatTensor:$pre_activation);
}

def Dtc_SoftmaxOp : Dtc_Op<"softmax", [Pure, SameOperandsAndResultType,
                                       Dtc_Gradient, Dtc_ShardingRule,
                                       Dtc_CostOpInterface, Dtc_CheapToRecompute]> {
  let summary = "softmax along one axis";
  let arguments = (ins Dtc_FloatTensor:$x, I64Attr:$axis);
  let results = (outs Dtc_FloatTensor:$result);
}

def Dtc_GradientFor : DeclareOpInterfaceMethods<Dtc_GradientOpInterface, ["buildGradientFor"]>;

def Dtc_LayerNormOp : Dtc_Op<"layer_norm", [Pure, Dtc_GradientFor,
                                            Dtc_ShardingRule, Dtc_CostOpInterface]> {
  let summary = "layer normalization over the last dimension";
  let arguments = (ins Dtc_FloatTensor:$x, Dtc_FloatTensor:$gamma,
                       Dtc_FloatTensor:$beta, F32Attr:$epsilon);
  let results = (outs Dtc_FloatTensor:$result);
}

def Dtc_RmsNormOp : Dtc_Op<"rms_norm", [Pure, Dtc_GradientFor, Dtc_ShardingRule,
                                        Dtc_CostOpInterface]> {
  let summary = "RMS normalization over the last dimension";
  let arguments = (ins Dtc_FloatTensor:$x, Dtc_FloatTensor:$gamma,
                       F32Attr:$epsilon);
  let results = (outs Dtc_FloatTensor:$result);
}

def Dtc_IndexOperands : DeclareOpInterfaceMethods<Dtc_IndexOperandsOpInterface>;

def Dtc_EmbeddingOp : Dtc_Op<"embedding", [Pure, InferTypeOpAdaptor,
                                           Dtc_Gradient, Dtc_ShardingRule,
                                           Dtc_CostOpInterface, Dtc_IndexOperands,
                                           Dtc_LocalLowering]> {
  let summary = "row lookup: table [V, D], ids [...] -> [..., D]";
  let arguments = (ins Dtc_FloatTensor:$table, Dtc_IdTensor:$ids);
  let results = (outs Dtc_FloatTensor:$result);
}

def Dtc_AttentionOp : Dtc_Op<"attention", [Pure, Dtc_Gradient, Dtc_ShardingRule,
                                           Dtc_AttentionCost, Dtc_CheapToRecompute,
                                           Dtc_LocalLowering]> {
  let summary = "scaled dot-product attention, softmax(q k^T / sqrt(Dh)) v";
  let description = [{
    q and the result are `[B, H, S, Dh]`, k and v `[B, Hkv, S, Dh]` with Hkv
    dividing H: query head h attends with key/value head h / (H / Hkv)
    (grouped-query attention; Hkv = H is ordinary attention, Hkv = 1
    multi-query). With `causal`, query i attends to keys j <= i only.
  }];
  let arguments = (ins Dtc_FloatTensor:$q, Dtc_FloatTensor:$k,
                       Dtc_FloatTensor:$v,
                       DefaultValuedAttr<BoolAttr, "false">:$causal);
  let results = (outs Dtc_FloatTensor:$result);
}

def Dtc_CrossEntropyOp : Dtc_Op<"cross_entropy", [Pure, Dtc_F32Results, Dtc_Gradient,
                                                  Dtc_ShardingRule, Dtc_CostOpInterface,
                                                  Dtc_IndexOperands, Dtc_LocalLowering]> {
  let summary = "mean softmax cross entropy over all label positions";
  let description = [{
    -log softmax(logits)[label] per label position, reduced by `reduction`:
    "mean" (the default, the model format's) over the positions, "sum"
    their sum. With
    `ignore_index`, positions whose label equals it count for nothing (the
    label need not lie in [0, V)): the mean is over the kept positions, and
    0 when none is kept. dtc-decompose-ignored-labels turns such a mean into
    a sum over a count (the count is data, so a shard's share cannot be a
    fixed fraction); an undecomposed one keeps its positions whole.
  }];
  let arguments = (ins Dtc_FloatTensor:$logits, Dtc_IdTensor:$labels,
                       OptionalAttr<I64Attr>:$ignore_index,
                       OptionalAttr<StrAttr>:$reduction);
  let results = (outs Dtc_LossTensor:$result);
  let extraClassDeclaration = [{
    /// reduction = "sum" (absent: the mean).
    bool isSum() { return getReduction() && *getReduction() == "sum"; }
  }];
}

def Dtc_LabelMaskOp : Dtc_Op<"label_mask", [Pure, Dtc_F32Results, Dtc_Gradient, Dtc_ShardingRule,
                                            Dtc_CostOpInterface]> {
  let summary = "1.0 where a label is kept, 0.0 where it equals ignore_index";
  let description = [{
    f32, labels' shape. Summed, it counts the positions a cross entropy with
    `ignore_index` averages over (dtc-decompose-ignored-labels).
  }];
  let arguments = (ins Dtc_IdTensor:$labels, I64Attr:$ignore_index);
  let results = (outs Dtc_FloatTensor:$mask);
}

class Dtc_ReduceOp<string mnemonic, string doc, string reduction,
                   list<Trait> extra = [Dtc_Gradient]>
    : Dtc_Op<mnemonic, !listconcat([Pure, InferTypeOpAdaptor,
                                    Dtc_ShardingRule, Dtc_CostOpInterface], extra)> {
  let summary = doc;
  let arguments = (ins Dtc_FloatTensor:$x, DenseI64ArrayAttr:$axes,
                       DefaultValuedAttr<BoolAttr, "false">:$keep_dims);
  let results = (outs Dtc_FloatTensor:$result);
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location> location,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &inferred) {
      return inferReduceType(location, adaptor.getX().getType(),
                             adaptor.getAxes(), adaptor.getKeepDims(), inferred);
    }
    ::mlir::dtc::ShardingRule $cppClass::getShardingRule() {
      return buildReduceRule(getOperation(), getAxes(), getKeepDims(),
                             ::mlir::dtc::FactorKind::}] # reduction # [{);
    }
  }];
}

def Dtc_ReduceSumOp : Dtc_ReduceOp<"reduce_sum", "sum over axes", "Sum">;
def Dtc_ReduceMeanOp : Dtc_ReduceOp<"reduce_mean", "mean over axes", "Mean">;
// Internal (no gradient rule): a sharded reduced axis leaves a pending
// partial maximum. Vocab-parallel cross entropy takes its row maximum so.
def Dtc_ReduceMaxOp : Dtc_ReduceOp<"reduce_max", "maximum over axes", "Max", []>;

def Dtc_ReshapeOp : Dtc_Op<"reshape", [Pure, Dtc_Gradient, Dtc_ShardingRule,
                                       Dtc_Cost, Dtc_ViewOpInterface,
                                       Dtc_CheapToRecompute, Dtc_InPlaceOpInterface]> {
  let summary = "same elements, row-major, new static shape";
  let arguments = (ins Dtc_AnyTensor:$x);
  let results = (outs Dtc_AnyTensor:$result);
}

def Dtc_TransposeOp : Dtc_Op<"transpose", [Pure, InferTypeOpAdaptor,
                                           Dtc_Gradient, Dtc_ShardingRule,
                                           Dtc_CostOpInterface, Dtc_CheapToRecompute]> {
  let summary = "permutes dimensions: result.shape[i] = x.shape[permutation[i]]";
  let arguments = (ins Dtc_AnyTensor:$x, DenseI64ArrayAttr:$permutation);
  let results = (outs Dtc_AnyTensor:$result);
}

def Dtc_CastOp : Dtc_Op<"cast", [Pure, SameOperandsAndResultShape,
                                 Dtc_Gradient, Dtc_ShardingRule,
                                 Dtc_CostOpInterface, Dtc_CheapToRecompute]> {
  let summary = "element type conversion; the result type gives the new type";
  let arguments = (ins Dtc_AnyTensor:$x);
  let results = (outs Dtc_AnyTensor:$result);
}

//===----------------------------------------------------------------------===//
// Gradient ops (added by the training-step pass)
//===----------------------------------------------------------------------===//

def Dtc_BroadcastOp : Dtc_Op<"broadcast", [Pure, Dtc_Gradient, Dtc_ShardingRule,
                                           Dtc_CostOpInterface, Dtc_CheapToRecompute]> {
  let summary = "numpy broadcast to the result shape";
  let arguments = (ins Dtc_FloatTensor:$x);
  let results = (outs Dtc_FloatTensor:$result);
}

class Dtc_ActivationGradOp<string mnemonic, string doc>
    : Dtc_Op<mnemonic, [Pure, SameOperandsAndResultType, Dtc_ShardingRule,
                        Dtc_CostOpInterface]> {
  let summary = doc;
  let arguments = (ins Dtc_FloatTensor:$x, Dtc_FloatTensor:$dy);
  let results = (outs Dtc_FloatTensor:$dx);
  let assemblyFormat = "$x `,` $dy attr-dict `:` type($x)";
  let extraClassDefinition = [{
    ::mlir::dtc::ShardingRule $cppClass::getShardingRule() {
      return buildElementwiseRule(getOperation(), {{1}});
    }
  }];
}

def Dtc_ReluGradOp : Dtc_ActivationGradOp<"relu_grad", "dy * (x > 0)">;
def Dtc_GeluGradOp : Dtc_ActivationGradOp<"gelu_grad", "dy * gelu'(x)">;
def Dtc_SiluGradOp : Dtc_ActivationGradOp<"silu_grad", "dy * silu'(x)">;

def Dtc_MaxGradOp : Dtc_Op<"max_grad", [Pure, Dtc_ShardingRule, Dtc_CostOpInterface]> {
  let summary = "routes dy to the larger of lhs and rhs (ties to lhs)";
  let arguments = (ins Dtc_FloatTensor:$lhs, Dtc_FloatTensor:$rhs,
                       Dtc_FloatTensor:$dy);
  let results = (outs Dtc_FloatTensor:$dlhs, Dtc_FloatTensor:$drhs);
}

def Dtc_SoftmaxGradOp : Dtc_Op<"softmax_grad", [Pure, SameOperandsAndResultType,
                                                Dtc_ShardingRule, Dtc_CostOpInterface]> {
  let summary = "y * (dy - sum(dy * y, axis)) for y = softmax(x)";
  let arguments = (ins Dtc_FloatTensor:$y, Dtc_FloatTensor:$dy, I64Attr:$axis);
  let results = (outs Dtc_FloatTensor:$dx);
}

def Dtc_LayerNormGradOp : Dtc_Op<"layer_norm_grad", [Pure, Dtc_ShardingRule,
                                                     Dtc_CostOpInterface]> {
  let summary = "gradient of layer_norm: dx, dgamma, dbeta";
  let arguments = (ins Dtc_FloatTensor:$x, Dtc_FloatTensor:$gamma,
                       Dtc_FloatTensor:$dy, F32Attr:$epsilon);
  let results = (outs Dtc_FloatTensor:$dx, Dtc_FloatTensor:$dgamma,
                      Dtc_FloatTensor:$dbeta);
}

def Dtc_RmsNormGradOp : Dtc_Op<"rms_norm_grad", [Pure, Dtc_ShardingRule,
                                                 Dtc_CostOpInterface]> {
  let summary = "gradient of rms_norm: dx, dgamma";
  let arguments = (ins Dtc_FloatTensor:$x, Dtc_FloatTensor:$gamma,
                       Dtc_FloatTensor:$dy, F32Attr:$epsilon);
  let results = (outs Dtc_FloatTensor:$dx, Dtc_FloatTensor:$dgamma);
}

// The norm gradients split into their input part (B) and their parameter
// part (W), so that a zero-bubble schedule can defer the weight gradients:
// the training step builds these when an op's operands need gradients of
// both kinds (GradientOpInterface::buildGradientFor).
def Dtc_LayerNormInputGradOp : Dtc_Op<"layer_norm_input_grad", [Pure, Dtc_ShardingRule,
                                                               Dtc_CostOpInterface]> {
  let summary = "input gradient of layer_norm: dx only";
  let arguments = (ins Dtc_FloatTensor:$x, Dtc_FloatTensor:$gamma,
                       Dtc_FloatTensor:$dy, F32Attr:$epsilon);
  let results = (outs Dtc_FloatTensor:$dx);
}

def Dtc_LayerNormParamGradOp : Dtc_Op<"layer_norm_param_grad", [Pure, Dtc_ShardingRule,
                                                               Dtc_CostOpInterface]> {
  let summary = "parameter gradients of layer_norm: dgamma, dbeta";
  let arguments = (ins Dtc_FloatTensor:$x, Dtc_FloatTensor:$dy, F32Attr:$epsilon);
  let results = (outs Dtc_FloatTensor:$dgamma, Dtc_FloatTensor:$dbeta);
}

def Dtc_RmsNormInputGradOp : Dtc_Op<"rms_norm_input_grad", [Pure, Dtc_ShardingRule,
                                                           Dtc_CostOpInterface]> {
  let summary = "input gradient of rms_norm: dx only";
  let arguments = (ins Dtc_FloatTensor:$x, Dtc_FloatTensor:$gamma,
                       Dtc_FloatTensor:$dy, F32Attr:$epsilon);
  let results = (outs Dtc_FloatTensor:$dx);
}

def Dtc_RmsNormParamGradOp : Dtc_Op<"rms_norm_param_grad", [Pure, Dtc_ShardingRule,
                                                           Dtc_CostOpInterface]> {
  let summary = "parameter gradient of rms_norm: dgamma";
  let arguments = (ins Dtc_FloatTensor:$x, Dtc_FloatTensor:$dy, F32Attr:$epsilon);
  let results = (outs Dtc_FloatTensor:$dgamma);
}

def Dtc_EmbeddingGradOp : Dtc_Op<"embedding_grad", [Pure, Dtc_ShardingRule,
                                                    Dtc_CostOpInterface, Dtc_IndexOperands,
                                                    Dtc_LocalLowering]> {
  let summary = "scatter-add of dy rows into a zero [V, D] table gradient";
  let arguments = (ins Dtc_IdTensor:$ids, Dtc_FloatTensor:$dy);
  let results = (outs Dtc_FloatTensor:$dtable);
}

def Dtc_AttentionGradOp : Dtc_Op<"attention_grad", [Pure, Dtc_ShardingRule,
                                                    Dtc_AttentionCost,
                                                    Dtc_LocalLowering]> {
  let summary = "gradient of attention: dq, dk, dv";
  let arguments = (ins Dtc_FloatTensor:$q, Dtc_FloatTensor:$k,
                       Dtc_FloatTensor:$v, Dtc_FloatTensor:$dy,
                       DefaultValuedAttr<BoolAttr, "false">:$causal);
  let results = (outs Dtc_FloatTensor:$dq, Dtc_FloatTensor:$dk,
                      Dtc_FloatTensor:$dv);
}

def Dtc_CrossEntropyGradOp : Dtc_Op<"cross_entropy_grad", [Pure, Dtc_ShardingRule,
                                                           Dtc_CostOpInterface,
                                                           Dtc_IndexOperands,
                                                           Dtc_LocalLowering]> {
  let summary = "(softmax(logits) - onehot(labels)) * dloss * scale";
  let description = [{
    `scale` is 1 / (label positions of the GLOBAL batch), fixed when the
    gradient is built, so that a batch shard computes its share of the
    gradient of the global mean; 1 for a sum. Positions whose label equals
    `ignore_index` get a zero gradient.
  }];
  let arguments = (ins Dtc_FloatTensor:$logits, Dtc_IdTensor:$labels,
                       Dtc_LossTensor:$dloss, F32Attr:$scale,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Dtc_FloatTensor:$dlogits);
}

//===----------------------------------------------------------------------===//
// Local ops (added by the partitioner: what one device runs)
//===----------------------------------------------------------------------===//

def Dtc_ShardOffsetOp : Dtc_Op<"shard_offset", [Pure, Dtc_CostOpInterface]> {
  let summary = "this device's offset along a dimension split over grid axes";
  let description = [{
    The rank's row-major index over `grid_axes` (as a communicator over
    those axes orders its members) times `piece_size`: the global index of
    the first element of the rank's piece of a dimension split over
    `grid_axes` into pieces of `piece_size` elements. The one rank-dependent
    value of the SPMD program; the runtime supplies it from the rank's mesh
    coordinates. With `shift` s, the index is that of the member s places
    before the rank on the ring of those axes ((index - s) mod n): the
    offset of the piece a ring of shard.shift steps has brought it.
  }];
  let arguments = (ins DenseI64ArrayAttr:$grid_axes, I64Attr:$piece_size,
                       OptionalAttr<I64Attr>:$shift);
  let results = (outs Dtc_StepTensor:$offset);
}

def Dtc_PadOp : Dtc_Op<"pad", [Pure, Dtc_CostOpInterface]> {
  let summary = "zero-pads or crops every dimension to the result shape";
  let description = [{
    Each dimension keeps its first min(in, out) elements and fills the rest
    with zeros: a full dimension of an unevenly split value is padded to a
    multiple of the group size before a slice, scatter or all-to-all, and a
    gathered one is cropped back to its global size.
  }];
  let arguments = (ins Dtc_AnyTensor:$x);
  let results = (outs Dtc_AnyTensor:$result);
}

def Dtc_FillPaddingOp : Dtc_Op<"fill_padding", [Pure, AllTypesMatch<["x", "result"]>,
                                                 Dtc_CostOpInterface, Dtc_InPlaceOpInterface]> {
  let summary = "sets the padding of an unevenly split dimension to a value";
  let description = [{
    Elements i along `axis` with offset + i >= size (the global size of the
    dimension) become `fill`: "zero" before a sum over the dimension, "-inf"
    before a max, so padding never reaches a reduction.
  }];
  let arguments = (ins Dtc_FloatTensor:$x, Dtc_StepTensor:$offset, I64Attr:$axis,
                       I64Attr:$size, StrAttr:$fill);
  let results = (outs Dtc_FloatTensor:$result);
}

// Ring attention over a split sequence (AttentionOp's local lowering,
// docs/design.md "Ring attention"): each rank runs its query block against
// every rank's key block in turn, the key blocks passed around the ring by
// shard.shift.
def Dtc_AttentionBlockOp : Dtc_Op<"attention_block", [Pure, Dtc_AttentionCost,
                                                      AttrSizedOperandSegments]> {
  let summary = "one key block of ring attention, merged into the running output";
  let description = [{
    Attention of q `[B, H, Sq, Dh]` (global positions q_offset + i * stride)
    against one block of keys and values `[B, Hkv, Sk, Dh]` (positions
    k_offset + j * stride), `stride` being `position_stride` (1 for
    contiguous chunks, the ring's length n for the striped layout, where a
    rank's rows are the positions r, r + n, r + 2n, ...). Under the zigzag
    layout (`zigzag_length` L, the whole sequence's length) a block of S
    rows is two chunks, rows i < S/2 at offset + i and the rest at
    L - S - offset + i (rank r of n holds chunks r and 2n - 1 - r). With
    `causal`, key j is visible to query i when its position is at most the
    query's; in every layout those keys are a prefix of the block
    (include/dtc/kernels/BlockPositions.h). The block's normalized output and per-row logsumexp are
    merged with the running ones (`y_acc`, `lse_acc`, absent for the first
    block) by logsumexp weights, giving `result` and `lse` `[B, H, Sq]`
    (f32).
  }];
  let arguments = (ins Dtc_FloatTensor:$q, Dtc_FloatTensor:$k,
                       Dtc_FloatTensor:$v, Dtc_StepTensor:$q_offset,
                       Dtc_StepTensor:$k_offset,
                       Optional<Dtc_FloatTensor>:$y_acc,
                       Optional<Dtc_FloatTensor>:$lse_acc,
                       DefaultValuedAttr<BoolAttr, "false">:$causal,
                       DefaultValuedAttr<I64Attr, "1">:$position_stride,
                       OptionalAttr<I64Attr>:$zigzag_length);
  let results = (outs Dtc_FloatTensor:$result, Dtc_FloatTensor:$lse);
}

def Dtc_AttentionBlockGradOp : Dtc_Op<"attention_block_grad", [Pure, Dtc_AttentionCost]> {
  let summary = "one key block's terms of attention's gradient";
  let description = [{
    From the whole attention's output `y` and row logsumexp `lse` (as
    attention_block leaves them after the last block): q's dq terms against
    this block of keys and values, and the block's own dk and dv terms.
    Positions and the causal mask as attention_block's.
  }];
  let arguments = (ins Dtc_FloatTensor:$q, Dtc_FloatTensor:$k,
                       Dtc_FloatTensor:$v, Dtc_StepTensor:$q_offset,
                       Dtc_StepTensor:$k_offset, Dtc_FloatTensor:$dy,
                       Dtc_FloatTensor:$y, Dtc_FloatTensor:$lse,
                       DefaultValuedAttr<BoolAttr, "false">:$causal,
                       DefaultValuedAttr<I64Attr, "1">:$position_stride,
                       OptionalAttr<I64Attr>:$zigzag_length);
  let results = (outs Dtc_FloatTensor:$dq, Dtc_FloatTensor:$dk,
                      Dtc_FloatTensor:$dv);
}

def Dtc_EmbeddingShardOp : Dtc_Op<"embedding_shard", [Pure, Dtc_CostOpInterface]> {
  let summary = "lookup in a vocabulary shard: rows [offset, offset + V') of the table";
  let description = [{
    table `[V', D]` holds global rows offset..offset+V'-1; result
    `[..., D]` is table[id - offset] where that row is in the shard and zero
    elsewhere, so the sum over the shards is the global lookup
    (Megatron's vocab-parallel embedding). `vocab` is the global table's
    row count (ids must be below it).
  }];
  let arguments = (ins Dtc_FloatTensor:$table, Dtc_IdTensor:$ids,
                       Dtc_StepTensor:$offset, I64Attr:$vocab);
  let results = (outs Dtc_FloatTensor:$result);
}

def Dtc_EmbeddingShardGradOp : Dtc_Op<"embedding_shard_grad", [Pure, Dtc_CostOpInterface]> {
  let summary = "embedding_grad restricted to a vocabulary shard";
  let description = [{
    Scatter-adds the rows of dy whose ids fall in [offset, offset + V')
    into a zero `[V', D]` table gradient; other ids are skipped.
  }];
  let arguments = (ins Dtc_IdTensor:$ids, Dtc_FloatTensor:$dy, Dtc_StepTensor:$offset,
                       I64Attr:$vocab);
  let results = (outs Dtc_FloatTensor:$dtable);
}

def Dtc_CrossEntropyShardStatsOp : Dtc_Op<"cross_entropy_shard_stats",
                                          [Pure, Dtc_CostOpInterface]> {
  let summary = "a vocabulary shard's softmax statistics per label position";
  let description = [{
    logits `[..., V']` hold global columns offset..offset+V'-1 of a
    vocabulary of `vocab` (columns past it are padding and ignored); `max`
    `[...]` is the global row maximum. Results `[...]`: the shard's
    sum of exp(logit - max) and the label's logit where the label falls in
    the shard (0 elsewhere). Summed over the shards they give the row's
    softmax normalizer and target logit (Megatron's vocab-parallel cross
    entropy).
  }];
  let arguments = (ins Dtc_FloatTensor:$logits, Dtc_IdTensor:$labels,
                       Dtc_FloatTensor:$max, Dtc_StepTensor:$offset, I64Attr:$vocab,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Dtc_FloatTensor:$sum_exp, Dtc_FloatTensor:$target);
}

def Dtc_CrossEntropyShardGradOp : Dtc_Op<"cross_entropy_shard_grad",
                                         [Pure, Dtc_CostOpInterface]> {
  let summary = "cross_entropy_grad on a vocabulary shard from global statistics";
  let description = [{
    (exp(logits - max) / sum_exp - onehot(labels - offset)) * dloss * scale
    on the shard's columns; padding columns (past `vocab`) get 0.
  }];
  let arguments = (ins Dtc_FloatTensor:$logits, Dtc_IdTensor:$labels,
                       Dtc_FloatTensor:$max, Dtc_FloatTensor:$sum_exp,
                       Dtc_LossTensor:$dloss, Dtc_StepTensor:$offset,
                       I64Attr:$vocab, F32Attr:$scale,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Dtc_FloatTensor:$dlogits);
}

//===----------------------------------------------------------------------===//
// Optimizer ops
//===----------------------------------------------------------------------===//


// The learning-rate schedule of an update (include/dtc/kernels/LearningRate.h
// has the formula; the kernels and the runtime's log evaluate it): warmup
// over `warmup_steps` updates, then `lr_schedule` "constant", "cosine" or
// "linear" down to `min_lr` at update `decay_steps`. The defaults are the
// constant rate `lr`. A string, as the IR's other names (DtcEnums.td), so
// the generic form stays readable outside dtc; the kernel rule checks it.
defvar Dtc_LearningRateScheduleAttrs = (ins
    DefaultValuedStrAttr<StrAttr, "constant">:$lr_schedule,
    DefaultValuedAttr<I64Attr, "0">:$warmup_steps,
    DefaultValuedAttr<I64Attr, "0">:$decay_steps,
    DefaultValuedAttr<F64Attr, "0.0">:$min_lr);

def Dtc_SgdUpdateOp : Dtc_Op<"sgd_update", [Pure, AllTypesMatch<["param", "new_param"]>,
                                            AttrSizedOperandSegments,
                                            Dtc_ShardingRule, Dtc_CostOpInterface, Dtc_InPlaceOpInterface]> {
  let summary = "p - lr * (g + weight_decay * p)";
  let description = [{
    `grad` has the parameter's shape; its element type may be narrower (the
    bf16/f16 gradients of mixed precision update f32 master weights; the
    update computes in f32). Dynamic loss scaling passes `inv_scale` and
    `found_inf` together: the gradient is multiplied by `inv_scale` (in
    f32), and the step is skipped, the parameter kept, unless `found_inf` is
    exactly 0.

    The rate is `lr` unless the schedule attributes say otherwise
    (Dtc_LearningRateScheduleAttrs); `step` (the updates applied so far) is
    given exactly when the scheduled rate changes with it.
  }];
  let arguments = !con((ins Dtc_FloatTensor:$param, Dtc_FloatTensor:$grad,
                       Optional<Dtc_StepTensor>:$step,
                       Optional<Dtc_LossTensor>:$inv_scale,
                       Optional<Dtc_LossTensor>:$found_inf,
                       F64Attr:$lr, F64Attr:$weight_decay),
                       Dtc_LearningRateScheduleAttrs);
  let results = (outs Dtc_FloatTensor:$new_param);
}

def Dtc_AdamUpdateOp : Dtc_Op<"adam_update", [Pure,
    AllTypesMatch<["param", "m", "v", "new_param", "new_m", "new_v"]>,
    AttrSizedOperandSegments, Dtc_ShardingRule, Dtc_CostOpInterface, Dtc_InPlaceOpInterface]> {
  let summary = "one Adam (or AdamW, with decoupled) step, PyTorch semantics";
  let description = [{
    `step` is the number of updates already applied (t = step + 1 in the bias
    corrections). Without `decoupled`, weight decay is added to the gradient
    (Adam's L2); with it, the parameter decays directly (AdamW). `grad` may
    be narrower than the parameter (mixed precision: bf16/f16 gradients,
    f32 master weights and moments; the update computes in f32). With
    `inv_scale` and `found_inf` (dynamic loss scaling, as PyTorch's fused
    Adam) the gradient is unscaled in f32 and the step is skipped,
    parameter and moments kept, unless `found_inf` is exactly 0.
    The hyperparameters are f64: in f32, 1 - beta2 = 1 - 0.999 would be off
    by 1.3e-5 relative, and so would every second moment. The rate of
    update `step` follows the schedule attributes
    (Dtc_LearningRateScheduleAttrs).
  }];
  let arguments = !con((ins Dtc_FloatTensor:$param, Dtc_FloatTensor:$grad,
                       Dtc_FloatTensor:$m, Dtc_FloatTensor:$v,
                       Dtc_StepTensor:$step, Optional<Dtc_LossTensor>:$inv_scale,
                       Optional<Dtc_LossTensor>:$found_inf,
                       F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay, BoolAttr:$decoupled),
                       Dtc_LearningRateScheduleAttrs);
  let results = (outs Dtc_FloatTensor:$new_param, Dtc_FloatTensor:$new_m,
                      Dtc_FloatTensor:$new_v);
}

def Dtc_LossScaleUpdateOp : Dtc_Op<"loss_scale_update", [Pure, Dtc_ShardingRule,
                                                        Dtc_CostOpInterface, Dtc_InPlaceOpInterface]> {
  let summary = "dynamic loss scaling: back off on overflow, grow after good steps";
  let description = [{
    `found_inf` is 0 when every gradient of the step was finite (the sum of
    every gradient element times 0; NaN otherwise). On an overflow the scale
    is multiplied by `backoff_factor`, the run of good steps restarts and
    the count of skipped steps grows by one; otherwise the run grows by one
    and, when it reaches `growth_interval`, the scale is multiplied by
    `growth_factor` and the run restarts (PyTorch's GradScaler).
  }];
  let arguments = (ins Dtc_LossTensor:$scale, Dtc_StepTensor:$good_steps,
                       Dtc_StepTensor:$skipped, Dtc_LossTensor:$found_inf,
                       F64Attr:$growth_factor, F64Attr:$backoff_factor,
                       I64Attr:$growth_interval);
  let results = (outs Dtc_LossTensor:$new_scale, Dtc_StepTensor:$new_good_steps,
                      Dtc_StepTensor:$new_skipped);
}

//===----------------------------------------------------------------------===//
// Mixture of experts (docs/model-format.md): two composite model ops and
// the kernels they become (docs/kernels.md "Mixture of experts")
//===----------------------------------------------------------------------===//

def Dtc_I32Tensor : RankedTensorOf<[I32]>;
def Dtc_Decompose : DeclareOpInterfaceMethods<Dtc_DecomposeOpInterface>;

// A composite op has no kernel: it is verified by its own verifier and
// replaced by dtc-decompose-composites before anything else sees it.
class Dtc_CompositeOp<string mnemonic, list<Trait> traits = []>
    : Op<Dtc_Dialect, mnemonic,
         !listconcat([Dtc_Decompose], traits, [Dtc_KnownAttributesOnly])> {
  let hasVerifier = 1;
}

def Dtc_MoeOp : Dtc_CompositeOp<"moe", [Pure]> {
  let summary = "mixture of experts: top_k routing, capacity, expert FFNs";
  let description = [{
    x `[T, D]`, router `[D, E]`, w_in `[E, D, F]`, w_out `[E, F, D]`. Each
    token goes to its `top_k` experts by softmax(x router) score; its result
    is the sum of `gelu(x w_in[e]) w_out[e]` over those experts, weighted by
    their scores renormalised to sum 1 (before any dropping). An expert takes
    at most `ceil(capacity_factor * T * top_k / E)` tokens, in token order;
    a token over capacity contributes 0 for that expert.
  }];
  let arguments = (ins Dtc_FloatTensor:$x, Dtc_FloatTensor:$router,
                       Dtc_FloatTensor:$w_in, Dtc_FloatTensor:$w_out,
                       I64Attr:$top_k, F32Attr:$capacity_factor);
  let results = (outs Dtc_FloatTensor:$result);
  let extraClassDeclaration = [{
    /// Tokens each expert's buffer holds.
    int64_t getCapacity();
  }];
}

def Dtc_LoadBalancingLossOp : Dtc_CompositeOp<"load_balancing_loss", [Pure]> {
  let summary = "Switch Transformer's auxiliary loss E * sum_e f_e * P_e";
  let description = [{
    x `[T, D]`, router `[D, E]` (a dtc.moe's operands). f_e is the fraction
    of tokens whose first choice (largest softmax score) is expert e, P_e
    the mean softmax score of e over the tokens; the loss is 1 when the
    router spreads tokens evenly. f is piecewise constant, so the gradient
    flows through P only: d loss / d score[t, e] = E * f_e / T.
  }];
  let arguments = (ins Dtc_FloatTensor:$x, Dtc_FloatTensor:$router);
  let results = (outs Dtc_LossTensor:$result);
}

def Dtc_MoeRouteOp : Dtc_Op<"moe_route", [Pure, Dtc_Gradient, Dtc_ShardingRule,
                                          Dtc_CostOpInterface]> {
  let summary = "each token's top_k experts, their weights and buffer positions";
  let description = [{
    probs `[T, E]` -> experts, positions (i32) and weights `[T, top_k]`:
    the top_k experts by probability (ties: the lower index), their
    probabilities renormalised to sum 1, and, in token order, each slot's
    row in its expert's buffer of `capacity` rows (-1: dropped).
  }];
  let arguments = (ins Dtc_FloatTensor:$probs, I64Attr:$top_k, I64Attr:$capacity);
  let results = (outs Dtc_I32Tensor:$experts, Dtc_I32Tensor:$positions,
                      Dtc_FloatTensor:$weights);
}

def Dtc_MoeRouteGradOp : Dtc_Op<"moe_route_grad", [Pure, Dtc_ShardingRule,
                                                   Dtc_CostOpInterface]> {
  let summary = "gradient of moe_route's weights with respect to probs";
  let arguments = (ins Dtc_FloatTensor:$probs, Dtc_I32Tensor:$experts,
                       Dtc_FloatTensor:$dweights);
  let results = (outs Dtc_FloatTensor:$dprobs);
}

def Dtc_MoeDispatchOp : Dtc_Op<"moe_dispatch", [Pure, Dtc_Gradient,
                                                Dtc_ShardingRule, Dtc_CostOpInterface,
                                                Dtc_LocalLowering]> {
  let summary = "token rows into the experts' buffers, scaled per slot";
  let description = [{
    buffer[e, c] = weights[t, j] * x[t] for the slot (t, j) at expert e,
    position c; rows no token reaches are 0. moe_combine's transpose.
  }];
  let arguments = (ins Dtc_FloatTensor:$x, Dtc_I32Tensor:$experts,
                       Dtc_I32Tensor:$positions, Dtc_FloatTensor:$weights);
  let results = (outs Dtc_FloatTensor:$buffer);
}

def Dtc_MoeCombineOp : Dtc_Op<"moe_combine", [Pure, Dtc_Gradient,
                                              Dtc_ShardingRule, Dtc_CostOpInterface,
                                              Dtc_LocalLowering]> {
  let summary = "the experts' buffer rows back to tokens, weighted and summed";
  let description = [{
    result[t] = sum over t's kept slots (t, j) of weights[t, j] * y[e, c].
  }];
  let arguments = (ins Dtc_FloatTensor:$y, Dtc_I32Tensor:$experts,
                       Dtc_I32Tensor:$positions, Dtc_FloatTensor:$weights);
  let results = (outs Dtc_FloatTensor:$result);
}

def Dtc_MoeSlotDotOp : Dtc_Op<"moe_slot_dot", [Pure, Dtc_ShardingRule,
                                               Dtc_CostOpInterface, Dtc_LocalLowering]> {
  let summary = "per slot, the dot product of a token row and its buffer row";
  let description = [{
    result[t, j] = <a[t], y[e, c]> for the slot (t, j) at (e, c); 0 for a
    dropped token. The weights' gradient of moe_dispatch and moe_combine.
  }];
  let arguments = (ins Dtc_FloatTensor:$a, Dtc_FloatTensor:$y,
                       Dtc_I32Tensor:$experts, Dtc_I32Tensor:$positions);
  let results = (outs Dtc_FloatTensor:$result);
}

def Dtc_MoeFirstChoiceFractionOp : Dtc_Op<"moe_first_choice_fraction",
    [Pure, Dtc_F32Results, Dtc_Gradient, Dtc_ShardingRule, Dtc_CostOpInterface]> {
  let summary = "the fraction of tokens whose first choice is each expert";
  let arguments = (ins Dtc_I32Tensor:$experts);
  let results = (outs Dtc_FloatTensor:$fraction);
}

// A collective of dtc's own: the upstream shard dialect's all_to_all moves
// equal pieces of a tensor, and expert parallelism moves data-dependent
// rows (each token's slot to its expert's rank).
def Dtc_MoeExchangeOp : Op<Dtc_Dialect, "moe_exchange",
                           [Pure, Dtc_KnownAttributesOnly]> {
  let summary = "expert parallelism's all-to-all: slot rows between the "
                "ranks of their tokens and of their experts";
  let description = [{
    The n members of the group over `grid_axes` hold consecutive blocks of
    the tokens of `experts` and `positions` ([T, k], the routing of every
    token of the group, the same on all members) and of the E experts.
    `to_experts`: `data` is the member's token slots [T/n, k, D]; the
    result is its experts' buffer [E/n, C, D], where row (e, c) holds the
    slot (t, j) routed to expert e at position c (from whichever member
    holds t) and rows no slot reaches are 0. `to_tokens` is the transpose:
    `data` [E/n, C, D] to the member's slots [T/n, k, D], a dropped slot's
    row 0. Every member knows every row's source and destination from the
    routing, so no counts are exchanged.
  }];
  let arguments = (ins Dtc_FloatTensor:$data, Dtc_I32Tensor:$experts,
                       Dtc_I32Tensor:$positions, FlatSymbolRefAttr:$grid,
                       DenseI16ArrayAttr:$grid_axes, BoolAttr:$to_experts);
  let results = (outs Dtc_FloatTensor:$result);
  let hasVerifier = 1;
}

#endif // DTC_DIALECT_DTCOPS_TD
