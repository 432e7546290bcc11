// Plans are data: the partitioner checks every op's factor sharding against
// its rule and the grid instead of trusting it.
// RUN: dtc-opt %s -split-input-file -verify-diagnostics --dtc-partition

module attributes {dtc.plan = {grid = @mesh}} {
  shard.grid @mesh(shape = 2x2)
  func.func @train_step(%x: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], []]>}) -> tensor<4x8xf32> {
    // expected-error @+1 {{dtc.factor_axes: grid axis 2 does not exist on a 2-axis grid}}
    %0 = "dtc.exp"(%x) {dtc.factor_axes = [array<i64: 2>, array<i64>]} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// -----

module attributes {dtc.plan = {grid = @mesh}} {
  shard.grid @mesh(shape = 2x2)
  func.func @train_step(%x: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], []]>}) -> tensor<4x8xf32> {
    // expected-error @+1 {{dtc.factor_axes: grid axis 0 shards two factors (or one twice)}}
    %0 = "dtc.exp"(%x) {dtc.factor_axes = [array<i64: 0>, array<i64: 0>]} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// -----

module attributes {dtc.plan = {grid = @mesh}} {
  shard.grid @mesh(shape = 2x2)
  func.func @train_step(%x: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<@mesh, [[], []]>}) -> tensor<4x8xf32> {
    // expected-error @+1 {{dtc.factor_axes: factor 1 cannot be sharded by this op (its rule blocks it)}}
    %0 = "dtc.softmax"(%x) {axis = 1 : i64, dtc.factor_axes = [array<i64>, array<i64: 1>]} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// -----

module attributes {dtc.plan = {grid = @mesh}} {
  shard.grid @mesh(shape = 4)
  func.func @train_step(%x: tensor<6x8xf32> {dtc.sharding = #dtc.sharding<@mesh, [[], []]>}) -> tensor<6x8xf32> {
    // expected-error @+1 {{dtc.factor_axes: factor 0 of size 6 does not split into 4 equal pieces}}
    %0 = "dtc.exp"(%x) {dtc.factor_axes = [array<i64: 0>, array<i64>]} : (tensor<6x8xf32>) -> tensor<6x8xf32>
    return %0 : tensor<6x8xf32>
  }
}

// -----

module attributes {dtc.plan = {grid = @mesh}} {
  shard.grid @mesh(shape = 2)
  func.func @train_step(%x: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<@mesh, [[], []]>}) -> tensor<32xf32> {
    // expected-error @+1 {{dtc.factor_axes: factor 1 is not the major factor of a merged dimension}}
    %0 = "dtc.reshape"(%x) {dtc.factor_axes = [array<i64>, array<i64: 0>]} : (tensor<4x8xf32>) -> tensor<32xf32>
    return %0 : tensor<32xf32>
  }
}
