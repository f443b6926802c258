// The float32 LayerNormalization and Softmax kernels (runtime/cpu/ops/nn.cpp, reduce.cpp) that
// compute in float with runtime/cpu/vec_math.h (single pass, fixed-order sums) against double
// references, on the rows that stress a float single pass: a mean far from zero relative to
// the spread (LayerNorm's E[d^2] - E[d]^2), long rows (a 32000-entry vocabulary softmax), and
// lengths that leave vector tails; and the same bits on every CPU path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernel_harness.h"
#include "runtime/cpu/cpu_features.h"

using namespace cuvil;

namespace {

TensorData f32(std::vector<int64_t> dims, const std::vector<float>& v) {
  TensorData d;
  d.dtype = DType::Float;
  d.dims = std::move(dims);
  d.bytes.resize(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(d.bytes.data(), v.data(), d.bytes.size());
  return d;
}

Attribute attr_int(int64_t v) { Attribute a; a.kind = Attribute::Kind::Int; a.i = v; return a; }
Attribute attr_float(float v) { Attribute a; a.kind = Attribute::Kind::Float; a.f = v; return a; }

// Runs ONNX op `op` (opset `opset`) on `ins`; returns output 0 as floats.
std::vector<float> run_op(const std::string& op, int opset, const std::vector<const TensorData*>& ins,
                          std::map<std::string, Attribute> attrs) {
  Node node;
  node.op_type = op;
  node.opset = opset;
  node.name = "norm_node";
  node.attrs = std::move(attrs);
  node.outputs = {0};
  std::vector<rt::TensorView> views;
  views.reserve(ins.size());
  std::vector<const rt::TensorView*> ptrs;
  for (const TensorData* t : ins) {
    views.push_back(cuvil::testing::view_of(*t));
    ptrs.push_back(&views.back());
  }
  cuvil::testing::HeapOpContext ctx(node, ptrs, 1);
  rt::OpKernelFn fn = rt::find_op_kernel("", op);
  EXPECT_NE(fn, nullptr);
  if (!fn) return {};
  rt::Status st = fn(ctx);
  EXPECT_TRUE(st.is_ok()) << st.message();
  std::vector<float> out(static_cast<size_t>(ctx.output(0).numel()));
  if (!out.empty()) std::memcpy(out.data(), ctx.output(0).data, out.size() * sizeof(float));
  return out;
}

TEST(NormKernels, FloatLayerNormMatchesDoubleWithAFarMean) {
  std::mt19937 rng(3);
  for (int64_t cols : {768, 13, 1}) {
    const int64_t rows = 6;
    std::vector<float> x, scale, bias;
    for (int64_t r = 0; r < rows; ++r) {
      const float center = r % 3 == 0 ? 1000.f : (r % 3 == 1 ? -3.f : 0.f);
      std::normal_distribution<float> d(center, r == 2 ? 1e-3f : 1.f);
      for (int64_t c = 0; c < cols; ++c) x.push_back(d(rng));
    }
    for (int64_t c = 0; c < cols; ++c) scale.push_back(0.5f + 0.01f * c), bias.push_back(0.1f * (c % 5));
    const TensorData tx = f32({rows, cols}, x), ts = f32({cols}, scale), tb = f32({cols}, bias);
    const std::vector<float> y = run_op("LayerNormalization", 17, {&tx, &ts, &tb},
                                        {{"axis", attr_int(-1)}, {"epsilon", attr_float(1e-5f)}});
    ASSERT_EQ(y.size(), x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t c = 0; c < cols; ++c) mean += x[r * cols + c];
      mean /= cols;
      for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
      var /= cols;
      for (int64_t c = 0; c < cols; ++c) {
        const double want = (x[r * cols + c] - mean) / std::sqrt(var + 1e-5) * scale[c] + bias[c];
        ASSERT_NEAR(y[r * cols + c], want, 2e-4 * (1 + std::fabs(want))) << "row " << r << " col " << c << " of " << cols;
      }
    }
    // The same bits on every path.
    const rt::CpuPath before = rt::active_cpu_path();
    for (rt::CpuPath p : rt::supported_cpu_paths()) {
      ASSERT_TRUE(rt::set_cpu_path_for_testing(p));
      EXPECT_EQ(run_op("LayerNormalization", 17, {&tx, &ts, &tb}, {{"axis", attr_int(-1)}, {"epsilon", attr_float(1e-5f)}}),
                y) << rt::cpu_path_name(p);
    }
    ASSERT_TRUE(rt::set_cpu_path_for_testing(before));
  }
}

TEST(NormKernels, FloatSoftmaxAndLogSoftmaxMatchDouble) {
  std::mt19937 rng(4);
  for (int64_t cols : {32000, 768, 17, 1}) {
    std::normal_distribution<float> d(0.f, 4.f);
    std::vector<float> x;
    for (int64_t i = 0; i < 2 * cols; ++i) x.push_back(d(rng));
    const TensorData tx = f32({2, cols}, x);
    for (const char* op : {"Softmax", "LogSoftmax"}) {
      SCOPED_TRACE(std::string(op) + " over " + std::to_string(cols));
      const std::vector<float> y = run_op(op, 13, {&tx}, {{"axis", attr_int(-1)}});
      ASSERT_EQ(y.size(), x.size());
      for (int64_t r = 0; r < 2; ++r) {
        double m = -INFINITY, sum = 0;
        for (int64_t c = 0; c < cols; ++c) m = std::max(m, static_cast<double>(x[r * cols + c]));
        for (int64_t c = 0; c < cols; ++c) sum += std::exp(x[r * cols + c] - m);
        for (int64_t c = 0; c < cols; ++c) {
          const double v = x[r * cols + c] - m;
          const double want = std::string(op) == "Softmax" ? std::exp(v) / sum : v - std::log(sum);
          ASSERT_NEAR(y[r * cols + c], want, 1e-5 * std::fabs(want) + 1e-6) << "element " << c;
        }
      }
      const rt::CpuPath before = rt::active_cpu_path();
      for (rt::CpuPath p : rt::supported_cpu_paths()) {
        ASSERT_TRUE(rt::set_cpu_path_for_testing(p));
        EXPECT_EQ(run_op(op, 13, {&tx}, {{"axis", attr_int(-1)}}), y) << rt::cpu_path_name(p);
      }
      ASSERT_TRUE(rt::set_cpu_path_for_testing(before));
    }
  }
}

TEST(NormKernels, SoftmaxOfAllMinusInfinityIsNaN) {
  const TensorData tx = f32({1, 20}, std::vector<float>(20, -INFINITY));
  for (float v : run_op("Softmax", 13, {&tx}, {{"axis", attr_int(-1)}})) EXPECT_TRUE(std::isnan(v));
}

}  // namespace
