//===- TestPrintShardingRules.cpp - print each op's sharding rule --------===//
#include "dtc/Passes/Passes.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_TESTPRINTSHARDINGRULES
#include "dtc/Passes/Passes.h.inc"

namespace {
struct TestPrintShardingRulesPass
    : impl::TestPrintShardingRulesBase<TestPrintShardingRulesPass> {
  void runOnOperation() override {
    getOperation().walk([&](ShardingRuleOpInterface op) {
      ShardingRule rule = op.getShardingRule();
      std::string problem = rule.verify(op);
      if (!problem.empty()) {
        op->emitError() << "inconsistent sharding rule: " << problem;
        return signalPassFailure();
      }
      op->emitRemark() << "sharding rule: " << rule.str();
    });
  }
};
} // namespace
} // namespace mlir::dtc
