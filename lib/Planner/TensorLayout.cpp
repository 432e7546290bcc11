//===- TensorLayout.cpp - tensor-parallel layout by integer program -------===//
#include "dtc/Planner/TensorLayout.h"
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Planner/ModelStructure.h"
#include "dtc/Sharding/Sharding.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>

namespace mlir::dtc {
namespace {

using ::dtc::cost::CollectiveKind;

double bytesOf(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return 0;
  return double(tensor.getNumElements()) *
         double((tensor.getElementType().getIntOrFloatBitWidth() + 7) / 8);
}

/// Where the tp split sits in one tensor: the dimension and the position
/// of the split factor among that dimension's factors; dim -1: whole.
struct Layout {
  int dim = -1, position = 0;
  bool operator==(const Layout &o) const {
    return dim == o.dim && position == o.position;
  }
};

Layout layoutOf(const TensorFactors &tensor, int64_t factor) {
  if (factor < 0)
    return {};
  for (auto [dim, factors] : llvm::enumerate(tensor))
    for (auto [position, f] : llvm::enumerate(factors))
      if (f == factor)
        return {int(dim), int(position)};
  return {};
}

bool containsFactor(const TensorFactors &tensor, int64_t factor) {
  return layoutOf(tensor, factor).dim >= 0;
}

/// An element-wise op merged into the node its operand comes from (Alpa's
/// simplification): it has no strategy of its own but splits, under each
/// of the node's strategies, the factor that keeps its operand's layout.
struct Follower {
  ShardingRule rule;
  /// Per strategy of the node: the factor this op splits (-1 none).
  SmallVector<int64_t> factors;
  /// One instance's cost and memory per strategy of the node.
  std::vector<double> cost, memory;
  /// The op and its instances in identical blocks.
  SmallVector<Operation *> ops;
};

/// One node of the program: a forward op or a parameter, its strategies,
/// and the layout each strategy gives every result (a parameter: itself).
struct Node {
  std::optional<ShardingRule> rule;
  /// Per strategy: the split factor (ops; -1 none) or dimension
  /// (parameters; -1 whole).
  SmallVector<int64_t> strategies;
  /// One instance's cost and memory per strategy.
  std::vector<double> cost, memory;
  /// The ops (or parameters) of identical blocks that take this node's
  /// choice, the node's own first.
  SmallVector<Operation *> ops;
  SmallVector<Value> parameters;
  std::vector<Follower> followers;
};

/// Where a value comes from in the program: a node and its result index
/// (-1: the node is the parameter itself), of one of the node's followers
/// when `follower` >= 0.
struct Source {
  int node = -1, result = -1, follower = -1;
};

class Builder {
public:
  Builder(func::FuncOp step, ArrayRef<int64_t> grid,
          const TensorLayoutOptions &options)
      : step(step), grid(grid), options(options),
        devices(shardCount(grid, options.tpAxes)) {
    link = options.hardware.linkOver(
        std::vector<int64_t>(options.tpAxes.begin(), options.tpAxes.end()));
  }

  void build(::dtc::planner::IntraOpProblem &problem) {
    for (unsigned i = 0; i < step.getNumArguments(); ++i)
      if (argRole(step, i) == Role::OptimizerState)
        if (auto of = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kOfAttr))
          stateBytes[of.getValue()] += bytesOf(step.getArgument(i).getType());
    findRepresentatives();
    for (Operation &op : step.getBody().front()) {
      if (!isPhase(&op, Phase::Forward))
        break; // the forward comes first
      auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
      if (!ruleOp)
        continue;
      // (A first-block op the program left out keeps its instances out.)
      if (Operation *rep = representative.lookup(&op);
          rep && rep->getNumResults() > 0 &&
          sourceOf.count(rep->getResult(0))) {
        addInstance(problem, &op, rep);
        continue;
      }
      ShardingRule rule = ruleOp.getShardingRule();
      if (!rule.verify(&op).empty())
        continue;
      for (Value operand : op.getOperands())
        if (isParameter(operand) && !sourceOf.count(operand))
          addParameter(problem, operand);
      if (!options.mergeElementwise || !addFollower(problem, &op, rule))
        addOp(problem, &op, std::move(rule));
    }
  }

