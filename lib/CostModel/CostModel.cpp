//===- CostModel.cpp - hardware profiles and alpha-beta costs ------------===//
#include "dtc/CostModel/CostModel.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

using namespace dtc::cost;

namespace {
HardwareProfile builtin(const std::string &name) {
  HardwareProfile hw;
  hw.name = name;
  if (name == "cpu") {
    // One MPI rank on a few cores; links are shared memory.
    hw.peakFlopsF32 = hw.peakFlopsBf16 = 50e9;
    hw.memoryBytes = 16e9;
    hw.memoryBandwidth = 20e9;
    hw.nodeLink = {5e9, 2e-6};
    hw.clusterLink = {1.25e9, 20e-6};
    hw.devicesPerNode = 64;
  } else if (name == "a100") {
    hw.peakFlopsF32 = 19.5e12;
    hw.peakFlopsBf16 = 312e12;
    hw.memoryBytes = 80e9;
    hw.memoryBandwidth = 2.0e12;
    hw.nodeLink = {300e9, 3e-6};    // NVLink 3, per direction
    hw.clusterLink = {25e9, 10e-6}; // 200 Gb/s HDR per GPU
    // Calibrated on published iteration times of published plans
    // (bench/published_plans_bench.py, docs/cost-model.md): 250 TFLOP/s on
    // large GEMMs (cuBLAS reaches 230-270), half of that at 10 GFLOP per
    // kernel, 70% of the HBM bandwidth for element-wise kernels, NCCL at
    // 70% of NVLink (about 210 GB/s of bus bandwidth) and 80% of InfiniBand.
    hw.gemm = {0.80, 1e10};
    hw.memoryEfficiency = 0.70;
    hw.kernelOverhead = 4e-6;
    hw.nodeLink.efficiency = 0.70;
    hw.clusterLink.efficiency = 0.80;
    // No published run above overlaps a collective with compute (their
    // data-parallel reductions wait for the pipeline's flush), so this is
    // not fitted: NCCL's kernels take a few SMs and some HBM bandwidth from
    // the backward they overlap.
    hw.commOverlap = 0.9;
  } else if (name == "h100" || name == "h200") {
    hw.peakFlopsF32 = 67e12;
    hw.peakFlopsBf16 = 989e12;
    hw.memoryBytes = 80e9;
    hw.memoryBandwidth = 3.35e12;
    hw.nodeLink = {450e9, 3e-6};    // NVLink 4, per direction
    hw.clusterLink = {50e9, 10e-6}; // 400 Gb/s NDR per GPU
    // Not calibrated on published runs yet: dense bf16 GEMMs reach about
    // 700 TFLOP/s of the 989 and need larger kernels than the A100 to;
    // memory and links as the A100's.
    hw.gemm = {0.70, 3e10};
    hw.memoryEfficiency = 0.70;
    hw.kernelOverhead = 4e-6;
    hw.nodeLink.efficiency = 0.70;
    hw.clusterLink.efficiency = 0.80;
    hw.commOverlap = 0.9;
    if (name == "h200") {
      // H100's compute with 141 GB of HBM3e at 4.8 TB/s.
      hw.memoryBytes = 141e9;
      hw.memoryBandwidth = 4.8e12;
    }
  }
  return hw;
}

bool positiveNumber(const nlohmann::json &j, const char *key, double &out,
                    std::string &error) {
  if (!j.contains(key) || !j[key].is_number() || j[key].get<double>() <= 0) {
    error = std::string("field '") + key + "' must be a positive number";
    return false;
  }
  out = j[key].get<double>();
  return true;
}
bool fraction(const nlohmann::json &j, const char *key, double &out,
              std::string &error) {
  if (!j[key].is_number() || j[key].get<double>() <= 0 ||
      j[key].get<double>() > 1) {
    error = std::string("field '") + key + "' must be a number in (0, 1]";
    return false;
  }
  out = j[key].get<double>();
  return true;
}

/// An efficiency curve {max, half_flops}; `what` names it in errors.
bool parseEfficiency(const nlohmann::json &g, const std::string &what,
                     GemmEfficiency &curve, std::string &error) {
  if (!g.is_object() || !g.contains("max") ||
      !fraction(g, "max", curve.max, error)) {
    error = what + ": " + (error.empty() ? "must be {max, half_flops}" : error);
    return false;
  }
  if (g.contains("half_flops")) {
    if (!g["half_flops"].is_number() || g["half_flops"].get<double>() < 0) {
      error = what + ": field 'half_flops' must be a number >= 0";
      return false;
    }
    curve.halfFlops = g["half_flops"].get<double>();
  }
  return true;
}

/// `kernel_classes`: attention's and its gradient's efficiency curves, the
/// row reductions' bandwidth. The gemm and stream classes are the profile's
/// `gemm_efficiency` and memory line, not repeated here.
bool parseKernelClasses(const nlohmann::json &j, HardwareProfile &hw,
                        std::string &error) {
  if (!j.is_object()) {
    error = "kernel_classes: must be an object";
    return false;
  }
  for (auto &[name, value] : j.items()) {
    const std::string what = "kernel_classes." + name;
    std::optional<CostClass> c = ::dtc::kernels::costClassNamed(name);
    if (c == CostClass::Attention || c == CostClass::AttentionGrad) {
      GemmEfficiency curve;
      if (!parseEfficiency(value, what, curve, error))
        return false;
      (c == CostClass::Attention ? hw.attention : hw.attentionGrad) = curve;
    } else if (c == CostClass::RowReduction || c == CostClass::Optimizer) {
      MemoryLine line;
      if (!value.is_object() ||
          !positiveNumber(value, "bandwidth", line.bandwidth, error)) {
        error = what + ": " +
                (error.empty() ? "must be {bandwidth, overhead}" : error);
        return false;
      }
      if (!value.contains("overhead") || !value["overhead"].is_number() ||
          value["overhead"].get<double>() < 0) {
        error = what + ": field 'overhead' must be a number of seconds >= 0";
        return false;
      }
      line.overhead = value["overhead"].get<double>();
      (c == CostClass::RowReduction ? hw.rowReduction : hw.optimizer) = line;
    } else {
      error = what + ": not a class with its own rate (attention, "
                     "attention_grad, row_reduction, optimizer; gemm is "
                     "'gemm_efficiency', stream the memory bandwidth)";
      return false;
    }
  }
  return true;
}

/// The optional efficiency fields of a JSON profile (defaults: every kernel
/// at the peak, no overhead).
bool optionalEfficiencies(const nlohmann::json &j, HardwareProfile &hw,
                          std::string &error) {
  if (j.contains("gemm_efficiency") &&
      !parseEfficiency(j["gemm_efficiency"], "gemm_efficiency", hw.gemm, error))
    return false;
  if (j.contains("kernel_classes") &&
      !parseKernelClasses(j["kernel_classes"], hw, error))
    return false;
  if (j.contains("memory_efficiency") &&
      !fraction(j, "memory_efficiency", hw.memoryEfficiency, error))
    return false;
  if (j.contains("comm_overlap")) {
    if (!j["comm_overlap"].is_number() || j["comm_overlap"].get<double>() < 0 ||
        j["comm_overlap"].get<double>() > 1) {
      error = "field 'comm_overlap' must be a number in [0, 1]";
      return false;
    }
    hw.commOverlap = j["comm_overlap"].get<double>();
  }
  if (j.contains("kernel_overhead")) {
    if (!j["kernel_overhead"].is_number() ||
        j["kernel_overhead"].get<double>() < 0) {
      error = "field 'kernel_overhead' must be a number of seconds >= 0";
      return false;
    }
    hw.kernelOverhead = j["kernel_overhead"].get<double>();
  }
  return true;
}

bool isBuiltin(const std::string &name) {
  return name == "cpu" || name == "a100" || name == "h100" || name == "h200";
}

bool parseLink(const nlohmann::json &j, Link &link, std::string &error) {
  if (!j.is_object() ||
      !positiveNumber(j, "bandwidth", link.bandwidth, error)) {
    if (error.empty())
      error = "a link must be an object {bandwidth, latency[, efficiency, "
              "sync_overhead, sync_ramp]}";
    return false;
  }
  if (!j.contains("latency") || !j["latency"].is_number() ||
      j["latency"].get<double>() < 0) {
    error = "field 'latency' must be a number >= 0";
    return false;
  }
  link.latency = j["latency"].get<double>();
  if (j.contains("efficiency") &&
      !fraction(j, "efficiency", link.efficiency, error))
    return false;
  if (j.contains("sync_overhead")) {
    if (!j["sync_overhead"].is_number() ||
        j["sync_overhead"].get<double>() < 0) {
      error = "field 'sync_overhead' must be a number >= 0";
      return false;
    }
    link.syncOverhead = j["sync_overhead"].get<double>();
  }
  if (j.contains("sync_ramp")) {
    if (!j["sync_ramp"].is_number() || j["sync_ramp"].get<double>() < 0) {
      error = "field 'sync_ramp' must be a number >= 0";
      return false;
    }
    link.syncRamp = j["sync_ramp"].get<double>();
  }
  return true;
}

/// A JSON profile: a builtin `base` whose fields it overrides, or every
/// required field (peak_flops.f32, memory_bytes, memory_bandwidth, and the
/// links: `axes`, one per mesh axis, or `node_link` and `cluster_link`).
std::optional<HardwareProfile> profileFromJson(const nlohmann::json &j,
                                               std::string &error) {
  HardwareProfile hw;
  const bool based = j.contains("base");
  if (based) {
    if (!j["base"].is_string() || !isBuiltin(j["base"].get<std::string>())) {
      error = "field 'base' must name a builtin profile (cpu, a100, h100, "
              "h200)";
      return std::nullopt;
    }
    hw = builtin(j["base"].get<std::string>());
  }
  hw.name = j.contains("name") && j["name"].is_string()
                ? j["name"].get<std::string>()
                : std::string();
  if (j.contains("peak_flops") || !based) {
    if (!j.contains("peak_flops") || !j["peak_flops"].is_object()) {
      error = "field 'peak_flops' must be an object of dtype -> FLOP/s";
      return std::nullopt;
    }
    const auto &peak = j["peak_flops"];
    if (!positiveNumber(peak, "f32", hw.peakFlopsF32, error)) {
      error = "peak_flops: " + error;
      return std::nullopt;
    }
    hw.peakFlopsBf16 = peak.contains("bf16") && peak["bf16"].is_number()
                           ? peak["bf16"].get<double>()
                           : hw.peakFlopsF32;
  }
  for (auto [key, field] : {std::pair{"memory_bytes", &hw.memoryBytes},
                            std::pair{"memory_bandwidth", &hw.memoryBandwidth}})
    if ((j.contains(key) || !based) && !positiveNumber(j, key, *field, error))
      return std::nullopt;
  if (!optionalEfficiencies(j, hw, error))
    return std::nullopt;
  if (j.contains("axes")) {
    if (!j["axes"].is_array() || j["axes"].empty()) {
      error = "field 'axes' must list {bandwidth, latency} per mesh axis";
      return std::nullopt;
    }
    for (const auto &axis : j["axes"]) {
      Link link;
      if (!parseLink(axis, link, error)) {
        error = "axes: " + error;
        return std::nullopt;
      }
      hw.axes.push_back(link);
    }
    return hw;
  }
  for (auto [key, link] : {std::pair{"node_link", &hw.nodeLink},
                           std::pair{"cluster_link", &hw.clusterLink}}) {
    if (!j.contains(key)) {
      if (based)
        continue;
      error = "give the links: 'axes' (one per mesh axis) or 'node_link' "
              "and 'cluster_link'";
      return std::nullopt;
    }
    if (!parseLink(j[key], *link, error)) {
      error = std::string(key) + ": " + error;
      return std::nullopt;
    }
  }
  if (j.contains("devices_per_node")) {
    if (!j["devices_per_node"].is_number_integer() ||
        j["devices_per_node"].get<int64_t>() < 1) {
      error = "field 'devices_per_node' must be an integer >= 1";
      return std::nullopt;
    }
    hw.devicesPerNode = int(j["devices_per_node"].get<int64_t>());
  }
  if (j.contains("shared_cores")) {
    if (!j["shared_cores"].is_number() || j["shared_cores"].get<double>() < 0) {
      error = "field 'shared_cores' must be a number >= 0";
      return std::nullopt;
    }
    hw.sharedCores = j["shared_cores"].get<double>();
  }
  return hw;
}
} // namespace

