//===- CheckModel.cpp - the model-format contract ------------------------===//
//
// Everything model-format.md asks of @main that single-op verifiers cannot
// see. Each violation is one error at the offending location.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"

#include "dtc/artifact/ArtifactFormat.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_CHECKMODEL
#include "dtc/Passes/Passes.h.inc"

namespace {

bool isFloatTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa<FloatType>(tensor.getElementType());
}

struct CheckModelPass : impl::CheckModelBase<CheckModelPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main) {
      module.emitError() << "the model has no func.func @main (the forward "
                            "pass returning the loss)";
      return signalPassFailure();
    }
    if (failed(checkMain(main)))
      signalPassFailure();
  }

  /// Tensors the runtime can hold: element counts (and bytes) that fit.
  static LogicalResult checkSize(Location loc, RankedTensorType type) {
    if (!type.hasStaticShape())
      return success();
    int64_t count = 1;
    for (int64_t size : type.getShape())
      if (llvm::MulOverflow(count, size, count) ||
          count > ::dtc::rt::kMaxTensorElements)
        return emitError(loc) << type
                              << " has more than 2^50 elements, more than "
                                 "one tensor may hold";
    return success();
  }

  /// Ids and labels fed straight from data inputs must fit what indexes
  /// them (dtc.max <= table rows / vocabulary).
  static LogicalResult checkIndexBounds(func::FuncOp main, Operation *op) {
    auto indexed = dyn_cast<IndexOperandsOpInterface>(op);
    if (!indexed)
      return success();
    for (OpOperand &operand : op->getOpOperands()) {
      int64_t bound = indexed.getIndexBound(operand.getOperandNumber());
      auto arg = dyn_cast<BlockArgument>(operand.get());
      if (!bound || !arg || arg.getOwner() != &main.getBody().front())
        continue;
      auto max = main.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(),
                                                    DtcDialect::kMaxAttr);
      if (max && max.getInt() > bound)
        return op->emitError()
               << "input \"" << argumentName(main, arg.getArgNumber())
               << "\" has dtc.max = " << max.getInt() << ", but '"
               << op->getName() << "' indexes only " << bound
               << " entries with it";
    }
    return success();
  }

  /// The dtc.* attributes passes attach (a phase, a role, a sharding...)
  /// are the compiler's: in a model they would steer it silently. The
  /// verifiers have already refused names that exist nowhere.
  static LogicalResult checkNotCompilerAttr(Location loc,
                                            const std::string &where,
                                            NamedAttribute attr,
                                            ArrayRef<StringRef> allowed) {
    StringRef name = attr.getName().strref();
    if (!name.starts_with("dtc.") || llvm::is_contained(allowed, name))
      return success();
    return emitError(loc)
           << where << ": '" << name
           << "' is set by the compiler; a model may not carry it";
  }

  /// Why a use of a data input reads it as a weight rather than as data
  /// ("" when it does not): it is the operand of a dense kernel (a matmul's
  /// `b`) whose dimension 0 is contracted or otherwise not a batch (a
  /// Parallel factor that reaches the results).
  static std::string weightSideUse(OpOperand &use) {
    Operation *op = use.getOwner();
    auto cost = dyn_cast<CostOpInterface>(op);
    auto rule = dyn_cast<ShardingRuleOpInterface>(op);
    if (!cost || !rule || !::dtc::kernels::isDense(cost.getCostClass()))
      return "";
    ShardingRule factors = rule.getShardingRule();
    const TensorFactors &operand = factors.operands[use.getOperandNumber()];
    if (operand.empty() || operand.front().empty() ||
        factors.factorKinds[operand.front().front()] == FactorKind::Parallel)
      return "";
    return "it is operand " + std::to_string(use.getOperandNumber()) + " of '" +
           op->getName().getStringRef().str() +
           "', whose dimension 0 is contracted, not a batch";
  }

  /// Warns of float data inputs not batched like the data: most likely
  /// weights whose dtc.param was forgotten. As data they would get fresh
  /// synthetic values every step and be split along dimension 0 as if it
  /// were the batch. The batch is dimension 0 of the integer inputs (ids,
  /// labels); without any, only the weight-side use tells.
  static void warnForgottenParams(func::FuncOp main) {
    std::optional<int64_t> batch;
    std::string batchInput;
    for (unsigned i = 0; i < main.getNumArguments() && !batch; ++i) {
      auto type = cast<RankedTensorType>(main.getArgument(i).getType());
      if (!main.getArgAttr(i, DtcDialect::kParamAttr) &&
          isa<IntegerType>(type.getElementType())) {
        batch = type.getDimSize(0);
        batchInput = argumentName(main, i);
      }
    }
    for (unsigned i = 0; i < main.getNumArguments(); ++i) {
      BlockArgument arg = main.getArgument(i);
      auto type = cast<RankedTensorType>(arg.getType());
      if (main.getArgAttr(i, DtcDialect::kParamAttr) ||
          !isa<FloatType>(type.getElementType()))
        continue;
      std::string why;
      // A dimension 0 of 1 says nothing (a broadcast row, a scalar input).
      if (batch && type.getDimSize(0) != *batch && type.getDimSize(0) != 1)
        why = "its dimension 0 (" + std::to_string(type.getDimSize(0)) +
              ") is not the batch (" + std::to_string(*batch) +
              ", dimension 0 of \"" + batchInput + "\")";
      for (OpOperand &use : arg.getUses())
        if (why.empty())
          why = weightSideUse(use);
      if (!why.empty())
        emitWarning(arg.getLoc())
            << "data input \"" << argumentName(main, i)
            << "\" looks like a weight: " << why
            << "; data inputs get new values every step and are split "
               "along dimension 0 as the batch. If it is trained, mark it "
               "dtc.param (with a dtc.init)";
    }
  }

  LogicalResult checkMain(func::FuncOp main) {
    if (main.isExternal())
      return main.emitError() << "@main has no body";
    if (!main.getBody().hasOneBlock())
      return main.emitError()
             << "@main must be a single block (no control flow)";
    FunctionType type = main.getFunctionType();
    if (type.getNumResults() != 1 ||
        type.getResult(0) !=
            RankedTensorType::get({}, Float32Type::get(&getContext())))
      return main.emitError() << "@main must return exactly one value, the "
                                 "scalar loss tensor<f32>; it returns "
                              << type.getResults();

    llvm::StringSet<> names;
    bool anyParam = false;
    for (unsigned i = 0; i < main.getNumArguments(); ++i) {
      BlockArgument arg = main.getArgument(i);
      Location loc = arg.getLoc();
      auto tensor = dyn_cast<RankedTensorType>(arg.getType());
      if (!tensor || !tensor.hasStaticShape())
        return emitError(loc)
               << "argument " << i
               << " must be a statically shaped tensor, got " << arg.getType();
      for (int64_t size : tensor.getShape())
        if (size == 0)
          return emitError(loc)
                 << "argument " << i << " has a zero-size dimension";
      for (NamedAttribute attr : function_interface_impl::getArgAttrs(main, i))
        if (failed(checkNotCompilerAttr(
                loc, "argument " + std::to_string(i), attr,
                {DtcDialect::kParamAttr, DtcDialect::kNameAttr,
                 DtcDialect::kInitAttr, DtcDialect::kMaxAttr})))
          return failure();
      bool isParam = main.getArgAttr(i, DtcDialect::kParamAttr) != nullptr;
      std::string argName = argumentName(main, i);
      if (!names.insert(argName).second)
        return emitError(loc) << "argument " << i << ": name \"" << argName
                              << "\" is used by another argument";
      if (argName == DtcDialect::kLossName || argName == DtcDialect::kStepName)
        return emitError(loc)
               << "argument " << i << ": the name \"" << argName
               << "\" is reserved for the tensor the training step adds";
      if (StringRef(argName).contains(DtcDialect::kDerivedNameSeparator))
        return emitError(loc)
               << "argument " << i << ": name \"" << argName << "\" contains '"
               << DtcDialect::kDerivedNameSeparator
               << "', which is reserved for derived tensors (e.g. w"
               << DtcDialect::kDerivedNameSeparator << "adam_m)";
      if (failed(checkSize(loc, tensor)))
        return failure();
      if (isParam) {
        anyParam = true;
        if (!isFloatTensor(tensor))
          return emitError(loc) << "parameter \"" << argName
                                << "\" must be a float tensor, got " << tensor;
        if (main.getArgAttr(i, DtcDialect::kMaxAttr))
          return emitError(loc)
                 << "parameter \"" << argName << "\" cannot carry dtc.max";
        continue;
      }
      if (main.getArgAttr(i, DtcDialect::kInitAttr))
        return emitError(loc)
               << "data input \"" << argName
               << "\" has dtc.init; only dtc.param arguments are initialized";
      if (tensor.getRank() == 0)
        return emitError(loc) << "data input \"" << argName
                              << "\" must have a batch dimension (dim 0)";
      if (isa<IntegerType>(tensor.getElementType()) &&
          !main.getArgAttr(i, DtcDialect::kMaxAttr))
        return emitError(loc) << "integer input \"" << argName
                              << "\" needs dtc.max = N : i64 (the exclusive "
                                 "bound of its values)";
    }
    if (!anyParam)
      return main.emitError() << "@main has no trainable parameter (mark "
                                 "arguments with dtc.param)";
    warnForgottenParams(main);
    for (unsigned i = 0; i < main.getNumResults(); ++i)
      for (NamedAttribute attr :
           function_interface_impl::getResultAttrs(main, i))
        if (failed(checkNotCompilerAttr(main.getLoc(), "the result of @main",
                                        attr, {})))
          return failure();

    for (Operation &op : main.getBody().front()) {
      for (Type type : op.getResultTypes())
        if (auto tensor = dyn_cast<RankedTensorType>(type))
          if (failed(checkSize(op.getLoc(), tensor)))
            return failure();
      if (isa<func::ReturnOp>(op))
        continue;
      if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
        auto type = dyn_cast<RankedTensorType>(constant.getType());
        if (!type || !isa<DenseElementsAttr>(constant.getValue()))
          return op.emitError() << "constants must be dense tensors (e.g. "
                                   "arith.constant dense<1.0> : tensor<f32>)";
        continue;
      }
      for (NamedAttribute attr : op.getDiscardableAttrs())
        if (failed(checkNotCompilerAttr(
                op.getLoc(), "'" + op.getName().getStringRef().str() + "'",
                attr, {})))
          return failure();
      if (op.getDialect() && isa<DtcDialect>(op.getDialect())) {
        if (failed(checkIndexBounds(main, &op)))
          return failure();
        continue;
      }
      return op.emitError() << "unsupported op in a model: only dtc ops, "
                               "arith.constant and func.return may appear";
    }
    return success();
  }
};
} // namespace
} // namespace mlir::dtc
