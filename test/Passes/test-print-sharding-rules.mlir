// Each op declares its factor-based sharding rule (ShardingRuleOpInterface).
// Factors are named a, b, ...; a*b is a dimension merging two factors;
// 'sum'/'mean' factors are reduced into results lacking them; 'blocked'
// ones cannot be sharded by the op's local computation.
// RUN: dtc-opt %s --dtc-test-print-sharding-rules -verify-diagnostics -o /dev/null

func.func @rules(%x: tensor<8x4x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>, %g: tensor<32xf32>,
                 %t: tensor<50x32xf32>, %ids: tensor<8x4xi32>, %q: tensor<8x2x4x16xf32>) -> tensor<f32> {
  // expected-remark @+1 {{sharding rule: ([a, b, d], [d, c]) -> ([a, b, c]) {a=8, b=4, c=32, d=16 sum} linear {0} {1}}}
  %0 = "dtc.matmul"(%x, %w) : (tensor<8x4x16xf32>, tensor<16x32xf32>) -> tensor<8x4x32xf32>
  // expected-remark @+1 {{sharding rule: ([a, b, c], [c]) -> ([a, b, c]) {a=8, b=4, c=32} linear {0, 1}}}
  %1 = "dtc.add"(%0, %b) : (tensor<8x4x32xf32>, tensor<32xf32>) -> tensor<8x4x32xf32>
  // expected-remark @+1 {{sharding rule: ([a, b, c]) -> ([a, b, c]) {a=8, b=4, c=32 blocked}}}
  %2 = "dtc.softmax"(%1) {axis = 2 : i64} : (tensor<8x4x32xf32>) -> tensor<8x4x32xf32>
  // expected-remark @+1 {{sharding rule: ([a, b, c], [c], [c]) -> ([a, b, c]) {a=8, b=4, c=32 blocked}}}
  %3 = "dtc.layer_norm"(%2, %g, %b) {epsilon = 1.0e-5 : f32} : (tensor<8x4x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<8x4x32xf32>
  // expected-remark @+1 {{sharding rule: ([a, b], [c, d]) -> ([c, d, b]) {a=50 sum, b=32, c=8, d=4}}}
  %4 = "dtc.embedding"(%t, %ids) : (tensor<50x32xf32>, tensor<8x4xi32>) -> tensor<8x4x32xf32>
  // expected-remark @+1 {{sharding rule: ([a, b, c]) -> ([a*b, c]) {a=8, b=4, c=32} linear {0}}}
  %5 = "dtc.reshape"(%4) : (tensor<8x4x32xf32>) -> tensor<32x32xf32>
  // expected-remark @+1 {{sharding rule: ([a*b, c*d]) -> ([a, b, c, d]) {a=8, b=4, c=2, d=16} linear {0}}}
  %6 = "dtc.reshape"(%5) : (tensor<32x32xf32>) -> tensor<8x4x2x16xf32>
  // expected-remark @+1 {{sharding rule: ([a, b, c, d]) -> ([a, c, b, d]) {a=8, b=4, c=2, d=16} linear {0}}}
  %7 = "dtc.transpose"(%6) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<8x4x2x16xf32>) -> tensor<8x2x4x16xf32>
  // expected-remark @+1 {{sharding rule: ([a, b, c, e], [a, b, d, e], [a, b, d, f]) -> ([a, b, c, f]) {a=8, b=2, c=4 blocked, d=4 blocked, e=16 blocked, f=16 blocked}}}
  %8 = "dtc.attention"(%7, %q, %q) {causal = true} : (tensor<8x2x4x16xf32>, tensor<8x2x4x16xf32>, tensor<8x2x4x16xf32>) -> tensor<8x2x4x16xf32>
  // expected-remark @+1 {{sharding rule: ([a, b, c]) -> ([b]) {a=8 mean, b=4, c=32 mean} linear {0}}}
  %9 = "dtc.reduce_mean"(%3) {axes = array<i64: 0, 2>} : (tensor<8x4x32xf32>) -> tensor<4xf32>
  // expected-remark @+1 {{sharding rule: ([a, b, c], [a, b]) -> ([]) {a=8 mean, b=4 mean, c=32 resolved}}}
  %10 = "dtc.cross_entropy"(%1, %ids) : (tensor<8x4x32xf32>, tensor<8x4xi32>) -> tensor<f32>
  // expected-remark @+1 {{sharding rule: ([a, b, c], [c], [a, b, c]) -> ([a, b, c], [c], [c]) {a=8 sum, b=4 sum, c=32 blocked}}}
  %11:3 = "dtc.layer_norm_grad"(%2, %g, %3) {epsilon = 1.0e-5 : f32} : (tensor<8x4x32xf32>, tensor<32xf32>, tensor<8x4x32xf32>) -> (tensor<8x4x32xf32>, tensor<32xf32>, tensor<32xf32>)
  // expected-remark @+1 {{sharding rule: ([a, b], [a, b, c]) -> ([d, c]) {a=8 sum, b=4 sum, c=32, d=50} linear {1}}}
  %12 = "dtc.embedding_grad"(%ids, %4) : (tensor<8x4xi32>, tensor<8x4x32xf32>) -> tensor<50x32xf32>
  // expected-remark @+1 {{sharding rule: ([a, b]) -> ([c, d]) {a=16 blocked, b=32 blocked, c=32 blocked, d=16 blocked} linear {0}}}
  %13 = "dtc.reshape"(%w) : (tensor<16x32xf32>) -> tensor<32x16xf32>
  // The split norm gradients: the input part keeps every leading factor,
  // the parameter part sums over them.
  // expected-remark @+1 {{sharding rule: ([a, b, c], [c], [a, b, c]) -> ([a, b, c]) {a=8, b=4, c=32 blocked}}}
  %14 = "dtc.layer_norm_input_grad"(%2, %g, %3) {epsilon = 1.0e-5 : f32} : (tensor<8x4x32xf32>, tensor<32xf32>, tensor<8x4x32xf32>) -> tensor<8x4x32xf32>
  // expected-remark @+1 {{sharding rule: ([a, b, c], [a, b, c]) -> ([c], [c]) {a=8 sum, b=4 sum, c=32 blocked}}}
  %15:2 = "dtc.layer_norm_param_grad"(%2, %3) {epsilon = 1.0e-5 : f32} : (tensor<8x4x32xf32>, tensor<8x4x32xf32>) -> (tensor<32xf32>, tensor<32xf32>)
  // expected-remark @+1 {{sharding rule: ([a, b, c], [c], [a, b, c]) -> ([a, b, c]) {a=8, b=4, c=32 blocked}}}
  %16 = "dtc.rms_norm_input_grad"(%2, %g, %3) {epsilon = 1.0e-5 : f32} : (tensor<8x4x32xf32>, tensor<32xf32>, tensor<8x4x32xf32>) -> tensor<8x4x32xf32>
  // expected-remark @+1 {{sharding rule: ([a, b, c], [a, b, c]) -> ([c]) {a=8 sum, b=4 sum, c=32 blocked}}}
  %17 = "dtc.rms_norm_param_grad"(%2, %3) {epsilon = 1.0e-5 : f32} : (tensor<8x4x32xf32>, tensor<8x4x32xf32>) -> tensor<32xf32>
  return %10 : tensor<f32>
}

