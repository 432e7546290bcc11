//===- PipelineTest.cpp - point-to-point messages and pipeline programs ---===//
//
// A hand-written two-stage pipeline: stage 0 computes h = x_m w for each
// micro-batch m and sends it, stage 1 adds sum(h^2) to the loss and sends
// back dh = 2h, stage 0 accumulates dw = x_m^T dh over the micro-batches
// and takes one SGD step. Checked against the same sums computed directly;
// then every way to break such an artifact is rejected on load.
//
//===----------------------------------------------------------------------===//
#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/artifact/Evaluation.h"
#include "dtc/runtime/Communicator.h"
#include "dtc/runtime/LocalRunner.h"

#include "TestArtifacts.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>

using namespace dtc::rt;
using json = nlohmann::json;

namespace {

json buf(int slot, std::vector<int64_t> shape, const char *tensor = nullptr) {
  json b = {{"slot", slot}, {"dtype", "f32"}, {"shape", shape}};
  if (tensor)
    b["tensor"] = tensor;
  return b;
}

json ins(const char *op, std::vector<int> in, std::vector<int> out,
         json attrs = json::object()) {
  json i = {{"op", op}, {"in", in}, {"out", out}};
  if (!attrs.empty())
    i["attrs"] = attrs;
  return i;
}

using dtc::test::pipelineArtifact;

// The evaluation dtc compile would derive: stage 1's loss (the fill before
// the micro-batches, each forward's receive, square, sum and accumulate,
// the copy after them), and of stage 0 only what the receives wait for;
// neither stage's backward, stage 0's gradient fill nor its update.
TEST(Pipeline, EvaluationKeepsWhatTheLossNeeds) {
  json body = pipelineArtifact();
  std::string err;
  ASSERT_TRUE(dtc::artifact::addEvaluation(body, "pp.dtc", err)) << err;
  EXPECT_EQ(body["programs"][0]["evaluation"],
            json::parse(R"({"instructions": [], "forward": [[0, 1, 2]],
                            "finish": []})"));
  EXPECT_EQ(body["programs"][1]["evaluation"],
            json::parse(R"({"instructions": [0], "forward": [[0, 1, 2, 3]],
                            "finish": [0]})"));
}

TEST(Pipeline, EvaluationComputesTheLossAndChangesNothing) {
  json body = pipelineArtifact();
  std::string err;
  ASSERT_TRUE(dtc::artifact::addEvaluation(body, "pp.dtc", err)) << err;
  auto run = LocalRunner::loadBytes(encodeArtifact(body), "pp.dtc", err);
  ASSERT_TRUE(run) << err;
  ASSERT_TRUE(run->initialize(1, err)) << err;
  ASSERT_TRUE(run->fillSyntheticInputs(0, err)) << err;
  std::vector<float> w, x;
  ASSERT_TRUE(run->getTensor("w", w, err)) << err;
  ASSERT_TRUE(run->getTensor("x", x, err)) << err;
  double want = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      double h = 0;
      for (int k = 0; k < 4; ++k)
        h += double(x[size_t(i * 4 + k)]) * w[size_t(k * 4 + j)];
      want += h * h;
    }
  // Twice: the loss starts from its fill each time.
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(run->runEvaluation(err)) << err;
    float loss = 0;
    ASSERT_TRUE(run->loss(loss, err)) << err;
    EXPECT_NEAR(loss, want, 1e-5 * want) << "round " << round;
    std::vector<float> after;
    ASSERT_TRUE(run->getTensor("w", after, err)) << err;
    EXPECT_EQ(after, w) << "round " << round;
  }
  // The step still trains from there and reports the same loss.
  ASSERT_TRUE(run->runStep(err)) << err;
  float loss = 0;
  ASSERT_TRUE(run->loss(loss, err)) << err;
  EXPECT_NEAR(loss, want, 1e-5 * want);
}

