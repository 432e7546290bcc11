// The partitioner reshards with the cheapest collectives planReshard finds:
// an all-to-all when a split moves between dimensions (padded pieces padded
// before it and cropped after), a reduce-scatter for a pending sum the
// consumer wants split, an all-reduce with the value's own reduction (max).
// RUN: dtc-opt %s -split-input-file --dtc-partition | FileCheck %s

// The rows are split for exp; softmax over the rows needs them whole, so
// the split moves to the columns: one all-to-all, no gather.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[E:.*]] = dtc.exp %{{.*}} : tensor<2x16xf32>
// CHECK-NEXT: %[[T:.*]] = shard.all_to_all %[[E]] on @mesh grid_axes = [0] split_axis = 1 concat_axis = 0 {{.*}}: tensor<2x16xf32> -> tensor<8x4xf32>
// CHECK-NEXT: "dtc.softmax"(%[[T]]) {{.*}}: (tensor<8x4xf32>) -> tensor<8x4xf32>
module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 4)
  func.func @train_step(%x: tensor<8x16xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], []]>}) -> tensor<8x16xf32> {
    %0 = "dtc.exp"(%x) {dtc.factor_axes = [array<i64: 0>, array<i64>]} : (tensor<8x16xf32>) -> tensor<8x16xf32>
    %1 = "dtc.softmax"(%0) {axis = 0 : i64, dtc.factor_axes = [array<i64>, array<i64: 0>]} : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %1 : tensor<8x16xf32>
  }
}

// -----

// The same on uneven dimensions: 6 rows and 10 columns over 4 devices are
// padded pieces of 2 and 3. The columns are padded to 12 before the
// all-to-all, the gathered rows cropped from 8 to 6 after it.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %{{.*}}: tensor<2x10xf32>
// CHECK: %[[E:.*]] = dtc.exp %{{.*}} : tensor<2x10xf32>
// CHECK-NEXT: %[[P:.*]] = "dtc.pad"(%[[E]]) {{.*}}: (tensor<2x10xf32>) -> tensor<2x12xf32>
// CHECK-NEXT: %[[T:.*]] = shard.all_to_all %[[P]] on @mesh grid_axes = [0] split_axis = 1 concat_axis = 0 {{.*}}: tensor<2x12xf32> -> tensor<8x3xf32>
// CHECK-NEXT: %[[C:.*]] = "dtc.pad"(%[[T]]) {{.*}}: (tensor<8x3xf32>) -> tensor<6x3xf32>
// CHECK-NEXT: "dtc.softmax"(%[[C]]) {{.*}}: (tensor<6x3xf32>) -> tensor<6x3xf32>
module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 4)
  func.func @train_step(%x: tensor<6x10xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], []]>}) -> tensor<6x10xf32> {
    %0 = "dtc.exp"(%x) {dtc.factor_axes = [array<i64: 0>, array<i64>]} : (tensor<6x10xf32>) -> tensor<6x10xf32>
    %1 = "dtc.softmax"(%0) {axis = 0 : i64, dtc.factor_axes = [array<i64>, array<i64: 0>]} : (tensor<6x10xf32>) -> tensor<6x10xf32>
    return %1 : tensor<6x10xf32>
  }
}

// -----

// A sum pending over axis 1 (the contraction is split) that the consumer
// wants split over axis 1 by rows: one reduce-scatter. A maximum pending
// over axis 0 is resolved by an all-reduce max.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[MM:.*]] = "dtc.matmul"{{.*}} -> tensor<8x4xf32>
// CHECK-NEXT: %[[RS:.*]] = shard.reduce_scatter %[[MM]] on @mesh grid_axes = [1] scatter_axis = 0 {{.*}}: tensor<8x4xf32> -> tensor<4x4xf32>
// CHECK-NEXT: dtc.tanh %[[RS]] {{.*}}: tensor<4x4xf32>
// CHECK: %[[MAX:.*]] = "dtc.reduce_max"{{.*}} -> tensor<4xf32>
// CHECK-NEXT: shard.all_reduce %[[MAX]] on @mesh grid_axes = [0] reduction = max {{.*}}: tensor<4xf32> -> tensor<4xf32>
module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 2x2)
  func.func @train_step(%a: tensor<8x16xf32> {dtc.sharding = #dtc.sharding<@mesh, [[], [1]]>},
                        %b: tensor<16x4xf32> {dtc.sharding = #dtc.sharding<@mesh, [[1], []]>},
                        %c: tensor<8x4xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], []]>}) -> (tensor<8x4xf32>, tensor<4xf32>) {
    %0 = "dtc.matmul"(%a, %b) {dtc.factor_axes = [array<i64>, array<i64>, array<i64: 1>]} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %1 = "dtc.tanh"(%0) {dtc.factor_axes = [array<i64: 1>, array<i64>]} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %2 = "dtc.reduce_max"(%c) {axes = array<i64: 0>, keep_dims = false, dtc.factor_axes = [array<i64: 0>, array<i64>]} : (tensor<8x4xf32>) -> tensor<4xf32>
    %3 = "dtc.exp"(%2) : (tensor<4xf32>) -> tensor<4xf32>
    return %1, %3 : tensor<8x4xf32>, tensor<4xf32>
  }
}
