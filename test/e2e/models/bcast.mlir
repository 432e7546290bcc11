// Broadcasting in every position, including parameters with size-1
// dims on the batch axis.
func.func @main(%w: tensor<1x4x1xf32> {dtc.param, dtc.name = "w"},
                %v: tensor<8x1x1xf32> {dtc.param, dtc.name = "v"},
                %x: tensor<8x1x3xf32>) -> tensor<f32> {
  %a = "dtc.mul"(%x, %w) : (tensor<8x1x3xf32>, tensor<1x4x1xf32>) -> tensor<8x4x3xf32>
  %b = "dtc.add"(%a, %v) : (tensor<8x4x3xf32>, tensor<8x1x1xf32>) -> tensor<8x4x3xf32>
  %t = "dtc.tanh"(%b) : (tensor<8x4x3xf32>) -> tensor<8x4x3xf32>
  %l = "dtc.reduce_sum"(%t) {axes = array<i64: 0, 1, 2>, keep_dims = false} : (tensor<8x4x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
