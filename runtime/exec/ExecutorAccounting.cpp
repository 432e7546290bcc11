//===- ExecutorAccounting.cpp - counters and the trace of a run
//------------===//
//
// After a run's synchronisation: the time, bytes and traffic of every
// instruction into ExecStats, and the trace's events; the memory counters.
//
//===----------------------------------------------------------------------===//
#include "ExecutorParts.h"
#include "dtc/runtime/Trace.h"

#include <cstdio>

namespace dtc::rt {

uint64_t RankExecutor::persistentBytes() const {
  uint64_t bytes = stagingAllocated_ + backend_->kernelWorkspaceBytes() +
                   backend_->scratchBytes();
  for (const auto &c : comms_)
    bytes += c->scratchBytes();
  for (uint64_t slots : stats_.memoryBytes)
    bytes += slots;
  return bytes;
}

const ExecStats &RankExecutor::stats() const {
  // The communicators' scratch (reserved at load) and the backend's kernel
  // workspace (reserved when the kernels were bound) beside the slots.
  stats_.stagingBytes = stagingAllocated_;
  for (const auto &c : comms_)
    stats_.stagingBytes += c->scratchBytes();
  // bf16/f16 operands' f32 copies of the CPU backend (staging too).
  stats_.stagingBytes += backend_->scratchBytes();
  stats_.workspaceBytes = backend_->kernelWorkspaceBytes() + scratch_.peak();
  // The usual accounting: slot bytes as declared; activations at their
  // peak with the micro-batch copies in flight.
  for (int c = 0; c < kNumMemCategories; ++c)
    stats_.slotBytes[c] = slotBytes_[c];
  stats_.slotBytes[int(MemCategory::Activation)] = stats_.activationPeakBytes;
  scratch_.noteTotal(persistentBytes());
  stats_.totalMemoryBytes = scratch_.peakTotal();
  return stats_;
}

void RankExecutor::account(const Event &runStart, int64_t traceStartNs) {
  Backend &be = *backend_;
  for (Enqueued &e : enqueued_) {
    Prepared &pr = *e.instr;
    const double seconds = be.elapsedSeconds(*e.start, *e.end);
    *pr.opSeconds += seconds;
    if (pr.shapeStats) {
      pr.shapeStats->calls += 1;
      pr.shapeStats->seconds += seconds;
      pr.shapeStats->flops += pr.flops;
    }
    if (pr.comm && pr.decl->pipe != PipeOp::None) {
      if (pr.decl->pipe == PipeOp::Send) {
        stats_.sendRecvPerStep.calls += 1;
        stats_.sendRecvPerStep.bytes += pr.dataBytes;
      }
      stats_.sendRecvPerStep.sentBytes += e.traffic.sent;
      stats_.sendRecvPerStep.receivedBytes += e.traffic.received;
    } else if (pr.bucket && !pr.lastInBucket()) {
      // Packs its share; the bucket's collective is its last member's.
    } else if (pr.comm) {
      CollectiveStats &byComm =
          stats_.perStepByComm[size_t(pr.decl->comm)][size_t(pr.decl->coll)];
      for (CollectiveStats *c :
           {&byComm, &stats_.perStep[int(pr.decl->coll)]}) {
        c->calls += 1;
        c->bytes += pr.dataBytes;
        c->sentBytes += e.traffic.sent;
        c->receivedBytes += e.traffic.received;
      }
    }
    if (!trace_)
      continue;
    const int64_t start =
        traceStartNs +
        int64_t(be.elapsedSeconds(runStart, *e.start) * 1e9 + 0.5);
    const int64_t end = start + int64_t(seconds * 1e9 + 0.5);
    std::string args = "{\"instruction\":" + std::to_string(e.index);
    if (e.microbatch >= 0)
      args += ",\"microbatch\":" + std::to_string(e.microbatch);
    if (pr.bucket && !pr.lastInBucket()) {
      const BufferDecl &inBuf = program().buffers[size_t(pr.decl->in[0])];
      args +=
          ",\"bucket\":" +
          std::to_string(pr.bucket - program().buckets.data()) +
          ",\"operand\":" +
          TraceWriter::quote(dtypeName(inBuf.dtype) + shapeStr(inBuf.shape)) +
          "}";
      trace_->complete(TraceWriter::kComm, "bucket_pack", "copy", start, end,
                       args);
    } else if (pr.comm) {
      const CommDecl &c = a_.comms[size_t(pr.decl->comm)];
      // A receive has no input: its operand is the buffer it fills.
      const int operand =
          pr.decl->pipe == PipeOp::Recv ? pr.decl->out[0] : pr.decl->in[0];
      const BufferDecl &inBuf = program().buffers[size_t(operand)];
      args +=
          ",\"communicator\":" + TraceWriter::quote(c.name) +
          ",\"group\":" + TraceWriter::quote(pr.members) + ",\"operand\":" +
          TraceWriter::quote(dtypeName(inBuf.dtype) + shapeStr(inBuf.shape)) +
          ",\"bytes\":" + std::to_string(pr.dataBytes) +
          (pr.bucket
               ? ",\"bucket\":" +
                     std::to_string(pr.bucket - program().buckets.data()) +
                     ",\"bucket_members\":" +
                     std::to_string(pr.bucket->members.size())
               : std::string()) +
          ",\"sent_bytes\":" + std::to_string(e.traffic.sent) +
          ",\"received_bytes\":" + std::to_string(e.traffic.received) + "}";
      trace_->complete(TraceWriter::kComm, pr.decl->op,
                       pr.decl->pipe != PipeOp::None ? "send_recv"
                                                     : "collective",
                       start, end, args);
    } else {
      if (pr.shapeKey) {
        const size_t space = pr.shapeKey->find(' ');
        args += ",\"operands\":" +
                TraceWriter::quote(space == std::string::npos
                                       ? std::string()
                                       : pr.shapeKey->substr(space + 1));
      }
      if (pr.flops > 0) {
        char buf[64];
        std::snprintf(buf, sizeof buf, ",\"gflop\":%.6g", pr.flops / 1e9);
        args += buf;
      }
      args += "}";
      trace_->complete(TraceWriter::kCompute, pr.decl->op, "kernel", start, end,
                       args);
    }
  }
}

void RankExecutor::setTrace(TraceWriter *trace) {
  trace_ = trace;
  if (trace_)
    traceMemory(TraceWriter::nowNs());
}

void RankExecutor::traceMemory(int64_t atNs) {
  const ExecStats &s = stats();
  std::vector<std::pair<std::string, uint64_t>> values;
  for (int c = 0; c < kNumMemCategories; ++c)
    values.emplace_back(memCategoryName(MemCategory(c)), s.memoryBytes[c]);
  values.emplace_back("staging", s.stagingBytes);
  values.emplace_back("total", s.totalMemoryBytes);
  trace_->counter("memory bytes", atNs, values);
}

} // namespace dtc::rt
