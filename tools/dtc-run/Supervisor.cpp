//===- Supervisor.cpp - dtc run's launcher and each rank's guard
//-------------===//
#include "Supervisor.h"

#include "dtc/runtime/Progress.h"
#include "dtc/runtime/Trainer.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <poll.h>
#include <set>
#include <sstream>
#include <string>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace dtc::rt;

namespace {

void printError(const std::string &msg) {
  std::fprintf(stderr, "dtc-run: error: %s\n", msg.c_str());
  std::fflush(stderr);
}

std::string selfPath() {
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return "";
  self[n] = '\0';
  return self;
}

std::string readSmallFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// ---- the guard
// ------------------------------------------------------------------------------

volatile sig_atomic_t gChild = 0;

// Signals pass on as they are. A stopped rank stays stopped: the
// supervisor must still see it stopped when it looks, and ends it itself.
void forwardToChild(int sig) {
  const pid_t child = gChild;
  if (child > 0)
    ::kill(child, sig);
}

/// The rank as the launcher numbered it (Open MPI, PMIx, MPICH), -1 if none.
int rankFromEnvironment() {
  for (const char *var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char *v = std::getenv(var); v && *v)
      return std::atoi(v);
  return -1;
}

} // namespace

int guardRank(int argc, char **argv) {
  const std::string self = selfPath();
  std::vector<std::string> args = {self};
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) != "--guard")
      args.push_back(argv[i]);
  std::vector<char *> cargs;
  for (std::string &s : args)
    cargs.push_back(s.data());
  cargs.push_back(nullptr);

  const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR2};
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : forwarded)
    sigaddset(&block, sig);
  ::sigprocmask(SIG_BLOCK, &block, &old);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = forwardToChild;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : forwarded)
    ::sigaction(sig, &sa, nullptr);

  const pid_t child = ::fork();
  if (child < 0) {
    printError(std::string("cannot start a rank: ") + std::strerror(errno));
    return 1;
  }
  if (child == 0) {
    // A group of its own: mpirun signals the guard's group (Open MPI's
    // default), and the rank must get each signal once, from the guard.
    ::setpgid(0, 0);
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    ::execv(self.c_str(), cargs.data());
    printError("cannot run " + self + ": " + std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(child, child);
  gChild = child;
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  const int code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (const char *dir = std::getenv("DTC_RUN_STATUS_DIR"); dir && *dir) {
    const std::string path =
        std::string(dir) + "/guard-" + std::to_string(child) + ".exit";
    std::ofstream out(path + ".tmp");
    out << "rank " << rankFromEnvironment() << "\npid " << child << "\n";
    if (WIFSIGNALED(status))
      out << "signal " << WTERMSIG(status) << "\n";
    else
      out << "exit " << code << "\n";
    out.close();
    std::rename((path + ".tmp").c_str(), path.c_str());
  }
  return code;
}

// ---- the launcher
// -------------------------------------------------------------------------

namespace {

int gSignalPipe[2] = {-1, -1};
/// A signal that came before the pipe existed (while the launch was being
/// checked): handed to the pipe once it does.
volatile sig_atomic_t gEarlySignal = 0;

void onLauncherSignal(int sig) {
  const unsigned char b = (unsigned char)sig;
  const int saved = errno;
  if (gSignalPipe[1] < 0) {
    if (sig != SIGCHLD && gEarlySignal == 0)
      gEarlySignal = sig;
  } else {
    (void)!::write(gSignalPipe[1], &b, 1);
  }
  errno = saved;
}

/// Every process below this one (children, their children, and orphans
/// adopted by this subreaper), from /proc.
std::vector<pid_t> descendants() {
  std::map<pid_t, std::vector<pid_t>> children;
  if (DIR *d = ::opendir("/proc")) {
    while (dirent *e = ::readdir(d)) {
      const pid_t pid = pid_t(std::atoi(e->d_name));
      if (pid <= 0)
        continue;
      const std::string stat =
          readSmallFile("/proc/" + std::string(e->d_name) + "/stat");
      const size_t close = stat.rfind(')');
      if (close == std::string::npos)
        continue;
      std::istringstream rest(stat.substr(close + 2));
      char state;
      pid_t ppid = 0;
      rest >> state >> ppid;
      children[ppid].push_back(pid);
    }
    ::closedir(d);
  }
  std::vector<pid_t> out, stack = {::getpid()};
  while (!stack.empty()) {
    const pid_t p = stack.back();
    stack.pop_back();
    for (pid_t c : children[p]) {
      out.push_back(c);
      stack.push_back(c);
    }
  }
  return out;
}

void reapChildren() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

/// Kills every process of the job that is still there and reaps them.
void killJob() {
  for (int round = 0; round < 50; ++round) {
    reapChildren();
    std::vector<pid_t> left = descendants();
    // Zombies are already gone; only count the living.
    left.erase(std::remove_if(left.begin(), left.end(),
                              [](pid_t p) {
                                const std::string s = readSmallFile(
                                    "/proc/" + std::to_string(p) + "/stat");
                                const size_t close = s.rfind(')');
                                return close == std::string::npos ||
                                       s.size() < close + 3 ||
                                       s[close + 2] == 'Z';
                              }),
               left.end());
    if (left.empty())
      return;
    for (pid_t p : left)
      ::kill(p, SIGKILL);
    ::usleep(20000);
  }
}

/// Process state letter from /proc (R, S, D, T, t, Z), '?' if gone.
char processState(pid_t pid) {
  const std::string s = readSmallFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = s.rfind(')');
  if (close == std::string::npos || s.size() < close + 3)
    return '?';
  return s[close + 2];
}

bool readRecord(const std::string &dir, int rank, progress::Record &rec) {
  const int fd =
      ::open(progress::recordPath(dir, rank).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  const bool ok = ::pread(fd, &rec, sizeof rec, 0) == ssize_t(sizeof rec) &&
                  rec.magic == progress::kMagic;
  ::close(fd);
  return ok;
}

std::string where(const progress::Record &rec) {
  if (rec.step < 0)
    return "before the first step";
  std::string s = "in step " + std::to_string(rec.step);
  if (rec.instruction >= 0)
    s += ", instruction " + std::to_string(rec.instruction);
  return s;
}

std::string listRanks(const std::vector<int> &ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

/// Why ranks without an error of their own are holding the others up.
std::string stuckRanks(const std::string &dir, int64_t devices,
                       const std::set<int> &failed) {
  const int64_t now = progress::nowNs();
  std::string out;
  for (int r = 0; r < int(devices); ++r) {
    if (failed.count(r))
      continue;
    progress::Record rec;
    if (!readRecord(dir, r, rec)) {
      out += (out.empty() ? "" : "; ") + std::string("rank ") +
             std::to_string(r) +
             " never reported (it did not start, or runs on another node)";
      continue;
    }
    const char state = processState(pid_t(rec.pid));
    const double idle = double(now - rec.heartbeatNs) / 1e9;
    std::string why;
    if (state == 'T')
      why = "is stopped (SIGSTOP, or a terminal stopped it)";
    else if (state == 't')
      why = "is stopped by a debugger";
    else if (state == 'D')
      why = "is blocked in the kernel (waiting for I/O?)";
    else if (state == 'Z' || state == '?')
      continue; // it left: its guard's record or its own error says why
    else if (idle > 2.0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.0f", idle);
      why = std::string("has shown no sign of life for ") + buf + " s" +
            (rec.state == int64_t(progress::State::Computing)
                 ? " (busy computing?)"
                 : "");
    }
    if (why.empty())
      continue; // waiting like the others

    out += (out.empty() ? "" : "; ") + std::string("rank ") +
           std::to_string(r) + " (pid " + std::to_string(rec.pid) +
           ") stopped making progress " + where(rec) + ": it " + why;
  }
  return out;
}

struct GuardExit {
  int rank = -1;
  pid_t pid = 0;
  int signal = 0, code = 0;
};

std::vector<GuardExit> guardExits(const std::string &dir) {
  std::vector<GuardExit> out;
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("guard-", 0) != 0 || name.size() < 5 ||
          name.compare(name.size() - 5, 5, ".exit") != 0)
        continue;
      std::istringstream in(readSmallFile(dir + "/" + name));
      GuardExit g;
      std::string key;
      long value;
      while (in >> key >> value) {
        if (key == "rank")
          g.rank = int(value);
        else if (key == "pid")
          g.pid = pid_t(value);
        else if (key == "signal")
          g.signal = int(value);
        else if (key == "exit")
          g.code = int(value);
      }
      out.push_back(g);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end(), [](const GuardExit &a, const GuardExit &b) {
    return a.rank < b.rank;
  });
  return out;
}

/// Removes `dir` and everything below it (Open MPI's session directory
/// included, if mpirun left one).
void removeDirectory(const std::string &dir) {
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d)) {
      const std::string name = e->d_name, path = dir + "/" + name;
      if (name == "." || name == "..")
        continue;
      struct stat st;
      if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        removeDirectory(path);
      else
        ::unlink(path.c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

bool isBannerRule(const std::string &line) {
  return line.size() >= 20 && line.find_first_not_of('-') == std::string::npos;
}

/// mpirun's held-back text as one line.
std::string summarize(const std::vector<std::string> &held) {
  std::string s;
  for (const std::string &line : held) {
    if (isBannerRule(line))
      continue;
    std::string t = line;
    t.erase(0, t.find_first_not_of(" \t"));
    if (t.empty())
      continue;
    s += (s.empty() ? "" : " ") + t;
  }
  if (s.size() > 600)
    s = s.substr(0, 600) + " ...";
  return s;
}

/// A private directory for the ranks' progress records and failures
/// ("" after printing why there is none).
std::string makeStatusDirectory() {
  const char *tmp = std::getenv("TMPDIR");
  std::string dirTemplate =
      std::string(tmp && *tmp ? tmp : "/tmp") + "/dtc-run-XXXXXX";
  if (!::mkdtemp(dirTemplate.data())) {
    printError("cannot create a status directory in " +
               std::string(tmp && *tmp ? tmp : "/tmp") + ": " +
               std::strerror(errno));
    return "";
  }
  return dirTemplate;
}

/// mpirun's command line: every rank is this program's guard, with this
/// program's arguments less --launch.
std::vector<std::string>
mpirunCommand(const std::string &mpirun, const std::string &self,
              int64_t devices, const std::vector<std::string> &mpirunArgs,
              const std::vector<std::string> &rankArgs, int argc, char **argv) {
  std::vector<std::string> args = {mpirun, "-np", std::to_string(devices)};
  if (::geteuid() == 0)
    args.push_back("--allow-run-as-root");
  args.push_back("--oversubscribe");
  args.push_back("-x");
  args.push_back("DTC_RUN_STATUS_DIR");
  args.insert(args.end(), mpirunArgs.begin(), mpirunArgs.end());
  args.push_back(self);
  args.push_back("--guard");
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) != "--launch")
      args.push_back(argv[i]);
  args.insert(args.end(), rankArgs.begin(), rankArgs.end());
  return args;
}

/// mpirun, running, and the read end of its stderr.
struct Job {
  pid_t pid = -1;
  int stderrFd = -1;
};

/// Starts `args` (mpirun) in a process group of its own with its stderr on
/// a pipe, after installing the launcher's signal handlers. Returns false
/// after printing why it could not.
bool startJob(std::vector<std::string> &args, Job &job) {
  std::vector<char *> cargs;
  for (std::string &s : args)
    cargs.push_back(s.data());
  cargs.push_back(nullptr);

  // Orphans of the job (a rank whose guard died) become our children.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  int errPipe[2], execPipe[2];
  if (::pipe2(gSignalPipe, O_CLOEXEC | O_NONBLOCK) != 0 ||
      ::pipe2(errPipe, O_CLOEXEC) != 0 || ::pipe2(execPipe, O_CLOEXEC) != 0) {
    printError(std::string("cannot create a pipe: ") + std::strerror(errno));
    return false;
  }
  if (gEarlySignal != 0) {
    const unsigned char b = (unsigned char)gEarlySignal;
    (void)!::write(gSignalPipe[1], &b, 1);
  }
  // SIGINT, SIGTERM and SIGHUP are caught since catchLaunchSignals; SIGCHLD
  // only wakes the loop of watchJob (mpirun ended, or an adopted rank).
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = onLauncherSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGCHLD, &sa, nullptr);

  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) {
    printError(std::string("cannot start mpirun: ") + std::strerror(errno));
    return false;
  }
  if (pid == 0) {
    // mpirun in a group of its own: a terminal's Ctrl-C reaches only us,
    // and we decide what the ranks get.
    ::setpgid(0, 0);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD})
      ::signal(sig, SIG_DFL);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0)
      ::dup2(null, 0);
    ::dup2(errPipe[1], 2);
    ::execvp(cargs[0], cargs.data());
    const int err = errno;
    (void)!::write(execPipe[1], &err, sizeof err);
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(errPipe[1]);
  ::close(execPipe[1]);
  int execErr = 0;
  if (::read(execPipe[0], &execErr, sizeof execErr) ==
      ssize_t(sizeof execErr)) {
    ::waitpid(pid, nullptr, 0);
    printError("cannot run " + args[0] + ": " + std::strerror(execErr) +
               " (set DTC_MPIRUN to the mpirun to use)");
    return false;
  }
  ::close(execPipe[0]);
  job.pid = pid;
  job.stderrFd = errPipe[0];
  return true;
}

