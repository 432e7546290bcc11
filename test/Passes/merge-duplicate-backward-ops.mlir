// Three matmuls read one activation (q, k, v projections). Each one's
// gradient rule reshapes it to [rows, k] for its weight gradient and
// transposes that; after dtc-merge-duplicate-backward-ops the step computes
// the reshape and the transpose once and all three weight gradients read
// them. Without the pass there are three of each (the NOMERGE run).
// The input: the model below as a training step with layers
// (Inputs/merge-duplicate-backward-ops.input.mlir, scripts/pass-inputs.py).
// RUN: dtc-opt %S/Inputs/merge-duplicate-backward-ops.input.mlir --dtc-merge-duplicate-backward-ops | FileCheck %s
// RUN: FileCheck %s --check-prefix=NOMERGE < %S/Inputs/merge-duplicate-backward-ops.input.mlir

// CHECK-LABEL: func.func @train_step(
// CHECK: %[[X:.*]] = "dtc.layer_norm"
// CHECK: %[[ROWS:.*]] = "dtc.reshape"(%[[X]]) {{.*}}dtc.phase = "backward_weight"{{.*}} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
// CHECK-NOT: "dtc.reshape"(%[[X]])
// CHECK: %[[ROWS_T:.*]] = "dtc.transpose"(%[[ROWS]])
// CHECK-NOT: "dtc.transpose"(%[[ROWS]])
// CHECK: "dtc.matmul"(%[[ROWS_T]]
// CHECK: "dtc.matmul"(%[[ROWS_T]]
// CHECK: "dtc.matmul"(%[[ROWS_T]]
// CHECK-NOT: "dtc.reshape"(%[[X]])

// NOMERGE-LABEL: func.func @train_step(
// NOMERGE-COUNT-3: "dtc.reshape"({{.*}}) {{.*}}dtc.phase = "backward_weight"{{.*}} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
func.func @main(%g: tensor<4xf32> {dtc.param, dtc.name = "g", dtc.init = "ones"},
                %b: tensor<4xf32> {dtc.param, dtc.name = "b", dtc.init = "zeros"},
                %wq: tensor<4x4xf32> {dtc.param, dtc.name = "wq"},
                %wk: tensor<4x4xf32> {dtc.param, dtc.name = "wk"},
                %wv: tensor<4x4xf32> {dtc.param, dtc.name = "wv"},
                %x: tensor<2x3x4xf32>) -> tensor<f32> {
  %n = "dtc.layer_norm"(%x, %g, %b) {epsilon = 1.0e-5 : f32} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %q = "dtc.matmul"(%n, %wq) : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %k = "dtc.matmul"(%n, %wk) : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %v = "dtc.matmul"(%n, %wv) : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %qk = "dtc.mul"(%q, %k) : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %s = "dtc.add"(%qk, %v) : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %l = "dtc.reduce_mean"(%s) {axes = array<i64: 0, 1, 2>, keep_dims = false} : (tensor<2x3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
