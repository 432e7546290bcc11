//===- Communicator.cpp - local and thread worlds, error agreement --------===//
#include "dtc/runtime/Communicator.h"
#include "dtc/artifact/MemoryPlan.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>

namespace dtc::rt {

Communicator::~Communicator() = default;
World::~World() = default;

namespace {

/// A received message copied out, after checking its size.
void deliver(const std::string &message, void *buf, size_t bytes, int tag) {
  if (message.size() != bytes)
    throw CommFailure("message with tag " + std::to_string(tag) + " has " +
                      std::to_string(message.size()) +
                      " bytes, the receiver expects " + std::to_string(bytes));
  std::memcpy(buf, message.data(), bytes);
}

template <class T> void combine(T *acc, const T *x, size_t count, ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
  case ReduceOp::Average:
    for (size_t i = 0; i < count; ++i)
      acc[i] = acc[i] + x[i];
    break;
  case ReduceOp::Max:
    for (size_t i = 0; i < count; ++i)
      acc[i] = x[i] > acc[i] ? x[i] : acc[i];
    break;
  case ReduceOp::Min:
    for (size_t i = 0; i < count; ++i)
      acc[i] = x[i] < acc[i] ? x[i] : acc[i];
    break;
  }
}

/// bf16/f16: each step adds (or compares) in f32 and rounds back, as a
/// kernel would.
void combineLow(uint16_t *acc, const uint16_t *x, size_t count, DType dtype,
                ReduceOp op) {
  for (size_t i = 0; i < count; ++i) {
    const float a = lowToF32(dtype, acc[i]), b = lowToF32(dtype, x[i]);
    float r = a + b;
    if (op == ReduceOp::Max)
      r = b > a ? b : a;
    if (op == ReduceOp::Min)
      r = b < a ? b : a;
    acc[i] = f32ToLow(dtype, r);
  }
}

/// acc[i] = acc[i] op x[i].
void combineBuffers(void *acc, const void *x, size_t count, DType dtype,
                    ReduceOp op) {
  switch (dtype) {
  case DType::F32:
    combine(static_cast<float *>(acc), static_cast<const float *>(x), count,
            op);
    break;
  case DType::I32:
    combine(static_cast<int32_t *>(acc), static_cast<const int32_t *>(x), count,
            op);
    break;
  case DType::I64:
    combine(static_cast<int64_t *>(acc), static_cast<const int64_t *>(x), count,
            op);
    break;
  case DType::BF16:
  case DType::F16:
    combineLow(static_cast<uint16_t *>(acc), static_cast<const uint16_t *>(x),
               count, dtype, op);
    break;
  }
}

void divideFloats(void *buf, size_t count, DType dtype, int n) {
  if (isLowPrecision(dtype)) {
    uint16_t *h = static_cast<uint16_t *>(buf);
    for (size_t i = 0; i < count; ++i)
      h[i] = f32ToLow(dtype, lowToF32(dtype, h[i]) / float(n));
    return;
  }
  if (dtype != DType::F32)
    return;
  float *f = static_cast<float *>(buf);
  for (size_t i = 0; i < count; ++i)
    f[i] /= float(n);
}

} // namespace

void Communicator::sendMessage(const void *buf, size_t bytes, int peer,
                               int tag) {
  if (peer < 0 || peer >= size())
    throw Error("peer " + std::to_string(peer) + " is not a member of a " +
                std::to_string(size()) + "-rank communicator");
  postMessage(buf, bytes, peer, tag);
  sent_ += bytes;
}

void Communicator::recvMessage(void *buf, size_t bytes, int peer, int tag) {
  if (peer < 0 || peer >= size())
    throw Error("peer " + std::to_string(peer) + " is not a member of a " +
                std::to_string(size()) + "-rank communicator");
  takeMessage(buf, bytes, peer, tag);
  received_ += bytes;
}

void Communicator::exchange(const void *send, size_t sendBytes, int dst,
                            void *recv, size_t recvBytes, int src) {
  sendRecv(send, sendBytes, dst, recv, recvBytes, src);
  sent_ += sendBytes;
  received_ += recvBytes;
}

char *Communicator::scratch(size_t bytes) {
  // Exactly `bytes` (resize may reserve more): what is counted is what is held.
  if (scratch_.size() < bytes)
    std::vector<char>(bytes).swap(scratch_);
  return scratch_.data();
}

