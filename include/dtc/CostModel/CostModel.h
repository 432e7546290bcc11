//===- CostModel.h - hardware profiles and alpha-beta costs -----*- C++ -*-===//
//
// One library for every consumer of costs (the plan report today; the
// intra-op ILP, the stage balancer and the explain output later). Plain C++:
// it knows devices, links and formulas, not IR.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COSTMODEL_COSTMODEL_H
#define DTC_COSTMODEL_COSTMODEL_H

#include "dtc/artifact/Vocabulary.h"
#include "dtc/kernels/CostClass.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtc::cost {

using ::dtc::kernels::CostClass;

struct Link {
  double bandwidth = 0; // bytes/s per direction, per device
  double latency = 0;   // seconds per message step
  /// Share of `bandwidth` the collectives reach (NCCL's bus bandwidth over
  /// the link's): protocol overhead, synchronisation, imperfect pipelining.
  double efficiency = 1;
  /// Seconds every collective call adds when the ranks compute between
  /// calls on cores they share (a calibrated cpu profile): the group goes on
  /// only once its last member has had its time slice, and the members
  /// that wait wake and sleep beside the ones computing. Zero for devices
  /// of their own (the builtin GPU profiles).
  double syncOverhead = 0;
  /// Seconds of computation between a group's calls under which the sync
  /// overhead shrinks in proportion: ranks that computed for less than a
  /// few time slices come apart by less (a calibrated cpu profile: 8
  /// ranks on 2 cores added 0.8, 1.3, 2.4 and 2.3 ms after 3, 7, 15 and
  /// 30 ms of matmuls). Zero: the whole overhead after any computation.
  double syncRamp = 0;
  /// The sync overhead of a call after `computedSeconds` of kernels since
  /// the group's previous call: none right after it (the group is still
  /// together).
  double syncOverheadAfter(double computedSeconds) const {
    if (computedSeconds <= 0)
      return 0;
    if (syncRamp <= 0 || computedSeconds >= syncRamp)
      return syncOverhead;
    return syncOverhead * computedSeconds / syncRamp;
  }
};

/// How close a dense kernel comes to the peak as a function of its size
/// (a Calculon-style efficiency curve, here in closed form): a kernel of
/// f flops runs at `max` * f / (f + halfFlops) of the peak, so small GEMMs
/// (launch, tail effects, too few tiles to fill the device) are slow and
/// large ones saturate at `max`.
struct GemmEfficiency {
  double max = 1;
  double halfFlops = 0;
  double at(double flops) const {
    return flops <= 0 ? max : max * flops / (flops + halfFlops);
  }
};

/// A memory-bound class's own line: `overhead` seconds per call plus its
/// bytes at `bandwidth` (what it achieves, bytes/s).
struct MemoryLine {
  double bandwidth = 0;
  double overhead = 0;
};

struct HardwareProfile {
  std::string name;
  double peakFlopsF32 = 0;
  double peakFlopsBf16 = 0;
  double memoryBytes = 0;
  double memoryBandwidth = 0;
  /// Dense kernels' efficiency by size; memory-bound kernels reach
  /// `memoryEfficiency` of the bandwidth; every kernel costs at least
  /// `kernelOverhead` seconds (launch and synchronisation).
  GemmEfficiency gemm;
  double memoryEfficiency = 1;
  /// The kernel classes that run at their own rate (a calibrated cpu
  /// profile, or a file's `kernel_classes`): fused attention's efficiency
  /// curves (per head), the row reductions' line and the Adam update's.
  /// Unset, attention follows `gemm` and the others the memory bandwidth
  /// at `memoryEfficiency` plus `kernelOverhead`, as every stream kernel
  /// does.
  std::optional<GemmEfficiency> attention, attentionGrad;
  std::optional<MemoryLine> rowReduction, optimizer;
  double kernelOverhead = 0;
  /// The share of a collective's time that kernels running meanwhile hide
  /// when it overlaps them (a data-parallel gradient bucket during the
  /// backward): GPUs run collectives beside the kernels, losing some of it
  /// to the SMs and memory bandwidth the two share; CPU ranks reduce on the
  /// cores their kernels use (0).
  double commOverlap = 0;
  /// Link of each mesh axis, outermost first (filled by forMesh()).
  std::vector<Link> axes;
  /// Builtin profiles describe a node link and a cluster link; the last mesh
  /// axis gets the node link when it fits in a node.
  Link nodeLink, clusterLink;
  int devicesPerNode = 8;
  /// Measured links by group size (a calibrated cpu profile): an axis of s
  /// devices gets the link of the smallest group of at least s measured.
  std::map<int64_t, Link> groupLinks;
  /// Cores every device of the mesh shares (a calibrated cpu profile: the
  /// ranks of `dtc run` on one machine); 0 when each device is its own.
  double sharedCores = 0;
  /// Where the numbers come from, said for the report ("" for a file or a
  /// builtin of published figures).
  std::string source;

