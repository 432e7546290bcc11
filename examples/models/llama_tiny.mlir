// A one-block LLaMA written by hand: RMSNorm, rotary position embedding
// (x*cos + (x @ R)*sin, R rotating each pair of features, all constants),
// causal dtc.attention, a SwiGLU MLP, no biases, an untied head. Generic
// op form.
func.func @main(%ids: tensor<4x8xi32> {dtc.name = "ids", dtc.max = 32 : i64},
                %labels: tensor<4x8xi32> {dtc.name = "labels", dtc.max = 32 : i64},
                %emb: tensor<32x16xf32> {dtc.param, dtc.name = "tok_embeddings", dtc.init = "normal(0.1)"},
                %n1: tensor<16xf32> {dtc.param, dtc.name = "attention_norm", dtc.init = "ones"},
                %wq: tensor<16x16xf32> {dtc.param, dtc.name = "attention.wq", dtc.init = "normal(0.2)"},
                %wk: tensor<16x16xf32> {dtc.param, dtc.name = "attention.wk", dtc.init = "normal(0.2)"},
                %wv: tensor<16x16xf32> {dtc.param, dtc.name = "attention.wv", dtc.init = "normal(0.2)"},
                %wo: tensor<16x16xf32> {dtc.param, dtc.name = "attention.wo", dtc.init = "normal(0.1)"},
                %n2: tensor<16xf32> {dtc.param, dtc.name = "ffn_norm", dtc.init = "ones"},
                %w1: tensor<16x24xf32> {dtc.param, dtc.name = "feed_forward.w1", dtc.init = "normal(0.2)"},
                %w3: tensor<16x24xf32> {dtc.param, dtc.name = "feed_forward.w3", dtc.init = "normal(0.2)"},
                %w2: tensor<24x16xf32> {dtc.param, dtc.name = "feed_forward.w2", dtc.init = "normal(0.1)"},
                %nf: tensor<16xf32> {dtc.param, dtc.name = "norm", dtc.init = "ones"},
                %out: tensor<16x32xf32> {dtc.param, dtc.name = "output", dtc.init = "normal(0.2)"}) -> tensor<f32> {
  %cos = arith.constant dense<[[1.00000000, 1.00000000, 1.00000000, 1.00000000, 1.00000000, 1.00000000, 1.00000000, 1.00000000], [0.54030231, 0.54030231, 0.99500417, 0.99500417, 0.99995000, 0.99995000, 0.99999950, 0.99999950], [-0.41614684, -0.41614684, 0.98006658, 0.98006658, 0.99980001, 0.99980001, 0.99999800, 0.99999800], [-0.98999250, -0.98999250, 0.95533649, 0.95533649, 0.99955003, 0.99955003, 0.99999550, 0.99999550], [-0.65364362, -0.65364362, 0.92106099, 0.92106099, 0.99920011, 0.99920011, 0.99999200, 0.99999200], [0.28366219, 0.28366219, 0.87758256, 0.87758256, 0.99875026, 0.99875026, 0.99998750, 0.99998750], [0.96017029, 0.96017029, 0.82533561, 0.82533561, 0.99820054, 0.99820054, 0.99998200, 0.99998200], [0.75390225, 0.75390225, 0.76484219, 0.76484219, 0.99755100, 0.99755100, 0.99997550, 0.99997550]]> : tensor<8x8xf32>
  %sin = arith.constant dense<[[0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000], [0.84147098, 0.84147098, 0.09983342, 0.09983342, 0.00999983, 0.00999983, 0.00100000, 0.00100000], [0.90929743, 0.90929743, 0.19866933, 0.19866933, 0.01999867, 0.01999867, 0.00200000, 0.00200000], [0.14112001, 0.14112001, 0.29552021, 0.29552021, 0.02999550, 0.02999550, 0.00300000, 0.00300000], [-0.75680250, -0.75680250, 0.38941834, 0.38941834, 0.03998933, 0.03998933, 0.00399999, 0.00399999], [-0.95892427, -0.95892427, 0.47942554, 0.47942554, 0.04997917, 0.04997917, 0.00499998, 0.00499998], [-0.27941550, -0.27941550, 0.56464247, 0.56464247, 0.05996401, 0.05996401, 0.00599996, 0.00599996], [0.65698660, 0.65698660, 0.64421769, 0.64421769, 0.06994285, 0.06994285, 0.00699994, 0.00699994]]> : tensor<8x8xf32>
  %rot = arith.constant dense<[[0.00000000, 1.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000], [-1.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000], [0.00000000, 0.00000000, 0.00000000, 1.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000], [0.00000000, 0.00000000, -1.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000], [0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, 1.00000000, 0.00000000, 0.00000000], [0.00000000, 0.00000000, 0.00000000, 0.00000000, -1.00000000, 0.00000000, 0.00000000, 0.00000000], [0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, 1.00000000], [0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, 0.00000000, -1.00000000, 0.00000000]]> : tensor<8x8xf32>
  %x0 = "dtc.embedding"(%emb, %ids) : (tensor<32x16xf32>, tensor<4x8xi32>) -> tensor<4x8x16xf32>
  %h = "dtc.rms_norm"(%x0, %n1) {epsilon = 1.0e-05 : f32} : (tensor<4x8x16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  %q0 = "dtc.matmul"(%h, %wq) : (tensor<4x8x16xf32>, tensor<16x16xf32>) -> tensor<4x8x16xf32>
  %q1 = "dtc.reshape"(%q0) : (tensor<4x8x16xf32>) -> tensor<4x8x2x8xf32>
  %q2 = "dtc.transpose"(%q1) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<4x8x2x8xf32>) -> tensor<4x2x8x8xf32>
  %qc = "dtc.mul"(%q2, %cos) : (tensor<4x2x8x8xf32>, tensor<8x8xf32>) -> tensor<4x2x8x8xf32>
  %qr = "dtc.matmul"(%q2, %rot) : (tensor<4x2x8x8xf32>, tensor<8x8xf32>) -> tensor<4x2x8x8xf32>
  %qs = "dtc.mul"(%qr, %sin) : (tensor<4x2x8x8xf32>, tensor<8x8xf32>) -> tensor<4x2x8x8xf32>
  %q = "dtc.add"(%qc, %qs) : (tensor<4x2x8x8xf32>, tensor<4x2x8x8xf32>) -> tensor<4x2x8x8xf32>
  %k0 = "dtc.matmul"(%h, %wk) : (tensor<4x8x16xf32>, tensor<16x16xf32>) -> tensor<4x8x16xf32>
  %k1 = "dtc.reshape"(%k0) : (tensor<4x8x16xf32>) -> tensor<4x8x2x8xf32>
  %k2 = "dtc.transpose"(%k1) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<4x8x2x8xf32>) -> tensor<4x2x8x8xf32>
  %kc = "dtc.mul"(%k2, %cos) : (tensor<4x2x8x8xf32>, tensor<8x8xf32>) -> tensor<4x2x8x8xf32>
  %kr = "dtc.matmul"(%k2, %rot) : (tensor<4x2x8x8xf32>, tensor<8x8xf32>) -> tensor<4x2x8x8xf32>
  %ks = "dtc.mul"(%kr, %sin) : (tensor<4x2x8x8xf32>, tensor<8x8xf32>) -> tensor<4x2x8x8xf32>
  %k = "dtc.add"(%kc, %ks) : (tensor<4x2x8x8xf32>, tensor<4x2x8x8xf32>) -> tensor<4x2x8x8xf32>
  %v0 = "dtc.matmul"(%h, %wv) : (tensor<4x8x16xf32>, tensor<16x16xf32>) -> tensor<4x8x16xf32>
  %v1 = "dtc.reshape"(%v0) : (tensor<4x8x16xf32>) -> tensor<4x8x2x8xf32>
  %v2 = "dtc.transpose"(%v1) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<4x8x2x8xf32>) -> tensor<4x2x8x8xf32>
  %a0 = "dtc.attention"(%q, %k, %v2) {causal = true} : (tensor<4x2x8x8xf32>, tensor<4x2x8x8xf32>, tensor<4x2x8x8xf32>) -> tensor<4x2x8x8xf32>
  %a1 = "dtc.transpose"(%a0) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<4x2x8x8xf32>) -> tensor<4x8x2x8xf32>
  %a2 = "dtc.reshape"(%a1) : (tensor<4x8x2x8xf32>) -> tensor<4x8x16xf32>
  %a3 = "dtc.matmul"(%a2, %wo) : (tensor<4x8x16xf32>, tensor<16x16xf32>) -> tensor<4x8x16xf32>
  %x1 = "dtc.add"(%x0, %a3) : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %h2 = "dtc.rms_norm"(%x1, %n2) {epsilon = 1.0e-05 : f32} : (tensor<4x8x16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  %g0 = "dtc.matmul"(%h2, %w1) : (tensor<4x8x16xf32>, tensor<16x24xf32>) -> tensor<4x8x24xf32>
  %g1 = "dtc.silu"(%g0) : (tensor<4x8x24xf32>) -> tensor<4x8x24xf32>
  %u = "dtc.matmul"(%h2, %w3) : (tensor<4x8x16xf32>, tensor<16x24xf32>) -> tensor<4x8x24xf32>
  %gu = "dtc.mul"(%g1, %u) : (tensor<4x8x24xf32>, tensor<4x8x24xf32>) -> tensor<4x8x24xf32>
  %f = "dtc.matmul"(%gu, %w2) : (tensor<4x8x24xf32>, tensor<24x16xf32>) -> tensor<4x8x16xf32>
  %x2 = "dtc.add"(%x1, %f) : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %hf = "dtc.rms_norm"(%x2, %nf) {epsilon = 1.0e-05 : f32} : (tensor<4x8x16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  %logits = "dtc.matmul"(%hf, %out) : (tensor<4x8x16xf32>, tensor<16x32xf32>) -> tensor<4x8x32xf32>
  %loss = "dtc.cross_entropy"(%logits, %labels) : (tensor<4x8x32xf32>, tensor<4x8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
