// A batch that does not divide over the data-parallel degree: the error points
// at the input.
// RUN: dtc-opt %s -verify-diagnostics --dtc-build-training-step --dtc-assign-layers --dtc-apply-strategy="mesh=3" --dtc-materialize-plan

// expected-error @+1 {{the batch dimension of input "x" has size 8, which does not divide over dp=3}}
func.func @main(%w: tensor<16x8xf32> {dtc.param}, %x: tensor<8x16xf32> {dtc.name = "x"},
                %y: tensor<8xi32> {dtc.max = 8 : i64}) -> tensor<f32> {
  %h = "dtc.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %l = "dtc.cross_entropy"(%h, %y) : (tensor<8x8xf32>, tensor<8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
