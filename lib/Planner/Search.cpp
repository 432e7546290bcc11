//===- Search.cpp - every plan of a mesh, estimated -----------------------===//
//
// The closed forms rank plans; they are deliberately simple (the busiest
// stage's share of the layers' flops, kernels priced by class, Megatron's two
// all-reduces per layer and step, 1F1B's in-flight micro-batches) because
// the driver lowers the best few and ranks those by the real evaluation.
// What they must get right is the order of magnitude of each term, so the
// best plan is among the few lowered.
//
//===----------------------------------------------------------------------===//
#include "dtc/Planner/Search.h"
#include "dtc/Planner/StageBalance.h"
#include "dtc/artifact/Schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

using namespace dtc::search;
using dtc::cost::CollectiveKind;
using dtc::cost::HardwareProfile;
using dtc::cost::Link;

std::string Candidate::describe() const {
  std::ostringstream s;
  s << "dp=" << dp << ",tp=" << tp << ",pp=" << pp;
  if (sp > 1)
    s << ",sp=" << sp;
  if (ep > 1)
    s << ",ep=" << ep;
  if (zero)
    s << ",zero=" << zero;
  if (sequenceParallel)
    s << " --sequence-parallel";
  if (microbatches > 1)
    s << " --microbatches " << microbatches;
  if (pp > 1 && schedule != "1f1b")
    s << " --schedule " << schedule;
  if (virtualStages > 1)
    s << " --virtual-stages " << virtualStages;
  if (tp > 1 && tpLayout != "megatron")
    s << " --tp-layout " << tpLayout;
  s << " --remat " << remat;
  return s.str();
}

ScheduleTerms dtc::search::scheduleTerms(const std::string &schedule,
                                         int64_t stages, int64_t microbatches,
                                         int64_t virtualStages) {
  ScheduleTerms t;
  if (stages <= 1)
    return t;
  const double p = double(stages), m = double(microbatches),
               v = double(virtualStages);
  if (schedule == "zb" && microbatches < stages) {
    // Below P micro-batches ZB-H1 has no closed form; the schedule is
    // small (fewer than P^2 actions), so run it.
    sched::Schedule s;
    std::string error;
    if (sched::generate("zb", int(stages), int(microbatches), 1, s, error)) {
      sched::Simulation sim = sched::simulate(s);
      if (sim.ok) {
        t.bubble = sim.bubble;
        t.inFlight =
            *std::max_element(sim.peakInFlight.begin(), sim.peakInFlight.end());
        return t;
      }
    }
  }
  if (schedule == "interleaved") {
    // The first stage runs 2(P-1) + (v-1)P chunk forwards ahead, then one
    // more before its first backward; each chunk keeps 1/v of a stage.
    t.bubble = (p - 1) / (v * m + p - 1);
    t.inFlight = std::min(2 * (p - 1) + (v - 1) * p + 1, v * m) / v;
  } else if (schedule == "zb") {
    // ZB-H1: 1F1B's order with W deferred into the bubbles; every stage
    // keeps P micro-batches (in flight or waiting for their W).
    t.bubble = (p - 1) / (3 * m + p - 1);
    t.inFlight = std::min(p, m);
  } else {
    t.bubble = dtc::cost::bubbleFraction(stages, microbatches);
    t.inFlight = schedule == "gpipe" ? m : std::min(p, m);
  }
  return t;
}

