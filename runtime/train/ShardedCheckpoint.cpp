//===- ShardedCheckpoint.cpp - sharded checkpoints (ShardedCheckpoint.h)
//----===//
#include "dtc/runtime/ShardedCheckpoint.h"
#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/runtime/Progress.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <map>
#include <random>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace dtc::rt {

using json = nlohmann::json;

namespace {

constexpr const char *kPieceFormat = "dtc-sharded-checkpoint-piece";
constexpr const char *kIdKey = "dtc.checkpoint_id";
constexpr uint64_t kDefaultBlockBytes = uint64_t(1) << 20;

std::string errnoText(const std::string &what) {
  return what + ": " + std::strerror(errno);
}

std::string rankFileName(int64_t r) {
  return "rank-" + std::to_string(r) + ".safetensors";
}

std::string parentOf(const std::string &p) {
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

std::string baseOf(const std::string &p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string join(const std::string &dir, const std::string &name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

void fsyncDirectory(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd); // best effort: some file systems refuse fsync on directories
    ::close(fd);
  }
}

/// Removes a directory dtc wrote (files only, one level) and the files in
/// it. Best effort: what cannot be removed stays for the next save's
/// cleanup.
void removeDirectory(const std::string &dir) {
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..")
        ::unlink(join(dir, name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

/// The temporaries of earlier saves to `base` that were killed before they
/// could clean up: `.BASE.tmp.ID` beside it.
void removeStaleTemporaries(const std::string &parent,
                            const std::string &base) {
  const std::string prefix = "." + base + ".tmp.";
  std::vector<std::string> stale;
  if (DIR *d = ::opendir(parent.c_str())) {
    while (dirent *e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.compare(0, prefix.size(), prefix) == 0)
        stale.push_back(join(parent, name));
    }
    ::closedir(d);
  }
  for (const std::string &s : stale) {
    struct stat st;
    if (::lstat(s.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      removeDirectory(s);
  }
}

std::string idHex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)v);
  return buf;
}

uint64_t blockBytes() {
  const char *v = std::getenv("DTC_CHECKPOINT_CRC_BLOCK_BYTES");
  if (!v || !*v)
    return kDefaultBlockBytes;
  char *end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (*end || n == 0 || n > (uint64_t(1) << 32))
    throw Error(std::string("DTC_CHECKPOINT_CRC_BLOCK_BYTES = '") + v +
                "' is not a block size in bytes (1 to 4294967296)");
  return n;
}

/// The pieces of tensor `t` a checkpoint stores: each distinct piece of its
/// sharding once, owned by the lowest rank holding it (so across pipeline
/// programs too), padding-only pieces left out.
struct OwnedPiece {
  int64_t rank;
  Shape start, stop;
};
std::vector<OwnedPiece> ownedPieces(const Artifact &a, int t) {
  const TensorDecl &d = a.tensors[size_t(t)];
  std::vector<OwnedPiece> out;
  for (int r : contributorRanks(a, t)) {
    const Piece p = pieceOf(a.mesh, d, a.mesh.coords(r));
    OwnedPiece o{r, p.offset, p.offset};
    bool empty = false;
    for (size_t k = 0; k < d.shape.size(); ++k) {
      o.stop[k] += p.extent[k];
      empty = empty || p.extent[k] == 0;
    }
    if (!empty)
      out.push_back(std::move(o));
  }
  return out;
}

std::vector<int> checkpointTensors(const Artifact &a) {
  std::vector<int> all = a.tensorsWithRole(Role::Param);
  for (int t : a.tensorsWithRole(Role::OptimizerState))
    all.push_back(t);
  return all;
}

// ---- the index
// --------------------------------------------------------------------------

struct IndexPiece {
  size_t file;
  Shape start, stop;
};
struct IndexTensor {
  std::string name;
  Role role;
  DType dtype;
  Shape shape;
  std::vector<IndexPiece> pieces;
};
struct Index {
  std::string path; ///< DIR/index.json, for messages
  std::string id;
  int64_t step = 0, optimizerStep = 0;
  std::vector<std::pair<std::string, uint64_t>> files; ///< name, bytes
  std::vector<IndexTensor> tensors;
  const IndexTensor *find(const std::string &name) const {
    for (const IndexTensor &t : tensors)
      if (t.name == name)
        return &t;
    return nullptr;
  }
};

std::string sliceStr(const Shape &start, const Shape &stop) {
  std::string s = "[";
  for (size_t d = 0; d < start.size(); ++d)
    s += (d ? ", " : "") + std::to_string(start[d]) + ":" +
         std::to_string(stop[d]);
  return s + "]";
}

/// Reads index.json's fields, each error naming the index file.
class IndexParser {
public:
  explicit IndexParser(const std::string &path) : path_(path) {}

  [[noreturn]] void fail(const std::string &why) const {
    throw Error(path_ + ": " + why);
  }
  const json &field(const json &o, const char *key,
                    const std::string &where) const {
    auto it = o.find(key);
    if (it == o.end())
      fail(where + "missing \"" + key + "\"");
    return *it;
  }
  int64_t integer(const json &v, const std::string &what) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      fail(what + " is not a non-negative integer");
    return v.get<int64_t>();
  }
  Shape shape(const json &v, const std::string &what) const {
    if (!v.is_array())
      fail(what + " is not an array");
    Shape s;
    for (const json &x : v)
      s.push_back(integer(x, what + " element"));
    return s;
  }

  /// "files": plain names in the directory, each once.
  void files(const json &j, Index &idx,
             std::map<std::string, size_t> &fileIndex) const {
    const json &files = field(j, "files", "");
    if (!files.is_array())
      fail("\"files\" is not an array");
    for (const json &f : files) {
      if (!f.is_object())
        fail("a \"files\" entry is not an object");
      const json &name = field(f, "name", "a file: ");
      if (!name.is_string())
        fail("a file's \"name\" is not a string");
      const std::string n = name.get<std::string>();
      if (n.empty() || n.find('/') != std::string::npos || n[0] == '.')
        fail("file name '" + n + "' is not a plain file name in the directory");
      if (!fileIndex.emplace(n, idx.files.size()).second)
        fail("file '" + n + "' is listed twice");
      idx.files.push_back(
          {n, uint64_t(integer(field(f, "bytes", "file '" + n + "': "),
                               "file '" + n + "' \"bytes\""))});
    }
  }

  /// One entry of "tensors": its pieces must cover its shape.
  IndexTensor tensor(const json &t,
                     const std::map<std::string, size_t> &fileIndex,
                     std::set<std::string> &seen) const {
    if (!t.is_object())
      fail("a \"tensors\" entry is not an object");
    IndexTensor it;
    const json &name = field(t, "name", "a tensor: ");
    if (!name.is_string())
      fail("a tensor's \"name\" is not a string");
    it.name = name.get<std::string>();
    const std::string w = "tensor '" + it.name + "': ";
    if (!seen.insert(it.name).second)
      fail(w + "listed twice");
    const json &role = field(t, "role", w), &dtype = field(t, "dtype", w);
    if (role == roleName(Role::Param))
      it.role = Role::Param;
    else if (role == roleName(Role::OptimizerState))
      it.role = Role::OptimizerState;
    else
      fail(w + "\"role\" is not \"" + roleName(Role::Param) + "\" or \"" +
           roleName(Role::OptimizerState) + "\"");
    if (!dtype.is_string() || !parseDType(dtype.get<std::string>(), it.dtype))
      fail(w + "unknown \"dtype\" " + dtype.dump());
    it.shape = shape(field(t, "shape", w), w + "\"shape\"");
    const json &pieces = field(t, "pieces", w);
    if (!pieces.is_array())
      fail(w + "\"pieces\" is not an array");
    int64_t volume = 0;
    for (const json &p : pieces) {
      if (!p.is_object())
        fail(w + "a piece is not an object");
      const json &file = field(p, "file", w + "a piece: ");
      auto fi = file.is_string() ? fileIndex.find(file.get<std::string>())
                                 : fileIndex.end();
      if (fi == fileIndex.end())
        fail(w + "a piece's \"file\" is not one of \"files\"");
      IndexPiece ip{fi->second, shape(field(p, "start", w), w + "\"start\""),
                    shape(field(p, "stop", w), w + "\"stop\"")};
      if (ip.start.size() != it.shape.size() ||
          ip.stop.size() != it.shape.size())
        fail(w + "a piece's slice has the wrong rank");
      int64_t v = 1;
      for (size_t d = 0; d < it.shape.size(); ++d) {
        if (ip.start[d] >= ip.stop[d] || ip.stop[d] > it.shape[d])
          fail(w + "piece " + sliceStr(ip.start, ip.stop) +
               " is empty or outside the shape " + shapeStr(it.shape));
        v *= ip.stop[d] - ip.start[d];
      }
      volume += v;
      it.pieces.push_back(std::move(ip));
    }
    if (volume != numel(it.shape))
      fail(w + "its pieces hold " + std::to_string(volume) +
           " elements but the shape " + shapeStr(it.shape) + " has " +
           std::to_string(numel(it.shape)));
    return it;
  }

private:
  const std::string &path_;
};

/// The index file's text.
std::string readIndexText(const IndexParser &parser, const std::string &path,
                          const std::string &dir) {
  std::string text;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    parser.fail(errno == ENOENT
                    ? "not found: " + dir +
                          " is not a complete sharded checkpoint (no index)"
                    : errnoText("cannot open"));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    parser.fail("not a regular file");
  }
  text.resize(size_t(st.st_size));
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      ::close(fd);
      parser.fail(errnoText("cannot read"));
    }
    got += size_t(n);
  }
  ::close(fd);
  return text;
}

