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
  case Role::Param:
    return "param";
  case Role::OptimizerState:
    return "optimizer_state";
  case Role::Input:
    return "input";
  case Role::Step:
    return "step";
  case Role::Loss:
    return "loss";
  case Role::Output:
    return "output";
  }
  return "?";
}

const char *memCategoryName(MemCategory c) {
  switch (c) {
  case MemCategory::Param:
    return "param";
  case MemCategory::Grad:
    return "grad";
  case MemCategory::Optimizer:
    return "optimizer";
  case MemCategory::Activation:
    return "activation";
  case MemCategory::Input:
    return "input";
  case MemCategory::Constant:
    return "constant";
  case MemCategory::Scalar:
    return "scalar";
  }
  return "?";
}

const char *collKindName(CollKind k) {
  switch (k) {
  case CollKind::AllReduce:
    return "all_reduce";
  case CollKind::AllGather:
    return "all_gather";
  case CollKind::ReduceScatter:
    return "reduce_scatter";
  case CollKind::AllSlice:
    return "all_slice";
  case CollKind::AllToAll:
    return "all_to_all";
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
  if (t == "zeros") {
    out = {InitSpec::Zeros, 0, 0};
    return true;
  }
  if (t == "ones") {
    out = {InitSpec::Ones, 0, 0};
    return true;
  }
  auto args = [&](const std::string &fn, std::vector<double> &vals) {
    if (t.size() < fn.size() + 2 ||
        t.compare(0, fn.size() + 1, fn + "(") != 0 || t.back() != ')')
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
    if (v.size() != 1 || v[0] < 0)
      return false;
    out = {InitSpec::Normal, v[0], 0};
    return true;
  }
  v.clear();
  if (args("fill", v)) {
    if (v.size() != 1)
      return false;
    out = {InitSpec::Fill, v[0], 0};
    return true;
  }
  v.clear();
  if (args("uniform", v)) {
    if (v.size() != 2 || !(v[0] <= v[1]))
      return false;
    out = {InitSpec::Uniform, v[0], v[1]};
    return true;
  }
  return false;
}

// ---- mesh and shardings
// -------------------------------------------------------

Mesh::Mesh(std::vector<int64_t> axes) : axes_(std::move(axes)) {}

int64_t Mesh::devices() const {
  int64_t n = 1;
  for (int64_t a : axes_)
    n *= a;
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
  for (int a : axes)
    n *= axes_[size_t(a)];
  return n;
}

int64_t Mesh::groupIndex(const std::vector<int64_t> &c,
                         const std::vector<int> &axes) const {
  int64_t idx = 0;
  for (int a : axes)
    idx = idx * axes_[size_t(a)] + c[size_t(a)];
  return idx;
}

int64_t Mesh::groupColor(const std::vector<int64_t> &c,
                         const std::vector<int> &axes) const {
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
              const std::vector<int64_t> &coords,
              const std::vector<int64_t> &pieces) {
  Piece p;
  p.local = global;
  p.extent = global;
  p.offset.assign(global.size(), 0);
  for (size_t d = 0; d < global.size() && d < sharding.size(); ++d) {
    const int64_t n = mesh.groupSize(sharding[d]);
    if (n <= 1)
      continue;
    const int64_t idx = mesh.groupIndex(coords, sharding[d]);
    // Pieces of ceil(G/n); the last ones may be partly or wholly padding.
    p.local[d] = d < pieces.size() && pieces[d] > 0 ? pieces[d]
                                                    : (global[d] + n - 1) / n;
    p.offset[d] = idx * p.local[d];
    p.extent[d] =
        std::max<int64_t>(0, std::min(p.local[d], global[d] - p.offset[d]));
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
    if (E[d] == 0)
      return; // a piece of padding only
  std::vector<int64_t> gstride(R, 1), lstride(R, 1);
  for (size_t d = R - 1; d-- > 0;) {
    gstride[d] = gstride[d + 1] * global[d + 1];
    lstride[d] = lstride[d + 1] * L[d + 1];
  }
  // Dims k+1.. are whole, so a run spans dims k..R-1.
  size_t k = R - 1;
  while (k > 0 && L[k] == global[k] && E[k] == global[k])
    --k;
  const int64_t runLen = E[k] * lstride[k];
  int64_t base = 0;
  for (size_t d = 0; d < R; ++d)
    base += O[d] * gstride[d];
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
      if (d == 0)
        return;
      --d;
      if (++idx[d] < E[d])
        break;
      idx[d] = 0;
    }
  }
}

// ---- Artifact lookups
// ---------------------------------------------------------

int Artifact::findTensor(const std::string &name) const {
  if (tensorIndex.size() == tensors.size()) {
    auto it = tensorIndex.find(name);
    return it == tensorIndex.end() ? -1 : it->second;
  }
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name)
      return int(i);
  return -1;
}
int Artifact::findComm(const std::string &name) const {
  for (size_t i = 0; i < comms.size(); ++i)
    if (comms[i].name == name)
      return int(i);
  return -1;
}
int Artifact::programOf(int64_t rank) const {
  for (size_t p = 0; p < programs.size(); ++p)
    for (int r : programs[p].ranks)
      if (r == rank)
        return int(p);
  return -1;
}
std::vector<int> Artifact::tensorsWithRole(Role r) const {
  std::vector<int> out;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].role == r)
      out.push_back(int(i));
  return out;
}
int Artifact::bufferOf(int p, int t) const {
  const ProgramDecl &prog = programs[size_t(p)];
  if (prog.tensorBuffer.size() == tensors.size())
    return t >= 0 && size_t(t) < tensors.size() ? prog.tensorBuffer[size_t(t)]
                                                : -1;
  for (size_t b = 0; b < prog.buffers.size(); ++b)
    if (prog.buffers[b].tensor == t)
      return int(b);
  return -1;
}

// ---- parsing
// --------------------------------------------------------------------

namespace {

constexpr int64_t kMaxElements = kMaxTensorElements;

class Parser {
public:
  explicit Parser(std::string label) : label_(std::move(label)) {}

  [[noreturn]] void fail(const std::string &where,
                         const std::string &msg) const {
    throw Error(label_ + ": " + (where.empty() ? "" : where + ": ") + msg);
  }

  const json &req(const json &obj, const char *key,
                  const std::string &where) const {
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
    if (!v.is_string())
      fail(where, "must be a string, got " + typeOf(v));
    return v.get<std::string>();
  }
  int64_t integer(const json &v, const std::string &where) const {
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
      fail(where, "must be an integer, got " + typeOf(v));
    return v.get<int64_t>();
  }
  double number(const json &v, const std::string &where) const {
    if (!v.is_number())
      fail(where, "must be a number, got " + typeOf(v));
    double d = v.get<double>();
    if (!std::isfinite(d))
      fail(where, "must be finite");
    return d;
  }
  const json &array(const json &v, const std::string &where) const {
    if (!v.is_array())
      fail(where, "must be an array, got " + typeOf(v));
    return v;
  }
  const json &object(const json &v, const std::string &where) const {
    if (!v.is_object())
      fail(where, "must be an object, got " + typeOf(v));
    return v;
  }
  std::vector<int64_t> ints(const json &v, const std::string &where) const {
    std::vector<int64_t> r;
    for (const json &e : array(v, where))
      r.push_back(integer(e, where + " entry"));
    return r;
  }
  Shape shape(const json &v, const std::string &where) const {
    Shape s = ints(v, where);
    int64_t n = 1;
    for (int64_t d : s) {
      if (d < 1)
        fail(where, "dimension sizes must be >= 1, got " + shapeStr(s));
      if (n > kMaxElements / d)
        fail(where, "shape " + shapeStr(s) + " is too large");
      n *= d;
    }
    return s;
  }
  DType dtype(const json &v, const std::string &where) const {
    std::string s = str(v, where);
    DType d;
    if (!parseDType(s, d))
      fail(where,
           "unknown dtype \"" + s + "\" (expected f32, bf16, f16, i32 or i64)");
    return d;
  }
  static std::string typeOf(const json &v) {
    if (v.is_number_integer())
      return "an integer";
    if (v.is_number())
      return "a number";
    if (v.is_string())
      return "a string";
    if (v.is_boolean())
      return "a boolean";
    if (v.is_array())
      return "an array";
    if (v.is_object())
      return "an object";
    return "null";
  }

