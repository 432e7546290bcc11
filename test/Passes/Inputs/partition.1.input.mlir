// The input of a pass test: dtc-opt --dtc-build-training-step=optimizer=sgd --dtc-assign-layers --dtc-apply-strategy=mesh=1 --dtc-materialize-plan
// on test/Passes/partition.mlir. Written by scripts/pass-inputs.py write; do not edit.
module attributes {dtc.plan = #dtc.plan<@mesh, dp = 1, tp = 1, pp = 1, microbatches = 1, virtual_stages = 1, zero = 0, schedule = "none", recompute = none, precision = "f32">} {
  shard.grid @mesh(shape = 1)
  func.func @train_step(%arg0: tensor<16x8xf32> {dtc.init = "normal(0.02)", dtc.name = "w", dtc.role = "param", dtc.sharding = #dtc.sharding<@mesh, [[], []]>}, %arg1: tensor<8x4x16xf32> {dtc.name = "x", dtc.role = "input", dtc.sharding = #dtc.sharding<@mesh, [[], [], []]>}, %arg2: tensor<8x4xi32> {dtc.max = 8 : i64, dtc.name = "y", dtc.role = "input", dtc.sharding = #dtc.sharding<@mesh, [[], []]>}) -> (tensor<f32> {dtc.name = "loss", dtc.role = "loss"}, tensor<16x8xf32> {dtc.role = "update", dtc.updates = 0 : i64}) attributes {dtc.train_step} {
    %cst = arith.constant {dtc.id = 0 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} dense<5.000000e-01> : tensor<8x4x8xf32>
    %0 = "dtc.matmul"(%arg1, %arg0) {dtc.factor_axes = [array<i64>, array<i64>, array<i64>, array<i64>], dtc.id = 1 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<8x4x16xf32>, tensor<16x8xf32>) -> tensor<8x4x8xf32>
    %1 = "dtc.add"(%0, %cst) {dtc.factor_axes = [array<i64>, array<i64>, array<i64>], dtc.id = 2 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<8x4x8xf32>, tensor<8x4x8xf32>) -> tensor<8x4x8xf32>
    %2 = "dtc.reshape"(%1) {dtc.factor_axes = [array<i64>, array<i64>, array<i64>], dtc.id = 3 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<8x4x8xf32>) -> tensor<32x8xf32>
    %3 = "dtc.reshape"(%2) {dtc.factor_axes = [array<i64>, array<i64>, array<i64>], dtc.id = 4 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<32x8xf32>) -> tensor<8x4x8xf32>
    %4 = "dtc.cross_entropy"(%3, %arg2) {dtc.factor_axes = [array<i64>, array<i64>, array<i64>], dtc.id = 5 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<8x4x8xf32>, tensor<8x4xi32>) -> tensor<f32>
    %5 = "dtc.reduce_mean"(%0) <{axes = array<i64: 0, 1, 2>, keep_dims = false}> {dtc.factor_axes = [array<i64>, array<i64>, array<i64>], dtc.id = 6 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<8x4x8xf32>) -> tensor<f32>
    %6 = "dtc.add"(%4, %5) {dtc.factor_axes = [], dtc.id = 7 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %cst_0 = arith.constant {dtc.forward = 7 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_input"} dense<1.000000e+00> : tensor<f32>
    %7 = "dtc.reshape"(%cst_0) {dtc.factor_axes = [], dtc.forward = 6 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_input"} : (tensor<f32>) -> tensor<1x1x1xf32>
    %8 = "dtc.broadcast"(%7) {dtc.factor_axes = [array<i64>, array<i64>, array<i64>], dtc.forward = 6 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_input"} : (tensor<1x1x1xf32>) -> tensor<8x4x8xf32>
    %cst_1 = arith.constant {dtc.forward = 6 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_input"} dense<3.906250e-03> : tensor<f32>
    %9 = "dtc.mul"(%8, %cst_1) {dtc.factor_axes = [array<i64>, array<i64>, array<i64>], dtc.forward = 6 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_input"} : (tensor<8x4x8xf32>, tensor<f32>) -> tensor<8x4x8xf32>
    %10 = "dtc.cross_entropy_grad"(%3, %arg2, %cst_0) <{scale = 3.125000e-02 : f32}> {dtc.factor_axes = [array<i64>, array<i64>, array<i64>], dtc.forward = 5 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_input"} : (tensor<8x4x8xf32>, tensor<8x4xi32>, tensor<f32>) -> tensor<8x4x8xf32>
    %11 = "dtc.reshape"(%10) {dtc.factor_axes = [array<i64>, array<i64>, array<i64>], dtc.forward = 4 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_input"} : (tensor<8x4x8xf32>) -> tensor<32x8xf32>
    %12 = "dtc.reshape"(%11) {dtc.factor_axes = [array<i64>, array<i64>, array<i64>], dtc.forward = 3 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_input"} : (tensor<32x8xf32>) -> tensor<8x4x8xf32>
    %13 = "dtc.add"(%9, %12) {dtc.factor_axes = [array<i64>, array<i64>, array<i64>], dtc.forward = 2 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_input"} : (tensor<8x4x8xf32>, tensor<8x4x8xf32>) -> tensor<8x4x8xf32>
    %14 = "dtc.reshape"(%arg1) {dtc.factor_axes = [array<i64>, array<i64>, array<i64>], dtc.forward = 1 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_weight"} : (tensor<8x4x16xf32>) -> tensor<32x16xf32>
    %15 = "dtc.reshape"(%13) {dtc.factor_axes = [array<i64>, array<i64>, array<i64>], dtc.forward = 1 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_weight"} : (tensor<8x4x8xf32>) -> tensor<32x8xf32>
    %16 = "dtc.transpose"(%14) <{permutation = array<i64: 1, 0>}> {dtc.factor_axes = [array<i64>, array<i64>], dtc.forward = 1 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_weight"} : (tensor<32x16xf32>) -> tensor<16x32xf32>
    %17 = "dtc.matmul"(%16, %15) {dtc.factor_axes = [array<i64>, array<i64>, array<i64>], dtc.forward = 1 : i64, dtc.gradient_of = ["w"], dtc.layer = 0 : i64, dtc.phase = "backward_weight"} : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
    %18 = "dtc.sgd_update"(%arg0, %17) <{decay_steps = 0 : i64, lr = 1.000000e-03 : f64, lr_schedule = "constant", min_lr = 0.000000e+00 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, warmup_steps = 0 : i64, weight_decay = 0.000000e+00 : f64}> {dtc.factor_axes = [array<i64>, array<i64>], dtc.layer = 0 : i64, dtc.phase = "optimizer"} : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
    return %6, %18 : tensor<f32>, tensor<16x8xf32>
  }
}

