// The int8 GEMM (runtime/cpu/ops/gemm_int8.h) on every kernel path this CPU supports (each test
// loops over supported_cpu_paths() and calls the path explicitly): int32 results bitwise equal
// to a plain int64 reference loop over odd shapes (GEMV rows 1-4, partial row groups and
// panels, depths not a multiple of 4 and past the depth block), uint8/int8 operands, scalar,
// per-row and per-column zero points, transposed operands and a transposed store; the float
// and requantising epilogues against the same formulas; 1 and N threads bitwise equal; a
// registered weight packed once (suite GemmInt8Kernel).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernel_harness.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/ops/gemm_int8.h"
#include "runtime/cpu/ops/packed_weights.h"

using namespace cuvil;
using rt::CpuPath;
using rt::ops::Int8Epilogue;
using rt::ops::Int8GemmArgs;

namespace {

struct Problem {
  int64_t m, n, k;
  bool a_signed, b_signed, trans_a, trans_b;
  std::vector<uint8_t> a, b;  // raw bytes (int8 values stored as their two's complement)
  std::vector<int32_t> za, zb;
  bool za_per_row = false, zb_per_col = false;
};

Problem make(int64_t m, int64_t n, int64_t k, bool as, bool bs, bool ta, bool tb, bool zpr,
             bool zpc, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  Problem p{m, n, k, as, bs, ta, tb, {}, {}, {}, {}, zpr, zpc};
  p.a.resize(static_cast<size_t>(m * k));
  p.b.resize(static_cast<size_t>(k * n));
  for (auto& v : p.a) v = static_cast<uint8_t>(byte(gen));
  for (auto& v : p.b) v = static_cast<uint8_t>(byte(gen));
  // Extreme values too, where vpmaddubsw would saturate.
  if (!p.a.empty()) p.a[0] = as ? 0x80 : 255;
  if (p.b.size() > 1) p.b[1] = bs ? 0x80 : 0;
  auto zp = [&](bool sgn) { return sgn ? byte(gen) - 128 : byte(gen); };
  for (int64_t i = 0; i < (zpr ? m : 1); ++i) p.za.push_back(zp(as));
  for (int64_t j = 0; j < (zpc ? n : 1); ++j) p.zb.push_back(zp(bs));
  return p;
}

int32_t val(uint8_t v, bool sgn) { return sgn ? int32_t(int8_t(v)) : int32_t(v); }

std::vector<int32_t> reference(const Problem& p) {
  std::vector<int32_t> c(static_cast<size_t>(p.m * p.n));
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      int64_t s = 0;
      for (int64_t q = 0; q < p.k; ++q) {
        const uint8_t av = p.trans_a ? p.a[q * p.m + i] : p.a[i * p.k + q];
        const uint8_t bv = p.trans_b ? p.b[j * p.k + q] : p.b[q * p.n + j];
        s += int64_t(val(av, p.a_signed) - p.za[p.za_per_row ? i : 0]) *
             (val(bv, p.b_signed) - p.zb[p.zb_per_col ? j : 0]);
      }
      c[i * p.n + j] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(s)));
    }
  return c;
}

Int8GemmArgs args_of(const Problem& p) {
  Int8GemmArgs g;
  g.m = p.m;
  g.n = p.n;
  g.k = p.k;
  g.a = p.a.data();
  g.a_signed = p.a_signed;
  g.trans_a = p.trans_a;
  g.lda = p.trans_a ? p.m : p.k;
  g.a_zero = p.za.data();
  g.a_zero_per_row = p.za_per_row;
  g.b = p.b.data();
  g.b_signed = p.b_signed;
  g.trans_b = p.trans_b;
  g.ldb = p.trans_b ? p.k : p.n;
  g.b_zero = p.zb.data();
  g.b_zero_per_column = p.zb_per_col;
  return g;
}

struct Ctx {
  Node node;
  std::unique_ptr<cuvil::testing::HeapOpContext> ctx;
  explicit Ctx(int threads) {
    node.op_type = "MatMulInteger";
    node.name = "gemm_int8_test";
    ctx = std::make_unique<cuvil::testing::HeapOpContext>(
        node, std::vector<const rt::TensorView*>{}, 0, threads);
  }
};

