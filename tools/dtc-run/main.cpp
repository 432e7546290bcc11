//===- dtc-run - execute a .dtc artifact on CPU ranks (MPI)
//-----------------===//
//
//   mpirun -np N dtc-run OUT.dtc --steps N [options]     (or alone: 1 rank)
//   dtc-run OUT.dtc --local-ranks N --steps N [options]  (N ranks as threads
//                                                          of this process,
//                                                          no MPI)
//   dtc-run --launch OUT.dtc --steps N [options]          (what `dtc run`
//                                                          execs: validates,
//                                                          then supervises
//                                                          mpirun)
//
// Every error is one line "dtc-run: error: ..." on stderr and a non-zero
// exit status on every rank (printed by one rank only when the ranks could
// agree on it). Under --launch the supervisor (Supervisor.cpp) reports what
// the ranks could not: a rank killed by a signal, a rank that stopped making
// progress, a launcher that failed.
//
//===----------------------------------------------------------------------===//
#include "LaunchCheck.h"
#include "RunOutput.h"
#include "Supervisor.h"

#include "dtc/artifact/MemoryPlan.h"
#include "dtc/artifact/OutputFile.h"
#include "dtc/runtime/Calibrate.h"
#include "dtc/runtime/Checkpoint.h"
#include "dtc/runtime/MpiWorld.h"
#include "dtc/runtime/Progress.h"
#include "dtc/runtime/ShardedCheckpoint.h"
#include "dtc/runtime/Suggest.h"
#include "dtc/runtime/TokenData.h"
#include "dtc/runtime/Trainer.h"

#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sched.h>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace dtc::rt;

