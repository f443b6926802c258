// The reference kernels of RMSNorm, SiLU, SwiGLU and Rotary (runtime/cpu/ops/fused_pointwise.cpp)
// against plain compositions of their definitions in ir/fused_ops.h, written here element by
// element in double, and their bad inputs with the messages they must give.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernel_harness.h"

using namespace cuvil;

namespace {

struct F32 {
  TensorData d;
  F32(std::vector<int64_t> dims, std::vector<float> v, DType t = DType::Float) {
    d.dtype = t;
    d.dims = std::move(dims);
    d.bytes.resize(v.size() * sizeof(float));
    if (!v.empty()) std::memcpy(d.bytes.data(), v.data(), d.bytes.size());
  }
  float at(int64_t i) const {
    float f;
    std::memcpy(&f, d.bytes.data() + 4 * i, 4);
    return f;
  }
};

std::vector<float> random_values(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-3.f, 3.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Attribute attr_int(int64_t v) { Attribute a; a.kind = Attribute::Kind::Int; a.i = v; return a; }
Attribute attr_float(float v) { Attribute a; a.kind = Attribute::Kind::Float; a.f = v; return a; }

struct KernelRun {
  Node node;
  std::vector<rt::TensorView> views;
  std::unique_ptr<cuvil::testing::HeapOpContext> ctx;
  rt::Status st;
  KernelRun(const std::string& op, std::vector<const F32*> ins, std::map<std::string, Attribute> attrs = {}) {
    node.op_type = op;
    node.domain = "cuvil";
    node.opset = 1;
    node.name = "fused_node";
    node.attrs = std::move(attrs);
    node.outputs = {0};
    views.reserve(ins.size());
    std::vector<const rt::TensorView*> ptrs;
    for (const F32* t : ins) {
      views.push_back(cuvil::testing::view_of(t->d));
      ptrs.push_back(&views.back());
    }
    ctx = std::make_unique<cuvil::testing::HeapOpContext>(node, ptrs, 1);
    rt::OpKernelFn fn = rt::find_op_kernel("cuvil", op);
    if (!fn) {
      st = rt::Status(rt::StatusCode::kUnsupported, "no kernel for cuvil::" + op);
      return;
    }
    st = fn(*ctx);
  }
  float out(int64_t i) const {
    float f;
    std::memcpy(&f, static_cast<const char*>(ctx->output(0).data) + 4 * i, 4);
    return f;
  }
  const std::vector<int64_t>& dims() const { return ctx->output(0).dims; }
};

void expect_close(const KernelRun& r, const std::vector<double>& expected) {
  ASSERT_TRUE(r.st.is_ok()) << r.st.message();
  ASSERT_EQ(r.ctx->output(0).numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(r.out(static_cast<int64_t>(i)), expected[i], 1e-5 + 1e-5 * std::fabs(expected[i])) << "element " << i;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

#define EXPECT_STATUS(run, kc, substr)                                              \
  do {                                                                                \
    const KernelRun& r_ = (run);                                                            \
    EXPECT_EQ(r_.st.code(), rt::StatusCode::kc) << r_.st.message();                 \
    EXPECT_NE(r_.st.message().find(substr), std::string::npos) << r_.st.message();    \
    EXPECT_NE(r_.st.message().find("fused_node"), std::string::npos) << r_.st.message(); \
  } while (0)

}  // namespace

TEST(FusedPointwiseKernel, RMSNormLastAxis) {
  const int64_t rows = 6, d = 10;
  F32 x({2, 3, d}, random_values(rows * d, 1));
  F32 w({d}, random_values(d, 2));
  const float eps = 1e-6f;
  KernelRun r("RMSNorm", {&x, &w}, {{"epsilon", attr_float(eps)}});
  std::vector<double> expected;
  for (int64_t o = 0; o < rows; ++o) {
    double ms = 0;
    for (int64_t i = 0; i < d; ++i) ms += double(x.at(o * d + i)) * x.at(o * d + i);
    ms /= d;
    for (int64_t i = 0; i < d; ++i) expected.push_back(x.at(o * d + i) / std::sqrt(ms + eps) * w.at(i));
  }
  expect_close(r, expected);
  EXPECT_EQ(r.dims(), (std::vector<int64_t>{2, 3, d}));
}

TEST(FusedPointwiseKernel, RMSNormTwoAxesBroadcastScale) {
  // axis = -2 normalises over [3, 4]; the scale [4] broadcasts over both (default epsilon).
  F32 x({2, 3, 4}, random_values(24, 3));
  F32 w({4}, random_values(4, 4));
  KernelRun r("RMSNorm", {&x, &w}, {{"axis", attr_int(-2)}});
  std::vector<double> expected;
  for (int64_t o = 0; o < 2; ++o) {
    double ms = 0;
    for (int64_t i = 0; i < 12; ++i) ms += double(x.at(o * 12 + i)) * x.at(o * 12 + i);
    ms /= 12;
    for (int64_t i = 0; i < 12; ++i) expected.push_back(x.at(o * 12 + i) / std::sqrt(ms + 1e-5) * w.at(i % 4));
  }
  expect_close(r, expected);
}

TEST(FusedPointwiseKernel, SiLUWithAlpha) {
  F32 x({3, 5}, random_values(15, 5));
  for (float alpha : {1.0f, 1.702f}) {
    KernelRun r("SiLU", {&x}, {{"alpha", attr_float(alpha)}});
    std::vector<double> expected;
    for (int64_t i = 0; i < 15; ++i) expected.push_back(x.at(i) * sigmoid(double(alpha) * x.at(i)));
    expect_close(r, expected);
  }
  KernelRun plain("SiLU", {&x});  // alpha defaults to 1
  std::vector<double> expected;
  for (int64_t i = 0; i < 15; ++i) expected.push_back(x.at(i) * sigmoid(x.at(i)));
  expect_close(plain, expected);
}

TEST(FusedPointwiseKernel, SwiGLUBroadcasts) {
  // G [2, 1, 4] and U [3, 1]: numpy broadcasting gives [2, 3, 4].
  F32 g({2, 1, 4}, random_values(8, 6));
  F32 u({3, 1}, random_values(3, 7));
  KernelRun r("SwiGLU", {&g, &u});
  std::vector<double> expected;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 4; ++c) {
        const double gv = g.at(a * 4 + c);
        expected.push_back(gv * sigmoid(gv) * u.at(b));
      }
  expect_close(r, expected);
  EXPECT_EQ(r.dims(), (std::vector<int64_t>{2, 3, 4}));
}

TEST(FusedPointwiseKernel, RotaryHalfAndInterleaved) {
  // X [2, 3, 8] (batch, position, head dim); cos/sin [3, 8] broadcast over the batch.
  const int64_t b = 2, s = 3, d = 8;
  F32 x({b, s, d}, random_values(b * s * d, 8));
  F32 c({s, d}, random_values(s * d, 9));
  F32 sn({s, d}, random_values(s * d, 10));
  for (int64_t interleaved : {0, 1}) {
    KernelRun r("Rotary", {&x, &c, &sn}, {{"interleaved", attr_int(interleaved)}});
    std::vector<double> expected;
    for (int64_t i = 0; i < b; ++i)
      for (int64_t p = 0; p < s; ++p)
        for (int64_t k = 0; k < d; ++k) {
          const int64_t row = (i * s + p) * d;
          double rot;
          if (interleaved) rot = k % 2 == 0 ? -double(x.at(row + k + 1)) : x.at(row + k - 1);
          else rot = k < d / 2 ? -double(x.at(row + k + d / 2)) : x.at(row + k - d / 2);
          expected.push_back(x.at(row + k) * double(c.at(p * d + k)) + rot * sn.at(p * d + k));
        }
    SCOPED_TRACE(interleaved);
    expect_close(r, expected);
  }
}

TEST(FusedPointwiseKernel, EmptyTensors) {
  F32 x({0, 4}, {});
  F32 w({4}, {1, 1, 1, 1});
  KernelRun rms("RMSNorm", {&x, &w});
  EXPECT_TRUE(rms.st.is_ok()) << rms.st.message();
  KernelRun silu("SiLU", {&x});
  EXPECT_TRUE(silu.st.is_ok()) << silu.st.message();
  KernelRun swiglu("SwiGLU", {&x, &w});
  EXPECT_TRUE(swiglu.st.is_ok()) << swiglu.st.message();
  KernelRun rot("Rotary", {&x, &w, &w});
  EXPECT_TRUE(rot.st.is_ok()) << rot.st.message();
}

TEST(FusedPointwiseKernel, BadInputs) {
  F32 x({2, 4}, random_values(8, 11));
  F32 w3({3}, {1, 2, 3});
  F32 f16({2, 4}, std::vector<float>(4, 0.f), DType::Float16);
  F32 odd({2, 3}, random_values(6, 12));
  F32 c5({5}, random_values(5, 13));
  F32 scalar({}, {1.f});

  EXPECT_STATUS(KernelRun("SiLU", {&f16}), kUnsupported, "input X is f16; the CPU kernel takes float32 only");
  EXPECT_STATUS(KernelRun("SwiGLU", {&x, &f16}), kUnsupported, "input U is f16");
  EXPECT_STATUS(KernelRun("RMSNorm", {&x, &w3}), kInvalidArgument, "scale [3] does not broadcast to the normalised dims [4]");
  EXPECT_STATUS(KernelRun("RMSNorm", {&x, &w3}, {{"axis", attr_int(2)}}), kInvalidArgument, "axis 2 is out of range for rank 2");
  EXPECT_STATUS(KernelRun("RMSNorm", {&x, &x}, {{"epsilon", attr_float(-1.f)}}), kInvalidArgument, "epsilon -1 is negative");
  EXPECT_STATUS(KernelRun("SwiGLU", {&x, &w3}), kInvalidArgument, "G [2,4] and U [3] do not broadcast");
  EXPECT_STATUS(KernelRun("Rotary", {&odd, &odd, &odd}), kInvalidArgument, "X [2,3] has an odd last dim");
  EXPECT_STATUS(KernelRun("Rotary", {&x, &c5, &x}), kInvalidArgument, "cos [5] does not broadcast to X [2,4]");
  EXPECT_STATUS(KernelRun("Rotary", {&x, &x, &w3}), kInvalidArgument, "sin [3] does not broadcast to X [2,4]");
  EXPECT_STATUS(KernelRun("Rotary", {&scalar, &scalar, &scalar}), kInvalidArgument, "X is a scalar");
  EXPECT_STATUS(KernelRun("Rotary", {&x, &x, &x}, {{"interleaved", attr_int(2)}}), kInvalidArgument,
                "interleaved is 2, must be 0 or 1");
  EXPECT_STATUS(KernelRun("Rotary", {&x, &x}), kInvalidArgument, "input 2 is missing");
}
