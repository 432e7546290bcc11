//===- DtcOps.h - dtc ops, attributes and interfaces ------------*- C++ -*-===//
#ifndef DTC_DIALECT_DTCOPS_H
#define DTC_DIALECT_DTCOPS_H

#include "dtc/Dialect/DtcDialect.h"
#include "dtc/Sharding/LocalLowering.h"
#include "dtc/Sharding/ShardingRule.h"
#include "dtc/kernels/CostClass.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_ATTRDEF_CLASSES
#include "dtc/Dialect/DtcAttrs.h.inc"

namespace mlir::dtc {
/// KernelRuleOpInterface's verifier (include/dtc/Dialect/KernelRule.h).
LogicalResult verifyKernelRule(Operation *op, StringRef kernelName);
/// InPlaceOpInterface's default (include/dtc/Dialect/KernelRule.h).
int64_t kernelInPlaceOperand(Operation *op, unsigned resultIdx);
/// Batch rows times heads of an attention's q [B, H, S, Dh].
int64_t attentionHeads(Value q);
/// CostOpInterface's default (include/dtc/Dialect/KernelRule.h).
::dtc::kernels::CostClass kernelCostClass(Operation *op);
} // namespace mlir::dtc

#include "dtc/Dialect/DtcInterfaces.h.inc"

namespace mlir::dtc {
/// Shape rules shared by several ops (also used by the gradient builders).
LogicalResult inferBroadcastElementwiseType(std::optional<Location> loc,
                                            Type lhs, Type rhs,
                                            SmallVectorImpl<Type> &inferred);
LogicalResult inferReduceType(std::optional<Location> loc, Type x,
                              ArrayRef<int64_t> axes, bool keepDims,
                              SmallVectorImpl<Type> &inferred);
/// numpy broadcast of two shapes; failure if incompatible.
FailureOr<SmallVector<int64_t>> broadcastShapes(ArrayRef<int64_t> lhs,
                                                ArrayRef<int64_t> rhs);

/// Marks ops that `--remat selective` recomputes rather than keeps
/// (DtcOps.td, Dtc_CheapToRecompute).
template <typename ConcreteType>
class CheapToRecompute
    : public OpTrait::TraitBase<ConcreteType, CheapToRecompute> {};

/// Its float results are f32 whatever its operands' precision (DtcOps.td,
/// Dtc_F32Results): mixed precision keeps them so.
template <typename ConcreteType>
class F32Results : public OpTrait::TraitBase<ConcreteType, F32Results> {};
/// Fails, naming the closest valid name, when `op` carries an attribute that
/// is neither one of its own (ODS) nor one the passes attach (dtc.phase,
/// dtc.gradient_of, dtc.factor_axes, dtc.factor_pieces, dtc.pin...).
LogicalResult verifyKnownAttributes(Operation *op);

/// The factors of attention's and attention_grad's sharding rule that index
/// the queries' and the keys' sequence (ring attention splits both).
std::pair<int64_t, int64_t> attentionSequenceFactors(Operation *op);

/// The token-slot elements (slots [T, k] times the row width) that a
/// moe_dispatch, moe_combine or moe_slot_dot moves between its tokens' and
/// its experts' layouts; 0 for any other op. Under expert parallelism each
/// of them is one dtc.moe_exchange of these rows.
int64_t exchangedSlotElements(Operation *op);

namespace OpTrait {
template <typename ConcreteType>
class KnownAttributesOnly
    : public ::mlir::OpTrait::TraitBase<ConcreteType, KnownAttributesOnly> {
public:
  static LogicalResult verifyTrait(Operation *op) {
    return verifyKnownAttributes(op);
  }
};
} // namespace OpTrait
} // namespace mlir::dtc

#define GET_OP_CLASSES
#include "dtc/Dialect/DtcOps.h.inc"

#endif // DTC_DIALECT_DTCOPS_H