namespace {

const char *kUsage =
    "usage: dtc-run OUT.dtc --steps N [options]\n"
    "       mpirun -np <devices> dtc-run OUT.dtc --steps N [options]\n"
    "       dtc-run --launch OUT.dtc --steps N [options]\n"
    "       dtc-run OUT.dtc --local-ranks <devices> --steps N [options]\n"
    "       dtc-run --launch --calibrate OUT.json --ranks R   (what `dtc "
    "calibrate`\n"
    "                         runs per rank count: measures this machine's "
    "kernels\n"
    "                         and collectives on R ranks placed as `dtc run` "
    "places\n"
    "                         them; docs/cost-model.md)\n"
    "\n"
    "Runs the training program of a dtc artifact on CPU or GPU ranks (one MPI "
    "rank\n"
    "per device of the artifact's mesh; run alone it is one rank; with\n"
    "--local-ranks the ranks are threads of this one process).\n"
    "\n"
    "options:\n"
    "  --steps N              training steps to run (required; 0 is allowed)\n"
    "  --seed S               seed of parameter init and synthetic inputs "
    "(default 0)\n"
    "  --backend cpu|cuda     kernel backend (default cpu); cuda runs each "
    "rank on a\n"
    "                         GPU of its node (rank % GPUs), where the build "
    "has\n"
    "                         the CUDA backend (docs/backends.md)\n"
    "  --collectives nccl|mpi|local\n"
    "                         how --backend cuda communicates: nccl (default,\n"
    "                         one GPU per rank); mpi: staged through host\n"
    "                         memory and the host communicator (MPI, or "
    "threads\n"
    "                         with --local-ranks), a test mode that lets "
    "several\n"
    "                         ranks share one GPU; local (with "
    "--local-ranks):\n"
    "                         as mpi, but all-reduces run on the GPU over the\n"
    "                         ranks' buffers and overlap the kernels as "
    "NCCL's\n"
    "                         would (not yet checked on a GPU, "
    "docs/backends.md);\n"
    "                         the cpu backend always uses the host "
    "communicator\n"
    "  --local-ranks N        run the artifact's N ranks as threads of this "
    "process,\n"
    "                         without MPI (N must be the artifact's device "
    "count);\n"
    "                         e.g. to check a partitioned plan on one GPU\n"
    "  --data FILE            token file for the model's ids/labels inputs\n"
    "                         (default: none, synthetic inputs)\n"
    "  --data-dtype uint16|uint32\n"
    "                         token width of --data (default uint16)\n"
    "  --shuffle              take each pass over --data's windows in a "
    "random\n"
    "                         order drawn from --seed (default: the file's "
    "order);\n"
    "                         a resumed run continues the same order\n"
    "  --eval-data FILE       token file (of --data-dtype) for evaluation: "
    "the loss\n"
    "                         of its first batches in the file's order, "
    "forward only\n"
    "                         (no backward, no update), printed as `eval step "
    "K loss X`\n"
    "                         after the last step (K: steps trained); with "
    "--steps 0,\n"
    "                         once, of the --load'ed (or initial) "
    "parameters\n"
    "  --eval-every N         also evaluate after every N-th step (when the "
    "step count\n"
    "                         is a multiple of N; needs --eval-data)\n"
    "  --eval-batches K       global batches per evaluation (default: 10, or "
    "fewer\n"
    "                         if the file holds fewer; needs --eval-data)\n"
    "  --log LOG.jsonl        per-step JSON lines {step, loss, lr, "
    "step_time_s,\n"
    "                         tokens_per_s, eval_loss}; with --load, continues "
    "the log of "
    "the\n"
    "                         run that wrote the checkpoint (default: none)\n"
    "  --save CKPT            write parameters (safetensors) at the end, and "
    "the\n"
    "                         optimizer state to CKPT.optim (default: none);\n"
    "                         --save DIR/ (a directory) writes a sharded "
    "checkpoint:\n"
    "                         every rank its own pieces, in parallel\n"
    "  --overwrite            let --save replace a checkpoint of a later step "
    "than\n"
    "                         the run starts at (not --load'ed), and --log "
    "restart a\n"
    "                         log of earlier steps (default: both refused)\n"
    "  --save-every N         also save CKPT every N steps (default 0: at the "
    "end only)\n"
    "  --print-every N        on stderr: a banner (ranks, parameters, tokens "
    "per step,\n"
    "                         steps per pass), then every N steps tokens/s, "
    "elapsed\n"
    "                         time and ETA (default: 10 when dtc run's stderr "
    "is a\n"
    "                         terminal, else 0: none)\n"
    "  --load CKPT|DIR        start from a checkpoint (a file or a sharded "
    "directory,\n"
    "                         saved under any mesh and plan), continuing its "
    "step count\n"
    "                         (default: none)\n"
    "  --stats FILE.json      write memory bytes per category (the slots, and "
    "the\n"
    "                         allocator's measured peak with staging and "
    "kernel\n"
    "                         workspace), collective bytes per step and time "
    "per\n"
    "                         kernel and shape (with\n"
    "                         GFLOP/s), and print the kernels that took "
    "longest\n"
    "                         with their share of the step (default: none)\n"
    "  --trace DIR            write a timeline per rank, DIR/rank-R.json "
    "(Chrome /\n"
    "                         Perfetto trace events: kernels, collectives with "
    "bytes\n"
    "                         and communicator, steps, memory per category); "
    "DIR is\n"
    "                         created if missing (default: none)\n"
    "  --save-step FILE       write the last step's inputs and outputs (e.g. "
    "the\n"
    "                         gradients NAME:grad of dtc compile --optimizer "
    "none),\n"
    "                         gathered, as safetensors (default: none; needs "
    "--steps >= 1)\n"
    "  --threads N            kernel threads per rank (default: "
    "OMP_NUM_THREADS or\n"
    "                         OPENBLAS_NUM_THREADS if set, else cores / ranks "
    "on\n"
    "                         the node; with --launch each rank is bound to N "
    "cores\n"
    "                         of its own when the node has enough)\n"
    "  --timeout SECONDS      longest wait in any collective before every rank "
    "that\n"
    "                         is still alive gives up with an error naming the "
    "step\n"
    "                         and the collective (default 300; 0 = wait "
    "forever)\n"
    "  --no-memory-check      start even if the ranks on this node need more "
    "memory\n"
    "                         than it has available (checked by default, "
    "before\n"
    "                         anything is allocated)\n"
    "  --launch               validate everything here, then start and "
    "supervise\n"
    "                         mpirun -np <devices> with the same arguments\n"
    "                         (env DTC_MPIRUN: mpirun path, DTC_MPIRUN_ARGS: "
    "extra flags)\n"
    "  --help                 this text\n"
    "\n"
    "Outputs (--log, --save, --stats, --trace, --save-step) never overwrite "
    "an\n"
    "input; a regular file is replaced atomically, /dev/null, /dev/stdout and\n"
    "FIFOs are written in place. --save never replaces a checkpoint of the\n"
    "run's first step or later that it did not --load, and --log never\n"
    "restarts a log of step records, unless --overwrite.\n"
    "SIGINT or SIGTERM: the step in progress finishes, --save is written, and "
    "the\n"
    "run exits with status 128+signal; a second signal stops at once (during\n"
    "the save it waits for the save, and a third stops at once, keeping the\n"
    "previous checkpoint).\n";

struct Options {
  std::string artifact;
  /// --calibrate OUT.json: measure this machine instead of training;
  /// --ranks: how many ranks (under --launch).
  std::string calibrateOut;
  int calibrateRanks = 0;
  bool haveSteps = false, launch = false, guard = false;
  /// --local-ranks: ranks as threads of this process (0: MPI or one rank).
  int localRanks = 0;
  /// --print-every N: a banner, then every N steps (and the last) a line
  /// of throughput, elapsed time and ETA on stderr (0: none; -1: not
  /// given, which --launch turns into 10 when its stderr is a terminal).
  int64_t printEvery = -1;
  TrainOptions train;
};

bool parseU64(const std::string &s, uint64_t &v) {
  if (s.empty() || s.size() > 20)
    return false;
  unsigned __int128 acc = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return false;
    acc = acc * 10 + unsigned(c - '0');
    if (acc > UINT64_MAX)
      return false;
  }
  v = uint64_t(acc);
  return true;
}

