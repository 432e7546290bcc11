//===- Evaluate.cpp - what a plan costs -----------------------------------===//
//
// The one place that evaluates a plan: memory by category and at the
// schedule's peak, communication and compute time, from the emitted
// programs (what the runtime will allocate and send) and the cost model.
// The report, --remat auto and (next) the search read it.
//
//===----------------------------------------------------------------------===//
#include "dtc/Planner/Evaluate.h"
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Planner/CommOverlap.h"
#include "dtc/Target/Artifact.h"
#include "dtc/artifact/Artifact.h"
#include "dtc/artifact/MemoryPlan.h"
#include "dtc/artifact/Schedule.h"
#include "dtc/artifact/Vocabulary.h"
#include "dtc/kernels/CpuKernels.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

using namespace mlir;
using json = nlohmann::json;

namespace {

/// The pipeline schedule the artifact's programs carry (one per stage).
std::optional<::dtc::sched::Schedule>
artifactSchedule(const ::dtc::artifact::Artifact &a) {
  if (!a.pipeline.present)
    return std::nullopt;
  ::dtc::sched::Schedule s;
  s.name = a.pipeline.schedule;
  s.stages = a.pipeline.stages;
  s.virtualStages = a.pipeline.virtualStages;
  s.microbatches = a.pipeline.microbatches;
  s.perStage.assign(size_t(s.stages), {});
  for (const ::dtc::artifact::ProgramDecl &program : a.programs)
    if (program.stage >= 0 && program.stage < s.stages)
      s.perStage[size_t(program.stage)] = program.schedule;
  return s;
}

/// The bubble of the artifact's pipeline schedule with unit costs (0
/// without one).
double scheduleBubble(const ::dtc::artifact::Artifact &parsed) {
  std::optional<::dtc::sched::Schedule> schedule = artifactSchedule(parsed);
  if (!schedule)
    return 0;
  const ::dtc::sched::Simulation sim = ::dtc::sched::simulate(*schedule);
  return sim.ok ? sim.bubble : 0;
}

struct ProgramCosts {
  json memory;
  std::map<std::string, std::map<std::string, std::vector<int64_t>>> byMember;
  int64_t sendBytes = 0;
  json calls = json::object();
  /// Communication time: in the micro-batches' pipeline chunks (stretched
  /// by the schedule's bubble like their compute) and outside them.
  double chunkSeconds = 0, seconds = 0;
  /// The part of `seconds` that the step's kernels hide
  /// (hiddenCommSeconds).
  double hiddenSeconds = 0;
  /// The kernels the artifact adds to the step's ops, which the step
  /// function does not have: a micro-batch's slice of the inputs, the
  /// gradients' accumulation over micro-batches and the fill that zeroes
  /// it. Per micro-batch (stretched by the bubble) and once per step; by
  /// kernel.
  double chunkKernelSeconds = 0, stepKernelSeconds = 0;
  std::map<std::string, double> kernelSecondsByOp;
};

/// One program's memory (one-copy slots plus the micro-batch copies its
/// schedule keeps alive at its worst moment) and traffic per step (what
/// runs per micro-batch counts M times): bytes each member of each
/// communicator sends by kind, point-to-point bytes, calls and time. Reads
/// the parsed artifact (dtc/artifact), as the runtime does.
ProgramCosts programCosts(const ::dtc::artifact::Artifact &a,
                          const ::dtc::artifact::ProgramDecl &program,
                          int64_t microbatches,
                          const ::dtc::cost::HardwareProfile &hw, bool f32) {
  namespace art = ::dtc::artifact;
  ProgramCosts c;
  // Slot bytes per category: the usual accounting.
  c.memory = {{"params", 0},      {"grads", 0},  {"optimizer", 0},
              {"activations", 0}, {"inputs", 0}, {"constants", 0},
              {"scalars", 0},     {"total", 0}};
  std::map<int, int64_t> copyBytes; // chunk -> bytes of one micro-batch copy
  for (const art::SlotDecl &slot : program.slots) {
    const int64_t bytes = int64_t(slot.bytes);
    if (slot.chunk >= 0) {
      copyBytes[slot.chunk] += bytes;
      continue;
    }
    const std::string key = art::memKindReportKey(int(slot.category));
    if (c.memory.contains(key))
      c.memory[key] = c.memory[key].get<int64_t>() + bytes;
    c.memory["total"] = c.memory["total"].get<int64_t>() + bytes;
  }
  if (!program.schedule.empty()) {
    const std::vector<::dtc::sched::Action> &actions = program.schedule;
    std::map<std::pair<int, int>, size_t> last;
    for (size_t i = 0; i < actions.size(); ++i)
      last[{actions[i].chunk, actions[i].microbatch}] = i;
    std::set<std::pair<int, int>> live;
    int64_t now = 0, peak = 0;
    for (size_t i = 0; i < actions.size(); ++i) {
      std::pair<int, int> key{actions[i].chunk, actions[i].microbatch};
      if (live.insert(key).second)
        now += copyBytes[key.first];
      peak = std::max(peak, now);
      if (last[key] == i) {
        live.erase(key);
        now -= copyBytes[key.first];
      }
    }
    c.memory["activations"] = c.memory["activations"].get<int64_t>() + peak;
    c.memory["total"] = c.memory["total"].get<int64_t>() + peak;
  }

  auto elements = [&](int buffer) {
    return art::numel(program.buffers[size_t(buffer)].shape);
  };
  auto elementBytes = [&](int buffer) {
    return int64_t(art::dtypeSize(program.buffers[size_t(buffer)].dtype));
  };
  auto linkOver = [&](const std::vector<int> &axes) {
    return hw.linkOver(std::vector<int64_t>(axes.begin(), axes.end()));
  };
  // Per instruction of the once-per-step list: its collective's seconds.
  std::vector<double> stepListComm(program.instructions.size(), 0.0);
  auto countList = [&](const std::vector<art::InstrDecl> &list, int64_t times,
                       double &seconds, double &kernelSeconds) {
    // Kernel seconds since the last collective. A collective right after
    // another (the gradients' unbucketed all-reduces after a flush, back to
    // back) finds its group still together: it pays the link's sync
    // overhead, the cost of gathering ranks that computed apart, only once
    // for the run; after a little computation, a part of it (Link::
    // syncRamp). A list's first collective counts as after a long one.
    double computed = INFINITY;
    for (size_t i = 0; i < list.size(); ++i) {
      const art::InstrDecl &inst = list[i];
      const art::CommDecl *comm =
          inst.comm >= 0 ? &a.comms[size_t(inst.comm)] : nullptr;
      if (inst.pipe == art::PipeOp::Accumulate ||
          inst.pipe == art::PipeOp::Fill ||
          inst.pipe == art::PipeOp::MicrobatchSlice) {
        const double once =
            ::dtc::cost::instructionKernelSeconds(program, inst, hw, f32);
        kernelSeconds += double(times) * once;
        c.kernelSecondsByOp[inst.op] += double(times) * once;
        computed += once;
        continue;
      }
      if (inst.pipe == art::PipeOp::Send) {
        const int64_t bytes = elements(inst.in[0]) * elementBytes(inst.in[0]);
        c.sendBytes += times * bytes;
        c.calls["send_recv"] = c.calls.value("send_recv", int64_t(0)) + times;
        seconds += double(times) * ::dtc::cost::sendRecvTime(
                                       double(bytes), linkOver(comm->meshAxes));
        continue;
      }
      ::dtc::cost::CollectiveKind kind;
      if (!inst.isCollective || !comm ||
          !::dtc::cost::collectiveFromName(inst.op, kind)) {
        if (!inst.isCollective && inst.pipe == art::PipeOp::None)
          computed +=
              ::dtc::cost::instructionKernelSeconds(program, inst, hw, f32);
        continue; // kernels, all_slice (no traffic)
      }
      const int64_t n = a.mesh.groupSize(comm->meshAxes);
      int64_t inElements = elements(inst.in[0]),
              outElements = elements(inst.out[0]);
      // A bucket is one collective of its members' elements, at its last
      // member.
      if (inst.bucket >= 0) {
        const art::BucketDecl &bucket = program.buckets[size_t(inst.bucket)];
        if (&inst != &program.instructions[size_t(bucket.members.back())])
          continue;
        inElements = outElements = int64_t(bucket.elements);
        if (bucket.coll == art::CollectiveKind::ReduceScatter)
          inElements *= n;
        else if (bucket.coll == art::CollectiveKind::AllGather)
          outElements *= n;
      }
      // What the runtime's algorithm sends (the test and the benchmark
      // compare it with the runtime's own count).
      const int64_t bytesPerElement = elementBytes(inst.in[0]);
      std::vector<int64_t> &members = c.byMember[comm->name][inst.op];
      members.resize(size_t(n), 0);
      for (int64_t m = 0; m < n; ++m)
        members[size_t(m)] +=
            times * ::dtc::cost::collectiveSentBytesOf(
                        kind, n, m, inElements, outElements, bytesPerElement);
      c.calls[inst.op] = c.calls.value(inst.op, int64_t(0)) + times;
      const int64_t sent = ::dtc::cost::collectiveSentBytes(
          kind, n, inElements, outElements, bytesPerElement);
      ::dtc::cost::Link link = linkOver(comm->meshAxes);
      link.syncOverhead = link.syncOverheadAfter(computed);
      computed = 0;
      const double time = double(times) * ::dtc::cost::collectiveTime(
                                              kind, n, double(sent), link);
      seconds += time;
      if (&list == &program.instructions)
        stepListComm[i] = time;
    }
  };
  countList(program.instructions, 1, c.seconds, c.stepKernelSeconds);
  // A pipeline's step list runs around the micro-batches, whose kernels
  // this does not place; its data-parallel reduction waits for the flush.
  if (program.chunks.empty() && hw.commOverlap > 0)
    c.hiddenSeconds = hw.commOverlap * ::dtc::cost::hiddenCommSeconds(
                                           program, stepListComm, hw, f32);
  for (const art::ChunkDecl &chunk : program.chunks)
    for (const std::vector<art::InstrDecl> *list :
         {&chunk.forward, &chunk.backwardInput, &chunk.backwardWeight})
      countList(*list, microbatches, c.chunkSeconds, c.chunkKernelSeconds);
  countList(program.finish, 1, c.seconds, c.stepKernelSeconds);
  return c;
}

/// The storage of `v`: what it views, through views.
Value storageOf(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isa<mlir::dtc::ViewOpInterface>(def) || def->getNumOperands() == 0)
      break;
    v = def->getOperand(0);
  }
  return v;
}

