// Matmul with the batch as the contracted and as the N dimension, a
// broadcast rank-3 weight, softmax across the batch.
func.func @main(%w: tensor<5x6xf32> {dtc.param, dtc.name = "w"},
                %w3: tensor<1x6x6xf32> {dtc.param, dtc.name = "w3"},
                %x: tensor<8x6xf32>, %x3: tensor<8x2x6xf32>) -> tensor<f32> {
  %xt = "dtc.transpose"(%x) {permutation = array<i64: 1, 0>} : (tensor<8x6xf32>) -> tensor<6x8xf32>
  %h = "dtc.matmul"(%w, %xt) : (tensor<5x6xf32>, tensor<6x8xf32>) -> tensor<5x8xf32>
  %s = "dtc.softmax"(%h) {axis = 1 : i64} : (tensor<5x8xf32>) -> tensor<5x8xf32>
  %h3 = "dtc.matmul"(%x3, %w3) : (tensor<8x2x6xf32>, tensor<1x6x6xf32>) -> tensor<8x2x6xf32>
  %a = "dtc.reduce_sum"(%s) {axes = array<i64: 0, 1>} : (tensor<5x8xf32>) -> tensor<f32>
  %b = "dtc.reduce_mean"(%h3) {axes = array<i64: 0, 1, 2>} : (tensor<8x2x6xf32>) -> tensor<f32>
  %l = "dtc.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}
