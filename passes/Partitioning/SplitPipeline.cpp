//===- SplitPipeline.cpp - one training-step function per pipeline stage --===//
//
// Runs on the planned (annotated, still global) training step, before SPMD
// partitioning: each stage's function is then partitioned on its own, like
// any step, so data and (later) tensor parallelism inside a stage need
// nothing from here. Micro-batching needs nothing either: it is the plan's
// virtual grid axis, so a micro-batch's activations are values split over
// it and the messages between stages carry one micro-batch.
//
// Stages: layers (dtc.layer) are cut into pp x virtual-stages contiguous
// groups where the plan's stage_cuts say (dtc-balance-stages decides them).
// Virtual stage k runs on pipeline stage k mod pp (the interleaved
// assignment; with one chunk per stage, k itself).
//
// Messages: a value computed on one virtual stage and used on another is
// returned by its producer's function (role "send") and received as an
// argument of its consumer's (role "recv"), one message per (value,
// consuming virtual stage), even between chunks of one pipeline stage. Both
// sides carry the value's planned sharding with pending sums resolved, so
// a weight-gradient contribution is summed over the micro-batches (and the
// data-parallel group) before it travels, and the message's scope says
// when it travels: per micro-batch, before the micro-batches (computed from
// parameters alone) or after them (accumulated).
//
// Parameters: a parameter is an argument of every stage that reads it; its
// update runs on each of them from the same gradient (which is summed where
// the parameter's first layer lives and sent to the others), so the copies
// stay identical: a tied embedding's two gradients meet on the first stage.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Planner/StageBalance.h"
#include "dtc/Sharding/Sharding.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include <map>

namespace mlir::dtc {
#define GEN_PASS_DEF_SPLITPIPELINE
#include "dtc/Passes/Passes.h.inc"

namespace {

RankedTensorType typeOf(Value v) { return tensorTypeOf(v); }

/// Forward, B, W, then the optimizer and ops outside the phases.
int phaseRank(Operation *op) {
  std::optional<Phase> phase = phaseOf(op);
  return phase && phase != Phase::Optimizer ? static_cast<int>(*phase) : 3;
}

enum class Scope { Step, MicroBatch, Accumulated };

StringRef scopeName(Scope s) {
  switch (s) {
  case Scope::Step:
    return "step";
  case Scope::MicroBatch:
    return "microbatch";
  case Scope::Accumulated:
    return "accumulated";
  }
  return "step";
}

bool usesAny(const TensorSharding &s, ArrayRef<int64_t> axes) {
  auto in = [&](int64_t a) { return llvm::is_contained(axes, a); };
  for (const GridAxes &dim : s.dims)
    if (llvm::any_of(dim, in))
      return true;
  return llvm::any_of(s.partial, in);
}

struct Splitter {
  func::FuncOp step;
  Plan plan;
  StringRef grid;
  SmallVector<int64_t> gridShape, mbAxes;
  int64_t stages, chunks;

  // Per value of the global step: planned sharding (pending sums kept) and
  // scope.
  llvm::DenseMap<Value, TensorSharding> planned;
  llvm::DenseMap<Value, Scope> scope;
  // Placement: virtual stage of each op; update ops run on several stages.
  llvm::DenseMap<Operation *, int64_t> vstageOf;
  llvm::DenseMap<Operation *, SmallVector<int64_t>> updateStages;

  struct Device {
    func::FuncOp func;
    Block *body = nullptr;
    IRMapping mapping; // global values -> this stage's
    llvm::DenseMap<Operation *, Value> constants;
    llvm::DenseMap<unsigned, unsigned> argOf; // global arg -> local arg
    SmallVector<DictionaryAttr> argAttrs;
    SmallVector<Value> results;
    SmallVector<DictionaryAttr> resultAttrs;
  };
  std::vector<Device> devices;
  // (global value, consuming virtual stage) -> its recv argument there.
  std::map<std::pair<void *, int64_t>, Value> received;
  int64_t nextMessage = 0;

  int64_t deviceOf(int64_t vstage) const { return vstage % stages; }

