// The AVX2 + FMA path of the direct depthwise convolution (conv_depthwise.h): the trait of
// conv_depthwise_impl.h over __m256, partial vectors through vmaskmovps. Built with -mavx2
// -mfma (CMakeLists.txt) and called only when active_cpu_path() is avx2; includes no header
// with inline library code.
#if defined(__x86_64__)
#include <immintrin.h>

#include "runtime/cpu/ops/conv_depthwise_args.h"
#include "runtime/cpu/ops/conv_igemm_args.h"

namespace cuvil::rt::ops::dw_avx2 {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int64_t kWidth = 8;
  static __m256i first(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V set(float f) { return _mm256_set1_ps(f); }
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V load_n(const float* p, int64_t n) { return _mm256_maskload_ps(p, first(n)); }
  static void store_n(float* p, V v, int64_t n) { _mm256_maskstore_ps(p, first(n), v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V relu(V v) { return _mm256_and_ps(v, _mm256_cmp_ps(v, zero(), _CMP_NLE_UQ)); }
  static V clip(V v, V lo, V hi) {
    const V r = _mm256_blendv_ps(v, hi, _mm256_cmp_ps(v, hi, _CMP_GT_OQ));
    return _mm256_blendv_ps(r, lo, _mm256_cmp_ps(v, lo, _CMP_LT_OQ));
  }
  static V leaky(V v, V a) { return _mm256_blendv_ps(v, _mm256_mul_ps(v, a), _mm256_cmp_ps(v, zero(), _CMP_LT_OQ)); }
};

#include "runtime/cpu/ops/conv_depthwise_impl.h"
#include "runtime/cpu/ops/conv_igemm_impl.h"

}  // namespace

CUVIL_DW_DEFINE_ENTRY_POINTS(Avx2)
CUVIL_IGEMM_DEFINE_ENTRY_POINTS(Avx2)

}  // namespace cuvil::rt::ops::dw_avx2
#endif