  Artifact parse(const json &body);

private:
  void parseTensors(const json &arr, Artifact &a);
  void parseProgram(const json &v, const std::string &where, Artifact &a,
                    ProgramDecl &p);
  void parseInstructions(const json &list, const std::string &where,
                         const Artifact &a, const ProgramDecl &p,
                         std::vector<InstrDecl> &out);
  void checkInstruction(const Artifact &a, const ProgramDecl &p, size_t i,
                        InstrDecl &ins, const std::string &where);
  void checkPipelineInstruction(const Artifact &a, const ProgramDecl &p,
                                InstrDecl &ins, const std::string &where);
  void checkPipeline(const Artifact &a);
  void checkProgramsAgree(const Artifact &a,
                          const std::vector<int> &programOfRank);
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
    if (t.name.empty())
      fail(where, "empty tensor name");
    where = "tensor '" + t.name + "'";
    if (!names.insert(t.name).second)
      fail(where, "declared twice");
    std::string role = str(req(v, "role", where), where + ": role");
    if (role == "param")
      t.role = Role::Param;
    else if (role == "optimizer_state")
      t.role = Role::OptimizerState;
    else if (role == "input")
      t.role = Role::Input;
    else if (role == "step")
      t.role = Role::Step;
    else if (role == "loss")
      t.role = Role::Loss;
    else if (role == "output")
      t.role = Role::Output;
    else
      fail(where, "unknown role \"" + role +
                      "\" (expected param, optimizer_state, input, step, loss "
                      "or output)");
    t.dtype = dtype(req(v, "dtype", where), where + ": dtype");
    t.shape = shape(req(v, "shape", where), where + ": shape");
    const json &sh = array(req(v, "sharding", where), where + ": sharding");
    if (sh.size() != t.shape.size())
      fail(where, "sharding has " + std::to_string(sh.size()) +
                      " entries for a rank-" + std::to_string(t.shape.size()) +
                      " tensor");
    std::set<int> used;
    for (size_t d = 0; d < sh.size(); ++d) {
      std::vector<int> axes;
      for (int64_t ax : ints(sh[d], where + ": sharding")) {
        if (ax < 0 || ax >= a.mesh.numAxes())
          fail(where, "sharding names mesh axis " + std::to_string(ax) +
                          " but the mesh has " +
                          std::to_string(a.mesh.numAxes()) + " axes");
        if (!used.insert(int(ax)).second)
          fail(where,
               "sharding uses mesh axis " + std::to_string(ax) + " twice");
        axes.push_back(int(ax));
      }
      // A split that does not divide the dimension pads its pieces.
      t.sharding.push_back(axes);
    }
    if (const json *pieces = opt(v, "pieces")) {
      t.pieces = ints(*pieces, where + ": pieces");
      if (t.pieces.size() != t.shape.size())
        fail(where, "pieces has " + std::to_string(t.pieces.size()) +
                        " entries for a rank-" +
                        std::to_string(t.shape.size()) + " tensor");
      for (size_t d = 0; d < t.pieces.size(); ++d) {
        const int64_t n = a.mesh.groupSize(t.sharding[d]), q = t.pieces[d];
        if (q != 0 && (n <= 1 || q * n < t.shape[d] || q > t.shape[d]))
          fail(where, "dimension " + std::to_string(d) + " of size " +
                          std::to_string(t.shape[d]) +
                          " cannot be split into " + std::to_string(n) +
                          " pieces of " + std::to_string(q));
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
        fail(where,
             std::string("a param tensor must be f32, bf16 or f16, got ") +
                 dtypeName(t.dtype));
      if (t.role == Role::OptimizerState && t.dtype != DType::F32 &&
          !(t.dtype == DType::I64 && t.shape.empty()))
        fail(where, std::string("an optimizer_state tensor must be f32 (or an "
                                "i64 scalar), got ") +
                        dtypeName(t.dtype) + shapeStr(t.shape));
      if (t.role == Role::Param && !init)
        fail(where, "missing required key \"init\"");
      t.initText = init ? str(*init, where + ": init") : "zeros";
      if (!parseInitSpec(t.initText, t.init))
        fail(where, "bad init \"" + t.initText +
                        "\" (expected normal(STD), uniform(LO,HI), fill(V), "
                        "zeros or ones)");
      if (t.role == Role::OptimizerState) {
        if (const json *of = opt(v, "of"))
          t.of = str(*of, where + ": of");
        if (const json *kind = opt(v, "kind")) {
          t.kind = str(*kind, where + ": kind");
          if (t.kind != "master" && t.kind != "loss_scale" &&
              t.kind != "loss_scale_good_steps" && t.kind != "skipped_steps")
            fail(
                where,
                "unknown kind \"" + t.kind +
                    "\" (expected master, loss_scale, loss_scale_good_steps or "
                    "skipped_steps)");
        }
        if (t.kind == "master" && (t.of.empty() || t.dtype != DType::F32))
          fail(where, "master weights need \"of\" and dtype f32");
        if ((t.kind == "loss_scale" &&
             (t.dtype != DType::F32 || !t.shape.empty())) ||
            ((t.kind == "skipped_steps" || t.kind == "loss_scale_good_steps") &&
             (t.dtype != DType::I64 || !t.shape.empty())))
          fail(where, "a " + t.kind + " tensor must be a scalar of dtype " +
                          (t.kind == "loss_scale" ? "f32" : "i64"));
      }
      break;
    case Role::Input:
      if (isInt(t.dtype)) {
        if (!max)
          fail(where, "an integer input needs \"max\" (its exclusive bound)");
        t.max = integer(*max, where + ": max");
        int64_t limit = t.dtype == DType::I32 ? (int64_t(1) << 31) : INT64_MAX;
        if (t.max < 1 || t.max > limit)
          fail(where, "max = " + std::to_string(t.max) +
                          " is out of range for " + dtypeName(t.dtype));
      } else if (max) {
        fail(where, "\"max\" is only allowed on integer inputs");
      }
      break;
    case Role::Step:
      needDtype(DType::I64);
      if (!t.shape.empty())
        fail(where, "the step tensor must be a scalar (shape [])");
      break;
    case Role::Loss:
      needDtype(DType::F32);
      if (!t.shape.empty())
        fail(where, "the loss tensor must be a scalar (shape [])");
      break;
    case Role::Output:
      // A value the program hands back after each step (e.g. gradients for
      // dtc's finite-difference checks); nothing persists or initializes it.
      break;
    }
    a.tensorIndex.emplace(t.name, int(a.tensors.size()));
    a.tensors.push_back(std::move(t));
  }
  int losses = 0, steps = 0;
  for (const TensorDecl &t : a.tensors) {
    losses += t.role == Role::Loss;
    steps += t.role == Role::Step;
    if (t.role == Role::OptimizerState && !t.of.empty()) {
      int p = a.findTensor(t.of);
      if (p < 0 || a.tensors[size_t(p)].role != Role::Param)
        fail("tensor '" + t.name + "'",
             "\"of\" names '" + t.of + "', which is not a param tensor");
      const TensorDecl &param = a.tensors[size_t(p)];
      if (t.kind == "master" && param.shape != t.shape)
        fail("tensor '" + t.name + "'",
             "master weights of shape " + shapeStr(t.shape) + " for '" + t.of +
                 "' of shape " + shapeStr(param.shape));
    }
  }
  if (losses != 1)
    fail("tensors", "expected exactly one tensor with role \"loss\", found " +
                        std::to_string(losses));
  if (steps > 1)
    fail("tensors", "more than one tensor with role \"step\"");
}

MemCategory parseCategory(const Parser &P, const json &v,
                          const std::string &where) {
  std::string s = P.str(v, where);
  for (int i = 0; i < kNumMemCategories; ++i)
    if (s == memCategoryName(MemCategory(i)))
      return MemCategory(i);
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
  if (p.ranks.empty())
    fail(where, "\"ranks\" is empty");

  const json &slots = array(req(v, "slots", where), where + ": slots");
  for (size_t i = 0; i < slots.size(); ++i) {
    std::string w = where + ": slots[" + std::to_string(i) + "]";
    object(slots[i], w);
    SlotDecl s;
    int64_t bytes = integer(req(slots[i], "bytes", w), w + ".bytes");
    if (bytes < 0 || bytes > kMaxElements * 8)
      fail(w, "bad byte count " + std::to_string(bytes));
    s.bytes = uint64_t(bytes);
    s.category =
        parseCategory(*this, req(slots[i], "category", w), w + ".category");
    if (const json *scope = opt(slots[i], "scope")) {
      std::string sc = str(*scope, w + ".scope");
      if (sc == "microbatch") {
        if (!a.pipeline.present)
          fail(w, "a micro-batch slot in an artifact without a pipeline");
        int64_t chunk = integer(req(slots[i], "chunk", w), w + ".chunk");
        if (chunk < 0 || chunk >= a.pipeline.virtualStages)
          fail(w, "chunk " + std::to_string(chunk) + " does not exist (" +
                      std::to_string(a.pipeline.virtualStages) +
                      " chunks per stage)");
        s.chunk = int(chunk);
      } else if (sc != "step") {
        fail(w, "unknown scope \"" + sc + "\" (expected step or microbatch)");
      }
    }
    p.slots.push_back(s);
  }

  const json &bufs = array(req(v, "buffers", where), where + ": buffers");
  std::vector<std::vector<int>> slotBuffers(p.slots.size());
  p.tensorBuffer.assign(a.tensors.size(), -1);
  for (size_t i = 0; i < bufs.size(); ++i) {
    std::string w = where + ": buffer " + std::to_string(i);
    object(bufs[i], w);
    BufferDecl b;
    int64_t slot = integer(req(bufs[i], "slot", w), w + ": slot");
    if (slot < 0 || slot >= int64_t(p.slots.size()))
      fail(w, "slot " + std::to_string(slot) +
                  " does not exist (the program has " +
                  std::to_string(p.slots.size()) + " slots)");
    b.slot = int(slot);
    b.dtype = dtype(req(bufs[i], "dtype", w), w + ": dtype");
    b.shape = shape(req(bufs[i], "shape", w), w + ": shape");
    if (b.bytes() > p.slots[size_t(slot)].bytes)
      fail(w, std::string(dtypeName(b.dtype)) + shapeStr(b.shape) + " needs " +
                  std::to_string(b.bytes()) + " bytes but slot " +
                  std::to_string(slot) + " has " +
                  std::to_string(p.slots[size_t(slot)].bytes));
    if (const json *t = opt(bufs[i], "tensor")) {
      std::string name = str(*t, w + ": tensor");
      b.tensor = a.findTensor(name);
      if (b.tensor < 0)
        fail(w, "tensor '" + name + "' is not declared in \"tensors\"");
      const TensorDecl &td = a.tensors[size_t(b.tensor)];
      if (int j = p.tensorBuffer[size_t(b.tensor)]; j >= 0)
        fail(w, "tensor '" + name + "' is already bound to buffer " +
                    std::to_string(j));
      p.tensorBuffer[size_t(b.tensor)] = int(i);
      if (td.dtype != b.dtype)
        fail(w, "dtype " + std::string(dtypeName(b.dtype)) +
                    " differs from tensor '" + name + "' (" +
                    dtypeName(td.dtype) + ")");
      if (p.slots[size_t(slot)].chunk >= 0)
        fail(w, "binds tensor '" + name +
                    "' to a micro-batch slot (a tensor lives once per step)");
      Piece piece = pieceOf(a.mesh, td.sharding, td.shape,
                            a.mesh.coords(p.ranks[0]), td.pieces);
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
    if (owner < 0)
      continue;
    const BufferDecl &ob = p.buffers[size_t(owner)];
    for (int b : slotBuffers[s]) {
      if (b == owner)
        continue;
      const BufferDecl &bb = p.buffers[size_t(b)];
      if (bb.tensor >= 0 || bb.dtype != ob.dtype ||
          numel(bb.shape) != numel(ob.shape))
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
                    a.tensors[size_t(b.tensor)].name +
                    "' and cannot be a constant");
      if (!seen.insert(cd.buffer).second)
        fail(w,
             "buffer " + std::to_string(bid) + " is filled by two constants");
      const json *splat = opt(c, "splat");
      const json *data = opt(c, "data");
      if (!!splat == !!data)
        fail(w, "needs exactly one of \"splat\" and \"data\"");
      if (splat) {
        cd.isSplat = true;
        cd.splat = number(*splat, w + ".splat");
        if (isInt(b.dtype)) {
          double lim =
              b.dtype == DType::I32 ? 2147483648.0 : 9223372036854775808.0;
          if (cd.splat != std::trunc(cd.splat) || cd.splat < -lim ||
              cd.splat >= lim)
            fail(w, "splat value is not a valid " +
                        std::string(dtypeName(b.dtype)));
        }
      } else {
        cd.isSplat = false;
        std::string text = str(*data, w + ".data");
        if (!base64Decode(text, cd.data))
          fail(w, "\"data\" is not valid base64");
        if (cd.data.size() != b.bytes())
          fail(w, "\"data\" has " + std::to_string(cd.data.size()) +
                      " bytes but buffer " + std::to_string(bid) + " (" +
                      dtypeName(b.dtype) + shapeStr(b.shape) + ") has " +
                      std::to_string(b.bytes()));
      }
      p.constants.push_back(std::move(cd));
    }
  }

  parseInstructions(req(v, "instructions", where), where + ": instruction", a,
                    p, p.instructions);
  if (!a.pipeline.present) {
    for (const char *key : {"chunks", "finish", "schedule", "stage"})
      if (opt(v, key))
        fail(where, std::string("\"") + key +
                        "\" needs the artifact's \"pipeline\" section");
    return;
  }
  int64_t stage = integer(req(v, "stage", where), where + ": stage");
  if (stage < 0 || stage >= a.pipeline.stages)
    fail(where, "stage " + std::to_string(stage) +
                    " does not exist (the pipeline has " +
                    std::to_string(a.pipeline.stages) + " stages)");
  p.stage = int(stage);
  const json &chunks = array(req(v, "chunks", where), where + ": chunks");
  if (int64_t(chunks.size()) != a.pipeline.virtualStages)
    fail(where, "has " + std::to_string(chunks.size()) +
                    " chunks, the pipeline " +
                    std::to_string(a.pipeline.virtualStages) + " per stage");
  for (size_t c = 0; c < chunks.size(); ++c) {
    std::string w = where + ": chunk " + std::to_string(c);
    object(chunks[c], w);
    ChunkDecl chunk;
    parseInstructions(req(chunks[c], "forward", w), w + ": forward instruction",
                      a, p, chunk.forward);
    parseInstructions(req(chunks[c], "backward_input", w),
                      w + ": backward_input instruction", a, p,
                      chunk.backwardInput);
    parseInstructions(req(chunks[c], "backward_weight", w),
                      w + ": backward_weight instruction", a, p,
                      chunk.backwardWeight);
    // A chunk reads only its own micro-batch slots.
    for (const auto *list :
         {&chunk.forward, &chunk.backwardInput, &chunk.backwardWeight})
      for (const InstrDecl &ins : *list)
        for (const auto *ids : {&ins.in, &ins.out})
          for (int id : *ids) {
            int owner = p.slots[size_t(p.buffers[size_t(id)].slot)].chunk;
            if (owner >= 0 && owner != int(c))
              fail(w, ins.op + " uses buffer " + std::to_string(id) +
                          ", a micro-batch buffer of chunk " +
                          std::to_string(owner));
          }
    p.chunks.push_back(std::move(chunk));
  }
  parseInstructions(req(v, "finish", where), where + ": finish instruction", a,
                    p, p.finish);
  for (const auto *list : {&p.instructions, &p.finish})
    for (const InstrDecl &ins : *list)
      for (const auto *ids : {&ins.in, &ins.out})
        for (int id : *ids)
          if (p.slots[size_t(p.buffers[size_t(id)].slot)].chunk >= 0)
            fail(where, ins.op + " outside the micro-batches uses buffer " +
                            std::to_string(id) + ", a micro-batch buffer");
  std::string error;
  if (!sched::actionsFromJson(req(v, "schedule", where), p.schedule, error))
    fail(where + ": schedule", error);
}

void Parser::parseInstructions(const json &list, const std::string &where,
                               const Artifact &a, const ProgramDecl &p,
                               std::vector<InstrDecl> &out) {
  const json &instrs = array(list, where + "s");
  for (size_t i = 0; i < instrs.size(); ++i) {
    std::string w = where + " " + std::to_string(i);
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
    if (const json *at = opt(iv, "attrs"))
      ins.attrs = object(*at, w + ": attrs");
    checkInstruction(a, p, i, ins, w);
    out.push_back(std::move(ins));
  }
}

void Parser::checkInstruction(const Artifact &a, const ProgramDecl &p, size_t,
                              InstrDecl &ins, const std::string &w) {
  auto descs = [&](const std::vector<int> &ids) {
    std::vector<kernels::TensorDesc> d;
    for (int id : ids)
      d.push_back({p.buffers[size_t(id)].dtype, p.buffers[size_t(id)].shape});
    return d;
  };
  std::vector<std::pair<int, int>> inPlace;
  auto arity = [&](size_t nin, size_t nout, size_t optional = 0) {
    if (ins.in.size() < nin || ins.in.size() > nin + optional ||
        ins.out.size() != nout)
      fail(w, "expects " + std::to_string(nin) +
                  (optional ? " to " + std::to_string(nin + optional)
                            : std::string()) +
                  " input(s) and " + std::to_string(nout) + " output(s), got " +
                  std::to_string(ins.in.size()) + " and " +
                  std::to_string(ins.out.size()));
  };
  static const std::map<std::string, PipeOp> pipeOps = {
      {"send", PipeOp::Send},
      {"recv", PipeOp::Recv},
      {"microbatch_slice", PipeOp::MicrobatchSlice},
      {"accumulate", PipeOp::Accumulate},
      {"fill", PipeOp::Fill}};
  if (auto it = pipeOps.find(ins.op); it != pipeOps.end()) {
    ins.pipe = it->second;
    checkPipelineInstruction(a, p, ins, w);
    if (ins.pipe == PipeOp::Accumulate)
      inPlace.push_back({0, 0});
  } else if (parseCollKind(ins.op, ins.coll)) {
    ins.isCollective = true;
    arity(1, 1);
    const BufferDecl &in = p.buffers[size_t(ins.in[0])],
                     &out = p.buffers[size_t(ins.out[0])];
    const json &at = ins.attrs;
    auto attrStr = [&](const char *k) {
      return str(req(at, k, w), w + ": attribute '" + k + "'");
    };
    auto attrAxis = [&](const char *k) {
      int64_t ax = integer(req(at, k, w), w + ": attribute '" + k + "'");
      if (ax < 0 || ax >= int64_t(in.shape.size()))
        fail(w, std::string("attribute '") + k + "' = " + std::to_string(ax) +
                    " is out of range for a rank-" +
                    std::to_string(in.shape.size()) + " operand");
      return int(ax);
    };
    std::string cname = attrStr("comm");
    ins.comm = a.findComm(cname);
    if (ins.comm < 0)
      fail(w, "communicator '" + cname + "' is not declared");
    const int64_t n = a.mesh.groupSize(a.comms[size_t(ins.comm)].meshAxes);
    if (in.dtype != out.dtype)
      fail(w, std::string("input and output dtypes differ (") +
                  dtypeName(in.dtype) + " vs " + dtypeName(out.dtype) + ")");
    Shape expect = in.shape;
    auto reduction = [&]() {
      std::string r = attrStr("reduction");
      if (r == "sum")
        ins.reduce = ReduceOp::Sum;
      else if (r == "max")
        ins.reduce = ReduceOp::Max;
      else if (r == "min")
        ins.reduce = ReduceOp::Min;
      else if (r == "average")
        ins.reduce = ReduceOp::Average;
      else
        fail(w, "unknown reduction \"" + r +
                    "\" (expected sum, max, min or average)");
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
      fail(w, "output shape " + shapeStr(out.shape) + " should be " +
                  shapeStr(expect) + " (input " + shapeStr(in.shape) +
                  ", group size " + std::to_string(n) + ")");
  } else {
    const kernels::KernelInfo *k = kernels::findKernel(ins.op);
    if (k && ins.op == "shard_offset") {
      // Rank-dependent: its mesh axes must exist on this mesh (the one fact
      // the kernel's rule cannot know; it checks the rest).
      const json *axes = opt(ins.attrs, "grid_axes");
      if (axes && axes->is_array())
        for (const json &ax : *axes)
          if (ax.is_number_integer() && ax.get<int64_t>() >= a.mesh.numAxes())
            fail(w, "attribute 'grid_axes' names mesh axis " +
                        std::to_string(ax.get<int64_t>()) +
                        " beyond the mesh " + a.mesh.str());
    }
    if (!k)
      fail(w, "unknown kernel \"" + ins.op + "\"");
    arity(size_t(k->numIn), size_t(k->numOut), size_t(k->numOptionalIn));
    std::string verdict =
        kernels::checkRule(*k, descs(ins.in), descs(ins.out), ins.attrs);
    if (!verdict.empty())
      fail(w, verdict);
    inPlace = k->inPlace;
  }
  // Aliasing: an output may share memory (buffer or slot) with an input only
  // where the op runs in place; outputs never share memory with each other.
  for (size_t o = 0; o < ins.out.size(); ++o) {
    const int os = p.buffers[size_t(ins.out[o])].slot;
    for (size_t i = 0; i < ins.in.size(); ++i) {
      if (p.buffers[size_t(ins.in[i])].slot != os)
        continue;
      bool ok = std::find(inPlace.begin(), inPlace.end(),
                          std::make_pair(int(o), int(i))) != inPlace.end();
      if (!ok)
        fail(w, "output " + std::to_string(o) + " (buffer " +
                    std::to_string(ins.out[o]) + ") shares memory with input " +
                    std::to_string(i) + " (buffer " +
                    std::to_string(ins.in[i]) + "), but " + ins.op +
                    " cannot run in place there");
    }
    for (size_t o2 = 0; o2 < o; ++o2)
      if (p.buffers[size_t(ins.out[o2])].slot == os)
        fail(w, "outputs " + std::to_string(o2) + " and " + std::to_string(o) +
                    " share memory (slot " + std::to_string(os) + ")");
  }
}

void Parser::checkPipelineInstruction(const Artifact &a, const ProgramDecl &p,
                                      InstrDecl &ins, const std::string &w) {
  if (!a.pipeline.present)
    fail(
        w,
        "a pipeline instruction in an artifact without a \"pipeline\" section");
  const json &at = ins.attrs;
  auto counts = [&](size_t nin, size_t nout) {
    if (ins.in.size() != nin || ins.out.size() != nout)
      fail(w, "expects " + std::to_string(nin) + " input(s) and " +
                  std::to_string(nout) + " output(s), got " +
                  std::to_string(ins.in.size()) + " and " +
                  std::to_string(ins.out.size()));
  };
  auto buf = [&](int id) -> const BufferDecl & {
    return p.buffers[size_t(id)];
  };
  switch (ins.pipe) {
  case PipeOp::Send:
  case PipeOp::Recv: {
    if (ins.pipe == PipeOp::Send)
      counts(1, 0);
    else
      counts(0, 1);
    std::string cname = str(req(at, "comm", w), w + ": attribute 'comm'");
    ins.comm = a.findComm(cname);
    if (ins.comm < 0)
      fail(w, "communicator '" + cname + "' is not declared");
    const int64_t n = a.mesh.groupSize(a.comms[size_t(ins.comm)].meshAxes);
    int64_t peer = integer(req(at, "peer", w), w + ": attribute 'peer'");
    if (peer < 0 || peer >= n)
      fail(w, "peer " + std::to_string(peer) +
                  " is not a member of communicator '" + cname + "' (" +
                  std::to_string(n) + " members)");
    ins.peer = int(peer);
    ins.message = integer(req(at, "message", w), w + ": attribute 'message'");
    if (ins.message < 0 || ins.message > (int64_t(1) << 20))
      fail(w, "message id " + std::to_string(ins.message) + " is out of range");
    break;
  }
  case PipeOp::MicrobatchSlice: {
    counts(1, 1);
    const BufferDecl &in = buf(ins.in[0]), &out = buf(ins.out[0]);
    int64_t axis = integer(req(at, "axis", w), w + ": attribute 'axis'");
    if (axis < 0 || axis >= int64_t(in.shape.size()))
      fail(w, "attribute 'axis' = " + std::to_string(axis) +
                  " is out of range for a rank-" +
                  std::to_string(in.shape.size()) + " operand");
    ins.axis = int(axis);
    Shape expect = in.shape;
    if (expect[size_t(axis)] % a.pipeline.microbatches != 0)
      fail(w, "dimension " + std::to_string(axis) + " of size " +
                  std::to_string(expect[size_t(axis)]) +
                  " does not split into " +
                  std::to_string(a.pipeline.microbatches) + " micro-batches");
    expect[size_t(axis)] /= a.pipeline.microbatches;
    if (in.dtype != out.dtype || out.shape != expect)
      fail(w, "output " + std::string(dtypeName(out.dtype)) +
                  shapeStr(out.shape) + " should be " + dtypeName(in.dtype) +
                  shapeStr(expect));
    break;
  }
  case PipeOp::Accumulate: {
    counts(1, 1);
    const BufferDecl &in = buf(ins.in[0]), &out = buf(ins.out[0]);
    if (in.dtype != out.dtype || in.shape != out.shape)
      fail(w, "accumulates " + std::string(dtypeName(in.dtype)) +
                  shapeStr(in.shape) + " into " + dtypeName(out.dtype) +
                  shapeStr(out.shape));
    break;
  }
  case PipeOp::Fill:
    counts(0, 1);
    ins.fillValue = number(req(at, "value", w), w + ": attribute 'value'");
    break;
  case PipeOp::None:
    break;
  }
}

// Programs against each other: the stages' schedules together run without
// deadlock, and every message has one sender and one receiver that agree
// on it and on when it travels.
void Parser::checkPipeline(const Artifact &a) {
  if (!a.pipeline.present)
    return;
  const PipelineDecl &pd = a.pipeline;
  sched::Schedule schedule;
  schedule.name = pd.schedule;
  schedule.stages = pd.stages;
  schedule.virtualStages = pd.virtualStages;
  schedule.microbatches = pd.microbatches;
  schedule.perStage.assign(size_t(pd.stages), {});
  std::vector<int> programOfStage(size_t(pd.stages), -1);
  for (size_t i = 0; i < a.programs.size(); ++i) {
    const ProgramDecl &p = a.programs[i];
    int &first = programOfStage[size_t(p.stage)];
    if (first < 0) {
      first = int(i);
      schedule.perStage[size_t(p.stage)] = p.schedule;
    } else if (!(p.schedule == a.programs[size_t(first)].schedule)) {
      fail("program '" + p.name + "'", "runs stage " + std::to_string(p.stage) +
                                           " in another order than program '" +
                                           a.programs[size_t(first)].name +
                                           "'");
    }
  }
  for (int d = 0; d < pd.stages; ++d)
    if (programOfStage[size_t(d)] < 0)
      fail("pipeline", "no program runs stage " + std::to_string(d));
  std::string problem = sched::check(schedule);
  if (problem.empty()) {
    sched::Simulation sim = sched::simulate(schedule);
    if (!sim.ok)
      problem = sim.error;
  }
  if (!problem.empty())
    fail("pipeline: schedule", problem);

  // Messages: where each one is sent and received. A place is (list kind,
  // virtual stage): 0 before the micro-batches, 1 forward, 2 input
  // gradients, 3 weight gradients, 4 after the micro-batches.
  struct End {
    int program = -1, kind = 0, vstage = 0, peer = 0, comm = 0;
    const BufferDecl *buffer = nullptr;
  };
  std::map<int64_t, End> sendOf, recvOf;
  for (size_t i = 0; i < a.programs.size(); ++i) {
    const ProgramDecl &p = a.programs[i];
    auto scan = [&](const std::vector<InstrDecl> &list, int kind, int chunk) {
      for (const InstrDecl &ins : list) {
        if (ins.pipe != PipeOp::Send && ins.pipe != PipeOp::Recv)
          continue;
        std::map<int64_t, End> &ends =
            ins.pipe == PipeOp::Send ? sendOf : recvOf;
        int id = ins.pipe == PipeOp::Send ? ins.in[0] : ins.out[0];
        End e{int(i),   kind,     chunk * pd.stages + p.stage,
              ins.peer, ins.comm, &p.buffers[size_t(id)]};
        auto [it, inserted] = ends.emplace(ins.message, e);
        // Programs of one stage (its SPMD ranks) each send their piece.
        if (!inserted &&
            a.programs[size_t(it->second.program)].stage == p.stage)
          continue;
        if (!inserted)
          fail("program '" + p.name + "'",
               std::string(ins.pipe == PipeOp::Send ? "sends" : "receives") +
                   " message " + std::to_string(ins.message) +
                   " that another stage " +
                   (ins.pipe == PipeOp::Send ? "sends" : "receives") + " too");
      }
    };
    scan(p.instructions, 0, 0);
    for (size_t c = 0; c < p.chunks.size(); ++c) {
      scan(p.chunks[c].forward, 1, int(c));
      scan(p.chunks[c].backwardInput, 2, int(c));
      scan(p.chunks[c].backwardWeight, 3, int(c));
    }
    scan(p.finish, 4, 0);
  }
  for (const auto &[id, send] : sendOf) {
    const std::string where = "pipeline: message " + std::to_string(id);
    auto it = recvOf.find(id);
    if (it == recvOf.end())
      fail(where, "is sent but never received");
    const End &recv = it->second;
    const ProgramDecl &from = a.programs[size_t(send.program)],
                      &to = a.programs[size_t(recv.program)];
    if (send.peer != to.stage || recv.peer != from.stage ||
        send.comm != recv.comm)
      fail(where, "program '" + from.name + "' sends it to stage " +
                      std::to_string(send.peer) + " but program '" + to.name +
                      "' (stage " + std::to_string(to.stage) +
                      ") expects it from stage " + std::to_string(recv.peer));
    if (send.buffer->dtype != recv.buffer->dtype ||
        send.buffer->shape != recv.buffer->shape)
      fail(where, "is sent as " + std::string(dtypeName(send.buffer->dtype)) +
                      shapeStr(send.buffer->shape) + " but received as " +
                      dtypeName(recv.buffer->dtype) +
                      shapeStr(recv.buffer->shape));
    // What the schedule's order guarantees: activations go to later virtual
    // stages within forwards, gradients to earlier ones within input-
    // gradient backwards; once per step, from before or after the
    // micro-batches to no earlier a place.
    bool perMicroBatch = send.kind >= 1 && send.kind <= 3;
    bool ok = perMicroBatch ? (send.kind == recv.kind &&
                               ((send.kind == 1 && send.vstage < recv.vstage) ||
                                (send.kind == 2 && send.vstage > recv.vstage)))
                            : (recv.kind == 0 || recv.kind == 4) &&
                                  send.kind <= recv.kind;
    if (!ok)
      fail(where, "travels where the schedule cannot order it (sent in list " +
                      std::to_string(send.kind) + " of virtual stage " +
                      std::to_string(send.vstage) + ", received in list " +
                      std::to_string(recv.kind) + " of virtual stage " +
                      std::to_string(recv.vstage) + ")");
  }
  for (const auto &[id, recv] : recvOf)
    if (!sendOf.count(id))
      fail("pipeline: message " + std::to_string(id),
           "is received but never sent");

  // Once-per-step lists: run them in turn, sends never blocking; every
  // receive must find its message.
  for (bool before : {true, false}) {
    std::vector<size_t> at(a.programs.size(), 0);
    std::set<int64_t> sent;
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t i = 0; i < a.programs.size(); ++i) {
        const auto &list =
            before ? a.programs[i].instructions : a.programs[i].finish;
        while (at[i] < list.size()) {
          const InstrDecl &ins = list[at[i]];
          if (ins.pipe == PipeOp::Recv && !sent.count(ins.message) &&
              recvOf.at(ins.message).kind == sendOf.at(ins.message).kind)
            break;
          if (ins.pipe == PipeOp::Send)
            sent.insert(ins.message);
          ++at[i];
          progress = true;
        }
      }
    }
    for (size_t i = 0; i < a.programs.size(); ++i) {
      const auto &list =
          before ? a.programs[i].instructions : a.programs[i].finish;
      if (at[i] < list.size())
        fail("pipeline", "program '" + a.programs[i].name +
                             "' would wait forever for message " +
                             std::to_string(list[at[i]].message) + " " +
                             (before ? "before" : "after") +
                             " the micro-batches");
    }
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
                        " (this runtime reads version " +
                        std::to_string(kArtifactVersion) +
                        "; recompile the model with this dtc)");
  a.version = kArtifactVersion;
  if (const json *v = opt(body, "producer"))
    a.producer = str(*v, "producer");
  if (const json *v = opt(body, "source"))
    a.source = str(*v, "source");
  std::vector<int64_t> mesh = ints(req(body, "mesh", ""), "mesh");
  if (mesh.empty())
    fail("mesh", "must list at least one axis");
  int64_t prod = 1;
  for (int64_t m : mesh) {
    if (m < 1)
      fail("mesh", "axis sizes must be >= 1");
    if (prod > (int64_t(1) << 24) / m)
      fail("mesh", "too many devices");
    prod *= m;
  }
  a.mesh = Mesh(mesh);
  a.devices = integer(req(body, "devices", ""), "devices");
  if (a.devices != prod)
    fail("devices", std::to_string(a.devices) + " does not match the mesh " +
                        a.mesh.str() + " (" + std::to_string(prod) +
                        " devices)");
  if (const json *v = opt(body, "plan"))
    a.plan = object(*v, "plan");
  if (const json *v = opt(body, "optimizer"))
    a.optimizer = object(*v, "optimizer");
  if (const json *v = opt(body, "memory")) {
    const json &m = object(*v, "memory");
    for (auto [key, field] : {std::pair{"budget_bytes", &a.memoryBudgetBytes},
                              std::pair{"peak_bytes", &a.memoryPeakBytes}})
      if (const json *n = opt(m, key)) {
        int64_t bytes = integer(*n, std::string("memory.") + key);
        if (bytes < 0)
          fail(std::string("memory.") + key, "must be >= 0");
        *field = uint64_t(bytes);
      }
  }

