func.func @main(%w: tensor<8x10xf32> {dtc.param}, %y: tensor<8xi32> {dtc.max = 10 : i64}) -> tensor<8x10xf32> {
  return %w : tensor<8x10xf32>
}
