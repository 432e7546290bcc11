//===- Communicator.cpp - local and thread worlds, error agreement --------===//
#include "dtc/runtime/Communicator.h"

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <deque>
#include <tuple>
#include <cstring>
#include <map>
#include <mutex>

namespace dtc::rt {

Communicator::~Communicator() = default;
World::~World() = default;

namespace {

/// Copies a received message out, checking its size.
void takeMessage(const std::string &message, void *buf, size_t bytes, int tag) {
  if (message.size() != bytes)
    throw Error("message with tag " + std::to_string(tag) + " has " +
                std::to_string(message.size()) + " bytes, the receiver expects " +
                std::to_string(bytes));
  std::memcpy(buf, message.data(), bytes);
}

template <class T>
void reduceTyped(const std::vector<const char *> &srcs, size_t offset, T *dst,
                 size_t count, ReduceOp op) {
  const size_t n = srcs.size();
  for (size_t i = 0; i < count; ++i) {
    T acc = reinterpret_cast<const T *>(srcs[0])[offset + i];
    for (size_t j = 1; j < n; ++j) {
      const T v = reinterpret_cast<const T *>(srcs[j])[offset + i];
      switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Average: acc = acc + v; break;
      case ReduceOp::Max: acc = v > acc ? v : acc; break;
      case ReduceOp::Min: acc = v < acc ? v : acc; break;
      }
    }
    if (op == ReduceOp::Average) acc = T(acc / T(n));
    dst[i] = acc;
  }
}

/// dst[0..count) = reduction over srcs of element offset+i.
void reduceBuffers(const std::vector<const char *> &srcs, size_t offset, void *dst,
                   size_t count, DType dtype, ReduceOp op) {
  switch (dtype) {
  case DType::F32: reduceTyped(srcs, offset, static_cast<float *>(dst), count, op); break;
  case DType::I32: reduceTyped(srcs, offset, static_cast<int32_t *>(dst), count, op); break;
  case DType::I64: reduceTyped(srcs, offset, static_cast<int64_t *>(dst), count, op); break;
  }
}

// ---- one rank ------------------------------------------------------------------

class SelfComm final : public Communicator {
public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  void allReduce(const void *in, void *out, size_t count, DType dtype, ReduceOp) override {
    if (in != out) std::memcpy(out, in, count * dtypeSize(dtype));
  }
  void allGather(const void *in, void *out, size_t bytes) override {
    if (in != out) std::memcpy(out, in, bytes);
  }
  void reduceScatter(const void *in, void *out, size_t count, DType dtype, ReduceOp) override {
    if (in != out) std::memcpy(out, in, count * dtypeSize(dtype));
  }
  void allToAll(const void *in, void *out, size_t bytes) override {
    if (in != out) std::memcpy(out, in, bytes);
  }
  void broadcast(void *, size_t, int) override {}
  std::vector<std::string> gather(const std::string &mine, int) override { return {mine}; }
  void barrier() override {}
  void send(const void *buf, size_t bytes, int, int tag) override {
    mailbox_[tag].emplace_back(static_cast<const char *>(buf), bytes);
  }
  void recv(void *buf, size_t bytes, int, int tag) override {
    auto it = mailbox_.find(tag);
    if (it == mailbox_.end() || it->second.empty())
      throw Error("a receive (tag " + std::to_string(tag) +
                  ") with no message sent before it on a one-rank communicator");
    takeMessage(it->second.front(), buf, bytes, tag);
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

private:
  SelfComm comm_;
};

} // namespace

std::unique_ptr<World> makeLocalWorld() { return std::make_unique<LocalWorld>(); }

// ---- threads --------------------------------------------------------------------

namespace {
struct Group {
  std::vector<int> members; // world ranks, in group order
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<const void *> in;
  std::vector<void *> out;
  std::vector<const std::string *> strs;
  std::vector<std::pair<int, int>> splitArgs; // world group only: (color, key)
};
} // namespace

struct ThreadWorld::Shared {
  int n = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool aborted = false;
  std::string why;
  std::shared_ptr<Group> worldGroup;
  std::map<std::pair<uint64_t, int>, std::shared_ptr<Group>> groups;
  /// Point-to-point messages in flight: (group, from, to, tag) -> bytes.
  std::map<std::tuple<const Group *, int, int, int>, std::deque<std::string>> mailboxes;

  void barrier(Group &g) {
    std::unique_lock<std::mutex> lock(mu);
    if (aborted) throw Error(why);
    const uint64_t gen = g.generation;
    if (++g.arrived == int(g.members.size())) {
      g.arrived = 0;
      ++g.generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return g.generation != gen || aborted; });
    if (aborted) throw Error(why);
  }
};

namespace {

class ThreadComm final : public Communicator {
public:
  ThreadComm(std::shared_ptr<ThreadWorld::Shared> s, std::shared_ptr<Group> g, int idx)
      : s_(std::move(s)), g_(std::move(g)), idx_(idx) {}
  int size() const override { return int(g_->members.size()); }
  int rank() const override { return idx_; }

