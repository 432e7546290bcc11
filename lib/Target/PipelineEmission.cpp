//===- PipelineEmission.cpp - the program of one pipeline stage ----------===//
//
// A stage function's ops are sorted into instruction lists by when their
// values exist (docs/artifact.md "Pipelines"): one list before the
// micro-batches, a forward, backward-input and backward-weight list per
// chunk that runs once per micro-batch, and one list after them. Messages
// between stages become sends and receives, sums over the micro-batches
// become fill + accumulate, and each chunk slices its micro-batch's rows
// of a per-micro-batch input. The schedule orders the lists at run time.
//
//===----------------------------------------------------------------------===//
#include "EmitterInternal.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/artifact/Schedule.h"

using namespace mlir;
using namespace mlir::dtc;
using namespace mlir::dtc::emitter;

namespace {

/// One entry of a pipeline program's instruction lists.
struct Item {
  enum Kind {
    Op,
    Recv,
    Slice,
    Fill,
    Accumulate,
    ReduceRest,
    Send,
    Return
  } kind;
  Operation *op = nullptr; // Op, ReduceRest (the all-reduce), Return
  Value value; // Recv, Slice (the input), Fill / Accumulate / ReduceRest / Send
  Value source;                    // Accumulate: the micro-batch's partial sum
  int64_t chunk = 0;               // Slice
  int64_t message = -1, peer = -1; // Recv, Send
};

/// Emits the program of one stage function in steps: when values exist,
/// which list each op runs in, the items of every list, their positions
/// and lifetimes, then the instructions.
class StageEmitter {
public:
  StageEmitter(ProgramEmitter &program, const json &pipeline);
  FailureOr<json> emit();

private:
  // 1. When every value exists.
  LogicalResult classifyValues();
  // 2. Which list each op runs in: 0 before the micro-batches, 1 + 3c + p
  //    for phase p of chunk c per micro-batch, 1 + 3v after them.
  void assignChunks();
  LogicalResult assignLists();
  void deferOptimizerWork();
  // 3. The items of every list.
  LogicalResult collectSends();
  void buildItems();
  /// The order in which the body's ops become items.
  std::vector<Operation *> itemOrder();
  void queueMicroBatchSum(shard::AllReduceOp reduce,
                          std::vector<Item> &postFront);
  void queueSlices(Operation &op, int64_t list);
  void queueSends(Value v, std::vector<Item> &list);
  LogicalResult placeRecvs();
  // 4. Positions (pre, chunk 0 F B W, chunk 1 ..., post) and lifetimes.
  void numberPositions();
  void recordReads();
  void assignPools();
  void extendThroughViews();
  // 5. Emit.
  LogicalResult emitLists();
  LogicalResult emitItem(const Item &item, int64_t at);
  LogicalResult emitRecv(const Item &item);
  LogicalResult emitSend(const Item &item, int64_t at);
  LogicalResult emitSlice(const Item &item);
  LogicalResult emitFill(const Item &item);
  LogicalResult emitAccumulate(const Item &item, int64_t at);
  LogicalResult emitReduceRest(const Item &item);
  // 6. The program.
  std::vector<int> stageRanks() const;
  json assemble();

  std::optional<int64_t> chunkOfValue(Value v);
  int64_t listOfValue(Value v);
  bool isMicroBatchReduce(Operation *op) const;
  /// Whether `arg` is a message received from another stage.
  bool isRecv(BlockArgument arg) const;
  /// Whether `item` reads `v` (a folded transpose reads its source).
  bool reads(const Item &item, Value v) const;
  FailureOr<int> bufferOfValue(Value v);
  /// The communicator of messages between stages.
  FailureOr<std::string> pointToPoint();

  ProgramEmitter &program;
  SlotPlan &memory;
  func::FuncOp step;
  Block &body;
  const PlanInfo &plan;
  const json &pipe;
  int64_t stages, chunks, stage, lists, post;

