// dtc-apply-strategy: strategy -> plan. Its input is a training step; it
// writes the grid and #dtc.plan and leaves the step itself alone.
// RUN: dtc-opt %s --dtc-apply-strategy="mesh=2,2 tp=2 zero=1" | FileCheck %s
// RUN: dtc-opt %s --dtc-apply-strategy="mesh=2,2,2 pp=2 tp=2 microbatches=4 schedule=zb recompute=selective precision=bf16-mixed" | FileCheck %s --check-prefix=PIPE
// RUN: dtc-opt %s --dtc-apply-strategy="mesh=4 virtual-stages=2 pp=4 microbatches=4 schedule=interleaved" | FileCheck %s --check-prefix=CHUNKS

// Tensor parallelism takes the innermost axis, data parallelism the rest.
// CHECK-LABEL: module attributes {dtc.plan = #dtc.plan<@mesh, dp = 2 on [0], tp = 2 on [1], pp = 1, microbatches = 1, virtual_stages = 1, zero = 1, schedule = "none", recompute = none, precision = "f32">}
// CHECK-NEXT: shard.grid @mesh(shape = 2x2)
// CHECK: func.func @train_step(%{{.*}}: tensor<16x8xf32> {dtc.name = "w", dtc.role = "param"}, %{{.*}}: tensor<8x16xf32> {dtc.name = "x", dtc.role = "input"})

// Pipeline stages sit between tp's axes and dp's; micro-batches get one
// more, virtual axis of their own.
// PIPE-LABEL: module attributes {dtc.plan = #dtc.plan<@mesh, dp = 2 on [0], tp = 2 on [2], pp = 2 on [1], microbatches = 4 on [3], virtual_stages = 1, zero = 0, schedule = "zb", recompute = selective, precision = "bf16-mixed">}
// PIPE-NEXT: shard.grid @mesh(shape = 2x2x2x4)

// CHUNKS-LABEL: module attributes {dtc.plan = #dtc.plan<@mesh, dp = 1, tp = 1, pp = 4 on [0], microbatches = 4 on [1], virtual_stages = 2, zero = 0, schedule = "interleaved", recompute = none, precision = "f32">}
// CHUNKS-NEXT: shard.grid @mesh(shape = 4x4)
func.func @train_step(%w: tensor<16x8xf32> {dtc.name = "w", dtc.role = "param"},
                      %x: tensor<8x16xf32> {dtc.name = "x", dtc.role = "input"})
    -> (tensor<8x8xf32> {dtc.name = "loss", dtc.role = "loss"}) attributes {dtc.train_step} {
  %h = "dtc.matmul"(%x, %w) {dtc.id = 0 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"} : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  return %h : tensor<8x8xf32>
}
