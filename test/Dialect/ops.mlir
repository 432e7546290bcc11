// Every op of docs/model-format.md in MLIR's generic form, exactly as
// the spec writes it, must parse, verify and print back.
// RUN: dtc-opt %s | dtc-opt | FileCheck %s
// RUN: dtc-opt %s --mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC

// CHECK-LABEL: func.func @elementwise
// GENERIC-LABEL: sym_name = "elementwise"
func.func @elementwise(%a: tensor<4x8xf32>, %b: tensor<8xf32>, %s: tensor<f32>) -> tensor<4x8xf32> {
  // CHECK: "dtc.add"(%{{.*}}, %{{.*}}) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // GENERIC: "dtc.add"(%{{.*}}, %{{.*}}) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %0 = "dtc.add"(%a, %b) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: "dtc.sub"
  %1 = "dtc.sub"(%0, %a) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: "dtc.mul"(%{{.*}}, %{{.*}}) : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %2 = "dtc.mul"(%1, %s) : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  // CHECK: "dtc.div"
  %3 = "dtc.div"(%2, %b) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: "dtc.max"
  %4 = "dtc.max"(%3, %s) : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  // CHECK: dtc.neg %{{.*}} : tensor<4x8xf32>
  // GENERIC: "dtc.neg"(%{{.*}}) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = "dtc.neg"(%4) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.exp
  %6 = "dtc.exp"(%5) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.log
  %7 = "dtc.log"(%6) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.tanh
  %8 = "dtc.tanh"(%7) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.sqrt
  %9 = "dtc.sqrt"(%8) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.rsqrt
  %10 = "dtc.rsqrt"(%9) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.relu
  %11 = "dtc.relu"(%10) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.gelu
  %12 = "dtc.gelu"(%11) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.silu
  %13 = "dtc.silu"(%12) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %13 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @structured
func.func @structured(%x: tensor<2x4x8xf32>, %w: tensor<8x16xf32>, %g: tensor<16xf32>,
                      %beta: tensor<16xf32>, %table: tensor<50x16xf32>,
                      %ids: tensor<2x4xi32>, %labels: tensor<2x4xi64>) -> tensor<f32> {
  // CHECK: "dtc.matmul"(%{{.*}}, %{{.*}}) : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %0 = "dtc.matmul"(%x, %w) : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  // CHECK: "dtc.matmul_bias"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %fb = "dtc.matmul_bias"(%x, %w, %g) : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  // CHECK: "dtc.matmul_gelu"(%{{.*}}, %{{.*}}) : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>)
  %fg:2 = "dtc.matmul_gelu"(%x, %w) : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>)
  // CHECK: "dtc.matmul_gelu"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>)
  %fgb:2 = "dtc.matmul_gelu"(%x, %w, %g) : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>)
  // CHECK: "dtc.softmax"(%{{.*}}) <{axis = 2 : i64}>
  // GENERIC: "dtc.softmax"(%{{.*}}) <{axis = 2 : i64}>
  %1 = "dtc.softmax"(%0) {axis = 2 : i64} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  // CHECK: "dtc.layer_norm"(%{{.*}}, %{{.*}}, %{{.*}}) <{epsilon = 9.99999974E-6 : f32}>
  %2 = "dtc.layer_norm"(%1, %g, %beta) {epsilon = 1.0e-05 : f32} : (tensor<2x4x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  // CHECK: "dtc.rms_norm"
  %3 = "dtc.rms_norm"(%2, %g) {epsilon = 1.0e-06 : f32} : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  // CHECK: "dtc.embedding"(%{{.*}}, %{{.*}}) : (tensor<50x16xf32>, tensor<2x4xi32>) -> tensor<2x4x16xf32>
  %4 = "dtc.embedding"(%table, %ids) : (tensor<50x16xf32>, tensor<2x4xi32>) -> tensor<2x4x16xf32>
  %5 = "dtc.add"(%3, %4) : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  // CHECK: "dtc.reshape"(%{{.*}}) : (tensor<2x4x16xf32>) -> tensor<2x4x2x8xf32>
  %6 = "dtc.reshape"(%5) : (tensor<2x4x16xf32>) -> tensor<2x4x2x8xf32>
  // CHECK: "dtc.transpose"(%{{.*}}) <{permutation = array<i64: 0, 2, 1, 3>}>
  %7 = "dtc.transpose"(%6) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2x8xf32>) -> tensor<2x2x4x8xf32>
  // CHECK: "dtc.attention"(%{{.*}}, %{{.*}}, %{{.*}}) <{causal = true}>
  %8 = "dtc.attention"(%7, %7, %7) {causal = true} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  // CHECK: "dtc.attention"(%{{.*}}, %{{.*}}, %{{.*}}) <{causal = false}>
  %9 = "dtc.attention"(%8, %8, %8) : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  %10 = "dtc.transpose"(%9) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x4x8xf32>) -> tensor<2x4x2x8xf32>
  %11 = "dtc.reshape"(%10) : (tensor<2x4x2x8xf32>) -> tensor<2x4x16xf32>
  // CHECK: "dtc.reduce_sum"(%{{.*}}) <{axes = array<i64: 2>, keep_dims = true}>
  %12 = "dtc.reduce_sum"(%11) {axes = array<i64: 2>, keep_dims = true} : (tensor<2x4x16xf32>) -> tensor<2x4x1xf32>
  // CHECK: "dtc.reduce_mean"(%{{.*}}) <{axes = array<i64: 0, 1>, keep_dims = false}>
  %13 = "dtc.reduce_mean"(%12) {axes = array<i64: 0, 1>, keep_dims = false} : (tensor<2x4x1xf32>) -> tensor<1xf32>
  // CHECK: "dtc.cast"(%{{.*}}) : (tensor<2x4xi32>) -> tensor<2x4xf32>
  %14 = "dtc.cast"(%ids) : (tensor<2x4xi32>) -> tensor<2x4xf32>
  // CHECK: "dtc.cross_entropy"(%{{.*}}, %{{.*}}) : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
  %15 = "dtc.cross_entropy"(%11, %labels) : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
  %c = arith.constant dense<1.0> : tensor<f32>
  %16 = "dtc.mul"(%15, %c) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %16 : tensor<f32>
}


