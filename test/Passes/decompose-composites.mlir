// dtc-decompose-composites: dtc.moe becomes the router's softmax, one
// moe_route (capacity ceil(1.1 * 20 * 2 / 4) = 11: f32's 1.1 is
// 1.10000002, which must not make it 12), moe_dispatch of x with unit
// weights into [E, C, D], the experts' batched matmuls and moe_combine;
// dtc.load_balancing_loss shares the router's softmax (CSE) and adds a
// one-slot route that drops nothing, the first-choice fractions and
// E * sum(f * mean(probs)). A module without composite ops is unchanged.
// RUN: dtc-opt %s --split-input-file --dtc-decompose-composites | FileCheck %s

// CHECK-LABEL: func.func @main(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<20x8xf32>, %[[R:[a-z0-9]+]]: tensor<8x4xf32> {{.*}}, %[[WI:[a-z0-9]+]]: tensor<4x8x16xf32> {{.*}}, %[[WO:[a-z0-9]+]]: tensor<4x16x8xf32>
// CHECK: %[[LOGITS:.*]] = "dtc.matmul"(%[[X]], %[[R]]) : (tensor<20x8xf32>, tensor<8x4xf32>) -> tensor<20x4xf32>
// CHECK: %[[P:.*]] = "dtc.softmax"(%[[LOGITS]]) <{axis = 1 : i64}>
// CHECK: %[[E:.*]], %[[POS:.*]], %[[W:.*]] = "dtc.moe_route"(%[[P]]) <{capacity = 11 : i64, top_k = 2 : i64}> : (tensor<20x4xf32>) -> (tensor<20x2xi32>, tensor<20x2xi32>, tensor<20x2xf32>)
// CHECK: %[[ONES:.*]] = arith.constant dense<1.000000e+00> : tensor<20x2xf32>
// CHECK: %[[BUF:.*]] = "dtc.moe_dispatch"(%[[X]], %[[E]], %[[POS]], %[[ONES]]) : {{.*}} -> tensor<4x11x8xf32>
// CHECK: %[[H:.*]] = "dtc.matmul"(%[[BUF]], %[[WI]]) : (tensor<4x11x8xf32>, tensor<4x8x16xf32>) -> tensor<4x11x16xf32>
// CHECK: %[[G:.*]] = dtc.gelu %[[H]]
// CHECK: %[[Y:.*]] = "dtc.matmul"(%[[G]], %[[WO]]) : (tensor<4x11x16xf32>, tensor<4x16x8xf32>) -> tensor<4x11x8xf32>
// CHECK: %[[OUT:.*]] = "dtc.moe_combine"(%[[Y]], %[[E]], %[[POS]], %[[W]]) : {{.*}} -> tensor<20x8xf32>
// CHECK-NOT: "dtc.softmax"
// CHECK: %[[FIRST:.*]], %{{.*}}, %{{.*}} = "dtc.moe_route"(%[[P]]) <{capacity = 20 : i64, top_k = 1 : i64}>
// CHECK: %[[F:.*]] = "dtc.moe_first_choice_fraction"(%[[FIRST]]) : (tensor<20x1xi32>) -> tensor<4xf32>
// CHECK: %[[MEAN:.*]] = "dtc.reduce_mean"(%[[P]]) <{axes = array<i64: 0>, keep_dims = false}>
// CHECK: %[[FP:.*]] = "dtc.mul"(%[[F]], %[[MEAN]])
// CHECK: %[[SUM:.*]] = "dtc.reduce_sum"(%[[FP]])
// CHECK: %[[NE:.*]] = arith.constant dense<4.000000e+00> : tensor<f32>
// CHECK: %[[AUX:.*]] = "dtc.mul"(%[[SUM]], %[[NE]])
// CHECK-NOT: dtc.moe"
// CHECK-NOT: load_balancing_loss
func.func @main(%x: tensor<20x8xf32>, %r: tensor<8x4xf32> {dtc.param}, %wi: tensor<4x8x16xf32> {dtc.param}, %wo: tensor<4x16x8xf32> {dtc.param}) -> tensor<f32> {
  %y = "dtc.moe"(%x, %r, %wi, %wo) {top_k = 2 : i64, capacity_factor = 1.1 : f32} : (tensor<20x8xf32>, tensor<8x4xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<20x8xf32>
  %aux = "dtc.load_balancing_loss"(%x, %r) : (tensor<20x8xf32>, tensor<8x4xf32>) -> tensor<f32>
  %l = "dtc.reduce_mean"(%y) {axes = array<i64: 0, 1>} : (tensor<20x8xf32>) -> tensor<f32>
  %t = "dtc.add"(%l, %aux) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %t : tensor<f32>
}

// -----

// A capacity factor large enough for every token in one expert: at most T
// rows (no expert can receive a token twice).
// CHECK-LABEL: func.func @main(
// CHECK: "dtc.moe_route"(%{{.*}}) <{capacity = 6 : i64, top_k = 1 : i64}>
func.func @main(%x: tensor<6x4xf32>, %r: tensor<4x3xf32> {dtc.param}, %wi: tensor<3x4x4xf32> {dtc.param}, %wo: tensor<3x4x4xf32> {dtc.param}) -> tensor<f32> {
  %y = "dtc.moe"(%x, %r, %wi, %wo) {top_k = 1 : i64, capacity_factor = 100.0 : f32} : (tensor<6x4xf32>, tensor<4x3xf32>, tensor<3x4x4xf32>, tensor<3x4x4xf32>) -> tensor<6x4xf32>
  %l = "dtc.reduce_mean"(%y) {axes = array<i64: 0, 1>} : (tensor<6x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// CHECK-LABEL: func.func @main(
// CHECK-NEXT: %[[L:.*]] = "dtc.reduce_mean"
// CHECK-NEXT: return %[[L]]
func.func @main(%x: tensor<6x4xf32> {dtc.param}) -> tensor<f32> {
  %l = "dtc.reduce_mean"(%x) {axes = array<i64: 0, 1>} : (tensor<6x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