size_t Communicator::allReduceScratch(size_t count, size_t elementBytes,
                                      int members) {
  return size_t(ringAllReduceScratchBytes(count, elementBytes, members));
}

size_t Communicator::reduceScatterScratch(size_t count, size_t elementBytes,
                                          int members) {
  return size_t(ringReduceScatterScratchBytes(count, elementBytes, members));
}

void Communicator::allReduce(const void *in, void *out, size_t count,
                             DType dtype, ReduceOp op) {
  const size_t elem = dtypeSize(dtype);
  if (in != out)
    std::memcpy(out, in, count * elem);
  const int n = size(), r = rank();
  if (n == 1)
    return;
  const size_t base = count / size_t(n), extra = count % size_t(n);
  auto offset = [&](int j) {
    return size_t(j) * base + std::min(size_t(j), extra);
  };
  auto length = [&](int j) { return base + (size_t(j) < extra ? 1 : 0); };
  auto at = [&](int j) { return static_cast<char *>(out) + offset(j) * elem; };
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  char *tmp = scratch(allReduceScratch(count, elem, n));
  // Reduce-scatter: after n-1 steps this member holds chunk r+1 reduced.
  for (int s = 0; s < n - 1; ++s) {
    const int send = (r - s + n) % n, recv = (r - s - 1 + 2 * n) % n;
    exchange(at(send), length(send) * elem, right, tmp, length(recv) * elem,
             left);
    combineBuffers(at(recv), tmp, length(recv), dtype, op);
  }
  // All-gather of the reduced chunks.
  for (int s = 0; s < n - 1; ++s) {
    const int send = (r + 1 - s + n) % n, recv = (r - s + n) % n;
    exchange(at(send), length(send) * elem, right, at(recv),
             length(recv) * elem, left);
  }
  if (op == ReduceOp::Average)
    divideFloats(out, count, dtype, n);
}

void Communicator::allGather(const void *in, void *out, size_t bytes) {
  const int n = size(), r = rank();
  char *o = static_cast<char *>(out);
  if (o + size_t(r) * bytes != in)
    std::memcpy(o + size_t(r) * bytes, in, bytes);
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  for (int s = 0; s < n - 1; ++s) {
    const int send = (r - s + n) % n, recv = (r - s - 1 + 2 * n) % n;
    exchange(o + size_t(send) * bytes, bytes, right, o + size_t(recv) * bytes,
             bytes, left);
  }
}

void Communicator::reduceScatter(const void *in, void *out, size_t count,
                                 DType dtype, ReduceOp op) {
  const size_t elem = dtypeSize(dtype), bytes = count * elem;
  const int n = size(), r = rank();
  const char *pieces = static_cast<const char *>(in);
  if (n == 1) {
    if (in != out)
      std::memcpy(out, in, bytes);
    return;
  }
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  char *acc = scratch(reduceScatterScratch(count, elem, n)),
       *recv = acc + bytes;
  // Step s sends the partial sum of piece r-s-1 and receives piece r-s-2's,
  // adding this member's own piece; after n-1 steps piece r is complete.
  std::memcpy(acc, pieces + size_t((r - 1 + n) % n) * bytes, bytes);
  for (int s = 0; s < n - 1; ++s) {
    const int next = (r - s - 2 + 2 * n) % n;
    exchange(acc, bytes, right, recv, bytes, left);
    std::memcpy(acc, pieces + size_t(next) * bytes, bytes);
    combineBuffers(acc, recv, count, dtype, op);
  }
  std::memcpy(out, acc, bytes);
  if (op == ReduceOp::Average)
    divideFloats(out, count, dtype, n);
}

void Communicator::allToAll(const void *in, void *out, size_t bytes) {
  const int n = size(), r = rank();
  const char *i = static_cast<const char *>(in);
  char *o = static_cast<char *>(out);
  std::memcpy(o + size_t(r) * bytes, i + size_t(r) * bytes, bytes);
  for (int s = 1; s < n; ++s) {
    const int dst = (r + s) % n, src = (r - s + n) % n;
    exchange(i + size_t(dst) * bytes, bytes, dst, o + size_t(src) * bytes,
             bytes, src);
  }
}

