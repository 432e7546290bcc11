//===- Progress.h - where a rank is, for the supervisor of `dtc run` -*- C++
//-*-===//
//
// `dtc run` (dtc-run --launch) supervises its ranks through a status
// directory: each rank maps a small record there and keeps in it its
// process id, the step and instruction it is in, whether it is computing or
// waiting in a communication, and a heartbeat. When a rank times out, the
// supervisor reads the others' records to name the rank that stopped making
// progress. A rank that fails alone (a timeout, an MPI error: nothing the
// ranks can agree on any more) leaves its message in the directory too, so
// that the supervisor prints one line for the whole job.
//
// Every function here is cheap (plain stores into shared memory) and does
// nothing until attach() succeeded: the runtime calls them unconditionally.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_PROGRESS_H
#define DTC_RUNTIME_PROGRESS_H

#include <cstdint>
#include <string>

namespace dtc::rt::progress {

/// What a rank is doing.
enum class State : int32_t {
  Starting = 0,  ///< before the first step (loading, allocating, splitting)
  Computing = 1, ///< running an instruction or the loop around it
  Waiting = 2,   ///< waiting in a communication
  Finished = 3,  ///< left normally
  Failed = 4,    ///< left with an error of its own (see the error file)
};

/// The record as stored in `rank-R.progress` (all fields 8-byte aligned, so
/// that plain aligned loads and stores are atomic on every platform dtc
/// supports).
struct Record {
  int64_t magic; ///< kMagic once initialised
  int64_t pid;
  int64_t step;        ///< global step, -1 before the first
  int64_t instruction; ///< index in the program, -1 between instructions
  int64_t state;       ///< State
  int64_t heartbeatNs; ///< CLOCK_MONOTONIC of the last sign of life
  int64_t saving;      ///< nonzero while the rank writes a checkpoint
};
constexpr int64_t kMagic = 0x647463707267ll; // "dtcprg"

/// Files of rank `rank` in a status directory.
std::string recordPath(const std::string &dir, int rank);
std::string errorPath(const std::string &dir, int rank);
/// The signal `dtc run` received and passed on ("SIGTERM"), if any.
std::string stopSignalPath(const std::string &dir);

/// Maps this rank's record (creating it). Returns false (and stays detached)
/// if the directory cannot be written.
bool attach(const std::string &dir, int rank);
/// The directory attached to ("" if none).
const std::string &directory();

void setStep(int64_t step);
void setInstruction(int64_t instruction);
void setState(State s);
/// A sign of life while waiting.
void heartbeat();

/// While a SavingScope lives the rank is writing a checkpoint: a second
/// interrupt waits for it instead of stopping the rank (a third aborts the
/// save, and the checkpoint on disk stays the previous one). Nests, and
/// counts the ranks of a process (--local-ranks) together.
class SavingScope {
public:
  SavingScope();
  ~SavingScope();
  SavingScope(const SavingScope &) = delete;
  SavingScope &operator=(const SavingScope &) = delete;
};
/// Whether some rank of this process is writing a checkpoint; safe in a
/// signal handler.
bool saving();

/// While a CommitScope lives the rank is moving a checkpoint's files into
/// place: a request to abort the save waits until they all are (then the
/// run stops as asked, with the new checkpoint).
class CommitScope {
public:
  CommitScope();
  ~CommitScope();
  CommitScope(const CommitScope &) = delete;
  CommitScope &operator=(const CommitScope &) = delete;
};
/// Whether some rank of this process is in a CommitScope; safe in a signal
/// handler.
bool committing();
/// Leaves `message` for the supervisor (and marks the rank Failed).
/// Returns false when detached or the file could not be written, so the
/// caller prints it instead.
bool reportFailure(const std::string &message);

/// Monotonic clock in nanoseconds (the heartbeat's clock).
int64_t nowNs();

} // namespace dtc::rt::progress

#endif // DTC_RUNTIME_PROGRESS_H