  const json &comms = array(req(body, "communicators", ""), "communicators");
  std::set<std::string> commNames;
  for (size_t i = 0; i < comms.size(); ++i) {
    std::string w = "communicators[" + std::to_string(i) + "]";
    object(comms[i], w);
    CommDecl c;
    c.name = str(req(comms[i], "name", w), w + ".name");
    if (c.name.empty())
      fail(w, "empty communicator name");
    w = "communicator '" + c.name + "'";
    if (!commNames.insert(c.name).second)
      fail(w, "declared twice");
    for (int64_t ax : ints(req(comms[i], "mesh_axes", w), w + ": mesh_axes")) {
      if (ax < 0 || ax >= a.mesh.numAxes())
        fail(w, "mesh axis " + std::to_string(ax) +
                    " does not exist (the mesh " + a.mesh.str() + " has " +
                    std::to_string(a.mesh.numAxes()) + " axes)");
      if (std::find(c.meshAxes.begin(), c.meshAxes.end(), int(ax)) !=
          c.meshAxes.end())
        fail(w, "mesh axis " + std::to_string(ax) + " listed twice");
      c.meshAxes.push_back(int(ax));
    }
    a.comms.push_back(std::move(c));
  }

  parseTensors(array(req(body, "tensors", ""), "tensors"), a);

