//===- AssignLayers.cpp - every op of the training step gets its layer ----===//
//
// A layer is read off the forward data flow, not off parameter names: an
// activation is a value that depends on both a parameter and the data; the
// forward ops producing activations form a chain in program order, and the
// chain is cut wherever the fewest activations are live (for a transformer:
// exactly the residual stream between blocks, since the residual keeps two
// values live inside a block). Segments without a parameter join the
// segment before them (an activation function belongs to the layer it
// follows). Ops computed from parameters, constants or data alone take the
// layer of their first consumer; backward ops the layer of their forward op
// (dtc.forward); optimizer ops the layer of the parameter they update, or
// the latest layer they read from. So a cut between layers is a legal
// pipeline-stage boundary that sends the fewest activations; recomputation
// and stage balancing work layer by layer.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include <limits>
#include <optional>

namespace mlir::dtc {
#define GEN_PASS_DEF_ASSIGNLAYERS
#include "dtc/Passes/Passes.h.inc"

namespace {

class LayerAssigner {
public:
  explicit LayerAssigner(func::FuncOp step) : step(step) {}

  void run() {
    traceDataFlow();
    cutChain();
    placeOtherForwardOps();
    placeBackwardAndOptimizer();
    Builder b(step.getContext());
    for (Operation &op : step.front())
      if (auto it = layerOf.find(&op); it != layerOf.end())
        op.setAttr(DtcDialect::kLayerAttr, b.getI64IntegerAttr(it->second));
  }

private:
  bool isParam(unsigned argIndex) const {
    return argRole(step, argIndex) == Role::Param;
  }
  bool isActivation(Value v) const {
    return onParam.contains(v) && onData.contains(v);
  }
  bool isWeight(Value v) const {
    return onParam.contains(v) && !onData.contains(v);
  }
  /// The earliest layer among `op`'s users that have one (-1 if none).
  int64_t firstUserLayer(Operation *op) const {
    int64_t best = -1;
    for (Operation *user : op->getUsers())
      if (auto it = layerOf.find(user); it != layerOf.end())
        best = best < 0 ? it->second : std::min(best, it->second);
    return best;
  }

  /// Which forward values depend on a parameter, and which on the data.
  void traceDataFlow() {
    for (BlockArgument arg : step.getArguments()) {
      if (isParam(arg.getArgNumber()))
        onParam.insert(arg);
      else if (argRole(step, arg.getArgNumber()) == Role::Input)
        onData.insert(arg);
    }
    for (Operation &op : step.front())
      if (op.hasAttr(DtcDialect::kIdAttr))
        forward.push_back(&op);
    for (Operation *op : forward) {
      bool p = llvm::any_of(op->getOperands(),
                            [&](Value v) { return onParam.contains(v); });
      bool d = llvm::any_of(op->getOperands(),
                            [&](Value v) { return onData.contains(v); });
      for (Value r : op->getResults()) {
        if (p)
          onParam.insert(r);
        if (d)
          onData.insert(r);
      }
    }
  }

  /// The activation chain cut where the fewest activations are live, the
  /// segments without a parameter merged into the one before.
  void cutChain() {
    SmallVector<Operation *> chain;
    llvm::DenseMap<Operation *, int64_t> position;
    for (Operation *op : forward)
      if (llvm::any_of(op->getResults(),
                       [&](Value v) { return isActivation(v); })) {
        position[op] = chain.size();
        chain.push_back(op);
      }
    // Activations live across each boundary (after chain[i], before
    // chain[i + 1]).
    int64_t n = chain.size();
    SmallVector<int64_t> liveDelta(n + 1, 0);
    for (Operation *op : chain)
      for (Value r : op->getResults()) {
        if (!isActivation(r))
          continue;
        int64_t lastUse = position[op];
        for (Operation *user : r.getUsers())
          if (auto it = position.find(user); it != position.end())
            lastUse = std::max(lastUse, it->second);
        ++liveDelta[position[op]];
        --liveDelta[lastUse];
      }
    SmallVector<int64_t> live(n, 0);
    int64_t running = 0, fewest = std::numeric_limits<int64_t>::max();
    for (int64_t i = 0; i + 1 < n; ++i) {
      running += liveDelta[i];
      live[i] = running;
      fewest = std::min(fewest, running);
    }
    SmallVector<int64_t> segmentOf(n, 0);
    for (int64_t i = 1; i < n; ++i)
      segmentOf[i] = segmentOf[i - 1] + (live[i - 1] == fewest ? 1 : 0);
    int64_t segments = n ? segmentOf[n - 1] + 1 : 1;
    SmallVector<bool> hasParam(segments, false);
    for (Operation *op : chain)
      if (llvm::any_of(op->getOperands(), [&](Value v) { return isWeight(v); }))
        hasParam[segmentOf[position[op]]] = true;
    SmallVector<int64_t> layerOfSegment(segments, 0);
    int64_t layers = 0;
    bool seenParam = false;
    for (int64_t seg = 0; seg < segments; ++seg) {
      if (hasParam[seg] && seenParam)
        ++layers;
      seenParam |= hasParam[seg];
      layerOfSegment[seg] = layers;
    }
    for (Operation *op : chain) {
      layerOf[op] = layerOfSegment[segmentOf[position[op]]];
      layerOfId[op->getAttr(DtcDialect::kIdAttr)] = layerOf[op];
    }
  }

