// dtc-check-model accepts what docs/model-format.md allows and changes
// nothing: float parameters with and without dtc.init, an integer input
// with dtc.max, dtc ops and arith.constant, one scalar loss. Its errors,
// one each: check-model-invalid.mlir.
// RUN: dtc-opt %s --dtc-check-model | FileCheck %s

// CHECK-LABEL: func.func @main(
// CHECK-SAME: %[[W:.*]]: tensor<16x8xf32> {dtc.init = "normal(0.02)", dtc.name = "w", dtc.param}
// CHECK-SAME: %[[B:.*]]: tensor<8xf32> {dtc.name = "b", dtc.param}
// CHECK-SAME: %[[X:.*]]: tensor<4x16xf32> {dtc.name = "x"}
// CHECK-SAME: %[[Y:.*]]: tensor<4xi32> {dtc.max = 8 : i64, dtc.name = "y"}
// CHECK-NEXT: %[[H:.*]] = "dtc.matmul"(%[[X]], %[[W]])
// CHECK-NEXT: %[[Z:.*]] = "dtc.add"(%[[H]], %[[B]])
// CHECK-NEXT: %[[HALF:.*]] = arith.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT: %[[L:.*]] = "dtc.cross_entropy"(%[[Z]], %[[Y]])
// CHECK-NEXT: %[[S:.*]] = "dtc.mul"(%[[L]], %[[HALF]])
// CHECK-NEXT: return %[[S]] : tensor<f32>
func.func @main(%w: tensor<16x8xf32> {dtc.param, dtc.name = "w", dtc.init = "normal(0.02)"},
                %b: tensor<8xf32> {dtc.param, dtc.name = "b"},
                %x: tensor<4x16xf32> {dtc.name = "x"},
                %y: tensor<4xi32> {dtc.name = "y", dtc.max = 8 : i64}) -> tensor<f32> {
  %h = "dtc.matmul"(%x, %w) : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %z = "dtc.add"(%h, %b) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %half = arith.constant dense<0.5> : tensor<f32>
  %l = "dtc.cross_entropy"(%z, %y) : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
  %s = "dtc.mul"(%l, %half) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %s : tensor<f32>
}
