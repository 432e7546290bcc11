//===- Trainer.cpp
//---------------------------------------------------------------===//
#include "dtc/runtime/Trainer.h"
#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/runtime/MemoryPlan.h"
#include "dtc/runtime/Progress.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace dtc::rt {

namespace {

std::string jsonNumber(double v) {
  if (!std::isfinite(v))
    return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.8g", v);
  return buf;
}

bool sameFile(const std::string &a, const std::string &b) {
  std::string unused;
  return !checkOutputsDistinct({{"", a}}, {{"", b}}, unused);
}
} // namespace

std::string signalName(int sig) {
  switch (sig) {
  case SIGHUP:
    return "SIGHUP";
  case SIGINT:
    return "SIGINT";
  case SIGQUIT:
    return "SIGQUIT";
  case SIGILL:
    return "SIGILL";
  case SIGTRAP:
    return "SIGTRAP";
  case SIGABRT:
    return "SIGABRT";
  case SIGBUS:
    return "SIGBUS";
  case SIGFPE:
    return "SIGFPE";
  case SIGKILL:
    return "SIGKILL";
  case SIGUSR1:
    return "SIGUSR1";
  case SIGSEGV:
    return "SIGSEGV";
  case SIGUSR2:
    return "SIGUSR2";
  case SIGPIPE:
    return "SIGPIPE";
  case SIGALRM:
    return "SIGALRM";
  case SIGTERM:
    return "SIGTERM";
  case SIGXCPU:
    return "SIGXCPU";
  case SIGXFSZ:
    return "SIGXFSZ";
  case SIGSYS:
    return "SIGSYS";
  default:
    return "signal " + std::to_string(sig);
  }
}

void checkRunPaths(const TrainOptions &o) {
  const std::string saveOptim =
      o.savePath.empty() ? "" : optimizerSidecarPath(o.savePath);
  const std::string loadOptim =
      o.loadPath.empty() ? "" : optimizerSidecarPath(o.loadPath);
  const std::vector<NamedPath> outputs = {
      {"--log", o.logPath},
      {"--stats", o.statsPath},
      {"--save", o.savePath},
      {"--save (its optimizer sidecar)", saveOptim},
      {"--save-step", o.stepPath}};
  std::vector<NamedPath> inputs = {{"the artifact", o.artifactPath},
                                   {"--data", o.dataPath},
                                   {"--eval-data", o.evalDataPath}};
  // Saving over the checkpoint that was loaded is fine (see Trainer.h).
  const bool saveOverLoad = !o.savePath.empty() && !o.loadPath.empty() &&
                            sameFile(o.loadPath, o.savePath);
  if (!saveOverLoad) {
    inputs.push_back({"--load", o.loadPath});
    inputs.push_back({"--load (its optimizer sidecar)", loadOptim});
  }
  std::string error;
  if (!checkOutputsDistinct(inputs, outputs, error))
    throw Error(error);
  if (saveOverLoad &&
      !checkOutputsDistinct({{"--load", o.loadPath},
                             {"--load (its optimizer sidecar)", loadOptim}},
                            {{"--log", o.logPath}, {"--stats", o.statsPath}},
                            error))
    throw Error(error);
}

void checkSaveKeepsWork(const TrainOptions &o, int64_t startStep) {
  if (o.savePath.empty() || o.overwrite ||
      (!o.loadPath.empty() && sameFile(o.loadPath, o.savePath)))
    return;
  const std::optional<int64_t> onDisk = checkpointStepOnDisk(o.savePath);
  if (!onDisk || *onDisk < startStep)
    return;
  throw Error(
      "--save " + o.savePath + " already holds a checkpoint of step " +
      std::to_string(*onDisk) + ", and this run starts at step " +
      std::to_string(startStep) +
      (o.loadPath.empty() ? " (no --load)" : " (--load " + o.loadPath + ")") +
      ": add --load " + o.savePath +
      " to continue from it, or --overwrite to replace it");
}