  llvm::DenseMap<Value, ValueScope> scope;
  llvm::DenseMap<Operation *, int64_t> chunkOf, listOf;
  std::vector<std::vector<Item>> items;
  llvm::DenseMap<Value, SmallVector<std::pair<int64_t, int64_t>, 1>>
      sends; // value -> (message, peer)
  /// Per-micro-batch inputs: each chunk slices its micro-batch's rows at
  /// its first use.
  std::map<std::pair<void *, int64_t>, int> sliced; // (input, chunk) -> buffer
  std::map<std::pair<void *, int64_t>, bool> sliceQueued;
  std::vector<std::vector<int64_t>> position;
  int64_t mbBlockEnd = 0;
  llvm::DenseMap<Value, int64_t> definedIn;
  llvm::DenseMap<Value, bool> readElsewhere, readPerMicroBatch;
  /// Whether this stage's schedule runs every backward-weight list right
  /// after its backward-input list (every schedule but zb). The weight
  /// gradients then run in the backward-input list, each where autodiff
  /// put it: a separate list would keep every layer's values for the
  /// weight gradients (under recomputation, every layer's recomputed
  /// forward) alive until the whole backward-input list is done.
  bool backwardRunsWhole = false;
  /// The list of phase p (0 forward, 1 backward-input, 2 backward-weight)
  /// of chunk c.
  int64_t microBatchList(int64_t c, int64_t p) const {
    return 1 + 3 * c + (p == 2 && backwardRunsWhole ? 1 : p);
  }
  llvm::DenseMap<Value, int> wholeInput; // per-micro-batch input -> all rows
  std::vector<json> listJson;
};

StageEmitter::StageEmitter(ProgramEmitter &program, const json &pipeline)
    : program(program), memory(program.memory), step(program.step),
      body(program.step.getBody().front()), plan(program.plan), pipe(pipeline) {
  stages = pipe.value("stages", int64_t(1));
  chunks = pipe.value("virtual_stages", int64_t(1));
  auto stageAttr =
      step->getAttrOfType<IntegerAttr>(DtcDialect::kPipelineStageAttr);
  stage = stageAttr ? stageAttr.getInt() : 0;
  lists = 2 + 3 * chunks;
  post = lists - 1;
  std::vector<::dtc::sched::Action> actions;
  std::string scheduleError;
  if (pipe.contains("per_stage") && stage < int64_t(pipe["per_stage"].size()) &&
      ::dtc::sched::actionsFromJson(pipe["per_stage"][stage], actions,
                                    scheduleError)) {
    // zb's first stage runs each W right after its B too (there is no
    // earlier stage waiting for B's message).
    backwardRunsWhole = true;
    for (size_t i = 0; i < actions.size(); ++i) {
      const ::dtc::sched::Action &a = actions[i];
      if (a.kind == ::dtc::sched::Kind::Backward &&
          (i + 1 == actions.size() ||
           actions[i + 1].kind != ::dtc::sched::Kind::Weight ||
           actions[i + 1].microbatch != a.microbatch ||
           actions[i + 1].chunk != a.chunk))
        backwardRunsWhole = false;
    }
  }
  items.resize(lists);
  position.resize(lists);
}

FailureOr<json> StageEmitter::emit() {
  if (failed(classifyValues()))
    return failure();
  assignChunks();
  if (failed(assignLists()))
    return failure();
  deferOptimizerWork();
  program.foldTransposes();
  if (failed(collectSends()))
    return failure();
  buildItems();
  if (failed(placeRecvs()))
    return failure();
  numberPositions();
  recordReads();
  assignPools();
  extendThroughViews();
  if (failed(emitLists()))
    return failure();
  return assemble();
}

bool StageEmitter::isMicroBatchReduce(Operation *op) const {
  auto reduce = dyn_cast<shard::AllReduceOp>(op);
  return reduce && llvm::any_of(reduce.getGridAxes(), [&](int16_t a) {
           return plan.isMicroBatchAxis(a);
         });
}

//===----------------------------------------------------------------------===//
// 1-2. Scopes, chunks and lists
//===----------------------------------------------------------------------===//

LogicalResult StageEmitter::classifyValues() {
  if (failed(classifyScopes(step, plan.microBatchAxes, scope)))
    return failure();
  memory.gathered = gatheredParameters(step);
  return success();
}

std::optional<int64_t> StageEmitter::chunkOfValue(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    if (auto k = step.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(),
                                                    DtcDialect::kStageAttr))
      return k.getInt() / stages;
    return std::nullopt;
  }
  if (auto it = chunkOf.find(v.getDefiningOp()); it != chunkOf.end())
    return it->second;
  return std::nullopt;
}

