// Scalar and size-1 parameters, an unused parameter, a mean-squared loss.
func.func @main(%w: tensor<f32> {dtc.param, dtc.name = "w", dtc.init = "ones"},
                %b: tensor<1xf32> {dtc.param, dtc.name = "b"},
                %u: tensor<3xf32> {dtc.param, dtc.name = "unused"},
                %x: tensor<8xf32>, %t: tensor<8xf32>) -> tensor<f32> {
  %h = "dtc.mul"(%x, %w) : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %h2 = "dtc.add"(%b, %h) : (tensor<1xf32>, tensor<8xf32>) -> tensor<8xf32>
  %h3 = "dtc.mul"(%h2, %w) : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %d = "dtc.sub"(%h3, %t) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %e = "dtc.mul"(%d, %d) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %l = "dtc.reduce_mean"(%e) {axes = array<i64: 0>, keep_dims = false} : (tensor<8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