Link HardwareProfile::measuredGroupLink(int64_t devices) const {
  auto measured = groupLinks.lower_bound(devices);
  return measured != groupLinks.end() ? measured->second
                                      : groupLinks.rbegin()->second;
}

Link HardwareProfile::linkOver(const std::vector<int64_t> &meshAxes) const {
  Link link{1e300, 0, 1};
  if (meshAxes.empty())
    return link;
  if (!groupLinks.empty() && meshShape.size() == axes.size()) {
    int64_t devices = 1;
    for (int64_t axis : meshAxes)
      devices *= meshShape.at(size_t(axis));
    return measuredGroupLink(devices);
  }
  for (int64_t axis : meshAxes) {
    const Link &candidate = axes.at(size_t(axis));
    if (candidate.bandwidth * candidate.efficiency <
        link.bandwidth * link.efficiency)
      link = candidate;
  }
  return link;
}

Link HardwareProfile::linkOver(size_t from, size_t to) const {
  std::vector<int64_t> range;
  for (size_t a = from; a < to && a < axes.size(); ++a)
    range.push_back(int64_t(a));
  return linkOver(range);
}

std::string HardwareProfile::forMesh(const std::vector<int64_t> &mesh) {
  meshShape = mesh;
  if (!axes.empty()) {
    if (axes.size() < mesh.size())
      return "the hardware file describes " + std::to_string(axes.size()) +
             " mesh axes but the mesh has " + std::to_string(mesh.size());
    axes.resize(mesh.size());
    return "";
  }
  axes.assign(mesh.size(), clusterLink);
  if (!mesh.empty() && mesh.back() <= devicesPerNode)
    axes.back() = nodeLink;
  if (!groupLinks.empty())
    for (size_t a = 0; a < mesh.size(); ++a)
      axes[a] = measuredGroupLink(mesh[a]);
  return "";
}

