// How close are the float32 GEMM and GEMV (runtime/cpu/ops/gemm_kernels.cpp) to this machine's
// limits? For every kernel path the CPU supports (runtime/cpu/cpu_features.h), measured in the
// same run: the FMA peak of one core (an unrolled loop of independent multiply-adds on that
// path's vectors; the portable path counts a multiply and an add), one core's read bandwidth
// (a vector sum over a buffer as large as the GEMV's weights), then gemm() on 1024^3 with 1 and
// 2 threads and a 1 x 4096 x 8192 GEMV (128 MiB of weights, past the last-level cache of the
// machines of PERF_NOTES.md; as [K, N] and as a Linear layer's [N, K] with transB), printed as
// fractions of those. Issue 8 asks for GEMM >= 85% of the
// peak, >= 1.8x on two threads, and GEMV >= 75% of the read bandwidth. Times are the minimum
// over repeats (the machine may be shared; run it idle). Never asserts.
//   usage: bench_gemm_roofline [repeats=7] [gemm size=1024] [gemv K=4096] [gemv N=8192]
//          bench_gemm_roofline --sweep [repeats=3] [gemm size=1024]   (the blocking, see below)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench/fma_peak.h"
#include "bench/pool_context.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/ops/gemm_micro.h"
#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/thread_pool.h"

