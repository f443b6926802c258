// The AVX-512 path of the channels-last pooling kernels (pool_nhwc.h): the trait of
// pool_nhwc_impl.h over __m512, double sums in two __m512d, mask registers for the partial
// vectors. Built with -mavx512f -mavx512dq -mavx512bw -mavx512vl -mavx2 -mfma (CMakeLists.txt)
// and called only when active_cpu_path() is avx512; includes no header with inline library code.
#if defined(__x86_64__)
#include <immintrin.h>

#include "runtime/cpu/ops/pool_nhwc_args.h"

namespace cuvil::rt::ops::pool_avx512 {
namespace {

struct Avx512 {
  using V = __m512;
  struct A {
    __m512d lo, hi;
  };
  static constexpr int64_t kWidth = 16;
  static __mmask16 first(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static V set(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V load_n(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(first(n), p); }
  static void store_n(float* p, V v, int64_t n) { _mm512_mask_storeu_ps(p, first(n), v); }
  // vmaxps returns its second operand unless the first is greater (NaNs included). The
  // zero-masking forms here and below, with every lane selected, compute the same as the plain
  // intrinsics, whose "undefined" pass-through operand GCC 12 warns about.
  static V max_keep(V v, V best) { return _mm512_maskz_max_ps(0xFFFF, v, best); }
  static V global_max(V v, V acc) {
    const __mmask16 take = _mm512_cmp_ps_mask(v, acc, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(acc, take, v);
  }
  static A a_zero() { return {_mm512_setzero_pd(), _mm512_setzero_pd()}; }
  static A a_add(A acc, V v) {
    return {_mm512_add_pd(acc.lo, _mm512_maskz_cvtps_pd(0xFF, _mm512_extractf32x8_ps(v, 0))),
            _mm512_add_pd(acc.hi, _mm512_maskz_cvtps_pd(0xFF, _mm512_extractf32x8_ps(v, 1)))};
  }
  static V a_div(A acc, double d) {
    const __m512d dv = _mm512_set1_pd(d);
    const __m256 lo = _mm512_maskz_cvtpd_ps(0xFF, _mm512_div_pd(acc.lo, dv));
    const __m256 hi = _mm512_maskz_cvtpd_ps(0xFF, _mm512_div_pd(acc.hi, dv));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  }
};

#include "runtime/cpu/ops/pool_nhwc_impl.h"

}  // namespace

CUVIL_POOL_NHWC_DEFINE_ENTRY_POINTS(Avx512)

}  // namespace cuvil::rt::ops::pool_avx512
#endif
