//===- Checkpoint.cpp ----------------------------------------------------------===//
#include "dtc/runtime/Checkpoint.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <sys/stat.h>

namespace dtc::rt {

namespace {
constexpr const char *kFormatKey = "dtc.format";
constexpr const char *kStepKey = "dtc.step";
constexpr const char *kOptStepKey = "dtc.optimizer_step";
constexpr const char *kCkptFormat = "dtc-checkpoint-v1";
constexpr const char *kOptimFormat = "dtc-optimizer-v1";


bool fileExists(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}
} // namespace

std::vector<int> contributorRanks(const Artifact &a, int t) {
  const TensorDecl &d = a.tensors[size_t(t)];
  std::map<Shape, int> first;
  std::vector<int> out;
  for (int64_t r = 0; r < a.devices; ++r) {
    const int p = a.programOf(r);
    if (p < 0 || a.bufferOf(p, t) < 0) continue;
    Piece piece = pieceOf(a.mesh, d.sharding, d.shape, a.mesh.coords(r), d.pieces);
    if (first.emplace(piece.offset, int(r)).second) out.push_back(int(r));
  }
  return out;
}

std::vector<std::string> gatherToRoot(RankExecutor &exec, World &world,
                                      const std::vector<int> &tensors) {
  const Artifact &a = exec.artifact();
  std::vector<std::vector<int>> contrib;
  std::string mine;
  runAgreed(world, [&] {
    for (int t : tensors) {
      contrib.push_back(contributorRanks(a, t));
      const auto &c = contrib.back();
      if (std::find(c.begin(), c.end(), world.rank()) != c.end()) {
        LocalTensor lt = exec.tensor(t);
        mine.append(static_cast<const char *>(lt.data), lt.bytes());
      }
    }
  });
  std::vector<std::string> parts = world.world().gather(mine, 0);
  std::vector<std::string> out(tensors.size());
  if (world.rank() != 0) return out;
  {
    std::vector<size_t> cursor(parts.size(), 0);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorDecl &d = a.tensors[size_t(tensors[i])];
      const size_t elem = dtypeSize(d.dtype);
      out[i].assign(size_t(numel(d.shape)) * elem, '\0');
      for (int r : contrib[i]) {
        const Piece piece = exec.pieceFor(tensors[i], r);
        const char *src = parts[size_t(r)].data() + cursor[size_t(r)];
        forEachPieceRun(d.shape, piece, [&](int64_t l, int64_t g, int64_t n) {
          std::memcpy(out[i].data() + size_t(g) * elem, src + size_t(l) * elem,
                      size_t(n) * elem);
        });
        cursor[size_t(r)] += size_t(numel(piece.local)) * elem;
        if (cursor[size_t(r)] > parts[size_t(r)].size())
          throw Error("internal error: short checkpoint gather from rank " + std::to_string(r));
      }
    }
  }
  return out;
}

void checkCheckpointTensors(const Artifact &a, const SafetensorsReader &file, Role role) {
  const char *what = role == Role::Param ? "parameter" : "optimizer state tensor";
  for (int t : a.tensorsWithRole(role)) {
    const TensorDecl &d = a.tensors[size_t(t)];
    const SafetensorsEntry *e = file.find(d.name);
    if (!e)
      throw Error(file.path() + ": missing " + what + " '" + d.name + "' (" +
                  dtypeName(d.dtype) + shapeStr(d.shape) + ") of " + a.label);
    if (!e->supported || e->dtype != d.dtype)
      throw Error(file.path() + ": tensor '" + d.name + "' has dtype " + e->dtypeName +
                  " but the model's " + what + " is " + safetensorsDtype(d.dtype));
    if (e->shape != d.shape)
      throw Error(file.path() + ": tensor '" + d.name + "' has shape " + shapeStr(e->shape) +
                  " but the model's " + what + " has shape " + shapeStr(d.shape));
  }
  for (const SafetensorsEntry &e : file.entries()) {
    const int t = a.findTensor(e.name);
    if (t < 0 || a.tensors[size_t(t)].role != role)
      throw Error(file.path() + ": tensor '" + e.name + "' is not one of the " + what +
                  "s of " + a.label);
  }
}

int64_t metadataInt(const SafetensorsReader &file, const std::string &key, int64_t fallback) {
  auto it = file.metadata().find(key);
  if (it == file.metadata().end()) return fallback;
  const std::string &s = it->second;
  int64_t v = 0;
  bool ok = !s.empty() && s.size() <= 18;
  for (char c : s) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) v = v * 10 + (c - '0');
  }
  if (!ok)
    throw Error(file.path() + ": metadata " + key + " = \"" + s +
                "\" is not a non-negative integer");
  return v;
}