/// Bytes of a ranked tensor of integers or floats (0 for anything else).
double tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.getElementType().isIntOrFloat())
    return 0;
  return double(tensor.getNumElements()) *
         double(tensor.getElementType().getIntOrFloatBitWidth()) / 8.0;
}

/// What a kernel moves through memory (its operands and results; a view that
/// runs a kernel copies), and whether any of them is in 16-bit floats (it
/// then runs at the low-precision peak).
struct KernelTraffic {
  double bytes = 0;
  bool lowPrecision = false;
};
KernelTraffic kernelTraffic(Operation *op) {
  KernelTraffic t;
  for (Type type :
       llvm::concat<const Type>(op->getOperandTypes(), op->getResultTypes()))
    if (auto tensor = dyn_cast<RankedTensorType>(type)) {
      t.bytes += tensorBytes(tensor);
      t.lowPrecision |=
          tensor.getElementType().isBF16() || tensor.getElementType().isF16();
    }
  return t;
}

/// The busiest device's kernel time per step, and its flops, executed
/// (recomputation included) and the model's (without it). Each kernel the
/// program runs (runsKernel) is its roofline (compute at the profile's
/// efficiency for its size, or its memory traffic) at the peak of its
/// operands' precision.
double busiestKernelSeconds(ModuleOp module, int64_t microbatches,
                            const ::dtc::cost::HardwareProfile &hw, bool f32,
                            int64_t &flops, int64_t &modelFlops,
                            std::map<std::string, double> &secondsByOp,
                            double &meanSeconds) {
  double kernelSeconds = 0;
  const SmallVector<func::FuncOp> steps = mlir::dtc::trainSteps(module);
  meanSeconds = 0;
  for (func::FuncOp step : steps) {
    double seconds = 0;
    std::map<std::string, double> byOp;
    mlir::dtc::walkCostedOps(
        step, microbatches, /*countRecomputation=*/true,
        [&](Operation *op, int64_t times) {
          auto cost = cast<mlir::dtc::CostOpInterface>(op);
          const KernelTraffic traffic = kernelTraffic(op);
          const double opSeconds =
              double(times) *
              ::dtc::cost::kernelTime(double(cost.getFlopCount()),
                                      traffic.bytes, cost.getCostClass(), hw,
                                      f32 || !traffic.lowPrecision,
                                      double(cost.getIndependentProducts()));
          seconds += opSeconds;
          if (opSeconds > 0)
            byOp[op->getName().stripDialect().str()] += opSeconds;
        });
    if (seconds > kernelSeconds)
      secondsByOp = std::move(byOp);
    kernelSeconds = std::max(kernelSeconds, seconds);
    // One step function per pipeline stage, and every stage has as many
    // ranks: the mean over the steps is the mean over the ranks.
    meanSeconds += seconds / double(steps.size());
    const int64_t executed = mlir::dtc::flopsPerStep(step, microbatches);
    if (executed > flops) {
      flops = executed;
      modelFlops = mlir::dtc::flopsPerStep(step, microbatches,
                                           /*countRecomputation=*/false);
    }
  }
  return kernelSeconds;
}

