// The float32 GEMM/GEMV (runtime/cpu/ops/gemm_kernels.cpp) on every kernel path this CPU
// supports (each test loops over supported_cpu_paths() with set_cpu_path_for_testing): gemm()
// against a double reference over edge shapes (1, 3, 17, 63, 65, ... rows, columns and depth,
// the GEMV rows 1-4, depths past the kc block), transposes, alpha and beta; NaN propagation and
// beta = 0 ignoring c; 1 and N threads bitwise equal; the MatMul, Gemm and FusedMatMul kernels
// through the heap harness; b packed once per registered weight, in huge-page-aligned buffers;
// the panel prefetch never faulting; the shared blocking rule (suite GemmKernel).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <tuple>

#include <sys/mman.h>
#include <unistd.h>

#include "kernel_harness.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/ops/gemm_micro.h"
#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/ops/packed_weights.h"

using namespace cuvil;
using rt::CpuPath;

namespace {

// Restores the process's path when a test ends, whatever it switched to.
struct PathGuard {
  CpuPath saved = rt::active_cpu_path();
  ~PathGuard() { rt::set_cpu_path_for_testing(saved); }
};

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// A context whose parallel_for runs the whole range on the caller (the harness's), reporting
// `threads` so that gemm() splits its work as it would on that many workers.
struct GemmCall {
  Node node;
  std::unique_ptr<cuvil::testing::HeapOpContext> ctx;
  explicit GemmCall(int threads) {
    node.op_type = "MatMul";
    node.name = "gemm_test";
    ctx = std::make_unique<cuvil::testing::HeapOpContext>(node, std::vector<const rt::TensorView*>{}, 0,
                                                          threads);
  }
};

struct Problem {
  bool ta = false, tb = false;
  int64_t m = 1, n = 1, k = 1;
  float alpha = 1.f, beta = 0.f;
  std::vector<float> a, b, c;  // c: the initial output (read when beta != 0)
  int64_t lda() const { return ta ? m : k; }
  int64_t ldb() const { return tb ? k : n; }
};

Problem make_problem(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                     uint32_t seed) {
  Problem p;
  p.ta = ta;
  p.tb = tb;
  p.m = m;
  p.n = n;
  p.k = k;
  p.alpha = alpha;
  p.beta = beta;
  p.a = random_floats(static_cast<size_t>(m * k), seed);
  p.b = random_floats(static_cast<size_t>(k * n), seed + 1);
  p.c = random_floats(static_cast<size_t>(m * n), seed + 2);
  return p;
}

std::vector<float> run_gemm(const Problem& p, int threads) {
  std::vector<float> c = p.c;
  GemmCall call(threads);
  rt::ops::gemm(call.ctx.get(), p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda(), p.b.data(),
                p.ldb(), p.beta, c.data(), p.n);
  return c;
}

// Checks c against a double reference with a bound scaled by sum |alpha a b| + |beta c|.
void expect_matches_reference(const Problem& p, const std::vector<float>& c) {
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      double s = 0, mag = 0;
      for (int64_t q = 0; q < p.k; ++q) {
        const double av = p.ta ? p.a[q * p.lda() + i] : p.a[i * p.lda() + q];
        const double bv = p.tb ? p.b[j * p.ldb() + q] : p.b[q * p.ldb() + j];
        s += av * bv;
        mag += std::fabs(av * bv);
      }
      double want = p.alpha * s, bound = std::fabs(p.alpha) * mag;
      if (p.beta != 0.f) {
        want += p.beta * static_cast<double>(p.c[i * p.n + j]);
        bound += std::fabs(p.beta * p.c[i * p.n + j]);
      }
      const double got = c[i * p.n + j];
      ASSERT_LE(std::fabs(got - want), 1e-6 * bound + 1e-6)
          << "c[" << i << "][" << j << "] = " << got << ", want " << want;
    }
}

std::string describe(const Problem& p) {
  return "m " + std::to_string(p.m) + " n " + std::to_string(p.n) + " k " + std::to_string(p.k) +
         " transA " + std::to_string(p.ta) + " transB " + std::to_string(p.tb) + " alpha " +
         std::to_string(p.alpha) + " beta " + std::to_string(p.beta);
}