  void allReduce(const void *in, void *out, size_t count, DType dtype, ReduceOp op) override {
    post(in, out);
    std::vector<char> tmp(count * dtypeSize(dtype));
    reduceBuffers(inputs(), 0, tmp.data(), count, dtype, op);
    s_->barrier(*g_);
    std::memcpy(out, tmp.data(), tmp.size());
    s_->barrier(*g_);
  }
  void allGather(const void *in, void *out, size_t bytes) override {
    post(in, out);
    for (size_t j = 0; j < g_->members.size(); ++j)
      std::memcpy(static_cast<char *>(out) + j * bytes, g_->in[j], bytes);
    s_->barrier(*g_);
  }
  void reduceScatter(const void *in, void *out, size_t count, DType dtype, ReduceOp op) override {
    post(in, out);
    std::vector<char> tmp(count * dtypeSize(dtype));
    reduceBuffers(inputs(), size_t(idx_) * count, tmp.data(), count, dtype, op);
    s_->barrier(*g_);
    std::memcpy(out, tmp.data(), tmp.size());
    s_->barrier(*g_);
  }
  void allToAll(const void *in, void *out, size_t bytes) override {
    post(in, out);
    std::vector<char> tmp(bytes * g_->members.size());
    for (size_t j = 0; j < g_->members.size(); ++j)
      std::memcpy(tmp.data() + j * bytes,
                  static_cast<const char *>(g_->in[j]) + size_t(idx_) * bytes, bytes);
    s_->barrier(*g_);
    std::memcpy(out, tmp.data(), tmp.size());
    s_->barrier(*g_);
  }
  void broadcast(void *buf, size_t bytes, int root) override {
    post(buf, buf);
    if (idx_ != root) std::memcpy(buf, g_->in[size_t(root)], bytes);
    s_->barrier(*g_);
  }
  std::vector<std::string> gather(const std::string &mine, int root) override {
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      g_->strs[size_t(idx_)] = &mine;
    }
    s_->barrier(*g_);
    std::vector<std::string> r;
    if (idx_ == root)
      for (const std::string *p : g_->strs) r.push_back(*p);
    s_->barrier(*g_);
    return r;
  }
  void barrier() override { s_->barrier(*g_); }
  void send(const void *buf, size_t bytes, int peer, int tag) override {
    checkPeer(peer);
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->aborted) throw Error(s_->why);
    s_->mailboxes[{g_.get(), idx_, peer, tag}].emplace_back(static_cast<const char *>(buf), bytes);
    s_->cv.notify_all();
  }
  void recv(void *buf, size_t bytes, int peer, int tag) override {
    checkPeer(peer);
    std::unique_lock<std::mutex> lock(s_->mu);
    auto &box = s_->mailboxes[{g_.get(), peer, idx_, tag}];
    s_->cv.wait(lock, [&] { return !box.empty() || s_->aborted; });
    if (s_->aborted) throw Error(s_->why);
    std::string message = std::move(box.front());
    box.pop_front();
    lock.unlock();
    takeMessage(message, buf, bytes, tag);
  }

private:
  void checkPeer(int peer) const {
    if (peer < 0 || peer >= int(g_->members.size()))
      throw Error("peer " + std::to_string(peer) + " is not a member of a " +
                  std::to_string(g_->members.size()) + "-rank communicator");
  }
  void post(const void *in, void *out) {
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      g_->in[size_t(idx_)] = in;
      g_->out[size_t(idx_)] = out;
    }
    s_->barrier(*g_);
  }
  std::vector<const char *> inputs() const {
    std::vector<const char *> v;
    for (const void *p : g_->in) v.push_back(static_cast<const char *>(p));
    return v;
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
  g->strs.assign(g->members.size(), nullptr);
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
    s_->barrier(wg);
    std::vector<std::pair<int, int>> mates; // (key, world rank)
    for (int r = 0; r < s_->n; ++r)
      if (wg.splitArgs[size_t(r)].first == color)
        mates.push_back({wg.splitArgs[size_t(r)].second, r});
    std::sort(mates.begin(), mates.end());
    std::vector<int> members;
    int idx = 0;
    for (size_t i = 0; i < mates.size(); ++i) {
      if (mates[i].second == rank_) idx = int(i);
      members.push_back(mates[i].second);
    }
    std::shared_ptr<Group> g;
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      auto &slot = s_->groups[{splitSeq_, color}];
      if (!slot) slot = makeGroup(members);
      g = slot;
    }
    ++splitSeq_;
    s_->barrier(wg);
    return std::make_unique<ThreadComm>(s_, g, idx);
  }
  int ranksOnNode() const override { return s_->n; }

private:
  std::shared_ptr<ThreadWorld::Shared> s_;
  int rank_;
  ThreadComm world_;
  uint64_t splitSeq_ = 0;
};

} // namespace

ThreadWorld::ThreadWorld(int ranks) : shared_(std::make_shared<Shared>()) {
  shared_->n = ranks;
  std::vector<int> all;
  for (int r = 0; r < ranks; ++r) all.push_back(r);
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

// ---- error agreement ---------------------------------------------------------------

void agree(World &w, const std::string &localError) {
  if (w.size() == 1) {
    if (!localError.empty()) throw AgreedError(localError, 0);
    return;
  }
  int32_t mine = localError.empty() ? INT32_MAX : int32_t(w.rank()), first = 0;
  w.world().allReduce(&mine, &first, 1, DType::I32, ReduceOp::Min);
  if (first == INT32_MAX) return;
  std::string msg = w.rank() == first ? localError : std::string();
  uint64_t len = msg.size();
  w.world().broadcast(&len, sizeof len, first);
  msg.resize(size_t(len));
  if (len) w.world().broadcast(msg.data(), size_t(len), first);
  throw AgreedError(msg, first);
}

} // namespace dtc::rt
