//===- BlockPositions.h - global positions of a ring attention block -*- C++
//-*-===//
//
// Under ring attention a rank's query block and the key block a ring step
// brings hold rows of the global sequence in one of three layouts
// (docs/design.md "Causal load balancing"): a contiguous chunk, the striped
// rows r, r + n, r + 2n, ..., or the zigzag pair of chunks r and 2n - 1 - r.
// In each the positions rise with the row, so the keys a causal query may
// see are always a prefix of the key block; the CPU and CUDA kernels mask
// with that prefix's length. Plain C++, usable on the device.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_BLOCKPOSITIONS_H
#define DTC_KERNELS_BLOCKPOSITIONS_H

#include <cstdint>

#include "dtc/kernels/HostDevice.h"

namespace dtc::kernels {

/// The global positions of a block's `rows` rows. Contiguous or striped:
/// row i at offset + i * stride. Zigzag (zigzagLength L > 0, the whole
/// sequence's length): the first half of the rows at offset + i, the second
/// half the chunk mirrored from the sequence's end, L - rows - offset + i
/// (rank r of n holds chunks r and 2n - 1 - r of L / 2n positions).
struct BlockPositions {
  int64_t offset = 0;
  int64_t stride = 1;
  int64_t zigzagLength = 0;
  int64_t rows = 0;

  DTC_HOST_DEVICE int64_t position(int64_t row) const {
    if (zigzagLength > 0)
      return row < rows / 2 ? offset + row : zigzagLength - rows - offset + row;
    return offset + row * stride;
  }

  /// The rows at positions <= p: rows [0, count).
  DTC_HOST_DEVICE int64_t countAtOrBefore(int64_t p) const {
    if (zigzagLength > 0) {
      const int64_t half = rows / 2, high = zigzagLength - rows - offset + half;
      return clampCount(p - offset + 1, half) +
             clampCount(p - high + 1, rows - half);
    }
    if (p < offset)
      return 0;
    return clampCount((p - offset) / stride + 1, rows);
  }

private:
  DTC_HOST_DEVICE static int64_t clampCount(int64_t n, int64_t most) {
    return n < 0 ? 0 : (n > most ? most : n);
  }
};

/// Which keys each query row of a block sees: all, or under a causal mask
/// those at positions up to the query's, keys [0, visible(row)). Build it
/// with make() (or whole()), which finds the one diagonal of blocks whose
/// rows share a stride, so the kernels' inner loops never divide.
struct CausalMask {
  bool causal = false;
  BlockPositions queries, keys;
  /// Contiguous or striped blocks: key j is visible to row i when
  /// j <= i + shift (shift = floor((q_offset - k_offset) / stride)).
  bool diagonal = true;
  int64_t shift = 0;

  DTC_HOST_DEVICE static CausalMask
  make(bool causal, const BlockPositions &queries, const BlockPositions &keys) {
    CausalMask m;
    m.causal = causal;
    m.queries = queries;
    m.keys = keys;
    m.diagonal = queries.zigzagLength == 0 && keys.zigzagLength == 0 &&
                 queries.stride == keys.stride;
    if (m.diagonal) {
      const int64_t d = queries.offset - keys.offset, s = queries.stride;
      m.shift = d >= 0 ? d / s : -((-d + s - 1) / s);
    }
    return m;
  }

  /// A whole attention: both sequences start at position 0.
  DTC_HOST_DEVICE static CausalMask whole(bool causal, int64_t Sq, int64_t Sk) {
    BlockPositions queries, keys;
    queries.rows = Sq;
    keys.rows = Sk;
    return make(causal, queries, keys);
  }

  DTC_HOST_DEVICE int64_t visible(int64_t row) const {
    if (!causal)
      return keys.rows;
    if (diagonal) {
      const int64_t n = row + shift + 1;
      return n < 0 ? 0 : (n > keys.rows ? keys.rows : n);
    }
    return keys.countAtOrBefore(queries.position(row));
  }

  /// The first query row that sees key `key` (queries.rows: none does).
  DTC_HOST_DEVICE int64_t firstQuerySeeing(int64_t key) const {
    if (!causal)
      return 0;
    if (diagonal) {
      const int64_t first = key - shift;
      return first < 0 ? 0 : (first > queries.rows ? queries.rows : first);
    }
    return queries.countAtOrBefore(keys.position(key) - 1);
  }
};

} // namespace dtc::kernels

#endif // DTC_KERNELS_BLOCKPOSITIONS_H
