//===- TrainerTest.cpp - the training loop, checkpoints, data, logs -------===//
//
// Runs Trainer (what dtc-run runs per rank) on N threads with a ThreadWorld.
//
//===----------------------------------------------------------------------===//
#include "TestArtifacts.h"

#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/runtime/Trainer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace dtc::rt;
using dtc::test::json;

namespace {

std::string tempDir() { return dtc::test::scratchDir("dtc-train-test"); }

std::string writeArtifact(const std::string &name, const json &body) {
  const std::string p = tempDir() + "/" + name;
  std::string err;
  EXPECT_TRUE(writeArtifactFile(p, body, err)) << err;
  return p;
}

struct Result {
  std::vector<StepReport> steps;
  std::vector<std::string> notes;
  std::string error; ///< "" on success
  int reporter = -1;
  int interrupted = 0; ///< the signal of an Interrupted
  std::map<std::string, std::vector<float>> params; ///< rank 0's local pieces
};

Result train(int ranks, TrainOptions opts,
             const std::function<void(const StepReport &)> &onStep = nullptr) {
  opts.threads = 1;
  opts.timeoutSeconds = 60; // a regression fails instead of hanging
  ThreadWorld tw(ranks);
  Result res;
  std::mutex mu;
  auto body = [&](int r) {
    World &w = tw.rankView(r);
    try {
      Trainer t(w, opts, [&](const std::string &n) { res.notes.push_back(n); });
      t.run([&](const StepReport &s) {
        res.steps.push_back(s);
        if (onStep)
          onStep(s);
      });
      if (r == 0)
        for (int i : t.artifact().tensorsWithRole(Role::Param)) {
          LocalTensor lt = t.executor().tensor(i);
          const float *f = static_cast<const float *>(lt.data);
          res.params[lt.decl->name].assign(f, f + numel(lt.piece.local));
        }
    } catch (const AgreedError &e) {
      std::lock_guard<std::mutex> lock(mu);
      if (r == e.reporter()) {
        res.error = e.what();
        res.reporter = r;
        if (auto *i = dynamic_cast<const Interrupted *>(&e))
          res.interrupted = i->signal();
      }
    } catch (const std::exception &e) {
      tw.abort(e.what());
      std::lock_guard<std::mutex> lock(mu);
      ADD_FAILURE() << "rank " << r
                    << " threw a non-agreed error: " << e.what();
    }
  };
  std::vector<std::thread> ts;
  for (int r = 0; r < ranks; ++r)
    ts.emplace_back(body, r);
  for (auto &t : ts)
    t.join();
  return res;
}

std::vector<float> lossesOf(const Result &r) {
  std::vector<float> l;
  for (const auto &s : r.steps)
    l.push_back(s.loss);
  return l;
}

json tpMlp() {
  dtc::test::MlpConfig c;
  c.mesh = {2, 2};
  c.dpAxes = {0};
  c.tpAxis = 1;
  return dtc::test::mlpArtifact(c);
}

TEST(Trainer, StepsLossesAndLog) {
  TrainOptions o;
  o.artifactPath = writeArtifact("mlp1.dtc", dtc::test::mlpArtifact({}));
  o.steps = 4;
  o.seed = 3;
  o.logPath = tempDir() + "/log.jsonl";
  Result r = train(1, o);
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.steps.size(), 4u);
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(r.steps[size_t(k)].step, k);
  std::ifstream in(o.logPath);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    json j = json::parse(line);
    EXPECT_EQ(j["step"], n);
    EXPECT_FLOAT_EQ(j["loss"].get<float>(), r.steps[size_t(n)].loss);
    EXPECT_GE(j["step_time_s"].get<double>(), 0.0);
    EXPECT_TRUE(j.contains("tokens_per_s"));
    ++n;
  }
  EXPECT_EQ(n, 4);
}