  /// Sizes of the mesh's axes (filled by forMesh()).
  std::vector<int64_t> meshShape;

  /// Per-axis links for `mesh`; explicit axes (from a JSON file) must cover
  /// every mesh axis. Returns an error message or "".
  std::string forMesh(const std::vector<int64_t> &mesh);
  /// The link a collective or message over the mesh axes `meshAxes` runs
  /// on: the slowest of theirs (bandwidth x efficiency); with measured
  /// group links, the one measured for a group of all those axes' devices
  /// (a calibrated cpu profile times the ring of each group size: a
  /// 4-rank all-reduce on a 2x2 mesh is a group of 4, not of 2). No axes:
  /// a link that costs nothing.
  Link linkOver(const std::vector<int64_t> &meshAxes) const;
  /// linkOver of the axes [from, to).
  Link linkOver(size_t from, size_t to) const;

private:
  /// The link measured for the smallest group of at least `devices`, else
  /// the largest group's (groupLinks must not be empty).
  Link measuredGroupLink(int64_t devices) const;
};

/// The compute time of a step on `devices` devices whose busiest pipeline
/// stage works `busiest` seconds and whose stages `mean` seconds on
/// average (at the profile's rates), through a schedule idle for `bubble`
/// of its time: the busiest stage stretched by 1/(1 - bubble) when each
/// device is its own. When more devices than cores share them
/// (hw.sharedCores), an idle or lighter stage gives its core to a busier
/// one, so the step is the larger of all ranks' work over the cores (the
/// mean at the profile's shared rates) and the busiest stage's critical
/// path at a whole core's speed (8 CPU ranks on 2 cores, pp=8: stages of
/// 0.17-0.27 s at the shared rates ran in 0.22-0.24 s, their mean 0.20-0.22).
double pipelineCompute(double busiest, double mean, double bubble,
                       int64_t devices, const HardwareProfile &hw);
/// How much a pipeline's bubble stretches the work of a stage of equal
/// stages (pipelineCompute of 1 s of work on every stage): what runs per
/// micro-batch besides the kernels (its communication) stretches by it.
double bubbleStretch(double bubble, int64_t devices, const HardwareProfile &hw);

/// Where `dtc calibrate` keeps this machine's measured cpu profile:
/// $DTC_CACHE_DIR/cpu-calibration.json, else under $XDG_CACHE_HOME/dtc, else
/// ~/.cache/dtc.
std::string cpuCalibrationPath();

/// The cpu profile `dtc calibrate` measured (the file at `path`) for a mesh
/// of `devices` ranks: the entry measured on that many ranks, else on the
/// fewest above it, else on the most. nullopt with `error` when the file is
/// not a calibration.
std::optional<HardwareProfile> loadCpuCalibration(const std::string &path,
                                                  int64_t devices,
                                                  std::string &error);

/// The profile as a JSON file for --hw would give it (what the report
/// records; its axes are the mesh's once forMesh ran).
std::string profileJson(const HardwareProfile &hw);