void checkTracePaths(const TrainOptions &o, const std::vector<int> &ranks) {
  const std::string loadOptim =
      o.loadPath.empty() ? "" : optimizerSidecarPath(o.loadPath);
  const std::string saveOptim =
      o.savePath.empty() ? "" : optimizerSidecarPath(o.savePath);
  std::vector<NamedPath> outputs = {
      {"--log", o.logPath},
      {"--stats", o.statsPath},
      {"--save", o.savePath},
      {"--save (its optimizer sidecar)", saveOptim}};
  for (int r : ranks)
    outputs.push_back({"--trace (rank " + std::to_string(r) + ")",
                       TraceWriter::rankPath(o.traceDir, r)});
  std::string error;
  if (!checkOutputsDistinct({{"the artifact", o.artifactPath},
                             {"--data", o.dataPath},
                             {"--load", o.loadPath},
                             {"--load (its optimizer sidecar)", loadOptim}},
                            outputs, error))
    throw Error(error);
}

bool continueLog(const std::string &path, bool resuming, int64_t step,
                 bool overwrite) {
  if (path == "-") // standard output: nothing to continue
    return false;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
    return resuming;
  if (overwrite) // asked to start afresh, unless it continues anyway
    try {
      return continueLog(path, resuming, step, false);
    } catch (const Error &) {
      return false;
    }
  // The last line: read the tail.
  const off_t size = st.st_size, tail = size < 65536 ? size : 65536;
  std::string text(size_t(tail), '\0');
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(path + ": cannot read the log: " + std::strerror(errno));
  const ssize_t n = ::pread(fd, text.data(), text.size(), size - tail);
  ::close(fd);
  if (n != ssize_t(text.size()))
    throw Error(path + ": cannot read the log");
  if (text.back() != '\n')
    throw Error(
        path +
        ": the log's last line is cut off (a run was killed while writing "
        "it?); repair the log or use a new --log");
  const size_t begin = text.rfind('\n', text.size() - 2);
  const std::string line =
      text.substr(begin == std::string::npos ? 0 : begin + 1);
  nlohmann::json j;
  std::string err;
  int64_t last = -1;
  if (!parseJsonText(line, j, err) || !j.is_object() || !j.contains("step") ||
      !j["step"].is_number_integer())
    throw Error(path +
                ": the log's last line is not a step record; use a new --log");
  last = j["step"].get<int64_t>();
  if (!resuming)
    throw Error(path + ": the log already holds steps up to " +
                std::to_string(last) +
                " of an earlier run, and this run starts at step 0 (no "
                "--load): add --load with that run's checkpoint to continue "
                "it, choose a new --log, or add --overwrite to start the log "
                "afresh");
  if (last != step - 1)
    throw Error(path + ": the log ends at step " + std::to_string(last) +
                " but the checkpoint continues from step " +
                std::to_string(step) + "; appending would leave " +
                (last >= step ? "steps twice" : "a gap") +
                " in the log (use the log of that run, or a new --log)");
  return true;
}

