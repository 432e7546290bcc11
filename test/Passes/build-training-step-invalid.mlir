// RUN: dtc-opt %s -split-input-file -verify-diagnostics --dtc-build-training-step="optimizer=adam" --dtc-assign-layers
// RUN: not dtc-opt %s -split-input-file --dtc-build-training-step="optimizer=lamb" --dtc-assign-layers 2>&1 | FileCheck %s --check-prefix=OPT
// OPT: error: option optimizer: unknown optimizer 'lamb' (expected sgd, adam, adamw or none)
// RUN: not dtc-opt %s -split-input-file --dtc-build-training-step="lr=-1" --dtc-assign-layers 2>&1 | FileCheck %s --check-prefix=LR
// LR: error: option lr: the learning rate must be a positive f32 number, got -1

// Internal gradient ops have no gradient rule of their own.
func.func @main(%w: tensor<4x8xf32> {dtc.param}, %y: tensor<4xi32> {dtc.max = 8 : i64}) -> tensor<f32> {
  // expected-error @+1 {{cannot differentiate through 'dtc.softmax_grad': it has no gradient rule}}
  %0 = "dtc.softmax_grad"(%w, %w) {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "dtc.cross_entropy"(%0, %y) : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
  return %1 : tensor<f32>
}