TEST(Pipeline, EvaluationSectionsAreChecked) {
  json good = pipelineArtifact();
  std::string err;
  ASSERT_TRUE(dtc::artifact::addEvaluation(good, "pp.dtc", err)) << err;
  auto refused = [&](const std::function<void(json &)> &edit) {
    json body = good;
    edit(body);
    dtc::artifact::Artifact a;
    std::string error;
    EXPECT_FALSE(dtc::artifact::parseArtifact(body, "pp.dtc", a, error));
    return error;
  };
  EXPECT_EQ(
      refused([](json &b) { b["programs"][0]["evaluation"]["finish"] = {0}; }),
      "pp.dtc: program 'stage0' evaluation: finish instruction 0 "
      "(sgd_update): writes param 'w', which an evaluation must leave "
      "as it is");
  EXPECT_EQ(refused([](json &b) {
              b["programs"][1]["evaluation"]["forward"] = {{0, 0}};
            }),
            "pp.dtc: program 'stage1': evaluation.forward[0]: index 0 does "
            "not increase");
  EXPECT_EQ(
      refused([](json &b) { b["programs"][1]["evaluation"]["finish"] = {1}; }),
      "pp.dtc: program 'stage1': evaluation.finish: index 1 is past "
      "the list's 1 instructions");
  EXPECT_EQ(refused([](json &b) { b["programs"][0].erase("evaluation"); }),
            "pp.dtc: evaluation: only 1 of the 2 programs have an "
            "\"evaluation\" section");
  EXPECT_EQ(refused([](json &b) {
              b["programs"][1]["evaluation"]["finish"] = json::array();
            }),
            "pp.dtc: program 'stage1' evaluation: never writes the loss, "
            "which the program holds");
  // Stage 1 waits for a message stage 0's evaluation never sends.
  const std::string hang = refused(
      [](json &b) { b["programs"][0]["evaluation"]["forward"] = {{0, 1}}; });
  EXPECT_EQ(hang.rfind("pp.dtc: evaluation: ", 0), 0u) << hang;
}