Index readIndex(const std::string &dir) {
  Index idx;
  idx.path = join(dir, kShardedIndexName);
  const IndexParser parser(idx.path);
  json j;
  std::string err;
  if (!parseJsonText(readIndexText(parser, idx.path, dir), j, err))
    parser.fail("bad JSON (" + err + "): the index is corrupted");
  if (!j.is_object())
    parser.fail("not a JSON object: the index is corrupted");
  const json &format = parser.field(j, "format", "");
  if (!format.is_string() || format.get<std::string>() != kShardedFormat)
    parser.fail(std::string("\"format\" is not \"") + kShardedFormat + "\"");
  const int64_t version =
      parser.integer(parser.field(j, "version", ""), "\"version\"");
  if (version != kShardedVersion)
    parser.fail("version " + std::to_string(version) +
                " is not supported (this dtc reads version " +
                std::to_string(kShardedVersion) + ")");
  idx.step = parser.integer(parser.field(j, "step", ""), "\"step\"");
  idx.optimizerStep = parser.integer(parser.field(j, "optimizer_step", ""),
                                     "\"optimizer_step\"");
  const json &id = parser.field(j, "id", "");
  if (!id.is_string())
    parser.fail("\"id\" is not a string");
  idx.id = id.get<std::string>();
  std::map<std::string, size_t> fileIndex;
  parser.files(j, idx, fileIndex);
  const json &tensors = parser.field(j, "tensors", "");
  if (!tensors.is_array())
    parser.fail("\"tensors\" is not an array");
  std::set<std::string> seen;
  for (const json &t : tensors) {
    idx.tensors.push_back(parser.tensor(t, fileIndex, seen));
  }
  return idx;
}