/// What the launcher saw of the job while it ran.
struct JobWatch {
  // mpirun's stderr: the ranks' own lines pass through; mpirun's are held
  // back (its banners whole).
  std::vector<std::string> held;
  bool inBanner = false, rankErrorShown = false;
  std::string partial;
  // The job and the signals the launcher received.
  int jobStatus = 0, signals = 0, userSignal = 0;
  int64_t lastSignalNs = 0;
  bool jobDone = false, weKilled = false, stderrOpen = true;
  bool waitingForSave = false, abortedSave = false;
  std::set<int> failed; // ranks that left a failure of their own
  std::map<int, std::string> failures;
  std::string stuck; // the analysis at the first failure
  int64_t killAtNs = 0;

  void takeLine(const std::string &line) {
    if (isBannerRule(line)) {
      inBanner = !inBanner;
      held.push_back(line);
    } else if (inBanner) {
      held.push_back(line);
    } else if (line.rfind("mpirun: Forwarding signal", 0) == 0) {
      // our own SIGUSR2, passed on
    } else if (line.rfind("dtc-run: ", 0) == 0) {
      std::fprintf(stderr, "%s\n", line.c_str());
      std::fflush(stderr);
      rankErrorShown = rankErrorShown || line.rfind("dtc-run: error: ", 0) == 0;
    } else {
      held.push_back(line);
    }
  }
  void takeBytes(const char *data, size_t n) {
    partial.append(data, n);
    size_t nl;
    while ((nl = partial.find('\n')) != std::string::npos) {
      takeLine(partial.substr(0, nl));
      partial.erase(0, nl + 1);
    }
  }
};

