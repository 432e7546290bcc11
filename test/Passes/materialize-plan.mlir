// dtc-materialize-plan: a plan (written here by hand, as a search would)
// becomes pins and propagation completes them.
// RUN: dtc-opt %s -split-input-file --dtc-materialize-plan | FileCheck %s

// Data parallelism: the inputs' batch dimension over dp; the parameter
// stays whole (propagation never splits it over dp) and the weight
// gradient is a pending sum there.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: tensor<16x8xf32> {dtc.init = "normal(0.02)", dtc.name = "w", dtc.role = "param", dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}], []]>}
// CHECK-SAME: tensor<8x16xf32> {dtc.name = "x", dtc.role = "input", dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}0], []]>}
// CHECK: "dtc.matmul"{{.*}}dtc.factor_axes = [array<i64: 0>, array<i64>, array<i64>]{{.*}}dtc.phase = "forward"
// CHECK: "dtc.matmul"{{.*}}dtc.factor_axes = [array<i64>, array<i64>, array<i64: 0>]{{.*}}dtc.phase = "backward_weight"
module attributes {dtc.plan = #dtc.plan<@mesh, dp = 2 on [0]>} {
  shard.grid @mesh(shape = 2)
  func.func @train_step(%arg0: tensor<16x8xf32> {dtc.init = "normal(0.02)", dtc.name = "w", dtc.role = "param"}, %arg1: tensor<8x16xf32> {dtc.name = "x", dtc.role = "input"}, %arg2: tensor<8xi32> {dtc.max = 8 : i64, dtc.name = "y", dtc.role = "input"}) -> (tensor<f32> {dtc.name = "loss", dtc.role = "loss"}, tensor<16x8xf32> {dtc.role = "update", dtc.updates = 0 : i64}) attributes {dtc.train_step} {
    %0 = "dtc.matmul"(%arg1, %arg0) {dtc.id = 0 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    %1 = "dtc.cross_entropy"(%0, %arg2) {dtc.id = 1 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<8x8xf32>, tensor<8xi32>) -> tensor<f32>
    %cst = arith.constant {dtc.forward = 1 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_input"} dense<1.000000e+00> : tensor<f32>
    %2 = "dtc.cross_entropy_grad"(%0, %arg2, %cst) <{scale = 1.250000e-01 : f32}> {dtc.forward = 1 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_input"} : (tensor<8x8xf32>, tensor<8xi32>, tensor<f32>) -> tensor<8x8xf32>
    %3 = "dtc.transpose"(%arg1) <{permutation = array<i64: 1, 0>}> {dtc.forward = 0 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_weight"} : (tensor<8x16xf32>) -> tensor<16x8xf32>
    %4 = "dtc.matmul"(%3, %2) {dtc.forward = 0 : i64, dtc.gradient_of = ["w"], dtc.layer = 0 : i64, dtc.phase = "backward_weight"} : (tensor<16x8xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
    %5 = "dtc.sgd_update"(%arg0, %4) <{lr = 1.000000e-03 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, weight_decay = 0.000000e+00 : f64}> {dtc.layer = 0 : i64, dtc.phase = "optimizer"} : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
    return %1, %5 : tensor<f32>, tensor<16x8xf32>
  }
}

// -----

// Megatron: the matmul's weight, read by a whole input, is split by
// columns over tp.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: tensor<16x8xf32> {dtc.init = "normal(0.02)", dtc.name = "w", dtc.role = "param", dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}], [0]]>}
module attributes {dtc.plan = #dtc.plan<@mesh, tp = 2 on [0]>} {
  shard.grid @mesh(shape = 2)
  func.func @train_step(%arg0: tensor<16x8xf32> {dtc.init = "normal(0.02)", dtc.name = "w", dtc.role = "param"}, %arg1: tensor<8x16xf32> {dtc.name = "x", dtc.role = "input"}) -> (tensor<8x8xf32> {dtc.name = "loss", dtc.role = "loss"}) attributes {dtc.train_step} {
    %0 = "dtc.matmul"(%arg1, %arg0) {dtc.id = 0 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// Micro-batches: the data's batch dimension over the micro-batch axis,
// except in the ops marked dtc.whole_batch (the count of kept labels):
// their factors leave it out, so they read the whole batch once per step.
// CHECK-LABEL: func.func @train_step(
// CHECK: "dtc.cross_entropy"{{.*}}dtc.factor_axes = [array<i64: 0>, array<i64>, array<i64>]
// CHECK: "dtc.label_mask"{{.*}}dtc.factor_axes = [array<i64>, array<i64>]{{.*}}dtc.whole_batch
// CHECK: "dtc.reduce_sum"{{.*}}dtc.factor_axes = [array<i64>, array<i64>]{{.*}}dtc.whole_batch
module attributes {dtc.plan = #dtc.plan<@mesh, dp = 1, tp = 1, pp = 1, microbatches = 2 on [0], virtual_stages = 1, zero = 0, schedule = "1f1b", recompute = none, precision = "f32">} {
  shard.grid @mesh(shape = 2)
  func.func @train_step(%arg0: tensor<16x8xf32> {dtc.init = "normal(0.02)", dtc.name = "w", dtc.role = "param"}, %arg1: tensor<8x4x16xf32> {dtc.name = "x", dtc.role = "input"}, %arg2: tensor<8x4xi32> {dtc.max = 8 : i64, dtc.name = "y", dtc.role = "input"}) -> (tensor<f32> {dtc.name = "loss", dtc.role = "loss"}) attributes {dtc.train_step} {
    %0 = "dtc.matmul"(%arg1, %arg0) {dtc.id = 0 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<8x4x16xf32>, tensor<16x8xf32>) -> tensor<8x4x8xf32>
    %1 = "dtc.cross_entropy"(%0, %arg2) <{ignore_index = 0 : i64, reduction = "sum"}> {dtc.id = 1 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<8x4x8xf32>, tensor<8x4xi32>) -> tensor<f32>
    %2 = "dtc.label_mask"(%arg2) <{ignore_index = 0 : i64}> {dtc.id = 2 : i64, dtc.layer = 0 : i64, dtc.phase = "forward", dtc.whole_batch} : (tensor<8x4xi32>) -> tensor<8x4xf32>
    %3 = "dtc.reduce_sum"(%2) <{axes = array<i64: 0, 1>, keep_dims = false}> {dtc.id = 3 : i64, dtc.layer = 0 : i64, dtc.phase = "forward", dtc.whole_batch} : (tensor<8x4xf32>) -> tensor<f32>
    %4 = "dtc.div"(%1, %3) {dtc.id = 4 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    return %4 : tensor<f32>
  }
}