// --steps 10 --save a, then --load a --steps 10 reproduces a 20-step run.
TEST(Trainer, SaveThenLoadReproducesTheLongRunExactly) {
  TrainOptions o;
  o.artifactPath = writeArtifact("tp.dtc", tpMlp());
  o.seed = 5;
  o.steps = 8;
  Result full = train(4, o);
  ASSERT_EQ(full.error, "");
  o.steps = 4;
  o.savePath = tempDir() + "/half.safetensors";
  Result first = train(4, o);
  ASSERT_EQ(first.error, "");
  o.savePath.clear();
  o.loadPath = tempDir() + "/half.safetensors";
  Result second = train(4, o);
  ASSERT_EQ(second.error, "");
  EXPECT_TRUE(second.notes.empty());
  ASSERT_EQ(second.steps.size(), 4u);
  EXPECT_EQ(second.steps[0].step, 4);
  const std::vector<float> all = lossesOf(full);
  const std::vector<float> want(all.begin() + 4, all.end());
  EXPECT_EQ(lossesOf(second), want) << "bitwise equal losses";
  EXPECT_EQ(second.params, full.params);

  SafetensorsReader main(o.loadPath), side(optimizerSidecarPath(o.loadPath));
  EXPECT_EQ(main.metadata().at("dtc.format"), "dtc-checkpoint-v1");
  EXPECT_EQ(main.metadata().at("dtc.step"), "4");
  EXPECT_EQ(main.entries().size(), 3u);
  EXPECT_EQ(main.find("w1")->shape, (Shape{16, 32}));
  EXPECT_EQ(side.metadata().at("dtc.step"), "4");
  EXPECT_EQ(side.metadata().at("dtc.optimizer_step"), "4");
  EXPECT_EQ(side.entries().size(), 6u);
  EXPECT_NE(side.find("w2:adam_v"), nullptr);
}

// A checkpoint written by one mesh loads into another.
TEST(Trainer, CheckpointsMoveAcrossMeshes) {
  TrainOptions o;
  o.artifactPath = writeArtifact("tp2.dtc", tpMlp());
  o.seed = 9;
  o.steps = 6;
  Result ref = train(4, o);
  o.steps = 3;
  o.savePath = tempDir() + "/tp.safetensors";
  ASSERT_EQ(train(4, o).error, "");
  // Load into one device and into dp2: continue.
  for (auto [ranks, body] : std::vector<std::pair<int, json>>{
           {1, dtc::test::mlpArtifact({})}, {2, [] {
                                               dtc::test::MlpConfig c;
                                               c.mesh = {2};
                                               c.dpAxes = {0};
                                               return dtc::test::mlpArtifact(c);
                                             }()}}) {
    TrainOptions l;
    l.artifactPath =
        writeArtifact("other" + std::to_string(ranks) + ".dtc", body);
    l.seed = 9;
    l.steps = 3;
    l.loadPath = o.savePath;
    Result r = train(ranks, l);
    ASSERT_EQ(r.error, "");
    ASSERT_EQ(r.steps.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(r.steps[size_t(i)].step, 3 + i);
      EXPECT_NEAR(r.steps[size_t(i)].loss, ref.steps[size_t(3 + i)].loss, 1e-5);
    }
  }
}

TEST(Trainer, StepsZeroSaveWritesTheInitialParameters) {
  TrainOptions o;
  o.artifactPath = writeArtifact("tp0.dtc", tpMlp());
  o.seed = 2;
  o.steps = 0;
  o.savePath = tempDir() + "/init.safetensors";
  Result r = train(4, o);
  ASSERT_EQ(r.error, "");
  EXPECT_TRUE(r.steps.empty());
  SafetensorsReader f(o.savePath);
  EXPECT_EQ(f.metadata().at("dtc.step"), "0");
  // Rank 0 holds columns 0..15 of w1: equal to the file's.
  std::vector<float> w1(16 * 32);
  f.read(*f.find("w1"), 0, w1.data(), w1.size() * 4);
  const std::vector<float> &local = r.params.at("w1");
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      ASSERT_EQ(local[size_t(i * 16 + j)], w1[size_t(i * 32 + j)]);
}

