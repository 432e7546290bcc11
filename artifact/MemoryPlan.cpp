//===- MemoryPlan.cpp - what a rank of an artifact allocates --------------===//
#include "dtc/artifact/MemoryPlan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sched.h>
#include <set>
#include <unistd.h>

namespace dtc::artifact {

const char *memKindName(int kind) noexcept {
  return kind == kWorkspaceKind ? "workspace"
         : kind == kStagingKind ? "staging"
                                : memCategoryName(MemCategory(kind));
}

const char *memKindDescription(int kind) noexcept {
  static const char *names[kNumMemKinds] = {
      "parameters", "gradients", "optimizer state",    "activations", "inputs",
      "constants",  "scalars",   "collective staging", "workspace"};
  return kind >= 0 && kind < kNumMemKinds ? names[kind] : "?";
}

const char *memKindReportKey(int kind) noexcept {
  static const char *keys[kNumMemKinds] = {
      "params",    "grads",   "optimizer", "activations", "inputs",
      "constants", "scalars", "staging",   "workspace"};
  return kind >= 0 && kind < kNumMemKinds ? keys[kind] : "?";
}

std::string largestKinds(const MemoryNeed &need, int count) noexcept {
  int kinds[kNumMemKinds];
  for (int k = 0; k < kNumMemKinds; ++k)
    kinds[k] = k;
  std::stable_sort(std::begin(kinds), std::end(kinds),
                   [&](int x, int y) { return need.bytes[x] > need.bytes[y]; });
  std::string text;
  for (int i = 0; i < count && i < kNumMemKinds && need.bytes[kinds[i]] > 0;
       ++i)
    text += std::string(i ? ", " : "") + memKindDescription(kinds[i]) + " " +
            formatBytes(need.bytes[kinds[i]]);
  return text;
}

uint64_t collectiveStagingBytes(const ProgramDecl &p, const InstrDecl &ins) {
  const BufferDecl &in = p.buffers[size_t(ins.in[0])],
                   &out = p.buffers[size_t(ins.out[0])];
  // Elements before `axis`: pieces along it are contiguous only when 1.
  auto outer = [](const Shape &s, int axis) {
    int64_t n = 1;
    for (int d = 0; d < axis; ++d)
      n *= s[size_t(d)];
    return n;
  };
  switch (ins.coll) {
  case CollectiveKind::AllReduce:
  case CollectiveKind::AllSlice:
  case CollectiveKind::Shift: // straight from the input to the output
    return 0;
  case CollectiveKind::AllGather:
    return outer(out.shape, ins.axis) == 1 ? 0 : out.bytes();
  case CollectiveKind::ReduceScatter:
    return outer(in.shape, ins.axis) == 1 ? 0 : in.bytes();
  case CollectiveKind::AllToAll:
    return 2 * in.bytes(); // send and receive staging
  case CollectiveKind::MoeExchange:
    // Rows packed per member to send, and received: each at most the
    // input's (a slot or buffer row goes out at most once) and the
    // output's rows.
    return in.bytes() + out.bytes();
  }
  return 0;
}

uint64_t ringAllReduceScratchBytes(uint64_t count, uint64_t elementBytes,
                                   int members) {
  return members <= 1 ? 0 : (count / uint64_t(members) + 1) * elementBytes;
}

uint64_t ringReduceScatterScratchBytes(uint64_t count, uint64_t elementBytes,
                                       int members) {
  return members <= 1 ? 0 : 2 * count * elementBytes;
}

uint64_t collectiveScratchBytes(const Artifact &a, const ProgramDecl &p,
                                const InstrDecl &ins) {
  if (!ins.isCollective)
    return 0;
  const BufferDecl &out = p.buffers[size_t(ins.out[0])];
  const int members = int(a.mesh.groupSize(a.comms[size_t(ins.comm)].meshAxes));
  const uint64_t elem = dtypeSize(out.dtype);
  if (ins.coll == CollectiveKind::AllReduce)
    return ringAllReduceScratchBytes(uint64_t(numel(out.shape)), elem, members);
  if (ins.coll == CollectiveKind::ReduceScatter)
    return ringReduceScatterScratchBytes(uint64_t(numel(out.shape)), elem,
                                         members);
  return 0;
}

uint64_t bucketScratchBytes(const ProgramDecl &p, const BucketDecl &b) {
  const InstrDecl &head = p.instructions[size_t(b.members[0])];
  const uint64_t elem = dtypeSize(p.buffers[size_t(head.in[0])].dtype);
  if (b.coll == CollectiveKind::AllReduce)
    return ringAllReduceScratchBytes(uint64_t(b.elements), elem, b.groupSize);
  if (b.coll == CollectiveKind::ReduceScatter)
    return ringReduceScatterScratchBytes(uint64_t(b.elements), elem,
                                         b.groupSize);
  return 0;
}

std::vector<uint64_t> microbatchCopiesInFlight(const ProgramDecl &p) {
  std::vector<uint64_t> most(p.chunks.size(), 0);
  std::map<std::pair<int, int>, size_t> last;
  for (size_t i = 0; i < p.schedule.size(); ++i)
    last[{p.schedule[i].chunk, p.schedule[i].microbatch}] = i;
  std::set<std::pair<int, int>> live;
  std::vector<uint64_t> now(p.chunks.size(), 0);
  for (size_t i = 0; i < p.schedule.size(); ++i) {
    const std::pair<int, int> key{p.schedule[i].chunk,
                                  p.schedule[i].microbatch};
    if (key.first < 0 || size_t(key.first) >= most.size())
      continue;
    if (live.insert(key).second) {
      uint64_t &n = now[size_t(key.first)];
      most[size_t(key.first)] = std::max(most[size_t(key.first)], ++n);
    }
    if (last[key] == i) {
      live.erase(key);
      --now[size_t(key.first)];
    }
  }
  return most;
}

std::vector<MemoryNeed> memoryNeeds(const Artifact &a, int threads,
                                    const WorkspaceModel &model) {
  std::vector<MemoryNeed> needs;
  for (const ProgramDecl &p : a.programs) {
    MemoryNeed need;
    need.program = p.name;
    // One-copy slots at load; a chunk's micro-batch slots once per copy in
    // flight at the schedule's worst moment for that chunk (the executor
    // reuses a copy given back, per chunk, and never frees one).
    const std::vector<uint64_t> copies = microbatchCopiesInFlight(p);
    for (const SlotDecl &s : p.slots)
      need.bytes[int(s.category)] +=
          slotAllocationBytes(s.bytes) *
          (s.chunk < 0 ? 1 : copies.at(size_t(s.chunk)));
    // Staging: one packing buffer (allocated like a slot), each
    // communicator's kept scratch (the largest its collectives take), one
    // scalar per fill value and the backend's f32 conversion copies.
    // Workspace: what the kernel context keeps (the largest any kernel
    // takes) plus the largest temporaries of one call.
    uint64_t packing = 0, context = 0, temporaries = 0, conversion = 0;
    std::vector<uint64_t> commScratch(a.comms.size(), 0);
    std::set<std::pair<int, std::string>> fillScalars;
    int index = 0;
    auto visit = [&](const std::vector<InstrDecl> &list) {
      for (const InstrDecl &ins : list) {
        const int at = index++;
        if (ins.pipe == PipeOp::Fill) {
          const DType dtype = p.buffers[size_t(ins.out[0])].dtype;
          if (fillScalars.insert({int(dtype), std::to_string(ins.fillValue)})
                  .second)
            need.bytes[kStagingKind] += slotAllocationBytes(dtypeSize(dtype));
          continue;
        }
        if (ins.pipe == PipeOp::Accumulate) {
          // out += in, by the backend's add kernel (in place): converts out
          // twice.
          const kernels::TensorDesc sum{p.buffers[size_t(ins.out[0])].dtype,
                                        p.buffers[size_t(ins.out[0])].shape};
          const kernels::TensorDesc part{p.buffers[size_t(ins.in[0])].dtype,
                                         p.buffers[size_t(ins.in[0])].shape};
          conversion = std::max(
              conversion, model.conversionBytes("add", {sum, part}, {sum}));
          continue;
        }
        if (ins.pipe != PipeOp::None)
          continue; // send, recv, slices
        if (ins.isCollective) {
          packing = std::max(packing, collectiveStagingBytes(p, ins));
          uint64_t &kept = commScratch[size_t(ins.comm)];
          kept = std::max(kept, collectiveScratchBytes(a, p, ins));
          continue;
        }
        std::vector<kernels::TensorDesc> in, out;
        for (int id : ins.in)
          in.push_back(
              {p.buffers[size_t(id)].dtype, p.buffers[size_t(id)].shape});
        for (int id : ins.out)
          out.push_back(
              {p.buffers[size_t(id)].dtype, p.buffers[size_t(id)].shape});
        context = std::max(
            context, model.contextBytes(ins.op, in, out, ins.attrs, threads));
        conversion =
            std::max(conversion, model.conversionBytes(ins.op, in, out));
        const uint64_t scratch =
            model.scratchBytes(ins.op, in, out, ins.attrs, threads);
        if (scratch > temporaries) {
          temporaries = scratch;
          need.workspaceInstruction = at;
        }
      }
    };
    visit(p.instructions);
    for (const ChunkDecl &c : p.chunks) {
      visit(c.forward);
      visit(c.backwardInput);
      visit(c.backwardWeight);
    }
    visit(p.finish);
    // Buckets: one buffer as large as the largest bucket's, apart from the
    // packing buffer (collectives run between a bucket's members), and
    // the scratch of the bucket's one collective.
    uint64_t bucketBuffer = 0;
    for (const BucketDecl &b : p.buckets) {
      bucketBuffer = std::max(bucketBuffer, b.bufferBytes());
      const InstrDecl &head = p.instructions[size_t(b.members[0])];
      uint64_t &kept = commScratch[size_t(head.comm)];
      kept = std::max(kept, bucketScratchBytes(p, b));
    }
    need.bytes[kWorkspaceKind] = context + temporaries;
    if (packing > 0)
      need.bytes[kStagingKind] += slotAllocationBytes(packing);
    if (bucketBuffer > 0)
      need.bytes[kStagingKind] += slotAllocationBytes(bucketBuffer);
    // The backend's conversion copies (the CPU's f32 copies of bf16/f16
    // operands): one scratch, as large as the largest set one kernel
    // converts.
    need.bytes[kStagingKind] += conversion;
    for (uint64_t kept : commScratch)
      need.bytes[kStagingKind] += kept;
    for (uint64_t b : need.bytes)
      need.peak += b;
    needs.push_back(std::move(need));
  }
  return needs;
}

bool artifactMemoryNeeds(const nlohmann::json &body, const std::string &label,
                         int threads, const WorkspaceModel &model,
                         std::vector<MemoryNeed> &needs,
                         std::string &error) noexcept {
  Artifact a;
  if (!parseArtifact(body, label, a, error))
    return false;
  try {
    needs = memoryNeeds(a, threads, model);
    return true;
  } catch (const std::exception &e) {
    error = label + ": " + e.what();
  } catch (...) {
    error = label + ": unknown error";
  }
  return false;
}

int defaultKernelThreads(int ranksOnNode) noexcept {
  for (const char *var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
    if (const char *v = std::getenv(var)) {
      const int n = std::atoi(v);
      if (n > 0)
        return n;
    }
  // The cores this process may run on (its affinity mask, which a launcher
  // binding ranks to cores narrows), shared by the ranks of the node unless
  // the mask is already this rank's own.
  cpu_set_t set;
  int cores = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    cores = CPU_COUNT(&set);
  if (cores <= 0)
    cores = 1;
  const int per = cores / (ranksOnNode < 1 ? 1 : ranksOnNode);
  return per < 1 ? 1 : per;
}

int plannedKernelThreads(int64_t devices) noexcept {
  return defaultKernelThreads(
      int(std::min<int64_t>(std::max<int64_t>(devices, 1), 1 << 20)));
}

std::string formatBytes(uint64_t bytes) noexcept {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = double(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 6) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  if (unit == 0)
    std::snprintf(text, sizeof text, "%llu B",
                  static_cast<unsigned long long>(bytes));
  else
    std::snprintf(text, sizeof text, "%.2f %s", value, units[unit]);
  return text;
}

bool parseByteSize(std::string_view text, uint64_t &bytes) noexcept {
  size_t i = 0;
  while (i < text.size() &&
         (std::isdigit((unsigned char)text[i]) || text[i] == '.'))
    ++i;
  std::string number(text.substr(0, i));
  if (number.empty() ||
      number.find_first_of("0123456789") == std::string::npos ||
      number.find('.') != number.rfind('.'))
    return false;
  std::string unit;
  for (char c : text.substr(i))
    unit += char(std::tolower((unsigned char)c));
  if (unit.size() > 1 && unit.back() == 'b')
    unit.pop_back(); // GB, GiB -> g, gi
  double scale = 0;
  const char *prefixes = "kmgtp";
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (const char *at = std::strchr(prefixes, unit[0]);
             at && *at &&
             (unit.size() == 1 || unit == std::string(1, unit[0]) + "i")) {
    const int power = int(at - prefixes) + 1;
    scale = std::pow(unit.size() == 1 ? 1000.0 : 1024.0, power);
  } else {
    return false;
  }
  const double value = std::strtod(number.c_str(), nullptr) * scale;
  if (!std::isfinite(value) || value < 1 || value >= 9223372036854775808.0 ||
      value != std::floor(value))
    return false;
  bytes = uint64_t(value);
  return true;
}

uint64_t physicalMemoryBytes() noexcept {
  const long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? uint64_t(pages) * uint64_t(size) : 0;
}

uint64_t availableMemoryBytes() noexcept {
  try {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    uint64_t value = 0;
    while (in >> key >> value >> unit)
      if (key == "MemAvailable:")
        return value * 1024;
  } catch (...) {
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES),
             size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? uint64_t(pages) * uint64_t(size) : 0;
}

namespace {
bool memoryFitsOrExplains(const Artifact &a, int ranksOnNode, int threads,
                          const WorkspaceModel &model, std::string &error) {
  const std::vector<MemoryNeed> needs = memoryNeeds(a, threads, model);
  const MemoryNeed *largest = &needs.at(0);
  for (const MemoryNeed &n : needs)
    if (n.peak > largest->peak)
      largest = &n;
  const uint64_t available = availableMemoryBytes();
  const uint64_t ranks = uint64_t(ranksOnNode < 1 ? 1 : ranksOnNode);
  if (available == 0 || largest->peak <= available / ranks)
    return true;
  const std::string top = largestKinds(*largest, 3);
  const std::string need =
      ranks == 1
          ? "the rank on this node needs " + formatBytes(largest->peak) + " (" +
                top + ")"
          : "the " + std::to_string(ranks) + " ranks on this node need " +
                std::to_string(ranks) + " x " + formatBytes(largest->peak) +
                " = " + formatBytes(ranks * largest->peak) +
                " (per rank: " + top + ")";
  error = a.label + ": " + need + ", but only " + formatBytes(available) +
          " is available here; spread the ranks over more nodes, compile "
          "for a larger "
          "mesh, or pass --no-memory-check to start anyway";
  return false;
}

} // namespace

bool checkMemoryFits(const Artifact &a, int ranksOnNode, int threads,
                     const WorkspaceModel &model, std::string &error) noexcept {
  try {
    return memoryFitsOrExplains(a, ranksOnNode, threads, model, error);
  } catch (...) { // out of memory while planning
    error = a.label + ": cannot plan the memory of this artifact";
    return false;
  }
}

} // namespace dtc::artifact
