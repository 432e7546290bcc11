//===- Schedule.h - pipeline schedules --------------------------*- C++ -*-===//
//
// A pipeline schedule is, for every pipeline stage (device), the exact order
// of its actions: the forward (F) of one micro-batch on one of its model
// chunks, the input-gradient backward (B), the weight-gradient backward (W),
// or both backward parts at once (BW). Device d holds the virtual stages
// d, d + P, d + 2P, ... (chunk c is virtual stage c*P + d), so activations
// flow 0 -> 1 -> ... -> P*v-1 through the devices in turn.
//
// The compiler generates one (gpipe, 1f1b, interleaved, zb) and writes it
// into the artifact; the runtime checks it and runs it; `dtc schedule`
// draws it. Simulation with unit costs (F 1, B 1, W 1, BW 2) gives the
// bubble (idle share) of the schedule as emitted, and proves it free of
// deadlock when sends never block (a rank only waits for what another rank
// sends earlier in its own order).
//
// Plain C++17, no MLIR, no exceptions escape: the compiler
// (-fno-exceptions) calls it too.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_ARTIFACT_SCHEDULE_H
#define DTC_ARTIFACT_SCHEDULE_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dtc::sched {

enum class Kind : uint8_t {
  Forward,        ///< F
  Backward,       ///< B: input gradients only (zero-bubble schedules)
  Weight,         ///< W: weight gradients only
  BackwardWeight, ///< BW: B then W as one action
};
/// "F", "B", "W", "BW".
const char *kindName(Kind k);

struct Action {
  Kind kind = Kind::Forward;
  int microbatch = 0;
  int chunk = 0; ///< model chunk on this device (virtual stage chunk*P + d)
  bool operator==(const Action &o) const {
    return kind == o.kind && microbatch == o.microbatch && chunk == o.chunk;
  }
};

struct Schedule {
  std::string name;      ///< gpipe | 1f1b | interleaved | zb
  int stages = 1;        ///< P: pipeline stages (devices along the pipeline)
  int virtualStages = 1; ///< v: model chunks per stage
  int microbatches = 1;  ///< M
  /// perStage[d]: device d's actions in execution order.
  std::vector<std::vector<Action>> perStage;

  int virtualStageCount() const { return stages * virtualStages; }
};

/// The schedule names generate() knows.
const std::vector<std::string> &scheduleNames();

/// Builds schedule `name` for P stages, M micro-batches and v chunks per
/// stage. gpipe: all forwards, then all backwards. 1f1b (PipeDream-flush):
/// P-d-1 warm-up forwards on stage d, then one forward and one backward in
/// turn. interleaved (Megatron): 1f1b over v chunks per stage, M a multiple
/// of P. zb (ZB-H1): 1f1b's order with the weight gradients split off and
/// deferred into the bubbles (stage d keeps up to d pending), never holding
/// more micro-batches on a stage than 1f1b's first stage.
/// `pendingWeights` (zb only; empty: ZB-H1's d on stage d): stage d keeps
/// at most pendingWeights[d] (0 to d) weight gradients pending; 0 past the
/// first stage runs 1f1b's whole backwards there (BW). A W right after its
/// own B would send B's message a W earlier, but the values W reads would
/// wait for it all through B instead of dying layer by layer.
/// Returns false with a one-line reason on bad arguments.
bool generate(const std::string &name, int stages, int microbatches,
              int virtualStages, Schedule &out, std::string &error,
              const std::vector<int> &pendingWeights = {}) noexcept;

/// Structural checks: every (micro-batch, chunk) of every stage has exactly
/// one F and either one BW or one B and one W, in that order on its stage;
/// on every chunk the forwards, and the backwards, visit the micro-batches
/// in increasing order (messages between two stages are matched in order).
/// Returns "" or the first problem.
std::string check(const Schedule &s) noexcept;

/// One action placed in time.
struct Placed {
  Action action;
  int64_t start = 0, end = 0;
};

struct Simulation {
  bool ok = false;
  std::string
      error; ///< why not ok (a deadlock names the stuck stage and action)
  int64_t makespan = 0;
  int64_t busy = 0; ///< sum of all action costs over all stages
  /// busy / (stages * makespan) is the useful share; bubble = 1 - that.
  double bubble = 0;
  /// Per stage: its actions with start and end times.
  std::vector<std::vector<Placed>> timeline;
  /// Per stage: the most micro-batches (summed over chunks) whose forward
  /// has run and whose last backward part has not: what it must keep.
  std::vector<int> peakInFlight;
};

/// Unit costs: F 1, B 1, W 1, BW 2.
int64_t unitCost(Kind k);

/// Runs the schedule with unit costs: every action starts as soon as its
/// stage is free and what it needs is done: F(m, k) needs F(m, k-1); B or
/// BW(m, k) needs F(m, k) and the input gradient from B or BW(m, k+1);
/// W(m, k) needs B(m, k). A stage whose next action can never start is a
/// deadlock (ok = false). check() runs first.
Simulation simulate(const Schedule &s) noexcept;

/// Actions as ["F", microbatch, chunk] arrays (the artifact's form).
nlohmann::json actionsToJson(const std::vector<Action> &actions);
/// Parses that form; false with a message naming the entry on error.
bool actionsFromJson(const nlohmann::json &j, std::vector<Action> &out,
                     std::string &error) noexcept;

/// Rank x time as text: one row per stage, one cell per time unit ("F3",
/// "B3", "W3"; a chunk letter a, b, ... after the micro-batch when v > 1;
/// "." idle), then the bubble.
std::string renderText(const Schedule &s, const Simulation &sim);
/// The same picture as a standalone SVG document.
std::string renderSvg(const Schedule &s, const Simulation &sim);

} // namespace dtc::sched

#endif // DTC_ARTIFACT_SCHEDULE_H
