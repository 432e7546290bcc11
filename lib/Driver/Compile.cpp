//===- Compile.cpp - dtc compile: model.mlir -> artifact -----------------===//
#include "dtc/Driver/Compile.h"
#include "dtc/CostModel/CostModel.h"
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Target/Artifact.h"
#include "dtc/runtime/ArtifactFormat.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"
#include <algorithm>
#include <chrono>

using namespace mlir;
using json = nlohmann::json;

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
        handler(&ctx, [this](Diagnostic &diag) {
          if (diag.getSeverity() == DiagnosticSeverity::Error) {
            std::string message = diag.str();
            for (const Diagnostic &note : diag.getNotes())
              // The IR dump MLIR attaches adds nothing for a model author.
              if (!StringRef(note.str()).starts_with("see current operation"))
                message += " (" + note.str() + ")";
            emit(locationString(diag.getLocation(), this->file) + ": error: " + message);
          } else if (diag.getSeverity() == DiagnosticSeverity::Warning && !this->capture) {
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

private:
  void emit(const std::string &line) {
    if (done)
      return;
    done = true;
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
bool checkSupported(const ::dtc::CompileOptions &o, int64_t devices, Errors &errors) {
  auto notYet = [&](const std::string &what) {
    errors.flag(what + " is not implemented yet; this build plans data and "
                     "tensor parallelism (--strategy dp=D,tp=T or --auto)");
    return false;
  };
  if (!o.autoPlan) {
    int64_t product = o.dp * o.tp * o.pp;
    if (product != devices) {
      errors.flag("--strategy dp=" + std::to_string(o.dp) + ",tp=" +
                std::to_string(o.tp) + ",pp=" + std::to_string(o.pp) + " uses " +
                std::to_string(product) + " devices but the mesh has " +
                std::to_string(devices));
      return false;
    }
    if (o.pp != 1)
      return notYet("--strategy pp=" + std::to_string(o.pp) + ": pipeline parallelism");
    if (o.sp != 1)
      return notYet("--strategy sp=" + std::to_string(o.sp) + ": sequence parallelism");
    if (o.ep != 1)
      return notYet("--strategy ep=" + std::to_string(o.ep) + ": expert parallelism");
    if (o.zero < 0 || o.zero > 3) {
      errors.flag("--strategy zero=" + std::to_string(o.zero) + ": expected 0, 1, 2 or 3");
      return false;
    }
  }
  if (o.remat == "full")
    return notYet("--remat full: activation checkpointing");
  if (o.gradAccum != 1)
    return notYet("--grad-accum " + std::to_string(o.gradAccum) + ": gradient accumulation");
  if (o.microbatches != 1)
    return notYet("--microbatches " + std::to_string(o.microbatches) +
                  ": micro-batching (it comes with pipeline parallelism)");
  return true;
}

json optimizerJson(const ::dtc::CompileOptions &o, double weightDecay) {
  json j = {{"kind", o.optimizer}, {"lr", o.lr}, {"weight_decay", weightDecay},
            {"grad_clip", o.gradClip}};
  if (o.optimizer != "sgd") {
    j["beta1"] = o.beta1;
    j["beta2"] = o.beta2;
    j["eps"] = o.eps;
  }
  return j;
}

::dtc::cost::Collective collectiveKind(const std::string &op) {
  using ::dtc::cost::Collective;
  if (op == "all_reduce")
    return Collective::AllReduce;
  if (op == "all_gather")
    return Collective::AllGather;
  if (op == "reduce_scatter")
    return Collective::ReduceScatter;
  return Collective::AllToAll;
}

/// How the plan was chosen, said plainly: `--auto` does not search yet.
json plannerJson(const ::dtc::CompileOptions &o, const json &plan) {
  if (!o.autoPlan)
    return {{"mode", "strategy"},
            {"why", "degrees pinned by --strategy; shardings by Megatron's rules and "
                    "propagation"}};
  return {{"mode", "auto"},
          {"searched", false},
          {"chose", "dp=" + std::to_string(plan.value("dp", 1))},
          {"why", "no cost-model search exists yet: --auto plans data parallelism "
                  "over every device; pin tensor parallelism with --strategy dp=D,tp=T"}};
}

/// The plan report of spec/cli.md, from the emitted program (what the
/// runtime will really allocate and send) and the cost model. Bytes are per
/// device and per step, the maximum over devices.
json buildReport(ModuleOp module, const json &artifact, const ::dtc::CompileOptions &o,
                 ::dtc::cost::HardwareProfile &hw, double compileSeconds) {
  const json &program = artifact["programs"][0];
  std::vector<int64_t> mesh = artifact["mesh"].get<std::vector<int64_t>>();
  hw.forMesh(mesh);

  int64_t params = 0;
  for (const json &t : artifact["tensors"])
    if (t["role"] == "param") {
      int64_t n = 1;
      for (int64_t d : t["shape"])
        n *= d;
      params += n;
    }

  json memory = {{"params", 0}, {"grads", 0}, {"optimizer", 0},
                 {"activations", 0}, {"total", 0}};
  for (const json &slot : program["slots"]) {
    int64_t bytes = slot["bytes"];
    std::string category = slot["category"];
    std::string key = category == "param"       ? "params"
                      : category == "grad"      ? "grads"
                      : category == "optimizer" ? "optimizer"
                      : category == "activation" ? "activations"
                                                 : "";
    if (!key.empty())
      memory[key] = memory[key].get<int64_t>() + bytes;
    memory["total"] = memory["total"].get<int64_t>() + bytes;
  }

  std::map<std::string, std::vector<int64_t>> commAxes;
  for (const json &c : artifact["communicators"])
    commAxes[c["name"]] = c["mesh_axes"].get<std::vector<int64_t>>();
  const std::vector<std::string> kinds = {"all_reduce", "all_gather", "reduce_scatter",
                                           "all_to_all"};
  // Bytes sent per step by group member, per communicator and kind: ring
  // chunks make them depend on the member when sizes do not divide.
  std::map<std::string, std::map<std::string, std::vector<int64_t>>> byMember;
  json calls = json::object();
  double commSeconds = 0;
  const json &buffers = program["buffers"];
  auto elements = [&](int id) {
    int64_t n = 1;
    for (int64_t d : buffers[id]["shape"])
      n *= d;
    return n;
  };
  auto groupSize = [&](const std::vector<int64_t> &axes) {
    int64_t n = 1;
    for (int64_t a : axes)
      n *= mesh[a];
    return n;
  };
  for (const json &inst : program["instructions"]) {
    std::string op = inst["op"];
    ::dtc::cost::Collective kind;
    if (!::dtc::cost::collectiveFromName(op, kind))
      continue; // kernels, all_slice (no traffic)
    std::string name = inst["attrs"]["comm"];
    const std::vector<int64_t> &axes = commAxes[name];
    int64_t n = groupSize(axes);
    ::dtc::cost::Link slowest{1e300, 0};
    for (int64_t a : axes)
      if (hw.axes[a].bandwidth < slowest.bandwidth)
        slowest = hw.axes[a];
    int in = inst["in"][0], out = inst["out"][0];
    const std::string dtype = buffers[in]["dtype"];
    int64_t elementBytes = dtype == "i64" ? 8 : dtype == "bf16" || dtype == "f16" ? 2 : 4;
    // What the runtime's algorithm sends (the test and the benchmark compare
    // it with the runtime's own count).
    std::vector<int64_t> &members = byMember[name][op];
    members.resize(size_t(n), 0);
    for (int64_t m = 0; m < n; ++m)
      members[size_t(m)] += ::dtc::cost::collectiveSentBytesOf(kind, n, m, elements(in),
                                                              elements(out), elementBytes);
    calls[op] = calls.value(op, 0) + 1;
    int64_t sent = ::dtc::cost::collectiveSentBytes(kind, n, elements(in), elements(out),
                                                    elementBytes);
    commSeconds += ::dtc::cost::collectiveTime(kind, n, double(sent), slowest);
  }
  // Per communicator: the busiest member; in total: the busiest device,
  // summing each communicator's share at that device's index in it.
  json comm = {{"all_reduce", 0}, {"all_gather", 0}, {"reduce_scatter", 0},
               {"all_to_all", 0}, {"send_recv", 0}};
  json commByName = json::object();
  for (auto &[name, perKind] : byMember) {
    commByName[name] = {{"mesh_axes", commAxes[name]}};
    for (const std::string &kind : kinds) {
      const std::vector<int64_t> &members = perKind[kind];
      commByName[name][kind] =
          members.empty() ? 0 : *std::max_element(members.begin(), members.end());
    }
  }
  int64_t devices = 1;
  for (int64_t size : mesh)
    devices *= size;
  for (const std::string &kind : kinds) {
    int64_t busiest = 0;
    for (int64_t device = 0; device < devices; ++device) {
      std::vector<int64_t> coords(mesh.size());
      for (size_t a = mesh.size(), rest = device; a-- > 0;) {
        coords[a] = rest % mesh[a];
        rest /= mesh[a];
      }
      int64_t total = 0;
      for (auto &[name, perKind] : byMember) {
        const std::vector<int64_t> &members = perKind[kind];
        if (members.empty())
          continue;
        int64_t index = 0;
        for (int64_t a : commAxes[name])
          index = index * mesh[a] + coords[a];
        total += members[size_t(index)];
      }
      busiest = std::max(busiest, total);
    }
    comm[kind] = busiest;
  }

  int64_t flops = 0;
  if (auto step = module.lookupSymbol<func::FuncOp>("train_step"))
    step.walk([&](mlir::dtc::CostOpInterface op) { flops += op.getFlopCount(); });
  double peak = o.precision == "f32" ? hw.peakFlopsF32 : hw.peakFlopsBf16;
  double computeSeconds = flops / peak;
  double stepSeconds = computeSeconds + commSeconds;
  const json &plan = artifact["plan"];
  return json{
      {"mesh", mesh},
      {"devices", artifact["devices"]},
      {"hw", hw.name},
      {"params", params},
      {"strategy",
       {{"dp", plan.value("dp", 1)}, {"tp", plan.value("tp", 1)},
        {"pp", plan.value("pp", 1)}, {"sp", o.sp}, {"ep", o.ep},
        {"zero", plan.value("zero", 0)}, {"microbatches", o.microbatches},
        {"schedule", plan.value("pp", 1) > 1 ? o.schedule : std::string("none")},
        {"remat", "none"}, {"precision", o.precision}, {"grad_accum", o.gradAccum}}},
      {"axes", plan.value("axes", json::object())},
      {"planner", plannerJson(o, plan)},
      {"memory_bytes", memory},
      {"bubble_fraction", ::dtc::cost::bubbleFraction(plan.value("pp", 1), o.microbatches)},
      {"comm_bytes", comm},
      {"comm_bytes_by_comm", commByName},
      {"collective_calls", calls},
      {"predicted",
       {{"step_time_s", stepSeconds},
        {"compute_time_s", computeSeconds},
        {"comm_time_s", commSeconds},
        {"flops_per_device", flops},
        {"tflops_per_device", stepSeconds > 0 ? flops / stepSeconds / 1e12 : 0.0},
        {"mfu", stepSeconds > 0 ? flops / stepSeconds / peak : 0.0}}},
      {"compile_time_s", compileSeconds}};
}

} // namespace

const std::vector<std::string> &::dtc::emitStages() {
  static const std::vector<std::string> stages = {"parsed", "training-step",
                                                  "planned", "partitioned"};
  return stages;
}

namespace {

constexpr int kMaxNesting = 256;

/// "line:col" of the first bracket nested deeper than kMaxNesting, or "".
/// Brackets inside string literals and comments do not count; `->` is not a
/// closing angle bracket.
std::string tooDeeplyNested(StringRef text) {
  int depth = 0, line = 1, col = 0;
  bool inString = false, inComment = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    ++col;
    if (c == '\n') {
      ++line;
      col = 0;
      inComment = false;
      continue;
    }
    if (inComment)
      continue;
    if (inString) {
      if (c == '\\')
        ++i, ++col;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      inComment = true;
    } else if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > kMaxNesting)
        return std::to_string(line) + ":" + std::to_string(col);
    } else if (c == ')' || c == ']' || c == '}' ||
               (c == '>' && (i == 0 || text[i - 1] != '-'))) {
      depth = std::max(depth - 1, 0);
    }
  }
  return "";
}

/// Everything from model text to artifact body; errors go to `errors`
/// (IR or flags). `module` keeps the partitioned IR for reports.
bool compileBuffer(std::unique_ptr<llvm::MemoryBuffer> buffer,
                   const ::dtc::CompileOptions &o, MLIRContext &ctx,
                   Errors &errors, OwningOpRef<ModuleOp> &module,
                   json &artifact, std::optional<::dtc::cost::HardwareProfile> &hw) {
  int64_t devices = 1;
  for (int64_t size : o.mesh)
    devices *= size;
  if (!checkSupported(o, devices, errors))
    return false;
  std::string hwError;
  hw = ::dtc::cost::loadHardware(o.hw, hwError);
  if (!hw) {
    errors.flag("--hw: " + hwError);
    return false;
  }
  if (std::string problem = hw->forMesh(o.mesh); !problem.empty()) {
    errors.flag("--hw: " + problem);
    return false;
  }

  double weightDecay = o.weightDecay.value_or(o.optimizer == "adamw" ? 0.01 : 0.0);
  mlir::dtc::BuildTrainingStepOptions stepOptions;
  stepOptions.optimizer = o.optimizer;
  stepOptions.lr = o.lr;
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

  // MLIR's parser recurses once per nesting level; a pathological file
  // would overflow the stack instead of failing cleanly.
  if (std::string where = tooDeeplyNested(buffer->getBuffer()); !where.empty()) {
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

  auto runStage = [&](const std::string &stage,
                      llvm::function_ref<void(PassManager &)> fill) -> bool {
    PassManager pm(&ctx);
    fill(pm);
    if (failed(pm.run(*module))) {
      if (!errors.reported())
        errors.flag("compilation failed during " + stage);
      return false;
    }
    if (o.emitMlirAfter == stage)
      module->print(llvm::outs());
    return true;
  };

  mlir::dtc::ApplyStrategyOptions planOptions;
  planOptions.mesh.assign(o.mesh.begin(), o.mesh.end());
  planOptions.dp = o.autoPlan ? 0 : o.dp;
  planOptions.tp = o.autoPlan ? 1 : o.tp;
  planOptions.zero = o.autoPlan ? 0 : o.zero;

  if (!runStage("parsed", [](PassManager &pm) { pm.addPass(mlir::dtc::createCheckModel()); }) ||
      !runStage("training-step", [&](PassManager &pm) {
        pm.addPass(mlir::dtc::createBuildTrainingStep(stepOptions));
      }) ||
      !runStage("planned", [&](PassManager &pm) {
        if (!o.pins.empty()) {
          mlir::dtc::PinShardingOptions pinOptions;
          pinOptions.pins.assign(o.pins.begin(), o.pins.end());
          pm.addPass(mlir::dtc::createPinSharding(pinOptions));
        }
        pm.addPass(mlir::dtc::createApplyStrategy(planOptions));
      }) ||
      !runStage("partitioned", [](PassManager &pm) {
        pm.addPass(mlir::dtc::createPartition());
        pm.addPass(mlir::dtc::createScheduleCollectives());
      }))
    return false;

  mlir::dtc::ArtifactOptions artifactOptions;
  artifactOptions.sourceName = o.input;
  artifactOptions.optimizer = optimizerJson(o, weightDecay);
  artifactOptions.planExtras = {
      {"planner", o.autoPlan ? "auto (no search yet: data parallelism over every device)"
                             : "strategy"},
      {"sp", o.sp}, {"ep", o.ep},
      {"microbatches", o.microbatches}, {"schedule", "none"},
      {"remat", "none"}, {"precision", o.precision}, {"grad_accum", o.gradAccum},
      {"hw", hw->name}};
  FailureOr<json> body = mlir::dtc::buildArtifact(*module, artifactOptions);
  if (failed(body)) {
    if (!errors.reported())
      errors.flag("cannot emit the artifact");
    return false;
  }
  artifact = std::move(*body);
  return true;
}

DialectRegistry dtcRegistry() {
  DialectRegistry registry;
  registry.insert<mlir::dtc::DtcDialect, func::FuncDialect, arith::ArithDialect,
                  shard::ShardDialect>();
  return registry;
}

} // namespace

int ::dtc::runCompile(const CompileOptions &o) {
  auto start = std::chrono::steady_clock::now();
  MLIRContext ctx(dtcRegistry());
  ctx.loadAllAvailableDialects();
  ctx.disableMultithreading();
  Errors errors(ctx, o.input);
  auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(o.input, /*IsText=*/true);
  if (!buffer) {
    errors.flag("cannot read model " + o.input + ": " + buffer.getError().message());
    return 1;
  }
  OwningOpRef<ModuleOp> module;
  json artifact;
  std::optional<cost::HardwareProfile> hw;
  if (!compileBuffer(std::move(*buffer), o, ctx, errors, module, artifact, hw))
    return 1;

  std::string writeError;
  if (!rt::writeArtifactFile(o.output, artifact, writeError)) {
    errors.flag(writeError);
    return 1;
  }
  if (!o.report.empty()) {
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    json report = buildReport(*module, artifact, o, *hw, seconds);
    std::string reportError;
    if (!rt::writeOutputFile(o.report, report.dump(2) + "\n", reportError)) {
      errors.flag("cannot write report " + o.report + ": " + reportError);
      return 1;
    }
  }
  return 0;
}

bool ::dtc::compileToArtifact(const std::string &source, const std::string &label,
                              const CompileOptions &options, nlohmann::json &artifact,
                              std::string &error) {
  error.clear();
  CompileOptions o = options;
  o.input = label;
  o.emitMlirAfter.clear();
  MLIRContext ctx(dtcRegistry());
  ctx.loadAllAvailableDialects();
  ctx.disableMultithreading();
  Errors errors(ctx, label, &error);
  OwningOpRef<ModuleOp> module;
  std::optional<cost::HardwareProfile> hw;
  bool ok = compileBuffer(llvm::MemoryBuffer::getMemBufferCopy(source, label), o, ctx,
                          errors, module, artifact, hw);
  if (!ok && error.empty())
    error = label + ": compilation failed";
  return ok;
}
