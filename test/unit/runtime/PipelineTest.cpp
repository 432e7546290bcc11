//===- PipelineTest.cpp - point-to-point messages and pipeline programs ---===//
//
// A hand-written two-stage pipeline: stage 0 computes h = x_m w for each
// micro-batch m and sends it, stage 1 adds sum(h^2) to the loss and sends
// back dh = 2h, stage 0 accumulates dw = x_m^T dh over the micro-batches
// and takes one SGD step. Checked against the same sums computed directly;
// then every way to break such an artifact is rejected on load.
//
//===----------------------------------------------------------------------===//
#include "dtc/runtime/ArtifactFormat.h"
#include "dtc/runtime/Communicator.h"
#include "dtc/runtime/LocalRunner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

using namespace dtc::rt;
using json = nlohmann::json;

namespace {

json slot(int bytes, const char *category, int chunk = -1) {
  json s = {{"bytes", bytes}, {"category", category}};
  if (chunk >= 0) {
    s["scope"] = "microbatch";
    s["chunk"] = chunk;
  }
  return s;
}

json buf(int slot, std::vector<int64_t> shape, const char *tensor = nullptr) {
  json b = {{"slot", slot}, {"dtype", "f32"}, {"shape", shape}};
  if (tensor) b["tensor"] = tensor;
  return b;
}

json ins(const char *op, std::vector<int> in, std::vector<int> out, json attrs = json::object()) {
  json i = {{"op", op}, {"in", in}, {"out", out}};
  if (!attrs.empty()) i["attrs"] = attrs;
  return i;
}

json message(int peer, int id) { return {{"comm", "pp"}, {"peer", peer}, {"message", id}}; }

// x [4, 4] in two micro-batches of two rows; w [4, 4].
json pipelineArtifact() {
  json stage0 = {
      {"name", "stage0"},
      {"ranks", {0}},
      {"stage", 0},
      {"slots", {slot(64, "param"), slot(64, "input"), slot(32, "activation", 0),
                 slot(32, "activation"), slot(32, "activation", 0), slot(64, "activation"),
                 slot(64, "grad")}},
      {"buffers", {buf(0, {4, 4}, "w"), buf(1, {4, 4}, "x"), buf(2, {2, 4}), buf(3, {2, 4}),
                   buf(4, {2, 4}), buf(5, {4, 4}), buf(6, {4, 4})}},
      {"instructions", {ins("fill", {}, {6}, {{"value", 0}})}},
      {"chunks",
       {{{"forward",
          {ins("microbatch_slice", {1}, {2}, {{"axis", 0}}), ins("matmul", {2, 0}, {3}),
           ins("send", {3}, {}, message(1, 0))}},
         {"backward_input", {ins("recv", {}, {4}, message(1, 1))}},
         {"backward_weight",
          {ins("matmul", {2, 4}, {5}, {{"transpose_a", true}}), ins("accumulate", {5}, {6})}}}}},
      {"finish", {ins("sgd_update", {0, 6}, {0}, {{"lr", 0.1}, {"weight_decay", 0.0}})}},
      {"schedule", {{"F", 0, 0}, {"F", 1, 0}, {"BW", 0, 0}, {"BW", 1, 0}}}};
  json stage1 = {
      {"name", "stage1"},
      {"ranks", {1}},
      {"stage", 1},
      {"slots", {slot(32, "activation", 0), slot(32, "activation"), slot(4, "activation"),
                 slot(4, "activation"), slot(4, "scalar"), slot(32, "activation"),
                 slot(4, "constant")}},
      {"buffers", {buf(0, {2, 4}), buf(1, {2, 4}), buf(2, {}), buf(3, {}), buf(4, {}, "loss"),
                   buf(5, {2, 4}), buf(6, {})}},
      {"constants", {{{"buffer", 6}, {"splat", 2.0}}}},
      {"instructions", {ins("fill", {}, {3}, {{"value", 0}})}},
      {"chunks",
       {{{"forward",
          {ins("recv", {}, {0}, message(0, 0)), ins("mul", {0, 0}, {1}),
           ins("reduce_sum", {1}, {2}, {{"axes", {0, 1}}, {"keep_dims", false}}),
           ins("accumulate", {2}, {3})}},
         {"backward_input", {ins("mul", {0, 6}, {5}), ins("send", {5}, {}, message(0, 1))}},
         {"backward_weight", json::array()}}}},
      {"finish", {ins("copy", {3}, {4})}},
      {"schedule", {{"F", 0, 0}, {"BW", 0, 0}, {"F", 1, 0}, {"BW", 1, 0}}}};
  return {{"format", "dtc-artifact"},
          {"version", kArtifactVersion},
          {"mesh", {2}},
          {"devices", 2},
          {"pipeline", {{"stages", 2}, {"virtual_stages", 1}, {"microbatches", 2},
                        {"schedule", "1f1b"}}},
          {"communicators", {{{"name", "pp"}, {"mesh_axes", {0}}}}},
          {"tensors",
           {{{"name", "w"}, {"role", "param"}, {"dtype", "f32"}, {"shape", {4, 4}},
             {"init", "normal(0.5)"}, {"sharding", {json::array(), json::array()}}},
            {{"name", "x"}, {"role", "input"}, {"dtype", "f32"}, {"shape", {4, 4}},
             {"sharding", {json::array(), json::array()}}},
            {{"name", "loss"}, {"role", "loss"}, {"dtype", "f32"}, {"shape", json::array()},
             {"sharding", json::array()}}}},
          {"programs", {stage0, stage1}}};
}

TEST(Pipeline, TwoStagesAccumulateOverMicrobatches) {
  std::string err;
  auto run = LocalRunner::loadBytes(encodeArtifact(pipelineArtifact()), "pp.dtc", err);
  ASSERT_TRUE(run) << err;
  ASSERT_TRUE(run->initialize(1, err)) << err;
  ASSERT_TRUE(run->fillSyntheticInputs(0, err)) << err;
  std::vector<float> w, x;
  ASSERT_TRUE(run->getTensor("w", w, err)) << err;
  ASSERT_TRUE(run->getTensor("x", x, err)) << err;
  ASSERT_TRUE(run->runStep(err)) << err;
  float loss = 0;
  ASSERT_TRUE(run->loss(loss, err)) << err;
  // Directly: h = x w, loss = sum h^2, w' = w - 0.1 * x^T (2h).
  double h[4][4] = {}, want = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      for (int k = 0; k < 4; ++k) h[i][j] += double(x[size_t(i * 4 + k)]) * w[size_t(k * 4 + j)];
      want += h[i][j] * h[i][j];
    }
  EXPECT_NEAR(loss, want, 1e-5 * want);
  std::vector<float> updated;
  ASSERT_TRUE(run->getTensor("w", updated, err)) << err;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 4; ++j) {
      double g = 0;
      for (int i = 0; i < 4; ++i) g += double(x[size_t(i * 4 + k)]) * 2 * h[i][j];
      EXPECT_NEAR(updated[size_t(k * 4 + j)], w[size_t(k * 4 + j)] - 0.1 * g, 1e-5)
          << "w[" << k << "][" << j << "]";
    }
  // Stage 0 holds both micro-batches (1F1B's warm-up of P-1 = 1, plus one).
  LocalRunStats stats = run->stats();
  ASSERT_EQ(stats.microbatchesPeak.size(), 2u);
  EXPECT_EQ(stats.microbatchesPeak[0], 2);
  EXPECT_EQ(stats.microbatchesPeak[1], 1);
  EXPECT_EQ(stats.collectiveCallsPerStep["send_recv"], 2u);
  EXPECT_EQ(stats.collectiveBytesPerStep["send_recv"], 64u);
  // A second step starts from clean accumulators.
  ASSERT_TRUE(run->runStep(err)) << err;
  float again = 0;
  ASSERT_TRUE(run->loss(again, err)) << err;
  EXPECT_LT(again, loss);
}