void StageEmitter::assignChunks() {
  for (Operation &op : body)
    if (auto k = op.getAttrOfType<IntegerAttr>(DtcDialect::kStageAttr))
      chunkOf[&op] = k.getInt() / stages;
  // Collectives and rescales the partitioner added: their operands' chunk,
  // else their users'.
  for (Operation &op : body)
    if (!chunkOf.count(&op))
      for (Value operand : op.getOperands())
        if (auto c = chunkOfValue(operand)) {
          chunkOf[&op] = *c;
          break;
        }
  for (Operation &op : llvm::reverse(body))
    if (!chunkOf.count(&op))
      for (Operation *user : op.getUsers())
        if (auto it = chunkOf.find(user); it != chunkOf.end()) {
          const int64_t chunk = it->second; // before inserting moves it
          chunkOf[&op] = chunk;
          break;
        }
}

LogicalResult StageEmitter::assignLists() {
  for (Operation &op : body) {
    if (isa<func::ReturnOp>(op) || op.getNumResults() == 0)
      continue;
    ValueScope s = scope.lookup(op.getResult(0));
    if (isMicroBatchReduce(&op) || s == ValueScope::Accumulated) {
      listOf[&op] = post;
      continue;
    }
    if (s == ValueScope::Step) {
      listOf[&op] = 0;
      continue;
    }
    auto phase = op.getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);
    int64_t p = phase ? phaseList(phase.getValue()) : -1;
    if (p < 0)
      return op.emitError()
             << "internal error: a per-micro-batch op ('" << op.getName()
             << "') outside the forward and backward phases";
    listOf[&op] = microBatchList(chunkOf.lookup(&op), p);
  }
  return success();
}

void StageEmitter::deferOptimizerWork() {
  // Once-per-step work of the optimizer (ZeRO-1's slice of a whole
  // parameter for its update) runs after the flush when everything reading
  // it does, rather than holding its bytes through the micro-batches; not
  // what leaves the step (the return, a message).
  for (Operation &op : llvm::reverse(body)) {
    auto phase = op.getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);
    if (op.getNumResults() && listOf.lookup(&op) == 0 && phase &&
        phase.getValue() == artifactPhaseName(ArtifactPhase::Optimizer) &&
        !op.use_empty() && llvm::all_of(op.getUsers(), [&](Operation *user) {
          return !isa<func::ReturnOp>(user) && listOf.lookup(user) == post;
        }))
      listOf[&op] = post;
  }
  for (auto &[op, list] : listOf)
    if (list == post && !isMicroBatchReduce(op) && op->getNumResults() == 1 &&
        (isa<PadOp, FillPaddingOp>(op) ||
         isa<shard::ShardDialect>(op->getDialect())))
      memory.updatePieces.insert(op->getResult(0));
}

int64_t StageEmitter::listOfValue(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    unsigned i = arg.getArgNumber();
    ValueScope s = scope.lookup(v);
    if (s == ValueScope::Step)
      return 0;
    if (s == ValueScope::Accumulated)
      return post;
    auto phase = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kPhaseAttr);
    int64_t p = phase ? phaseList(phase.getValue()) : 0;
    return microBatchList(chunkOfValue(v).value_or(0), std::max<int64_t>(p, 0));
  }
  return listOf.lookup(v.getDefiningOp());
}

//===----------------------------------------------------------------------===//
// 3. Items
//===----------------------------------------------------------------------===//

