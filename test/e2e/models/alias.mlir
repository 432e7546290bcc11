// A Gram matrix contracted over the batch (pending sum), then used
// through a reshape view and directly.
func.func @main(%w: tensor<4x4xf32> {dtc.param, dtc.name = "w"},
                %x: tensor<8x4xf32>) -> tensor<f32> {
  %h = "dtc.matmul"(%x, %w) : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  %ht = "dtc.transpose"(%h) {permutation = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %v = "dtc.matmul"(%ht, %h) : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %r = "dtc.reshape"(%v) : (tensor<4x4xf32>) -> tensor<16xf32>
  %a = "dtc.tanh"(%v) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %b = "dtc.tanh"(%r) : (tensor<16xf32>) -> tensor<16xf32>
  %sa = "dtc.reduce_sum"(%a) {axes = array<i64: 0, 1>} : (tensor<4x4xf32>) -> tensor<f32>
  %sb = "dtc.reduce_sum"(%b) {axes = array<i64: 0>} : (tensor<16xf32>) -> tensor<f32>
  %l = "dtc.add"(%sa, %sb) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}
