// QuantizeLinear's 8-bit per-tensor fast path (runtime/cpu/ops/quant_rnn.cpp: float32 x, one
// scale and zero point, uint8/int8 out; every activation of a QDQ model) against the ONNX
// definition written here in double: y = saturate(round_half_even(x / scale) + zero_point),
// NaN -> 0, on ties, infinities, values far past the range and zero points at both ends; and
// per-axis scales (the general loop) for comparison on the same data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kernel_harness.h"

using namespace cuvil;

namespace {

using cuvil::testing::tensor_bytes;

// Runs QuantizeLinear(x, scale, zero) (zero_dtype Undefined: no zero point input) and returns
// y's elements as int64, or fails the test.
std::vector<int64_t> run_quantize(const std::vector<float>& x, std::vector<int64_t> xdims, const std::vector<float>& scale,
                                  DType zero_dtype, const std::vector<int64_t>& zero, int64_t axis = 1) {
  const TensorData xd = tensor_bytes(DType::Float, xdims, x.data(), x.size() * 4);
  const std::vector<int64_t> sdims = scale.size() == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{int64_t(scale.size())};
  const TensorData sd = tensor_bytes(DType::Float, sdims, scale.data(), scale.size() * 4);
  std::vector<uint8_t> zb;
  for (int64_t z : zero) zb.push_back(static_cast<uint8_t>(zero_dtype == DType::Int8 ? static_cast<int8_t>(z) : z));
  const TensorData zd = tensor_bytes(zero_dtype, sdims, zb.data(), zb.size());
  Node node;
  node.op_type = "QuantizeLinear";
  node.opset = 13;
  node.name = "q";
  node.outputs = {0};
  Attribute a;
  a.kind = Attribute::Kind::Int;
  a.i = axis;
  node.attrs["axis"] = a;
  std::vector<rt::TensorView> views = {cuvil::testing::view_of(xd), cuvil::testing::view_of(sd)};
  if (!zero.empty()) views.push_back(cuvil::testing::view_of(zd));
  std::vector<const rt::TensorView*> ptrs;
  for (const auto& v : views) ptrs.push_back(&v);
  cuvil::testing::HeapOpContext ctx(node, ptrs, 1);
  const rt::OpKernelFn fn = rt::find_op_kernel("", "QuantizeLinear");
  EXPECT_NE(fn, nullptr);
  if (!fn) return {};
  const rt::Status st = fn(ctx);
  EXPECT_TRUE(st.is_ok()) << st.message();
  if (!st.is_ok()) return {};
  const rt::TensorView& y = ctx.output(0);
  std::vector<int64_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = y.dtype == DType::Int8 ? static_cast<const int8_t*>(y.data)[i] : static_cast<const uint8_t*>(y.data)[i];
  return out;
}

int64_t reference(float x, float scale, int64_t zero, double lo, double hi) {
  const double q = std::nearbyint(static_cast<double>(x / scale));  // float division, as ONNX's float x / float scale
  if (std::isnan(q)) return 0;
  return static_cast<int64_t>(std::min(std::max(q + static_cast<double>(zero), lo), hi));
}

std::vector<float> edge_values() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.f, -0.f, 0.25f, 0.5f, 0.75f, 1.f, 1.25f, -0.25f, -0.5f, -0.75f, -1.25f, 63.5f, 64.5f,
                          -63.5f, -64.5f, 127.f, 128.f, 254.5f, 255.5f, -127.5f, -128.5f, 1e30f, -1e30f, 3e38f,
                          -3e38f, 16777217.f, -16777217.f, inf, -inf, std::nanf("")};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-400.f, 400.f);
  for (int i = 0; i < 200; ++i) v.push_back(dist(rng));
  return v;
}

TEST(QuantizeLinearKernel, PerTensorEightBitMatchesTheDefinition) {
  const std::vector<float> x = edge_values();
  const int64_t n = static_cast<int64_t>(x.size());
  struct Case {
    DType t;
    std::vector<int64_t> zero;  // empty: no zero point input (uint8, 0)
    float scale;
  };
  for (const Case& c : {Case{DType::UInt8, {}, 1.f}, Case{DType::UInt8, {128}, 0.5f}, Case{DType::UInt8, {0}, 2.f},
                        Case{DType::UInt8, {255}, 1.f}, Case{DType::Int8, {-3}, 0.5f}, Case{DType::Int8, {-128}, 1.f},
                        Case{DType::Int8, {127}, 0.25f}, Case{DType::Int8, {0}, 3.f}}) {
    const DType zt = c.zero.empty() ? DType::UInt8 : c.t;
    const double lo = c.t == DType::UInt8 ? 0 : -128, hi = c.t == DType::UInt8 ? 255 : 127;
    SCOPED_TRACE(std::string(c.t == DType::UInt8 ? "u8" : "s8") + " zero " +
                 (c.zero.empty() ? "none" : std::to_string(c.zero[0])) + " scale " + std::to_string(c.scale));
    const std::vector<int64_t> got = run_quantize(x, {n}, {c.scale}, zt, c.zero);
    ASSERT_EQ(got.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_EQ(got[i], reference(x[i], c.scale, c.zero.empty() ? 0 : c.zero[0], lo, hi)) << "x = " << x[i];
  }
}

// The same elements quantized per axis (the general loop) with every channel's scale and zero
// point equal give the per-tensor bits: the fast path changes no result.
TEST(QuantizeLinearKernel, FastPathEqualsTheGeneralLoop) {
  std::vector<float> x = edge_values();
  x.resize(x.size() / 2 * 2);
  const int64_t half = static_cast<int64_t>(x.size()) / 2;
  for (DType t : {DType::UInt8, DType::Int8}) {
    const int64_t z = t == DType::UInt8 ? 100 : -20;
    const std::vector<int64_t> fast = run_quantize(x, {2, half}, {0.75f}, t, {z});
    const std::vector<int64_t> general = run_quantize(x, {2, half}, {0.75f, 0.75f}, t, {z, z}, 0);
    ASSERT_EQ(fast.size(), x.size());
    EXPECT_EQ(fast, general);
  }
}

}  // namespace