std::string dtc::cost::profileJson(const HardwareProfile &hw) {
  auto link = [](const Link &l) {
    nlohmann::json j{{"bandwidth", l.bandwidth},
                     {"latency", l.latency},
                     {"efficiency", l.efficiency}};
    if (l.syncOverhead > 0)
      j["sync_overhead"] = l.syncOverhead;
    if (l.syncRamp > 0)
      j["sync_ramp"] = l.syncRamp;
    return j;
  };
  nlohmann::json j{
      {"name", hw.name},
      {"peak_flops", {{"f32", hw.peakFlopsF32}, {"bf16", hw.peakFlopsBf16}}},
      {"memory_bytes", hw.memoryBytes},
      {"memory_bandwidth", hw.memoryBandwidth},
      {"gemm_efficiency",
       {{"max", hw.gemm.max}, {"half_flops", hw.gemm.halfFlops}}},
      {"memory_efficiency", hw.memoryEfficiency},
      {"kernel_overhead", hw.kernelOverhead},
      {"comm_overlap", hw.commOverlap},
      {"node_link", link(hw.nodeLink)},
      {"cluster_link", link(hw.clusterLink)},
      {"devices_per_node", hw.devicesPerNode}};
  if (!hw.source.empty())
    j["source"] = hw.source;
  if (hw.sharedCores > 0)
    j["shared_cores"] = hw.sharedCores;
  auto curve = [](const GemmEfficiency &c) {
    return nlohmann::json{{"max", c.max}, {"half_flops", c.halfFlops}};
  };
  if (hw.attention)
    j["kernel_classes"]["attention"] = curve(*hw.attention);
  if (hw.attentionGrad)
    j["kernel_classes"]["attention_grad"] = curve(*hw.attentionGrad);
  for (auto [name, line] : {std::pair{"row_reduction", &hw.rowReduction},
                            std::pair{"optimizer", &hw.optimizer}})
    if (*line)
      j["kernel_classes"][name] = {{"bandwidth", (*line)->bandwidth},
                                   {"overhead", (*line)->overhead}};
  if (!hw.axes.empty()) {
    j["axes"] = nlohmann::json::array();
    for (const Link &axis : hw.axes)
      j["axes"].push_back(link(axis));
  }
  return j.dump();
}

