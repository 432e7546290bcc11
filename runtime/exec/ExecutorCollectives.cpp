//===- ExecutorCollectives.cpp - collectives and pipeline messages --------===//
//
// What RankExecutor enqueues on the communication stream: a collective
// (with the packing copies of the axis-wise ones around it) and a
// pipeline's point-to-point messages.
//
//===----------------------------------------------------------------------===//
#include "ExecutorParts.h"

#include <algorithm>
#include <cstring>

namespace dtc::rt {

AxisBlocks blocks(const Shape &s, int axis, size_t elem) {
  AxisBlocks b;
  b.innerBytes = elem;
  for (int i = 0; i < int(s.size()); ++i) {
    if (i < axis)
      b.outer *= s[size_t(i)];
    else if (i == axis)
      b.mid = s[size_t(i)];
    else
      b.innerBytes *= size_t(s[size_t(i)]);
  }
  return b;
}

// dst (contiguous, shape s with axis size len) = src[..., start:start+len, ...]
void extractAxis(Backend &be, Stream &st, const char *src, const AxisBlocks &b,
                 int64_t start, int64_t len, char *dst) {
  const size_t row = size_t(len) * b.innerBytes;
  be.copy2D(dst, row, src + size_t(start) * b.innerBytes,
            size_t(b.mid) * b.innerBytes, row, size_t(b.outer), st);
}

// dst[..., start:start+len, ...] = src (contiguous piece)
void insertAxis(Backend &be, Stream &st, const char *src, const AxisBlocks &b,
                int64_t start, int64_t len, char *dst) {
  const size_t row = size_t(len) * b.innerBytes;
  be.copy2D(dst + size_t(start) * b.innerBytes, size_t(b.mid) * b.innerBytes,
            src, row, row, size_t(b.outer), st);
}

void RankExecutor::runCollective(Prepared &p, Traffic &traffic) {
  const InstrDecl &ins = *p.decl;
  DeviceCommunicator &c = *p.comm;
  Backend &be = *backend_;
  Stream &st = be.commStream();
  const kernels::TensorArg &in = p.args.in[0], &out = p.args.out[0];
  const size_t elem = dtypeSize(in.dtype);
  const int64_t n = c.size();
  const size_t inBytes = size_t(in.numel) * elem,
               outBytes = size_t(out.numel) * elem;
  const char *src = static_cast<const char *>(in.data);
  char *dst = static_cast<char *>(out.data);
  switch (ins.coll) {
  case CollKind::AllReduce:
    c.allReduce(in.data, out.data, size_t(in.numel), in.dtype, ins.reduce, st,
                traffic);
    break;
  case CollKind::AllGather: {
    const AxisBlocks ob = blocks(out.shape, ins.axis, elem);
    if (ob.outer == 1) {
      c.allGather(in.data, out.data, inBytes, st, traffic);
      break;
    }
    char *tmp = staging_;
    c.allGather(in.data, tmp, inBytes, st, traffic);
    const int64_t q = in.shape[size_t(ins.axis)];
    for (int64_t j = 0; j < n; ++j)
      insertAxis(be, st, tmp + size_t(j) * inBytes, ob, j * q, q, dst);
    break;
  }
  case CollKind::ReduceScatter: {
    const AxisBlocks ib = blocks(in.shape, ins.axis, elem);
    if (ib.outer == 1) {
      c.reduceScatter(in.data, out.data, size_t(out.numel), in.dtype,
                      ins.reduce, st, traffic);
      break;
    }
    char *tmp = staging_;
    const int64_t q = out.shape[size_t(ins.axis)];
    for (int64_t j = 0; j < n; ++j)
      extractAxis(be, st, src, ib, j * q, q, tmp + size_t(j) * outBytes);
    c.reduceScatter(tmp, out.data, size_t(out.numel), in.dtype, ins.reduce, st,
                    traffic);
    break;
  }
  case CollKind::AllSlice: {
    const AxisBlocks ib = blocks(in.shape, ins.axis, elem);
    const int64_t q = out.shape[size_t(ins.axis)];
    extractAxis(be, st, src, ib, c.rank() * q, q, dst);
    break;
  }
  case CollKind::AllToAll: {
    const AxisBlocks sb = blocks(in.shape, ins.splitAxis, elem);
    const int64_t q = in.shape[size_t(ins.splitAxis)] / n;
    const size_t pieceBytes = inBytes / size_t(n);
    char *send = staging_, *recv = staging_ + inBytes;
    for (int64_t j = 0; j < n; ++j)
      extractAxis(be, st, src, sb, j * q, q, send + size_t(j) * pieceBytes);
    c.allToAll(send, recv, pieceBytes, st, traffic);
    // Each received piece has in's shape with split_axis / n; place it at
    // slot j along concat_axis of the output.
    Shape pieceShape = in.shape;
    pieceShape[size_t(ins.splitAxis)] = q;
    const int64_t pc = pieceShape[size_t(ins.concatAxis)];
    const AxisBlocks ob = blocks(out.shape, ins.concatAxis, elem);
    for (int64_t j = 0; j < n; ++j)
      insertAxis(be, st, recv + size_t(j) * pieceBytes, ob, j * pc, pc, dst);
    break;
  }
  case CollKind::Shift:
    c.shift(in.data, out.data, inBytes, ins.offset, st, traffic);
    (void)outBytes;
    break;
  case CollKind::MoeExchange:
    runMoeExchange(p, traffic);
    break;
  }
}

namespace {

/// Row copies (source row, destination row), merged into runs where both
/// advance by one.
void copyRows(Backend &be, Stream &st, char *dst, const char *src,
              const std::vector<std::pair<int64_t, int64_t>> &rows,
              size_t rowBytes) {
  for (size_t i = 0; i < rows.size();) {
    size_t run = 1;
    while (i + run < rows.size() &&
           rows[i + run].first == rows[i].first + int64_t(run) &&
           rows[i + run].second == rows[i].second + int64_t(run))
      ++run;
    const size_t bytes = run * rowBytes;
    be.copy2D(dst + size_t(rows[i].second) * rowBytes, bytes,
              src + size_t(rows[i].first) * rowBytes, bytes, bytes, 1, st);
    i += run;
  }
}

} // namespace

// Expert parallelism's exchange (docs/artifact.md "moe_exchange"). Every
// member holds the routing of the group's T tokens, so each knows which
// slot rows every pair of members exchanges, in token order, without a
// count being sent: member m's tokens are [m T/n, (m+1) T/n), its experts
// [m E/n, (m+1) E/n). A slot is kept when its position is in [0, C).
void RankExecutor::runMoeExchange(Prepared &p, Traffic &traffic) {
  const InstrDecl &ins = *p.decl;
  DeviceCommunicator &c = *p.comm;
  Backend &be = *backend_;
  Stream &st = be.commStream();
  const kernels::TensorArg &data = p.args.in[0], &expertsArg = p.args.in[1],
                           &positionsArg = p.args.in[2], &out = p.args.out[0];
  const kernels::TensorArg &buffer = ins.toExperts ? out : data;
  const int n = c.size(), me = c.rank();
  const int64_t tokens = expertsArg.shape[0], topK = expertsArg.shape[1];
  const int64_t localTokens = tokens / n, localExperts = buffer.shape[0],
                capacity = buffer.shape[1], experts = localExperts * n;
  const size_t rowBytes = size_t(data.shape[2]) * dtypeSize(data.dtype);
  const size_t routingBytes = size_t(tokens * topK) * sizeof(int32_t);
  std::vector<int32_t> expertOf(size_t(tokens * topK)),
      positionOf(size_t(tokens * topK));
  be.copyToHost(expertOf.data(), expertsArg.data, routingBytes, st);
  be.copyToHost(positionOf.data(), positionsArg.data, routingBytes, st);

  // rows[s][q]: (slot row at member s, buffer row at member q) of the
  // slots of s's tokens kept by q's experts, in token order.
  using RowList = std::vector<std::pair<int64_t, int64_t>>;
  const size_t members = static_cast<size_t>(n);
  std::vector<std::vector<RowList>> rows(members,
                                         std::vector<RowList>(members));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < topK; ++j) {
      const int64_t e = expertOf[size_t(t * topK + j)],
                    pos = positionOf[size_t(t * topK + j)];
      if (e < 0 || e >= experts)
        throw Error("moe_exchange: expert " + std::to_string(e) +
                    " at position [" + std::to_string(t) + ", " +
                    std::to_string(j) + "] is outside [0, " +
                    std::to_string(experts) + ")");
      if (pos < 0 || pos >= capacity)
        continue; // dropped: over capacity
      const int64_t s = t / localTokens, q = e / localExperts;
      rows[size_t(s)][size_t(q)].push_back(
          {(t - s * localTokens) * topK + j,
           (e - q * localExperts) * capacity + pos});
    }

