module {
  func.func @main(%x: tensor<2xf32> {dtc.sharding = #gtc.sharding<[[// a comment
]]>}) -> tensor<f32> {
    %0 = "dtc.reduce_sum"(%x) : (tensor<2xf32>) -> tensor<f32>
    return %0 : tensor<f32>
  }
}