Trainer::Trainer(World &world, TrainOptions opts,
                 std::function<void(const std::string &)> note)
    : world_(world), opts_(std::move(opts)), note_(std::move(note)) {
  world_.setTimeout(opts_.timeoutSeconds);
  // 1. The artifact, on every rank.
  runAgreed(world_, [&] {
    checkRunPaths(opts_);
    try {
      checkBackendAvailable(opts_.backend);
    } catch (const Error &e) {
      throw Error("--backend " + opts_.backend + ": " + e.what());
    }
    artifact_ =
        std::make_unique<Artifact>(loadArtifactFile(opts_.artifactPath));
    checkRankCount(*artifact_, world_.size());
    // Before anything is allocated: the kernel's OOM killer would end the
    // job later without a word.
    if (opts_.checkMemory && opts_.backend == "cpu")
      checkMemoryFits(*artifact_, world_.ranksOnNode(),
                      opts_.threads > 0
                          ? opts_.threads
                          : defaultKernelThreads(world_.ranksOnNode()));
  });
  // 2. The executor: its constructor splits communicators first (collective),
  //    then allocates; initialise parameters from the seed.
  runAgreed(world_, [&] {
    BackendOptions bo;
    bo.threads = opts_.threads > 0 ? opts_.threads
                                   : defaultKernelThreads(world_.ranksOnNode());
    bo.rank = world_.rank();
    bo.ranksOnNode = world_.ranksOnNode();
    bo.collectives = opts_.collectives;
    bo.timeoutSeconds = opts_.timeoutSeconds;
    exec_ = std::make_unique<RankExecutor>(*artifact_, world_,
                                           makeBackend(opts_.backend, bo));
    exec_->initPersistent(opts_.seed);
    const std::vector<int> loss = artifact_->tensorsWithRole(Role::Loss);
    const std::vector<int> holders = contributorRanks(*artifact_, loss.at(0));
    lossRank_ = holders.at(0);
    for (int t : artifact_->tensorsWithRole(Role::OptimizerState)) {
      const std::string &kind = artifact_->tensors[size_t(t)].kind;
      if (kind == "loss_scale")
        lossScaleTensor_ = t;
      if (kind == "skipped_steps")
        skippedTensor_ = t;
    }
    if ((lossScaleTensor_ >= 0) != (skippedTensor_ >= 0))
      throw Error(opts_.artifactPath +
                  ": dynamic loss scaling needs both a loss_scale and a "
                  "skipped_steps tensor");
    if (lossScaleTensor_ >= 0 && world_.rank() == lossRank_ &&
        (!exec_->holds(lossScaleTensor_) || !exec_->holds(skippedTensor_)))
      throw Error(opts_.artifactPath +
                  ": the rank holding the loss holds no loss scale");
    schedule_ = learningRateScheduleOf(*artifact_);
    if (const char *inject = std::getenv("DTC_INJECT_OVERFLOW");
        inject && *inject) {
      injectOverflow_ = parseInjectOverflow(inject);
      if (lossScaleTensor_ < 0)
        throw Error("DTC_INJECT_OVERFLOW: " + opts_.artifactPath +
                    " has no dynamic loss scaling to survive an overflow "
                    "(compile it with "
                    "--precision fp16-mixed)");
    }
  });
  // 3. The token files.
  if (!opts_.dataPath.empty())
    data_ = openTokenFile(opts_.dataPath);
  if (!opts_.evalDataPath.empty())
    openEvaluation();
  // 4. The checkpoint.
  if (!opts_.loadPath.empty()) {
    LoadedCheckpoint info = loadCheckpoint(*exec_, world_, opts_.loadPath);
    step_ = info.step;
    optStep_ = info.optimizerRestored ? info.optimizerStep : 0;
    if (!info.note.empty() && world_.rank() == 0 && note_)
      note_(info.note);
  }
  runAgreed(world_, [&] {
    if (world_.rank() == 0)
      checkSaveKeepsWork(opts_, step_);
  });
  // 5. The trace of every rank (its own file in the directory).
  if (!opts_.traceDir.empty()) {
    runAgreed(world_, [&] {
      prepareTraceDirectory(opts_.traceDir);
      const std::string path =
          TraceWriter::rankPath(opts_.traceDir, world_.rank());
      checkTracePaths(opts_, {world_.rank()});
      trace_ = std::make_unique<TraceWriter>(
          path, world_.rank(),
          "{\"artifact\":" + TraceWriter::quote(artifact_->label) +
              ",\"rank\":" + std::to_string(world_.rank()) +
              ",\"ranks\":" + std::to_string(world_.size()) + ",\"backend\":" +
              TraceWriter::quote(exec_->backend().description()) + "}");
      exec_->setTrace(trace_.get());
    });
  }
  // 6. The log file (rank 0): a new one, or the resumed run's, continued.
  if (!opts_.logPath.empty()) {
    runAgreed(world_, [&] {
      if (world_.rank() != 0)
        return;
      const bool append = continueLog(opts_.logPath, !opts_.loadPath.empty(),
                                      step_, opts_.overwrite);
      log_ = std::make_unique<OutputFile>();
      std::string err;
      if (!log_->openAppend(opts_.logPath, /*startEmpty=*/!append, err))
        throw Error(opts_.logPath + ": cannot write the log: " + err);
    });
  }
}

Trainer::~Trainer() = default;

std::unique_ptr<TokenFile> Trainer::openTokenFile(const std::string &path) {
  std::unique_ptr<TokenFile> file;
  runAgreed(world_, [&] {
    binding_ = bindTokenInputs(*artifact_);
    file = std::make_unique<TokenFile>(path, opts_.dataDtype);
    file->checkSize(binding_);
  });
  // Every rank must see the file rank 0 checks (and count its chunks).
  int64_t tokens = file->size();
  world_.world().broadcast(&tokens, sizeof tokens, 0);
  runAgreed(world_, [&] {
    if (file->size() != tokens)
      throw Error(path +
                  ": the token file changed while the ranks opened it (" +
                  std::to_string(file->size()) + " tokens here, " +
                  std::to_string(tokens) + " on rank 0)");
  });
  constexpr int64_t kChunk = int64_t(64) << 20;
  for (int64_t at = 0; at < tokens; at += kChunk)
    runAgreed(world_, [&] {
      if (world_.rank() == 0)
        file->checkTokens(binding_, at, std::min(kChunk, tokens - at));
    });
  return file;
}

