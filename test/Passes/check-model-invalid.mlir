// The model contract of docs/model-format.md, one error each.
// RUN: dtc-opt %s -split-input-file -verify-diagnostics --dtc-check-model

// expected-error @+1 {{the model has no func.func @main (the forward pass returning the loss)}}
module {
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// expected-error @+1 {{@main must return exactly one value, the scalar loss tensor<f32>; it returns 'tensor<4xf32>'}}
func.func @main(%w: tensor<4xf32> {dtc.param}) -> tensor<4xf32> {
  return %w : tensor<4xf32>
}

// -----

// expected-error @+1 {{@main must return exactly one value, the scalar loss tensor<f32>; it returns 'tensor<f32>', 'tensor<f32>'}}
func.func @main(%w: tensor<f32> {dtc.param}) -> (tensor<f32>, tensor<f32>) {
  return %w, %w : tensor<f32>, tensor<f32>
}

// -----

// expected-error @+1 {{integer input "labels" needs dtc.max = N : i64 (the exclusive bound of its values)}}
func.func @main(%w: tensor<4x3xf32> {dtc.param}, %y: tensor<4xi32> {dtc.name = "labels"}) -> tensor<f32> {
  %l = "dtc.cross_entropy"(%w, %y) : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error @+1 {{parameter "ids" must be a float tensor, got 'tensor<4xi32>'}}
func.func @main(%w: tensor<4xi32> {dtc.param, dtc.name = "ids"}) -> tensor<f32> {
  %c = arith.constant dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// -----

// expected-error @+1 {{argument 1: name "w" is used by another argument}}
func.func @main(%w: tensor<4xf32> {dtc.param, dtc.name = "w"}, %v: tensor<4xf32> {dtc.param, dtc.name = "w"}) -> tensor<f32> {
  %c = arith.constant dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// -----

// expected-error @+1 {{data input "x" must have a batch dimension (dim 0)}}
func.func @main(%w: tensor<4xf32> {dtc.param}, %x: tensor<f32> {dtc.name = "x"}) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// expected-error @+1 {{data input "x" has dtc.init; only dtc.param arguments are initialized}}
func.func @main(%w: tensor<4xf32> {dtc.param}, %x: tensor<4xf32> {dtc.name = "x", dtc.init = "zeros"}) -> tensor<f32> {
  %c = arith.constant dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// -----

// expected-error @+1 {{@main has no trainable parameter (mark arguments with dtc.param)}}
func.func @main(%x: tensor<4x3xf32>, %y: tensor<4xi32> {dtc.max = 3 : i64}) -> tensor<f32> {
  %l = "dtc.cross_entropy"(%x, %y) : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error @+1 {{argument 1 must be a statically shaped tensor, got 'tensor<?x3xf32>'}}
func.func @main(%w: tensor<3xf32> {dtc.param}, %x: tensor<?x3xf32>) -> tensor<f32> {
  %c = arith.constant dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// -----

func.func @main(%w: tensor<4xf32> {dtc.param}) -> tensor<f32> {
  // expected-error @+1 {{constants must be dense tensors (e.g. arith.constant dense<1.0> : tensor<f32>)}}
  %s = arith.constant 1.0 : f32
  %c = arith.constant dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// -----

func.func @main(%w: tensor<4xf32> {dtc.param}) -> tensor<f32> {
  %c = arith.constant dense<0.0> : tensor<f32>
  // expected-error @+1 {{unsupported op in a model: only dtc ops, arith.constant and func.return may appear}}
  %d = "arith.addf"(%c, %c) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %d : tensor<f32>
}

// -----

// expected-error @+1 {{argument 1: the name "loss" is reserved for the tensor the training step adds}}
func.func @main(%w: tensor<4xf32> {dtc.param}, %v: tensor<4xf32> {dtc.param, dtc.name = "loss"}) -> tensor<f32> {
  %c = arith.constant dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// -----

// expected-error @+1 {{argument 0: the name "optimizer_step" is reserved for the tensor the training step adds}}
func.func @main(%w: tensor<4xf32> {dtc.param, dtc.name = "optimizer_step"}) -> tensor<f32> {
  %c = arith.constant dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// -----

// expected-error @+1 {{argument 0: name "w:adam_m" contains ':', which is reserved for derived tensors (e.g. w:adam_m)}}
func.func @main(%w: tensor<4xf32> {dtc.param, dtc.name = "w:adam_m"}) -> tensor<f32> {
  %c = arith.constant dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// -----

// expected-error @+1 {{'tensor<4611686018427387904x4xf32>' has more than 2^50 elements, more than one tensor may hold}}
func.func @main(%w: tensor<4611686018427387904x4xf32> {dtc.param}) -> tensor<f32> {
  %c = arith.constant dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// -----

func.func @main(%t: tensor<3x4xf32> {dtc.param}, %ids: tensor<8xi32> {dtc.name = "ids", dtc.max = 88 : i64}) -> tensor<f32> {
  // expected-error @+1 {{input "ids" has dtc.max = 88, but 'dtc.embedding' indexes only 3 entries with it}}
  %e = "dtc.embedding"(%t, %ids) : (tensor<3x4xf32>, tensor<8xi32>) -> tensor<8x4xf32>
  %s = "dtc.reduce_sum"(%e) {axes = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

// -----

func.func @main(%w: tensor<8x10xf32> {dtc.param}, %y: tensor<8xi32> {dtc.name = "labels", dtc.max = 11 : i64}) -> tensor<f32> {
  // expected-error @+1 {{input "labels" has dtc.max = 11, but 'dtc.cross_entropy' indexes only 10 entries with it}}
  %l = "dtc.cross_entropy"(%w, %y) : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Attributes the passes attach are the compiler's; a model carrying one
// would steer it silently (a forged dtc.gradient_of or sharding).
// expected-error @+1 {{argument 0: 'dtc.sharding' is set by the compiler; a model may not carry it}}
func.func @main(%w: tensor<4xf32> {dtc.param, dtc.sharding = #dtc.sharding<@mesh, [[]]>}) -> tensor<f32> {
  %c = arith.constant dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// -----

func.func @main(%w: tensor<4xf32> {dtc.param}) -> tensor<f32> {
  // expected-error @+1 {{'dtc.relu': 'dtc.gradient_of' is set by the compiler; a model may not carry it}}
  %r = "dtc.relu"(%w) {dtc.gradient_of = ["w"]} : (tensor<4xf32>) -> tensor<4xf32>
  %s = "dtc.reduce_sum"(%r) {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// expected-error @+1 {{the result of @main: 'dtc.role' is set by the compiler; a model may not carry it}}
func.func @main(%w: tensor<4xf32> {dtc.param}) -> (tensor<f32> {dtc.role = "loss"}) {
  %s = "dtc.reduce_sum"(%w) {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}
