// The AVX-512 path of runtime/cpu/vec_math.h (built with -mavx512f -mavx512dq -mfma
// -ffp-contract=off; called only when active_cpu_path() says the CPU has AVX-512 F/BW/DQ/VL).
// Includes no header with inline library code, so no AVX-512 instruction can leak into code
// that other paths run.
#if defined(__x86_64__)
// GCC 12 warns that _mm512_undefined_ps() is "maybe uninitialized" (or "uninitialized", when
// the maxima of an unrolled loop are folded) inside max/min intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>

namespace cuvil::rt::vm::avx512 {
namespace {

struct Avx512 {
  using V = __m512;
  using M = __mmask16;
  using I = __m512i;
  static constexpr int kWidth = 16;
  static V set(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V trunc(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  static I to_index(V a) { return _mm512_cvttps_epi32(a); }
  // The 8-entry table in both halves (the index is in [0, 7]); vpermps picks lane i.
  static V lookup8(const float* table, I i) { return _mm512_permutexvar_ps(i, _mm512_broadcast_f32x8(_mm256_load_ps(table))); }
  static V max_(V a, V b) { return _mm512_max_ps(a, b); }
  static V min_(V a, V b) { return _mm512_min_ps(a, b); }
  static V abs(V a) { return _mm512_andnot_ps(_mm512_set1_ps(-0.0f), a); }
  static V copysign(V mag, V sgn) {
    const V sign = _mm512_set1_ps(-0.0f);
    return _mm512_or_ps(_mm512_and_ps(sgn, sign), _mm512_andnot_ps(sign, mag));
  }
  static M lt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M isnan(V a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static V select(M m, V a, V b) { return _mm512_mask_blend_ps(m, b, a); }
  // p * 2^n rounded once, as the two exact steps of the other paths round it (vscalefps: n is
  // integral here, in [-150, 128], and p in [0.7, 1.5], so the results agree bit for bit,
  // subnormal and overflowing ones included): one instruction instead of nine.
  static V scale2(V p, V n) { return _mm512_scalef_ps(p, n); }
};

#include "runtime/cpu/vec_math_impl.h"

}  // namespace

CUVIL_VM_DEFINE_ENTRY_POINTS(Avx512)

}  // namespace cuvil::rt::vm::avx512
#endif
