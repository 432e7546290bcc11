//===- ScheduleTest.cpp - pipeline schedule generators and simulation -----===//
//
// Every generator, over many (stages, micro-batches, chunks): well formed,
// each micro-batch's forward before its backward on every stage, every
// cross-stage dependency respected in the simulated timeline, no deadlock,
// and the bubble of the schedule as generated equal to the textbook
// formulas with unit costs.
//
//===----------------------------------------------------------------------===//
#include "dtc/artifact/Schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace {

using namespace dtc::sched;

struct Case {
  std::string name;
  int stages, microbatches, chunks;
};

std::vector<Case> allCases() {
  std::vector<Case> cases;
  for (const std::string &name : scheduleNames())
    for (int p : {1, 2, 3, 4, 8})
      for (int m : {1, 2, 3, 4, 8, 16})
        for (int v : {1, 2, 3}) {
          if (v > 1 && name != "interleaved")
            continue;
          if (name == "interleaved" && m % p != 0)
            continue;
          cases.push_back({name, p, m, v});
        }
  return cases;
}

Schedule make(const Case &c) {
  Schedule s;
  std::string error;
  EXPECT_TRUE(generate(c.name, c.stages, c.microbatches, c.chunks, s, error))
      << error;
  return s;
}

std::string describe(const Case &c) {
  return c.name + " P=" + std::to_string(c.stages) +
         " M=" + std::to_string(c.microbatches) +
         " v=" + std::to_string(c.chunks);
}

TEST(Schedule, EveryScheduleRunsWithoutDeadlockAndRespectsDependencies) {
  for (const Case &c : allCases()) {
    SCOPED_TRACE(describe(c));
    Schedule s = make(c);
    EXPECT_EQ(check(s), "");
    Simulation sim = simulate(s);
    ASSERT_TRUE(sim.ok) << sim.error;
    const int P = c.stages, K = P * c.chunks;
    // (kind, micro-batch, virtual stage) -> [start, end)
    std::map<std::tuple<int, int, int>, std::pair<int64_t, int64_t>> when;
    size_t actions = 0;
    for (int d = 0; d < P; ++d) {
      int64_t last = 0;
      for (const Placed &p : sim.timeline[size_t(d)]) {
        EXPECT_GE(p.start, last)
            << "stage " << d << " runs two actions at once";
        last = p.end;
        int kind = p.action.kind == Kind::Forward  ? 0
                   : p.action.kind == Kind::Weight ? 2
                                                   : 1;
        when[{kind, p.action.microbatch, p.action.chunk * P + d}] = {p.start,
                                                                     p.end};
        ++actions;
      }
      EXPECT_EQ(sim.timeline[size_t(d)].size(), s.perStage[size_t(d)].size());
    }
    for (int m = 0; m < c.microbatches; ++m)
      for (int k = 0; k < K; ++k) {
        auto f = when.at({0, m, k}), b = when.at({1, m, k});
        EXPECT_LE(f.second, b.first)
            << "forward after backward, mb " << m << " vstage " << k;
        if (k > 0) {
          EXPECT_GE(f.first, when.at({0, m, k - 1}).second)
              << "F input not ready";
        }
        if (k + 1 < K) {
          EXPECT_GE(b.first, when.at({1, m, k + 1}).second)
              << "B gradient not ready";
        }
        if (c.name == "zb") {
          EXPECT_GE(when.at({2, m, k}).first, b.second) << "W before B";
        }
      }
    EXPECT_EQ(actions,
              size_t(K) * size_t(c.microbatches) * (c.name == "zb" ? 3 : 2));
  }
}

TEST(Schedule, BubblesMatchTheFormulas) {
  for (const Case &c : allCases()) {
    SCOPED_TRACE(describe(c));
    Simulation sim = simulate(make(c));
    ASSERT_TRUE(sim.ok) << sim.error;
    const double P = c.stages, M = c.microbatches, v = c.chunks;
    if (c.name == "gpipe" || c.name == "1f1b") {
      EXPECT_NEAR(sim.bubble, (P - 1) / (M + P - 1), 1e-12);
    } else if (c.name == "interleaved") {
      EXPECT_NEAR(sim.bubble, (P - 1) / (v * M + P - 1), 1e-12);
    } else if (c.stages > 1) {
      // Zero bubble: strictly below 1F1B; ZB-H1's (P-1)/(3M+P-1) once M >= P.
      Simulation oneF = simulate(make({"1f1b", c.stages, c.microbatches, 1}));
      EXPECT_LT(sim.bubble, oneF.bubble);
      if (c.microbatches >= c.stages) {
        EXPECT_NEAR(sim.bubble, (P - 1) / (3 * M + P - 1), 1e-12);
      }
    }
  }
}

