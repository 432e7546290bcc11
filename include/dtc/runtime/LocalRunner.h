//===- LocalRunner.h - run an artifact in process (no MPI) -------*- C++
//-*-===//
//
// The in-process API for compiler tests and tools. It runs an artifact's
// ranks inside this process: one rank directly, N ranks as N threads that
// talk through shared memory (ThreadWorld), so a 4-device artifact can be
// compared against a 1-device one without mpirun.
//
// Every method is noexcept and reports failure as `false` + a one-line
// message in `error` (no "error:" prefix), so this header is safe to use from
// code built with -fno-exceptions and -fno-rtti (the class is not
// polymorphic; its state lives behind a pointer).
//
// Typical use:
//
//   std::string err;
//   auto run = dtc::rt::LocalRunner::loadBytes(dtc::rt::encodeArtifact(body),
//                                              "model.dtc", err);
//   if (!run || !run->initialize(/*seed=*/0, err)) ...;
//   std::vector<float> losses;
//   if (!run->train(/*steps=*/5, losses, err)) ...;   // synthetic inputs
//   std::vector<float> w;
//   run->getTensor("w1", w, err);                      // gathered, global
//
// or step by step:
//
//   run->setTensor("x", xs, err);     // global row-major values
//   run->setTensor("y", ys, err);
//   run->runStep(err);                // the instruction list once
//   float l; run->loss(l, err);
//
// Tensors are addressed by their artifact names (`tensors[].name`); data is
// GLOBAL (unsharded, row-major) in the tensor's dtype: each rank gets or
// gives its piece under the tensor's sharding.
//
// A failed runStep()/train() (e.g. an id out of range) leaves the step half
// done: initialize() again or load a fresh runner before trusting values.
// The calls of one LocalRunner must not overlap (it is not thread-safe);
// separate runners are independent. Link: dtc_runtime (no MPI needed).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_LOCALRUNNER_H
#define DTC_RUNTIME_LOCALRUNNER_H

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dtc::rt {

struct LocalRunnerOptions {
  std::string backend = "cpu";
  /// BackendOptions::collectives: "" (the backend's default) or "mpi"
  /// (host memory and the threads' shared-memory communicator).
  std::string collectives;
  /// Kernel threads per rank (ranks are threads of this process).
  int threads = 1;
  /// Longest wait of a rank thread in a collective before the step fails
  /// with a message naming it (0 = wait forever), as dtc-run's --timeout.
  double timeoutSeconds = 300;
};

/// Measurements (per rank, maximum over ranks).
struct LocalRunStats {
  /// memory kind ("param", "grad", ..., "staging", "workspace", "total") ->
  /// bytes allocated (high-water, maximum over ranks)
  std::map<std::string, uint64_t> memoryBytes;
  /// collective kind ("all_reduce", ...) -> calls / data bytes / bytes
  /// really sent in ONE step (maximum over ranks)
  std::map<std::string, uint64_t> collectiveCallsPerStep;
  std::map<std::string, uint64_t> collectiveBytesPerStep;
  std::map<std::string, uint64_t> collectiveSentBytesPerStep;
  /// Per rank, as its allocator saw them: the pipeline stage it runs (-1
  /// without a pipeline), the most activation bytes live at once, and the
  /// most micro-batches in flight.
  std::vector<int> stageOfRank;
  std::vector<uint64_t> activationPeakBytes;
  std::vector<int> microbatchesPeak;
};

class LocalRunner {
public:
  /// From the bytes of a .dtc file (container checked). `label` names it in
  /// messages. Returns nullptr and sets `error` on failure.
  static std::unique_ptr<LocalRunner>
  loadBytes(std::string_view fileBytes, const std::string &label,
            std::string &error, const LocalRunnerOptions &opts = {}) noexcept;
  /// From a .dtc file.
  static std::unique_ptr<LocalRunner>
  loadFile(const std::string &path, std::string &error,
           const LocalRunnerOptions &opts = {}) noexcept;
  /// From a JSON body (no container), e.g. straight from the emitter.
  static std::unique_ptr<LocalRunner>
  loadJson(const nlohmann::json &body, const std::string &label,
           std::string &error, const LocalRunnerOptions &opts = {}) noexcept;
  ~LocalRunner();

  /// Number of ranks (the artifact's devices).
  int ranks() const noexcept;
  /// Names of the artifact's tensors with role "param", "optimizer_state",
  /// "input", "step" or "loss", in artifact order.
  std::vector<std::string> tensorNames(const std::string &role) const noexcept;

  /// Constants are filled at load. This sets params and optimizer state from
  /// their init with `seed`, the step tensor to 0, and the step counter to 0.
  bool initialize(uint64_t seed, std::string &error) noexcept;
  /// Synthetic inputs of global step `step` (docs/artifact.md).
  bool fillSyntheticInputs(int64_t step, std::string &error) noexcept;

  /// Sets a tensor from its GLOBAL value; `bytes` must be the global size in
  /// the tensor's dtype.
  bool setTensor(const std::string &name, const void *data, size_t bytes,
                 std::string &error) noexcept;
  bool setTensor(const std::string &name, const std::vector<float> &v,
                 std::string &error) noexcept;
  bool setTensor(const std::string &name, const std::vector<int32_t> &v,
                 std::string &error) noexcept;
  bool setTensor(const std::string &name, const std::vector<int64_t> &v,
                 std::string &error) noexcept;
  /// The GLOBAL value, assembled from the ranks' pieces.
  bool getTensorBytes(const std::string &name, std::vector<char> &out,
                      std::string &error) noexcept;
  bool getTensor(const std::string &name, std::vector<float> &out,
                 std::string &error) noexcept;
  bool getTensor(const std::string &name, std::vector<int64_t> &out,
                 std::string &error) noexcept; // i32/i64 widened
  /// Rank `rank`'s local piece (f32 tensors), e.g. to inspect a shard.
  bool getLocalTensor(int rank, const std::string &name,
                      std::vector<float> &out, std::string &error) noexcept;

  /// Writes the step tensor (optimizer updates applied), if the artifact has
  /// one.
  bool setOptimizerStep(int64_t value, std::string &error) noexcept;
  /// Runs the instruction list once on every rank. Nothing else: inputs and
  /// the step tensor are what was last set.
  bool runStep(std::string &error) noexcept;
  /// The artifact's evaluation once (RankExecutor::runEvaluation): the loss
  /// of the current inputs, parameters untouched.
  bool runEvaluation(std::string &error) noexcept;
  /// The loss of the last step (as held by the lowest rank holding it).
  bool loss(float &out, std::string &error) noexcept;

  /// The dtc-run loop without files: for each of `steps` steps, synthetic
  /// inputs of global step K (K counts from 0 after initialize()), step
  /// tensor = K, runStep, loss appended to `losses`.
  bool train(int64_t steps, std::vector<float> &losses,
             std::string &error) noexcept;
  /// Global steps done by train().
  int64_t stepsDone() const noexcept;

  LocalRunStats stats() const noexcept;

  struct Impl;

private:
  explicit LocalRunner(std::unique_ptr<Impl> impl);
  template <class Parse>
  static std::unique_ptr<LocalRunner>
  loadWith(Parse &&parse, const std::string &label, std::string &error,
           const LocalRunnerOptions &opts) noexcept;
  std::unique_ptr<Impl> impl_;
};

} // namespace dtc::rt

#endif // DTC_RUNTIME_LOCALRUNNER_H
