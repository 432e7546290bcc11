//===- ApplyStrategy.cpp - annotate the training step with a pinned plan -===//
//
// A plan is data: the grid, the sharding of every argument and a factor
// sharding (dtc.factor_axes) on every op. This pass pins what the degrees
// say and lets sharding propagation (include/dtc/Sharding/Propagation.h)
// derive the rest; the cost-model search will write the same annotations,
// and the partitioner cannot tell which made them.
//
// Degrees map to mesh axes: tensor parallelism takes the innermost (fastest)
// axes whose sizes multiply to tp, pipeline stages the next ones multiplying
// to pp, data parallelism the remaining outer ones. Micro-batches are one
// more, virtual grid axis (no devices; the emitter loops over it), the
// minor split of the batch inside each dp shard: the partitioned step is
// what one micro-batch computes, parameter gradients are pending sums over
// it (accumulated over the micro-batches) and the optimizer, which needs
// them whole, runs once after the last one.
// Pins (strategy priority):
//  - data parallelism: every data input's batch dimension over the dp axes
//    (and the micro-batch axis); parameters and optimizer state never split
//    over them;
//  - Megatron tensor parallelism: embedding tables split by vocabulary
//    (vocab-parallel embedding; a tied LM head reads the same split, so the
//    logits are vocab-split and the cross entropy runs vocab-parallel), and
//    a weight read by a matmul whose input is whole on the tp axes split by
//    columns (wq/wk/wv, the first MLP matrices, an untied LM head). Walking
//    the forward in order, a matmul whose input features are already split
//    (after a column-parallel matmul, through attention heads or the
//    activation) is row-parallel: its weight is not pinned, propagation
//    splits its rows and its output is a pending sum, all-reduced once
//    where the residual stream needs it.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Sharding/Propagation.h"

#include "dtc/Sharding/TensorSharding.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringMap.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_APPLYSTRATEGY
#include "dtc/Passes/Passes.h.inc"