  if (const json *pv = opt(body, "pipeline")) {
    object(*pv, "pipeline");
    PipelineDecl &pd = a.pipeline;
    pd.present = true;
    auto count = [&](const char *key, int64_t limit) {
      int64_t v =
          integer(req(*pv, key, "pipeline"), std::string("pipeline: ") + key);
      if (v < 1 || v > limit)
        fail(std::string("pipeline: ") + key,
             "must be in [1, " + std::to_string(limit) + "]");
      return int(v);
    };
    pd.stages = count("stages", a.devices);
    pd.virtualStages = count("virtual_stages", 1 << 12);
    pd.microbatches = count("microbatches", 1 << 16);
    pd.schedule = str(req(*pv, "schedule", "pipeline"), "pipeline: schedule");
  }

  const json &progs = array(req(body, "programs", ""), "programs");
  if (progs.empty())
    fail("programs", "the artifact has no program");
  std::vector<int> owner(static_cast<size_t>(a.devices), -1);
  for (size_t i = 0; i < progs.size(); ++i) {
    ProgramDecl p;
    parseProgram(progs[i], "programs[" + std::to_string(i) + "]", a, p);
    for (size_t j = 0; j < a.programs.size(); ++j)
      if (a.programs[j].name == p.name)
        fail("program '" + p.name + "'", "declared twice");
    for (int r : p.ranks) {
      if (owner[size_t(r)] >= 0)
        fail("program '" + p.name + "'",
             "rank " + std::to_string(r) + " is already run by program '" +
                 (owner[size_t(r)] == int(i)
                      ? p.name
                      : a.programs[size_t(owner[size_t(r)])].name) +
                 "'");
      owner[size_t(r)] = int(i);
    }
    a.programs.push_back(std::move(p));
  }
  for (size_t r = 0; r < owner.size(); ++r)
    if (owner[r] < 0)
      fail("programs",
           "rank " + std::to_string(r) + " is not run by any program");
  checkPipeline(a);
  // Tensors that must live somewhere.
  for (size_t t = 0; t < a.tensors.size(); ++t) {
    const TensorDecl &td = a.tensors[t];
    if (td.role == Role::Step)
      continue;
    bool bound = false;
    for (size_t p = 0; p < a.programs.size(); ++p)
      bound = bound || a.bufferOf(int(p), int(t)) >= 0;
    if (!bound)
      fail("tensor '" + td.name + "'", std::string("no program binds this ") +
                                           roleName(td.role) +
                                           " tensor to a buffer");
  }
  checkProgramsAgree(a, owner);
  return a;
}