const std::vector<std::string> kBooleanFlags = {
    "--launch",          "--help",    "--guard",
    "--no-memory-check", "--shuffle", "--overwrite"};
const std::vector<std::string> kValueFlags = {
    "--steps",      "--seed",        "--backend",     "--data",
    "--data-dtype", "--log",         "--save",        "--load",
    "--stats",      "--timeout",     "--save-every",  "--threads",
    "--trace",      "--save-step",   "--collectives", "--local-ranks",
    "--calibrate",  "--ranks",       "--print-every", "--eval-data",
    "--eval-every", "--eval-batches"};

bool isOneOf(const std::string &name, const std::vector<std::string> &flags) {
  return std::find(flags.begin(), flags.end(), name) != flags.end();
}

// "unknown flag --stpes; did you mean '--steps'? (see --help)"
std::string unknownFlag(const std::string &name) {
  std::vector<std::string> all = kValueFlags;
  all.insert(all.end(), kBooleanFlags.begin(), kBooleanFlags.end());
  return "unknown flag " + name + dtc::didYouMean(name, all) + " (see --help)";
}

/// --calibrate's arguments: "" or the error.
std::string calibrationArgsError(const Options &o) {
  if (o.calibrateOut.empty())
    return "--ranks is --calibrate's (an artifact says its own ranks)";
  if (!o.artifact.empty() || o.haveSteps)
    return "--calibrate measures the machine; it takes no artifact and no "
           "--steps";
  if (o.launch && o.calibrateRanks == 0)
    return "--launch --calibrate needs --ranks R";
  if (o.localRanks > 0)
    return "--calibrate measures MPI ranks placed as `dtc run` places them; "
           "use --launch --ranks R, not --local-ranks";
  return "";
}

