//===- ParseProgram.cpp - one entry of the artifact's "programs" ----------===//
#include "Parser.h"

#include <set>

namespace dtc::artifact::detail {

MemCategory Parser::category(const json &v, const std::string &where) const {
  std::string s = str(v, where);
  MemCategory c;
  if (!parseMemCategory(s, c))
    fail(where, "unknown memory category \"" + s + "\" (expected " +
                    memCategoryNameList() + ")");
  return c;
}

void Parser::parseProgram(const json &v, const std::string &where0, Artifact &a,
                          ProgramDecl &p) {
  std::string where = where0;
  object(v, where);
  p.name = str(req(v, "name", where), where + ".name");
  where = "program '" + p.name + "'";
  parseRanks(v, where, a, p);
  parseSlots(v, where, a, p);
  parseBuffers(v, where, a, p);
  checkSlotOwners(where, a, p);
  parseConstants(v, where, a, p);
  parseInstructions(req(v, "instructions", where), where + ": instruction", a,
                    p, p.instructions);
  checkBuckets(a, p, where);
  if (!a.pipeline.present) {
    for (const char *key : {"chunks", "finish", "schedule", "stage"})
      if (opt(v, key))
        fail(where, std::string("\"") + key +
                        "\" needs the artifact's \"pipeline\" section");
  } else {
    parsePipelineLists(v, where, a, p);
  }
  parseEvaluation(v, where, p);
}

void Parser::parseRanks(const json &v, const std::string &where,
                        const Artifact &a, ProgramDecl &p) {
  for (int64_t r : ints(req(v, "ranks", where), where + ": ranks")) {
    if (r < 0 || r >= a.devices)
      fail(where, "rank " + std::to_string(r) + " is out of range for " +
                      std::to_string(a.devices) + " devices");
    p.ranks.push_back(int(r));
  }
  if (p.ranks.empty())
    fail(where, "\"ranks\" is empty");
}

void Parser::parseSlots(const json &v, const std::string &where,
                        const Artifact &a, ProgramDecl &p) {
  const json &slots = array(req(v, "slots", where), where + ": slots");
  for (size_t i = 0; i < slots.size(); ++i) {
    std::string w = where + ": slots[" + std::to_string(i) + "]";
    object(slots[i], w);
    SlotDecl s;
    int64_t bytes = integer(req(slots[i], "bytes", w), w + ".bytes");
    if (bytes < 0 || bytes > kMaxElements * 8)
      fail(w, "bad byte count " + std::to_string(bytes));
    s.bytes = uint64_t(bytes);
    s.category = category(req(slots[i], "category", w), w + ".category");
    if (const json *scope = opt(slots[i], "scope")) {
      std::string sc = str(*scope, w + ".scope");
      if (sc == "microbatch") {
        if (!a.pipeline.present)
          fail(w, "a micro-batch slot in an artifact without a pipeline");
        int64_t chunk = integer(req(slots[i], "chunk", w), w + ".chunk");
        if (chunk < 0 || chunk >= a.pipeline.virtualStages)
          fail(w, "chunk " + std::to_string(chunk) + " does not exist (" +
                      std::to_string(a.pipeline.virtualStages) +
                      " chunks per stage)");
        s.chunk = int(chunk);
      } else if (sc != "step") {
        fail(w, "unknown scope \"" + sc + "\" (expected step or microbatch)");
      }
    }
    p.slots.push_back(s);
  }
}

void Parser::parseBuffers(const json &v, const std::string &where,
                          const Artifact &a, ProgramDecl &p) {
  const json &bufs = array(req(v, "buffers", where), where + ": buffers");
  p.tensorBuffer.assign(a.tensors.size(), -1);
  for (size_t i = 0; i < bufs.size(); ++i) {
    std::string w = where + ": buffer " + std::to_string(i);
    object(bufs[i], w);
    BufferDecl b;
    int64_t slot = integer(req(bufs[i], "slot", w), w + ": slot");
    if (slot < 0 || slot >= int64_t(p.slots.size()))
      fail(w, "slot " + std::to_string(slot) +
                  " does not exist (the program has " +
                  std::to_string(p.slots.size()) + " slots)");
    b.slot = int(slot);
    b.dtype = dtype(req(bufs[i], "dtype", w), w + ": dtype");
    b.shape = shape(req(bufs[i], "shape", w), w + ": shape");
    if (b.bytes() > p.slots[size_t(slot)].bytes)
      fail(w, std::string(dtypeName(b.dtype)) + shapeStr(b.shape) + " needs " +
                  std::to_string(b.bytes()) + " bytes but slot " +
                  std::to_string(slot) + " has " +
                  std::to_string(p.slots[size_t(slot)].bytes));
    if (const json *t = opt(bufs[i], "tensor")) {
      std::string name = str(*t, w + ": tensor");
      b.tensor = a.findTensor(name);
      if (b.tensor < 0)
        fail(w, "tensor '" + name + "' is not declared in \"tensors\"");
      const TensorDecl &td = a.tensors[size_t(b.tensor)];
      if (int j = p.tensorBuffer[size_t(b.tensor)]; j >= 0)
        fail(w, "tensor '" + name + "' is already bound to buffer " +
                    std::to_string(j));
      p.tensorBuffer[size_t(b.tensor)] = int(i);
      if (td.dtype != b.dtype)
        fail(w, "dtype " + std::string(dtypeName(b.dtype)) +
                    " differs from tensor '" + name + "' (" +
                    dtypeName(td.dtype) + ")");
      if (p.slots[size_t(slot)].chunk >= 0)
        fail(w, "binds tensor '" + name +
                    "' to a micro-batch slot (a tensor lives once per step)");
      Piece piece = pieceOf(a.mesh, td.sharding, td.shape,
                            a.mesh.coords(p.ranks[0]), td.pieces);
      if (piece.local != b.shape)
        fail(w, "local shape " + shapeStr(b.shape) + " of tensor '" + name +
                    "' does not match its global shape " + shapeStr(td.shape) +
                    " divided by its sharding, " + shapeStr(piece.local));
    }
    p.buffers.push_back(b);
  }
}

// A slot that holds a param, optimizer_state, input or step tensor holds
// nothing else (other buffers there may only be views of it).
void Parser::checkSlotOwners(const std::string &where, const Artifact &a,
                             const ProgramDecl &p) {
  std::vector<std::vector<int>> slotBuffers(p.slots.size());
  for (size_t b = 0; b < p.buffers.size(); ++b)
    slotBuffers[size_t(p.buffers[b].slot)].push_back(int(b));
  for (size_t s = 0; s < slotBuffers.size(); ++s) {
    int owner = -1;
    for (int b : slotBuffers[s]) {
      int t = p.buffers[size_t(b)].tensor;
      if (t >= 0 && a.tensors[size_t(t)].role != Role::Loss &&
          a.tensors[size_t(t)].role != Role::Output)
        owner = b;
    }
    if (owner < 0)
      continue;
    const BufferDecl &ob = p.buffers[size_t(owner)];
    for (int b : slotBuffers[s]) {
      if (b == owner)
        continue;
      const BufferDecl &bb = p.buffers[size_t(b)];
      if (bb.tensor >= 0 || bb.dtype != ob.dtype ||
          numel(bb.shape) != numel(ob.shape))
        fail(where + ": buffer " + std::to_string(b),
             "shares slot " + std::to_string(s) + " with tensor '" +
                 a.tensors[size_t(ob.tensor)].name + "' (a " +
                 roleName(a.tensors[size_t(ob.tensor)].role) +
                 " slot holds nothing else; only a same-size view is allowed)");
    }
  }
}

void Parser::parseConstants(const json &v, const std::string &where,
                            const Artifact &a, ProgramDecl &p) {
  if (const json *cs = opt(v, "constants")) {
    array(*cs, where + ": constants");
    std::set<int> seen;
    for (size_t i = 0; i < cs->size(); ++i) {
      std::string w = where + ": constants[" + std::to_string(i) + "]";
      const json &c = (*cs)[i];
      object(c, w);
      ConstantDecl cd;
      int64_t bid = integer(req(c, "buffer", w), w + ".buffer");
      if (bid < 0 || bid >= int64_t(p.buffers.size()))
        fail(w, "buffer " + std::to_string(bid) + " does not exist");
      cd.buffer = int(bid);
      const BufferDecl &b = p.buffers[size_t(bid)];
      if (b.tensor >= 0)
        fail(w, "buffer " + std::to_string(bid) + " holds tensor '" +
                    a.tensors[size_t(b.tensor)].name +
                    "' and cannot be a constant");
      if (!seen.insert(cd.buffer).second)
        fail(w,
             "buffer " + std::to_string(bid) + " is filled by two constants");
      const json *splat = opt(c, "splat");
      const json *data = opt(c, "data");
      if (!!splat == !!data)
        fail(w, "needs exactly one of \"splat\" and \"data\"");
      if (splat) {
        cd.isSplat = true;
        cd.splat = number(*splat, w + ".splat");
        if (isInt(b.dtype)) {
          double lim =
              b.dtype == DType::I32 ? 2147483648.0 : 9223372036854775808.0;
          if (cd.splat != std::trunc(cd.splat) || cd.splat < -lim ||
              cd.splat >= lim)
            fail(w, "splat value is not a valid " +
                        std::string(dtypeName(b.dtype)));
        }
      } else {
        cd.isSplat = false;
        std::string text = str(*data, w + ".data");
        if (!base64Decode(text, cd.data))
          fail(w, "\"data\" is not valid base64");
        if (cd.data.size() != b.bytes())
          fail(w, "\"data\" has " + std::to_string(cd.data.size()) +
                      " bytes but buffer " + std::to_string(bid) + " (" +
                      dtypeName(b.dtype) + shapeStr(b.shape) + ") has " +
                      std::to_string(b.bytes()));
      }
      p.constants.push_back(std::move(cd));
    }
  }
}

// Pipelines: the program's stage, its chunks' lists, the list after the
// micro-batches and its schedule.
void Parser::parsePipelineLists(const json &v, const std::string &where,
                                const Artifact &a, ProgramDecl &p) {
  int64_t stage = integer(req(v, "stage", where), where + ": stage");
  if (stage < 0 || stage >= a.pipeline.stages)
    fail(where, "stage " + std::to_string(stage) +
                    " does not exist (the pipeline has " +
                    std::to_string(a.pipeline.stages) + " stages)");
  p.stage = int(stage);
  const json &chunks = array(req(v, "chunks", where), where + ": chunks");
  if (int64_t(chunks.size()) != a.pipeline.virtualStages)
    fail(where, "has " + std::to_string(chunks.size()) +
                    " chunks, the pipeline " +
                    std::to_string(a.pipeline.virtualStages) + " per stage");
  for (size_t c = 0; c < chunks.size(); ++c) {
    std::string w = where + ": chunk " + std::to_string(c);
    object(chunks[c], w);
    ChunkDecl chunk;
    for (auto [phase, list] :
         {std::pair{Phase::Forward, &chunk.forward},
          std::pair{Phase::BackwardInput, &chunk.backwardInput},
          std::pair{Phase::BackwardWeight, &chunk.backwardWeight}}) {
      const std::string key = phaseName(phase);
      parseInstructions(req(chunks[c], key.c_str(), w),
                        w + ": " + key + " instruction", a, p, *list);
    }
    // A chunk reads only its own micro-batch slots.
    for (const auto *list :
         {&chunk.forward, &chunk.backwardInput, &chunk.backwardWeight})
      for (const InstrDecl &ins : *list)
        for (const auto *ids : {&ins.in, &ins.out})
          for (int id : *ids) {
            int owner = p.slots[size_t(p.buffers[size_t(id)].slot)].chunk;
            if (owner >= 0 && owner != int(c))
              fail(w, ins.op + " uses buffer " + std::to_string(id) +
                          ", a micro-batch buffer of chunk " +
                          std::to_string(owner));
          }
    p.chunks.push_back(std::move(chunk));
  }
  parseInstructions(req(v, "finish", where), where + ": finish instruction", a,
                    p, p.finish);
  for (const auto *list : {&p.instructions, &p.finish})
    for (const InstrDecl &ins : *list)
      for (const auto *ids : {&ins.in, &ins.out})
        for (int id : *ids)
          if (p.slots[size_t(p.buffers[size_t(id)].slot)].chunk >= 0)
            fail(where, ins.op + " outside the micro-batches uses buffer " +
                            std::to_string(id) + ", a micro-batch buffer");
  std::vector<const std::vector<InstrDecl> *> pipelineLists = {&p.finish};
  for (const ChunkDecl &c : p.chunks)
    pipelineLists.insert(pipelineLists.end(),
                         {&c.forward, &c.backwardInput, &c.backwardWeight});
  for (const std::vector<InstrDecl> *list : pipelineLists)
    for (const InstrDecl &ins : *list)
      if (ins.bucket >= 0)
        fail(where, "a bucket's " + ins.op +
                        " in a pipeline's lists (buckets are for the step's "
                        "own instructions)");
  std::string error;
  if (!sched::actionsFromJson(req(v, "schedule", where), p.schedule, error))
    fail(where + ": schedule", error);
}

void Parser::checkBuckets(const Artifact &a, ProgramDecl &p,
                          const std::string &where) {
  std::map<int, int> index; // the artifact's id -> ProgramDecl::buckets
  int open = -1;            // the bucket whose members come now
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    InstrDecl &ins = p.instructions[i];
    if (ins.bucket < 0)
      continue;
    const std::string w = where + ": instruction " + std::to_string(i) + " (" +
                          ins.op + " in bucket " + std::to_string(ins.bucket) +
                          ")";
    auto [it, first] = index.emplace(ins.bucket, int(p.buckets.size()));
    if (first) {
      p.buckets.emplace_back();
      open = it->second;
    } else if (it->second != open) {
      fail(w, "the bucket's members are interleaved with another bucket's "
              "(one bucket is packed at a time)");
    }
    BucketDecl &b = p.buckets[size_t(it->second)];
    const BufferDecl &in = p.buffers[size_t(ins.in[0])];
    if (b.members.empty()) {
      b.coll = ins.coll;
      b.groupSize = int(a.mesh.groupSize(a.comms[size_t(ins.comm)].meshAxes));
    } else {
      const InstrDecl &head = p.instructions[size_t(b.members[0])];
      const BufferDecl &headIn = p.buffers[size_t(head.in[0])];
      if (ins.coll != head.coll || ins.comm != head.comm ||
          ins.reduce != head.reduce || in.dtype != headIn.dtype)
        fail(w, "its collective, communicator, reduction or dtype differs "
                "from the bucket's first member (instruction " +
                    std::to_string(b.members[0]) + ")");
    }
    // A member's share of a block: its result's piece for a reduce-scatter,
    // else its operand.
    const BufferDecl &share = ins.coll == CollectiveKind::ReduceScatter
                                  ? p.buffers[size_t(ins.out[0])]
                                  : in;
    ins.bucket = it->second;
    b.members.push_back(int(i));
    b.offsets.push_back(b.bytes);
    b.bytes += share.bytes();
    b.elements += numel(share.shape);
  }
  // A member's result is written when the bucket is reduced, at its last
  // member: nothing else may use the result's slot in between.
  for (const BucketDecl &b : p.buckets)
    for (size_t m = 0; m + 1 < b.members.size(); ++m) {
      const int slot =
          p.buffers[size_t(p.instructions[size_t(b.members[m])].out[0])].slot;
      for (int k = b.members[m] + 1; k <= b.members.back(); ++k) {
        const InstrDecl &other = p.instructions[size_t(k)];
        if (other.bucket >= 0 && &p.buckets[size_t(other.bucket)] == &b)
          continue;
        for (const auto *ids : {&other.in, &other.out})
          for (int id : *ids)
            if (p.buffers[size_t(id)].slot == slot)
              fail(where + ": instruction " + std::to_string(k) + " (" +
                       other.op + ")",
                   "uses the slot of instruction " +
                       std::to_string(b.members[m]) +
                       "'s result before its bucket's collective runs "
                       "(at instruction " +
                       std::to_string(b.members.back()) + ")");
      }
    }
}

void Parser::parseInstructions(const json &list, const std::string &where,
                               const Artifact &a, const ProgramDecl &p,
                               std::vector<InstrDecl> &out) {
  const json &instrs = array(list, where + "s");
  for (size_t i = 0; i < instrs.size(); ++i) {
    std::string w = where + " " + std::to_string(i);
    const json &iv = instrs[i];
    object(iv, w);
    InstrDecl ins;
    ins.op = str(req(iv, "op", w), w + ": op");
    w += " (" + ins.op + ")";
    for (const char *key : {"in", "out"}) {
      for (int64_t id : ints(req(iv, key, w), w + ": " + key)) {
        if (id < 0 || id >= int64_t(p.buffers.size()))
          fail(w, std::string(key) + " names buffer " + std::to_string(id) +
                      ", which does not exist (the program has " +
                      std::to_string(p.buffers.size()) + " buffers)");
        (key[0] == 'i' ? ins.in : ins.out).push_back(int(id));
      }
    }
    if (const json *at = opt(iv, "attrs"))
      ins.attrs = object(*at, w + ": attrs");
    checkInstruction(a, p, ins, w);
    out.push_back(std::move(ins));
  }
}

} // namespace dtc::artifact::detail