/// Checks the index against the artifact: the parameters exactly; the
/// optimizer state when the index holds the same optimizer's (else
/// `restoreOptimizer` is false and info.note says why).
LoadedCheckpoint checkIndex(const Artifact &a, const std::string &dir,
                            const Index &idx, bool &restoreOptimizer) {
  LoadedCheckpoint info;
  info.step = idx.step;
  auto check = [&](int t, const char *what) {
    const TensorDecl &d = a.tensors[size_t(t)];
    const IndexTensor *it = idx.find(d.name);
    if (!it)
      throw Error(dir + ": missing " + what + " '" + d.name + "' (" +
                  dtypeName(d.dtype) + shapeStr(d.shape) + ") of " + a.label);
    if (it->dtype != d.dtype)
      throw Error(dir + ": tensor '" + d.name + "' has dtype " +
                  dtypeName(it->dtype) + " but the model's " + what + " is " +
                  dtypeName(d.dtype));
    if (it->shape != d.shape)
      throw Error(dir + ": tensor '" + d.name + "' has shape " +
                  shapeStr(it->shape) + " but the model's " + what +
                  " has shape " + shapeStr(d.shape));
  };
  for (int t : a.tensorsWithRole(Role::Param))
    check(t, "parameter");
  std::set<std::string> wanted, held;
  for (int t : a.tensorsWithRole(Role::OptimizerState))
    wanted.insert(a.tensors[size_t(t)].name);
  for (const IndexTensor &it : idx.tensors) {
    if (it.role == Role::OptimizerState) {
      held.insert(it.name);
      continue;
    }
    const int t = a.findTensor(it.name);
    if (t < 0 || a.tensors[size_t(t)].role != Role::Param)
      throw Error(dir + ": tensor '" + it.name +
                  "' is not one of the parameters of " + a.label);
  }
  restoreOptimizer = wanted == held;
  if (!restoreOptimizer) {
    info.note = dir + " holds the state of another optimizer; the optimizer "
                      "state starts from zeros";
    return info;
  }
  for (int t : a.tensorsWithRole(Role::OptimizerState))
    check(t, "optimizer state tensor");
  info.optimizerRestored = true;
  info.optimizerStep = idx.optimizerStep;
  return info;
}

