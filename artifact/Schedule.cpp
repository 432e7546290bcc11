//===- Schedule.cpp - pipeline schedules ----------------------------------===//
#include "dtc/artifact/Schedule.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace dtc::sched {

const char *kindName(Kind k) {
  switch (k) {
  case Kind::Forward:
    return "F";
  case Kind::Backward:
    return "B";
  case Kind::Weight:
    return "W";
  case Kind::BackwardWeight:
    return "BW";
  }
  return "?";
}

int64_t unitCost(Kind k) { return k == Kind::BackwardWeight ? 2 : 1; }

const std::vector<std::string> &scheduleNames() {
  static const std::vector<std::string> names = {"gpipe", "1f1b", "interleaved",
                                                 "zb"};
  return names;
}

namespace {

Action F(int m, int c = 0) { return {Kind::Forward, m, c}; }
Action BW(int m, int c = 0) { return {Kind::BackwardWeight, m, c}; }

void gpipe(Schedule &s) {
  for (int d = 0; d < s.stages; ++d) {
    auto &list = s.perStage[size_t(d)];
    for (int m = 0; m < s.microbatches; ++m)
      list.push_back(F(m));
    for (int m = 0; m < s.microbatches; ++m)
      list.push_back(BW(m));
  }
}

// PipeDream-flush: stage d runs P-d-1 forwards ahead, then alternates.
void oneFOneB(Schedule &s) {
  const int P = s.stages, M = s.microbatches;
  for (int d = 0; d < P; ++d) {
    auto &list = s.perStage[size_t(d)];
    const int warmup = std::min(P - d - 1, M);
    for (int m = 0; m < warmup; ++m)
      list.push_back(F(m));
    for (int i = 0; i < M - warmup; ++i) {
      list.push_back(F(warmup + i));
      list.push_back(BW(i));
    }
    for (int i = M - warmup; i < M; ++i)
      list.push_back(BW(i));
  }
}

// Megatron's interleaved 1F1B. The k-th forward of a stage works on chunk
// (k / P) mod v and micro-batch (k / (P v)) P + k mod P; backwards walk the
// chunks in reverse. Stage d runs 2(P-d-1) + (v-1)P forwards ahead.
void interleaved(Schedule &s) {
  const int P = s.stages, M = s.microbatches, v = s.virtualStages;
  const int total = M * v;
  auto at = [&](int k, bool forward) {
    int chunk = (k % (P * v)) / P;
    if (!forward)
      chunk = v - 1 - chunk;
    int micro = (k / (P * v)) * P + k % P;
    return Action{forward ? Kind::Forward : Kind::BackwardWeight, micro, chunk};
  };
  for (int d = 0; d < P; ++d) {
    auto &list = s.perStage[size_t(d)];
    int warmup = std::min((P - d - 1) * 2 + (v - 1) * P, total);
    for (int k = 0; k < warmup; ++k)
      list.push_back(at(k, true));
    for (int k = 0; k < total - warmup; ++k) {
      list.push_back(at(warmup + k, true));
      list.push_back(at(k, false));
    }
    for (int k = total - warmup; k < total; ++k)
      list.push_back(at(k, false));
  }
}

// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism"): 1F1B's order of
// forwards and input-gradient backwards, with each weight gradient split off
// and run later: stage d keeps up to d of them pending, so their work fills
// the time 1F1B's stage d spends waiting for gradients, and stage d holds
// at most P micro-batches, the first stage's count under 1F1B. With unit
// costs its bubble is (P-1)/(3M+P-1) once M >= P, against 1F1B's
// (P-1)/(M+P-1). `pendingWeights[d]` lowers stage d's bound below d; a
// stage past the first that defers none runs 1F1B's whole backwards (BW).
void zeroBubbleH1(Schedule &s, const std::vector<int> &pendingWeights) {
  const int P = s.stages, M = s.microbatches;
  for (int d = 0; d < P; ++d) {
    auto &list = s.perStage[size_t(d)];
    const int warmup = std::min(P - d - 1, M);
    const int most = pendingWeights.empty() ? d : pendingWeights[size_t(d)];
    std::deque<int> pending;
    auto backward = [&](int m) {
      if (most == 0 && d > 0) {
        list.push_back(BW(m));
        return;
      }
      list.push_back({Kind::Backward, m, 0});
      pending.push_back(m);
      while (int(pending.size()) > most) {
        list.push_back({Kind::Weight, pending.front(), 0});
        pending.pop_front();
      }
    };
    for (int m = 0; m < warmup; ++m)
      list.push_back(F(m));
    for (int i = 0; i < M - warmup; ++i) {
      list.push_back(F(warmup + i));
      backward(i);
    }
    for (int i = M - warmup; i < M; ++i)
      backward(i);
    for (int m : pending)
      list.push_back({Kind::Weight, m, 0});
  }
}

} // namespace