int64_t Trainer::tokensPerStep() const {
  const std::vector<int> inputs = artifact_->tensorsWithRole(Role::Input);
  for (int t : inputs)
    if (isInt(artifact_->tensors[size_t(t)].dtype))
      return numel(artifact_->tensors[size_t(t)].shape);
  if (!inputs.empty() && !artifact_->tensors[size_t(inputs[0])].shape.empty())
    return artifact_->tensors[size_t(inputs[0])].shape[0];
  return 0;
}

double Trainer::stepsPerPass() const {
  if (!data_ || binding_.B <= 0 || binding_.S <= 0)
    return 0;
  return double(data_->size() - binding_.S - 1) /
         double(binding_.B * binding_.S);
}

void Trainer::feed(int64_t step, const TokenFile *tokens,
                   const WindowOrder &order) {
  exec_->fillSyntheticInputs(opts_.seed, step);
  if (tokens) {
    for (int which = 0; which < 2; ++which) {
      const int t = which == 0 ? binding_.ids : binding_.labels;
      if (!exec_->holds(t))
        continue;
      LocalTensor lt = exec_->tensor(t);
      fillTokens(*tokens, binding_, step, which == 1, lt.data, lt.decl->dtype,
                 lt.piece, order);
    }
  }
  exec_->setOptimizerStep(optStep_);
}

std::optional<kernels::LearningRateSchedule>
learningRateScheduleOf(const Artifact &a) {
  auto find = [](const std::vector<InstrDecl> &list)
      -> std::optional<kernels::LearningRateSchedule> {
    for (const InstrDecl &in : list)
      if (in.op == "sgd_update" || in.op == "adam_update")
        return kernels::learningRateSchedule(in.attrs);
    return std::nullopt;
  };
  for (const ProgramDecl &p : a.programs) {
    for (const std::vector<InstrDecl> *list : {&p.instructions, &p.finish})
      if (auto s = find(*list))
        return s;
    for (const ChunkDecl &c : p.chunks)
      if (auto s = find(c.backwardWeight))
        return s;
  }
  return std::nullopt;
}

std::vector<int64_t> parseInjectOverflow(const std::string &text) {
  std::vector<int64_t> steps;
  size_t at = 0;
  while (true) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(
        at, comma == std::string::npos ? std::string::npos : comma - at);
    char *end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || item[0] < '0' || item[0] > '9' || *end != '\0' ||
        errno != 0)
      throw Error("DTC_INJECT_OVERFLOW: expected step numbers separated by "
                  "commas (e.g. 3 or "
                  "3,7), got '" +
                  text + "'");
    steps.push_back(int64_t(v));
    if (comma == std::string::npos)
      break;
    at = comma + 1;
  }
  return steps;
}

void Trainer::appendLog(const StepReport &r) {
  std::string scaling;
  if (r.lossScaling)
    scaling = ",\"loss_scale\":" + jsonNumber(r.lossScale) +
              ",\"skipped\":" + (r.skipped ? "true" : "false");
  // The rate in full (shortest round-trip form): it is a double. After the
  // contract's four keys, as every addition.
  const std::string lr = r.lr ? ",\"lr\":" + nlohmann::json(*r.lr).dump() : "";
  const std::string line =
      "{\"step\":" + std::to_string(r.step) +
      ",\"loss\":" + jsonNumber(r.loss) +
      ",\"step_time_s\":" + jsonNumber(r.seconds) +
      ",\"tokens_per_s\":" + jsonNumber(r.tokensPerSecond) + lr + scaling +
      (r.evalLoss ? ",\"eval_loss\":" + jsonNumber(*r.evalLoss) : "") + "}\n";
  std::string err;
  if (!log_->write(line.data(), line.size(), err))
    throw Error(opts_.logPath + ": cannot write the log: " + err);
}

