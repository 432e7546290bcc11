// A one-block GPT written by hand: learned positions, pre-LayerNorm,
// attention spelled out (q k^T scaled, an additive causal mask, softmax,
// times v) instead of dtc.attention, biases on every projection, a ReLU MLP
// and an untied output head. i64 token ids. Generic op form.
func.func @main(%ids: tensor<4x8xi64> {dtc.name = "ids", dtc.max = 32 : i64},
                %labels: tensor<4x8xi64> {dtc.name = "labels", dtc.max = 32 : i64},
                %wte: tensor<32x16xf32> {dtc.param, dtc.name = "wte", dtc.init = "normal(0.1)"},
                %wpe: tensor<8x16xf32> {dtc.param, dtc.name = "wpe", dtc.init = "normal(0.05)"},
                %ln1_g: tensor<16xf32> {dtc.param, dtc.name = "ln1.weight", dtc.init = "ones"},
                %ln1_b: tensor<16xf32> {dtc.param, dtc.name = "ln1.bias", dtc.init = "zeros"},
                %wq: tensor<16x16xf32> {dtc.param, dtc.name = "attn.wq", dtc.init = "normal(0.2)"},
                %bq: tensor<16xf32> {dtc.param, dtc.name = "attn.bq", dtc.init = "zeros"},
                %wk: tensor<16x16xf32> {dtc.param, dtc.name = "attn.wk", dtc.init = "normal(0.2)"},
                %wv: tensor<16x16xf32> {dtc.param, dtc.name = "attn.wv", dtc.init = "normal(0.2)"},
                %wo: tensor<16x16xf32> {dtc.param, dtc.name = "attn.wo", dtc.init = "normal(0.1)"},
                %bo: tensor<16xf32> {dtc.param, dtc.name = "attn.bo", dtc.init = "zeros"},
                %ln2_g: tensor<16xf32> {dtc.param, dtc.name = "ln2.weight", dtc.init = "ones"},
                %ln2_b: tensor<16xf32> {dtc.param, dtc.name = "ln2.bias", dtc.init = "zeros"},
                %wfc: tensor<16x32xf32> {dtc.param, dtc.name = "mlp.fc", dtc.init = "normal(0.2)"},
                %bfc: tensor<32xf32> {dtc.param, dtc.name = "mlp.fc_bias", dtc.init = "uniform(0.0,0.1)"},
                %wproj: tensor<32x16xf32> {dtc.param, dtc.name = "mlp.proj", dtc.init = "normal(0.1)"},
                %lnf_g: tensor<16xf32> {dtc.param, dtc.name = "ln_f.weight", dtc.init = "ones"},
                %lnf_b: tensor<16xf32> {dtc.param, dtc.name = "ln_f.bias", dtc.init = "zeros"},
                %head: tensor<16x32xf32> {dtc.param, dtc.name = "lm_head", dtc.init = "normal(0.2)"}) -> tensor<f32> {
  %tok = "dtc.embedding"(%wte, %ids) : (tensor<32x16xf32>, tensor<4x8xi64>) -> tensor<4x8x16xf32>
  %x0 = "dtc.add"(%tok, %wpe) : (tensor<4x8x16xf32>, tensor<8x16xf32>) -> tensor<4x8x16xf32>
  %h = "dtc.layer_norm"(%x0, %ln1_g, %ln1_b) {epsilon = 1.0e-05 : f32} : (tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  %q0 = "dtc.matmul"(%h, %wq) : (tensor<4x8x16xf32>, tensor<16x16xf32>) -> tensor<4x8x16xf32>
  %q1 = "dtc.add"(%q0, %bq) : (tensor<4x8x16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  %q2 = "dtc.reshape"(%q1) : (tensor<4x8x16xf32>) -> tensor<4x8x2x8xf32>
  %q = "dtc.transpose"(%q2) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<4x8x2x8xf32>) -> tensor<4x2x8x8xf32>
  %k0 = "dtc.matmul"(%h, %wk) : (tensor<4x8x16xf32>, tensor<16x16xf32>) -> tensor<4x8x16xf32>
  %k1 = "dtc.reshape"(%k0) : (tensor<4x8x16xf32>) -> tensor<4x8x2x8xf32>
  %kt = "dtc.transpose"(%k1) {permutation = array<i64: 0, 2, 3, 1>} : (tensor<4x8x2x8xf32>) -> tensor<4x2x8x8xf32>
  %v0 = "dtc.matmul"(%h, %wv) : (tensor<4x8x16xf32>, tensor<16x16xf32>) -> tensor<4x8x16xf32>
  %v1 = "dtc.reshape"(%v0) : (tensor<4x8x16xf32>) -> tensor<4x8x2x8xf32>
  %v = "dtc.transpose"(%v1) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<4x8x2x8xf32>) -> tensor<4x2x8x8xf32>
  %s0 = "dtc.matmul"(%q, %kt) : (tensor<4x2x8x8xf32>, tensor<4x2x8x8xf32>) -> tensor<4x2x8x8xf32>
  %scale = arith.constant dense<0.353553385> : tensor<f32>
  %s1 = "dtc.mul"(%s0, %scale) : (tensor<4x2x8x8xf32>, tensor<f32>) -> tensor<4x2x8x8xf32>
  %mask = arith.constant dense<[[0.0, -1.0e+09, -1.0e+09, -1.0e+09, -1.0e+09, -1.0e+09, -1.0e+09, -1.0e+09], [0.0, 0.0, -1.0e+09, -1.0e+09, -1.0e+09, -1.0e+09, -1.0e+09, -1.0e+09], [0.0, 0.0, 0.0, -1.0e+09, -1.0e+09, -1.0e+09, -1.0e+09, -1.0e+09], [0.0, 0.0, 0.0, 0.0, -1.0e+09, -1.0e+09, -1.0e+09, -1.0e+09], [0.0, 0.0, 0.0, 0.0, 0.0, -1.0e+09, -1.0e+09, -1.0e+09], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0e+09, -1.0e+09], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0e+09], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]> : tensor<8x8xf32>
  %s2 = "dtc.add"(%s1, %mask) : (tensor<4x2x8x8xf32>, tensor<8x8xf32>) -> tensor<4x2x8x8xf32>
  %p = "dtc.softmax"(%s2) {axis = 3 : i64} : (tensor<4x2x8x8xf32>) -> tensor<4x2x8x8xf32>
  %o0 = "dtc.matmul"(%p, %v) : (tensor<4x2x8x8xf32>, tensor<4x2x8x8xf32>) -> tensor<4x2x8x8xf32>
  %o1 = "dtc.transpose"(%o0) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<4x2x8x8xf32>) -> tensor<4x8x2x8xf32>
  %o2 = "dtc.reshape"(%o1) : (tensor<4x8x2x8xf32>) -> tensor<4x8x16xf32>
  %o3 = "dtc.matmul"(%o2, %wo) : (tensor<4x8x16xf32>, tensor<16x16xf32>) -> tensor<4x8x16xf32>
  %o4 = "dtc.add"(%o3, %bo) : (tensor<4x8x16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  %x1 = "dtc.add"(%x0, %o4) : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %h2 = "dtc.layer_norm"(%x1, %ln2_g, %ln2_b) {epsilon = 1.0e-05 : f32} : (tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  %f0 = "dtc.matmul"(%h2, %wfc) : (tensor<4x8x16xf32>, tensor<16x32xf32>) -> tensor<4x8x32xf32>
  %f1 = "dtc.add"(%f0, %bfc) : (tensor<4x8x32xf32>, tensor<32xf32>) -> tensor<4x8x32xf32>
  %f2 = "dtc.relu"(%f1) : (tensor<4x8x32xf32>) -> tensor<4x8x32xf32>
  %f3 = "dtc.matmul"(%f2, %wproj) : (tensor<4x8x32xf32>, tensor<32x16xf32>) -> tensor<4x8x16xf32>
  %x2 = "dtc.add"(%x1, %f3) : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %hf = "dtc.layer_norm"(%x2, %lnf_g, %lnf_b) {epsilon = 1.0e-05 : f32} : (tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  %logits = "dtc.matmul"(%hf, %head) : (tensor<4x8x16xf32>, tensor<16x32xf32>) -> tensor<4x8x32xf32>
  %loss = "dtc.cross_entropy"(%logits, %labels) : (tensor<4x8x32xf32>, tensor<4x8xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}
