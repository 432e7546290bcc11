//===- MpiWorld.cpp ------------------------------------------------------------===//
#include "dtc/runtime/MpiWorld.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>

namespace dtc::rt {
namespace {

class MpiComm final : public Communicator {
public:
  explicit MpiComm(MPI_Comm c) : c_(c) {
    MPI_Comm_size(c_, &size_);
    MPI_Comm_rank(c_, &rank_);
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&c_);
  }
  int size() const override { return size_; }
  int rank() const override { return rank_; }

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

protected:
  void sendRecv(const void *send, size_t sendBytes, int dst, void *recv, size_t recvBytes,
                int src) override {
    // In pieces under MPI's int count; each direction is cut on its own
    // (messages between two ranks on one tag arrive in order).
    constexpr size_t kChunk = size_t(1) << 30;
    std::vector<MPI_Request> requests;
    char *in = static_cast<char *>(recv);
    for (size_t done = 0; done < recvBytes || (done == 0 && recvBytes == 0); done += kChunk) {
      requests.emplace_back();
      MPI_Irecv(in + done, int(std::min(kChunk, recvBytes - done)), MPI_BYTE, src, kDataTag,
                c_, &requests.back());
      if (recvBytes == 0) break;
    }
    const char *out = static_cast<const char *>(send);
    for (size_t done = 0; done < sendBytes || (done == 0 && sendBytes == 0); done += kChunk) {
      requests.emplace_back();
      MPI_Isend(out + done, int(std::min(kChunk, sendBytes - done)), MPI_BYTE, dst, kDataTag,
                c_, &requests.back());
      if (sendBytes == 0) break;
    }
    MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  }

private:
  static constexpr int kDataTag = 78;
  MPI_Comm c_;
  int size_ = 1, rank_ = 0;
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