void Trainer::run(const std::function<void(const StepReport &)> &onStep,
                  const std::function<void(const EvalReport &)> &onEval) {
  onEval_ = onEval;
  const int64_t tokens = tokensPerStep();
  if (opts_.steps == 0 && evalData_) {
    const double loss = evaluate();
    runAgreed(world_, [&] {
      if (world_.rank() == 0 && onEval_)
        onEval_(EvalReport{step_, evalBatches_, loss});
    });
  }
  stopBeforeFirstStep();
  for (int64_t i = 0; i < opts_.steps; ++i) {
    const int64_t k = step_;
    progress::setStep(k);
    try {
      runStep(k, i + 1 == opts_.steps, tokens, onStep);
    } catch (const CommFailure &e) {
      throw CommFailure(artifact_->label + ": step " + std::to_string(k) +
                        ": " + e.what());
    } catch (const Interrupted &) {
      throw;
    } catch (const AgreedError &) {
      // Every rank failed this step alike: the steps so far are worth a
      // trace (the failed one's events are in it too).
      if (trace_) {
        try {
          closeTrace();
        } catch (const AgreedError &) {
        }
      }
      throw;
    }
  }
  if (opts_.steps == 0 && !opts_.savePath.empty())
    saveCheckpoint(*exec_, world_, opts_.savePath, step_, optStep_);
  closeLog();
  closeTrace();
  if (!opts_.statsPath.empty())
    writeStatsFile(*exec_, world_, opts_.statsPath);
}

Interrupted Trainer::interrupted(int stop, const std::string &when) const {
  const std::string done =
      std::to_string(step_) + " step" + (step_ == 1 ? "" : "s");
  const int sig = stop & ~kStopFromOutside;
  const std::string by =
      signalName(sig) + ((stop & kStopFromOutside)
                             ? " sent to a rank, not to dtc run,"
                             : std::string());
  return Interrupted("interrupted by " + by + " " + when + ": " +
                         (opts_.savePath.empty()
                              ? done + " done, nothing saved (no --save)"
                              : opts_.savePath + " holds the " + done +
                                    " done; resume with --load " +
                                    opts_.savePath),
                     sig);
}

void Trainer::stopBeforeFirstStep() {
  int stop = opts_.pendingSignal ? opts_.pendingSignal() : 0;
  agree(world_, "", &stop);
  if (!stop)
    return;
  // Asked to stop while starting: the state there is (the initial or the
  // loaded parameters) is saved, so the run resumes exactly from it.
  if (!opts_.savePath.empty())
    saveCheckpoint(*exec_, world_, opts_.savePath, step_, optStep_);
  closeLog();
  closeTrace();
  throw interrupted(stop, "before the first step");
}

void Trainer::closeLog() {
  runAgreed(world_, [&] {
    std::string err;
    if (log_ && !log_->commit(err))
      throw Error(opts_.logPath + ": cannot write the log: " + err);
    log_.reset();
  });
}

void Trainer::closeTrace() {
  runAgreed(world_, [&] {
    if (!trace_)
      return;
    exec_->setTrace(nullptr);
    trace_->finish();
    trace_.reset();
  });
}