  LogicalResult run();
  LogicalResult planShardings();
  LogicalResult place();
  FailureOr<Value> operandOn(Device &dev, int64_t d, int64_t vstage,
                             Value global, Operation *user);
  Value argumentOn(Device &dev, BlockArgument global);
  TensorSharding boundarySharding(Value global);
};

LogicalResult Splitter::planShardings() {
  for (BlockArgument arg : step.getArguments()) {
    TensorSharding s = TensorSharding::replicated(typeOf(arg).getRank());
    if (auto attr = step.getArgAttrOfType<ShardingAttr>(
            arg.getArgNumber(), DtcDialect::kShardingAttr))
      s = fromShardingAttr(attr);
    planned[arg] = s;
    scope[arg] = usesAny(s, mbAxes) ? Scope::MicroBatch : Scope::Step;
  }
  for (Operation &op : step.getBody().front()) {
    if (isa<func::ReturnOp>(op))
      continue;
    Scope fromOperands = Scope::Step;
    for (Value operand : op.getOperands()) {
      Scope s = scope.lookup(operand);
      if (s != Scope::Step)
        fromOperands = Scope::Accumulated;
    }
    auto ruleOp = dyn_cast<ShardingRuleOpInterface>(&op);
    std::optional<FactorAxes> factors;
    std::optional<ShardingRule> rule;
    if (ruleOp && op.hasAttr(DtcDialect::kFactorAxesAttr)) {
      rule = ruleOp.getShardingRule();
      FailureOr<FactorAxes> read = factorAxesFromAttr(&op, *rule, gridShape);
      if (failed(read))
        return failure();
      factors = *read;
    }
    for (auto [idx, result] : llvm::enumerate(op.getResults())) {
      TensorSharding s =
          factors ? resultSharding(*rule, *factors, idx, gridShape)
                  : TensorSharding::replicated(typeOf(result).getRank());
      planned[result] = s;
      scope[result] = usesAny(s, mbAxes) ? Scope::MicroBatch : fromOperands;
    }
  }
  return success();
}

TensorSharding Splitter::boundarySharding(Value global) {
  TensorSharding s = planned.lookup(global);
  s.partial.clear();
  return s;
}

Value Splitter::argumentOn(Device &dev, BlockArgument global) {
  auto it = dev.argOf.find(global.getArgNumber());
  if (it != dev.argOf.end())
    return dev.body->getArgument(it->second);
  Value local = dev.body->addArgument(global.getType(), global.getLoc());
  dev.argOf[global.getArgNumber()] = dev.body->getNumArguments() - 1;
  DictionaryAttr attrs = step.getArgAttrDict(global.getArgNumber());
  dev.argAttrs.push_back(attrs ? attrs
                               : DictionaryAttr::get(step.getContext()));
  return local;
}

FailureOr<Value> Splitter::operandOn(Device &dev, int64_t d, int64_t vstage,
                                     Value global, Operation *user) {
  if (auto arg = dyn_cast<BlockArgument>(global))
    return argumentOn(dev, arg);
  Operation *def = global.getDefiningOp();
  if (auto constant = dyn_cast<arith::ConstantOp>(def)) {
    Value &local = dev.constants[def];
    if (!local) {
      OpBuilder b(step.getContext());
      b.setInsertionPointToStart(dev.body);
      local = b.clone(*constant)->getResult(0);
    }
    return local;
  }
  if (auto it = updateStages.find(def); it != updateStages.end()) {
    // What follows an update on its stages (mixed precision's rounding of
    // the new master weights into the parameter) reads it there.
    if (updateStages.count(user) &&
        llvm::any_of(it->second, [&](int64_t k) { return deviceOf(k) == d; }))
      return dev.mapping.lookup(global);
    return user->emitError()
           << "internal error: an optimizer update's result is read "
              "by another op of the step";
  }
  int64_t from = vstageOf.lookup(def);
  if (from == vstage)
    return dev.mapping.lookup(global);

  Value &recv = received[{global.getAsOpaquePointer(), vstage}];
  if (recv)
    return recv;
  Scope valueScope = scope.lookup(global);
  TensorSharding sharding = boundarySharding(global);
  bool perMicroBatch = usesAny(sharding, mbAxes);
  Phase phase = phaseOf(def).value_or(Phase::Optimizer);
  if (perMicroBatch) {
    // The schedule orders forwards up the pipeline and backwards down it.
    bool ok = (phase == Phase::Forward && from < vstage) ||
              (phase == Phase::BackwardInput && from > vstage);
    if (!ok)
      return user->emitError()
             << "a per-micro-batch value computed by '" << def->getName()
             << "' (phase " << stringifyPhase(phase) << ") on virtual stage "
             << from << " is needed on virtual stage " << vstage
             << "; pipeline schedules only carry forward activations to later "
                "stages and their gradients to earlier ones";
  }
  StringRef when = perMicroBatch               ? scopeName(Scope::MicroBatch)
                   : valueScope == Scope::Step ? scopeName(Scope::Step)
                                               : scopeName(Scope::Accumulated);
  MLIRContext *ctx = step.getContext();
  Builder b(ctx);
  int64_t id = nextMessage++;
  int64_t source = deviceOf(from);
  auto common = [&](int64_t peer, int64_t stageAttr) {
    return SmallVector<NamedAttribute>{
        b.getNamedAttr(DtcDialect::kMessageAttr, b.getI64IntegerAttr(id)),
        b.getNamedAttr(DtcDialect::kPeerAttr, b.getI64IntegerAttr(peer)),
        b.getNamedAttr(DtcDialect::kStageAttr, b.getI64IntegerAttr(stageAttr)),
        b.getNamedAttr(DtcDialect::kShardingAttr,
                       toShardingAttr(sharding, ctx, grid)),
        b.getNamedAttr(DtcDialect::kPhaseAttr, enumAttr(ctx, phase)),
        b.getNamedAttr(DtcDialect::kScopeAttr, b.getStringAttr(when))};
  };
  // The sender: the producer's device returns the value.
  Device &src = devices[source];
  Value sent = src.mapping.lookup(global);
  if (!sent)
    return user->emitError()
           << "internal error: a value is sent before it is computed";
  SmallVector<NamedAttribute> sendAttrs = common(d, from);
  sendAttrs.push_back(roleAttr(ctx, Role::Send));
  src.results.push_back(sent);
  src.resultAttrs.push_back(b.getDictionaryAttr(sendAttrs));
  // The receiver: a new argument.
  recv = dev.body->addArgument(global.getType(), global.getLoc());
  SmallVector<NamedAttribute> recvAttrs = common(source, vstage);
  recvAttrs.push_back(roleAttr(ctx, Role::Recv));
  dev.argAttrs.push_back(b.getDictionaryAttr(recvAttrs));
  return recv;
}

LogicalResult Splitter::place() {
  Block &body = step.getBody().front();
  // Layers and the virtual stage the plan's cuts give each.
  FailureOr<int64_t> counted = countLayers(step);
  if (failed(counted))
    return failure();
  const int64_t layers = *counted;
  if ((int64_t)plan.stageCuts.size() != plan.virtualStageCount() - 1)
    return step.emitError()
           << "the plan has no stage cuts for its " << plan.virtualStageCount()
           << " virtual stages (run dtc-balance-stages)";
  if (!plan.stageCuts.empty() && plan.stageCuts.back() >= layers)
    return step.emitError()
           << "the plan cuts a stage at layer " << plan.stageCuts.back()
           << " but the model has " << layers << " layers";
  SmallVector<int64_t> stageOfLayer;
  for (int64_t layer = 0; layer < layers; ++layer)
    stageOfLayer.push_back(plan.virtualStageOfLayer(layer));

  // Where parameters are read (outside their updates).
  auto isUpdate = [&](Operation &op) {
    if (!isa<InPlaceOpInterface>(op))
      return false;
    return llvm::any_of(op.getUsers(),
                        [](Operation *u) { return isa<func::ReturnOp>(u); });
  };
  llvm::DenseMap<Value, llvm::SetVector<int64_t>> readers;
  for (Operation &op : body) {
    if (isa<func::ReturnOp>(op) || isa<arith::ConstantOp>(op))
      continue;
    int64_t k =
        stageOfLayer[op.getAttrOfType<IntegerAttr>(DtcDialect::kLayerAttr)
                         .getInt()];
    if (!isUpdate(op)) {
      vstageOf[&op] = k;
      for (Value operand : op.getOperands())
        if (isa<BlockArgument>(operand))
          readers[operand].insert(k);
    }
  }
  // Master weights (mixed precision) are updated wherever their parameter
  // is read: the new parameter is the new master rounded.
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    auto kind =
        step.getArgAttrOfType<StringAttr>(i, DtcDialect::kStateKindAttr);
    auto of = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kOfAttr);
    if (!kind || kind.getValue() != "master" || !of)
      continue;
    for (unsigned j = 0; j < step.getNumArguments(); ++j) {
      auto name = step.getArgAttrOfType<StringAttr>(j, DtcDialect::kNameAttr);
      if (argRole(step, j) == Role::Param && name == of)
        for (int64_t k : readers.lookup(step.getArgument(j)))
          readers[step.getArgument(i)].insert(k);
    }
  }
  for (Operation &op : body) {
    if (!isUpdate(op))
      continue;
    // One update per pipeline stage holding the parameter (on the first of
    // its virtual stages there).
    Value param = op.getOperand(0);
    int64_t home =
        stageOfLayer[op.getAttrOfType<IntegerAttr>(DtcDialect::kLayerAttr)
                         .getInt()];
    std::map<int64_t, int64_t> perDevice;
    perDevice[deviceOf(home)] = home;
    for (int64_t k : readers.lookup(param)) {
      auto [it, inserted] = perDevice.emplace(deviceOf(k), k);
      if (!inserted && it->second != home)
        it->second = std::min(it->second, k);
    }
    for (auto [d, k] : perDevice)
      updateStages[&op].push_back(k);
  }
  // Ops computing from an update's result (mixed precision's cast of the
  // new master weights to the parameter's type) run where the update runs.
  for (Operation &op : body) {
    if (isa<func::ReturnOp>(op) || isa<arith::ConstantOp>(op) ||
        updateStages.count(&op))
      continue;
    for (Value operand : op.getOperands())
      if (Operation *def = operand.getDefiningOp())
        if (auto it = updateStages.find(def); it != updateStages.end()) {
          SmallVector<int64_t> stages = it->second;
          updateStages[&op] = stages;
          break;
        }
  }
  return success();
}

