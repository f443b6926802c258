// The AVX2 + FMA path of runtime/cpu/vec_math.h (built with -mavx2 -mfma -ffp-contract=off;
// called only when active_cpu_path() says the CPU has AVX2 and FMA). Includes no header with
// inline library code, so no AVX2 instruction can leak into code that other paths run.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

namespace cuvil::rt::vm::avx2 {
namespace {

struct Avx2 {
  using V = __m256;
  using M = __m256;
  using I = __m256i;
  static constexpr int kWidth = 8;
  static V set(float f) { return _mm256_set1_ps(f); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V trunc(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  static I to_index(V a) { return _mm256_cvttps_epi32(a); }
  static V lookup8(const float* table, I i) { return _mm256_permutevar8x32_ps(_mm256_load_ps(table), i); }
  static V max_(V a, V b) { return _mm256_max_ps(a, b); }
  static V min_(V a, V b) { return _mm256_min_ps(a, b); }
  static V abs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static V copysign(V mag, V sgn) {
    const V sign = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_and_ps(sgn, sign), _mm256_andnot_ps(sign, mag));
  }
  static M lt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M isnan(V a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static V select(M m, V a, V b) { return _mm256_blendv_ps(b, a, m); }
  static V scale2(V p, V n) {
    const __m256i i = _mm256_cvtps_epi32(n);
    const __m256i i1 = _mm256_srai_epi32(i, 1);
    const __m256i i2 = _mm256_sub_epi32(i, i1);
    const __m256i bias = _mm256_set1_epi32(127);
    const V f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(i1, bias), 23));
    const V f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(i2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
  }
};

#include "runtime/cpu/vec_math_impl.h"

}  // namespace

CUVIL_VM_DEFINE_ENTRY_POINTS(Avx2)

}  // namespace cuvil::rt::vm::avx2
#endif