void Trainer::runStep(int64_t k, bool last, int64_t tokens,
                      const std::function<void(const StepReport &)> &onStep) {
  float loss = 0;
  int stop = 0;
  // The rate of this step's update: the optimizer step before it.
  const std::optional<double> lr =
      schedule_ ? std::optional<double>(schedule_->at(optStep_)) : std::nullopt;
  const int64_t stepStart = trace_ ? TraceWriter::nowNs() : 0;
  runAgreed(world_, [&] {
    feed(k, data_.get(), WindowOrder{opts_.shuffle, opts_.seed});
  });
  if (trace_)
    trace_->complete(TraceWriter::kSteps, "inputs", "host", stepStart,
                     TraceWriter::nowNs(), "");
  // Loss scaling: the scale this step runs with and the skipped count
  // before it (read where the loss is, shared with the loss).
  struct {
    float loss = 0, scale = 0;
    int64_t skippedBefore = 0, skippedAfter = 0;
  } seen;
  const bool scaling = lossScaleTensor_ >= 0;
  if (scaling && world_.rank() == lossRank_) {
    seen.scale = *static_cast<const float *>(
        exec_->tensor(lossScaleTensor_, Access::Read).data);
    seen.skippedBefore = *static_cast<const int64_t *>(
        exec_->tensor(skippedTensor_, Access::Read).data);
  }
  if (std::find(injectOverflow_.begin(), injectOverflow_.end(), k) !=
      injectOverflow_.end())
    exec_->injectOverflowNextRun();
  const auto t0 = std::chrono::steady_clock::now();
  std::string err = exec_->run();
  if (!err.empty())
    err = artifact_->label + ": step " + std::to_string(k) + ": " + err;
  stop = opts_.pendingSignal ? opts_.pendingSignal() : 0;
  const int64_t agreeStart = trace_ ? TraceWriter::nowNs() : 0;
  agree(world_, err, &stop);
  if (world_.rank() == lossRank_) {
    seen.loss = exec_->loss();
    if (scaling)
      seen.skippedAfter = *static_cast<const int64_t *>(
          exec_->tensor(skippedTensor_, Access::Read).data);
  }
  if (lossRank_ != 0)
    world_.world().broadcast(&seen, sizeof seen, lossRank_);
  loss = seen.loss;
  const bool skipped = scaling && seen.skippedAfter != seen.skippedBefore;
  const auto t1 = std::chrono::steady_clock::now();
  if (trace_) {
    const int64_t now = TraceWriter::nowNs();
    trace_->complete(TraceWriter::kSteps, "agree and loss", "host", agreeStart,
                     now, "");
    trace_->complete(TraceWriter::kSteps, "step " + std::to_string(k), "step",
                     stepStart, now, "{\"step\":" + std::to_string(k) + "}");
  }
  ++step_;
  // A skipped step applied no update: Adam's bias corrections count only
  // the applied ones (as PyTorch, whose GradScaler skips optimizer.step()).
  if (!skipped)
    ++optStep_;
  // The step's own inputs and outputs, before an evaluation replaces them.
  if (last && !opts_.stepPath.empty())
    saveStepTensors(*exec_, world_, opts_.stepPath, step_ - 1);
  std::optional<double> evalLoss;
  if (evaluationDue(last))
    evalLoss = evaluate();
  runAgreed(world_, [&] {
    if (world_.rank() != 0)
      return;
    StepReport r;
    r.step = k;
    r.loss = loss;
    r.seconds = std::chrono::duration<double>(t1 - t0).count();
    r.tokensPerSecond = r.seconds > 0 ? double(tokens) / r.seconds : 0.0;
    r.lossScaling = scaling;
    r.lossScale = seen.scale;
    r.skipped = skipped;
    r.lr = lr;
    r.evalLoss = evalLoss;
    if (skipped && note_)
      note_("step " + std::to_string(k) +
            ": gradients overflowed at loss scale " + jsonNumber(seen.scale) +
            "; the update was skipped and the scale halved");
    if (onStep)
      onStep(r);
    if (evalLoss && onEval_)
      onEval_(EvalReport{step_, evalBatches_, *evalLoss});
    if (log_)
      appendLog(r);
  });
  const bool periodic = opts_.saveEvery > 0 && step_ % opts_.saveEvery == 0;
  if (!opts_.savePath.empty() && (last || periodic || stop)) {
    const int64_t saveStart = trace_ ? TraceWriter::nowNs() : 0;
    saveCheckpoint(*exec_, world_, opts_.savePath, step_, optStep_);
    if (trace_)
      trace_->complete(TraceWriter::kSteps, "save checkpoint", "host",
                       saveStart, TraceWriter::nowNs(),
                       "{\"step\":" + std::to_string(step_) + "}");
  }
  if (trace_)
    runAgreed(world_, [&] { trace_->flush(); });
  if (stop) {
    closeLog();
    closeTrace();
    throw interrupted(stop, "after step " + std::to_string(k));
  }
}