StageShares dtc::search::busiestStageShares(const ModelFacts &facts,
                                            int64_t stages, int64_t chunks) {
  StageShares shares;
  if (stages <= 1)
    return shares;
  shares.flops = shares.stored = shares.params = 1.0 / double(stages);
  const int64_t groups = stages * chunks;
  const size_t layers = facts.layerFlops.size();
  if (int64_t(layers) < groups)
    return shares;
  const llvm::SmallVector<int64_t> groupOf =
      mlir::dtc::balanceRuns(facts.layerFlops, groups);
  // The largest of `perStage` over `total` (`even` when there is none).
  auto largestShare = [](const std::vector<double> &perStage, double total,
                         double even) {
    return total > 0
               ? *std::max_element(perStage.begin(), perStage.end()) / total
               : even;
  };
  // `perLayer` summed over the layers of each stage: the largest share.
  auto busiest = [&](const std::vector<double> &perLayer, double even) {
    std::vector<double> perStage(size_t(stages), 0.0);
    double total = 0;
    for (size_t layer = 0; layer < layers; ++layer) {
      perStage[size_t(groupOf[layer] % stages)] += perLayer[layer];
      total += perLayer[layer];
    }
    return largestShare(perStage, total, even);
  };
  shares.flops = busiest(facts.layerFlops, shares.flops);
  if (facts.layerStoredBytes.size() == layers)
    shares.stored = busiest(facts.layerStoredBytes, shares.stored);
  std::vector<double> paramsOnStage(size_t(stages), 0.0);
  double totalParams = 0;
  for (const ModelFacts::ParamUse &use : facts.paramUses) {
    std::vector<bool> held(size_t(stages), false);
    for (int64_t layer : use.layers)
      if (layer >= 0 && size_t(layer) < layers)
        held[size_t(groupOf[size_t(layer)] % stages)] = true;
    for (int64_t stage = 0; stage < stages; ++stage)
      if (held[size_t(stage)])
        paramsOnStage[size_t(stage)] += use.elements;
    totalParams += use.elements;
  }
  shares.params = largestShare(paramsOnStage, totalParams, shares.params);
  return shares;
}

namespace {

int64_t product(const std::vector<int64_t> &mesh, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t a = from; a < to; ++a)
    p *= mesh[a];
  return p;
}

/// A count of the dense parameters and of the experts' (their elements, or
/// their tensors).
struct DenseAndExperts {
  double dense = 0, experts = 0;
};

/// The parameters a device of the busiest stage holds (before ZeRO): the
/// dense ones split by tp, that stage's share of them (`terms.paramShare`),
/// the experts' by ep and pp (Megatron's tensor-parallel pattern keeps an
/// expert's weights whole).
DenseAndExperts localParams(const ModelFacts &f, const ScheduleTerms &terms,
                            const Candidate &c) {
  return {double(f.params - f.expertParams) * terms.paramShare / double(c.tp),
          double(f.expertParams) / double(c.pp * c.ep)};
}

/// The parameter tensors a stage holds (one optimizer kernel each), dense
/// and experts.
DenseAndExperts stageTensors(const ModelFacts &f, const Candidate &c) {
  DenseAndExperts tensors;
  for (const KernelClass &k : f.optimizerKernels)
    (k.split == KernelClass::Split::Experts ? tensors.experts
                                            : tensors.dense) +=
        double(k.count) / double(c.pp);
  return tensors;
}

/// The kernel seconds a rank of the busiest stage runs per micro-batch
/// and in the optimizer's step: what its collectives' groups compute
/// between calls (Link::syncOverheadAfter).
struct ComputeSeconds {
  double microbatch = 0, optimizer = 0;
};

