//===- Collective.cu - reductions over buffers of one device -------------===//
//
// The arithmetic of an all-reduce whose members' buffers are all on this
// device (the ranks of one process sharing a GPU, --collectives local):
// out = in[0] op in[1] op ... in member order, every member computing the
// same values. Floats add in f32 and round each partial result to the
// dtype, as the host communicator's reductions do (docs/artifact.md
// "Collectives"); integers are exact.
//
//===----------------------------------------------------------------------===//
#include "Common.cuh"

namespace dtc::kernels::cuda {
namespace {

constexpr int kMaxMembers = 16;

struct Inputs {
  const void *p[kMaxMembers];
};

template <class A>
__device__ __forceinline__ A apply(rt::ReduceOp op, A x, A y) {
  switch (op) {
  case rt::ReduceOp::Max:
    return x > y ? x : y;
  case rt::ReduceOp::Min:
    return x < y ? x : y;
  default: // Sum, Average
    return x + y;
  }
}

template <class T>
__global__ void reduceFloat(Inputs in, int n, T *out, long long count,
                            rt::ReduceOp op) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
       i < count; i += (long long)gridDim.x * blockDim.x) {
    float acc = toF(static_cast<const T *>(in.p[0])[i]);
    for (int m = 1; m < n; ++m)
      acc = toF(
          fromF<T>(apply(op, acc, toF(static_cast<const T *>(in.p[m])[i]))));
    if (op == rt::ReduceOp::Average)
      acc = acc / float(n);
    out[i] = fromF<T>(acc);
  }
}

template <class T>
__global__ void reduceInt(Inputs in, int n, T *out, long long count,
                          rt::ReduceOp op) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
       i < count; i += (long long)gridDim.x * blockDim.x) {
    T acc = static_cast<const T *>(in.p[0])[i];
    for (int m = 1; m < n; ++m)
      acc = apply(op, acc, static_cast<const T *>(in.p[m])[i]);
    out[i] = acc;
  }
}

} // namespace

void reduceBuffers(const void *const *in, int members, void *out,
                   long long count, DType dtype, rt::ReduceOp op,
                   cudaStream_t stream) {
  if (members < 1 || members > kMaxMembers)
    throw Error("reduceBuffers: " + std::to_string(members) +
                " members (1 to " + std::to_string(kMaxMembers) + ")");
  if (count == 0)
    return;
  Inputs inputs{};
  for (int m = 0; m < members; ++m)
    inputs.p[m] = in[m];
  const unsigned grid = std::min(gridFor(count), 4096u);
  switch (dtype) {
  case DType::I32:
    reduceInt<int32_t><<<grid, kThreads, 0, stream>>>(
        inputs, members, static_cast<int32_t *>(out), count, op);
    break;
  case DType::I64:
    reduceInt<long long><<<grid, kThreads, 0, stream>>>(
        inputs, members, static_cast<long long *>(out), count, op);
    break;
  default:
    dispatchFloat(dtype, [&](auto tag) {
      using T = decltype(tag);
      reduceFloat<T><<<grid, kThreads, 0, stream>>>(
          inputs, members, static_cast<T *>(out), count, op);
    });
  }
  checkLaunch("reduceBuffers");
}

} // namespace dtc::kernels::cuda