TEST(Pipeline, BrokenPipelinesAreRejectedOnLoad) {
  struct Case {
    const char *expect;
    std::function<void(json &)> breakIt;
  };
  auto stage = [](json &a, int s) -> json & { return a["programs"][size_t(s)]; };
  std::vector<Case> cases = {
      {"message 0: is sent but never received",
       [&](json &a) { stage(a, 1)["chunks"][0]["forward"][0]["attrs"]["message"] = 7; }},
      {"expects it from stage 1",
       [&](json &a) { stage(a, 1)["chunks"][0]["forward"][0]["attrs"]["peer"] = 1; }},
      {"is sent as f32[2, 4] but received as f32[8]",
       [&](json &a) {
         stage(a, 1)["buffers"].push_back(buf(0, {8})); // a flat view of the same bytes
         stage(a, 1)["chunks"][0]["forward"][0]["out"] = {7};
       }},
      {"deadlock: stage",
       [&](json &a) {
         stage(a, 1)["schedule"] = {{"F", 0, 0}, {"F", 1, 0}, {"BW", 0, 0}, {"BW", 1, 0}};
         stage(a, 0)["schedule"] = {{"F", 0, 0}, {"BW", 0, 0}, {"F", 1, 0}, {"BW", 1, 0}};
       }},
      {"travels where the schedule cannot order it",
       [&](json &a) {
         json send = stage(a, 1)["chunks"][0]["backward_input"][1];
         stage(a, 1)["chunks"][0]["backward_input"].erase(1);
         stage(a, 1)["chunks"][0]["backward_weight"].push_back(send);
       }},
      {"outside the micro-batches uses buffer 2, a micro-batch buffer",
       [&](json &a) { stage(a, 0)["finish"].push_back(ins("copy", {2}, {3})); }},
      {"never finishes its backward",
       [&](json &a) { stage(a, 0)["schedule"].erase(3); }},
      {"does not split into 3 micro-batches",
       [&](json &a) { a["pipeline"]["microbatches"] = 3; }},
      {"a pipeline instruction in an artifact without a \"pipeline\" section",
       [&](json &a) {
         a.erase("pipeline");
         for (json &p : a["programs"]) {
           for (const char *k : {"chunks", "finish", "schedule", "stage"}) p.erase(k);
           for (json &s : p["slots"]) s.erase("scope"), s.erase("chunk");
         }
       }},
      {"peer 2 is not a member of communicator 'pp'",
       [&](json &a) { stage(a, 0)["chunks"][0]["forward"][2]["attrs"]["peer"] = 2; }},
      {"chunk 1: microbatch_slice uses buffer 2, a micro-batch buffer of chunk 0",
       [&](json &a) {
         a["pipeline"]["virtual_stages"] = 2;
         for (json &p : a["programs"]) {
           json chunk = p["chunks"][0];
           p["chunks"].push_back(chunk);
         }
       }},
  };
  for (const Case &c : cases) {
    json a = pipelineArtifact();
    c.breakIt(a);
    std::string err;
    EXPECT_FALSE(checkArtifact(a, "pp.dtc", 2, err)) << c.expect;
    EXPECT_NE(err.find(c.expect), std::string::npos) << "expected: " << c.expect << "\ngot: " << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  }
}

