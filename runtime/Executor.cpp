//===- Executor.cpp - run one rank's program -------------------------------===//
#include "dtc/runtime/Executor.h"
#include "dtc/runtime/Progress.h"
#include "dtc/runtime/Random.h"

#include <cstdlib>
#include <chrono>
#include <cstring>
#include <new>

#include <sched.h>

namespace dtc::rt {

int defaultKernelThreads(int ranksOnNode) {
  for (const char *var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
    if (const char *v = std::getenv(var)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  // The cores this process may run on (its affinity mask, which a launcher
  // binding ranks to cores narrows), shared by the ranks of the node unless
  // the mask is already this rank's own.
  cpu_set_t set;
  int cores = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
  if (cores <= 0) cores = 1;
  const int per = cores / (ranksOnNode < 1 ? 1 : ranksOnNode);
  return per < 1 ? 1 : per;
}

struct RankExecutor::Prepared {
  const InstrDecl *decl = nullptr;
  kernels::RunFn fn = nullptr;
  kernels::KernelArgs args;
  // kernels: the --stats row this instruction adds to
  ExecStats::KernelShapeStats *shapeStats = nullptr;
  double flops = 0;
  // collectives
  Communicator *comm = nullptr;
  uint64_t dataBytes = 0;
  std::string where; ///< "all_reduce on communicator 'dp' (ranks 0, 1) of f32[8, 4]"
  // shard_offset: this rank's value, from its mesh coordinates
  bool isShardOffset = false;
  int64_t shardOffset = 0;
  // A float kernel on bf16/f16 operands runs on f32 copies: `conversions`
  // says which operands (index into args.in or args.out) and where their
  // copies live in the conversion scratch (byte offsets until the scratch
  // exists); `original` are the operands as the program declares them.
  struct Conversion {
    bool output;
    size_t index, offset;
  };
  std::vector<Conversion> conversions;
  std::vector<kernels::TensorArg> originalIn, originalOut;
};

namespace {
/// "ranks 0, 1, 2" (the first few of a large group, and how many).
std::string groupRanks(const Artifact &a, const CommDecl &c, const std::vector<int64_t> &coords) {
  const int64_t color = a.mesh.groupColor(coords, c.meshAxes);
  std::string s;
  int64_t n = 0;
  for (int64_t r = 0; r < a.devices; ++r) {
    if (a.mesh.groupColor(a.mesh.coords(r), c.meshAxes) != color) continue;
    if (n < 8) s += (n ? ", " : "") + std::to_string(r);
    ++n;
  }
  if (n > 8) s += ", ... (" + std::to_string(n) + " ranks)";
  return "rank" + std::string(n == 1 ? " " : "s ") + s;
}

/// Bytes of packing an axis-wise collective needs beyond its buffers.
size_t stagingFor(const InstrDecl &ins, const kernels::TensorArg &in,
                  const kernels::TensorArg &out) {
  auto outerOf = [](const Shape &s, int axis) {
    int64_t outer = 1;
    for (int i = 0; i < axis; ++i) outer *= s[size_t(i)];
    return outer;
  };
  const size_t elem = dtypeSize(in.dtype);
  switch (ins.coll) {
  case CollKind::AllGather:
    return outerOf(out.shape, ins.axis) == 1 ? 0 : size_t(out.numel) * elem;
  case CollKind::ReduceScatter:
    return outerOf(in.shape, ins.axis) == 1 ? 0 : size_t(in.numel) * elem;
  case CollKind::AllToAll:
    return 2 * size_t(in.numel) * elem;
  default:
    return 0;
  }
}
constexpr int kStaging = kNumMemCategories; // allocation category of staging
} // namespace

char *RankExecutor::allocate(size_t bytes, int category) {
  const size_t size = (bytes + 63) / 64 * 64 + 64;
  void *mem = std::aligned_alloc(64, size);
  if (!mem)
    throw Error(a_.label + ": cannot allocate " + std::to_string(bytes) + " bytes for " +
                (category == kStaging ? std::string("collective staging")
                                      : std::string("a ") + memCategoryName(MemCategory(category)) +
                                            " slot"));
  std::memset(mem, 0, size);
  allocations_.push_back(static_cast<char *>(mem));
  // Nothing is freed before the executor goes: current == high-water.
  if (category == kStaging)
    stagingAllocated_ += size;
  else
    stats_.memoryBytes[category] += size;
  return static_cast<char *>(mem);
}

const ExecStats &RankExecutor::stats() const {
  // The communicators' ring scratch grows on demand: add its high-water.
  stats_.stagingBytes = stagingAllocated_;
  for (const auto &c : comms_) stats_.stagingBytes += c->scratchBytes();
  stats_.totalMemoryBytes = stats_.stagingBytes;
  for (uint64_t bytes : stats_.memoryBytes) stats_.totalMemoryBytes += bytes;
  return stats_;
}

RankExecutor::RankExecutor(const Artifact &a, World &world, const std::string &backend)
    : a_(a), world_(world) {
  rank_ = world.rank();
  checkRankCount(a, world.size());
  prog_ = a.programOf(rank_);
  coords_ = a.mesh.coords(rank_);
  // Collective: every rank creates every communicator, in artifact order.
  for (const CommDecl &c : a.comms) {
    try {
      comms_.push_back(world.split(int(a.mesh.groupColor(coords_, c.meshAxes)),
                                   int(a.mesh.groupIndex(coords_, c.meshAxes))));
    } catch (const CommFailure &e) {
      throw CommFailure(a.label + ": creating communicator '" + c.name + "' (" +
                        std::to_string(comms_.size() + 1) + " of the artifact's " +
                        std::to_string(a.comms.size()) + "): " + e.what());
    }
  }

  if (backend == "cuda")
    throw Error("this build of dtc has no CUDA backend yet; use --backend cpu");
  if (backend != "cpu")
    throw Error("unknown backend '" + backend + "' (expected cpu or cuda)");

  const ProgramDecl &p = program();
  for (const SlotDecl &s : p.slots)
    slotMem_.push_back(allocate(size_t(s.bytes), int(s.category)));
  for (const BufferDecl &b : p.buffers) bufPtr_.push_back(slotMem_[size_t(b.slot)]);

  auto arg = [&](int id) {
    kernels::TensorArg t;
    const BufferDecl &b = p.buffers[size_t(id)];
    t.dtype = b.dtype;
    t.shape = b.shape;
    t.data = bufPtr_[size_t(id)];
    t.numel = numel(b.shape);
    return t;
  };
  stats_.perStepByComm.assign(a.comms.size(), {});
  std::vector<std::string> groupNames(a.comms.size());
  for (const InstrDecl &ins : p.instructions) {
    Prepared pr;
    pr.decl = &ins;
    for (int id : ins.in) pr.args.in.push_back(arg(id));
    for (int id : ins.out) pr.args.out.push_back(arg(id));
    pr.args.attrs = &ins.attrs;
    if (ins.isCollective) {
      pr.comm = comms_[size_t(ins.comm)].get();
      const uint64_t inB = p.buffers[size_t(ins.in[0])].bytes(),
                     outB = p.buffers[size_t(ins.out[0])].bytes();
      pr.dataBytes = inB > outB ? inB : outB;
      stagingSize_ = std::max(stagingSize_, stagingFor(ins, pr.args.in[0], pr.args.out[0]));
      const BufferDecl &inBuf = p.buffers[size_t(ins.in[0])];
      std::string &members = groupNames[size_t(ins.comm)];
      if (members.empty()) members = groupRanks(a, a.comms[size_t(ins.comm)], coords_);
      pr.where = ins.op + " on communicator '" + a.comms[size_t(ins.comm)].name + "' (" +
                 members + ") of " + dtypeName(inBuf.dtype) + shapeStr(inBuf.shape);
    } else if (ins.op == "shard_offset") {
      // The rank's index over grid_axes times piece_size (docs/kernels.md).
      std::vector<int> axes;
      for (int64_t ax : kernels::attrInts(ins.attrs, "grid_axes")) axes.push_back(int(ax));
      pr.isShardOffset = true;
      pr.shardOffset = a.mesh.groupIndex(coords_, axes) * kernels::attrInt(ins.attrs, "piece_size");
    } else {
      pr.fn = kernels::cpu::findKernel(ins.op);
      if (!pr.fn)
        throw Error(a.label + ": kernel '" + ins.op + "' has no " + backend + " implementation");
      pr.args.ctx = &kernelCtx_;
      std::vector<kernels::TensorDesc> in, out;
      std::string key = ins.op;
      for (const kernels::TensorArg &t : pr.args.in) in.push_back({t.dtype, t.shape});
      for (const kernels::TensorArg &t : pr.args.out) out.push_back({t.dtype, t.shape});
      pr.flops = kernels::flopCount(ins.op, in, out, ins.attrs);
      for (size_t k = 0; k < in.size(); ++k) {
        key += k ? " * " : " ";
        for (size_t d = 0; d < in[k].shape.size(); ++d)
          key += (d ? "x" : "") + std::to_string(in[k].shape[d]);
      }
      for (const char *flag : {"transpose_a", "transpose_b", "causal"})
        if (ins.attrs.is_object() && ins.attrs.value(flag, false) == true) key += std::string(" ") + flag;
      for (const kernels::TensorArg &t : pr.args.in)
        if (isLowPrecision(t.dtype)) key += std::string(" ") + dtypeName(t.dtype);
      pr.shapeStats = &stats_.byKernelShape[key];
      // Kernels compute in f32: bf16/f16 operands go through f32 copies.
      if (!kernels::cpu::handlesLowPrecision(ins.op)) {
        size_t bytes = 0;
        auto plan = [&](std::vector<kernels::TensorArg> &args, bool output) {
          for (size_t i = 0; i < args.size(); ++i)
            if (isLowPrecision(args[i].dtype)) {
              pr.conversions.push_back({output, i, bytes});
              bytes += (size_t(args[i].numel) * sizeof(float) + 63) / 64 * 64;
            }
        };
        pr.originalIn = pr.args.in;
        pr.originalOut = pr.args.out;
        plan(pr.args.in, false);
        plan(pr.args.out, true);
        conversionSize_ = std::max(conversionSize_, bytes);
      }
    }
    instrs_.push_back(std::move(pr));
  }
  for (size_t i = 0; i < p.instructions.size() && overflowInstr_ < 0; ++i)
    for (int b : p.instructions[i].out) {
      const BufferDecl &bd = p.buffers[size_t(b)];
      if (p.slots[size_t(bd.slot)].category == MemCategory::Grad && isFloat(bd.dtype) &&
          numel(bd.shape) > 0) {
        overflowInstr_ = int(i);
        overflowBuffer_ = b;
        break;
      }
    }
  if (stagingSize_ > 0) staging_ = allocate(stagingSize_, kStaging);
  if (conversionSize_ > 0) {
    char *scratch = allocate(conversionSize_, kStaging);
    for (Prepared &pr : instrs_)
      for (const Prepared::Conversion &c : pr.conversions) {
        kernels::TensorArg &t = c.output ? pr.args.out[c.index] : pr.args.in[c.index];
        t.dtype = DType::F32;
        t.data = scratch + c.offset;
      }
  }

  for (const ConstantDecl &c : p.constants) {
    const BufferDecl &b = p.buffers[size_t(c.buffer)];
    void *dst = bufPtr_[size_t(c.buffer)];
    if (!c.isSplat) {
      std::memcpy(dst, c.data.data(), c.data.size());
      continue;
    }
    const int64_t n = numel(b.shape);
    for (int64_t i = 0; i < n; ++i) {
      switch (b.dtype) {
      case DType::F32: static_cast<float *>(dst)[i] = float(c.splat); break;
      case DType::I32: static_cast<int32_t *>(dst)[i] = int32_t(c.splat); break;
      case DType::I64: static_cast<int64_t *>(dst)[i] = int64_t(c.splat); break;
      case DType::BF16:
      case DType::F16:
        static_cast<uint16_t *>(dst)[i] = f32ToLow(b.dtype, float(c.splat));
        break;
      }
    }
  }
}

RankExecutor::~RankExecutor() {
  for (char *m : allocations_) std::free(m);
}

bool RankExecutor::holds(int t) const { return a_.bufferOf(prog_, t) >= 0; }

Piece RankExecutor::pieceFor(int t, int64_t r) const {
  const TensorDecl &d = a_.tensors[size_t(t)];
  return pieceOf(a_.mesh, d.sharding, d.shape, a_.mesh.coords(r), d.pieces);
}

LocalTensor RankExecutor::tensor(int t) {
  const int b = a_.bufferOf(prog_, t);
  if (b < 0)
    throw Error("tensor '" + a_.tensors[size_t(t)].name + "' is not held by rank " +
                std::to_string(rank_));
  LocalTensor lt;
  lt.tensor = t;
  lt.decl = &a_.tensors[size_t(t)];
  lt.data = bufPtr_[size_t(b)];
  lt.piece = pieceFor(t, rank_);
  return lt;
}

LocalTensor RankExecutor::tensor(const std::string &name) {
  const int t = a_.findTensor(name);
  if (t < 0) throw Error("the artifact has no tensor named '" + name + "'");
  return tensor(t);
}

void RankExecutor::initPersistent(uint64_t seed) {
  for (size_t t = 0; t < a_.tensors.size(); ++t) {
    const TensorDecl &d = a_.tensors[t];
    if (!holds(int(t))) continue;
    LocalTensor lt = tensor(int(t));
    // Master weights draw their parameter's numbers: the bf16/f16 parameter
    // starts as its master rounded.
    if (d.role == Role::Param || d.role == Role::OptimizerState)
      fillInit(lt.data, d.dtype, d.init, seed, d.kind == "master" ? d.of : d.name, d.shape,
               lt.piece);
    else if (d.role == Role::Step)
      *static_cast<int64_t *>(lt.data) = 0;
  }
}

void RankExecutor::fillSyntheticInputs(uint64_t seed, int64_t step) {
  for (size_t t = 0; t < a_.tensors.size(); ++t) {
    const TensorDecl &d = a_.tensors[t];
    if (d.role != Role::Input || !holds(int(t))) continue;
    LocalTensor lt = tensor(int(t));
    fillSynthetic(lt.data, d.dtype, d.max, seed, d.name, d.shape, lt.piece, step);
  }
}

void RankExecutor::setOptimizerStep(int64_t value) {
  for (int t : a_.tensorsWithRole(Role::Step))
    if (holds(t)) *static_cast<int64_t *>(tensor(t).data) = value;
}

float RankExecutor::loss() {
  return *static_cast<float *>(tensor(a_.tensorsWithRole(Role::Loss).at(0)).data);
}

// ---- collectives ------------------------------------------------------------------

namespace {
struct AxisBlocks {
  int64_t outer = 1, mid = 1; ///< mid = size along the axis
  size_t innerBytes = 1;      ///< bytes of one step along the axis
};
AxisBlocks blocks(const Shape &s, int axis, size_t elem) {
  AxisBlocks b;
  b.innerBytes = elem;
  for (int i = 0; i < int(s.size()); ++i) {
    if (i < axis) b.outer *= s[size_t(i)];
    else if (i == axis) b.mid = s[size_t(i)];
    else b.innerBytes *= size_t(s[size_t(i)]);
  }
  return b;
}
// dst (contiguous, shape s with axis size len) = src[..., start:start+len, ...]
void extractAxis(const char *src, const AxisBlocks &b, int64_t start, int64_t len, char *dst) {
  const size_t row = size_t(len) * b.innerBytes;
  for (int64_t o = 0; o < b.outer; ++o)
    std::memcpy(dst + size_t(o) * row,
                src + (size_t(o) * size_t(b.mid) + size_t(start)) * b.innerBytes, row);
}
// dst[..., start:start+len, ...] = src (contiguous piece)
void insertAxis(const char *src, const AxisBlocks &b, int64_t start, int64_t len, char *dst) {
  const size_t row = size_t(len) * b.innerBytes;
  for (int64_t o = 0; o < b.outer; ++o)
    std::memcpy(dst + (size_t(o) * size_t(b.mid) + size_t(start)) * b.innerBytes,
                src + size_t(o) * row, row);
}
} // namespace

void RankExecutor::runCollective(Prepared &p) {
  const InstrDecl &ins = *p.decl;
  Communicator &c = *p.comm;
  const kernels::TensorArg &in = p.args.in[0], &out = p.args.out[0];
  const size_t elem = dtypeSize(in.dtype);
  const int64_t n = c.size();
  const size_t inBytes = size_t(in.numel) * elem, outBytes = size_t(out.numel) * elem;
  const char *src = static_cast<const char *>(in.data);
  char *dst = static_cast<char *>(out.data);
  switch (ins.coll) {
  case CollKind::AllReduce:
    c.allReduce(in.data, out.data, size_t(in.numel), in.dtype, ins.reduce);
    break;
  case CollKind::AllGather: {
    const AxisBlocks ob = blocks(out.shape, ins.axis, elem);
    if (ob.outer == 1) {
      c.allGather(in.data, out.data, inBytes);
      break;
    }
    char *tmp = staging_;
    c.allGather(in.data, tmp, inBytes);
    const int64_t q = in.shape[size_t(ins.axis)];
    for (int64_t j = 0; j < n; ++j)
      insertAxis(tmp + size_t(j) * inBytes, ob, j * q, q, dst);
    break;
  }
  case CollKind::ReduceScatter: {
    const AxisBlocks ib = blocks(in.shape, ins.axis, elem);
    if (ib.outer == 1) {
      c.reduceScatter(in.data, out.data, size_t(out.numel), in.dtype, ins.reduce);
      break;
    }
    char *tmp = staging_;
    const int64_t q = out.shape[size_t(ins.axis)];
    for (int64_t j = 0; j < n; ++j)
      extractAxis(src, ib, j * q, q, tmp + size_t(j) * outBytes);
    c.reduceScatter(tmp, out.data, size_t(out.numel), in.dtype, ins.reduce);
    break;
  }
  case CollKind::AllSlice: {
    const AxisBlocks ib = blocks(in.shape, ins.axis, elem);
    const int64_t q = out.shape[size_t(ins.axis)];
    extractAxis(src, ib, c.rank() * q, q, dst);
    break;
  }
  case CollKind::AllToAll: {
    const AxisBlocks sb = blocks(in.shape, ins.splitAxis, elem);
    const int64_t q = in.shape[size_t(ins.splitAxis)] / n;
    const size_t pieceBytes = inBytes / size_t(n);
    char *send = staging_, *recv = staging_ + inBytes;
    for (int64_t j = 0; j < n; ++j)
      extractAxis(src, sb, j * q, q, send + size_t(j) * pieceBytes);
    c.allToAll(send, recv, pieceBytes);
    // Each received piece has in's shape with split_axis / n; place it at
    // slot j along concat_axis of the output.
    Shape pieceShape = in.shape;
    pieceShape[size_t(ins.splitAxis)] = q;
    const int64_t pc = pieceShape[size_t(ins.concatAxis)];
    const AxisBlocks ob = blocks(out.shape, ins.concatAxis, elem);
    for (int64_t j = 0; j < n; ++j)
      insertAxis(recv + size_t(j) * pieceBytes, ob, j * pc, pc, dst);
    break;
  }
  }
}

bool RankExecutor::injectOverflowNextRun() {
  overflowArmed_ = overflowInstr_ >= 0;
  return overflowArmed_;
}

std::string RankExecutor::run() {
  std::string first;
  const ProgramDecl &p = program();
  kernels::cpu::bindThreads(kernelCtx_);
  for (auto &kinds : stats_.perStepByComm) kinds.fill({});
  for (auto &kind : stats_.perStep) kind = {};
  for (size_t i = 0; i < instrs_.size(); ++i) {
    Prepared &pr = instrs_[i];
    progress::setInstruction(int64_t(i));
    try {
      auto start = std::chrono::steady_clock::now();
      if (pr.fn && !pr.conversions.empty()) {
        for (const Prepared::Conversion &c : pr.conversions)
          if (!c.output) {
            const kernels::TensorArg &from = pr.originalIn[c.index];
            kernels::cpu::toF32(kernelCtx_, from.dtype, from.data,
                                pr.args.in[c.index].as<float>(), from.numel);
          }
        pr.fn(pr.args);
        for (const Prepared::Conversion &c : pr.conversions)
          if (c.output) {
            const kernels::TensorArg &to = pr.originalOut[c.index];
            kernels::cpu::fromF32(kernelCtx_, to.dtype, pr.args.out[c.index].as<float>(),
                                  to.data, to.numel);
          }
      } else if (pr.fn) {
        pr.fn(pr.args);
      } else if (pr.isShardOffset) {
        *pr.args.out[0].as<int64_t>() = pr.shardOffset;
      } else {
        // Count what the communicator really moves for this instruction.
        const uint64_t sent0 = pr.comm->bytesSent(), received0 = pr.comm->bytesReceived();
        runCollective(pr);
        CollectiveStats &byComm =
            stats_.perStepByComm[size_t(pr.decl->comm)][size_t(pr.decl->coll)];
        for (CollectiveStats *c : {&byComm, &stats_.perStep[int(pr.decl->coll)]}) {
          c->calls += 1;
          c->bytes += pr.dataBytes;
          c->sentBytes += pr.comm->bytesSent() - sent0;
          c->receivedBytes += pr.comm->bytesReceived() - received0;
        }
      }
      if (overflowArmed_ && int(i) == overflowInstr_) {
        const DType d = p.buffers[size_t(overflowBuffer_)].dtype;
        void *at = bufPtr_[size_t(overflowBuffer_)];
        if (d == DType::F32) {
          const float inf = bitsFloat(0x7f800000u);
          std::memcpy(at, &inf, 4);
        } else {
          const uint16_t inf = f32ToLow(d, bitsFloat(0x7f800000u));
          std::memcpy(at, &inf, 2);
        }
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      stats_.secondsByOp[pr.decl->op] += seconds;
      if (pr.shapeStats) {
        pr.shapeStats->calls += 1;
        pr.shapeStats->seconds += seconds;
        pr.shapeStats->flops += pr.flops;
      }
    } catch (const CommFailure &e) {
      // The ranks cannot stay matched any more: stop here.
      throw CommFailure("program '" + p.name + "' instruction " + std::to_string(i) + " (" +
                        pr.where + "): " + e.what());
    } catch (const std::exception &e) {
      if (first.empty())
        first = "program '" + p.name + "' instruction " + std::to_string(i) + " (" +
                pr.decl->op + "): " + e.what();
    }
  }
  progress::setInstruction(-1);
  overflowArmed_ = false;
  for (int k = 0; k < kNumCollKinds; ++k) {
    stats_.collectives[k].calls += stats_.perStep[k].calls;
    stats_.collectives[k].bytes += stats_.perStep[k].bytes;
    stats_.collectives[k].sentBytes += stats_.perStep[k].sentBytes;
    stats_.collectives[k].receivedBytes += stats_.perStep[k].receivedBytes;
  }
  ++stats_.runs;
  return first;
}

} // namespace dtc::rt
