//===- Evaluation.cpp - the loss on held-out data -------------------------===//
//
// An evaluation runs the artifact's forward-only part of the step
// (RankExecutor::runEvaluation) once per batch of --eval-data and averages
// the losses. Batch j holds the file's windows j·B .. j·B + B - 1 in the
// file's order (never shuffled, so every evaluation of a run, and `dtc
// eval` later, sees the same tokens); the file must hold every window an
// evaluation takes without wrapping around.
//
//===----------------------------------------------------------------------===//
#include "dtc/runtime/Trainer.h"

namespace dtc::rt {

void Trainer::openEvaluation() {
  runAgreed(world_, [&] {
    if (!artifact_->hasEvaluation())
      throw Error(opts_.artifactPath +
                  ": the artifact has no evaluation section (compiled by an "
                  "older dtc); compile it again to use --eval-data");
  });
  evalData_ = openTokenFile(opts_.evalDataPath);
  runAgreed(world_, [&] {
    const int64_t n = evalData_->size(), B = binding_.B, S = binding_.S;
    // Windows that start at multiples of S and end inside the file.
    const int64_t windows = (n - S - 2) / S + 1;
    const int64_t held = windows / B;
    if (held == 0)
      throw Error(opts_.evalDataPath + ": " + std::to_string(n) +
                  " tokens hold " + std::to_string(windows) + " window" +
                  (windows == 1 ? "" : "s") + " of " + std::to_string(S + 1) +
                  " tokens, fewer than one batch of " + std::to_string(B));
    if (opts_.evalBatches > held)
      throw Error("--eval-batches " + std::to_string(opts_.evalBatches) + ": " +
                  opts_.evalDataPath + " holds " + std::to_string(held) +
                  " batch" + (held == 1 ? "" : "es") + " of " +
                  std::to_string(B) + " windows of " + std::to_string(S + 1) +
                  " tokens");
    evalBatches_ = opts_.evalBatches > 0 ? opts_.evalBatches
                                         : std::min(kDefaultEvalBatches, held);
  });
}

bool Trainer::evaluationDue(bool last) const {
  if (!evalData_)
    return false;
  return last || (opts_.evalEvery > 0 && step_ % opts_.evalEvery == 0);
}

double Trainer::evaluate() {
  double sum = 0;
  for (int64_t j = 0; j < evalBatches_; ++j) {
    // The file's order: every evaluation sees the same tokens.
    runAgreed(world_, [&] { feed(j, evalData_.get(), WindowOrder{}); });
    std::string err = exec_->runEvaluation();
    if (!err.empty())
      err = artifact_->label + ": evaluation after step " +
            std::to_string(step_) + ", batch " + std::to_string(j) + ": " + err;
    agree(world_, err);
    float loss = 0;
    if (world_.rank() == lossRank_)
      loss = exec_->loss();
    // Every rank returns the same average.
    world_.world().broadcast(&loss, sizeof loss, lossRank_);
    sum += double(loss);
  }
  return sum / double(evalBatches_);
}

} // namespace dtc::rt