TEST(GemmKernel, EveryPathMatchesTheReference) {
  PathGuard guard;
  // Rows: the GEMV rows (1-4), each path's tile edges (mr = 4, 6, 14); columns: the panel edges
  // (nr = 16, 32) and the GEMV chunk (64); depth: past every path's kc block.
  const std::vector<int64_t> ms = {1, 2, 3, 4, 5, 17, 63, 65};
  const std::vector<int64_t> ns = {1, 3, 17, 33, 65, 130};
  const std::vector<int64_t> ks = {1, 3, 63, 65, 300, 600};
  uint32_t seed = 1;
  for (CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    SCOPED_TRACE(std::string("path ") + rt::cpu_path_name(path));
    for (int64_t m : ms)
      for (int64_t n : ns)
        for (int64_t k : ks) {
          // Transposes and scalars rotate through the shapes (all combinations of everything
          // would be slow on the portable path without testing more).
          const int v = static_cast<int>(seed % 4);
          const float alpha = seed % 3 == 0 ? 1.f : -0.75f;
          const float beta = seed % 5 == 0 ? 0.f : seed % 5 == 1 ? 1.f : 1.5f;
          const Problem p = make_problem(v & 1, v & 2, m, n, k, alpha, beta, seed);
          seed += 3;
          SCOPED_TRACE(describe(p));
          expect_matches_reference(p, run_gemm(p, 1));
          if (HasFatalFailure()) return;
        }
  }
}

TEST(GemmKernel, AllTransposesOnLargerShapes) {
  PathGuard guard;
  uint32_t seed = 7000;
  for (CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    SCOPED_TRACE(std::string("path ") + rt::cpu_path_name(path));
    for (int t = 0; t < 4; ++t)
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{129, 97, 517}, {2, 1000, 700}, {1, 129, 4097}}) {
        const Problem p = make_problem(t & 1, t & 2, m, n, k, 0.5f, -1.f, seed++);
        SCOPED_TRACE(describe(p));
        expect_matches_reference(p, run_gemm(p, 2));
        if (HasFatalFailure()) return;
      }
  }
}

// The thread split changes row blocks and column chunks, never a sum's order.
TEST(GemmKernel, OneAndManyThreadsAgreeBitwise) {
  PathGuard guard;
  uint32_t seed = 9000;
  for (CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    SCOPED_TRACE(std::string("path ") + rt::cpu_path_name(path));
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 300, 257}, {3, 700, 129},
                           {100, 70, 600}, {257, 130, 65}, {33, 1000, 40}})
      for (int t = 0; t < 4; ++t) {
        const Problem p = make_problem(t & 1, t & 2, m, n, k, 1.f, t == 3 ? 0.5f : 0.f, seed++);
        SCOPED_TRACE(describe(p));
        const std::vector<float> one = run_gemm(p, 1);
        for (int threads : {2, 3, 8}) {
          const std::vector<float> many = run_gemm(p, threads);
          ASSERT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float)))
              << threads << " threads";
        }
      }
  }
}

// A NaN in a reaches exactly its row of c (in b: its column); beta = 0 never reads c, so NaN
// there does not leak; infinities in a give infinities.
TEST(GemmKernel, NaNPropagatesAndBetaZeroIgnoresC) {
  PathGuard guard;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    SCOPED_TRACE(std::string("path ") + rt::cpu_path_name(path));
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{2, 200, 300}, {40, 50, 60}}) {
      Problem p = make_problem(false, false, m, n, k, 1.f, 0.f, 42);
      const int64_t bad_row = m - 1, bad_col = n / 2;
      p.a[bad_row * k + k / 2] = nan;
      p.b[(k / 3) * n + bad_col] = nan;
      std::fill(p.c.begin(), p.c.end(), nan);
      const std::vector<float> c = run_gemm(p, 2);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(std::isnan(c[i * n + j]), i == bad_row || j == bad_col)
              << "m " << m << " c[" << i << "][" << j << "] = " << c[i * n + j];
    }
  }
}

// ---- the kernels that call gemm() ---------------------------------------------------------

