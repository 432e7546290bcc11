// The issue's example: `casual` for `causal` must not train a language model
// that sees its own labels.
func.func @main(%q: tensor<1x1x4x8xf32> {dtc.param}, %y: tensor<1x1x4x8xf32>) -> tensor<f32> {
  %a = "dtc.attention"(%q, %q, %q) {casual = true} : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  %m = "dtc.mul"(%a, %y) : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  %s = "dtc.reduce_sum"(%m) {axes = array<i64: 0, 1, 2, 3>} : (tensor<1x1x4x8xf32>) -> tensor<f32>
  return %s : tensor<f32>
}
