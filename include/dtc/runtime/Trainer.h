//===- Trainer.h - the training loop of dtc-run ------------------*- C++
//-*-===//
//
// A thin layer over RankExecutor: load + validate the artifact, initialise
// from the seed, optionally load a checkpoint and open a token file, then per
// step: fill the inputs (synthetic or --data) of global step K, write the step
// tensor, run the program, agree on errors (and on an interruption), fetch
// the loss, log it; save every --save-every steps and at the end.
//
// Collective over a World (MPI ranks, threads, or one rank). Every failure is
// an AgreedError thrown on every rank alike, whose reporter() rank should
// print it (so exactly one error line appears). An interruption is an
// Interrupted (also agreed), thrown after the step in progress finished and
// the checkpoint (if any) was saved. A CommFailure (a timeout, a broken
// transport) is not agreed: each rank that sees it reports it and leaves.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TRAINER_H
#define DTC_RUNTIME_TRAINER_H

#include "dtc/artifact/OutputFile.h"
#include "dtc/kernels/LearningRate.h"
#include "dtc/runtime/Checkpoint.h"
#include "dtc/runtime/Executor.h"
#include "dtc/runtime/TokenData.h"
#include "dtc/runtime/Trace.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace dtc::rt {

/// The default of --timeout, in seconds.
constexpr double kDefaultTimeoutSeconds = 300;
/// The most batches an evaluation takes when --eval-batches is not given.
constexpr int64_t kDefaultEvalBatches = 10;

struct TrainOptions {
  std::string artifactPath;
  int64_t steps = 0;
  uint64_t seed = 0;
  std::string backend = "cpu";
  /// --collectives: BackendOptions::collectives ("" = the backend's default).
  std::string collectives;
  std::string dataPath; ///< "" = synthetic inputs
  /// --shuffle: each pass over the data's windows in an order drawn from
  /// the seed (shuffledWindowStart).
  bool shuffle = false;
  /// --overwrite: --save may replace a checkpoint of a later step and --log
  /// a log of earlier steps (otherwise both are refused: never lose work
  /// without being asked).
  bool overwrite = false;
  TokenDType dataDtype = TokenDType::U16;
  /// --eval-data: a token file (of dataDtype) whose first evalBatches
  /// global batches, in the file's order, are evaluated (Trainer::evaluate)
  /// every evalEvery steps and after the last; "" = no evaluation.
  std::string evalDataPath;
  int64_t evalEvery = 0;
  /// 0: the default, min(kDefaultEvalBatches, the batches the file holds).
  int64_t evalBatches = 0;
  std::string logPath, savePath, loadPath, statsPath;
  /// Directory of the per-rank traces (DIR/rank-R.json); "" = none.
  std::string traceDir;
  /// After the last step: that step's inputs and outputs (saveStepTensors).
  std::string stepPath;
  /// Also save every N steps (when the global step count is a multiple of
  /// N); 0 = only at the end.
  int64_t saveEvery = 0;
  /// Longest wait in any communication before the rank gives up (0 = none).
  double timeoutSeconds = kDefaultTimeoutSeconds;
  /// The signal asking this rank to stop (0 = none), with kStopFromOutside
  /// or'ed in when it did not come through the launcher that supervises
  /// the run; polled once per step.
  std::function<int()> pendingSignal;
  /// Kernel threads per rank; 0: defaultKernelThreads(ranks on this node).
  int threads = 0;
  /// Refuse to start when the ranks on this node need more memory than it
  /// has available (checkMemoryFits; host memory, so the CPU backend only:
  /// a GPU's allocations fail with a message naming the slot);
  /// --no-memory-check turns it off.
  bool checkMemory = true;
};

/// "SIGTERM", "SIGKILL", ... ("signal 42" for others).
std::string signalName(int sig);

/// Or'ed into TrainOptions::pendingSignal's signal: it was sent to a rank
/// (or its guard) directly while `dtc run` supervises the job, so it is
/// not the user's interrupt of the run and the message says so.
constexpr int kStopFromOutside = 0x100;

/// The run stopped early because of a signal (agreed by all ranks, printed
/// by rank 0).
class Interrupted : public AgreedError {
public:
  Interrupted(const std::string &msg, int signal)
      : AgreedError(msg, 0), signal_(signal) {}
  int signal() const { return signal_; }

private:
  int signal_;
};

/// Refuses (throws Error) an output of the run that names one of its inputs
/// or another output. Saving into the checkpoint the run loaded is allowed:
/// the load is complete before the first save, and saves replace atomically.
void checkRunPaths(const TrainOptions &o);

/// Whether an existing --log is continued: for a run resumed at global step
/// `step` (steps done), a log whose last line is step `step - 1` is appended
/// to; a missing or empty log is started. A log that holds steps the run
/// would write again, or would leave a gap after (a run without --load
/// finding a log of step records, a resumed run finding another step), is
/// refused (Error) unless `overwrite`, which starts it afresh; so is a log
/// whose last line is cut.
bool continueLog(const std::string &logPath, bool resuming, int64_t step,
                 bool overwrite);

/// Refuses (throws Error) a --save that would replace a checkpoint of step
/// `startStep` or later (the run's first step) that the run did not --load
/// from, unless --overwrite: a run started afresh over the README's
/// checkpoint would otherwise lose its steps without a word.
void checkSaveKeepsWork(const TrainOptions &o, int64_t startStep);

/// Refuses (throws Error) a trace file of one of `ranks` (DIR/rank-R.json)
/// that names an input of the run or another output.
void checkTracePaths(const TrainOptions &o, const std::vector<int> &ranks);

