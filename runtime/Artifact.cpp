//===- Artifact.cpp - parse and validate the artifact body ----------------===//
//
// Only non-throwing nlohmann accessors are used (every value's type is checked
// before get<>), so behaviour does not depend on how nlohmann was configured
// in other translation units of the same binary.
//
//===----------------------------------------------------------------------===//
#include "dtc/runtime/Artifact.h"
#include "dtc/kernels/Kernel.h"
#include "dtc/runtime/ArtifactFormat.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace dtc::rt {

using json = nlohmann::json;

const char *roleName(Role r) {
  switch (r) {
  case Role::Param: return "param";
  case Role::OptimizerState: return "optimizer_state";
  case Role::Input: return "input";
  case Role::Step: return "step";
  case Role::Loss: return "loss";
  case Role::Output: return "output";
  }
  return "?";
}

const char *memCategoryName(MemCategory c) {
  switch (c) {
  case MemCategory::Param: return "param";
  case MemCategory::Grad: return "grad";
  case MemCategory::Optimizer: return "optimizer";
  case MemCategory::Activation: return "activation";
  case MemCategory::Input: return "input";
  case MemCategory::Constant: return "constant";
  case MemCategory::Scalar: return "scalar";
  }
  return "?";
}

const char *collKindName(CollKind k) {
  switch (k) {
  case CollKind::AllReduce: return "all_reduce";
  case CollKind::AllGather: return "all_gather";
  case CollKind::ReduceScatter: return "reduce_scatter";
  case CollKind::AllSlice: return "all_slice";
  case CollKind::AllToAll: return "all_to_all";
  }
  return "?";
}

bool parseCollKind(const std::string &op, CollKind &out) {
  for (int i = 0; i < kNumCollKinds; ++i)
    if (op == collKindName(CollKind(i))) {
      out = CollKind(i);
      return true;
    }
  return false;
}

// ---- init strings -----------------------------------------------------------

static bool parseNumber(const std::string &s, double &v) {
  if (s.empty() || std::isspace((unsigned char)s[0]))
    return false;
  char *end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(v);
}

static std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

bool parseInitSpec(const std::string &text, InitSpec &out) {
  std::string t = trim(text);
  if (t == "zeros") { out = {InitSpec::Zeros, 0, 0}; return true; }
  if (t == "ones") { out = {InitSpec::Ones, 0, 0}; return true; }
  auto args = [&](const std::string &fn, std::vector<double> &vals) {
    if (t.size() < fn.size() + 2 || t.compare(0, fn.size() + 1, fn + "(") != 0 ||
        t.back() != ')')
      return false;
    std::string inner = t.substr(fn.size() + 1, t.size() - fn.size() - 2);
    size_t start = 0;
    while (true) {
      size_t comma = inner.find(',', start);
      std::string part = trim(inner.substr(start, comma == std::string::npos
                                                      ? std::string::npos
                                                      : comma - start));
      double v;
      if (!parseNumber(part, v))
        return false;
      vals.push_back(v);
      if (comma == std::string::npos)
        return true;
      start = comma + 1;
    }
  };
  std::vector<double> v;
  if (args("normal", v)) {
    if (v.size() != 1 || v[0] < 0) return false;
    out = {InitSpec::Normal, v[0], 0};
    return true;
  }
  v.clear();
  if (args("fill", v)) {
    if (v.size() != 1) return false;
    out = {InitSpec::Fill, v[0], 0};
    return true;
  }
  v.clear();
  if (args("uniform", v)) {
    if (v.size() != 2 || !(v[0] <= v[1])) return false;
    out = {InitSpec::Uniform, v[0], v[1]};
    return true;
  }
  return false;
}

// ---- mesh and shardings -------------------------------------------------------

Mesh::Mesh(std::vector<int64_t> axes) : axes_(std::move(axes)) {}

int64_t Mesh::devices() const {
  int64_t n = 1;
  for (int64_t a : axes_) n *= a;
  return n;
}

std::vector<int64_t> Mesh::coords(int64_t rank) const {
  std::vector<int64_t> c(axes_.size());
  for (size_t i = axes_.size(); i-- > 0;) {
    c[i] = rank % axes_[i];
    rank /= axes_[i];
  }
  return c;
}

int64_t Mesh::groupSize(const std::vector<int> &axes) const {
  int64_t n = 1;
  for (int a : axes) n *= axes_[size_t(a)];
  return n;
}

int64_t Mesh::groupIndex(const std::vector<int64_t> &c, const std::vector<int> &axes) const {
  int64_t idx = 0;
  for (int a : axes) idx = idx * axes_[size_t(a)] + c[size_t(a)];
  return idx;
}

int64_t Mesh::groupColor(const std::vector<int64_t> &c, const std::vector<int> &axes) const {
  int64_t idx = 0;
  for (size_t a = 0; a < axes_.size(); ++a)
    if (std::find(axes.begin(), axes.end(), int(a)) == axes.end())
      idx = idx * axes_[a] + c[a];
  return idx;
}

std::string Mesh::str() const {
  std::string s;
  for (size_t i = 0; i < axes_.size(); ++i)
    s += (i ? "x" : "") + std::to_string(axes_[i]);
  return s;
}

Piece pieceOf(const Mesh &mesh, const Sharding &sharding, const Shape &global,
              const std::vector<int64_t> &coords, const std::vector<int64_t> &pieces) {
  Piece p;
  p.local = global;
  p.extent = global;
  p.offset.assign(global.size(), 0);
  for (size_t d = 0; d < global.size() && d < sharding.size(); ++d) {
    const int64_t n = mesh.groupSize(sharding[d]);
    if (n <= 1) continue;
    const int64_t idx = mesh.groupIndex(coords, sharding[d]);
    // Pieces of ceil(G/n); the last ones may be partly or wholly padding.
    p.local[d] = d < pieces.size() && pieces[d] > 0 ? pieces[d] : (global[d] + n - 1) / n;
    p.offset[d] = idx * p.local[d];
    p.extent[d] = std::max<int64_t>(0, std::min(p.local[d], global[d] - p.offset[d]));
  }
  return p;
}

