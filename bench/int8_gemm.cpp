// int8 GEMM and GEMV (runtime/cpu/ops/gemm_int8.h) against the float32 ones (gemm_kernels.cpp)
// in the same run, per kernel path the CPU supports (forced with set_cpu_path_for_testing):
// a uint8 x int8 GEMM of s^3 (1024 by default, int32 out) against gemm() on float32 of the same
// size, and a 1 x K x N GEMV over weights larger than the last-level cache (int8 weights of K x
// N bytes against float32 weights of 4 K x N bytes, each registered as a package weight so both
// run on their prepacked form, as in a loaded package) on one thread; prints times and the
// int8 / fp32 speed ratios (issue 11 asks GEMM >= 3x with VNNI, >= 1.3x on AVX2 only, GEMV >= 3x).
// Times are the minimum over repeats: run it on an idle machine. Never asserts.
//   usage: bench_int8_gemm [repeats=5] [gemm size=1024] [gemv K=4096] [gemv N=16384]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/pool_context.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/ops/gemm_int8.h"
#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/ops/packed_weights.h"
#include "runtime/cpu/thread_pool.h"

namespace {

using cuvil::rt::CpuPath;
using Clock = std::chrono::steady_clock;

template <typename Fn> double best_seconds(int repeats, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const Clock::time_point t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

using cuvil::bench::PoolContext;

template <typename T> std::vector<T> random_values(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(gen));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cuvil::rt::ops;
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const int64_t s = argc > 2 ? std::atoll(argv[2]) : 1024;
  const int64_t vk = argc > 3 ? std::atoll(argv[3]) : 4096;
  const int64_t vn = argc > 4 ? std::atoll(argv[4]) : 16384;
  std::printf("cpu: %s\n", cuvil::rt::cpu_features_summary().c_str());
  std::printf("GEMM %lld^3; GEMV 1x%lldx%lld: int8 weights %.0f MiB, fp32 weights %.0f MiB; best of %d, 1 thread\n",
              static_cast<long long>(s), static_cast<long long>(vk), static_cast<long long>(vn),
              static_cast<double>(vk * vn) / (1 << 20), static_cast<double>(vk * vn) * 4 / (1 << 20), repeats);
  const auto a8 = random_values<uint8_t>(static_cast<size_t>(s * s), 1, 0, 255);
  const auto b8 = random_values<int8_t>(static_cast<size_t>(s * s), 2, -128, 127);
  const auto af = random_values<float>(static_cast<size_t>(s * s), 3, -8, 8);
  const auto bf = random_values<float>(static_cast<size_t>(s * s), 4, -8, 8);
  std::vector<int32_t> c32(static_cast<size_t>(s * s));
  std::vector<float> cf(static_cast<size_t>(s * s));
  const auto w8 = random_values<int8_t>(static_cast<size_t>(vk * vn), 5, -128, 127);
  const auto wf = random_values<float>(static_cast<size_t>(vk * vn), 6, -8, 8);
  const auto x8 = random_values<uint8_t>(static_cast<size_t>(vk), 7, 0, 255);
  const auto xf = random_values<float>(static_cast<size_t>(vk), 8, -8, 8);
  std::vector<int32_t> y32(static_cast<size_t>(vn));
  std::vector<float> yf(static_cast<size_t>(vn));
  // The GEMV weights as a package's: packed once, on first use (packed_weights.h).
  register_weight_region(w8.data(), w8.size());
  register_weight_region(wf.data(), wf.size() * sizeof(float));
  PoolContext one(1);
  const double flops = 2.0 * static_cast<double>(s) * static_cast<double>(s) * static_cast<double>(s);

  std::printf("\n%-9s %-12s | %12s %12s %7s | %12s %12s %7s\n", "path", "int8 kernel", "i8 GEMM GOP/s",
              "f32 GFLOP/s", "ratio", "i8 GEMV ms", "f32 GEMV ms", "ratio");
  for (CpuPath path : cuvil::rt::supported_cpu_paths()) {
    cuvil::rt::set_cpu_path_for_testing(path);
    Int8GemmArgs g;
    g.m = g.n = g.k = s;
    g.a = a8.data();
    g.lda = s;
    g.b = b8.data();
    g.ldb = s;
    g.c = c32.data();
    g.ldc_row = s;
    auto run_i8 = [&] { gemm_int8(&one, g, path); };
    auto run_f32 = [&] { gemm(&one, false, false, s, s, s, 1.f, af.data(), s, bf.data(), s, 0.f, cf.data(), s); };
    run_i8();
    run_f32();
    const double ti8 = best_seconds(repeats, run_i8), tf = best_seconds(repeats, run_f32);
    Int8GemmArgs v;
    v.m = 1;
    v.n = vn;
    v.k = vk;
    v.a = x8.data();
    v.lda = vk;
    v.b = w8.data();
    v.ldb = vn;
    v.c = y32.data();
    v.ldc_row = vn;
    auto gemv_i8 = [&] { gemm_int8(&one, v, path); };
    auto gemv_f32 = [&] { gemm(&one, false, false, 1, vn, vk, 1.f, xf.data(), vk, wf.data(), vn, 0.f, yf.data(), vn); };
    gemv_i8();
    gemv_f32();
    const double vi8 = best_seconds(repeats, gemv_i8), vf = best_seconds(repeats, gemv_f32);
    std::printf("%-9s %-12s | %12.1f %12.1f %6.2fx | %12.2f %12.2f %6.2fx\n", cuvil::rt::cpu_path_name(path),
                int8_kernel_name(path), flops / ti8 * 1e-9, flops / tf * 1e-9, tf / ti8, vi8 * 1e3, vf * 1e3,
                vf / vi8);
  }
  std::printf("\nissue 11 targets: GEMM ratio >= 3x with VNNI, >= 1.3x on AVX2 only; GEMV ratio >= 3x\n");
  return 0;
}
