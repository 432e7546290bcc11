//===- MaterializePlan.cpp - a plan as pins, completed by propagation -----===//
//
// Plan -> annotations: what the plan's degrees mean for each value of the
// training step, pinned at strategy priority, and sharding propagation
// (include/dtc/Sharding/Propagation.h) deriving the rest: a sharding on
// every argument and a factor sharding (dtc.factor_axes) on every op. Any
// planner that writes a Plan (dtc-apply-strategy, a search) reuses it, and
// the partitioner cannot tell which made the plan.
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
//    where the residual stream needs it;
//  - Megatron sequence parallelism (plan.sequenceParallel): the regions
//    between tensor-parallel blocks split along the sequence over the tp
//    axes (planSequenceParallel, include/dtc/Sharding/SequenceParallel.h);
//  - ZeRO: a second round over the optimizer phase (planZero).
// User pins (dtc-pin-sharding, --pin) win over all of them.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Planner/TensorLayout.h"
#include "dtc/Sharding/Propagation.h"
#include "dtc/Sharding/SequenceParallel.h"
#include "dtc/Sharding/Sharding.h"
#include "dtc/Sharding/TensorSharding.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringMap.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_MATERIALIZEPLAN
#include "dtc/Passes/Passes.h.inc"

namespace {

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

struct MaterializePlanPass : impl::MaterializePlanBase<MaterializePlanPass> {
  using MaterializePlanBase::MaterializePlanBase;
  MaterializePlanPass(const MaterializePlanOptions &options,
                      const ::dtc::cost::HardwareProfile &profile)
      : MaterializePlanBase(options), profile(profile) {}
  /// The driver's profile; otherwise the `hardware` option's.
  std::optional<::dtc::cost::HardwareProfile> profile;
  Plan plan;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp step = findTrainStep(module);
    std::optional<Plan> read = getPlan(module);
    if (!step || !read) {
      module.emitError() << "dtc-materialize-plan needs one training step and "
                            "a dtc.plan (run dtc-apply-strategy first)";
      return signalPassFailure();
    }
    plan = *read;
    FailureOr<SmallVector<int64_t>> grid = getGridShape(module, plan.grid);
    if (failed(grid) || failed(materialize(step, *grid)))
      signalPassFailure();
  }

  LogicalResult materialize(func::FuncOp step, ArrayRef<int64_t> grid) {
    const GridAxes dpAxes(plan.dpAxes.begin(), plan.dpAxes.end());
    const GridAxes mbAxes(plan.microbatchAxes.begin(),
                          plan.microbatchAxes.end());
    // Parameters and their optimizer state never split over the dp axes
    // (that is ZeRO's decision, not propagation's).
    llvm::DenseSet<Value> persistent;
    for (unsigned i = 0; i < step.getNumArguments(); ++i)
      if (std::optional<Role> role = argRole(step, i);
          role && *role != Role::Input)
        persistent.insert(step.getArgument(i));
    ShardingPropagation propagation(step, grid, [&](Value v, int64_t a) {
      return !persistent.contains(v) ||
             (!llvm::is_contained(dpAxes, a) && !llvm::is_contained(mbAxes, a));
    });
    llvm::DenseMap<Value, TensorSharding> pins;
    // `s` by value: callers pass shardings that live in `pins`, which the
    // insertion may grow and move.
    auto pin = [&](Value v, TensorSharding s) {
      propagation.pin(v, s, ShardingPriority::Strategy);
      pins[v] = std::move(s);
    };
    if (plan.sp > 1 && failed(prepareRing(step)))
      return failure();
    if (failed(checkRoutingIsWhole(step)))
      return failure();
    if (failed(pinUserShardings(step, grid, propagation, pins)) ||
        failed(pinBatches(step, pin, pins)))
      return failure();
    // After pinBatches has checked that the sequence divides.
    if (plan.sp > 1 && plan.spLayout != "contiguous" &&
        failed(orderSequence(step, plan.sp,
                             plan.spLayout == "zigzag"
                                 ? ::dtc::artifact::SequenceOrder::Zigzag
                                 : ::dtc::artifact::SequenceOrder::Striped)))
      return failure();
    step.walk([&](arith::ConstantOp c) { propagation.close(c.getResult()); });
    if (!plan.tpAxes.empty() && plan.tpLayout == "ilp") {
      if (failed(pinTensorLayout(step, grid, propagation, pins, pin)))
        return failure();
    } else if (!plan.tpAxes.empty()) {
      pinMegatron(step, grid, GridAxes(plan.tpAxes.begin(), plan.tpAxes.end()),
                  pins, pin);
    }
    if (plan.ep > 1 && failed(pinExperts(step, pin)))
      return failure();
    pinStateLikeParams(step, pins, pin);

    if (failed(propagation.run()))
      return failure();
    propagation.annotate(plan.grid);
    if (plan.sequenceParallel &&
        failed(planSequenceParallel(
            step, grid, GridAxes(plan.tpAxes.begin(), plan.tpAxes.end()))))
      return failure();
    // ZeRO shards over every axis that splits the batch: the expert-parallel
    // ones too, except for the experts' own weights, which those split.
    SmallVector<int64_t> dataAxes = plan.batchAxes();
    if (plan.zero > 0 && !dataAxes.empty() &&
        failed(
            planZero(step, grid, GridAxes(dataAxes.begin(), dataAxes.end()))))
      return failure();
    // Last, after every round of propagation has annotated the ops.
    if (!mbAxes.empty() && failed(keepWholeBatch(step, grid, mbAxes)))
      return failure();
    return success();
  }

