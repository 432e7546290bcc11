//===- ScheduleCollectives.cpp - issue gradient collectives early --------===//
//
// The partitioner materializes a resharding right before the op that needs
// it. That is the right place for most collectives, but not for ZeRO's:
//  - a gradient's reduce-scatter placed at its update keeps every full
//    gradient alive until the optimizer (ZeRO-1's memory); issued as soon
//    as the gradient is complete, the full gradient dies there (ZeRO-2);
//  - a ZeRO-3 parameter gathered right before its use leaves nothing for
//    the communication to overlap with; issued one region earlier, it can;
//  - a ZeRO-1/2 parameter's new value, gathered from the updated pieces at
//    the return, keeps every piece alive to the end of the step; gathered
//    right after its update, each piece dies there.
// Moving an op never changes what it computes: only its operands' defining
// ops must stay before it, and all ranks move the same ops the same way.
//
// Plain data parallelism has the first case's problem in time rather than
// memory: an all-reduce at the update starts after the whole backward.
// Issued as each gradient is complete and grouped into buckets (PyTorch
// DDP's scheme), a bucket is reduced while the backward goes on.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include <tuple>

namespace mlir::dtc {
#define GEN_PASS_DEF_SCHEDULECOLLECTIVES
#include "dtc/Passes/Passes.h.inc"

namespace {

bool isCollectiveOrPadding(Operation *op) {
  return isa<shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp,
             shard::AllSliceOp, shard::AllToAllOp, PadOp, FillPaddingOp>(op);
}

/// Forward, backward (B and W alike) or optimizer; -1 outside the phases.
int phaseGroup(Operation *op) {
  std::optional<Phase> phase = phaseOf(op);
  if (!phase)
    return -1;
  return static_cast<int>(*phase == Phase::BackwardWeight ? Phase::BackwardInput
                                                          : *phase);
}

struct ScheduleCollectivesPass
    : impl::ScheduleCollectivesBase<ScheduleCollectivesPass> {
  using ScheduleCollectivesBase::ScheduleCollectivesBase;
  /// The next `dtc.bucket` id (unique in the module).
  int64_t nextBucketId = 0;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<Plan> plan = getPlan(module);
    if (!plan)
      return;
    if (plan->zero == 0) {
      module.walk([&](func::FuncOp func) {
        if (func.isExternal())
          return;
        Block &body = func.getBody().front();
        // With micro-batches a gradient is complete only after the last
        // one (and a pipeline reduces it after the flush): nothing to
        // overlap.
        if (!plan->pipelined()) {
          reduceDataParallelGradientsInBuckets(body);
          return;
        }
        // A parameter the tp layout stores split but reads whole has its
        // gradient reduce-scattered over tp: after the micro-batches' sum.
        if (!plan->microbatchAxes.empty())
          accumulateBeforeScattering(body, plan->microbatchAxes);
        hoistChainsToResults(func, body, Role::Send);
      });
      return;
    }
    const int64_t zero = plan->zero;
    const SmallVector<int64_t> &mbAxes = plan->microbatchAxes;
    module.walk([&](func::FuncOp func) {
      if (func.isExternal())
        return;
      Block &body = func.getBody().front();
      if (zero == 1) {
        if (!mbAxes.empty())
          accumulateBeforeScattering(body, mbAxes);
      } else {
        reduceGradientsEarly(body);
        if (zero >= 3)
          prefetchGathers(func, body);
      }
      hoistChainsToResults(func, body, Role::Update);
      hoistChainsToResults(func, body, Role::Send);
      // With micro-batches these run per micro-batch or after the flush,
      // in lists that have no buckets.
      if (!plan->pipelined())
        bucketZeroCollectives(func, body);
    });
  }

  /// Moves `op` to right after the last of its operands' definitions in
  /// `body` (the block's start when they are all arguments or outside).
  static void hoist(Operation *op, Block &body) {
    Operation *after = nullptr;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        if (def->getBlock() == &body && (!after || after->isBeforeInBlock(def)))
          after = def;
    if (!after) {
      op->moveBefore(&body, body.begin());
      return;
    }
    if (after->isBeforeInBlock(op) && after->getNextNode() != op)
      op->moveAfter(after);
  }

