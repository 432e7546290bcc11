//===- Random.cpp - Philox-4x32-10 and the initialisers
//--------------------===//
#include "dtc/runtime/Random.h"
#include "dtc/artifact/ArtifactFormat.h"

#include <cmath>

namespace dtc::rt {

PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += W0;
      k[1] += W1;
    }
    const uint64_t p0 = uint64_t(M0) * c[0], p1 = uint64_t(M1) * c[2];
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

PhiloxKey tensorKey(uint64_t seed, std::string_view name) {
  const uint64_t k = splitmix64(seed ^ fnv1a64(name));
  return {uint32_t(k), uint32_t(k >> 32)};
}

void uniformPair(PhiloxKey key, uint64_t index, uint64_t stream, double &u,
                 double &u2) {
  const PhiloxCounter x =
      philox4x32_10({uint32_t(index), uint32_t(index >> 32), uint32_t(stream),
                     uint32_t(stream >> 32)},
                    key);
  constexpr double k24 = 1.0 / 16777216.0;
  u = double(x[0] >> 8) * k24;
  u2 = double((x[1] >> 8) + 1) * k24;
}

static constexpr double kTwoPi = 6.283185307179586476925286766559;

float initValue(const InitSpec &init, PhiloxKey key, uint64_t index,
                uint64_t stream) {
  switch (init.kind) {
  case InitSpec::Zeros:
    return 0.0f;
  case InitSpec::Ones:
    return 1.0f;
  case InitSpec::Fill:
    return float(init.a);
  case InitSpec::Normal: {
    double u, u2;
    uniformPair(key, index, stream, u, u2);
    return float(init.a * std::sqrt(-2.0 * std::log(u2)) *
                 std::cos(kTwoPi * u));
  }
  case InitSpec::Uniform: {
    double u, u2;
    uniformPair(key, index, stream, u, u2);
    return float(init.a + (init.b - init.a) * u);
  }
  }
  return 0.0f;
}

int64_t intValue(int64_t max, PhiloxKey key, uint64_t index, uint64_t stream) {
  double u, u2;
  uniformPair(key, index, stream, u, u2);
  int64_t v = int64_t(std::floor(u * double(max)));
  return v >= max ? max - 1 : v; // guards rounding for max > 2^53
}

void fillInit(float *out, const InitSpec &init, uint64_t seed,
              std::string_view name, const Shape &global, const Piece &piece,
              uint64_t stream) {
  const PhiloxKey key = tensorKey(seed, name);
  forEachPieceRun(global, piece, [&](int64_t l, int64_t g, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      out[l + i] = initValue(init, key, uint64_t(g + i), stream);
  });
}

void fillInit(void *out, DType dtype, const InitSpec &init, uint64_t seed,
              std::string_view name, const Shape &global, const Piece &piece,
              uint64_t stream) {
  const PhiloxKey key = tensorKey(seed, name);
  forEachPieceRun(global, piece, [&](int64_t l, int64_t g, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = initValue(init, key, uint64_t(g + i), stream);
      switch (dtype) {
      case DType::F32:
        static_cast<float *>(out)[l + i] = v;
        break;
      case DType::BF16:
      case DType::F16:
        static_cast<uint16_t *>(out)[l + i] = f32ToLow(dtype, v);
        break;
      case DType::I32:
        static_cast<int32_t *>(out)[l + i] = int32_t(v);
        break;
      case DType::I64:
        static_cast<int64_t *>(out)[l + i] = int64_t(v);
        break;
      }
    }
  });
}

void fillSynthetic(void *out, DType dtype, int64_t max, uint64_t seed,
                   std::string_view name, const Shape &global,
                   const Piece &piece, int64_t step) {
  const PhiloxKey key = tensorKey(seed, name);
  const uint64_t stream = inputStream(step);
  const InitSpec normal{InitSpec::Normal, 1.0, 0.0};
  forEachPieceRun(global, piece, [&](int64_t l, int64_t g, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t gi = uint64_t(g + i);
      switch (dtype) {
      case DType::F32:
        static_cast<float *>(out)[l + i] = initValue(normal, key, gi, stream);
        break;
      case DType::BF16:
      case DType::F16:
        static_cast<uint16_t *>(out)[l + i] =
            f32ToLow(dtype, initValue(normal, key, gi, stream));
        break;
      case DType::I32:
        static_cast<int32_t *>(out)[l + i] =
            int32_t(intValue(max, key, gi, stream));
        break;
      case DType::I64:
        static_cast<int64_t *>(out)[l + i] = intValue(max, key, gi, stream);
        break;
      }
    }
  });
}

} // namespace dtc::rt