  std::vector<Node> nodes;
  llvm::DenseMap<Value, Source> sourceOf;

private:
  /// Identical blocks (include/dtc/Planner/ModelStructure.h) take the
  /// choice of the first: each op of a later block maps to the op at the
  /// same place in the first, so the program grows with the distinct
  /// layers, not with the depth.
  void findRepresentatives() {
    // Without layers (dtc-assign-layers) every op is its own node.
    for (Operation &op : step.getBody().front()) {
      if (!isPhase(&op, Phase::Forward))
        break;
      if (!op.hasAttr(DtcDialect::kLayerAttr))
        return;
    }
    FailureOr<ModelStructure> structure = analyzeModelStructure(step);
    if (failed(structure) || structure->blockCount < 2)
      return;
    llvm::DenseMap<int64_t, SmallVector<Operation *>> layerOps;
    for (Operation &op : step.getBody().front()) {
      if (!isPhase(&op, Phase::Forward))
        break;
      auto layer = op.getAttrOfType<IntegerAttr>(DtcDialect::kLayerAttr);
      if (layer && isa<ShardingRuleOpInterface>(op))
        layerOps[layer.getInt()].push_back(&op);
    }
    const int64_t first = structure->firstBlockLayer;
    const int64_t size = structure->blockLayers;
    for (int64_t block = 1; block < structure->blockCount; ++block)
      for (int64_t offset = 0; offset < size; ++offset) {
        const auto &ops = layerOps[first + block * size + offset];
        const auto &reps = layerOps[first + offset];
        if (ops.size() != reps.size())
          continue;
        for (auto [op, rep] : llvm::zip(ops, reps))
          if (op->getName() == rep->getName())
            representative[op] = rep;
      }
  }

  /// Adds the edge's costs to the program, merging edges between the same
  /// nodes; an edge from a node to itself (a block's output read by the
  /// same op of the next block) costs its diagonal.
  void addEdge(::dtc::planner::IntraOpProblem &problem, int from, int to,
               std::vector<double> cost) {
    if (from == to) {
      const size_t count = nodes[to].strategies.size();
      for (size_t s = 0; s < count; ++s)
        problem.nodes[to].cost[s] += cost[s * count + s];
      return;
    }
    auto [it, inserted] =
        edgeIndex.try_emplace({from, to}, problem.edges.size());
    if (inserted) {
      problem.addEdge(from, to, std::move(cost));
      return;
    }
    std::vector<double> &sum = problem.edges[it->second].cost;
    for (size_t k = 0; k < sum.size(); ++k)
      sum[k] += cost[k];
  }

  /// The edges from the nodes `op`'s operands come from to node `self`,
  /// under which `op` (of `rule`) splits `factors[s]` for each of the
  /// node's strategies s.
  void addOperandEdges(::dtc::planner::IntraOpProblem &problem, Operation *op,
                       const ShardingRule &rule, ArrayRef<int64_t> factors,
                       int self) {
    for (auto [idx, operand] : llvm::enumerate(op->getOperands())) {
      auto source = sourceOf.find(operand);
      if (source == sourceOf.end())
        continue;
      const Node &from = nodes[source->second.node];
      const double bytes = sizeOf(operand);
      std::vector<double> edge;
      for (size_t s = 0; s < from.strategies.size(); ++s)
        for (int64_t factor : factors)
          edge.push_back(reshard(layoutUnder(from, int(s), source->second),
                                 layoutOf(rule.operands[idx], factor), bytes));
      addEdge(problem, source->second.node, self, std::move(edge));
    }
  }