/// `cpu`, `a100`, `h100`, or a JSON file with the same fields. Returns
/// nullopt and sets `error` when the name is unknown or the file is bad.
std::optional<HardwareProfile> loadHardware(const std::string &nameOrFile,
                                            std::string &error);

/// The artifact's collective kinds (include/dtc/artifact/Vocabulary.h).
using ::dtc::artifact::CollectiveKind;

/// Bytes one device sends in the runtime's collective algorithms
/// (docs/runtime.md "Collectives"), the maximum over the group, from the
/// element counts of its LOCAL input and output buffers:
///  - all_reduce of c elements: a ring reduce-scatter then a ring
///    all-gather over n chunks (chunk j has c/n elements, one more for
///    j < c % n); device r sends every chunk but (r+1) % n, then every chunk
///    but (r+2) % n;
///  - all_gather: n-1 pieces of its input; reduce_scatter: n-1 pieces of its
///    output (rings); all_to_all: n-1 of the n pieces of its input (pairwise
///    exchange); shift: its whole input (one exchange with each ring
///    neighbour); all_slice: nothing.
/// This is what the runtime counts when it runs them, so a report built from
/// it can be checked against measurements exactly.
int64_t collectiveSentBytes(CollectiveKind kind, int64_t n, int64_t inElements,
                            int64_t outElements, int64_t elementBytes);
/// The same for the group member of index `member` (all-reduce chunks
/// differ in size when n does not divide the element count).
int64_t collectiveSentBytesOf(CollectiveKind kind, int64_t n, int64_t member,
                              int64_t inElements, int64_t outElements,
                              int64_t elementBytes);
/// The collective an artifact instruction `op` names; false for all_slice
/// and anything else that moves no data.
bool collectiveFromName(const std::string &op, CollectiveKind &kind);

/// alpha-beta time of a collective on a group of `n` devices over `link`
/// when each device sends `sentBytes` (collectiveSentBytes): the link's
/// sync overhead, its steps' latencies (2(n-1) for the all-reduce ring, 1
/// for a shift, n-1 for the others) and the bytes over the bandwidth.
double collectiveTime(CollectiveKind kind, int64_t n, double sentBytes,
                      const Link &link);
/// alpha-beta time of a pipeline message of `sentBytes` over `link` (one
/// step).
double sendRecvTime(double sentBytes, const Link &link);

/// The efficiency curve a dense kernel of class `c` computes on (gemm,
/// attention, attention_grad); null for the memory-bound classes.
const GemmEfficiency *denseCurve(CostClass c, const HardwareProfile &hw);

/// Roofline time of one kernel call of class `c` that performs `flops` and
/// moves `bytes` to and from device memory: the slower of its compute and
/// its traffic at its class's bandwidth, plus the per-kernel overhead. A
/// dense kernel computes at its class's efficiency for its size: on the
/// GEMM curve the kernel's flops, on a class's own curve (attention's, as
/// calibrated) the flops of one of its `products` independent products
/// (CostOpInterface::getIndependentProducts). The others are bound by
/// traffic, their few flops at `gemm.max`.
double kernelTime(double flops, double bytes, CostClass c,
                  const HardwareProfile &hw, bool f32, double products = 1);

/// Idle share of a pipeline of `stages` stages and `microbatches`
/// micro-batches under GPipe/1F1B: (p-1)/(m+p-1).
double bubbleFraction(int64_t stages, int64_t microbatches);

/// Bytes per parameter before sharding for (precision, optimizer):
/// f32 + Adam: 4 params, 4 grads, 8 optimizer; bf16-mixed + Adam: 2, 2, 12.
struct BytesPerParam {
  double params, grads, optimizer;
};
BytesPerParam bytesPerParam(const std::string &precision,
                            const std::string &optimizer);

} // namespace dtc::cost

#endif // DTC_COSTMODEL_COSTMODEL_H
