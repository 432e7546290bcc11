//===- Trainer.cpp ---------------------------------------------------------------===//
#include "dtc/runtime/Trainer.h"
#include "dtc/runtime/ArtifactFormat.h"
#include "dtc/runtime/AtomicFile.h"
#include "dtc/runtime/MemoryPlan.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace dtc::rt {

namespace {

std::string jsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.8g", v);
  return buf;
}
} // namespace

Trainer::Trainer(World &world, TrainOptions opts, std::function<void(const std::string &)> note)
    : world_(world), opts_(std::move(opts)), note_(std::move(note)) {
  // 1. The artifact, on every rank.
  runAgreed(world_, [&] {
    if (opts_.backend == "cuda")
      throw Error("--backend cuda: this build of dtc has no CUDA backend yet; use --backend cpu");
    if (opts_.backend != "cpu")
      throw Error("--backend: unknown backend '" + opts_.backend + "' (expected cpu or cuda)");
    artifact_ = std::make_unique<Artifact>(loadArtifactFile(opts_.artifactPath));
    checkRankCount(*artifact_, world_.size());
    // Before anything is allocated: the kernel's OOM killer would end the
    // job later without a word.
    if (opts_.checkMemory) checkMemoryFits(*artifact_, world_.ranksOnNode());
    if (opts_.configureBlasThreads && !std::getenv("OPENBLAS_NUM_THREADS")) {
      int cores = int(std::thread::hardware_concurrency());
      int per = cores / std::max(1, world_.ranksOnNode());
      kernels::cpu::setBlasThreads(per < 1 ? 1 : per);
    }
  });
  // 2. The executor: its constructor splits communicators first (collective),
  //    then allocates; initialise parameters from the seed.
  runAgreed(world_, [&] {
    exec_ = std::make_unique<RankExecutor>(*artifact_, world_, opts_.backend);
    exec_->initPersistent(opts_.seed);
    const std::vector<int> loss = artifact_->tensorsWithRole(Role::Loss);
    const std::vector<int> holders = contributorRanks(*artifact_, loss.at(0));
    lossRank_ = holders.at(0);
  });
  // 3. The token file: every rank maps it, rank 0 validates every token.
  if (!opts_.dataPath.empty()) {
    runAgreed(world_, [&] {
      binding_ = bindTokenInputs(*artifact_);
      data_ = std::make_unique<TokenFile>(opts_.dataPath, opts_.dataDtype);
      if (world_.rank() == 0)
        data_->validate(binding_);
      else if (data_->size() < binding_.S + 2)
        data_->validate(binding_); // same "too small" error on every rank
    });
  }
  // 4. The checkpoint.
  if (!opts_.loadPath.empty()) {
    LoadedCheckpoint info = loadCheckpoint(*exec_, world_, opts_.loadPath);
    step_ = info.step;
    optStep_ = info.optimizerRestored ? info.optimizerStep : 0;
    if (!info.note.empty() && world_.rank() == 0 && note_) note_(info.note);
  }
  // 5. The log file (rank 0), truncated now so a bad path fails before step 0.
  if (!opts_.logPath.empty()) {
    runAgreed(world_, [&] {
      if (world_.rank() != 0) return;
      FILE *f = std::fopen(opts_.logPath.c_str(), "w");
      if (!f)
        throw Error(opts_.logPath + ": cannot open the log file: " + std::strerror(errno));
      std::fclose(f);
    });
  }
}

Trainer::~Trainer() = default;

int64_t Trainer::tokensPerStep() const {
  const std::vector<int> inputs = artifact_->tensorsWithRole(Role::Input);
  for (int t : inputs)
    if (isInt(artifact_->tensors[size_t(t)].dtype)) return numel(artifact_->tensors[size_t(t)].shape);
  if (!inputs.empty() && !artifact_->tensors[size_t(inputs[0])].shape.empty())
    return artifact_->tensors[size_t(inputs[0])].shape[0];
  return 0;
}

void Trainer::feed(int64_t step) {
  exec_->fillSyntheticInputs(opts_.seed, step);
  if (data_) {
    for (int which = 0; which < 2; ++which) {
      const int t = which == 0 ? binding_.ids : binding_.labels;
      if (!exec_->holds(t)) continue;
      LocalTensor lt = exec_->tensor(t);
      fillTokens(*data_, binding_, step, which == 1, lt.data, lt.decl->dtype, lt.piece);
    }
  }
  exec_->setOptimizerStep(optStep_);
}