// ---- the programs against each other
// --------------------------------------------
//
// Ranks running different programs must still make matching calls on every
// communicator group they share: the same collectives in the same order,
// with the same element type, counts and reduction (a mismatch would
// overflow a buffer or wait forever). all_slice is left out: it does not
// communicate. Then the calls of all ranks are replayed together to find an
// order that waits forever (rank A in a collective on X while rank B, which
// A needs there, waits in one on Y).
//
// A pipeline stage's calls are its lists in the order its schedule runs
// them (once-per-step list, each action's chunk list for its micro-batch,
// the list after the micro-batches); its point-to-point messages join the
// replay: a send never waits, a receive waits until its sender has sent.

namespace {
struct Call {
  int comm;
  CollKind kind;
  DType dtype;
  ReduceOp reduce;
  int64_t inCount, outCount;
  size_t instruction;
  // Pipelines: the list (0 before the micro-batches, 1 forward, 2 input
  // gradients, 3 weight gradients, 4 after), its chunk and micro-batch
  // (-1: a once-per-step list); messages: 1 send, 2 receive (0: a
  // collective), the message and the peer's index in `comm`.
  int list = 0, chunk = 0, microbatch = -1;
  int p2p = 0;
  int64_t message = -1;
  int peer = -1;
};

void addCalls(std::vector<Call> &calls, const ProgramDecl &p,
              const std::vector<InstrDecl> &list, int where, int chunk,
              int microbatch) {
  for (size_t i = 0; i < list.size(); ++i) {
    const InstrDecl &ins = list[i];
    if (ins.pipe == PipeOp::Send || ins.pipe == PipeOp::Recv) {
      const BufferDecl &b =
          p.buffers[size_t(ins.pipe == PipeOp::Send ? ins.in[0] : ins.out[0])];
      Call c{ins.comm,       CollKind::AllReduce, b.dtype, ReduceOp::Sum,
             numel(b.shape), numel(b.shape),      i};
      c.p2p = ins.pipe == PipeOp::Send ? 1 : 2;
      c.message = ins.message;
      c.peer = ins.peer;
      c.list = where;
      c.chunk = chunk;
      c.microbatch = microbatch;
      calls.push_back(c);
      continue;
    }
    if (!ins.isCollective || ins.coll == CollKind::AllSlice)
      continue;
    const BufferDecl &in = p.buffers[size_t(ins.in[0])],
                     &out = p.buffers[size_t(ins.out[0])];
    const bool reduces =
        ins.coll == CollKind::AllReduce || ins.coll == CollKind::ReduceScatter;
    Call c{ins.comm,
           ins.coll,
           in.dtype,
           reduces ? ins.reduce : ReduceOp::Sum,
           numel(in.shape),
           numel(out.shape),
           i};
    c.list = where;
    c.chunk = chunk;
    c.microbatch = microbatch;
    calls.push_back(c);
  }
}

std::vector<Call> callsOf(const ProgramDecl &p) {
  std::vector<Call> calls;
  addCalls(calls, p, p.instructions, 0, 0, -1);
  for (const sched::Action &act : p.schedule) {
    const ChunkDecl &c = p.chunks[size_t(act.chunk)];
    switch (act.kind) {
    case sched::Kind::Forward:
      addCalls(calls, p, c.forward, 1, act.chunk, act.microbatch);
      break;
    case sched::Kind::Backward:
      addCalls(calls, p, c.backwardInput, 2, act.chunk, act.microbatch);
      break;
    case sched::Kind::Weight:
      addCalls(calls, p, c.backwardWeight, 3, act.chunk, act.microbatch);
      break;
    case sched::Kind::BackwardWeight:
      addCalls(calls, p, c.backwardInput, 2, act.chunk, act.microbatch);
      addCalls(calls, p, c.backwardWeight, 3, act.chunk, act.microbatch);
      break;
    }
  }
  addCalls(calls, p, p.finish, 4, 0, -1);
  return calls;
}

const char *reduceName(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
    return "sum";
  case ReduceOp::Max:
    return "max";
  case ReduceOp::Min:
    return "min";
  case ReduceOp::Average:
    return "average";
  }
  return "?";
}

