//===- Search.h - the plan search's enumeration -----------------*- C++ -*-===//
//
// The search's closed forms (docs/design.md "The search"): every plan of
// the mesh (data, pipeline and tensor parallelism on whole mesh axes,
// micro-batches, recomputation, ZeRO stage, sequence parallelism) gets an
// estimated step time and memory per device from a few facts of the
// training step, in microseconds for thousands of plans. The driver then
// lowers the best few and ranks them by the plan evaluation (evaluatePlan),
// which is what the report shows. Plain C++: facts in, plans out.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLANNER_SEARCH_H
#define DTC_PLANNER_SEARCH_H

#include "dtc/CostModel/CostModel.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtc::search {

/// Forward or backward kernels of one size: what the plan evaluation
/// costs one by one (a roofline plus the profile's per-kernel overhead),
/// grouped so that a step of thousands of kernels is a few dozen classes.
struct KernelClass {
  /// One kernel's flops and memory traffic for the whole batch.
  double flops = 0, bytes = 0;
  /// How it spends its time (its rate in the hardware profile).
  ::dtc::kernels::CostClass cost = ::dtc::kernels::CostClass::Stream;
  /// Its independent products for the whole batch (attention's heads).
  double products = 1;
  /// A forward kernel (full recomputation runs it again), and a cheap one
  /// (selective recomputation runs it again).
  bool forward = false, cheap = false;
  int64_t count = 0;
  /// How a plan splits the kernel: with the batch (and tensor and sequence
  /// parallelism); with the batch's tokens only (a mixture of experts'
  /// dispatch, combine and slot_dot, whose token rows tensor parallelism
  /// keeps whole); over the experts (the experts' FFNs: each rank runs its
  /// experts on every token routed to them, so only ep splits them: the
  /// tensor-parallel layout keeps expert weights whole);
  /// or not at all (the routing, which reads every token on every rank).
  enum class Split { Batch, Tokens, Experts, Whole };
  Split split = Split::Batch;
};

/// What the estimates need of a training step (global shapes, one step of
/// the whole batch; modelFacts in Evaluate.h reads them off the IR).
struct ModelFacts {
  int64_t params = 0;
  /// Sequences per step (the data inputs' first dimension).
  int64_t batch = 0;
  /// Layers (dtc.layer) of the forward.
  int64_t layers = 0;
  /// Per layer (dtc.layer), one plus the flops of its ops in every phase:
  /// what the stage balancer (balanceStages) splits into pipeline stages.
  std::vector<double> layerFlops;
  /// Per layer, the activation bytes its forward keeps for the backward
  /// without recomputation (what storedNone sums).
  std::vector<double> layerStoredBytes;
  /// Per dense parameter (not an expert's), its elements and the layers
  /// whose forward reads it: a pipeline stage holds every parameter one of
  /// its layers reads (a tied embedding on the first stage and the last).
  struct ParamUse {
    double elements = 0;
    std::vector<int64_t> layers;
  };
  std::vector<ParamUse> paramUses;
  /// Model flops per step: forward, backward, and the forward flops of
  /// the ops selective recomputation recomputes.
  double forwardFlops = 0, backwardFlops = 0, cheapForwardFlops = 0;
  /// Bytes one step keeps from its forward for its backward, by
  /// recomputation: none, selective (what dtc-rematerialize leaves:
  /// recomputedOps), full (each layer's inputs).
  double storedNone = 0, storedSelective = 0, storedFull = 0;
  /// Of storedNone and storedSelective, the bytes in the residual stream's
  /// shapes, which tensor parallelism keeps whole without sequence
  /// parallelism (full recomputation keeps only such values).
  double storedInStreamNone = 0, storedInStreamSelective = 0;
  /// Bytes of the activations between two layers (the residual stream),
  /// on average: what a tensor-parallel block all-reduces and a pipeline
  /// stage sends.
  double boundaryBytes = 0;
  /// Whether sequence parallelism applies (token inputs [batch, seq]).
  bool sequenceInputs = false;
  /// The token inputs' sequence length (0: none).
  int64_t sequence = 0;
  /// Bytes of the keys of every forward attention (one of k and v, all
  /// layers, the whole batch): the blocks ring attention passes around.
  double attentionKeyBytes = 0;
  /// Forward attention ops (each one ring under sp).
  int64_t attentionLayers = 0;
  /// Mixture of experts (dtc.moe): the expert counts every layer's divides
  /// by (their gcd; 0 for a model without experts), the expert weights'
  /// elements (of params), and the moves of token slots between tokens'
  /// and experts' layouts a step makes (dispatch, combine and slot_dot,
  /// forward and backward: each one dtc.moe_exchange under expert
  /// parallelism) with their elements, whole batch, summed.
  int64_t experts = 0, expertParams = 0, slotMoves = 0;
  double slotMoveElements = 0;
  /// The step's kernels by class. When present, compute is each class's
  /// kernel time at its per-device, per-micro-batch size (so micro-batches
  /// and tensor parallelism pay for smaller GEMMs and more launches); when
  /// empty, the flops at the profile's best GEMM efficiency.
  std::vector<KernelClass> kernels;
  /// The optimizer's kernels by class (the update of every parameter,
  /// whole): once per step on each stage's parameters, split like them
  /// (Split::Batch: a dense parameter's, by tp; Split::Experts: an expert
  /// weight's, by ep) and under ZeRO over the ranks its state shards over.
  std::vector<KernelClass> optimizerKernels;
};

