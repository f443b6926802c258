// runtime/cpu/vec_math.h: the error bounds it states, measured against double-precision std::
// functions over a dense sweep of float32 (every 521st bit pattern of each sign, about 8.2
// million inputs per function), its special values, and that every path this CPU supports gives
// the same bits as the portable one (arrays with tails, in place, and the fixed-order sums).
#include "runtime/cpu/vec_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_features.h"

namespace cuvil::rt {
namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
// The spacing of float32 at |v| (subnormal spacing below the normal range).
double ulp_at(double v) {
  v = std::fabs(v);
  if (v < std::ldexp(1.0, -126)) return std::ldexp(1.0, -149);
  int e;
  std::frexp(v, &e);
  return std::ldexp(1.0, e - 24);
}

double ref_gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double ref_gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct Fn {
  const char* name;
  std::function<void(const float*, float*, int64_t)> array;
  std::function<float(float)> scalar;
  std::function<double(double)> ref;
  double bound_ulp;
  bool floor_at_x;  // the bound is in ulps of max(|ref|, |x|) (the formulas x * f(x))
};

std::vector<Fn> functions() {
  return {
      {"exp", vm::exp, vm::exp1, [](double x) { return std::exp(x); }, 1.1, false},
      {"sigmoid", vm::sigmoid, vm::sigmoid1, ref_sigmoid, 3.0, false},
      {"tanh", vm::tanh, vm::tanh1, [](double x) { return std::tanh(x); }, 2.0, false},
      {"erf", vm::erf, vm::erf1, [](double x) { return std::erf(x); }, 3.0, false},
      {"gelu", vm::gelu, vm::gelu1, ref_gelu, 3.0, true},
      {"gelu_tanh", vm::gelu_tanh, vm::gelu_tanh1, ref_gelu_tanh, 4.0, true},
      {"silu", [](const float* x, float* y, int64_t n) { vm::silu(x, y, n, 1.0f); },
       [](float x) { return vm::silu1(x, 1.0f); }, [](double x) { return x * ref_sigmoid(x); }, 4.0, true},
  };
}

// On every path this CPU supports (each must meet the bounds by itself, whatever the
// bit-equality tests below find), plus the special values of every function on each path.
TEST(VecMath, ErrorBoundsOverDenseSweep) {
  std::vector<float> x, y;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 521) {
    const float v = from_bits(static_cast<uint32_t>(b));
    if (!std::isnan(v)) x.push_back(v);
  }
  // The edges: zeros, the smallest and largest subnormals and normals, infinities, the clamp
  // points of exp (-104, 88.75, the overflow threshold) and of erf (3.9, where it rounds to 1,
  // its 8 intervals' ends k / 2), each with its two neighbours.
  const float inf = std::numeric_limits<float>::infinity();
  for (float e : {0.0f, 1e-45f, 1.1754942e-38f, 1.17549435e-38f, 3.4028235e38f, inf, 104.0f, 88.75f, 88.7228394f,
                  87.3365448f, 103.972084f, 3.9f, 3.9192f, 5.493125f, 5.4931245f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f, 3.5f})
    for (float v : {e, -e})
      for (float w : {std::nextafter(v, -inf), v, std::nextafter(v, inf)}) x.push_back(w);
  y.resize(x.size());
  const CpuPath before = active_cpu_path();
  for (CpuPath p : supported_cpu_paths()) {
    ASSERT_TRUE(set_cpu_path_for_testing(p));
    for (const Fn& f : functions()) {
      f.array(x.data(), y.data(), static_cast<int64_t>(x.size()));
      double worst = 0;
      float worst_x = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double r = f.ref(x[i]);
        // The reference rounded to float is what a correctly rounded function returns: overflow
        // to inf and underflow to 0 must match exactly.
        const float rf = static_cast<float>(r);
        if (std::isinf(rf) || std::isnan(rf)) {
          if (!(to_bits(y[i]) == to_bits(rf) || (std::isnan(rf) && std::isnan(y[i]))))
            ADD_FAILURE() << f.name << "(" << x[i] << ") = " << y[i] << ", expected " << rf << " on "
                          << cpu_path_name(p);
          continue;
        }
        double scale = std::fabs(r);
        if (f.floor_at_x) scale = std::max(scale, std::fabs(static_cast<double>(x[i])));
        double err = std::fabs(static_cast<double>(y[i]) - r) / ulp_at(scale);
        if (std::isnan(err)) err = HUGE_VAL;  // a NaN where the reference is finite
        if (err > worst) worst = err, worst_x = x[i];
      }
      std::printf("vec_math %-9s path %-8s max error %.3f ulp (at x = %.9g)\n", f.name, cpu_path_name(p), worst,
                  worst_x);
      EXPECT_LE(worst, f.bound_ulp) << f.name << " at x = " << worst_x << " on " << cpu_path_name(p);
    }
  }
  ASSERT_TRUE(set_cpu_path_for_testing(before));
}

