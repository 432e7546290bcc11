// Batch-norm style: a mean over the batch (a pending sum) is used both
// through a reshape view and directly; the view must not see it reduced twice.
func.func @main(%w: tensor<4x4xf32> {dtc.param, dtc.name = "w"},
                %x: tensor<8x4xf32>) -> tensor<f32> {
  %h = "dtc.matmul"(%x, %w) : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  %m = "dtc.reduce_mean"(%h) {axes = array<i64: 0>} : (tensor<8x4xf32>) -> tensor<4xf32>
  %mr = "dtc.reshape"(%m) : (tensor<4xf32>) -> tensor<1x4xf32>
  %m2 = "dtc.mul"(%m, %m) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %c = "dtc.sub"(%h, %mr) : (tensor<8x4xf32>, tensor<1x4xf32>) -> tensor<8x4xf32>
  %c2 = "dtc.mul"(%c, %c) : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %s = "dtc.reduce_mean"(%c2) {axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  %s2 = "dtc.reduce_sum"(%m2) {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  %l = "dtc.add"(%s, %s2) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}