constexpr int64_t kGraceNs = int64_t(5e9);

/// The ranks writing a checkpoint now, by their records.
std::vector<pid_t> savingRanks(const std::string &dir, int64_t devices) {
  std::vector<pid_t> pids;
  for (int r = 0; r < int(devices); ++r) {
    progress::Record rec;
    if (readRecord(dir, r, rec) && rec.saving)
      pids.push_back(pid_t(rec.pid));
  }
  return pids;
}

/// The signals the launcher received since the last look: the first asks
/// the ranks to finish the step and save; the second ends the job, or,
/// when it comes during the save, lets the save finish; the one after that
/// stops the ranks at once (they remove their partial files, so the
/// checkpoint on disk stays the previous one).
void handleSignals(JobWatch &w, pid_t job, const std::string &dir,
                   int64_t devices) {
  unsigned char sig;
  while (::read(gSignalPipe[0], &sig, 1) == 1) {
    if (sig == SIGCHLD)
      continue;
    const int64_t now = progress::nowNs();
    if (w.signals > 0 && now - w.lastSignalNs < kRepeatedSignalNs)
      continue;
    w.lastSignalNs = now;
    ++w.signals;
    if (w.signals == 1) {
      // Finish the step, save, stop: the ranks look for this file before
      // their first step and after every step. No signal goes through
      // mpirun to them: one that lands while a rank is starting, or inside
      // an MPI call, could end it instead of asking it to stop.
      w.userSignal = sig;
      const std::string path = progress::stopSignalPath(dir);
      std::ofstream(path + ".tmp") << signalName(sig) << "\n";
      ::rename((path + ".tmp").c_str(), path.c_str());
      continue;
    }
    const std::vector<pid_t> saving = savingRanks(dir, devices);
    if (!saving.empty() && !w.waitingForSave) {
      w.waitingForSave = true;
      std::fputs(kWaitingForSaveNotice, stderr);
      std::fflush(stderr);
      continue;
    }
    w.weKilled = true;
    if (!saving.empty()) {
      // The ranks' own handler (SIGUSR1) removes what they were writing.
      for (pid_t pid : saving)
        ::kill(pid, SIGUSR1);
      w.abortedSave = true;
      w.killAtNs = now + kGraceNs;
    } else if (w.signals == 2) {
      ::kill(-job, SIGTERM); // mpirun ends the job (the ranks clean up)
      w.killAtNs = now + kGraceNs;
    } else {
      killJob();
    }
  }
}

