// A plan splitting 6 label positions over 4 devices through cross entropy
// (a non-linear mean): test/Passes/uneven-shards.test.
module attributes {dtc.plan = #dtc.plan<@mesh>} {
  shard.grid @mesh(shape = 4)
  func.func @train_step(%x: tensor<6x8xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], []]>},
                        %y: tensor<6xi32> {dtc.sharding = #dtc.sharding<@mesh, [[0]]>}) -> tensor<f32> {
    %0 = "dtc.cross_entropy"(%x, %y) {dtc.factor_axes = [array<i64: 0>, array<i64>]} : (tensor<6x8xf32>, tensor<6xi32>) -> tensor<f32>
    return %0 : tensor<f32>
  }
}
