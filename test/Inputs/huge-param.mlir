// One parameter of 2^38 f32 (1 TiB): parameter, gradient and Adam state
// need about 4 TiB, more than any machine the tests run on.
func.func @main(%w: tensor<262144x1048576xf32> {dtc.param, dtc.name = "w"}) -> tensor<f32> {
  %s = "dtc.reduce_sum"(%w) {axes = array<i64: 0, 1>} : (tensor<262144x1048576xf32>) -> tensor<f32>
  return %s : tensor<f32>
}
