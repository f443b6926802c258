// runtime/cpu/vec_math.h: the portable path (the scalar trait below, which is also every
// path's tail) and the dispatch to the AVX2 and AVX-512 paths by active_cpu_path(). Built with
// -ffp-contract=off (CMakeLists.txt), so the scalar code performs exactly the roundings the
// vector paths do; std::fma is correctly rounded, as the FMA instructions are.
#include "runtime/cpu/vec_math.h"

#include <cmath>
#include <cstring>

#include "runtime/cpu/cpu_features.h"

namespace cuvil::rt::vm {
namespace {

struct Scalar {
  using V = float;
  using M = bool;
  using I = int32_t;
  static constexpr int kWidth = 1;
  static V set(float f) { return f; }
  static V load(const float* p) { return *p; }
  static void store(float* p, V v) { *p = v; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V div(V a, V b) { return a / b; }
  static V fma(V a, V b, V c) { return std::fma(a, b, c); }
  static V trunc(V a) { return std::trunc(a); }
  static I to_index(V a) { return static_cast<I>(a); }
  static V lookup8(const float* table, I i) { return table[i]; }
  static V max_(V a, V b) { return a > b ? a : b; }
  static V min_(V a, V b) { return a < b ? a : b; }
  static V abs(V a) { return std::fabs(a); }
  static V copysign(V mag, V sgn) { return std::copysign(mag, sgn); }
  static M lt(V a, V b) { return a < b; }
  static M isnan(V a) { return a != a; }
  static V select(M m, V a, V b) { return m ? a : b; }
  static V pow2(int32_t i) {
    const uint32_t bits = static_cast<uint32_t>(i + 127) << 23;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  static V scale2(V p, V n) {
    if (n != n) return p;  // exp's NaN (p is NaN too); the vector paths' integer garbage times p
    const int32_t i = static_cast<int32_t>(n);
    const int32_t i1 = i >> 1;  // arithmetic shift, as vpsrad
    return (p * pow2(i1)) * pow2(i - i1);
  }
};

#include "runtime/cpu/vec_math_impl.h"

using S = VecMath<Scalar>;

// The 16 lanes folded in a fixed tree: lane j += lane j + 8, then + 4, + 2, + 1.
float combine(float* lanes) {
  for (int step = 8; step >= 1; step /= 2)
    for (int j = 0; j < step; ++j) lanes[j] += lanes[j + step];
  return lanes[0];
}

}  // namespace

#if defined(__x86_64__)
namespace avx2 {
CUVIL_VM_PATH_ENTRY_POINTS
}
namespace avx512 {
CUVIL_VM_PATH_ENTRY_POINTS
}
// Runs `fn` on the active vector path; returns the elements it did (0 on the portable path).
#define CUVIL_VM_DISPATCH(call)                      \
  ([&]() -> int64_t {                                \
    switch (active_cpu_path()) {                     \
      case CpuPath::Avx512: return avx512::call;     \
      case CpuPath::Avx2: return avx2::call;         \
      case CpuPath::Portable: break;                 \
    }                                                \
    return 0;                                        \
  }())
#else
#define CUVIL_VM_DISPATCH(call) int64_t{0}
#endif

float exp1(float x) { return S::exp(x); }
float sigmoid1(float x) { return S::sigmoid(x); }
float tanh1(float x) { return S::tanh(x); }
float erf1(float x) { return S::erf(x); }
float gelu1(float x) { return S::gelu(x); }
float gelu_tanh1(float x) { return S::gelu_tanh(x); }
float silu1(float x, float alpha) { return S::silu(x, alpha); }
float swiglu1(float a, float b) { return S::swiglu(a, b); }

#define CUVIL_VM_UNARY(name)                                          \
  void name(const float* x, float* y, int64_t n) {                    \
    for (int64_t i = CUVIL_VM_DISPATCH(name(x, y, n)); i < n; ++i)    \
      y[i] = S::name(x[i]);                                           \
  }
CUVIL_VM_UNARY(exp)
CUVIL_VM_UNARY(sigmoid)
CUVIL_VM_UNARY(tanh)
CUVIL_VM_UNARY(erf)
CUVIL_VM_UNARY(gelu)
CUVIL_VM_UNARY(gelu_tanh)
#undef CUVIL_VM_UNARY

void silu(const float* x, float* y, int64_t n, float alpha) {
  for (int64_t i = CUVIL_VM_DISPATCH(silu(x, y, n, alpha)); i < n; ++i) y[i] = S::silu(x[i], alpha);
}
void swiglu(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = CUVIL_VM_DISPATCH(swiglu(a, b, y, n)); i < n; ++i) y[i] = S::swiglu(a[i], b[i]);
}

float exp_sub_sum(const float* x, float m, float* y, int64_t n) {
  float lanes[16] = {};
  int64_t i = CUVIL_VM_DISPATCH(exp_sub_sum(x, m, y, n, lanes));
  for (; i + 16 <= n; i += 16)  // the portable path's blocks
    for (int j = 0; j < 16; ++j) lanes[j] += (y[i + j] = S::exp(x[i + j] - m));
  for (; i < n; ++i) lanes[i % 16] += (y[i] = S::exp(x[i] - m));
  return combine(lanes);
}

float max(const float* x, int64_t n) {
  if (n <= 0) return -__builtin_inff();
  float m = x[0];
  for (int64_t i = CUVIL_VM_DISPATCH(max(x, n, &m)); i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

void scale(const float* x, float s, float* y, int64_t n) {
  for (int64_t i = CUVIL_VM_DISPATCH(scale(x, s, y, n)); i < n; ++i) y[i] = x[i] * s;
}

float sum(const float* x, int64_t n) {
  float lanes[16] = {};
  int64_t i = CUVIL_VM_DISPATCH(sum(x, n, lanes));
  for (; i < n; ++i) lanes[i % 16] += x[i];
  return combine(lanes);
}

void shifted_moments(const float* x, int64_t n, float shift, float* sum_out, float* sumsq_out) {
  float s[16] = {}, q[16] = {};
  int64_t i = CUVIL_VM_DISPATCH(moments(x, n, shift, s, q));
  for (; i < n; ++i) {
    const float d = x[i] - shift;
    s[i % 16] += d;
    q[i % 16] = std::fma(d, d, q[i % 16]);
  }
  *sum_out = combine(s);
  *sumsq_out = combine(q);
}

void normalize_affine(const float* x, float* y, int64_t n, float mean, float rstd, const float* scale,
                      const float* bias) {
  int64_t i = CUVIL_VM_DISPATCH(normalize_affine(x, y, n, mean, rstd, scale, bias));
  if (bias)
    for (; i < n; ++i) y[i] = std::fma((x[i] - mean) * rstd, scale[i], bias[i]);
  else
    for (; i < n; ++i) y[i] = ((x[i] - mean) * rstd) * scale[i];
}

}  // namespace cuvil::rt::vm
