// i64 ids, a constant with a batch dimension, layer_norm over a size-1
// dim, a tied and transposed embedding, a parameter initialised by fill(V).
func.func @main(%emb: tensor<7x4xf32> {dtc.param, dtc.name = "emb", dtc.init = "uniform(-0.5,0.5)"},
                %g: tensor<1xf32> {dtc.param, dtc.name = "g", dtc.init = "ones"},
                %bb: tensor<1xf32> {dtc.param, dtc.name = "bb", dtc.init = "fill(0.25)"},
                %ids: tensor<8x3xi64> {dtc.max = 7 : i64},
                %lab: tensor<8x3xi32> {dtc.max = 7 : i64}) -> tensor<f32> {
  %c = arith.constant dense<[[1.0],[2.0],[3.0],[4.0],[5.0],[6.0],[7.0],[8.0]]> : tensor<8x1xf32>
  %e = "dtc.embedding"(%emb, %ids) : (tensor<7x4xf32>, tensor<8x3xi64>) -> tensor<8x3x4xf32>
  %r = "dtc.reshape"(%e) : (tensor<8x3x4xf32>) -> tensor<8x12x1xf32>
  %n = "dtc.layer_norm"(%r, %g, %bb) {epsilon = 1.0e-5 : f32} : (tensor<8x12x1xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<8x12x1xf32>
  %r2 = "dtc.reshape"(%n) : (tensor<8x12x1xf32>) -> tensor<8x12xf32>
  %s = "dtc.mul"(%r2, %c) : (tensor<8x12xf32>, tensor<8x1xf32>) -> tensor<8x12xf32>
  %r3 = "dtc.reshape"(%s) : (tensor<8x12xf32>) -> tensor<8x3x4xf32>
  %et = "dtc.transpose"(%emb) {permutation = array<i64: 1, 0>} : (tensor<7x4xf32>) -> tensor<4x7xf32>
  %e2 = "dtc.add"(%r3, %e) : (tensor<8x3x4xf32>, tensor<8x3x4xf32>) -> tensor<8x3x4xf32>
  %z = "dtc.matmul"(%e2, %et) : (tensor<8x3x4xf32>, tensor<4x7xf32>) -> tensor<8x3x7xf32>
  %l = "dtc.cross_entropy"(%z, %lab) : (tensor<8x3x7xf32>, tensor<8x3xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
