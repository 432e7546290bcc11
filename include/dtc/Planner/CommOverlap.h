//===- CommOverlap.h - the communication a step's kernels hide ---*- C++
//-*-===//
//
// A program's once-per-step list run as the runtime runs it, collectives on
// their own stream beside the kernels (docs/cost-model.md "Overlap").
// MLIR-free: it reads an artifact program (dtc/artifact).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLANNER_COMMOVERLAP_H
#define DTC_PLANNER_COMMOVERLAP_H

#include "dtc/CostModel/CostModel.h"
#include "dtc/artifact/Artifact.h"

#include <vector>

namespace dtc::cost {

/// Seconds one kernel instruction of `program` takes, priced from the
/// artifact alone: the kernel's flops (kernels::flopCount), the bytes of its
/// operands and results (an accumulate also reads its output, a micro-batch
/// slice only its rows), its class (its rule; a stream kernel without one)
/// and whether an operand is in 16-bit floats (then the bf16 peak, unless
/// `f32`).
double instructionKernelSeconds(const ::dtc::artifact::ProgramDecl &program,
                                const ::dtc::artifact::InstrDecl &inst,
                                const HardwareProfile &hw, bool f32);

/// The communication of `program`'s once-per-step list that its kernels
/// hide when run as the runtime runs it (docs/runtime.md): collectives in
/// order on their own stream, each after every kernel issued before it; a
/// kernel after the one before it and after the collectives in flight
/// whose slots it touches (a bucket's collective writes every member's
/// slots). What the two streams take together beyond their sum is hidden:
/// a data-parallel gradient bucket reduced while the backward goes on, a
/// ZeRO-3 gather issued ahead of the layer that reads it. `commOf[i]`: the
/// seconds of instruction i's collective (0 for the others). The kernels
/// are priced with instructionKernelSeconds only to place the collectives
/// against them. Before the profile's commOverlap.
double hiddenCommSeconds(const ::dtc::artifact::ProgramDecl &program,
                         const std::vector<double> &commOf,
                         const HardwareProfile &hw, bool f32);

} // namespace dtc::cost

#endif // DTC_PLANNER_COMMOVERLAP_H
