//===- PieceLayout.cpp - the mesh and each rank's piece of a tensor -------===//
#include "dtc/artifact/PieceLayout.h"

#include <algorithm>

namespace dtc::artifact {

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

namespace {
void forEachProgramRun(const Shape &global, const Piece &piece,
                       const std::function<void(int64_t, int64_t, int64_t)> &f);
} // namespace

void forEachPieceRun(const Shape &global, const Piece &piece,
                     const std::function<void(int64_t, int64_t, int64_t)> &f) {
  const int s = piece.orderedDim;
  if (s < 0 || size_t(s) >= global.size() || piece.orderedWays <= 1 ||
      piece.order == SequenceOrder::Natural) {
    forEachProgramRun(global, piece, f);
    return;
  }
  // A run stays contiguous in natural order while its index along the
  // ordered dimension is one: cut it at every step of that dimension.
  int64_t inner = 1;
  for (size_t d = size_t(s) + 1; d < global.size(); ++d)
    inner *= global[d];
  const int64_t length = global[size_t(s)], ways = piece.orderedWays;
  forEachProgramRun(global, piece, [&](int64_t l, int64_t g, int64_t len) {
    for (int64_t at = 0; at < len;) {
      const int64_t from = g + at;
      const int64_t take = std::min(len - at, inner - from % inner);
      const int64_t index = (from / inner) % length;
      f(l + at,
        from +
            (orderedPosition(piece.order, index, length, ways) - index) * inner,
        take);
      at += take;
    }
  });
}

namespace {
void forEachProgramRun(
    const Shape &global, const Piece &piece,
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

} // namespace

} // namespace dtc::artifact