/// What the axes splitting the batch communicate in a step: expert
/// parallelism's token-slot exchanges and the gradients' reduction (with
/// ZeRO-3's parameter gathers).
double batchCommSeconds(const ModelFacts &f, const Space &space,
                        const HardwareProfile &hw, size_t dpEnd, size_t epEnd,
                        size_t ppEnd, const ScheduleTerms &terms,
                        const Candidate &c, double stretch,
                        const ComputeSeconds &computed, double &overlappable) {
  const int64_t batchWays = c.dp * c.ep;
  const double m = double(c.microbatches), p = double(c.pp);
  double comm = 0;
  // Expert parallelism: each dispatch, combine and slot_dot moves its
  // rank's token slots to their experts' ranks or back, (ep-1)/ep of them
  // when routing is even (the report's rule), in the activations' type.
  if (c.ep > 1 && f.slotMoves > 0) {
    Link link = hw.linkOver(dpEnd, epEnd);
    link.syncOverhead =
        link.syncOverheadAfter(computed.microbatch / (double(f.slotMoves) / p));
    const double e = double(c.ep);
    const double perMove = f.slotMoveElements / double(f.slotMoves) /
                           double(batchWays * c.sp) * (e - 1) / e *
                           (space.precision == "f32" ? 4.0 : 2.0);
    comm += double(f.slotMoves) / p *
            dtc::cost::collectiveTime(CollectiveKind::AllToAll, c.ep, perMove,
                                      link) *
            stretch;
  }
  // Data parallelism: the gradients' all-reduce (ZeRO: reduce-scatter and
  // gather, the same bytes) once per step, over the sp ring too (each of
  // its ranks holds its positions' terms) and over the ep axes but for the
  // experts' weights, which those split; ZeRO-3 gathers the parameters for
  // each micro-batch's forward and backward too.
  const dtc::cost::BytesPerParam bpp =
      dtc::cost::bytesPerParam(space.precision, space.optimizer);
  const DenseAndExperts local = localParams(f, terms, c);
  // Parameter tensors per stage, dense and experts: ZeRO reduce-scatters
  // each one's gradient and gathers it back updated (and ZeRO-3 gathers
  // each one per use). Without micro-batches these calls share buckets of
  // at most space.bucketBytes, and under ZeRO-3 a bucket holds at most one
  // layer's (its gathers are issued per layer, and the reduce-scatters'
  // buckets end where they come); ZeRO-1's reduce-scatters stay a call
  // each (half the pair's latency per tensor, half per bucket); with
  // micro-batches all are a call each. Without ZeRO the gradients go in
  // one bucketed all-reduce.
  const DenseAndExperts tensors = stageTensors(f, c);
  const double layersPerStage = std::max(1.0, double(f.layers) / p);
  // Buckets of at most space.bucketBytes that `bytes` fill.
  auto pieces = [&](double bytes) {
    return std::max(
        1.0,
        std::ceil(bytes / double(std::max<int64_t>(space.bucketBytes, 1))));
  };
  auto callsOf = [&](double tensors, double bytes) {
    if (c.zero == 0)
      return 1.0;
    tensors = std::max(1.0, tensors);
    if (c.pp > 1 || c.microbatches > 1)
      return tensors;
    double calls = pieces(bytes);
    if (c.zero >= 3)
      calls = std::max(calls, layersPerStage);
    calls = std::clamp(calls, 1.0, tensors);
    return c.zero == 1 ? (calls + tensors) / 2 : calls;
  };
  // Without micro-batches the step issues the gradients' buckets as the
  // backward completes them (ZeRO-1 reduce-scatters in the optimizer
  // instead) and ZeRO-3's gathers a layer ahead: all but the last bucket or
  // layer can run beside the kernels.
  const bool issuedDuringCompute = c.pp == 1 && c.microbatches == 1;
  auto gradientSync = [&](double params, double tensors, int64_t ways,
                          size_t end) {
    if (ways * c.sp <= 1 || params <= 0)
      return;
    Link link = hw.linkOver(0, end);
    if (c.sp > 1) {
      const Link ring = hw.linkOver(ppEnd, ppEnd + 1);
      if (ring.bandwidth * ring.efficiency < link.bandwidth * link.efficiency)
        link = ring;
    }
    const double group = double(ways * c.sp),
                 calls = callsOf(tensors, params * bpp.grads);
    // Plain data parallelism's all-reduces after a flush run back to back:
    // their group, together after the first, pays the link's sync overhead
    // once (as the evaluation prices it). ZeRO's interleave with the
    // optimizer's updates and pay it each, after an update's computation
    // (ZeRO-1's always: it reduce-scatters in the optimizer); buckets
    // issued during the backward pay it after a bucket's share of it.
    const bool backToBack = !issuedDuringCompute && c.zero == 0;
    Link perCall = link;
    perCall.syncOverhead =
        backToBack ? 0
        : issuedDuringCompute && c.zero != 1
            ? link.syncOverheadAfter(computed.microbatch / calls)
            : link.syncOverheadAfter(computed.optimizer /
                                     std::max(1.0, tensors));
    const double seconds =
        calls * dtc::cost::collectiveTime(
                    CollectiveKind::AllReduce, ways * c.sp,
                    2.0 * (group - 1) / group * params * bpp.grads / calls,
                    perCall) +
        (backToBack ? link.syncOverhead : 0.0);
    comm += seconds;
    if (issuedDuringCompute && c.zero != 1) {
      const double buckets = pieces(params * bpp.grads);
      overlappable += seconds * (buckets - 1) / buckets;
    }
  };
  gradientSync(local.dense, tensors.dense, batchWays, epEnd);
  gradientSync(local.experts, tensors.experts, c.dp, dpEnd);
  auto parameterGathers = [&](double params, double tensors, int64_t ways,
                              size_t end) {
    if (c.zero < 3 || ways <= 1 || params <= 0)
      return;
    const double d = double(ways),
                 calls = callsOf(tensors, params * bpp.params);
    // A gather per layer (or bucket) in each micro-batch's forward and
    // backward.
    Link link = hw.linkOver(0, end);
    link.syncOverhead =
        link.syncOverheadAfter(computed.microbatch / (2.0 * calls));
    const double seconds = 2.0 * m * calls *
                           dtc::cost::collectiveTime(
                               CollectiveKind::AllGather, ways,
                               (d - 1) / d * params * bpp.params / calls, link);
    comm += seconds;
    if (issuedDuringCompute)
      overlappable += seconds * (calls - 1) / calls;
  };
  parameterGathers(local.dense, tensors.dense, batchWays, epEnd);
  parameterGathers(local.experts, tensors.experts, c.dp, dpEnd);
  return comm;
}