void forEachPieceRun(const Shape &global, const Piece &piece,
                     const std::function<void(int64_t, int64_t, int64_t)> &f) {
  const size_t R = global.size();
  if (R == 0) {
    f(0, 0, 1);
    return;
  }
  const Shape &L = piece.local, &O = piece.offset, &E = piece.extent;
  for (size_t d = 0; d < R; ++d)
    if (E[d] == 0) return; // a piece of padding only
  std::vector<int64_t> gstride(R, 1), lstride(R, 1);
  for (size_t d = R - 1; d-- > 0;) {
    gstride[d] = gstride[d + 1] * global[d + 1];
    lstride[d] = lstride[d + 1] * L[d + 1];
  }
  // Dims k+1.. are whole, so a run spans dims k..R-1.
  size_t k = R - 1;
  while (k > 0 && L[k] == global[k] && E[k] == global[k]) --k;
  const int64_t runLen = E[k] * lstride[k];
  int64_t base = 0;
  for (size_t d = 0; d < R; ++d) base += O[d] * gstride[d];
  std::vector<int64_t> idx(k, 0);
  while (true) {
    int64_t g = base, l = 0;
    for (size_t d = 0; d < k; ++d) {
      g += idx[d] * gstride[d];
      l += idx[d] * lstride[d];
    }
    f(l, g, runLen);
    size_t d = k;
    while (true) {
      if (d == 0) return;
      --d;
      if (++idx[d] < E[d]) break;
      idx[d] = 0;
    }
  }
}

// ---- Artifact lookups ---------------------------------------------------------

int Artifact::findTensor(const std::string &name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return int(i);
  return -1;
}
int Artifact::findComm(const std::string &name) const {
  for (size_t i = 0; i < comms.size(); ++i)
    if (comms[i].name == name) return int(i);
  return -1;
}
int Artifact::programOf(int64_t rank) const {
  for (size_t p = 0; p < programs.size(); ++p)
    for (int r : programs[p].ranks)
      if (r == rank) return int(p);
  return -1;
}
std::vector<int> Artifact::tensorsWithRole(Role r) const {
  std::vector<int> out;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].role == r) out.push_back(int(i));
  return out;
}
int Artifact::bufferOf(int p, int t) const {
  const ProgramDecl &prog = programs[size_t(p)];
  for (size_t b = 0; b < prog.buffers.size(); ++b)
    if (prog.buffers[b].tensor == t) return int(b);
  return -1;
}

// ---- parsing --------------------------------------------------------------------

namespace {

constexpr int64_t kMaxElements = kMaxTensorElements;

class Parser {
public:
  explicit Parser(std::string label) : label_(std::move(label)) {}

  [[noreturn]] void fail(const std::string &where, const std::string &msg) const {
    throw Error(label_ + ": " + (where.empty() ? "" : where + ": ") + msg);
  }

  const json &req(const json &obj, const char *key, const std::string &where) const {
    auto it = obj.find(key);
    if (it == obj.end())
      fail(where, std::string("missing required key \"") + key + "\"");
    return *it;
  }
  const json *opt(const json &obj, const char *key) const {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  std::string str(const json &v, const std::string &where) const {
    if (!v.is_string()) fail(where, "must be a string, got " + typeOf(v));
    return v.get<std::string>();
  }
  int64_t integer(const json &v, const std::string &where) const {
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
      fail(where, "must be an integer, got " + typeOf(v));
    return v.get<int64_t>();
  }
  double number(const json &v, const std::string &where) const {
    if (!v.is_number()) fail(where, "must be a number, got " + typeOf(v));
    double d = v.get<double>();
    if (!std::isfinite(d)) fail(where, "must be finite");
    return d;
  }
  const json &array(const json &v, const std::string &where) const {
    if (!v.is_array()) fail(where, "must be an array, got " + typeOf(v));
    return v;
  }
  const json &object(const json &v, const std::string &where) const {
    if (!v.is_object()) fail(where, "must be an object, got " + typeOf(v));
    return v;
  }
  std::vector<int64_t> ints(const json &v, const std::string &where) const {
    std::vector<int64_t> r;
    for (const json &e : array(v, where)) r.push_back(integer(e, where + " entry"));
    return r;
  }
  Shape shape(const json &v, const std::string &where) const {
    Shape s = ints(v, where);
    int64_t n = 1;
    for (int64_t d : s) {
      if (d < 1) fail(where, "dimension sizes must be >= 1, got " + shapeStr(s));
      if (n > kMaxElements / d) fail(where, "shape " + shapeStr(s) + " is too large");
      n *= d;
    }
    return s;
  }
  DType dtype(const json &v, const std::string &where) const {
    std::string s = str(v, where);
    DType d;
    if (!parseDType(s, d))
      fail(where, "unknown dtype \"" + s + "\" (expected f32, bf16, f16, i32 or i64)");
    return d;
  }
  static std::string typeOf(const json &v) {
    if (v.is_number_integer()) return "an integer";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_boolean()) return "a boolean";
    if (v.is_array()) return "an array";
    if (v.is_object()) return "an object";
    return "null";
  }

