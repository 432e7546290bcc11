func.func @main(%w: tensor<16x10xf32> {dtc.param}, %x: tensor<8x17xf32>, %y: tensor<8xi32> {dtc.max = 10 : i64}) -> tensor<f32> {
  %z = "dtc.matmul"(%x, %w) : (tensor<8x17xf32>, tensor<16x10xf32>) -> tensor<8x10xf32>
  %l = "dtc.cross_entropy"(%z, %y) : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