/// Memory per device: the state by ZeRO stage (over every axis splitting
/// the batch, but for the experts' weights, which the ep axes split
/// instead), and the activations of the micro-batches the schedule keeps in
/// flight on its busiest stage.
double bytesPerDevice(const ModelFacts &f, const Space &space,
                      const ScheduleTerms &terms, const Candidate &c) {
  const int64_t batchWays = c.dp * c.ep;
  const double m = double(c.microbatches);
  const dtc::cost::BytesPerParam bpp =
      dtc::cost::bytesPerParam(space.precision, space.optimizer);
  const DenseAndExperts local = localParams(f, terms, c);
  auto stateBytes = [&](double params, double d) {
    return params * (bpp.params / (c.zero >= 3 ? d : 1.0) +
                     bpp.grads / (c.zero >= 2 ? d : 1.0) +
                     bpp.optimizer / (c.zero >= 1 ? d : 1.0));
  };
  const double state = stateBytes(local.dense, double(batchWays)) +
                       stateBytes(local.experts, double(c.dp));
  const double d = double(batchWays);
  const double stored = c.remat == "full"        ? f.storedFull
                        : c.remat == "selective" ? f.storedSelective
                                                 : f.storedNone;
  // Tensor parallelism splits what a layer keeps but the residual stream
  // (the layer boundaries, full recomputation's whole store, and the
  // norms' inputs and outputs), which sequence parallelism splits too.
  const double inStream = c.remat == "full" ? f.storedFull
                          : c.remat == "selective"
                              ? std::min(f.storedInStreamSelective, stored)
                              : std::min(f.storedInStreamNone, stored);
  const double streamSplit = c.sequenceParallel ? double(c.tp) : 1.0;
  const double storedHere =
      (stored - inStream) / double(c.tp) + inStream / streamSplit;
  // The stage keeping most: the stage balancer's split of the layers.
  const double perMicrobatch =
      storedHere / (d * m) * terms.storedShare / double(c.sp);
  const double inFlight = c.pp > 1 ? terms.inFlight : 1.0;
  // A recomputed layer's forward is live again while its backward runs.
  const double working = c.remat == "none"
                             ? 0.0
                             : f.storedNone /
                                   double(std::max<int64_t>(f.layers, 1)) /
                                   (d * m) / double(c.tp * c.sp);
  return state + perMicrobatch * inFlight + working;
}

/// The optimizer's kernels, once per step after the flush: each stage
/// updates its parameters, tp's (dense) or ep's (experts) share of each,
/// and under ZeRO only the shard of it its rank keeps the state of (in
/// f32: the master weights and their state).
double optimizerSeconds(const ModelFacts &f, const HardwareProfile &hw,
                        const Candidate &c) {
  double seconds = 0;
  for (const KernelClass &k : f.optimizerKernels) {
    const bool experts = k.split == KernelClass::Split::Experts;
    const double zeroWays =
        c.zero >= 1 ? double(experts ? c.dp : c.dp * c.ep) : 1.0;
    const double share = double(experts ? c.ep : c.tp) * zeroWays;
    seconds += double(k.count) / double(c.pp) *
               dtc::cost::kernelTime(k.flops / share, k.bytes / share, k.cost,
                                     hw, /*f32=*/true, k.products / share);
  }
  return seconds;
}