  Artifact parse(const json &body);

private:
  void parseTensors(const json &arr, Artifact &a);
  void parseProgram(const json &v, const std::string &where, Artifact &a, ProgramDecl &p);
  void checkInstruction(const Artifact &a, const ProgramDecl &p, size_t i, InstrDecl &ins,
                        const std::string &where);
  void checkProgramsAgree(const Artifact &a, const std::vector<int> &programOfRank);
  std::string label_;
};

void Parser::parseTensors(const json &arr, Artifact &a) {
  std::set<std::string> names;
  for (size_t i = 0; i < arr.size(); ++i) {
    const json &v = arr[i];
    std::string where = "tensors[" + std::to_string(i) + "]";
    object(v, where);
    TensorDecl t;
    t.name = str(req(v, "name", where), where + ".name");
    if (t.name.empty()) fail(where, "empty tensor name");
    where = "tensor '" + t.name + "'";
    if (!names.insert(t.name).second) fail(where, "declared twice");
    std::string role = str(req(v, "role", where), where + ": role");
    if (role == "param") t.role = Role::Param;
    else if (role == "optimizer_state") t.role = Role::OptimizerState;
    else if (role == "input") t.role = Role::Input;
    else if (role == "step") t.role = Role::Step;
    else if (role == "loss") t.role = Role::Loss;
    else if (role == "output") t.role = Role::Output;
    else fail(where, "unknown role \"" + role +
                     "\" (expected param, optimizer_state, input, step, loss or output)");
    t.dtype = dtype(req(v, "dtype", where), where + ": dtype");
    t.shape = shape(req(v, "shape", where), where + ": shape");
    const json &sh = array(req(v, "sharding", where), where + ": sharding");
    if (sh.size() != t.shape.size())
      fail(where, "sharding has " + std::to_string(sh.size()) +
                      " entries for a rank-" + std::to_string(t.shape.size()) + " tensor");
    std::set<int> used;
    for (size_t d = 0; d < sh.size(); ++d) {
      std::vector<int> axes;
      for (int64_t ax : ints(sh[d], where + ": sharding")) {
        if (ax < 0 || ax >= a.mesh.numAxes())
          fail(where, "sharding names mesh axis " + std::to_string(ax) +
                          " but the mesh has " + std::to_string(a.mesh.numAxes()) +
                          " axes");
        if (!used.insert(int(ax)).second)
          fail(where, "sharding uses mesh axis " + std::to_string(ax) + " twice");
        axes.push_back(int(ax));
      }
      // A split that does not divide the dimension pads its pieces.
      t.sharding.push_back(axes);
    }
    if (const json *pieces = opt(v, "pieces")) {
      t.pieces = ints(*pieces, where + ": pieces");
      if (t.pieces.size() != t.shape.size())
        fail(where, "pieces has " + std::to_string(t.pieces.size()) + " entries for a rank-" +
                        std::to_string(t.shape.size()) + " tensor");
      for (size_t d = 0; d < t.pieces.size(); ++d) {
        const int64_t n = a.mesh.groupSize(t.sharding[d]), q = t.pieces[d];
        if (q != 0 && (n <= 1 || q * n < t.shape[d] || q > t.shape[d]))
          fail(where, "dimension " + std::to_string(d) + " of size " +
                          std::to_string(t.shape[d]) + " cannot be split into " +
                          std::to_string(n) + " pieces of " + std::to_string(q));
      }
    }
    auto needDtype = [&](DType d) {
      if (t.dtype != d)
        fail(where, std::string("a ") + roleName(t.role) + " tensor must be " +
                        dtypeName(d) + ", got " + dtypeName(t.dtype));
    };
    const json *init = opt(v, "init");
    const json *max = opt(v, "max");
    switch (t.role) {
    case Role::Param:
    case Role::OptimizerState:
      if (t.role == Role::Param && !isFloat(t.dtype))
        fail(where, std::string("a param tensor must be f32, bf16 or f16, got ") +
                        dtypeName(t.dtype));
      if (t.role == Role::OptimizerState && t.dtype != DType::F32 &&
          !(t.dtype == DType::I64 && t.shape.empty()))
        fail(where, std::string("an optimizer_state tensor must be f32 (or an i64 scalar), got ") +
                        dtypeName(t.dtype) + shapeStr(t.shape));
      if (t.role == Role::Param && !init)
        fail(where, "missing required key \"init\"");
      t.initText = init ? str(*init, where + ": init") : "zeros";
      if (!parseInitSpec(t.initText, t.init))
        fail(where, "bad init \"" + t.initText +
                        "\" (expected normal(STD), uniform(LO,HI), fill(V), zeros or ones)");
      if (t.role == Role::OptimizerState) {
        if (const json *of = opt(v, "of"))
          t.of = str(*of, where + ": of");
        if (const json *kind = opt(v, "kind")) {
          t.kind = str(*kind, where + ": kind");
          if (t.kind != "master" && t.kind != "loss_scale" &&
              t.kind != "loss_scale_good_steps" && t.kind != "skipped_steps")
            fail(where, "unknown kind \"" + t.kind +
                            "\" (expected master, loss_scale, loss_scale_good_steps or "
                            "skipped_steps)");
        }
        if (t.kind == "master" && (t.of.empty() || t.dtype != DType::F32))
          fail(where, "master weights need \"of\" and dtype f32");
        if ((t.kind == "loss_scale" && (t.dtype != DType::F32 || !t.shape.empty())) ||
            ((t.kind == "skipped_steps" || t.kind == "loss_scale_good_steps") &&
             (t.dtype != DType::I64 || !t.shape.empty())))
          fail(where, "a " + t.kind + " tensor must be a scalar of dtype " +
                          (t.kind == "loss_scale" ? "f32" : "i64"));
      }
      break;
    case Role::Input:
      if (isInt(t.dtype)) {
        if (!max) fail(where, "an integer input needs \"max\" (its exclusive bound)");
        t.max = integer(*max, where + ": max");
        int64_t limit = t.dtype == DType::I32 ? (int64_t(1) << 31) : INT64_MAX;
        if (t.max < 1 || t.max > limit)
          fail(where, "max = " + std::to_string(t.max) + " is out of range for " +
                          dtypeName(t.dtype));
      } else if (max) {
        fail(where, "\"max\" is only allowed on integer inputs");
      }
      break;
    case Role::Step:
      needDtype(DType::I64);
      if (!t.shape.empty()) fail(where, "the step tensor must be a scalar (shape [])");
      break;
    case Role::Loss:
      needDtype(DType::F32);
      if (!t.shape.empty()) fail(where, "the loss tensor must be a scalar (shape [])");
      break;
    case Role::Output:
      // A value the program hands back after each step (e.g. gradients for
      // dtc's finite-difference checks); nothing persists or initializes it.
      break;
    }
    a.tensors.push_back(std::move(t));
  }
  int losses = 0, steps = 0;
  for (const TensorDecl &t : a.tensors) {
    losses += t.role == Role::Loss;
    steps += t.role == Role::Step;
    if (t.role == Role::OptimizerState && !t.of.empty()) {
      int p = a.findTensor(t.of);
      if (p < 0 || a.tensors[size_t(p)].role != Role::Param)
        fail("tensor '" + t.name + "'", "\"of\" names '" + t.of +
                                            "', which is not a param tensor");
      const TensorDecl &param = a.tensors[size_t(p)];
      if (t.kind == "master" && param.shape != t.shape)
        fail("tensor '" + t.name + "'", "master weights of shape " + shapeStr(t.shape) +
                                            " for '" + t.of + "' of shape " +
                                            shapeStr(param.shape));
    }
  }
  if (losses != 1)
    fail("tensors", "expected exactly one tensor with role \"loss\", found " +
                        std::to_string(losses));
  if (steps > 1) fail("tensors", "more than one tensor with role \"step\"");
}

MemCategory parseCategory(const Parser &P, const json &v, const std::string &where) {
  std::string s = P.str(v, where);
  for (int i = 0; i < kNumMemCategories; ++i)
    if (s == memCategoryName(MemCategory(i))) return MemCategory(i);
  P.fail(where, "unknown memory category \"" + s +
                    "\" (expected param, grad, optimizer, activation, input, "
                    "constant or scalar)");
}

void Parser::parseProgram(const json &v, const std::string &where0, Artifact &a,
                          ProgramDecl &p) {
  std::string where = where0;
  object(v, where);
  p.name = str(req(v, "name", where), where + ".name");
  where = "program '" + p.name + "'";
  for (int64_t r : ints(req(v, "ranks", where), where + ": ranks")) {
    if (r < 0 || r >= a.devices)
      fail(where, "rank " + std::to_string(r) + " is out of range for " +
                      std::to_string(a.devices) + " devices");
    p.ranks.push_back(int(r));
  }
  if (p.ranks.empty()) fail(where, "\"ranks\" is empty");

  const json &slots = array(req(v, "slots", where), where + ": slots");
  for (size_t i = 0; i < slots.size(); ++i) {
    std::string w = where + ": slots[" + std::to_string(i) + "]";
    object(slots[i], w);
    SlotDecl s;
    int64_t bytes = integer(req(slots[i], "bytes", w), w + ".bytes");
    if (bytes < 0 || bytes > kMaxElements * 8) fail(w, "bad byte count " + std::to_string(bytes));
    s.bytes = uint64_t(bytes);
    s.category = parseCategory(*this, req(slots[i], "category", w), w + ".category");
    p.slots.push_back(s);
  }

  const json &bufs = array(req(v, "buffers", where), where + ": buffers");
  std::vector<std::vector<int>> slotBuffers(p.slots.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    std::string w = where + ": buffer " + std::to_string(i);
    object(bufs[i], w);
    BufferDecl b;
    int64_t slot = integer(req(bufs[i], "slot", w), w + ": slot");
    if (slot < 0 || slot >= int64_t(p.slots.size()))
      fail(w, "slot " + std::to_string(slot) + " does not exist (the program has " +
                  std::to_string(p.slots.size()) + " slots)");
    b.slot = int(slot);
    b.dtype = dtype(req(bufs[i], "dtype", w), w + ": dtype");
    b.shape = shape(req(bufs[i], "shape", w), w + ": shape");
    if (b.bytes() > p.slots[size_t(slot)].bytes)
      fail(w, std::string(dtypeName(b.dtype)) + shapeStr(b.shape) + " needs " +
                  std::to_string(b.bytes()) + " bytes but slot " + std::to_string(slot) +
                  " has " + std::to_string(p.slots[size_t(slot)].bytes));
    if (const json *t = opt(bufs[i], "tensor")) {
      std::string name = str(*t, w + ": tensor");
      b.tensor = a.findTensor(name);
      if (b.tensor < 0) fail(w, "tensor '" + name + "' is not declared in \"tensors\"");
      const TensorDecl &td = a.tensors[size_t(b.tensor)];
      for (size_t j = 0; j < p.buffers.size(); ++j)
        if (p.buffers[j].tensor == b.tensor)
          fail(w, "tensor '" + name + "' is already bound to buffer " + std::to_string(j));
      if (td.dtype != b.dtype)
        fail(w, "dtype " + std::string(dtypeName(b.dtype)) + " differs from tensor '" +
                    name + "' (" + dtypeName(td.dtype) + ")");
      Piece piece = pieceOf(a.mesh, td.sharding, td.shape, a.mesh.coords(p.ranks[0]), td.pieces);
      if (piece.local != b.shape)
        fail(w, "local shape " + shapeStr(b.shape) + " of tensor '" + name +
                    "' does not match its global shape " + shapeStr(td.shape) +
                    " divided by its sharding, " + shapeStr(piece.local));
    }
    slotBuffers[size_t(slot)].push_back(int(i));
    p.buffers.push_back(b);
  }
  // A slot that holds a param, optimizer_state, input or step tensor holds
  // nothing else (other buffers there may only be views of it).
  for (size_t s = 0; s < slotBuffers.size(); ++s) {
    int owner = -1;
    for (int b : slotBuffers[s]) {
      int t = p.buffers[size_t(b)].tensor;
      if (t >= 0 && a.tensors[size_t(t)].role != Role::Loss &&
          a.tensors[size_t(t)].role != Role::Output)
        owner = b;
    }
    if (owner < 0) continue;
    const BufferDecl &ob = p.buffers[size_t(owner)];
    for (int b : slotBuffers[s]) {
      if (b == owner) continue;
      const BufferDecl &bb = p.buffers[size_t(b)];
      if (bb.tensor >= 0 || bb.dtype != ob.dtype || numel(bb.shape) != numel(ob.shape))
        fail(where + ": buffer " + std::to_string(b),
             "shares slot " + std::to_string(s) + " with tensor '" +
                 a.tensors[size_t(ob.tensor)].name + "' (a " +
                 roleName(a.tensors[size_t(ob.tensor)].role) +
                 " slot holds nothing else; only a same-size view is allowed)");
    }
  }

  if (const json *cs = opt(v, "constants")) {
    array(*cs, where + ": constants");
    std::set<int> seen;
    for (size_t i = 0; i < cs->size(); ++i) {
      std::string w = where + ": constants[" + std::to_string(i) + "]";
      const json &c = (*cs)[i];
      object(c, w);
      ConstantDecl cd;
      int64_t bid = integer(req(c, "buffer", w), w + ".buffer");
      if (bid < 0 || bid >= int64_t(p.buffers.size()))
        fail(w, "buffer " + std::to_string(bid) + " does not exist");
      cd.buffer = int(bid);
      const BufferDecl &b = p.buffers[size_t(bid)];
      if (b.tensor >= 0)
        fail(w, "buffer " + std::to_string(bid) + " holds tensor '" +
                    a.tensors[size_t(b.tensor)].name + "' and cannot be a constant");
      if (!seen.insert(cd.buffer).second)
        fail(w, "buffer " + std::to_string(bid) + " is filled by two constants");
      const json *splat = opt(c, "splat");
      const json *data = opt(c, "data");
      if (!!splat == !!data) fail(w, "needs exactly one of \"splat\" and \"data\"");
      if (splat) {
        cd.isSplat = true;
        cd.splat = number(*splat, w + ".splat");
        if (isInt(b.dtype)) {
          double lim = b.dtype == DType::I32 ? 2147483648.0 : 9223372036854775808.0;
          if (cd.splat != std::trunc(cd.splat) || cd.splat < -lim || cd.splat >= lim)
            fail(w, "splat value is not a valid " + std::string(dtypeName(b.dtype)));
        }
      } else {
        cd.isSplat = false;
        std::string text = str(*data, w + ".data");
        if (!base64Decode(text, cd.data)) fail(w, "\"data\" is not valid base64");
        if (cd.data.size() != b.bytes())
          fail(w, "\"data\" has " + std::to_string(cd.data.size()) + " bytes but buffer " +
                      std::to_string(bid) + " (" + dtypeName(b.dtype) + shapeStr(b.shape) +
                      ") has " + std::to_string(b.bytes()));
      }
      p.constants.push_back(std::move(cd));
    }
  }

  const json &instrs = array(req(v, "instructions", where), where + ": instructions");
  for (size_t i = 0; i < instrs.size(); ++i) {
    std::string w = where + ": instruction " + std::to_string(i);
    const json &iv = instrs[i];
    object(iv, w);
    InstrDecl ins;
    ins.op = str(req(iv, "op", w), w + ": op");
    w += " (" + ins.op + ")";
    for (const char *key : {"in", "out"}) {
      for (int64_t id : ints(req(iv, key, w), w + ": " + key)) {
        if (id < 0 || id >= int64_t(p.buffers.size()))
          fail(w, std::string(key) + " names buffer " + std::to_string(id) +
                      ", which does not exist (the program has " +
                      std::to_string(p.buffers.size()) + " buffers)");
        (key[0] == 'i' ? ins.in : ins.out).push_back(int(id));
      }
    }
    if (const json *at = opt(iv, "attrs")) ins.attrs = object(*at, w + ": attrs");
    checkInstruction(a, p, i, ins, w);
    p.instructions.push_back(std::move(ins));
  }
}

void Parser::checkInstruction(const Artifact &a, const ProgramDecl &p, size_t,
                              InstrDecl &ins, const std::string &w) {
  auto descs = [&](const std::vector<int> &ids) {
    std::vector<kernels::TensorDesc> d;
    for (int id : ids) d.push_back({p.buffers[size_t(id)].dtype, p.buffers[size_t(id)].shape});
    return d;
  };
  std::vector<std::pair<int, int>> inPlace;
  auto arity = [&](size_t nin, size_t nout, size_t optional = 0) {
    if (ins.in.size() < nin || ins.in.size() > nin + optional || ins.out.size() != nout)
      fail(w, "expects " + std::to_string(nin) +
                  (optional ? " to " + std::to_string(nin + optional) : std::string()) +
                  " input(s) and " + std::to_string(nout) + " output(s), got " +
                  std::to_string(ins.in.size()) + " and " + std::to_string(ins.out.size()));
  };
  if (parseCollKind(ins.op, ins.coll)) {
    ins.isCollective = true;
    arity(1, 1);
    const BufferDecl &in = p.buffers[size_t(ins.in[0])], &out = p.buffers[size_t(ins.out[0])];
    const json &at = ins.attrs;
    auto attrStr = [&](const char *k) { return str(req(at, k, w), w + ": attribute '" + k + "'"); };
    auto attrAxis = [&](const char *k) {
      int64_t ax = integer(req(at, k, w), w + ": attribute '" + k + "'");
      if (ax < 0 || ax >= int64_t(in.shape.size()))
        fail(w, std::string("attribute '") + k + "' = " + std::to_string(ax) +
                    " is out of range for a rank-" + std::to_string(in.shape.size()) +
                    " operand");
      return int(ax);
    };
    std::string cname = attrStr("comm");
    ins.comm = a.findComm(cname);
    if (ins.comm < 0) fail(w, "communicator '" + cname + "' is not declared");
    const int64_t n = a.mesh.groupSize(a.comms[size_t(ins.comm)].meshAxes);
    if (in.dtype != out.dtype)
      fail(w, std::string("input and output dtypes differ (") + dtypeName(in.dtype) +
                  " vs " + dtypeName(out.dtype) + ")");
    Shape expect = in.shape;
    auto reduction = [&]() {
      std::string r = attrStr("reduction");
      if (r == "sum") ins.reduce = ReduceOp::Sum;
      else if (r == "max") ins.reduce = ReduceOp::Max;
      else if (r == "min") ins.reduce = ReduceOp::Min;
      else if (r == "average") ins.reduce = ReduceOp::Average;
      else fail(w, "unknown reduction \"" + r + "\" (expected sum, max, min or average)");
      if (ins.reduce == ReduceOp::Average && !isFloat(in.dtype))
        fail(w, "reduction \"average\" needs a float operand");
    };
    auto divides = [&](int ax) {
      if (in.shape[size_t(ax)] % n != 0)
        fail(w, "dimension " + std::to_string(ax) + " of size " +
                    std::to_string(in.shape[size_t(ax)]) +
                    " is not divisible by the group size " + std::to_string(n));
    };
    switch (ins.coll) {
    case CollKind::AllReduce:
      reduction();
      inPlace.push_back({0, 0});
      break;
    case CollKind::AllGather:
      ins.axis = attrAxis("axis");
      expect[size_t(ins.axis)] *= n;
      break;
    case CollKind::ReduceScatter:
      reduction();
      ins.axis = attrAxis("axis");
      divides(ins.axis);
      expect[size_t(ins.axis)] /= n;
      break;
    case CollKind::AllSlice:
      ins.axis = attrAxis("axis");
      divides(ins.axis);
      expect[size_t(ins.axis)] /= n;
      break;
    case CollKind::AllToAll:
      ins.splitAxis = attrAxis("split_axis");
      ins.concatAxis = attrAxis("concat_axis");
      divides(ins.splitAxis);
      expect[size_t(ins.splitAxis)] /= n;
      expect[size_t(ins.concatAxis)] *= n;
      break;
    }
    if (out.shape != expect)
      fail(w, "output shape " + shapeStr(out.shape) + " should be " + shapeStr(expect) +
                  " (input " + shapeStr(in.shape) + ", group size " + std::to_string(n) + ")");
  } else {
    const kernels::KernelInfo *k = kernels::findKernel(ins.op);
    if (k && ins.op == "shard_offset") {
      // Rank-dependent: its mesh axes must exist on this mesh.
      std::set<int64_t> seen;
      const json *axes = opt(ins.attrs, "grid_axes");
      if (axes && axes->is_array())
        for (const json &ax : *axes)
          if (ax.is_number_integer() &&
              (ax.get<int64_t>() >= a.mesh.numAxes() || !seen.insert(ax.get<int64_t>()).second))
            fail(w, "attribute 'grid_axes' names mesh axis " + std::to_string(ax.get<int64_t>()) +
                        " twice or beyond the mesh " + a.mesh.str());
    }
    if (!k) fail(w, "unknown kernel \"" + ins.op + "\"");
    arity(size_t(k->numIn), size_t(k->numOut), size_t(k->numOptionalIn));
    try {
      k->check(descs(ins.in), descs(ins.out), ins.attrs);
    } catch (const Error &e) {
      fail(w, e.what());
    }
    inPlace = k->inPlace;
  }
  // Aliasing: an output may share memory (buffer or slot) with an input only
  // where the op runs in place; outputs never share memory with each other.
  for (size_t o = 0; o < ins.out.size(); ++o) {
    const int os = p.buffers[size_t(ins.out[o])].slot;
    for (size_t i = 0; i < ins.in.size(); ++i) {
      if (p.buffers[size_t(ins.in[i])].slot != os) continue;
      bool ok = std::find(inPlace.begin(), inPlace.end(),
                          std::make_pair(int(o), int(i))) != inPlace.end();
      if (!ok)
        fail(w, "output " + std::to_string(o) + " (buffer " + std::to_string(ins.out[o]) +
                    ") shares memory with input " + std::to_string(i) + " (buffer " +
                    std::to_string(ins.in[i]) + "), but " + ins.op +
                    " cannot run in place there");
    }
    for (size_t o2 = 0; o2 < o; ++o2)
      if (p.buffers[size_t(ins.out[o2])].slot == os)
        fail(w, "outputs " + std::to_string(o2) + " and " + std::to_string(o) +
                    " share memory (slot " + std::to_string(os) + ")");
  }
}

Artifact Parser::parse(const json &body) {
  Artifact a;
  a.label = label_;
  object(body, "");
  if (str(req(body, "format", ""), "format") != "dtc-artifact")
    fail("format", "expected \"dtc-artifact\"");
  int64_t version = integer(req(body, "version", ""), "version");
  if (version != kArtifactVersion)
    fail("version", "unsupported body version " + std::to_string(version) +
                        " (this runtime reads version " + std::to_string(kArtifactVersion) +
                        "; recompile the model with this dtc)");
  a.version = kArtifactVersion;
  if (const json *v = opt(body, "producer")) a.producer = str(*v, "producer");
  if (const json *v = opt(body, "source")) a.source = str(*v, "source");
  std::vector<int64_t> mesh = ints(req(body, "mesh", ""), "mesh");
  if (mesh.empty()) fail("mesh", "must list at least one axis");
  int64_t prod = 1;
  for (int64_t m : mesh) {
    if (m < 1) fail("mesh", "axis sizes must be >= 1");
    if (prod > (int64_t(1) << 24) / m) fail("mesh", "too many devices");
    prod *= m;
  }
  a.mesh = Mesh(mesh);
  a.devices = integer(req(body, "devices", ""), "devices");
  if (a.devices != prod)
    fail("devices", std::to_string(a.devices) + " does not match the mesh " + a.mesh.str() +
                        " (" + std::to_string(prod) + " devices)");
  if (const json *v = opt(body, "plan")) a.plan = object(*v, "plan");
  if (const json *v = opt(body, "optimizer")) a.optimizer = object(*v, "optimizer");

  const json &comms = array(req(body, "communicators", ""), "communicators");
  std::set<std::string> commNames;
  for (size_t i = 0; i < comms.size(); ++i) {
    std::string w = "communicators[" + std::to_string(i) + "]";
    object(comms[i], w);
    CommDecl c;
    c.name = str(req(comms[i], "name", w), w + ".name");
    if (c.name.empty()) fail(w, "empty communicator name");
    w = "communicator '" + c.name + "'";
    if (!commNames.insert(c.name).second) fail(w, "declared twice");
    for (int64_t ax : ints(req(comms[i], "mesh_axes", w), w + ": mesh_axes")) {
      if (ax < 0 || ax >= a.mesh.numAxes())
        fail(w, "mesh axis " + std::to_string(ax) + " does not exist (the mesh " +
                    a.mesh.str() + " has " + std::to_string(a.mesh.numAxes()) + " axes)");
      if (std::find(c.meshAxes.begin(), c.meshAxes.end(), int(ax)) != c.meshAxes.end())
        fail(w, "mesh axis " + std::to_string(ax) + " listed twice");
      c.meshAxes.push_back(int(ax));
    }
    a.comms.push_back(std::move(c));
  }

  parseTensors(array(req(body, "tensors", ""), "tensors"), a);

  const json &progs = array(req(body, "programs", ""), "programs");
  if (progs.empty()) fail("programs", "the artifact has no program");
  std::vector<int> owner(static_cast<size_t>(a.devices), -1);
  for (size_t i = 0; i < progs.size(); ++i) {
    ProgramDecl p;
    parseProgram(progs[i], "programs[" + std::to_string(i) + "]", a, p);
    for (size_t j = 0; j < a.programs.size(); ++j)
      if (a.programs[j].name == p.name) fail("program '" + p.name + "'", "declared twice");
    for (int r : p.ranks) {
      if (owner[size_t(r)] >= 0)
        fail("program '" + p.name + "'",
             "rank " + std::to_string(r) + " is already run by program '" +
                 (owner[size_t(r)] == int(i) ? p.name : a.programs[size_t(owner[size_t(r)])].name) +
                 "'");
      owner[size_t(r)] = int(i);
    }
    a.programs.push_back(std::move(p));
  }
  for (size_t r = 0; r < owner.size(); ++r)
    if (owner[r] < 0)
      fail("programs", "rank " + std::to_string(r) + " is not run by any program");
  // Tensors that must live somewhere.
  for (size_t t = 0; t < a.tensors.size(); ++t) {
    const TensorDecl &td = a.tensors[t];
    if (td.role == Role::Step) continue;
    bool bound = false;
    for (size_t p = 0; p < a.programs.size(); ++p)
      bound = bound || a.bufferOf(int(p), int(t)) >= 0;
    if (!bound)
      fail("tensor '" + td.name + "'", std::string("no program binds this ") +
                                           roleName(td.role) + " tensor to a buffer");
  }
  checkProgramsAgree(a, owner);
  return a;
}

// ---- the programs against each other --------------------------------------------
//
// Ranks running different programs must still make matching calls on every
// communicator group they share: the same collectives in the same order,
// with the same element type, counts and reduction (a mismatch would
// overflow a buffer or wait forever). all_slice is left out: it does not
// communicate. Then the calls of all ranks are replayed together to find an
// order that waits forever (rank A in a collective on X while rank B, which
// A needs there, waits in one on Y).

namespace {
struct Call {
  int comm;
  CollKind kind;
  DType dtype;
  ReduceOp reduce;
  int64_t inCount, outCount;
  size_t instruction;
};

std::vector<Call> callsOf(const ProgramDecl &p) {
  std::vector<Call> calls;
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const InstrDecl &ins = p.instructions[i];
    if (!ins.isCollective || ins.coll == CollKind::AllSlice) continue;
    const BufferDecl &in = p.buffers[size_t(ins.in[0])], &out = p.buffers[size_t(ins.out[0])];
    const bool reduces = ins.coll == CollKind::AllReduce || ins.coll == CollKind::ReduceScatter;
    calls.push_back({ins.comm, ins.coll, in.dtype, reduces ? ins.reduce : ReduceOp::Sum,
                     numel(in.shape), numel(out.shape), i});
  }
  return calls;
}

const char *reduceName(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return "sum";
  case ReduceOp::Max: return "max";
  case ReduceOp::Min: return "min";
  case ReduceOp::Average: return "average";
  }
  return "?";
}