TensorData float_tensor(std::vector<int64_t> dims, const std::vector<float>& v) {
  TensorData t;
  t.dtype = DType::Float;
  t.dims = std::move(dims);
  t.bytes.resize(v.size() * 4);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

Attribute attr_int(int64_t v) { Attribute a; a.kind = Attribute::Kind::Int; a.i = v; return a; }
Attribute attr_float(float v) { Attribute a; a.kind = Attribute::Kind::Float; a.f = v; return a; }

std::vector<float> run_kernel(const std::string& domain, const std::string& op,
                              std::map<std::string, Attribute> attrs,
                              std::vector<const TensorData*> inputs, int threads) {
  Node node;
  node.op_type = op;
  node.domain = domain;
  node.opset = 13;
  node.name = "n_" + op;
  node.attrs = std::move(attrs);
  node.outputs.push_back(0);
  std::vector<rt::TensorView> views(inputs.size());
  std::vector<const rt::TensorView*> ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    views[i] = cuvil::testing::view_of(*inputs[i]);
    ptrs.push_back(&views[i]);
  }
  cuvil::testing::HeapOpContext ctx(node, ptrs, 1, threads);
  rt::OpKernelFn fn = rt::find_op_kernel(domain, op);
  EXPECT_NE(fn, nullptr) << op;
  if (!fn) return {};
  const rt::Status st = fn(ctx);
  EXPECT_TRUE(st.is_ok()) << st.message();
  if (!st.is_ok()) return {};
  const rt::TensorView& o = ctx.output(0);
  std::vector<float> out(static_cast<size_t>(o.numel()));
  std::memcpy(out.data(), o.data, out.size() * 4);
  return out;
}

