//===- Compile.h - dtc compile: model.mlir -> artifact ---------*- C++ -*-===//
#ifndef DTC_DRIVER_COMPILE_H
#define DTC_DRIVER_COMPILE_H

#include "dtc/CostModel/CostModel.h"
#include "dtc/Planner/Search.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtc {

/// Everything `dtc compile` can be asked (docs/cli.md).
struct CompileOptions {
  std::string input;
  std::string output;
  std::vector<int64_t> mesh = {1};
  /// The mesh's device count (the product of its axes).
  int64_t devices() const {
    int64_t count = 1;
    for (int64_t size : mesh)
      count *= size;
    return count;
  }
  std::string hw = "cpu";
  bool autoPlan = true;
  // Pinned degrees (--strategy); 0 = not pinned.
  int64_t dp = 0, tp = 1, pp = 1, sp = 1, ep = 1, zero = 0;
  int64_t microbatches = 1;
  /// Megatron sequence parallelism inside tensor parallelism
  /// (--sequence-parallel; needs tp > 1).
  bool sequenceParallel = false;
  /// Ring attention's sequence layout (--sp-layout): zigzag, striped or
  /// contiguous; empty: the default, zigzag where every token input's
  /// sequence divides into 2 sp chunks, else striped (which needs sp).
  std::string spLayout;
  /// Which factor of each op tp splits (--tp-layout): megatron or ilp;
  /// auto under the search (it compiles tp plans both ways).
  std::string tpLayout = "megatron";
  std::string schedule = "1f1b";
  /// Model chunks per pipeline stage (the interleaved schedule).
  int64_t virtualStages = 1;
  std::string remat = "none";
  std::string precision = "f32";
  /// fp16-mixed's dynamic loss scaling: the initial scale, and the good
  /// steps in a row after which it doubles (it halves on an overflow).
  double lossScale = 65536.0;
  int64_t lossScaleWindow = 2000;
  int64_t gradAccum = 1;
  std::string optimizer =
      "adam"; // sgd | adam | adamw | none (return gradients)
  double lr = 1e-3;
  /// The rate's schedule (--lr-schedule constant|cosine|linear,
  /// --warmup-steps, --decay-steps, --min-lr): include/dtc/kernels/
  /// LearningRate.h has the formula.
  std::string lrSchedule = "constant";
  int64_t warmupSteps = 0, decaySteps = 0;
  double minLr = 0;
  /// Unset: the optimizer's default (0, or 0.01 for adamw).
  std::optional<double> weightDecay;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, gradClip = 0.0;
  /// Memory of one device (--device-memory); unset: --hw's memory, or for
  /// cpu this machine's RAM divided by the mesh's device count.
  std::optional<uint64_t> deviceMemory;
  std::string report;
  std::string
      emitMlirAfter; // parsed | training-step | planned | split | partitioned
  bool emitGeneric = false; // print --emit-mlir in MLIR's generic op form
  /// Fuse a matmul's bias add and GELU into its kernel
  /// (dtc-fuse-matmul-epilogues); --no-fuse-epilogues turns it off.
  bool fuseEpilogues = true;
  /// "keep": attention's backward reads the forward's output and logsumexp
  /// (dtc-keep-attention-stats); "recompute": it recomputes them.
  std::string attentionStats = "recompute";
  /// Largest data-parallel gradient bucket, MiB (--bucket-mb; 0: one
  /// all-reduce per gradient).
  int64_t bucketMiB = 25;
  /// Print each stage's wall time to stderr ("dtc: time: STAGE SECONDS s").
  bool timing = false;
  /// --Werror: the model's warnings (docs/cli.md) are errors.
  bool warningsAreErrors = false;
  /// A few lines on stderr after a successful compile: the plan, memory,
  /// communication and predicted step (planSummary). Default: when stderr
  /// is a terminal; --summary / --quiet.
  bool summary = false;
  /// --pin NAME=[[axes], ...]: parameter shardings pinned at user priority.
  std::vector<std::string> pins;
  /// Search the plan (dtc compile without a complete --strategy, or
  /// --auto); without it and without a strategy, data parallelism over
  /// every device.
  bool search = false;
  /// The search: how many of the best estimated plans it lowers
  /// and evaluates (--search-rescore; 0: every plan, the brute force),
  /// its time limit in seconds (--search-time-limit), and whether to print
  /// its choice and the alternatives to stderr (--explain).
  int64_t searchRescore = 4;
  double searchTimeLimit = 60;
  bool explain = false;
  /// Report the search's progress on stderr once a second after the first
  /// (--progress; by default when stderr is a terminal).
  bool progress = false;
  /// Flags given on the command line that pin a choice the search would
  /// otherwise make ("microbatches", "remat", "sequence-parallel").
  std::vector<std::string> pinnedChoices;
  /// The search's record (JSON) once it chose: the report's "planner".
  std::string plannerRecord;
};

