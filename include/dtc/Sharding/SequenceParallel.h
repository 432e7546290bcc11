//===- SequenceParallel.h - Megatron sequence parallelism -------*- C++ -*-===//
//
// Megatron sequence parallelism (Korthikanti et al. 2022, §4.2.2) as a
// refinement of a tensor-parallel plan. Tensor parallelism leaves the ops
// between its blocks (norms, residual adds, element-wise ops, their
// gradients) replicated over the tp devices: each computes the same values
// and stores the same activations. Sequence parallelism splits those ops
// along the sequence over the tp axes instead. Nothing else changes: the
// partitioner, comparing each producer's layout with what its consumer
// needs, then turns a row-parallel block's pending sum into a
// reduce-scatter along the sequence (where tensor parallelism all-reduced
// it) and gathers the sequence back before a column-parallel block (where
// tensor parallelism needed nothing). In the backward the same happens the
// other way round. The weight gradients of a column-parallel block need
// its input whole again: the backward gathers it again (the forward's ops
// are marked dtc.regather) instead of keeping the forward's gathered copy,
// t times the bytes, alive until then. That is Megatron-LM's choice too:
// every activation is stored divided by t, for one more all-gather per
// column-parallel block per step.
//
// Which factor is the sequence: the factor of dimension 1 of the [batch,
// sequence] token inputs (spec/cli.md), followed through every op's
// sharding rule to the values that carry it. Which ops form the regions:
// those that carry the sequence factor, use no tp axis in the tensor-
// parallel plan and do not keep a pending tensor-parallel sum flowing (a
// sum of pending sums, such as the backward's residual gradient, stays one
// pending sum and is reduce-scattered once where the region needs it).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_SHARDING_SEQUENCEPARALLEL_H
#define DTC_SHARDING_SEQUENCEPARALLEL_H

#include "dtc/Sharding/TensorSharding.h"
#include "dtc/artifact/PieceLayout.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::dtc {

/// Splits the sequence of the regions between tensor-parallel blocks of
/// `step` over `tpAxes`: rewrites those ops' dtc.factor_axes (written by a
/// tensor-parallel plan). Fails with a diagnostic when the step has no
/// [batch, sequence] token input or the sequence does not divide over the
/// tp devices.
LogicalResult planSequenceParallel(func::FuncOp step, ArrayRef<int64_t> grid,
                                   const GridAxes &tpAxes);

/// Ring attention's causal load balancing over `ways` ranks: rewrites
/// `step` so that it holds every sequence permuted, so that the contiguous
/// piece of ring rank r holds, under SequenceOrder::Striped, the positions
/// r, r + ways, r + 2 ways, ... (program index r * c + j being position
/// j * ways + r, c = S / ways), and under SequenceOrder::Zigzag the chunks
/// r and 2 ways - 1 - r of the sequence cut into 2 ways. Causal attention
/// then does the same work on every rank at every ring step, where with
/// contiguous chunks rank r does r + 1/2 blocks of work. The token inputs
/// are marked dtc.striped_input or dtc.zigzag_input (the data feed delivers
/// them in that order), ring attention dtc.striped or dtc.zigzag (its
/// blocks' positions follow the layout), position tables and constants are
/// permuted where the sequence's ops read them and values permuted back
/// where other ops (the optimizer, the return) read them. Fails with a
/// diagnostic naming --sp-layout contiguous when the step has a sequence op
/// that is not position-wise (other than ring attention).
LogicalResult orderSequence(func::FuncOp step, int64_t ways,
                            ::dtc::artifact::SequenceOrder order);

} // namespace mlir::dtc

#endif // DTC_SHARDING_SEQUENCEPARALLEL_H
