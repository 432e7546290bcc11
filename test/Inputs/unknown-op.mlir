func.func @main(%w: tensor<8x10xf32> {dtc.param}, %y: tensor<8xi32> {dtc.max = 10 : i64}) -> tensor<f32> {
  %z = "dtc.swish"(%w) : (tensor<8x10xf32>) -> tensor<8x10xf32>
  %l = "dtc.cross_entropy"(%z, %y) : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