std::string describe(const Artifact &a, const ProgramDecl &p, const Call &c) {
  static const char *const lists[] = {"", "forward", "input-gradient",
                                      "weight-gradient",
                                      "after the micro-batches"};
  std::string s;
  if (c.p2p) {
    s = std::string(c.p2p == 1 ? "send to" : "receive from") + " member " +
        std::to_string(c.peer) + " of message " + std::to_string(c.message) +
        " (" + std::to_string(c.inCount) + " " + dtypeName(c.dtype) + ")";
  } else {
    s = std::string(collKindName(c.kind));
    if (c.kind == CollKind::AllReduce || c.kind == CollKind::ReduceScatter)
      s += std::string(" (") + reduceName(c.reduce) + ")";
    s += " of " + std::to_string(c.inCount) + " " + dtypeName(c.dtype);
    if (c.outCount != c.inCount)
      s += " into " + std::to_string(c.outCount);
  }
  s += " on '" + a.comms[size_t(c.comm)].name + "' ('" + p.name + "' ";
  if (c.list >= 1 && c.list <= 3)
    s += std::string(lists[c.list]) + " list of chunk " +
         std::to_string(c.chunk) + ", micro-batch " +
         std::to_string(c.microbatch) + ", ";
  else if (c.list == 4)
    s += std::string("list ") + lists[c.list] + ", ";
  s += "instruction " + std::to_string(c.instruction) + ")";
  return s;
}