  // Rows no slot reaches are 0.
  const size_t outBytes = size_t(out.numel) * dtypeSize(out.dtype);
  if (be.hostAddressable()) {
    std::memset(out.data, 0, outBytes);
  } else {
    if (zeros_.size() < outBytes)
      zeros_.assign(outBytes, 0);
    be.copyFromHost(out.data, zeros_.data(), outBytes, st);
  }
  const char *src = static_cast<const char *>(data.data);
  char *dst = static_cast<char *>(out.data);
  char *send = staging_,
       *recv = staging_ + size_t(data.numel) * dtypeSize(data.dtype);
  // Pairs as (row on this member's input, row on its output): a copy.
  auto swapped = [](std::vector<std::pair<int64_t, int64_t>> list) {
    for (auto &[a, b] : list)
      std::swap(a, b);
    return list;
  };
  // (input row, position in the packed message) of an outgoing list.
  auto packed = [](const std::vector<std::pair<int64_t, int64_t>> &list) {
    std::vector<std::pair<int64_t, int64_t>> order;
    for (size_t i = 0; i < list.size(); ++i)
      order.push_back({list[i].first, int64_t(i)});
    return order;
  };
  // What this member sends to q, and receives from s, as row lists.
  auto outgoing = [&](int q) {
    return ins.toExperts ? rows[size_t(me)][size_t(q)]
                         : swapped(rows[size_t(q)][size_t(me)]);
  };
  auto incoming = [&](int s) {
    return ins.toExperts ? rows[size_t(s)][size_t(me)]
                         : swapped(rows[size_t(me)][size_t(s)]);
  };
  // Own rows: straight from input to output.
  copyRows(be, st, dst, src, outgoing(me), rowBytes);
  size_t offset = 0;
  for (int q = 0; q < n; ++q) {
    if (q == me)
      continue;
    const std::vector<std::pair<int64_t, int64_t>> list = outgoing(q);
    if (list.empty())
      continue;
    copyRows(be, st, send + offset, src, packed(list), rowBytes);
    c.send(send + offset, list.size() * rowBytes, q, kMoeExchangeTag, st,
           traffic);
    offset += list.size() * rowBytes;
  }
  offset = 0;
  for (int s = 0; s < n; ++s) {
    if (s == me)
      continue;
    const std::vector<std::pair<int64_t, int64_t>> list = incoming(s);
    if (list.empty())
      continue;
    c.recv(recv + offset, list.size() * rowBytes, s, kMoeExchangeTag, st,
           traffic);
    std::vector<std::pair<int64_t, int64_t>> place;
    for (size_t i = 0; i < list.size(); ++i)
      place.push_back({int64_t(i), list[i].second});
    copyRows(be, st, dst, recv + offset, place, rowBytes);
    offset += list.size() * rowBytes;
  }
}

