//===- TestArtifacts.h - hand-written artifacts for runtime tests -*- C++
//-*-===//
//
// Builders for artifact bodies as the compiler would emit them (per-rank
// programs with slots, buffers, constants, kernels and collectives), used by
// the gtests and by dtc-rt-testgen (which writes them for the mpirun tests).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TEST_TESTARTIFACTS_H
#define DTC_TEST_TESTARTIFACTS_H

#include "dtc/artifact/Types.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace dtc::test {

using json = nlohmann::json;

/// A fresh directory under $TMPDIR (default /tmp) for this test process (one
/// per `prefix`), removed with everything in it when the process that made it
/// exits.
std::string scratchDir(const std::string &prefix);

class ProgramBuilder {
public:
  ProgramBuilder(std::string name, std::vector<int> ranks);
  /// A buffer in a new slot of exactly its size.
  int buffer(rt::DType dtype, const rt::Shape &shape,
             const std::string &category, const std::string &tensor = "");
  /// A buffer viewing `of`'s slot (a reshape view).
  int view(int of, rt::DType dtype, const rt::Shape &shape);
  void op(const std::string &op, std::vector<int> in, std::vector<int> out,
          json attrs = json::object());
  void splat(int buffer, double value);
  json build() const { return prog_; }

private:
  json prog_;
};

class ArtifactBuilder {
public:
  explicit ArtifactBuilder(std::vector<int64_t> mesh);
  void comm(const std::string &name, std::vector<int> axes);
  void tensor(json t) { body_["tensors"].push_back(std::move(t)); }
  void param(const std::string &name, const rt::Shape &shape,
             const std::string &init, json sharding);
  void optState(const std::string &name, const std::string &of,
                const rt::Shape &shape, json sharding);
  void input(const std::string &name, rt::DType dtype, const rt::Shape &shape,
             json sharding, int64_t max = 0);
  void scalar(const std::string &name, const std::string &role,
              rt::DType dtype);
  void program(const ProgramBuilder &p) {
    body_["programs"].push_back(p.build());
  }
  json &body() { return body_; }

private:
  json body_;
};

/// A 2-layer MLP classifier trained with Adam (or SGD): x [B, 16] f32,
/// y [B] i32 (max 10), w1 [16, 32], b1 [32], w2 [32, 10]. Batch split over
/// `dpAxes`; with `tpAxis` >= 0, w1/b1 column- and w2 row-sharded over it
/// (Megatron MLP) with an all_reduce of the logits.
struct MlpConfig {
  std::vector<int64_t> mesh = {1};
  std::vector<int> dpAxes;
  int tpAxis = -1;
  std::string optimizer = "adam"; // adam | adamw | sgd
  int64_t batch = 8;
};
json mlpArtifact(const MlpConfig &c);

/// A tiny causal LM: ids/labels [B, S] i32 (max V), embedding -> rms_norm ->
/// attention (q = k = v) -> matmul to logits -> cross_entropy, Adam; batch
/// split over every mesh axis. `idsMax` > V makes out-of-range ids possible.
struct LmConfig {
  std::vector<int64_t> mesh = {1};
  int64_t batch = 4, seq = 8, vocab = 50, dim = 16;
  int64_t idsMax = 0; // 0 = vocab
};
json lmArtifact(const LmConfig &c);

/// One collective of a program in programsArtifact(): `op` (all_reduce,
/// all_gather, reduce_scatter, all_to_all) on `comm` ("a" or "b") over an f32
/// (or i32) input of `count` elements.
struct CollectiveSpec {
  std::string op = "all_reduce";
  int64_t count = 8;
  std::string reduction = "sum";
  std::string comm = "a";
  rt::DType dtype = rt::DType::F32;
};
/// Mesh [2] and one program per rank ("p0" runs rank 0, "p1" rank 1), each
/// making its list of collectives; communicators "a" and "b" both span the
/// two ranks. Each program holds a param (updated with SGD from the first
/// collective's result when it is an f32 all_reduce of 8) and the loss.
/// Equal lists give a valid artifact; unequal ones are what the validator
/// must refuse before any rank starts.
json programsArtifact(const std::vector<CollectiveSpec> &p0,
                      const std::vector<CollectiveSpec> &p1);

/// Mesh [2], a two-stage pipeline of two micro-batches under 1F1B (one
/// program per stage, messages on communicator "pp"): stage 0 computes
/// h = x_m w and sends it, stage 1 adds sum(h^2) to the loss and sends back
/// dh = 2h, stage 0 accumulates dw = x_m^T dh and takes one SGD step.
json pipelineArtifact();

/// Mesh [2, 2]: every collective on several communicators and axes; each
/// result lands in a param (so --save exposes it) of global shape [4a, b]
/// that stacks the ranks' local [a, b] results in rank order.
json collectivesArtifact();
/// The expected value of every such param, from the global input X [4, 6].
std::map<std::string, std::vector<float>>
collectivesExpected(const std::vector<float> &X);
/// Mesh [2, 2], as collectivesArtifact: the input x gathered over the
/// "cols" communicator along axis 1 (param "xc") and along axis 0 ("ag0"),
/// then each reduce-scattered back along the same axis ("rs", "rs0"); with
/// `bucketed` the two gathers are one bucket and the two reduce-scatters
/// another. The expected values are collectivesExpected's for "xc", "rs"
/// and "rs0", and for "ag0" the stacked pieces of the row's two ranks.
json bucketsArtifact(bool bucketed);

} // namespace dtc::test

#endif