  /// Forward ops off the chain serve their first consumer.
  void placeOtherForwardOps() {
    for (Operation *op : llvm::reverse(forward))
      if (!layerOf.count(op)) {
        layerOf[op] = std::max<int64_t>(0, firstUserLayer(op));
        layerOfId[op->getAttr(DtcDialect::kIdAttr)] = layerOf[op];
      }
  }

  /// The layer of an optimizer argument: its parameter's home (the first
  /// layer reading the parameter).
  std::optional<int64_t> argLayer(BlockArgument arg,
                                  const llvm::StringMap<int64_t> &home) {
    unsigned i = arg.getArgNumber();
    StringAttr name = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kOfAttr);
    if (!name && isParam(i))
      name = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kNameAttr);
    if (!name)
      return std::nullopt;
    return home.lookup(name.getValue());
  }

  /// Backward ops take their forward op's layer; optimizer (and clipping)
  /// ops the parameter they update, else the gradient they read, else the
  /// latest layer their operands come from (a sum over all gradients ends
  /// in the last layer); other constants their earliest user's.
  void placeBackwardAndOptimizer() {
    llvm::StringMap<int64_t> home;
    for (BlockArgument arg : step.getArguments()) {
      if (!isParam(arg.getArgNumber()))
        continue;
      int64_t layer = -1;
      for (Operation *user : arg.getUsers())
        if (auto it = layerOf.find(user); it != layerOf.end())
          layer = layer < 0 ? it->second : std::min(layer, it->second);
      auto name = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                    DtcDialect::kNameAttr);
      home[name.getValue()] = std::max<int64_t>(layer, 0);
    }
    Block &body = step.front();
    for (Operation &op : body) {
      if (layerOf.count(&op) || isa<func::ReturnOp>(op) ||
          isa<arith::ConstantOp>(op))
        continue;
      if (Attribute id = op.getAttr(DtcDialect::kForwardAttr)) {
        layerOf[&op] = layerOfId.lookup(id);
        continue;
      }
      std::optional<int64_t> layer;
      for (Value operand : op.getOperands())
        if (auto arg = dyn_cast<BlockArgument>(operand))
          if (auto l = argLayer(arg, home); l && !layer)
            layer = l;
      for (Value operand : op.getOperands())
        if (Operation *def = operand.getDefiningOp())
          if (def->hasAttr(DtcDialect::kForwardAttr) &&
              !isa<arith::ConstantOp>(def))
            if (auto it = layerOf.find(def); it != layerOf.end() && !layer)
              layer = it->second;
      if (!layer) {
        int64_t latest = 0;
        for (Value operand : op.getOperands())
          if (Operation *def = operand.getDefiningOp())
            if (auto it = layerOf.find(def); it != layerOf.end())
              latest = std::max(latest, it->second);
        layer = latest;
      }
      layerOf[&op] = *layer;
    }
    for (Operation &op : llvm::reverse(body))
      if (isa<arith::ConstantOp>(op) && !layerOf.count(&op))
        layerOf[&op] = std::max<int64_t>(0, firstUserLayer(&op));
  }

  func::FuncOp step;
  llvm::DenseSet<Value> onParam, onData;
  SmallVector<Operation *> forward;
  llvm::DenseMap<Operation *, int64_t> layerOf;
  llvm::DenseMap<Attribute, int64_t> layerOfId;
};

struct AssignLayersPass : impl::AssignLayersBase<AssignLayersPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp step = findTrainStep(module);
    if (!step) {
      module.emitError() << "no training step to assign layers in (run "
                            "dtc-build-training-step first)";
      return signalPassFailure();
    }
    LayerAssigner(step).run();
  }
};

} // namespace
} // namespace mlir::dtc