// One value flag of parseArgs (known, with a non-empty value): "" or an
// error message.
std::string applyValueFlag(const std::string &name, const std::string &value,
                           Options &o) {
  // The flags that name a file or directory take it as given.
  static const std::pair<const char *, std::string TrainOptions::*>
      kPathFlags[] = {{"--data", &TrainOptions::dataPath},
                      {"--eval-data", &TrainOptions::evalDataPath},
                      {"--log", &TrainOptions::logPath},
                      {"--save", &TrainOptions::savePath},
                      {"--load", &TrainOptions::loadPath},
                      {"--stats", &TrainOptions::statsPath},
                      {"--trace", &TrainOptions::traceDir},
                      {"--save-step", &TrainOptions::stepPath}};
  for (const auto &[flag, path] : kPathFlags)
    if (name == flag) {
      o.train.*path = value;
      return "";
    }
  if (name == "--steps") {
    uint64_t v;
    if (!parseU64(value, v) || v > uint64_t(INT64_MAX))
      return "--steps: expected a non-negative integer, got '" + value + "'";
    o.train.steps = int64_t(v);
    o.haveSteps = true;
  } else if (name == "--seed") {
    if (!parseU64(value, o.train.seed))
      return "--seed: expected an integer in [0, 2^64), got '" + value + "'";
  } else if (name == "--backend") {
    if (value != "cpu" && value != "cuda")
      return "--backend: expected cpu or cuda, got '" + value + "'";
    o.train.backend = value;
  } else if (name == "--collectives") {
    if (value != "nccl" && value != "mpi" && value != "local")
      return "--collectives: expected nccl, mpi or local, got '" + value + "'";
    o.train.collectives = value;
  } else if (name == "--local-ranks") {
    uint64_t v;
    if (!parseU64(value, v) || v < 1 || v > 4096)
      return "--local-ranks: expected an integer in [1, 4096], got '" + value +
             "'";
    o.localRanks = int(v);
  } else if (name == "--print-every") {
    uint64_t v;
    if (!parseU64(value, v) || v > uint64_t(INT64_MAX))
      return "--print-every: expected an integer >= 0, got '" + value + "'";
    o.printEvery = int64_t(v);
  } else if (name == "--calibrate") {
    o.calibrateOut = value;
  } else if (name == "--ranks") {
    uint64_t v;
    if (!parseU64(value, v) || v < 1 || v > 4096)
      return "--ranks: expected an integer in [1, 4096], got '" + value + "'";
    o.calibrateRanks = int(v);
  } else if (name == "--eval-every" || name == "--eval-batches") {
    uint64_t v;
    if (!parseU64(value, v) || v < 1 || v > uint64_t(INT64_MAX))
      return name + ": expected an integer >= 1, got '" + value + "'";
    (name == "--eval-every" ? o.train.evalEvery : o.train.evalBatches) =
        int64_t(v);
  } else if (name == "--data-dtype") {
    if (!parseTokenDType(value, o.train.dataDtype))
      return "--data-dtype: expected uint16 or uint32, got '" + value + "'";
  } else if (name == "--save-every") {
    uint64_t v;
    if (!parseU64(value, v) || v > uint64_t(INT64_MAX))
      return "--save-every: expected a non-negative integer, got '" + value +
             "'";
    o.train.saveEvery = int64_t(v);
  } else if (name == "--timeout") {
    char *end = nullptr;
    errno = 0;
    const double v = std::strtod(value.c_str(), &end);
    if (*end != '\0' || errno == ERANGE || !std::isfinite(v) || v < 0 ||
        v > 1e9)
      return "--timeout: expected a number of seconds >= 0 (0 = none), got "
             "'" +
             value + "'";
    o.train.timeoutSeconds = v;
  } else if (name == "--threads") {
    uint64_t v;
    if (!parseU64(value, v) || v < 1 || v > 4096)
      return "--threads: expected an integer in [1, 4096], got '" + value + "'";
    o.train.threads = int(v);
  }
  return "";
}

