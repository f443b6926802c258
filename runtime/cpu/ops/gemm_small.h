// The unpacked GEMM for products too small to pay for packing, shared by the float32 GEMM
// (gemm_kernels.cpp) and the double one (linalg.cpp): c = beta * c + alpha * op(a) op(b), one
// output row at a time, the depth loop in order (so its rounding is the same on every path).
#pragma once

#include <cstdint>

namespace cuvil::rt::ops {

// Below this many multiply-adds packing costs more than it saves.
constexpr int64_t kSmallGemm = 32 * 32 * 32;

// Element (i, p) of op(a), a row-major with leading dimension lda.
template <typename C>
inline C a_at(const C* a, int64_t lda, bool trans, int64_t i, int64_t p) {
  return trans ? a[p * lda + i] : a[i * lda + p];
}

template <typename C>
void gemm_small(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, C alpha, const C* a,
                int64_t lda, const C* b, int64_t ldb, C beta, C* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    C* row = c + i * ldc;
    if (beta == C(0)) {
      for (int64_t j = 0; j < n; ++j) row[j] = C(0);
    } else if (beta != C(1)) {
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
    for (int64_t p = 0; p < k; ++p) {
      const C av = alpha * a_at(a, lda, trans_a, i, p);
      if (trans_b) {
        for (int64_t j = 0; j < n; ++j) row[j] += av * b[j * ldb + p];
      } else {
        const C* brow = b + p * ldb;
        for (int64_t j = 0; j < n; ++j) row[j] += av * brow[j];
      }
    }
  }
}

}  // namespace cuvil::rt::ops
