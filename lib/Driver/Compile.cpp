//===- Compile.cpp - dtc compile: model.mlir -> artifact -----------------===//
#include "dtc/Driver/Compile.h"
#include "InputFiles.h"
#include "PlanRecords.h"
#include "Report.h"
#include "dtc/CostModel/CostModel.h"
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Driver/Pipeline.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Planner/Evaluate.h"
#include "dtc/Planner/ModelStructure.h"
#include "dtc/Target/Artifact.h"
#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/artifact/MemoryPlan.h"
#include "dtc/artifact/Schedule.h"
#include "dtc/kernels/CpuKernels.h"

#include "dtc/runtime/Suggest.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <functional>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

using namespace mlir;
using json = nlohmann::json;
using ::dtc::driver::emitOptions;
using ::dtc::driver::kMaxHardwareFileBytes;
using ::dtc::driver::kMaxModelBytes;
using ::dtc::driver::kMaxNesting;
using ::dtc::driver::modelStructureJson;
using ::dtc::driver::readInputFile;
using ::dtc::driver::strategyOptions;
using ::dtc::driver::tooDeeplyNested;

namespace {

/// file:line:col of the innermost file location in `loc` (just the file
/// for a location without a line, e.g. the module's own).
std::string locationString(Location loc, const std::string &fallback) {
  if (auto file = loc->findInstanceOf<FileLineColLoc>()) {
    if (file.getLine() == 0)
      return file.getFilename().str();
    return (file.getFilename().str() + ":" + std::to_string(file.getLine()) +
            ":" + std::to_string(file.getColumn()));
  }
  return fallback;
}

/// Where a compilation's errors go: stderr, or the first one into a string
/// (in-memory compiles). Only the first error is reported, as one line
/// (spec/cli.md); later ones are usually its consequences. While alive it
/// also receives the MLIR context's diagnostics.
class Errors {
public:
  Errors(MLIRContext &ctx, std::string file, std::string *capture = nullptr)
      : file(std::move(file)), capture(capture),
        handler(&ctx, [this, &ctx](Diagnostic &diag) {
          if (diag.getSeverity() == DiagnosticSeverity::Error) {
            std::string message =
                ::dtc::driver::withOpSuggestion(ctx, diag.str());
            for (const Diagnostic &note : diag.getNotes())
              // The IR dump MLIR attaches adds nothing for a model author.
              if (!StringRef(note.str()).starts_with("see current operation"))
                message += " (" + note.str() + ")";
            emit(locationString(diag.getLocation(), this->file) +
                 ": error: " + message);
          } else if (diag.getSeverity() == DiagnosticSeverity::Warning) {
            if (warningsAreErrors)
              emit(locationString(diag.getLocation(), this->file) +
                   ": error: " + diag.str() + " (--Werror)");
            else if (!this->capture)
              llvm::errs() << locationString(diag.getLocation(), this->file)
                           << ": warning: " << diag.str() << "\n";
          }
          return success();
        }) {}

  /// A problem with a flag or a file as a whole.
  void flag(const std::string &message) { emit("dtc: error: " + message); }
  /// A problem at `where` ("FILE:LINE:COL") in the model.
  void source(const std::string &where, const std::string &message) {
    emit(where + ": error: " + message);
  }
  bool reported() const { return done; }
  /// Errors go into a string: an in-memory compile (the search's).
  bool capturing() const { return capture != nullptr; }
  /// --Werror: a warning is reported as the error, and the stage that
  /// raised it fails.
  bool warningsAreErrors = false;

private:
  void emit(std::string line) {
    if (done)
      return;
    done = true;
    // One line whatever the message quotes: MLIR prints a malformed
    // attribute's text as written, line breaks included.
    std::replace_if(
        line.begin(), line.end(), [](char c) { return c == '\n' || c == '\r'; },
        ' ');
    if (capture)
      *capture = line;
    else
      llvm::errs() << line << "\n";
  }

