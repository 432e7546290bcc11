//===- VerifyPipeline.cpp - the pipeline's programs together --------------===//
#include "Parser.h"

#include <map>
#include <set>

namespace dtc::artifact::detail {

// Programs against each other: the stages' schedules together run without
// deadlock, and every message has one sender and one receiver that agree
// on it and on when it travels.
void Parser::checkPipeline(const Artifact &a) {
  if (!a.pipeline.present)
    return;
  checkStageSchedules(a);
  MessageEnds sendOf, recvOf;
  collectMessageEnds(a, sendOf, recvOf);
  checkMessagePairs(a, sendOf, recvOf);
  checkOncePerStepLists(a, sendOf, recvOf);
}

// The programs of one stage run it in one order, and the stages' orders
// together are a valid schedule.
void Parser::checkStageSchedules(const Artifact &a) {
  const PipelineDecl &pd = a.pipeline;
  sched::Schedule schedule;
  schedule.name = pd.schedule;
  schedule.stages = pd.stages;
  schedule.virtualStages = pd.virtualStages;
  schedule.microbatches = pd.microbatches;
  schedule.perStage.assign(size_t(pd.stages), {});
  std::vector<int> programOfStage(size_t(pd.stages), -1);
  for (size_t i = 0; i < a.programs.size(); ++i) {
    const ProgramDecl &p = a.programs[i];
    int &first = programOfStage[size_t(p.stage)];
    if (first < 0) {
      first = int(i);
      schedule.perStage[size_t(p.stage)] = p.schedule;
    } else if (!(p.schedule == a.programs[size_t(first)].schedule)) {
      fail("program '" + p.name + "'", "runs stage " + std::to_string(p.stage) +
                                           " in another order than program '" +
                                           a.programs[size_t(first)].name +
                                           "'");
    }
  }
  for (int d = 0; d < pd.stages; ++d)
    if (programOfStage[size_t(d)] < 0)
      fail("pipeline", "no program runs stage " + std::to_string(d));
  std::string problem = sched::check(schedule);
  if (problem.empty()) {
    sched::Simulation sim = sched::simulate(schedule);
    if (!sim.ok)
      problem = sim.error;
  }
  if (!problem.empty())
    fail("pipeline: schedule", problem);
}

// Messages: where each one is sent and received. A place is (list kind,
// virtual stage): 0 before the micro-batches, 1 forward, 2 input
// gradients, 3 weight gradients, 4 after the micro-batches.
void Parser::collectMessageEnds(const Artifact &a, MessageEnds &sendOf,
                                MessageEnds &recvOf) {
  const PipelineDecl &pd = a.pipeline;
  for (size_t i = 0; i < a.programs.size(); ++i) {
    const ProgramDecl &p = a.programs[i];
    auto scan = [&](const std::vector<InstrDecl> &list, int kind, int chunk) {
      for (const InstrDecl &ins : list) {
        if (ins.pipe != PipeOp::Send && ins.pipe != PipeOp::Recv)
          continue;
        std::map<int64_t, MessageEnd> &ends =
            ins.pipe == PipeOp::Send ? sendOf : recvOf;
        int id = ins.pipe == PipeOp::Send ? ins.in[0] : ins.out[0];
        MessageEnd e{int(i),   kind,     chunk * pd.stages + p.stage,
                     ins.peer, ins.comm, &p.buffers[size_t(id)]};
        auto [it, inserted] = ends.emplace(ins.message, e);
        // Programs of one stage (its SPMD ranks) each send their piece.
        if (!inserted &&
            a.programs[size_t(it->second.program)].stage == p.stage)
          continue;
        if (!inserted)
          fail("program '" + p.name + "'",
               std::string(ins.pipe == PipeOp::Send ? "sends" : "receives") +
                   " message " + std::to_string(ins.message) +
                   " that another stage " +
                   (ins.pipe == PipeOp::Send ? "sends" : "receives") + " too");
      }
    };
    scan(p.instructions, 0, 0);
    for (size_t c = 0; c < p.chunks.size(); ++c) {
      scan(p.chunks[c].forward, 1, int(c));
      scan(p.chunks[c].backwardInput, 2, int(c));
      scan(p.chunks[c].backwardWeight, 3, int(c));
    }
    scan(p.finish, 4, 0);
  }
}

void Parser::checkMessagePairs(const Artifact &a, const MessageEnds &sendOf,
                               const MessageEnds &recvOf) {
  for (const auto &[id, send] : sendOf) {
    const std::string where = "pipeline: message " + std::to_string(id);
    auto it = recvOf.find(id);
    if (it == recvOf.end())
      fail(where, "is sent but never received");
    const MessageEnd &recv = it->second;
    const ProgramDecl &from = a.programs[size_t(send.program)],
                      &to = a.programs[size_t(recv.program)];
    if (send.peer != to.stage || recv.peer != from.stage ||
        send.comm != recv.comm)
      fail(where, "program '" + from.name + "' sends it to stage " +
                      std::to_string(send.peer) + " but program '" + to.name +
                      "' (stage " + std::to_string(to.stage) +
                      ") expects it from stage " + std::to_string(recv.peer));
    if (send.buffer->dtype != recv.buffer->dtype ||
        send.buffer->shape != recv.buffer->shape)
      fail(where, "is sent as " + std::string(dtypeName(send.buffer->dtype)) +
                      shapeStr(send.buffer->shape) + " but received as " +
                      dtypeName(recv.buffer->dtype) +
                      shapeStr(recv.buffer->shape));
    // What the schedule's order guarantees: activations go to later virtual
    // stages within forwards, gradients to earlier ones within input-
    // gradient backwards; once per step, from before or after the
    // micro-batches to no earlier a place.
    bool perMicroBatch = send.kind >= 1 && send.kind <= 3;
    bool ok = perMicroBatch ? (send.kind == recv.kind &&
                               ((send.kind == 1 && send.vstage < recv.vstage) ||
                                (send.kind == 2 && send.vstage > recv.vstage)))
                            : (recv.kind == 0 || recv.kind == 4) &&
                                  send.kind <= recv.kind;
    if (!ok)
      fail(where, "travels where the schedule cannot order it (sent in list " +
                      std::to_string(send.kind) + " of virtual stage " +
                      std::to_string(send.vstage) + ", received in list " +
                      std::to_string(recv.kind) + " of virtual stage " +
                      std::to_string(recv.vstage) + ")");
  }
  for (const auto &[id, recv] : recvOf)
    if (!sendOf.count(id))
      fail("pipeline: message " + std::to_string(id),
           "is received but never sent");
}

void Parser::checkOncePerStepLists(const Artifact &a, const MessageEnds &sendOf,
                                   const MessageEnds &recvOf) {
  // Once-per-step lists: run them in turn, sends never blocking; every
  // receive must find its message.
  for (bool before : {true, false}) {
    std::vector<size_t> at(a.programs.size(), 0);
    std::set<int64_t> sent;
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t i = 0; i < a.programs.size(); ++i) {
        const auto &list =
            before ? a.programs[i].instructions : a.programs[i].finish;
        while (at[i] < list.size()) {
          const InstrDecl &ins = list[at[i]];
          if (ins.pipe == PipeOp::Recv && !sent.count(ins.message) &&
              recvOf.at(ins.message).kind == sendOf.at(ins.message).kind)
            break;
          if (ins.pipe == PipeOp::Send)
            sent.insert(ins.message);
          ++at[i];
          progress = true;
        }
      }
    }
    for (size_t i = 0; i < a.programs.size(); ++i) {
      const auto &list =
          before ? a.programs[i].instructions : a.programs[i].finish;
      if (at[i] < list.size())
        fail("pipeline", "program '" + a.programs[i].name +
                             "' would wait forever for message " +
                             std::to_string(list[at[i]].message) + " " +
                             (before ? "before" : "after") +
                             " the micro-batches");
    }
  }
}

} // namespace dtc::artifact::detail
