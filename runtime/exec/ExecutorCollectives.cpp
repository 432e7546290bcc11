//===- ExecutorCollectives.cpp - collectives and pipeline messages --------===//
//
// What RankExecutor enqueues on the communication stream: a collective
// (with the packing copies of the axis-wise ones around it) and a
// pipeline's point-to-point messages.
//
//===----------------------------------------------------------------------===//
#include "ExecutorParts.h"

#include <algorithm>

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
  }
}

void RankExecutor::runBucketMember(Prepared &pr, Traffic &traffic) {
  const BucketDecl &b = *pr.bucket;
  Backend &be = *backend_;
  Stream &st = be.commStream();
  const kernels::TensorArg &in = pr.args.in[0];
  const size_t bytes = size_t(in.numel) * dtypeSize(in.dtype);
  be.copy2D(bucketBuffer_ + b.offsets[pr.bucketPosition], bytes, in.data, bytes,
            bytes, 1, st);
  if (!pr.lastInBucket())
    return;
  pr.comm->allReduce(bucketBuffer_, bucketBuffer_, size_t(b.elements), in.dtype,
                     pr.decl->reduce, st, traffic);
  for (size_t m = 0; m < b.members.size(); ++m) {
    const kernels::TensorArg &out = instrs_[size_t(b.members[m])].args.out[0];
    const size_t n = size_t(out.numel) * dtypeSize(out.dtype);
    be.copy2D(out.data, n, bucketBuffer_ + b.offsets[m], n, n, 1, st);
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