void RankExecutor::runBucketMember(Prepared &pr, Traffic &traffic) {
  const BucketDecl &b = *pr.bucket;
  Backend &be = *backend_;
  Stream &st = be.commStream();
  const size_t block = size_t(b.bytes);
  const int64_t n = b.groupSize;
  char *buffer = bucketBuffer_;
  const kernels::TensorArg &in = pr.args.in[0];
  const size_t elem = dtypeSize(in.dtype);
  const size_t inBytes = size_t(in.numel) * elem;
  char *share = buffer + b.offsets[pr.bucketPosition];
  if (b.coll == CollKind::ReduceScatter) {
    // Member j's piece along the axis goes to block j.
    const kernels::TensorArg &out = pr.args.out[0];
    const AxisBlocks ib = blocks(in.shape, pr.decl->axis, elem);
    const int64_t q = out.shape[size_t(pr.decl->axis)];
    for (int64_t j = 0; j < n; ++j)
      extractAxis(be, st, static_cast<const char *>(in.data), ib, j * q, q,
                  share + size_t(j) * block);
  } else {
    be.copy2D(share, inBytes, in.data, inBytes, inBytes, 1, st);
  }
  if (!pr.lastInBucket())
    return;
  switch (b.coll) {
  case CollKind::AllReduce:
    pr.comm->allReduce(buffer, buffer, size_t(b.elements), in.dtype,
                       pr.decl->reduce, st, traffic);
    break;
  case CollKind::ReduceScatter:
    pr.comm->reduceScatter(buffer, buffer + size_t(n) * block,
                           size_t(b.elements), in.dtype, pr.decl->reduce, st,
                           traffic);
    buffer += size_t(n) * block;
    break;
  default: // all_gather: every member's block 0 into blocks 1..n
    pr.comm->allGather(buffer, buffer + block, block, st, traffic);
    buffer += block;
    break;
  }
  for (size_t m = 0; m < b.members.size(); ++m) {
    const Prepared &member = instrs_[size_t(b.members[m])];
    const kernels::TensorArg &out = member.args.out[0];
    const char *result = buffer + b.offsets[m];
    if (b.coll != CollKind::AllGather) {
      const size_t bytes = size_t(out.numel) * elem;
      be.copy2D(out.data, bytes, result, bytes, bytes, 1, st);
      continue;
    }
    // Member j's share of block j+1 is the result's piece j along the axis.
    const int axis = member.decl->axis;
    const AxisBlocks ob = blocks(out.shape, axis, elem);
    const int64_t q = member.args.in[0].shape[size_t(axis)];
    for (int64_t j = 0; j < n; ++j)
      insertAxis(be, st, result + size_t(j) * block, ob, j * q, q,
                 static_cast<char *>(out.data));
  }
}

void RankExecutor::runPipeMessage(Prepared &pr, int microbatch,
                                  Traffic &traffic) {
  const InstrDecl &ins = *pr.decl;
  const int64_t M = a_.pipeline.present ? a_.pipeline.microbatches : 1;
  // Message tags: one per (message, micro-batch); once-per-step messages
  // use micro-batch 0.
  const int tag = int(ins.message * M + std::max(microbatch, 0));
  Stream &st = backend_->commStream();
  if (ins.pipe == PipeOp::Send) {
    const kernels::TensorArg &in = pr.args.in[0];
    pr.comm->send(in.data, size_t(in.numel) * dtypeSize(in.dtype), ins.peer,
                  tag, st, traffic);
  } else {
    const kernels::TensorArg &out = pr.args.out[0];
    pr.comm->recv(out.data, size_t(out.numel) * dtypeSize(out.dtype), ins.peer,
                  tag, st, traffic);
  }
}

} // namespace dtc::rt