TEST(VecMath, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(vm::exp1(inf), inf);
  EXPECT_EQ(to_bits(vm::exp1(-inf)), 0u);
  EXPECT_EQ(vm::exp1(0.0f), 1.0f);
  EXPECT_EQ(vm::exp1(-0.0f), 1.0f);
  EXPECT_EQ(vm::exp1(88.72f), std::exp(88.72f));
  EXPECT_EQ(vm::exp1(88.7229f), inf);
  EXPECT_EQ(vm::exp1(1000.0f), inf);
  EXPECT_EQ(to_bits(vm::exp1(-104.0f)), 0u);
  EXPECT_EQ(vm::exp1(-100.0f), static_cast<float>(std::exp(-100.0)));  // subnormal, rounded once
  EXPECT_EQ(vm::exp1(-87.5f), static_cast<float>(std::exp(-87.5)));
  EXPECT_EQ(vm::sigmoid1(inf), 1.0f);
  EXPECT_EQ(to_bits(vm::sigmoid1(-inf)), 0u);
  EXPECT_EQ(vm::sigmoid1(0.0f), 0.5f);
  EXPECT_EQ(vm::tanh1(inf), 1.0f);
  EXPECT_EQ(vm::tanh1(-inf), -1.0f);
  EXPECT_EQ(to_bits(vm::tanh1(-0.0f)), to_bits(-0.0f));
  EXPECT_EQ(to_bits(vm::tanh1(0.0f)), 0u);
  EXPECT_EQ(vm::tanh1(1e-30f), 1e-30f);
  EXPECT_EQ(vm::tanh1(-1e-40f), -1e-40f);  // subnormal
  EXPECT_EQ(vm::tanh1(10.0f), 1.0f);
  EXPECT_EQ(vm::erf1(inf), 1.0f);
  EXPECT_EQ(vm::erf1(-inf), -1.0f);
  EXPECT_EQ(vm::erf1(4.0f), 1.0f);
  EXPECT_EQ(vm::erf1(-1e30f), -1.0f);
  EXPECT_EQ(to_bits(vm::erf1(-0.0f)), to_bits(-0.0f));
  for (float tiny : {1e-30f, -1e-40f, 1e-44f})  // x times 2/sqrt(pi) rounded: within an ulp
    EXPECT_LE(std::fabs(vm::erf1(tiny) - std::erf(static_cast<double>(tiny))), ulp_at(tiny)) << tiny;
  EXPECT_LE(std::fabs(vm::erf1(3.9192f) - std::erf(3.9192)), ulp_at(1.0));  // 1 - 2^-24 rounded: 1
  EXPECT_EQ(vm::erf1(3.9193f), 1.0f);  // erf rounds to 1 from 3.91921 on
  EXPECT_EQ(vm::erf1(-3.92f), -1.0f);
  EXPECT_EQ(vm::gelu1(inf), inf);
  EXPECT_EQ(vm::gelu1(0.0f), 0.0f);
  EXPECT_EQ(vm::silu1(inf, 1.0f), inf);
  EXPECT_EQ(to_bits(vm::sigmoid1(-100.0f)), to_bits(static_cast<float>(1 / (1 + std::exp(100.0)))));
  EXPECT_EQ(to_bits(vm::sigmoid1(-88.7236557f)), to_bits(static_cast<float>(1 / (1 + std::exp(88.7236557)))));
  // x * f(x) at -inf is -inf * 0: NaN, as the unfused ONNX graph (Mul of x and Sigmoid) gives.
  EXPECT_TRUE(std::isnan(vm::silu1(-inf, 1.0f)));
  EXPECT_TRUE(std::isnan(vm::gelu1(-inf)));
  const float payload = from_bits(0xffc01234u);
  for (auto* f : {vm::exp1, vm::sigmoid1, vm::tanh1, vm::erf1}) EXPECT_EQ(to_bits(f(payload)), 0xffc01234u);
  // gelu returns x's NaN (its own single-branch form carries only that NaN); the other composed
  // functions return the canonical quiet NaN whatever NaN arises.
  EXPECT_EQ(to_bits(vm::gelu1(nan)), to_bits(nan));
  EXPECT_EQ(to_bits(vm::gelu1(payload)), 0xffc01234u);
  EXPECT_EQ(to_bits(vm::gelu_tanh1(nan)), 0x7fc00000u);
  EXPECT_EQ(to_bits(vm::gelu_tanh1(payload)), 0x7fc00000u);
  EXPECT_EQ(to_bits(vm::gelu1(-0.0f)), to_bits(-0.0f));
  EXPECT_EQ(to_bits(vm::gelu1(-1e30f)), to_bits(-0.0f));  // x * 0
  EXPECT_EQ(vm::gelu1(1e30f), 1e30f);
  EXPECT_EQ(vm::gelu1(5.5f), 5.5f);  // Phi(5.5) rounds to 1
  EXPECT_EQ(vm::gelu1(1e-30f), 0.5e-30f);
  EXPECT_EQ(to_bits(vm::silu1(-inf, 1.0f)), 0x7fc00000u);
  EXPECT_EQ(to_bits(vm::swiglu1(1.0f, payload)), 0x7fc00000u);
  EXPECT_EQ(to_bits(vm::swiglu1(-inf, 2.0f)), 0x7fc00000u);
}