void Communicator::shift(const void *in, void *out, size_t bytes, int offset) {
  const int n = size(), r = rank();
  const int step = ((offset % n) + n) % n;
  if (step == 0) {
    std::memcpy(out, in, bytes);
    return;
  }
  exchange(in, bytes, (r + step) % n, out, bytes, (r - step + n) % n);
}

namespace {

// ---- one rank
// ------------------------------------------------------------------

class SelfComm final : public Communicator {
public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  void broadcast(void *, size_t, int) override {}
  // A group of one has no peer to talk to; the runtime never sends to itself.
  void send(const void *, size_t, int) override {
    throw Error("internal error: send on a one-rank communicator");
  }
  void recv(void *, size_t, int) override {
    throw Error("internal error: recv on a one-rank communicator");
  }
  void barrier() override {}

protected:
  void sendRecv(const void *send, size_t sendBytes, int, void *recv, size_t,
                int) override {
    std::memcpy(recv, send, sendBytes);
  }
  void postMessage(const void *buf, size_t bytes, int, int tag) override {
    mailbox_[tag].emplace_back(static_cast<const char *>(buf), bytes);
  }
  void takeMessage(void *buf, size_t bytes, int, int tag) override {
    auto it = mailbox_.find(tag);
    if (it == mailbox_.end() || it->second.empty())
      throw Error(
          "a receive (tag " + std::to_string(tag) +
          ") with no message sent before it on a one-rank communicator");
    deliver(it->second.front(), buf, bytes, tag);
    it->second.pop_front();
  }

private:
  std::map<int, std::deque<std::string>> mailbox_;
};

class LocalWorld final : public World {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Communicator &world() override { return comm_; }
  std::unique_ptr<Communicator> split(int, int) override {
    return std::make_unique<SelfComm>();
  }
  int ranksOnNode() const override { return 1; }
  void setTimeout(double) override {} // nothing ever waits

private:
  SelfComm comm_;
};

} // namespace

std::unique_ptr<World> makeLocalWorld() {
  return std::make_unique<LocalWorld>();
}

// ---- threads
// --------------------------------------------------------------------

namespace {
struct Group {
  std::vector<int> members; // world ranks, in group order
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<const void *> in;
  std::vector<void *> out;
  std::vector<size_t> sizes; // sendRecv: bytes each member sends
  std::vector<int> dsts;     // sendRecv: to which member
  std::vector<std::pair<int, int>> splitArgs; // world group only: (color, key)
};
} // namespace

struct ThreadWorld::Shared {
  int n = 0;
  double timeoutSeconds = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool aborted = false;
  std::string why;
  std::shared_ptr<Group> worldGroup;
  std::map<std::pair<uint64_t, int>, std::shared_ptr<Group>> groups;
  /// Point-to-point messages in flight: (group, from, to, tag) -> bytes.
  std::map<std::tuple<const Group *, int, int, int>, std::deque<std::string>>
      mailboxes;
  /// Point-to-point rendezvous per (group, from, to).
  struct Mail {
    const void *data = nullptr;
    size_t bytes = 0;
    bool posted = false, taken = false;
  };
  std::map<std::tuple<const Group *, int, int>, Mail> mail;

  /// Waits (lock held) until `ready`, the world is aborted or the timeout
  /// passes; the last two throw CommFailure, and a timeout aborts the world
  /// so that every other waiting rank leaves too.
  template <class Pred>
  void waitFor(std::unique_lock<std::mutex> &lock, Pred ready,
               const char *what) {
    if (timeoutSeconds <= 0) {
      cv.wait(lock, [&] { return ready() || aborted; });
    } else {
      const auto deadline = std::chrono::steady_clock::now() +
                            std::chrono::duration<double>(timeoutSeconds);
      if (!cv.wait_until(lock, deadline, [&] { return ready() || aborted; })) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", timeoutSeconds);
        const std::string msg = std::string("timed out after ") + secs +
                                " s in " + what +
                                ": another rank of the group made no progress";
        aborted = true;
        why = "another rank failed: " + msg;
        cv.notify_all();
        throw CommFailure(msg);
      }
    }
    if (!ready())
      throw CommFailure(why);
  }

  void barrier(Group &g, const char *what) {
    std::unique_lock<std::mutex> lock(mu);
    if (aborted)
      throw CommFailure(why);
    const uint64_t gen = g.generation;
    if (++g.arrived == int(g.members.size())) {
      g.arrived = 0;
      ++g.generation;
      cv.notify_all();
      return;
    }
    waitFor(lock, [&] { return g.generation != gen; }, what);
  }
};