/// The failures ranks left in the status directory since the last look.
void collectFailures(JobWatch &w, const std::string &dir, int64_t devices) {
  const bool firstFailure = w.failed.empty();
  for (int r = 0; r < int(devices); ++r) {
    if (w.failed.count(r))
      continue;
    const std::string path = progress::errorPath(dir, r);
    if (!exists(path))
      continue;
    std::string msg = readSmallFile(path);
    while (!msg.empty() && msg.back() == '\n')
      msg.pop_back();
    w.failed.insert(r);
    w.failures[r] = msg;
  }
  if (firstFailure && !w.failed.empty()) {
    // Now, before the job is torn down: who is holding the others up?
    w.stuck = stuckRanks(dir, devices, w.failed);
    if (!w.killAtNs || w.killAtNs > progress::nowNs() + kGraceNs)
      w.killAtNs = progress::nowNs() + kGraceNs;
  }
}

/// Until mpirun ended and its stderr closed: passes the ranks' lines on,
/// handles signals, collects failures, and ends the job a grace period
/// after a failure or after mpirun itself ended.
void watchJob(const Job &job, const std::string &dir, int64_t devices,
              JobWatch &w) {
  while (!w.jobDone || w.stderrOpen) {
    pollfd fds[2] = {{job.stderrFd, POLLIN, 0}, {gSignalPipe[0], POLLIN, 0}};
    const int n =
        ::poll(w.stderrOpen ? fds : fds + 1, w.stderrOpen ? 2 : 1, 200);
    if (n < 0 && errno != EINTR)
      break;
    if (w.stderrOpen && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      char buf[4096];
      const ssize_t got = ::read(job.stderrFd, buf, sizeof buf);
      if (got > 0)
        w.takeBytes(buf, size_t(got));
      else if (got == 0 || errno != EINTR)
        w.stderrOpen = false;
    }
    handleSignals(w, job.pid, dir, devices);
    if (!w.jobDone) {
      int status;
      if (::waitpid(job.pid, &status, WNOHANG) == job.pid) {
        w.jobDone = true;
        w.jobStatus = status;
        // Ranks (and their output) may still be draining; give them a moment.
        if (!w.killAtNs)
          w.killAtNs = progress::nowNs() + int64_t(2e9);
      }
    }
    collectFailures(w, dir, devices);
    if (w.killAtNs && progress::nowNs() >= w.killAtNs) {
      if (!w.jobDone)
        w.weKilled = true;
      killJob();
      if (!w.jobDone) {
        int status = 0;
        ::waitpid(job.pid, &status, 0);
        w.jobDone = true;
        w.jobStatus = status;
      }
      w.stderrOpen =
          w.stderrOpen && !w.jobDone; // nothing writes to it any more
      w.killAtNs = 0;
    }
  }
  if (!w.partial.empty())
    w.takeLine(w.partial);
}