/// The estimate of one plan: its dp axes are [0, dpEnd), its ep axes
/// [dpEnd, epEnd), its pp axes [epEnd, ppEnd), then sp's one axis (when
/// c.sp > 1) and tp's the rest.
void estimate(const ModelFacts &f, const Space &space,
              const HardwareProfile &hw, size_t dpEnd, size_t epEnd,
              size_t ppEnd, const ScheduleTerms &terms, Candidate &c) {
  const size_t axes = space.mesh.size();
  const size_t tpBegin = ppEnd + (c.sp > 1 ? 1 : 0);
  // Expert parallelism splits the batch as data parallelism does.
  const int64_t batchWays = c.dp * c.ep;
  const double devices = double(batchWays * c.tp * c.pp * c.sp);
  const bool f32 = space.precision == "f32";
  const double peak = f32 ? hw.peakFlopsF32 : hw.peakFlopsBf16;
  const double recompute = c.remat == "full"        ? f.forwardFlops
                           : c.remat == "selective" ? f.cheapForwardFlops
                                                    : 0.0;
  const double m = double(c.microbatches), p = double(c.pp);
  c.bubble = terms.bubble;
  const double stretch =
      dtc::cost::bubbleStretch(c.bubble, batchWays * c.tp * c.pp, hw);
  ComputeSeconds computed;
  if (f.kernels.empty()) {
    // The busiest stage's share of the flops, over the ranks of a stage.
    const double perStage = (f.forwardFlops + f.backwardFlops + recompute) /
                            (devices / p) / (peak * hw.gemm.max);
    computed.microbatch = perStage * terms.stageShare / m;
    c.computeSeconds =
        dtc::cost::pipelineCompute(perStage * terms.stageShare, perStage / p,
                                   c.bubble, batchWays * c.tp * c.pp, hw);
  } else {
    // Each kernel splits over the data, tensor and sequence ranks and the
    // micro-batches (KernelClass::Split says which), and a stage runs 1/pp
    // of them, once per micro-batch.
    auto ways = [&](KernelClass::Split split) {
      switch (split) {
      case KernelClass::Split::Batch:
        return double(batchWays * c.tp * c.sp);
      case KernelClass::Split::Tokens:
        return double(batchWays * c.sp);
      case KernelClass::Split::Experts:
        return double(c.ep);
      case KernelClass::Split::Whole:
        return 1.0;
      }
      return 1.0;
    };
    double perMicrobatch = 0;
    for (const KernelClass &k : f.kernels) {
      const double share = m * ways(k.split);
      const bool again = k.forward && (c.remat == "full" ||
                                       (c.remat == "selective" && k.cheap));
      perMicrobatch +=
          double(k.count) * (again ? 2.0 : 1.0) *
          dtc::cost::kernelTime(k.flops / share, k.bytes / share, k.cost, hw,
                                f32, k.products / share);
    }
    // The busiest stage runs its share of the layers (the stage balancer's
    // split: a layer is not divided, so 2 layers on 4 stages leave one
    // stage a whole layer), the mean stage 1/pp of them.
    computed.microbatch = perMicrobatch * terms.stageShare;
    c.computeSeconds = dtc::cost::pipelineCompute(
        perMicrobatch * m * terms.stageShare, perMicrobatch * m / p, c.bubble,
        batchWays * c.tp * c.pp, hw);
  }
  computed.optimizer = optimizerSeconds(f, hw, c);
  c.computeSeconds += computed.optimizer;
  // With micro-batches the artifact zeroes the stage's gradients (a fill
  // each) and adds each micro-batch's into them (out += in: three passes).
  if (c.microbatches > 1 && !f.optimizerKernels.empty()) {
    const DenseAndExperts local = localParams(f, terms, c);
    const DenseAndExperts stage = stageTensors(f, c);
    const double tensors = stage.dense + stage.experts;
    const double bytes =
        (local.dense + local.experts) *
        dtc::cost::bytesPerParam(space.precision, space.optimizer).grads /
        tensors;
    c.computeSeconds +=
        tensors *
        (m * stretch *
             dtc::cost::kernelTime(0, 3 * bytes, dtc::cost::CostClass::Stream,
                                   hw, f32) +
         dtc::cost::kernelTime(0, bytes, dtc::cost::CostClass::Stream, hw,
                               f32));
  }

  // Tensor parallelism: each layer all-reduces (or, with sequence
  // parallelism, reduce-scatters and gathers) its output in the forward
  // and its input gradient in the backward; a full recomputation does not
  // repeat it (dtc recomputes after the all-reduce).
  double comm = 0;
  const double layersPerStage = double(f.layers) * terms.stageShare;
  // Per step and rank: ring attention splits the sequence too.
  const double shard = f.boundaryBytes / double(batchWays * c.sp);
  if (c.tp > 1) {
    const Link link = hw.linkOver(tpBegin, axes);
    const double t = double(c.tp);
    const double sent = 2.0 * (t - 1) / t * shard;
    const double steps = 2.0 * (t - 1);
    // One call per micro-batch (two with sequence parallelism: a
    // reduce-scatter and a gather), each with the link's sync overhead
    // after the layer's forward's or backward's share of its kernels.
    const double calls = c.sequenceParallel ? 2.0 : 1.0;
    const double sync = link.syncOverheadAfter(computed.microbatch /
                                               (layersPerStage * 2.0 * calls));
    comm += layersPerStage * 2.0 *
            (m * (steps * link.latency + calls * sync) +
             sent / (link.bandwidth * link.efficiency)) *
            stretch;
  }
  // Pipeline: each micro-batch sends its activation forward and its
  // gradient back, one per stage boundary on the critical path (one per
  // chunk boundary when interleaved: v times as many).
  if (c.pp > 1) {
    const Link link = hw.linkOver(dpEnd, ppEnd);
    const double bytes = shard / m / (c.sequenceParallel ? double(c.tp) : 1.0);
    comm += 2.0 * m * double(c.virtualStages) *
            dtc::cost::sendRecvTime(bytes, link) * stretch;
  }
  // Ring attention: per attention layer and micro-batch the forward
  // shifts each key and value block n-1 times, the backward the blocks and
  // their gradients n-1 times and the gradients home once (6(n-1)+2
  // blocks); a recomputed forward runs its ring again (docs/design.md
  // "Ring attention"). Nothing overlaps them yet.
  if (c.sp > 1 && f.attentionLayers > 0) {
    const Link link = hw.linkOver(ppEnd, ppEnd + 1);
    const double n = double(c.sp);
    const double block = f.attentionKeyBytes / double(f.attentionLayers) /
                         double(batchWays * c.tp * c.sp) / m;
    const double shifts =
        6.0 * (n - 1) + 2.0 + (c.remat == "none" ? 0.0 : 2.0 * (n - 1));
    const double layersHere = double(f.attentionLayers) * terms.stageShare;
    comm += m * layersHere * shifts * dtc::cost::sendRecvTime(block, link) *
            stretch;
  }
  double overlappable = 0;
  comm += batchCommSeconds(f, space, hw, dpEnd, epEnd, ppEnd, terms, c, stretch,
                           computed, overlappable);
  c.commSeconds = comm;
  c.hiddenSeconds = hw.commOverlap * std::min(overlappable, c.computeSeconds);
  c.seconds = c.computeSeconds + c.commSeconds - c.hiddenSeconds;

  c.bytes = bytesPerDevice(f, space, terms, c);
  c.fits = space.budget <= 0 || c.bytes <= space.budget;
}