bool sameCall(const Call &x, const Call &y) {
  return x.kind == y.kind && x.dtype == y.dtype && x.reduce == y.reduce &&
         x.inCount == y.inCount && x.outCount == y.outCount;
}

std::string ranksText(const std::vector<int64_t> &ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 8; ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8)
    s += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  return s;
}
} // namespace

void Parser::checkProgramsAgree(const Artifact &a,
                                const std::vector<int> &programOfRank) {
  if (a.programs.size() < 2)
    return; // one program: every rank makes the same calls
  std::vector<std::vector<Call>> calls;
  for (const ProgramDecl &p : a.programs)
    calls.push_back(callsOf(p));
  std::vector<std::vector<int64_t>> coords(size_t(a.devices));
  for (int64_t r = 0; r < a.devices; ++r)
    coords[size_t(r)] = a.mesh.coords(r);
  // Per communicator: each rank's group (color) and each group's members.
  std::vector<std::vector<int64_t>> colorOf(a.comms.size());
  std::vector<std::map<int64_t, std::vector<int64_t>>> groupsOf(a.comms.size());
  for (size_t c = 0; c < a.comms.size(); ++c)
    for (int64_t r = 0; r < a.devices; ++r) {
      colorOf[c].push_back(
          a.mesh.groupColor(coords[size_t(r)], a.comms[c].meshAxes));
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
      if (isNew)
        continue;
      const int p = programOfRank[size_t(it->second)],
                q = programOfRank[size_t(r)];
      if (p == q || !compared.insert({int(c), p, q}).second)
        continue;
      std::vector<Call> x, y;
      for (const Call &k : calls[size_t(p)])
        if (k.comm == int(c) && !k.p2p)
          x.push_back(k);
      for (const Call &k : calls[size_t(q)])
        if (k.comm == int(c) && !k.p2p)
          y.push_back(k);
      const ProgramDecl &P = a.programs[size_t(p)], &Q = a.programs[size_t(q)];
      const std::string who =
          "programs '" + P.name + "' (rank " + std::to_string(it->second) +
          ") and '" + Q.name + "' (rank " + std::to_string(r) +
          ") disagree on communicator '" + a.comms[c].name +
          "' (the group of ranks " + ranksText(membersOf(int(c), r)) + "): ";
      for (size_t i = 0; i < x.size() && i < y.size(); ++i)
        if (!sameCall(x[i], y[i]))
          fail("", who + "its collective #" + std::to_string(i + 1) + " is " +
                       describe(a, P, x[i]) + " in one and " +
                       describe(a, Q, y[i]) + " in the other");
      if (x.size() != y.size()) {
        const bool pLonger = x.size() > y.size();
        const Call &extra = pLonger ? x[y.size()] : y[x.size()];
        fail("", who + "'" + P.name + "' makes " + std::to_string(x.size()) +
                     " collective" + (x.size() == 1 ? "" : "s") +
                     " on it and '" + Q.name + "' " + std::to_string(y.size()) +
                     "; the first without a partner is " +
                     describe(a, pLonger ? P : Q, extra));
      }
    }
  }

  // 2. Replay every rank's calls: a collective completes when every member
  //    of its group has it next (arrivals counted per group instead of
  //    rescanning); a send completes at once and posts its message; a
  //    receive completes once its message was posted.
  std::map<std::pair<int, int64_t>, int> groupId; // (comm, color) -> id
  std::vector<const std::vector<int64_t> *> members;
  auto groupOf = [&](int comm, int64_t rank) {
    const int64_t color = colorOf[size_t(comm)][size_t(rank)];
    auto [it, isNew] =
        groupId.emplace(std::make_pair(comm, color), int(members.size()));
    if (isNew)
      members.push_back(&membersOf(comm, rank));
    return it->second;
  };
  auto callsOfRank = [&](int64_t r) -> const std::vector<Call> & {
    return calls[size_t(programOfRank[size_t(r)])];
  };
  // A message between two ranks: (message, micro-batch, sender, receiver).
  using MessageKey = std::tuple<int64_t, int, int64_t, int64_t>;
  auto messageKey = [&](const Call &c, int64_t r) {
    const std::vector<int64_t> &group = membersOf(c.comm, r);
    if (c.peer < 0 || size_t(c.peer) >= group.size())
      fail("", "program '" + a.programs[size_t(programOfRank[size_t(r)])].name +
                   "' names member " + std::to_string(c.peer) +
                   " of communicator '" + a.comms[size_t(c.comm)].name +
                   "', which has " + std::to_string(group.size()));
    const int64_t other = group[size_t(c.peer)];
    const int mb = std::max(c.microbatch, 0);
    return c.p2p == 1 ? MessageKey{c.message, mb, r, other}
                      : MessageKey{c.message, mb, other, r};
  };
  std::map<MessageKey, int> posted;        // sent, not yet received
  std::map<MessageKey, int64_t> receiving; // the rank waiting for it
  std::vector<size_t> next(size_t(a.devices), 0);
  std::vector<int> arrived;
  std::vector<int> ready;
  std::vector<int64_t> woken;
  auto advance = [&](int64_t r) {
    const std::vector<Call> &mine = callsOfRank(r);
    while (next[size_t(r)] < mine.size()) {
      const Call &c = mine[next[size_t(r)]];
      if (c.p2p == 1) {
        const MessageKey k = messageKey(c, r);
        ++posted[k];
        if (auto w = receiving.find(k); w != receiving.end()) {
          woken.push_back(w->second);
          receiving.erase(w);
        }
      } else if (c.p2p == 2) {
        const MessageKey k = messageKey(c, r);
        auto it = posted.find(k);
        if (it == posted.end()) {
          receiving[k] = r;
          return;
        }
        if (--it->second == 0)
          posted.erase(it);
      } else {
        const int g = groupOf(c.comm, r);
        if (arrived.size() < members.size())
          arrived.resize(members.size(), 0);
        if (++arrived[size_t(g)] == int(members[size_t(g)]->size()))
          ready.push_back(g);
        return;
      }
      ++next[size_t(r)];
    }
  };
  for (int64_t r = 0; r < a.devices; ++r)
    advance(r);
  while (!ready.empty() || !woken.empty()) {
    if (!woken.empty()) {
      const int64_t r = woken.back();
      woken.pop_back();
      advance(r);
      continue;
    }
    const int g = ready.back();
    ready.pop_back();
    arrived[size_t(g)] = 0;
    const std::vector<int64_t> &group = *members[size_t(g)];
    for (int64_t m : group)
      ++next[size_t(m)];
    for (int64_t m : group)
      advance(m);
  }
  auto doing = [&](int64_t m) {
    const std::vector<Call> &theirs = callsOfRank(m);
    if (next[size_t(m)] >= theirs.size())
      return std::string(a.pipeline.present ? "has finished its step"
                                            : "has no collective left");
    return "waits in " + describe(a,
                                  a.programs[size_t(programOfRank[size_t(m)])],
                                  theirs[next[size_t(m)]]);
  };
  for (int64_t r = 0; r < a.devices; ++r) {
    const int p = programOfRank[size_t(r)];
    const std::vector<Call> &mine = calls[size_t(p)];
    if (next[size_t(r)] >= mine.size())
      continue;
    const Call &waits = mine[next[size_t(r)]];
    const std::string head =
        std::string(a.pipeline.present ? "the programs' communications"
                                       : "the programs' collectives") +
        " wait for each other forever: rank " + std::to_string(r) +
        " waits in " + describe(a, a.programs[size_t(p)], waits);
    if (waits.p2p == 2) {
      const int64_t from = std::get<2>(messageKey(waits, r));
      fail("", head + " from rank " + std::to_string(from) + ", which " +
                   doing(from));
    }
    for (int64_t m : *members[size_t(groupOf(waits.comm, r))]) {
      const std::vector<Call> &theirs = callsOfRank(m);
      if (next[size_t(m)] < theirs.size() &&
          theirs[next[size_t(m)]].comm == waits.comm &&
          !theirs[next[size_t(m)]].p2p)
        continue;
      fail("", head + " for rank " + std::to_string(m) + ", which " + doing(m));
    }
  }
}

} // namespace