/// The one line that says how the job failed ("" when nothing did, or the
/// ranks already said it): a rank killed by a signal, the ranks that gave
/// up, a rank that exited silently, mpirun's own failure, a second
/// interrupt. Clears the held lines it summarised.
std::string explainEnd(JobWatch &w, const std::string &dir, int jobCode) {
  if (w.abortedSave)
    return kAbortedSaveMessage;
  const std::vector<GuardExit> exits = guardExits(dir);
  std::string message;
  for (const GuardExit &g : exits) {
    if (g.signal == 0 || w.weKilled)
      continue;
    progress::Record rec;
    const std::string at = g.rank >= 0 && readRecord(dir, g.rank, rec)
                               ? " " + where(rec)
                               : std::string();
    message = "rank " + std::to_string(g.rank) + " (pid " +
              std::to_string(g.pid) + ") " +
              (g.signal == SIGKILL
                   ? "was killed by SIGKILL" + at +
                         ": likely out of memory (the kernel's OOM killer "
                         "sends SIGKILL; see dmesg)"
                   : "died of " + signalName(g.signal) + at + " (" +
                         strsignal(g.signal) + ")");
    break;
  }
  if (message.empty() && !w.failures.empty()) {
    const auto &first = *w.failures.begin();
    std::vector<int> ranks(w.failed.begin(), w.failed.end());
    message = w.stuck.empty() ? "" : w.stuck + "; ";
    message += listRanks(ranks) + " gave up (" + first.second + ")";
  }
  if (message.empty() && !w.rankErrorShown && !(w.userSignal && !w.weKilled)) {
    for (const GuardExit &g : exits)
      if (g.code != 0 && g.signal == 0) {
        message = "rank " + std::to_string(g.rank) + " (pid " +
                  std::to_string(g.pid) + ") exited with status " +
                  std::to_string(g.code) + " without a message";
        break;
      }
    if (message.empty() && jobCode != 0 && exits.empty()) {
      const std::string text = summarize(w.held);
      message =
          "mpirun failed (exit status " + std::to_string(jobCode) + ")" +
          (text.empty() ? std::string(" without a message") : ": " + text);
      w.held.clear();
    }
  }
  if (w.userSignal && w.weKilled && message.empty())
    message = "interrupted by " + signalName(w.userSignal) +
              " twice: the ranks were stopped at once (a --save-every "
              "checkpoint, if any, "
              "is the last one saved)";
  return message;
}

} // namespace