/// The emitted artifact, parsed. The memory check validated it before this
/// (its "memory" record says so), so it parses, and its ranks'
/// communication needs no second replay.
::dtc::artifact::Artifact parseEmitted(const json &artifact) {
  ::dtc::artifact::Artifact parsed;
  std::string error;
  const bool checked = artifact.contains("memory");
  if (!(checked ? ::dtc::artifact::parseCheckedArtifact
                : ::dtc::artifact::parseArtifact)(
          artifact, "the emitted artifact", parsed, error))
    llvm::report_fatal_error(
        llvm::Twine("internal error: the emitted artifact does not parse: ") +
        error);
  return parsed;
}

/// The kernels the artifact adds (ProgramCosts::chunkKernelSeconds) of
/// the mean rank, `costs` in the order of `a`'s programs.
double meanAddedKernelSeconds(const ::dtc::artifact::Artifact &a,
                              const std::vector<ProgramCosts> &costs,
                              int64_t devices) {
  double seconds = 0;
  for (size_t p = 0; p < a.programs.size(); ++p)
    seconds += costs[p].chunkKernelSeconds * double(a.programs[p].ranks.size());
  return seconds / double(devices);
}

} // namespace

namespace mlir::dtc {

PlanCost evaluatePlan(ModuleOp module, const json &artifact,
                      ::dtc::cost::HardwareProfile &hw, bool f32) {
  const ::dtc::artifact::Artifact parsed = parseEmitted(artifact);
  std::vector<int64_t> mesh = parsed.mesh.axes();
  hw.forMesh(mesh);
  const int64_t microbatches =
      parsed.pipeline.present ? parsed.pipeline.microbatches : 1;

  int64_t params = 0;
  for (int t : parsed.tensorsWithRole(::dtc::artifact::Role::Param))
    params += ::dtc::artifact::numel(parsed.tensors[size_t(t)].shape);

  std::map<std::string, std::vector<int64_t>> commAxes;
  for (const ::dtc::artifact::CommDecl &c : parsed.comms)
    commAxes[c.name].assign(c.meshAxes.begin(), c.meshAxes.end());
  std::vector<ProgramCosts> costs;
  std::map<int64_t, size_t> programOfRank;
  for (const ::dtc::artifact::ProgramDecl &program : parsed.programs) {
    for (int r : program.ranks)
      programOfRank[r] = costs.size();
    costs.push_back(programCosts(parsed, program, microbatches, hw, f32));
  }

  json memory = costs.front().memory;
  double chunkCommSeconds = 0, stepCommSeconds = 0, hiddenSeconds = 0;
  json calls = json::object();
  const ProgramCosts *busiestAdded = &costs.front();
  for (const ProgramCosts &c : costs) {
    if (c.chunkKernelSeconds + c.stepKernelSeconds >
        busiestAdded->chunkKernelSeconds + busiestAdded->stepKernelSeconds)
      busiestAdded = &c;
    for (auto &[key, value] : c.memory.items())
      memory[key] = std::max(memory[key].get<int64_t>(), value.get<int64_t>());
    const double exposed = c.seconds - c.hiddenSeconds;
    if (c.chunkSeconds + exposed > chunkCommSeconds + stepCommSeconds) {
      chunkCommSeconds = c.chunkSeconds;
      stepCommSeconds = exposed;
      hiddenSeconds = c.hiddenSeconds;
    }
    for (auto &[op, n] : c.calls.items())
      calls[op] = std::max(calls.value(op, int64_t(0)), n.get<int64_t>());
  }
  // Beside the usual accounting per category: what the runtime's allocator
  // really takes at its high-water mark (MemoryPlan.h: aligned slots and the
  // micro-batch copies in flight, collective staging, kernel workspace),
  // which is the total, and the budget it must fit.
  const json &planned = artifact["memory"];
  memory["staging"] = planned["peak_by_kind"]["staging"];
  memory["workspace"] = planned["peak_by_kind"]["workspace"];
  memory["total"] = planned["peak_bytes"];
  memory["peak_per_device"] = planned["peak_bytes"];
  memory["budget_per_device"] = planned["budget_bytes"];

  // Per communicator: the busiest member; in total: the busiest device,
  // summing each communicator's share at that device's index in it.
  using ::dtc::artifact::CollectiveKind;
  std::vector<std::string> kinds;
  for (CollectiveKind kind :
       {CollectiveKind::AllReduce, CollectiveKind::AllGather,
        CollectiveKind::ReduceScatter, CollectiveKind::AllToAll,
        CollectiveKind::Shift, CollectiveKind::MoeExchange})
    kinds.push_back(::dtc::artifact::collectiveKindName(kind));
  json comm = json::object();
  for (const std::string &kind : kinds)
    comm[kind] = 0;
  comm["send_recv"] = 0;
  json commByName = json::object();
  for (const ProgramCosts &c : costs)
    for (auto &[name, perKind] : c.byMember) {
      if (!commByName.contains(name))
        commByName[name] = {{"mesh_axes", commAxes[name]}};
      for (const std::string &kind : kinds) {
        auto it = perKind.find(kind);
        int64_t busiest =
            it == perKind.end() || it->second.empty()
                ? 0
                : *std::max_element(it->second.begin(), it->second.end());
        commByName[name][kind] =
            std::max(commByName[name].value(kind, int64_t(0)), busiest);
      }
    }
  int64_t devices = 1;
  for (int64_t size : mesh)
    devices *= size;
  for (int64_t device = 0; device < devices; ++device) {
    const ProgramCosts &c = costs[programOfRank[device]];
    std::vector<int64_t> coords(mesh.size());
    for (size_t a = mesh.size(), rest = device; a-- > 0;) {
      coords[a] = rest % mesh[a];
      rest /= mesh[a];
    }
    for (const std::string &kind : kinds) {
      int64_t total = 0;
      for (auto &[name, perKind] : c.byMember) {
        auto it = perKind.find(kind);
        if (it == perKind.end() || it->second.empty())
          continue;
        int64_t index = 0;
        for (int64_t a : commAxes[name])
          index = index * mesh[a] + coords[a];
        total += it->second[size_t(index)];
      }
      comm[kind] = std::max(comm[kind].get<int64_t>(), total);
    }
    comm["send_recv"] = std::max(comm["send_recv"].get<int64_t>(), c.sendBytes);
  }

  PlanCost cost;
  int64_t flops = 0, modelFlops = 0;
  double meanKernelSeconds = 0;
  const double kernelSeconds =
      busiestKernelSeconds(module, microbatches, hw, f32, flops, modelFlops,
                           cost.kernelSecondsByOp, meanKernelSeconds);
  double peak = f32 ? hw.peakFlopsF32 : hw.peakFlopsBf16;
  // A pipeline stage idles for the bubble of its schedule (unit costs);
  // what runs per micro-batch, kernels and their communication, stretches
  // by it, the rest (the data-parallel reduction after the flush) does not.
  const double bubble = scheduleBubble(parsed);
  const double stretch = ::dtc::cost::bubbleStretch(bubble, devices, hw);
  double computeSeconds =
      ::dtc::cost::pipelineCompute(
          kernelSeconds + busiestAdded->chunkKernelSeconds,
          meanKernelSeconds + meanAddedKernelSeconds(parsed, costs, devices),
          bubble, devices, hw) +
      busiestAdded->stepKernelSeconds;
  for (const auto &[op, seconds] : busiestAdded->kernelSecondsByOp)
    cost.kernelSecondsByOp[op] += seconds;
  double commSeconds = chunkCommSeconds * stretch + stepCommSeconds;
  double stepSeconds = computeSeconds + commSeconds;
  cost.mesh = mesh;
  cost.params = params;
  cost.memory = std::move(memory);
  cost.comm = std::move(comm);
  cost.commByName = std::move(commByName);
  cost.calls = std::move(calls);
  cost.bubble = bubble;
  cost.flops = flops;
  cost.modelFlops = modelFlops;
  cost.peakFlops = peak;
  cost.computeSeconds = computeSeconds;
  cost.commSeconds = commSeconds;
  cost.hiddenCommSeconds = hiddenSeconds;
  cost.stepSeconds = stepSeconds;
  return cost;
}

std::map<int64_t, int64_t> storedActivationBytesByLayer(ModuleOp module) {
  std::map<int64_t, int64_t> bytes;
  for (func::FuncOp step : trainSteps(module)) {
    llvm::DenseSet<Value> counted;
    step.walk([&](Operation *op) {
      if (!isPhase(op, Phase::Forward) ||
          op->hasAttr(DtcDialect::kRecomputeAttr))
        return;
      for (Value result : op->getResults()) {
        if (!llvm::any_of(result.getUsers(), isBackward))
          continue;
        // A view shares the bytes of what it views.
        Value storage = storageOf(result);
        Operation *def = storage.getDefiningOp();
        auto layer =
            def ? def->getAttrOfType<IntegerAttr>(DtcDialect::kLayerAttr)
                : IntegerAttr();
        // A collective's result belongs to the layer of the forward op it
        // was made for (e.g. a sequence-parallel region's gathered copy).
        if (def && !layer)
          for (Operation *user : storage.getUsers())
            if (isPhase(user, Phase::Forward))
              if ((layer = user->getAttrOfType<IntegerAttr>(
                       DtcDialect::kLayerAttr)))
                break;
        auto type = dyn_cast<RankedTensorType>(storage.getType());
        if (!layer || !type || !counted.insert(storage).second)
          continue;
        Type element = type.getElementType();
        const int64_t elementBytes = element.isInteger(64)                 ? 8
                                     : element.isBF16() || element.isF16() ? 2
                                                                           : 4;
        bytes[layer.getInt()] += type.getNumElements() * elementBytes;
      }
    });
  }
  return bytes;
}

/// The experts' FFNs of `dispatch` (the forward between the dispatch and
/// its combine): their ops' ids into `expertOps`, and the elements of the
/// parameters they read not yet in `seen`, returned.
static int64_t expertRegion(func::FuncOp step, MoeDispatchOp dispatch,
                            llvm::DenseSet<int64_t> &expertOps,
                            llvm::DenseSet<Value> &seen) {
  int64_t elements = 0;
  SmallVector<Operation *> work;
  llvm::DenseSet<Operation *> visited;
  auto visitUsers = [&](Value v) {
    for (Operation *user : v.getUsers())
      if (isPhase(user, Phase::Forward) && !isa<MoeCombineOp>(user) &&
          visited.insert(user).second)
        work.push_back(user);
  };
  visitUsers(dispatch.getBuffer());
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (auto id = op->getAttrOfType<IntegerAttr>(DtcDialect::kIdAttr))
      expertOps.insert(id.getInt());
    for (Value operand : op->getOperands()) {
      // A parameter, or its cast to the compute type (mixed precision).
      Value source = operand;
      if (auto cast = source.getDefiningOp<CastOp>())
        source = cast.getOperand();
      if (isParameterArgument(step, source) && seen.insert(source).second)
        elements += tensorTypeOf(source).getNumElements();
    }
    for (Value result : op->getResults())
      visitUsers(result);
  }
  return elements;
}