// The spec's example model parses as written.
// CHECK-LABEL: func.func @main
// CHECK-SAME: dtc.param
// CHECK-SAME: dtc.init = "zeros"
// CHECK-SAME: dtc.max = 10 : i64
func.func @main(%w1: tensor<16x32xf32> {dtc.param, dtc.name = "w1"},
                %w2: tensor<32x10xf32> {dtc.param, dtc.name = "w2", dtc.init = "zeros"},
                %x: tensor<8x16xf32>,
                %y: tensor<8xi32> {dtc.max = 10 : i64}) -> tensor<f32> {
  %h = "dtc.matmul"(%x, %w1) : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %a = "dtc.gelu"(%h) : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %z = "dtc.matmul"(%a, %w2) : (tensor<8x32xf32>, tensor<32x10xf32>) -> tensor<8x10xf32>
  %l = "dtc.cross_entropy"(%z, %y) : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// bf16/f16 are model-format element types the kernels compute with (in f32
// inside, stored narrow).
// CHECK-LABEL: func.func @low_precision
// CHECK: dtc.matmul{{.*}}(tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
// CHECK: dtc.gelu{{.*}}tensor<4x2xf16>
func.func @low_precision(%a: tensor<4x8xbf16>, %b: tensor<8x2xbf16>, %c: tensor<4x2xf16>) -> (tensor<4x2xbf16>, tensor<4x2xf16>) {
  %0 = "dtc.matmul"(%a, %b) : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
  %1 = "dtc.gelu"(%c) : (tensor<4x2xf16>) -> tensor<4x2xf16>
  return %0, %1 : tensor<4x2xbf16>, tensor<4x2xf16>
}