void Trainer::run(const std::function<void(const StepReport &)> &onStep) {
  const int64_t tokens = tokensPerStep();
  for (int64_t i = 0; i < opts_.steps; ++i) {
    const int64_t k = step_;
    runAgreed(world_, [&] { feed(k); });
    const auto t0 = std::chrono::steady_clock::now();
    std::string err = exec_->run();
    if (!err.empty()) err = artifact_->label + ": step " + std::to_string(k) + ": " + err;
    agree(world_, err);
    float loss = 0;
    if (world_.rank() == lossRank_) loss = exec_->loss();
    if (lossRank_ != 0) world_.world().broadcast(&loss, sizeof loss, lossRank_);
    const auto t1 = std::chrono::steady_clock::now();
    ++step_;
    ++optStep_;
    runAgreed(world_, [&] {
      if (world_.rank() != 0) return;
      StepReport r;
      r.step = k;
      r.loss = loss;
      r.seconds = std::chrono::duration<double>(t1 - t0).count();
      r.tokensPerSecond = r.seconds > 0 ? double(tokens) / r.seconds : 0.0;
      if (onStep) onStep(r);
      if (!opts_.logPath.empty()) {
        FILE *f = std::fopen(opts_.logPath.c_str(), "a");
        if (!f) throw Error(opts_.logPath + ": cannot open the log file: " + std::strerror(errno));
        std::string line = "{\"step\":" + std::to_string(k) + ",\"loss\":" + jsonNumber(loss) +
                           ",\"step_time_s\":" + jsonNumber(r.seconds) +
                           ",\"tokens_per_s\":" + jsonNumber(r.tokensPerSecond) + "}\n";
        const bool ok = std::fwrite(line.data(), 1, line.size(), f) == line.size();
        if (std::fclose(f) != 0 || !ok)
          throw Error(opts_.logPath + ": cannot write the log file: " + std::strerror(errno));
      }
    });
  }
  if (!opts_.savePath.empty()) saveCheckpoint(*exec_, world_, opts_.savePath, step_, optStep_);
  if (!opts_.statsPath.empty()) writeStatsFile(*exec_, world_, opts_.statsPath);
}

void writeStatsFile(RankExecutor &exec, World &world, const std::string &path) {
  const ExecStats &s = exec.stats();
  const Artifact &a = exec.artifact();
  // Maxima over ranks, as the report gives them.
  std::vector<int64_t> v;
  for (int c = 0; c < kNumMemCategories; ++c) v.push_back(int64_t(s.memoryBytes[c]));
  v.push_back(int64_t(s.stagingBytes));
  v.push_back(int64_t(s.workspaceBytes));
  v.push_back(int64_t(s.totalMemoryBytes));
  auto push = [&](const CollectiveStats &c) {
    v.push_back(int64_t(c.calls));
    v.push_back(int64_t(c.bytes));
    v.push_back(int64_t(c.sentBytes));
    v.push_back(int64_t(c.receivedBytes));
  };
  for (int k = 0; k < kNumCollKinds; ++k) push(s.perStep[k]);
  for (size_t comm = 0; comm < a.comms.size(); ++comm)
    for (int k = 0; k < kNumCollKinds; ++k) push(s.perStepByComm[comm][size_t(k)]);
  std::vector<int64_t> mx(v.size());
  world.world().allReduce(v.data(), mx.data(), v.size(), DType::I64, ReduceOp::Max);
  std::string err;
  if (world.rank() == 0) {
    nlohmann::json j;
    j["devices"] = world.size();
    size_t i = 0;
    for (int c = 0; c < kNumMemCategories; ++c) j["memory_bytes"][memCategoryName(MemCategory(c))] = mx[i++];
    j["memory_bytes"]["staging"] = mx[i++];
    j["memory_bytes"]["workspace"] = mx[i++];
    j["memory_bytes"]["total"] = mx[i++];
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
        read(j["collectives_per_step_by_comm"][a.comms[comm].name][collKindName(CollKind(k))]);
    // Rank 0's time per instruction kind, per step (the same program runs
    // on every rank; collectives include waiting for the slowest rank).
    for (const auto &[op, seconds] : s.secondsByOp)
      j["seconds_per_step_by_op"][op] = s.runs ? seconds / double(s.runs) : 0.0;
    std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (!writeFileAtomic(path, text, err)) err = path + ": cannot write: " + err;
  }
  agree(world, err);
}

} // namespace dtc::rt