/// Adds the activations each layer's forward keeps for the backward (no
/// recomputation) to `facts`: their sum and, per layer of
/// `facts.layerFlops`, their bytes.
static void addStoredActivations(ModuleOp module,
                                 ::dtc::search::ModelFacts &facts) {
  facts.layerStoredBytes.assign(facts.layerFlops.size(), 0.0);
  for (auto &[layer, bytes] : storedActivationBytesByLayer(module)) {
    facts.storedNone += double(bytes);
    if (layer >= 0 && size_t(layer) < facts.layerStoredBytes.size())
      facts.layerStoredBytes[size_t(layer)] += double(bytes);
  }
}

/// The layer (dtc.layer) of `op`, -1 outside the layers.
static int64_t layerOf(Operation *op) {
  auto layer = op->getAttrOfType<IntegerAttr>(DtcDialect::kLayerAttr);
  return layer ? layer.getInt() : -1;
}

/// Adds to `facts` what selective recomputation keeps (storedSelective)
/// and, with and without it, the stored activations in the residual
/// stream's shapes (the types of the values between layers): Megatron's
/// tensor parallelism splits a layer's heads and hidden features but keeps
/// these whole on every rank (the norms' inputs and outputs, the residual
/// sums) unless sequence parallelism splits them. A value whose shape only
/// happens to match (a row-parallel product's input) counts as whole too,
/// which errs towards more memory. Selective recomputation keeps what
/// dtc-rematerialize leaves (recomputedOps): the values the backward reads
/// less those of the ops it recomputes, plus what those ops read that
/// nothing kept before; its total is storedNone less the difference.
static void addStoredByRecomputation(ModuleOp module,
                                     ::dtc::search::ModelFacts &facts) {
  llvm::DenseSet<Type> streamTypes;
  double none = 0, selective = 0;
  for (func::FuncOp step : trainSteps(module)) {
    std::map<int64_t, SmallVector<Operation *>> layers;
    step.walk([&](Operation *op) {
      if (!isPhase(op, Phase::Forward) || layerOf(op) < 0 ||
          op->getNumResults() == 0 || isa<arith::ConstantOp>(op))
        return;
      layers[layerOf(op)].push_back(op);
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp())
          if (isPhase(def, Phase::Forward) && layerOf(def) != layerOf(op))
            streamTypes.insert(operand.getType());
    });
    llvm::DenseSet<Operation *> recomputed;
    for (auto &[layer, ops] : layers)
      for (Operation *op : recomputedOps(ops, /*selective=*/true))
        recomputed.insert(op);
    llvm::DenseSet<Value> keptNone, keptSelective;
    auto keep = [&](llvm::DenseSet<Value> &kept, Value v) {
      Value storage = storageOf(v);
      Operation *def = storage.getDefiningOp();
      if (!def || !isPhase(def, Phase::Forward) ||
          (&kept == &keptSelective && recomputed.contains(def)))
        return;
      kept.insert(storage);
    };
    for (auto &[layer, ops] : layers)
      for (Operation *op : ops) {
        for (Value result : op->getResults())
          if (llvm::any_of(result.getUsers(), isBackward)) {
            keep(keptNone, result);
            if (!recomputed.contains(op))
              keep(keptSelective, result);
          }
        if (recomputed.contains(op) &&
            llvm::any_of(op->getResults(), [](Value r) {
              return llvm::any_of(r.getUsers(), isAfterForward);
            }))
          for (Value operand : op->getOperands())
            keep(keptSelective, operand);
      }
    for (auto [kept, total] :
         {std::pair{&keptNone, &none}, std::pair{&keptSelective, &selective}})
      for (Value storage : *kept) {
        *total += tensorBytes(storage.getType());
        if (streamTypes.contains(storage.getType()))
          (kept == &keptNone ? facts.storedInStreamNone
                             : facts.storedInStreamSelective) +=
              tensorBytes(storage.getType());
      }
  }
  facts.storedSelective = std::max(0.0, facts.storedNone - (none - selective));
  facts.storedInStreamSelective =
      std::min(facts.storedInStreamSelective, facts.storedSelective);
}

