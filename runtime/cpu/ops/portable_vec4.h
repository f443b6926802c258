// The 4-lane float vector of the portable kernel paths (GCC vector extensions, any target) and
// its memory access: the part of the portable vector traits that the direct depthwise
// convolution (conv_depthwise.cpp) and the channels-last pools (pool_nhwc.cpp) share. Include
// it only from portable-path files (it has inline code; see conv_depthwise_args.h for why the
// instruction-set files must not).
#pragma once

#include <cstdint>
#include <cstring>

namespace cuvil::rt::ops {

typedef float PortableV4 __attribute__((vector_size(16)));

struct PortableV4Memory {
  using V = PortableV4;
  static constexpr int64_t kWidth = 4;
  static V set(float f) { return V{f, f, f, f}; }
  static V zero() { return V{0.f, 0.f, 0.f, 0.f}; }
  static V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }
  // The first n < kWidth lanes; the others read as 0 and are not written.
  static V load_n(const float* p, int64_t n) {
    V v = zero();
    std::memcpy(&v, p, static_cast<size_t>(n) * sizeof(float));
    return v;
  }
  static void store_n(float* p, V v, int64_t n) { std::memcpy(p, &v, static_cast<size_t>(n) * sizeof(float)); }
};

}  // namespace cuvil::rt::ops