  /// The collectives (and padding) that lead only to the value a result
  /// returns, innermost first: the ops from the returned value back to the
  /// first operand that is not such an op, each read only by the next (or
  /// the return).
  static SmallVector<Operation *> chainToReturn(Value returned, Block &body) {
    SmallVector<Operation *> chain;
    for (Operation *op = returned.getDefiningOp();
         op && op->getBlock() == &body && isCollectiveOrPadding(op) &&
         llvm::all_of(op->getUsers(),
                      [&](Operation *user) {
                        return isa<func::ReturnOp>(user) ||
                               llvm::is_contained(chain, user);
                      });
         op = op->getOperand(0).getDefiningOp())
      chain.push_back(op);
    return chain;
  }

  /// Runs the collectives (and padding) that only feed the step's results
  /// of `role` right after their operand instead of at the return, where
  /// the partitioner put them (right before their consumer):
  /// - updates, ZeRO-1/2: a parameter is stored whole, its update computes
  ///   the rank's piece, and the gather of the new value (and the crop of
  ///   its padding) at the return would keep every updated piece alive to
  ///   the end of the step, about params / dp bytes at once. Right after
  ///   the op producing the piece (the update, or mixed precision's cast of
  ///   the master piece), the piece dies there and the optimizer's working
  ///   memory is bounded by the largest piece.
  /// - sends, pipelines (any ZeRO stage): a message leaves with its
  ///   pending sums reduced, in the phase of the value it reduces (a
  ///   tensor-parallel stage's output is summed per micro-batch).
  ///   Under ZeRO the global norm of clipping is such a sum (of the gradient
  ///   pieces' squares over dp): reduced at the end of the step, its send
  ///   would follow the receive of the norm the other stage sends back, and
  ///   the stages would wait for each other.
  /// The order stays a function of the program alone (return order, then
  /// position), so dp peers, which share it, issue the same collectives in
  /// the same order; under a pipeline the update and its gather both run
  /// after the flush, in the same list.
  static void hoistChainsToResults(func::FuncOp func, Block &body, Role role) {
    auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
    if (!ret)
      return;
    for (OpOperand &operand : ret->getOpOperands()) {
      if (resultRole(func, operand.getOperandNumber()) != role)
        continue;
      for (Operation *op : llvm::reverse(chainToReturn(operand.get(), body))) {
        hoist(op, body);
        // A message's collectives (the tensor-parallel sum of a stage's
        // output, or of the gradient it sends back) run in the phase of
        // what they reduce: per micro-batch when it is, not after the
        // flush with the return they were placed at.
        if (role == Role::Send)
          if (Operation *def = op->getOperand(0).getDefiningOp())
            if (Attribute phase = def->getAttr(DtcDialect::kPhaseAttr))
              op->setAttr(DtcDialect::kPhaseAttr, phase);
      }
    }
  }

