//===- Progress.cpp - the rank's record for dtc run's supervisor
//------------===//
#include "dtc/runtime/Progress.h"

#include <atomic>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace dtc::rt::progress {

namespace {
Record *gRecord = nullptr;
// Lock-free, so a signal handler may read it.
std::atomic<int> gSaving{0}, gCommitting{0};
static_assert(std::atomic<int>::is_always_lock_free);
std::string gDir;
int gRank = -1;

template <class T> void store(int64_t &field, T v) {
  __atomic_store_n(&field, int64_t(v), __ATOMIC_RELAXED);
}
} // namespace

std::string recordPath(const std::string &dir, int rank) {
  return dir + "/rank-" + std::to_string(rank) + ".progress";
}
std::string errorPath(const std::string &dir, int rank) {
  return dir + "/rank-" + std::to_string(rank) + ".error";
}
std::string stopSignalPath(const std::string &dir) {
  return dir + "/stop-signal";
}

int64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool attach(const std::string &dir, int rank) {
  if (gRecord)
    return true;
  const std::string path = recordPath(dir, rank);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return false;
  if (::ftruncate(fd, sizeof(Record)) != 0) {
    ::close(fd);
    return false;
  }
  void *m = ::mmap(nullptr, sizeof(Record), PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
  ::close(fd);
  if (m == MAP_FAILED)
    return false;
  gRecord = static_cast<Record *>(m);
  gDir = dir;
  gRank = rank;
  store(gRecord->pid, ::getpid());
  store(gRecord->step, -1);
  store(gRecord->instruction, -1);
  store(gRecord->state, State::Starting);
  store(gRecord->heartbeatNs, nowNs());
  store(gRecord->saving, gSaving.load() > 0);
  __atomic_store_n(&gRecord->magic, kMagic, __ATOMIC_RELEASE);
  return true;
}

const std::string &directory() { return gDir; }

void setStep(int64_t step) {
  if (!gRecord)
    return;
  store(gRecord->step, step);
  store(gRecord->heartbeatNs, nowNs());
}

void setInstruction(int64_t instruction) {
  if (!gRecord)
    return;
  store(gRecord->instruction, instruction);
  store(gRecord->heartbeatNs, nowNs());
}

void setState(State s) {
  if (!gRecord)
    return;
  store(gRecord->state, s);
  store(gRecord->heartbeatNs, nowNs());
}

void heartbeat() {
  if (gRecord)
    store(gRecord->heartbeatNs, nowNs());
}

SavingScope::SavingScope() {
  if (gSaving.fetch_add(1) == 0 && gRecord)
    store(gRecord->saving, 1);
}

SavingScope::~SavingScope() {
  if (gSaving.fetch_sub(1) == 1 && gRecord)
    store(gRecord->saving, 0);
}

bool saving() { return gSaving.load() > 0; }

CommitScope::CommitScope() { gCommitting.fetch_add(1); }
CommitScope::~CommitScope() { gCommitting.fetch_sub(1); }
bool committing() { return gCommitting.load() > 0; }

bool reportFailure(const std::string &message) {
  if (!gRecord)
    return false;
  // The file is complete when it appears (the supervisor polls for it).
  const std::string path = errorPath(gDir, gRank), temp = path + ".tmp";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return false;
  const std::string line = message + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == ssize_t(line.size());
  ::close(fd);
  if (!ok || ::rename(temp.c_str(), path.c_str()) != 0) {
    ::unlink(temp.c_str());
    return false;
  }
  store(gRecord->state, State::Failed);
  return true;
}

} // namespace dtc::rt::progress