std::string describe(const Artifact &a, const ProgramDecl &p, const Call &c) {
  std::string s = std::string(collKindName(c.kind));
  if (c.kind == CollKind::AllReduce || c.kind == CollKind::ReduceScatter)
    s += std::string(" (") + reduceName(c.reduce) + ")";
  s += " of " + std::to_string(c.inCount) + " " + dtypeName(c.dtype);
  if (c.outCount != c.inCount) s += " into " + std::to_string(c.outCount);
  s += " on '" + a.comms[size_t(c.comm)].name + "' ('" + p.name + "' instruction " +
       std::to_string(c.instruction) + ")";
  return s;
}

bool sameCall(const Call &x, const Call &y) {
  return x.kind == y.kind && x.dtype == y.dtype && x.reduce == y.reduce &&
         x.inCount == y.inCount && x.outCount == y.outCount;
}

std::string ranksText(const std::vector<int64_t> &ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) s += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  return s;
}
} // namespace

void Parser::checkProgramsAgree(const Artifact &a, const std::vector<int> &programOfRank) {
  if (a.programs.size() < 2) return; // one program: every rank makes the same calls
  std::vector<std::vector<Call>> calls;
  for (const ProgramDecl &p : a.programs) calls.push_back(callsOf(p));
  std::vector<std::vector<int64_t>> coords(size_t(a.devices));
  for (int64_t r = 0; r < a.devices; ++r) coords[size_t(r)] = a.mesh.coords(r);
  // Per communicator: each rank's group (color) and each group's members.
  std::vector<std::vector<int64_t>> colorOf(a.comms.size());
  std::vector<std::map<int64_t, std::vector<int64_t>>> groupsOf(a.comms.size());
  for (size_t c = 0; c < a.comms.size(); ++c)
    for (int64_t r = 0; r < a.devices; ++r) {
      colorOf[c].push_back(a.mesh.groupColor(coords[size_t(r)], a.comms[c].meshAxes));
      groupsOf[c][colorOf[c].back()].push_back(r);
    }
  auto membersOf = [&](int comm, int64_t rank) -> const std::vector<int64_t> & {
    return groupsOf[size_t(comm)][colorOf[size_t(comm)][size_t(rank)]];
  };

  // 1. Per communicator group: the same sequence of calls in every program.
  std::set<std::tuple<int, int, int>> compared; // (comm, program, program)
  for (size_t c = 0; c < a.comms.size(); ++c) {
    std::map<int64_t, int64_t> firstOfGroup; // color -> lowest rank
    for (int64_t r = 0; r < a.devices; ++r) {
      auto [it, isNew] = firstOfGroup.emplace(colorOf[c][size_t(r)], r);
      if (isNew) continue;
      const int p = programOfRank[size_t(it->second)], q = programOfRank[size_t(r)];
      if (p == q || !compared.insert({int(c), p, q}).second) continue;
      std::vector<Call> x, y;
      for (const Call &k : calls[size_t(p)]) if (k.comm == int(c)) x.push_back(k);
      for (const Call &k : calls[size_t(q)]) if (k.comm == int(c)) y.push_back(k);
      const ProgramDecl &P = a.programs[size_t(p)], &Q = a.programs[size_t(q)];
      const std::string who = "programs '" + P.name + "' (rank " + std::to_string(it->second) +
                              ") and '" + Q.name + "' (rank " + std::to_string(r) +
                              ") disagree on communicator '" + a.comms[c].name +
                              "' (the group of ranks " +
                              ranksText(membersOf(int(c), r)) + "): ";
      for (size_t i = 0; i < x.size() && i < y.size(); ++i)
        if (!sameCall(x[i], y[i]))
          fail("", who + "its collective #" + std::to_string(i + 1) + " is " +
                       describe(a, P, x[i]) + " in one and " + describe(a, Q, y[i]) +
                       " in the other");
      if (x.size() != y.size()) {
        const bool pLonger = x.size() > y.size();
        const Call &extra = pLonger ? x[y.size()] : y[x.size()];
        fail("", who + "'" + P.name + "' makes " + std::to_string(x.size()) + " collective" +
                     (x.size() == 1 ? "" : "s") + " on it and '" + Q.name + "' " +
                     std::to_string(y.size()) + "; the first without a partner is " +
                     describe(a, pLonger ? P : Q, extra));
      }
    }
  }

  // 2. Replay every rank's calls: a call completes when every member of its
  //    group has it next. Count arrivals per group instead of rescanning.
  std::map<std::pair<int, int64_t>, int> groupId; // (comm, color) -> id
  std::vector<const std::vector<int64_t> *> members;
  auto groupOf = [&](int comm, int64_t rank) {
    const int64_t color = colorOf[size_t(comm)][size_t(rank)];
    auto [it, isNew] = groupId.emplace(std::make_pair(comm, color), int(members.size()));
    if (isNew) members.push_back(&membersOf(comm, rank));
    return it->second;
  };
  std::vector<size_t> next(size_t(a.devices), 0);
  std::vector<int> arrived;
  std::vector<int> ready;
  auto arrive = [&](int64_t r) {
    const std::vector<Call> &mine = calls[size_t(programOfRank[size_t(r)])];
    if (next[size_t(r)] >= mine.size()) return;
    const int g = groupOf(mine[next[size_t(r)]].comm, r);
    if (arrived.size() < members.size()) arrived.resize(members.size(), 0);
    if (++arrived[size_t(g)] == int(members[size_t(g)]->size())) ready.push_back(g);
  };
  for (int64_t r = 0; r < a.devices; ++r) arrive(r);
  while (!ready.empty()) {
    const int g = ready.back();
    ready.pop_back();
    arrived[size_t(g)] = 0;
    const std::vector<int64_t> &group = *members[size_t(g)];
    for (int64_t m : group) ++next[size_t(m)];
    for (int64_t m : group) arrive(m);
  }
  for (int64_t r = 0; r < a.devices; ++r) {
    const int p = programOfRank[size_t(r)];
    const std::vector<Call> &mine = calls[size_t(p)];
    if (next[size_t(r)] >= mine.size()) continue;
    const Call &waits = mine[next[size_t(r)]];
    for (int64_t m : *members[size_t(groupOf(waits.comm, r))]) {
      const std::vector<Call> &theirs = calls[size_t(programOfRank[size_t(m)])];
      if (next[size_t(m)] < theirs.size() && theirs[next[size_t(m)]].comm == waits.comm) continue;
      fail("", "the programs' collectives wait for each other forever: rank " +
                   std::to_string(r) + " waits in " + describe(a, a.programs[size_t(p)], waits) +
                   " for rank " + std::to_string(m) + ", which " +
                   (next[size_t(m)] < theirs.size()
                        ? "waits in " + describe(a, a.programs[size_t(programOfRank[size_t(m)])],
                                                 theirs[next[size_t(m)]])
                        : std::string("has no collective left")));
    }
  }
}

} // namespace