void checkFiles(const std::string &dir, const Index &idx) {
  for (const auto &[name, bytes] : idx.files) {
    const std::string path = join(dir, name);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0)
      throw Error(path + ": " + std::strerror(errno) + " (listed in " +
                  idx.path + "): the checkpoint is incomplete");
    if (!S_ISREG(st.st_mode))
      throw Error(path + ": not a regular file");
    if (uint64_t(st.st_size) != bytes)
      throw Error(path + ": has " + std::to_string(st.st_size) + " bytes but " +
                  idx.path + " says " + std::to_string(bytes) +
                  ": the checkpoint is corrupted");
  }
}

/// Copies the part of a stored piece [start, stop) that lies in this rank's
/// piece `dst` (local buffer `out`) from the file, run by run: the runs are
/// the longest stretches contiguous in both the stored piece (dense,
/// row-major) and the local buffer (padded).
void copyOverlap(const SafetensorsReader &file, const SafetensorsEntry &e,
                 const Shape &start, const Shape &stop, const Piece &dst,
                 char *out, size_t elem) {
  const size_t R = start.size();
  if (R == 0) {
    file.readVerified(e, 0, out, elem);
    return;
  }
  Shape lo(R), hi(R), box(R);
  for (size_t d = 0; d < R; ++d) {
    lo[d] = std::max(start[d], dst.offset[d]);
    hi[d] = std::min(stop[d], dst.offset[d] + dst.extent[d]);
    if (lo[d] >= hi[d])
      return;
    box[d] = hi[d] - lo[d];
  }
  std::vector<int64_t> sstride(R, 1), lstride(R, 1);
  for (size_t d = R - 1; d-- > 0;) {
    sstride[d] = sstride[d + 1] * (stop[d + 1] - start[d + 1]);
    lstride[d] = lstride[d + 1] * dst.local[d + 1];
  }
  size_t k = R - 1;
  while (k > 0 && box[k] == stop[k] - start[k] && box[k] == dst.local[k])
    --k;
  const int64_t runLen = box[k] * sstride[k];
  std::vector<int64_t> idx(k, 0);
  while (true) {
    int64_t s = (lo[k] - start[k]) * sstride[k],
            l = (lo[k] - dst.offset[k]) * lstride[k];
    for (size_t d = 0; d < k; ++d) {
      s += (lo[d] + idx[d] - start[d]) * sstride[d];
      l += (lo[d] + idx[d] - dst.offset[d]) * lstride[d];
    }
    file.readVerified(e, uint64_t(s) * elem, out + size_t(l) * elem,
                      size_t(runLen) * elem);
    size_t d = k;
    while (true) {
      if (d == 0)
        return;
      --d;
      if (++idx[d] < box[d])
        break;
      idx[d] = 0;
    }
  }
}

