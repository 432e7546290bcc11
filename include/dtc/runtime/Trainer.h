//===- Trainer.h - the training loop of dtc-run ------------------*- C++ -*-===//
//
// A thin layer over RankExecutor: load + validate the artifact, initialise
// from the seed, optionally load a checkpoint and open a token file, then per
// step: fill the inputs (synthetic or --data) of global step K, write the step
// tensor, run the program, agree on errors, fetch the loss; finally save.
//
// Collective over a World (MPI ranks, threads, or one rank). Every failure is
// an AgreedError thrown on every rank alike, whose reporter() rank should
// print it (so exactly one error line appears).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TRAINER_H
#define DTC_RUNTIME_TRAINER_H

#include "dtc/runtime/Checkpoint.h"
#include "dtc/runtime/Executor.h"
#include "dtc/runtime/TokenData.h"

#include <functional>
#include <memory>
#include <string>

namespace dtc::rt {

struct TrainOptions {
  std::string artifactPath;
  int64_t steps = 0;
  uint64_t seed = 0;
  std::string backend = "cpu";
  std::string dataPath; ///< "" = synthetic inputs
  TokenDType dataDtype = TokenDType::U16;
  std::string logPath, savePath, loadPath, statsPath;
  /// Set OpenBLAS threads to max(1, cores / ranks on this node) unless
  /// OPENBLAS_NUM_THREADS is set.
  bool configureBlasThreads = true;
  /// Refuse to start when the ranks on this node need more memory than it
  /// has available (checkMemoryFits); --no-memory-check turns it off.
  bool checkMemory = true;
};

struct StepReport {
  int64_t step = 0; ///< global step index K
  float loss = 0;
  double seconds = 0;
  double tokensPerSecond = 0;
};

class Trainer {
public:
  /// Collective. `note` receives informational lines on rank 0 only.
  Trainer(World &world, TrainOptions opts,
          std::function<void(const std::string &)> note = nullptr);
  ~Trainer();

  /// Collective: runs opts.steps steps, then saves if asked. `onStep` is
  /// called on rank 0 only.
  void run(const std::function<void(const StepReport &)> &onStep = nullptr);

  RankExecutor &executor() { return *exec_; }
  const Artifact &artifact() const { return *artifact_; }
  int64_t globalStep() const { return step_; }
  int64_t optimizerStep() const { return optStep_; }
  /// Tokens of one global batch (elements of the first integer input, else
  /// the first input's dimension 0, else 0).
  int64_t tokensPerStep() const;

private:
  void feed(int64_t step);
  World &world_;
  TrainOptions opts_;
  std::function<void(const std::string &)> note_;
  std::unique_ptr<Artifact> artifact_;
  std::unique_ptr<RankExecutor> exec_;
  std::unique_ptr<TokenFile> data_;
  TokenBinding binding_;
  int lossRank_ = 0;
  int64_t step_ = 0, optStep_ = 0;
};

/// Writes the per-rank maxima of memory bytes per category and per-step
/// collective bytes per kind as JSON (rank 0 writes; collective).
void writeStatsFile(RankExecutor &exec, World &world, const std::string &path);

} // namespace dtc::rt

#endif // DTC_RUNTIME_TRAINER_H
