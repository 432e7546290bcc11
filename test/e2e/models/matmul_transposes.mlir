// Every transpose_a/transpose_b combination of matmul the emitter can fold
// (a transpose of the last two dims read only by matmuls): with a shared 2-D
// weight, batched, broadcast over the batch, and 4-D with broadcast batch
// dims. Mostly non-square, so a swapped or ignored flag cannot go unnoticed
// (the runtime refuses the shapes); one square case, where it would compute
// wrong numbers instead. A transpose whose value the backward pass also
// reads (to differentiate the matmul) is not folded: both operands of the
// matmuls with transpose_a and transpose_b are constants or data. The
// backward pass adds matmuls of transposes of its own.
func.func @main(%x: tensor<8x5x3xf32> {dtc.name = "x"},
                %s1: tensor<8x4x4xf32> {dtc.name = "s1"},
                %s2: tensor<8x4x4xf32> {dtc.name = "s2"},
                %y: tensor<8x7x3xf32> {dtc.name = "y"},
                %z: tensor<8x5x7xf32> {dtc.name = "z"},
                %w1: tensor<3x4xf32> {dtc.param, dtc.name = "w1", dtc.init = "normal(0.5)"},
                %w2: tensor<4x3xf32> {dtc.param, dtc.name = "w2", dtc.init = "normal(0.5)"},
                %w3: tensor<5x6xf32> {dtc.param, dtc.name = "w3", dtc.init = "normal(0.5)"},
                %w4: tensor<6x5xf32> {dtc.param, dtc.name = "w4", dtc.init = "normal(0.5)"},
                %w5: tensor<4x3xf32> {dtc.param, dtc.name = "w5", dtc.init = "normal(0.5)"},
                %w6: tensor<3x4xf32> {dtc.param, dtc.name = "w6", dtc.init = "normal(0.5)"},
                %w7: tensor<2x3x6xf32> {dtc.param, dtc.name = "w7", dtc.init = "normal(0.5)"},
                %w8: tensor<2x6x3xf32> {dtc.param, dtc.name = "w8", dtc.init = "normal(0.5)"}) -> tensor<f32> {
  %t1 = "dtc.transpose"(%x) {permutation = array<i64: 0, 2, 1>} : (tensor<8x5x3xf32>) -> tensor<8x3x5xf32>
  // shared weight: plain
  %m2 = "dtc.matmul"(%x, %w1) : (tensor<8x5x3xf32>, tensor<3x4xf32>) -> tensor<8x5x4xf32>
  %t3 = "dtc.transpose"(%w2) {permutation = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  // shared weight: transpose_b
  %m4 = "dtc.matmul"(%x, %t3) : (tensor<8x5x3xf32>, tensor<3x4xf32>) -> tensor<8x5x4xf32>
  // batched data, shared weight: transpose_a
  %m5 = "dtc.matmul"(%t1, %w3) : (tensor<8x3x5xf32>, tensor<5x6xf32>) -> tensor<8x3x6xf32>
  %t6 = "dtc.transpose"(%w4) {permutation = array<i64: 1, 0>} : (tensor<6x5xf32>) -> tensor<5x6xf32>
  // transpose_a and transpose_b
  %m7 = "dtc.matmul"(%t1, %t6) : (tensor<8x3x5xf32>, tensor<5x6xf32>) -> tensor<8x3x6xf32>
  %t8 = "dtc.transpose"(%y) {permutation = array<i64: 0, 2, 1>} : (tensor<8x7x3xf32>) -> tensor<8x3x7xf32>
  // batched, both data: transpose_b
  %m9 = "dtc.matmul"(%x, %t8) : (tensor<8x5x3xf32>, tensor<8x3x7xf32>) -> tensor<8x5x7xf32>
  // batched: transpose_a
  %m10 = "dtc.matmul"(%t1, %z) : (tensor<8x3x5xf32>, tensor<8x5x7xf32>) -> tensor<8x3x7xf32>
  %t11 = "dtc.transpose"(%z) {permutation = array<i64: 0, 2, 1>} : (tensor<8x5x7xf32>) -> tensor<8x7x5xf32>
  %t12 = "dtc.transpose"(%y) {permutation = array<i64: 0, 2, 1>} : (tensor<8x7x3xf32>) -> tensor<8x3x7xf32>
  // batched: transpose_a and transpose_b
  %m13 = "dtc.matmul"(%t12, %t11) : (tensor<8x3x7xf32>, tensor<8x7x5xf32>) -> tensor<8x3x5xf32>
  // a broadcast over the batch: transpose_b (b = x^T)
  %m14 = "dtc.matmul"(%w5, %t1) : (tensor<4x3xf32>, tensor<8x3x5xf32>) -> tensor<8x4x5xf32>
  %t15 = "dtc.transpose"(%w6) {permutation = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
  // a broadcast, transpose_a and transpose_b
  %m16 = "dtc.matmul"(%t15, %t1) : (tensor<4x3xf32>, tensor<8x3x5xf32>) -> tensor<8x4x5xf32>
  %r17 = "dtc.reshape"(%x) : (tensor<8x5x3xf32>) -> tensor<8x1x5x3xf32>
  // 4-D: b's batch dims broadcast against a's
  %m18 = "dtc.matmul"(%r17, %w7) : (tensor<8x1x5x3xf32>, tensor<2x3x6xf32>) -> tensor<8x2x5x6xf32>
  %t19 = "dtc.transpose"(%w8) {permutation = array<i64: 0, 2, 1>} : (tensor<2x6x3xf32>) -> tensor<2x3x6xf32>
  // 4-D broadcast: transpose_b
  %m20 = "dtc.matmul"(%r17, %t19) : (tensor<8x1x5x3xf32>, tensor<2x3x6xf32>) -> tensor<8x2x5x6xf32>
  %t21 = "dtc.transpose"(%r17) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<8x1x5x3xf32>) -> tensor<8x1x3x5xf32>
  %t22 = "dtc.transpose"(%t21) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<8x1x3x5xf32>) -> tensor<8x1x5x3xf32>
  // a transpose of a transpose (only the outer one folds)
  %m23 = "dtc.matmul"(%t22, %w7) : (tensor<8x1x5x3xf32>, tensor<2x3x6xf32>) -> tensor<8x2x5x6xf32>
  %q24 = "dtc.mul"(%m2, %m2) : (tensor<8x5x4xf32>, tensor<8x5x4xf32>) -> tensor<8x5x4xf32>
  %s25 = "dtc.reduce_mean"(%q24) {axes = array<i64: 0, 1, 2>} : (tensor<8x5x4xf32>) -> tensor<f32>
  %q26 = "dtc.mul"(%m4, %m4) : (tensor<8x5x4xf32>, tensor<8x5x4xf32>) -> tensor<8x5x4xf32>
  %s27 = "dtc.reduce_mean"(%q26) {axes = array<i64: 0, 1, 2>} : (tensor<8x5x4xf32>) -> tensor<f32>
  %l28 = "dtc.add"(%s25, %s27) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %q29 = "dtc.mul"(%m5, %m5) : (tensor<8x3x6xf32>, tensor<8x3x6xf32>) -> tensor<8x3x6xf32>
  %s30 = "dtc.reduce_mean"(%q29) {axes = array<i64: 0, 1, 2>} : (tensor<8x3x6xf32>) -> tensor<f32>
  %l31 = "dtc.add"(%l28, %s30) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %q32 = "dtc.mul"(%m7, %m7) : (tensor<8x3x6xf32>, tensor<8x3x6xf32>) -> tensor<8x3x6xf32>
  %s33 = "dtc.reduce_mean"(%q32) {axes = array<i64: 0, 1, 2>} : (tensor<8x3x6xf32>) -> tensor<f32>
  %l34 = "dtc.add"(%l31, %s33) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %q35 = "dtc.mul"(%m9, %m9) : (tensor<8x5x7xf32>, tensor<8x5x7xf32>) -> tensor<8x5x7xf32>
  %s36 = "dtc.reduce_mean"(%q35) {axes = array<i64: 0, 1, 2>} : (tensor<8x5x7xf32>) -> tensor<f32>
  %l37 = "dtc.add"(%l34, %s36) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %q38 = "dtc.mul"(%m10, %m10) : (tensor<8x3x7xf32>, tensor<8x3x7xf32>) -> tensor<8x3x7xf32>
  %s39 = "dtc.reduce_mean"(%q38) {axes = array<i64: 0, 1, 2>} : (tensor<8x3x7xf32>) -> tensor<f32>
  %l40 = "dtc.add"(%l37, %s39) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %q41 = "dtc.mul"(%m13, %m13) : (tensor<8x3x5xf32>, tensor<8x3x5xf32>) -> tensor<8x3x5xf32>
  %s42 = "dtc.reduce_mean"(%q41) {axes = array<i64: 0, 1, 2>} : (tensor<8x3x5xf32>) -> tensor<f32>
  %l43 = "dtc.add"(%l40, %s42) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %q44 = "dtc.mul"(%m14, %m14) : (tensor<8x4x5xf32>, tensor<8x4x5xf32>) -> tensor<8x4x5xf32>
  %s45 = "dtc.reduce_mean"(%q44) {axes = array<i64: 0, 1, 2>} : (tensor<8x4x5xf32>) -> tensor<f32>
  %l46 = "dtc.add"(%l43, %s45) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %q47 = "dtc.mul"(%m16, %m16) : (tensor<8x4x5xf32>, tensor<8x4x5xf32>) -> tensor<8x4x5xf32>
  %s48 = "dtc.reduce_mean"(%q47) {axes = array<i64: 0, 1, 2>} : (tensor<8x4x5xf32>) -> tensor<f32>
  %l49 = "dtc.add"(%l46, %s48) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %q50 = "dtc.mul"(%m18, %m18) : (tensor<8x2x5x6xf32>, tensor<8x2x5x6xf32>) -> tensor<8x2x5x6xf32>
  %s51 = "dtc.reduce_mean"(%q50) {axes = array<i64: 0, 1, 2, 3>} : (tensor<8x2x5x6xf32>) -> tensor<f32>
  %l52 = "dtc.add"(%l49, %s51) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %q53 = "dtc.mul"(%m20, %m20) : (tensor<8x2x5x6xf32>, tensor<8x2x5x6xf32>) -> tensor<8x2x5x6xf32>
  %s54 = "dtc.reduce_mean"(%q53) {axes = array<i64: 0, 1, 2, 3>} : (tensor<8x2x5x6xf32>) -> tensor<f32>
  %l55 = "dtc.add"(%l52, %s54) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %q56 = "dtc.mul"(%m23, %m23) : (tensor<8x2x5x6xf32>, tensor<8x2x5x6xf32>) -> tensor<8x2x5x6xf32>
  %s57 = "dtc.reduce_mean"(%q56) {axes = array<i64: 0, 1, 2, 3>} : (tensor<8x2x5x6xf32>) -> tensor<f32>
  %l58 = "dtc.add"(%l55, %s57) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  // batched, square: transpose_a and transpose_b
  %s1t = "dtc.transpose"(%s1) {permutation = array<i64: 0, 2, 1>} : (tensor<8x4x4xf32>) -> tensor<8x4x4xf32>
  %s2t = "dtc.transpose"(%s2) {permutation = array<i64: 0, 2, 1>} : (tensor<8x4x4xf32>) -> tensor<8x4x4xf32>
  %sq = "dtc.matmul"(%s1t, %s2t) : (tensor<8x4x4xf32>, tensor<8x4x4xf32>) -> tensor<8x4x4xf32>
  // a constant broadcast over the batch: transpose_a and transpose_b
  %c = arith.constant dense<[[0.5, -1.0, 2.0, 0.25], [1.5, 0.75, -0.5, 1.0], [-2.0, 0.125, 1.0, -0.25]]> : tensor<3x4xf32>
  %ct = "dtc.transpose"(%c) {permutation = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
  %xt2 = "dtc.transpose"(%x) {permutation = array<i64: 0, 2, 1>} : (tensor<8x5x3xf32>) -> tensor<8x3x5xf32>
  %cx = "dtc.matmul"(%ct, %xt2) : (tensor<4x3xf32>, tensor<8x3x5xf32>) -> tensor<8x4x5xf32>
  // Their outputs scale a parameter's contribution, so they reach the loss
  // and its gradient.
  %sqs = "dtc.reduce_mean"(%sq) {axes = array<i64: 0, 1, 2>} : (tensor<8x4x4xf32>) -> tensor<f32>
  %cxs = "dtc.reduce_mean"(%cx) {axes = array<i64: 0, 1, 2>} : (tensor<8x4x5xf32>) -> tensor<f32>
  %k = "dtc.add"(%sqs, %cxs) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %kl = "dtc.mul"(%k, %s57) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %loss = "dtc.add"(%l58, %kl) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %loss : tensor<f32>
}
