// Values computed once per step from parameters alone (exp of a scale, a
// transposed weight the matmul cannot fold) and read by every micro-batch's
// forward and backward: they must outlive all the micro-batches.
func.func @main(%x: tensor<8x16xf32> {dtc.name = "x"},
                %y: tensor<8xi32> {dtc.name = "y", dtc.max = 10 : i64},
                %w0: tensor<16x16xf32> {dtc.param, dtc.name = "w0", dtc.init = "normal(0.3)"},
                %s0: tensor<16xf32> {dtc.param, dtc.name = "s0", dtc.init = "normal(0.1)"},
                %w1: tensor<10x16xf32> {dtc.param, dtc.name = "w1", dtc.init = "normal(0.3)"},
                %b1: tensor<16xf32> {dtc.param, dtc.name = "b1", dtc.init = "zeros"}) -> tensor<f32> {
  %scale = "dtc.exp"(%s0) : (tensor<16xf32>) -> tensor<16xf32>
  %h = "dtc.matmul"(%x, %w0) : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %hs = "dtc.mul"(%h, %scale) : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %a = "dtc.tanh"(%hs) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %ab = "dtc.add"(%a, %b1) : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %w1t = "dtc.transpose"(%w1) {permutation = array<i64: 1, 0>} : (tensor<10x16xf32>) -> tensor<16x10xf32>
  %w1s = "dtc.mul"(%w1t, %w1t) : (tensor<16x10xf32>, tensor<16x10xf32>) -> tensor<16x10xf32>
  %z = "dtc.matmul"(%ab, %w1s) : (tensor<8x16xf32>, tensor<16x10xf32>) -> tensor<8x10xf32>
  %l = "dtc.cross_entropy"(%z, %y) : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
