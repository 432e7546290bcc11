//===- TestArtifacts.cpp
//----------------------------------------------------===//
#include "TestArtifacts.h"
#include "dtc/artifact/ArtifactFormat.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <unistd.h>

namespace dtc::test {

namespace {
struct ScratchDirs {
  pid_t owner = ::getpid();
  std::map<std::string, std::string> dirs;
  ~ScratchDirs() {
    // A forked child (a death test) must not remove the parent's files.
    if (::getpid() != owner)
      return;
    std::error_code ec;
    for (const auto &[prefix, dir] : dirs)
      std::filesystem::remove_all(dir, ec);
  }
};
} // namespace

std::string scratchDir(const std::string &prefix) {
  static ScratchDirs scratch;
  std::string &dir = scratch.dirs[prefix];
  if (dir.empty()) {
    // Under $TMPDIR when set: scripts/check.sh checks that the tests leave
    // nothing there.
    const char *tmp = std::getenv("TMPDIR");
    const std::string base = tmp && *tmp ? tmp : "/tmp";
    std::string tmpl = base + "/" + prefix + "-XXXXXX";
    if (!::mkdtemp(tmpl.data()))
      throw rt::Error("cannot create a directory under " + base);
    dir = tmpl;
  }
  return dir;
}

using rt::DType;
using rt::Shape;

static const char *dt(DType d) { return rt::dtypeName(d); }

ProgramBuilder::ProgramBuilder(std::string name, std::vector<int> ranks) {
  prog_ = {{"name", name},
           {"ranks", ranks},
           {"slots", json::array()},
           {"buffers", json::array()},
           {"constants", json::array()},
           {"instructions", json::array()}};
}

int ProgramBuilder::buffer(DType dtype, const Shape &shape,
                           const std::string &category,
                           const std::string &tensor) {
  const int slot = int(prog_["slots"].size());
  prog_["slots"].push_back(
      {{"bytes", uint64_t(rt::numel(shape)) * rt::dtypeSize(dtype)},
       {"category", category}});
  json b = {{"slot", slot}, {"dtype", dt(dtype)}, {"shape", shape}};
  if (!tensor.empty())
    b["tensor"] = tensor;
  prog_["buffers"].push_back(b);
  return int(prog_["buffers"].size()) - 1;
}

int ProgramBuilder::view(int of, DType dtype, const Shape &shape) {
  json b = {{"slot", prog_["buffers"][size_t(of)]["slot"]},
            {"dtype", dt(dtype)},
            {"shape", shape}};
  prog_["buffers"].push_back(b);
  return int(prog_["buffers"].size()) - 1;
}

void ProgramBuilder::op(const std::string &op, std::vector<int> in,
                        std::vector<int> out, json attrs) {
  json i = {{"op", op}, {"in", in}, {"out", out}};
  if (!attrs.empty())
    i["attrs"] = attrs;
  prog_["instructions"].push_back(i);
}

void ProgramBuilder::splat(int buffer, double value) {
  prog_["constants"].push_back({{"buffer", buffer}, {"splat", value}});
}

ArtifactBuilder::ArtifactBuilder(std::vector<int64_t> mesh) {
  int64_t devices = 1;
  for (int64_t m : mesh)
    devices *= m;
  body_ = {{"format", "dtc-artifact"},
           {"version", 2},
           {"producer", "dtc runtime tests"},
           {"source", "hand-written"},
           {"mesh", mesh},
           {"devices", devices},
           {"communicators", json::array()},
           {"tensors", json::array()},
           {"programs", json::array()}};
}

void ArtifactBuilder::comm(const std::string &name, std::vector<int> axes) {
  body_["communicators"].push_back({{"name", name}, {"mesh_axes", axes}});
}

void ArtifactBuilder::param(const std::string &name, const Shape &shape,
                            const std::string &init, json sharding) {
  tensor({{"name", name},
          {"role", "param"},
          {"dtype", "f32"},
          {"shape", shape},
          {"init", init},
          {"sharding", sharding}});
}

void ArtifactBuilder::optState(const std::string &name, const std::string &of,
                               const Shape &shape, json sharding) {
  tensor({{"name", name},
          {"role", "optimizer_state"},
          {"of", of},
          {"dtype", "f32"},
          {"shape", shape},
          {"init", "zeros"},
          {"sharding", sharding}});
}

void ArtifactBuilder::input(const std::string &name, DType dtype,
                            const Shape &shape, json sharding, int64_t max) {
  json t = {{"name", name},
            {"role", "input"},
            {"dtype", dt(dtype)},
            {"shape", shape},
            {"sharding", sharding}};
  if (max)
    t["max"] = max;
  tensor(t);
}

void ArtifactBuilder::scalar(const std::string &name, const std::string &role,
                             DType dtype) {
  tensor({{"name", name},
          {"role", role},
          {"dtype", dt(dtype)},
          {"shape", json::array()},
          {"sharding", json::array()}});
}

static std::vector<int> allRanks(const std::vector<int64_t> &mesh) {
  int64_t n = 1;
  for (int64_t m : mesh)
    n *= m;
  std::vector<int> r;
  for (int i = 0; i < n; ++i)
    r.push_back(i);
  return r;
}

// Emits the optimizer update of one parameter buffer.
static void update(ArtifactBuilder &ab, ProgramBuilder &pb,
                   const std::string &opt, const std::string &name,
                   const Shape &global, const json &sharding,
                   const Shape &local, int w, int g, int step) {
  if (opt == "sgd") {
    pb.op("sgd_update", {w, g}, {w}, {{"lr", 0.1}, {"weight_decay", 0.01}});
    return;
  }
  ab.optState(name + ":adam_m", name, global, sharding);
  ab.optState(name + ":adam_v", name, global, sharding);
  const int m = pb.buffer(DType::F32, local, "optimizer", name + ":adam_m");
  const int v = pb.buffer(DType::F32, local, "optimizer", name + ":adam_v");
  pb.op("adam_update", {w, g, m, v, step}, {w, m, v},
        {{"lr", 0.01},
         {"beta1", 0.9},
         {"beta2", 0.999},
         {"eps", 1e-8},
         {"weight_decay", opt == "adamw" ? 0.01 : 0.0},
         {"decoupled", opt == "adamw"}});
}

json mlpArtifact(const MlpConfig &c) {
  ArtifactBuilder ab(c.mesh);
  int64_t ndp = 1;
  for (int a : c.dpAxes)
    ndp *= c.mesh[size_t(a)];
  const int64_t ntp = c.tpAxis >= 0 ? c.mesh[size_t(c.tpAxis)] : 1;
  const int64_t B = c.batch, I = 16, H = 32, C = 10, Bl = B / ndp, Hl = H / ntp;
  if (ndp > 1)
    ab.comm("dp", c.dpAxes);
  if (c.tpAxis >= 0)
    ab.comm("tp", {c.tpAxis});
  const json tp = c.tpAxis >= 0 ? json::array({c.tpAxis}) : json::array();
  const json dp = c.dpAxes;
  ab.body()["plan"] = {{"dp", ndp}, {"tp", ntp}};
  ab.body()["optimizer"] = {{"kind", c.optimizer}};

  ab.input("x", DType::F32, {B, I}, json::array({dp, json::array()}));
  ab.input("y", DType::I32, {B}, json::array({dp}), C);
  ab.param("w1", {I, H}, "normal(0.3)", json::array({json::array(), tp}));
  ab.param("b1", {H}, "uniform(-0.1,0.1)", json::array({tp}));
  ab.param("w2", {H, C}, "normal(0.3)", json::array({tp, json::array()}));
  ab.scalar("optimizer_step", "step", DType::I64);
  ab.scalar("loss", "loss", DType::F32);

  ProgramBuilder pb("spmd", allRanks(c.mesh));
  const int x = pb.buffer(DType::F32, {Bl, I}, "input", "x");
  const int y = pb.buffer(DType::I32, {Bl}, "input", "y");
  const int w1 = pb.buffer(DType::F32, {I, Hl}, "param", "w1");
  const int b1 = pb.buffer(DType::F32, {Hl}, "param", "b1");
  const int w2 = pb.buffer(DType::F32, {Hl, C}, "param", "w2");
  const int step = pb.buffer(DType::I64, {}, "scalar", "optimizer_step");
  const int loss = pb.buffer(DType::F32, {}, "scalar", "loss");
  const int one = pb.buffer(DType::F32, {}, "constant");
  pb.splat(one, 1.0);
  auto act = [&](Shape s) { return pb.buffer(DType::F32, s, "activation"); };
  const int h = act({Bl, Hl}), h2 = act({Bl, Hl}), a = act({Bl, Hl}),
            zp = act({Bl, C});
  pb.op("matmul", {x, w1}, {h});
  pb.op("add", {h, b1}, {h2});
  pb.op("gelu", {h2}, {a});
  pb.op("matmul", {a, w2}, {zp});
  int z = zp;
  if (c.tpAxis >= 0) {
    z = act({Bl, C});
    pb.op("all_reduce", {zp}, {z}, {{"comm", "tp"}, {"reduction", "sum"}});
  }
  if (ndp > 1) {
    const int lloc = pb.buffer(DType::F32, {}, "scalar");
    pb.op("cross_entropy", {z, y}, {lloc});
    pb.op("all_reduce", {lloc}, {loss},
          {{"comm", "dp"}, {"reduction", "average"}});
  } else {
    pb.op("cross_entropy", {z, y}, {loss});
  }
  const int dz = act({Bl, C}), aT = act({Hl, Bl}), w2T = act({C, Hl}),
            da = act({Bl, Hl}), dh2 = act({Bl, Hl}), xT = act({I, Bl});
  const int dw2 = pb.buffer(DType::F32, {Hl, C}, "grad");
  const int db1 = pb.buffer(DType::F32, {Hl}, "grad");
  const int dw1 = pb.buffer(DType::F32, {I, Hl}, "grad");
  pb.op("cross_entropy_grad", {z, y, one}, {dz}, {{"scale", 1.0 / double(B)}});
  pb.op("transpose", {a}, {aT}, {{"permutation", {1, 0}}});
  pb.op("matmul", {aT, dz}, {dw2});
  pb.op("transpose", {w2}, {w2T}, {{"permutation", {1, 0}}});
  pb.op("matmul", {dz, w2T}, {da});
  pb.op("gelu_grad", {h2, da}, {dh2});
  pb.op("reduce_sum", {dh2}, {db1}, {{"axes", {0}}, {"keep_dims", false}});
  pb.op("transpose", {x}, {xT}, {{"permutation", {1, 0}}});
  pb.op("matmul", {xT, dh2}, {dw1});
  if (ndp > 1)
    for (int g : {dw1, db1, dw2})
      pb.op("all_reduce", {g}, {g}, {{"comm", "dp"}, {"reduction", "sum"}});
  update(ab, pb, c.optimizer, "w1", {I, H}, json::array({json::array(), tp}),
         {I, Hl}, w1, dw1, step);
  update(ab, pb, c.optimizer, "b1", {H}, json::array({tp}), {Hl}, b1, db1,
         step);
  update(ab, pb, c.optimizer, "w2", {H, C}, json::array({tp, json::array()}),
         {Hl, C}, w2, dw2, step);
  ab.program(pb);
  return ab.body();
}

json lmArtifact(const LmConfig &c) {
  ArtifactBuilder ab(c.mesh);
  std::vector<int> axes;
  int64_t ndp = 1;
  for (size_t i = 0; i < c.mesh.size(); ++i) {
    axes.push_back(int(i));
    ndp *= c.mesh[i];
  }
  const int64_t B = c.batch, S = c.seq, V = c.vocab, D = c.dim, Bl = B / ndp;
  if (ndp > 1)
    ab.comm("dp", axes);
  const json dp = axes;
  ab.input("ids", DType::I32, {B, S}, json::array({dp, json::array()}),
           c.idsMax ? c.idsMax : V);
  ab.input("labels", DType::I32, {B, S}, json::array({dp, json::array()}), V);
  ab.param("emb", {V, D}, "normal(0.5)",
           json::array({json::array(), json::array()}));
  ab.param("norm.g", {D}, "ones", json::array({json::array()}));
  ab.param("wout", {D, V}, "normal(0.3)",
           json::array({json::array(), json::array()}));
  ab.scalar("step", "step", DType::I64);
  ab.scalar("loss", "loss", DType::F32);

  ProgramBuilder pb("spmd", allRanks(c.mesh));
  const int ids = pb.buffer(DType::I32, {Bl, S}, "input", "ids");
  const int labels = pb.buffer(DType::I32, {Bl, S}, "input", "labels");
  const int emb = pb.buffer(DType::F32, {V, D}, "param", "emb");
  const int g = pb.buffer(DType::F32, {D}, "param", "norm.g");
  const int wout = pb.buffer(DType::F32, {D, V}, "param", "wout");
  const int step = pb.buffer(DType::I64, {}, "scalar", "step");
  const int loss = pb.buffer(DType::F32, {}, "scalar", "loss");
  const int one = pb.buffer(DType::F32, {}, "constant");
  pb.splat(one, 1.0);
  auto act = [&](Shape s) { return pb.buffer(DType::F32, s, "activation"); };
  const int e = act({Bl, S, D}), n = act({Bl, S, D});
  const int n4 = pb.view(n, DType::F32, {Bl, 1, S, D});
  const int att4 = act({Bl, 1, S, D});
  const int att = pb.view(att4, DType::F32, {Bl, S, D});
  const int logits = act({Bl, S, V});
  pb.op("embedding", {emb, ids}, {e});
  pb.op("rms_norm", {e, g}, {n}, {{"epsilon", 1e-6}});
  pb.op("attention", {n4, n4, n4}, {att4}, {{"causal", true}});
  pb.op("matmul", {att, wout}, {logits});
  int lossOut = loss;
  if (ndp > 1)
    lossOut = pb.buffer(DType::F32, {}, "scalar");
  pb.op("cross_entropy", {logits, labels}, {lossOut});
  if (ndp > 1)
    pb.op("all_reduce", {lossOut}, {loss},
          {{"comm", "dp"}, {"reduction", "average"}});
  // Backward.
  const int dlogits = act({Bl, S, V});
  pb.op("cross_entropy_grad", {logits, labels, one}, {dlogits},
        {{"scale", 1.0 / double(B * S)}});
  const int att2 = act({Bl * S, D});
  pb.op("reshape", {att}, {att2});
  const int attT = act({D, Bl * S});
  pb.op("transpose", {att2}, {attT}, {{"permutation", {1, 0}}});
  const int dl2 = pb.view(dlogits, DType::F32, {Bl * S, V});
  const int dwout = pb.buffer(DType::F32, {D, V}, "grad");
  pb.op("matmul", {attT, dl2}, {dwout});
  const int woutT = act({V, D});
  pb.op("transpose", {wout}, {woutT}, {{"permutation", {1, 0}}});
  const int datt = act({Bl, S, D});
  pb.op("matmul", {dlogits, woutT}, {datt});
  const int datt4 = pb.view(datt, DType::F32, {Bl, 1, S, D});
  const int dq = act({Bl, 1, S, D}), dk = act({Bl, 1, S, D}),
            dv = act({Bl, 1, S, D});
  pb.op("attention_grad", {n4, n4, n4, datt4}, {dq, dk, dv},
        {{"causal", true}});
  const int dqk = act({Bl, 1, S, D}), dn4 = act({Bl, 1, S, D});
  pb.op("add", {dq, dk}, {dqk});
  pb.op("add", {dqk, dv}, {dn4});
  const int dn = pb.view(dn4, DType::F32, {Bl, S, D});
  const int de = act({Bl, S, D});
  const int dg = pb.buffer(DType::F32, {D}, "grad");
  pb.op("rms_norm_grad", {e, g, dn}, {de, dg}, {{"epsilon", 1e-6}});
  const int demb = pb.buffer(DType::F32, {V, D}, "grad");
  pb.op("embedding_grad", {ids, de}, {demb});
  if (ndp > 1)
    for (int gr : {demb, dg, dwout})
      pb.op("all_reduce", {gr}, {gr}, {{"comm", "dp"}, {"reduction", "sum"}});
  const json rep2 = json::array({json::array(), json::array()});
  update(ab, pb, "adam", "emb", {V, D}, rep2, {V, D}, emb, demb, step);
  update(ab, pb, "adam", "norm.g", {D}, json::array({json::array()}), {D}, g,
         dg, step);
  update(ab, pb, "adam", "wout", {D, V}, rep2, {D, V}, wout, dwout, step);
  ab.program(pb);
  return ab.body();
}

// Mesh [2, 2], rank r = 2*c0 + c1. Input x: global X [4, 6] split
// [[0], [1]], so rank (c0, c1) holds x_r = X[2c0:2c0+2, 3c1:3c1+3]. Every
// result is stored in a param of global shape [4a, b] split [[0, 1], []], so
// the saved tensor stacks the ranks' local [a, b] results in rank order.
// collectivesExpected() computes the same values directly from X.
namespace {
/// The input x [4, 6] of the mesh [2, 2] split by rows over axis 0 and by
/// columns over axis 1: a [2, 3] piece per rank. Returns its buffer.
int splitInput(ArtifactBuilder &ab, ProgramBuilder &pb) {
  ab.input("x", DType::F32, {4, 6},
           json::array({json::array({0}), json::array({1})}));
  return pb.buffer(DType::F32, {2, 3}, "input", "x");
}
/// A param of global shape [4a, b] stacking the four ranks' local [a, b]
/// pieces in rank order. Returns its buffer.
int stackedParam(ArtifactBuilder &ab, ProgramBuilder &pb,
                 const std::string &name, Shape local) {
  ab.param(name, {4 * local[0], local[1]}, "zeros",
           json::array({json::array({0, 1}), json::array()}));
  return pb.buffer(DType::F32, local, "param", name);
}
} // namespace

json collectivesArtifact() {
  ArtifactBuilder ab({2, 2});
  ab.comm("rows", {0});     // groups {0,2}, {1,3}; index c0
  ab.comm("cols", {1});     // groups {0,1}, {2,3}; index c1
  ab.comm("all10", {1, 0}); // one group; index c1*2 + c0
  ProgramBuilder pb("spmd", {0, 1, 2, 3});
  const int x = splitInput(ab, pb);
  auto out = [&](const std::string &name, Shape local) {
    return stackedParam(ab, pb, name, local);
  };
  const int ar = out("ar", {2, 3}), mx = out("mx", {2, 3}),
            avg = out("avg", {2, 3});
  const int ag = out("ag", {4, 3}), xc = out("xc", {2, 6}),
            rs = out("rs", {2, 3});
  const int rs0 = out("rs0", {2, 3}), a2a = out("a2a", {1, 12}),
            a2b = out("a2b", {4, 3});
  const int sl = out("sl", {2, 3}), isum = out("isum", {2, 3});
  const int shc = out("shc", {2, 3}), sha = out("sha", {2, 3});
  ab.scalar("loss", "loss", DType::F32);
  const int loss = pb.buffer(DType::F32, {}, "scalar", "loss");
  pb.op("all_reduce", {x}, {ar}, {{"comm", "rows"}, {"reduction", "sum"}});
  pb.op("all_reduce", {x}, {mx}, {{"comm", "all10"}, {"reduction", "max"}});
  pb.op("copy", {x}, {avg});
  pb.op("all_reduce", {avg}, {avg},
        {{"comm", "cols"}, {"reduction", "average"}});
  pb.op("all_gather", {x}, {ag}, {{"comm", "rows"}, {"axis", 0}});
  pb.op("all_gather", {x}, {xc}, {{"comm", "cols"}, {"axis", 1}});
  pb.op("reduce_scatter", {xc}, {rs},
        {{"comm", "cols"}, {"axis", 1}, {"reduction", "sum"}});
  pb.op("reduce_scatter", {ag}, {rs0},
        {{"comm", "rows"}, {"axis", 0}, {"reduction", "sum"}});
  pb.op("all_to_all", {ag}, {a2a},
        {{"comm", "all10"}, {"split_axis", 0}, {"concat_axis", 1}});
  pb.op("all_to_all", {xc}, {a2b},
        {{"comm", "cols"}, {"split_axis", 1}, {"concat_axis", 0}});
  pb.op("all_slice", {ag}, {sl}, {{"comm", "rows"}, {"axis", 0}});
  pb.op("shift", {x}, {shc}, {{"comm", "cols"}, {"offset", 1}});
  pb.op("shift", {x}, {sha}, {{"comm", "all10"}, {"offset", -1}});
  // Integer all_reduce: trunc(100 x) summed over the whole mesh.
  const int hundred = pb.buffer(DType::F32, {}, "constant");
  pb.splat(hundred, 100.0);
  const int x100 = pb.buffer(DType::F32, {2, 3}, "activation");
  const int xi = pb.buffer(DType::I64, {2, 3}, "activation");
  const int xs = pb.buffer(DType::I64, {2, 3}, "activation");
  pb.op("mul", {x, hundred}, {x100});
  pb.op("cast", {x100}, {xi});
  pb.op("all_reduce", {xi}, {xs}, {{"comm", "all10"}, {"reduction", "sum"}});
  pb.op("cast", {xs}, {isum});
  // loss = sum(X), replicated.
  const int part = pb.buffer(DType::F32, {}, "scalar");
  pb.op("reduce_sum", {x}, {part}, {{"axes", {0, 1}}, {"keep_dims", false}});
  pb.op("all_reduce", {part}, {loss},
        {{"comm", "all10"}, {"reduction", "sum"}});
  ab.program(pb);
  return ab.body();
}

json bucketsArtifact(bool bucketed) {
  ArtifactBuilder ab({2, 2});
  ab.comm("cols", {1});
  ProgramBuilder pb("spmd", {0, 1, 2, 3});
  const int x = splitInput(ab, pb);
  auto out = [&](const std::string &name, Shape local) {
    return stackedParam(ab, pb, name, local);
  };
  const int xc = out("xc", {2, 6}), ag0 = out("ag0", {4, 3});
  const int rs = out("rs", {2, 3}), rs0 = out("rs0", {2, 3});
  auto attrs = [&](int axis, int bucket, bool reduce) {
    json a = {{"comm", "cols"}, {"axis", axis}};
    if (reduce)
      a["reduction"] = "sum";
    if (bucketed)
      a["bucket"] = bucket;
    return a;
  };
  pb.op("all_gather", {x}, {xc}, attrs(1, 0, false));
  pb.op("all_gather", {x}, {ag0}, attrs(0, 0, false));
  pb.op("reduce_scatter", {xc}, {rs}, attrs(1, 1, true));
  pb.op("reduce_scatter", {ag0}, {rs0}, attrs(0, 1, true));
  ab.scalar("loss", "loss", DType::F32);
  const int loss = pb.buffer(DType::F32, {}, "scalar", "loss");
  pb.op("reduce_sum", {x}, {loss}, {{"axes", {0, 1}}, {"keep_dims", false}});
  ab.program(pb);
  return ab.body();
}

std::map<std::string, std::vector<float>>
collectivesExpected(const std::vector<float> &X) {
  auto at = [&](int64_t i, int64_t j) { return X[size_t(i * 6 + j)]; };
  auto local = [&](int c0, int c1, int64_t i, int64_t j) {
    return at(2 * c0 + i, 3 * c1 + j);
  };
  std::map<std::string, std::vector<float>> e;
  for (int r = 0; r < 4; ++r) {
    const int c0 = r / 2, c1 = r % 2;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        e["ar"].push_back(local(0, c1, i, j) + local(1, c1, i, j));
        float m = local(0, 0, i, j);
        for (int q = 1; q < 4; ++q)
          m = std::max(m, local(q / 2, q % 2, i, j));
        e["mx"].push_back(m);
        e["avg"].push_back((local(c0, 0, i, j) + local(c0, 1, i, j)) / 2.0f);
        e["rs"].push_back(local(c0, c1, i, j) + local(c0, c1, i, j));
        e["rs0"].push_back(local(c0, c1, i, j) + local(c0, c1, i, j));
        e["sl"].push_back(local(c0, c1, i, j));
        // shift over cols by 1: from (c0, c1 - 1); over all10 (index
        // c1 * 2 + c0) by -1: from index + 1.
        e["shc"].push_back(local(c0, 1 - c1, i, j));
        const int from = (c1 * 2 + c0 + 1) % 4;
        e["sha"].push_back(local(from % 2, from / 2, i, j));
        int64_t s = 0;
        for (int q = 0; q < 4; ++q)
          s += int64_t(100.0f * local(q / 2, q % 2, i, j));
        e["isum"].push_back(float(s));
      }
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 3; ++j)
        e["ag"].push_back(at(i, 3 * c1 + j));
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 6; ++j)
        e["xc"].push_back(at(2 * c0 + i, j));
    const int me = c1 * 2 + c0; // index in all10
    for (int m = 0; m < 4; ++m) {
      const int mc1 = m / 2;
      for (int64_t k = 0; k < 3; ++k)
        e["a2a"].push_back(at(me, 3 * mc1 + k));
    }
    for (int m = 0; m < 2; ++m)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j)
          e["a2b"].push_back(local(c0, c1, i, j));
  }
  return e;
}

