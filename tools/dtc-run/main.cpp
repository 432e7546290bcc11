//===- dtc-run - execute a .dtc artifact on CPU ranks (MPI) -----------------===//
//
//   mpirun -np N dtc-run OUT.dtc --steps N [options]     (or alone: 1 rank)
//   dtc-run --launch OUT.dtc --steps N [options]          (validates, then
//                                                          execs mpirun itself)
//
// Every error is one line "dtc-run: error: ..." on stderr and exit status 1
// on every rank (printed by one rank only).
//
//===----------------------------------------------------------------------===//
#include "dtc/runtime/Checkpoint.h"
#include "dtc/runtime/MpiWorld.h"
#include "dtc/runtime/Suggest.h"
#include "dtc/runtime/TokenData.h"
#include "dtc/runtime/Trainer.h"

#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace dtc::rt;

namespace {

const char *kUsage =
    "usage: dtc-run OUT.dtc --steps N [options]\n"
    "       mpirun -np <devices> dtc-run OUT.dtc --steps N [options]\n"
    "       dtc-run --launch OUT.dtc --steps N [options]\n"
    "\n"
    "Runs the training program of a dtc artifact on CPU ranks (one MPI rank per\n"
    "device of the artifact's mesh; run alone it is one rank).\n"
    "\n"
    "options:\n"
    "  --steps N              training steps to run (required; 0 is allowed)\n"
    "  --seed S               seed of parameter init and synthetic inputs (default 0)\n"
    "  --backend cpu|cuda     kernel backend (default cpu; this build has no cuda)\n"
    "  --data FILE            token file for the model's ids/labels inputs\n"
    "                         (default: none, synthetic inputs)\n"
    "  --data-dtype uint16|uint32\n"
    "                         token width of --data (default uint16)\n"
    "  --log LOG.jsonl        per-step JSON lines {step, loss, step_time_s,\n"
    "                         tokens_per_s} (default: none)\n"
    "  --save CKPT            write parameters (safetensors) at the end, and the\n"
    "                         optimizer state to CKPT.optim (default: none)\n"
    "  --load CKPT            start from a checkpoint (default: none)\n"
    "  --stats FILE.json      write memory bytes per category (planned slots and the\n"
    "                         allocator's measured peak, workspace included) and\n"
    "                         collective bytes per step (default: none)\n"
    "  --no-memory-check      start even if the ranks on this node need more memory\n"
    "                         than it has available (checked by default, before\n"
    "                         anything is allocated)\n"
    "  --launch               validate everything here, then exec\n"
    "                         mpirun -np <devices> with the same arguments\n"
    "                         (env DTC_MPIRUN: mpirun path, DTC_MPIRUN_ARGS: extra flags)\n"
    "  --help                 this text\n";

struct Options {
  std::string artifact;
  bool haveSteps = false, launch = false;
  TrainOptions train;
};

bool parseU64(const std::string &s, uint64_t &v) {
  if (s.empty() || s.size() > 20) return false;
  unsigned __int128 acc = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    acc = acc * 10 + unsigned(c - '0');
    if (acc > UINT64_MAX) return false;
  }
  v = uint64_t(acc);
  return true;
}

const std::vector<std::string> kBooleanFlags = {"--launch", "--help", "--no-memory-check"};
const std::vector<std::string> kValueFlags = {"--steps", "--seed",  "--backend", "--data",
                                              "--data-dtype", "--log", "--save", "--load",
                                              "--stats"};

bool isOneOf(const std::string &name, const std::vector<std::string> &flags) {
  return std::find(flags.begin(), flags.end(), name) != flags.end();
}

// "unknown flag --stpes; did you mean '--steps'? (see --help)"
std::string unknownFlag(const std::string &name) {
  std::vector<std::string> all = kValueFlags;
  all.insert(all.end(), kBooleanFlags.begin(), kBooleanFlags.end());
  return "unknown flag " + name + dtc::didYouMean(name, all) + " (see --help)";
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
        if (inlineValue) return name + " takes no value";
        if (name == "--launch") o.launch = true;
        if (name == "--no-memory-check") o.train.checkMemory = false;
        continue;
      }
      if (!isOneOf(name, kValueFlags)) return unknownFlag(name);
      if (!inlineValue) {
        if (i + 1 >= argc) return name + " needs a value";
        value = argv[++i];
      }
      if (value.empty()) return name + " needs a non-empty value";
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
      } else if (name == "--data") {
        o.train.dataPath = value;
      } else if (name == "--data-dtype") {
        if (!parseTokenDType(value, o.train.dataDtype))
          return "--data-dtype: expected uint16 or uint32, got '" + value + "'";
      } else if (name == "--log") {
        o.train.logPath = value;
      } else if (name == "--save") {
        o.train.savePath = value;
      } else if (name == "--load") {
        o.train.loadPath = value;
      } else if (name == "--stats") {
        o.train.statsPath = value;
      }
    } else if (arg == "-h") {
      continue;
    } else if (arg.size() > 1 && arg[0] == '-') {
      return unknownFlag(arg);
    } else {
      if (!o.artifact.empty())
        return "more than one artifact given ('" + o.artifact + "' and '" + arg + "')";
      o.artifact = arg;
    }
  }
  if (o.artifact.empty()) return "no artifact given (usage: dtc-run OUT.dtc --steps N; see --help)";
  if (!o.haveSteps) return "--steps N is required";
  o.train.artifactPath = o.artifact;
  return "";
}

