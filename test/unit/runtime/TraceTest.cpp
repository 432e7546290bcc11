//===- TraceTest.cpp - --trace: one trace-event file per rank
//--------------===//
//
// Trainer runs on 4 threads (ThreadWorld) with a trace directory; each
// rank's file must be what Perfetto loads (test/e2e/check_trace.py checks
// the files of a real `dtc run` the same way) and show the run.
//
//===----------------------------------------------------------------------===//
#include "TestArtifacts.h"

#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/runtime/Backend.h"
#include "dtc/runtime/Trace.h"
#include "dtc/runtime/Trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sys/stat.h>
#include <thread>

using namespace dtc::rt;
using dtc::test::json;

namespace {

struct Outcome {
  std::string error;
  int interrupted = 0;
  std::vector<float> losses;
};

Outcome trainRanks(int ranks, const TrainOptions &opts) {
  ThreadWorld tw(ranks);
  Outcome run;
  std::mutex mu;
  std::vector<std::thread> ts;
  for (int r = 0; r < ranks; ++r)
    ts.emplace_back([&, r] {
      try {
        Trainer t(tw.rankView(r), opts);
        t.run([&](const StepReport &s) { run.losses.push_back(s.loss); });
      } catch (const Interrupted &e) {
        std::lock_guard<std::mutex> lock(mu);
        run.interrupted = e.signal();
      } catch (const std::exception &e) {
        tw.abort(e.what());
        std::lock_guard<std::mutex> lock(mu);
        if (run.error.empty())
          run.error = e.what();
      }
    });
  for (auto &t : ts)
    t.join();
  return run;
}

json readJson(const std::string &path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in, nullptr, /*allow_exceptions=*/false);
}

int64_t ns(const json &v) {
  return int64_t(std::llround(v.get<double>() * 1000));
}

/// The trace-event format as Perfetto reads it; returns the file's pid.
int checkFormat(const std::string &path, const json &t) {
  EXPECT_TRUE(t.is_object()) << path;
  EXPECT_EQ(t.value("displayTimeUnit", ""), "ms") << path;
  EXPECT_TRUE(t.contains("traceEvents") && t["traceEvents"].is_array()) << path;
  std::set<int> pids;
  std::map<int, std::vector<std::pair<int64_t, int64_t>>> spans; // per tid
  for (const json &e : t["traceEvents"]) {
    EXPECT_TRUE(e.is_object());
    if (!e.is_object())
      continue;
    for (const char *key : {"ph", "name", "pid", "tid"})
      EXPECT_TRUE(e.contains(key)) << path << ": " << e.dump();
    EXPECT_TRUE(e["pid"].is_number_integer() && e["tid"].is_number_integer())
        << e.dump();
    pids.insert(e["pid"].get<int>());
    const std::string ph = e["ph"];
    EXPECT_TRUE(ph == "X" || ph == "C" || ph == "M") << e.dump();
    if (ph == "M")
      continue;
    EXPECT_TRUE(e["ts"].is_number() && e["ts"].get<double>() > 0) << e.dump();
    if (ph == "X") {
      EXPECT_TRUE(e.contains("dur") && e["dur"].is_number() &&
                  e["dur"].get<double>() >= 0)
          << e.dump();
      spans[e["tid"].get<int>()].push_back(
          {ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])});
    } else {
      for (const auto &[k, v] : e["args"].items())
        EXPECT_TRUE(v.is_number()) << e.dump();
    }
  }
  // The events of a thread nest.
  for (auto &[tid, ss] : spans) {
    std::sort(ss.begin(), ss.end(), [](auto &a, auto &b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<std::pair<int64_t, int64_t>> stack;
    for (const auto &s : ss) {
      while (!stack.empty() && s.first >= stack.back().second)
        stack.pop_back();
      if (!stack.empty()) {
        EXPECT_LE(s.second, stack.back().second)
            << path << ": thread " << tid << " overlaps";
      }
      stack.push_back(s);
    }
  }
  EXPECT_EQ(pids.size(), 1u) << path;
  return pids.empty() ? -1 : *pids.begin();
}

std::vector<const json *> eventsOf(const json &t, const std::string &cat) {
  std::vector<const json *> out;
  for (const json &e : t["traceEvents"])
    if (e.value("cat", "") == cat)
      out.push_back(&e);
  return out;
}

/// Kernels and collectives follow each other in program order on their
/// streams, each inside a run of the program.
void checkTimeline(const std::string &path, const json &t) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (const json *e : eventsOf(t, "run"))
    runs.push_back({ns((*e)["ts"]), ns((*e)["ts"]) + ns((*e)["dur"])});
  ASSERT_FALSE(runs.empty()) << path;
  for (const char *cat : {"kernel", "collective"}) {
    int64_t lastEnd = 0;
    int lastInstruction = -1;
    size_t run = 0;
    for (const json *e : eventsOf(t, cat)) {
      const int64_t start = ns((*e)["ts"]), end = start + ns((*e)["dur"]);
      EXPECT_GE(start, lastEnd)
          << path << ": " << cat << "s overlap: " << e->dump();
      while (run < runs.size() && start >= runs[run].second)
        ++run;
      ASSERT_LT(run, runs.size())
          << path << ": after the last run: " << e->dump();
      EXPECT_GE(start, runs[run].first)
          << path << ": outside a run: " << e->dump();
      EXPECT_LE(end, runs[run].second)
          << path << ": outside a run: " << e->dump();
      const int instruction = (*e)["args"]["instruction"];
      if (start >= runs[run].first && lastEnd >= runs[run].first) {
        EXPECT_GT(instruction, lastInstruction)
            << path << ": out of program order: " << e->dump();
      }
      lastInstruction = instruction;
      lastEnd = end;
    }
  }
}