std::vector<int32_t> run_i32(const Problem& p, CpuPath path, int threads, bool transposed_store = false) {
  Int8GemmArgs g = args_of(p);
  std::vector<int32_t> c(static_cast<size_t>(p.m * p.n), 0x5a5a5a5a);
  g.c = c.data();
  g.ldc_row = transposed_store ? 1 : p.n;
  g.ldc_col = transposed_store ? p.m : 1;
  Ctx cx(threads);
  rt::ops::gemm_int8(cx.ctx.get(), g, path);
  if (!transposed_store) return c;
  std::vector<int32_t> t(c.size());
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) t[i * p.n + j] = c[j * p.m + i];
  return t;
}

TEST(GemmInt8Kernel, EveryPathMatchesTheReferenceBitwise) {
  const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 13, 14, 15, 29};
  const int64_t ns[] = {1, 7, 8, 9, 31, 33, 70};
  const int64_t ks[] = {1, 3, 4, 5, 17, 64, 131};
  uint32_t seed = 1;
  for (CpuPath path : rt::supported_cpu_paths()) {
    SCOPED_TRACE(rt::ops::int8_kernel_name(path));
    for (int64_t m : ms)
      for (int64_t n : ns)
        for (int64_t k : ks) {
          ++seed;
          const bool as = seed % 2, bs = (seed / 2) % 2, ta = (seed / 4) % 3 == 0,
                     tb = (seed / 3) % 2, zpr = (seed / 5) % 2, zpc = (seed / 7) % 2;
          Problem p = make(m, n, k, as, bs, ta, tb, zpr, zpc, seed);
          ASSERT_EQ(run_i32(p, path, 1), reference(p))
              << "m " << m << " n " << n << " k " << k << " a_signed " << as << " b_signed " << bs
              << " trans_a " << ta << " trans_b " << tb;
        }
  }
}

TEST(GemmInt8Kernel, DeepAndWideProductsAndThreadsAgree) {
  for (CpuPath path : rt::supported_cpu_paths()) {
    SCOPED_TRACE(rt::ops::int8_kernel_name(path));
    // Depth past every path's depth block (kc4 <= 1024 groups), columns past a task chunk.
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{3, 300, 4500}, {37, 520, 1029},
                           {300, 65, 77}}) {
      Problem p = make(m, n, k, false, true, false, false, false, true, 99 + m);
      const auto ref = reference(p);
      EXPECT_EQ(run_i32(p, path, 1), ref) << m << "x" << n << "x" << k;
      EXPECT_EQ(run_i32(p, path, 4), ref) << m << "x" << n << "x" << k;
      EXPECT_EQ(run_i32(p, path, 3, true), ref) << m << "x" << n << "x" << k;
    }
  }
}

TEST(GemmInt8Kernel, ZeroDepthGivesZero) {
  for (CpuPath path : rt::supported_cpu_paths()) {
    Problem p = make(5, 9, 0, false, true, false, false, false, false, 3);
    EXPECT_EQ(run_i32(p, path, 1), std::vector<int32_t>(45, 0));
  }
}