  std::string file;
  std::string *capture;
  bool done = false;
  ScopedDiagnosticHandler handler;
};

/// Checks flag combinations this build can honour; one message per problem.
bool checkSupported(const ::dtc::CompileOptions &o, int64_t devices,
                    Errors &errors) {
  if (!o.autoPlan) {
    int64_t product = o.dp * o.tp * o.pp * o.sp * o.ep;
    if (product != devices) {
      errors.flag("--strategy dp=" + std::to_string(o.dp) + ",tp=" +
                  std::to_string(o.tp) + ",pp=" + std::to_string(o.pp) +
                  (o.sp > 1 ? ",sp=" + std::to_string(o.sp) : "") +
                  (o.ep > 1 ? ",ep=" + std::to_string(o.ep) : "") + " uses " +
                  std::to_string(product) + " devices but the mesh has " +
                  std::to_string(devices));
      return false;
    }
    if (o.sp > 1 && o.sequenceParallel) {
      errors.flag("--strategy sp=" + std::to_string(o.sp) +
                  " with --sequence-parallel: ring attention and Megatron's "
                  "sequence parallelism inside tp do not combine yet");
      return false;
    }
    if (o.sequenceParallel && o.tp < 2) {
      errors.flag("--sequence-parallel splits the sequence over the "
                  "tensor-parallel devices; it needs --strategy tp=T with "
                  "T > 1");
      return false;
    }
    if (o.zero < 0 || o.zero > 3) {
      errors.flag("--strategy zero=" + std::to_string(o.zero) +
                  ": expected 0, 1, 2 or 3");
      return false;
    }
  }
  if (o.sequenceParallel && o.autoPlan && !o.search) {
    errors.flag("--sequence-parallel needs tensor parallelism: pin it with "
                "--strategy tp=T");
    return false;
  }
  if (o.virtualStages > 1 && o.schedule != "interleaved") {
    errors.flag("--virtual-stages " + std::to_string(o.virtualStages) +
                " needs --schedule interleaved");
    return false;
  }
  if (o.virtualStages > 1 && !o.search && (o.autoPlan || o.pp < 2)) {
    errors.flag("--virtual-stages " + std::to_string(o.virtualStages) +
                " interleaves model chunks over pipeline stages; it needs "
                "--strategy pp=P "
                "with P > 1");
    return false;
  }
  return true;
}

} // namespace

const std::vector<std::string> & ::dtc::emitStages() {
  static const std::vector<std::string> stages = {
      "parsed", "training-step", "planned", "split", "partitioned"};
  return stages;
}