// Inputs that reach every branch: specials, both signs, the branch boundaries, a spread of
// magnitudes; odd lengths so every path runs its tail.
std::vector<float> probe_inputs() {
  std::vector<float> v = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                          1e-40f, -1e-40f, 0.625f, -0.625f, 0.5f, -1.5f, 3.5f, 3.9f, 3.9000001f, -3.92f,
                          0.49999997f, 88.72f, 88.73f, 88.75f, 88.76f, -103.9f, -104.0f, -104.1f, -87.5f, -100.0f};
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65537 * 3) v.push_back(from_bits(static_cast<uint32_t>(b)));
  for (int i = -20000; i <= 20000; ++i) v.push_back(static_cast<float>(i) * 0.00113f);
  v.push_back(1.0f);  // an odd length
  return v;
}

TEST(VecMath, EveryPathGivesThePortableBits) {
  const std::vector<float> x = probe_inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  ASSERT_NE(n % 16, 0);
  const CpuPath before = active_cpu_path();
  std::vector<float> b(x.rbegin(), x.rend());
  for (CpuPath p : supported_cpu_paths()) {
    ASSERT_TRUE(set_cpu_path_for_testing(p));
    SCOPED_TRACE(cpu_path_name(p));
    std::vector<float> y(x.size());
    for (const Fn& f : functions()) {
      f.array(x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(to_bits(y[i]), to_bits(f.scalar(x[i]))) << f.name << "(" << x[i] << ") element " << i;
      std::vector<float> inplace = x;  // y may equal x
      f.array(inplace.data(), inplace.data(), n);
      ASSERT_EQ(std::memcmp(inplace.data(), y.data(), y.size() * sizeof(float)), 0) << f.name << " in place";
    }
    vm::silu(x.data(), y.data(), n, -1.7f);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(to_bits(y[i]), to_bits(vm::silu1(x[i], -1.7f))) << i;
    vm::swiglu(x.data(), b.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(to_bits(y[i]), to_bits(vm::swiglu1(x[i], b[i]))) << i;
  }
  ASSERT_TRUE(set_cpu_path_for_testing(before));
}

TEST(VecMath, SumsAreTheSameOnEveryPath) {
  std::vector<float> x;
  for (int i = 0; i < 1000 + 13; ++i) x.push_back(std::sin(static_cast<float>(i) * 0.37f) * 3.0f + 0.01f * i);
  const std::vector<float> scale(x.rbegin(), x.rend());
  std::vector<float> bias(x.begin() + 1, x.end());  // x shifted by one, as long as x (every n reads it)
  bias.push_back(x.front());
  // Every result's bits, for lengths around the 16-lane blocks and with tails.
  auto collect = [&] {
    std::vector<uint32_t> got;
    for (int64_t n : {0, 1, 15, 16, 17, 768, 1013}) {
      std::vector<float> y(static_cast<size_t>(n));
      got.push_back(to_bits(vm::exp_sub_sum(x.data(), 2.5f, y.data(), n)));
      for (int64_t i = 0; i < n; ++i) {
        got.push_back(to_bits(y[i]));
        EXPECT_EQ(to_bits(y[i]), to_bits(vm::exp1(x[i] - 2.5f)));
      }
      got.push_back(to_bits(vm::sum(x.data(), n)));
      float s, q;
      vm::shifted_moments(x.data(), n, 0.75f, &s, &q);
      got.push_back(to_bits(s));
      got.push_back(to_bits(q));
      double ds = 0, dq = 0;  // the sums' accuracy (fixed order, in float)
      for (int64_t i = 0; i < n; ++i) ds += x[i] - 0.75, dq += (x[i] - 0.75) * (x[i] - 0.75);
      EXPECT_NEAR(s, ds, 1e-5 * (1 + std::sqrt(dq)));
      EXPECT_NEAR(q, dq, 1e-5 * (1 + dq));
      vm::normalize_affine(x.data(), y.data(), n, 0.3f, 1.7f, scale.data(), bias.data());
      for (int64_t i = 0; i < n; ++i) {
        got.push_back(to_bits(y[i]));
        EXPECT_EQ(to_bits(y[i]), to_bits(std::fma((x[i] - 0.3f) * 1.7f, scale[i], bias[i])));
      }
      vm::normalize_affine(x.data(), y.data(), n, 0.3f, 1.7f, scale.data(), nullptr);
      for (int64_t i = 0; i < n; ++i) got.push_back(to_bits(y[i]));
    }
    return got;
  };
  const CpuPath before = active_cpu_path();
  ASSERT_TRUE(set_cpu_path_for_testing(CpuPath::Portable));
  const std::vector<uint32_t> portable = collect();
  for (CpuPath p : supported_cpu_paths()) {
    ASSERT_TRUE(set_cpu_path_for_testing(p));
    EXPECT_EQ(collect(), portable) << cpu_path_name(p);
  }
  ASSERT_TRUE(set_cpu_path_for_testing(before));
}

// exp's last step (p * 2^n, two exact multiplies on the portable and AVX2 paths, vscalefps on
// AVX-512) gives the same bits on every path where it matters most: results that are
// subnormal, that underflow to 0 and that overflow (x in [-105, -86] and [88, 89], every 7th
// float, about 330 thousand inputs).
TEST(VecMath, ExpScalingEqualOnEveryPathNearUnderflowAndOverflow) {
  std::vector<float> x;
  for (float v = -105.0f; v < -86.0f; v = std::nextafter(v, 0.0f)) {
    x.push_back(v);
    for (int k = 0; k < 6; ++k) v = std::nextafter(v, 0.0f);
  }
  for (float v = 88.0f; v < 89.0f; v = std::nextafter(v, 100.0f)) {
    x.push_back(v);
    for (int k = 0; k < 6; ++k) v = std::nextafter(v, 100.0f);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size());
  const CpuPath before = active_cpu_path();
  for (CpuPath p : supported_cpu_paths()) {
    ASSERT_TRUE(set_cpu_path_for_testing(p));
    vm::exp(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(to_bits(y[i]), to_bits(vm::exp1(x[i]))) << cpu_path_name(p) << " exp(" << x[i] << ")";
  }
  ASSERT_TRUE(set_cpu_path_for_testing(before));
}

// Softmax's row maximum and scale (vm::max, vm::scale) equal their scalar loops bit for bit on
// every path: NaN exactly when the first element is NaN (a later NaN is skipped), the first of
// equal zeros kept where the loop keeps it, infinities, lengths around the vector widths.
TEST(VecMath, MaxAndScaleEqualTheScalarLoops) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows;
  for (int64_t n : {1, 7, 15, 16, 17, 33, 768, 1013}) {
    std::vector<float> x;
    for (int64_t i = 0; i < n; ++i) x.push_back(std::sin(static_cast<float>(i) * 1.37f) * 3.0f - 0.5f);
    rows.push_back(x);
    x[static_cast<size_t>(n / 2)] = nan;  // a NaN after the first element: skipped
    rows.push_back(x);
    x[0] = nan;  // a NaN first: the result
    rows.push_back(x);
    std::vector<float> z(static_cast<size_t>(n), -inf);
    rows.push_back(z);
    z[static_cast<size_t>(n - 1)] = 0.0f;
    z[0] = -0.0f;
    rows.push_back(z);
    for (float& v : z) v = -v;
    rows.push_back(z);
  }
  const CpuPath before = active_cpu_path();
  for (CpuPath p : supported_cpu_paths()) {
    ASSERT_TRUE(set_cpu_path_for_testing(p));
    for (const std::vector<float>& x : rows) {
      const int64_t n = static_cast<int64_t>(x.size());
      float want = x[0];
      for (int64_t i = 1; i < n; ++i) want = x[i] > want ? x[i] : want;
      EXPECT_EQ(to_bits(vm::max(x.data(), n)), to_bits(want)) << cpu_path_name(p) << ", n = " << n;
      std::vector<float> y(x.size());
      vm::scale(x.data(), 0.37f, y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(to_bits(y[i]), to_bits(x[i] * 0.37f)) << cpu_path_name(p) << ", n = " << n << ", i = " << i;
    }
    EXPECT_EQ(vm::max(nullptr, 0), -inf);
  }
  ASSERT_TRUE(set_cpu_path_for_testing(before));
}

}  // namespace
}  // namespace cuvil::rt