namespace {
// Shared by inspect and load: opens and validates the main file and, when it
// applies, the sidecar. `sidecar` is set when the optimizer state is to be
// restored from it.
LoadedCheckpoint examine(const Artifact &a, const std::string &path,
                         std::unique_ptr<SafetensorsReader> &main,
                         std::unique_ptr<SafetensorsReader> &sidecar) {
  LoadedCheckpoint info;
  main = std::make_unique<SafetensorsReader>(path);
  checkCheckpointTensors(a, *main, Role::Param);
  info.step = metadataInt(*main, kStepKey, 0);
  const std::string side = optimizerSidecarPath(path);
  if (!fileExists(side)) {
    info.note = side + " not found; the optimizer state starts from zeros";
    return info;
  }
  sidecar = std::make_unique<SafetensorsReader>(side);
  const int64_t sideStep = metadataInt(*sidecar, kStepKey, -1);
  if (sideStep != info.step) {
    info.note = side + " is from step " +
                (sideStep < 0 ? std::string("(unknown)") : std::to_string(sideStep)) +
                " but " + path + " is from step " + std::to_string(info.step) +
                "; the optimizer state starts from zeros";
    sidecar.reset();
    return info;
  }
  // A sidecar written under another optimizer (SGD's empty state, Adam's
  // moments) is no use here, but the parameters are: restart the state.
  std::set<std::string> wanted, held;
  for (int t : a.tensorsWithRole(Role::OptimizerState))
    wanted.insert(a.tensors[size_t(t)].name);
  for (const SafetensorsEntry &e : sidecar->entries())
    held.insert(e.name);
  if (wanted != held) {
    info.note = side + " holds the state of another optimizer; the optimizer state "
                       "starts from zeros";
    sidecar.reset();
    return info;
  }
  checkCheckpointTensors(a, *sidecar, Role::OptimizerState);
  info.optimizerStep = metadataInt(*sidecar, kOptStepKey, 0);
  info.optimizerRestored = true;
  return info;
}

void copyPieces(RankExecutor &exec, const SafetensorsReader &file, Role role) {
  const Artifact &a = exec.artifact();
  for (int t : a.tensorsWithRole(role)) {
    if (!exec.holds(t)) continue;
    const TensorDecl &d = a.tensors[size_t(t)];
    const SafetensorsEntry *e = file.find(d.name);
    LocalTensor lt = exec.tensor(t);
    const size_t elem = dtypeSize(d.dtype);
    const char *src = file.data(*e);
    char *dst = static_cast<char *>(lt.data);
    forEachPieceRun(d.shape, lt.piece, [&](int64_t l, int64_t g, int64_t n) {
      std::memcpy(dst + size_t(l) * elem, src + size_t(g) * elem, size_t(n) * elem);
    });
  }
}
} // namespace

LoadedCheckpoint inspectCheckpoint(const Artifact &a, const std::string &path) {
  std::unique_ptr<SafetensorsReader> main, side;
  return examine(a, path, main, side);
}

LoadedCheckpoint loadCheckpoint(RankExecutor &exec, World &world, const std::string &path) {
  LoadedCheckpoint info;
  runAgreed(world, [&] {
    std::unique_ptr<SafetensorsReader> main, side;
    info = examine(exec.artifact(), path, main, side);
    copyPieces(exec, *main, Role::Param);
    if (side) {
      copyPieces(exec, *side, Role::OptimizerState);
      exec.setOptimizerStep(info.optimizerStep);
    } else {
      // The optimizer state keeps the values of initPersistent (its init,
      // zeros today); the step tensor restarts at 0.
      exec.setOptimizerStep(0);
    }
  });
  return info;
}

void saveCheckpoint(RankExecutor &exec, World &world, const std::string &path, int64_t step,
                    int64_t optimizerStep) {
  const Artifact &a = exec.artifact();
  const std::vector<int> params = a.tensorsWithRole(Role::Param);
  const std::vector<int> states = a.tensorsWithRole(Role::OptimizerState);
  std::vector<int> all = params;
  all.insert(all.end(), states.begin(), states.end());
  std::vector<std::string> data;
  std::string err;
  // gatherToRoot agrees on packing errors itself; its assembly runs on rank 0
  // only, so collect that error here and agree below together with the write.
  try {
    data = gatherToRoot(exec, world, all);
  } catch (const AgreedError &) {
    throw;
  } catch (const std::exception &e) {
    err = e.what();
  }
  if (world.rank() == 0 && err.empty()) {
    try {
      auto tensorsOf = [&](size_t from, size_t to) {
        std::vector<SafetensorsTensor> v;
        for (size_t i = from; i < to; ++i) {
          const TensorDecl &d = a.tensors[size_t(all[i])];
          v.push_back({d.name, d.dtype, d.shape, data[i].data()});
        }
        return v;
      };
      writeSafetensors(optimizerSidecarPath(path), tensorsOf(params.size(), all.size()),
                       {{kFormatKey, kOptimFormat},
                        {kStepKey, std::to_string(step)},
                        {kOptStepKey, std::to_string(optimizerStep)}});
      writeSafetensors(path, tensorsOf(0, params.size()),
                       {{kFormatKey, kCkptFormat}, {kStepKey, std::to_string(step)}});
    } catch (const std::exception &e) {
      err = e.what();
    }
  }
  agree(world, err);
}

} // namespace dtc::rt