namespace {

/// Wall and CPU time per stage, printed with --timing
/// (bench/compile_scaling_bench.py reads them to show where compile time goes;
/// the CPU time is the compiler's own work, whatever else the machine runs).
class StageTimer {
public:
  explicit StageTimer(bool enabled) : enabled(enabled) {}
  void done(StringRef stage) {
    auto now = std::chrono::steady_clock::now();
    std::clock_t cpu = std::clock();
    if (enabled)
      llvm::errs() << "dtc: time: " << stage << " "
                   << llvm::format(
                          "%.3f",
                          std::chrono::duration<double>(now - last).count())
                   << " s (cpu "
                   << llvm::format("%.3f",
                                   double(cpu - lastCpu) / CLOCKS_PER_SEC)
                   << " s)\n";
    last = now;
    lastCpu = cpu;
  }

private:
  bool enabled;
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  std::clock_t lastCpu = std::clock();
};

/// The memory budget of one device and where it comes from (for messages).
std::pair<uint64_t, std::string>
deviceBudget(const ::dtc::CompileOptions &o,
             const ::dtc::cost::HardwareProfile &hw, int64_t devices) {
  if (o.deviceMemory)
    return {*o.deviceMemory, "--device-memory"};
  if (o.hw == "cpu") {
    uint64_t ram = ::dtc::rt::physicalMemoryBytes();
    return {ram / uint64_t(devices),
            "this machine's " + ::dtc::rt::formatBytes(ram) + " of RAM / " +
                std::to_string(devices) + " device" +
                (devices == 1 ? "" : "s")};
  }
  return {uint64_t(hw.memoryBytes), "--hw " + hw.name};
}

/// The advice of a memory refusal. The search's own compiles get the short
/// one: the plans that fit cost a second model analysis, and the search
/// says what fits itself.
std::string memoryAdvice(const Errors &errors, const std::string &source,
                         const ::dtc::CompileOptions &o) {
  return errors.capturing() ? std::string("; use a larger mesh, or "
                                          "--device-memory SIZE for the "
                                          "devices it will run on")
                            : ::dtc::fittingPlansAdvice(source, o);
}

/// Validates the artifact as the runtime will, computes each rank's peak
/// memory (what the runtime will allocate, MemoryPlan.h), refuses a plan
/// that exceeds the device budget and records budget and peak.
bool checkMemory(const ::dtc::CompileOptions &o,
                 const ::dtc::cost::HardwareProfile &hw, int64_t devices,
                 json &artifact, Errors &errors,
                 const std::function<std::string()> &advice) {
  namespace rt = ::dtc::rt;
  std::vector<rt::MemoryNeed> needs;
  std::string error;
  int threads = 0;
  if (!mlir::dtc::planMemory(artifact, o.input, devices, needs, threads,
                             error)) {
    errors.flag("internal error: the emitted artifact does not validate: " +
                error);
    return false;
  }
  const rt::MemoryNeed *largest = &needs.front();
  for (const rt::MemoryNeed &need : needs)
    if (need.peak > largest->peak)
      largest = &need;
  auto [budget, source] = deviceBudget(o, hw, devices);
  artifact["memory"] = mlir::dtc::memoryRecord(needs, budget, threads);
  if (budget == 0 || largest->peak <= budget)
    return true;
  errors.flag("the plan needs " + rt::formatBytes(largest->peak) +
              " per device (" + rt::largestKinds(*largest, 3) +
              "), more than the budget of " + rt::formatBytes(budget) +
              " per device (" + source + ")" + advice());
  return false;
}

/// --hw: a built-in profile or a JSON file, fitted to the mesh.
bool loadHardwareProfile(const ::dtc::CompileOptions &o, Errors &errors,
                         std::optional<::dtc::cost::HardwareProfile> &hw) {
  std::string hwError;
  if (o.hw != "cpu" && o.hw != "a100" && o.hw != "h100" &&
      llvm::sys::fs::exists(o.hw) &&
      !readInputFile(o.hw, kMaxHardwareFileBytes, "a hardware profile",
                     hwError)) {
    errors.flag("--hw " + o.hw + ": " + hwError);
    return false;
  }
  // --hw cpu: this machine as `dtc calibrate` measured it, when it has.
  const std::string calibration = ::dtc::cost::cpuCalibrationPath();
  if (o.hw == "cpu" && llvm::sys::fs::exists(calibration)) {
    hw = ::dtc::cost::loadCpuCalibration(calibration, o.devices(), hwError);
    if (!hw) {
      errors.flag("--hw cpu: the calibration " + calibration + " " + hwError +
                  "; run dtc calibrate again, or remove it");
      return false;
    }
  } else {
    hw = ::dtc::cost::loadHardware(o.hw, hwError);
    if (!hw) {
      errors.flag("--hw: " + hwError);
      return false;
    }
    if (o.hw == "cpu")
      hw->source = "builtin cpu defaults, not this machine's: no calibration "
                   "at " +
                   calibration + " (dtc calibrate measures it)";
  }
  if (std::string problem = hw->forMesh(o.mesh); !problem.empty()) {
    errors.flag("--hw: " + problem);
    return false;
  }

  return true;
}

/// The training step's options (dtc-build-training-step), checked.
bool trainingStepOptions(const ::dtc::CompileOptions &o, double weightDecay,
                         Errors &errors,
                         mlir::dtc::BuildTrainingStepOptions &stepOptions) {
  stepOptions.optimizer = o.optimizer;
  stepOptions.lr = o.lr;
  stepOptions.lrSchedule = o.lrSchedule;
  stepOptions.warmupSteps = o.warmupSteps;
  stepOptions.decaySteps = o.decaySteps;
  stepOptions.minLr = o.minLr;
  stepOptions.weightDecay = weightDecay;
  stepOptions.beta1 = o.beta1;
  stepOptions.beta2 = o.beta2;
  stepOptions.eps = o.eps;
  stepOptions.gradClip = o.gradClip;
  stepOptions.precision = o.precision;
  stepOptions.lossScale = o.lossScale;
  stepOptions.lossScaleWindow = o.lossScaleWindow;
  std::string option, problem;
  if (!mlir::dtc::checkTrainingStepOptions(stepOptions, option, problem)) {
    errors.flag("--" + option + ": " + problem);
    return false;
  }
  return true;
}

/// The pipeline schedule: every stage's order of forwards and backwards
/// (left null when the step is not pipelined). `plan`, once its
/// recomputation is settled, bounds the weight gradients zb defers.
bool pipelineSchedule(const ::dtc::CompileOptions &o, int64_t stages,
                      int64_t microbatches, const mlir::dtc::Plan *plan,
                      Errors &errors, json &pipeline) {
  if (stages <= 1 && microbatches <= 1)
    return true;
  std::vector<int> pendingWeights;
  if (plan && plan->schedule == "zb")
    for (int64_t stage = 0; stage < stages; ++stage)
      pendingWeights.push_back(int(plan->pendingWeightGradients(stage)));
  ::dtc::sched::Schedule schedule;
  std::string problem;
  if (!::dtc::sched::generate(o.schedule, int(stages), int(microbatches),
                              int(o.virtualStages), schedule, problem,
                              pendingWeights)) {
    errors.flag("--schedule " + o.schedule + ": " + problem);
    return false;
  }
  ::dtc::sched::Simulation simulation = ::dtc::sched::simulate(schedule);
  if (!simulation.ok) {
    errors.flag("--schedule " + o.schedule +
                ": internal error: " + simulation.error);
    return false;
  }
  json perStage = json::array();
  for (const auto &actions : schedule.perStage)
    perStage.push_back(::dtc::sched::actionsToJson(actions));
  pipeline = {{"schedule", o.schedule},
              {"stages", stages},
              {"virtual_stages", o.virtualStages},
              {"microbatches", microbatches},
              {"per_stage", perStage}};
  return true;
}

/// Parses the model text, refusing what would overflow MLIR's parser.
bool parseModel(std::unique_ptr<llvm::MemoryBuffer> buffer,
                const ::dtc::CompileOptions &o, MLIRContext &ctx,
                Errors &errors, OwningOpRef<ModuleOp> &module) {
  // MLIR's parser recurses once per nesting level; a pathological file
  // would overflow the stack instead of failing cleanly.
  if (std::string where = tooDeeplyNested(buffer->getBuffer());
      !where.empty()) {
    errors.source(o.input + ":" + where, "nesting deeper than " +
                                             std::to_string(kMaxNesting) +
                                             " levels; no model needs that");
    return false;
  }
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  module = parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(&ctx));
  if (!module) {
    if (!errors.reported())
      errors.flag(o.input + ": not a valid MLIR module");
    return false;
  }
  return true;
}

} // namespace

