//===- Agreement.cpp - the programs' communications against each other ----===//
//
// Ranks running different programs must still make matching calls on every
// communicator group they share: the same collectives in the same order,
// with the same element type, counts and reduction (a mismatch would
// overflow a buffer or wait forever). all_slice is left out: it does not
// communicate. Then the calls of all ranks are replayed together to find an
// order that waits forever (rank A in a collective on X while rank B, which
// A needs there, waits in one on Y).
//
// A pipeline stage's calls are its lists in the order its schedule runs
// them (once-per-step list, each action's chunk list for its micro-batch,
// the list after the micro-batches); its point-to-point messages join the
// replay: a send never waits, a receive waits until its sender has sent.
//
//===----------------------------------------------------------------------===//
#include "Parser.h"

#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

namespace dtc::artifact::detail {

namespace {

struct Call {
  int comm;
  CollectiveKind kind;
  DType dtype;
  ReduceOp reduce;
  int64_t inCount, outCount;
  size_t instruction;
  // Pipelines: the list (0 before the micro-batches, 1 forward, 2 input
  // gradients, 3 weight gradients, 4 after), its chunk and micro-batch
  // (-1: a once-per-step list); messages: 1 send, 2 receive (0: a
  // collective), the message and the peer's index in `comm`.
  int list = 0, chunk = 0, microbatch = -1;
  int p2p = 0;
  int64_t message = -1;
  int peer = -1;
};

void addCalls(std::vector<Call> &calls, const ProgramDecl &p,
              const std::vector<InstrDecl> &list, int where, int chunk,
              int microbatch) {
  for (size_t i = 0; i < list.size(); ++i) {
    const InstrDecl &ins = list[i];
    if (ins.pipe == PipeOp::Send || ins.pipe == PipeOp::Recv) {
      const BufferDecl &b =
          p.buffers[size_t(ins.pipe == PipeOp::Send ? ins.in[0] : ins.out[0])];
      Call c{ins.comm,
             CollectiveKind::AllReduce,
             b.dtype,
             ReduceOp::Sum,
             numel(b.shape),
             numel(b.shape),
             i};
      c.p2p = ins.pipe == PipeOp::Send ? 1 : 2;
      c.message = ins.message;
      c.peer = ins.peer;
      c.list = where;
      c.chunk = chunk;
      c.microbatch = microbatch;
      calls.push_back(c);
      continue;
    }
    if (!ins.isCollective || ins.coll == CollectiveKind::AllSlice)
      continue;
    const BufferDecl &in = p.buffers[size_t(ins.in[0])],
                     &out = p.buffers[size_t(ins.out[0])];
    const bool reduces = ins.coll == CollectiveKind::AllReduce ||
                         ins.coll == CollectiveKind::ReduceScatter;
    Call c{ins.comm,
           ins.coll,
           in.dtype,
           reduces ? ins.reduce : ReduceOp::Sum,
           numel(in.shape),
           numel(out.shape),
           i};
    c.list = where;
    c.chunk = chunk;
    c.microbatch = microbatch;
    calls.push_back(c);
  }
}

std::vector<Call> callsOf(const ProgramDecl &p) {
  std::vector<Call> calls;
  addCalls(calls, p, p.instructions, 0, 0, -1);
  for (const sched::Action &act : p.schedule) {
    const ChunkDecl &c = p.chunks[size_t(act.chunk)];
    switch (act.kind) {
    case sched::Kind::Forward:
      addCalls(calls, p, c.forward, 1, act.chunk, act.microbatch);
      break;
    case sched::Kind::Backward:
      addCalls(calls, p, c.backwardInput, 2, act.chunk, act.microbatch);
      break;
    case sched::Kind::Weight:
      addCalls(calls, p, c.backwardWeight, 3, act.chunk, act.microbatch);
      break;
    case sched::Kind::BackwardWeight:
      addCalls(calls, p, c.backwardInput, 2, act.chunk, act.microbatch);
      addCalls(calls, p, c.backwardWeight, 3, act.chunk, act.microbatch);
      break;
    }
  }
  addCalls(calls, p, p.finish, 4, 0, -1);
  return calls;
}

std::string describe(const Artifact &a, const ProgramDecl &p, const Call &c) {
  static const char *const lists[] = {"", "forward", "input-gradient",
                                      "weight-gradient",
                                      "after the micro-batches"};
  std::string s;
  if (c.p2p) {
    s = std::string(c.p2p == 1 ? "send to" : "receive from") + " member " +
        std::to_string(c.peer) + " of message " + std::to_string(c.message) +
        " (" + std::to_string(c.inCount) + " " + dtypeName(c.dtype) + ")";
  } else {
    s = std::string(collectiveKindName(c.kind));
    if (c.kind == CollectiveKind::AllReduce ||
        c.kind == CollectiveKind::ReduceScatter)
      s += std::string(" (") + reduceOpName(c.reduce) + ")";
    s += " of " + std::to_string(c.inCount) + " " + dtypeName(c.dtype);
    if (c.outCount != c.inCount)
      s += " into " + std::to_string(c.outCount);
  }
  s += " on '" + a.comms[size_t(c.comm)].name + "' ('" + p.name + "' ";
  if (c.list >= 1 && c.list <= 3)
    s += std::string(lists[c.list]) + " list of chunk " +
         std::to_string(c.chunk) + ", micro-batch " +
         std::to_string(c.microbatch) + ", ";
  else if (c.list == 4)
    s += std::string("list ") + lists[c.list] + ", ";
  s += "instruction " + std::to_string(c.instruction) + ")";
  return s;
}

bool sameCall(const Call &x, const Call &y) {
  return x.kind == y.kind && x.dtype == y.dtype && x.reduce == y.reduce &&
         x.inCount == y.inCount && x.outCount == y.outCount;
}

std::string ranksText(const std::vector<int64_t> &ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 8; ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8)
    s += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  return s;
}

/// Per communicator: each rank's group (color) and each group's members.
struct CommunicatorGroups {
  std::vector<std::vector<int64_t>> colorOf;
  std::vector<std::map<int64_t, std::vector<int64_t>>> groupsOf;