namespace {

class ThreadComm final : public Communicator {
public:
  ThreadComm(std::shared_ptr<ThreadWorld::Shared> s, std::shared_ptr<Group> g,
             int idx)
      : s_(std::move(s)), g_(std::move(g)), idx_(idx) {}
  int size() const override { return int(g_->members.size()); }
  int rank() const override { return idx_; }

  void broadcast(void *buf, size_t bytes, int root) override {
    post(buf, buf, "broadcast");
    if (idx_ != root)
      std::memcpy(buf, g_->in[size_t(root)], bytes);
    s_->barrier(*g_, "broadcast");
  }
  void send(const void *buf, size_t bytes, int dest) override {
    std::unique_lock<std::mutex> lock(s_->mu);
    if (s_->aborted)
      throw CommFailure(s_->why);
    ThreadWorld::Shared::Mail &m = s_->mail[{g_.get(), idx_, dest}];
    s_->waitFor(lock, [&] { return !m.posted; }, "send");
    m.data = buf;
    m.bytes = bytes;
    m.posted = true;
    m.taken = false;
    s_->cv.notify_all();
    s_->waitFor(lock, [&] { return m.taken; }, "send");
    m.posted = false;
    s_->cv.notify_all();
  }
  void recv(void *buf, size_t bytes, int src) override {
    std::unique_lock<std::mutex> lock(s_->mu);
    if (s_->aborted)
      throw CommFailure(s_->why);
    ThreadWorld::Shared::Mail &m = s_->mail[{g_.get(), src, idx_}];
    s_->waitFor(lock, [&] { return m.posted && !m.taken; }, "recv");
    const bool sizeOk = m.bytes == bytes;
    if (sizeOk)
      std::memcpy(buf, m.data, bytes);
    m.taken = true;
    s_->cv.notify_all();
    if (!sizeOk)
      throw CommFailure("internal error: a message of " +
                        std::to_string(m.bytes) + " bytes arrived where " +
                        std::to_string(bytes) + " were expected");
  }
  void barrier() override { s_->barrier(*g_, "barrier"); }

protected:
  void sendRecv(const void *send, size_t sendBytes, int dst, void *recv,
                size_t recvBytes, int src) override {
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      g_->in[size_t(idx_)] = send;
      g_->sizes[size_t(idx_)] = sendBytes;
      g_->dsts[size_t(idx_)] = dst;
    }
    s_->barrier(*g_, "an exchange");
    if (g_->dsts[size_t(src)] != idx_ || g_->sizes[size_t(src)] != recvBytes)
      throw CommFailure(
          "internal error: mismatched sendRecv between group members " +
          std::to_string(src) + " and " + std::to_string(idx_));
    std::memcpy(recv, g_->in[size_t(src)], recvBytes);
    s_->barrier(*g_, "an exchange");
  }
  void postMessage(const void *buf, size_t bytes, int peer, int tag) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->aborted)
      throw CommFailure(s_->why);
    s_->mailboxes[{g_.get(), idx_, peer, tag}].emplace_back(
        static_cast<const char *>(buf), bytes);
    s_->cv.notify_all();
  }
  void takeMessage(void *buf, size_t bytes, int peer, int tag) override {
    std::unique_lock<std::mutex> lock(s_->mu);
    if (s_->aborted)
      throw CommFailure(s_->why);
    auto &box = s_->mailboxes[{g_.get(), peer, idx_, tag}];
    s_->waitFor(lock, [&] { return !box.empty(); }, "a pipeline receive");
    std::string message = std::move(box.front());
    box.pop_front();
    lock.unlock();
    deliver(message, buf, bytes, tag);
  }

private:
  void post(const void *in, void *out, const char *what) {
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      g_->in[size_t(idx_)] = in;
      g_->out[size_t(idx_)] = out;
    }
    s_->barrier(*g_, what);
  }
  std::shared_ptr<ThreadWorld::Shared> s_;
  std::shared_ptr<Group> g_;
  int idx_;
};

