//===- MpiWorld.cpp
//------------------------------------------------------------===//
//
// Every communication is non-blocking and polled against the world's
// timeout (MPI_I* + MPI_Test with a growing sleep, so a waiting rank does
// not spin on a core). The few calls MPI offers only blocking (creating and
// freeing communicators) run under a watchdog thread that ends the process
// with a message when they outlive the timeout. Errors come back as values
// (MPI_ERRORS_RETURN) and are thrown as CommFailure with MPI's own text.
//
//===----------------------------------------------------------------------===//
#include "dtc/runtime/MpiWorld.h"
#include "dtc/runtime/Progress.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <time.h>
#include <unistd.h>

namespace dtc::rt {
namespace {

std::string mpiErrorText(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    return "MPI error " + std::to_string(rc);
  return std::string(text, size_t(len));
}

void check(int rc, const char *call) {
  if (rc != MPI_SUCCESS)
    throw CommFailure(std::string(call) + " failed: " + mpiErrorText(rc));
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

/// Shared by the world and its communicators.
struct Settings {
  double timeoutSeconds = 0;
};

/// Ends the process when a blocking MPI call outlives the timeout: there is
/// no other way out of it.
class Watchdog {
public:
  static Watchdog &instance() {
    static Watchdog *w =
        new Watchdog(); // never destroyed: outlives main's exit
    return *w;
  }
  void arm(double timeoutSeconds, const std::string &what) {
    if (timeoutSeconds <= 0)
      return;
    std::lock_guard<std::mutex> lock(mu_);
    what_ = what;
    limit_ = timeoutSeconds;
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(timeoutSeconds));
    armed_ = true;
    if (!thread_.joinable())
      thread_ = std::thread([this] { loop(); });
    cv_.notify_all();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
  }

private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (!armed_) {
        cv_.wait(lock);
        continue;
      }
      if (cv_.wait_until(lock, deadline_) == std::cv_status::timeout &&
          armed_ && std::chrono::steady_clock::now() >= deadline_) {
        const std::string msg =
            "timed out after " + seconds(limit_) + " s in " + what_ +
            ": another rank made no progress (see --timeout)";
        if (!progress::reportFailure(msg)) {
          std::fprintf(stderr, "dtc-run: error: %s\n", msg.c_str());
          std::fflush(stderr);
        }
        std::fflush(stdout);
        ::_exit(1);
      }
    }
  }
  Watchdog() = default;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  bool armed_ = false;
  double limit_ = 0;
  std::string what_;
  std::chrono::steady_clock::time_point deadline_;
};

class WatchdogScope {
public:
  WatchdogScope(const Settings &s, const std::string &what) {
    Watchdog::instance().arm(s.timeoutSeconds, what);
  }
  ~WatchdogScope() { Watchdog::instance().disarm(); }
};

/// The longest sleep between two polls of a waiting rank. Every wait ends
/// late by up to this much, and a pipeline waits on its critical path once
/// per micro-batch and stage: at 0.5 ms, pp=8 with 8 micro-batches on CPU
/// ranks took 35-39 ms a step where 50 us gives 21-25 ms
/// (bench/cpu_model_bench.py's GPT). A poll costs about a microsecond, so
/// a rank waiting at this rate still leaves its core to the others.
constexpr long kLongestPollSleepNs = 50000;

/// Polls `reqs` until all complete; throws CommFailure at the timeout. The
/// first tests are back to back (most operations finish within
/// microseconds); after that the rank sleeps between tests, up to
/// kLongestPollSleepNs, so that a rank waiting for a slow or stopped peer
/// costs little CPU.
void waitFor(MPI_Request *reqs, int n, const Settings &s, const char *what,
             MPI_Status *statuses = MPI_STATUSES_IGNORE) {
  int done = 0;
  check(MPI_Testall(n, reqs, &done, statuses), what);
  if (done)
    return;
  progress::setState(progress::State::Waiting);
  const int64_t start = progress::nowNs();
  const int64_t limitNs =
      s.timeoutSeconds > 0 ? int64_t(s.timeoutSeconds * 1e9) : INT64_MAX;
  long sleepNs = 0;
  // Time this rank itself did not run (stopped, or starved of CPU): a long
  // gap between two polls that were a few microseconds apart.
  int64_t lastPoll = start, stalledNs = 0;
  for (int polls = 0;; ++polls) {
    check(MPI_Testall(n, reqs, &done, statuses), what);
    if (done)
      break;
    const int64_t now = progress::nowNs();
    if (now - lastPoll > int64_t(5e8))
      stalledNs += now - lastPoll;
    lastPoll = now;
    if (now - start >= limitNs) {
      if (stalledNs * 2 >= now - start)
        throw CommFailure("timed out after " + seconds(s.timeoutSeconds) +
                          " s in " + what +
                          ", but this rank itself was not running for " +
                          seconds(std::round(double(stalledNs) / 1e8) / 10) +
                          " s of it (stopped: SIGSTOP or a debugger?)");
      throw CommFailure(
          "timed out after " + seconds(s.timeoutSeconds) + " s in " + what +
          ": another rank of the group made no progress (see --timeout)");
    }
    if (polls < 200)
      continue;
    sleepNs = sleepNs == 0 ? 2000 : std::min(sleepNs * 2, kLongestPollSleepNs);
    timespec ts{0, sleepNs};
    ::nanosleep(&ts, nullptr);
    if ((polls & 63) == 0)
      progress::heartbeat();
  }
  progress::setState(progress::State::Computing);
}

