// The AVX-512 path of the direct depthwise convolution (conv_depthwise.h): the trait of
// conv_depthwise_impl.h over __m512 with mask registers for the partial vectors. Built with
// -mavx512f -mavx512dq -mavx512bw -mavx512vl -mavx2 -mfma (CMakeLists.txt) and called only when
// active_cpu_path() is avx512; includes no header with inline library code.
#if defined(__x86_64__)
#include <immintrin.h>

#include "runtime/cpu/ops/conv_depthwise_args.h"
#include "runtime/cpu/ops/conv_igemm_args.h"

namespace cuvil::rt::ops::dw_avx512 {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int64_t kWidth = 16;
  static __mmask16 first(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static V set(float f) { return _mm512_set1_ps(f); }
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V load_n(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(first(n), p); }
  static void store_n(float* p, V v, int64_t n) { _mm512_mask_storeu_ps(p, first(n), v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V relu(V v) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, zero(), _CMP_NLE_UQ), v); }
  static V clip(V v, V lo, V hi) {
    const V r = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), hi);
    return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), lo);
  }
  static V leaky(V v, V a) { return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero(), _CMP_LT_OQ), v, a); }
};

#include "runtime/cpu/ops/conv_depthwise_impl.h"
#include "runtime/cpu/ops/conv_igemm_impl.h"

}  // namespace

CUVIL_DW_DEFINE_ENTRY_POINTS(Avx512)
CUVIL_IGEMM_DEFINE_ENTRY_POINTS(Avx512)

}  // namespace cuvil::rt::ops::dw_avx512
#endif
