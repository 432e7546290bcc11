//===- ParseTensors.cpp - the artifact's "tensors" section ----------------===//
#include "Parser.h"

#include <set>

namespace dtc::artifact::detail {

void Parser::parseTensors(const json &arr, Artifact &a) {
  std::set<std::string> names;
  for (size_t i = 0; i < arr.size(); ++i) {
    TensorDecl t = parseTensor(arr[i], i, names, a);
    a.tensorIndex.emplace(t.name, int(a.tensors.size()));
    a.tensors.push_back(std::move(t));
  }
  checkTensorsTogether(a);
}

TensorDecl Parser::parseTensor(const json &v, size_t index,
                               std::set<std::string> &names,
                               const Artifact &a) {
  std::string where = "tensors[" + std::to_string(index) + "]";
  object(v, where);
  TensorDecl t;
  t.name = str(req(v, "name", where), where + ".name");
  if (t.name.empty())
    fail(where, "empty tensor name");
  where = "tensor '" + t.name + "'";
  if (!names.insert(t.name).second)
    fail(where, "declared twice");
  std::string role = str(req(v, "role", where), where + ": role");
  if (!parseRole(role, t.role))
    fail(where,
         "unknown role \"" + role + "\" (expected " + roleNameList() + ")");
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
        fail(where, "sharding uses mesh axis " + std::to_string(ax) + " twice");
      axes.push_back(int(ax));
    }
    // A split that does not divide the dimension pads its pieces.
    t.sharding.push_back(axes);
  }
  if (const json *pieces = opt(v, "pieces")) {
    t.pieces = ints(*pieces, where + ": pieces");
    if (t.pieces.size() != t.shape.size())
      fail(where, "pieces has " + std::to_string(t.pieces.size()) +
                      " entries for a rank-" + std::to_string(t.shape.size()) +
                      " tensor");
    for (size_t d = 0; d < t.pieces.size(); ++d) {
      const int64_t n = a.mesh.groupSize(t.sharding[d]), q = t.pieces[d];
      if (q != 0 && (n <= 1 || q * n < t.shape[d] || q > t.shape[d]))
        fail(where, "dimension " + std::to_string(d) + " of size " +
                        std::to_string(t.shape[d]) + " cannot be split into " +
                        std::to_string(n) + " pieces of " + std::to_string(q));
    }
  }
  for (auto [key, order] : {std::pair{"striped", SequenceOrder::Striped},
                            std::pair{"zigzag", SequenceOrder::Zigzag}}) {
    const json *ordered = opt(v, key);
    if (!ordered)
      continue;
    const std::string what = where + ": " + key;
    if (t.role != Role::Input)
      fail(where, "\"" + std::string(key) + "\" is only allowed on inputs");
    if (t.order != SequenceOrder::Natural)
      fail(where, "\"striped\" and \"zigzag\" exclude each other");
    const int64_t dim = integer(req(*ordered, "dim", what), what + ": dim");
    const int64_t ways = integer(req(*ordered, "ways", what), what + ": ways");
    if (dim < 0 || dim >= int64_t(t.shape.size()))
      fail(where, std::string(key) + " dimension " + std::to_string(dim) +
                      " is not a dimension of a rank-" +
                      std::to_string(t.shape.size()) + " tensor");
    const int64_t granule = orderGranule(order, ways);
    if (ways < 1 || t.shape[size_t(dim)] % granule != 0)
      fail(where, std::string(key) + " over " + std::to_string(ways) +
                      " ranks: dimension " + std::to_string(dim) + " (" +
                      std::to_string(t.shape[size_t(dim)]) +
                      ") must divide evenly into " + std::to_string(granule) +
                      " chunks");
    t.orderedDim = int(dim);
    t.orderedWays = ways;
    t.order = order;
  }
  checkTensorRole(v, where, t);
  return t;
}

void Parser::checkTensorRole(const json &v, const std::string &where,
                             TensorDecl &t) {
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
    if (t.role == Role::OptimizerState)
      checkOptimizerState(v, where, t);
    break;
  case Role::Input:
    if (isInt(t.dtype)) {
      if (!max)
        fail(where, "an integer input needs \"max\" (its exclusive bound)");
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
}

void Parser::checkOptimizerState(const json &v, const std::string &where,
                                 TensorDecl &t) {
  if (const json *of = opt(v, "of"))
    t.of = str(*of, where + ": of");
  if (const json *kind = opt(v, "kind")) {
    t.kind = str(*kind, where + ": kind");
    if (t.kind != "master" && t.kind != "loss_scale" &&
        t.kind != "loss_scale_good_steps" && t.kind != "skipped_steps")
      fail(where,
           "unknown kind \"" + t.kind +
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

void Parser::checkTensorsTogether(const Artifact &a) {
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

} // namespace dtc::artifact::detail