LogicalResult StageEmitter::collectSends() {
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (auto [idx, value] : llvm::enumerate(ret.getOperands())) {
    if (resultRole(step, unsigned(idx)) != Role::Send)
      continue;
    auto message =
        step.getResultAttrOfType<IntegerAttr>(idx, DtcDialect::kMessageAttr);
    auto peer =
        step.getResultAttrOfType<IntegerAttr>(idx, DtcDialect::kPeerAttr);
    if (!message || !peer)
      return ret.emitError() << "a send without dtc.message and dtc.peer";
    sends[value].push_back({message.getInt(), peer.getInt()});
  }
  return success();
}

void StageEmitter::queueSends(Value v, std::vector<Item> &list) {
  for (auto [message, peer] : sends.lookup(v)) {
    Item send{Item::Send};
    send.value = v;
    send.message = message;
    send.peer = peer;
    list.push_back(send);
  }
}

void StageEmitter::queueMicroBatchSum(shard::AllReduceOp reduce,
                                      std::vector<Item> &postFront) {
  Value partial = reduce.getInput(), sum = reduce.getResult();
  Item fill{Item::Fill};
  fill.value = sum;
  items[0].push_back(fill);
  Item acc{Item::Accumulate};
  acc.value = sum;
  acc.source = partial;
  // Added to the sum as soon as it is made, so that a micro-batch's partial
  // gradient does not live to the end of its list (every parameter's at
  // once: another copy of the gradients).
  std::vector<Item> &list = items[listOfValue(partial)];
  Value made = partial;
  if (Value source = program.foldedTransposes.lookup(made))
    made = source;
  auto madeBy = llvm::find_if(llvm::reverse(list), [&](const Item &item) {
    return item.kind == Item::Op && item.op == made.getDefiningOp();
  });
  list.insert(madeBy == list.rend() ? list.end() : madeBy.base(), acc);
  if (llvm::any_of(reduce.getGridAxes(),
                   [&](int16_t a) { return !plan.isMicroBatchAxis(a); })) {
    Item rest{Item::ReduceRest};
    rest.op = reduce;
    rest.value = sum;
    postFront.push_back(rest);
  }
  queueSends(sum, postFront);
}

void StageEmitter::queueSlices(Operation &op, int64_t list) {
  for (Value operand : op.getOperands()) {
    if (Value source = program.foldedTransposes.lookup(operand))
      operand = source;
    auto arg = dyn_cast<BlockArgument>(operand);
    if (!arg || scope.lookup(arg) != ValueScope::MicroBatch)
      continue;
    if (isRecv(arg))
      continue;
    int64_t chunk = (list - 1) / 3;
    bool &queued = sliceQueued[{arg.getAsOpaquePointer(), chunk}];
    if (queued)
      continue;
    queued = true;
    Item slice{Item::Slice};
    slice.value = arg;
    slice.chunk = chunk;
    items[list].push_back(slice);
  }
}

std::vector<Operation *> StageEmitter::itemOrder() {
  std::vector<Operation *> order;
  if (!backwardRunsWhole) {
    for (Operation &op : body)
      order.push_back(&op);
    return order;
  }
  // The split put every backward-weight op after the whole backward-input
  // phase. In a merged list each runs right after the last of its operands
  // made in that list (or at its start): what it reads (a gradient, a
  // recomputed activation) then dies with its layer, not at the end of the
  // backward.
  auto isWeightOp = [&](Operation &op) {
    auto phase = op.getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);
    const int64_t list = listOf.lookup(&op);
    return phase &&
           phase.getValue() ==
               artifactPhaseName(ArtifactPhase::BackwardWeight) &&
           list >= 1 && list < post && !isMicroBatchReduce(&op);
  };
  llvm::DenseMap<Operation *, int64_t> index, anchor;
  // Per list, the index of the op just before its first op: where a weight
  // op that reads nothing made in its list goes (the start of its list, not
  // of the body, which would put it before other lists' first readers of
  // the inputs it shares with them).
  llvm::DenseMap<int64_t, int64_t> listStart;
  std::vector<std::vector<Operation *>> after(1);
  for (Operation &op : body) {
    if (!isWeightOp(op)) {
      listStart.try_emplace(listOf.lookup(&op), int64_t(after.size()) - 1);
      index[&op] = int64_t(after.size());
      after.emplace_back();
      continue;
    }
    const int64_t list = listOf.lookup(&op);
    int64_t at = listStart.lookup(list);
    for (Value operand : op.getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (!def || listOf.lookup(def) != list)
        continue;
      if (auto it = anchor.find(def); it != anchor.end())
        at = std::max(at, it->second);
      else if (auto it = index.find(def); it != index.end())
        at = std::max(at, it->second);
    }
    anchor[&op] = at;
    after[size_t(at)].push_back(&op);
  }
  order.insert(order.end(), after[0].begin(), after[0].end());
  for (Operation &op : body) {
    if (isWeightOp(op))
      continue;
    order.push_back(&op);
    const auto &then = after[size_t(index[&op])];
    order.insert(order.end(), then.begin(), then.end());
  }
  return order;
}