/// Each dense parameter's elements and the layers whose forward reads it
/// (`facts.paramUses`): a pipeline stage holds those its layers read.
static void addParamUses(func::FuncOp step,
                         const llvm::DenseSet<Value> &experts,
                         ::dtc::search::ModelFacts &facts) {
  for (BlockArgument arg : step.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || argRole(step, arg.getArgNumber()) != Role::Param ||
        experts.contains(arg))
      continue;
    ::dtc::search::ModelFacts::ParamUse use;
    use.elements = double(type.getNumElements());
    for (Operation *user : arg.getUsers())
      if (auto layer = user->getAttrOfType<IntegerAttr>(DtcDialect::kLayerAttr);
          layer && isPhase(user, Phase::Forward) &&
          !llvm::is_contained(use.layers, layer.getInt()))
        use.layers.push_back(layer.getInt());
    facts.paramUses.push_back(std::move(use));
  }
}

::dtc::search::ModelFacts modelFacts(ModuleOp module) {
  ::dtc::search::ModelFacts facts;
  func::FuncOp step = findTrainStep(module);
  if (!step)
    return facts;
  for (BlockArgument arg : step.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    std::optional<Role> role = argRole(step, arg.getArgNumber());
    if (!type)
      continue;
    if (role == Role::Param)
      facts.params += type.getNumElements();
    if (role == Role::Input && type.getRank() >= 1) {
      facts.batch = std::max(facts.batch, type.getDimSize(0));
      if (type.getRank() == 2 && type.getElementType().isInteger()) {
        facts.sequenceInputs = true;
        facts.sequence = std::max(facts.sequence, type.getDimSize(1));
      }
    }
  }
  llvm::DenseSet<Value> boundary;
  // A mixture of experts: its experts' FFNs, forward and backward, split
  // over the experts (a rank runs its experts on every token routed to
  // them), and its routing reads every token on every rank.
  llvm::DenseSet<Value> expertWeights;
  llvm::DenseSet<int64_t> expertOps;
  step.walk([&](MoeDispatchOp dispatch) {
    if (!isPhase(dispatch, Phase::Forward))
      return;
    facts.experts = std::gcd(facts.experts,
                             tensorTypeOf(dispatch.getBuffer()).getDimSize(0));
    facts.expertParams +=
        expertRegion(step, dispatch, expertOps, expertWeights);
  });
  addParamUses(step, expertWeights, facts);
  // `slots`: the token slots `op` exchanges (exchangedSlotElements).
  auto splitOf = [&](Operation *op, int64_t slots) {
    if (isa<MoeRouteOp, MoeRouteGradOp, MoeFirstChoiceFractionOp>(op))
      return ::dtc::search::KernelClass::Split::Whole;
    if (slots > 0)
      return ::dtc::search::KernelClass::Split::Tokens;
    auto id = op->getAttrOfType<IntegerAttr>(isPhase(op, Phase::Forward)
                                                 ? DtcDialect::kIdAttr
                                                 : DtcDialect::kForwardAttr);
    return id && expertOps.contains(id.getInt())
               ? ::dtc::search::KernelClass::Split::Experts
               : ::dtc::search::KernelClass::Split::Batch;
  };
  std::map<std::tuple<double, double, ::dtc::kernels::CostClass, double, bool,
                      bool, ::dtc::search::KernelClass::Split>,
           int64_t>
      kernels, optimizerKernels;
  // The optimizer updates an expert weight when it reads it or its state.
  llvm::StringSet<> expertNames;
  for (Value weight : expertWeights)
    if (auto arg = dyn_cast<BlockArgument>(weight))
      expertNames.insert(argumentName(step, arg.getArgNumber()));
  auto updatesExperts = [&](Operation *op) {
    return llvm::any_of(op->getOperands(), [&](Value operand) {
      auto arg = dyn_cast<BlockArgument>(operand);
      if (!arg || arg.getOwner()->getParentOp() != step.getOperation())
        return false;
      if (expertNames.contains(argumentName(step, arg.getArgNumber())))
        return true;
      auto of = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  DtcDialect::kOfAttr);
      return of && expertNames.contains(of.getValue());
    });
  };
  step.walk([&](Operation *op) {
    auto cost = dyn_cast<CostOpInterface>(op);
    const int64_t layer = layerOf(op);
    const int64_t slots = exchangedSlotElements(op);
    if (layer >= 0) {
      if (facts.layerFlops.size() <= size_t(layer))
        facts.layerFlops.resize(size_t(layer) + 1, 1.0);
      if (cost)
        facts.layerFlops[size_t(layer)] += double(cost.getFlopCount());
    }
    // Costed as busiestKernelSeconds costs it (walkCostedOps).
    if (!runsKernel(op))
      cost = nullptr;
    if (cost && (isPhase(op, Phase::Forward) || isBackward(op)))
      ++kernels[{double(cost.getFlopCount()), kernelTraffic(op).bytes,
                 cost.getCostClass(), double(cost.getIndependentProducts()),
                 isPhase(op, Phase::Forward), op->hasTrait<CheapToRecompute>(),
                 splitOf(op, slots)}];
    else if (cost && isPhase(op, Phase::Optimizer))
      ++optimizerKernels[{double(cost.getFlopCount()), kernelTraffic(op).bytes,
                          cost.getCostClass(),
                          double(cost.getIndependentProducts()), false, false,
                          updatesExperts(op)
                              ? ::dtc::search::KernelClass::Split::Experts
                              : ::dtc::search::KernelClass::Split::Batch}];
    if (slots > 0 && (isPhase(op, Phase::Forward) || isBackward(op))) {
      ++facts.slotMoves;
      facts.slotMoveElements += double(slots);
    }
    if (isPhase(op, Phase::Forward)) {
      facts.layers = std::max(facts.layers, layer + 1);
      if (auto attention = dyn_cast<AttentionOp>(op)) {
        facts.attentionKeyBytes += tensorBytes(attention.getK().getType());
        ++facts.attentionLayers;
      }
      if (cost) {
        facts.forwardFlops += double(cost.getFlopCount());
        if (op->hasTrait<CheapToRecompute>())
          facts.cheapForwardFlops += double(cost.getFlopCount());
      }
      // Full recomputation keeps each layer's inputs from other layers.
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp())
          if (isPhase(def, Phase::Forward) && layerOf(def) != layer &&
              boundary.insert(operand).second)
            facts.storedFull += tensorBytes(operand.getType());
    } else if (isBackward(op) && cost) {
      facts.backwardFlops += double(cost.getFlopCount());
    }
  });
  addStoredActivations(module, facts);
  addStoredByRecomputation(module, facts);
  facts.storedFull = std::min(facts.storedFull, facts.storedNone);
  facts.boundaryBytes =
      facts.layers > 0 ? facts.storedFull / double(facts.layers) : 0.0;
  for (const auto &[key, count] : kernels) {
    const auto &[flops, bytes, costClass, products, forward, cheap, split] =
        key;
    facts.kernels.push_back(
        {flops, bytes, costClass, products, forward, cheap, count, split});
  }
  for (const auto &[key, count] : optimizerKernels) {
    const auto &[flops, bytes, costClass, products, forward, cheap, split] =
        key;
    facts.optimizerKernels.push_back(
        {flops, bytes, costClass, products, forward, cheap, count, split});
  }
  return facts;
}