int64_t overlapVolume(const Shape &start, const Shape &stop, const Shape &lo,
                      const Shape &hi) {
  int64_t v = 1;
  for (size_t d = 0; d < start.size(); ++d) {
    const int64_t n = std::min(stop[d], hi[d]) - std::max(start[d], lo[d]);
    if (n <= 0)
      return 0;
    v *= n;
  }
  return v;
}

/// Every rank reads what overlaps its pieces, file by file (each file read
/// in increasing offsets, so every block once).
void readPieces(RankExecutor &exec, const std::string &dir, const Index &idx,
                bool restoreOptimizer) {
  const Artifact &a = exec.artifact();
  struct Want {
    int tensor;
    const IndexTensor *stored;
    const IndexPiece *piece;
  };
  std::vector<std::vector<Want>> byFile(idx.files.size());
  for (int t : checkpointTensors(a)) {
    const TensorDecl &d = a.tensors[size_t(t)];
    if (!exec.holds(t) || (d.role == Role::OptimizerState && !restoreOptimizer))
      continue;
    const IndexTensor *it = idx.find(d.name);
    const Piece mine = exec.pieceFor(t, exec.rank());
    Shape lo = mine.offset, hi = mine.offset;
    int64_t need = 1;
    for (size_t k = 0; k < d.shape.size(); ++k) {
      hi[k] += mine.extent[k];
      need *= mine.extent[k];
    }
    // The stored pieces overlapping this rank's must tile it exactly.
    std::vector<const IndexPiece *> over;
    int64_t got = 0;
    for (const IndexPiece &p : it->pieces)
      if (int64_t v = overlapVolume(p.start, p.stop, lo, hi)) {
        for (const IndexPiece *q : over)
          if (overlapVolume(p.start, p.stop, q->start, q->stop))
            throw Error(idx.path + ": tensor '" + d.name + "': pieces " +
                        sliceStr(q->start, q->stop) + " and " +
                        sliceStr(p.start, p.stop) +
                        " overlap: the index is corrupted");
        over.push_back(&p);
        got += v;
      }
    if (need > 0 && got != need)
      throw Error(idx.path + ": tensor '" + d.name +
                  "': the pieces do not cover " + sliceStr(lo, hi) +
                  ": the index is corrupted");
    for (const IndexPiece *p : over)
      byFile[p->file].push_back({t, it, p});
  }
  for (size_t f = 0; f < byFile.size(); ++f) {
    if (byFile[f].empty())
      continue;
    const SafetensorsReader file(join(dir, idx.files[f].first));
    auto meta = file.metadata().find(kIdKey);
    if (meta == file.metadata().end() || meta->second != idx.id)
      throw Error(file.path() + ": belongs to another checkpoint (" + kIdKey +
                  " is " +
                  (meta == file.metadata().end() ? std::string("missing")
                                                 : meta->second) +
                  ", " + idx.path + " says " + idx.id + ")");
    if (!file.hasBlockChecksums())
      throw Error(file.path() + ": has no block checksums (" +
                  kBlockChecksumsKey +
                  "): not a piece file of a dtc checkpoint");
    std::sort(byFile[f].begin(), byFile[f].end(),
              [&](const Want &x, const Want &y) {
                const SafetensorsEntry *ex = file.find(x.stored->name),
                                       *ey = file.find(y.stored->name);
                return (ex ? ex->begin : 0) < (ey ? ey->begin : 0);
              });
    for (const Want &w : byFile[f]) {
      const SafetensorsEntry *e = file.find(w.stored->name);
      Shape extent(w.piece->start.size());
      for (size_t k = 0; k < extent.size(); ++k)
        extent[k] = w.piece->stop[k] - w.piece->start[k];
      if (!e)
        throw Error(file.path() + ": missing tensor '" + w.stored->name +
                    "' (its piece " + sliceStr(w.piece->start, w.piece->stop) +
                    " per " + idx.path + ")");
      if (!e->supported || e->dtype != w.stored->dtype || e->shape != extent)
        throw Error(file.path() + ": tensor '" + e->name + "' is " +
                    e->dtypeName + shapeStr(e->shape) + " but " + idx.path +
                    " says " + safetensorsDtype(w.stored->dtype) +
                    shapeStr(extent));
      LocalTensor lt = exec.tensor(w.tensor);
      copyOverlap(file, *e, w.piece->start, w.piece->stop, lt.piece,
                  static_cast<char *>(lt.data), dtypeSize(w.stored->dtype));
    }
  }
}