  /// Ring attention (plan.sp > 1): attention and its gradient may split
  /// their sequences (dtc.ring), and a shared weight's gradient no longer
  /// folds the batch and sequence into one row dimension: with the
  /// sequence split and the batch not (or split more coarsely), the rows a
  /// rank holds are not one contiguous piece of the merged dimension, so
  /// the product over it is taken per example and summed over the batch
  /// (x [B, S, K], dy [B, S, N] -> sum_B x^T dy).
  LogicalResult prepareRing(func::FuncOp step) {
    bool attention = false;
    SmallVector<std::pair<MatmulOp, Value>> foldedWeightGradients;
    step.walk([&](Operation *op) {
      if (isa<AttentionOp, AttentionGradOp>(op)) {
        op->setAttr(DtcDialect::kRingAttr, UnitAttr::get(op->getContext()));
        attention = true;
      }
      if (auto matmul = dyn_cast<MatmulOp>(op))
        if (Value x = foldedRows(matmul))
          foldedWeightGradients.push_back({matmul, x});
    });
    if (!attention)
      return step.emitError()
             << "ring-attention sequence parallelism (sp=" << plan.sp
             << ") splits attention's sequence, but the model has no "
                "dtc.attention";
    for (auto [matmul, x] : foldedWeightGradients)
      unfoldRows(matmul, x);
    return success();
  }

  /// matmul(transpose(reshape(x)), reshape(dy)) with x [B, ..., S, K] and
  /// dy [B, ..., S, N] merged into rows [B...S, K] and [B...S, N]: the
  /// weight gradient MatmulOp::buildGradient folds; the source of x.
  static Value foldedRows(MatmulOp matmul) {
    auto transpose = matmul.getA().getDefiningOp<TransposeOp>();
    auto rowsA =
        transpose ? transpose.getX().getDefiningOp<ReshapeOp>() : ReshapeOp();
    auto rowsB = matmul.getB().getDefiningOp<ReshapeOp>();
    if (!rowsA || !rowsB || tensorTypeOf(matmul.getA()).getRank() != 2)
      return {};
    auto x = tensorTypeOf(rowsA.getX()), dy = tensorTypeOf(rowsB.getX());
    if (x.getRank() < 3 || x.getRank() != dy.getRank() ||
        x.getShape().drop_back() != dy.getShape().drop_back() ||
        x.getDimSize(0) == 1)
      return {};
    return rowsA.getX();
  }

  /// Rewrites a weight gradient foldedRows found (x its source).
  static void unfoldRows(MatmulOp matmul, Value x) {
    OpBuilder b(matmul);
    Location loc = matmul.getLoc();
    Value dy = matmul.getB().getDefiningOp<ReshapeOp>().getX();
    const int64_t rank = tensorTypeOf(x).getRank();
    SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
    std::swap(perm[rank - 1], perm[rank - 2]);
    Value xT = TransposeOp::create(b, loc, x, perm);
    Value perExample = MatmulOp::create(b, loc, xT, dy);
    SmallVector<int64_t> batchAxes =
        llvm::to_vector(llvm::seq<int64_t>(0, rank - 2));
    Value sum = ReduceSumOp::create(b, loc, perExample, batchAxes,
                                    /*keep_dims=*/false);
    // The phase and layer of the product they replace (not its identity).
    for (Operation *created :
         {xT.getDefiningOp(), perExample.getDefiningOp(), sum.getDefiningOp()})
      copyPlaceAttrs(matmul, created, /*identity=*/false);
    matmul.getResult().replaceAllUsesWith(sum);
    Operation *transpose = matmul.getA().getDefiningOp();
    Operation *rowsB = matmul.getB().getDefiningOp();
    matmul.erase();
    for (Operation *dead : {transpose, rowsB})
      if (dead->use_empty()) {
        Operation *source = dead->getOperand(0).getDefiningOp();
        dead->erase();
        if (auto rows = dyn_cast_or_null<ReshapeOp>(source);
            rows && rows->use_empty())
          rows.erase();
      }
  }

