// The loss is a parameter itself: the returned value is also updated by
// the optimizer, so the loss buffer and the update must not be confused.
func.func @main(%w: tensor<f32> {dtc.param, dtc.name = "w", dtc.init = "normal(1)"}, %x: tensor<8x3xf32>) -> tensor<f32> {
  return %w : tensor<f32>
}
