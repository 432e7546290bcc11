//===- Evaluation.cpp - what a forward-only run of the loss keeps ---------===//
//
// The slice follows slots, not buffers: views of one slot are one value,
// and a slot reused for another value is just written again. Walking a list
// backwards, an instruction is kept when it writes a slot the loss still
// needs (or is a send a kept receive waits for); then the slots it writes
// are no longer needed before it (except accumulate's, which it also reads)
// and the slots it reads are. A pipeline's forward lists run once per
// micro-batch, so they are walked until the slots needed at their start
// stop growing: a value carried from one micro-batch to the next (the loss
// summed over them) keeps what starts it before the micro-batches.
//
//===----------------------------------------------------------------------===//
#include "dtc/artifact/Evaluation.h"
#include "Parser.h"

#include <algorithm>
#include <set>

namespace dtc::artifact {

using detail::json;

namespace {

using SlotSet = std::vector<char>;

struct ProgramSlice {
  ProgramDecl &p;
  const std::set<int64_t> &sendsNeeded;
  std::set<int64_t> &recvsNeeded;

  void need(SlotSet &needed, int buffer) const {
    needed[size_t(p.buffers[size_t(buffer)].slot)] = 1;
  }
  bool isNeeded(const SlotSet &needed, int buffer) const {
    return needed[size_t(p.buffers[size_t(buffer)].slot)] != 0;
  }

  /// Walks `list` backwards from `needed` (updated to what is needed before
  /// it); returns whether it kept an instruction it had not kept before.
  bool walk(std::vector<InstrDecl> &list, SlotSet &needed) const {
    bool changed = false;
    for (size_t i = list.size(); i-- > 0;) {
      InstrDecl &ins = list[i];
      if (!ins.evaluation) {
        bool keep = ins.pipe == PipeOp::Send && sendsNeeded.count(ins.message);
        for (int out : ins.out)
          keep = keep || isNeeded(needed, out);
        if (!keep)
          continue;
        ins.evaluation = true;
        changed = true;
      }
      const bool readsOutput = ins.pipe == PipeOp::Accumulate;
      if (!readsOutput)
        for (int out : ins.out)
          needed[size_t(p.buffers[size_t(out)].slot)] = 0;
      for (int in : ins.in)
        need(needed, in);
      if (readsOutput)
        for (int out : ins.out)
          need(needed, out);
      if (ins.pipe == PipeOp::Recv)
        recvsNeeded.insert(ins.message);
    }
    return changed;
  }

  void run(int lossBuffer) const {
    SlotSet needed(p.slots.size(), 0);
    if (lossBuffer >= 0)
      need(needed, lossBuffer);
    walk(p.finish, needed);
    if (!p.chunks.empty()) {
      // Each chunk's forward list may run last and again after any other:
      // each is walked from everything needed at the end or at the start.
      SlotSet atStart(p.slots.size(), 0);
      for (bool changed = true; changed;) {
        changed = false;
        SlotSet end = needed;
        for (size_t s = 0; s < end.size(); ++s)
          end[s] = char(end[s] | atStart[s]);
        for (ChunkDecl &c : p.chunks) {
          SlotSet before = end;
          changed = walk(c.forward, before) || changed;
          for (size_t s = 0; s < before.size(); ++s)
            if (before[s] && !atStart[s]) {
              atStart[s] = 1;
              changed = true;
            }
        }
      }
      needed = atStart;
    }
    walk(p.instructions, needed);
  }
};

json indicesOf(const std::vector<InstrDecl> &list) {
  json out = json::array();
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].evaluation)
      out.push_back(i);
  return out;
}

std::vector<InstrDecl> kept(const std::vector<InstrDecl> &list) {
  std::vector<InstrDecl> out;
  for (const InstrDecl &ins : list)
    if (ins.evaluation)
      out.push_back(ins);
  return out;
}

} // namespace

void markEvaluation(Artifact &a) {
  const std::vector<int> loss = a.tensorsWithRole(Role::Loss);
  for (ProgramDecl &p : a.programs) {
    for (auto *list : {&p.instructions, &p.finish})
      for (InstrDecl &ins : *list)
        ins.evaluation = false;
    for (ChunkDecl &c : p.chunks)
      for (auto *list : {&c.forward, &c.backwardInput, &c.backwardWeight})
        for (InstrDecl &ins : *list)
          ins.evaluation = false;
  }
  // A receive kept in one program needs its send in another: repeat until
  // the messages needed stop growing.
  std::set<int64_t> sendsNeeded;
  while (true) {
    std::set<int64_t> recvsNeeded;
    for (size_t p = 0; p < a.programs.size(); ++p) {
      const int lossBuffer = loss.empty() ? -1 : a.bufferOf(int(p), loss[0]);
      ProgramSlice{a.programs[p], sendsNeeded, recvsNeeded}.run(lossBuffer);
    }
    if (std::includes(sendsNeeded.begin(), sendsNeeded.end(),
                      recvsNeeded.begin(), recvsNeeded.end()))
      break;
    sendsNeeded.insert(recvsNeeded.begin(), recvsNeeded.end());
  }
  for (ProgramDecl &p : a.programs)
    p.hasEvaluation = true;
}

json evaluationJson(const ProgramDecl &p) {
  json out{{"instructions", indicesOf(p.instructions)}};
  if (p.stage < 0)
    return out;
  out["forward"] = json::array();
  for (const ChunkDecl &c : p.chunks)
    out["forward"].push_back(indicesOf(c.forward));
  out["finish"] = indicesOf(p.finish);
  return out;
}

