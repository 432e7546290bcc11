//===- Reshard.cpp - moving a value between two shardings -----------------===//
#include "dtc/Sharding/Reshard.h"
#include "dtc/CostModel/CostModel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::dtc;

StringRef mlir::dtc::stringifyReshardKind(ReshardStep::Kind kind) {
  return ::dtc::artifact::collectiveKindName(kind);
}

std::string ReshardPlan::str() const {
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::interleave(
      steps, os,
      [&](const ReshardStep &step) {
        os << stringifyReshardKind(step.kind) << "(";
        if (step.kind == ReshardStep::Kind::AllToAll)
          os << "dim " << step.concatDim << " -> " << step.dim << ", ";
        else if (step.dim >= 0)
          os << "dim " << step.dim << ", ";
        os << "axes [";
        llvm::interleaveComma(step.axes, os);
        os << "])";
      },
      "; ");
  return out;
}

namespace {

bool isPrefix(ArrayRef<int64_t> prefix, ArrayRef<int64_t> of) {
  return prefix.size() <= of.size() && of.take_front(prefix.size()) == prefix;
}

int64_t numElements(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Builds one candidate plan; `earlySlices` and `allToAll` select the
/// variant.
class Planner {
public:
  Planner(ArrayRef<int64_t> shape, int64_t elementBytes, ArrayRef<int64_t> grid,
          const TensorSharding &to)
      : shape(shape), elementBytes(elementBytes), grid(grid), to(to) {}

  bool build(const TensorSharding &from, bool earlySlices, bool allToAll,
             bool reduceScatter, ReshardPlan &plan);

private:
  /// The piece size a dimension split over `axes` gets: the target's when
  /// that is where it ends, the default otherwise.
  int64_t pieceFor(int64_t dim, ArrayRef<int64_t> axes) const {
    return ArrayRef<int64_t>(to.dims[dim]) == axes ? to.piece(dim) : 0;
  }
  bool padded(int64_t dim, ArrayRef<int64_t> axes, int64_t piece) const {
    TensorSharding probe = TensorSharding::replicated(shape.size());
    probe.dims[dim].assign(axes.begin(), axes.end());
    probe.setPiece(dim, piece);
    return isPadded(probe, dim, shape[dim], grid);
  }
  /// Dimension `dim` of the current state is split with padding.
  bool paddedNow(int64_t dim) const {
    return isPadded(s, dim, shape[dim], grid);
  }
  /// Whether dimension `dim` may go from its current axes to current +
  /// `more`: padded dimensions only go from whole to split.
  bool canExtend(int64_t dim, ArrayRef<int64_t> more) const {
    GridAxes next = s.dims[dim];
    next.append(more.begin(), more.end());
    // A padded target is reached in one step from whole (a split of a
    // split would not line up with its pieces).
    if (padded(dim, to.dims[dim], to.piece(dim)) && next == to.dims[dim])
      return s.dims[dim].empty();
    if (padded(dim, to.dims[dim], to.piece(dim)) &&
        isPrefix(next, to.dims[dim]))
      return false;
    return s.dims[dim].empty() ||
           (!paddedNow(dim) && !padded(dim, next, pieceFor(dim, next)));
  }
  /// `sharding` with dimension `dim` split over `axes` (and its piece).
  TensorSharding withDim(const TensorSharding &sharding, int64_t dim,
                         ArrayRef<int64_t> axes) const {
    TensorSharding next = sharding;
    next.dims[dim].assign(axes.begin(), axes.end());
    next.setPiece(dim, pieceFor(dim, axes));
    return next;
  }
  bool usedNow(int64_t axis) const {
    return llvm::is_contained(s.usedAxes(), axis);
  }
  /// Target axes following the current ones of `dim`, if the current ones
  /// are a prefix of the target.
  ArrayRef<int64_t> pending(int64_t dim) const {
    if (!isPrefix(s.dims[dim], to.dims[dim]))
      return {};
    return ArrayRef<int64_t>(to.dims[dim]).drop_front(s.dims[dim].size());
  }
  void add(ReshardStep step, const TensorSharding &after);

  ArrayRef<int64_t> shape;
  int64_t elementBytes;
  ArrayRef<int64_t> grid;
  const TensorSharding &to;
  TensorSharding s;
  ReshardPlan *out = nullptr;
};

void Planner::add(ReshardStep step, const TensorSharding &after) {
  step.before = s;
  step.after = after;
  SmallVector<int64_t> beforeShape = localShape(shape, s, grid),
                       afterShape = localShape(shape, after, grid);
  int64_t in = numElements(beforeShape);
  int64_t outElements = numElements(afterShape);
  int64_t n = shardCount(grid, step.axes);
  // Local shapes around the collective: a dimension it splits is padded to
  // a multiple of the group first, one it concatenates cropped after.
  switch (step.kind) {
  case ReshardStep::Kind::ReduceScatter:
  case ReshardStep::Kind::AllSlice:
  case ReshardStep::Kind::AllToAll:
    if (beforeShape[step.dim] != afterShape[step.dim] * n) {
      step.padDim = step.dim;
      step.padSize = afterShape[step.dim] * n;
    }
    break;
  default:
    break;
  }
  int64_t concat = step.kind == ReshardStep::Kind::AllGather  ? step.dim
                   : step.kind == ReshardStep::Kind::AllToAll ? step.concatDim
                                                              : -1;
  if (concat >= 0 && beforeShape[concat] * n != afterShape[concat]) {
    step.cropDim = concat;
    step.cropSize = afterShape[concat];
  }
  namespace cost = ::dtc::cost;
  switch (step.kind) {
  case ReshardStep::Kind::AllReduce:
    step.bytes = cost::collectiveSentBytes(step.kind, n, in, in, elementBytes);
    break;
  case ReshardStep::Kind::ReduceScatter:
    step.bytes =
        cost::collectiveSentBytes(step.kind, n, in, outElements, elementBytes);
    break;
  case ReshardStep::Kind::AllGather:
    // The gathered pieces are the padded local ones.
    step.bytes =
        cost::collectiveSentBytes(step.kind, n, in, in * n, elementBytes);
    break;
  case ReshardStep::Kind::AllToAll: {
    // Pieces: the split dimension already cut to its target piece, the
    // concatenated one still at its source piece (padded both).
    SmallVector<int64_t> piece = localShape(shape, after, grid);
    piece[step.concatDim] = localShape(shape, s, grid)[step.concatDim];
    int64_t pieceElements = numElements(piece);
    step.bytes = cost::collectiveSentBytes(step.kind, n, pieceElements * n,
                                           pieceElements * n, elementBytes);
    break;
  }
  case ReshardStep::Kind::AllSlice:
    step.bytes = 0;
    break;
  case ReshardStep::Kind::Shift:
    // Moves no dimension's split: never a resharding step (ring attention's
    // lowering shifts its blocks itself).
    llvm_unreachable("a shift is not a resharding step");
  }
  out->bytes += step.bytes;
  out->steps.push_back(step);
  s = after;
}

bool Planner::build(const TensorSharding &from, bool earlySlices, bool allToAll,
                    bool reduceScatter, ReshardPlan &plan) {
  s = from;
  out = &plan;
  int64_t rank = shape.size();
  using Kind = ReshardStep::Kind;

  // Slices on axes the value does not use: free, and they shrink what any
  // later collective moves.
  auto freeSlices = [&]() {
    for (int64_t d = 0; d < rank; ++d) {
      ArrayRef<int64_t> next = pending(d);
      GridAxes take;
      for (int64_t axis : next) {
        if (usedNow(axis) || llvm::is_contained(take, axis))
          break;
        take.push_back(axis);
      }
      while (!take.empty() && !canExtend(d, take))
        take.pop_back();
      if (take.empty())
        continue;
      GridAxes axes = s.dims[d];
      axes.append(take.begin(), take.end());
      ReshardStep step{Kind::AllSlice, take, d};
      add(step, withDim(s, d, axes));
    }
  };
  if (earlySlices)
    freeSlices();

  // Pending partial values the target does not keep.
  GridAxes reduce;
  for (int64_t axis : s.partial)
    if (!llvm::is_contained(to.partial, axis))
      reduce.push_back(axis);
  if (!reduce.empty()) {
    for (int64_t d = 0; d < rank && !reduce.empty() && reduceScatter; ++d) {
      GridAxes take;
      for (int64_t axis : pending(d)) {
        if (!llvm::is_contained(reduce, axis))
          break;
        take.push_back(axis);
      }
      while (!take.empty() && !canExtend(d, take))
        take.pop_back();
      if (take.empty())
        continue;
      GridAxes axes = s.dims[d];
      axes.append(take.begin(), take.end());
      TensorSharding after = withDim(s, d, axes);
      llvm::erase_if(after.partial,
                     [&](int64_t a) { return llvm::is_contained(take, a); });
      ReshardStep step{Kind::ReduceScatter, take, d};
      step.reduction = s.partialKind;
      add(step, after);
      llvm::erase_if(reduce,
                     [&](int64_t a) { return llvm::is_contained(take, a); });
    }
    if (!reduce.empty()) {
      TensorSharding after = s;
      llvm::erase_if(after.partial,
                     [&](int64_t a) { return llvm::is_contained(reduce, a); });
      ReshardStep step{Kind::AllReduce, reduce};
      step.reduction = s.partialKind;
      add(step, after);
    }
  }
  if (s.partial.empty())
    s.partialKind = PartialKind::Sum;

  // Splits that move between dimensions: the tail of one dimension's axes
  // is the next of another's.
  if (allToAll) {
    bool moved = true;
    while (moved) {
      moved = false;
      for (int64_t c = 0; c < rank && !moved; ++c) {
        if (isPrefix(s.dims[c], to.dims[c]))
          continue; // the axes of c stay
        const GridAxes &cur = s.dims[c];
        for (int64_t d = 0; d < rank && !moved; ++d) {
          if (d == c)
            continue;
          ArrayRef<int64_t> next = pending(d);
          // The longest tail of c that d wants next, in order.
          for (size_t len = std::min(cur.size(), next.size());
               len > 0 && !moved; --len) {
            ArrayRef<int64_t> tail = ArrayRef<int64_t>(cur).take_back(len);
            if (tail != next.take_front(len))
              continue;
            GridAxes rest(cur.begin(), cur.end() - len);
            if (!canExtend(d, tail) || (paddedNow(c) && !rest.empty()))
              continue;
            GridAxes grown = s.dims[d];
            grown.append(tail.begin(), tail.end());
            TensorSharding after = withDim(withDim(s, c, rest), d, grown);
            ReshardStep step{Kind::AllToAll, GridAxes(tail.begin(), tail.end()),
                             d, c};
            add(step, after);
            moved = true;
          }
        }
      }
    }
  }

  // Gather every dimension down to a prefix of its target (whole, for a
  // padded one), then slice.
  for (int64_t d = 0; d < rank; ++d) {
    const GridAxes &cur = s.dims[d], &tgt = to.dims[d];
    size_t keep = 0;
    while (keep < cur.size() && keep < tgt.size() && cur[keep] == tgt[keep])
      ++keep;
    // Padded splits change only between whole and split; a split with the
    // right axes but another piece size is gathered too.
    bool same = cur == tgt && s.piece(d) == to.piece(d);
    bool mustGatherAll =
        keep > 0 && !same &&
        (paddedNow(d) || padded(d, tgt, to.piece(d)) || cur == tgt);
    if (mustGatherAll)
      keep = 0;
    if (keep == cur.size())
      continue;
    ReshardStep step{Kind::AllGather, GridAxes(cur.begin() + keep, cur.end()),
                     d};
    add(step, withDim(s, d, ArrayRef<int64_t>(cur).take_front(keep)));
  }
  for (int64_t d = 0; d < rank; ++d) {
    const GridAxes &cur = s.dims[d], &tgt = to.dims[d];
    if (cur == tgt)
      continue;
    ReshardStep step{Kind::AllSlice,
                     GridAxes(tgt.begin() + cur.size(), tgt.end()), d};
    add(step, withDim(s, d, tgt));
  }
  return s == to;
}

} // namespace

bool mlir::dtc::planReshard(ArrayRef<int64_t> shape, int64_t elementBytes,
                            const TensorSharding &from,
                            const TensorSharding &to, ArrayRef<int64_t> grid,
                            ReshardPlan &plan, std::string &error) {
  plan = ReshardPlan();
  for (int64_t axis : to.partial)
    if (!llvm::is_contained(from.partial, axis)) {
      error = "cannot turn a whole value into a pending partial one (axis " +
              std::to_string(axis) + ")";
      return false;
    }
  if (to.isPartial() && to.partialKind != from.partialKind) {
    error = "cannot turn a pending " +
            stringifyPartialKind(from.partialKind).str() + " into a pending " +
            stringifyPartialKind(to.partialKind).str();
    return false;
  }
  if (from == to)
    return true;
  Planner planner(shape, elementBytes, grid, to);
  bool found = false;
  for (bool earlySlices : {true, false})
    for (bool allToAll : {true, false})
      for (bool reduceScatter : {true, false}) {
        ReshardPlan candidate;
        if (!planner.build(from, earlySlices, allToAll, reduceScatter,
                           candidate))
          continue;
        if (!found || candidate.bytes < plan.bytes ||
            (candidate.bytes == plan.bytes &&
             candidate.steps.size() < plan.steps.size())) {
          plan = std::move(candidate);
          found = true;
        }
      }
  if (!found) {
    error =
        "no sequence of collectives turns " + from.str() + " into " + to.str();
    return false;
  }
  return true;
}