/// The plans to consider.
struct Space {
  std::vector<int64_t> mesh;
  std::string precision = "f32", optimizer = "adam";
  /// Bytes per device a plan must fit.
  double budget = 0;
  /// Micro-batch counts considered: divisors of the data-parallel shard's
  /// batch up to this.
  int64_t maxMicrobatches = 1024;
  /// Model chunks per stage the interleaved schedule is considered with.
  std::vector<int64_t> virtualStages = {2, 4};
  /// Chunks of the sequence each ring-attention rank holds (the zigzag
  /// layout's two; one otherwise): sp needs the sequence to divide by
  /// sp times this.
  int64_t sequenceChunksPerRank = 1;
  /// The largest bucket of gradient (and ZeRO) collectives, in bytes
  /// (dtc-schedule-collectives' bucket-bytes).
  int64_t bucketBytes = int64_t(25) << 20;
};

struct Candidate {
  /// sp: ring attention's degree (one mesh axis, between pp's and tp's);
  /// ep: expert parallelism's (whole axes between dp's and pp's, splitting
  /// the batch as dp does and every layer's experts); dp is the rest.
  int64_t dp = 1, tp = 1, pp = 1, sp = 1, ep = 1, microbatches = 1, zero = 0;
  std::string remat = "none";
  /// The pipeline schedule (pp > 1): 1f1b, zb (not with full
  /// recomputation, under which it is 1f1b) or interleaved with
  /// virtualStages model chunks per stage. gpipe is never considered: it
  /// has 1f1b's bubble and keeps every micro-batch in flight.
  std::string schedule = "1f1b";
  int64_t virtualStages = 1;
  bool sequenceParallel = false;
  /// How tensor parallelism splits each op (tp > 1): "megatron" (the
  /// closed forms' pattern) or "ilp" (the tensor-layout program's, which
  /// only the compiled plan's evaluation prices).
  std::string tpLayout = "megatron";
  /// The closed forms' step time and memory per device, and their parts.
  double seconds = 0, bytes = 0;
  double computeSeconds = 0, commSeconds = 0, bubble = 0;
  /// The part of commSeconds the kernels hide (seconds = compute + comm -
  /// hidden): without micro-batches the gradients' buckets reduce while the
  /// backward goes on and ZeRO-3 gathers a layer ahead, all but the last
  /// bucket or layer, at the profile's commOverlap.
  double hiddenSeconds = 0;
  bool fits = false;

  /// As --strategy and the other flags would write it, e.g.
  /// "dp=8,tp=8,pp=16 --microbatches 192 --remat full" (",sp=S" after pp
  /// when ring attention splits the sequence, ",ep=E" after it under expert
  /// parallelism; "--schedule zb" or
  /// "--schedule interleaved --virtual-stages V" when not 1f1b;
  /// "--tp-layout ilp" for the program's layout).
  std::string describe() const;
};

/// The closed forms' schedule terms for P stages, M micro-batches and v
/// chunks per stage: the bubble with unit costs (exact for 1f1b and
/// interleaved, and for zb once M >= P; zb below that is simulated) and the
/// micro-batches the busiest stage keeps in flight, in whole-stage units.
struct ScheduleTerms {
  double bubble = 0, inFlight = 1;
  /// The busiest pipeline stage's share of the step's layer flops, the
  /// largest share of the stored activations a stage keeps, and of the
  /// dense parameters a stage holds (1 without a pipeline; 1/pp when the
  /// layers split evenly).
  double stageShare = 1, storedShare = 1, paramShare = 1;
};
/// The shares of the busiest stage when the stage balancer splits the
/// layers into stages x chunks contiguous runs by `facts.layerFlops` and
/// chunk k runs on stage k mod stages: of the flops, of
/// `facts.layerStoredBytes` and of the dense parameters
/// (`facts.paramUses`; a parameter read on several stages counts on each)
/// (1/stages for what the facts lack).
struct StageShares {
  double flops = 1, stored = 1, params = 1;
};
StageShares busiestStageShares(const ModelFacts &facts, int64_t stages,
                               int64_t chunks);
ScheduleTerms scheduleTerms(const std::string &schedule, int64_t stages,
                            int64_t microbatches, int64_t virtualStages);

/// Every plan of `space`, estimated: those that fit first, fastest first,
/// then the others by memory. `hw` must have its links for the mesh
/// (forMesh).
std::vector<Candidate> enumerateCandidates(const ModelFacts &facts,
                                           const Space &space,
                                           const cost::HardwareProfile &hw);

} // namespace dtc::search

#endif // DTC_PLANNER_SEARCH_H