bool addEvaluation(json &body, const std::string &label,
                   std::string &error) noexcept {
  try {
    Artifact a;
    if (!parseArtifact(body, label, a, error))
      return false;
    markEvaluation(a);
    json &programs = body["programs"];
    for (size_t p = 0; p < a.programs.size(); ++p)
      programs[p]["evaluation"] = evaluationJson(a.programs[p]);
    return true;
  } catch (const std::exception &e) {
    error = label + ": " + e.what();
  }
  return false;
}

Artifact evaluationProjection(const Artifact &a) {
  Artifact out = a;
  for (ProgramDecl &p : out.programs) {
    p.instructions = kept(p.instructions);
    p.finish = kept(p.finish);
    for (ChunkDecl &c : p.chunks) {
      c.forward = kept(c.forward);
      c.backwardInput.clear();
      c.backwardWeight.clear();
    }
    std::vector<sched::Action> forwards;
    for (const sched::Action &act : p.schedule)
      if (act.kind == sched::Kind::Forward)
        forwards.push_back(act);
    p.schedule = std::move(forwards);
  }
  return out;
}

namespace detail {

void Parser::parseEvaluation(const json &v, const std::string &where,
                             ProgramDecl &p) {
  const json *section = opt(v, "evaluation");
  if (!section)
    return;
  const std::string w = where + ": evaluation";
  object(*section, w);
  auto mark = [&](const json &indices, std::vector<InstrDecl> &list,
                  const std::string &lw) {
    int64_t last = -1;
    for (int64_t i : ints(indices, lw)) {
      if (i <= last || i >= int64_t(list.size()))
        fail(lw, "index " + std::to_string(i) +
                     (i <= last
                          ? " does not increase"
                          : " is past the list's " +
                                std::to_string(list.size()) + " instructions"));
      list[size_t(i)].evaluation = true;
      last = i;
    }
  };
  mark(req(*section, "instructions", w), p.instructions, w + ".instructions");
  if (p.stage < 0) {
    for (const char *key : {"forward", "finish"})
      if (opt(*section, key))
        fail(w, std::string("\"") + key + "\" needs a pipeline program");
  } else {
    const json &forward = array(req(*section, "forward", w), w + ".forward");
    if (forward.size() != p.chunks.size())
      fail(w + ".forward", "has " + std::to_string(forward.size()) +
                               " lists for " + std::to_string(p.chunks.size()) +
                               " chunks");
    for (size_t c = 0; c < forward.size(); ++c)
      mark(forward[c], p.chunks[c].forward,
           w + ".forward[" + std::to_string(c) + "]");
    mark(req(*section, "finish", w), p.finish, w + ".finish");
  }
  p.hasEvaluation = true;
}

void Parser::checkEvaluation(const Artifact &a,
                             const std::vector<int> &programOfRank) {
  size_t with = 0;
  for (const ProgramDecl &p : a.programs)
    with += p.hasEvaluation ? 1 : 0;
  if (with == 0)
    return;
  if (with != a.programs.size())
    fail("evaluation", "only " + std::to_string(with) + " of the " +
                           std::to_string(a.programs.size()) +
                           " programs have an \"evaluation\" section");
  const std::vector<int> loss = a.tensorsWithRole(Role::Loss);
  for (size_t pi = 0; pi < a.programs.size(); ++pi) {
    const ProgramDecl &p = a.programs[pi];
    // Slot -> the persistent tensor or input it holds (-1: none).
    std::vector<int> owner(p.slots.size(), -1);
    for (const BufferDecl &b : p.buffers)
      if (b.tensor >= 0) {
        const Role r = a.tensors[size_t(b.tensor)].role;
        if (r != Role::Loss && r != Role::Output)
          owner[size_t(b.slot)] = b.tensor;
      }
    const int lossBuffer = loss.empty() ? -1 : a.bufferOf(int(pi), loss[0]);
    bool writesLoss = false;
    auto check = [&](const std::vector<InstrDecl> &list,
                     const std::string &where) {
      for (size_t i = 0; i < list.size(); ++i) {
        const InstrDecl &ins = list[i];
        if (!ins.evaluation)
          continue;
        const std::string w = "program '" + p.name + "' evaluation: " + where +
                              "instruction " + std::to_string(i) + " (" +
                              ins.op + ")";
        // An evaluation runs a bucket whole or not at all.
        if (ins.bucket >= 0)
          for (int m : p.buckets[size_t(ins.bucket)].members)
            if (!list[size_t(m)].evaluation)
              fail(w, "is in a bucket with instruction " + std::to_string(m) +
                          ", which the evaluation does not run");
        for (int out : ins.out) {
          const int slot = p.buffers[size_t(out)].slot;
          if (owner[size_t(slot)] >= 0) {
            const TensorDecl &t = a.tensors[size_t(owner[size_t(slot)])];
            fail(w, "writes " + std::string(roleName(t.role)) + " '" + t.name +
                        "', which an evaluation must leave as it is");
          }
          if (lossBuffer >= 0 && slot == p.buffers[size_t(lossBuffer)].slot)
            writesLoss = true;
        }
      }
    };
    check(p.instructions, "");
    for (size_t c = 0; c < p.chunks.size(); ++c)
      check(p.chunks[c].forward, "chunk " + std::to_string(c) + " forward ");
    check(p.finish, "finish ");
    if (lossBuffer >= 0 && !writesLoss)
      fail("program '" + p.name + "' evaluation",
           "never writes the loss, which the program holds");
  }
  if (agreementChecked_)
    return;
  try {
    checkProgramsAgree(evaluationProjection(a), programOfRank);
  } catch (const Error &e) {
    std::string msg = e.what();
    const std::string prefix = label() + ": ";
    if (msg.compare(0, prefix.size(), prefix) == 0)
      msg = msg.substr(prefix.size());
    fail("evaluation", msg);
  }
}

} // namespace detail

} // namespace dtc::artifact
