// dtc-keep-attention-stats: an attention and the gradient of the same q, k,
// v become attention_block (positions 0) and attention_block_grad reading
// its output and logsumexp; ring attention's ops and a gradient without its
// forward stay.
// RUN: dtc-opt %s --dtc-keep-attention-stats -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @paired
// CHECK: %[[ZERO:.*]] = arith.constant {dtc.layer = 2 : i64, dtc.phase = "forward"} dense<0> : tensor<i64>
// CHECK-NEXT: %[[Y:.*]], %[[LSE:.*]] = "dtc.attention_block"(%arg0, %arg1, %arg2, %[[ZERO]], %[[ZERO]]) <{causal = true, {{.*}}}> {dtc.id = 7 : i64, dtc.layer = 2 : i64, dtc.phase = "forward"}
// CHECK-SAME: -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
// CHECK-NEXT: "dtc.attention_block_grad"(%arg0, %arg1, %arg2, %[[ZERO]], %[[ZERO]], %arg3, %[[Y]], %[[LSE]]) <{causal = true, position_stride = 1 : i64}> {dtc.forward = 7 : i64, dtc.phase = "backward_input"}
// CHECK-NOT: "dtc.attention
func.func @paired(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %dy: tensor<2x4x8x16xf32>)
    -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) {
  %y = "dtc.attention"(%q, %k, %v) {causal = true, dtc.id = 7 : i64, dtc.layer = 2 : i64, dtc.phase = "forward"} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %dq, %dk, %dv = "dtc.attention_grad"(%q, %k, %v, %dy) {causal = true, dtc.forward = 7 : i64, dtc.phase = "backward_input"} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
  return %y, %dq, %dk, %dv : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
}

// -----

// A gradient whose forward reads other keys, and a ring: unchanged.
// CHECK-LABEL: func.func @unpaired
// CHECK-NOT: attention_block
// CHECK: "dtc.attention"(%arg0, %arg1, %arg2)
// CHECK: "dtc.attention_grad"(%arg0, %arg2, %arg2, %arg3)
// CHECK: "dtc.attention"(%arg0, %arg1, %arg2) <{causal = true}> {dtc.ring}
// CHECK: "dtc.attention_grad"(%arg0, %arg1, %arg2, %arg3) <{causal = true}> {dtc.ring}
func.func @unpaired(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %dy: tensor<2x4x8x16xf32>)
    -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) {
  %y = "dtc.attention"(%q, %k, %v) {causal = true} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %dq, %dk, %dv = "dtc.attention_grad"(%q, %v, %v, %dy) {causal = true} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
  %y2 = "dtc.attention"(%q, %k, %v) {causal = true, dtc.ring} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %dq2, %dk2, %dv2 = "dtc.attention_grad"(%q, %k, %v, %dy) {causal = true, dtc.ring} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
  return %y, %dq, %dk2, %dv2 : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
}