TEST(PointToPoint, ThreadWorldOrdersMessagesAndNeverBlocksASender) {
  ThreadWorld world(2);
  std::vector<float> got(3, 0);
  std::thread receiver([&] {
    World &w = world.rankView(1);
    auto comm = w.split(0, 1);
    float a = 0, b = 0, c = 0;
    comm->recv(&c, 4, 0, 9); // another tag first: arrives independently
    comm->recv(&a, 4, 0, 5);
    comm->recv(&b, 4, 0, 5); // same tag: in order
    got = {a, b, c};
  });
  {
    World &w = world.rankView(0);
    auto comm = w.split(0, 0);
    float one = 1, two = 2, three = 3;
    comm->send(&one, 4, 1, 5); // returns before anyone receives
    comm->send(&two, 4, 1, 5);
    one = two = -1; // the message is a copy
    comm->send(&three, 4, 1, 9);
    comm->flushSends();
  }
  receiver.join();
  EXPECT_EQ(got, (std::vector<float>{1, 2, 3}));
}

TEST(PointToPoint, AbortWakesAWaitingReceiverAndSizesMustMatch) {
  ThreadWorld world(2);
  std::string error;
  std::thread receiver([&] {
    World &w = world.rankView(1);
    auto comm = w.split(0, 1);
    float x;
    try {
      comm->recv(&x, 4, 0, 1);
    } catch (const Error &e) {
      error = e.what();
    }
  });
  std::thread other([&] { world.rankView(0).split(0, 0); });
  other.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  world.abort("rank 0 failed");
  receiver.join();
  EXPECT_EQ(error, "rank 0 failed");

  auto local = makeLocalWorld();
  auto self = local->split(0, 0);
  double d = 1.5;
  self->send(&d, 8, 0, 3);
  float f;
  try {
    self->recv(&f, 4, 0, 3);
    ADD_FAILURE() << "a size mismatch was accepted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("has 8 bytes, the receiver expects 4"), std::string::npos);
  }
  EXPECT_THROW(self->recv(&f, 4, 0, 4), Error); // nothing sent with that tag
}

} // namespace
