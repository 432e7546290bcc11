func.func @main(%w: tensor<4xf32> {dtc.param}) -> tensor<f32> {
  %x = "dtc.add"(%w %w)
}
