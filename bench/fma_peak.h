// The machine's limits that kernel benchmarks report their speed against, measured in the
// same run: the FMA peak of one core on a kernel path (an unrolled loop of independent
// multiply-adds on that path's vectors; the portable path counts a multiply and an add), and
// the best-of-N timer they share. Used by bench/gemm_roofline.cpp and bench/dense_conv.cpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runtime/cpu/cpu_features.h"

namespace cuvil::bench {

using cuvil::rt::CpuPath;
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

template <typename Fn> inline double best_seconds(int repeats, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const Clock::time_point t0 = Clock::now();
    fn();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

// ---- the FMA peak: independent accumulators, enough to cover the FMA latency on 2 pipes ----

inline volatile float g_sink;

inline float peak_portable(int64_t iters) {
  typedef float V4 __attribute__((vector_size(16)));
  V4 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = V4{} + static_cast<float>(i);
  const V4 x = V4{} + 0.999999f, y = V4{} + 1e-7f;
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = acc[i] * x + y;
  }
  float s = 0;
  for (int i = 0; i < 12; ++i) s += acc[i][0];
  return s;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) inline float peak_avx2(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  }
  float s = 0;
  for (int i = 0; i < 12; ++i) s += _mm256_cvtss_f32(acc[i]);
  return s;
}

__attribute__((target("avx512f,avx2,fma"))) inline float peak_avx512(int64_t iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  }
  float s = 0;
  for (int i = 0; i < 16; ++i) s += _mm512_cvtss_f32(acc[i]);
  return s;
}
#endif

// GFLOP/s of one core on `path` (2 flops per lane per multiply-add).
inline double fma_peak_gflops(CpuPath path, int repeats) {
  const int64_t iters = 20'000'000;
  double flops_per_iter = 12 * 4 * 2;
  std::function<float()> body = [&] { return peak_portable(iters); };
#if defined(__x86_64__)
  if (path == CpuPath::Avx2) {
    flops_per_iter = 12 * 8 * 2;
    body = [&] { return peak_avx2(iters); };
  } else if (path == CpuPath::Avx512) {
    flops_per_iter = 16 * 16 * 2;
    body = [&] { return peak_avx512(iters); };
  }
#endif
  const double s = best_seconds(repeats, [&] { g_sink = body(); });
  return flops_per_iter * static_cast<double>(iters) / s * 1e-9;
}


}  // namespace cuvil::bench