using TermsCache =
    std::map<std::tuple<std::string, int64_t, int64_t, int64_t>, ScheduleTerms>;

/// The plans of one split of the mesh axes (`base`'s degrees): every
/// micro-batch count, schedule, recomputation, ZeRO stage and sequence
/// parallelism, estimated.
void enumeratePlansOf(const ModelFacts &facts, const Space &space,
                      const HardwareProfile &hw, const Candidate &base,
                      size_t dpEnd, size_t epEnd, size_t ppEnd,
                      TermsCache &termsOf, std::vector<Candidate> &out) {
  const bool ring = base.sp > 1;
  const int64_t perShard = facts.batch / (base.dp * base.ep);
  const int64_t maxMicrobatches =
      facts.experts > 0 ? 1 : std::min(perShard, space.maxMicrobatches);
  for (int64_t m = 1; m <= maxMicrobatches; ++m) {
    if (perShard % m != 0)
      continue;
    // Schedules (pp > 1): 1f1b; zb; interleaved with v chunks per
    // stage where each chunk has a layer and M divides by pp.
    std::vector<std::pair<std::string, int64_t>> schedules = {{"1f1b", 1}};
    if (base.pp > 1) {
      schedules.push_back({"zb", 1});
      if (m % base.pp == 0)
        for (int64_t v : space.virtualStages)
          if (v > 1 && base.pp * v <= facts.layers)
            schedules.push_back({"interleaved", v});
    }
    for (const auto &[schedule, v] : schedules) {
      auto key = std::make_tuple(schedule, base.pp, m, v);
      auto known = termsOf.find(key);
      if (known == termsOf.end()) {
        ScheduleTerms terms = scheduleTerms(schedule, base.pp, m, v);
        const StageShares shares = busiestStageShares(facts, base.pp, v);
        terms.stageShare = shares.flops;
        terms.storedShare = shares.stored;
        terms.paramShare = shares.params;
        known = termsOf.emplace(key, terms).first;
      }
      const ScheduleTerms terms = known->second;
      for (const char *remat : {"none", "selective", "full"}) {
        // zb defers no W on a stage that recomputes fully: it is
        // 1f1b there (Plan::pendingWeightGradients).
        if (schedule == "zb" && std::string(remat) == "full")
          continue;
        for (int64_t zero = 0; zero <= (base.dp * base.ep > 1 ? 3 : 0); ++zero)
          for (bool sp : {false, true}) {
            // Megatron's sequence parallelism does not combine with
            // the ring's yet.
            if (sp && (base.tp == 1 || !facts.sequenceInputs || ring))
              continue;
            Candidate c = base;
            c.microbatches = m;
            c.remat = remat;
            c.zero = zero;
            c.sequenceParallel = sp;
            c.schedule = schedule;
            c.virtualStages = v;
            estimate(facts, space, hw, dpEnd, epEnd, ppEnd, terms, c);
            out.push_back(c);
          }
      }
    }
  }
}

} // namespace