/// Writes this rank's pieces to DIR/rank-R.safetensors; returns the file's
/// size (0: this rank owns no piece and writes no file).
uint64_t writeRankFile(RankExecutor &exec, const std::string &dir,
                       const std::string &id, int64_t step) {
  const Artifact &a = exec.artifact();
  std::vector<int> mine;
  std::vector<SafetensorsTensorInfo> infos;
  for (int t : checkpointTensors(a))
    for (const OwnedPiece &p : ownedPieces(a, t))
      if (p.rank == exec.rank()) {
        const TensorDecl &d = a.tensors[size_t(t)];
        Shape extent(p.start.size());
        for (size_t k = 0; k < extent.size(); ++k)
          extent[k] = p.stop[k] - p.start[k];
        mine.push_back(t);
        infos.push_back({d.name, d.dtype, extent});
      }
  if (mine.empty())
    return 0;
  SafetensorsWriter writer(join(dir, rankFileName(exec.rank())), infos,
                           {{"dtc.format", kPieceFormat},
                            {kIdKey, id},
                            {"dtc.step", std::to_string(step)},
                            {"dtc.rank", std::to_string(exec.rank())}},
                           blockBytes());
  for (int t : mine) {
    LocalTensor lt = exec.tensor(t, Access::Read);
    const size_t elem = dtypeSize(lt.decl->dtype);
    const char *src = static_cast<const char *>(lt.data);
    forEachPieceRun(lt.decl->shape, lt.piece,
                    [&](int64_t l, int64_t, int64_t n) {
                      writer.write(src + size_t(l) * elem, size_t(n) * elem);
                    });
  }
  writer.commit();
  return writer.fileBytes();
}