/// Runs the whole compilation; prints one error line on failure. Returns the
/// process exit code.
/// "dp=2 on axis 0, tp=2 on axis 1": the degrees above 1 of a plan (the
/// report's "strategy" or an artifact's "plan") on the mesh axes `axes`
/// maps them to; "" for one device. dtc compile's summary and dtc
/// inspect --summary print it.
std::string degreesText(const nlohmann::json &degrees,
                        const nlohmann::json &axes);
/// "zero 0, 1 micro-batch, schedule none, remat none, f32": the plan's
/// other choices, from the same objects.
std::string planChoicesText(const nlohmann::json &plan);

/// The plan summary `dtc compile` prints: the report's plan, parameters,
/// memory per device by category, communication per step by collective,
/// predicted step and compile time, as a few aligned lines.
std::string planSummary(const nlohmann::json &report, const std::string &model,
                        const std::string &output);

/// The advice of a memory refusal for a pinned plan: up to three plans of
/// the same mesh the search's closed forms expect to fit the budget (as
/// --strategy flags; in bf16-mixed when no plan in the model's precision
/// fits), or a larger mesh and --device-memory when none does.
std::string fittingPlansAdvice(const std::string &source,
                               const CompileOptions &options);

int runCompile(const CompileOptions &options);

/// Compiles MLIR text in memory: on success fills `artifact` with the body
/// the runtime loads (e.g. LocalRunner::loadJson); on failure returns false
/// with the first error as one line in `error`. `options.output` and
/// `options.report` are ignored.
bool compileToArtifact(const std::string &source, const std::string &label,
                       const CompileOptions &options, nlohmann::json &artifact,
                       std::string &error);

/// compileToArtifact that also fills the plan report (also for a plan the
/// memory check refused, whose report says by how much).
bool compileToReport(const std::string &source, const std::string &label,
                     const CompileOptions &options, nlohmann::json &artifact,
                     nlohmann::json &report, std::string &error);

/// What the plan search needs before it plans: the training step's facts,
/// the hardware profile (its links for the mesh) and the memory budget per
/// device. False with one line in `error` when the model or the flags are
/// bad (the error the compilation itself would give).
bool searchFacts(const std::string &source, const std::string &label,
                 const CompileOptions &options, search::ModelFacts &facts,
                 cost::HardwareProfile &hw, uint64_t &budget,
                 std::string &error);

/// --auto (no --strategy): chooses the plan (lib/Driver/AutoPlan.cpp).
/// Fills `chosen` with the options of the best plan (as if its strategy
/// had been given) and its `plannerRecord`, and its compiled `artifact`
/// and `report`; false with `error` when no plan can run (the smallest
/// shortfall named).
bool searchPlan(const std::string &source, const CompileOptions &options,
                CompileOptions &chosen, nlohmann::json &artifact,
                nlohmann::json &report, std::string &error);

/// The stages --emit-mlir accepts.
const std::vector<std::string> &emitStages();

} // namespace dtc

#endif // DTC_DRIVER_COMPILE_H