  /// Merges `op` into the node its first operand from an op comes from
  /// when every factor of `op` is parallel (element-wise ops, reshapes,
  /// transposes: no split of theirs communicates) and it can split, under
  /// each of the node's strategies, the factor that operand is split by:
  /// then it never reshards that operand. Alpa merges element-wise chains
  /// the same way; the program loses the layouts where such an op differs
  /// from its operand (a reshard after it instead of before).
  bool addFollower(::dtc::planner::IntraOpProblem &problem, Operation *op,
                   const ShardingRule &rule) {
    if (op->getNumResults() != 1 ||
        llvm::any_of(rule.factorKinds,
                     [](FactorKind k) { return k != FactorKind::Parallel; }))
      return false;
    for (auto [idx, operand] : llvm::enumerate(op->getOperands())) {
      auto found = sourceOf.find(operand);
      if (found == sourceOf.end() || found->second.result < 0)
        continue;
      const Source source = found->second;
      const SmallVector<int64_t> legal = legalFactors(op, rule);
      Follower follower;
      follower.rule = rule;
      for (size_t s = 0; s < nodes[source.node].strategies.size(); ++s) {
        const Layout from = layoutUnder(nodes[source.node], int(s), source);
        const int64_t factor =
            from.dim < 0 ? -1 : rule.operands[idx][from.dim][from.position];
        if (factor >= 0 && !llvm::is_contained(legal, factor))
          return false;
        follower.factors.push_back(factor);
        auto [seconds, kept] = strategyCostAndMemory(op, rule, factor);
        follower.cost.push_back(seconds);
        follower.memory.push_back(kept);
      }
      follower.ops.push_back(op);
      const int self = source.node;
      for (size_t s = 0; s < follower.cost.size(); ++s) {
        problem.nodes[self].cost[s] += follower.cost[s];
        problem.nodes[self].memory[s] += follower.memory[s];
      }
      Node &node = nodes[self];
      node.followers.push_back(std::move(follower));
      const Follower &added = node.followers.back();
      addOperandEdges(problem, op, added.rule, added.factors, self);
      sourceOf[op->getResult(0)] = {self, 0,
                                    int(nodes[self].followers.size()) - 1};
      return true;
    }
    return false;
  }

  /// An op of a later identical block: its representative's node pays
  /// for it once more, and its parameters are that node's parameters'.
  void addInstance(::dtc::planner::IntraOpProblem &problem, Operation *op,
                   Operation *rep) {
    const Source repResult = sourceOf.lookup(rep->getResult(0));
    const int self = repResult.node;
    // (Nothing below adds nodes: the references stay valid.)
    Node &node = nodes[self];
    Follower *follower = repResult.follower >= 0
                             ? &node.followers[size_t(repResult.follower)]
                             : nullptr;
    (follower ? follower->ops : node.ops).push_back(op);
    const std::vector<double> &cost = follower ? follower->cost : node.cost;
    const std::vector<double> &memory =
        follower ? follower->memory : node.memory;
    for (size_t s = 0; s < cost.size(); ++s) {
      problem.nodes[self].cost[s] += cost[s];
      problem.nodes[self].memory[s] += memory[s];
    }
    for (auto [operand, repOperand] :
         llvm::zip(op->getOperands(), rep->getOperands())) {
      if (!isParameter(operand) || sourceOf.count(operand))
        continue;
      auto repSource = sourceOf.find(repOperand);
      if (repSource == sourceOf.end() || !isParameter(repOperand))
        continue;
      // A copy: inserting may grow the map under repSource.
      const Source source = repSource->second;
      const int param = source.node;
      sourceOf[operand] = source;
      nodes[param].parameters.push_back(operand);
      for (size_t s = 0; s < nodes[param].memory.size(); ++s)
        problem.nodes[param].memory[s] += nodes[param].memory[s];
    }
    if (follower)
      addOperandEdges(problem, op, follower->rule, follower->factors, self);
    else
      addOperandEdges(problem, op, *node.rule, node.strategies, self);
    for (auto [idx, result] : llvm::enumerate(op->getResults()))
      sourceOf[result] = {self, int(idx), repResult.follower};
  }

  bool isParameter(Value v) const { return isParameterArgument(step, v); }

  /// Bytes of `v` a device handles: a parameter whole, an activation its
  /// batch share.
  double sizeOf(Value v) const {
    return bytesOf(v.getType()) * (isParameter(v) ? 1.0 : options.batchShare);
  }

  /// Whether the backward computes a gradient for `v`.
  bool hasGradient(Value v) const {
    if (!isa<FloatType>(tensorTypeOf(v).getElementType()) ||
        v.getDefiningOp<arith::ConstantOp>())
      return false;
    auto arg = dyn_cast<BlockArgument>(v);
    return !arg || argRole(step, arg.getArgNumber()) != Role::Input;
  }

  double collective(CollectiveKind kind, double inBytes, double outBytes) {
    if (devices <= 1)
      return 0;
    int64_t sent = ::dtc::cost::collectiveSentBytes(
        kind, devices, int64_t(inBytes), int64_t(outBytes), 1);
    return ::dtc::cost::collectiveTime(kind, devices, double(sent), link);
  }