std::string dtc::cost::cpuCalibrationPath() {
  const char *dir = std::getenv("DTC_CACHE_DIR");
  if (dir && *dir)
    return std::string(dir) + "/cpu-calibration.json";
  const char *xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg)
    return std::string(xdg) + "/dtc/cpu-calibration.json";
  const char *home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") +
         "/.cache/dtc/cpu-calibration.json";
}

std::optional<HardwareProfile>
dtc::cost::loadCpuCalibration(const std::string &path, int64_t devices,
                              std::string &error) {
  std::ifstream in(path);
  if (!in) {
    error = "cannot read it";
    return std::nullopt;
  }
  nlohmann::json j =
      nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() ||
      j.value("format", "") != "dtc-cpu-calibration" ||
      !j.contains("profiles") || !j["profiles"].is_object() ||
      j["profiles"].empty()) {
    error = "is not a dtc calibration (no \"format\": "
            "\"dtc-cpu-calibration\" with \"profiles\")";
    return std::nullopt;
  }
  // The entry measured on `devices` ranks, else the fewest above, else the
  // most: more ranks than measured share the cores more, never less.
  std::map<int64_t, const nlohmann::json *> byRanks;
  for (const auto &[key, entry] : j["profiles"].items()) {
    char *end = nullptr;
    const long long ranks = std::strtoll(key.c_str(), &end, 10);
    if (*end != '\0' || ranks < 1 || !entry.is_object()) {
      error = "profiles: '" + key + "' is not a rank count with a profile";
      return std::nullopt;
    }
    byRanks[ranks] = &entry;
  }
  auto chosen = byRanks.lower_bound(devices);
  if (chosen == byRanks.end())
    chosen = std::prev(byRanks.end());
  nlohmann::json entry = *chosen->second;
  entry["base"] = "cpu";
  entry.erase("axes");
  std::optional<HardwareProfile> hw = profileFromJson(entry, error);
  if (!hw) {
    error = "profiles." + std::to_string(chosen->first) + ": " + error;
    return std::nullopt;
  }
  if (entry.contains("group_links")) {
    if (!entry["group_links"].is_object()) {
      error = "profiles." + std::to_string(chosen->first) +
              ".group_links: must map a group size to a link";
      return std::nullopt;
    }
    for (const auto &[key, linkJson] : entry["group_links"].items()) {
      Link link;
      char *end = nullptr;
      const long long group = std::strtoll(key.c_str(), &end, 10);
      if (*end != '\0' || group < 2 || !parseLink(linkJson, link, error)) {
        error = "profiles." + std::to_string(chosen->first) + ".group_links." +
                key + ": " + (error.empty() ? "not a group size" : error);
        return std::nullopt;
      }
      hw->groupLinks[group] = link;
    }
  }
  hw->name = "cpu";
  hw->source = "calibrated: " + path + ", measured on " +
               std::to_string(chosen->first) + " rank" +
               (chosen->first == 1 ? "" : "s") +
               (chosen->first == devices
                    ? ""
                    : " (no entry for " + std::to_string(devices) + ")");
  return hw;
}