  /// ZeRO-1 with micro-batches: a gradient is a pending sum over the dp
  /// and micro-batch axes, and the partitioner reduce-scatters it over dp
  /// before summing over the micro-batches, which the emitter would have to
  /// run per micro-batch. ZeRO-1 keeps the whole gradient to the optimizer
  /// anyway, so the sum over the micro-batches (the emitter's free
  /// accumulation) goes first and the reduce-scatter runs once after the
  /// flush: `all_reduce(mb, reduce_scatter(dp, g))` becomes
  /// `reduce_scatter(dp, all_reduce(mb, g))` (Megatron's distributed
  /// optimizer). Both are sums, so the value is the same up to rounding;
  /// the padding between them is zero-filling, which commutes with a sum.
  /// A sum over more axes than the micro-batches' (a replicated
  /// parameter's tensor-parallel partial sums) keeps them after the
  /// reduce-scatter: `all_reduce([tp, mb], reduce_scatter(dp, g))` becomes
  /// `all_reduce(tp, reduce_scatter(dp, all_reduce(mb, g)))`.
  static void accumulateBeforeScattering(Block &body,
                                         ArrayRef<int64_t> mbAxes) {
    auto isMicroBatchAxis = [&](int16_t a) {
      return llvm::is_contained(mbAxes, a);
    };
    // A sum over the micro-batches, possibly with other axes (a replicated
    // parameter's tensor-parallel partial sums): those stay after the
    // reduce-scatter.
    auto overMicroBatches = [&](shard::AllReduceOp reduce) {
      return reduce.getReduction() == shard::ReductionKind::Sum &&
             llvm::any_of(reduce.getGridAxes(), isMicroBatchAxis);
    };
    auto commutesWithSum = [](Operation *op) {
      if (auto fill = dyn_cast<FillPaddingOp>(op))
        return fill.getFill() == "zero";
      if (auto scatter = dyn_cast<shard::ReduceScatterOp>(op))
        return scatter.getReduction() == shard::ReductionKind::Sum;
      return isa<PadOp>(op);
    };
    SmallVector<shard::AllReduceOp> sums;
    for (Operation &op : body)
      if (auto reduce = dyn_cast<shard::AllReduceOp>(op);
          reduce && reduce->hasAttr(DtcDialect::kGradientOfAttr) &&
          overMicroBatches(reduce))
        sums.push_back(reduce);
    for (shard::AllReduceOp sum : sums) {
      // The chain from the gradient to the sum: padding and one
      // reduce-scatter, each read only by the next.
      Operation *head = nullptr;
      bool scatters = false;
      Value v = sum.getInput();
      while (Operation *def = v.getDefiningOp()) {
        if (def->getBlock() != &body || !v.hasOneUse() ||
            !commutesWithSum(def) || !def->hasAttr(DtcDialect::kGradientOfAttr))
          break;
        scatters |= isa<shard::ReduceScatterOp>(def);
        head = def;
        v = def->getOperand(0);
      }
      if (!head || !scatters)
        continue;
      SmallVector<int16_t> mbPart, rest;
      for (int16_t a : sum.getGridAxes())
        (isMicroBatchAxis(a) ? mbPart : rest).push_back(a);
      OpBuilder builder(head);
      auto whole = shard::AllReduceOp::create(
          builder, sum.getLoc(), v.getType(), sum.getGridAttr(),
          builder.getDenseI16ArrayAttr(mbPart), v, sum.getReductionAttr());
      whole->setDiscardableAttrs(sum->getDiscardableAttrDictionary());
      head->setOperand(0, whole.getResult());
      if (rest.empty()) {
        sum.getResult().replaceAllUsesWith(sum.getInput());
        sum.erase();
      } else {
        sum.setGridAxes(rest);
      }
    }
  }

  /// ZeRO-2/3: the optimizer-phase collectives on a parameter gradient (its
  /// reduce-scatter and the padding around it) run as soon as their operand
  /// exists, tagged with the phase they now run in.
  void reduceGradientsEarly(Block &body) {
    SmallVector<Operation *> chain;
    for (Operation &op : body)
      if (isPhase(&op, Phase::Optimizer) && isCollectiveOrPadding(&op) &&
          op.hasAttr(DtcDialect::kGradientOfAttr))
        chain.push_back(&op);
    for (Operation *op : chain)
      hoistIntoPhase(op, body);
  }

  /// Hoists an optimizer-phase collective on a gradient to right after its
  /// operand and tags it with the phase it now runs in (the op before it,
  /// when that one is not the optimizer's).
  static void hoistIntoPhase(Operation *op, Block &body) {
    hoist(op, body);
    Operation *prev = op->getPrevNode();
    if (prev && phaseOf(prev) && !isPhase(prev, Phase::Optimizer))
      op->setAttr(DtcDialect::kPhaseAttr,
                  prev->getAttr(DtcDialect::kPhaseAttr));
  }

  /// Data parallelism without ZeRO: each parameter gradient's all-reduce
  /// (placed at its update by the partitioner) is issued as soon as the
  /// gradient is complete, tagged with the phase it now runs in, and the
  /// all-reduces are grouped into buckets (groupIntoBuckets).
  void reduceDataParallelGradientsInBuckets(Block &body) {
    SmallVector<Operation *> reductions;
    for (Operation &op : body)
      if (auto reduce = dyn_cast<shard::AllReduceOp>(op);
          reduce && isPhase(reduce, Phase::Optimizer) &&
          reduce->hasAttr(DtcDialect::kGradientOfAttr))
        reductions.push_back(reduce);
    for (Operation *reduce : reductions) {
      // A gradient resharded over other axes first (a parameter the tp
      // layout stores split but computes whole: reduce-scattered over tp,
      // then all-reduced over dp) moves with its reduction.
      Operation *reshard = reduce->getOperand(0).getDefiningOp();
      if (reshard && reshard->getDialect() == reduce->getDialect() &&
          isPhase(reshard, Phase::Optimizer) &&
          reshard->hasAttr(DtcDialect::kGradientOfAttr))
        hoistIntoPhase(reshard, body);
      hoistIntoPhase(reduce, body);
    }
    SmallVector<BucketCandidate> candidates;
    for (Operation *reduce : reductions)
      candidates.push_back({reduce, /*acrossCompute=*/true});
    groupIntoBuckets(body, candidates);
  }

