//===- ReshardTest.cpp - resharding plans against gather-then-slice -------===//
//
// For every pair of shardings of a small tensor on 1-D and 2-D meshes
// (dimensions split over any axes in any order, padded pieces, pending sums
// and maxima), planReshard's collectives are executed on simulated devices
// exactly as the partitioner materializes them (pads, group order, crops)
// and each device's piece is compared with the piece of the global value:
// the reference resharding that gathers everything and slices. Padding is
// filled with a sentinel, so a collective that lets padding leak into a
// valid element fails. The plan's cost must not exceed gather-then-slice's.
//
//===----------------------------------------------------------------------===//
#include "dtc/Sharding/Reshard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

using mlir::dtc::GridAxes;
using mlir::dtc::PartialKind;
using mlir::dtc::ReshardPlan;
using mlir::dtc::ReshardStep;
using mlir::dtc::TensorSharding;
using Shape = std::vector<int64_t>;

constexpr float kPadding = 7777.0f;

int64_t numel(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

struct Array {
  Shape shape;
  std::vector<float> data;
  float &at(const Shape &idx) {
    int64_t o = 0;
    for (size_t d = 0; d < shape.size(); ++d)
      o = o * shape[d] + idx[d];
    return data[size_t(o)];
  }
  float at(const Shape &idx) const {
    return const_cast<Array *>(this)->at(idx);
  }
};

/// Calls f(index) for every index of `shape`, row-major.
void forEach(const Shape &shape, const std::function<void(const Shape &)> &f) {
  if (numel(shape) == 0)
    return;
  Shape idx(shape.size(), 0);
  while (true) {
    f(idx);
    size_t d = shape.size();
    while (d > 0) {
      if (++idx[d - 1] < shape[d - 1])
        break;
      idx[--d] = 0;
    }
    if (d == 0)
      return;
  }
}

struct Mesh {
  Shape axes;
  int64_t devices() const { return numel(axes); }
  Shape coords(int64_t r) const {
    Shape c(axes.size());
    for (size_t i = axes.size(); i-- > 0;) {
      c[i] = r % axes[i];
      r /= axes[i];
    }
    return c;
  }
  int64_t groupIndex(const Shape &c, const GridAxes &group) const {
    int64_t idx = 0;
    for (int64_t a : group)
      idx = idx * axes[size_t(a)] + c[size_t(a)];
    return idx;
  }
  /// Devices of r's group over `group`, in group order.
  std::vector<int64_t> members(int64_t r, const GridAxes &group) const {
    Shape mine = coords(r);
    std::vector<std::pair<int64_t, int64_t>> found;
    for (int64_t q = 0; q < devices(); ++q) {
      Shape c = coords(q);
      bool same = true;
      for (size_t a = 0; a < axes.size(); ++a)
        if (std::find(group.begin(), group.end(), int64_t(a)) == group.end() &&
            c[a] != mine[a])
          same = false;
      if (same)
        found.push_back({groupIndex(c, group), q});
    }
    std::sort(found.begin(), found.end());
    std::vector<int64_t> out;
    for (auto &[idx, q] : found)
      out.push_back(q);
    return out;
  }
};

/// Local shape under `s`: pieces of the sharding's piece size,
/// ceil(size / pieces) by default.
Shape localOf(const Shape &global, const TensorSharding &s, const Mesh &mesh) {
  Shape local = global;
  for (size_t d = 0; d < local.size(); ++d) {
    int64_t n = 1;
    for (int64_t a : s.dims[d])
      n *= mesh.axes[size_t(a)];
    local[d] =
        s.piece(unsigned(d)) ? s.piece(unsigned(d)) : (local[d] + n - 1) / n;
  }
  return local;
}

/// Device r's piece of global `g` under `s` (padding = sentinel).
Array pieceOf(const Array &g, const TensorSharding &s, const Mesh &mesh,
              int64_t r) {
  Shape local = localOf(g.shape, s, mesh);
  Shape offset(g.shape.size(), 0);
  Shape c = mesh.coords(r);
  for (size_t d = 0; d < g.shape.size(); ++d)
    offset[d] = mesh.groupIndex(c, s.dims[d]) * local[d];
  Array out{local, std::vector<float>(size_t(numel(local)), kPadding)};
  forEach(local, [&](const Shape &i) {
    Shape gi(i.size());
    for (size_t d = 0; d < i.size(); ++d) {
      gi[d] = offset[d] + i[d];
      if (gi[d] >= g.shape[d])
        return;
    }
    out.at(i) = g.at(gi);
  });
  return out;
}

/// Pads with zeros or crops dimension `dim` to `size`.
Array fit(const Array &x, int64_t dim, int64_t size) {
  Shape shape = x.shape;
  shape[size_t(dim)] = size;
  Array out{shape, std::vector<float>(size_t(numel(shape)), 0.0f)};
  forEach(shape, [&](const Shape &i) {
    if (i[size_t(dim)] < x.shape[size_t(dim)])
      out.at(i) = x.at(i);
  });
  return out;
}

/// Pieces of `x` along `dim` (n equal ones), concatenation of pieces.
Array pieceAlong(const Array &x, int64_t dim, int64_t n, int64_t idx) {
  // What the collective ops verify: the split dimension divides.
  EXPECT_EQ(x.shape[size_t(dim)] % n, 0)
      << "splitting a dimension of " << x.shape[size_t(dim)] << " into " << n;
  Shape shape = x.shape;
  shape[size_t(dim)] /= n;
  Array out{shape, std::vector<float>(size_t(numel(shape)))};
  forEach(shape, [&](const Shape &i) {
    Shape src = i;
    src[size_t(dim)] += idx * shape[size_t(dim)];
    out.at(i) = x.at(src);
  });
  return out;
}
Array concatAlong(const std::vector<Array> &parts, int64_t dim) {
  Shape shape = parts[0].shape;
  const int64_t q = shape[size_t(dim)];
  shape[size_t(dim)] *= int64_t(parts.size());
  Array out{shape, std::vector<float>(size_t(numel(shape)))};
  forEach(shape, [&](const Shape &i) {
    Shape src = i;
    src[size_t(dim)] %= q;
    out.at(i) = parts[size_t(i[size_t(dim)] / q)].at(src);
  });
  return out;
}
Array reduce(const std::vector<Array> &parts, PartialKind kind) {
  Array out = parts[0];
  for (size_t p = 1; p < parts.size(); ++p)
    for (size_t i = 0; i < out.data.size(); ++i)
      out.data[i] = kind == PartialKind::Sum
                        ? out.data[i] + parts[p].data[i]
                        : std::max(out.data[i], parts[p].data[i]);
  return out;
}

/// Runs `plan` on every device's local array, as the partitioner emits it.
std::vector<Array> execute(const ReshardPlan &plan, std::vector<Array> locals,
                           const Mesh &mesh, const Shape &globalShape) {
  for (const ReshardStep &step : plan.steps) {
    const int64_t n = mlir::dtc::shardCount(mesh.axes, step.axes);
    if (step.padDim >= 0)
      for (Array &x : locals)
        x = fit(x, step.padDim, step.padSize);
    std::vector<Array> next(locals.size());
    for (int64_t r = 0; r < mesh.devices(); ++r) {
      std::vector<int64_t> group = mesh.members(r, step.axes);
      const int64_t idx = mesh.groupIndex(mesh.coords(r), step.axes);
      std::vector<Array> ins;
      for (int64_t q : group)
        ins.push_back(locals[size_t(q)]);
      switch (step.kind) {
      case ReshardStep::Kind::AllReduce:
        next[size_t(r)] = reduce(ins, step.reduction);
        break;
      case ReshardStep::Kind::ReduceScatter:
        next[size_t(r)] =
            pieceAlong(reduce(ins, step.reduction), step.dim, n, idx);
        break;
      case ReshardStep::Kind::AllSlice:
        next[size_t(r)] = pieceAlong(locals[size_t(r)], step.dim, n, idx);
        break;
      case ReshardStep::Kind::AllGather:
        next[size_t(r)] = concatAlong(ins, step.dim);
        break;
      case ReshardStep::Kind::AllToAll: {
        std::vector<Array> received;
        for (const Array &from : ins)
          received.push_back(pieceAlong(from, step.dim, n, idx));
        next[size_t(r)] = concatAlong(received, step.concatDim);
        break;
      }
      case ReshardStep::Kind::Shift:
        ADD_FAILURE() << "a resharding plan holds a shift";
        break;
      }
    }
    locals = std::move(next);
    if (step.cropDim >= 0)
      for (Array &x : locals)
        x = fit(x, step.cropDim, step.cropSize);
    // Every step lands on its stated sharding's local shape.
    for (const Array &x : locals)
      EXPECT_EQ(x.shape, localOf(globalShape, step.after, mesh)) << plan.str();
  }
  return locals;
}

/// Every sharding of a rank-2 tensor on `mesh`: each axis splits dim 0,
/// dim 1, is pending (sum or max) or unused, in every order; with
/// `pieces`, also dim 1 split into pieces of that size.
std::vector<TensorSharding> allShardings(const Mesh &mesh, const Shape &shape,
                                         int64_t pieces = 0) {
  std::vector<TensorSharding> out;
  const size_t m = mesh.axes.size();
  std::vector<int> choice(m, 0);
  while (true) {
    for (PartialKind kind : {PartialKind::Sum, PartialKind::Max}) {
      TensorSharding base = TensorSharding::replicated(2);
      bool anyPartial = false;
      std::vector<std::vector<int64_t>> perDim(2);
      for (size_t a = 0; a < m; ++a) {
        if (choice[a] == 1)
          perDim[0].push_back(int64_t(a));
        if (choice[a] == 2)
          perDim[1].push_back(int64_t(a));
        if (choice[a] == 3) {
          base.partial.push_back(int64_t(a));
          anyPartial = true;
        }
      }
      if (!anyPartial && kind == PartialKind::Max)
        continue;
      base.partialKind = kind;
      std::vector<int64_t> d0 = perDim[0], d1 = perDim[1];
      std::sort(d0.begin(), d0.end());
      do {
        std::sort(d1.begin(), d1.end());
        do {
          TensorSharding s = base;
          s.dims[0].assign(d0.begin(), d0.end());
          s.dims[1].assign(d1.begin(), d1.end());
          out.push_back(s);
          const int64_t n = mlir::dtc::shardCount(mesh.axes, s.dims[1]);
          if (pieces && n > 1 && pieces * n >= shape[1] &&
              pieces != mlir::dtc::pieceSize(shape[1], n)) {
            s.setPiece(1, pieces);
            out.push_back(s);
          }
        } while (std::next_permutation(d1.begin(), d1.end()));
      } while (std::next_permutation(d0.begin(), d0.end()));
    }
    size_t a = 0;
    while (a < m && ++choice[a] == 4)
      choice[a++] = 0;
    if (a == m)
      break;
  }
  return out;
}

/// Bytes of the reference: reduce what is pending, gather every split,
/// slice the target.
double gatherThenSliceBytes(const Shape &shape, const TensorSharding &from,
                            const TensorSharding &to, const Mesh &mesh) {
  ReshardPlan plan;
  std::string error;
  TensorSharding whole = TensorSharding::replicated(2);
  whole.partial = to.partial;
  whole.partialKind = to.partialKind;
  EXPECT_TRUE(
      mlir::dtc::planReshard(shape, 4, from, whole, mesh.axes, plan, error))
      << error;
  return plan.bytes; // slicing is free
}

struct Case {
  const char *name;
  Shape mesh;
  Shape shape;
  int64_t pieces = 0;
};

class ReshardEveryPair : public ::testing::TestWithParam<Case> {};

TEST_P(ReshardEveryPair, MatchesGatherThenSlice) {
  const Case &c = GetParam();
  Mesh mesh{c.mesh};
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<TensorSharding> shardings = allShardings(mesh, c.shape, c.pieces);
  int pairs = 0;
  for (const TensorSharding &from : shardings)
    for (const TensorSharding &to : shardings) {
      bool subset =
          std::all_of(to.partial.begin(), to.partial.end(), [&](int64_t a) {
            return std::find(from.partial.begin(), from.partial.end(), a) !=
                   from.partial.end();
          });
      if (!subset || (to.isPartial() && to.partialKind != from.partialKind))
        continue;
      ++pairs;
      SCOPED_TRACE(from.str() + " -> " + to.str());
      ReshardPlan plan;
      std::string error;
      ASSERT_TRUE(
          mlir::dtc::planReshard(c.shape, 4, from, to, mesh.axes, plan, error))
          << error;
      if (from == to) {
        EXPECT_TRUE(plan.steps.empty()) << plan.str();
      }

      // One contribution per index over the pending axes; the global value
      // is their reduction.
      const int64_t parts = mlir::dtc::shardCount(mesh.axes, from.partial);
      std::vector<Array> contributions;
      for (int64_t j = 0; j < parts; ++j) {
        Array a{c.shape, std::vector<float>(size_t(numel(c.shape)))};
        for (float &v : a.data)
          v = uniform(rng);
        contributions.push_back(a);
      }
      std::vector<Array> locals;
      for (int64_t r = 0; r < mesh.devices(); ++r) {
        int64_t j = mesh.groupIndex(mesh.coords(r), from.partial);
        locals.push_back(pieceOf(contributions[size_t(j)], from, mesh, r));
      }
      std::vector<Array> result = execute(plan, locals, mesh, c.shape);

      for (int64_t r = 0; r < mesh.devices(); ++r) {
        // The reference: what stays pending is reduced only over the axes
        // the target no longer keeps.
        Shape mine = mesh.coords(r);
        std::vector<Array> kept;
        for (int64_t j = 0; j < parts; ++j) {
          // Coordinates of contribution j over from.partial.
          Shape jc(mesh.axes.size(), 0);
          int64_t rem = j;
          for (size_t k = from.partial.size(); k-- > 0;) {
            int64_t axis = from.partial[k];
            jc[size_t(axis)] = rem % mesh.axes[size_t(axis)];
            rem /= mesh.axes[size_t(axis)];
          }
          bool match =
              std::all_of(to.partial.begin(), to.partial.end(), [&](int64_t a) {
                return jc[size_t(a)] == mine[size_t(a)];
              });
          if (match)
            kept.push_back(contributions[size_t(j)]);
        }
        Array expected = pieceOf(reduce(kept, from.partialKind), to, mesh, r);
        ASSERT_EQ(result[size_t(r)].shape, expected.shape)
            << "device " << r << ": " << plan.str();
        for (size_t i = 0; i < expected.data.size(); ++i) {
          if (expected.data[i] == kPadding)
            continue; // padding: any value
          ASSERT_NEAR(result[size_t(r)].data[i], expected.data[i], 1e-5)
              << "device " << r << " element " << i << ": " << plan.str();
        }
      }
      EXPECT_LE(plan.bytes,
                gatherThenSliceBytes(c.shape, from, to, mesh) + 1e-9)
          << plan.str();
    }
  EXPECT_GT(pairs, 10);
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, ReshardEveryPair,
    ::testing::Values(Case{"mesh4_even", {4}, {8, 12}, 6},
                      Case{"mesh4_padded", {4}, {6, 5}},
                      Case{"mesh3_padded", {3}, {6, 5}},
                      Case{"mesh2x3_padded", {2, 3}, {6, 5}},
                      Case{"mesh2x2_even", {2, 2}, {4, 8}},
                      Case{"mesh3x2_mixed", {3, 2}, {7, 6}}),
    [](const ::testing::TestParamInfo<Case> &info) {
      return std::string(info.param.name);
    });

// The plans themselves, where one collective is the right answer.
TEST(ReshardPlan, ChoosesTheDirectCollective) {
  Shape grid = {2, 4};
  auto plan = [&](const TensorSharding &from, const TensorSharding &to) {
    ReshardPlan p;
    std::string error;
    EXPECT_TRUE(mlir::dtc::planReshard({8, 16}, 4, from, to, grid, p, error))
        << error;
    return p.str();
  };
  TensorSharding rows = TensorSharding::replicated(2), cols = rows,
                 whole = rows, pending = rows;
  rows.dims[0] = {1};
  cols.dims[1] = {1};
  pending.partial = {1};
  // A split moving between dimensions is one all-to-all.
  EXPECT_EQ(plan(rows, cols), "all_to_all(dim 0 -> 1, axes [1])");
  // A pending sum into a split is one reduce-scatter; into a whole value
  // one all-reduce.
  EXPECT_EQ(plan(pending, cols), "reduce_scatter(dim 1, axes [1])");
  EXPECT_EQ(plan(pending, whole), "all_reduce(axes [1])");
  // A pending sum that the target splits on another axis is sliced first,
  // so the all-reduce moves a quarter.
  TensorSharding cols0 = whole;
  cols0.dims[1] = {0};
  TensorSharding pendingCols = whole;
  pendingCols.partial = {1};
  EXPECT_EQ(plan(pendingCols, cols0),
            "all_slice(dim 1, axes [0]); all_reduce(axes [1])");
  // Max stays max.
  TensorSharding pendingMax = pending;
  pendingMax.partialKind = PartialKind::Max;
  ReshardPlan p;
  std::string error;
  ASSERT_TRUE(
      mlir::dtc::planReshard({8, 16}, 4, pendingMax, whole, grid, p, error));
  ASSERT_EQ(p.steps.size(), 1u);
  EXPECT_EQ(p.steps[0].reduction, PartialKind::Max);
  // A whole value never becomes pending.
  EXPECT_FALSE(
      mlir::dtc::planReshard({8, 16}, 4, whole, pending, grid, p, error));
  EXPECT_NE(error.find("cannot turn a whole value into a pending partial one"),
            std::string::npos);
}

} // namespace