void writeStatsFile(RankExecutor &exec, World &world, const std::string &path) {
  const ExecStats &s = exec.stats();
  const Artifact &a = exec.artifact();
  // Maxima over ranks, as the report gives them.
  std::vector<int64_t> v;
  for (int c = 0; c < kNumMemCategories; ++c)
    v.push_back(int64_t(s.slotBytes[c]));
  for (int c = 0; c < kNumMemCategories; ++c)
    v.push_back(int64_t(s.memoryBytes[c]));
  v.push_back(int64_t(s.stagingBytes));
  v.push_back(int64_t(s.workspaceBytes));
  v.push_back(int64_t(s.totalMemoryBytes));
  auto push = [&](const CollectiveStats &c) {
    v.push_back(int64_t(c.calls));
    v.push_back(int64_t(c.bytes));
    v.push_back(int64_t(c.sentBytes));
    v.push_back(int64_t(c.receivedBytes));
  };
  for (int k = 0; k < kNumCollKinds; ++k)
    push(s.perStep[k]);
  for (size_t comm = 0; comm < a.comms.size(); ++comm)
    for (int k = 0; k < kNumCollKinds; ++k)
      push(s.perStepByComm[comm][size_t(k)]);
  push(s.sendRecvPerStep);
  v.push_back(int64_t(s.activationPeakBytes));
  v.push_back(int64_t(s.microbatchesPeak));
  std::vector<int64_t> mx(v.size());
  world.world().allReduce(v.data(), mx.data(), v.size(), DType::I64,
                          ReduceOp::Max);
  // Pipeline stages run different programs: each rank's own peak.
  const int64_t myPeak = int64_t(s.activationPeakBytes);
  std::vector<int64_t> peakByRank(size_t(world.size()));
  world.world().allGather(&myPeak, peakByRank.data(), sizeof myPeak);
  std::string err;
  if (world.rank() == 0) {
    nlohmann::json j;
    j["devices"] = world.size();
    size_t i = 0;
    // Per category the usual accounting (the slots' bytes, activations at
    // their peak with micro-batch copies), as the plan report gives it;
    // what the allocator really took per kind in allocated_bytes; staging,
    // workspace and the high-water of everything at once in both.
    for (int c = 0; c < kNumMemCategories; ++c)
      j["memory_bytes"][memCategoryName(MemCategory(c))] = mx[i++];
    for (int c = 0; c < kNumMemCategories; ++c)
      j["allocated_bytes"][memCategoryName(MemCategory(c))] = mx[i++];
    for (const char *kind : {"staging", "workspace", "total"})
      j["memory_bytes"][kind] = j["allocated_bytes"][kind] = mx[i++];
    auto read = [&](nlohmann::json &out) {
      out["calls"] = mx[i++];
      out["bytes"] = mx[i++];
      out["sent_bytes"] = mx[i++];
      out["received_bytes"] = mx[i++];
    };
    for (int k = 0; k < kNumCollKinds; ++k)
      read(j["collectives_per_step"][collKindName(CollKind(k))]);
    j["collectives_per_step_by_comm"] = nlohmann::json::object();
    for (size_t comm = 0; comm < a.comms.size(); ++comm)
      for (int k = 0; k < kNumCollKinds; ++k)
        read(j["collectives_per_step_by_comm"][a.comms[comm].name]
              [collKindName(CollKind(k))]);
    read(j["collectives_per_step"]["send_recv"]);
    // Measured while running: the most activation bytes live at once and
    // the most micro-batches in flight (pipelines keep a copy per
    // micro-batch between its forward and its last backward part).
    j["activation_peak_bytes"] = mx[i++];
    j["activation_peak_bytes_by_rank"] = peakByRank;
    j["microbatches_in_flight_peak"] = mx[i++];
    // Rank 0's time per instruction kind, per step (the same program runs
    // on every rank; collectives include waiting for the slowest rank).
    // Per timed step: the first (warm-up) step is left out once there is
    // another (ExecStats::timedRuns).
    const double timed = double(s.timedRuns);
    j["timed_steps"] = s.timedRuns;
    for (const auto &[op, seconds] : s.secondsByOp)
      j["seconds_per_step_by_op"][op] = timed > 0 ? seconds / timed : 0.0;
    // Per kernel and operand shapes; GFLOP/s where the kernel counts flops.
    j["threads"] = exec.threads();
    j["backend"] = exec.backend().name();
    for (const auto &[key, value] : exec.backend().properties())
      j[key] = value;
    j["kernels"] = nlohmann::json::array();
    for (const auto &[key, k] : s.byKernelShape) {
      nlohmann::json row = {
          {"kernel", key},
          {"calls_per_step", timed > 0 ? double(k.calls) / timed : 0.0},
          {"seconds_per_step", timed > 0 ? k.seconds / timed : 0.0}};
      if (k.flops > 0)
        row["gflops"] = k.seconds > 0 ? k.flops / k.seconds / 1e9 : 0.0;
      j["kernels"].push_back(row);
    }
    std::string text =
        j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (!writeOutputFile(path, text, err))
      err = path + ": cannot write: " + err;
  }
  agree(world, err);
}

} // namespace dtc::rt
