// A batch mean broadcast back and subtracted (centering over the batch).
func.func @main(%w: tensor<4x3xf32> {dtc.param, dtc.name = "w"},
                %x: tensor<8x4xf32>, %t: tensor<8x3xf32>) -> tensor<f32> {
  %h = "dtc.matmul"(%x, %w) : (tensor<8x4xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
  %m = "dtc.reduce_mean"(%h) {axes = array<i64: 0>, keep_dims = true} : (tensor<8x3xf32>) -> tensor<1x3xf32>
  %c = "dtc.sub"(%h, %m) : (tensor<8x3xf32>, tensor<1x3xf32>) -> tensor<8x3xf32>
  %d = "dtc.sub"(%c, %t) : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
  %e = "dtc.mul"(%d, %d) : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
  %l = "dtc.reduce_mean"(%e) {axes = array<i64: 0, 1>, keep_dims = false} : (tensor<8x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