namespace {

using cuvil::rt::CpuPath;
using cuvil::bench::best_seconds;
using cuvil::bench::fma_peak_gflops;
using cuvil::bench::g_sink;

// ---- read bandwidth: a vector sum with independent accumulators ---------------------------

float read_portable(const float* p, int64_t n) {
  typedef float V4 __attribute__((vector_size(16)));
  V4 a0 = V4{}, a1 = V4{}, a2 = V4{}, a3 = V4{};
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    V4 x0, x1, x2, x3;
    __builtin_memcpy(&x0, p + i, 16);
    __builtin_memcpy(&x1, p + i + 4, 16);
    __builtin_memcpy(&x2, p + i + 8, 16);
    __builtin_memcpy(&x3, p + i + 12, 16);
    a0 += x0;
    a1 += x1;
    a2 += x2;
    a3 += x3;
  }
  const V4 s = a0 + a1 + a2 + a3;
  return s[0] + s[1] + s[2] + s[3];
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float read_avx2(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  return _mm256_cvtss_f32(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

__attribute__((target("avx512f,avx2,fma"))) float read_avx512(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  float s = 0;
  for (float x : lanes) s += x;
  return s;
}
#endif

double read_gbps(CpuPath path, const std::vector<float>& buf, int repeats) {
  const float* p = buf.data();
  const int64_t n = static_cast<int64_t>(buf.size());
  std::function<float()> body = [&] { return read_portable(p, n); };
#if defined(__x86_64__)
  if (path == CpuPath::Avx2) body = [&] { return read_avx2(p, n); };
  if (path == CpuPath::Avx512) body = [&] { return read_avx512(p, n); };
#endif
  const double s = best_seconds(repeats, [&] { g_sink = body(); });
  return static_cast<double>(n) * 4 / s * 1e-9;
}

// ---- gemm() through the runtime's thread pool ---------------------------------------------

using cuvil::bench::PoolContext;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// --sweep: the 1-thread GEMM (s^3, and the model-like shapes m = 128 at depth 768 / 3072) with
// every depth block kc and a few row blocks mc forced, next to the rule's own choice, as a
// fraction of the peak measured just before; each setting's time is the best of `repeats`,
// settings alternate across three rounds. For choosing the blocking rule (gemm_blocking_for).
int sweep_blocking(int repeats, int64_t s) {
  using cuvil::rt::ops::GemmBlocking;
  struct Shape { int64_t m, n, k; };
  const Shape shapes[] = {{s, s, s}, {128, 768, 768}, {128, 3072, 768}, {128, 768, 3072}};
  for (CpuPath path : cuvil::rt::supported_cpu_paths()) {
    if (path == CpuPath::Portable) continue;
    cuvil::rt::set_cpu_path_for_testing(path);
    const cuvil::rt::ops::GemmMicroKernel& uk = cuvil::rt::ops::gemm_micro_kernel(path);
    const GemmBlocking rule = cuvil::rt::ops::gemm_blocking(uk);
    const double peak = fma_peak_gflops(path, repeats);
    std::printf("\n%s: tile %lldx%lld, peak %.1f GF/s, rule mc %lld kc %lld\n", cuvil::rt::cpu_path_name(path),
                static_cast<long long>(uk.mr), static_cast<long long>(uk.nr), peak,
                static_cast<long long>(rule.mc), static_cast<long long>(rule.kc));
    std::vector<GemmBlocking> settings = {rule};
    for (int64_t kc : {128, 192, 256, 320, 384, 512})
      for (int64_t groups : {8, 16, 24, 48})
        settings.push_back(GemmBlocking{groups * uk.mr, kc});
    PoolContext one(1);
    for (const Shape& sh : shapes) {
      const std::vector<float> a = random_floats(static_cast<size_t>(sh.m * sh.k), 1);
      const std::vector<float> b = random_floats(static_cast<size_t>(sh.k * sh.n), 2);
      std::vector<float> c(static_cast<size_t>(sh.m * sh.n));
      const double flops = 2.0 * static_cast<double>(sh.m * sh.n * sh.k);
      std::vector<double> best(settings.size(), 1e30);
      for (int round = 0; round < 3; ++round)
        for (size_t i = 0; i < settings.size(); ++i) {
          cuvil::rt::ops::set_gemm_blocking_for_testing(&settings[i]);
          const double t = best_seconds(repeats, [&] {
            cuvil::rt::ops::gemm(&one, false, false, sh.m, sh.n, sh.k, 1.f, a.data(), sh.k, b.data(), sh.n,
                                 0.f, c.data(), sh.n);
          });
          best[i] = std::min(best[i], t);
        }
      cuvil::rt::ops::set_gemm_blocking_for_testing(nullptr);
      std::printf("  m %lld n %lld k %lld:\n", static_cast<long long>(sh.m), static_cast<long long>(sh.n),
                  static_cast<long long>(sh.k));
      for (size_t i = 0; i < settings.size(); ++i)
        std::printf("    %s mc %4lld kc %4lld  %6.1f GF/s  %5.1f%%\n", i == 0 ? "rule" : "    ",
                    static_cast<long long>(settings[i].mc), static_cast<long long>(settings[i].kc),
                    flops / best[i] * 1e-9, 100 * flops / best[i] * 1e-9 / peak);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--sweep")
    return sweep_blocking(argc > 2 ? std::max(1, std::atoi(argv[2])) : 3, argc > 3 ? std::atoll(argv[3]) : 1024);
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  const int64_t s = argc > 2 ? std::atoll(argv[2]) : 1024;
  const int64_t vk = argc > 3 ? std::atoll(argv[3]) : 4096;
  const int64_t vn = argc > 4 ? std::atoll(argv[4]) : 8192;
  std::printf("cpu: %s\n", cuvil::rt::cpu_features_summary().c_str());
  std::printf("GEMM %lld^3, GEMV 1x%lldx%lld (%.0f MiB of weights), best of %d\n",
              static_cast<long long>(s), static_cast<long long>(vk), static_cast<long long>(vn),
              static_cast<double>(vk * vn) * 4 / (1 << 20), repeats);
  const std::vector<float> a = random_floats(static_cast<size_t>(s * s), 1);
  const std::vector<float> b = random_floats(static_cast<size_t>(s * s), 2);
  std::vector<float> c(static_cast<size_t>(s * s));
  const std::vector<float> w = random_floats(static_cast<size_t>(vk * vn), 3);
  const std::vector<float> x = random_floats(static_cast<size_t>(vk), 4);
  std::vector<float> y(static_cast<size_t>(vn));
  PoolContext one(1), two(2);
  const double gemm_flops = 2.0 * static_cast<double>(s) * static_cast<double>(s) * static_cast<double>(s);

  std::printf("\n%-9s %10s %10s | %10s %7s %10s %7s %8s | %10s %7s | %10s %7s\n", "path", "peak GF/s",
              "read GB/s", "gemm1 GF/s", "%peak", "gemm2 GF/s", "%2peak", "2T/1T", "gemv GB/s", "%read",
              "gemvT GB/s", "%read");
  for (CpuPath path : cuvil::rt::supported_cpu_paths()) {
    cuvil::rt::set_cpu_path_for_testing(path);
    const double peak = fma_peak_gflops(path, repeats);
    const double bw = read_gbps(path, w, repeats);
    auto run_gemm = [&](PoolContext& ctx) {
      cuvil::rt::ops::gemm(&ctx, false, false, s, s, s, 1.f, a.data(), s, b.data(), s, 0.f, c.data(), s);
    };
    run_gemm(one);  // warm the pages
    const double g1 = gemm_flops / best_seconds(repeats, [&] { run_gemm(one); }) * 1e-9;
    const double g2 = gemm_flops / best_seconds(repeats, [&] { run_gemm(two); }) * 1e-9;
    auto run_gemv = [&] {
      cuvil::rt::ops::gemm(&one, false, false, 1, vn, vk, 1.f, x.data(), vk, w.data(), vn, 0.f, y.data(), vn);
    };
    run_gemv();
    const double gv = static_cast<double>(vk * vn) * 4 / best_seconds(repeats, run_gemv) * 1e-9;
    // The same bytes as a Linear layer's weight ([N, K], transB): dot products over rows.
    auto run_gemv_t = [&] {
      cuvil::rt::ops::gemm(&one, false, true, 1, vn, vk, 1.f, x.data(), vk, w.data(), vk, 0.f, y.data(), vn);
    };
    run_gemv_t();
    const double gvt = static_cast<double>(vk * vn) * 4 / best_seconds(repeats, run_gemv_t) * 1e-9;
    std::printf("%-9s %10.1f %10.1f | %10.1f %6.1f%% %10.1f %6.1f%% %7.2fx | %10.1f %6.1f%% | %10.1f %6.1f%%\n",
                cuvil::rt::cpu_path_name(path), peak, bw, g1, 100 * g1 / peak, g2, 100 * g2 / (2 * peak), g2 / g1,
                gv, 100 * gv / bw, gvt, 100 * gvt / bw);
    const cuvil::rt::ops::GemmMicroKernel& uk = cuvil::rt::ops::gemm_micro_kernel(path);
    const cuvil::rt::ops::GemmBlocking bl = cuvil::rt::ops::gemm_blocking(uk);
    std::printf("          tile %lldx%lld, mc %lld, kc %lld\n", static_cast<long long>(uk.mr),
                static_cast<long long>(uk.nr), static_cast<long long>(bl.mc), static_cast<long long>(bl.kc));
  }
  std::printf("\nissue 8 targets: gemm1 >= 85%% of peak, 2T/1T >= 1.8x, gemv >= 75%% of read bandwidth\n");
  return 0;
}