TEST(Trainer, MissingOrStaleSidecarStartsTheOptimizerFromZeros) {
  TrainOptions o;
  o.artifactPath = writeArtifact("m1.dtc", dtc::test::mlpArtifact({}));
  o.steps = 2;
  o.savePath = tempDir() + "/s.safetensors";
  ASSERT_EQ(train(1, o).error, "");
  // Stale sidecar: overwrite the main file with a later step.
  TrainOptions later = o;
  later.loadPath = o.savePath;
  later.savePath = tempDir() + "/later.safetensors";
  ASSERT_EQ(train(1, later).error, "");
  std::rename((tempDir() + "/later.safetensors").c_str(), o.savePath.c_str());
  TrainOptions l = o;
  l.savePath.clear();
  l.loadPath = o.savePath;
  l.steps = 1;
  Result r = train(1, l);
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("s.safetensors.optim is from step 2 but"),
            std::string::npos)
      << r.notes[0];
  EXPECT_EQ(r.steps[0].step, 4);
  std::remove(optimizerSidecarPath(o.savePath).c_str());
  r = train(1, l);
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("s.safetensors.optim not found; the optimizer "
                            "state starts from zeros"),
            std::string::npos)
      << r.notes[0];
}

TEST(Trainer, StrictCheckpointValidation) {
  const std::string art = writeArtifact("v1.dtc", dtc::test::mlpArtifact({}));
  std::vector<float> w1(16 * 32), b1(32), w2(32 * 10), bad(5);
  auto tryLoad = [&](std::vector<SafetensorsTensor> ts) {
    const std::string p = tempDir() + "/strict.safetensors";
    writeSafetensors(p, ts, {});
    TrainOptions o;
    o.artifactPath = art;
    o.steps = 1;
    o.loadPath = p;
    return train(1, o).error;
  };
  EXPECT_EQ(tryLoad({{"w1", DType::F32, {16, 32}, w1.data()},
                     {"b1", DType::F32, {32}, b1.data()},
                     {"w2", DType::F32, {32, 10}, w2.data()}}),
            "");
  EXPECT_NE(tryLoad({{"w1", DType::F32, {16, 32}, w1.data()},
                     {"w2", DType::F32, {32, 10}, w2.data()}})
                .find("missing parameter 'b1' (f32[32])"),
            std::string::npos);
  EXPECT_NE(tryLoad({{"w1", DType::F32, {16, 32}, w1.data()},
                     {"b1", DType::F32, {32}, b1.data()},
                     {"w2", DType::F32, {32, 10}, w2.data()},
                     {"extra", DType::F32, {5}, bad.data()}})
                .find("tensor 'extra' is not one of the parameters"),
            std::string::npos);
  EXPECT_NE(tryLoad({{"w1", DType::F32, {32, 16}, w1.data()},
                     {"b1", DType::F32, {32}, b1.data()},
                     {"w2", DType::F32, {32, 10}, w2.data()}})
                .find("tensor 'w1' has shape [32, 16] but the model's "
                      "parameter has shape [16, 32]"),
            std::string::npos);
  EXPECT_NE(tryLoad({{"w1", DType::F32, {16, 32}, w1.data()},
                     {"b1", DType::I32, {32}, b1.data()},
                     {"w2", DType::F32, {32, 10}, w2.data()}})
                .find("tensor 'b1' has dtype I32"),
            std::string::npos);
}