TEST(Trace, FourDataParallelRanksWriteAPerfettoTraceEach) {
  for (const std::string backend : {"cpu", "recording"}) {
    SCOPED_TRACE(backend);
    const std::string dir =
        dtc::test::scratchDir("dtc-trace-test") + "/" + backend;
    ::mkdir(dir.c_str(), 0777);
    dtc::test::MlpConfig dp4;
    dp4.mesh = {4};
    dp4.dpAxes = {0};
    TrainOptions o;
    o.artifactPath = dir + ".dtc";
    std::string err;
    ASSERT_TRUE(
        writeArtifactFile(o.artifactPath, dtc::test::mlpArtifact(dp4), err))
        << err;
    o.steps = 3;
    o.threads = 1;
    o.timeoutSeconds = 60;
    // "recording" (BackendTest.cpp) defers collectives: the trace still nests.
    const std::vector<std::string> names = backendNames();
    ASSERT_NE(std::find(names.begin(), names.end(), backend), names.end());
    o.backend = backend;
    o.traceDir = dir + "/trace"; // created
    o.statsPath = dir + "/stats.json";
    const Outcome run = trainRanks(4, o);
    ASSERT_EQ(run.error, "");
    const json stats = readJson(o.statsPath);
    const int64_t reducesPerStep =
        stats["collectives_per_step"]["all_reduce"]["calls"];
    const int64_t bytesPerStep =
        stats["collectives_per_step"]["all_reduce"]["bytes"];
    ASSERT_GT(reducesPerStep, 0);
    std::set<int> pids;
    for (int r = 0; r < 4; ++r) {
      const std::string path = TraceWriter::rankPath(o.traceDir, r);
      const json t = readJson(path);
      ASSERT_FALSE(t.is_discarded()) << path << " is not JSON";
      pids.insert(checkFormat(path, t));
      checkTimeline(path, t);
      EXPECT_EQ(eventsOf(t, "step").size(), 3u);
      EXPECT_FALSE(eventsOf(t, "kernel").empty());
      int64_t reduces = 0, bytes = 0;
      for (const json *e : eventsOf(t, "collective")) {
        EXPECT_EQ((*e)["tid"], TraceWriter::kComm);
        if ((*e)["name"] != "all_reduce")
          continue;
        ++reduces;
        bytes += (*e)["args"]["bytes"].get<int64_t>();
        EXPECT_EQ((*e)["args"]["communicator"], "dp");
        EXPECT_GT((*e)["args"]["sent_bytes"].get<int64_t>(), 0);
      }
      EXPECT_EQ(reduces, 3 * reducesPerStep);
      EXPECT_EQ(bytes, 3 * bytesPerStep);
      bool memory = false;
      for (const json &e : t["traceEvents"])
        if (e["ph"] == "C" && e["name"] == "memory bytes")
          memory = e["args"]["param"].get<int64_t>() > 0 &&
                   e["args"].contains("optimizer");
      EXPECT_TRUE(memory);
    }
    EXPECT_EQ(pids.size(), 4u) << "one process per rank";
  }
}

TEST(Trace, AnInterruptedRunKeepsItsTrace) {
  const std::string dir = dtc::test::scratchDir("dtc-trace-test") + "/stop";
  TrainOptions o;
  o.artifactPath = dir + ".dtc";
  std::string err;
  ASSERT_TRUE(
      writeArtifactFile(o.artifactPath, dtc::test::mlpArtifact({}), err))
      << err;
  o.steps = 5;
  o.threads = 1;
  o.traceDir = dir;
  // From the second check on (the first is before step 0): one step runs.
  o.pendingSignal = [] {
    thread_local int polls = 0;
    return ++polls >= 2 ? SIGINT : 0;
  };
  const Outcome run = trainRanks(1, o);
  EXPECT_EQ(run.interrupted, SIGINT);
  const json t = readJson(TraceWriter::rankPath(dir, 0));
  ASSERT_FALSE(t.is_discarded());
  checkFormat(dir, t);
  EXPECT_EQ(eventsOf(t, "step").size(), 1u);
}

TEST(Trace, TracePathsMayNotNameInputs) {
  const std::string dir = dtc::test::scratchDir("dtc-trace-test") + "/inputs";
  ::mkdir(dir.c_str(), 0777);
  TrainOptions o;
  o.artifactPath =
      TraceWriter::rankPath(dir, 0); // the artifact where rank 0's trace goes
  std::string err;
  ASSERT_TRUE(
      writeArtifactFile(o.artifactPath, dtc::test::mlpArtifact({}), err))
      << err;
  o.steps = 1;
  o.traceDir = dir;
  const Outcome run = trainRanks(1, o);
  EXPECT_NE(run.error.find("--trace"), std::string::npos) << run.error;
  EXPECT_NE(run.error.find("the artifact"), std::string::npos) << run.error;
}

} // namespace