  /// A collective that may share a bucket, and whether its bucket may span
  /// compute (a gradient's reduction packs each gradient as it is complete)
  /// or must be issued together (a prefetch: its results are needed at
  /// once, and the prefetch exists to run them while the previous region
  /// computes).
  struct BucketCandidate {
    Operation *op;
    bool acrossCompute;
  };

  /// Groups collectives into buckets (`dtc.bucket`), in the order they are
  /// issued: consecutive candidates of one kind (collective, grid axes,
  /// reduction, element type and phase), at most `bucketBytes` together
  /// (counting each one's full tensor: a larger one is a bucket of its
  /// own), none of whose results is read before the bucket's last member
  /// (which runs the bucket's one collective). A bucket of one is a plain
  /// collective and carries no tag. Buckets never interleave: the runtime
  /// packs one at a time.
  void groupIntoBuckets(Block &body, MutableArrayRef<BucketCandidate> list) {
    llvm::stable_sort(list,
                      [](const BucketCandidate &a, const BucketCandidate &b) {
                        return a.op->isBeforeInBlock(b.op);
                      });
    auto bytesOf = [](Value v) {
      auto type = cast<RankedTensorType>(v.getType());
      return type.getNumElements() *
             int64_t((type.getElementTypeBitWidth() + 7) / 8);
    };
    auto fullBytes = [&](Operation *op) {
      return std::max(bytesOf(op->getOperand(0)), bytesOf(op->getResult(0)));
    };
    auto reductionOf =
        [](Operation *op) -> std::optional<shard::ReductionKind> {
      if (auto r = dyn_cast<shard::AllReduceOp>(op))
        return r.getReduction();
      if (auto r = dyn_cast<shard::ReduceScatterOp>(op))
        return r.getReduction();
      return std::nullopt;
    };
    auto gridAxes = [](Operation *op) {
      return op->getAttrOfType<DenseI16ArrayAttr>("grid_axes");
    };
    auto sameKind = [&](Operation *a, Operation *b) {
      return a->getName() == b->getName() &&
             a->getAttr("grid") == b->getAttr("grid") &&
             gridAxes(a) == gridAxes(b) && reductionOf(a) == reductionOf(b) &&
             getElementTypeOrSelf(a->getOperand(0).getType()) ==
                 getElementTypeOrSelf(b->getOperand(0).getType()) &&
             phaseGroup(a) == phaseGroup(b);
    };
    // Every reader of the members' results comes after `op`.
    auto resultsWaitFor = [&](ArrayRef<Operation *> members, Operation *op) {
      for (Operation *member : members)
        for (Operation *user : member->getResult(0).getUsers()) {
          Operation *inBody = body.findAncestorOpInBlock(*user);
          if (!inBody || !op->isBeforeInBlock(inBody))
            return false;
        }
      return true;
    };
    auto onlyCollectivesBetween = [](Operation *from, Operation *to) {
      for (Operation *op = from->getNextNode(); op != to;
           op = op->getNextNode())
        if (!isCollectiveOrPadding(op))
          return false;
      return true;
    };
    SmallVector<SmallVector<Operation *>> buckets;
    int64_t bytes = 0;
    for (const BucketCandidate &c : list) {
      const int64_t size = fullBytes(c.op);
      const bool joins =
          !buckets.empty() && sameKind(buckets.back().back(), c.op) &&
          bytes + size <= bucketBytes &&
          (c.acrossCompute ||
           onlyCollectivesBetween(buckets.back().back(), c.op)) &&
          resultsWaitFor(buckets.back(), c.op);
      if (!joins) {
        buckets.emplace_back();
        bytes = 0;
      }
      buckets.back().push_back(c.op);
      bytes += size;
    }
    for (ArrayRef<Operation *> bucket : buckets) {
      if (bucket.size() < 2)
        continue;
      auto attr = IntegerAttr::get(
          IntegerType::get(body.getParentOp()->getContext(), 64),
          nextBucketId++);
      for (Operation *op : bucket)
        op->setAttr(DtcDialect::kBucketAttr, attr);
    }
  }