bool generate(const std::string &name, int stages, int microbatches,
              int virtualStages, Schedule &out, std::string &error,
              const std::vector<int> &pendingWeights) noexcept {
  try {
    if (stages < 1 || microbatches < 1 || virtualStages < 1) {
      error = "stages, micro-batches and virtual stages must be >= 1";
      return false;
    }
    if (!pendingWeights.empty()) {
      if (name != "zb") {
        error = "only the zb schedule defers weight gradients";
        return false;
      }
      if (int(pendingWeights.size()) != stages) {
        error = "pending weight-gradient bounds for " +
                std::to_string(pendingWeights.size()) + " stages, not " +
                std::to_string(stages);
        return false;
      }
      for (int d = 0; d < stages; ++d)
        if (pendingWeights[size_t(d)] < 0 || pendingWeights[size_t(d)] > d) {
          error = "stage " + std::to_string(d) + " may keep 0 to " +
                  std::to_string(d) + " weight gradients pending, not " +
                  std::to_string(pendingWeights[size_t(d)]);
          return false;
        }
    }
    if (virtualStages > 1 && name != "interleaved") {
      error = "--virtual-stages " + std::to_string(virtualStages) +
              " needs --schedule interleaved (" + name +
              " runs one model chunk per stage)";
      return false;
    }
    if (name == "interleaved" && microbatches % stages != 0) {
      error = "the interleaved schedule needs the micro-batches (" +
              std::to_string(microbatches) +
              ") to be a multiple of the pipeline stages (" +
              std::to_string(stages) + ")";
      return false;
    }
    out = Schedule{};
    out.name = name;
    out.stages = stages;
    out.microbatches = microbatches;
    out.virtualStages = virtualStages;
    out.perStage.assign(size_t(stages), {});
    if (name == "gpipe")
      gpipe(out);
    else if (name == "1f1b")
      oneFOneB(out);
    else if (name == "interleaved")
      interleaved(out);
    else if (name == "zb")
      zeroBubbleH1(out, pendingWeights);
    else {
      error = "unknown schedule '" + name +
              "' (expected gpipe, 1f1b, interleaved or zb)";
      return false;
    }
    std::string problem = check(out);
    if (!problem.empty()) {
      error =
          "internal error: the " + name + " schedule is malformed: " + problem;
      return false;
    }
    return true;
  } catch (const std::exception &e) {
    error = e.what();
    return false;
  }
}

