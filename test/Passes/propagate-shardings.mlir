// Sharding propagation from pins: forward and backward through the rules,
// minor factors of merged dimensions kept, conflicts resolved by priority
// (user > strategy > inferred), then operand order.
// RUN: dtc-opt %s -split-input-file --dtc-propagate-shardings | FileCheck %s

// A user pin beats a strategy pin at the op where they meet: the matmul
// contracts over axis 0 (w's rows), so x's rows stay whole there.
// CHECK-LABEL: func.func @train_step
// CHECK: "dtc.matmul"{{.*}}dtc.factor_axes = [array<i64>, array<i64>, array<i64: 0>]
module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 2)
  func.func @train_step(%x: tensor<8x16xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], []]>, dtc.pin_priority = "strategy"},
                        %w: tensor<16x4xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], []]>, dtc.pin_priority = "user"}) -> tensor<8x4xf32> {
    %0 = "dtc.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}

// -----

// The same pins at equal priority: the first operand wins.
// CHECK-LABEL: func.func @train_step
// CHECK: "dtc.matmul"{{.*}}dtc.factor_axes = [array<i64: 0>, array<i64>, array<i64>]
module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 2)
  func.func @train_step(%x: tensor<8x16xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], []]>},
                        %w: tensor<16x4xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], []]>}) -> tensor<8x4xf32> {
    %0 = "dtc.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}

// -----

// Backward: a pin on an op's result reaches the unpinned arguments it was
// computed from (through tanh and the add, to both operands), and forward
// to its consumer.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg0: tensor<8x16xf32> {dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}], [0]]>}
// CHECK-SAME: %arg1: tensor<16xf32> {dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}0]]>}
// CHECK: "dtc.add"{{.*}}dtc.factor_axes = [array<i64>, array<i64: 0>]
// CHECK: dtc.tanh {{.*}}dtc.factor_axes = [array<i64>, array<i64: 0>]
// CHECK: dtc.exp {{.*}}dtc.factor_axes = [array<i64>, array<i64: 0>]
module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 2)
  func.func @train_step(%a: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<8x16xf32> {
    %0 = "dtc.add"(%a, %b) : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
    %1 = "dtc.tanh"(%0) {dtc.pin = #dtc.sharding<@mesh, [[], [0]]>} : (tensor<8x16xf32>) -> tensor<8x16xf32>
    %2 = "dtc.exp"(%1) : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %2 : tensor<8x16xf32>
  }
}

// -----

// Minor factors are kept: a batch x sequence dimension split over both
// axes gives the batch axis 0 (fully split) and the sequence axis 1, and
// merging them back splits the merged dimension over [0, 1].
// CHECK-LABEL: func.func @train_step
// CHECK: "dtc.reshape"{{.*}}dtc.factor_axes = [array<i64: 0>, array<i64: 1>, array<i64>]{{.*}}-> tensor<2x4x16xf32>
// CHECK: "dtc.reshape"{{.*}}dtc.factor_axes = [array<i64: 0>, array<i64: 1>, array<i64>]{{.*}}-> tensor<8x16xf32>
// CHECK: dtc.tanh {{.*}}dtc.factor_axes = [array<i64: 0, 1>, array<i64>]
module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 2x4)
  func.func @train_step(%x: tensor<8x16xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0, 1], []]>}) -> tensor<8x16xf32> {
    %0 = "dtc.reshape"(%x) : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %1 = "dtc.reshape"(%0) : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
    %2 = "dtc.tanh"(%1) : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %2 : tensor<8x16xf32>
  }
}

// -----

// Pins are closed: a replicated pin stays replicated although its consumer
// is split; inferred splits fill only what nobody pinned (%c).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg0: tensor<8xf32> {dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}0]]>}
// CHECK-SAME: %arg1: tensor<8xf32> {dtc.pin_priority = "user", dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}]]>}
// CHECK-SAME: %arg2: tensor<8xf32> {dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}0]]>}
// CHECK: "dtc.add"{{.*}}dtc.factor_axes = [array<i64: 0>]
// CHECK: "dtc.mul"{{.*}}dtc.factor_axes = [array<i64: 0>]
module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 2)
  func.func @train_step(%a: tensor<8xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0]]>},
                        %r: tensor<8xf32> {dtc.sharding = #dtc.sharding<@mesh, [[]]>, dtc.pin_priority = "user"},
                        %c: tensor<8xf32>) -> tensor<8xf32> {
    %0 = "dtc.add"(%a, %r) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %1 = "dtc.mul"(%0, %c) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    return %1 : tensor<8xf32>
  }
}

// -----

// A storage pin fixes how a value is stored without proposing its split:
// the weight stored split over axis 0 (ZeRO-3) does not pull the matmul
// away from the batch split; the matmul plans as if it were whole (the
// partitioner gathers it), and the ops downstream keep the batch split.
// (As a user pin, the same split wins at the matmul: the first case above.)
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg1: tensor<16x4xf32> {dtc.pin_priority = "storage", dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}0], []]>}
// CHECK: "dtc.matmul"{{.*}}dtc.factor_axes = [array<i64: 0>, array<i64>, array<i64>]
// CHECK: dtc.tanh {{.*}}dtc.factor_axes = [array<i64: 0>, array<i64>]
module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 2)
  func.func @train_step(%x: tensor<8x16xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], []]>, dtc.pin_priority = "strategy"},
                        %w: tensor<16x4xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], []]>, dtc.pin_priority = "storage"}) -> tensor<8x4xf32> {
    %0 = "dtc.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %1 = "dtc.tanh"(%0) : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %1 : tensor<8x4xf32>
  }
}

// -----

// Nor does a storage pin reach the values it meets: %y stays whole (a
// strategy pin on %w would split the add and %y).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg1: tensor<8xf32> {dtc.sharding = #dtc.sharding<@mesh, {{\[\[}}]]>}
// CHECK: "dtc.add"{{.*}}dtc.factor_axes = [array<i64>]
module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 2)
  func.func @train_step(%w: tensor<8xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0]]>, dtc.pin_priority = "storage"},
                        %y: tensor<8xf32>) -> tensor<8xf32> {
    %0 = "dtc.add"(%w, %y) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