  explicit CommunicatorGroups(const Artifact &a)
      : colorOf(a.comms.size()), groupsOf(a.comms.size()) {
    std::vector<std::vector<int64_t>> coords(size_t(a.devices));
    for (int64_t r = 0; r < a.devices; ++r)
      coords[size_t(r)] = a.mesh.coords(r);
    for (size_t c = 0; c < a.comms.size(); ++c)
      for (int64_t r = 0; r < a.devices; ++r) {
        colorOf[c].push_back(
            a.mesh.groupColor(coords[size_t(r)], a.comms[c].meshAxes));
        groupsOf[c][colorOf[c].back()].push_back(r);
      }
  }
  const std::vector<int64_t> &membersOf(int comm, int64_t rank) const {
    return groupsOf[size_t(comm)].at(colorOf[size_t(comm)][size_t(rank)]);
  }
};

/// The collectives of `calls` on communicator `comm`, in order.
std::vector<Call> collectivesOn(const std::vector<Call> &calls, int comm) {
  std::vector<Call> on;
  for (const Call &k : calls)
    if (k.comm == comm && !k.p2p)
      on.push_back(k);
  return on;
}

/// Step 1: per communicator group, the same sequence of collectives in
/// every program that runs one of its ranks.
void compareGroupSequences(const Parser &P, const Artifact &a,
                           const std::vector<std::vector<Call>> &calls,
                           const CommunicatorGroups &groups,
                           const std::vector<int> &programOfRank) {
  std::set<std::tuple<int, int, int>> compared; // (comm, program, program)
  for (size_t c = 0; c < a.comms.size(); ++c) {
    std::map<int64_t, int64_t> firstOfGroup; // color -> lowest rank
    for (int64_t r = 0; r < a.devices; ++r) {
      auto [it, isNew] = firstOfGroup.emplace(groups.colorOf[c][size_t(r)], r);
      if (isNew)
        continue;
      const int p = programOfRank[size_t(it->second)],
                q = programOfRank[size_t(r)];
      if (p == q || !compared.insert({int(c), p, q}).second)
        continue;
      const std::vector<Call> x = collectivesOn(calls[size_t(p)], int(c)),
                              y = collectivesOn(calls[size_t(q)], int(c));
      const ProgramDecl &Pp = a.programs[size_t(p)], &Q = a.programs[size_t(q)];
      const std::string who = "programs '" + Pp.name + "' (rank " +
                              std::to_string(it->second) + ") and '" + Q.name +
                              "' (rank " + std::to_string(r) +
                              ") disagree on communicator '" + a.comms[c].name +
                              "' (the group of ranks " +
                              ranksText(groups.membersOf(int(c), r)) + "): ";
      for (size_t i = 0; i < x.size() && i < y.size(); ++i)
        if (!sameCall(x[i], y[i]))
          P.fail("", who + "its collective #" + std::to_string(i + 1) + " is " +
                         describe(a, Pp, x[i]) + " in one and " +
                         describe(a, Q, y[i]) + " in the other");
      if (x.size() != y.size()) {
        const bool pLonger = x.size() > y.size();
        const Call &extra = pLonger ? x[y.size()] : y[x.size()];
        P.fail("", who + "'" + Pp.name + "' makes " + std::to_string(x.size()) +
                       " collective" + (x.size() == 1 ? "" : "s") +
                       " on it and '" + Q.name + "' " +
                       std::to_string(y.size()) +
                       "; the first without a partner is " +
                       describe(a, pLonger ? Pp : Q, extra));
      }
    }
  }
}

/// Step 2: every rank's calls replayed together. A collective completes
/// when every member of its group has it next (arrivals counted per group
/// instead of rescanning); a send completes at once and posts its message;
/// a receive completes once its message was posted. What is left waiting at
/// the end waits forever.
class Replay {
public:
  Replay(const Parser &P, const Artifact &a,
         const std::vector<std::vector<Call>> &calls,
         const CommunicatorGroups &groups,
         const std::vector<int> &programOfRank)
      : P(P), a(a), calls(calls), programOfRank(programOfRank),
        next(size_t(a.devices), 0) {
    // Every group numbered once: the replay looks one up per call.
    groupIdOf.resize(a.comms.size());
    for (size_t c = 0; c < a.comms.size(); ++c) {
      groupIdOf[c].assign(size_t(a.devices), 0);
      for (const auto &[color, ranks] : groups.groupsOf[c]) {
        for (int64_t r : ranks)
          groupIdOf[c][size_t(r)] = int(members.size());
        members.push_back(&ranks);
      }
    }
    arrived.assign(members.size(), 0);
  }