//===----------------------------------------------------------------------===//
// The pipeline, part by part (include/dtc/Driver/Pipeline.h)
//===----------------------------------------------------------------------===//

void mlir::dtc::populateTrainingPipeline(
    PassManager &pm, const BuildTrainingStepOptions &stepOptions) {
  pm.addPass(createDecomposeComposites());
  pm.addPass(createDecomposeIgnoredLabels());
  pm.addPass(createBuildTrainingStep(stepOptions));
  pm.addPass(createAssignLayers());
  pm.addPass(createMergeDuplicateBackwardOps());
}

void mlir::dtc::populatePlanningPipeline(
    PassManager &pm, ArrayRef<std::string> pins,
    const ApplyStrategyOptions &strategy,
    const ::dtc::cost::HardwareProfile &hardware, double deviceMemory,
    bool leastMemory) {
  if (!pins.empty()) {
    PinShardingOptions pinOptions;
    pinOptions.pins.assign(pins.begin(), pins.end());
    pm.addPass(createPinSharding(pinOptions));
  }
  pm.addPass(createApplyStrategy(strategy));
  MaterializePlanOptions materialize;
  materialize.deviceMemory = deviceMemory;
  materialize.leastMemoryWhenNothingFits = leastMemory;
  pm.addPass(createMaterializePlan(materialize, hardware));
}

void mlir::dtc::populateStageSplitPipeline(PassManager &pm) {
  pm.addPass(createRematerialize());
  pm.addPass(createBalanceStages());
  pm.addPass(createSplitPipeline());
}

void mlir::dtc::populatePartitioningPipeline(PassManager &pm,
                                             bool fuseEpilogues,
                                             int64_t bucketBytes,
                                             bool keepAttentionStats) {
  pm.addPass(createPartition());
  ScheduleCollectivesOptions schedule;
  schedule.bucketBytes = bucketBytes;
  pm.addPass(createScheduleCollectives(schedule));
  // Last: on local shapes, with the collectives placed.
  if (keepAttentionStats)
    pm.addPass(createKeepAttentionStats());
  pm.addPass(createFoldTransposes());
  if (fuseEpilogues)
    pm.addPass(createFuseMatmulEpilogues());
}

