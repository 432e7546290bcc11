// Pipeline stages: the planned step is cut into one function per stage with
// explicit messages between them, before SPMD partitioning.
// The inputs: the models below planned for pp=2 with 2 micro-batches, and
// for dp=2 (Inputs/split-pipeline.*.input.mlir, scripts/pass-inputs.py).
// RUN: dtc-opt %S/Inputs/split-pipeline.pp2.input.mlir --split-input-file --dtc-split-pipeline | FileCheck %s
// RUN: dtc-opt %S/Inputs/split-pipeline.pp2.input.mlir --split-input-file --dtc-split-pipeline --dtc-partition | FileCheck %s --check-prefix=LOCAL
// Without stages or micro-batches the pass changes nothing.
// RUN: dtc-opt %S/Inputs/split-pipeline.dp2.input.mlir --split-input-file --dtc-split-pipeline | FileCheck %s --check-prefix=NONE

// A tied embedding, a residual block and an MLP block, then the head. The
// MLP is the costly layer: balancing flops (not ops) keeps it with the
// first two layers and leaves the head alone on stage 1.

// CHECK-LABEL: func.func @train_step_stage0(
// The embedding table is held by both stages.
// CHECK-SAME: %[[EMB:[a-z0-9]+]]: tensor<10x4xf32> {{{.*}}dtc.name = "emb", dtc.role = "param"
// The input is split over the data-parallel axes (none) and the virtual
// micro-batch axis 1.
// CHECK-SAME: tensor<4x3xi32> {{{.*}}dtc.role = "input", dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}1], []]>}
// The activation gradient arrives per micro-batch during B ...
// CHECK-SAME: %[[DX:[a-z0-9]+]]: tensor<4x3x4xf32> {dtc.message = 1 : i64, dtc.peer = 1 : i64, dtc.phase = "backward_input", dtc.role = "recv", dtc.scope = "microbatch", dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}1], [], []]>, dtc.stage = 0 : i64}
// ... and the head's share of the tied gradient once, summed over the
// micro-batches (replicated: no pending sum travels).
// CHECK-SAME: %[[HEADGRAD:[a-z0-9]+]]: tensor<10x4xf32> {dtc.message = 2 : i64, dtc.peer = 1 : i64, dtc.phase = "backward_weight", dtc.role = "recv", dtc.scope = "accumulated", dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}], []]>, dtc.stage = 0 : i64}
// Results: the updates, then the activation for stage 1 and the summed
// tied gradient for stage 1's copy of the embedding.
// CHECK-SAME: -> (tensor<10x4xf32> {dtc.role = "update", dtc.updates = 0 : i64}
// CHECK-SAME: tensor<4x3x4xf32> {dtc.message = 0 : i64, dtc.peer = 1 : i64, dtc.phase = "forward", dtc.role = "send", dtc.scope = "microbatch", dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}1], [], []]>, dtc.stage = 0 : i64}
// CHECK-SAME: tensor<10x4xf32> {dtc.message = 3 : i64, dtc.peer = 1 : i64, dtc.phase = "backward_weight", dtc.role = "send", dtc.scope = "accumulated", dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}], []]>, dtc.stage = 0 : i64})
// CHECK-SAME: attributes {dtc.pipeline_stage = 0 : i64, dtc.train_step}
// Forward first, then B, then W, then the optimizer.
// CHECK: "dtc.embedding"{{.*}}dtc.layer = 0 : i64, dtc.phase = "forward", dtc.stage = 0 : i64}
// CHECK: dtc.relu {{.*}}dtc.layer = 2 : i64, dtc.phase = "forward", dtc.stage = 0 : i64}
// CHECK: %[[X2:.*]] = "dtc.add"{{.*}}dtc.phase = "forward"
// CHECK-NOT: dtc.phase = "forward"
// CHECK: "dtc.matmul"(%[[DX]], {{.*}}dtc.phase = "backward_input"
// CHECK: dtc.phase = "backward_weight"
// CHECK-NOT: dtc.phase = "backward_input"
// CHECK: %[[EMBGRAD:.*]] = "dtc.embedding_grad"{{.*}}dtc.phase = "backward_weight"
// The tied gradient: the head's share plus the embedding's.
// CHECK: %[[TIED:.*]] = "dtc.add"(%[[HEADGRAD]], %[[EMBGRAD]]) {{.*}}dtc.gradient_of = ["emb"], {{.*}}dtc.phase = "backward_weight"
// CHECK-NOT: dtc.phase = "backward_weight"
// CHECK: %[[UPD:.*]] = "dtc.sgd_update"(%[[EMB]], %[[TIED]])
// CHECK: return %[[UPD]], {{.*}}, %[[X2]], %[[TIED]] :

