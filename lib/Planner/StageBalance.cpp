//===- StageBalance.cpp - layers balanced over virtual stages ------------===//
#include "dtc/Planner/StageBalance.h"
#include "dtc/Dialect/DtcOps.h"

#include <limits>
#include <vector>

using namespace mlir;
using namespace mlir::dtc;

SmallVector<int64_t> mlir::dtc::balanceRuns(ArrayRef<double> costs,
                                            int64_t groups) {
  int64_t n = costs.size();
  SmallVector<double> prefix(n + 1, 0.0);
  for (int64_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + costs[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[g][i]: the smallest largest run covering items [0, i) with g runs.
  std::vector<std::vector<double>> best(groups + 1,
                                        std::vector<double>(n + 1, inf));
  std::vector<std::vector<int64_t>> cut(groups + 1,
                                        std::vector<int64_t>(n + 1, 0));
  best[0][0] = 0;
  for (int64_t g = 1; g <= groups; ++g)
    for (int64_t i = g; i <= n; ++i)
      for (int64_t j = g - 1; j < i; ++j) {
        double value = std::max(best[g - 1][j], prefix[i] - prefix[j]);
        if (value < best[g][i]) {
          best[g][i] = value;
          cut[g][i] = j;
        }
      }
  SmallVector<int64_t> groupOf(n, 0);
  for (int64_t g = groups, i = n; g > 0; --g) {
    int64_t j = cut[g][i];
    for (int64_t k = j; k < i; ++k)
      groupOf[k] = g - 1;
    i = j;
  }
  return groupOf;
}

FailureOr<int64_t> mlir::dtc::countLayers(func::FuncOp step) {
  Block &body = step.getBody().front();
  int64_t layers = 0;
  for (Operation &op : body) {
    if (isa<func::ReturnOp>(op))
      continue;
    auto layer = op.getAttrOfType<IntegerAttr>(DtcDialect::kLayerAttr);
    if (!layer)
      return op.emitError()
             << "op without dtc.layer: pipeline stages need the layers the "
                "training-step pass assigns";
    layers = std::max(layers, layer.getInt() + 1);
  }
  return layers;
}

FailureOr<SmallVector<int64_t>>
mlir::dtc::balanceStages(func::FuncOp step, int64_t pp, int64_t chunks) {
  Block &body = step.getBody().front();
  FailureOr<int64_t> counted = countLayers(step);
  if (failed(counted))
    return failure();
  const int64_t layers = *counted;
  int64_t virtualStages = pp * chunks;
  if (layers < virtualStages)
    return step.emitError()
           << "the model has " << layers << " layer" << (layers == 1 ? "" : "s")
           << " but pp=" << pp
           << (chunks > 1 ? " x " + std::to_string(chunks) + " virtual stages"
                          : "")
           << " needs at least " << virtualStages
           << " (a layer is the stretch between two points where only "
              "one activation is live, e.g. a residual sublayer)";
  SmallVector<double> cost(layers, 1.0);
  for (Operation &op : body)
    if (auto costOp = dyn_cast<CostOpInterface>(op))
      cost[op.getAttrOfType<IntegerAttr>(DtcDialect::kLayerAttr).getInt()] +=
          double(costOp.getFlopCount());
  SmallVector<int64_t> stageOfLayer = balanceRuns(cost, virtualStages);
  SmallVector<int64_t> cuts;
  for (int64_t layer = 1; layer < layers; ++layer)
    if (stageOfLayer[layer] != stageOfLayer[layer - 1])
      cuts.push_back(layer);
  return cuts;
}