std::vector<Candidate>
dtc::search::enumerateCandidates(const ModelFacts &facts, const Space &space,
                                 const HardwareProfile &hw) {
  std::vector<Candidate> out;
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>> seen;
  // Plans differ in far more ways than schedules do (zb below P
  // micro-batches is simulated).
  TermsCache termsOf;
  const size_t axes = space.mesh.size();
  // A mixture of experts routes the whole batch at once: its plans have
  // one micro-batch, and its reshapes merge the sequence that ring
  // attention would split.
  const bool experts = facts.experts > 0;
  for (size_t dpEnd = 0; dpEnd <= axes; ++dpEnd)
    for (size_t epEnd = dpEnd; epEnd <= (experts ? axes : dpEnd); ++epEnd)
      for (size_t ppEnd = epEnd; ppEnd <= axes; ++ppEnd)
        for (bool ring : {false, true}) {
          Candidate base;
          base.dp = product(space.mesh, 0, dpEnd);
          base.ep = product(space.mesh, dpEnd, epEnd);
          base.pp = product(space.mesh, epEnd, ppEnd);
          // Ring attention takes the one axis after pp's (as --strategy
          // places it), over a sequence that divides.
          if (ring && (experts || ppEnd == axes || space.mesh[ppEnd] < 2 ||
                       facts.attentionLayers == 0 || facts.sequence <= 0 ||
                       facts.sequence % (space.mesh[ppEnd] *
                                         space.sequenceChunksPerRank) !=
                           0))
            continue;
          base.sp = ring ? space.mesh[ppEnd] : 1;
          base.tp = product(space.mesh, ppEnd + (ring ? 1 : 0), axes);
          // Axes of size 1 give the same degrees under several splits.
          if (!seen.insert({base.dp, base.ep, base.pp, base.sp, base.tp})
                   .second)
            continue;
          if (base.pp > facts.layers ||
              facts.batch % (base.dp * base.ep) != 0 ||
              (experts && facts.experts % base.ep != 0))
            continue;
          enumeratePlansOf(facts, space, hw, base, dpEnd, epEnd, ppEnd, termsOf,
                           out);
        }
  std::stable_sort(out.begin(), out.end(),
                   [](const Candidate &a, const Candidate &b) {
                     if (a.fits != b.fits)
                       return a.fits;
                     return a.fits ? a.seconds < b.seconds : a.bytes < b.bytes;
                   });
  return out;
}