std::optional<HardwareProfile>
dtc::cost::loadHardware(const std::string &nameOrFile, std::string &error) {
  if (isBuiltin(nameOrFile))
    return builtin(nameOrFile);
  std::ifstream in(nameOrFile);
  if (!in) {
    error = "unknown hardware '" + nameOrFile +
            "' (expected cpu, a100, h100, h200 or a readable JSON file)";
    return std::nullopt;
  }
  nlohmann::json j =
      nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    error = nameOrFile + ": not a JSON object";
    return std::nullopt;
  }
  std::optional<HardwareProfile> hw = profileFromJson(j, error);
  if (!hw) {
    error = nameOrFile + ": " + error;
    return std::nullopt;
  }
  if (hw->name.empty())
    hw->name = nameOrFile;
  return hw;
}

int64_t dtc::cost::collectiveSentBytes(CollectiveKind kind, int64_t n,
                                       int64_t inElements, int64_t outElements,
                                       int64_t elementBytes) {
  if (n <= 1)
    return 0;
  switch (kind) {
  case CollectiveKind::AllReduce: {
    // Chunks c_j = c/n (+1 for j < c%n); device r skips chunks r+1 and r+2.
    int64_t base = inElements / n, extra = inElements % n, fewest = INT64_MAX;
    auto chunk = [&](int64_t j) { return base + (j % n < extra ? 1 : 0); };
    for (int64_t r = 0; r < n; ++r)
      fewest = std::min(fewest, chunk(r + 1) + chunk(r + 2));
    return (2 * inElements - fewest) * elementBytes;
  }
  case CollectiveKind::AllGather:
    return (n - 1) * inElements * elementBytes;
  case CollectiveKind::ReduceScatter:
    return (n - 1) * outElements * elementBytes;
  case CollectiveKind::AllToAll:
    return (n - 1) * (inElements / n) * elementBytes;
  case CollectiveKind::MoeExchange:
    // Every slot of the member's tokens travels (token slots are the
    // smaller side unless the capacity drops some), to an expert on another
    // member for (n - 1)/n of them when routing is balanced.
    return (n - 1) * (std::min(inElements, outElements) / n) * elementBytes;
  case CollectiveKind::AllSlice:
    return 0;
  case CollectiveKind::Shift:
    return inElements * elementBytes;
  }
  return 0;
}