void catchLaunchSignals() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = onLauncherSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    ::sigaction(sig, &sa, nullptr);
  unblockStopSignals();
}

void unblockStopSignals() {
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    sigaddset(&stops, sig);
  ::sigprocmask(SIG_UNBLOCK, &stops, nullptr);
}

int superviseLaunch(int64_t devices, const std::vector<std::string> &mpirunArgs,
                    const std::vector<std::string> &rankArgs, int argc,
                    char **argv) {
  const char *env = std::getenv("DTC_MPIRUN");
  const std::string mpirun = env && *env ? env : "mpirun";
  const std::string self = selfPath();
  if (self.empty()) {
    printError(std::string("cannot find this program's path: ") +
               std::strerror(errno));
    return 1;
  }
  const std::string dir = makeStatusDirectory();
  if (dir.empty())
    return 1;
  // Open MPI's session directory, per job: two mpiruns starting at once in
  // one TMPDIR race to create the shared one (Open MPI 4.1 fails the loser
  // with "mkdir ... File exists"). A base the user chose is kept.
  if (const char *base = std::getenv("OMPI_MCA_orte_tmpdir_base");
      !base || !*base) {
    const std::string mpiDir = dir + "/mpi";
    if (::mkdir(mpiDir.c_str(), 0700) == 0)
      ::setenv("OMPI_MCA_orte_tmpdir_base", mpiDir.c_str(), 1);
  }
  ::setenv("DTC_RUN_STATUS_DIR", dir.c_str(), 1);
  std::vector<std::string> args =
      mpirunCommand(mpirun, self, devices, mpirunArgs, rankArgs, argc, argv);
  Job job;
  if (!startJob(args, job)) {
    removeDirectory(dir);
    return 1;
  }
  JobWatch w;
  watchJob(job, dir, devices, w);
  killJob();

  const int jobCode = WIFEXITED(w.jobStatus) ? WEXITSTATUS(w.jobStatus)
                                             : 128 + WTERMSIG(w.jobStatus);
  const std::string message = explainEnd(w, dir, jobCode);
  const bool ok = jobCode == 0 && w.failures.empty() && message.empty();
  // mpirun's own text is only shown when nothing went wrong (a warning);
  // otherwise the line above (or the ranks' own) says what happened.
  if (ok)
    for (const std::string &line : w.held)
      std::fprintf(stderr, "%s\n", line.c_str());
  if (!message.empty())
    printError(message);
  removeDirectory(dir);
  if (ok)
    return 0;
  if (w.userSignal)
    return 128 + w.userSignal;
  return 1;
}
