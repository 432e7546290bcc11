//===- TestPrintModelStructure.cpp - print prologue, blocks, epilogue -----===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Planner/ModelStructure.h"

#include "llvm/ADT/DenseMap.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_TESTPRINTMODELSTRUCTURE
#include "dtc/Passes/Passes.h.inc"

namespace {
struct TestPrintModelStructurePass
    : impl::TestPrintModelStructureBase<TestPrintModelStructurePass> {
  void runOnOperation() override {
    for (func::FuncOp step : trainSteps(getOperation())) {
      FailureOr<ModelStructure> s = analyzeModelStructure(step);
      if (failed(s))
        return signalPassFailure();
      // Layers by class: the first layer with the same fingerprint.
      llvm::DenseMap<uint64_t, int64_t> classOf;
      std::string classes;
      for (auto [layer, fingerprint] : llvm::enumerate(s->fingerprints)) {
        int64_t c =
            classOf.try_emplace(fingerprint, int64_t(layer)).first->second;
        classes += (layer ? " " : "") + std::to_string(c);
      }
      InFlightDiagnostic remark =
          step.emitRemark() << "model structure: " << s->layers() << " layers, "
                            << s->distinctLayers() << " distinct; ";
      if (s->blockCount == 0)
        remark << "no repeated blocks";
      else
        remark << "prologue [0, " << s->firstBlockLayer << "), "
               << s->blockCount << " blocks of " << s->blockLayers
               << " layers, epilogue [" << s->epilogueStart() << ", "
               << s->layers() << ")";
      remark << "; layer classes " << classes;
    }
  }
};
} // namespace
} // namespace mlir::dtc