std::string indexText(const Artifact &a, const std::string &id, int64_t step,
                      int64_t optimizerStep,
                      const std::vector<int64_t> &fileBytes) {
  json j;
  j["format"] = kShardedFormat;
  j["version"] = kShardedVersion;
  j["id"] = id;
  j["step"] = step;
  j["optimizer_step"] = optimizerStep;
  j["files"] = json::array();
  for (size_t r = 0; r < fileBytes.size(); ++r)
    if (fileBytes[r] > 0)
      j["files"].push_back(
          {{"name", rankFileName(int64_t(r))}, {"bytes", fileBytes[r]}});
  j["tensors"] = json::array();
  for (int t : checkpointTensors(a)) {
    const TensorDecl &d = a.tensors[size_t(t)];
    json pieces = json::array();
    for (const OwnedPiece &p : ownedPieces(a, t))
      pieces.push_back({{"file", rankFileName(p.rank)},
                        {"start", p.start},
                        {"stop", p.stop}});
    j["tensors"].push_back({{"name", d.name},
                            {"role", roleName(d.role)},
                            {"dtype", dtypeName(d.dtype)},
                            {"shape", d.shape},
                            {"pieces", pieces}});
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

/// Puts the finished temporary directory in place of `target`: swapped
/// atomically with an existing checkpoint (which is then removed), or
/// renamed to it.
void moveIntoPlace(const std::string &tmp, const std::string &target) {
  struct stat st;
  if (::lstat(target.c_str(), &st) == 0) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(),
                    RENAME_EXCHANGE) == 0) {
      fsyncDirectory(parentOf(target));
      removeDirectory(tmp); // the previous checkpoint
      return;
    }
    if (errno != EINVAL && errno != ENOSYS)
      throw Error(target + ": " +
                  errnoText("cannot move the new checkpoint into place"));
    // No atomic exchange on this file system: a moment without DIR, the
    // previous checkpoint still whole beside it.
    const std::string old = tmp + ".old";
    if (::rename(target.c_str(), old.c_str()) != 0)
      throw Error(target + ": " +
                  errnoText("cannot move the previous checkpoint aside"));
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
      const std::string why =
          errnoText("cannot move the new checkpoint into place");
      ::rename(old.c_str(), target.c_str());
      throw Error(target + ": " + why);
    }
    fsyncDirectory(parentOf(target));
    removeDirectory(old);
    return;
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0)
    throw Error(target + ": " +
                errnoText("cannot move the new checkpoint into place"));
  fsyncDirectory(parentOf(target));
}

} // namespace

std::string stripTrailingSlashes(const std::string &path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/')
    p.pop_back();
  return p;
}