  void run();
  /// Fails with the first rank left waiting, if any.
  void reportDeadlock();

private:
  /// A message between two ranks: (message, micro-batch, sender, receiver).
  using MessageKey = std::tuple<int64_t, int, int64_t, int64_t>;
  struct MessageHash {
    size_t operator()(const MessageKey &k) const {
      uint64_t h = uint64_t(std::get<0>(k));
      for (uint64_t part : {uint64_t(std::get<1>(k)), uint64_t(std::get<2>(k)),
                            uint64_t(std::get<3>(k))})
        h = (h ^ part) * 0x100000001b3ull + (h >> 29);
      return size_t(h);
    }
  };

  const std::vector<Call> &callsOfRank(int64_t r) const {
    return calls[size_t(programOfRank[size_t(r)])];
  }
  int groupOf(int comm, int64_t rank) const;
  MessageKey messageKey(const Call &c, int64_t r) const;
  void advance(int64_t r);
  std::string doing(int64_t m) const;

  const Parser &P;
  const Artifact &a;
  const std::vector<std::vector<Call>> &calls;
  const std::vector<int> &programOfRank;
  std::vector<std::vector<int>> groupIdOf; // [comm][rank] -> group id
  std::vector<const std::vector<int64_t> *> members;
  std::unordered_map<MessageKey, int, MessageHash>
      posted; // sent, not yet received
  std::unordered_map<MessageKey, int64_t, MessageHash>
      receiving; // the rank waiting for it
  std::vector<size_t> next;
  std::vector<int> arrived;
  std::vector<int> ready;
  std::vector<int64_t> woken;
};

int Replay::groupOf(int comm, int64_t rank) const {
  return groupIdOf[size_t(comm)][size_t(rank)];
}

Replay::MessageKey Replay::messageKey(const Call &c, int64_t r) const {
  const std::vector<int64_t> &group = *members[size_t(groupOf(c.comm, r))];
  if (c.peer < 0 || size_t(c.peer) >= group.size())
    P.fail("", "program '" + a.programs[size_t(programOfRank[size_t(r)])].name +
                   "' names member " + std::to_string(c.peer) +
                   " of communicator '" + a.comms[size_t(c.comm)].name +
                   "', which has " + std::to_string(group.size()));
  const int64_t other = group[size_t(c.peer)];
  const int mb = std::max(c.microbatch, 0);
  return c.p2p == 1 ? MessageKey{c.message, mb, r, other}
                    : MessageKey{c.message, mb, other, r};
}

void Replay::advance(int64_t r) {
  const std::vector<Call> &mine = callsOfRank(r);
  while (next[size_t(r)] < mine.size()) {
    const Call &c = mine[next[size_t(r)]];
    if (c.p2p == 1) {
      const MessageKey k = messageKey(c, r);
      ++posted[k];
      if (auto w = receiving.find(k); w != receiving.end()) {
        woken.push_back(w->second);
        receiving.erase(w);
      }
    } else if (c.p2p == 2) {
      const MessageKey k = messageKey(c, r);
      auto it = posted.find(k);
      if (it == posted.end()) {
        receiving[k] = r;
        return;
      }
      if (--it->second == 0)
        posted.erase(it);
    } else {
      const int g = groupOf(c.comm, r);
      if (++arrived[size_t(g)] == int(members[size_t(g)]->size()))
        ready.push_back(g);
      return;
    }
    ++next[size_t(r)];
  }
}

void Replay::run() {
  for (int64_t r = 0; r < a.devices; ++r)
    advance(r);
  while (!ready.empty() || !woken.empty()) {
    if (!woken.empty()) {
      const int64_t r = woken.back();
      woken.pop_back();
      advance(r);
      continue;
    }
    const int g = ready.back();
    ready.pop_back();
    arrived[size_t(g)] = 0;
    const std::vector<int64_t> &group = *members[size_t(g)];
    for (int64_t m : group)
      ++next[size_t(m)];
    for (int64_t m : group)
      advance(m);
  }
}

std::string Replay::doing(int64_t m) const {
  const std::vector<Call> &theirs = callsOfRank(m);
  if (next[size_t(m)] >= theirs.size())
    return std::string(a.pipeline.present ? "has finished its step"
                                          : "has no collective left");
  return "waits in " + describe(a, a.programs[size_t(programOfRank[size_t(m)])],
                                theirs[next[size_t(m)]]);
}

void Replay::reportDeadlock() {
  for (int64_t r = 0; r < a.devices; ++r) {
    const int p = programOfRank[size_t(r)];
    const std::vector<Call> &mine = calls[size_t(p)];
    if (next[size_t(r)] >= mine.size())
      continue;
    const Call &waits = mine[next[size_t(r)]];
    const std::string head =
        std::string(a.pipeline.present ? "the programs' communications"
                                       : "the programs' collectives") +
        " wait for each other forever: rank " + std::to_string(r) +
        " waits in " + describe(a, a.programs[size_t(p)], waits);
    if (waits.p2p == 2) {
      const int64_t from = std::get<2>(messageKey(waits, r));
      P.fail("", head + " from rank " + std::to_string(from) + ", which " +
                     doing(from));
    }
    for (int64_t m : *members[size_t(groupOf(waits.comm, r))]) {
      const std::vector<Call> &theirs = callsOfRank(m);
      if (next[size_t(m)] < theirs.size() &&
          theirs[next[size_t(m)]].comm == waits.comm &&
          !theirs[next[size_t(m)]].p2p)
        continue;
      P.fail("",
             head + " for rank " + std::to_string(m) + ", which " + doing(m));
    }
  }
}

} // namespace

void Parser::checkProgramsAgree(const Artifact &a,
                                const std::vector<int> &programOfRank) {
  if (a.programs.size() < 2)
    return; // one program: every rank makes the same calls
  std::vector<std::vector<Call>> calls;
  for (const ProgramDecl &p : a.programs)
    calls.push_back(callsOf(p));
  const CommunicatorGroups groups(a);
  compareGroupSequences(*this, a, calls, groups, programOfRank);
  Replay replay(*this, a, calls, groups, programOfRank);
  replay.run();
  replay.reportDeadlock();
}

} // namespace dtc::artifact::detail
