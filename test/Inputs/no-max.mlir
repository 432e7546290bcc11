func.func @main(%w: tensor<8x10xf32> {dtc.param}, %y: tensor<8xi32> {dtc.name = "labels"}) -> tensor<f32> {
  %l = "dtc.cross_entropy"(%w, %y) : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
