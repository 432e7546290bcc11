//===- Utils.h - small helpers shared by dtc's passes ----------*- C++ -*-===//
#ifndef DTC_DIALECT_UTILS_H
#define DTC_DIALECT_UTILS_H

#include "dtc/Dialect/DtcDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SetVector.h"
#include <optional>
#include <string>

namespace mlir::dtc {

/// Every value dtc handles is a ranked tensor.
inline RankedTensorType tensorTypeOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// `arith.constant dense<value> : type` (a float splat).
Value createSplatConstant(OpBuilder &b, Location loc, RankedTensorType type,
                          double value);

/// The model-format name of @main's argument `index`: its dtc.name, or
/// "argN".
std::string argumentName(func::FuncOp main, unsigned index);

/// Whether two ops run in the same place of the emitted step: the same
/// phase, pipeline chunk and recomputation (what a rewrite that merges or
/// reorders ops must keep).
bool inSamePlace(Operation *a, Operation *b);

/// `from`'s pass-added attributes (phase, layer, chunk, recomputation,
/// gradient names) on `to`, which keeps the ones it has; with `identity`
/// also `from`'s dtc.id, for an op that replaces `from` (the backward's
/// dtc.forward names it).
void copyPlaceAttrs(Operation *from, Operation *to, bool identity);

/// The shortest decimal that reads back as the same double (for messages
/// and canonical spellings).
std::string formatNumber(double value);

/// The module's training steps: the functions marked dtc.train_step (one,
/// or one per pipeline stage, in stage order), else @train_step for IR
/// written by hand without the marker.
SmallVector<func::FuncOp> trainSteps(ModuleOp module);
/// The training step when there is exactly one, else null.
func::FuncOp findTrainStep(ModuleOp module);

/// The names of DtcEnums.td as the IR spells them (string attributes).
template <typename Enum> StringAttr enumAttr(MLIRContext *ctx, Enum value) {
  return StringAttr::get(ctx, stringifyEnum(value));
}
/// The enum value a string attribute names; nothing for null, another kind
/// of attribute or an unknown name.
template <typename Enum> std::optional<Enum> enumOf(Attribute attr) {
  auto name = dyn_cast_or_null<StringAttr>(attr);
  return name ? symbolizeEnum<Enum>(name.getValue()) : std::nullopt;
}

/// dtc.phase of `op` (nothing for ops outside the phases, the return).
inline std::optional<Phase> phaseOf(Operation *op) {
  return enumOf<Phase>(op->getAttr(DtcDialect::kPhaseAttr));
}
inline void setPhase(Operation *op, Phase phase) {
  op->setAttr(DtcDialect::kPhaseAttr, enumAttr(op->getContext(), phase));
}
inline bool isPhase(Operation *op, Phase phase) { return phaseOf(op) == phase; }
/// Backward B or W.
inline bool isBackward(Operation *op) {
  std::optional<Phase> phase = phaseOf(op);
  return phase == Phase::BackwardInput || phase == Phase::BackwardWeight;
}

/// Backward and optimizer ops: the readers whose operands can come from a
/// recomputation. Ops without a phase (the return) read what the forward
/// produced.
inline bool isAfterForward(Operation *op) {
  std::optional<Phase> phase = phaseOf(op);
  return phase && *phase != Phase::Forward;
}

/// The forward ops of one layer (`layerOps`, its forward ops with results)
/// that recomputation computes again for the backward: every op whose
/// results no forward op of another layer (nor the return) reads; with
/// `selective` (Megatron's selective recompute) only CheapToRecompute ops,
/// and only while every operand they read from the layer stays alive
/// anyway (such a boundary, a value the backward reads itself, or
/// recomputed too). dtc-rematerialize clones them; the search's closed
/// forms count what that keeps (modelFacts).
llvm::SetVector<Operation *> recomputedOps(ArrayRef<Operation *> layerOps,
                                           bool selective);

/// dtc.role of a function's argument or result.
inline std::optional<Role> argRole(func::FuncOp func, unsigned index) {
  return enumOf<Role>(func.getArgAttr(index, DtcDialect::kRoleAttr));
}
inline std::optional<Role> resultRole(func::FuncOp func, unsigned index) {
  return enumOf<Role>(func.getResultAttr(index, DtcDialect::kRoleAttr));
}
/// Whether `v` is one of `step`'s own parameter arguments (dtc.role
/// "param"), not a value computed from one nor another function's argument.
inline bool isParameterArgument(func::FuncOp step, Value v) {
  auto arg = dyn_cast<BlockArgument>(v);
  return arg && arg.getOwner()->getParentOp() == step.getOperation() &&
         argRole(step, arg.getArgNumber()) == Role::Param;
}
inline NamedAttribute roleAttr(MLIRContext *ctx, Role role) {
  return NamedAttribute(StringAttr::get(ctx, DtcDialect::kRoleAttr),
                        enumAttr(ctx, role));
}

/// "a", "b" or "c": every name of `Enum`, quoted, for messages.
template <typename Enum>
std::string quotedNames(std::optional<Enum> (*fromInt)(uint32_t),
                        uint32_t count) {
  std::string out;
  for (uint32_t i = 0; i < count; ++i) {
    if (i > 0)
      out += i + 1 == count ? " or " : ", ";
    out += "\"" + stringifyEnum(*fromInt(i)).str() + "\"";
  }
  return out;
}
/// "\"user\", \"strategy\" or \"storage\"".
inline std::string pinPriorityNames() {
  return quotedNames<PinPriority>(symbolizePinPriority,
                                  getMaxEnumValForPinPriority() + 1);
}

} // namespace mlir::dtc

#endif // DTC_DIALECT_UTILS_H