TEST(Schedule, MicroBatchesHeldPerStage) {
  for (int p : {2, 4})
    for (int m : {2, 4, 8, 16}) {
      Simulation gpipe = simulate(make({"gpipe", p, m, 1}));
      Simulation oneF = simulate(make({"1f1b", p, m, 1}));
      Simulation zb = simulate(make({"zb", p, m, 1}));
      for (int d = 0; d < p; ++d) {
        EXPECT_EQ(gpipe.peakInFlight[size_t(d)], m);
        EXPECT_EQ(oneF.peakInFlight[size_t(d)], std::min(p - d, m))
            << "stage " << d;
        // Deferred weight gradients keep micro-batches alive: every stage
        // holds as many as 1F1B's first stage, no more.
        EXPECT_EQ(zb.peakInFlight[size_t(d)], std::min(p, m)) << "stage " << d;
      }
    }
}

/// The most weight gradients stage `d` has pending (B run, W not yet).
int mostPendingWeights(const Schedule &s, int d) {
  int pending = 0, most = 0;
  for (const Action &a : s.perStage[size_t(d)]) {
    if (a.kind == Kind::Backward)
      most = std::max(most, ++pending);
    else if (a.kind == Kind::Weight)
      --pending;
  }
  return most;
}

TEST(Schedule, ZeroBubbleDefersWeightGradientsUpToEachStagesBound) {
  for (int p : {2, 4, 8})
    for (int m : {p, 2 * p, 4 * p}) {
      SCOPED_TRACE("P=" + std::to_string(p) + " M=" + std::to_string(m));
      // A stage past the first that defers nothing runs 1F1B's backwards:
      // with every bound 0 the schedule is 1F1B's, bubble included.
      Schedule none;
      std::string error;
      ASSERT_TRUE(
          generate("zb", p, m, 1, none, error, std::vector<int>(size_t(p), 0)))
          << error;
      ASSERT_EQ(check(none), "");
      Simulation sim = simulate(none);
      ASSERT_TRUE(sim.ok) << sim.error;
      Schedule oneF = make({"1f1b", p, m, 1});
      for (int d = 1; d < p; ++d)
        EXPECT_EQ(none.perStage[size_t(d)], oneF.perStage[size_t(d)]) << d;
      EXPECT_EQ(mostPendingWeights(none, 0), 1); // W right after B
      EXPECT_EQ(sim.peakInFlight, simulate(oneF).peakInFlight);
      EXPECT_NEAR(sim.bubble, simulate(oneF).bubble, 1e-12);

      // Mixed bounds: stage d keeps at most its own, and a stage that
      // defers nothing runs whole backwards.
      std::vector<int> bounds;
      for (int d = 0; d < p; ++d)
        bounds.push_back(d % 2 ? d : 0);
      Schedule mixed;
      ASSERT_TRUE(generate("zb", p, m, 1, mixed, error, bounds)) << error;
      ASSERT_EQ(check(mixed), "");
      Simulation mixedSim = simulate(mixed);
      ASSERT_TRUE(mixedSim.ok) << mixedSim.error;
      Schedule h1 = make({"zb", p, m, 1});
      for (int d = 0; d < p; ++d) {
        SCOPED_TRACE("stage " + std::to_string(d));
        if (bounds[size_t(d)] == 0 && d > 0) {
          EXPECT_EQ(mixed.perStage[size_t(d)], oneF.perStage[size_t(d)]);
        } else {
          EXPECT_EQ(mixed.perStage[size_t(d)], h1.perStage[size_t(d)]);
          // the B just run, plus those kept
          EXPECT_EQ(mostPendingWeights(mixed, d),
                    std::min(bounds[size_t(d)] + 1, m));
        }
      }
      EXPECT_LE(mixedSim.bubble, simulate(oneF).bubble + 1e-12);
      EXPECT_GE(mixedSim.bubble, simulate(h1).bubble - 1e-12);
    }
}

TEST(Schedule, WeightGradientBoundsAreChecked) {
  Schedule s;
  std::string error;
  EXPECT_FALSE(generate("1f1b", 2, 4, 1, s, error, {0, 0}));
  EXPECT_NE(error.find("only the zb schedule"), std::string::npos) << error;
  EXPECT_FALSE(generate("zb", 2, 4, 1, s, error, {0}));
  EXPECT_NE(error.find("for 1 stages, not 2"), std::string::npos) << error;
  EXPECT_FALSE(generate("zb", 2, 4, 1, s, error, {0, 2}));
  EXPECT_NE(error.find("stage 1 may keep 0 to 1"), std::string::npos) << error;
  EXPECT_FALSE(generate("zb", 2, 4, 1, s, error, {-1, 0}));
}