void printError(const std::string &msg) {
  std::fprintf(stderr, "dtc-run: error: %s\n", msg.c_str());
  std::fflush(stderr);
}

// The directory of an output path must exist and be writable.
void checkOutputPath(const std::string &flag, const std::string &path) {
  std::string dir = ".";
  size_t slash = path.rfind('/');
  if (slash != std::string::npos) dir = slash == 0 ? "/" : path.substr(0, slash);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error(flag + " " + path + ": directory '" + dir + "' does not exist");
  if (::access(dir.c_str(), W_OK) != 0)
    throw Error(flag + " " + path + ": directory '" + dir + "' is not writable");
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw Error(flag + " " + path + ": is a directory");
}

int launch(const Options &o, int argc, char **argv) {
  int64_t devices = 0;
  try {
    if (o.train.backend == "cuda")
      throw Error("--backend cuda: this build of dtc has no CUDA backend yet; use --backend cpu");
    Artifact a = loadArtifactFile(o.artifact);
    devices = a.devices;
    if (!o.train.dataPath.empty()) {
      TokenBinding b = bindTokenInputs(a);
      TokenFile f(o.train.dataPath, o.train.dataDtype);
      f.validate(b);
    }
    if (!o.train.loadPath.empty()) inspectCheckpoint(a, o.train.loadPath);
    if (!o.train.logPath.empty()) checkOutputPath("--log", o.train.logPath);
    if (!o.train.savePath.empty()) checkOutputPath("--save", o.train.savePath);
    if (!o.train.statsPath.empty()) checkOutputPath("--stats", o.train.statsPath);
  } catch (const std::exception &e) {
    printError(e.what());
    return 1;
  }
  const char *env = std::getenv("DTC_MPIRUN");
  std::string mpirun = env && *env ? env : "mpirun";
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    printError(std::string("cannot find this program's path: ") + std::strerror(errno));
    return 1;
  }
  self[n] = '\0';
  std::vector<std::string> args = {mpirun, "-np", std::to_string(devices)};
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
  args.push_back("--oversubscribe");
  args.push_back("--quiet");
  if (const char *extra = std::getenv("DTC_MPIRUN_ARGS")) {
    std::string s = extra, cur;
    for (char c : s + " ") {
      if (c == ' ' || c == '\t' || c == '\n') {
        if (!cur.empty()) args.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
  }
  args.push_back(self);
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) != "--launch") args.push_back(argv[i]);
  std::vector<char *> cargs;
  for (std::string &s : args) cargs.push_back(s.data());
  cargs.push_back(nullptr);
  std::fflush(stdout);
  ::execvp(cargs[0], cargs.data());
  printError("cannot run " + mpirun + ": " + std::strerror(errno) +
             " (set DTC_MPIRUN to the mpirun to use)");
  return 1;
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
  if (o.launch) {
    if (!argError.empty()) {
      printError(argError);
      return 1;
    }
    return launch(o, argc, argv);
  }

  MPI_Init(&argc, &argv);
  int code = 0;
  {
    std::unique_ptr<World> world = makeMpiWorld();
    const int rank = world->rank();
    if (!argError.empty()) {
      if (rank == 0) printError(argError);
      code = 1;
    } else {
      try {
        Trainer trainer(*world, o.train, [](const std::string &note) {
          std::fprintf(stderr, "dtc-run: note: %s\n", note.c_str());
          std::fflush(stderr);
        });
        trainer.run([](const StepReport &r) {
          std::printf("step %lld loss %.8g\n", (long long)r.step, double(r.loss));
          std::fflush(stdout);
        });
      } catch (const AgreedError &e) {
        if (rank == e.reporter()) printError(e.what());
        code = 1;
      } catch (const std::exception &e) {
        // Not agreed: other ranks may be waiting in a collective.
        printError(e.what());
        if (world->size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
        code = 1;
      }
    }
  }
  MPI_Finalize();
  return code;
}