Artifact parseArtifact(const json &body, const std::string &label) {
  return Parser(label).parse(body);
}

Artifact loadArtifactBytes(std::string_view fileBytes, const std::string &label) {
  json body;
  std::string error;
  if (!decodeArtifactJson(fileBytes, body, error)) throw Error(label + ": " + error);
  return parseArtifact(body, label);
}

Artifact loadArtifactFile(const std::string &path) {
  std::string bytes, error;
  if (!readFileBytes(path, bytes, error)) throw Error(path + ": " + error);
  return loadArtifactBytes(bytes, path);
}

void checkRankCount(const Artifact &a, int64_t ranks) {
  if (ranks != a.devices)
    throw Error(a.label + ": the artifact was compiled for " + std::to_string(a.devices) +
                " device" + (a.devices == 1 ? "" : "s") + " (mesh " + a.mesh.str() +
                ") but " + std::to_string(ranks) + " rank" + (ranks == 1 ? " is" : "s are") +
                " running; start it with mpirun -np " + std::to_string(a.devices) +
                " (or dtc run)");
}

bool checkArtifact(const json &body, const std::string &label, int64_t ranks,
                   std::string &error) noexcept {
  try {
    Artifact a = parseArtifact(body, label);
    if (ranks > 0) checkRankCount(a, ranks);
    return true;
  } catch (const std::exception &e) {
    error = e.what();
    return false;
  } catch (...) {
    error = label + ": unknown error";
    return false;
  }
}

} // namespace dtc::rt