TEST(Schedule, DeadlockIsFound) {
  // Stage 0 waits for micro-batch 0's gradient before sending micro-batch
  // 1's activation, while stage 1 wants micro-batch 1's activation first.
  Schedule s;
  s.name = "1f1b";
  s.stages = 2;
  s.microbatches = 2;
  s.perStage = {{{Kind::Forward, 0, 0},
                 {Kind::BackwardWeight, 0, 0},
                 {Kind::Forward, 1, 0},
                 {Kind::BackwardWeight, 1, 0}},
                {{Kind::Forward, 0, 0},
                 {Kind::Forward, 1, 0},
                 {Kind::BackwardWeight, 0, 0},
                 {Kind::BackwardWeight, 1, 0}}};
  EXPECT_EQ(check(s), "");
  Simulation sim = simulate(s);
  EXPECT_FALSE(sim.ok);
  EXPECT_NE(sim.error.find("deadlock: stage"), std::string::npos) << sim.error;
}

TEST(Schedule, MalformedSchedulesAreRejected) {
  Schedule s = make({"1f1b", 2, 2, 1});
  Schedule swapped = s;
  std::swap(swapped.perStage[0][0], swapped.perStage[0][1]); // F1 before F0
  EXPECT_NE(check(swapped).find("out of micro-batch order"), std::string::npos);
  Schedule missing = s;
  missing.perStage[0].pop_back();
  EXPECT_NE(check(missing).find("never finishes"), std::string::npos)
      << check(missing);
  Schedule early = make({"zb", 2, 2, 1});
  for (auto &a : early.perStage[1])
    if (a.kind == Kind::Backward)
      a.kind = Kind::Weight; // W without B
  EXPECT_NE(check(early), "");
}

TEST(Schedule, BadArgumentsAreOneLineErrors) {
  Schedule s;
  std::string error;
  EXPECT_FALSE(generate("interleaved", 4, 6, 2, s, error));
  EXPECT_NE(error.find("multiple of the pipeline stages"), std::string::npos)
      << error;
  EXPECT_FALSE(generate("1f1b", 4, 8, 2, s, error));
  EXPECT_NE(error.find("needs --schedule interleaved"), std::string::npos)
      << error;
  EXPECT_FALSE(generate("pipedream", 4, 8, 1, s, error));
  EXPECT_NE(error.find("unknown schedule"), std::string::npos) << error;
  EXPECT_FALSE(generate("gpipe", 0, 8, 1, s, error));
}

TEST(Schedule, JsonRoundTrip) {
  Schedule s = make({"zb", 3, 4, 1});
  for (const auto &list : s.perStage) {
    std::vector<Action> back;
    std::string error;
    ASSERT_TRUE(actionsFromJson(actionsToJson(list), back, error)) << error;
    EXPECT_EQ(back, list);
  }
  std::vector<Action> out;
  std::string error;
  EXPECT_FALSE(actionsFromJson(
      nlohmann::json::parse(R"([["F", 0, 0], ["X", 1, 0]])"), out, error));
  EXPECT_NE(error.find("entry 1"), std::string::npos) << error;
  EXPECT_FALSE(
      actionsFromJson(nlohmann::json::parse(R"([["F", -1, 0]])"), out, error));
}

TEST(Schedule, Drawings) {
  Schedule s = make({"1f1b", 2, 2, 1});
  Simulation sim = simulate(s);
  std::string text = renderText(s, sim);
  // makespan 3 (M + P - 1) * 3 = 9 units; stage 0 idles 3 of them.
  EXPECT_NE(text.find("stage 0  | F0 F1 .  .  B0 B0 .  B1 B1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("stage 1  | .  F0 B0 B0 F1 B1 B1 .  ."),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("bubble 0.3333"), std::string::npos) << text;
  std::string svg = renderSvg(s, sim);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  // The legend reads swatch, label, swatch, label: each label starts just
  // right of its own swatch and ends before the next swatch.
  const size_t legend = svg.find("F forward");
  ASSERT_NE(legend, std::string::npos);
  const size_t line = svg.rfind('\n', legend) + 1;
  const std::string rest = svg.substr(line, svg.find('\n', legend) - line);
  std::vector<std::pair<std::string, long>> seen; // element, x
  for (size_t at = 0; (at = rest.find('<', at)) != std::string::npos; ++at) {
    const std::string tag = rest.substr(at + 1, 4);
    if (tag != "rect" && tag != "text")
      continue;
    const size_t x = rest.find("x=\"", at) + 3;
    seen.push_back({tag, std::stol(rest.substr(x))});
  }
  ASSERT_EQ(seen.size(), 8u) << rest;
  for (size_t k = 0; k < 8; k += 2) {
    EXPECT_EQ(seen[k].first, "rect") << k;
    EXPECT_EQ(seen[k + 1].first, "text") << k;
    EXPECT_EQ(seen[k + 1].second, seen[k].second + 16) << k;
    if (k + 2 < 8) {
      EXPECT_GT(seen[k + 2].second, seen[k + 1].second + 7 * 4) << k;
    }
  }
}

} // namespace
