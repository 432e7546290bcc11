// Every verifier of the dtc dialect rejects bad IR with a precise message.
// RUN: dtc-opt %s -split-input-file -verify-diagnostics

func.func @matmul_k(%a: tensor<8x16xf32>, %b: tensor<17x4xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'dtc.matmul' op contraction sizes differ: a is f32[8, 16], b is f32[17, 4]}}
  %0 = "dtc.matmul"(%a, %b) : (tensor<8x16xf32>, tensor<17x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @matmul_bias_shape(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>, %bias: tensor<8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'dtc.matmul_bias' op bias must have shape [4], got f32[8]}}
  %0 = "dtc.matmul_bias"(%a, %b, %bias) : (tensor<8x16xf32>, tensor<16x4xf32>, tensor<8xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @matmul_gelu_pre(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'dtc.matmul_gelu' op pre_activation must match the result (f32[8, 4]), got f32[8, 5]}}
  %0:2 = "dtc.matmul_gelu"(%a, %b) : (tensor<8x16xf32>, tensor<16x4xf32>) -> (tensor<8x4xf32>, tensor<8x5xf32>)
  return %0#0 : tensor<8x4xf32>
}

// -----

func.func @matmul_rank(%a: tensor<16xf32>, %b: tensor<16x4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.matmul' op a must have rank >= 2, got f32[16]}}
  %0 = "dtc.matmul"(%a, %b) : (tensor<16xf32>, tensor<16x4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @matmul_batch(%a: tensor<3x2x4xf32>, %b: tensor<5x4x2xf32>) -> tensor<3x2x2xf32> {
  // expected-error @+1 {{'dtc.matmul' op batch dimensions of a f32[3, 2, 4] and b f32[5, 4, 2] do not broadcast}}
  %0 = "dtc.matmul"(%a, %b) : (tensor<3x2x4xf32>, tensor<5x4x2xf32>) -> tensor<3x2x2xf32>
  return %0 : tensor<3x2x2xf32>
}

// -----

func.func @matmul_result(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) -> tensor<8x5xf32> {
  // expected-error @+1 {{'dtc.matmul' op the result must have shape [8, 4], got f32[8, 5]}}
  %0 = "dtc.matmul"(%a, %b) : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x5xf32>
  return %0 : tensor<8x5xf32>
}

// -----

func.func @matmul_types(%a: tensor<8x16xf32>, %b: tensor<16x4xbf16>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'dtc.matmul' op a f32[8, 16] and b bf16[16, 4] have different dtypes}}
  %0 = "dtc.matmul"(%a, %b) : (tensor<8x16xf32>, tensor<16x4xbf16>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @add_shapes(%a: tensor<8x16xf32>, %b: tensor<4x16xf32>) -> tensor<8x16xf32> {
  // expected-error @+1 {{'dtc.add' op shapes [8, 16] and [4, 16] do not broadcast}}
  %0 = "dtc.add"(%a, %b) : (tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

func.func @add_types(%a: tensor<8xf32>, %b: tensor<8xf16>) -> tensor<8xf32> {
  // expected-error @+1 {{'dtc.add' op lhs f32[8] and rhs f16[8] have different dtypes}}
  %0 = "dtc.add"(%a, %b) : (tensor<8xf32>, tensor<8xf16>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @mul_ints(%a: tensor<8xi32>, %b: tensor<8xi32>) -> tensor<8xi32> {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<8xi32>'}}
  %0 = "dtc.mul"(%a, %b) : (tensor<8xi32>, tensor<8xi32>) -> tensor<8xi32>
  return %0 : tensor<8xi32>
}

// -----

func.func @unary_type(%a: tensor<8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.exp' op the result must match x (f32[8]), got f32[4]}}
  %0 = "dtc.exp"(%a) : (tensor<8xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @softmax_axis(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.softmax' op attribute 'axis' = 2 is out of range for a rank-2 operand}}
  %0 = "dtc.softmax"(%a) {axis = 2 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @softmax_no_axis(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.softmax' op requires attribute 'axis'}}
  %0 = "dtc.softmax"(%a) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @layer_norm_gamma(%x: tensor<4x8xf32>, %g: tensor<4xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.layer_norm' op gamma must have shape [8], got f32[4]}}
  %0 = "dtc.layer_norm"(%x, %g, %b) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<4xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @layer_norm_beta_type(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xbf16>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.layer_norm' op beta must be f32, got bf16[8]}}
  %0 = "dtc.layer_norm"(%x, %g, %b) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xbf16>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @layer_norm_epsilon(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.layer_norm' op attribute 'epsilon' failed to satisfy constraint: 32-bit float attribute}}
  %0 = "dtc.layer_norm"(%x, %g, %b) {epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @layer_norm_result(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'dtc.layer_norm' op the result must match x (f32[4, 8]), got f32[8, 4]}}
  %0 = "dtc.layer_norm"(%x, %g, %b) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @rms_norm_gamma(%x: tensor<4x8xf32>, %g: tensor<2x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.rms_norm' op gamma must have shape [8], got f32[2, 8]}}
  %0 = "dtc.rms_norm"(%x, %g) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @embedding_table(%t: tensor<50xf32>, %ids: tensor<4xi32>) -> tensor<4x1xf32> {
  // expected-error @+1 {{'dtc.embedding' op table must have rank 2 [V, D], got f32[50]}}
  %0 = "dtc.embedding"(%t, %ids) : (tensor<50xf32>, tensor<4xi32>) -> tensor<4x1xf32>
  return %0 : tensor<4x1xf32>
}

// -----

func.func @embedding_float_ids(%t: tensor<50x8xf32>, %ids: tensor<4xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{operand #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<4xf32>'}}
  %0 = "dtc.embedding"(%t, %ids) : (tensor<50x8xf32>, tensor<4xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @attention_rank(%q: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'dtc.attention' op q must have rank 4 [B, H, S, Dh], got f32[2, 4, 8]}}
  %0 = "dtc.attention"(%q, %q, %q) {causal = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// -----

// Grouped keys and values: their heads must divide the query heads.
func.func @attention_groups(%q: tensor<8x6x4x16xf32>, %kv: tensor<8x4x4x16xf32>) -> tensor<8x6x4x16xf32> {
  // expected-error @+1 {{'dtc.attention' op k must be [B, Hkv, Sk, Dh] with q's B and Dh and Hkv dividing q's H (q is f32[8, 6, 4, 16]), got f32[8, 4, 4, 16]}}
  %0 = "dtc.attention"(%q, %kv, %kv) {causal = true} : (tensor<8x6x4x16xf32>, tensor<8x4x4x16xf32>, tensor<8x4x4x16xf32>) -> tensor<8x6x4x16xf32>
  return %0 : tensor<8x6x4x16xf32>
}

// -----

func.func @attention_kv(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x5x8xf32>) -> tensor<1x2x4x8xf32> {
  // expected-error @+1 {{'dtc.attention' op v must match k (f32[1, 2, 4, 8]), got f32[1, 2, 5, 8]}}
  %0 = "dtc.attention"(%q, %k, %v) : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x2x4x8xf32>
  return %0 : tensor<1x2x4x8xf32>
}

// -----

func.func @attention_heads(%q: tensor<1x2x4x8xf32>, %k: tensor<1x3x4x8xf32>) -> tensor<1x2x4x8xf32> {
  // expected-error @+1 {{'dtc.attention' op k must be [B, Hkv, Sk, Dh] with q's B and Dh and Hkv dividing q's H (q is f32[1, 2, 4, 8]), got f32[1, 3, 4, 8]}}
  %0 = "dtc.attention"(%q, %k, %k) : (tensor<1x2x4x8xf32>, tensor<1x3x4x8xf32>, tensor<1x3x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %0 : tensor<1x2x4x8xf32>
}

// -----

func.func @attention_causal(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x6x8xf32>) -> tensor<1x2x4x8xf32> {
  // expected-error @+1 {{'dtc.attention' op causal attention needs as many keys as queries, got f32[1, 2, 4, 8] and f32[1, 2, 6, 8]}}
  %0 = "dtc.attention"(%q, %k, %k) {causal = true} : (tensor<1x2x4x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>) -> tensor<1x2x4x8xf32>
  return %0 : tensor<1x2x4x8xf32>
}

// -----

func.func @cross_entropy_labels(%l: tensor<4x10xf32>, %y: tensor<5xi32>) -> tensor<f32> {
  // expected-error @+1 {{'dtc.cross_entropy' op labels must have shape [4], got i32[5]}}
  %0 = "dtc.cross_entropy"(%l, %y) : (tensor<4x10xf32>, tensor<5xi32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @cross_entropy_result(%l: tensor<4x10xf32>, %y: tensor<4xi32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.cross_entropy' op result #0 must be 0D tensor of 32-bit float values, but got 'tensor<4xf32>'}}
  %0 = "dtc.cross_entropy"(%l, %y) : (tensor<4x10xf32>, tensor<4xi32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @reduce_axis(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.reduce_sum' op axis 2 in 'axes' is out of range for f32[4, 8]}}
  %0 = "dtc.reduce_sum"(%x) {axes = array<i64: 2>} : (tensor<4x8xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @reduce_twice(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.reduce_mean' op axis 1 appears twice in 'axes'}}
  %0 = "dtc.reduce_mean"(%x) {axes = array<i64: 1, 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @reduce_result(%x: tensor<4x8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'dtc.reduce_sum' op the result must have shape [4], got f32[8]}}
  %0 = "dtc.reduce_sum"(%x) {axes = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @reshape_count(%x: tensor<4x8xf32>) -> tensor<4x7xf32> {
  // expected-error @+1 {{'dtc.reshape' op the result f32[4, 7] has a different element count than x f32[4, 8]}}
  %0 = "dtc.reshape"(%x) : (tensor<4x8xf32>) -> tensor<4x7xf32>
  return %0 : tensor<4x7xf32>
}

// -----

func.func @reshape_type(%x: tensor<4x8xf32>) -> tensor<32xi32> {
  // expected-error @+1 {{'dtc.reshape' op the result must be f32, got i32[32]}}
  %0 = "dtc.reshape"(%x) : (tensor<4x8xf32>) -> tensor<32xi32>
  return %0 : tensor<32xi32>
}

// -----

func.func @transpose_perm(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'dtc.transpose' op 'permutation' is not a permutation of 0..1}}
  %0 = "dtc.transpose"(%x) {permutation = array<i64: 1, 1>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @transpose_rank(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'dtc.transpose' op 'permutation' has 3 entries for a rank-2 operand}}
  %0 = "dtc.transpose"(%x) {permutation = array<i64: 1, 0, 2>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @cast_shape(%x: tensor<4x8xi32>) -> tensor<32xf32> {
  // expected-error @+1 {{'dtc.cast' op the result must have shape [4, 8], got f32[32]}}
  %0 = "dtc.cast"(%x) : (tensor<4x8xi32>) -> tensor<32xf32>
  return %0 : tensor<32xf32>
}

// -----

func.func @broadcast_bad(%x: tensor<3xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'dtc.broadcast' op x f32[3] does not broadcast to the result shape [4, 4]}}
  %0 = "dtc.broadcast"(%x) : (tensor<3xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @max_grad_dy(%a: tensor<4xf32>, %b: tensor<4xf32>, %dy: tensor<5xf32>) -> tensor<5xf32> {
  // expected-error @+1 {{'dtc.max_grad' op dy (the broadcast of lhs and rhs) must have shape [4], got f32[5]}}
  %0:2 = "dtc.max_grad"(%a, %b, %dy) : (tensor<4xf32>, tensor<4xf32>, tensor<5xf32>) -> (tensor<5xf32>, tensor<5xf32>)
  return %0#0 : tensor<5xf32>
}

// -----

func.func @softmax_grad_types(%y: tensor<4x8xf32>, %dy: tensor<4x9xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.softmax_grad' op dy must match y (f32[4, 8]), got f32[4, 9]}}
  %0 = "dtc.softmax_grad"(%y, %dy) {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x9xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @layer_norm_grad_dgamma(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %dy: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.layer_norm_grad' op dgamma must match gamma (f32[8]), got f32[4, 8]}}
  %0:3 = "dtc.layer_norm_grad"(%x, %g, %dy) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>)
  return %0#0 : tensor<4x8xf32>
}

// -----

func.func @rms_norm_grad_dy(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %dy: tensor<8x4xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.rms_norm_grad' op dy must match x (f32[4, 8]), got f32[8, 4]}}
  %0:2 = "dtc.rms_norm_grad"(%x, %g, %dy) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8x4xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  return %0#0 : tensor<4x8xf32>
}

// -----

func.func @embedding_grad_dy(%ids: tensor<4xi32>, %dy: tensor<4x7xf32>) -> tensor<50x8xf32> {
  // expected-error @+1 {{'dtc.embedding_grad' op dy must have shape [4, 8], got f32[4, 7]}}
  %0 = "dtc.embedding_grad"(%ids, %dy) : (tensor<4xi32>, tensor<4x7xf32>) -> tensor<50x8xf32>
  return %0 : tensor<50x8xf32>
}

// -----

func.func @attention_grad_dq(%q: tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32> {
  // expected-error @+1 {{'dtc.attention_grad' op dq must match q (f32[1, 2, 4, 8]), got f32[1, 2, 4, 4]}}
  %0:3 = "dtc.attention_grad"(%q, %q, %q, %q) {causal = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  return %0#0 : tensor<1x2x4x4xf32>
}

// -----

func.func @cross_entropy_grad_type(%l: tensor<4x10xf32>, %y: tensor<4xi32>, %d: tensor<f32>) -> tensor<4x9xf32> {
  // expected-error @+1 {{'dtc.cross_entropy_grad' op dlogits must match logits (f32[4, 10]), got f32[4, 9]}}
  %0 = "dtc.cross_entropy_grad"(%l, %y, %d) {scale = 0.25 : f32} : (tensor<4x10xf32>, tensor<4xi32>, tensor<f32>) -> tensor<4x9xf32>
  return %0 : tensor<4x9xf32>
}

// -----

func.func @adam_betas(%p: tensor<4xf32>, %s: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.adam_update' op attribute 'beta1' must be in [0, 1)}}
  %0:3 = "dtc.adam_update"(%p, %p, %p, %p, %s) {lr = 1.0e-3 : f64, beta1 = 1.5 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0>} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %0#0 : tensor<4xf32>
}

// -----

func.func @sgd_types(%p: tensor<4xf32>, %g: tensor<5xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.sgd_update' op g must have p's shape and p's or a narrower float dtype (f32[4]), got f32[5]}}
  %0 = "dtc.sgd_update"(%p, %g) {lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>} : (tensor<4xf32>, tensor<5xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A learning-rate schedule that changes with the step needs the step; its
// attributes are checked by the same rule the runtime's loader runs.
func.func @sgd_schedule_without_step(%p: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.sgd_update' op a learning-rate schedule that changes with the step needs the optimizer step (an i64 scalar) as input 2}}
  %0 = "dtc.sgd_update"(%p, %p) {lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, lr_schedule = "cosine", warmup_steps = 0 : i64, decay_steps = 10 : i64, min_lr = 0.0 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @adam_schedule_order(%p: tensor<4xf32>, %s: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.adam_update' op the linear schedule needs decay_steps > warmup_steps, got decay_steps 3 and warmup_steps 5}}
  %0:3 = "dtc.adam_update"(%p, %p, %p, %p, %s) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false, lr_schedule = "linear", warmup_steps = 5 : i64, decay_steps = 3 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0>} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %0#0 : tensor<4xf32>
}

// -----

func.func @sgd_schedule_kind(%p: tensor<4xf32>, %s: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.sgd_update' op attribute 'lr_schedule' must be "constant", "cosine" or "linear", got "step"}}
  %0 = "dtc.sgd_update"(%p, %p, %s) {lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, lr_schedule = "step", operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>} : (tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Mixed precision: a narrower gradient updates f32 master weights; a wider
// one, or loss scaling's inputs alone, are errors.
func.func @sgd_wide_grad(%p: tensor<4xbf16>, %g: tensor<4xf32>) -> tensor<4xbf16> {
  // expected-error @+1 {{'dtc.sgd_update' op g must have p's shape and p's or a narrower float dtype (bf16[4]), got f32[4]}}
  %0 = "dtc.sgd_update"(%p, %g) {lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>} : (tensor<4xbf16>, tensor<4xf32>) -> tensor<4xbf16>
  return %0 : tensor<4xbf16>
}

// -----

func.func @adam_scale_alone(%p: tensor<4xf32>, %g: tensor<4xbf16>, %s: tensor<i64>, %f: tensor<f32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.adam_update' op the loss-scaling inputs inv_scale and found_inf come together}}
  %0:3 = "dtc.adam_update"(%p, %g, %p, %p, %s, %f) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 0>} : (tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<i64>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %0#0 : tensor<4xf32>
}

// -----

func.func @loss_scale_backoff(%s: tensor<f32>, %n: tensor<i64>) -> tensor<f32> {
  // expected-error @+1 {{'dtc.loss_scale_update' op attribute 'backoff_factor' must be in (0, 1]}}
  %0:3 = "dtc.loss_scale_update"(%s, %n, %n, %s) {growth_factor = 2.0 : f64, backoff_factor = 1.5 : f64, growth_interval = 10 : i64} : (tensor<f32>, tensor<i64>, tensor<i64>, tensor<f32>) -> (tensor<f32>, tensor<i64>, tensor<i64>)
  return %0#0 : tensor<f32>
}

// -----

// expected-error @+1 {{argument 0: invalid 'dtc.init' "gauss(1)": unknown initializer 'gauss' (expected normal, uniform, fill, zeros or ones)}}
func.func @bad_init(%w: tensor<4xf32> {dtc.param, dtc.init = "gauss(1)"}) {
  return
}

// -----

// expected-error @+1 {{argument 0: invalid 'dtc.init' "uniform(1)": uniform takes two numbers, LO and HI}}
func.func @bad_uniform(%w: tensor<4xf32> {dtc.param, dtc.init = "uniform(1)"}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'dtc.max' must be an i64 integer (e.g. dtc.max = 50257 : i64)}}
func.func @bad_max(%y: tensor<4xi32> {dtc.max = 10 : i32}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'dtc.max' must be positive, got 0}}
func.func @zero_max(%y: tensor<4xi32> {dtc.max = 0 : i64}) {
  return
}

// -----

// expected-error @+1 {{argument 0: unknown attribute 'dtc.params'; did you mean 'dtc.param'?}}
func.func @typo(%w: tensor<4xf32> {dtc.params}) {
  return
}

// -----

// expected-error @+1 {{argument 0: unknown attribute 'dtc.weight' (the model format knows dtc.param, dtc.name, dtc.init, dtc.max)}}
func.func @unknown_arg_attr(%w: tensor<4xf32> {dtc.weight}) {
  return
}

// -----

// Attributes a dtc op does not know are errors naming the closest valid one
// (generic, from the op's ODS attributes): a misspelled `causal` must not
// leave attention non-causal.
func.func @misspelled_causal(%q: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  // expected-error @+1 {{unknown attribute 'casual' on 'dtc.attention'; did you mean 'causal'?}}
  %0 = "dtc.attention"(%q, %q, %q) {casual = true} : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %0 : tensor<1x1x4x8xf32>
}

// -----

func.func @misspelled_keep_dims(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unknown attribute 'keepdims' on 'dtc.reduce_sum'; did you mean 'keep_dims'?}}
  %0 = "dtc.reduce_sum"(%x) {axes = array<i64: 1>, keepdims = false} : (tensor<4x8xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @unrelated_attribute(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{unknown attribute 'temperature' on 'dtc.softmax' (it takes axis)}}
  %0 = "dtc.softmax"(%x) {axis = 1 : i64, temperature = 2.0 : f32} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @attribute_on_attributeless_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unknown attribute 'alpha' on 'dtc.relu' (it takes no attributes)}}
  %0 = "dtc.relu"(%x) {alpha = 0.1 : f32} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @other_dialect_attribute(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unknown attribute 'foo.bar' on 'dtc.relu' (it takes no attributes)}}
  %0 = "dtc.relu"(%x) {foo.bar} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @misspelled_pass_attribute(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unknown attribute 'dtc.phsae' on 'dtc.relu'; did you mean 'dtc.phase'?}}
  %0 = "dtc.relu"(%x) {dtc.phsae = "forward"} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// The dtc namespace on other ops, results and modules is checked too.
func.func @dtc_attr_on_constant() -> tensor<4xf32> {
  // expected-error @+1 {{unknown attribute 'dtc.phasee' on 'arith.constant'; did you mean 'dtc.phase'?}}
  %0 = arith.constant {dtc.phasee = "forward"} dense<1.0> : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @+1 {{result 0: unknown attribute 'dtc.rol'; did you mean 'dtc.role'?}}
func.func @result_attr(%x: tensor<f32>) -> (tensor<f32> {dtc.rol = "loss"}) {
  return %x : tensor<f32>
}

// -----

// expected-error @+1 {{unknown attribute 'dtc.plna' on 'builtin.module'; did you mean 'dtc.plan'?}}
module attributes {dtc.plna = {}} {
}

// -----

// expected-error @+1 {{argument 0: 'dtc.name' must be a non-empty string}}
func.func @empty_name(%w: tensor<4xf32> {dtc.param, dtc.name = ""}) {
  return
}

// -----

// expected-error @+1 {{grid axis 0 used twice in one sharding}}
func.func @sharding_twice(%x: tensor<4x4xf32> {dtc.sharding = #dtc.sharding<@mesh, [[0], [0]]>}) {
  return
}

// -----

func.func @adam_eps(%p: tensor<4xf32>, %s: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.adam_update' op attribute 'eps' must be > 0}}
  %0:3 = "dtc.adam_update"(%p, %p, %p, %p, %s) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 0.0 : f64, weight_decay = 0.0 : f64, decoupled = true, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0>} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %0#0 : tensor<4xf32>
}

// -----

func.func @attention_types(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xf32> {
  // expected-error @+1 {{'dtc.attention' op k must have q's dtype (q is f32[1, 2, 4, 8]), got bf16[1, 2, 4, 8]}}
  %0 = "dtc.attention"(%q, %k, %k) : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xf32>
  return %0 : tensor<1x2x4x8xf32>
}

// -----

func.func @cross_entropy_scalar_logits(%l: tensor<f32>, %y: tensor<i32>) -> tensor<f32> {
  // expected-error @+1 {{'dtc.cross_entropy' op logits must have rank >= 1}}
  %0 = "dtc.cross_entropy"(%l, %y) : (tensor<f32>, tensor<i32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @embedding_grad_rank(%ids: tensor<4xi32>, %dy: tensor<4x8xf32>) -> tensor<400xf32> {
  // expected-error @+1 {{'dtc.embedding_grad' op dtable must have rank 2 [V, D], got f32[400]}}
  %0 = "dtc.embedding_grad"(%ids, %dy) : (tensor<4xi32>, tensor<4x8xf32>) -> tensor<400xf32>
  return %0 : tensor<400xf32>
}

// -----

func.func @embedding_grad_type(%ids: tensor<4xi32>, %dy: tensor<4x8xf32>) -> tensor<50x8xbf16> {
  // expected-error @+1 {{'dtc.embedding_grad' op dy must be bf16, got f32[4, 8]}}
  %0 = "dtc.embedding_grad"(%ids, %dy) : (tensor<4xi32>, tensor<4x8xf32>) -> tensor<50x8xbf16>
  return %0 : tensor<50x8xbf16>
}

// -----

func.func @broadcast_type(%x: tensor<4xf32>) -> tensor<2x4xf16> {
  // expected-error @+1 {{'dtc.broadcast' op the result must be f32, got f16[2, 4]}}
  %0 = "dtc.broadcast"(%x) : (tensor<4xf32>) -> tensor<2x4xf16>
  return %0 : tensor<2x4xf16>
}

// -----

func.func @softmax_grad_axis(%y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.softmax_grad' op attribute 'axis' = -1 is out of range for a rank-2 operand}}
  %0 = "dtc.softmax_grad"(%y, %y) {axis = -1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @max_grad_result(%a: tensor<4xf32>, %dy: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.max_grad' op drhs must match dy (f32[4]), got f32[2, 2]}}
  %0:2 = "dtc.max_grad"(%a, %a, %dy) : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<2x2xf32>)
  return %0#0 : tensor<4xf32>
}

// -----

func.func @layer_norm_grad_dbeta(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.layer_norm_grad' op dbeta must match gamma (f32[8]), got f32[4]}}
  %0:3 = "dtc.layer_norm_grad"(%x, %g, %x) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>)
  return %0#0 : tensor<4x8xf32>
}

// -----

func.func @rms_norm_scalar(%x: tensor<f32>, %g: tensor<1xf32>) -> tensor<f32> {
  // expected-error @+1 {{'dtc.rms_norm' op x must have rank >= 1}}
  %0 = "dtc.rms_norm"(%x, %g) {epsilon = 1.0e-5 : f32} : (tensor<f32>, tensor<1xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// expected-error @+1 {{argument 0: 'dtc.param' must be a unit attribute}}
func.func @param_value(%w: tensor<4xf32> {dtc.param = 1 : i64}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'dtc.init' must be a string}}
func.func @init_number(%w: tensor<4xf32> {dtc.param, dtc.init = 0.02 : f32}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'dtc.sharding' must be a #dtc.sharding attribute}}
func.func @sharding_kind(%w: tensor<4xf32> {dtc.sharding = [0]}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'dtc.max' only applies to integer inputs (ids, labels), not to 'tensor<8x3xf32>'}}
func.func @max_on_float(%x: tensor<8x3xf32> {dtc.max = 5 : i64}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'dtc.max' = 4294967296 does not fit 'i32' values}}
func.func @max_too_big(%y: tensor<8xi32> {dtc.max = 4294967296 : i64}) {
  return
}

// -----

// expected-error @+1 {{grid axis must be non-negative, got -1}}
func.func @sharding_negative(%x: tensor<4x4xf32> {dtc.sharding = #dtc.sharding<@mesh, [[-1], []]>}) {
  return
}

// -----

func.func @layer_norm_input_grad_dx(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'dtc.layer_norm_input_grad' op dx must match x (f32[4, 8]), got f32[4, 4]}}
  %0 = "dtc.layer_norm_input_grad"(%x, %g, %x) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @layer_norm_param_grad_dbeta(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.layer_norm_param_grad' op dbeta must match dgamma (f32[8]), got f32[4]}}
  %0:2 = "dtc.layer_norm_param_grad"(%x, %x) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<8xf32>, tensor<4xf32>)
  return %0#1 : tensor<4xf32>
}

// -----

func.func @rms_norm_input_grad_gamma(%x: tensor<4x8xf32>, %g: tensor<4xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.rms_norm_input_grad' op gamma must have shape [8], got f32[4]}}
  %0 = "dtc.rms_norm_input_grad"(%x, %g, %x) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @rms_norm_param_grad_dy(%x: tensor<4x8xf32>, %dy: tensor<8x4xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'dtc.rms_norm_param_grad' op dy must match x (f32[4, 8]), got f32[8, 4]}}
  %0 = "dtc.rms_norm_param_grad"(%x, %dy) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// A gradient bucket (dtc-schedule-collectives) tags a gradient's all-reduce.
shard.grid @grid(shape = 2)
func.func @bucket_on_kernel(%g: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.bucket' is for shard.all_reduce, shard.reduce_scatter and shard.all_gather, not 'dtc.relu'}}
  %0 = dtc.relu %g {dtc.bucket = 0 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

shard.grid @grid(shape = 2)
func.func @bucket_negative(%g: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.bucket' must be a non-negative integer}}
  %0 = shard.all_reduce %g on @grid grid_axes = [0] {dtc.bucket = -1 : i64} : tensor<4xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// The plan (#dtc.plan, Plan::verify): what dtc-apply-strategy writes and
// the planner's passes read is checked when it is built or parsed.
// expected-error @+1 {{zero must be 0, 1, 2 or 3, got 5}}
module attributes {dtc.plan = #dtc.plan<@mesh, dp = 2 on [0], zero = 5>} {}

// -----

// expected-error @+1 {{grid axis 0 is given to two kinds of parallelism}}
module attributes {dtc.plan = #dtc.plan<@mesh, dp = 2 on [0], tp = 2 on [0]>} {}

// -----

// expected-error @+1 {{schedule "1f1b" without pipeline stages or micro-batches}}
module attributes {dtc.plan = #dtc.plan<@mesh, dp = 2 on [0], schedule = "1f1b">} {}

// -----

// expected-error @+1 {{a pipelined plan (pp > 1 or micro-batches) needs its micro-batch axis}}
module attributes {dtc.plan = #dtc.plan<@mesh, pp = 2 on [0], schedule = "1f1b">} {}

// -----

// expected-error @+1 {{a pipelined plan needs a schedule}}
module attributes {dtc.plan = #dtc.plan<@mesh, pp = 2 on [0], microbatches = 2 on [1]>} {}

// -----

// expected-error @+1 {{recompute lists 3 modes for 2 pipeline stages}}
module attributes {dtc.plan = #dtc.plan<@mesh, pp = 2 on [0], microbatches = 2 on [1], schedule = "1f1b", recompute = [full, none, full]>} {}

// -----

// expected-error @+1 {{stage_cuts must be increasing layers > 0}}
module attributes {dtc.plan = #dtc.plan<@mesh, pp = 4 on [0], microbatches = 4 on [1], schedule = "gpipe", stage_cuts = [2, 2, 5]>} {}

// -----

// expected-error @+1 {{sequence parallelism splits the sequence over the tensor-parallel devices; it needs tp > 1}}
module attributes {dtc.plan = #dtc.plan<@mesh, dp = 2 on [0], sequence_parallel = true>} {}

// -----

// expected-error @+1 {{expected true or false}}
module attributes {dtc.plan = #dtc.plan<@mesh, tp = 2 on [0], sequence_parallel = 1>} {}

// -----

// expected-error @+1 {{stage_cuts lists 1 cuts for 4 virtual stages}}
module attributes {dtc.plan = #dtc.plan<@mesh, pp = 4 on [0], microbatches = 4 on [1], schedule = "gpipe", stage_cuts = [3]>} {}

// -----

// expected-error @+1 {{unknown recompute mode 'some'}}
module attributes {dtc.plan = #dtc.plan<@mesh, recompute = some>} {}

// -----

// expected-error @+1 {{ring-attention sequence parallelism (sp = 2) takes one whole grid axis, got 0}}
module attributes {dtc.plan = #dtc.plan<@mesh, sp = 2>} {}

// -----

// expected-error @+1 {{grid axis 1 is given to two kinds of parallelism}}
module attributes {dtc.plan = #dtc.plan<@mesh, tp = 2 on [1], sp = 2 on [1]>} {}

// -----

// expected-error @+1 {{sp_layout is "striped", "zigzag" or "contiguous", got "spiral"}}
module attributes {dtc.plan = #dtc.plan<@mesh, sp = 2 on [0], sp_layout = "spiral">} {}

// -----

// expected-error @+1 {{ring-attention sequence parallelism (sp) and Megatron's sequence parallelism inside tp do not combine yet}}
module attributes {dtc.plan = #dtc.plan<@mesh, tp = 2 on [1], sp = 2 on [0], sequence_parallel = true>} {}

// -----

// Ring attention's blocks: the running output and logsumexp come together,
// the logsumexp is f32 [B, H, Sq], positions are i64 scalars.
func.func @ring_block_lse(%q: tensor<1x2x4x8xf32>, %off: tensor<i64>, %y: tensor<1x2x4x8xf32>, %lse: tensor<1x2x8xf32>) {
  // expected-error @+1 {{lse_acc must have shape [1, 2, 4], got f32[1, 2, 8]}}
  %0:2 = "dtc.attention_block"(%q, %q, %q, %off, %off, %y, %lse) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1>} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<i64>, tensor<i64>, tensor<1x2x4x8xf32>, tensor<1x2x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @ring_block_grad_offset(%q: tensor<1x2x4x8xf32>, %off: tensor<i32>, %lse: tensor<1x2x4xf32>) {
  // expected-error @+1 {{operand #3 must be 0D tensor of 64-bit signless integer values, but got 'tensor<i32>'}}
  %0:3 = "dtc.attention_block_grad"(%q, %q, %q, %off, %off, %q, %q, %lse) {causal = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<i32>, tensor<i32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  return
}

// -----

// A zigzag block holds two equal chunks: an odd count of rows is none.
func.func @ring_block_zigzag_rows(%q: tensor<1x2x5x8xf32>, %off: tensor<i64>) {
  // expected-error @+1 {{a zigzag block holds two equal chunks of a sequence of 20 positions, got f32[1, 2, 5, 8]}}
  %0:2 = "dtc.attention_block"(%q, %q, %q, %off, %off) {causal = true, zigzag_length = 20, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0>} : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<i64>, tensor<i64>) -> (tensor<1x2x5x8xf32>, tensor<1x2x5xf32>)
  return
}

// -----

func.func @ring_block_grad_zigzag_stride(%q: tensor<1x2x4x8xf32>, %off: tensor<i64>, %lse: tensor<1x2x4xf32>) {
  // expected-error @+1 {{a zigzag block's rows are contiguous in each chunk: position_stride must be 1}}
  %0:3 = "dtc.attention_block_grad"(%q, %q, %q, %off, %off, %q, %q, %lse) {causal = true, position_stride = 2, zigzag_length = 16} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<i64>, tensor<i64>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  return
}

// -----

// Expert parallelism's exchange: the token slots are the group members'
// block of the routing's tokens.
shard.grid @grid(shape = 2)
func.func @moe_exchange_slots(%rows: tensor<8x2x4xf32>, %routing: tensor<8x2xi32>) {
  // expected-error @+1 {{the token slots 'tensor<8x2x4xf32>' must be [T/n, k] = [8/2, 2, D] for the routing 'tensor<8x2xi32>' over 2 members}}
  %0 = "dtc.moe_exchange"(%rows, %routing, %routing) <{grid = @grid, grid_axes = array<i16: 0>, to_experts = true}> : (tensor<8x2x4xf32>, tensor<8x2xi32>, tensor<8x2xi32>) -> tensor<2x4x4xf32>
  return
}

// -----

shard.grid @grid(shape = 2)
func.func @moe_exchange_axis(%rows: tensor<4x2x4xf32>, %routing: tensor<8x2xi32>) {
  // expected-error @+1 {{grid axis 1 does not exist on @grid}}
  %0 = "dtc.moe_exchange"(%rows, %routing, %routing) <{grid = @grid, grid_axes = array<i16: 1>, to_experts = true}> : (tensor<4x2x4xf32>, tensor<8x2xi32>, tensor<8x2xi32>) -> tensor<2x4x4xf32>
  return
}

// -----

shard.grid @grid(shape = 2)
func.func @moe_exchange_width(%buffer: tensor<2x4x4xf32>, %routing: tensor<8x2xi32>) {
  // expected-error @+1 {{data 'tensor<2x4x4xf32>' and the result 'tensor<4x2x8xf32>' must have one element type and row width}}
  %0 = "dtc.moe_exchange"(%buffer, %routing, %routing) <{grid = @grid, grid_axes = array<i16: 0>, to_experts = false}> : (tensor<2x4x4xf32>, tensor<8x2xi32>, tensor<8x2xi32>) -> tensor<4x2x8xf32>
  return
}

// -----

func.func @moe_exchange_grid(%rows: tensor<4x2x4xf32>, %routing: tensor<8x2xi32>) {
  // expected-error @+1 {{no shard.grid @nowhere}}
  %0 = "dtc.moe_exchange"(%rows, %routing, %routing) <{grid = @nowhere, grid_axes = array<i16: 0>, to_experts = true}> : (tensor<4x2x4xf32>, tensor<8x2xi32>, tensor<8x2xi32>) -> tensor<2x4x4xf32>
  return
}

// -----

// The zigzag layout cuts the sequence into two chunks per rank: 6 tokens
// over 2 ranks are 4 chunks of 1.5.
// expected-error @+1 {{'dtc.zigzag_input' is [dim, ways]: a dimension of the argument and a count of ranks dividing it into two chunks each}}
func.func @zigzag_input_chunks(%ids: tensor<4x6xi32> {dtc.zigzag_input = array<i64: 1, 2>}) {
  return
}
