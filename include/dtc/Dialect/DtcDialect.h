//===- DtcDialect.h - the dtc dialect ---------------------------*- C++ -*-===//
#ifndef DTC_DIALECT_DTCDIALECT_H
#define DTC_DIALECT_DTCDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Dialect.h"

#include "dtc/Dialect/DtcDialect.h.inc"
#include "dtc/Dialect/DtcEnums.h.inc"

#endif // DTC_DIALECT_DTCDIALECT_H
