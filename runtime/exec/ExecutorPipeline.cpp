//===- ExecutorPipeline.cpp - one step of a pipeline stage ----------------===//
#include "ExecutorParts.h"

#include <algorithm>

namespace dtc::rt {

// One step of a pipeline stage: the once-per-step list, the schedule's
// actions (a micro-batch takes a copy of its chunk's slots at its forward
// and gives it back after its last backward part), then the list after the
// micro-batches. A copy given back is reused by a later micro-batch: the
// streams order that reuse after the work on the copy (its slots' hazards).
//
// An evaluation runs the forward actions alone, in the same order (each
// waits only for forwards of earlier virtual stages, which never wait for
// it), and gives a micro-batch's copy back right after its forward.
void RankExecutor::enqueuePipelineStep(std::string &first, bool evaluation) {
  const ProgramDecl &p = program();
  enqueueList(instrs_, -1, 0, first, evaluation);
  std::map<std::pair<int, int>, size_t> lastAction;
  for (size_t i = 0; i < p.schedule.size(); ++i)
    if (!evaluation || p.schedule[i].kind == sched::Kind::Forward)
      lastAction[{p.schedule[i].chunk, p.schedule[i].microbatch}] = i;
  for (size_t i = 0; i < p.schedule.size(); ++i) {
    const sched::Action &act = p.schedule[i];
    if (evaluation && act.kind != sched::Kind::Forward)
      continue;
    const std::pair<int, int> key{act.chunk, act.microbatch};
    if (!live_.count(key)) {
      auto &spare = spare_[size_t(act.chunk)];
      std::vector<char *> copy;
      if (!spare.empty()) {
        copy = std::move(spare.back());
        spare.pop_back();
      } else {
        for (int slot : chunkSlots_[size_t(act.chunk)])
          copy.push_back(allocate(size_t(p.slots[size_t(slot)].bytes),
                                  int(p.slots[size_t(slot)].category)));
      }
      live_[key] = std::move(copy);
      liveActivationBytes_ += stats_.microbatchBytes[size_t(act.chunk)];
      ++liveMicrobatches_;
      stats_.activationPeakBytes =
          std::max(stats_.activationPeakBytes, liveActivationBytes_);
      stats_.microbatchesPeak =
          std::max(stats_.microbatchesPeak, liveMicrobatches_);
    }
    auto &lists = chunkLists_[size_t(act.chunk)];
    switch (act.kind) {
    case sched::Kind::Forward:
      enqueueList(lists[0], act.chunk, act.microbatch, first, evaluation);
      break;
    case sched::Kind::Backward:
      enqueueList(lists[1], act.chunk, act.microbatch, first);
      break;
    case sched::Kind::Weight:
      enqueueList(lists[2], act.chunk, act.microbatch, first);
      break;
    case sched::Kind::BackwardWeight:
      enqueueList(lists[1], act.chunk, act.microbatch, first);
      enqueueList(lists[2], act.chunk, act.microbatch, first);
      break;
    }
    if (lastAction[key] == i) {
      spare_[size_t(act.chunk)].push_back(std::move(live_[key]));
      live_.erase(key);
      liveActivationBytes_ -= stats_.microbatchBytes[size_t(act.chunk)];
      --liveMicrobatches_;
    }
  }
  if (overflowArmed_ && !evaluation && overflowInstr_ == -2)
    poisonGradient(false);
  enqueueList(finish_, -1, 0, first, evaluation);
}

} // namespace dtc::rt