void StageEmitter::buildItems() {
  // Sums over the micro-batches are complete when the list after them
  // starts: their remaining reduction and their sends go first, so no stage
  // waits for a message another stage would send only later.
  std::vector<Item> postFront;
  for (Operation *opPtr : itemOrder()) {
    Operation &op = *opPtr;
    if (isa<func::ReturnOp>(op)) {
      Item r{Item::Return};
      r.op = &op;
      items[post].push_back(r);
      continue;
    }
    if (isa<arith::ConstantOp>(op))
      continue;
    if (op.getNumResults() && program.foldedTransposes.count(op.getResult(0)))
      continue;
    if (isMicroBatchReduce(&op)) {
      queueMicroBatchSum(cast<shard::AllReduceOp>(op), postFront);
      continue;
    }
    int64_t list = listOf.lookup(&op);
    if (list >= 1 && list < post)
      queueSlices(op, list);
    Item item{Item::Op};
    item.op = &op;
    items[list].push_back(item);
    for (Value r : op.getResults())
      queueSends(r, items[list]);
  }
  items[post].insert(items[post].begin(), postFront.begin(), postFront.end());
}

bool StageEmitter::isRecv(BlockArgument arg) const {
  return argRole(step, arg.getArgNumber()) == Role::Recv;
}

bool StageEmitter::reads(const Item &item, Value v) const {
  auto is = [&](Value x) {
    if (Value source = program.foldedTransposes.lookup(x))
      x = source;
    return x == v;
  };
  switch (item.kind) {
  case Item::Op:
  case Item::Return:
    return llvm::any_of(item.op->getOperands(), is);
  case Item::Accumulate:
    return is(item.source);
  case Item::Send:
  case Item::ReduceRest:
    return is(item.value);
  default:
    return false;
  }
}