// MatMul (a batch folded into rows, and a decode-sized one), Gemm with transposes, alpha, beta
// and a [N] bias, and FusedMatMul with alpha and transB, on every path and 1 and 2 threads.
TEST(GemmKernel, MatMulGemmAndFusedMatMulOnEveryPath) {
  PathGuard guard;
  uint32_t seed = 300;
  for (CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    SCOPED_TRACE(std::string("path ") + rt::cpu_path_name(path));
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 130, 257}, {3, 65, 63},
                           {70, 33, 300}}) {
      SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k));
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        Problem p = make_problem(ta, tb, m, n, k, 0.75f, -1.5f, seed++);
        const std::vector<float> bias = random_floats(static_cast<size_t>(n), seed++);
        const TensorData a = float_tensor(ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, p.a);
        const TensorData b = float_tensor(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, p.b);
        const TensorData c = float_tensor({n}, bias);
        // Gemm's C broadcasts over rows: the reference's initial c is the bias per row.
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) p.c[i * n + j] = bias[j];
        for (int threads : {1, 2}) {
          const std::vector<float> y = run_kernel(
              "", "Gemm",
              {{"transA", attr_int(ta)}, {"transB", attr_int(tb)}, {"alpha", attr_float(0.75f)},
               {"beta", attr_float(-1.5f)}},
              {&a, &b, &c}, threads);
          ASSERT_EQ(y.size(), static_cast<size_t>(m * n));
          SCOPED_TRACE("Gemm transA " + std::to_string(ta) + " transB " + std::to_string(tb));
          expect_matches_reference(p, y);
          if (HasFatalFailure()) return;
        }
        if (ta) continue;
        // FusedMatMul(A, B) with alpha and transB, no bias: alpha * a @ op(b).
        Problem q = p;
        q.beta = 0.f;
        const std::vector<float> fy = run_kernel(
            "cuvil", "FusedMatMul", {{"transB", attr_int(tb)}, {"alpha", attr_float(0.75f)}}, {&a, &b}, 2);
        ASSERT_EQ(fy.size(), static_cast<size_t>(m * n));
        SCOPED_TRACE("FusedMatMul transB " + std::to_string(tb));
        expect_matches_reference(q, fy);
        if (HasFatalFailure()) return;
      }
      // MatMul with a batch of 2 over a shared b (folded into 2m rows of one GEMM).
      const Problem p0 = make_problem(false, false, 2 * m, n, k, 1.f, 0.f, seed++);
      const TensorData a = float_tensor({2, m, k}, p0.a), b = float_tensor({k, n}, p0.b);
      for (int threads : {1, 2}) {
        const std::vector<float> y = run_kernel("", "MatMul", {}, {&a, &b}, threads);
        ASSERT_EQ(y.size(), static_cast<size_t>(2 * m * n));
        SCOPED_TRACE("MatMul");
        expect_matches_reference(p0, y);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// ---- b packed once per weight -------------------------------------------------------------

// A b inside a registered weight region is packed once (the bytes held grow by its panels on
// the first call only), gives bitwise the result of per-call packing, and is dropped with the
// region; past the cap nothing is cached and results stay the same.
TEST(GemmKernel, WeightsArePackedOncePerRegion) {
  PathGuard guard;
  uint32_t seed = 4000;
  for (CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    SCOPED_TRACE(std::string("path ") + rt::cpu_path_name(path));
    const int64_t nr = rt::ops::gemm_micro_kernel().nr;
    for (bool tb : {false, true}) {
      const Problem p = make_problem(false, tb, 40, 70, 90, 1.f, 0.f, seed++);
      const std::vector<float> plain = run_gemm(p, 2);
      const size_t before = rt::ops::packed_weight_bytes();
      rt::ops::register_weight_region(p.b.data(), p.b.size() * sizeof(float));
      const std::vector<float> first = run_gemm(p, 2);
      const size_t panel_bytes = static_cast<size_t>((70 + nr - 1) / nr * nr * 90) * sizeof(float);
      EXPECT_EQ(rt::ops::packed_weight_bytes(), before + panel_bytes);
      const std::vector<float> second = run_gemm(p, 1);
      EXPECT_EQ(rt::ops::packed_weight_bytes(), before + panel_bytes) << "packed again";
      EXPECT_EQ(0, std::memcmp(plain.data(), first.data(), plain.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(plain.data(), second.data(), plain.size() * sizeof(float)));
      rt::ops::unregister_weight_region(p.b.data());
      EXPECT_EQ(rt::ops::packed_weight_bytes(), before);

      rt::ops::set_packed_weight_cap_for_testing(panel_bytes - 1);
      rt::ops::register_weight_region(p.b.data(), p.b.size() * sizeof(float));
      const std::vector<float> capped = run_gemm(p, 2);
      EXPECT_EQ(rt::ops::packed_weight_bytes(), before) << "over the cap: nothing cached";
      EXPECT_EQ(0, std::memcmp(plain.data(), capped.data(), plain.size() * sizeof(float)));
      rt::ops::unregister_weight_region(p.b.data());
      rt::ops::set_packed_weight_cap_for_testing(size_t(4) << 30);
    }
  }
}

// Only a b wholly inside a region is cached: one that runs past its end is packed per call.
TEST(GemmKernel, OperandsPastARegionAreNotCached) {
  const Problem p = make_problem(false, false, 40, 70, 90, 1.f, 0.f, 77);
  const size_t before = rt::ops::packed_weight_bytes();
  rt::ops::register_weight_region(p.b.data(), p.b.size() * sizeof(float) - 4);
  const std::vector<float> y = run_gemm(p, 1);
  EXPECT_EQ(rt::ops::packed_weight_bytes(), before);
  rt::ops::unregister_weight_region(p.b.data());
  expect_matches_reference(p, y);
}

// Packed panels live in PackedWeightBuffers: one of 2 MiB or more starts on a 2 MiB boundary
// (so that the huge pages asked for can back it), a zeroed one is all zeros, and a weight's
// cached panels that large come in such a buffer, equal to the per-call packing.
TEST(GemmKernel, LargePanelBuffersStartOnHugePageBoundaries) {
  constexpr size_t kHuge = rt::ops::PackedWeightBuffer::kHugePageBytes;
  const rt::ops::PackedWeightBuffer large(kHuge / sizeof(float) + 5, /*zeroed=*/true);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large.data()) % kHuge, 0u);
  EXPECT_EQ(large.size(), kHuge / sizeof(float) + 5);
  size_t nonzero = 0;
  for (size_t i = 0; i < large.size(); ++i) nonzero += large.data()[i] != 0.f;
  EXPECT_EQ(nonzero, 0u);
  const rt::ops::PackedWeightBuffer small(100, /*zeroed=*/false);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % alignof(std::max_align_t), 0u);

  PathGuard guard;
  for (CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    SCOPED_TRACE(std::string("path ") + rt::cpu_path_name(path));
    const Problem p = make_problem(false, false, 8, 1024, 640, 1.f, 0.f, 4100);  // 2.5 MiB of panels
    const std::vector<float> plain = run_gemm(p, 1);
    rt::ops::register_weight_region(p.b.data(), p.b.size() * sizeof(float));
    const rt::ops::GemmMicroKernel& uk = rt::ops::gemm_micro_kernel();
    const rt::ops::PackedWeights panels = rt::ops::gemm_weight_panels(uk, p.b.data(), false, p.k, p.n, p.n);
    ASSERT_NE(panels, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(panels->data()) % kHuge, 0u);
    const std::vector<float> cached = run_gemm(p, 1);
    EXPECT_EQ(0, std::memcmp(plain.data(), cached.data(), plain.size() * sizeof(float)));
    rt::ops::unregister_weight_region(p.b.data());
  }
}