// Parses argv; returns "" or an error message.
std::string parseArgs(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      std::string name = arg, value;
      bool inlineValue = false;
      size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        inlineValue = true;
      }
      if (isOneOf(name, kBooleanFlags)) {
        if (inlineValue)
          return name + " takes no value";
        if (name == "--launch")
          o.launch = true;
        if (name == "--guard")
          o.guard = true;
        if (name == "--no-memory-check")
          o.train.checkMemory = false;
        if (name == "--shuffle")
          o.train.shuffle = true;
        if (name == "--overwrite")
          o.train.overwrite = true;
        continue;
      }
      if (!isOneOf(name, kValueFlags))
        return unknownFlag(name);
      if (!inlineValue) {
        if (i + 1 >= argc)
          return name + " needs a value";
        value = argv[++i];
      }
      if (value.empty())
        return name + " needs a non-empty value";
      if (std::string error = applyValueFlag(name, value, o); !error.empty())
        return error;
    } else if (arg == "-h") {
      continue;
    } else if (arg.size() > 1 && arg[0] == '-') {
      return unknownFlag(arg);
    } else {
      if (!o.artifact.empty())
        return "more than one artifact given ('" + o.artifact + "' and '" +
               arg + "')";
      o.artifact = arg;
    }
  }
  if (!o.calibrateOut.empty() || o.calibrateRanks > 0)
    return calibrationArgsError(o);
  if (o.artifact.empty())
    return "no artifact given (usage: dtc-run OUT.dtc --steps N; see --help)";
  if (!o.haveSteps)
    return "--steps N is required";
  if (o.train.shuffle && o.train.dataPath.empty())
    return "--shuffle orders the windows of --data FILE; without --data the "
           "inputs are synthetic";
  if (o.train.evalDataPath.empty() &&
      (o.train.evalEvery > 0 || o.train.evalBatches > 0))
    return std::string(o.train.evalEvery > 0 ? "--eval-every"
                                             : "--eval-batches") +
           " needs --eval-data FILE (the tokens to evaluate on)";
  if (!o.train.stepPath.empty() && o.train.steps == 0)
    return "--save-step needs at least one step (--steps >= 1)";
  if (o.train.saveEvery > 0 && o.train.savePath.empty())
    return "--save-every needs --save CKPT";
  if (o.train.collectives == "local" && o.localRanks == 0)
    return "--collectives local needs --local-ranks N (its ranks are threads "
           "of one process sharing one GPU)";
  if ((o.train.collectives == "nccl" || o.train.collectives == "local") &&
      o.train.backend != "cuda")
    return "--collectives " + o.train.collectives +
           " needs --backend cuda (the " + o.train.backend +
           " backend communicates through the host communicator)";
  if (o.localRanks > 0 && o.launch)
    return "--local-ranks and --launch exclude each other";
  o.train.artifactPath = o.artifact;
  return "";
}

void printError(const std::string &msg) {
  std::fprintf(stderr, "dtc-run: error: %s\n", msg.c_str());
  std::fflush(stderr);
}

// The directory of an output path must exist and be writable.
void checkOutputPath(const std::string &flag, const std::string &path) {
  if (path == "-") // standard output
    return;
  std::string dir = ".";
  size_t slash = path.rfind('/');
  if (slash != std::string::npos)
    dir = slash == 0 ? "/" : path.substr(0, slash);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error(flag + " " + path + ": directory '" + dir + "' does not exist");
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw Error(flag + " " + path + ": is a directory");
  // A device or FIFO is written in place: its directory need not be writable.
  const bool inPlace = ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
  if (!inPlace && ::access(dir.c_str(), W_OK) != 0)
    throw Error(flag + " " + path + ": directory '" + dir +
                "' is not writable");
}

// Cores this process may run on.
int64_t availableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return CPU_COUNT(&set);
  return 1;
}

// The mpirun options of `dtc run` beyond the supervisor's own, and what
// each rank is told. Placement: every rank gets `threads` cores of its own
// (mpirun binds it to them, OpenMP keeps its threads on them) when the node
// has enough; otherwise nothing is bound and the ranks share the cores.
// Binding flags in DTC_MPIRUN_ARGS take precedence.
void launchArguments(const Options &o, int64_t devices,
                     std::vector<std::string> &mpirunArgs,
                     std::vector<std::string> &rankArgs) {
  const std::vector<std::string> extraArgs = userMpirunArgs();
  const int threads = o.train.threads > 0 ? o.train.threads
                                          : defaultKernelThreads(int(devices));
  bool userPlacement = false;
  for (const std::string &e : extraArgs)
    userPlacement |= e.rfind("--bind-to", 0) == 0 ||
                     e.rfind("--map-by", 0) == 0 ||
                     e.rfind("--cpus-per-proc", 0) == 0;
  const int64_t cores = availableCores();
  if (!userPlacement) {
    if (devices * threads <= cores) {
      mpirunArgs.insert(mpirunArgs.end(),
                        {"--map-by", "slot:PE=" + std::to_string(threads),
                         "--bind-to", "core"});
      for (const char *kv : {"OMP_PLACES=cores", "OMP_PROC_BIND=close"})
        if (!std::getenv(
                std::string(kv).substr(0, std::string(kv).find('=')).c_str()))
          mpirunArgs.insert(mpirunArgs.end(), {"-x", kv});
    } else {
      // Ranks share cores: OpenMP threads that spin while they wait for work
      // would take the core from the thread doing it, so they sleep.
      mpirunArgs.insert(mpirunArgs.end(), {"--bind-to", "none"});
      if (!std::getenv("OMP_WAIT_POLICY"))
        mpirunArgs.insert(mpirunArgs.end(), {"-x", "OMP_WAIT_POLICY=passive"});
    }
  }
  mpirunArgs.insert(mpirunArgs.end(), extraArgs.begin(), extraArgs.end());
  if (o.train.threads <= 0)
    rankArgs.push_back("--threads=" + std::to_string(threads));
  // A person watching: throughput lines (the ranks' stderr is a pipe).
  if (o.printEvery < 0 && isatty(STDERR_FILENO))
    rankArgs.push_back("--print-every=10");
}

