// Plans are data: the partitioner checks every op's factor sharding against
// its rule and the grid instead of trusting it.
// RUN: dtc-opt %s -split-input-file -verify-diagnostics --dtc-partition

module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 2x2)
  func.func @train_step(%x: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], []]>}) -> tensor<4x8xf32> {
    // expected-error @+1 {{dtc.factor_axes: grid axis 2 does not exist on a 2-axis grid}}
    %0 = "dtc.exp"(%x) {dtc.factor_axes = [array<i64: 2>, array<i64>]} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// -----

module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 2x2)
  func.func @train_step(%x: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], []]>}) -> tensor<4x8xf32> {
    // expected-error @+1 {{dtc.factor_axes: grid axis 0 shards two factors (or one twice)}}
    %0 = "dtc.exp"(%x) {dtc.factor_axes = [array<i64: 0>, array<i64: 0>]} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// -----

module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 2x2)
  func.func @train_step(%x: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<@mesh, [[], []]>}) -> tensor<4x8xf32> {
    // expected-error @+1 {{dtc.factor_axes: factor 1 cannot be sharded by this op (its rule blocks it)}}
    %0 = "dtc.softmax"(%x) {axis = 1 : i64, dtc.factor_axes = [array<i64>, array<i64: 1>]} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// -----

// An uneven split is padded, but cross entropy averages over its label
// positions non-linearly: padding would change the loss.
module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 4)
  func.func @train_step(%x: tensor<6x8xf32> {dtc.sharding = #dtc.sharding<@mesh, [[], []]>},
                        %y: tensor<6xi32> {dtc.sharding = #dtc.sharding<@mesh, [[]]>}) -> tensor<f32> {
    // expected-error @+1 {{cannot split dimension 0 (size 6) of operand 0 of 'dtc.cross_entropy' into 4 pieces: it does not divide, and the op reduces over it non-linearly (padding would change its result)}}
    %0 = "dtc.cross_entropy"(%x, %y) {dtc.factor_axes = [array<i64: 0>, array<i64>]} : (tensor<6x8xf32>, tensor<6xi32>) -> tensor<f32>
    return %0 : tensor<f32>
  }
}

// -----

// Padding sits at the end of a dimension: a padded split may only be the
// major factor of a merged one (8 rows of 6 columns merged, the columns
// split into 4).
module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 4)
  func.func @train_step(%x: tensor<8x6xf32> {dtc.sharding = #dtc.sharding<@mesh, [[], []]>}) -> tensor<48xf32> {
    // expected-error @+1 {{cannot split dimension 1 (size 6) of operand 0 of 'dtc.reshape' into 4 pieces: it does not divide, and it is not the major factor of a merged dimension (padding must sit at the end of the dimension)}}
    %0 = "dtc.reshape"(%x) {dtc.factor_axes = [array<i64>, array<i64: 0>]} : (tensor<8x6xf32>) -> tensor<48xf32>
    return %0 : tensor<48xf32>
  }
}

// -----

module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 2)
  func.func @train_step(%x: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<@mesh, [[], []]>}) -> tensor<32xf32> {
    // expected-error @+1 {{dtc.factor_axes: factor 1 is sharded inside dimension 0 of result 0 while its major factor 0 (size 4) is not split completely}}
    %0 = "dtc.reshape"(%x) {dtc.factor_axes = [array<i64>, array<i64: 0>]} : (tensor<4x8xf32>) -> tensor<32xf32>
    return %0 : tensor<32xf32>
  }
}
