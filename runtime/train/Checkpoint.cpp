//===- Checkpoint.cpp
//----------------------------------------------------------===//
#include "dtc/runtime/Checkpoint.h"
#include "dtc/runtime/Progress.h"
#include "dtc/runtime/ShardedCheckpoint.h"

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
constexpr const char *kStepFormat = "dtc-step-v1";

bool fileExists(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}
} // namespace

std::string optimizerSidecarPath(const std::string &ckpt) {
  return isShardedCheckpointPath(ckpt) ? std::string() : ckpt + ".optim";
}

int masterOf(const Artifact &a, int param) {
  for (int t : a.tensorsWithRole(Role::OptimizerState))
    if (a.tensors[size_t(t)].kind == "master" &&
        a.tensors[size_t(t)].of == a.tensors[size_t(param)].name)
      return t;
  return -1;
}

std::vector<std::pair<int, std::string>> checkpointTensors(const Artifact &a,
                                                           Role role) {
  std::vector<std::pair<int, std::string>> out;
  if (role == Role::Param) {
    for (int t : a.tensorsWithRole(Role::Param)) {
      const int master = masterOf(a, t);
      out.push_back({master >= 0 ? master : t, a.tensors[size_t(t)].name});
    }
  } else {
    for (int t : a.tensorsWithRole(Role::OptimizerState))
      if (a.tensors[size_t(t)].kind != "master")
        out.push_back({t, a.tensors[size_t(t)].name});
  }
  return out;
}

std::vector<int> contributorRanks(const Artifact &a, int t) {
  const TensorDecl &d = a.tensors[size_t(t)];
  std::map<Shape, int> first;
  std::vector<int> out;
  for (int64_t r = 0; r < a.devices; ++r) {
    const int p = a.programOf(r);
    if (p < 0 || a.bufferOf(p, t) < 0)
      continue;
    Piece piece = pieceOf(a.mesh, d, a.mesh.coords(r));
    if (first.emplace(piece.offset, int(r)).second)
      out.push_back(int(r));
  }
  return out;
}

void checkCheckpointTensors(const Artifact &a, const SafetensorsReader &file,
                            Role role) {
  const char *what =
      role == Role::Param ? "parameter" : "optimizer state tensor";
  std::set<std::string> names;
  for (auto [t, name] : checkpointTensors(a, role)) {
    names.insert(name);
    const TensorDecl &d = a.tensors[size_t(t)];
    const SafetensorsEntry *e = file.find(name);
    if (!e)
      throw Error(file.path() + ": missing " + what + " '" + name + "' (" +
                  dtypeName(d.dtype) + shapeStr(d.shape) + ") of " + a.label);
    // Floats convert on load (an f32 checkpoint into bf16 weights, say);
    // integers must match.
    const bool convertible =
        e->supported && isFloat(e->dtype) && isFloat(d.dtype);
    if (!e->supported || (e->dtype != d.dtype && !convertible))
      throw Error(file.path() + ": tensor '" + name + "' has dtype " +
                  e->dtypeName + " but the model's " + what + " is " +
                  safetensorsDtype(d.dtype));
    if (e->shape != d.shape)
      throw Error(file.path() + ": tensor '" + name + "' has shape " +
                  shapeStr(e->shape) + " but the model's " + what +
                  " has shape " + shapeStr(d.shape));
  }
  for (const SafetensorsEntry &e : file.entries())
    if (!names.count(e.name))
      throw Error(file.path() + ": tensor '" + e.name + "' is not one of the " +
                  what + "s of " + a.label);
}

void readConverted(const SafetensorsReader &file, const SafetensorsEntry &e,
                   int64_t first, void *dst, DType dtype, int64_t n) {
  const size_t from = dtypeSize(e.dtype), to = dtypeSize(dtype);
  if (e.dtype == dtype) {
    file.read(e, uint64_t(first) * from, dst, size_t(n) * from);
    return;
  }
  std::vector<char> raw(size_t(n) * from);
  file.read(e, uint64_t(first) * from, raw.data(), raw.size());
  for (int64_t i = 0; i < n; ++i) {
    float v;
    if (e.dtype == DType::F32) {
      std::memcpy(&v, raw.data() + size_t(i) * 4, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, raw.data() + size_t(i) * 2, 2);
      v = lowToF32(e.dtype, h);
    }
    char *out = static_cast<char *>(dst) + size_t(i) * to;
    if (dtype == DType::F32) {
      std::memcpy(out, &v, 4);
    } else {
      const uint16_t h = f32ToLow(dtype, v);
      std::memcpy(out, &h, 2);
    }
  }
}

