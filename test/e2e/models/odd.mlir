// Rank-1 batch input, norms over the batch itself, empty reduction axes,
// rank-0 transpose and reshape.
func.func @main(%g: tensor<8xf32> {dtc.param, dtc.name = "g", dtc.init = "uniform(0.5,1.5)"},
                %b: tensor<8xf32> {dtc.param, dtc.name = "b"},
                %x: tensor<8xf32>) -> tensor<f32> {
  %n = "dtc.layer_norm"(%x, %g, %b) {epsilon = 1.0e-5 : f32} : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %r = "dtc.rms_norm"(%n, %g) {epsilon = 1.0e-5 : f32} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %e = "dtc.reduce_sum"(%r) {axes = array<i64>} : (tensor<8xf32>) -> tensor<8xf32>
  %k = "dtc.reduce_mean"(%e) {axes = array<i64: 0>, keep_dims = true} : (tensor<8xf32>) -> tensor<1xf32>
  %s = "dtc.reshape"(%k) : (tensor<1xf32>) -> tensor<f32>
  %t = "dtc.transpose"(%s) {permutation = array<i64>} : (tensor<f32>) -> tensor<f32>
  %q = "dtc.mul"(%r, %x) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %q2 = "dtc.sqrt"(%q) : (tensor<8xf32>) -> tensor<8xf32>
  %z = "dtc.max"(%q, %t) : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %zz = "dtc.reduce_mean"(%z) {axes = array<i64: 0>} : (tensor<8xf32>) -> tensor<f32>
  %l = "dtc.add"(%zz, %t) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}
