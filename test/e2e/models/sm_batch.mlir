// Softmax over the batch axis: the partitioner must gather the batch.
func.func @main(%w: tensor<4x3xf32> {dtc.param, dtc.name = "w"},
                %x: tensor<8x4xf32>) -> tensor<f32> {
  %h = "dtc.matmul"(%x, %w) : (tensor<8x4xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
  %s = "dtc.softmax"(%h) {axis = 0 : i64} : (tensor<8x3xf32>) -> tensor<8x3xf32>
  %q = "dtc.mul"(%s, %h) : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
  %l = "dtc.reduce_sum"(%q) {axes = array<i64: 0, 1>, keep_dims = false} : (tensor<8x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