std::string check(const Schedule &s) noexcept {
  try {
    if (s.stages < 1 || s.virtualStages < 1 || s.microbatches < 1)
      return "stages, virtual stages and micro-batches must be >= 1";
    if (int(s.perStage.size()) != s.stages)
      return "the schedule lists " + std::to_string(s.perStage.size()) +
             " stages, not " + std::to_string(s.stages);
    for (int d = 0; d < s.stages; ++d) {
      // state per (chunk, micro-batch): 0 none, 1 forward, 2 B, 3 done
      std::map<std::pair<int, int>, int> state;
      std::vector<int> lastF(size_t(s.virtualStages), -1),
          lastB(size_t(s.virtualStages), -1),
          lastW(size_t(s.virtualStages), -1);
      const std::string where = "stage " + std::to_string(d);
      for (size_t i = 0; i < s.perStage[size_t(d)].size(); ++i) {
        const Action &a = s.perStage[size_t(d)][i];
        const std::string what = where + " action " + std::to_string(i) + " (" +
                                 kindName(a.kind) + " of micro-batch " +
                                 std::to_string(a.microbatch) + ", chunk " +
                                 std::to_string(a.chunk) + ")";
        if (a.microbatch < 0 || a.microbatch >= s.microbatches || a.chunk < 0 ||
            a.chunk >= s.virtualStages)
          return what + ": micro-batch or chunk out of range";
        int &st = state[{a.chunk, a.microbatch}];
        const size_t c = size_t(a.chunk);
        switch (a.kind) {
        case Kind::Forward:
          if (st != 0)
            return what + ": a second forward";
          if (a.microbatch <= lastF[c])
            return what + ": forwards out of micro-batch order";
          lastF[c] = a.microbatch;
          st = 1;
          break;
        case Kind::Backward:
        case Kind::BackwardWeight:
          if (st != 1)
            return what + ": not right after its forward (and only once)";
          if (a.microbatch <= lastB[c])
            return what + ": backwards out of micro-batch order";
          lastB[c] = a.microbatch;
          st = a.kind == Kind::Backward ? 2 : 3;
          break;
        case Kind::Weight:
          if (st != 2)
            return what +
                   ": a weight gradient before its input gradient (or twice)";
          if (a.microbatch <= lastW[c])
            return what + ": weight gradients out of micro-batch order";
          lastW[c] = a.microbatch;
          st = 3;
          break;
        }
      }
      if (int(state.size()) != s.microbatches * s.virtualStages)
        return where + " runs " + std::to_string(state.size()) +
               " (chunk, micro-batch) pairs, not " +
               std::to_string(s.microbatches * s.virtualStages);
      for (const auto &[key, st] : state)
        if (st != 3)
          return where + ": micro-batch " + std::to_string(key.second) +
                 " of chunk " + std::to_string(key.first) +
                 " never finishes its backward";
    }
    return "";
  } catch (const std::exception &e) {
    return e.what();
  }
}

Simulation simulate(const Schedule &s) noexcept {
  Simulation sim;
  try {
    sim.error = check(s);
    if (!sim.error.empty())
      return sim;
    const int P = s.stages, K = s.virtualStageCount(), M = s.microbatches;
    const int64_t unknown = -1;
    auto table = [&] {
      return std::vector<std::vector<int64_t>>(
          size_t(K), std::vector<int64_t>(size_t(M), unknown));
    };
    auto fEnd = table(), bEnd = table();
    std::vector<size_t> pos(size_t(P), 0);
    std::vector<int64_t> freeAt(size_t(P), 0);
    sim.timeline.assign(size_t(P), {});
    for (bool progress = true; progress;) {
      progress = false;
      for (int d = 0; d < P; ++d) {
        const auto &list = s.perStage[size_t(d)];
        while (pos[size_t(d)] < list.size()) {
          const Action &a = list[pos[size_t(d)]];
          const int k = a.chunk * P + d;
          const size_t m = size_t(a.microbatch);
          int64_t ready = freeAt[size_t(d)];
          bool blocked = false;
          auto need = [&](int64_t end) {
            if (end == unknown)
              blocked = true;
            else
              ready = std::max(ready, end);
          };
          switch (a.kind) {
          case Kind::Forward:
            if (k > 0)
              need(fEnd[size_t(k - 1)][m]);
            break;
          case Kind::Backward:
          case Kind::BackwardWeight:
            need(fEnd[size_t(k)][m]);
            if (k < K - 1)
              need(bEnd[size_t(k + 1)][m]);
            break;
          case Kind::Weight:
            need(bEnd[size_t(k)][m]);
            break;
          }
          if (blocked)
            break;
          const int64_t end = ready + unitCost(a.kind);
          if (a.kind == Kind::Forward)
            fEnd[size_t(k)][m] = end;
          else if (a.kind != Kind::Weight)
            bEnd[size_t(k)][m] = end;
          sim.timeline[size_t(d)].push_back({a, ready, end});
          freeAt[size_t(d)] = end;
          sim.busy += unitCost(a.kind);
          ++pos[size_t(d)];
          progress = true;
        }
      }
    }
    for (int d = 0; d < P; ++d)
      if (pos[size_t(d)] < s.perStage[size_t(d)].size()) {
        const Action &a = s.perStage[size_t(d)][pos[size_t(d)]];
        sim.error = "deadlock: stage " + std::to_string(d) +
                    " waits forever at action " +
                    std::to_string(pos[size_t(d)]) + " (" + kindName(a.kind) +
                    " of micro-batch " + std::to_string(a.microbatch) +
                    ", chunk " + std::to_string(a.chunk) + ")";
        return sim;
      }
    for (int64_t t : freeAt)
      sim.makespan = std::max(sim.makespan, t);
    sim.bubble = sim.makespan > 0 ? 1.0 - double(sim.busy) /
                                              double(int64_t(P) * sim.makespan)
                                  : 0.0;
    // Micro-batches held: from a forward to the last backward part.
    for (int d = 0; d < P; ++d) {
      int held = 0, peak = 0;
      for (const Action &a : s.perStage[size_t(d)]) {
        if (a.kind == Kind::Forward)
          peak = std::max(peak, ++held);
        else if (a.kind != Kind::Backward)
          --held;
      }
      sim.peakInFlight.push_back(peak);
    }
    sim.ok = true;
    return sim;
  } catch (const std::exception &e) {
    sim.ok = false;
    sim.error = e.what();
    return sim;
  }
}