std::shared_ptr<Group> makeGroup(std::vector<int> members) {
  auto g = std::make_shared<Group>();
  g->members = std::move(members);
  g->in.assign(g->members.size(), nullptr);
  g->out.assign(g->members.size(), nullptr);
  g->sizes.assign(g->members.size(), 0);
  g->dsts.assign(g->members.size(), -1);
  g->splitArgs.assign(g->members.size(), {0, 0});
  return g;
}

class ThreadRankWorld final : public World {
public:
  ThreadRankWorld(std::shared_ptr<ThreadWorld::Shared> s, int rank)
      : s_(s), rank_(rank), world_(s, s->worldGroup, rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_->n; }
  Communicator &world() override { return world_; }
  std::unique_ptr<Communicator> split(int color, int key) override {
    Group &wg = *s_->worldGroup;
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      wg.splitArgs[size_t(rank_)] = {color, key};
    }
    s_->barrier(wg, "communicator split");
    std::vector<std::pair<int, int>> mates; // (key, world rank)
    for (int r = 0; r < s_->n; ++r)
      if (wg.splitArgs[size_t(r)].first == color)
        mates.push_back({wg.splitArgs[size_t(r)].second, r});
    std::sort(mates.begin(), mates.end());
    std::vector<int> members;
    int idx = 0;
    for (size_t i = 0; i < mates.size(); ++i) {
      if (mates[i].second == rank_)
        idx = int(i);
      members.push_back(mates[i].second);
    }
    std::shared_ptr<Group> g;
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      auto &slot = s_->groups[{splitSeq_, color}];
      if (!slot)
        slot = makeGroup(members);
      g = slot;
    }
    ++splitSeq_;
    s_->barrier(wg, "communicator split");
    return std::make_unique<ThreadComm>(s_, g, idx);
  }
  int ranksOnNode() const override { return s_->n; }
  void setTimeout(double seconds) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->timeoutSeconds = seconds;
  }

private:
  std::shared_ptr<ThreadWorld::Shared> s_;
  int rank_;
  ThreadComm world_;
  uint64_t splitSeq_ = 0;
};

} // namespace

ThreadWorld::ThreadWorld(int ranks, double timeoutSeconds)
    : shared_(std::make_shared<Shared>()) {
  shared_->n = ranks;
  shared_->timeoutSeconds = timeoutSeconds;
  std::vector<int> all;
  for (int r = 0; r < ranks; ++r)
    all.push_back(r);
  shared_->worldGroup = makeGroup(all);
  for (int r = 0; r < ranks; ++r)
    views_.push_back(std::make_unique<ThreadRankWorld>(shared_, r));
}
ThreadWorld::~ThreadWorld() = default;
int ThreadWorld::size() const { return shared_->n; }
World &ThreadWorld::rankView(int r) { return *views_[size_t(r)]; }
void ThreadWorld::abort(const std::string &why) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  if (!shared_->aborted) {
    shared_->aborted = true;
    shared_->why = why;
  }
  shared_->cv.notify_all();
}

// ---- error agreement
// ---------------------------------------------------------------

void agree(World &w, const std::string &localError, int *stop) {
  if (w.size() == 1) {
    if (!localError.empty())
      throw AgreedError(localError, 0);
    return;
  }
  // One all-reduce (min) for both: the lowest failing rank, and the
  // largest pending signal as its negation.
  int32_t mine[2] = {localError.empty() ? INT32_MAX : int32_t(w.rank()),
                     stop ? -int32_t(*stop) : 0};
  int32_t agreed[2] = {0, 0};
  try {
    w.world().allReduce(mine, agreed, 2, DType::I32, ReduceOp::Min);
  } catch (const CommFailure &e) {
    throw CommFailure(std::string("while the ranks compared how it went: ") +
                      e.what());
  }
  if (stop)
    *stop = -agreed[1];
  const int32_t first = agreed[0];
  if (first == INT32_MAX)
    return;
  std::string msg = w.rank() == first ? localError : std::string();
  uint64_t len = msg.size();
  w.world().broadcast(&len, sizeof len, first);
  msg.resize(size_t(len));
  if (len)
    w.world().broadcast(msg.data(), size_t(len), first);
  throw AgreedError(msg, first);
}

} // namespace dtc::rt