void waitFor(MPI_Request &req, const Settings &s, const char *what,
             MPI_Status *status = MPI_STATUS_IGNORE) {
  waitFor(&req, 1, s, what, status);
}

class MpiComm final : public Communicator {
public:
  MpiComm(MPI_Comm c, std::shared_ptr<Settings> s) : c_(c), s_(std::move(s)) {
    MPI_Comm_size(c_, &size_);
    MPI_Comm_rank(c_, &rank_);
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
      return;
    // Sends a failed step left in flight: their copies must outlive them,
    // and a receiver that is gone never completes them (so no waiting).
    bool inFlight = false;
    for (Pending &p : pending_) {
      int done = 0;
      if (MPI_Test(&p.request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
          !done)
        inFlight = true;
    }
    if (inFlight)
      new std::list<Pending>(std::move(pending_)); // leaked on purpose
    MPI_Comm_free(&c_);
  }
  int size() const override { return size_; }
  int rank() const override { return rank_; }

  void broadcast(void *buf, size_t bytes, int root) override {
    char *p = static_cast<char *>(buf);
    while (bytes > 0) {
      const size_t chunk = bytes < kChunk ? bytes : kChunk;
      MPI_Request r;
      check(MPI_Ibcast(p, int(chunk), MPI_BYTE, root, c_, &r), "MPI_Ibcast");
      waitFor(r, *s_, "a broadcast");
      p += chunk;
      bytes -= chunk;
    }
  }
  void send(const void *buf, size_t bytes, int dest) override {
    const char *p = static_cast<const char *>(buf);
    do {
      const size_t chunk = bytes < kChunk ? bytes : kChunk;
      MPI_Request r;
      check(MPI_Isend(p, int(chunk), MPI_BYTE, dest, kTag, c_, &r),
            "MPI_Isend");
      waitFor(r, *s_, "a send");
      p += chunk;
      bytes -= chunk;
    } while (bytes > 0);
  }
  void recv(void *buf, size_t bytes, int src) override {
    char *p = static_cast<char *>(buf);
    do {
      const size_t chunk = bytes < kChunk ? bytes : kChunk;
      MPI_Request r;
      check(MPI_Irecv(p, int(chunk), MPI_BYTE, src, kTag, c_, &r), "MPI_Irecv");
      waitFor(r, *s_, "a receive");
      p += chunk;
      bytes -= chunk;
    } while (bytes > 0);
  }
  void barrier() override {
    MPI_Request r;
    check(MPI_Ibarrier(c_, &r), "MPI_Ibarrier");
    waitFor(r, *s_, "a barrier");
  }

  MPI_Comm handle() const { return c_; }

protected:
  void sendRecv(const void *send, size_t sendBytes, int dst, void *recv,
                size_t recvBytes, int src) override {
    // In pieces under MPI's int count; each direction is cut on its own
    // (messages between two ranks on one tag arrive in order).
    std::vector<MPI_Request> requests;
    char *in = static_cast<char *>(recv);
    for (size_t done = 0; done < recvBytes || (done == 0 && recvBytes == 0);
         done += kChunk) {
      requests.emplace_back();
      check(MPI_Irecv(in + done, int(std::min(kChunk, recvBytes - done)),
                      MPI_BYTE, src, kDataTag, c_, &requests.back()),
            "MPI_Irecv");
      if (recvBytes == 0)
        break;
    }
    const char *out = static_cast<const char *>(send);
    for (size_t done = 0; done < sendBytes || (done == 0 && sendBytes == 0);
         done += kChunk) {
      requests.emplace_back();
      check(MPI_Isend(out + done, int(std::min(kChunk, sendBytes - done)),
                      MPI_BYTE, dst, kDataTag, c_, &requests.back()),
            "MPI_Isend");
      if (sendBytes == 0)
        break;
    }
    const std::string what = "an exchange (sending to member " +
                             std::to_string(dst) + ", receiving from member " +
                             std::to_string(src) + ")";
    waitFor(requests.data(), int(requests.size()), *s_, what.c_str());
  }

  // Messages of pipeline stages: a copy goes out non-blocking, so a rank
  // only ever waits in a receive, which is what makes a schedule's order
  // deadlock free. Their tags start above the collectives' ones.
  void postMessage(const void *buf, size_t bytes, int peer, int tag) override {
    const int mpiTag = messageTag(tag);
    pending_.emplace_back();
    Pending &p = pending_.back();
    p.bytes.assign(static_cast<const char *>(buf), bytes);
    check(MPI_Isend(p.bytes.data(), checkedCount(bytes), MPI_BYTE, peer, mpiTag,
                    c_, &p.request),
          "MPI_Isend");
  }
  void takeMessage(void *buf, size_t bytes, int peer, int tag) override {
    MPI_Request r;
    MPI_Status status;
    check(MPI_Irecv(buf, checkedCount(bytes), MPI_BYTE, peer, messageTag(tag),
                    c_, &r),
          "MPI_Irecv");
    const std::string what = "a pipeline receive (from member " +
                             std::to_string(peer) + ", tag " +
                             std::to_string(tag) + ")";
    waitFor(r, *s_, what.c_str(), &status);
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    if (size_t(got) != bytes)
      throw CommFailure("message with tag " + std::to_string(tag) + " has " +
                        std::to_string(got) + " bytes, the receiver expects " +
                        std::to_string(bytes));
  }

public:
  void flushSends() override {
    std::vector<MPI_Request> requests;
    for (Pending &p : pending_)
      requests.push_back(p.request);
    if (!requests.empty())
      waitFor(requests.data(), int(requests.size()), *s_,
              "completing pipeline sends");
    pending_.clear();
  }

private:
  static constexpr size_t kChunk = size_t(1) << 30;
  static constexpr int kTag = 77, kDataTag = 78;
  static constexpr int kMessageTagBase = 1024;
  struct Pending {
    std::string bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  static int checkedCount(size_t bytes) {
    if (bytes > size_t(INT_MAX))
      throw Error("a message of " + std::to_string(bytes) +
                  " bytes exceeds the MPI count limit (2^31-1)");
    return int(bytes);
  }
  int messageTag(int tag) {
    if (tagLimit_ < 0) {
      void *value = nullptr;
      int found = 0;
      MPI_Comm_get_attr(c_, MPI_TAG_UB, &value, &found);
      tagLimit_ = found && value ? *static_cast<int *>(value) : 32767;
    }
    if (tag < 0 || tag > tagLimit_ - kMessageTagBase)
      throw Error("message tag " + std::to_string(tag) +
                  " exceeds this MPI's limit (" +
                  std::to_string(tagLimit_ - kMessageTagBase) +
                  "); use fewer micro-batches or pipeline stages");
    return kMessageTagBase + tag;
  }
  MPI_Comm c_;
  std::shared_ptr<Settings> s_;
  int size_ = 1, rank_ = 0;
  int tagLimit_ = -1;
  std::list<Pending> pending_;
};

class MpiWorld final : public World {
public:
  MpiWorld() : s_(std::make_shared<Settings>()) {
    // Errors come back as codes: nothing aborts the job without a message.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm dup;
    check(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
    world_ = std::make_unique<MpiComm>(dup, s_);
    MPI_Comm node;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0,
                              MPI_INFO_NULL, &node),
          "MPI_Comm_split_type");
    MPI_Comm_size(node, &onNode_);
    MPI_Comm_free(&node);
  }
  int rank() const override { return world_->rank(); }
  int size() const override { return world_->size(); }
  Communicator &world() override { return *world_; }
  std::unique_ptr<Communicator> split(int color, int key) override {
    // MPI_Comm_split blocks: meet in a polled barrier first (a rank that
    // never comes is a timeout with a message), then split under the
    // watchdog.
    world_->barrier();
    MPI_Comm c;
    int rc;
    {
      WatchdogScope watch(*s_, "creating a communicator (MPI_Comm_split)");
      rc = MPI_Comm_split(MPI_COMM_WORLD, color, key, &c);
    }
    if (rc != MPI_SUCCESS)
      throw CommFailure(
          "MPI_Comm_split failed after this rank had created " +
          std::to_string(created_) + " communicators: " + mpiErrorText(rc) +
          (created_ >= 60000
               ? " (likely the MPI library's limit on communicators per "
                 "process: 65536 in Open MPI, some of them its own)"
               : ""));
    ++created_;
    return std::make_unique<MpiComm>(c, s_);
  }
  int ranksOnNode() const override { return onNode_; }
  void setTimeout(double seconds) override { s_->timeoutSeconds = seconds; }

private:
  std::shared_ptr<Settings> s_;
  std::unique_ptr<MpiComm> world_;
  int onNode_ = 1;
  int64_t created_ = 0;
};

} // namespace

std::unique_ptr<World> makeMpiWorld() { return std::make_unique<MpiWorld>(); }

void runBlockingMpiCall(double timeoutSeconds, const std::string &what,
                        const std::function<void()> &call) {
  Settings s;
  s.timeoutSeconds = timeoutSeconds;
  WatchdogScope watch(s, what);
  call();
}

} // namespace dtc::rt