// gemm_block_f32 prefetches the panel it reads next, and after the last one the next depth
// block of the first: here that lies past the end of the mapping, on a page that cannot be
// read. A prefetch never faults; the product is still exact.
TEST(GemmKernel, PanelPrefetchPastTheOperandNeverFaults) {
  const long page = sysconf(_SC_PAGESIZE);
  for (CpuPath path : rt::supported_cpu_paths()) {
    const rt::ops::GemmMicroKernel& uk = rt::ops::gemm_micro_kernel(path);
    SCOPED_TRACE(std::string("path ") + rt::cpu_path_name(path));
    const int64_t kc = page / static_cast<int64_t>(sizeof(float)) / uk.nr;  // one panel fills a page
    void* map = mmap(nullptr, static_cast<size_t>(2 * page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    ASSERT_NE(map, MAP_FAILED);
    char* guard_page = static_cast<char*>(map) + page;
    ASSERT_EQ(mprotect(guard_page, static_cast<size_t>(page), PROT_NONE), 0);
    float* b = static_cast<float*>(map);  // [kc][nr], ending where the guard page starts
    const std::vector<float> bv = random_floats(static_cast<size_t>(kc * uk.nr), 8);
    std::memcpy(b, bv.data(), bv.size() * sizeof(float));
    // Two row groups: the prefetches are issued only when more than one group reads a panel.
    const int64_t rows = 2 * uk.mr;
    const std::vector<float> a = random_floats(static_cast<size_t>(kc * rows), 9);  // [group][kc][mr]
    std::vector<float> c(static_cast<size_t>(rows * uk.nr), 0.f);
    rt::ops::gemm_block_f32(uk, rows, kc, uk.nr, 0, 1, a.data(), b, kc * uk.nr, c.data(), uk.nr, true, 0.f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < uk.nr; ++j) {
        double want = 0, mag = 0;
        for (int64_t q = 0; q < kc; ++q) {
          const double x = static_cast<double>(a[(r / uk.mr * kc + q) * uk.mr + r % uk.mr]) * bv[q * uk.nr + j];
          want += x;
          mag += std::fabs(x);
        }
        ASSERT_LE(std::fabs(c[r * uk.nr + j] - want), 1e-6 * mag + 1e-6) << r << ", " << j;
      }
    munmap(map, static_cast<size_t>(2 * page));
  }
}

// ---- the micro kernels and the shared blocking ----------------------------------------------

TEST(GemmKernel, EachPathHasItsOwnMicroKernel) {
  for (CpuPath path : rt::supported_cpu_paths()) {
    const rt::ops::GemmMicroKernel& uk = rt::ops::gemm_micro_kernel(path);
    EXPECT_EQ(uk.path, path) << rt::cpu_path_name(path);
  }
  EXPECT_EQ(rt::ops::gemm_micro_kernel(CpuPath::Portable).mr, 4);
  if (rt::cpu_path_supported(CpuPath::Avx2)) {
    EXPECT_EQ(rt::ops::gemm_micro_kernel(CpuPath::Avx2).mr, 6);
    EXPECT_EQ(rt::ops::gemm_micro_kernel(CpuPath::Avx2).nr, 16);
  }
  if (rt::cpu_path_supported(CpuPath::Avx512)) {
    EXPECT_EQ(rt::ops::gemm_micro_kernel(CpuPath::Avx512).mr, 14);
    EXPECT_EQ(rt::ops::gemm_micro_kernel(CpuPath::Avx512).nr, 32);
  }
}

// The short-group tiles (R < mr rows: a product's last rows, a decode step's one row) give
// bitwise what the full tile gives for those rows, for every beta mode, so which one runs
// (it depends on the tiling, hence on the thread count in the tile interpreter) never shows.
TEST(GemmKernel, ShortRowTilesEqualTheFullTileBitwise) {
  for (CpuPath path : rt::supported_cpu_paths()) {
    const rt::ops::GemmMicroKernel& uk = rt::ops::gemm_micro_kernel(path);
    SCOPED_TRACE(std::string("path ") + rt::cpu_path_name(path));
    const int64_t kc = 77, cols = uk.nr - 3;
    const std::vector<float> a = random_floats(static_cast<size_t>(kc * uk.mr), 5);
    const std::vector<float> b = random_floats(static_cast<size_t>(kc * uk.nr), 6);
    const std::vector<float> c0 = random_floats(static_cast<size_t>(uk.mr * uk.nr), 7);
    int tried = 0;
    for (int64_t r = 1; r < uk.mr && r <= rt::ops::kGemmRowsTiles; ++r) {
      if (!uk.rows_tile[r - 1]) continue;
      ++tried;
      for (int mode = 0; mode < 3; ++mode) {
        const bool first = mode != 2;
        const float beta = mode == 0 ? 0.f : 0.7f;
        std::vector<float> full = c0, rows = c0;
        uk.tile(kc, a.data(), b.data(), full.data(), uk.nr, r, cols, first, beta);
        uk.rows_tile[r - 1](kc, a.data(), uk.mr, b.data(), rows.data(), uk.nr, cols, first, beta);
        EXPECT_EQ(0, std::memcmp(full.data(), rows.data(), full.size() * sizeof(float)))
            << r << " rows, mode " << mode;
      }
    }
    EXPECT_EQ(tried, std::min<int64_t>(uk.mr - 1, rt::ops::kGemmRowsTiles));
  }
}

// One rule for all tile shapes: the b micro-panel fits L1, the a block half of L2, mc a
// multiple of mr; and a tiny or absurd cache still gives usable blocks.
TEST(GemmKernel, BlockingFollowsTheTileAndTheCaches) {
  for (auto [mr, nr] : {std::pair<int64_t, int64_t>{4, 16}, {6, 16}, {14, 32}, {8, 48}})
    for (auto [l1, l2] : {std::pair<int64_t, int64_t>{32 << 10, 512 << 10}, {48 << 10, 2 << 20},
                          {32 << 10, 1 << 20}}) {
      const rt::ops::GemmBlocking bl = rt::ops::gemm_blocking_for(mr, nr, l1, l2);
      SCOPED_TRACE("tile " + std::to_string(mr) + "x" + std::to_string(nr) + " L1 " + std::to_string(l1) +
                   " L2 " + std::to_string(l2));
      EXPECT_EQ(bl.mc % mr, 0);
      EXPECT_EQ(bl.kc % 16, 0);
      EXPECT_LE(bl.kc * nr * 4, l1);
      EXPECT_LE(bl.mc * bl.kc * 4, l2 / 2);
      EXPECT_GE(bl.kc, 64);
      EXPECT_GE(bl.mc, mr);
    }
  EXPECT_EQ(rt::ops::gemm_blocking_for(6, 16, 32 << 10, 1 << 20).kc, 512);
  EXPECT_EQ(rt::ops::gemm_blocking_for(14, 32, 48 << 10, 2 << 20).kc, 384);
  const rt::ops::GemmBlocking tiny = rt::ops::gemm_blocking_for(14, 32, 1024, 4096);
  EXPECT_EQ(tiny.kc, 64);
  EXPECT_EQ(tiny.mc, 14);
}

}  // namespace
