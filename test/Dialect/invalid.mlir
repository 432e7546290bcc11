// Every verifier of the dtc dialect rejects bad IR with a precise message.
// RUN: dtc-opt %s -split-input-file -verify-diagnostics

func.func @matmul_k(%a: tensor<8x16xf32>, %b: tensor<17x4xf32>) -> tensor<8x4xf32> {
  // expected-error @+2 {{'dtc.matmul' op failed to infer returned types}}
  // expected-error @+1 {{dtc.matmul contracting dimensions differ: a [8, 16] has K=16, b [17, 4] has K=17}}
  %0 = "dtc.matmul"(%a, %b) : (tensor<8x16xf32>, tensor<17x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @matmul_rank(%a: tensor<16xf32>, %b: tensor<16x4xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{'dtc.matmul' op failed to infer returned types}}
  // expected-error @+1 {{dtc.matmul needs operands of rank >= 2, got [16] and [16, 4]}}
  %0 = "dtc.matmul"(%a, %b) : (tensor<16xf32>, tensor<16x4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @matmul_batch(%a: tensor<3x2x4xf32>, %b: tensor<5x4x2xf32>) -> tensor<3x2x2xf32> {
  // expected-error @+2 {{'dtc.matmul' op failed to infer returned types}}
  // expected-error @+1 {{dtc.matmul batch dimensions of [3, 2, 4] and [5, 4, 2] do not broadcast}}
  %0 = "dtc.matmul"(%a, %b) : (tensor<3x2x4xf32>, tensor<5x4x2xf32>) -> tensor<3x2x2xf32>
  return %0 : tensor<3x2x2xf32>
}

// -----

func.func @matmul_result(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) -> tensor<8x5xf32> {
  // expected-error @+2 {{'dtc.matmul' op failed to infer returned types}}
  // expected-error @+1 {{'dtc.matmul' op inferred type(s) 'tensor<8x4xf32>' are incompatible with return type(s) of operation 'tensor<8x5xf32>'}}
  %0 = "dtc.matmul"(%a, %b) : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x5xf32>
  return %0 : tensor<8x5xf32>
}

// -----

func.func @matmul_types(%a: tensor<8x16xf32>, %b: tensor<16x4xbf16>) -> tensor<8x4xf32> {
  // expected-error @+2 {{'dtc.matmul' op failed to infer returned types}}
  // expected-error @+1 {{dtc.matmul operands have different element types 'f32' and 'bf16'}}
  %0 = "dtc.matmul"(%a, %b) : (tensor<8x16xf32>, tensor<16x4xbf16>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @add_shapes(%a: tensor<8x16xf32>, %b: tensor<4x16xf32>) -> tensor<8x16xf32> {
  // expected-error @+2 {{'dtc.add' op failed to infer returned types}}
  // expected-error @+1 {{operand shapes [8, 16] and [4, 16] do not broadcast}}
  %0 = "dtc.add"(%a, %b) : (tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

func.func @add_types(%a: tensor<8xf32>, %b: tensor<8xf16>) -> tensor<8xf32> {
  // expected-error @+2 {{'dtc.add' op failed to infer returned types}}
  // expected-error @+1 {{operands have different element types 'f32' and 'f16'}}
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
  // expected-error @+1 {{'dtc.exp' op requires the same type for all operands and results}}
  %0 = "dtc.exp"(%a) : (tensor<8xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @softmax_axis(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.softmax' op axis 2 is out of range for rank 2}}
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
  // expected-error @+1 {{'dtc.layer_norm' op gamma must have shape [8] (the last dim of x [4, 8]), got [4]}}
  %0 = "dtc.layer_norm"(%x, %g, %b) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<4xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @layer_norm_beta_type(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xbf16>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.layer_norm' op beta element type 'bf16' differs from x's 'f32'}}
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
  // expected-error @+1 {{'dtc.layer_norm' op result must have type 'tensor<4x8xf32>', got 'tensor<8x4xf32>'}}
  %0 = "dtc.layer_norm"(%x, %g, %b) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @rms_norm_gamma(%x: tensor<4x8xf32>, %g: tensor<2x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.rms_norm' op gamma must have shape [8] (the last dim of x [4, 8]), got [2, 8]}}
  %0 = "dtc.rms_norm"(%x, %g) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @embedding_table(%t: tensor<50xf32>, %ids: tensor<4xi32>) -> tensor<4x1xf32> {
  // expected-error @+2 {{'dtc.embedding' op failed to infer returned types}}
  // expected-error @+1 {{dtc.embedding table must be [V, D], got [50]}}
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
  // expected-error @+1 {{'dtc.attention' op q must be [B, H, S, Dh], got [2, 4, 8]}}
  %0 = "dtc.attention"(%q, %q, %q) {causal = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// -----

func.func @attention_kv(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x5x8xf32>) -> tensor<1x2x4x8xf32> {
  // expected-error @+1 {{'dtc.attention' op k [1, 2, 4, 8] and v [1, 2, 5, 8] must have the same type}}
  %0 = "dtc.attention"(%q, %k, %v) : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x2x4x8xf32>
  return %0 : tensor<1x2x4x8xf32>
}

// -----

func.func @attention_heads(%q: tensor<1x2x4x8xf32>, %k: tensor<1x3x4x8xf32>) -> tensor<1x2x4x8xf32> {
  // expected-error @+1 {{'dtc.attention' op q [1, 2, 4, 8] and k [1, 3, 4, 8] must agree on B, H and Dh}}
  %0 = "dtc.attention"(%q, %k, %k) : (tensor<1x2x4x8xf32>, tensor<1x3x4x8xf32>, tensor<1x3x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %0 : tensor<1x2x4x8xf32>
}

// -----

func.func @attention_causal(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x6x8xf32>) -> tensor<1x2x4x8xf32> {
  // expected-error @+1 {{'dtc.attention' op causal attention needs as many queries as keys, got 4 and 6}}
  %0 = "dtc.attention"(%q, %k, %k) {causal = true} : (tensor<1x2x4x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>) -> tensor<1x2x4x8xf32>
  return %0 : tensor<1x2x4x8xf32>
}

// -----

func.func @cross_entropy_labels(%l: tensor<4x10xf32>, %y: tensor<5xi32>) -> tensor<f32> {
  // expected-error @+1 {{'dtc.cross_entropy' op labels [5] must have the shape of logits [4, 10] without its last dim}}
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
  // expected-error @+2 {{'dtc.reduce_sum' op failed to infer returned types}}
  // expected-error @+1 {{reduction axis 2 is out of range for rank 2}}
  %0 = "dtc.reduce_sum"(%x) {axes = array<i64: 2>} : (tensor<4x8xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @reduce_twice(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{'dtc.reduce_mean' op failed to infer returned types}}
  // expected-error @+1 {{reduction axis 1 listed twice}}
  %0 = "dtc.reduce_mean"(%x) {axes = array<i64: 1, 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @reduce_result(%x: tensor<4x8xf32>) -> tensor<8xf32> {
  // expected-error @+2 {{'dtc.reduce_sum' op failed to infer returned types}}
  // expected-error @+1 {{'dtc.reduce_sum' op inferred type(s) 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<8xf32>'}}
  %0 = "dtc.reduce_sum"(%x) {axes = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @reshape_count(%x: tensor<4x8xf32>) -> tensor<4x7xf32> {
  // expected-error @+1 {{'dtc.reshape' op cannot reshape [4, 8] (32 elements) to [4, 7] (28 elements)}}
  %0 = "dtc.reshape"(%x) : (tensor<4x8xf32>) -> tensor<4x7xf32>
  return %0 : tensor<4x7xf32>
}

// -----

func.func @reshape_type(%x: tensor<4x8xf32>) -> tensor<32xi32> {
  // expected-error @+1 {{'dtc.reshape' op changes the element type from 'f32' to 'i32' (use dtc.cast)}}
  %0 = "dtc.reshape"(%x) : (tensor<4x8xf32>) -> tensor<32xi32>
  return %0 : tensor<32xi32>
}

// -----

func.func @transpose_perm(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+2 {{'dtc.transpose' op failed to infer returned types}}
  // expected-error @+1 {{dtc.transpose permutation [1, 1] is not a permutation of 0..1}}
  %0 = "dtc.transpose"(%x) {permutation = array<i64: 1, 1>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @transpose_rank(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+2 {{'dtc.transpose' op failed to infer returned types}}
  // expected-error @+1 {{dtc.transpose permutation has 3 entries for rank 2}}
  %0 = "dtc.transpose"(%x) {permutation = array<i64: 1, 0, 2>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @cast_shape(%x: tensor<4x8xi32>) -> tensor<32xf32> {
  // expected-error @+1 {{'dtc.cast' op requires the same shape for all operands and results}}
  %0 = "dtc.cast"(%x) : (tensor<4x8xi32>) -> tensor<32xf32>
  return %0 : tensor<32xf32>
}

// -----

func.func @broadcast_bad(%x: tensor<3xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'dtc.broadcast' op cannot broadcast [3] to [4, 4]}}
  %0 = "dtc.broadcast"(%x) : (tensor<3xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @max_grad_dy(%a: tensor<4xf32>, %b: tensor<4xf32>, %dy: tensor<5xf32>) -> tensor<5xf32> {
  // expected-error @+1 {{'dtc.max_grad' op dy [5] must have the broadcast shape of lhs [4] and rhs [4]}}
  %0:2 = "dtc.max_grad"(%a, %b, %dy) : (tensor<4xf32>, tensor<4xf32>, tensor<5xf32>) -> (tensor<5xf32>, tensor<5xf32>)
  return %0#0 : tensor<5xf32>
}

// -----

func.func @softmax_grad_types(%y: tensor<4x8xf32>, %dy: tensor<4x9xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.softmax_grad' op requires the same type for all operands and results}}
  %0 = "dtc.softmax_grad"(%y, %dy) {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x9xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @layer_norm_grad_dgamma(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %dy: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.layer_norm_grad' op dgamma must have type 'tensor<8xf32>', got 'tensor<4x8xf32>'}}
  %0:3 = "dtc.layer_norm_grad"(%x, %g, %dy) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>)
  return %0#0 : tensor<4x8xf32>
}

// -----

func.func @rms_norm_grad_dy(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %dy: tensor<8x4xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.rms_norm_grad' op dy must have type 'tensor<4x8xf32>', got 'tensor<8x4xf32>'}}
  %0:2 = "dtc.rms_norm_grad"(%x, %g, %dy) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8x4xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  return %0#0 : tensor<4x8xf32>
}

// -----

func.func @embedding_grad_dy(%ids: tensor<4xi32>, %dy: tensor<4x7xf32>) -> tensor<50x8xf32> {
  // expected-error @+1 {{'dtc.embedding_grad' op dy [4, 7] must be [4, 8]}}
  %0 = "dtc.embedding_grad"(%ids, %dy) : (tensor<4xi32>, tensor<4x7xf32>) -> tensor<50x8xf32>
  return %0 : tensor<50x8xf32>
}

// -----

func.func @attention_grad_dq(%q: tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32> {
  // expected-error @+1 {{'dtc.attention_grad' op dq must have type 'tensor<1x2x4x8xf32>', got 'tensor<1x2x4x4xf32>'}}
  %0:3 = "dtc.attention_grad"(%q, %q, %q, %q) {causal = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  return %0#0 : tensor<1x2x4x4xf32>
}

// -----

func.func @cross_entropy_grad_type(%l: tensor<4x10xf32>, %y: tensor<4xi32>, %d: tensor<f32>) -> tensor<4x9xf32> {
  // expected-error @+1 {{'dtc.cross_entropy_grad' op dlogits must have type 'tensor<4x10xf32>', got 'tensor<4x9xf32>'}}
  %0 = "dtc.cross_entropy_grad"(%l, %y, %d) {scale = 0.25 : f32} : (tensor<4x10xf32>, tensor<4xi32>, tensor<f32>) -> tensor<4x9xf32>
  return %0 : tensor<4x9xf32>
}

// -----

func.func @adam_betas(%p: tensor<4xf32>, %s: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.adam_update' op betas must be in [0, 1)}}
  %0:3 = "dtc.adam_update"(%p, %p, %p, %p, %s) {lr = 1.0e-3 : f64, beta1 = 1.5 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0>} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %0#0 : tensor<4xf32>
}

// -----

func.func @sgd_types(%p: tensor<4xf32>, %g: tensor<5xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.sgd_update' op gradient shape [5] differs from the parameter's [4]}}
  %0 = "dtc.sgd_update"(%p, %g) {lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<4xf32>, tensor<5xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Mixed precision: a narrower gradient updates f32 master weights; a wider
// one, or loss scaling's inputs alone, are errors.
func.func @sgd_wide_grad(%p: tensor<4xbf16>, %g: tensor<4xf32>) -> tensor<4xbf16> {
  // expected-error @+1 {{'dtc.sgd_update' op gradient element type 'f32' is not narrower than the parameter's 'bf16'}}
  %0 = "dtc.sgd_update"(%p, %g) {lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<4xbf16>, tensor<4xf32>) -> tensor<4xbf16>
  return %0 : tensor<4xbf16>
}

// -----

func.func @adam_scale_alone(%p: tensor<4xf32>, %g: tensor<4xbf16>, %s: tensor<i64>, %f: tensor<f32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.adam_update' op takes inv_scale and found_inf together (loss scaling) or neither}}
  %0:3 = "dtc.adam_update"(%p, %g, %p, %p, %s, %f) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = false, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 0>} : (tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<i64>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %0#0 : tensor<4xf32>
}

// -----

func.func @loss_scale_backoff(%s: tensor<f32>, %n: tensor<i64>) -> tensor<f32> {
  // expected-error @+1 {{'dtc.loss_scale_update' op backoff_factor must be in (0, 1]}}
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

// expected-error @+1 {{argument 0: unknown argument attribute 'dtc.params' (the model format knows dtc.param, dtc.name, dtc.init, dtc.max)}}
func.func @typo(%w: tensor<4xf32> {dtc.params}) {
  return
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
  // expected-error @+1 {{'dtc.adam_update' op eps must be positive}}
  %0:3 = "dtc.adam_update"(%p, %p, %p, %p, %s) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 0.0 : f64, weight_decay = 0.0 : f64, decoupled = true, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0>} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %0#0 : tensor<4xf32>
}

// -----

func.func @attention_types(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xf32> {
  // expected-error @+1 {{'dtc.attention' op q, k and v must have the same element type}}
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
  // expected-error @+1 {{'dtc.embedding_grad' op dtable must be [V, D], got [400]}}
  %0 = "dtc.embedding_grad"(%ids, %dy) : (tensor<4xi32>, tensor<4x8xf32>) -> tensor<400xf32>
  return %0 : tensor<400xf32>
}

// -----

func.func @embedding_grad_type(%ids: tensor<4xi32>, %dy: tensor<4x8xf32>) -> tensor<50x8xbf16> {
  // expected-error @+1 {{'dtc.embedding_grad' op dy and dtable must have the same element type}}
  %0 = "dtc.embedding_grad"(%ids, %dy) : (tensor<4xi32>, tensor<4x8xf32>) -> tensor<50x8xbf16>
  return %0 : tensor<50x8xbf16>
}

// -----

func.func @broadcast_type(%x: tensor<4xf32>) -> tensor<2x4xf16> {
  // expected-error @+1 {{'dtc.broadcast' op changes the element type}}
  %0 = "dtc.broadcast"(%x) : (tensor<4xf32>) -> tensor<2x4xf16>
  return %0 : tensor<2x4xf16>
}

// -----

func.func @softmax_grad_axis(%y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.softmax_grad' op axis -1 is out of range for rank 2}}
  %0 = "dtc.softmax_grad"(%y, %y) {axis = -1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @max_grad_result(%a: tensor<4xf32>, %dy: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.max_grad' op drhs must have type 'tensor<4xf32>', got 'tensor<2x2xf32>'}}
  %0:2 = "dtc.max_grad"(%a, %a, %dy) : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<2x2xf32>)
  return %0#0 : tensor<4xf32>
}

// -----

func.func @layer_norm_grad_dbeta(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.layer_norm_grad' op dbeta must have type 'tensor<8xf32>', got 'tensor<4xf32>'}}
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
  // expected-error @+1 {{'dtc.layer_norm_input_grad' op dx must have type 'tensor<4x8xf32>', got 'tensor<4x4xf32>'}}
  %0 = "dtc.layer_norm_input_grad"(%x, %g, %x) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @layer_norm_param_grad_dbeta(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dtc.layer_norm_param_grad' op dbeta must have shape [8] (the last dim of x [4, 8]), got [4]}}
  %0:2 = "dtc.layer_norm_param_grad"(%x, %x) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<8xf32>, tensor<4xf32>)
  return %0#1 : tensor<4xf32>
}

// -----

func.func @rms_norm_input_grad_gamma(%x: tensor<4x8xf32>, %g: tensor<4xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.rms_norm_input_grad' op gamma must have shape [8] (the last dim of x [4, 8]), got [4]}}
  %0 = "dtc.rms_norm_input_grad"(%x, %g, %x) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @rms_norm_param_grad_dy(%x: tensor<4x8xf32>, %dy: tensor<8x4xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'dtc.rms_norm_param_grad' op dy must have type 'tensor<4x8xf32>', got 'tensor<8x4xf32>'}}
  %0 = "dtc.rms_norm_param_grad"(%x, %dy) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
