//===- Executor.cpp - run one rank's program
//-------------------------------===//
#include "ExecutorParts.h"
#include "dtc/runtime/MemoryPlan.h"
#include "dtc/runtime/Progress.h"
#include "dtc/runtime/Random.h"
#include "dtc/runtime/Trace.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>

namespace dtc::rt {

namespace {
/// "ranks 0, 1, 2" (the first few of a large group, and how many).
std::string groupRanks(const Artifact &a, const CommDecl &c,
                       const std::vector<int64_t> &coords) {
  const int64_t color = a.mesh.groupColor(coords, c.meshAxes);
  std::string s;
  int64_t n = 0;
  for (int64_t r = 0; r < a.devices; ++r) {
    if (a.mesh.groupColor(a.mesh.coords(r), c.meshAxes) != color)
      continue;
    if (n < 8)
      s += (n ? ", " : "") + std::to_string(r);
    ++n;
  }
  if (n > 8)
    s += ", ... (" + std::to_string(n) + " ranks)";
  return "rank" + std::string(n == 1 ? " " : "s ") + s;
}

constexpr int kStaging = kNumMemCategories; // allocation category of staging

/// `value` as one element of `dtype` at `dst` (constants and fills).
void storeScalar(char *dst, DType dtype, double value) {
  switch (dtype) {
  case DType::BF16:
  case DType::F16: {
    const uint16_t v = f32ToLow(dtype, float(value));
    std::memcpy(dst, &v, sizeof v);
    break;
  }
  case DType::F32: {
    const float v = float(value);
    std::memcpy(dst, &v, sizeof v);
    break;
  }
  case DType::I32: {
    const int32_t v = int32_t(value);
    std::memcpy(dst, &v, sizeof v);
    break;
  }
  case DType::I64: {
    const int64_t v = int64_t(value);
    std::memcpy(dst, &v, sizeof v);
    break;
  }
  }
}
/// Counts this thread's kernel scratch into `meter` while alive.
class CountScratch {
public:
  explicit CountScratch(ScratchMeter &meter)
      : previous_(kernels::setThreadScratchCounter(&meter)) {}
  ~CountScratch() { kernels::setThreadScratchCounter(previous_); }

private:
  kernels::ScratchCounter *previous_;
};
} // namespace

void ScratchMeter::allocated(size_t bytes) {
  current_ += bytes;
  peak_ = std::max(peak_, current_);
  noteTotal(exec_.persistentBytes());
}

char *RankExecutor::allocate(size_t bytes, int category) {
  const size_t size = size_t(slotAllocationBytes(bytes));
  void *mem = nullptr;
  try {
    mem = backend_->allocate(size);
  } catch (const Error &e) {
    throw Error(a_.label + ": cannot allocate " + std::to_string(bytes) +
                " bytes for " +
                (category == kStaging
                     ? std::string("collective staging")
                     : std::string("a ") +
                           memCategoryName(MemCategory(category)) + " slot") +
                " on the " + backend_->name() + " backend: " + e.what());
  }
  allocations_.ptrs.push_back(static_cast<char *>(mem));
  // Nothing is freed before the executor goes: current == high-water.
  if (category == kStaging)
    stagingAllocated_ += size;
  else
    stats_.memoryBytes[category] += size;
  return static_cast<char *>(mem);
}

namespace {
std::unique_ptr<Backend> namedBackend(const std::string &name,
                                      const World &world) {
  BackendOptions o;
  o.rank = world.rank();
  o.ranksOnNode = world.ranksOnNode();
  return makeBackend(name, o);
}
} // namespace

RankExecutor::RankExecutor(const Artifact &a, World &world,
                           const std::string &backend)
    : RankExecutor(a, world, namedBackend(backend, world)) {}

RankExecutor::RankExecutor(const Artifact &a, World &world,
                           std::unique_ptr<Backend> backend)
    : a_(a), world_(world), backend_(std::move(backend)) {
  allocations_.backend = backend_.get();
  rank_ = world.rank();
  checkRankCount(a, world.size());
  prog_ = a.programOf(rank_);
  coords_ = a.mesh.coords(rank_);
  // Collective: every rank creates every communicator, in artifact order.
  for (const CommDecl &c : a.comms) {
    std::unique_ptr<Communicator> group;
    try {
      group = world.split(int(a.mesh.groupColor(coords_, c.meshAxes)),
                          int(a.mesh.groupIndex(coords_, c.meshAxes)));
    } catch (const CommFailure &e) {
      throw CommFailure(a.label + ": creating communicator '" + c.name + "' (" +
                        std::to_string(comms_.size() + 1) +
                        " of the artifact's " + std::to_string(a.comms.size()) +
                        "): " + e.what());
    }
    comms_.push_back(backend_->createCommunicator(std::move(group)));
  }

  const ProgramDecl &p = program();
  // One-copy slots now; a chunk's micro-batch slots when a micro-batch
  // needs them.
  chunkSlots_.assign(p.chunks.size(), {});
  indexInChunk_.assign(p.slots.size(), -1);
  stats_.microbatchBytes.assign(p.chunks.size(), 0);
  for (size_t i = 0; i < p.slots.size(); ++i) {
    const SlotDecl &s = p.slots[i];
    if (s.chunk >= 0) {
      indexInChunk_[i] = int(chunkSlots_[size_t(s.chunk)].size());
      chunkSlots_[size_t(s.chunk)].push_back(int(i));
      stats_.microbatchBytes[size_t(s.chunk)] += s.bytes;
      slotMem_.push_back(nullptr);
      continue;
    }
    slotMem_.push_back(allocate(size_t(s.bytes), int(s.category)));
    slotBytes_[int(s.category)] += s.bytes;
    if (s.category == MemCategory::Activation)
      liveActivationBytes_ += s.bytes;
  }
  stats_.activationPeakBytes = liveActivationBytes_;
  spare_.assign(p.chunks.size(), {});
  for (const BufferDecl &b : p.buffers)
    bufPtr_.push_back(slotMem_[size_t(b.slot)]);

  stats_.perStepByComm.assign(a.comms.size(), {});
  slotBusyUntil_.assign(p.slots.size(), 0);
  instrs_ = prepare(p.instructions, -1);
  for (size_t c = 0; c < p.chunks.size(); ++c)
    chunkLists_.push_back({prepare(p.chunks[c].forward, int(c)),
                           prepare(p.chunks[c].backwardInput, int(c)),
                           prepare(p.chunks[c].backwardWeight, int(c))});
  finish_ = prepare(p.finish, -1);
  if (stagingSize_ > 0)
    staging_ = allocate(stagingSize_, kStaging);
  for (const BucketDecl &b : p.buckets) {
    bucketBufferSize_ = std::max(bucketBufferSize_, size_t(b.bufferBytes()));
    for (size_t m = 0; m < b.members.size(); ++m) {
      Prepared &member = instrs_[size_t(b.members[m])];
      member.bucket = &b;
      member.bucketPosition = m;
      member.dataBytes = member.lastInBucket() ? b.dataBytes() : 0;
    }
    instrs_[size_t(b.members[0])].comm->reserveScratch(
        size_t(bucketScratchBytes(p, b)));
    // The collective's operand and result together: a block and the
    // larger side.
    instrs_[size_t(b.members[0])].comm->reserveStaging(
        size_t(b.bytes + b.dataBytes()));
  }
  if (bucketBufferSize_ > 0)
    bucketBuffer_ = allocate(bucketBufferSize_, kStaging);
  // DTC_INJECT_OVERFLOW's target: the first gradient the once-per-step
  // list writes, right after it does; in a pipeline, the first gradient
  // the micro-batches accumulated, before the list after them (the
  // optimizer's) starts.
  auto isGrad = [&](int b) {
    const BufferDecl &bd = p.buffers[size_t(b)];
    return p.slots[size_t(bd.slot)].category == MemCategory::Grad &&
           isFloat(bd.dtype) && numel(bd.shape) > 0;
  };
  if (a_.pipeline.present) {
    for (size_t b = 0; b < p.buffers.size() && overflowBuffer_ < 0; ++b)
      if (isGrad(int(b))) {
        overflowBuffer_ = int(b);
        overflowInstr_ = -2; // before finish_
      }
  } else {
    for (size_t i = 0; i < p.instructions.size() && overflowInstr_ < 0; ++i)
      for (int b : p.instructions[i].out)
        if (isGrad(b)) {
          overflowInstr_ = int(i);
          overflowBuffer_ = b;
          break;
        }
  }

  // Constants: built on the host, copied over once.
  Stream &stream = backend_->computeStream();
  std::vector<char> host;
  for (const ConstantDecl &c : p.constants) {
    const BufferDecl &b = p.buffers[size_t(c.buffer)];
    void *dst = bufPtr_[size_t(c.buffer)];
    if (!c.isSplat) {
      backend_->copyFromHost(dst, c.data.data(), c.data.size(), stream);
      continue;
    }
    const int64_t n = numel(b.shape);
    const size_t elem = dtypeSize(b.dtype);
    host.resize(size_t(b.bytes()));
    for (int64_t i = 0; i < n; ++i)
      storeScalar(host.data() + size_t(i) * elem, b.dtype, c.splat);
    backend_->copyFromHost(dst, host.data(), host.size(), stream);
  }
  backend_->synchronize();
}

RankExecutor::List RankExecutor::prepare(const std::vector<InstrDecl> &list,
                                         int chunk) {
  const ProgramDecl &p = program();
  List out;
  std::map<int, std::string> groupNames;
  for (const InstrDecl &ins : list) {
    Prepared pr;
    pr.decl = &ins;
    auto add = [&](int id, bool isOut) {
      kernels::TensorArg t;
      const BufferDecl &b = p.buffers[size_t(id)];
      t.dtype = b.dtype;
      t.shape = b.shape;
      t.data = bufPtr_[size_t(id)];
      t.numel = numel(b.shape);
      auto &args = isOut ? pr.args.out : pr.args.in;
      if (p.slots[size_t(b.slot)].chunk >= 0) {
        if (p.slots[size_t(b.slot)].chunk != chunk)
          throw Error(a_.label + ": instruction " + ins.op +
                      " reads another chunk's micro-batch buffer");
        pr.perMicroBatch.emplace_back(isOut, int(args.size()), b.slot);
      }
      args.push_back(t);
    };
    for (int id : ins.in)
      add(id, false);
    for (int id : ins.out)
      add(id, true);
    pr.args.attrs = &ins.attrs;
    for (const std::vector<int> *ids : {&ins.in, &ins.out})
      for (int id : *ids) {
        const int slot = p.buffers[size_t(id)].slot;
        if (std::find(pr.slots.begin(), pr.slots.end(), slot) == pr.slots.end())
          pr.slots.push_back(slot);
      }
    pr.opSeconds = &stats_.secondsByOp[ins.op];
    // Named in a communication failure: the operation, its group, its data.
    auto describe = [&](const std::string &what, int buffer) {
      const BufferDecl &buf = p.buffers[size_t(buffer)];
      const CommDecl &c = a_.comms[size_t(ins.comm)];
      std::string &members = groupNames[ins.comm];
      if (members.empty())
        members = groupRanks(a_, c, coords_);
      pr.members = members;
      pr.where = what + " on communicator '" + c.name + "' (" + members +
                 ") of " + dtypeName(buf.dtype) + shapeStr(buf.shape);
    };
    if (ins.pipe == PipeOp::Send || ins.pipe == PipeOp::Recv) {
      pr.comm = comms_[size_t(ins.comm)].get();
      const int buffer = ins.pipe == PipeOp::Send ? ins.in[0] : ins.out[0];
      pr.dataBytes = p.buffers[size_t(buffer)].bytes();
      pr.comm->reserveStaging(size_t(pr.dataBytes));
      describe(ins.op + (ins.pipe == PipeOp::Send ? " to" : " from") +
                   " member " + std::to_string(ins.peer),
               buffer);
    } else if (ins.pipe == PipeOp::Accumulate) {
      // out += in, as the backend's own elementwise add (in place).
      pr.args.in.insert(pr.args.in.begin(), pr.args.out[0]);
      std::vector<std::tuple<bool, int, int>> moved;
      for (auto [isOut, arg, slot] : pr.perMicroBatch) {
        if (isOut)
          moved.emplace_back(false, 0, slot);
        moved.emplace_back(isOut, isOut ? arg : arg + 1, slot);
      }
      pr.perMicroBatch = std::move(moved);
      pr.kernel = backend_->bindKernel("add", pr.args);
      if (!pr.kernel)
        throw Error(a_.label + ": kernel 'add' (for accumulate) has no " +
                    backend_->name() + " implementation");
    } else if (ins.pipe == PipeOp::Fill) {
      // A broadcast of the value, kept in a scalar on the device.
      const kernels::TensorArg &target = pr.args.out[0];
      char *&scalar =
          fillSources_[{uint64_t(target.dtype), std::to_string(ins.fillValue)}];
      if (!scalar) {
        scalar = allocate(dtypeSize(target.dtype), kStaging);
        char host[8] = {};
        storeScalar(host, target.dtype, ins.fillValue);
        backend_->copyFromHost(scalar, host, dtypeSize(target.dtype),
                               backend_->computeStream());
      }
      kernels::TensorArg value;
      value.dtype = target.dtype;
      value.data = scalar;
      value.numel = 1;
      pr.args.in = {value};
      pr.kernel = backend_->bindKernel("broadcast", pr.args);
      if (!pr.kernel)
        throw Error(a_.label + ": kernel 'broadcast' (for fill) has no " +
                    backend_->name() + " implementation");
    } else if (ins.pipe == PipeOp::MicrobatchSlice) {
      // copies on the compute stream (enqueueKernel)
    } else if (ins.isCollective) {
      pr.comm = comms_[size_t(ins.comm)].get();
      const uint64_t inB = p.buffers[size_t(ins.in[0])].bytes(),
                     outB = p.buffers[size_t(ins.out[0])].bytes();
      pr.dataBytes = inB > outB ? inB : outB;
      pr.comm->reserveStaging(size_t(inB + outB));
      stagingSize_ =
          std::max(stagingSize_, size_t(collectiveStagingBytes(p, ins)));
      // The ring's scratch now, so nothing grows while steps run.
      pr.comm->reserveScratch(size_t(collectiveScratchBytes(a_, p, ins)));
      describe(ins.op, ins.in[0]);
    } else if (ins.op == "shard_offset") {
      // The rank's index over grid_axes times piece_size (docs/kernels.md).
      std::vector<int> axes;
      for (int64_t ax : kernels::attrInts(ins.attrs, "grid_axes"))
        axes.push_back(int(ax));
      pr.isShardOffset = true;
      // With `shift` s, the index of the member s places before this one
      // on the ring of those axes (ring attention's chunk in hand).
      int64_t index = a_.mesh.groupIndex(coords_, axes);
      if (auto it = ins.attrs.find("shift"); it != ins.attrs.end()) {
        const int64_t n = a_.mesh.groupSize(axes);
        index = ((index - it->get<int64_t>()) % n + n) % n;
      }
      pr.shardOffset = index * kernels::attrInt(ins.attrs, "piece_size");
    } else {
      pr.kernel = backend_->bindKernel(ins.op, pr.args);
      if (!pr.kernel)
        throw Error(a_.label + ": kernel '" + ins.op + "' has no " +
                    backend_->name() + " implementation");
      std::vector<kernels::TensorDesc> in, out;
      std::string key = ins.op;
      for (const kernels::TensorArg &t : pr.args.in)
        in.push_back({t.dtype, t.shape});
      for (const kernels::TensorArg &t : pr.args.out)
        out.push_back({t.dtype, t.shape});
      pr.flops = kernels::flopCount(ins.op, in, out, ins.attrs);
      for (size_t k = 0; k < in.size(); ++k) {
        key += k ? " * " : " ";
        for (size_t d = 0; d < in[k].shape.size(); ++d)
          key += (d ? "x" : "") + std::to_string(in[k].shape[d]);
      }
      for (const char *flag : {"transpose_a", "transpose_b", "causal"})
        if (ins.attrs.is_object() && ins.attrs.value(flag, false) == true)
          key += std::string(" ") + flag;
      for (const kernels::TensorArg &t : pr.args.in)
        if (isLowPrecision(t.dtype))
          key += std::string(" ") + dtypeName(t.dtype);
      auto row = stats_.byKernelShape.try_emplace(key).first;
      pr.shapeStats = &row->second;
      pr.shapeKey = &row->first;
    }
    out.push_back(std::move(pr));
  }
  return out;
}

RankExecutor::~RankExecutor() {
  // Work still in flight (a run that threw) must end before its memory goes.
  try {
    backend_->synchronize();
  } catch (...) {
  }
  // Then the members go, the allocations before the backend.
}

bool RankExecutor::holds(int t) const { return a_.bufferOf(prog_, t) >= 0; }

Piece RankExecutor::pieceFor(int t, int64_t r) const {
  const TensorDecl &d = a_.tensors[size_t(t)];
  return pieceOf(a_.mesh, d, a_.mesh.coords(r));
}

LocalTensor &LocalTensor::operator=(LocalTensor &&o) noexcept {
  if (this == &o)
    return *this;
  release();
  tensor = o.tensor;
  decl = o.decl;
  data = o.data;
  piece = std::move(o.piece);
  owner_ = o.owner_;
  device_ = o.device_;
  copy_ = std::move(o.copy_);
  writeBack_ = o.writeBack_;
  o.owner_ = nullptr;
  o.copy_.reset();
  o.writeBack_ = false;
  o.data = nullptr;
  return *this;
}

void LocalTensor::release() noexcept {
  if (copy_ && writeBack_ && owner_) {
    try {
      owner_->backend_->copyFromHost(device_, copy_.get(), bytes(),
                                     owner_->backend_->computeStream());
    } catch (const std::exception &e) {
      if (owner_->viewError_.empty())
        owner_->viewError_ =
            "writing tensor '" + decl->name + "' to the device: " + e.what();
    }
  }
  copy_.reset();
  owner_ = nullptr;
  writeBack_ = false;
}

LocalTensor RankExecutor::tensor(int t, Access access) {
  const int b = a_.bufferOf(prog_, t);
  if (b < 0)
    throw Error("tensor '" + a_.tensors[size_t(t)].name +
                "' is not held by rank " + std::to_string(rank_));
  LocalTensor lt;
  lt.tensor = t;
  lt.decl = &a_.tensors[size_t(t)];
  lt.piece = pieceFor(t, rank_);
  lt.device_ = bufPtr_[size_t(b)];
  // The host sees the tensor after everything enqueued so far.
  backend_->synchronize();
  if (backend_->hostAddressable()) {
    lt.data = lt.device_;
    return lt;
  }
  const size_t bytes = lt.bytes();
  lt.copy_.reset(new char[bytes]());
  lt.data = lt.copy_.get();
  if (access != Access::Write)
    backend_->copyToHost(lt.data, lt.device_, bytes, backend_->computeStream());
  lt.owner_ = this;
  lt.writeBack_ = access != Access::Read;
  return lt;
}

LocalTensor RankExecutor::tensor(const std::string &name, Access access) {
  const int t = a_.findTensor(name);
  if (t < 0)
    throw Error("the artifact has no tensor named '" + name + "'");
  return tensor(t, access);
}

void RankExecutor::initPersistent(uint64_t seed) {
  for (size_t t = 0; t < a_.tensors.size(); ++t) {
    const TensorDecl &d = a_.tensors[t];
    if (!holds(int(t)))
      continue;
    LocalTensor lt = tensor(int(t), Access::Write);
    // Master weights draw their parameter's numbers: the bf16/f16 parameter
    // starts as its master rounded.
    if (d.role == Role::Param || d.role == Role::OptimizerState)
      fillInit(lt.data, d.dtype, d.init, seed,
               d.kind == "master" ? d.of : d.name, d.shape, lt.piece);
    else if (d.role == Role::Step)
      *static_cast<int64_t *>(lt.data) = 0;
  }
}

void RankExecutor::fillSyntheticInputs(uint64_t seed, int64_t step) {
  for (size_t t = 0; t < a_.tensors.size(); ++t) {
    const TensorDecl &d = a_.tensors[t];
    if (d.role != Role::Input || !holds(int(t)))
      continue;
    LocalTensor lt = tensor(int(t), Access::Write);
    fillSynthetic(lt.data, d.dtype, d.max, seed, d.name, d.shape, lt.piece,
                  step);
  }
}

void RankExecutor::setOptimizerStep(int64_t value) {
  for (int t : a_.tensorsWithRole(Role::Step))
    if (holds(t))
      *static_cast<int64_t *>(tensor(t, Access::Write).data) = value;
}

float RankExecutor::loss() {
  return *static_cast<float *>(
      tensor(a_.tensorsWithRole(Role::Loss).at(0), Access::Read).data);
}

// ---- running a program
// -------------------------------------------------------------

Event &RankExecutor::nextEvent() {
  if (eventsUsed_ == events_.size())
    events_.push_back(backend_->createEvent());
  return *events_[eventsUsed_++];
}

void RankExecutor::enqueueKernel(Prepared &pr, int index, int microbatch) {
  Backend &be = *backend_;
  Stream &compute = be.computeStream();
  // Wait for the collectives in flight that read or write what this
  // instruction touches (the latest covers the earlier ones: one stream).
  uint64_t need = 0;
  for (int slot : pr.slots)
    need = std::max(need, slotBusyUntil_[size_t(slot)]);
  if (need > computeWaitedFor_) {
    be.wait(compute, *collectiveDone_[size_t(need - runFirstCollective_ - 1)]);
    computeWaitedFor_ = need;
  }
  Event &start = nextEvent();
  be.record(start, compute);
  if (pr.kernel) {
    pr.kernel->enqueue(pr.args, compute);
  } else if (pr.isShardOffset) { // the value is the rank's own
    be.copyFromHost(pr.args.out[0].data, &pr.shardOffset, sizeof pr.shardOffset,
                    compute);
  } else { // microbatch_slice: this micro-batch's rows of the whole batch
    const InstrDecl &ins = *pr.decl;
    const kernels::TensorArg &in = pr.args.in[0], &out = pr.args.out[0];
    const AxisBlocks b = blocks(in.shape, ins.axis, dtypeSize(in.dtype));
    const int64_t q = out.shape[size_t(ins.axis)];
    extractAxis(be, compute, static_cast<const char *>(in.data), b,
                std::max(microbatch, 0) * q, q, static_cast<char *>(out.data));
  }
  Event &end = nextEvent();
  be.record(end, compute);
  enqueued_.push_back({&pr, index, &start, &end, {}, microbatch});
}

void RankExecutor::enqueueCollective(Prepared &pr, int index, int microbatch) {
  Backend &be = *backend_;
  Stream &comm = be.commStream();
  // After everything the compute stream was given so far.
  Event &ready = nextEvent();
  be.record(ready, be.computeStream());
  be.wait(comm, ready);
  Event &start = nextEvent();
  be.record(start, comm);
  enqueued_.push_back({&pr, index, &start, nullptr, {}, microbatch});
  if (pr.decl->pipe != PipeOp::None)
    runPipeMessage(pr, microbatch, enqueued_.back().traffic);
  else if (pr.bucket)
    runBucketMember(pr, enqueued_.back().traffic);
  else
    runCollective(pr, enqueued_.back().traffic);
  Event &end = nextEvent();
  be.record(end, comm);
  enqueued_.back().end = &end;
  const uint64_t seq = ++collectivesEnqueued_;
  collectiveDone_.push_back(&end);
  for (int slot : pr.slots)
    slotBusyUntil_[size_t(slot)] = seq;
  // The bucket's reduction writes every member's result.
  if (pr.lastInBucket())
    for (int member : pr.bucket->members)
      for (int slot : instrs_[size_t(member)].slots)
        slotBusyUntil_[size_t(slot)] = seq;
}

void RankExecutor::enqueueList(List &list, int chunk, int microbatch,
                               std::string &first, bool evaluation) {
  const ProgramDecl &p = program();
  const std::vector<char *> *copy = nullptr;
  if (chunk >= 0)
    copy = &live_.at({chunk, microbatch});
  const std::string where = chunk >= 0
                                ? ", micro-batch " + std::to_string(microbatch)
                                : std::string();
  for (size_t i = 0; i < list.size(); ++i) {
    Prepared &pr = list[i];
    if (evaluation && !pr.decl->evaluation)
      continue;
    for (auto &[isOut, arg, slot] : pr.perMicroBatch)
      (isOut ? pr.args.out : pr.args.in)[size_t(arg)].data =
          (*copy)[size_t(indexInChunk_[size_t(slot)])];
    progress::setInstruction(int64_t(i));
    try {
      if (pr.comm)
        enqueueCollective(pr, int(i), chunk >= 0 ? microbatch : -1);
      else
        enqueueKernel(pr, int(i), chunk >= 0 ? microbatch : -1);
      if (overflowArmed_ && !evaluation && &list == &instrs_ &&
          int(i) == overflowInstr_)
        poisonGradient(pr.comm != nullptr);
    } catch (const CommFailure &e) {
      // The ranks cannot stay matched any more: stop here.
      throw CommFailure("program '" + p.name + "' instruction " +
                        std::to_string(i) + " (" + pr.where + where +
                        "): " + e.what());
    } catch (const std::exception &e) {
      if (!enqueued_.empty() && !enqueued_.back().end)
        enqueued_.pop_back();
      if (first.empty())
        first = "program '" + p.name + "' instruction " + std::to_string(i) +
                " (" + pr.decl->op + where + "): " + e.what();
    }
  }
}

bool RankExecutor::injectOverflowNextRun() {
  overflowArmed_ = overflowBuffer_ >= 0;
  return overflowArmed_;
}

void RankExecutor::poisonGradient(bool afterCollective) {
  // +inf in the gradient's dtype, written on the compute stream after the
  // instruction (and its collective, if it is one: one order on the CPU;
  // a device backend orders copies on the compute stream).
  const DType d = program().buffers[size_t(overflowBuffer_)].dtype;
  const float inf = bitsFloat(0x7f800000u);
  const uint16_t low = isLowPrecision(d) ? f32ToLow(d, inf) : 0;
  Stream &compute = backend_->computeStream();
  if (afterCollective)
    backend_->wait(compute, *collectiveDone_.back());
  backend_->copyFromHost(bufPtr_[size_t(overflowBuffer_)],
                         isLowPrecision(d) ? static_cast<const void *>(&low)
                                           : &inf,
                         dtypeSize(d), compute);
}

std::string RankExecutor::run() { return runStep(false); }

std::string RankExecutor::runEvaluation() {
  if (!a_.hasEvaluation())
    throw Error(a_.label + ": the artifact has no evaluation section "
                           "(compiled by an older dtc): compile it again");
  return runStep(true);
}

std::string RankExecutor::runStep(bool evaluation) {
  CountScratch counting(scratch_);
  std::string first;
  const ProgramDecl &p = program();
  if (!viewError_.empty()) {
    first = viewError_;
    viewError_.clear();
  }
  backend_->attachThread();
  // An evaluation leaves the step's counters alone (--stats describes
  // training steps).
  if (!evaluation) {
    for (auto &kinds : stats_.perStepByComm)
      kinds.fill({});
    for (auto &kind : stats_.perStep)
      kind = {};
    stats_.sendRecvPerStep = {};
  }
  eventsUsed_ = 0;
  enqueued_.clear();
  collectiveDone_.clear();
  runFirstCollective_ = collectivesEnqueued_;
  const int64_t traceStart = trace_ ? TraceWriter::nowNs() : 0;
  Event &runStart = nextEvent();
  backend_->record(runStart, backend_->computeStream());
  if (a_.pipeline.present)
    enqueuePipelineStep(first, evaluation);
  else
    enqueueList(instrs_, -1, 0, first, evaluation);
  progress::setInstruction(-1);
  if (!evaluation)
    overflowArmed_ = false;
  // The step ends when the device is done with it.
  try {
    backend_->synchronize();
  } catch (const CommFailure &e) {
    throw CommFailure("program '" + p.name + "': " + e.what());
  } catch (const std::exception &e) {
    if (first.empty())
      first = "program '" + p.name + "': " + e.what();
  }
  computeWaitedFor_ = collectivesEnqueued_;
  if (a_.pipeline.present) {
    // The sends still in flight complete (their copies may go).
    try {
      for (auto &comm : comms_)
        comm->flushSends();
    } catch (const CommFailure &e) {
      throw CommFailure("program '" + p.name + "': " + e.what());
    }
  }
  if (evaluation) {
    if (trace_)
      trace_->complete(TraceWriter::kSteps, "program '" + p.name + "'",
                       "evaluation", traceStart, TraceWriter::nowNs(), "{}");
    return first;
  }
  if (stats_.runs == 1) {
    // The second run: the warm-up's times leave the table (the entries
    // stay, the instructions point at them).
    for (auto &[op, seconds] : stats_.secondsByOp)
      seconds = 0;
    for (auto &[key, row] : stats_.byKernelShape)
      row = {};
    stats_.timedRuns = 0;
  }
  account(runStart, traceStart);
  ++stats_.timedRuns;
  for (int k = 0; k < kNumCollKinds; ++k) {
    stats_.collectives[k].calls += stats_.perStep[k].calls;
    stats_.collectives[k].bytes += stats_.perStep[k].bytes;
    stats_.collectives[k].sentBytes += stats_.perStep[k].sentBytes;
    stats_.collectives[k].receivedBytes += stats_.perStep[k].receivedBytes;
  }
  stats_.sendRecv.calls += stats_.sendRecvPerStep.calls;
  stats_.sendRecv.bytes += stats_.sendRecvPerStep.bytes;
  stats_.sendRecv.sentBytes += stats_.sendRecvPerStep.sentBytes;
  stats_.sendRecv.receivedBytes += stats_.sendRecvPerStep.receivedBytes;
  ++stats_.runs;
  if (trace_) {
    const int64_t end = TraceWriter::nowNs();
    trace_->complete(TraceWriter::kSteps, "program '" + p.name + "'", "run",
                     traceStart, end,
                     "{\"run\":" + std::to_string(stats_.runs - 1) + "}");
    traceMemory(end);
  }
  return first;
}

} // namespace dtc::rt