  /// ZeRO without micro-batches: the gradients' reduce-scatters (issued as
  /// each gradient is complete under ZeRO-2/3; ZeRO-1's each precede their
  /// update, so one piece lives at a time, and stay one call each), the
  /// gathers of updated parameters (ZeRO-1/2, issued as each update is
  /// done) and the ZeRO-3 gathers of a region's parameters, in buckets
  /// (groupIntoBuckets).
  void bucketZeroCollectives(func::FuncOp func, Block &body) {
    SmallVector<BucketCandidate> candidates;
    for (Operation &op : body)
      if (isa<shard::ReduceScatterOp>(op) &&
          op.hasAttr(DtcDialect::kGradientOfAttr) &&
          !isPhase(&op, Phase::Optimizer))
        candidates.push_back({&op, /*acrossCompute=*/true});
    auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
    if (ret)
      for (OpOperand &operand : ret->getOpOperands())
        if (resultRole(func, operand.getOperandNumber()) == Role::Update)
          for (Operation *op : chainToReturn(operand.get(), body))
            if (isa<shard::AllGatherOp>(op))
              candidates.push_back({op, /*acrossCompute=*/true});
    for (BlockArgument arg : func.getArguments())
      if (func.getArgAttr(arg.getArgNumber(), DtcDialect::kRegatherAttr))
        for (Operation *user : arg.getUsers())
          if (isa<shard::AllGatherOp>(user) && user->getBlock() == &body)
            candidates.push_back({user, /*acrossCompute=*/false});
    groupIntoBuckets(body, candidates);
  }

  /// ZeRO-3: a region's parameter gathers are issued before the previous
  /// region of the same phase starts.
  void prefetchGathers(func::FuncOp func, Block &body) {
    struct Chain {
      SmallVector<Operation *> ops; // in order, head first
      Operation *firstConsumer = nullptr;
    };
    SmallVector<Chain> chains;
    for (BlockArgument arg : func.getArguments()) {
      if (!func.getArgAttr(arg.getArgNumber(), DtcDialect::kRegatherAttr))
        continue;
      for (Operation *user : arg.getUsers()) {
        if (!isCollectiveOrPadding(user) || user->getBlock() != &body)
          continue;
        Chain chain;
        Operation *op = user;
        while (true) {
          chain.ops.push_back(op);
          Value result = op->getResult(0);
          Operation *next = result.hasOneUse() ? *result.user_begin() : nullptr;
          if (!next || !isCollectiveOrPadding(next))
            break;
          op = next;
        }
        for (Operation *consumer : chain.ops.back()->getResult(0).getUsers())
          if (!chain.firstConsumer ||
              consumer->isBeforeInBlock(chain.firstConsumer))
            chain.firstConsumer = consumer;
        if (chain.firstConsumer && !isa<func::ReturnOp>(chain.firstConsumer))
          chains.push_back(std::move(chain));
      }
    }
    llvm::stable_sort(chains, [](const Chain &a, const Chain &b) {
      return a.firstConsumer->isBeforeInBlock(b.firstConsumer);
    });
    // Regions in program order: a layer when ops carry one, else each
    // consuming op.
    using Region = std::tuple<int, int64_t, Operation *>;
    auto regionOf = [](Operation *consumer) -> Region {
      if (auto layer =
              consumer->getAttrOfType<IntegerAttr>(DtcDialect::kLayerAttr))
        return {phaseGroup(consumer), layer.getInt(), nullptr};
      return {phaseGroup(consumer), -1, consumer};
    };
    Operation *previousStart = nullptr, *currentStart = nullptr;
    Region currentRegion;
    int currentGroup = -1;
    for (Chain &chain : chains) {
      Region region = regionOf(chain.firstConsumer);
      if (!currentStart || region != currentRegion) {
        int group = std::get<0>(region);
        previousStart = group == currentGroup ? currentStart : nullptr;
        currentStart = chain.firstConsumer;
        currentRegion = region;
        currentGroup = group;
      }
      if (!previousStart)
        continue;
      for (Operation *op : chain.ops)
        op->moveBefore(previousStart);
    }
  }
};

} // namespace
} // namespace mlir::dtc
