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
