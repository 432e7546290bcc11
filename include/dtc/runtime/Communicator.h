//===- Communicator.h - collectives behind an abstract interface -*- C++
//-*-===//
//
// A Communicator is one group of ranks. Every member must make the same
// sequence of calls (like MPI). Contiguous primitives only: the executor packs
// and unpacks around them for axis-wise all_gather / reduce_scatter /
// all_to_all (docs/artifact.md "Collectives"). The collectives are dtc's own
// ring and pairwise algorithms over one point-to-point primitive, sendRecv,
// which every implementation provides; the base class counts the bytes that
// really pass through it, so measured traffic is never a formula.
//
// World is the set of all ranks: it creates group communicators (split, as
// MPI_Comm_split) and offers the few world-wide operations the driver needs
// (agreeing on errors, gathering checkpoints, broadcasting the loss).
//
// Liveness: every wait is bounded by the world's timeout (setTimeout; 0 =
// none). A call that cannot complete in time, or that the transport reports
// broken, throws CommFailure: the ranks can no longer agree on anything, so
// the caller must not call another collective and the process should leave.
//
// Implementations: LocalWorld (one rank, in process), ThreadWorld (N ranks
// as threads of one process: unit tests and LocalRunner), MpiWorld
// (dtc_runtime_mpi, runtime/MpiWorld.h).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_COMMUNICATOR_H
#define DTC_RUNTIME_COMMUNICATOR_H

#include "dtc/runtime/Artifact.h"

#include <memory>
#include <string>
#include <vector>

namespace dtc::rt {

/// A communication that could not complete: a timeout (a member stopped
/// making progress) or an error of the transport. Not agreed between ranks.
class CommFailure : public Error {
public:
  explicit CommFailure(const std::string &msg) : Error(msg) {}
};

class Communicator {
public:
  virtual ~Communicator();
  virtual int size() const = 0;
  virtual int rank() const = 0;

  // ---- data plane: collectives over sendRecv, every byte counted ----------
  /// out[i] = reduce over members of in[i], for `count` elements; `in` may
  /// equal `out`. Average is Sum followed by division (floats only). A ring:
  /// reduce-scatter then all-gather over size() chunks (chunk j has
  /// count/size() elements, one more for j < count % size()).
  void allReduce(const void *in, void *out, size_t count, DType dtype,
                 ReduceOp op);
  /// out = concatenation of every member's `bytes` bytes, in member order
  /// (a ring).
  void allGather(const void *in, void *out, size_t bytes);
  /// in holds size() pieces of `count` elements; out = reduction of piece
  /// rank() over members (a ring).
  void reduceScatter(const void *in, void *out, size_t count, DType dtype,
                     ReduceOp op);
  /// in holds size() pieces of `bytes`; piece j goes to member j; out[j] is
  /// the piece received from member j (pairwise exchanges). in != out.
  void allToAll(const void *in, void *out, size_t bytes);
  /// Ring shift: member m sends its `bytes` to member (m + offset) mod
  /// size() and receives those of member (m - offset) mod size() into out
  /// (ring attention's key/value blocks). in != out.
  void shift(const void *in, void *out, size_t bytes, int offset);
  /// Bytes this member has handed to / received from sendRecv so far: what
  /// the collectives above really moved (docs/runtime.md "Measurements").
  uint64_t bytesSent() const { return sent_; }
  uint64_t bytesReceived() const { return received_; }
  /// Largest scratch buffer the collectives above allocated (it is kept).
  size_t scratchBytes() const { return scratch_.capacity(); }
  /// Holds at least `bytes` of that scratch from now on.
  void reserveScratch(size_t bytes) { scratch(bytes); }
  /// The scratch one call of these algorithms takes on a group of `members`
  /// (`count` as passed; 0 for allGather and allToAll), so plans can count
  /// it (MemoryPlan.h).
  static size_t allReduceScratch(size_t count, size_t elementBytes,
                                 int members);
  static size_t reduceScatterScratch(size_t count, size_t elementBytes,
                                     int members);

  // ---- point to point (pipeline stages), counted like the collectives ------
  /// Not collective. `sendMessage` never waits for the receiver: it copies
  /// `bytes` and returns, so a rank blocks only in `recvMessage`, which waits
  /// (at most the world's timeout, then CommFailure) for the message of
  /// member `peer` with this `tag` (messages of one sender and tag arrive in
  /// the order they were sent).
  void sendMessage(const void *buf, size_t bytes, int peer, int tag);
  void recvMessage(void *buf, size_t bytes, int peer, int tag);
  /// Completes this member's sends still in flight (their copies may be
  /// released); called at the end of every step.
  virtual void flushSends() {}