// CHECK-LABEL: func.func @train_step_stage1(
// CHECK-SAME: %[[EMB1:[a-z0-9]+]]: tensor<10x4xf32> {{{.*}}dtc.name = "emb", dtc.role = "param"
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x3x4xf32> {dtc.message = 0 : i64, dtc.peer = 0 : i64, dtc.phase = "forward", dtc.role = "recv"
// CHECK-SAME: %[[TOTAL:[a-z0-9]+]]: tensor<10x4xf32> {dtc.message = 3 : i64, dtc.peer = 0 : i64, dtc.phase = "backward_weight", dtc.role = "recv", dtc.scope = "accumulated"
// CHECK-SAME: -> (tensor<f32> {dtc.name = "loss", dtc.role = "loss"}, tensor<10x4xf32> {dtc.role = "update", dtc.updates = 0 : i64}
// CHECK-SAME: attributes {dtc.pipeline_stage = 1 : i64, dtc.train_step}
// Stage 1 runs only the head, with its copy of the embedding.
// CHECK-NOT: dtc.relu
// CHECK: "dtc.transpose"(%[[EMB1]]) {{.*}}dtc.layer = 3 : i64, dtc.phase = "forward", dtc.stage = 1 : i64}
// CHECK: "dtc.matmul"(%[[X]],
// CHECK: %[[DX1:.*]] = "dtc.matmul"{{.*}}dtc.phase = "backward_input"
// The head's share of the tied gradient: the gradient of the transpose.
// CHECK: %[[SHARE:.*]] = "dtc.transpose"{{.*}}dtc.forward = 7 : i64, {{.*}}dtc.phase = "backward_weight"
// The same update as stage 0's, from the same summed gradient.
// CHECK: %[[UPD1:.*]] = "dtc.sgd_update"(%[[EMB1]], %[[TOTAL]])
// CHECK: return {{.*}}, %[[UPD1]], %[[DX1]], %[[SHARE]] :

// After partitioning, each stage computes one micro-batch (half of the 4
// rows); what leaves a stage per step is summed over the micro-batches
// (grid axis 1) first.
// LOCAL-LABEL: func.func @train_step_stage0(
// LOCAL-SAME: tensor<2x3x4xf32> {dtc.global_type = tensor<4x3x4xf32>, dtc.message = 1
// LOCAL: "dtc.embedding"({{.*}} : (tensor<10x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
// LOCAL: %[[SUM:.*]] = shard.all_reduce %{{.*}} on @mesh grid_axes = [1] {{.*}}: tensor<10x4xf32> -> tensor<10x4xf32>
// LOCAL: "dtc.add"(%{{.*}}, %[[SUM]])
// LOCAL-LABEL: func.func @train_step_stage1(
// LOCAL: %[[HEAD:.*]] = shard.all_reduce %{{.*}} on @mesh grid_axes = [1] {{.*}}tensor<10x4xf32>
// LOCAL: return
// LOCAL-SAME: %[[HEAD]] :

// NONE-LABEL: func.func @train_step(
// NONE-NOT: dtc.stage
// NONE-NOT: @train_step_stage

func.func @main(%emb: tensor<10x4xf32> {dtc.param, dtc.name = "emb"},
                %w0: tensor<4x4xf32> {dtc.param, dtc.name = "w0"},
                %w1: tensor<4x64xf32> {dtc.param, dtc.name = "w1"},
                %w2: tensor<64x4xf32> {dtc.param, dtc.name = "w2"},
                %ids: tensor<4x3xi32> {dtc.max = 10 : i64}, %y: tensor<4x3xi32> {dtc.max = 10 : i64}) -> tensor<f32> {
  %x0 = "dtc.embedding"(%emb, %ids) : (tensor<10x4xf32>, tensor<4x3xi32>) -> tensor<4x3x4xf32>
  %h0 = "dtc.matmul"(%x0, %w0) : (tensor<4x3x4xf32>, tensor<4x4xf32>) -> tensor<4x3x4xf32>
  %x1 = "dtc.add"(%x0, %h0) : (tensor<4x3x4xf32>, tensor<4x3x4xf32>) -> tensor<4x3x4xf32>
  %u = "dtc.matmul"(%x1, %w1) : (tensor<4x3x4xf32>, tensor<4x64xf32>) -> tensor<4x3x64xf32>
  %a = "dtc.relu"(%u) : (tensor<4x3x64xf32>) -> tensor<4x3x64xf32>
  %d = "dtc.matmul"(%a, %w2) : (tensor<4x3x64xf32>, tensor<64x4xf32>) -> tensor<4x3x4xf32>
  %x2 = "dtc.add"(%x1, %d) : (tensor<4x3x4xf32>, tensor<4x3x4xf32>) -> tensor<4x3x4xf32>
  %t = "dtc.transpose"(%emb) {permutation = array<i64: 1, 0>} : (tensor<10x4xf32>) -> tensor<4x10xf32>
  %z = "dtc.matmul"(%x2, %t) : (tensor<4x3x4xf32>, tensor<4x10xf32>) -> tensor<4x3x10xf32>
  %l = "dtc.cross_entropy"(%z, %y) : (tensor<4x3x10xf32>, tensor<4x3xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// One heavy layer and four cheap ones (one op each): an op-count balance
// would put three layers on stage 0; balancing flops puts the matmul alone
// on stage 0 and the four cheap layers on stage 1.
// CHECK-LABEL: func.func @train_step_stage0(
// CHECK: "dtc.matmul"{{.*}}dtc.phase = "forward", dtc.stage = 0 : i64}
// CHECK-NOT: "dtc.mul"{{.*}}dtc.phase = "forward"
// CHECK-LABEL: func.func @train_step_stage1(
// CHECK: "dtc.mul"{{.*}}dtc.layer = 1 : i64, dtc.phase = "forward", dtc.stage = 1 : i64}
// CHECK: "dtc.add"{{.*}}dtc.layer = 2 : i64, dtc.phase = "forward", dtc.stage = 1 : i64}
// CHECK: "dtc.mul"{{.*}}dtc.layer = 3 : i64, dtc.phase = "forward", dtc.stage = 1 : i64}
// CHECK: "dtc.add"{{.*}}dtc.layer = 4 : i64, dtc.phase = "forward", dtc.stage = 1 : i64}
func.func @main(%x: tensor<8x64xf32>, %y: tensor<8xi32> {dtc.max = 64 : i64},
                %w: tensor<64x64xf32> {dtc.param, dtc.name = "w"},
                %g1: tensor<64xf32> {dtc.param, dtc.name = "g1", dtc.init = "ones"},
                %b2: tensor<64xf32> {dtc.param, dtc.name = "b2", dtc.init = "zeros"},
                %g3: tensor<64xf32> {dtc.param, dtc.name = "g3", dtc.init = "ones"},
                %b4: tensor<64xf32> {dtc.param, dtc.name = "b4", dtc.init = "zeros"}) -> tensor<f32> {
  %h = "dtc.matmul"(%x, %w) : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %h1 = "dtc.mul"(%h, %g1) : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %h2 = "dtc.add"(%h1, %b2) : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %h3 = "dtc.mul"(%h2, %g3) : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %h4 = "dtc.add"(%h3, %b4) : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %l = "dtc.cross_entropy"(%h4, %y) : (tensor<8x64xf32>, tensor<8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