TEST(Trainer, ErrorsAreAgreedAndReportedOnce) {
  TrainOptions o;
  o.artifactPath = writeArtifact("tp3.dtc", tpMlp());
  o.steps = 1;
  Result r = train(3, o);
  EXPECT_NE(
      r.error.find("compiled for 4 devices (mesh 2x2) but 3 ranks are running"),
      std::string::npos)
      << r.error;
  EXPECT_EQ(r.reporter, 0);
  o.backend = "cuda";
  r = train(4, o);
  // Without the CUDA backend in the build, or without a GPU: one message
  // either way, ending in the way out.
  EXPECT_NE(r.error.find("; use --backend cpu"), std::string::npos) << r.error;
  o.backend = "cpu";
  o.logPath = tempDir() + "/no/such/dir/log.jsonl";
  r = train(4, o);
  EXPECT_NE(r.error.find("log.jsonl: cannot write the log"), std::string::npos)
      << r.error;
  // A kernel failing at run time on some ranks only.
  dtc::test::LmConfig c;
  c.mesh = {2, 2};
  c.idsMax = 500;
  TrainOptions e;
  e.artifactPath = writeArtifact("badids.dtc", dtc::test::lmArtifact(c));
  e.steps = 3;
  r = train(4, e);
  EXPECT_NE(r.error.find("badids.dtc: step 0: program 'spmd' instruction 0 "
                         "(embedding): embedding: id"),
            std::string::npos)
      << r.error;
}

TEST(Trainer, TokenDataAcrossMeshes) {
  std::vector<uint16_t> toks(500);
  for (size_t i = 0; i < toks.size(); ++i)
    toks[i] = uint16_t((i * i + 3 * i) % 50);
  const std::string data = tempDir() + "/tokens.bin";
  std::string err;
  ASSERT_TRUE(writeOutputFile(
      data, std::string(reinterpret_cast<const char *>(toks.data()), 1000),
      err));
  dtc::test::LmConfig c;
  TrainOptions o;
  o.artifactPath = writeArtifact("lm1.dtc", dtc::test::lmArtifact(c));
  o.steps = 3;
  o.dataPath = data;
  Result one = train(1, o);
  ASSERT_EQ(one.error, "");
  c.mesh = {2, 2};
  o.artifactPath = writeArtifact("lm4.dtc", dtc::test::lmArtifact(c));
  Result four = train(4, o);
  ASSERT_EQ(four.error, "");
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(four.steps[size_t(i)].loss, one.steps[size_t(i)].loss, 1e-5);
  // tokens per step = B * S of the ids input.
  EXPECT_GT(one.steps[0].tokensPerSecond, 0);
  // Synthetic inputs give different losses than the data.
  o.dataPath.clear();
  Result synth = train(4, o);
  EXPECT_NE(synth.steps[0].loss, four.steps[0].loss);
  // A bad token is reported with the file and offset.
  toks[321] = 77;
  ASSERT_TRUE(writeOutputFile(
      data, std::string(reinterpret_cast<const char *>(toks.data()), 1000),
      err));
  o.dataPath = data;
  Result bad = train(4, o);
  EXPECT_NE(bad.error.find("tokens.bin: token 77 at byte offset 642 (token "
                           "321) is not below 50"),
            std::string::npos)
      << bad.error;
}

TEST(Trainer, StatsFile) {
  TrainOptions o;
  dtc::test::MlpConfig c;
  c.mesh = {2};
  c.dpAxes = {0};
  o.artifactPath = writeArtifact("st.dtc", dtc::test::mlpArtifact(c));
  o.steps = 1;
  o.statsPath = tempDir() + "/stats.json";
  ASSERT_EQ(train(2, o).error, "");
  std::ifstream in(o.statsPath);
  json j = json::parse(in);
  EXPECT_EQ(j["devices"], 2);
  auto aligned = [](int b) { return (b + 63) / 64 * 64 + 64; };
  // The usual accounting (the report's), and what the allocator took.
  EXPECT_EQ(j["memory_bytes"]["param"], 16 * 32 * 4 + 32 * 4 + 320 * 4);
  EXPECT_EQ(j["allocated_bytes"]["param"],
            aligned(16 * 32 * 4) + aligned(32 * 4) + aligned(320 * 4));
  EXPECT_EQ(j["memory_bytes"]["total"], j["allocated_bytes"]["total"]);
  EXPECT_EQ(j["collectives_per_step"]["all_reduce"]["calls"], 4);
  // Two ranks: the ring sends and receives each element once.
  const int data = 4 + (16 * 32 + 32 + 320) * 4;
  EXPECT_EQ(j["collectives_per_step"]["all_reduce"]["sent_bytes"], data);
  EXPECT_EQ(j["collectives_per_step"]["all_reduce"]["received_bytes"], data);
  EXPECT_EQ(j["collectives_per_step_by_comm"]["dp"]["all_reduce"]["sent_bytes"],
            data);
}