nlohmann::json actionsToJson(const std::vector<Action> &actions) {
  nlohmann::json list = nlohmann::json::array();
  for (const Action &a : actions)
    list.push_back({kindName(a.kind), a.microbatch, a.chunk});
  return list;
}

bool actionsFromJson(const nlohmann::json &j, std::vector<Action> &out,
                     std::string &error) noexcept {
  try {
    out.clear();
    if (!j.is_array()) {
      error = "must be an array of [KIND, MICROBATCH, CHUNK] entries";
      return false;
    }
    for (size_t i = 0; i < j.size(); ++i) {
      const nlohmann::json &e = j[i];
      auto bad = [&](const std::string &why) {
        error = "entry " + std::to_string(i) + ": " + why;
        return false;
      };
      if (!e.is_array() || e.size() != 3 || !e[0].is_string() ||
          !e[1].is_number_integer() || !e[2].is_number_integer())
        return bad(
            "expected [KIND, MICROBATCH, CHUNK] with KIND one of F, B, W, BW");
      Action a;
      const std::string kind = e[0].get<std::string>();
      if (kind == "F")
        a.kind = Kind::Forward;
      else if (kind == "B")
        a.kind = Kind::Backward;
      else if (kind == "W")
        a.kind = Kind::Weight;
      else if (kind == "BW")
        a.kind = Kind::BackwardWeight;
      else
        return bad("unknown kind \"" + kind + "\" (expected F, B, W or BW)");
      const int64_t m = e[1].get<int64_t>(), c = e[2].get<int64_t>();
      if (m < 0 || c < 0 || m > (1 << 24) || c > (1 << 24))
        return bad("micro-batch and chunk must be small non-negative integers");
      a.microbatch = int(m);
      a.chunk = int(c);
      out.push_back(a);
    }
    return true;
  } catch (const std::exception &e) {
    error = e.what();
    return false;
  }
}

namespace {
std::string label(const Schedule &s, const Action &a) {
  std::string l = a.kind == Kind::BackwardWeight ? "B" : kindName(a.kind);
  l += std::to_string(a.microbatch);
  if (s.virtualStages > 1)
    l += char('a' + a.chunk % 26);
  return l;
}
} // namespace

std::string renderText(const Schedule &s, const Simulation &sim) {
  std::ostringstream out;
  size_t width = 1;
  for (const auto &row : sim.timeline)
    for (const Placed &p : row)
      width = std::max(width, label(s, p.action).size());
  out << "schedule " << s.name << ": " << s.stages << " stages x "
      << s.microbatches << " micro-batches";
  if (s.virtualStages > 1)
    out << " x " << s.virtualStages << " chunks";
  bool whole = false, split = false;
  for (const auto &list : s.perStage)
    for (const Action &a : list) {
      whole |= a.kind == Kind::BackwardWeight;
      split |= a.kind == Kind::Weight;
    }
  out << "; one column per time unit (F 1, B 1, W 1; "
      << (whole ? "a backward is B+W, 2" : "") << (whole && split ? "; " : "")
      << (split ? "B and W separate" : "") << ")\n";
  for (size_t d = 0; d < sim.timeline.size(); ++d) {
    std::vector<std::string> cells(size_t(sim.makespan), ".");
    for (const Placed &p : sim.timeline[d])
      for (int64_t t = p.start; t < p.end; ++t)
        cells[size_t(t)] = label(s, p.action);
    char head[32];
    std::snprintf(head, sizeof head, "stage %-3zu|", d);
    out << head;
    for (const std::string &c : cells)
      out << ' ' << c << std::string(width - c.size(), ' ');
    out << "\n";
  }
  char tail[128];
  std::snprintf(
      tail, sizeof tail,
      "bubble %.4f (idle share; %lld time units, %lld busy of %lld)\n",
      sim.bubble, (long long)sim.makespan, (long long)sim.busy,
      (long long)(sim.makespan * int64_t(sim.timeline.size())));
  out << tail;
  return out.str();
}