namespace {

/// What every compilation checks and reads first: the flags, the hardware
/// profile, the training step's options and the parsed model.
bool prepareModel(std::unique_ptr<llvm::MemoryBuffer> buffer,
                  const ::dtc::CompileOptions &o, MLIRContext &ctx,
                  Errors &errors, OwningOpRef<ModuleOp> &module,
                  std::optional<::dtc::cost::HardwareProfile> &hw,
                  int64_t &devices, double &weightDecay,
                  mlir::dtc::BuildTrainingStepOptions &stepOptions) {
  devices = o.devices();
  weightDecay = o.weightDecay.value_or(o.optimizer == "adamw" ? 0.01 : 0.0);
  return checkSupported(o, devices, errors) &&
         loadHardwareProfile(o, errors, hw) &&
         trainingStepOptions(o, weightDecay, errors, stepOptions) &&
         parseModel(std::move(buffer), o, ctx, errors, module);
}

/// Runs the passes `fill` adds on `target` as compile stage `stage`: timed,
/// errors (and warnings under --Werror) stop it, and `print` prints the
/// module after it when --emit-mlir-after names it.
bool runPasses(MLIRContext &ctx, const ::dtc::CompileOptions &o, Errors &errors,
               StageTimer &timer, ModuleOp target, bool print,
               const std::string &stage,
               llvm::function_ref<void(PassManager &)> fill) {
  PassManager pm(&ctx);
  fill(pm);
  if (failed(pm.run(target))) {
    if (!errors.reported())
      errors.flag("compilation failed during " + stage);
    return false;
  }
  if (errors.reported()) // a warning under --Werror
    return false;
  timer.done(stage == "parsed" ? "check-model" : stage);
  if (print && o.emitMlirAfter == stage) {
    OpPrintingFlags flags;
    // Generic form: what tools outside dtc (e.g. the float64 reference of
    // the tests) can parse without knowing any custom syntax.
    if (o.emitGeneric)
      flags.printGenericOpForm();
    target.print(llvm::outs(), flags);
  }
  return true;
}

/// Everything from model text to artifact body; errors go to `errors`
/// (IR or flags). `module` keeps the partitioned IR for reports.
/// How lower() in compileBuffer lowers a planned module with one
/// recomputation mode (or one per stage, on `cuts`) into an artifact.
using LowerFn =
    llvm::function_ref<bool(ModuleOp, const std::vector<std::string> &,
                            ArrayRef<int64_t>, bool, const json &, json &)>;

/// --remat auto: per pipeline stage, the least recomputation with which
/// the stage fits the device's memory (`budget`, against the peak the
/// runtime will allocate): none, else selective, else full.
bool chooseRematAuto(const ::dtc::CompileOptions &o, double budget,
                     ModuleOp module, Errors &errors, LowerFn lower,
                     int64_t devices, std::vector<std::string> &remat,
                     SmallVector<int64_t> &cuts, json &rematChoice) {
  const int64_t stages = mlir::dtc::getPlan(module)->pp;
  bool haveCuts = false;
  auto peaksOf =
      [&](const std::vector<std::string> &candidate) -> std::vector<int64_t> {
    OwningOpRef<ModuleOp> probe(cast<ModuleOp>(module->clone()));
    json probeArtifact;
    // Modes that differ by stage need the stages' layers: those the
    // balancer picks for the plan without recomputation.
    if (!lower(*probe, candidate, cuts, /*print=*/false, json(), probeArtifact))
      return {};
    if (!haveCuts) {
      std::optional<mlir::dtc::Plan> balanced = mlir::dtc::getPlan(*probe);
      cuts.assign(balanced->stageCuts.begin(), balanced->stageCuts.end());
      haveCuts = true;
    }
    std::vector<int64_t> peaks =
        mlir::dtc::plannedPeakPerStage(probeArtifact, o.input, devices, stages);
    if (peaks.empty())
      errors.flag("internal error: the artifact of --remat auto's "
                  "candidate does not validate");
    return peaks;
  };
  return mlir::dtc::chooseRecomputation(budget, stages, peaksOf, remat,
                                        rematChoice);
}

/// The largest rank's planned peak (0 when the artifact does not validate:
/// the memory check reports that).
int64_t largestPlannedPeak(const json &artifact, const std::string &label,
                           int64_t devices) {
  std::vector<::dtc::rt::MemoryNeed> needs;
  std::string error;
  int threads = 0;
  if (!mlir::dtc::planMemory(artifact, label, devices, needs, threads, error))
    return 0;
  int64_t peak = 0;
  for (const ::dtc::rt::MemoryNeed &need : needs)
    peak = std::max(peak, int64_t(need.peak));
  return peak;
}

bool compileBuffer(std::unique_ptr<llvm::MemoryBuffer> buffer,
                   const ::dtc::CompileOptions &given, MLIRContext &ctx,
                   Errors &errors, OwningOpRef<ModuleOp> &module,
                   json &artifact,
                   std::optional<::dtc::cost::HardwareProfile> &hw,
                   StageTimer &timer) {
  int64_t devices = 0;
  double weightDecay = 0;
  mlir::dtc::BuildTrainingStepOptions stepOptions;
  const std::string source = buffer->getBuffer().str(); // for the advice
  if (!prepareModel(std::move(buffer), given, ctx, errors, module, hw, devices,
                    weightDecay, stepOptions))
    return false;
  timer.done("parse+verify");
  const ::dtc::CompileOptions o =
      ::dtc::driver::withSequenceLayout(given, *module);

  auto runStageOn = [&](ModuleOp target, bool print, const std::string &stage,
                        llvm::function_ref<void(PassManager &)> fill) {
    return runPasses(ctx, o, errors, timer, target, print, stage, fill);
  };
  auto runStage = [&](const std::string &stage,
                      llvm::function_ref<void(PassManager &)> fill) -> bool {
    return runStageOn(*module, /*print=*/true, stage, fill);
  };

  const mlir::dtc::ApplyStrategyOptions planOptions = strategyOptions(o);
  const int64_t microbatches = planOptions.microbatches;
  const bool pipelined = planOptions.pp > 1 || microbatches > 1;
  json checkedSchedule;
  // Checked here, before lowering; generated again per recomputation below.
  if (!pipelineSchedule(o, planOptions.pp, microbatches, /*plan=*/nullptr,
                        errors, checkedSchedule))
    return false;

  if (!runStage(
          "parsed",
          [](PassManager &pm) { pm.addPass(mlir::dtc::createCheckModel()); }) ||
      !runStage("training-step", [&](PassManager &pm) {
        mlir::dtc::populateTrainingPipeline(pm, stepOptions);
      }))
    return false;
  // --tp-layout ilp: the layout program's memory is an estimate; a plan
  // the memory check would refuse is planned again from the training step
  // with the program's budget lowered by the overshoot.
  const double budget = double(deviceBudget(o, *hw, devices).first);
  double layoutBudget = budget;
  OwningOpRef<ModuleOp> unplanned;
  if (planOptions.tp > 1 && o.tpLayout == "ilp" && budget > 0)
    unplanned = cast<ModuleOp>((*module)->clone());
  auto planStep = [&] {
    return runStage("planned", [&](PassManager &pm) {
      mlir::dtc::populatePlanningPipeline(pm, o.pins, planOptions, *hw,
                                          layoutBudget, layoutBudget < budget);
    });
  };
  if (!planStep())
    return false;
  const json structure = modelStructureJson(*module);
  // Before partitioning: the report's MFU divides them by the devices.
  const int64_t stepModelFlops = mlir::dtc::modelFlopsPerStep(*module);
  // Activation checkpointing, then the stage split, partitioning and
  // emission of `target`; `print` for the module the artifact comes from.
  // `remat`: one mode, or one per pipeline stage (then on `cuts`).
  auto lower = [&](ModuleOp target, const std::vector<std::string> &remat,
                   ArrayRef<int64_t> cuts, bool print, const json &rematChoice,
                   json &out) -> bool {
    std::optional<mlir::dtc::Plan> plan = mlir::dtc::getPlan(target);
    plan->recompute.clear();
    for (const std::string &mode : remat)
      plan->recompute.push_back(*mlir::dtc::symbolizeRecompute(mode));
    mlir::dtc::canonicalizeRecompute(plan->recompute);
    if (plan->recompute.size() > 1)
      plan->stageCuts.assign(cuts.begin(), cuts.end());
    mlir::dtc::setPlan(target, *plan);
    const std::string rematName =
        plan->recompute.size() > 1 ? llvm::join(remat, ",") : remat.front();
    if (!runStageOn(target, print, "split",
                    [&](PassManager &pm) {
                      mlir::dtc::populateStageSplitPipeline(pm);
                    }) ||
        !runStageOn(target, print, "partitioned", [&](PassManager &pm) {
          mlir::dtc::populatePartitioningPipeline(pm, o.fuseEpilogues,
                                                  o.bucketMiB << 20,
                                                  o.attentionStats == "keep");
        }))
      return false;
    mlir::dtc::ArtifactOptions artifactOptions =
        emitOptions(o, weightDecay, pipelined, rematName, hw->name);
    if (!rematChoice.is_null())
      artifactOptions.planExtras["remat_choice"] = rematChoice;
    if (!structure.is_null())
      artifactOptions.planExtras["model_structure"] = structure;
    if (stepModelFlops > 0)
      artifactOptions.planExtras["model_flops_per_step"] = stepModelFlops;
    if (!pipelineSchedule(o, planOptions.pp, microbatches, &*plan, errors,
                          artifactOptions.pipeline))
      return false;
    FailureOr<json> body = mlir::dtc::buildArtifact(target, artifactOptions);
    if (failed(body)) {
      if (!errors.reported())
        errors.flag("cannot emit the artifact");
      return false;
    }
    out = std::move(*body);
    return true;
  };

  for (int round = 0;; ++round) {
    std::vector<std::string> remat = {o.remat};
    SmallVector<int64_t> cuts;
    json rematChoice;
    if (o.remat == "auto" &&
        !chooseRematAuto(o, budget, *module, errors, lower, devices, remat,
                         cuts, rematChoice))
      return false;
    if (!lower(*module, remat, cuts, /*print=*/true, rematChoice, artifact))
      return false;
    if (!unplanned)
      break;
    artifact["plan"]["tp_layout_rounds"] = round + 1;
    const int64_t peak = largestPlannedPeak(artifact, o.input, devices);
    if (round == 3 || peak <= int64_t(budget))
      break;
    // The estimate is off by a factor: scale its budget by the overshoot.
    layoutBudget *= 0.95 * budget / double(peak);
    module = OwningOpRef<ModuleOp>(cast<ModuleOp>((*unplanned)->clone()));
    if (!planStep())
      return false;
  }
  timer.done("emit");
  if (!checkMemory(o, *hw, devices, artifact, errors,
                   [&] { return memoryAdvice(errors, source, o); }))
    return false;
  timer.done("check-memory");
  return true;
}
DialectRegistry dtcRegistry() {
  DialectRegistry registry;
  registry.insert<mlir::dtc::DtcDialect, func::FuncDialect, arith::ArithDialect,
                  shard::ShardDialect>();
  return registry;
}

/// compileToArtifact and compileToReport: the whole compilation in a
/// context of its own, silently (the first error in `error`); the report
/// only when asked for, also for a plan the memory check refused.
bool compileSource(const std::string &source, const std::string &label,
                   const ::dtc::CompileOptions &options, json &artifact,
                   json *report, std::string &error) {
  error.clear();
  ::dtc::CompileOptions o = options;
  o.input = label;
  o.emitMlirAfter.clear();
  MLIRContext ctx(dtcRegistry());
  ctx.loadAllAvailableDialects();
  ctx.disableMultithreading();
  Errors errors(ctx, label, &error);
  OwningOpRef<ModuleOp> module;
  std::optional<::dtc::cost::HardwareProfile> hw;
  StageTimer timer(false);
  bool ok = compileBuffer(llvm::MemoryBuffer::getMemBufferCopy(source, label),
                          o, ctx, errors, module, artifact, hw, timer);
  if (report && module && hw && artifact.contains("memory"))
    *report = mlir::dtc::buildReport(*module, artifact, o, *hw, 0.0);
  if (!ok && error.empty())
    error = label + ": compilation failed";
  return ok;
}

/// Parses the model and runs dtc-check-model on it, reporting through
/// `errors` (the search's own compiles capture their diagnostics).
bool checkModelOnce(const llvm::MemoryBuffer &buffer,
                    const ::dtc::CompileOptions &o, MLIRContext &ctx,
                    Errors &errors) {
  std::optional<::dtc::cost::HardwareProfile> hw;
  mlir::dtc::BuildTrainingStepOptions stepOptions;
  OwningOpRef<ModuleOp> module;
  int64_t devices = 0;
  double weightDecay = 0;
  if (!prepareModel(llvm::MemoryBuffer::getMemBufferCopy(
                        buffer.getBuffer(), buffer.getBufferIdentifier()),
                    o, ctx, errors, module, hw, devices, weightDecay,
                    stepOptions))
    return false;
  PassManager pm(&ctx);
  pm.addPass(mlir::dtc::createCheckModel());
  if (failed(pm.run(*module))) {
    if (!errors.reported())
      errors.flag("compilation failed during the model check");
    return false;
  }
  return !errors.reported();
}

} // namespace

