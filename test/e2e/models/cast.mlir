// Casts between float and integer types inside the loss (no gradient
// flows through the integer path).
func.func @main(%w: tensor<3xf32> {dtc.param, dtc.name = "w"},
                %ids: tensor<8x3xi32> {dtc.max = 5 : i64}) -> tensor<f32> {
  %f = "dtc.cast"(%ids) : (tensor<8x3xi32>) -> tensor<8x3xf32>
  %m = "dtc.mul"(%f, %w) : (tensor<8x3xf32>, tensor<3xf32>) -> tensor<8x3xf32>
  %i = "dtc.cast"(%m) : (tensor<8x3xf32>) -> tensor<8x3xi64>
  %f2 = "dtc.cast"(%i) : (tensor<8x3xi64>) -> tensor<8x3xf32>
  %s = "dtc.add"(%f2, %m) : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
  %l = "dtc.reduce_mean"(%s) {axes = array<i64: 0, 1>} : (tensor<8x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