struct StepReport {
  int64_t step = 0; ///< global step index K
  float loss = 0;
  double seconds = 0;
  double tokensPerSecond = 0;
  /// Dynamic loss scaling (fp16-mixed artifacts): the scale this step ran
  /// with, and whether its gradients overflowed so the update was skipped.
  bool lossScaling = false;
  float lossScale = 0;
  bool skipped = false;
  /// The learning rate this step's update applied (or, skipped, would
  /// have); absent without an optimizer.
  std::optional<double> lr;
  /// The evaluation run after this step, if one was (its loss, averaged
  /// over the evaluation's batches).
  std::optional<double> evalLoss;
};

/// An evaluation's result: the parameters after `step` steps (the global
/// step count, a checkpoint's step), the loss averaged over `batches`.
struct EvalReport {
  int64_t step = 0;
  int64_t batches = 0;
  double loss = 0;
};

/// The steps DTC_INJECT_OVERFLOW names (docs/runtime.md): "K" or "K1,K2,...",
/// global step indices. Throws Error on a malformed value.
std::vector<int64_t> parseInjectOverflow(const std::string &text);

/// The learning-rate schedule of an artifact's update instructions (they
/// share one); absent when it has none (--optimizer none).
std::optional<kernels::LearningRateSchedule>
learningRateScheduleOf(const Artifact &a);

class Trainer {
public:
  /// Collective. `note` receives informational lines on rank 0 only.
  Trainer(World &world, TrainOptions opts,
          std::function<void(const std::string &)> note = nullptr);
  ~Trainer();

  /// Collective: runs opts.steps steps, saving and evaluating as asked
  /// (with --steps 0 and --eval-data, one evaluation of the loaded or
  /// initial parameters). `onStep` and `onEval` (after its step's
  /// `onStep`) are called on rank 0 only.
  void run(const std::function<void(const StepReport &)> &onStep = nullptr,
           const std::function<void(const EvalReport &)> &onEval = nullptr);

  /// Collective: the loss of the current parameters averaged over the first
  /// evaluation batches of --eval-data (which must be open), run as the
  /// artifact's evaluation (no backward, no update). Leaves the inputs and
  /// the loss buffer holding the last batch's.
  double evaluate();
  /// Global batches an evaluation takes (0 without --eval-data).
  int64_t evalBatches() const { return evalBatches_; }

  RankExecutor &executor() { return *exec_; }
  const Artifact &artifact() const { return *artifact_; }
  int64_t globalStep() const { return step_; }
  int64_t optimizerStep() const { return optStep_; }
  /// Tokens of one global batch (elements of the first integer input, else
  /// the first input's dimension 0, else 0).
  int64_t tokensPerStep() const;
  /// Steps in one pass over --data's windows ((n - S - 1) / (B·S) with n
  /// tokens, docs/cli.md); 0 without data.
  double stepsPerPass() const;

private:
  /// The inputs of `step`: synthetic, then ids and labels from `tokens`
  /// (if any) in `order`; and the step tensor.
  void feed(int64_t step, const TokenFile *tokens, const WindowOrder &order);
  /// Opens a token file for the ids/labels inputs on every rank and checks
  /// it (its size, then every token on rank 0, in chunks the ranks agree on
  /// one by one, so no wait exceeds one chunk's read).
  std::unique_ptr<TokenFile> openTokenFile(const std::string &path);
  /// --eval-data: the file, and how many batches an evaluation takes.
  void openEvaluation();
  /// Whether an evaluation follows the step that brought the count to
  /// step_ (every --eval-every steps, and after the last).
  bool evaluationDue(bool last) const;
  /// Global step k: run, agree, report, log, save as asked; throws
  /// Interrupted after it when a stop was agreed.
  void runStep(int64_t k, bool last, int64_t tokens,
               const std::function<void(const StepReport &)> &onStep);
  void appendLog(const StepReport &r);
  /// Collective: rank 0 flushes and closes the log.
  /// A stop asked for before the first step (agreed): save what there is
  /// and throw Interrupted.
  void stopBeforeFirstStep();
  /// The interruption after `stop` (`when`: "after step K", "before the
  /// first step"), naming what --save holds.
  Interrupted interrupted(int stop, const std::string &when) const;
  void closeLog();
  /// Collective: every rank completes its trace file.
  void closeTrace();
  World &world_;
  TrainOptions opts_;
  std::function<void(const std::string &)> note_;
  std::unique_ptr<Artifact> artifact_;
  std::unique_ptr<RankExecutor> exec_;
  std::unique_ptr<TokenFile> data_, evalData_;
  int64_t evalBatches_ = 0;
  std::function<void(const EvalReport &)> onEval_;
  std::unique_ptr<OutputFile> log_; ///< rank 0
  std::unique_ptr<TraceWriter> trace_;
  TokenBinding binding_;
  int lossRank_ = 0;
  int64_t step_ = 0, optStep_ = 0;
  /// Loss scaling's scale and skipped-step count (-1: no loss scaling).
  int lossScaleTensor_ = -1, skippedTensor_ = -1;
  std::vector<int64_t> injectOverflow_;
  /// The updates' learning-rate schedule (absent: --optimizer none).
  std::optional<kernels::LearningRateSchedule> schedule_;
};

/// Writes the per-rank maxima of memory bytes per category and per-step
/// collective bytes per kind as JSON (rank 0 writes; collective).
void writeStatsFile(RankExecutor &exec, World &world, const std::string &path);

} // namespace dtc::rt

#endif // DTC_RUNTIME_TRAINER_H
