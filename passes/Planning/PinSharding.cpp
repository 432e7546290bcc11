//===- PinSharding.cpp - pin named parameters' shardings (an example) ----===//
//
// The smallest useful sharding pass, and the example of
// docs/writing-a-sharding-pass.md: it pins the sharding of parameters named
// on the command line at user priority,
//
//   dtc-opt --dtc-pin-sharding="pins=h.0.attn.wq=[[],[1]]"
//   dtc compile ... --pin 'h.0.attn.wq=[[],[1]]'
//
// and leaves the rest of the plan to whatever runs next: dtc-apply-strategy
// honours user pins over its own (strategy) pins, and propagation derives
// everything else from both, so the plan stays consistent. A pin gives the
// mesh axes splitting each dimension, major first: `[[], [1]]` splits
// dimension 1 over mesh axis 1; `[[0, 1], []]` splits dimension 0 over axes
// 0 and 1.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Sharding/Sharding.h"
#include "dtc/runtime/Suggest.h"

#include "llvm/ADT/StringExtras.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_PINSHARDING
#include "dtc/Passes/Passes.h.inc"

namespace {

/// Parses "[[], [1]]": one bracketed list of mesh axes per dimension.
FailureOr<TensorSharding> parseDims(StringRef text, std::string &error) {
  TensorSharding sharding;
  text = text.trim();
  if (!text.consume_front("[") || !text.consume_back("]")) {
    error = "expected [[axes of dim 0], [axes of dim 1], ...]";
    return failure();
  }
  text = text.trim();
  while (!text.empty()) {
    if (!text.consume_front("[")) {
      error = "expected '[' before the axes of dimension " +
              std::to_string(sharding.dims.size());
      return failure();
    }
    auto [inside, rest] = text.split(']');
    if (rest.size() == text.size()) {
      error = "missing ']'";
      return failure();
    }
    GridAxes axes;
    SmallVector<StringRef> items;
    inside.split(items, ',', -1, /*KeepEmpty=*/false);
    for (StringRef item : items) {
      int64_t axis;
      if (item.trim().getAsInteger(10, axis) || axis < 0) {
        error = "'" + item.trim().str() + "' is not a mesh axis";
        return failure();
      }
      axes.push_back(axis);
    }
    sharding.dims.push_back(axes);
    text = rest.trim();
    if (!text.empty() && !text.consume_front(",")) {
      error = "expected ',' between dimensions";
      return failure();
    }
    text = text.trim();
  }
  return sharding;
}

struct PinShardingPass : impl::PinShardingBase<PinShardingPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step) {
      module.emitError()
          << "no @train_step to pin (run dtc-build-training-step first)";
      return signalPassFailure();
    }
    MLIRContext *ctx = &getContext();
    for (const std::string &pin : pins) {
      auto [name, spec] = StringRef(pin).split('=');
      std::string error;
      FailureOr<TensorSharding> sharding = parseDims(spec, error);
      if (name.empty() || spec.empty() || failed(sharding)) {
        module.emitError() << "pin '" << pin << "': "
                           << (error.empty() ? "expected NAME=[[axes], ...]"
                                             : error);
        return signalPassFailure();
      }
      bool found = false;
      for (BlockArgument arg : step.getArguments()) {
        unsigned i = arg.getArgNumber();
        auto argName =
            step.getArgAttrOfType<StringAttr>(i, DtcDialect::kNameAttr);
        if (!argName || argName.getValue() != name ||
            argRole(step, i) != Role::Param)
          continue;
        found = true;
        int64_t rank = tensorTypeOf(arg).getRank();
        if ((int64_t)sharding->dims.size() != rank) {
          emitError(arg.getLoc())
              << "pin '" << pin << "' lists " << sharding->dims.size()
              << " dimensions for parameter \"" << name << "\" of rank "
              << rank;
          return signalPassFailure();
        }
        step.setArgAttr(i, DtcDialect::kShardingAttr,
                        toShardingAttr(*sharding, ctx, grid));
        step.setArgAttr(i, DtcDialect::kPinPriorityAttr,
                        enumAttr(ctx, PinPriority::User));
      }
      if (!found) {
        std::vector<std::string> params;
        for (BlockArgument arg : step.getArguments())
          if (auto argName = step.getArgAttrOfType<StringAttr>(
                  arg.getArgNumber(), DtcDialect::kNameAttr);
              argName && argRole(step, arg.getArgNumber()) == Role::Param)
            params.push_back(argName.str());
        module.emitError() << "pin '" << pin
                           << "': the model has no parameter named \"" << name
                           << "\"" << ::dtc::didYouMean(name.str(), params);
        return signalPassFailure();
      }
    }
  }
};

} // namespace
} // namespace mlir::dtc