json programsArtifact(const std::vector<CollectiveSpec> &p0,
                      const std::vector<CollectiveSpec> &p1) {
  ArtifactBuilder ab({2});
  ab.comm("a", {0});
  ab.comm("b", {0});
  ab.param("w", {8}, "normal(1.0)", json::array({json::array()}));
  ab.scalar("loss", "loss", DType::F32);
  const std::vector<CollectiveSpec> *lists[2] = {&p0, &p1};
  for (int r = 0; r < 2; ++r) {
    ProgramBuilder pb("p" + std::to_string(r), {r});
    const int w = pb.buffer(DType::F32, {8}, "param", "w");
    const int loss = pb.buffer(DType::F32, {}, "scalar", "loss");
    pb.op("reduce_sum", {w}, {loss}, {{"axes", {0}}, {"keep_dims", false}});
    for (size_t i = 0; i < lists[r]->size(); ++i) {
      const CollectiveSpec &c = (*lists[r])[i];
      int64_t outCount = c.count;
      json attrs = {{"comm", c.comm}};
      if (c.op == "all_reduce" || c.op == "reduce_scatter")
        attrs["reduction"] = c.reduction;
      if (c.op == "all_gather")
        outCount = c.count * 2;
      if (c.op == "reduce_scatter")
        outCount = c.count / 2;
      if (c.op == "all_gather" || c.op == "reduce_scatter")
        attrs["axis"] = 0;
      if (c.op == "all_to_all") {
        attrs["split_axis"] = 0;
        attrs["concat_axis"] = 0;
      }
      const int in = pb.buffer(c.dtype, {c.count}, "activation");
      pb.splat(in, double(r + 1));
      const int out = pb.buffer(c.dtype, {outCount}, "activation");
      pb.op(c.op, {in}, {out}, attrs);
      if (i == 0 && c.op == "all_reduce" && c.count == 8 &&
          c.dtype == DType::F32)
        pb.op("sgd_update", {w, out}, {w},
              {{"lr", 0.1}, {"weight_decay", 0.0}});
    }
    ab.program(pb);
  }
  return ab.body();
}