std::vector<json> logLines(const std::string &path) {
  std::ifstream in(path);
  std::vector<json> lines;
  std::string line;
  while (std::getline(in, line))
    lines.push_back(json::parse(line));
  return lines;
}

// SIGTERM during a run: the step finishes, the checkpoint is saved, the run
// stops; resuming gives the losses of an uninterrupted run and every step
// appears once in the log.
TEST(Trainer, InterruptedRunSavesAndResumesExactly) {
  TrainOptions o;
  o.artifactPath = writeArtifact("int.dtc", tpMlp());
  o.seed = 9;
  o.steps = 8;
  o.logPath = tempDir() + "/full.jsonl";
  Result full = train(4, o);
  ASSERT_EQ(full.error, "");

  o.logPath = tempDir() + "/int.jsonl";
  o.savePath = tempDir() + "/int.safetensors";
  // One rank sees the signal, at its fourth check (the first is before
  // step 0, then one after each step: after step 2); the ranks agree on it.
  std::atomic<bool> delivered{false};
  o.pendingSignal = [&delivered] {
    thread_local int polls = 0;
    return ++polls >= 4 && !delivered.exchange(true) ? SIGTERM : 0;
  };
  Result first = train(4, o);
  EXPECT_EQ(first.interrupted, SIGTERM);
  EXPECT_EQ(first.error, "interrupted by SIGTERM after step 2: " + o.savePath +
                             " holds the 3 steps done; resume with --load " +
                             o.savePath);
  EXPECT_EQ(first.steps.size(), 3u);
  EXPECT_EQ(SafetensorsReader(o.savePath).metadata().at("dtc.step"), "3");
  EXPECT_EQ(logLines(o.logPath).size(), 3u);

  o.pendingSignal = nullptr;
  o.loadPath = o.savePath; // and save into it again
  o.steps = 5;
  Result second = train(4, o);
  ASSERT_EQ(second.error, "");
  std::vector<float> resumed = lossesOf(first), rest = lossesOf(second);
  resumed.insert(resumed.end(), rest.begin(), rest.end());
  EXPECT_EQ(resumed, lossesOf(full)) << "bitwise equal losses";
  const std::vector<json> log = logLines(o.logPath),
                          fullLog = logLines(tempDir() + "/full.jsonl");
  ASSERT_EQ(log.size(), 8u);
  for (size_t k = 0; k < 8; ++k) {
    EXPECT_EQ(log[k]["step"], k) << "every step once, in order";
    EXPECT_EQ(log[k]["loss"], fullLog[k]["loss"]);
  }
  EXPECT_EQ(SafetensorsReader(o.savePath).metadata().at("dtc.step"), "8");

  // A log that does not end where the checkpoint does is refused.
  o.logPath = tempDir() + "/full.jsonl"; // ends at step 7
  o.savePath.clear();
  o.loadPath = tempDir() + "/int.safetensors"; // holds 8 steps: fine
  EXPECT_EQ(train(4, o).error, "");
  ASSERT_EQ(logLines(o.logPath).size(), 13u);
  TrainOptions early = o;
  early.steps = 3;
  early.savePath = tempDir() + "/early.safetensors";
  early.loadPath.clear();
  early.logPath = tempDir() + "/early.jsonl";
  ASSERT_EQ(train(4, early).error, "");
  early.loadPath = early.savePath;
  early.savePath.clear();
  early.logPath = o.logPath; // ends at step 12, the checkpoint holds 3 steps
  EXPECT_NE(train(4, early).error.find(
                "full.jsonl: the log ends at step 12 but the checkpoint "
                "continues from step 3"),
            std::string::npos);
  EXPECT_EQ(logLines(o.logPath).size(), 13u) << "the refused log is untouched";
}