bool isShardedCheckpointPath(const std::string &path) {
  if (!path.empty() && path.back() == '/')
    return true;
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::optional<int64_t> shardedCheckpointStep(const std::string &dir) {
  const std::string d = stripTrailingSlashes(dir);
  struct stat st;
  if (::stat(join(d, kShardedIndexName).c_str(), &st) != 0)
    return std::nullopt;
  try {
    return readIndex(d).step;
  } catch (const Error &) {
    return std::nullopt;
  }
}

void checkShardedSavePath(const std::string &flag, const std::string &path) {
  const std::string target = stripTrailingSlashes(path), base = baseOf(target);
  if (base.empty() || base == "." || base == ".." || target == "/")
    throw Error(
        flag + " " + path + ": name a checkpoint directory of its own (e.g. " +
        (target == "/" ? std::string("/ckpt") : target + "/ckpt") + "/)");
  const std::string parent = parentOf(target);
  struct stat st;
  if (::stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error(flag + " " + path + ": directory '" + parent +
                "' does not exist");
  if (::access(parent.c_str(), W_OK) != 0)
    throw Error(flag + " " + path + ": directory '" + parent +
                "' is not writable");
  if (::lstat(target.c_str(), &st) != 0)
    return;
  if (!S_ISDIR(st.st_mode))
    throw Error(flag + " " + path +
                ": exists and is not a directory (a sharded checkpoint is "
                "a directory; name a new one, or a FILE.safetensors)");
  bool empty = true;
  if (DIR *d = ::opendir(target.c_str())) {
    while (dirent *e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        empty = false;
    ::closedir(d);
  }
  if (!empty && ::stat(join(target, kShardedIndexName).c_str(), &st) != 0)
    throw Error(flag + " " + path +
                ": the directory exists and is not a dtc checkpoint (no " +
                kShardedIndexName + "); refusing to replace it");
}

LoadedCheckpoint inspectShardedCheckpoint(const Artifact &a,
                                          const std::string &dir) {
  const std::string d = stripTrailingSlashes(dir);
  const Index idx = readIndex(d);
  bool restore = false;
  LoadedCheckpoint info = checkIndex(a, d, idx, restore);
  checkFiles(d, idx);
  return info;
}

LoadedCheckpoint loadShardedCheckpoint(RankExecutor &exec, World &world,
                                       const std::string &dir) {
  const std::string d = stripTrailingSlashes(dir);
  Index idx;
  LoadedCheckpoint info;
  bool restore = false;
  runAgreed(world, [&] {
    idx = readIndex(d);
    info = checkIndex(exec.artifact(), d, idx, restore);
    if (world.rank() == 0)
      checkFiles(d, idx);
  });
  runAgreed(world, [&] {
    readPieces(exec, d, idx, restore);
    // Without the optimizer state the step tensor restarts at 0 (the state
    // keeps initPersistent's values).
    exec.setOptimizerStep(restore ? idx.optimizerStep : 0);
  });
  return info;
}

void saveShardedCheckpoint(RankExecutor &exec, World &world,
                           const std::string &dir, int64_t step,
                           int64_t optimizerStep) {
  const Artifact &a = exec.artifact();
  const std::string target = stripTrailingSlashes(dir);
  const std::string parent = parentOf(target), base = baseOf(target);
  uint64_t nonce = 0;
  if (world.rank() == 0) {
    std::random_device rd;
    nonce = (uint64_t(rd()) << 32) ^ uint64_t(rd()) ^ uint64_t(::getpid());
  }
  world.world().broadcast(&nonce, sizeof nonce, 0);
  const std::string id = idHex(nonce);
  const std::string tmp = join(parent, "." + base + ".tmp." + id);
  runAgreed(world, [&] {
    if (world.rank() != 0)
      return;
    checkShardedSavePath("--save", dir);
    removeStaleTemporaries(parent, base);
    if (::mkdir(tmp.c_str(), 0777) != 0)
      throw Error(
          tmp + ": " +
          errnoText("cannot create the temporary checkpoint directory"));
  });
  // From here on a failure anywhere removes the temporary directory (rank 0,
  // once every rank has agreed, so nobody writes into it any more).
  auto agreeOrClean = [&](const std::function<void()> &f) {
    try {
      runAgreed(world, f);
    } catch (const AgreedError &) {
      if (world.rank() == 0)
        removeDirectory(tmp);
      throw;
    }
  };
  std::vector<int64_t> bytes(size_t(world.size()), 0), all(bytes.size(), 0);
  agreeOrClean([&] {
    bytes[size_t(world.rank())] = int64_t(writeRankFile(exec, tmp, id, step));
    injectCheckpointFault(world.rank(), "written");
  });
  world.world().allReduce(bytes.data(), all.data(), all.size(), DType::I64,
                          ReduceOp::Max);
  agreeOrClean([&] {
    if (world.rank() != 0)
      return;
    std::string err;
    if (!writeOutputFile(join(tmp, kShardedIndexName),
                         indexText(a, id, step, optimizerStep, all), err))
      throw Error(join(tmp, kShardedIndexName) + ": cannot write: " + err);
    fsyncDirectory(tmp);
    injectCheckpointFault(0, "indexed");
    const progress::CommitScope committing;
    moveIntoPlace(tmp, target);
  });
}

/// DTC_TEST_CHECKPOINT_FAULT = ACTION:RANK:WHEN (ShardedCheckpoint.h).
void injectCheckpointFault(int rank, const char *when) {
  const char *spec = std::getenv("DTC_TEST_CHECKPOINT_FAULT");
  if (!spec)
    return;
  const std::string s = spec;
  const size_t a = s.find(':'),
               b = s.find(':', a == std::string::npos ? a : a + 1);
  if (a == std::string::npos || b == std::string::npos)
    return;
  if (s.substr(a + 1, b - a - 1) != std::to_string(rank) ||
      s.substr(b + 1) != when)
    return;
  const std::string action = s.substr(0, a);
  if (action == "kill")
    ::raise(SIGKILL);
  if (action == "fail")
    throw Error("rank " + std::to_string(rank) +
                ": injected checkpoint failure (" + when +
                "; DTC_TEST_CHECKPOINT_FAULT)");
  if (action == "pause") {
    // Through the signals that arrive meanwhile (nanosleep stops early on
    // each): the tests interrupt a save in progress.
    timespec left{kFaultPauseSeconds, 0};
    while (::nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
  }
}

} // namespace dtc::rt
