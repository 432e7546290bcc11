//===- Communicator.h - collectives behind an abstract interface -*- C++ -*-===//
//
// A Communicator is one group of ranks. Every member must make the same
// sequence of calls (like MPI). Contiguous primitives only: the executor packs
// and unpacks around them for axis-wise all_gather / reduce_scatter /
// all_to_all (docs/artifact.md "Collectives").
//
// World is the set of all ranks: it creates group communicators (split, as
// MPI_Comm_split) and offers the few world-wide operations the driver needs
// (agreeing on errors, gathering checkpoints, broadcasting the loss).
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

class Communicator {
public:
  virtual ~Communicator();
  virtual int size() const = 0;
  virtual int rank() const = 0;
  /// out[i] = reduce over members of in[i], for `count` elements; `in` may
  /// equal `out`. Average is Sum followed by division (floats only).
  virtual void allReduce(const void *in, void *out, size_t count, DType dtype,
                         ReduceOp op) = 0;
  /// out = concatenation of every member's `bytes` bytes, in member order.
  virtual void allGather(const void *in, void *out, size_t bytes) = 0;
  /// in holds size() pieces of `count` elements; out = reduction of piece
  /// rank() over members.
  virtual void reduceScatter(const void *in, void *out, size_t count, DType dtype,
                             ReduceOp op) = 0;
  /// in holds size() pieces of `bytes`; piece j goes to member j; out[j] is
  /// the piece received from member j.
  virtual void allToAll(const void *in, void *out, size_t bytes) = 0;
  /// Copies root's buffer to every member.
  virtual void broadcast(void *buf, size_t bytes, int root) = 0;
  /// Point to point (pipeline stages). `send` never waits for the receiver:
  /// it copies `bytes` and returns, so a rank blocks only in `recv`, which
  /// waits for the message of member `peer` with this `tag` (messages of one
  /// sender and tag arrive in the order they were sent). Not collective.
  virtual void send(const void *buf, size_t bytes, int peer, int tag) = 0;
  virtual void recv(void *buf, size_t bytes, int peer, int tag) = 0;
  /// Completes this rank's sends still in flight (their copies may be
  /// released); called at the end of every step.
  virtual void flushSends() {}
  /// Root receives every member's bytes (any sizes), in member order; other
  /// members get an empty vector.
  virtual std::vector<std::string> gather(const std::string &mine, int root) = 0;
  virtual void barrier() = 0;
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
};

/// One rank, no communication.
std::unique_ptr<World> makeLocalWorld();

/// N ranks as threads of this process. Create once, then call
/// `threadWorld->rankView(r)` from the thread that plays rank r.
class ThreadWorld {
public:
  explicit ThreadWorld(int ranks);
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
/// lowest failing rank (and that rank's number).
class AgreedError : public Error {
public:
  AgreedError(const std::string &msg, int reporter) : Error(msg), reporter_(reporter) {}
  int reporter() const { return reporter_; }

private:
  int reporter_;
};
void agree(World &w, const std::string &localError);

/// Runs `f` on every rank, then agree()s on whether any rank failed: a
/// local exception becomes an AgreedError on all ranks, so none is left
/// waiting in a collective the failed rank will never reach.
template <class F> void runAgreed(World &w, F &&f) {
  std::string err;
  try {
    f();
  } catch (const AgreedError &) {
    throw;
  } catch (const std::exception &e) {
    err = e.what();
    if (err.empty()) err = "unknown error";
  }
  agree(w, err);
}

} // namespace dtc::rt

#endif // DTC_RUNTIME_COMMUNICATOR_H