namespace {
json ppSlot(int bytes, const char *category, int chunk = -1) {
  json s = {{"bytes", bytes}, {"category", category}};
  if (chunk >= 0) {
    s["scope"] = "microbatch";
    s["chunk"] = chunk;
  }
  return s;
}

json ppBuf(int slot, std::vector<int64_t> shape, const char *tensor = nullptr) {
  json b = {{"slot", slot}, {"dtype", "f32"}, {"shape", shape}};
  if (tensor)
    b["tensor"] = tensor;
  return b;
}

json ppIns(const char *op, std::vector<int> in, std::vector<int> out,
           json attrs = json::object()) {
  json i = {{"op", op}, {"in", in}, {"out", out}};
  if (!attrs.empty())
    i["attrs"] = attrs;
  return i;
}

json ppMessage(int peer, int id) {
  return {{"comm", "pp"}, {"peer", peer}, {"message", id}};
}

} // namespace

json pipelineArtifact() {
  json stage0 = {
      {"name", "stage0"},
      {"ranks", {0}},
      {"stage", 0},
      {"slots",
       {ppSlot(64, "param"), ppSlot(64, "input"), ppSlot(32, "activation", 0),
        ppSlot(32, "activation"), ppSlot(32, "activation", 0),
        ppSlot(64, "activation"), ppSlot(64, "grad")}},
      {"buffers",
       {ppBuf(0, {4, 4}, "w"), ppBuf(1, {4, 4}, "x"), ppBuf(2, {2, 4}),
        ppBuf(3, {2, 4}), ppBuf(4, {2, 4}), ppBuf(5, {4, 4}),
        ppBuf(6, {4, 4})}},
      {"instructions", {ppIns("fill", {}, {6}, {{"value", 0}})}},
      {"chunks",
       {{{"forward",
          {ppIns("microbatch_slice", {1}, {2}, {{"axis", 0}}),
           ppIns("matmul", {2, 0}, {3}),
           ppIns("send", {3}, {}, ppMessage(1, 0))}},
         {"backward_input", {ppIns("recv", {}, {4}, ppMessage(1, 1))}},
         {"backward_weight",
          {ppIns("matmul", {2, 4}, {5}, {{"transpose_a", true}}),
           ppIns("accumulate", {5}, {6})}}}}},
      {"finish",
       {ppIns("sgd_update", {0, 6}, {0},
              {{"lr", 0.1}, {"weight_decay", 0.0}})}},
      {"schedule", {{"F", 0, 0}, {"F", 1, 0}, {"BW", 0, 0}, {"BW", 1, 0}}}};
  json stage1 = {
      {"name", "stage1"},
      {"ranks", {1}},
      {"stage", 1},
      {"slots",
       {ppSlot(32, "activation", 0), ppSlot(32, "activation"),
        ppSlot(4, "activation"), ppSlot(4, "activation"), ppSlot(4, "scalar"),
        ppSlot(32, "activation"), ppSlot(4, "constant")}},
      {"buffers",
       {ppBuf(0, {2, 4}), ppBuf(1, {2, 4}), ppBuf(2, {}), ppBuf(3, {}),
        ppBuf(4, {}, "loss"), ppBuf(5, {2, 4}), ppBuf(6, {})}},
      {"constants", {{{"buffer", 6}, {"splat", 2.0}}}},
      {"instructions", {ppIns("fill", {}, {3}, {{"value", 0}})}},
      {"chunks",
       {{{"forward",
          {ppIns("recv", {}, {0}, ppMessage(0, 0)), ppIns("mul", {0, 0}, {1}),
           ppIns("reduce_sum", {1}, {2},
                 {{"axes", {0, 1}}, {"keep_dims", false}}),
           ppIns("accumulate", {2}, {3})}},
         {"backward_input",
          {ppIns("mul", {0, 6}, {5}), ppIns("send", {5}, {}, ppMessage(0, 1))}},
         {"backward_weight", json::array()}}}},
      {"finish", {ppIns("copy", {3}, {4})}},
      {"schedule", {{"F", 0, 0}, {"BW", 0, 0}, {"F", 1, 0}, {"BW", 1, 0}}}};
  return {{"format", "dtc-artifact"},
          {"version", rt::kArtifactVersion},
          {"mesh", {2}},
          {"devices", 2},
          {"pipeline",
           {{"stages", 2},
            {"virtual_stages", 1},
            {"microbatches", 2},
            {"schedule", "1f1b"}}},
          {"communicators", {{{"name", "pp"}, {"mesh_axes", {0}}}}},
          {"tensors",
           {{{"name", "w"},
             {"role", "param"},
             {"dtype", "f32"},
             {"shape", {4, 4}},
             {"init", "normal(0.5)"},
             {"sharding", {json::array(), json::array()}}},
            {{"name", "x"},
             {"role", "input"},
             {"dtype", "f32"},
             {"shape", {4, 4}},
             {"sharding", {json::array(), json::array()}}},
            {{"name", "loss"},
             {"role", "loss"},
             {"dtype", "f32"},
             {"shape", json::array()},
             {"sharding", json::array()}}}},
          {"programs", {stage0, stage1}}};
}

} // namespace dtc::test
