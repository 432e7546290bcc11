//===- dtc-opt.cpp - mlir-opt for the dtc dialect and passes -------------===//
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::dtc::DtcDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::shard::ShardDialect>();
  mlir::dtc::registerDtcPasses();
  // Generic cleanups people combine with ours in lit tests.
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "dtc optimizer driver\n", registry));
}
