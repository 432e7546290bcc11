// Attention with queries of another length than keys (Sq != Sk), keys
// broadcast from a parameter, then causal self-attention; batch reshaped
// into the head dimension.
func.func @main(%wq: tensor<6x6xf32> {dtc.param, dtc.name = "wq"},
                %kv: tensor<1x2x5x3xf32> {dtc.param, dtc.name = "kv"},
                %x: tensor<8x4x6xf32>) -> tensor<f32> {
  %q = "dtc.matmul"(%x, %wq) : (tensor<8x4x6xf32>, tensor<6x6xf32>) -> tensor<8x4x6xf32>
  %q4 = "dtc.reshape"(%q) : (tensor<8x4x6xf32>) -> tensor<4x2x4x6xf32>
  %q5 = "dtc.reshape"(%q4) : (tensor<4x2x4x6xf32>) -> tensor<4x2x8x3xf32>
  %k = "dtc.broadcast"(%kv) : (tensor<1x2x5x3xf32>) -> tensor<4x2x5x3xf32>
  %o = "dtc.attention"(%q5, %k, %k) {causal = false} : (tensor<4x2x8x3xf32>, tensor<4x2x5x3xf32>, tensor<4x2x5x3xf32>) -> tensor<4x2x8x3xf32>
  %o2 = "dtc.attention"(%q5, %q5, %o) {causal = true} : (tensor<4x2x8x3xf32>, tensor<4x2x8x3xf32>, tensor<4x2x8x3xf32>) -> tensor<4x2x8x3xf32>
  %m = "dtc.mul"(%o2, %o2) : (tensor<4x2x8x3xf32>, tensor<4x2x8x3xf32>) -> tensor<4x2x8x3xf32>
  %l = "dtc.reduce_mean"(%m) {axes = array<i64: 0, 1, 2, 3>} : (tensor<4x2x8x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