  /// Forward and backward cost of reading a value of `bytes` laid out as
  /// `from` where the op needs `to`.
  double reshard(Layout from, Layout to, double bytes) {
    if (from == to)
      return 0;
    const double piece = bytes / double(devices);
    // Whole to split: a slice forward, the gradient gathered backward;
    // split to whole: gathered forward, the gradient sliced backward.
    if (from.dim < 0 || to.dim < 0)
      return collective(CollectiveKind::AllGather, piece, bytes);
    return 2 * collective(CollectiveKind::AllToAll, piece, piece);
  }

  void addParameter(::dtc::planner::IntraOpProblem &problem, Value param) {
    Node node;
    auto type = tensorTypeOf(param);
    auto name = step.getArgAttrOfType<StringAttr>(
        cast<BlockArgument>(param).getArgNumber(), DtcDialect::kNameAttr);
    // The parameter and its optimizer state (its gradient is its readers':
    // as large as they compute it).
    const double bytes =
        bytesOf(type) * options.parameterShare +
        (name ? stateBytes.lookup(name.getValue()) : 0.0) * options.stateShare;
    std::vector<double> cost, memory;
    node.strategies.push_back(-1);
    cost.push_back(0);
    memory.push_back(bytes);
    for (int64_t dim = 0; dim < type.getRank(); ++dim)
      if (type.getDimSize(dim) % devices == 0) {
        node.strategies.push_back(dim);
        cost.push_back(0);
        memory.push_back(bytes / double(devices));
      }
    sourceOf[param] = {int(nodes.size()), -1};
    node.parameters.push_back(param);
    node.cost = cost;
    node.memory = memory;
    problem.addNode(name ? name.getValue().str() : "param", cost, memory);
    nodes.push_back(std::move(node));
  }

  /// The layout of the value `source` names under its node's strategy `s`.
  Layout layoutUnder(const Node &n, int s, Source source) const {
    if (source.result < 0)
      return {int(n.strategies[s]), 0};
    if (source.follower >= 0) {
      const Follower &f = n.followers[source.follower];
      return layoutOf(f.rule.results[source.result], f.factors[s]);
    }
    return layoutOf(n.rule->results[source.result], n.strategies[s]);
  }

  /// Into how many pieces strategy `factor` splits a tensor of `factors`.
  double pieces(const TensorFactors &factors, int64_t factor) const {
    return factor >= 0 && containsFactor(factors, factor) ? double(devices)
                                                          : 1.0;
  }

  /// Compute and the communication strategy `factor` implies for `op`.
  double strategyCost(Operation *op, const ShardingRule &rule, int64_t factor) {
    double bytes = 0;
    for (auto [idx, operand] : llvm::enumerate(op->getOperands()))
      bytes += sizeOf(operand) / pieces(rule.operands[idx], factor);
    for (auto [idx, result] : llvm::enumerate(op->getResults()))
      bytes += sizeOf(result) / pieces(rule.results[idx], factor);
    double flops = 0;
    ::dtc::kernels::CostClass costClass = ::dtc::kernels::CostClass::Stream;
    double products = 1;
    if (auto cost = dyn_cast<CostOpInterface>(op)) {
      flops = double(cost.getFlopCount()) * options.batchShare /
              (factor >= 0 ? double(devices) : 1.0);
      costClass = cost.getCostClass();
      products = double(cost.getIndependentProducts()) * options.batchShare /
                 (factor >= 0 ? double(devices) : 1.0);
    }
    double seconds = 0;
    if (!isa<ViewOpInterface>(op)) {
      const bool f32 = llvm::all_of(op->getResultTypes(), [](Type t) {
        auto tensor = dyn_cast<RankedTensorType>(t);
        return !tensor || tensor.getElementType().isF32() ||
               !isa<FloatType>(tensor.getElementType());
      });
      seconds = 3 * ::dtc::cost::kernelTime(flops, bytes, costClass,
                                            options.hardware, f32, products);
    }
    if (factor < 0)
      return seconds;
    const FactorKind kind = rule.factorKinds[factor];
    for (auto [idx, result] : llvm::enumerate(op->getResults()))
      if (kind != FactorKind::Parallel &&
          !containsFactor(rule.results[idx], factor)) {
        double b = sizeOf(result);
        seconds += collective(CollectiveKind::AllReduce, b, b);
      }
    for (auto [idx, operand] : llvm::enumerate(op->getOperands())) {
      if (containsFactor(rule.operands[idx], factor) || !hasGradient(operand))
        continue;
      double b = sizeOf(operand);
      seconds += collective(CollectiveKind::AllReduce, b, b);
    }
    return seconds;
  }

