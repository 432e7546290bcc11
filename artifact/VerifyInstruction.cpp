//===- VerifyInstruction.cpp - one instruction of a program ---------------===//
#include "Parser.h"
#include "dtc/kernels/Kernel.h"

#include <algorithm>

namespace dtc::artifact::detail {

namespace {
/// What a kernel's check rule sees of buffers `ids` of `p`.
std::vector<kernels::TensorDesc> operandDescs(const ProgramDecl &p,
                                              const std::vector<int> &ids) {
  std::vector<kernels::TensorDesc> d;
  for (int id : ids)
    d.push_back({p.buffers[size_t(id)].dtype, p.buffers[size_t(id)].shape});
  return d;
}
} // namespace

void Parser::checkArity(const InstrDecl &ins, size_t nin, size_t nout,
                        size_t optional, const std::string &w) const {
  if (ins.in.size() < nin || ins.in.size() > nin + optional ||
      ins.out.size() != nout)
    fail(w, "expects " + std::to_string(nin) +
                (optional ? " to " + std::to_string(nin + optional)
                          : std::string()) +
                " input(s) and " + std::to_string(nout) + " output(s), got " +
                std::to_string(ins.in.size()) + " and " +
                std::to_string(ins.out.size()));
}

void Parser::checkInstruction(const Artifact &a, const ProgramDecl &p,
                              InstrDecl &ins, const std::string &w) {
  std::vector<std::pair<int, int>> inPlace;
  if (parsePipeOp(ins.op, ins.pipe)) {
    checkPipelineInstruction(a, p, ins, w);
    if (ins.pipe == PipeOp::Accumulate)
      inPlace.push_back({0, 0});
  } else if (parseCollectiveKind(ins.op, ins.coll)) {
    inPlace = checkCollective(a, p, ins, w);
  } else {
    inPlace = checkKernel(a, p, ins, w);
  }
  checkAliasing(p, ins, inPlace, w);
}

std::vector<std::pair<int, int>> Parser::checkCollective(const Artifact &a,
                                                         const ProgramDecl &p,
                                                         InstrDecl &ins,
                                                         const std::string &w) {
  std::vector<std::pair<int, int>> inPlace;
  ins.isCollective = true;
  if (ins.op == collectiveKindName(CollectiveKind::MoeExchange))
    return checkMoeExchange(a, p, ins, w);
  checkArity(ins, 1, 1, 0, w);
  const BufferDecl &in = p.buffers[size_t(ins.in[0])],
                   &out = p.buffers[size_t(ins.out[0])];
  const json &at = ins.attrs;
  auto attrStr = [&](const char *k) {
    return str(req(at, k, w), w + ": attribute '" + k + "'");
  };
  auto attrAxis = [&](const char *k) {
    int64_t ax = integer(req(at, k, w), w + ": attribute '" + k + "'");
    if (ax < 0 || ax >= int64_t(in.shape.size()))
      fail(w, std::string("attribute '") + k + "' = " + std::to_string(ax) +
                  " is out of range for a rank-" +
                  std::to_string(in.shape.size()) + " operand");
    return int(ax);
  };
  std::string cname = attrStr("comm");
  ins.comm = a.findComm(cname);
  if (ins.comm < 0)
    fail(w, "communicator '" + cname + "' is not declared");
  const int64_t n = a.mesh.groupSize(a.comms[size_t(ins.comm)].meshAxes);
  if (in.dtype != out.dtype)
    fail(w, std::string("input and output dtypes differ (") +
                dtypeName(in.dtype) + " vs " + dtypeName(out.dtype) + ")");
  Shape expect = in.shape;
  auto reduction = [&]() {
    std::string r = attrStr("reduction");
    if (!parseReduceOp(r, ins.reduce))
      fail(w, "unknown reduction \"" + r + "\" (expected " +
                  reduceOpNameList() + ")");
    if (ins.reduce == ReduceOp::Average && !isFloat(in.dtype))
      fail(w, "reduction \"average\" needs a float operand");
  };
  auto divides = [&](int ax) {
    if (in.shape[size_t(ax)] % n != 0)
      fail(w, "dimension " + std::to_string(ax) + " of size " +
                  std::to_string(in.shape[size_t(ax)]) +
                  " is not divisible by the group size " + std::to_string(n));
  };
  if (const json *bucket = opt(at, "bucket")) {
    if (ins.coll != CollectiveKind::AllReduce &&
        ins.coll != CollectiveKind::ReduceScatter &&
        ins.coll != CollectiveKind::AllGather)
      fail(w, "attribute 'bucket' is for all_reduce, reduce_scatter and "
              "all_gather");
    int64_t id = integer(*bucket, w + ": attribute 'bucket'");
    if (id < 0 || id > (int64_t(1) << 30))
      fail(w, "attribute 'bucket' = " + std::to_string(id) +
                  " is not a bucket id (0 to 2^30)");
    ins.bucket = int(id); // the artifact's id; checkBuckets renumbers
  }
  switch (ins.coll) {
  case CollectiveKind::AllReduce:
    reduction();
    inPlace.push_back({0, 0});
    break;
  case CollectiveKind::AllGather:
    ins.axis = attrAxis("axis");
    expect[size_t(ins.axis)] *= n;
    break;
  case CollectiveKind::ReduceScatter:
    reduction();
    ins.axis = attrAxis("axis");
    divides(ins.axis);
    expect[size_t(ins.axis)] /= n;
    break;
  case CollectiveKind::AllSlice:
    ins.axis = attrAxis("axis");
    divides(ins.axis);
    expect[size_t(ins.axis)] /= n;
    break;
  case CollectiveKind::AllToAll:
    ins.splitAxis = attrAxis("split_axis");
    ins.concatAxis = attrAxis("concat_axis");
    divides(ins.splitAxis);
    expect[size_t(ins.splitAxis)] /= n;
    expect[size_t(ins.concatAxis)] *= n;
    break;
  case CollectiveKind::MoeExchange: // checkMoeExchange
    break;
  case CollectiveKind::Shift: {
    const int64_t off =
        integer(req(at, "offset", w), w + ": attribute 'offset'");
    if (off <= -n || off >= n)
      fail(w, "attribute 'offset' = " + std::to_string(off) +
                  " is not a shift within the group of " + std::to_string(n));
    ins.offset = int(off);
    break;
  }
  }
  if (out.shape != expect)
    fail(w, "output shape " + shapeStr(out.shape) + " should be " +
                shapeStr(expect) + " (input " + shapeStr(in.shape) +
                ", group size " + std::to_string(n) + ")");
  return inPlace;
}

std::vector<std::pair<int, int>>
Parser::checkMoeExchange(const Artifact &a, const ProgramDecl &p,
                         InstrDecl &ins, const std::string &w) {
  checkArity(ins, 3, 1, 0, w);
  const BufferDecl &data = p.buffers[size_t(ins.in[0])],
                   &experts = p.buffers[size_t(ins.in[1])],
                   &positions = p.buffers[size_t(ins.in[2])],
                   &out = p.buffers[size_t(ins.out[0])];
  const json &at = ins.attrs;
  const std::string cname = str(req(at, "comm", w), w + ": attribute 'comm'");
  ins.comm = a.findComm(cname);
  if (ins.comm < 0)
    fail(w, "communicator '" + cname + "' is not declared");
  const json &direction = req(at, "to_experts", w);
  if (!direction.is_boolean())
    fail(w, "attribute 'to_experts' must be true or false");
  ins.toExperts = direction.get<bool>();
  const int64_t n = a.mesh.groupSize(a.comms[size_t(ins.comm)].meshAxes);
  if (experts.dtype != DType::I32 || positions.dtype != DType::I32 ||
      experts.shape.size() != 2 || positions.shape != experts.shape)
    fail(w, "the routing (inputs 1 and 2) must be two i32 [T, k] tensors, "
            "got " +
                shapeStr(experts.shape) + " and " + shapeStr(positions.shape));
  if (!isFloat(data.dtype) || out.dtype != data.dtype)
    fail(w, "the rows must be float, in and out of one dtype (" +
                std::string(dtypeName(data.dtype)) + " vs " +
                dtypeName(out.dtype) + ")");
  if (data.shape.size() != 3 || out.shape.size() != 3 ||
      data.shape[2] != out.shape[2])
    fail(w, "input " + shapeStr(data.shape) + " and output " +
                shapeStr(out.shape) + " must be rank 3 with one row width");
  const Shape &slots = ins.toExperts ? data.shape : out.shape;
  if (slots[0] * n != experts.shape[0] || slots[1] != experts.shape[1])
    fail(w, "the token slots " + shapeStr(slots) +
                " must be [T/n, k, D] for "
                "the routing " +
                shapeStr(experts.shape) + " over a group of " +
                std::to_string(n));
  return {};
}

std::vector<std::pair<int, int>> Parser::checkKernel(const Artifact &a,
                                                     const ProgramDecl &p,
                                                     const InstrDecl &ins,
                                                     const std::string &w) {
  const kernels::KernelInfo *k = kernels::findKernel(ins.op);
  if (k && ins.op == "shard_offset") {
    // Rank-dependent: its mesh axes must exist on this mesh (the one fact
    // the kernel's rule cannot know; it checks the rest).
    const json *axes = opt(ins.attrs, "grid_axes");
    if (axes && axes->is_array())
      for (const json &ax : *axes)
        if (ax.is_number_integer() && ax.get<int64_t>() >= a.mesh.numAxes())
          fail(w, "attribute 'grid_axes' names mesh axis " +
                      std::to_string(ax.get<int64_t>()) + " beyond the mesh " +
                      a.mesh.str());
  }
  if (!k)
    fail(w, "unknown kernel \"" + ins.op + "\"");
  checkArity(ins, size_t(k->numIn), size_t(k->numOut), size_t(k->numOptionalIn),
             w);
  std::string verdict = kernels::checkRule(*k, operandDescs(p, ins.in),
                                           operandDescs(p, ins.out), ins.attrs);
  if (!verdict.empty())
    fail(w, verdict);
  return k->inPlace;
}

// An output may share memory (buffer or slot) with an input only where the
// op runs in place; outputs never share memory with each other.
void Parser::checkAliasing(const ProgramDecl &p, const InstrDecl &ins,
                           const std::vector<std::pair<int, int>> &inPlace,
                           const std::string &w) {
  for (size_t o = 0; o < ins.out.size(); ++o) {
    const int os = p.buffers[size_t(ins.out[o])].slot;
    for (size_t i = 0; i < ins.in.size(); ++i) {
      if (p.buffers[size_t(ins.in[i])].slot != os)
        continue;
      bool ok = std::find(inPlace.begin(), inPlace.end(),
                          std::make_pair(int(o), int(i))) != inPlace.end();
      if (!ok)
        fail(w, "output " + std::to_string(o) + " (buffer " +
                    std::to_string(ins.out[o]) + ") shares memory with input " +
                    std::to_string(i) + " (buffer " +
                    std::to_string(ins.in[i]) + "), but " + ins.op +
                    " cannot run in place there");
    }
    for (size_t o2 = 0; o2 < o; ++o2)
      if (p.buffers[size_t(ins.out[o2])].slot == os)
        fail(w, "outputs " + std::to_string(o2) + " and " + std::to_string(o) +
                    " share memory (slot " + std::to_string(os) + ")");
  }
}

void Parser::checkPipelineInstruction(const Artifact &a, const ProgramDecl &p,
                                      InstrDecl &ins, const std::string &w) {
  if (!a.pipeline.present)
    fail(
        w,
        "a pipeline instruction in an artifact without a \"pipeline\" section");
  const json &at = ins.attrs;
  auto counts = [&](size_t nin, size_t nout) {
    if (ins.in.size() != nin || ins.out.size() != nout)
      fail(w, "expects " + std::to_string(nin) + " input(s) and " +
                  std::to_string(nout) + " output(s), got " +
                  std::to_string(ins.in.size()) + " and " +
                  std::to_string(ins.out.size()));
  };
  auto buf = [&](int id) -> const BufferDecl & {
    return p.buffers[size_t(id)];
  };
  switch (ins.pipe) {
  case PipeOp::Send:
  case PipeOp::Recv: {
    if (ins.pipe == PipeOp::Send)
      counts(1, 0);
    else
      counts(0, 1);
    std::string cname = str(req(at, "comm", w), w + ": attribute 'comm'");
    ins.comm = a.findComm(cname);
    if (ins.comm < 0)
      fail(w, "communicator '" + cname + "' is not declared");
    const int64_t n = a.mesh.groupSize(a.comms[size_t(ins.comm)].meshAxes);
    int64_t peer = integer(req(at, "peer", w), w + ": attribute 'peer'");
    if (peer < 0 || peer >= n)
      fail(w, "peer " + std::to_string(peer) +
                  " is not a member of communicator '" + cname + "' (" +
                  std::to_string(n) + " members)");
    ins.peer = int(peer);
    ins.message = integer(req(at, "message", w), w + ": attribute 'message'");
    if (ins.message < 0 || ins.message > (int64_t(1) << 20))
      fail(w, "message id " + std::to_string(ins.message) + " is out of range");
    break;
  }
  case PipeOp::MicrobatchSlice: {
    counts(1, 1);
    const BufferDecl &in = buf(ins.in[0]), &out = buf(ins.out[0]);
    int64_t axis = integer(req(at, "axis", w), w + ": attribute 'axis'");
    if (axis < 0 || axis >= int64_t(in.shape.size()))
      fail(w, "attribute 'axis' = " + std::to_string(axis) +
                  " is out of range for a rank-" +
                  std::to_string(in.shape.size()) + " operand");
    ins.axis = int(axis);
    Shape expect = in.shape;
    if (expect[size_t(axis)] % a.pipeline.microbatches != 0)
      fail(w, "dimension " + std::to_string(axis) + " of size " +
                  std::to_string(expect[size_t(axis)]) +
                  " does not split into " +
                  std::to_string(a.pipeline.microbatches) + " micro-batches");
    expect[size_t(axis)] /= a.pipeline.microbatches;
    if (in.dtype != out.dtype || out.shape != expect)
      fail(w, "output " + std::string(dtypeName(out.dtype)) +
                  shapeStr(out.shape) + " should be " + dtypeName(in.dtype) +
                  shapeStr(expect));
    break;
  }
  case PipeOp::Accumulate: {
    counts(1, 1);
    const BufferDecl &in = buf(ins.in[0]), &out = buf(ins.out[0]);
    if (in.dtype != out.dtype || in.shape != out.shape)
      fail(w, "accumulates " + std::string(dtypeName(in.dtype)) +
                  shapeStr(in.shape) + " into " + dtypeName(out.dtype) +
                  shapeStr(out.shape));
    break;
  }
  case PipeOp::Fill:
    counts(0, 1);
    ins.fillValue = number(req(at, "value", w), w + ": attribute 'value'");
    break;
  case PipeOp::None:
    break;
  }
}

} // namespace dtc::artifact::detail