TEST(Pipeline, TwoStagesAccumulateOverMicrobatches) {
  std::string err;
  auto run =
      LocalRunner::loadBytes(encodeArtifact(pipelineArtifact()), "pp.dtc", err);
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
      for (int k = 0; k < 4; ++k)
        h[i][j] += double(x[size_t(i * 4 + k)]) * w[size_t(k * 4 + j)];
      want += h[i][j] * h[i][j];
    }
  EXPECT_NEAR(loss, want, 1e-5 * want);
  std::vector<float> updated;
  ASSERT_TRUE(run->getTensor("w", updated, err)) << err;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 4; ++j) {
      double g = 0;
      for (int i = 0; i < 4; ++i)
        g += double(x[size_t(i * 4 + k)]) * 2 * h[i][j];
      EXPECT_NEAR(updated[size_t(k * 4 + j)], w[size_t(k * 4 + j)] - 0.1 * g,
                  1e-5)
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
  auto stage = [](json &a, int s) -> json & {
    return a["programs"][size_t(s)];
  };
  std::vector<Case> cases = {
      {"message 0: is sent but never received",
       [&](json &a) {
         stage(a, 1)["chunks"][0]["forward"][0]["attrs"]["message"] = 7;
       }},
      {"expects it from stage 1",
       [&](json &a) {
         stage(a, 1)["chunks"][0]["forward"][0]["attrs"]["peer"] = 1;
       }},
      {"is sent as f32[2, 4] but received as f32[8]",
       [&](json &a) {
         stage(a, 1)["buffers"].push_back(
             buf(0, {8})); // a flat view of the same bytes
         stage(a, 1)["chunks"][0]["forward"][0]["out"] = {7};
       }},
      {"deadlock: stage",
       [&](json &a) {
         stage(a, 1)["schedule"] = {
             {"F", 0, 0}, {"F", 1, 0}, {"BW", 0, 0}, {"BW", 1, 0}};
         stage(a, 0)["schedule"] = {
             {"F", 0, 0}, {"BW", 0, 0}, {"F", 1, 0}, {"BW", 1, 0}};
       }},
      {"travels where the schedule cannot order it",
       [&](json &a) {
         json send = stage(a, 1)["chunks"][0]["backward_input"][1];
         stage(a, 1)["chunks"][0]["backward_input"].erase(1);
         stage(a, 1)["chunks"][0]["backward_weight"].push_back(send);
       }},
      {"outside the micro-batches uses buffer 2, a micro-batch buffer",
       [&](json &a) {
         stage(a, 0)["finish"].push_back(ins("copy", {2}, {3}));
       }},
      {"a bucket's all_reduce in a pipeline's lists",
       [&](json &a) {
         stage(a, 1)["finish"].push_back(
             ins("all_reduce", {3}, {3},
                 {{"comm", "pp"}, {"reduction", "sum"}, {"bucket", 0}}));
       }},
      {"a bucket's all_reduce in a pipeline's lists",
       [&](json &a) {
         stage(a, 1)["chunks"][0]["forward"].push_back(
             ins("all_reduce", {2}, {2},
                 {{"comm", "pp"}, {"reduction", "sum"}, {"bucket", 3}}));
       }},
      {"never finishes its backward",
       [&](json &a) { stage(a, 0)["schedule"].erase(3); }},
      {"does not split into 3 micro-batches",
       [&](json &a) { a["pipeline"]["microbatches"] = 3; }},
      {"a pipeline instruction in an artifact without a \"pipeline\" section",
       [&](json &a) {
         a.erase("pipeline");
         for (json &p : a["programs"]) {
           for (const char *k : {"chunks", "finish", "schedule", "stage"})
             p.erase(k);
           for (json &s : p["slots"])
             s.erase("scope"), s.erase("chunk");
         }
       }},
      {"peer 2 is not a member of communicator 'pp'",
       [&](json &a) {
         stage(a, 0)["chunks"][0]["forward"][2]["attrs"]["peer"] = 2;
       }},
      {"chunk 1: microbatch_slice uses buffer 2, a micro-batch buffer of chunk "
       "0",
       [&](json &a) {
         a["pipeline"]["virtual_stages"] = 2;
         for (json &p : a["programs"]) {
           json chunk = p["chunks"][0];
           p["chunks"].push_back(chunk);
         }
       }},
  };
  // Collectives inside the stages' lists join the replay of all ranks'
  // communications: stage 1 all-reduces before its first receive, stage 0
  // only after its first gradient arrived, which stage 1 sends later.
  auto withCollectives = [&](json &a, const char *reduction0) {
    a["communicators"].push_back({{"name", "all"}, {"mesh_axes", {0}}});
    stage(a, 0)["chunks"][0]["backward_weight"].push_back(ins(
        "all_reduce", {3}, {3}, {{"comm", "all"}, {"reduction", reduction0}}));
    stage(a, 1)["chunks"][0]["forward"].insert(
        stage(a, 1)["chunks"][0]["forward"].begin(),
        ins("all_reduce", {1}, {1}, {{"comm", "all"}, {"reduction", "sum"}}));
  };
  cases.push_back(
      {"the programs' communications wait for each other forever: rank 0 waits "
       "in receive from "
       "member 1 of message 1 (8 f32) on 'pp' ('stage0' input-gradient list of "
       "chunk 0, "
       "micro-batch 0, instruction 0) from rank 1, which waits in all_reduce "
       "(sum) of 8 f32 on "
       "'all' ('stage1' forward list of chunk 0, micro-batch 0, instruction 0)",
       [&](json &a) { withCollectives(a, "sum"); }});
  cases.push_back(
      {"its collective #1 is all_reduce (max) of 8 f32 on 'all' ('stage0' "
       "weight-gradient list of chunk 0, micro-batch 0, instruction 2)",
       [&](json &a) { withCollectives(a, "max"); }});
  for (const Case &c : cases) {
    json a = pipelineArtifact();
    c.breakIt(a);
    std::string err;
    EXPECT_FALSE(checkArtifact(a, "pp.dtc", 2, err)) << c.expect;
    EXPECT_NE(err.find(c.expect), std::string::npos)
        << "expected: " << c.expect << "\ngot: " << err;
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
    comm->recvMessage(&c, 4, 0, 9); // another tag first: arrives independently
    comm->recvMessage(&a, 4, 0, 5);
    comm->recvMessage(&b, 4, 0, 5); // same tag: in order
    got = {a, b, c};
  });
  {
    World &w = world.rankView(0);
    auto comm = w.split(0, 0);
    float one = 1, two = 2, three = 3;
    comm->sendMessage(&one, 4, 1, 5); // returns before anyone receives
    comm->sendMessage(&two, 4, 1, 5);
    one = two = -1; // the message is a copy
    comm->sendMessage(&three, 4, 1, 9);
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
      comm->recvMessage(&x, 4, 0, 1);
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
  self->sendMessage(&d, 8, 0, 3);
  float f;
  try {
    self->recvMessage(&f, 4, 0, 3);
    ADD_FAILURE() << "a size mismatch was accepted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("has 8 bytes, the receiver expects 4"),
              std::string::npos);
  }
  EXPECT_THROW(self->recvMessage(&f, 4, 0, 4),
               Error); // nothing sent with that tag
}

// A receive whose message never comes (a mismatched tag, a dead peer) gives
// up after the world's timeout instead of hanging the stage.
TEST(PointToPoint, AReceiveTimesOut) {
  ThreadWorld world(2, 0.2);
  std::string error;
  std::thread receiver([&] {
    auto comm = world.rankView(1).split(0, 1);
    float x;
    try {
      comm->recvMessage(&x, 4, 0, 1);
    } catch (const CommFailure &e) {
      error = e.what();
    }
  });
  std::thread sender([&] {
    auto comm = world.rankView(0).split(0, 0);
    float one = 1;
    comm->sendMessage(&one, 4, 1, 2); // another tag: never taken
  });
  sender.join();
  receiver.join();
  EXPECT_NE(error.find("timed out after 0.2 s in a pipeline receive"),
            std::string::npos)
      << error;
}

} // namespace
