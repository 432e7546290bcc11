//===- PieceLayout.h - the mesh and a rank's piece of a tensor ---*- C++
//-*-===//
//
// How a sharded global tensor is laid out over the device mesh: which mesh
// coordinates a rank has, which ranks form a communicator's group, and which
// piece of a tensor a rank holds (docs/artifact.md "Tensors"). The loader,
// checkpoints, the executor and the tests all place elements through these.
//
// Plain C++17, MLIR-free, nothing throws.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_ARTIFACT_PIECELAYOUT_H
#define DTC_ARTIFACT_PIECELAYOUT_H

#include "dtc/artifact/Types.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtc::artifact {

/// Per dimension: the mesh axes that split it, major first.
using Sharding = std::vector<std::vector<int>>;

/// The device mesh: axis sizes, outermost first; rank <-> coordinates in
/// row-major order.
class Mesh {
public:
  Mesh() = default;
  explicit Mesh(std::vector<int64_t> axes);
  const std::vector<int64_t> &axes() const { return axes_; }
  int numAxes() const { return int(axes_.size()); }
  int64_t devices() const;
  std::vector<int64_t> coords(int64_t rank) const;
  /// Product of the sizes of `axes`.
  int64_t groupSize(const std::vector<int> &axes) const;
  /// Row-major index of `c` over `axes` in the listed order.
  int64_t groupIndex(const std::vector<int64_t> &c,
                     const std::vector<int> &axes) const;
  /// Row-major index of `c` over the axes NOT in `axes` (identifies the group).
  int64_t groupColor(const std::vector<int64_t> &c,
                     const std::vector<int> &axes) const;
  /// "2x2"
  std::string str() const;

private:
  std::vector<int64_t> axes_;
};

/// The order in which the program holds a sequence it splits over ranks:
/// natural, or permuted so that causal attention's work is the same on
/// every rank (docs/design.md "Causal load balancing").
enum class SequenceOrder : uint8_t { Natural, Striped, Zigzag };

/// The local piece of a global tensor on one rank. A dimension of size G
/// split into n pieces has pieces of ceil(G/n) elements: piece i holds
/// global elements [i*ceil(G/n), min((i+1)*ceil(G/n), G)) followed by
/// padding (uneven splits; a piece may be all padding).
struct Piece {
  Shape local;  ///< local (padded) shape: the buffer's
  Shape offset; ///< global index of the piece's first element, per dim
  Shape extent; ///< elements of the piece inside the global tensor, per dim
  /// The dimension the program holds in a permuted sequence order over
  /// `orderedWays` ranks (ring attention's causal balance, the artifact's
  /// "striped" or "zigzag"), or -1: program index i of it is natural
  /// position orderedPosition(order, i, ...).
  int orderedDim = -1;
  int64_t orderedWays = 1;
  SequenceOrder order = SequenceOrder::Natural;
};

/// The striped order of a sequence of `length` positions over `ways` ranks:
/// rank r's chunk of c = length / ways program indices holds the positions
/// r, r + ways, r + 2 ways, ... (program index r * c + j is position
/// j * ways + r). stripedIndex is its inverse.
inline int64_t stripedPosition(int64_t index, int64_t length, int64_t ways) {
  const int64_t chunk = length / ways;
  return (index % chunk) * ways + index / chunk;
}
inline int64_t stripedIndex(int64_t position, int64_t length, int64_t ways) {
  const int64_t chunk = length / ways;
  return (position % ways) * chunk + position / ways;
}
/// The zigzag order of a sequence of `length` positions over `ways` ranks
/// (length divisible by 2 * ways): the sequence is cut into 2 * ways
/// chunks of h positions and rank r holds chunk r then chunk 2 ways - 1 - r,
/// one from each end, so program index r * 2h + j is position r * h + j for
/// j < h and (2 ways - 1 - r) * h + j - h after. zigzagIndex is its inverse.
inline int64_t zigzagPosition(int64_t index, int64_t length, int64_t ways) {
  const int64_t half = length / (2 * ways), rank = index / (2 * half),
                j = index % (2 * half);
  return j < half ? rank * half + j : (2 * ways - 1 - rank) * half + j - half;
}
inline int64_t zigzagIndex(int64_t position, int64_t length, int64_t ways) {
  const int64_t half = length / (2 * ways), chunk = position / half,
                j = position % half;
  return chunk < ways ? chunk * 2 * half + j
                      : (2 * ways - 1 - chunk) * 2 * half + half + j;
}
/// The natural position of program index `index` under `order`, and back.
inline int64_t orderedPosition(SequenceOrder order, int64_t index,
                               int64_t length, int64_t ways) {
  switch (order) {
  case SequenceOrder::Striped:
    return stripedPosition(index, length, ways);
  case SequenceOrder::Zigzag:
    return zigzagPosition(index, length, ways);
  case SequenceOrder::Natural:
    break;
  }
  return index;
}
inline int64_t orderedIndex(SequenceOrder order, int64_t position,
                            int64_t length, int64_t ways) {
  switch (order) {
  case SequenceOrder::Striped:
    return stripedIndex(position, length, ways);
  case SequenceOrder::Zigzag:
    return zigzagIndex(position, length, ways);
  case SequenceOrder::Natural:
    break;
  }
  return position;
}
/// The layout's name, as --sp-layout spells it.
inline const char *sequenceOrderName(SequenceOrder order) {
  switch (order) {
  case SequenceOrder::Striped:
    return "striped";
  case SequenceOrder::Zigzag:
    return "zigzag";
  case SequenceOrder::Natural:
    break;
  }
  return "contiguous";
}
/// Positions a sequence's length must divide by for `order` over `ways`.
inline int64_t orderGranule(SequenceOrder order, int64_t ways) {
  return order == SequenceOrder::Zigzag ? 2 * ways : ways;
}
/// `pieces[d]`, when given and non-zero, is dimension d's piece size
/// instead of ceil(G/n) (the artifact's "pieces").
Piece pieceOf(const Mesh &mesh, const Sharding &sharding, const Shape &global,
              const std::vector<int64_t> &coords,
              const std::vector<int64_t> &pieces = {});
/// Calls f(localStart, globalStart, length) for each contiguous run of the
/// piece's elements inside the global tensor (row-major element indices
/// into the local buffer and the global tensor, in natural order when the
/// piece has a striped dimension); padding is skipped.
void forEachPieceRun(const Shape &global, const Piece &piece,
                     const std::function<void(int64_t, int64_t, int64_t)> &f);

} // namespace dtc::artifact

namespace dtc::rt {
using namespace ::dtc::artifact;
} // namespace dtc::rt

#endif // DTC_ARTIFACT_PIECELAYOUT_H
