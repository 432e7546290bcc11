// dtc-decompose-ignored-labels: a mean cross entropy over the labels not
// equal to ignore_index becomes sum / max(count, 1), so both the sum and the
// count split over the batch as partial sums; the count's ops are marked
// dtc.whole_batch (under micro-batches it is the whole batch's, taken once
// per step). Plain cross entropies stay.
// RUN: dtc-opt %s --split-input-file --dtc-decompose-ignored-labels | FileCheck %s

// CHECK-LABEL: func.func @main(
// CHECK-SAME: %[[Y:[a-z0-9]+]]: tensor<4x6xi32>
// CHECK: %[[SUM:.*]] = "dtc.cross_entropy"(%{{.*}}, %[[Y]]) <{ignore_index = -100 : i64, reduction = "sum"}>
// CHECK: %[[MASK:.*]] = "dtc.label_mask"(%[[Y]]) <{ignore_index = -100 : i64}> {dtc.whole_batch} : (tensor<4x6xi32>) -> tensor<4x6xf32>
// CHECK: %[[COUNT:.*]] = "dtc.reduce_sum"(%[[MASK]]) <{axes = array<i64: 0, 1>, keep_dims = false}> {dtc.whole_batch}
// CHECK: %[[ONE:.*]] = arith.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DEN:.*]] = "dtc.max"(%[[COUNT]], %[[ONE]])
// CHECK: %[[LOSS:.*]] = "dtc.div"(%[[SUM]], %[[DEN]])
// CHECK: return %[[LOSS]]
func.func @main(%w: tensor<10x10xf32> {dtc.param, dtc.name = "w"},
                %z: tensor<4x6x10xf32> {dtc.name = "z"},
                %y: tensor<4x6xi32> {dtc.name = "y", dtc.max = 10 : i64}) -> tensor<f32> {
  %h = "dtc.matmul"(%z, %w) : (tensor<4x6x10xf32>, tensor<10x10xf32>) -> tensor<4x6x10xf32>
  %l = "dtc.cross_entropy"(%h, %y) {ignore_index = -100 : i64} : (tensor<4x6x10xf32>, tensor<4x6xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// CHECK-LABEL: func.func @main(
// CHECK: %[[L:.*]] = "dtc.cross_entropy"
// CHECK-NOT: label_mask
// CHECK: return %[[L]]
func.func @main(%w: tensor<10x10xf32> {dtc.param, dtc.name = "w"},
                %z: tensor<4x10xf32> {dtc.name = "z"},
                %y: tensor<4xi32> {dtc.name = "y", dtc.max = 10 : i64}) -> tensor<f32> {
  %h = "dtc.matmul"(%z, %w) : (tensor<4x10xf32>, tensor<10x10xf32>) -> tensor<4x10xf32>
  %l = "dtc.cross_entropy"(%h, %y) : (tensor<4x10xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
