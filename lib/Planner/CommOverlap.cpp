//===- CommOverlap.cpp - the communication a step's kernels hide ----------===//
#include "dtc/Planner/CommOverlap.h"
#include "dtc/kernels/Kernel.h"

#include <algorithm>

namespace dtc::cost {

double instructionKernelSeconds(const ::dtc::artifact::ProgramDecl &program,
                                const ::dtc::artifact::InstrDecl &inst,
                                const HardwareProfile &hw, bool f32) {
  namespace art = ::dtc::artifact;
  std::vector<::dtc::kernels::TensorDesc> in, out;
  double bytes = 0;
  bool lowPrecision = false;
  for (auto [ids, descs] :
       {std::pair{&inst.in, &in}, std::pair{&inst.out, &out}})
    for (int id : *ids) {
      const art::BufferDecl &b = program.buffers[size_t(id)];
      descs->push_back({b.dtype, b.shape});
      bytes += double(b.bytes());
      lowPrecision |= b.dtype == art::DType::BF16 || b.dtype == art::DType::F16;
    }
  // An accumulate adds into its output (reads it too); a micro-batch slice
  // reads only its rows of the input.
  if (inst.pipe == art::PipeOp::Accumulate)
    bytes += double(program.buffers[size_t(inst.out[0])].bytes());
  else if (inst.pipe == art::PipeOp::MicrobatchSlice)
    bytes = 2 * double(program.buffers[size_t(inst.out[0])].bytes());
  const ::dtc::kernels::KernelInfo *rule = ::dtc::kernels::findKernel(inst.op);
  const ::dtc::kernels::CostClass cls =
      rule ? rule->cost : ::dtc::kernels::CostClass::Stream;
  const double flops =
      rule ? ::dtc::kernels::flopCount(inst.op, in, out, inst.attrs) : 0.0;
  // A fused attention's curve is per head (batch rows times heads).
  const double products = ::dtc::kernels::isDense(cls) &&
                                  cls != ::dtc::kernels::CostClass::Gemm &&
                                  !in.empty() && in[0].shape.size() >= 2
                              ? double(in[0].shape[0] * in[0].shape[1])
                              : 1.0;
  return kernelTime(flops, bytes, cls, hw, f32 || !lowPrecision, products);
}

double hiddenCommSeconds(const ::dtc::artifact::ProgramDecl &program,
                         const std::vector<double> &commOf,
                         const HardwareProfile &hw, bool f32) {
  namespace art = ::dtc::artifact;
  std::vector<double> slotReady(program.slots.size(), 0.0);
  double computeFree = 0, commFree = 0, kernels = 0, comm = 0;
  auto slotsOf = [&](const art::InstrDecl &inst, auto &&visit) {
    for (const std::vector<int> *ids : {&inst.in, &inst.out})
      for (int id : *ids)
        visit(program.buffers[size_t(id)].slot);
  };
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const art::InstrDecl &inst = program.instructions[i];
    if (inst.isCollective) {
      if (commOf[i] <= 0)
        continue; // a bucket's member before its last, an all_slice
      const double end = std::max(commFree, computeFree) + commOf[i];
      commFree = end;
      comm += commOf[i];
      auto busy = [&](int slot) {
        slotReady[size_t(slot)] = std::max(slotReady[size_t(slot)], end);
      };
      if (inst.bucket >= 0)
        for (int member : program.buckets[size_t(inst.bucket)].members)
          slotsOf(program.instructions[size_t(member)], busy);
      else
        slotsOf(inst, busy);
      continue;
    }
    if (inst.pipe != art::PipeOp::None)
      continue;
    const double seconds = instructionKernelSeconds(program, inst, hw, f32);
    double start = computeFree;
    slotsOf(inst, [&](int slot) {
      start = std::max(start, slotReady[size_t(slot)]);
    });
    computeFree = start + seconds;
    kernels += seconds;
  }
  return std::max(0.0, kernels + comm - std::max(computeFree, commFree));
}

} // namespace dtc::cost