namespace {

constexpr StringLiteral kGridName = "mesh";

/// Factor sharding of `op` from its operands alone, in operand order (the
/// forward walk that decides Megatron's column and row weights).
FactorAxes forwardFactors(Operation *op, const ShardingRule &rule,
                          ArrayRef<TensorSharding> operands,
                          ArrayRef<int64_t> grid) {
  FactorAxes factors(rule.getNumFactors());
  llvm::SmallSet<int64_t, 8> used;
  for (auto [idx, sharding] : llvm::enumerate(operands))
    for (auto [dim, axes] : llvm::enumerate(sharding.dims))
      for (const FactorSplit &split :
           dimensionToFactors(rule, rule.operands[idx][dim], axes,
                              sharding.piece(dim), grid)) {
        if (!factors[split.factor].empty() ||
            llvm::any_of(split.axes,
                         [&](int64_t a) { return used.contains(a); }))
          continue;
        factors[split.factor] = split.axes;
        factors.setPiece(split.factor, split.piece);
        if (!checkFactorAxes(op, rule, factors, grid).empty()) {
          factors[split.factor].clear();
          factors.setPiece(split.factor, 0);
          continue;
        }
        for (int64_t a : split.axes)
          used.insert(a);
      }
  return factors;
}

struct ApplyStrategyPass : impl::ApplyStrategyBase<ApplyStrategyPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp step = findTrainStep(module);
    if (!step) {
      module.emitError()
          << "no training step to plan (run dtc-build-training-step first)";
      return signalPassFailure();
    }
    if (failed(apply(module, step)))
      signalPassFailure();
  }

  LogicalResult apply(ModuleOp module, func::FuncOp step) {
    MLIRContext *ctx = &getContext();
    if (zero < 0 || zero > 3)
      return module.emitError()
             << "zero must be 0, 1, 2 or 3, got " << static_cast<int64_t>(zero);
    SmallVector<int64_t> grid(mesh.begin(), mesh.end());
    if (grid.empty())
      grid = {1};
    int64_t devices = 1;
    for (int64_t size : grid) {
      if (size <= 0)
        return module.emitError() << "mesh axis sizes must be positive";
      devices *= size;
    }
    int64_t tpDegree = tp, ppDegree = pp, microbatchCount = microbatches;
    if (tpDegree < 1)
      return module.emitError() << "tp must be >= 1, got " << tpDegree;
    if (ppDegree < 1 || microbatchCount < 1 || virtualStages < 1)
      return module.emitError()
             << "pp, virtual-stages and microbatches must be >= 1";
    if (devices % (tpDegree * ppDegree) != 0)
      return module.emitError()
             << "tp=" << tpDegree << " x pp=" << ppDegree
             << " does not divide the " << devices << " devices of the mesh";
    int64_t dpDegree =
        dp == 0 ? devices / (tpDegree * ppDegree) : static_cast<int64_t>(dp);
    if (dpDegree * tpDegree * ppDegree != devices)
      return module.emitError() << "dp=" << dpDegree << " x tp=" << tpDegree
                                << " x pp=" << ppDegree << " uses "
                                << dpDegree * tpDegree * ppDegree
                                << " devices but the mesh has " << devices;

    // Tensor parallelism takes the innermost axes (the fastest links),
    // pipeline stages the next, data parallelism the rest; size-1 axes add
    // nothing and stay out of all of them.
    GridAxes tpAxes, ppAxes, dpAxes;
    std::string shape;
    for (int64_t size : grid)
      shape += (shape.empty() ? "" : "x") + std::to_string(size);
    int64_t axis = (int64_t)grid.size() - 1;
    int64_t covered = 1;
    for (; axis >= 0 && covered < tpDegree; --axis) {
      if (grid[axis] == 1)
        continue;
      tpAxes.insert(tpAxes.begin(), axis);
      covered *= grid[axis];
    }
    if (covered != tpDegree)
      return module.emitError()
             << "tp=" << tpDegree
             << " is not a product of the innermost mesh axes of " << shape
             << " (tensor parallelism takes whole axes from the last, "
             << "fastest one; e.g. --mesh " << devices / tpDegree << "x"
             << tpDegree << ")";
    covered = 1;
    for (; axis >= 0 && covered < ppDegree; --axis) {
      if (grid[axis] == 1)
        continue;
      ppAxes.insert(ppAxes.begin(), axis);
      covered *= grid[axis];
    }
    if (covered != ppDegree)
      return module.emitError()
             << "pp=" << ppDegree << " is not a product of the mesh axes of "
             << shape
             << " inside the data-parallel ones (pipeline stages take whole "
                "axes between "
             << "tensor parallelism's and data parallelism's; e.g. --mesh "
             << devices / (ppDegree * tpDegree) << "x" << ppDegree
             << (tpDegree > 1 ? "x" + std::to_string(tpDegree) : std::string())
             << ")";
    for (int64_t a = 0; a <= axis; ++a)
      if (grid[a] != 1)
        dpAxes.push_back(a);

    // Micro-batches: a virtual grid axis after the device axes, the minor
    // split of the batch (a dp shard's rows, in M consecutive pieces). A
    // pipeline always has it (of size 1 for one micro-batch): stages run
    // their forward and backward per micro-batch.
    GridAxes batchAxes = dpAxes, mbAxes;
    if (microbatchCount > 1 || ppDegree > 1) {
      mbAxes.push_back(static_cast<int64_t>(grid.size()));
      grid.push_back(microbatchCount);
      batchAxes.push_back(mbAxes.back());
    }
    int64_t batchSplit = dpDegree * microbatchCount;

    if (auto existing = module.lookupSymbol<shard::GridOp>(kGridName)) {
      if (existing.getShape() != ArrayRef<int64_t>(grid))
        return existing.emitError()
               << "a different grid @" << kGridName << " already exists";
    } else {
      OpBuilder b(ctx);
      b.setInsertionPointToStart(module.getBody());
      shard::GridOp::create(b, module.getLoc(), kGridName, grid);
    }

    // Parameters and their optimizer state never split over the dp axes
    // (that is ZeRO's decision, not propagation's).
    llvm::DenseSet<Value> persistent;
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      auto role = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kRoleAttr);
      if (role && role.getValue() != "input")
        persistent.insert(step.getArgument(i));
    }
    ShardingPropagation propagation(step, grid, [&](Value v, int64_t a) {
      return !persistent.contains(v) ||
             (!llvm::is_contained(dpAxes, a) && !llvm::is_contained(mbAxes, a));
    });
    llvm::DenseMap<Value, TensorSharding> pins;
    auto pin = [&](Value v, const TensorSharding &s) {
      pins[v] = s;
      propagation.pin(v, s, ShardingPriority::Strategy);
    };

    // User pins (dtc-pin-sharding, --pin) come first and win.
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      auto priority =
          step.getArgAttrOfType<StringAttr>(i, DtcDialect::kPinPriorityAttr);
      auto attr =
          step.getArgAttrOfType<ShardingAttr>(i, DtcDialect::kShardingAttr);
      if (!priority || priority.getValue() != "user" || !attr)
        continue;
      BlockArgument arg = step.getArgument(i);
      TensorSharding sharding = fromShardingAttr(attr);
      const int64_t meshAxes = (int64_t)grid.size() - (int64_t)mbAxes.size();
      for (int64_t a : sharding.usedAxes())
        if (a >= meshAxes)
          return emitError(arg.getLoc())
                 << "a pinned sharding uses mesh axis " << a
                 << " but the mesh has " << meshAxes << " axes";
      pins[arg] = sharding;
      propagation.pin(arg, sharding, ShardingPriority::User);
    }

    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      BlockArgument arg = step.getArgument(i);
      auto type = cast<RankedTensorType>(arg.getType());
      auto role = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kRoleAttr);
      if (!role || role.getValue() != "input" || pins.count(arg))
        continue;
      TensorSharding sharding = TensorSharding::replicated(type.getRank());
      if (!batchAxes.empty()) {
        auto name = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kNameAttr);
        int64_t batch = type.getDimSize(0);
        if (batch % batchSplit != 0) {
          InFlightDiagnostic diag =
              emitError(arg.getLoc())
              << "the batch dimension of input \""
              << (name ? name.getValue() : StringRef("?")) << "\" has size "
              << batch << ", which does not divide over dp=" << dpDegree;
          if (microbatchCount > 1)
            diag << " x " << microbatchCount << " micro-batches";
          return diag;
        }
        sharding.dims[0] = batchAxes;
      }
      pin(arg, sharding);
    }
    step.walk([&](arith::ConstantOp c) { propagation.close(c.getResult()); });
    if (!tpAxes.empty())
      pinMegatron(step, grid, tpAxes, pins, pin);

    if (failed(propagation.run()))
      return failure();
    propagation.annotate(kGridName);
    if (zero > 0 && !dpAxes.empty() && failed(planZero(step, grid, dpAxes)))
      return failure();

    Builder b(ctx);
    SmallVector<NamedAttribute> axes = {
        b.getNamedAttr("dp", b.getDenseI64ArrayAttr(dpAxes))};
    if (!tpAxes.empty())
      axes.push_back(b.getNamedAttr("tp", b.getDenseI64ArrayAttr(tpAxes)));
    if (!ppAxes.empty())
      axes.push_back(b.getNamedAttr("pp", b.getDenseI64ArrayAttr(ppAxes)));
    if (!mbAxes.empty())
      axes.push_back(
          b.getNamedAttr(kMicrobatchAxesKey, b.getDenseI64ArrayAttr(mbAxes)));
    module->setAttr(
        DtcDialect::kPlanAttr,
        b.getDictionaryAttr({
            b.getNamedAttr("grid", FlatSymbolRefAttr::get(ctx, kGridName)),
            b.getNamedAttr("dp", b.getI64IntegerAttr(dpDegree)),
            b.getNamedAttr("tp", b.getI64IntegerAttr(tpDegree)),
            b.getNamedAttr("pp", b.getI64IntegerAttr(ppDegree)),
            b.getNamedAttr("virtual_stages",
                           b.getI64IntegerAttr(virtualStages)),
            b.getNamedAttr("microbatches",
                           b.getI64IntegerAttr(microbatchCount)),
            b.getNamedAttr("zero", b.getI64IntegerAttr(zero)),
            b.getNamedAttr("axes", b.getDictionaryAttr(axes)),
        }));
    return success();
  }

  /// ZeRO's layout of a parameter stored as `stored` (its tensor-parallel
  /// split): the data-parallel axes added on the largest dimension nothing
  /// splits yet (padded pieces when it does not divide), else appended to a
  /// dimension split evenly that still divides; unchanged when neither
  /// exists (a scalar, or dimensions too small).
  static TensorSharding zeroSharding(const TensorSharding &stored,
                                     ArrayRef<int64_t> shape,
                                     const GridAxes &dpAxes,
                                     ArrayRef<int64_t> grid) {
    int64_t n = shardCount(grid, dpAxes);
    int best = -1;
    auto better = [&](int d) {
      if (best < 0)
        return true;
      bool even = shape[d] % n == 0, bestEven = shape[best] % n == 0;
      return std::make_pair(even, shape[d]) >
             std::make_pair(bestEven, shape[best]);
    };
    for (int d = 0; d < (int)shape.size(); ++d)
      if (stored.dims[d].empty() && shape[d] >= 2 && better(d))
        best = d;
    TensorSharding zeroed = stored;
    if (best >= 0) {
      zeroed.dims[best] = dpAxes;
      normalizePieces(zeroed, shape, grid);
      return zeroed;
    }
    for (int d = 0; d < (int)shape.size(); ++d) {
      int64_t pieces = shardCount(grid, stored.dims[d]) * n;
      if (!stored.dims[d].empty() && stored.piece(d) == 0 &&
          shape[d] % pieces == 0) {
        zeroed.dims[d].append(dpAxes.begin(), dpAxes.end());
        return zeroed;
      }
    }
    return stored;
  }

  /// ZeRO: a second planning round over the optimizer phase alone, the
  /// forward and backward keeping their plan. Optimizer state (and, for
  /// stage 3, the parameter) is stored in ZeRO's layout by storage pins; the
  /// gradients the optimizer reads are pinned in it as sources, so every
  /// update, clipping and cast runs on the rank's piece and the partitioner
  /// reduce-scatters each gradient into it and gathers the updated
  /// parameter back where the stored one is whole.
  LogicalResult planZero(func::FuncOp step, ArrayRef<int64_t> grid,
                         const GridAxes &dpAxes) {
    MLIRContext *ctx = &getContext();
    auto argRole = [&](unsigned i) {
      auto role = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kRoleAttr);
      return role ? role.getValue() : StringRef();
    };
    auto argString = [&](unsigned i, StringRef key) {
      auto value = step.getArgAttrOfType<StringAttr>(i, key);
      return value ? value.getValue() : StringRef();
    };
    auto storedSharding = [&](unsigned i) {
      TensorSharding s = fromShardingAttr(
          step.getArgAttrOfType<ShardingAttr>(i, DtcDialect::kShardingAttr));
      normalizePieces(s, tensorTypeOf(step.getArgument(i)).getShape(), grid);
      return s;
    };
    // ZeRO's layout per parameter name, from the first round's plan.
    llvm::StringMap<TensorSharding> layout;
    for (unsigned i = 0; i < step.getNumArguments(); ++i)
      if (argRole(i) == "param")
        layout[argString(i, DtcDialect::kNameAttr)] = zeroSharding(
            storedSharding(i), tensorTypeOf(step.getArgument(i)).getShape(),
            dpAxes, grid);

    SmallVector<Operation *> optimizerOps;
    for (Operation &op : step.getBody().front()) {
      auto phase = op.getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);
      if (phase && phase.getValue() == "optimizer" &&
          isa<ShardingRuleOpInterface>(op))
        optimizerOps.push_back(&op);
    }
    ShardingPropagation propagation(step, grid);
    propagation.restrictTo(optimizerOps);
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      BlockArgument arg = step.getArgument(i);
      StringRef role = argRole(i);
      TensorSharding stored = storedSharding(i);
      StringRef owner = role == "param" ? argString(i, DtcDialect::kNameAttr)
                        : role == "optimizer_state"
                            ? argString(i, DtcDialect::kOfAttr)
                            : StringRef();
      auto it = owner.empty() ? layout.end() : layout.find(owner);
      if (it != layout.end() && it->second.dims.size() == stored.dims.size() &&
          (role == "optimizer_state" || zero >= 3))
        stored = it->second;
      if (role == "param" && zero >= 3 && stored != storedSharding(i))
        step.setArgAttr(i, DtcDialect::kRegatherAttr, UnitAttr::get(ctx));
      propagation.pinStorage(arg, stored);
    }
    // The gradients the optimizer reads, where the backward completes them.
    for (Operation *op : optimizerOps)
      for (Value operand : op->getOperands()) {
        auto result = dyn_cast<OpResult>(operand);
        if (!result || llvm::is_contained(optimizerOps, result.getOwner()))
          continue;
        auto names = result.getOwner()->getAttrOfType<ArrayAttr>(
            DtcDialect::kGradientOfAttr);
        auto name = names && result.getResultNumber() < names.size()
                        ? dyn_cast<StringAttr>(names[result.getResultNumber()])
                        : nullptr;
        auto it = name ? layout.find(name.getValue()) : layout.end();
        if (it != layout.end() &&
            it->second.dims.size() == (size_t)tensorTypeOf(operand).getRank())
          propagation.pin(operand, it->second, ShardingPriority::Strategy);
      }
    step.walk([&](arith::ConstantOp c) { propagation.close(c.getResult()); });
    if (failed(propagation.run()))
      return failure();
    propagation.annotate(kGridName);
    return success();
  }

  /// Megatron splits attention by heads. When a column-parallel matmul's
  /// output columns are reshaped into [heads, head size] and the heads do
  /// not divide over the tp devices, its columns are split in pieces of
  /// whole heads (the last devices hold padding) rather than in pieces that
  /// would cut heads apart. 0 when the default split already does.
  static int64_t headAlignedPiece(MatmulOp matmul, int64_t devices) {
    Value v = matmul.getResult();
    int64_t rank = tensorTypeOf(v).getRank();
    // Through a bias add (or any same-shape elementwise op) to the reshape.
    for (int depth = 0; depth < 4; ++depth) {
      Operation *user = v.hasOneUse() ? *v.user_begin() : nullptr;
      if (!user)
        return 0;
      if (auto reshape = dyn_cast<ReshapeOp>(user)) {
        ShardingRule rule = reshape.getShardingRule();
        const DimFactors &columns = rule.operands[0][rank - 1];
        if (columns.size() < 2)
          return 0;
        int64_t heads = rule.factorSizes[columns.front()];
        int64_t headSize = tensorTypeOf(v).getShape().back() / heads;
        if (heads % devices == 0)
          return 0;
        return pieceSize(heads, devices) * headSize;
      }
      if (user->getNumResults() != 1 ||
          user->getResult(0).getType() != v.getType() ||
          !isa<AddOp, SubOp, MulOp>(user))
        return 0;
      v = user->getResult(0);
    }
    return 0;
  }

  /// Megatron's pins: vocab-parallel embedding tables, column-parallel
  /// weights of matmuls whose input is whole on the tp axes (see the file
  /// comment). A forward walk (operands only) tells which inputs are split.
  template <class PinFn>
  void pinMegatron(func::FuncOp step, ArrayRef<int64_t> grid,
                   const GridAxes &tpAxes,
                   llvm::DenseMap<Value, TensorSharding> &pins, PinFn pin) {
    auto isParam = [&](Value v) {
      auto arg = dyn_cast<BlockArgument>(v);
      auto role = arg ? step.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                          DtcDialect::kRoleAttr)
                      : nullptr;
      return role && role.getValue() == "param";
    };
    auto usesTp = [&](ArrayRef<int64_t> axes) {
      return llvm::any_of(
          axes, [&](int64_t a) { return llvm::is_contained(tpAxes, a); });
    };
    for (Operation &op : step.getBody().front())
      if (auto embedding = dyn_cast<EmbeddingOp>(op))
        if (isParam(embedding.getTable()) && !pins.count(embedding.getTable()))
          pin(embedding.getTable(), TensorSharding{{tpAxes, {}}});

    llvm::DenseMap<Value, TensorSharding> layout(pins.begin(), pins.end());
    auto layoutOf = [&](Value v) {
      auto it = layout.find(v);
      return it != layout.end()
                 ? it->second
                 : TensorSharding::replicated(tensorTypeOf(v).getRank());
    };
    for (Operation &op : step.getBody().front()) {
      auto phase = op.getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);
      if (!phase || phase.getValue() != "forward")
        break; // the forward comes first
      auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
      if (!ruleOp)
        continue;
      if (auto matmul = dyn_cast<MatmulOp>(op)) {
        Value weight = matmul.getB();
        auto a = tensorTypeOf(matmul.getA());
        if (isParam(weight) && tensorTypeOf(weight).getRank() == 2 &&
            !pins.count(weight) &&
            !usesTp(layoutOf(matmul.getA()).dims[a.getRank() - 1])) {
          TensorSharding column = TensorSharding::replicated(2);
          column.dims[1] = tpAxes;
          column.setPiece(1,
                          headAlignedPiece(matmul, shardCount(grid, tpAxes)));
          normalizePieces(column, tensorTypeOf(weight).getShape(), grid);
          pin(weight, column);
          layout[weight] = column;
        }
      }
      ShardingRule rule = ruleOp.getShardingRule();
      if (!rule.verify(&op).empty())
        continue;
      SmallVector<TensorSharding> operands;
      for (Value v : op.getOperands())
        operands.push_back(layoutOf(v));
      FactorAxes factors = forwardFactors(&op, rule, operands, grid);
      for (auto [idx, result] : llvm::enumerate(op.getResults())) {
        TensorSharding s = resultSharding(rule, factors, idx, grid);
        s.partial.clear(); // pending sums do not steer the layout of consumers
        layout[result] = s;
      }
    }
  }
};

} // namespace
} // namespace mlir::dtc