// Grouped-query attention: q's heads are (key/value head b, query of the
// group c), so splitting b splits q, k and v alike; k and v lack c, which
// the gradient sums into dk and dv.
func.func @grouped(%q: tensor<8x6x4x16xf32>, %kv: tensor<8x2x4x16xf32>) -> tensor<8x6x4x16xf32> {
  // expected-remark @+1 {{sharding rule: ([a, b*c, d, f], [a, b, e, f], [a, b, e, g]) -> ([a, b*c, d, g]) {a=8, b=2, c=3, d=4 blocked, e=4 blocked, f=16 blocked, g=16 blocked}}}
  %0 = "dtc.attention"(%q, %kv, %kv) {causal = true} : (tensor<8x6x4x16xf32>, tensor<8x2x4x16xf32>, tensor<8x2x4x16xf32>) -> tensor<8x6x4x16xf32>
  // expected-remark @+1 {{sharding rule: ([a, b*c, d, f], [a, b, e, f], [a, b, e, g], [a, b*c, d, g]) -> ([a, b*c, d, f], [a, b, e, f], [a, b, e, g]) {a=8, b=2, c=3 sum, d=4 sum, e=4 blocked, f=16 blocked, g=16 blocked}}}
  %1:3 = "dtc.attention_grad"(%q, %kv, %kv, %0) {causal = false} : (tensor<8x6x4x16xf32>, tensor<8x2x4x16xf32>, tensor<8x2x4x16xf32>, tensor<8x6x4x16xf32>) -> (tensor<8x6x4x16xf32>, tensor<8x2x4x16xf32>, tensor<8x2x4x16xf32>)
  return %1#0 : tensor<8x6x4x16xf32>
}
