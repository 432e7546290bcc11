//===- Random.h - counter-based random numbers (docs/artifact.md) -*- C++
//-*-===//
//
// Philox-4x32-10 keyed by splitmix64(seed ^ fnv1a64(tensor name)); the counter
// is (i lo, i hi, stream lo, stream hi) with i the element's GLOBAL row-major
// index. A value therefore depends only on (seed, name, global index, stream),
// so every rank can generate its local piece of a sharded tensor and every
// mesh sees the same numbers.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_RANDOM_H
#define DTC_RUNTIME_RANDOM_H

#include "dtc/runtime/Artifact.h"

#include <array>
#include <cstdint>
#include <string_view>

namespace dtc::rt {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

/// Philox-4x32 with 10 rounds (Random123's philox4x32_R(10, ctr, key)).
PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key);

uint64_t splitmix64(uint64_t x);

/// key = (low 32 bits, high 32 bits) of splitmix64(seed ^ fnv1a64(name)).
PhiloxKey tensorKey(uint64_t seed, std::string_view name);

/// The stream of parameter initialisation.
constexpr uint64_t kInitStream = 0;
/// The stream of the synthetic inputs of step `step`.
inline uint64_t inputStream(int64_t step) { return uint64_t(step) + 1; }

/// u in [0, 1) and u' in (0, 1] of element `index` (24-bit resolution).
void uniformPair(PhiloxKey key, uint64_t index, uint64_t stream, double &u,
                 double &u2);

/// One value of `init` for element `index` (computed in double, rounded to
/// f32).
float initValue(const InitSpec &init, PhiloxKey key, uint64_t index,
                uint64_t stream);
/// floor(u * max) for element `index`.
int64_t intValue(int64_t max, PhiloxKey key, uint64_t index, uint64_t stream);

/// Fills the local piece (shape piece.local) of a global f32 tensor with
/// `init`, evaluating each element at its global index.
void fillInit(float *out, const InitSpec &init, uint64_t seed,
              std::string_view name, const Shape &global, const Piece &piece,
              uint64_t stream = kInitStream);
/// The same for a tensor of any dtype: bf16 and f16 get the f32 value
/// rounded to nearest even (so a bf16 parameter equals its f32 master weight
/// rounded), i64 the value converted.
void fillInit(void *out, DType dtype, const InitSpec &init, uint64_t seed,
              std::string_view name, const Shape &global, const Piece &piece,
              uint64_t stream = kInitStream);
/// Fills the local piece of a synthetic input of step `step`: normal(1.0) for
/// f32, floor(u * max) for integer dtypes.
void fillSynthetic(void *out, DType dtype, int64_t max, uint64_t seed,
                   std::string_view name, const Shape &global,
                   const Piece &piece, int64_t step);

} // namespace dtc::rt

#endif // DTC_RUNTIME_RANDOM_H