int64_t metadataInt(const SafetensorsReader &file, const std::string &key,
                    int64_t fallback) {
  auto it = file.metadata().find(key);
  if (it == file.metadata().end())
    return fallback;
  const std::string &s = it->second;
  int64_t v = 0;
  bool ok = !s.empty() && s.size() <= 18;
  for (char c : s) {
    ok = ok && c >= '0' && c <= '9';
    if (ok)
      v = v * 10 + (c - '0');
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
    info.note =
        side + " is from step " +
        (sideStep < 0 ? std::string("(unknown)") : std::to_string(sideStep)) +
        " but " + path + " is from step " + std::to_string(info.step) +
        "; the optimizer state starts from zeros";
    sidecar.reset();
    return info;
  }
  // A sidecar written under another optimizer (SGD's empty state, Adam's
  // moments) is no use here, but the parameters are: restart the state.
  std::set<std::string> wanted, held;
  for (auto [t, name] : checkpointTensors(a, Role::OptimizerState))
    wanted.insert(name);
  for (const SafetensorsEntry &e : sidecar->entries())
    held.insert(e.name);
  if (wanted != held) {
    info.note = side +
                " holds the state of another optimizer; the optimizer state "
                "starts from zeros";
    sidecar.reset();
    return info;
  }
  checkCheckpointTensors(a, *sidecar, Role::OptimizerState);
  info.optimizerStep = metadataInt(*sidecar, kOptStepKey, 0);
  info.optimizerRestored = true;
  return info;
}

// Each rank reads its own pieces straight from the file into its buffers:
// nothing is assembled anywhere.
void copyPieces(RankExecutor &exec, const SafetensorsReader &file, Role role) {
  const Artifact &a = exec.artifact();
  auto copy = [&](int t, const std::string &name) {
    if (!exec.holds(t))
      return;
    const TensorDecl &d = a.tensors[size_t(t)];
    const SafetensorsEntry *e = file.find(name);
    LocalTensor lt = exec.tensor(t);
    const size_t elem = dtypeSize(d.dtype);
    char *dst = static_cast<char *>(lt.data);
    forEachPieceRun(d.shape, lt.piece, [&](int64_t l, int64_t g, int64_t n) {
      readConverted(file, *e, g, dst + size_t(l) * elem, d.dtype, n);
    });
  };
  for (auto [t, name] : checkpointTensors(a, role)) {
    copy(t, name);
    // A bf16/f16 parameter is its master weights rounded.
    if (role == Role::Param && a.tensors[size_t(t)].kind == "master")
      copy(a.findTensor(a.tensors[size_t(t)].of), name);
  }
}

// One file, tensor by tensor: rank 0 writes the header, then for each
// tensor receives the pieces of the ranks that contribute one (the lowest
// rank holding each distinct piece), one rank at a time, into one buffer of
// the tensor's size, and writes it. A tensor rank 0 holds whole is written
// from its own memory. So rank 0 needs at most one tensor and one piece
// beyond its own state. Every rank knows statically who sends what. The
// file stays a temporary (rank 0 holds its writer) until commitFiles().
std::unique_ptr<SafetensorsWriter>
writeFile(RankExecutor &exec, World &world, const std::string &path,
          const std::vector<std::pair<int, std::string>> &tensors,
          const std::map<std::string, std::string> &meta) {
  const Artifact &a = exec.artifact();
  const bool root = world.rank() == 0;
  std::unique_ptr<SafetensorsWriter> writer;
  runAgreed(world, [&] {
    if (!root)
      return;
    std::vector<SafetensorsTensorInfo> infos;
    for (auto [t, name] : tensors) {
      const TensorDecl &d = a.tensors[size_t(t)];
      infos.push_back({name, d.dtype, d.shape});
    }
    writer = std::make_unique<SafetensorsWriter>(path, infos, meta);
  });
  std::string err; // rank 0's write error
  for (auto [t, name] : tensors) {
    (void)name;
    // In step with rank 0 tensor by tensor: no rank waits longer than one
    // tensor's write (the --timeout applies to every wait), and a failed
    // write stops everyone at once.
    agree(world, err);
    const TensorDecl &d = a.tensors[size_t(t)];
    const size_t elem = dtypeSize(d.dtype),
                 bytes = size_t(numel(d.shape)) * elem;
    const std::vector<int> from = contributorRanks(a, t);
    const bool rootHoldsAll = from.size() == 1 && from[0] == 0;
    if (!root) {
      if (std::find(from.begin(), from.end(), world.rank()) != from.end()) {
        LocalTensor lt = exec.tensor(t, Access::Read);
        world.world().send(lt.data, lt.bytes(), 0);
      }
      continue;
    }
    if (rootHoldsAll) {
      try {
        writer->write(exec.tensor(t, Access::Read).data, bytes);
      } catch (const std::exception &e) {
        err = e.what();
      }
      continue;
    }
    std::vector<char> whole(bytes), piece;
    LocalTensor own;
    for (int r : from) {
      const Piece pc = exec.pieceFor(t, r);
      const char *src;
      if (r == 0) {
        own = exec.tensor(t, Access::Read);
        src = static_cast<const char *>(own.data);
      } else {
        piece.resize(size_t(numel(pc.local)) * elem);
        world.world().recv(piece.data(), piece.size(), r);
        src = piece.data();
      }
      forEachPieceRun(d.shape, pc, [&](int64_t l, int64_t g, int64_t n) {
        std::memcpy(whole.data() + size_t(g) * elem, src + size_t(l) * elem,
                    size_t(n) * elem);
      });
    }
    try {
      writer->write(whole.data(), bytes);
    } catch (const std::exception &e) {
      err = e.what();
    }
  }
  if (!err.empty())
    writer.reset(); // an uncommitted file leaves no temporary behind
  agree(world, err);
  return writer;
}