Artifact parseArtifact(const json &body, const std::string &label) {
  return Parser(label).parse(body);
}

Artifact loadArtifactBytes(std::string_view fileBytes,
                           const std::string &label) {
  json body;
  std::string error;
  if (!decodeArtifactJson(fileBytes, body, error))
    throw Error(label + ": " + error);
  return parseArtifact(body, label);
}

Artifact loadArtifactFile(const std::string &path) {
  std::string bytes, error;
  if (!readFileBytes(path, bytes, error))
    throw Error(path + ": " + error);
  return loadArtifactBytes(bytes, path);
}

void checkRankCount(const Artifact &a, int64_t ranks) {
  if (ranks != a.devices)
    throw Error(
        a.label + ": the artifact was compiled for " +
        std::to_string(a.devices) + " device" + (a.devices == 1 ? "" : "s") +
        " (mesh " + a.mesh.str() + ") but " + std::to_string(ranks) + " rank" +
        (ranks == 1 ? " is" : "s are") + " running; start it with mpirun -np " +
        std::to_string(a.devices) + " (or dtc run)");
}

bool checkArtifact(const json &body, const std::string &label, int64_t ranks,
                   std::string &error) noexcept {
  try {
    Artifact a = parseArtifact(body, label);
    if (ranks > 0)
      checkRankCount(a, ranks);
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