LogicalResult StageEmitter::placeRecvs() {
  // Receives wait as late as they can: right before their first reader in
  // their list (the end of it when only a later list reads them).
  for (BlockArgument arg : step.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (!isRecv(arg))
      continue;
    auto message =
        step.getArgAttrOfType<IntegerAttr>(i, DtcDialect::kMessageAttr);
    auto peer = step.getArgAttrOfType<IntegerAttr>(i, DtcDialect::kPeerAttr);
    if (!message || !peer)
      return emitError(arg.getLoc())
             << "a recv without dtc.message and dtc.peer";
    Item recv{Item::Recv};
    recv.value = arg;
    recv.message = message.getInt();
    recv.peer = peer.getInt();
    std::vector<Item> &list = items[listOfValue(arg)];
    auto first =
        llvm::find_if(list, [&](const Item &item) { return reads(item, arg); });
    list.insert(first, recv);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// 4. Positions and lifetimes
//===----------------------------------------------------------------------===//

void StageEmitter::numberPositions() {
  int64_t pos = 0;
  for (int64_t l = 0; l < lists; ++l) {
    for (size_t i = 0; i < items[l].size(); ++i)
      position[l].push_back(pos++);
    if (l == post - 1)
      mbBlockEnd = pos;
  }
}

void StageEmitter::recordReads() {
  auto read = [&](Value v, int64_t list, int64_t at) {
    if (Value source = program.foldedTransposes.lookup(v))
      v = source;
    memory.lastUse[v] = std::max(memory.lastUse.lookup(v), at);
    if (list >= 1 && list < post)
      readPerMicroBatch[v] = true;
    auto it = definedIn.find(v);
    if (it == definedIn.end() || it->second != list)
      readElsewhere[v] = true;
  };
  for (int64_t l = 0; l < lists; ++l)
    for (auto [i, item] : llvm::enumerate(items[l])) {
      int64_t at = position[l][i];
      switch (item.kind) {
      case Item::Op:
        for (Value operand : item.op->getOperands())
          read(operand, l, at);
        for (Value r : item.op->getResults())
          definedIn[r] = l;
        break;
      case Item::Recv:
      case Item::Fill:
        definedIn[item.value] = l;
        break;
      case Item::Accumulate:
        read(item.source, l, at);
        read(item.value, l, at);
        break;
      case Item::ReduceRest:
      case Item::Send:
        read(item.value, l, at);
        break;
      case Item::Return:
        // A sent value is read by its send, where it is computed; the
        // return only names it.
        for (auto [idx, operand] : llvm::enumerate(item.op->getOperands()))
          if (resultRole(step, unsigned(idx)) != Role::Send)
            read(operand, l, at);
        break;
      case Item::Slice:
        break;
      }
    }
}

void StageEmitter::assignPools() {
  for (auto &[v, s] : scope) {
    if (s == ValueScope::MicroBatch) {
      int64_t list = definedIn.count(v) ? definedIn[v] : 0;
      // A micro-batch's copy holds what it keeps from one list to another
      // (a forward's activations for its backward); what one list makes
      // and reads, a received gradient or an activation sent on, is
      // working memory (one copy). The inputs' slices have slots of their
      // own per chunk.
      bool received = isa<BlockArgument>(v) && isRecv(cast<BlockArgument>(v));
      bool cross =
          readElsewhere.lookup(v) || (isa<BlockArgument>(v) && !received);
      if (list >= 1 && list < post)
        memory.pools[v] = {cross ? Pool::MicroBatch : Pool::Temp,
                           int((list - 1) / 3)};
    } else if (readPerMicroBatch.lookup(v)) {
      // Read by every micro-batch: alive through all of them.
      memory.lastUse[v] = std::max(memory.lastUse.lookup(v), mbBlockEnd);
    }
  }
}

void StageEmitter::extendThroughViews() {
  // Views share their operand's bytes, and so may an all-reduce done in
  // place: a per-micro-batch value read through them lives in a copy per
  // micro-batch if they are read by a later list. (Its slot stays alive
  // while they are: each buffer of a slot counts as a live value there.)
  for (Operation &op : llvm::reverse(body))
    if ((isa<ViewOpInterface>(op) || isa<shard::AllReduceOp>(op)) &&
        op.getNumOperands() && op.getNumResults()) {
      Value operand = op.getOperand(0), view = op.getResult(0);
      auto viewPool = memory.pools.find(view),
           operandPool = memory.pools.find(operand);
      if (viewPool != memory.pools.end() &&
          viewPool->second.first == Pool::MicroBatch &&
          operandPool != memory.pools.end())
        operandPool->second = viewPool->second;
    }
}

//===----------------------------------------------------------------------===//
// 5. Instructions
//===----------------------------------------------------------------------===//

FailureOr<int> StageEmitter::bufferOfValue(Value v) {
  auto it = memory.bufferOf.find(v);
  if (it == memory.bufferOf.end())
    return step.emitError()
           << "internal error: a value has no buffer when it is read";
  return it->second;
}

FailureOr<std::string> StageEmitter::pointToPoint() {
  if (plan.pipelineAxes.empty())
    return step.emitError()
           << "messages between stages but the plan has no pp axes";
  return program.tables.communicator(
      SmallVector<int16_t>(plan.pipelineAxes.begin(), plan.pipelineAxes.end()));
}

LogicalResult StageEmitter::emitLists() {
  if (failed(program.emitArguments()))
    return failure();
  for (BlockArgument arg : step.getArguments())
    if (scope.lookup(arg) == ValueScope::MicroBatch &&
        memory.bufferOf.count(arg))
      wholeInput[arg] = memory.bufferOf[arg];
  for (Operation &op : body)
    if (auto constant = dyn_cast<arith::ConstantOp>(op))
      if (failed(program.emitConstant(constant)))
        return failure();
  listJson.assign(lists, json::array());
  for (int64_t l = 0; l < lists; ++l) {
    program.current = &listJson[l];
    // A chunk's ops read its micro-batch's slice of an input.
    for (auto &[arg, whole] : wholeInput) {
      memory.bufferOf[arg] = whole;
      if (l >= 1 && l < post)
        if (auto it = sliced.find({arg.getAsOpaquePointer(), (l - 1) / 3});
            it != sliced.end())
          memory.bufferOf[arg] = it->second;
    }
    for (auto [i, item] : llvm::enumerate(items[l]))
      if (failed(emitItem(item, position[l][i])))
        return failure();
  }
  return success();
}

LogicalResult StageEmitter::emitItem(const Item &item, int64_t at) {
  switch (item.kind) {
  case Item::Op:
    return program.emitOp(item.op, at); // emitOp releases what dies
  case Item::Recv:
    return emitRecv(item);
  case Item::Send:
    return emitSend(item, at);
  case Item::Slice:
    return emitSlice(item);
  case Item::Fill:
    return emitFill(item);
  case Item::Accumulate:
    return emitAccumulate(item, at);
  case Item::ReduceRest:
    return emitReduceRest(item);
  case Item::Return:
    return program.emitReturn(cast<func::ReturnOp>(item.op));
  }
  llvm_unreachable("unknown item");
}

LogicalResult StageEmitter::emitRecv(const Item &item) {
  FailureOr<std::string> comm = pointToPoint();
  FailureOr<int> out =
      succeeded(comm)
          ? memory.allocate(item.value, memory.categoryOf(item.value))
          : FailureOr<int>(failure());
  if (failed(out))
    return failure();
  program.instruction(
      pipelineOpName(PipelineOp::Recv), {}, {*out},
      {{"comm", *comm}, {"peer", item.peer}, {"message", item.message}},
      nullptr);
  if (item.value.use_empty())
    memory.release(item.value);
  return success();
}

LogicalResult StageEmitter::emitSend(const Item &item, int64_t at) {
  FailureOr<std::string> comm = pointToPoint();
  FailureOr<int> in =
      succeeded(comm) ? bufferOfValue(item.value) : FailureOr<int>(failure());
  if (failed(in))
    return failure();
  program.instruction(
      pipelineOpName(PipelineOp::Send), {*in}, {},
      {{"comm", *comm}, {"peer", item.peer}, {"message", item.message}},
      nullptr);
  // A value sent as the last thing its list does with it frees its slot
  // here: whatever the slot holds next waits for the send (the runtime
  // orders a slot's reuse after the messages that read it).
  if (memory.lastUse.lookup(item.value) == at)
    memory.release(item.value);
  return success();
}

LogicalResult StageEmitter::emitSlice(const Item &item) {
  BlockArgument arg = cast<BlockArgument>(item.value);
  auto attr = step.getArgAttrOfType<ShardingAttr>(arg.getArgNumber(),
                                                  DtcDialect::kShardingAttr);
  int64_t axis = -1;
  for (auto [d, dim] : llvm::enumerate(attr.getDims()))
    if (llvm::any_of(dim.asArrayRef(),
                     [&](int64_t a) { return plan.isMicroBatchAxis(a); }))
      axis = d;
  // The micro-batch's rows, in a slot of its own for this chunk (the
  // input's buffer holds every micro-batch).
  int slot = memory.newSlot(0, MemoryCategory::Activation, /*pinned=*/true,
                            int(item.chunk));
  FailureOr<int> piece =
      memory.newBuffer(slot, arg, arg.getLoc(), std::nullopt, /*bind=*/false);
  if (failed(piece))
    return failure();
  int whole = wholeInput.lookup(arg);
  program.instruction(pipelineOpName(PipelineOp::MicrobatchSlice), {whole},
                      {*piece}, {{"axis", axis}}, nullptr);
  sliced[{arg.getAsOpaquePointer(), item.chunk}] = *piece;
  memory.bufferOf[arg] = *piece;
  return success();
}

LogicalResult StageEmitter::emitFill(const Item &item) {
  FailureOr<int> out =
      memory.allocate(item.value, memory.categoryOf(item.value));
  if (failed(out))
    return failure();
  program.instruction(pipelineOpName(PipelineOp::Fill), {}, {*out},
                      {{"value", 0.0}}, item.value.getDefiningOp());
  return success();
}

LogicalResult StageEmitter::emitAccumulate(const Item &item, int64_t at) {
  FailureOr<int> in = bufferOfValue(item.source),
                 out = bufferOfValue(item.value);
  if (failed(in) || failed(out))
    return failure();
  program.instruction(pipelineOpName(PipelineOp::Accumulate), {*in}, {*out},
                      json::object(), item.source.getDefiningOp());
  if (memory.lastUse.lookup(item.source) == at)
    memory.release(item.source);
  return success();
}

LogicalResult StageEmitter::emitReduceRest(const Item &item) {
  auto reduce = cast<shard::AllReduceOp>(item.op);
  SmallVector<int16_t> rest;
  for (int16_t a : reduce.getGridAxes())
    if (!plan.isMicroBatchAxis(a))
      rest.push_back(a);
  FailureOr<std::string> comm = program.tables.communicator(rest);
  FailureOr<int> buffer =
      succeeded(comm) ? bufferOfValue(item.value) : FailureOr<int>(failure());
  if (failed(buffer))
    return failure();
  program.instruction(collectiveName(CollectiveKind::AllReduce), {*buffer},
                      {*buffer},
                      {{"comm", *comm},
                       {"reduction", reductionName(shard::ReductionKind::Sum)}},
                      item.op);
  return success();
}

//===----------------------------------------------------------------------===//
// 6. The program
//===----------------------------------------------------------------------===//

/// The devices running this stage: those whose coordinates on the pp axes
/// (row-major over the device grid) number `stage`.
std::vector<int> StageEmitter::stageRanks() const {
  ArrayRef<int64_t> grid = plan.grid;
  size_t mbCount = plan.microBatchAxes.size();
  std::vector<int> ranks;
  int64_t devices = 1;
  for (int64_t size : grid.drop_back(mbCount))
    devices *= size;
  for (int64_t r = 0; r < devices; ++r) {
    int64_t rest = r, idx = 0;
    SmallVector<int64_t> coords(grid.size() - mbCount);
    for (int64_t a = coords.size() - 1; a >= 0; --a) {
      coords[a] = rest % grid[a];
      rest /= grid[a];
    }
    for (int64_t a : plan.pipelineAxes)
      idx = idx * grid[a] + coords[a];
    if (idx == stage)
      ranks.push_back(r);
  }
  return ranks;
}

json StageEmitter::assemble() {
  json chunkLists = json::array();
  for (int64_t c = 0; c < chunks; ++c)
    chunkLists.push_back(
        {{artifactPhaseName(ArtifactPhase::Forward).str(), listJson[1 + 3 * c]},
         {artifactPhaseName(ArtifactPhase::BackwardInput).str(),
          listJson[2 + 3 * c]},
         {artifactPhaseName(ArtifactPhase::BackwardWeight).str(),
          listJson[3 + 3 * c]}});
  json schedule = json::array();
  if (pipe.contains("per_stage") && stage < int64_t(pipe["per_stage"].size()))
    schedule = pipe["per_stage"][stage];
  return json{{"name", "stage" + std::to_string(stage)},
              {"ranks", stageRanks()},
              {"stage", stage},
              {"slots", memory.slotsJson()},
              {"buffers", memory.buffers},
              {"constants", program.constants},
              {"instructions", listJson[0]},
              {"chunks", chunkLists},
              {"finish", listJson[post]},
              {"schedule", schedule}};
}

} // namespace

FailureOr<json> emitter::emitStageProgram(ProgramEmitter &program,
                                          const json &pipeline) {
  return StageEmitter(program, pipeline).emit();
}