std::string renderSvg(const Schedule &s, const Simulation &sim) {
  const int cell = 28, rowH = 30, left = 80, top = 40;
  const int64_t width = left + sim.makespan * cell + 20;
  const int64_t height = top + int64_t(sim.timeline.size()) * rowH + 50;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width
    << "\" height=\"" << height
    << "\" font-family=\"monospace\" font-size=\"11\">\n";
  char title[160];
  std::snprintf(
      title, sizeof title, "%s: %d stages, %d micro-batches%s, bubble %.4f",
      s.name.c_str(), s.stages, s.microbatches,
      s.virtualStages > 1
          ? (", " + std::to_string(s.virtualStages) + " chunks").c_str()
          : "",
      sim.bubble);
  o << "<text x=\"10\" y=\"20\" font-size=\"14\">" << title << "</text>\n";
  auto color = [](Kind k) {
    switch (k) {
    case Kind::Forward:
      return "#4e79a7";
    case Kind::Backward:
      return "#59a14f";
    case Kind::Weight:
      return "#f28e2b";
    case Kind::BackwardWeight:
      return "#59a14f";
    }
    return "#999999";
  };
  for (size_t d = 0; d < sim.timeline.size(); ++d) {
    const int64_t y = top + int64_t(d) * rowH;
    o << "<text x=\"10\" y=\"" << y + 19 << "\">stage " << d << "</text>\n";
    o << "<rect x=\"" << left << "\" y=\"" << y << "\" width=\""
      << sim.makespan * cell << "\" height=\"" << rowH - 4
      << "\" fill=\"#eeeeee\"/>\n";
    for (const Placed &p : sim.timeline[d]) {
      const int64_t x = left + p.start * cell, w = (p.end - p.start) * cell;
      // Later chunks are drawn lighter.
      const double opacity = 1.0 - 0.35 * double(p.action.chunk) /
                                       double(std::max(1, s.virtualStages));
      o << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w - 1
        << "\" height=\"" << rowH - 4 << "\" fill=\"" << color(p.action.kind)
        << "\" fill-opacity=\"" << opacity << "\"><title>"
        << kindName(p.action.kind) << " micro-batch " << p.action.microbatch
        << " chunk " << p.action.chunk << "</title></rect>\n";
      o << "<text x=\"" << x + 3 << "\" y=\"" << y + 18 << "\" fill=\"white\">"
        << label(s, p.action) << "</text>\n";
    }
  }
  // The legend: each swatch, then its label to its right (7 px per
  // character of the 11 px monospace font), then a gap before the next.
  const int64_t ly = top + int64_t(sim.timeline.size()) * rowH + 20;
  int64_t lx = 10;
  for (auto [fill, text] : {std::pair{"#4e79a7", "F forward"},
                            {"#59a14f", "B backward"},
                            {"#f28e2b", "W weights"},
                            {"#eeeeee", "idle"}}) {
    o << "<rect x=\"" << lx << "\" y=\"" << ly - 10
      << "\" width=\"12\" height=\"12\" fill=\"" << fill
      << "\" stroke=\"#999\"/><text x=\"" << lx + 16 << "\" y=\"" << ly << "\">"
      << text << "</text>";
    lx += 16 + 7 * int64_t(std::strlen(text)) + 18;
  }
  o << "\n";
  o << "</svg>\n";
  return o.str();
}

} // namespace dtc::sched