int64_t dtc::cost::collectiveSentBytesOf(CollectiveKind kind, int64_t n,
                                         int64_t member, int64_t inElements,
                                         int64_t outElements,
                                         int64_t elementBytes) {
  if (kind != CollectiveKind::AllReduce || n <= 1)
    return collectiveSentBytes(kind, n, inElements, outElements, elementBytes);
  int64_t base = inElements / n, extra = inElements % n;
  auto chunk = [&](int64_t j) { return base + (j % n < extra ? 1 : 0); };
  return (2 * inElements - chunk(member + 1) - chunk(member + 2)) *
         elementBytes;
}

bool dtc::cost::collectiveFromName(const std::string &op,
                                   CollectiveKind &kind) {
  return ::dtc::artifact::parseCollectiveKind(op, kind) &&
         kind != CollectiveKind::AllSlice;
}

double dtc::cost::collectiveTime(CollectiveKind kind, int64_t n,
                                 double sentBytes, const Link &link) {
  if (n <= 1)
    return 0;
  double steps = kind == CollectiveKind::AllReduce ? 2.0 * (n - 1)
                 : kind == CollectiveKind::Shift   ? 1.0
                                                   : double(n - 1);
  return link.syncOverhead + steps * link.latency +
         sentBytes / (link.bandwidth * link.efficiency);
}

double dtc::cost::sendRecvTime(double sentBytes, const Link &link) {
  return link.latency + sentBytes / (link.bandwidth * link.efficiency);
}

const dtc::cost::GemmEfficiency *
dtc::cost::denseCurve(CostClass c, const HardwareProfile &hw) {
  switch (c) {
  case CostClass::Gemm:
    return &hw.gemm;
  case CostClass::Attention:
    return hw.attention ? &*hw.attention : &hw.gemm;
  case CostClass::AttentionGrad:
    return hw.attentionGrad ? &*hw.attentionGrad : &hw.gemm;
  case CostClass::Stream:
  case CostClass::RowReduction:
  case CostClass::Optimizer:
    return nullptr;
  }
  return nullptr;
}

double dtc::cost::kernelTime(double flops, double bytes, CostClass c,
                             const HardwareProfile &hw, bool f32,
                             double products) {
  const double peak = f32 ? hw.peakFlopsF32 : hw.peakFlopsBf16;
  const GemmEfficiency *curve = denseCurve(c, hw);
  // A class's own curve is measured per product (one head of attention);
  // the GEMM curve, which attention follows without one, per kernel.
  const bool perProduct = curve && curve != &hw.gemm;
  const double efficiency =
      !curve ? hw.gemm.max
             : curve->at(perProduct ? flops / std::max(1.0, products) : flops);
  const double compute = flops > 0 ? flops / (peak * efficiency) : 0;
  const std::optional<MemoryLine> &own =
      c == CostClass::RowReduction ? hw.rowReduction
      : c == CostClass::Optimizer  ? hw.optimizer
                                   : std::optional<MemoryLine>{};
  const MemoryLine memory =
      own ? *own
          : MemoryLine{hw.memoryBandwidth * hw.memoryEfficiency,
                       hw.kernelOverhead};
  const double traffic = bytes > 0 ? bytes / memory.bandwidth : 0;
  return std::max(compute, traffic) + memory.overhead;
}

double dtc::cost::pipelineCompute(double busiest, double mean, double bubble,
                                  int64_t devices, const HardwareProfile &hw) {
  const double stretch = 1.0 / (1.0 - bubble);
  if (hw.sharedCores <= 0 || double(devices) <= hw.sharedCores)
    return busiest * stretch;
  return std::max(mean, busiest * hw.sharedCores / double(devices) * stretch);
}

double dtc::cost::bubbleStretch(double bubble, int64_t devices,
                                const HardwareProfile &hw) {
  return pipelineCompute(1.0, 1.0, bubble, devices, hw);
}

double dtc::cost::bubbleFraction(int64_t stages, int64_t microbatches) {
  if (stages <= 1)
    return 0;
  return double(stages - 1) / double(microbatches + stages - 1);
}

BytesPerParam dtc::cost::bytesPerParam(const std::string &precision,
                                       const std::string &optimizer) {
  bool adam = optimizer == "adam" || optimizer == "adamw";
  if (precision == "f32")
    return {4, 4, adam ? 8.0 : 0.0};
  // Mixed precision: low-precision params and grads, f32 master weights
  // (+ Adam moments) in the optimizer.
  return {2, 2, adam ? 12.0 : 4.0};
}