/// Everything that can be checked in one process before starting ranks.
int64_t validate(const Options &o) {
  try {
    checkBackendAvailable(o.train.backend);
  } catch (const Error &e) {
    throw Error("--backend " + o.train.backend + ": " + e.what());
  }
  checkRunPaths(o.train);
  Artifact a = loadArtifactFile(o.artifact);
  checkLaunchFits(a, o.train, userMpirunArgs(), availableCores());
  if (!o.train.dataPath.empty()) {
    TokenBinding b = bindTokenInputs(a);
    TokenFile f(o.train.dataPath, o.train.dataDtype);
    f.validate(b);
  }
  if (!o.train.evalDataPath.empty()) {
    if (!a.hasEvaluation())
      throw Error(o.artifact +
                  ": the artifact has no evaluation section (compiled by an "
                  "older dtc); compile it again to use --eval-data");
    TokenBinding b = bindTokenInputs(a);
    TokenFile f(o.train.evalDataPath, o.train.dataDtype);
    f.validate(b);
  }
  int64_t step = 0;
  if (!o.train.loadPath.empty())
    step = inspectCheckpoint(a, o.train.loadPath).step;
  if (!o.train.logPath.empty()) {
    checkOutputPath("--log", o.train.logPath);
    continueLog(o.train.logPath, !o.train.loadPath.empty(), step,
                o.train.overwrite);
  }
  checkSaveKeepsWork(o.train, step);
  if (o.train.savePath == "-")
    throw Error("--save -: a checkpoint is a file with its .optim sidecar, or "
                "a directory; it cannot go to standard output");
  if (!o.train.savePath.empty()) {
    if (isShardedCheckpointPath(o.train.savePath))
      checkShardedSavePath("--save", o.train.savePath);
    else
      checkOutputPath("--save", o.train.savePath);
  }
  if (!o.train.statsPath.empty())
    checkOutputPath("--stats", o.train.statsPath);
  if (!o.train.traceDir.empty()) {
    prepareTraceDirectory(o.train.traceDir);
    std::vector<int> ranks;
    for (int64_t r = 0; r < a.devices; ++r)
      ranks.push_back(int(r));
    checkTracePaths(o.train, ranks);
  }
  if (!o.train.stepPath.empty())
    checkOutputPath("--save-step", o.train.stepPath);
  return a.devices;
}

// ---- one rank
// ----------------------------------------------------------------------------

volatile sig_atomic_t gStopSignal = 0;
volatile sig_atomic_t gWaitingForSave = 0;
int64_t gLastSignalNs = 0;

