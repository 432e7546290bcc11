// Regression with a mean-squared-error loss and an L2 penalty: no
// cross_entropy, so the loss's batch mean comes from reduce_mean. Data
// parallelism must rescale each shard's mean (and leave the penalty, which
// has no batch dimension, alone). Hand-written, generic op form.
func.func @main(%w: tensor<12x6xf32> {dtc.param, dtc.name = "w", dtc.init = "normal(0.3)"},
                %b: tensor<6xf32> {dtc.param, dtc.name = "b", dtc.init = "uniform(-0.1,0.1)"},
                %v: tensor<6x1xf32> {dtc.param, dtc.name = "v", dtc.init = "normal(0.3)"},
                %x: tensor<16x12xf32> {dtc.name = "x"},
                %t: tensor<16x1xf32> {dtc.name = "target"}) -> tensor<f32> {
  %h = "dtc.matmul"(%x, %w) : (tensor<16x12xf32>, tensor<12x6xf32>) -> tensor<16x6xf32>
  %hb = "dtc.add"(%h, %b) : (tensor<16x6xf32>, tensor<6xf32>) -> tensor<16x6xf32>
  %a = "dtc.silu"(%hb) : (tensor<16x6xf32>) -> tensor<16x6xf32>
  %p = "dtc.matmul"(%a, %v) : (tensor<16x6xf32>, tensor<6x1xf32>) -> tensor<16x1xf32>
  %d = "dtc.sub"(%p, %t) : (tensor<16x1xf32>, tensor<16x1xf32>) -> tensor<16x1xf32>
  %sq = "dtc.mul"(%d, %d) : (tensor<16x1xf32>, tensor<16x1xf32>) -> tensor<16x1xf32>
  %mse = "dtc.reduce_mean"(%sq) {axes = array<i64: 0, 1>, keep_dims = false} : (tensor<16x1xf32>) -> tensor<f32>
  %w2 = "dtc.mul"(%w, %w) : (tensor<12x6xf32>, tensor<12x6xf32>) -> tensor<12x6xf32>
  %l2 = "dtc.reduce_sum"(%w2) {axes = array<i64: 0, 1>} : (tensor<12x6xf32>) -> tensor<f32>
  %lambda = arith.constant dense<1.0e-3> : tensor<f32>
  %pen = "dtc.mul"(%l2, %lambda) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %loss = "dtc.add"(%mse, %pen) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %loss : tensor<f32>
}
