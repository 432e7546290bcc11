//===- CostModel.cpp - hardware profiles and alpha-beta costs ------------===//
#include "dtc/CostModel/CostModel.h"

#include <algorithm>
#include <climits>
#include <fstream>
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
  } else if (name == "h100" || name == "h200") {
    hw.peakFlopsF32 = 67e12;
    hw.peakFlopsBf16 = 989e12;
    hw.memoryBytes = 80e9;
    hw.memoryBandwidth = 3.35e12;
    hw.nodeLink = {450e9, 3e-6};    // NVLink 4, per direction
    hw.clusterLink = {50e9, 10e-6}; // 400 Gb/s NDR per GPU
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
} // namespace

std::string HardwareProfile::forMesh(const std::vector<int64_t> &mesh) {
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
  return "";
}

std::optional<HardwareProfile>
dtc::cost::loadHardware(const std::string &nameOrFile, std::string &error) {
  if (nameOrFile == "cpu" || nameOrFile == "a100" || nameOrFile == "h100" ||
      nameOrFile == "h200")
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
  HardwareProfile hw;
  hw.name = j.value("name", nameOrFile);
  if (!j.contains("peak_flops") || !j["peak_flops"].is_object()) {
    error = nameOrFile +
            ": field 'peak_flops' must be an object of dtype -> FLOP/s";
    return std::nullopt;
  }
  const auto &peak = j["peak_flops"];
  if (!positiveNumber(peak, "f32", hw.peakFlopsF32, error)) {
    error = nameOrFile + ": peak_flops: " + error;
    return std::nullopt;
  }
  hw.peakFlopsBf16 = peak.contains("bf16") && peak["bf16"].is_number()
                         ? peak["bf16"].get<double>()
                         : hw.peakFlopsF32;
  if (!positiveNumber(j, "memory_bytes", hw.memoryBytes, error) ||
      !positiveNumber(j, "memory_bandwidth", hw.memoryBandwidth, error)) {
    error = nameOrFile + ": " + error;
    return std::nullopt;
  }
  if (!j.contains("axes") || !j["axes"].is_array() || j["axes"].empty()) {
    error = nameOrFile +
            ": field 'axes' must list {bandwidth, latency} per mesh axis";
    return std::nullopt;
  }
  for (const auto &axis : j["axes"]) {
    Link link;
    if (!axis.is_object() ||
        !positiveNumber(axis, "bandwidth", link.bandwidth, error)) {
      error = nameOrFile +
              ": axes: " + (error.empty() ? "entries must be objects" : error);
      return std::nullopt;
    }
    if (!axis.contains("latency") || !axis["latency"].is_number() ||
        axis["latency"].get<double>() < 0) {
      error = nameOrFile + ": axes: field 'latency' must be a number >= 0";
      return std::nullopt;
    }
    link.latency = axis["latency"].get<double>();
    hw.axes.push_back(link);
  }
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
  case CollectiveKind::AllSlice:
    return 0;
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
  double steps =
      kind == CollectiveKind::AllReduce ? 2.0 * (n - 1) : double(n - 1);
  return steps * link.latency + sentBytes / link.bandwidth;
}

double dtc::cost::sendRecvTime(double sentBytes, const Link &link) {
  return link.latency + sentBytes / link.bandwidth;
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