std::vector<int64_t> plannedPeakPerStage(const json &artifact,
                                         const std::string &label,
                                         int64_t devices, int64_t stages) {
  std::vector<::dtc::rt::MemoryNeed> needs;
  std::string error;
  int threads = 0;
  if (!planMemory(artifact, label, devices, needs, threads, error))
    return {};
  std::vector<int64_t> peaks(size_t(std::max<int64_t>(stages, 1)), 0);
  for (const ::dtc::rt::MemoryNeed &need : needs) {
    size_t stage = 0;
    if (need.program.rfind("stage", 0) == 0)
      stage = size_t(std::stoll(need.program.substr(5)));
    if (stage < peaks.size())
      peaks[stage] = std::max(peaks[stage], int64_t(need.peak));
  }
  return peaks;
}

bool chooseRecomputation(
    double budget, int64_t stages,
    const std::function<std::vector<int64_t>(const std::vector<std::string> &)>
        &peaksOf,
    std::vector<std::string> &chosen, json &record) {
  static const char *const kLevels[] = {"none", "selective", "full"};
  std::vector<int> level(size_t(std::max<int64_t>(stages, 1)), 0);
  auto modes = [&] {
    std::vector<std::string> m;
    for (int l : level)
      m.push_back(kLevels[l]);
    return m;
  };
  json tried = json::array();
  std::vector<int64_t> peaks;
  // Each round raises every stage that does not fit by one level, until
  // all fit or those that do not recompute fully (levels only rise).
  for (;;) {
    peaks = peaksOf(modes());
    if (peaks.size() != level.size())
      return false;
    tried.push_back({{"remat", modes()}, {"peak_bytes", peaks}});
    bool raised = false;
    for (size_t s = 0; s < level.size(); ++s)
      if (budget > 0 && double(peaks[s]) > budget && level[s] < 2) {
        ++level[s];
        raised = true;
      }
    if (!raised)
      break;
  }
  chosen = modes();
  const bool uniform =
      std::all_of(chosen.begin(), chosen.end(),
                  [&](const std::string &m) { return m == chosen.front(); });
  const int most = *std::max_element(level.begin(), level.end());
  record = {{"mode", "auto"},
            {"chose", uniform ? json(chosen.front()) : json(chosen)},
            {"device_memory_bytes", budget},
            {"tried", tried},
            {"why", most == 0 ? "the plan fits without recomputation"
                    : most == 1
                        ? "without recomputation some stage does not fit; "
                          "selective recomputation there fits"
                        : "where neither no recomputation nor selective "
                          "recomputation fits, full recomputation keeps only "
                          "layer boundaries"}};
  if (!uniform)
    record["per_stage"] = true;
  return true;
}

} // namespace mlir::dtc