  /// The factors of `op` the tp axes may split.
  SmallVector<int64_t> legalFactors(Operation *op, const ShardingRule &rule) {
    SmallVector<int64_t> legal;
    for (int64_t f = 0; f < int64_t(rule.getNumFactors()); ++f) {
      if (rule.factorKinds[f] == FactorKind::Blocked ||
          rule.factorSizes[f] % devices != 0 || rule.factorSizes[f] < devices ||
          (options.mayUseFactor && !options.mayUseFactor(op, f)))
        continue;
      FactorAxes factors(rule.getNumFactors());
      factors[f] = options.tpAxes;
      if (checkFactorAxes(op, rule, factors, grid).empty())
        legal.push_back(f);
    }
    return legal;
  }

  /// One instance's cost and the bytes it keeps per device when the tp
  /// axes split `factor` of `op` (-1: none).
  std::pair<double, double> strategyCostAndMemory(Operation *op,
                                                  const ShardingRule &rule,
                                                  int64_t factor) {
    double seconds = strategyCost(op, rule, factor);
    double kept = 0;
    for (auto [idx, result] : llvm::enumerate(op->getResults()))
      kept += bytesOf(result.getType()) * options.activationShare /
              pieces(rule.results[idx], factor);
    // A parameter's gradient is as large as the reader computes it: a
    // parameter stored split but read whole has a whole gradient (and a
    // whole gathered copy) until the reduce-scatter, and with micro-batches
    // each one's gradient is added into the step's in that size (three
    // passes over it).
    for (auto [idx, operand] : llvm::enumerate(op->getOperands()))
      if (isParameter(operand)) {
        auto type = tensorTypeOf(operand);
        const double split = pieces(rule.operands[idx], factor);
        const double whole =
            std::max(bytesOf(type), 4 * double(type.getNumElements())) *
            options.gradientShare;
        kept += whole / split;
        if (options.microbatches > 1)
          seconds += double(options.microbatches) *
                     ::dtc::cost::kernelTime(0, 3 * bytesOf(type) / split,
                                             ::dtc::kernels::CostClass::Stream,
                                             options.hardware,
                                             type.getElementType().isF32());
      }
    // Operands nothing in the program produces (inputs, constants) are
    // whole: reading them split is a slice, and a gathered gradient.
    for (auto [idx, operand] : llvm::enumerate(op->getOperands()))
      if (!sourceOf.count(operand) && hasGradient(operand))
        seconds +=
            reshard({}, layoutOf(rule.operands[idx], factor), sizeOf(operand));
    return {seconds, kept};
  }

  void addOp(::dtc::planner::IntraOpProblem &problem, Operation *op,
             ShardingRule rule) {
    Node node;
    node.strategies.push_back(-1);
    node.strategies.append(legalFactors(op, rule));
    std::vector<double> cost, memory;
    for (int64_t factor : node.strategies) {
      auto [seconds, kept] = strategyCostAndMemory(op, rule, factor);
      cost.push_back(seconds);
      memory.push_back(kept);
    }
    node.rule = std::move(rule);
    node.ops.push_back(op);
    node.cost = cost;
    node.memory = memory;
    const int self = int(nodes.size());
    problem.addNode(op->getName().getStringRef().str(), cost, memory);
    nodes.push_back(std::move(node));
    addOperandEdges(problem, op, *nodes[self].rule, nodes[self].strategies,
                    self);
    for (auto [idx, result] : llvm::enumerate(op->getResults()))
      sourceOf[result] = {self, int(idx)};
  }

  func::FuncOp step;
  ArrayRef<int64_t> grid;
  const TensorLayoutOptions &options;
  int64_t devices;
  ::dtc::cost::Link link;
  llvm::StringMap<double> stateBytes;
  llvm::DenseMap<Operation *, Operation *> representative;
  std::map<std::pair<int, int>, size_t> edgeIndex;
};

} // namespace