int ::dtc::runCompile(const CompileOptions &o) {
  auto start = std::chrono::steady_clock::now();
  MLIRContext ctx(dtcRegistry());
  ctx.loadAllAvailableDialects();
  ctx.disableMultithreading();
  Errors errors(ctx, o.input);
  errors.warningsAreErrors = o.warningsAreErrors;
  StageTimer timer(o.timing);
  std::string readError;
  std::unique_ptr<llvm::MemoryBuffer> buffer =
      readInputFile(o.input, kMaxModelBytes, "a model", readError);
  if (!buffer) {
    errors.flag("cannot read model " + o.input + ": " + readError);
    return 1;
  }
  timer.done("read");
  OwningOpRef<ModuleOp> module;
  json artifact;
  std::optional<cost::HardwareProfile> hw;
  // --auto: the search chooses the plan, which then compiles as if its
  // strategy had been given. The search compiled it already, so its
  // artifact and report are written unless the IR is asked for.
  const bool searching = o.search;
  ::dtc::CompileOptions searched;
  json searchedReport;
  json report;
  auto writeReport = [&]() -> bool {
    if (o.report.empty() && !o.summary)
      return true;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (module) {
      report = mlir::dtc::buildReport(*module, artifact,
                                      searching ? searched : o, *hw, seconds);
    } else {
      report = std::move(searchedReport);
      report["compile_time_s"] = seconds;
    }
    if (o.report.empty())
      return true;
    std::string reportError;
    if (o.report == "-") { // standard output
      llvm::outs() << report.dump(2) << "\n";
      llvm::outs().flush();
    } else if (!rt::writeOutputFile(o.report, report.dump(2) + "\n",
                                    reportError)) {
      errors.flag("cannot write report " + o.report + ": " + reportError);
      return false;
    }
    timer.done("report");
    return true;
  };
  // The search compiles its candidates quietly: the model's warnings (and,
  // with --Werror, the refusal) come from checking the model once here.
  if (searching && o.emitMlirAfter.empty() &&
      !checkModelOnce(*buffer, o, ctx, errors))
    return 1;
  if (searching) {
    std::string searchError;
    if (!::dtc::searchPlan(std::string(buffer->getBuffer()), o, searched,
                           artifact, searchedReport, searchError)) {
      // A compiler error ("FILE:LINE:COL: error: ...") as it is.
      if (searchError.find(": error: ") != std::string::npos)
        llvm::errs() << searchError << "\n";
      else
        errors.flag(searchError);
      return 1;
    }
    timer.done("search");
  }
  if (!searching || !o.emitMlirAfter.empty()) {
    if (!compileBuffer(std::move(buffer), searching ? searched : o, ctx, errors,
                       module, artifact, hw, timer)) {
      // A plan the memory check refused (its memory record exists only
      // then): the report still shows it, so it can be fixed.
      if (module && hw && artifact.contains("memory"))
        writeReport();
      return 1;
    }
  }

  std::string writeError;
  if (!rt::writeArtifactFile(o.output, artifact, writeError)) {
    errors.flag(writeError);
    return 1;
  }
  timer.done("write");
  if (!writeReport())
    return 1;
  if (o.summary)
    llvm::errs() << ::dtc::planSummary(report, o.input, o.output);
  return 0;
}

