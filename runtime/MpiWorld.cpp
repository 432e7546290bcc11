//===- MpiWorld.cpp ------------------------------------------------------------===//
#include "dtc/runtime/MpiWorld.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <list>
#include <string>

namespace dtc::rt {
namespace {

MPI_Datatype mpiType(DType d) {
  switch (d) {
  case DType::F32: return MPI_FLOAT;
  case DType::I32: return MPI_INT32_T;
  case DType::I64: return MPI_INT64_T;
  }
  return MPI_BYTE;
}

MPI_Op mpiOp(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
  case ReduceOp::Average: return MPI_SUM;
  case ReduceOp::Max: return MPI_MAX;
  case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_SUM;
}

int checkedCount(size_t n) {
  if (n > size_t(INT_MAX))
    throw Error("a collective of " + std::to_string(n) +
                " elements exceeds the MPI count limit (2^31-1)");
  return int(n);
}

void divideInPlace(void *buf, size_t count, DType dtype, int n) {
  if (dtype != DType::F32) return;
  float *f = static_cast<float *>(buf);
  for (size_t i = 0; i < count; ++i) f[i] /= float(n);
}

class MpiComm final : public Communicator {
public:
  explicit MpiComm(MPI_Comm c) : c_(c) {
    MPI_Comm_size(c_, &size_);
    MPI_Comm_rank(c_, &rank_);
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    flushSends();
    MPI_Comm_free(&c_);
  }
  int size() const override { return size_; }
  int rank() const override { return rank_; }

  void allReduce(const void *in, void *out, size_t count, DType dtype, ReduceOp op) override {
    MPI_Allreduce(in == out ? MPI_IN_PLACE : in, out, checkedCount(count), mpiType(dtype),
                  mpiOp(op), c_);
    if (op == ReduceOp::Average) divideInPlace(out, count, dtype, size_);
  }
  void allGather(const void *in, void *out, size_t bytes) override {
    MPI_Allgather(in, checkedCount(bytes), MPI_BYTE, out, checkedCount(bytes), MPI_BYTE, c_);
  }
  void reduceScatter(const void *in, void *out, size_t count, DType dtype, ReduceOp op) override {
    MPI_Reduce_scatter_block(in, out, checkedCount(count), mpiType(dtype), mpiOp(op), c_);
    if (op == ReduceOp::Average) divideInPlace(out, count, dtype, size_);
  }
  void allToAll(const void *in, void *out, size_t bytes) override {
    MPI_Alltoall(in, checkedCount(bytes), MPI_BYTE, out, checkedCount(bytes), MPI_BYTE, c_);
  }
  void broadcast(void *buf, size_t bytes, int root) override {
    char *p = static_cast<char *>(buf);
    while (bytes > 0) {
      const size_t chunk = bytes < (size_t(1) << 30) ? bytes : (size_t(1) << 30);
      MPI_Bcast(p, int(chunk), MPI_BYTE, root, c_);
      p += chunk;
      bytes -= chunk;
    }
  }
  std::vector<std::string> gather(const std::string &mine, int root) override {
    uint64_t len = mine.size();
    std::vector<uint64_t> lens(rank_ == root ? size_t(size_) : 0);
    MPI_Gather(&len, 1, MPI_UINT64_T, lens.data(), 1, MPI_UINT64_T, root, c_);
    constexpr size_t kChunk = size_t(1) << 30;
    std::vector<std::string> out;
    if (rank_ == root) {
      out.resize(size_t(size_));
      for (int r = 0; r < size_; ++r) {
        if (r == root) {
          out[size_t(r)] = mine;
          continue;
        }
        out[size_t(r)].resize(size_t(lens[size_t(r)]));
        for (size_t off = 0; off < out[size_t(r)].size(); off += kChunk) {
          const size_t n = std::min(kChunk, out[size_t(r)].size() - off);
          MPI_Recv(out[size_t(r)].data() + off, int(n), MPI_BYTE, r, 77, c_, MPI_STATUS_IGNORE);
        }
      }
    } else {
      for (size_t off = 0; off < mine.size(); off += kChunk) {
        const size_t n = std::min(kChunk, mine.size() - off);
        MPI_Send(mine.data() + off, int(n), MPI_BYTE, root, 77, c_);
      }
    }
    return out;
  }
  void barrier() override { MPI_Barrier(c_); }
  // Sends copy the bytes and go out non-blocking: a rank only ever waits in
  // a receive, which is what makes a schedule's order deadlock free.
  void send(const void *buf, size_t bytes, int peer, int tag) override {
    checkTag(tag);
    pending_.emplace_back();
    Pending &p = pending_.back();
    p.bytes.assign(static_cast<const char *>(buf), bytes);
    MPI_Isend(p.bytes.data(), checkedCount(bytes), MPI_BYTE, peer, tag, c_, &p.request);
  }
  void recv(void *buf, size_t bytes, int peer, int tag) override {
    checkTag(tag);
    MPI_Status status;
    MPI_Recv(buf, checkedCount(bytes), MPI_BYTE, peer, tag, c_, &status);
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    if (size_t(got) != bytes)
      throw Error("message with tag " + std::to_string(tag) + " has " + std::to_string(got) +
                  " bytes, the receiver expects " + std::to_string(bytes));
  }
  void flushSends() override {
    for (Pending &p : pending_) MPI_Wait(&p.request, MPI_STATUS_IGNORE);
    pending_.clear();
  }

private:
  struct Pending {
    std::string bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  void checkTag(int tag) {
    if (tagLimit_ < 0) {
      void *value = nullptr;
      int found = 0;
      MPI_Comm_get_attr(c_, MPI_TAG_UB, &value, &found);
      tagLimit_ = found && value ? *static_cast<int *>(value) : 32767;
    }
    if (tag < 0 || tag > tagLimit_)
      throw Error("message tag " + std::to_string(tag) + " exceeds this MPI's limit (" +
                  std::to_string(tagLimit_) + "); use fewer micro-batches or stages");
  }
  MPI_Comm c_;
  int size_ = 1, rank_ = 0;
  int tagLimit_ = -1;
  std::list<Pending> pending_;
};

class MpiWorld final : public World {
public:
  MpiWorld() {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    world_ = std::make_unique<MpiComm>(dup);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &onNode_);
    MPI_Comm_free(&node);
  }
  int rank() const override { return world_->rank(); }
  int size() const override { return world_->size(); }
  Communicator &world() override { return *world_; }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm c;
    MPI_Comm_split(MPI_COMM_WORLD, color, key, &c);
    return std::make_unique<MpiComm>(c);
  }
  int ranksOnNode() const override { return onNode_; }

private:
  std::unique_ptr<MpiComm> world_;
  int onNode_ = 1;
};

} // namespace

std::unique_ptr<World> makeMpiWorld() { return std::make_unique<MpiWorld>(); }

} // namespace dtc::rt