FailureOr<::dtc::cost::HardwareProfile>
tensorLayoutHardware(Operation *at, StringRef nameOrFile,
                     ArrayRef<int64_t> grid) {
  std::string error;
  std::optional<::dtc::cost::HardwareProfile> hw =
      ::dtc::cost::loadHardware(nameOrFile.str(), error);
  if (hw)
    error = hw->forMesh(std::vector<int64_t>(grid.begin(), grid.end()));
  if (!hw || !error.empty())
    return at->emitError()
           << "the tensor-parallel layout program needs a hardware profile: "
           << error;
  return *hw;
}

TensorLayoutOptions
tensorLayoutOptions(const Plan &plan,
                    const ::dtc::cost::HardwareProfile &hardware,
                    double deviceMemory) {
  TensorLayoutOptions options;
  options.tpAxes.assign(plan.tpAxes.begin(), plan.tpAxes.end());
  options.hardware = hardware;
  options.memoryBudget = deviceMemory > 0 ? deviceMemory : hardware.memoryBytes;
  options.batchShare = 1.0 / double(plan.dp);
  // A stage holds its layers (1/pp, balanced) of up to min(pp, m)
  // micro-batches in flight (1F1B's first stage); one micro-batch at a time
  // without stages.
  const double stage = 1.0 / double(plan.pp);
  const double inFlight =
      double(std::min<int64_t>(plan.virtualStageCount(), plan.microbatches));
  options.activationShare =
      stage * inFlight / double(plan.dp * plan.microbatches);
  const double dp = double(plan.dp);
  options.parameterShare = stage / (plan.zero >= 3 ? dp : 1.0);
  options.gradientShare = stage / (plan.zero >= 2 ? dp : 1.0);
  options.stateShare = stage / (plan.zero >= 1 ? dp : 1.0);
  options.microbatches = plan.microbatches;
  return options;
}

FailureOr<TensorLayout> planTensorLayout(func::FuncOp step,
                                         ArrayRef<int64_t> grid,
                                         const TensorLayoutOptions &options) {
  TensorLayout layout;
  Builder builder(step, grid, options);
  builder.build(layout.problem);
  layout.problem.memoryBudget = options.memoryBudget;
  // Memory adds up node by node, so the least any layout needs is the sum
  // of each node's least.
  double least = 0;
  for (const auto &node : layout.problem.nodes)
    least += *std::min_element(node.memory.begin(), node.memory.end());
  if (options.leastMemoryWhenNothingFits && least > options.memoryBudget)
    layout.problem.memoryBudget = least;
  if (std::string problem = layout.problem.check(); !problem.empty())
    return step.emitError() << "the tensor-parallel layout program is "
                               "malformed: "
                            << problem;
  layout.solution =
      ::dtc::planner::solveIntraOp(layout.problem, options.timeLimitSeconds);
  if (!layout.solution.feasible) {
    auto gib = [](double bytes) {
      const char *units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
      int unit = 0;
      while (bytes >= 1024 && unit < 4) {
        bytes /= 1024;
        ++unit;
      }
      return llvm::formatv("{0:F1} {1}", bytes, units[unit]).str();
    };
    InFlightDiagnostic diag = step.emitError()
                              << "no tensor-parallel layout over "
                              << shardCount(grid, options.tpAxes)
                              << " devices fits ";
    if (least > options.memoryBudget)
      return diag << gib(options.memoryBudget)
                  << " per device: the least any needs is " << gib(least)
                  << " (parameters with their gradients and optimizer "
                     "state, and the forward's activations); use more tp "
                     "devices, more micro-batches or a larger device";
    return diag << gib(options.memoryBudget) << " per device: the solver "
                << "found none within " << options.timeLimitSeconds << " s";
  }
  for (auto [index, node] : llvm::enumerate(builder.nodes)) {
    const int64_t choice = node.strategies[layout.solution.choice[index]];
    for (Operation *op : node.ops)
      layout.splitFactor[op] = choice;
    for (const Follower &follower : node.followers)
      for (Operation *op : follower.ops)
        layout.splitFactor[op] =
            follower.factors[layout.solution.choice[index]];
    for (Value param : node.parameters) {
      TensorSharding sharding =
          TensorSharding::replicated(tensorTypeOf(param).getRank());
      if (choice >= 0)
        sharding.dims[choice] = options.tpAxes;
      layout.parameters[param] = sharding;
    }
  }
  return layout;
}

} // namespace mlir::dtc