  // ---- control plane (not counted) ----------------------------------------
  /// Copies root's buffer to every member.
  virtual void broadcast(void *buf, size_t bytes, int root) = 0;
  /// Point to point, `bytes` from this member to member `dest`; the matching
  /// recv names the same size. Messages between a pair arrive in order.
  virtual void send(const void *buf, size_t bytes, int dest) = 0;
  virtual void recv(void *buf, size_t bytes, int src) = 0;
  virtual void barrier() = 0;

protected:
  /// Point to point: hand a copy of the bytes over without waiting for the
  /// receiver / wait for a message (and check its size).
  virtual void postMessage(const void *buf, size_t bytes, int peer,
                           int tag) = 0;
  virtual void takeMessage(void *buf, size_t bytes, int peer, int tag) = 0;
  /// The one primitive the data plane is built on. Every member calls it at
  /// the same time: sends `sendBytes` from `send` to member `dst` and
  /// receives `recvBytes` into `recv` from member `src` (`recv` never
  /// overlaps `send`).
  virtual void sendRecv(const void *send, size_t sendBytes, int dst, void *recv,
                        size_t recvBytes, int src) = 0;

private:
  void exchange(const void *send, size_t sendBytes, int dst, void *recv,
                size_t recvBytes, int src);
  char *scratch(size_t bytes);
  uint64_t sent_ = 0, received_ = 0;
  std::vector<char> scratch_;
};

class World {
public:
  virtual ~World();
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// All ranks of the world.
  virtual Communicator &world() = 0;
  /// Collective over the world: members with equal `color` form a group,
  /// ordered by `key`.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  /// Ranks sharing this node (for BLAS thread counts).
  virtual int ranksOnNode() const = 0;
  /// Longest wait of any call on this world's communicators, in seconds,
  /// before it throws CommFailure (0 = wait forever). Applies to the
  /// communicators created before and after the call.
  virtual void setTimeout(double seconds) = 0;
};

/// One rank, no communication.
std::unique_ptr<World> makeLocalWorld();

/// N ranks as threads of this process. Create once, then call
/// `threadWorld->rankView(r)` from the thread that plays rank r.
class ThreadWorld {
public:
  /// `timeoutSeconds` bounds every wait (0 = none), as World::setTimeout.
  explicit ThreadWorld(int ranks, double timeoutSeconds = 0);
  ~ThreadWorld();
  int size() const;
  /// The World seen by rank r (owned by the ThreadWorld).
  World &rankView(int r);
  /// Wakes every rank blocked in a collective; they throw Error. Used when a
  /// thread dies so that the others do not wait forever.
  void abort(const std::string &why);

  struct Shared;

private:
  std::shared_ptr<Shared> shared_;
  std::vector<std::unique_ptr<World>> views_;
};

/// Helpers on top of a World used by the driver: consistent error handling.
/// Every rank calls agree() at the same points; if any rank passes a
/// non-empty error, all ranks throw AgreedError carrying the message of the
/// lowest failing rank (and that rank's number). With `stop`, the same call
/// also agrees on an interruption: each rank passes its pending signal
/// number (0 = none) and gets back the largest one any rank passed.
class AgreedError : public Error {
public:
  AgreedError(const std::string &msg, int reporter)
      : Error(msg), reporter_(reporter) {}
  int reporter() const { return reporter_; }

private:
  int reporter_;
};
void agree(World &w, const std::string &localError, int *stop = nullptr);

/// Runs `f` on every rank, then agree()s on whether any rank failed: a
/// local exception becomes an AgreedError on all ranks, so none is left
/// waiting in a collective the failed rank will never reach. A CommFailure
/// passes through: there is no agreeing after it.
template <class F> void runAgreed(World &w, F &&f) {
  std::string err;
  try {
    f();
  } catch (const AgreedError &) {
    throw;
  } catch (const CommFailure &) {
    throw;
  } catch (const std::exception &e) {
    err = e.what();
    if (err.empty())
      err = "unknown error";
  }
  agree(w, err);
}

} // namespace dtc::rt

#endif // DTC_RUNTIME_COMMUNICATOR_H
