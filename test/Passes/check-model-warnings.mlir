// dtc-check-model warns of a float data input that is not batched like the
// data: most likely a weight whose dtc.param was forgotten (it would get
// new values every step and be split along dimension 0 as the batch).
// `dtc compile --Werror` makes these errors (test/cli/compile-errors.test).
// RUN: dtc-opt %s -split-input-file -verify-diagnostics --dtc-check-model

// Its dimension 0 is not the batch of the ids (a projection weight).
func.func @main(%wq: tensor<8x8xf32> {dtc.param, dtc.name = "wq"},
                // expected-warning @+1 {{data input "wk" looks like a weight: its dimension 0 (8) is not the batch (4, dimension 0 of "ids"); data inputs get new values every step and are split along dimension 0 as the batch. If it is trained, mark it dtc.param (with a dtc.init)}}
                %wk: tensor<8x8xf32> {dtc.name = "wk"},
                %emb: tensor<16x8xf32> {dtc.param, dtc.name = "emb"},
                %ids: tensor<4x8xi32> {dtc.name = "ids", dtc.max = 16 : i64},
                %labels: tensor<4x8xi32> {dtc.name = "labels", dtc.max = 8 : i64}) -> tensor<f32> {
  %h = "dtc.embedding"(%emb, %ids) : (tensor<16x8xf32>, tensor<4x8xi32>) -> tensor<4x8x8xf32>
  %q = "dtc.matmul"(%h, %wq) : (tensor<4x8x8xf32>, tensor<8x8xf32>) -> tensor<4x8x8xf32>
  %k = "dtc.matmul"(%q, %wk) : (tensor<4x8x8xf32>, tensor<8x8xf32>) -> tensor<4x8x8xf32>
  %l = "dtc.cross_entropy"(%k, %labels) : (tensor<4x8x8xf32>, tensor<4x8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// No integer input to name the batch; the weight side of a matmul tells
// (dimension 0 of `b` is contracted), even when its size equals the batch.
func.func @main(%w: tensor<16x1xf32> {dtc.param, dtc.name = "w"},
                %x: tensor<16x16xf32> {dtc.name = "x"},
                // expected-warning @+1 {{data input "proj" looks like a weight: it is operand 1 of 'dtc.matmul', whose dimension 0 is contracted, not a batch}}
                %proj: tensor<16x16xf32> {dtc.name = "proj"},
                %t: tensor<16x1xf32> {dtc.name = "target"}) -> tensor<f32> {
  %h = "dtc.matmul"(%x, %proj) : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %p = "dtc.matmul"(%h, %w) : (tensor<16x16xf32>, tensor<16x1xf32>) -> tensor<16x1xf32>
  %d = "dtc.sub"(%p, %t) : (tensor<16x1xf32>, tensor<16x1xf32>) -> tensor<16x1xf32>
  %sq = "dtc.mul"(%d, %d) : (tensor<16x1xf32>, tensor<16x1xf32>) -> tensor<16x1xf32>
  %mse = "dtc.reduce_mean"(%sq) {axes = array<i64: 0, 1>, keep_dims = false} : (tensor<16x1xf32>) -> tensor<f32>
  return %mse : tensor<f32>
}

// -----

// Data batched like the ids: features, a mask, a batched matmul's `b`
// (its dimension 0 is the batch): no warning.
func.func @main(%w: tensor<8x8xf32> {dtc.param, dtc.name = "w"},
                %x: tensor<4x8x8xf32> {dtc.name = "x"},
                %keys: tensor<4x8x8xf32> {dtc.name = "keys"},
                %labels: tensor<4x8xi32> {dtc.name = "labels", dtc.max = 8 : i64}) -> tensor<f32> {
  %h = "dtc.matmul"(%x, %w) : (tensor<4x8x8xf32>, tensor<8x8xf32>) -> tensor<4x8x8xf32>
  %s = "dtc.matmul"(%h, %keys) : (tensor<4x8x8xf32>, tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %l = "dtc.cross_entropy"(%s, %labels) : (tensor<4x8x8xf32>, tensor<4x8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
