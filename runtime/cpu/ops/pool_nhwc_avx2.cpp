// The AVX2 path of the channels-last pooling kernels (pool_nhwc.h): the trait of
// pool_nhwc_impl.h over __m256, double sums in two __m256d, partial vectors through vmaskmovps.
// Built with -mavx2 -mfma (CMakeLists.txt) and called only when active_cpu_path() is avx2;
// includes no header with inline library code.
#if defined(__x86_64__)
#include <immintrin.h>

#include "runtime/cpu/ops/pool_nhwc_args.h"

namespace cuvil::rt::ops::pool_avx2 {
namespace {

struct Avx2 {
  using V = __m256;
  struct A {
    __m256d lo, hi;
  };
  static constexpr int64_t kWidth = 8;
  static __m256i first(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V set(float f) { return _mm256_set1_ps(f); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V load_n(const float* p, int64_t n) { return _mm256_maskload_ps(p, first(n)); }
  static void store_n(float* p, V v, int64_t n) { _mm256_maskstore_ps(p, first(n), v); }
  // vmaxps returns its second operand unless the first is greater (NaNs included).
  static V max_keep(V v, V best) { return _mm256_max_ps(v, best); }
  static V global_max(V v, V acc) {
    const V take = _mm256_or_ps(_mm256_cmp_ps(v, acc, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_blendv_ps(acc, v, take);
  }
  static A a_zero() { return {_mm256_setzero_pd(), _mm256_setzero_pd()}; }
  static A a_add(A acc, V v) {
    return {_mm256_add_pd(acc.lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v))),
            _mm256_add_pd(acc.hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)))};
  }
  static V a_div(A acc, double d) {
    const __m256d dv = _mm256_set1_pd(d);
    const __m128 lo = _mm256_cvtpd_ps(_mm256_div_pd(acc.lo, dv)), hi = _mm256_cvtpd_ps(_mm256_div_pd(acc.hi, dv));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
  }
};

#include "runtime/cpu/ops/pool_nhwc_impl.h"

}  // namespace

CUVIL_POOL_NHWC_DEFINE_ENTRY_POINTS(Avx2)

}  // namespace cuvil::rt::ops::pool_avx2
#endif