  /// Ops marked dtc.whole_batch see the step's whole batch: the
  /// micro-batch axes leave their factor sharding, so the partitioner
  /// gathers their data input over those axes (which the emitter reads as
  /// the input's whole local piece, once per step) and nothing they
  /// compute is pending a sum over micro-batches.
  LogicalResult keepWholeBatch(func::FuncOp step, ArrayRef<int64_t> grid,
                               const GridAxes &mbAxes) {
    WalkResult walk = step.walk([&](Operation *op) {
      auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
      if (!ruleOp || !op->hasAttr(DtcDialect::kWholeBatchAttr))
        return WalkResult::advance();
      FailureOr<FactorAxes> factors =
          factorAxesFromAttr(op, ruleOp.getShardingRule(), grid);
      if (failed(factors))
        return WalkResult::interrupt();
      for (GridAxes &axes : *factors)
        llvm::erase_if(
            axes, [&](int64_t a) { return llvm::is_contained(mbAxes, a); });
      setFactorAxesAttr(op, *factors);
      return WalkResult::advance();
    });
    return failure(walk.wasInterrupted());
  }

  /// A parameter's optimizer state (moments, a master copy) is stored the
  /// way the parameter is. Propagation would reach it only through the
  /// update, from the gradient, which for an embedding table is made by
  /// embedding_grad, an op that never reads the table: under mixed
  /// precision nothing else links the table's split to its master weights
  /// and moments, which then stayed whole on every tp rank.
  template <class PinFn>
  void pinStateLikeParams(func::FuncOp step,
                          const llvm::DenseMap<Value, TensorSharding> &pins,
                          PinFn pin) {
    llvm::StringMap<Value> params;
    for (unsigned i = 0; i < step.getNumArguments(); ++i)
      if (argRole(step, i) == Role::Param)
        if (auto name =
                step.getArgAttrOfType<StringAttr>(i, DtcDialect::kNameAttr))
          params[name.getValue()] = step.getArgument(i);
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      BlockArgument state = step.getArgument(i);
      auto of = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kOfAttr);
      if (argRole(step, i) != Role::OptimizerState || !of || pins.count(state))
        continue;
      auto param = params.find(of.getValue());
      if (param == params.end())
        continue;
      auto pinned = pins.find(param->second);
      if (pinned != pins.end() && tensorTypeOf(param->second).getShape() ==
                                      tensorTypeOf(state).getShape())
        pin(state, pinned->second);
    }
  }

  /// User pins (dtc-pin-sharding, --pin) come first and win.
  LogicalResult pinUserShardings(func::FuncOp step, ArrayRef<int64_t> grid,
                                 ShardingPropagation &propagation,
                                 llvm::DenseMap<Value, TensorSharding> &pins) {
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      auto attr =
          step.getArgAttrOfType<ShardingAttr>(i, DtcDialect::kShardingAttr);
      if (enumOf<PinPriority>(step.getArgAttr(
              i, DtcDialect::kPinPriorityAttr)) != PinPriority::User ||
          !attr)
        continue;
      BlockArgument arg = step.getArgument(i);
      TensorSharding sharding = fromShardingAttr(attr);
      const int64_t meshAxes =
          (int64_t)grid.size() - (int64_t)plan.microbatchAxes.size();
      for (int64_t a : sharding.usedAxes())
        if (a >= meshAxes)
          return emitError(arg.getLoc())
                 << "a pinned sharding uses mesh axis " << a
                 << " but the mesh has " << meshAxes << " axes";
      pins[arg] = sharding;
      propagation.pin(arg, sharding, ShardingPriority::User);
    }
    return success();
  }

  /// Data parallelism: every data input's batch dimension over the dp axes
  /// and the micro-batch axis (its minor split).
  template <class PinFn>
  LogicalResult pinBatches(func::FuncOp step, PinFn pin,
                           const llvm::DenseMap<Value, TensorSharding> &pins) {
    SmallVector<int64_t> dataAxes = plan.batchAxes();
    GridAxes batchAxes(dataAxes.begin(), dataAxes.end());
    batchAxes.append(plan.microbatchAxes.begin(), plan.microbatchAxes.end());
    const int64_t batchSplit = plan.dp * plan.ep * plan.microbatches;
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      BlockArgument arg = step.getArgument(i);
      auto type = cast<RankedTensorType>(arg.getType());
      if (argRole(step, i) != Role::Input || pins.count(arg))
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
              << batch << ", which does not divide over dp=" << plan.dp;
          if (plan.ep > 1)
            diag << " x ep=" << plan.ep;
          if (plan.microbatches > 1)
            diag << " x " << plan.microbatches << " micro-batches";
          return diag;
        }
        sharding.dims[0] = batchAxes;
      }
      // Ring attention: token inputs [batch, sequence] split their
      // sequence over the sp axis; propagation carries it to every
      // activation.
      if (plan.sp > 1 && type.getRank() == 2 &&
          isa<IntegerType>(type.getElementType())) {
        if (type.getDimSize(1) % plan.sp != 0) {
          auto name =
              step.getArgAttrOfType<StringAttr>(i, DtcDialect::kNameAttr);
          return emitError(arg.getLoc())
                 << "ring-attention sequence parallelism splits the sequence "
                    "of input \""
                 << (name ? name.getValue() : StringRef("?")) << "\" ("
                 << type.getDimSize(1) << " tokens) over sp=" << plan.sp
                 << "; it must divide evenly";
        }
        sharding.dims[1] = GridAxes(plan.spAxes.begin(), plan.spAxes.end());
      }
      pin(arg, sharding);
    }
    return success();
  }

  /// A mixture of experts fills each expert in the order of the whole
  /// batch's tokens (its capacity counts them all), and its load-balancing
  /// loss multiplies two means over the whole batch: neither splits into
  /// micro-batches run one after the other. A pipeline runs it as its one
  /// micro-batch.
  LogicalResult checkRoutingIsWhole(func::FuncOp step) {
    if (plan.microbatches <= 1)
      return success();
    MoeRouteOp route;
    step.walk([&](MoeRouteOp op) {
      route = op;
      return WalkResult::interrupt();
    });
    if (!route)
      return success();
    return route.emitError()
           << "a mixture-of-experts layer routes the whole batch at once "
              "(each expert keeps its first tokens of the batch, and the "
              "load-balancing loss multiplies means over it), so the model "
              "cannot be micro-batched (here into "
           << plan.microbatches
           << ": --microbatches times --grad-accum); pipeline stages run it "
              "as one micro-batch";
  }

  /// Expert parallelism: every experts' buffer (moe_dispatch's result,
  /// [E, C, D]) splits its experts over the ep axes; propagation carries
  /// the split through the experts' batched matmuls to their weights, their
  /// gradients and optimizer state, and dispatch and combine lower to
  /// dtc.moe_exchange where the same axes split the tokens.
  template <class PinFn>
  LogicalResult pinExperts(func::FuncOp step, PinFn pin) {
    const GridAxes epAxes(plan.epAxes.begin(), plan.epAxes.end());
    SmallVector<MoeDispatchOp> dispatches;
    step.walk([&](MoeDispatchOp op) { dispatches.push_back(op); });
    if (dispatches.empty())
      return emitError(step.getLoc())
             << "ep=" << plan.ep
             << " splits the experts of mixture-of-experts layers, and this "
                "model has none (dtc.moe); use dp="
             << plan.ep << " instead";
    for (MoeDispatchOp op : dispatches) {
      const int64_t experts = tensorTypeOf(op.getBuffer()).getDimSize(0);
      if (experts % plan.ep != 0)
        return op.emitError()
               << "ep=" << plan.ep << " does not divide the " << experts
               << " experts of this mixture-of-experts layer";
      TensorSharding sharding = TensorSharding::replicated(3);
      sharding.dims[0] = epAxes;
      pin(op.getBuffer(), sharding);
    }
    return success();
  }

  /// ZeRO's layout of a parameter stored as `stored` (its tensor-parallel
  /// or expert-parallel split): the data-parallel axes it does not use yet
  /// added on the largest dimension nothing splits yet (padded pieces when
  /// it does not divide), else appended to a dimension split evenly that
  /// still divides; unchanged when neither exists (a scalar, or dimensions
  /// too small).
  static TensorSharding zeroSharding(const TensorSharding &stored,
                                     ArrayRef<int64_t> shape,
                                     const GridAxes &dpAxes,
                                     ArrayRef<int64_t> grid) {
    GridAxes free;
    for (int64_t axis : dpAxes)
      if (llvm::none_of(stored.dims, [&](const GridAxes &dim) {
            return llvm::is_contained(dim, axis);
          }))
        free.push_back(axis);
    if (free.empty())
      return stored;
    return zeroShardingOver(stored, shape, free, grid);
  }

  static TensorSharding zeroShardingOver(const TensorSharding &stored,
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
      if (argRole(step, i) == Role::Param)
        layout[argString(i, DtcDialect::kNameAttr)] = zeroSharding(
            storedSharding(i), tensorTypeOf(step.getArgument(i)).getShape(),
            dpAxes, grid);

    SmallVector<Operation *> optimizerOps;
    for (Operation &op : step.getBody().front()) {
      if (isPhase(&op, Phase::Optimizer) && isa<ShardingRuleOpInterface>(op))
        optimizerOps.push_back(&op);
    }
    ShardingPropagation propagation(step, grid);
    propagation.restrictTo(optimizerOps);
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      BlockArgument arg = step.getArgument(i);
      std::optional<Role> role = argRole(step, i);
      TensorSharding stored = storedSharding(i);
      StringRef owner =
          role == Role::Param            ? argString(i, DtcDialect::kNameAttr)
          : role == Role::OptimizerState ? argString(i, DtcDialect::kOfAttr)
                                         : StringRef();
      auto it = owner.empty() ? layout.end() : layout.find(owner);
      if (it != layout.end() && it->second.dims.size() == stored.dims.size() &&
          (role == Role::OptimizerState || plan.zero >= 3))
        stored = it->second;
      if (role == Role::Param && plan.zero >= 3 && stored != storedSharding(i))
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
    propagation.annotate(plan.grid);
    return success();
  }

  /// tp_layout = "ilp": the intra-op program's split of every forward op
  /// (reserved in propagation) and parameter (pinned, unless the user
  /// pinned it); propagation derives the backward from them.
  template <class PinFn>
  LogicalResult pinTensorLayout(func::FuncOp step, ArrayRef<int64_t> grid,
                                ShardingPropagation &propagation,
                                llvm::DenseMap<Value, TensorSharding> &pins,
                                PinFn pin) {
    FailureOr<::dtc::cost::HardwareProfile> hw =
        profile ? FailureOr<::dtc::cost::HardwareProfile>(*profile)
                : tensorLayoutHardware(step, hardware, grid);
    if (failed(hw))
      return failure();
    TensorLayoutOptions options =
        tensorLayoutOptions(plan, *hw, double(deviceMemory));
    options.leastMemoryWhenNothingFits = leastMemoryWhenNothingFits;
    // With micro-batches the batch's minor split is the micro-batch axis,
    // which every reshard of the batch would have to gather: the factors
    // the batch pins alone split stay off the tp axes.
    llvm::DenseMap<Operation *, FactorAxes> batchFactors;
    if (!plan.microbatchAxes.empty()) {
      ShardingPropagation batches(step, grid);
      for (auto &[value, sharding] : pins)
        batches.pin(value, sharding, ShardingPriority::Strategy);
      if (failed(batches.run()))
        return failure();
      step.walk([&](Operation *op) {
        if (isa<ShardingRuleOpInterface>(op))
          batchFactors[op] = batches.factorsOf(op);
      });
      options.mayUseFactor = [&](Operation *op, int64_t factor) {
        auto it = batchFactors.find(op);
        return it == batchFactors.end() ||
               factor >= (int64_t)it->second.size() ||
               it->second[factor].empty();
      };
    }
    FailureOr<TensorLayout> layout = planTensorLayout(step, grid, options);
    if (failed(layout))
      return failure();
    for (auto &[op, factor] : layout->splitFactor)
      propagation.reserve(op, options.tpAxes, factor);
    for (auto &[param, sharding] : layout->parameters)
      if (!pins.count(param))
        pin(param, sharding);
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
    auto isParam = [&](Value v) { return isParameterArgument(step, v); };
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
      if (!isPhase(&op, Phase::Forward))
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

std::unique_ptr<Pass>
createMaterializePlan(const MaterializePlanOptions &options,
                      const ::dtc::cost::HardwareProfile &hardware) {
  return std::make_unique<MaterializePlanPass>(options, hardware);
}
} // namespace mlir::dtc