bool ::dtc::compileToReport(const std::string &source, const std::string &label,
                            const CompileOptions &options, json &artifact,
                            json &report, std::string &error) {
  return compileSource(source, label, options, artifact, &report, error);
}

bool ::dtc::searchFacts(const std::string &source, const std::string &label,
                        const CompileOptions &o, search::ModelFacts &facts,
                        cost::HardwareProfile &hw, uint64_t &budget,
                        std::string &error) {
  MLIRContext ctx(dtcRegistry());
  ctx.loadAllAvailableDialects();
  ctx.disableMultithreading();
  Errors errors(ctx, label, &error);
  std::optional<cost::HardwareProfile> profile;
  mlir::dtc::BuildTrainingStepOptions stepOptions;
  OwningOpRef<ModuleOp> module;
  int64_t devices = 0;
  double weightDecay = 0;
  if (!prepareModel(llvm::MemoryBuffer::getMemBufferCopy(source, label), o, ctx,
                    errors, module, profile, devices, weightDecay, stepOptions))
    return false;
  PassManager pm(&ctx);
  pm.addPass(mlir::dtc::createCheckModel());
  mlir::dtc::populateTrainingPipeline(pm, stepOptions);
  if (failed(pm.run(*module))) {
    if (!errors.reported())
      errors.flag("compilation failed during training-step");
    return false;
  }
  facts = mlir::dtc::modelFacts(*module);
  hw = *profile;
  budget = deviceBudget(o, hw, devices).first;
  return true;
}

bool ::dtc::compileToArtifact(const std::string &source,
                              const std::string &label,
                              const CompileOptions &options,
                              nlohmann::json &artifact, std::string &error) {
  return compileSource(source, label, options, artifact, nullptr, error);
}