void writeToStderr(const char *text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void onStopSignal(int sig) {
  const int64_t now = progress::nowNs();
  if (gStopSignal == 0) {
    gStopSignal = sig; // the step in progress finishes, then the run stops
    gLastSignalNs = now;
    return;
  }
  // A copy of the same signal (a wrapper passing on what the process group
  // got) is not another request.
  if (now - gLastSignalNs < kRepeatedSignalNs)
    return;
  gLastSignalNs = now;
  // A second signal during the save lets it finish: the run stops after it
  // anyway, and stopping now would leave the previous checkpoint.
  if (progress::saving() && !gWaitingForSave) {
    gWaitingForSave = 1;
    writeToStderr(kWaitingForSaveNotice);
    return;
  }
  // Files moving into place finish doing so (never half a checkpoint).
  if (progress::committing())
    return;
  // Stop now, leaving no temporary file behind.
  removeLiveTemporaryFiles();
  if (progress::saving()) {
    writeToStderr("dtc-run: error: ");
    writeToStderr(kAbortedSaveMessage);
    writeToStderr("\n");
  }
  ::_exit(128 + sig);
}

/// `dtc run`'s supervisor stops a save at the user's third signal: the
/// partial files go, the checkpoint on disk stays the previous one.
void onAbortSave(int sig) {
  if (progress::committing())
    return; // too late: the new checkpoint is going into place
  removeLiveTemporaryFiles();
  ::_exit(128 + sig);
}

/// The signal to report: under `dtc run`, SIGUSR2 stands for the signal the
/// supervisor received (mpirun passes SIGUSR2 on without ending the job).
int pendingSignal() {
  int sig = gStopSignal;
  if (progress::directory().empty())
    return sig;
  // Under dtc run the user's interrupt comes as a file; a signal is someone
  // else's (a kill of this rank or of its guard, which passes it on).
  if (sig != 0 && sig != SIGUSR2)
    return sig | kStopFromOutside;
  // dtc run's supervisor asks for a stop with a file (Supervisor.cpp).
  const std::string stopFile = progress::stopSignalPath(progress::directory());
  if (sig == 0 && ::access(stopFile.c_str(), F_OK) == 0)
    sig = SIGUSR2;
  if (sig != SIGUSR2)
    return sig;
  std::ifstream in(stopFile);
  std::string name;
  in >> name;
  if (name == "SIGINT")
    return SIGINT;
  if (name == "SIGTERM")
    return SIGTERM;
  if (name == "SIGHUP")
    return SIGHUP;
  return sig;
}

/// A failure the ranks cannot agree on: this rank reports it (to the
/// supervisor, or on stderr) and leaves at once.
[[noreturn]] void leaveAlone(int rank, const std::string &msg) {
  const std::string line = "rank " + std::to_string(rank) + ": " + msg;
  if (!progress::reportFailure(line))
    printError(line);
  std::fflush(stdout);
  ::_exit(1);
}

/// One rank's training run over `world`: the exit status. Agreed errors
/// and interruptions are printed by the rank that reports them; a failure
/// the ranks could not agree on goes to `unagreed` (which may not return).
int trainRank(World &world, int rank, const Options &o,
              std::function<int()> pendingSignal,
              const std::function<void(const std::string &)> &unagreed) {
  try {
    TrainOptions train = o.train;
    train.pendingSignal = std::move(pendingSignal);
    Trainer trainer(world, train, [](const std::string &note) {
      std::fprintf(stderr, "dtc-run: note: %s\n", note.c_str());
      std::fflush(stderr);
    });
    Throughput meter(trainer, o.printEvery, o.train.steps, o.artifact,
                     world.size(), rank);
    trainer.run(
        [&](const StepReport &r) {
          std::printf("step %lld loss %.8g\n", (long long)r.step,
                      double(r.loss));
          std::fflush(stdout);
          meter.step(r);
        },
        [](const EvalReport &r) {
          std::printf("eval step %lld loss %.8g\n", (long long)r.step, r.loss);
          std::fflush(stdout);
        });
    if (!o.train.statsPath.empty() && rank == 0)
      printKernelTable(trainer.executor());
    return 0;
  } catch (const Interrupted &e) {
    if (rank == e.reporter())
      printError(e.what());
    return 128 + e.signal();
  } catch (const AgreedError &e) {
    if (rank == e.reporter())
      printError(e.what());
    return 1;
  } catch (const std::exception &e) {
    unagreed(e.what());
    return 1;
  }
}

/// --calibrate: every rank measures (calibrateCpu), rank 0 writes the
/// profile.
int calibrateRank(World &world, int rank, const Options &o) {
  try {
    CalibrationOptions options;
    options.threads = o.train.threads > 0
                          ? o.train.threads
                          : defaultKernelThreads(world.ranksOnNode());
    const nlohmann::json profile = calibrateCpu(world, options);
    std::string error;
    if (rank == 0 &&
        !writeOutputFile(o.calibrateOut, profile.dump(2) + "\n", error)) {
      printError("--calibrate " + o.calibrateOut + ": " + error);
      return 1;
    }
    return 0;
  } catch (const std::exception &e) {
    leaveAlone(rank, std::string("calibration failed: ") + e.what());
  }
}

int runRank(int argc, char **argv, const Options &o,
            const std::string &argError) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = onStopSignal;
  sigemptyset(&sa.sa_mask);
  // Restarted, not failed with EINTR: a signal must never break a blocking
  // call inside MPI or the runtime (only ask for a stop at the step's end).
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR2})
    ::sigaction(sig, &sa, nullptr);
  sa.sa_handler = onAbortSave;
  ::sigaction(SIGUSR1, &sa, nullptr);
  unblockStopSignals();

  const double timeout =
      argError.empty() ? o.train.timeoutSeconds : kDefaultTimeoutSeconds;
  runBlockingMpiCall(timeout, "MPI_Init", [&] { MPI_Init(&argc, &argv); });
  int code = 0;
  std::unique_ptr<World> world;
  int rank = 0;
  try {
    world = makeMpiWorld();
    world->setTimeout(timeout);
    rank = world->rank();
  } catch (const CommFailure &e) {
    leaveAlone(rank, e.what());
  }
  if (const char *dir = std::getenv("DTC_RUN_STATUS_DIR"); dir && *dir)
    progress::attach(dir, rank);
  if (!argError.empty()) {
    if (rank == 0)
      printError(argError);
    code = 1;
  } else {
    // Not agreed (a timeout, an MPI error): other ranks may be waiting in a
    // collective this rank will never reach.
    code = !o.calibrateOut.empty() ? calibrateRank(*world, rank, o)
                                   : trainRank(*world, rank, o, pendingSignal,
                                               [rank](const std::string &msg) {
                                                 leaveAlone(rank, msg);
                                               });
  }
  progress::setState(code == 0 ? progress::State::Finished
                               : progress::State::Failed);
  world.reset();
  runBlockingMpiCall(timeout, "MPI_Finalize", [] { MPI_Finalize(); });
  return code;
}