TEST(Trainer, AStopBeforeTheFirstStepSavesTheStartingState) {
  // Asked to stop while starting (one rank's first check): no step runs,
  // the initial parameters are saved and resume like a fresh run.
  TrainOptions o;
  o.artifactPath = writeArtifact("early-stop.dtc", tpMlp());
  o.steps = 3;
  Result full = train(4, o);
  ASSERT_EQ(full.error, "");
  o.savePath = tempDir() + "/early-stop.safetensors";
  std::atomic<bool> delivered{false};
  o.pendingSignal = [&delivered] {
    return !delivered.exchange(true) ? SIGHUP : 0;
  };
  Result stopped = train(4, o);
  EXPECT_EQ(stopped.interrupted, SIGHUP);
  EXPECT_EQ(stopped.error,
            "interrupted by SIGHUP before the first step: " + o.savePath +
                " holds the 0 steps done; resume with --load " + o.savePath);
  EXPECT_TRUE(stopped.steps.empty());
  EXPECT_EQ(SafetensorsReader(o.savePath).metadata().at("dtc.step"), "0");
  o.pendingSignal = nullptr;
  o.loadPath = o.savePath;
  Result resumed = train(4, o);
  ASSERT_EQ(resumed.error, "");
  EXPECT_EQ(lossesOf(resumed), lossesOf(full)) << "bitwise equal losses";
}

TEST(Trainer, SaveEveryNSteps) {
  TrainOptions o;
  o.artifactPath = writeArtifact("every.dtc", tpMlp());
  o.steps = 5;
  o.saveEvery = 2;
  o.savePath = tempDir() + "/every.safetensors";
  std::vector<std::string>
      seen; // the checkpoint's step as each step is reported
  Result r = train(4, o, [&](const StepReport &) {
    std::ifstream probe(o.savePath);
    seen.push_back(probe
                       ? SafetensorsReader(o.savePath).metadata().at("dtc.step")
                       : "none");
  });
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(seen, (std::vector<std::string>{"none", "none", "2", "2", "4"}));
  EXPECT_EQ(SafetensorsReader(o.savePath).metadata().at("dtc.step"), "5");
  EXPECT_EQ(SafetensorsReader(optimizerSidecarPath(o.savePath))
                .metadata()
                .at("dtc.step"),
            "5");
}

TEST(Trainer, OutputsNeverOverwriteInputs) {
  TrainOptions o;
  o.artifactPath = writeArtifact("same.dtc", dtc::test::mlpArtifact({}));
  o.steps = 1;
  o.logPath = o.artifactPath;
  EXPECT_NE(train(1, o).error.find("--log " + o.artifactPath +
                                   " is the same file as the "
                                   "artifact " +
                                   o.artifactPath),
            std::string::npos);
  o.logPath = tempDir() + "/same.jsonl";
  o.statsPath = o.logPath;
  EXPECT_NE(train(1, o).error.find("are the same file"), std::string::npos);
  o.statsPath.clear();
  o.savePath = tempDir() + "/same.safetensors";
  ASSERT_EQ(train(1, o).error, "");
  o.loadPath = o.savePath; // resuming into the same checkpoint is fine
  ASSERT_EQ(train(1, o).error, "");
  TrainOptions l = o;
  l.savePath.clear();
  l.logPath = o.loadPath;
  EXPECT_NE(train(1, l).error.find("is the same file as --load"),
            std::string::npos);
  std::string bytes, err;
  ASSERT_TRUE(readFileBytes(o.artifactPath, bytes, err));
  EXPECT_EQ(bytes.rfind("dtc-artifact 1 ", 0), 0u) << "the artifact is intact";
}

} // namespace