/// Rank 0 replaces the files in order, in one stretch that a request to
/// abort the save does not split: a checkpoint's parameters and optimizer
/// state are the same step's, or both the previous ones.
void commitFiles(World &world,
                 std::vector<std::unique_ptr<SafetensorsWriter>> &files) {
  std::string err;
  if (world.rank() == 0) {
    const progress::CommitScope committing;
    for (std::unique_ptr<SafetensorsWriter> &file : files) {
      try {
        file->commit();
      } catch (const std::exception &e) {
        err = e.what();
        break;
      }
    }
  }
  files.clear();
  agree(world, err);
}
} // namespace

LoadedCheckpoint inspectCheckpoint(const Artifact &a, const std::string &path) {
  if (isShardedCheckpointPath(path))
    return inspectShardedCheckpoint(a, path);
  std::unique_ptr<SafetensorsReader> main, side;
  return examine(a, path, main, side);
}

std::optional<int64_t> checkpointStepOnDisk(const std::string &path) {
  if (isShardedCheckpointPath(path))
    return shardedCheckpointStep(path);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return std::nullopt;
  try {
    SafetensorsReader file(path);
    if (!file.metadata().count("dtc.step"))
      return std::nullopt; // safetensors, but not a dtc checkpoint
    return metadataInt(file, "dtc.step", 0);
  } catch (const Error &) {
    return std::nullopt;
  }
}

LoadedCheckpoint loadCheckpoint(RankExecutor &exec, World &world,
                                const std::string &path) {
  if (isShardedCheckpointPath(path))
    return loadShardedCheckpoint(exec, world, path);
  LoadedCheckpoint info;
  std::unique_ptr<SafetensorsReader> main, side;
  runAgreed(world, [&] { info = examine(exec.artifact(), path, main, side); });
  // Rank 0 reads the data once to check the checksums, agreeing with the
  // others after every chunk, so no rank waits longer than one chunk's read
  // (the --timeout applies to every wait). Rank 0's view of the file sets
  // the pace.
  constexpr uint64_t kChunk = uint64_t(256) << 20;
  for (const SafetensorsReader *file : {main.get(), side.get()}) {
    uint64_t plan[2] = {0, 0}; // checksum present, data bytes
    if (world.rank() == 0 && file && file->hasChecksum()) {
      plan[0] = 1;
      plan[1] = file->dataBytes();
    }
    world.world().broadcast(plan, sizeof plan, 0);
    if (!plan[0])
      continue;
    uint32_t crc = 0;
    for (uint64_t at = 0; at < plan[1]; at += kChunk)
      runAgreed(world, [&] {
        if (world.rank() == 0)
          crc = file->dataCrc(at, std::min(kChunk, plan[1] - at), crc);
      });
    runAgreed(world, [&] {
      if (world.rank() == 0)
        file->checkChecksum(crc);
    });
  }
  runAgreed(world, [&] {
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

void saveCheckpoint(RankExecutor &exec, World &world, const std::string &path,
                    int64_t step, int64_t optimizerStep) {
  const progress::SavingScope saving;
  injectCheckpointFault(world.rank(), "saving");
  if (isShardedCheckpointPath(path))
    return saveShardedCheckpoint(exec, world, path, step, optimizerStep);
  const Artifact &a = exec.artifact();
  std::vector<std::unique_ptr<SafetensorsWriter>> files;
  files.push_back(writeFile(exec, world, optimizerSidecarPath(path),
                            checkpointTensors(a, Role::OptimizerState),
                            {{kFormatKey, kOptimFormat},
                             {kStepKey, std::to_string(step)},
                             {kOptStepKey, std::to_string(optimizerStep)}}));
  injectCheckpointFault(world.rank(), "sidecar");
  files.push_back(
      writeFile(exec, world, path, checkpointTensors(a, Role::Param),
                {{kFormatKey, kCkptFormat}, {kStepKey, std::to_string(step)}}));
  commitFiles(world, files);
}

void saveStepTensors(RankExecutor &exec, World &world, const std::string &path,
                     int64_t step) {
  const Artifact &a = exec.artifact();
  std::vector<std::pair<int, std::string>> all;
  for (Role role : {Role::Input, Role::Output})
    for (int t : a.tensorsWithRole(role))
      all.push_back({t, a.tensors[size_t(t)].name});
  std::vector<std::unique_ptr<SafetensorsWriter>> files;
  files.push_back(
      writeFile(exec, world, path, all,
                {{kFormatKey, kStepFormat}, {kStepKey, std::to_string(step)}}));
  commitFiles(world, files);
}

} // namespace dtc::rt
