// dtc-balance-stages: the plan's stage cuts, layers balanced by flops (not
// by op count); cuts already in the plan, and plans of one virtual stage,
// are left alone.
// RUN: dtc-opt %s -split-input-file -verify-diagnostics --dtc-balance-stages | FileCheck %s

// Layer 0 is a 64x64x64 matmul, layers 1 and 2 small ones: 0 alone on the
// first stage, 1 and 2 on the second.
// CHECK-LABEL: module attributes {dtc.plan = #dtc.plan<@mesh, dp = 1, tp = 1, pp = 2 on [0], microbatches = 1 on [1], virtual_stages = 1, zero = 0, schedule = "1f1b", recompute = none, stage_cuts = [1], precision = "f32">}
module attributes {dtc.plan = #dtc.plan<@mesh, pp = 2 on [0], microbatches = 1 on [1], schedule = "1f1b">} {
  shard.grid @mesh(shape = 2x1)
  func.func @train_step(%a: tensor<64x64xf32> {dtc.name = "a", dtc.role = "param"}, %s: tensor<2x2xf32> {dtc.name = "s", dtc.role = "param"}) -> (tensor<2x2xf32> {dtc.name = "loss", dtc.role = "loss"}) attributes {dtc.train_step} {
    %0 = "dtc.matmul"(%a, %a) {dtc.id = 0 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %1 = "dtc.matmul"(%s, %s) {dtc.id = 1 : i64, dtc.layer = 1 : i64, dtc.phase = "forward"} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    %2 = "dtc.matmul"(%1, %s) {dtc.id = 2 : i64, dtc.layer = 2 : i64, dtc.phase = "forward"} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    return %2 : tensor<2x2xf32>
  }
}

// -----

// Cuts a planner wrote stay.
// CHECK-LABEL: module attributes {dtc.plan = #dtc.plan<@mesh, dp = 1, tp = 1, pp = 2 on [0], microbatches = 1 on [1], virtual_stages = 1, zero = 0, schedule = "1f1b", recompute = none, stage_cuts = [2], precision = "f32">}
module attributes {dtc.plan = #dtc.plan<@mesh, pp = 2 on [0], microbatches = 1 on [1], schedule = "1f1b", stage_cuts = [2]>} {
  shard.grid @mesh(shape = 2x1)
  func.func @train_step(%a: tensor<64x64xf32> {dtc.name = "a", dtc.role = "param"}, %s: tensor<2x2xf32> {dtc.name = "s", dtc.role = "param"}) -> (tensor<2x2xf32> {dtc.name = "loss", dtc.role = "loss"}) attributes {dtc.train_step} {
    %0 = "dtc.matmul"(%a, %a) {dtc.id = 0 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %1 = "dtc.matmul"(%s, %s) {dtc.id = 1 : i64, dtc.layer = 1 : i64, dtc.phase = "forward"} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    %2 = "dtc.matmul"(%1, %s) {dtc.id = 2 : i64, dtc.layer = 2 : i64, dtc.phase = "forward"} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    return %2 : tensor<2x2xf32>
  }
}

// -----

module attributes {dtc.plan = #dtc.plan<@mesh, pp = 2 on [0], microbatches = 1 on [1], schedule = "1f1b">} {
  shard.grid @mesh(shape = 2x1)
  // expected-error@+1 {{the model has 1 layer but pp=2 needs at least 2}}
  func.func @train_step(%s: tensor<2x2xf32> {dtc.name = "s", dtc.role = "param"}) -> (tensor<2x2xf32> {dtc.name = "loss", dtc.role = "loss"}) attributes {dtc.train_step} {
    %1 = "dtc.matmul"(%s, %s) {dtc.id = 1 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    return %1 : tensor<2x2xf32>
  }
}

// -----

module attributes {dtc.plan = #dtc.plan<@mesh, pp = 2 on [0], microbatches = 1 on [1], schedule = "1f1b">} {
  shard.grid @mesh(shape = 2x1)
  func.func @train_step(%s: tensor<2x2xf32> {dtc.name = "s", dtc.role = "param"}) -> (tensor<2x2xf32> {dtc.name = "loss", dtc.role = "loss"}) attributes {dtc.train_step} {
    // expected-error@+1 {{op without dtc.layer: pipeline stages need the layers the training-step pass assigns}}
    %1 = "dtc.matmul"(%s, %s) {dtc.id = 1 : i64, dtc.phase = "forward"} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    return %1 : tensor<2x2xf32>
  }
}