LogicalResult Splitter::run() {
  if (failed(planShardings()) || failed(place()))
    return failure();
  MLIRContext *ctx = step.getContext();
  OpBuilder b(ctx);
  b.setInsertionPointAfter(step);
  for (int64_t d = 0; d < stages; ++d) {
    Device dev;
    std::string name =
        stages == 1 ? step.getName().str()
                    : (step.getName() + "_stage" + std::to_string(d)).str();
    dev.func = func::FuncOp::create(b, step.getLoc(), name,
                                    FunctionType::get(ctx, {}, {}));
    dev.body = dev.func.addEntryBlock();
    devices.push_back(std::move(dev));
  }

  // Ops in forward, B, W, optimizer order (a topological order: forward
  // needs nothing later, B only forward and B, W all of those), so that no
  // value of a later phase is computed before an earlier phase reads it.
  Block &body = step.getBody().front();
  SmallVector<Operation *> ordered;
  for (Operation &op : body)
    if (!isa<func::ReturnOp>(op) && !isa<arith::ConstantOp>(op))
      ordered.push_back(&op);
  llvm::stable_sort(ordered, [](Operation *a, Operation *b) {
    return phaseRank(a) < phaseRank(b);
  });

  for (Operation *op : ordered) {
    SmallVector<int64_t> where;
    if (auto it = updateStages.find(op); it != updateStages.end())
      where = it->second;
    else
      where = {vstageOf.lookup(op)};
    for (int64_t k : where) {
      int64_t d = deviceOf(k);
      Device &dev = devices[d];
      IRMapping operands;
      for (Value operand : op->getOperands()) {
        FailureOr<Value> local = operandOn(dev, d, k, operand, op);
        if (failed(local))
          return failure();
        operands.map(operand, *local);
      }
      OpBuilder at = OpBuilder::atBlockEnd(dev.body);
      Operation *clone = at.clone(*op, operands);
      clone->setAttr(DtcDialect::kStageAttr, at.getI64IntegerAttr(k));
      for (auto [global, local] :
           llvm::zip(op->getResults(), clone->getResults()))
        dev.mapping.map(global, local);
    }
  }

  // Results: the loss and gradients where they are computed, every update
  // where it runs (naming the local argument it updates), then the sends.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (int64_t d = 0; d < stages; ++d) {
    Device &dev = devices[d];
    SmallVector<Value> results;
    SmallVector<DictionaryAttr> attrs;
    for (auto [idx, operand] : llvm::enumerate(ret.getOperands())) {
      DictionaryAttr resultAttrs = step.getResultAttrDict(idx);
      Operation *def = operand.getDefiningOp();
      if (!def || isa<arith::ConstantOp>(def)) {
        // A constant (a parameter that never reaches the loss returns a
        // zero gradient): returned by the first stage.
        if (d != 0)
          continue;
        FailureOr<Value> local = operandOn(dev, d, 0, operand, ret);
        if (failed(local))
          return failure();
        results.push_back(*local);
        attrs.push_back(resultAttrs);
        continue;
      }
      if (updateStages.count(def)) {
        if (!llvm::any_of(updateStages[def],
                          [&](int64_t k) { return deviceOf(k) == d; }))
          continue;
        auto updates = step.getResultAttrOfType<IntegerAttr>(
            idx, DtcDialect::kUpdatesAttr);
        if (!updates)
          return ret.emitError() << "an update result without dtc.updates";
        Value localArg = argumentOn(dev, step.getArgument(updates.getInt()));
        NamedAttrList list(resultAttrs);
        list.set(
            DtcDialect::kUpdatesAttr,
            b.getI64IntegerAttr(cast<BlockArgument>(localArg).getArgNumber()));
        results.push_back(dev.mapping.lookup(operand));
        attrs.push_back(list.getDictionary(ctx));
        continue;
      }
      if (deviceOf(vstageOf.lookup(def)) != d)
        continue;
      results.push_back(dev.mapping.lookup(operand));
      attrs.push_back(resultAttrs);
    }
    results.append(dev.results.begin(), dev.results.end());
    attrs.append(dev.resultAttrs.begin(), dev.resultAttrs.end());
    OpBuilder at = OpBuilder::atBlockEnd(dev.body);
    func::ReturnOp::create(at, ret.getLoc(), results);
    SmallVector<Type> argTypes(dev.body->getArgumentTypes()), resultTypes;
    for (Value v : results)
      resultTypes.push_back(v.getType());
    dev.func.setFunctionType(FunctionType::get(ctx, argTypes, resultTypes));
    dev.func.setAllArgAttrs(dev.argAttrs);
    dev.func.setAllResultAttrs(attrs);
    dev.func->setAttr(DtcDialect::kTrainStepAttr, b.getUnitAttr());
    dev.func->setAttr(DtcDialect::kPipelineStageAttr, b.getI64IntegerAttr(d));
  }
  step.erase();
  return success();
}

struct SplitPipelinePass : impl::SplitPipelineBase<SplitPipelinePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<Plan> plan = getPlan(module);
    if (!plan || !plan->pipelined())
      return;
    func::FuncOp step = findTrainStep(module);
    if (!step) {
      module.emitError()
          << "expected exactly one training step to split into pipeline stages";
      return signalPassFailure();
    }
    FailureOr<SmallVector<int64_t>> shape = getGridShape(module, plan->grid);
    if (failed(shape))
      return signalPassFailure();
    Splitter splitter;
    splitter.step = step;
    splitter.plan = *plan;
    splitter.grid = splitter.plan.grid;
    splitter.gridShape = *shape;
    splitter.mbAxes = plan->microbatchAxes;
    splitter.stages = plan->pp;
    splitter.chunks = plan->virtualStages;
    if (failed(splitter.run()))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::dtc