TEST(GemmInt8Kernel, FloatAndRequantizeEpilogues) {
  for (CpuPath path : rt::supported_cpu_paths()) {
    SCOPED_TRACE(rt::ops::int8_kernel_name(path));
    Problem p = make(6, 37, 50, false, true, false, true, false, true, 7);
    const auto ref = reference(p);
    std::vector<float> scale(37), bias(37);
    std::vector<int32_t> ibias(37);
    for (int j = 0; j < 37; ++j) {
      scale[j] = 0.0007f * (j + 1);
      bias[j] = 0.25f * j - 3.f;
      ibias[j] = 100 * j - 1800;
    }
    Ctx cx(2);
    // Dequantise.
    Int8GemmArgs g = args_of(p);
    std::vector<float> y(6 * 37);
    g.epilogue.kind = Int8Epilogue::Kind::kFloat;
    g.epilogue.scale = scale.data();
    g.epilogue.scale_per_column = true;
    g.epilogue.bias_f32 = bias.data();
    g.c = y.data();
    g.ldc_row = 37;
    rt::ops::gemm_int8(cx.ctx.get(), g, path);
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 37; ++j)
        ASSERT_EQ(y[i * 37 + j], static_cast<float>(ref[i * 37 + j]) * scale[j] + bias[j]);
    // Requantise to uint8 and int8 (a per-tensor scale), saturating, half to even.
    for (bool s8 : {false, true}) {
      std::vector<uint8_t> q(6 * 37);
      g.epilogue = Int8Epilogue{};
      g.epilogue.kind = s8 ? Int8Epilogue::Kind::kQuantS8 : Int8Epilogue::Kind::kQuantU8;
      const float one_scale = 0.01f;
      g.epilogue.scale = &one_scale;
      g.epilogue.bias_i32 = ibias.data();
      g.epilogue.out_zero_point = s8 ? -3 : 120;
      g.c = q.data();
      rt::ops::gemm_int8(cx.ctx.get(), g, path);
      int saturated = 0;
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 37; ++j) {
          float v = std::nearbyint(static_cast<float>(ref[i * 37 + j] + ibias[j]) * one_scale) +
                    g.epilogue.out_zero_point;
          v = std::min(std::max(v, s8 ? -128.f : 0.f), s8 ? 127.f : 255.f);
          saturated += v == 0.f || v == 255.f || v == -128.f || v == 127.f;
          const int got = s8 ? int(int8_t(q[i * 37 + j])) : int(q[i * 37 + j]);
          ASSERT_EQ(got, static_cast<int>(v)) << i << "," << j;
        }
      EXPECT_GT(saturated, 0);  // the case reaches the saturation
    }
  }
}

TEST(GemmInt8Kernel, RoundsHalfToEven) {
  // acc = 1 * (b - 0) for b = 1, 3, 5 with scale 0.5: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2.
  for (CpuPath path : rt::supported_cpu_paths()) {
    std::vector<uint8_t> a = {1}, b = {1, 3, 5};
    Int8GemmArgs g;
    g.m = 1;
    g.n = 3;
    g.k = 1;
    g.a = a.data();
    g.lda = 1;
    g.b = b.data();
    g.ldb = 3;
    const float half = 0.5f;
    g.epilogue.kind = Int8Epilogue::Kind::kQuantU8;
    g.epilogue.scale = &half;
    std::vector<uint8_t> q(3);
    g.c = q.data();
    g.ldc_row = 3;
    rt::ops::gemm_int8(nullptr, g, path);
    EXPECT_EQ(q, (std::vector<uint8_t>{0, 2, 2}));
  }
}

TEST(GemmInt8Kernel, RegisteredWeightIsPackedOnce) {
  for (CpuPath path : rt::supported_cpu_paths()) {
    Problem p = make(2, 64, 96, false, true, false, false, false, false, 11);
    rt::ops::register_weight_region(p.b.data(), p.b.size());
    const size_t before = rt::ops::packed_weight_bytes();
    const auto ref = reference(p);
    EXPECT_EQ(run_i32(p, path, 1), ref);
    const size_t after_first = rt::ops::packed_weight_bytes();
    EXPECT_GT(after_first, before);
    EXPECT_EQ(run_i32(p, path, 2), ref);
    EXPECT_EQ(rt::ops::packed_weight_bytes(), after_first);
    rt::ops::unregister_weight_region(p.b.data());
    EXPECT_EQ(rt::ops::packed_weight_bytes(), before);
  }
}

TEST(GemmInt8Kernel, KernelNamesPerPath) {
  EXPECT_STREQ(rt::ops::int8_kernel_name(CpuPath::Portable), "portable");
  if (rt::cpu_path_supported(CpuPath::Avx2)) {
    EXPECT_STREQ(rt::ops::int8_kernel_name(CpuPath::Avx2), "avx2");
  }
  if (rt::cpu_path_supported(CpuPath::Avx512)) {
    EXPECT_STREQ(rt::ops::int8_kernel_name(CpuPath::Avx512),
                 rt::cpu_has_avx512_vnni() ? "avx512-vnni" : "avx2");
  }
}

}  // namespace