/// --local-ranks N: the artifact's ranks as threads of this process over a
/// shared-memory world (ThreadWorld), without MPI. Errors are agreed as
/// between MPI ranks, so one line is printed; a failure the ranks cannot
/// agree on wakes the others (ThreadWorld::abort) instead of leaving them
/// waiting.
int runLocalRanks(const Options &o) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = onStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    ::sigaction(sig, &sa, nullptr);
  unblockStopSignals();
  int64_t devices = 0;
  try {
    devices = validate(o);
  } catch (const std::exception &e) {
    printError(e.what());
    return 1;
  }
  if (devices != o.localRanks) {
    printError("--local-ranks " + std::to_string(o.localRanks) + ": " +
               o.artifact + " is for " + std::to_string(devices) + " device" +
               (devices == 1 ? "" : "s") + "; run it with --local-ranks " +
               std::to_string(devices));
    return 1;
  }
  ThreadWorld world(o.localRanks, o.train.timeoutSeconds);
  std::vector<int> codes(size_t(o.localRanks), 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < o.localRanks; ++r)
    ranks.emplace_back([&, r] {
      codes[size_t(r)] = trainRank(
          world.rankView(r), r, o, [] { return int(gStopSignal); },
          [&world, r](const std::string &msg) {
            printError("rank " + std::to_string(r) + ": " + msg);
            world.abort("rank " + std::to_string(r) + " failed");
          });
    });
  for (std::thread &t : ranks)
    t.join();
  return *std::max_element(codes.begin(), codes.end());
}

} // namespace

int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  Options o;
  const std::string argError = parseArgs(argc, argv, o);
  if (o.guard)
    return guardRank(argc, argv);
  if (o.launch) {
    catchLaunchSignals();
    if (!argError.empty()) {
      printError(argError);
      return 1;
    }
    int64_t devices = o.calibrateRanks;
    if (o.calibrateOut.empty()) {
      try {
        devices = validate(o);
      } catch (const std::exception &e) {
        printError(e.what());
        return 1;
      }
    }
    std::vector<std::string> mpirunArgs, rankArgs;
    launchArguments(o, devices, mpirunArgs, rankArgs);
    return superviseLaunch(devices, mpirunArgs, rankArgs, argc, argv);
  }
  if (o.localRanks > 0) {
    if (!argError.empty()) {
      printError(argError);
      return 1;
    }
    return runLocalRanks(o);
  }
  return runRank(argc, argv, o, argError);
}
