// Data parallelism on a 2x2 grid: the planner shards every input's batch
// over both axes and propagates factor shardings; the partitioner rewrites
// to local shapes and inserts the collectives.
// The inputs: the model below planned on a 2x2 grid and on one device
// (Inputs/partition.*.input.mlir, which scripts/pass-inputs.py writes).
// RUN: FileCheck %s --check-prefix=PLAN < %S/Inputs/partition.2x2.input.mlir
// RUN: dtc-opt %S/Inputs/partition.2x2.input.mlir --dtc-partition | FileCheck %s
// Exactly two collectives reduce anything: the gradient and the loss.
// RUN: dtc-opt %S/Inputs/partition.2x2.input.mlir --dtc-partition | grep -c "shard.all_reduce " | FileCheck %s --check-prefix=COUNT
// COUNT: {{^}}2{{$}}
// RUN: dtc-opt %S/Inputs/partition.1.input.mlir --dtc-partition | FileCheck %s --check-prefix=ONE

// PLAN: module attributes {dtc.plan = #dtc.plan<@mesh, dp = 4 on [0, 1], tp = 1, pp = 1, microbatches = 1, virtual_stages = 1, zero = 0, schedule = "none", recompute = none, precision = "f32">}
// PLAN: shard.grid @mesh(shape = 2x2)
// PLAN-LABEL: func.func @train_step(
// PLAN-SAME: dtc.name = "w", dtc.role = "param", dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}], []]>
// PLAN-SAME: dtc.name = "x", dtc.role = "input", dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}0, 1], [], []]>
// PLAN-SAME: dtc.name = "y", dtc.role = "input", dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}0, 1], []]>
// The batch factor of the matmul is sharded, M/N/K are not.
// PLAN: "dtc.matmul"{{.*}}dtc.factor_axes = [array<i64: 0, 1>, array<i64>, array<i64>, array<i64>]
// The weight gradient contracts over the (sharded) batch: a sum factor.
// PLAN: "dtc.matmul"{{.*}}dtc.factor_axes = [array<i64>, array<i64>, array<i64: 0, 1>]{{.*}}(tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>

// CHECK-LABEL: func.func @train_step(
// Parameters stay whole; inputs hold a quarter of the batch.
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<16x8xf32> {dtc.global_type = tensor<16x8xf32>
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x16xf32> {dtc.global_type = tensor<8x4x16xf32>
// CHECK-SAME: %[[Y:[a-z0-9]+]]: tensor<2x4xi32> {dtc.global_type = tensor<8x4xi32>
// CHECK: %[[BIAS:.*]] = arith.constant {{.*}}dense<5.000000e-01> : tensor<8x4x8xf32>
// CHECK: %[[H:.*]] = "dtc.matmul"(%[[X]], %[[W]]) {{.*}}: (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
// A whole constant meets a batch-sharded value: each rank keeps its rows.
// CHECK: %[[SLICE:.*]] = shard.all_slice %[[BIAS]] on @mesh grid_axes = [0, 1] slice_axis = 0 {{.*}}: tensor<8x4x8xf32> -> tensor<2x4x8xf32>
// CHECK: "dtc.add"(%[[H]], %[[SLICE]])
// Merging the sharded batch into rows keeps the sharding on the merged dim.
// CHECK: "dtc.reshape"({{.*}}) {{.*}}: (tensor<2x4x8xf32>) -> tensor<8x8xf32>
// A shard's mean times 1/4 is its share of the global mean.
// CHECK: %[[CE:.*]] = "dtc.cross_entropy"({{.*}}, %[[Y]]) {{.*}}-> tensor<f32>
// CHECK: %[[QUARTER:.*]] = arith.constant {{.*}}dense<2.500000e-01> : tensor<f32>
// CHECK: %[[CE_SHARE:.*]] = "dtc.mul"(%[[CE]], %[[QUARTER]])
// CHECK: %[[MEAN:.*]] = "dtc.reduce_mean"
// CHECK: %[[MEAN_SHARE:.*]] = "dtc.mul"(%[[MEAN]],
// The loss stays a pending sum through the add (linear in both operands).
// CHECK: %[[LOSS:.*]] = "dtc.add"(%[[CE_SHARE]], %[[MEAN_SHARE]])
// The cross-entropy gradient keeps the GLOBAL normalizer 1/32.
// CHECK: "dtc.cross_entropy_grad"({{.*}}) <{scale = 3.125000e-02 : f32}>
// CHECK: %[[DW:.*]] = "dtc.matmul"({{.*}}) {{.*}}: (tensor<16x8xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
// The data-parallel gradient all-reduce, right before the update: a SUM
// (the default, so no `reduction =` is printed; an average would scale
// every gradient by 1/4).
// CHECK: %[[DW_SUM:.*]] = shard.all_reduce %[[DW]] on @mesh grid_axes = [0, 1] {dtc.gradient_of = ["w"], dtc.phase = "optimizer"} : tensor<16x8xf32> -> tensor<16x8xf32>
// CHECK: %[[NEW_W:.*]] = "dtc.sgd_update"(%[[W]], %[[DW_SUM]])
// CHECK: %[[LOSS_SUM:.*]] = shard.all_reduce %[[LOSS]] on @mesh grid_axes = [0, 1] {dtc.phase = "optimizer"} : tensor<f32> -> tensor<f32>
// CHECK: return %[[LOSS_SUM]], %[[NEW_W]]

// One device: nothing to communicate.
// ONE-LABEL: func.func @train_step(
// ONE-NOT: shard.
// ONE: return
func.func @main(%w: tensor<16x8xf32> {dtc.param, dtc.name = "w"}, %x: tensor<8x4x16xf32> {dtc.name = "x"},
                %y: tensor<8x4xi32> {dtc.name = "y", dtc.max = 8 : i64}) -> tensor<f32> {
  %bias = arith.constant dense<0.5> : tensor<8x4x8xf32>
  %h = "dtc.matmul"(%x, %w) : (tensor<8x4x16xf32>, tensor<16x8xf32>) -> tensor<8x4x8xf32>
  %h2 = "dtc.add"(%h, %bias) : (tensor<8x4x8xf32>, tensor<8x4x8xf32>) -> tensor<8x4x8xf32>
  %r = "dtc.reshape"(%h2) : (tensor<8x4x8xf32>) -> tensor<32x8xf32>
  %r2 = "dtc.reshape"(%r) : (tensor<32x8xf32>) -> tensor<8x4x8xf32>
  %l = "dtc.cross_entropy"(%r2, %y) : (tensor<8x4x8xf32>, tensor<8x4xi32>) -> tensor<f32>
  %m = "dtc.reduce_mean"(%h) {axes = array<i64: 0, 1, 2>} : (tensor<8x4x8xf32>) -> tensor<f32>
  %t = "dtc.add"(%l, %m) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %t : tensor<f32>
}
