// cuvil::FusedMatMul and cuvil::FusedConv kernels (runtime/cpu/ops/fused_linear.cpp) through
// the heap harness, each case against the plain ONNX kernels it replaces run one after another
// (Transpose, MatMul, Mul, Add, Conv and the activation's own op): every activation, transposes,
// alpha, batch broadcasting, bias and residual broadcasting, groups and depthwise convolution,
// double tensors; FusedConv layout = "NHWC" against the NCHW kernel on transposed tensors (every
// CPU path); and bad inputs, whose statuses must name the problem (suite FusedLinearKernel).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "kernel_harness.h"
#include "runtime/cpu/cpu_features.h"

using namespace cuvil;

namespace {

TensorData random_tensor(std::vector<int64_t> dims, uint32_t seed, DType dtype = DType::Float) {
  TensorData t;
  t.dtype = dtype;
  t.dims = dims;
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  t.bytes.resize(static_cast<size_t>(n) * (dtype == DType::Double ? 8 : 4));
  for (int64_t i = 0; i < n; ++i) {
    const double v = dist(gen);
    if (dtype == DType::Double) std::memcpy(t.bytes.data() + i * 8, &v, 8);
    else {
      const float f = static_cast<float>(v);
      std::memcpy(t.bytes.data() + i * 4, &f, 4);
    }
  }
  return t;
}

TensorData scalar(float v, std::vector<int64_t> dims = {}) {
  TensorData t;
  t.dtype = DType::Float;
  t.dims = dims;
  t.bytes.resize(4);
  std::memcpy(t.bytes.data(), &v, 4);
  return t;
}

Attribute attr_int(int64_t v) { Attribute a; a.kind = Attribute::Kind::Int; a.i = v; return a; }
Attribute attr_float(float v) { Attribute a; a.kind = Attribute::Kind::Float; a.f = v; return a; }
Attribute attr_str(std::string v) { Attribute a; a.kind = Attribute::Kind::String; a.s = v; return a; }
Attribute attr_ints(std::vector<int64_t> v) { Attribute a; a.kind = Attribute::Kind::Ints; a.ints = v; return a; }

struct Result {
  rt::Status st;
  TensorData out;
};

// Runs one kernel; omitted optional inputs are null.
Result run(const std::string& domain, const std::string& op, int opset, std::map<std::string, Attribute> attrs,
           std::vector<const TensorData*> inputs, int threads = 1) {
  Node node;
  node.op_type = op;
  node.domain = domain;
  node.opset = opset;
  node.name = "n_" + op;
  node.attrs = std::move(attrs);
  node.outputs.push_back(0);
  std::vector<rt::TensorView> views(inputs.size());
  std::vector<const rt::TensorView*> ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i]) views[i] = cuvil::testing::view_of(*inputs[i]);
    ptrs.push_back(inputs[i] ? &views[i] : nullptr);
  }
  cuvil::testing::HeapOpContext ctx(node, ptrs, 1, threads);
  Result r;
  rt::OpKernelFn fn = rt::find_op_kernel(domain, op);
  r.st = fn ? fn(ctx) : rt::Status(rt::StatusCode::kUnsupported, "no kernel for " + op);
  if (r.st.is_ok()) {
    const rt::TensorView& o = ctx.output(0);
    r.out.dtype = o.dtype;
    r.out.dims = o.dims;
    r.out.bytes.assign(static_cast<const uint8_t*>(o.data), static_cast<const uint8_t*>(o.data) + o.bytes());
  }
  return r;
}

TensorData ok(const Result& r) {
  EXPECT_TRUE(r.st.is_ok()) << r.st.message();
  return r.out;
}

void expect_close(const TensorData& got, const TensorData& want, double rtol = 1e-5, double atol = 1e-5) {
  ASSERT_EQ(got.dims, want.dims);
  ASSERT_EQ(got.dtype, want.dtype);
  ASSERT_GT(want.numel(), 0);
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.float_at(i), w = want.float_at(i);
    ASSERT_LE(std::fabs(g - w), atol + rtol * std::fabs(w)) << "element " << i << ": " << g << " vs " << w;
  }
}

// The activation as its ONNX op(s), applied to x.
TensorData reference_activation(const std::string& act, const TensorData& x, float alpha, float beta) {
  if (act.empty()) return x;
  if (act == "relu") return ok(run("", "Relu", 14, {}, {&x}));
  if (act == "sigmoid") return ok(run("", "Sigmoid", 13, {}, {&x}));
  if (act == "tanh") return ok(run("", "Tanh", 13, {}, {&x}));
  if (act == "gelu") return ok(run("", "Gelu", 20, {{"approximate", attr_str("none")}}, {&x}));
  if (act == "gelu_tanh") return ok(run("", "Gelu", 20, {{"approximate", attr_str("tanh")}}, {&x}));
  if (act == "leaky_relu") return ok(run("", "LeakyRelu", 16, {{"alpha", attr_float(alpha)}}, {&x}));
  if (act == "clip") {
    const TensorData lo = scalar(alpha), hi = scalar(beta);
    return ok(run("", "Clip", 13, {}, {&x, &lo, &hi}));
  }
  if (act == "silu") {
    const TensorData s = ok(run("", "Sigmoid", 13, {}, {&x}));
    return ok(run("", "Mul", 14, {}, {&x, &s}));
  }
  ADD_FAILURE() << "no reference for activation " << act;
  return x;
}

TensorData swap_last_two(const TensorData& t) {
  std::vector<int64_t> perm;
  const int64_t r = static_cast<int64_t>(t.dims.size());
  for (int64_t d = 0; d < r - 2; ++d) perm.push_back(d);
  perm.push_back(r - 1);
  perm.push_back(r - 2);
  return ok(run("", "Transpose", 13, {{"perm", attr_ints(perm)}}, {&t}));
}

struct MatMulCase {
  std::vector<int64_t> a, b;   // stored dims
  bool ta = false, tb = false;
  float alpha = 1.f;
  std::vector<int64_t> bias, residual;  // empty: absent
  std::string act;
  float act_alpha = 0.f, act_beta = 0.f;
  DType dtype = DType::Float;
  int threads = 1;  // > 1: the batches are split over the workers
};

void check_fused_matmul(const MatMulCase& c) {
  SCOPED_TRACE("activation '" + c.act + "'");
  const TensorData a = random_tensor(c.a, 1, c.dtype), b = random_tensor(c.b, 2, c.dtype);
  const TensorData bias = random_tensor(c.bias, 3, c.dtype), res = random_tensor(c.residual, 4, c.dtype);
  std::map<std::string, Attribute> attrs;
  if (c.ta) attrs["transA"] = attr_int(1);
  if (c.tb) attrs["transB"] = attr_int(1);
  if (c.alpha != 1.f) attrs["alpha"] = attr_float(c.alpha);
  if (!c.act.empty()) attrs["activation"] = attr_str(c.act);
  attrs["activation_alpha"] = attr_float(c.act_alpha);
  attrs["activation_beta"] = attr_float(c.act_beta);
  const bool has_bias = !c.bias.empty();
  const bool has_res = !c.residual.empty();
  std::vector<const TensorData*> in = {&a, &b, has_bias ? &bias : nullptr, has_res ? &res : nullptr};
  const TensorData got = ok(run("cuvil", "FusedMatMul", 1, attrs, in, c.threads));

  const TensorData at = c.ta ? swap_last_two(a) : a, bt = c.tb ? swap_last_two(b) : b;
  TensorData y = ok(run("", "MatMul", 13, {}, {&at, &bt}));
  if (c.alpha != 1.f) {
    TensorData s = scalar(c.alpha);
    if (c.dtype == DType::Double) {
      const double d = c.alpha;
      s.dtype = DType::Double;
      s.bytes.resize(8);
      std::memcpy(s.bytes.data(), &d, 8);
    }
    y = ok(run("", "Mul", 14, {}, {&y, &s}));
  }
  if (has_bias) y = ok(run("", "Add", 14, {}, {&y, &bias}));
  if (has_res) y = ok(run("", "Add", 14, {}, {&y, &res}));
  y = reference_activation(c.act, y, c.act_alpha, c.act_beta);
  expect_close(got, y);
}

TEST(FusedLinearKernel, MatMulEveryActivation) {
  const std::vector<std::pair<std::string, std::pair<float, float>>> acts = {
      {"", {0, 0}},         {"relu", {0, 0}},       {"clip", {-0.5f, 1.5f}}, {"sigmoid", {0, 0}},
      {"tanh", {0, 0}},     {"silu", {0, 0}},       {"gelu", {0, 0}},        {"gelu_tanh", {0, 0}},
      {"leaky_relu", {0.2f, 0}}};
  for (const auto& [act, ab] : acts) {
    MatMulCase c;
    c.a = {5, 7};
    c.b = {7, 6};
    c.bias = {6};
    c.act = act;
    c.act_alpha = ab.first;
    c.act_beta = ab.second;
    check_fused_matmul(c);
  }
}

TEST(FusedLinearKernel, MatMulTransposesAlphaAndBatchBroadcasting) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      MatMulCase c;
      c.a = ta ? std::vector<int64_t>{2, 1, 9, 4} : std::vector<int64_t>{2, 1, 4, 9};
      c.b = tb ? std::vector<int64_t>{3, 20, 9} : std::vector<int64_t>{3, 9, 20};
      c.ta = ta;
      c.tb = tb;
      c.alpha = 0.125f;
      c.bias = {20};
      c.residual = {3, 1, 20};  // broadcasts over batch 0 and the rows
      c.act = "gelu";
      check_fused_matmul(c);
    }
  // A product large enough for the packed GEMM path (not the small-product loop).
  MatMulCase big;
  big.a = {2, 33, 70};
  big.b = {50, 70};
  big.tb = true;
  big.bias = {1, 50};
  big.residual = {2, 33, 50};
  big.act = "relu";
  check_fused_matmul(big);
  // Many batches of their own B (attention-like), split over workers.
  MatMulCase heads;
  heads.a = {2, 6, 5, 8};
  heads.b = {2, 6, 5, 8};
  heads.tb = true;
  heads.alpha = 0.25f;
  heads.residual = {2, 1, 1, 5};
  heads.threads = 4;
  check_fused_matmul(heads);
}

TEST(FusedLinearKernel, MatMulDoubleAndNoEpilogue) {
  MatMulCase c;
  c.a = {3, 4};
  c.b = {4, 5};
  c.bias = {5};
  c.residual = {3, 5};
  c.act = "tanh";
  c.dtype = DType::Double;
  check_fused_matmul(c);
  MatMulCase plain;
  plain.a = {6, 3, 8};
  plain.b = {8, 2};
  check_fused_matmul(plain);
}

// NaN in the accumulator stays NaN through every activation, as through the ONNX ops (the
// relu of ir/fused_ops.h's apply_activation alone would give 0).
TEST(FusedLinearKernel, NaNPropagatesThroughTheActivation) {
  TensorData a = random_tensor({2, 3}, 1);
  const float nan = NAN;
  std::memcpy(a.bytes.data(), &nan, 4);  // row 0 of the product is NaN
  const TensorData b = random_tensor({3, 4}, 2);
  for (const char* act : {"relu", "clip", "leaky_relu", "sigmoid", "gelu"}) {
    const TensorData y = ok(run("cuvil", "FusedMatMul", 1,
                                {{"activation", attr_str(act)}, {"activation_alpha", attr_float(0.f)},
                                 {"activation_beta", attr_float(6.f)}},
                                {&a, &b}));
    ASSERT_EQ(y.numel(), 8);
    for (int64_t j = 0; j < 4; ++j) EXPECT_TRUE(std::isnan(y.float_at(j))) << act << " element " << j;
    EXPECT_FALSE(std::isnan(y.float_at(4))) << act;
  }
}

struct ConvCase {
  std::vector<int64_t> x, w;
  std::map<std::string, Attribute> attrs;
  bool bias = true;
  bool residual = true;
  std::vector<int64_t> residual_dims;  // default: the output's
  std::string act;
  float act_alpha = 0.f, act_beta = 0.f;
};

void check_fused_conv(const ConvCase& c) {
  SCOPED_TRACE("activation '" + c.act + "'");
  const TensorData x = random_tensor(c.x, 5), w = random_tensor(c.w, 6), b = random_tensor({c.w[0]}, 7);
  TensorData y = ok(run("", "Conv", 11, c.attrs, {&x, &w, c.bias ? &b : nullptr}));
  const TensorData res = random_tensor(c.residual_dims.empty() ? y.dims : c.residual_dims, 8);
  std::map<std::string, Attribute> attrs = c.attrs;
  if (!c.act.empty()) attrs["activation"] = attr_str(c.act);
  attrs["activation_alpha"] = attr_float(c.act_alpha);
  attrs["activation_beta"] = attr_float(c.act_beta);
  const TensorData got =
      ok(run("cuvil", "FusedConv", 1, attrs, {&x, &w, c.bias ? &b : nullptr, c.residual ? &res : nullptr}));
  if (c.residual) y = ok(run("", "Add", 14, {}, {&y, &res}));
  y = reference_activation(c.act, y, c.act_alpha, c.act_beta);
  expect_close(got, y);
}

TEST(FusedLinearKernel, ConvResidualAndActivations) {
  for (const char* act : {"", "relu", "clip", "sigmoid", "silu", "leaky_relu"}) {
    ConvCase c;
    c.x = {2, 3, 9, 8};
    c.w = {8, 3, 3, 3};
    c.attrs = {{"pads", attr_ints({1, 1, 1, 1})}, {"strides", attr_ints({2, 1})}};
    c.act = act;
    c.act_alpha = std::string(act) == "clip" ? 0.f : 0.1f;
    c.act_beta = 6.f;
    check_fused_conv(c);
  }
}

TEST(FusedLinearKernel, ConvGroupsDepthwiseDilationsAndBroadcastResidual) {
  ConvCase grouped;  // two groups of 4 output channels each (im2col + GEMM per group)
  grouped.x = {1, 6, 7, 7};
  grouped.w = {8, 3, 3, 3};
  grouped.attrs = {{"group", attr_int(2)}, {"dilations", attr_ints({2, 2})}, {"auto_pad", attr_str("SAME_UPPER")}};
  grouped.act = "relu";
  check_fused_conv(grouped);
  ConvCase depthwise;  // MobileNet's 3x3 depthwise conv with Relu6 (the direct path)
  depthwise.x = {2, 5, 8, 8};
  depthwise.w = {5, 1, 3, 3};
  depthwise.attrs = {{"group", attr_int(5)}, {"pads", attr_ints({1, 1, 1, 1})}, {"strides", attr_ints({2, 2})}};
  depthwise.act = "clip";
  depthwise.act_beta = 6.f;
  depthwise.residual = false;
  check_fused_conv(depthwise);
  ConvCase pointwise;  // 1x1, no bias, a residual broadcast over the batch and width
  pointwise.x = {2, 4, 5, 6};
  pointwise.w = {3, 4, 1, 1};
  pointwise.bias = false;
  pointwise.residual_dims = {3, 5, 1};
  pointwise.act = "tanh";
  check_fused_conv(pointwise);
}

// ---- FusedConv layout = "NHWC" ----------------------------------------------------------------

TensorData permute(const TensorData& t, std::vector<int64_t> perm) {
  return ok(run("", "Transpose", 13, {{"perm", attr_ints(perm)}}, {&t}));
}
std::vector<int64_t> to_nhwc(size_t r) {
  std::vector<int64_t> p = {0};
  for (size_t i = 2; i < r; ++i) p.push_back(static_cast<int64_t>(i));
  p.push_back(1);
  return p;
}

// The NHWC kernel on transposed X and residual equals the NCHW kernel's output transposed,
// on every CPU path this machine runs, with one and with several threads.
void check_nhwc_conv(const ConvCase& c, DType dtype = DType::Float) {
  SCOPED_TRACE("NHWC, activation '" + c.act + "'");
  const TensorData x = random_tensor(c.x, 5, dtype), w = random_tensor(c.w, 6, dtype);
  const TensorData b = random_tensor({c.w[0]}, 7, dtype);
  std::map<std::string, Attribute> attrs = c.attrs;
  if (!c.act.empty()) attrs["activation"] = attr_str(c.act);
  attrs["activation_alpha"] = attr_float(c.act_alpha);
  attrs["activation_beta"] = attr_float(c.act_beta);
  const TensorData plain = ok(run("", "Conv", 11, c.attrs, {&x, &w, c.bias ? &b : nullptr}));
  const TensorData res = random_tensor(c.residual_dims.empty() ? plain.dims : c.residual_dims, 8, dtype);
  const TensorData want_nchw =
      ok(run("cuvil", "FusedConv", 1, attrs, {&x, &w, c.bias ? &b : nullptr, c.residual ? &res : nullptr}));
  const TensorData want = permute(want_nchw, to_nhwc(want_nchw.dims.size()));
  const TensorData xt = permute(x, to_nhwc(x.dims.size()));
  const TensorData rt_ = c.residual ? permute(res, to_nhwc(res.dims.size())) : TensorData{};
  attrs["layout"] = attr_str("NHWC");
  const rt::CpuPath before = rt::active_cpu_path();
  for (rt::CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    for (int threads : {1, 3}) {
      SCOPED_TRACE(std::string(rt::cpu_path_name(path)) + ", threads " + std::to_string(threads));
      const TensorData got = ok(run("cuvil", "FusedConv", 1, attrs,
                                    {&xt, &w, c.bias ? &b : nullptr, c.residual ? &rt_ : nullptr}, threads));
      expect_close(got, want, 1e-4, 1e-5);
    }
  }
  rt::set_cpu_path_for_testing(before);
}

TEST(FusedLinearKernel, ConvNhwcResidualAndActivations) {
  for (const char* act : {"", "relu", "clip", "sigmoid", "silu", "leaky_relu"}) {
    ConvCase c;
    c.x = {2, 3, 9, 8};
    c.w = {8, 3, 3, 3};
    c.attrs = {{"pads", attr_ints({1, 2, 2, 1})}, {"strides", attr_ints({2, 1})}};
    c.act = act;
    c.act_alpha = std::string(act) == "clip" ? 0.f : 0.1f;
    c.act_beta = 6.f;
    check_nhwc_conv(c);
  }
}

TEST(FusedLinearKernel, ConvNhwcGroupsDepthwisePointwiseDilations) {
  ConvCase grouped;  // two groups of 4 output channels, dilated, SAME_UPPER
  grouped.x = {1, 6, 7, 7};
  grouped.w = {8, 3, 3, 3};
  grouped.attrs = {{"group", attr_int(2)}, {"dilations", attr_ints({2, 2})}, {"auto_pad", attr_str("SAME_UPPER")}};
  grouped.act = "relu";
  check_nhwc_conv(grouped);
  ConvCase depthwise;  // MobileNet's strided 3x3 depthwise conv with Relu6 (channel-vector path)
  depthwise.x = {2, 21, 8, 8};
  depthwise.w = {21, 1, 3, 3};
  depthwise.attrs = {{"group", attr_int(21)}, {"pads", attr_ints({1, 1, 1, 1})}, {"strides", attr_ints({2, 2})}};
  depthwise.act = "clip";
  depthwise.act_beta = 6.f;
  depthwise.residual = false;
  check_nhwc_conv(depthwise);
  ConvCase multiplier;  // depthwise with 2 outputs per channel, no bias (GEMM per group)
  multiplier.x = {1, 3, 6, 5};
  multiplier.w = {6, 1, 3, 2};
  multiplier.attrs = {{"group", attr_int(3)}, {"pads", attr_ints({1, 0, 1, 1})}};
  multiplier.bias = false;
  check_nhwc_conv(multiplier);
  ConvCase pointwise;  // 1x1: X is the GEMM's A; residual broadcast over batch and height
  pointwise.x = {2, 20, 5, 6};
  pointwise.w = {17, 20, 1, 1};
  pointwise.residual_dims = {1, 17, 1, 6};
  pointwise.act = "tanh";
  check_nhwc_conv(pointwise);
  ConvCase grouped_pointwise;  // 1x1 with groups: each group reads its columns of X
  grouped_pointwise.x = {1, 8, 4, 4};
  grouped_pointwise.w = {12, 2, 1, 1};
  grouped_pointwise.attrs = {{"group", attr_int(4)}};
  check_nhwc_conv(grouped_pointwise);
  ConvCase strided_1x1;  // 1x1 with a stride is not pointwise: the im2col path
  strided_1x1.x = {1, 4, 7, 7};
  strided_1x1.w = {8, 4, 1, 1};
  strided_1x1.attrs = {{"strides", attr_ints({2, 2})}};
  check_nhwc_conv(strided_1x1);
  ConvCase conv1d;  // rank 3: [N, L, C]
  conv1d.x = {2, 5, 11};
  conv1d.w = {6, 5, 3};
  conv1d.attrs = {{"pads", attr_ints({2, 1})}, {"dilations", attr_ints({2})}};
  conv1d.act = "gelu";
  check_nhwc_conv(conv1d);
  ConvCase dbl;  // double tensors keep double accumulation
  dbl.x = {1, 3, 5, 5};
  dbl.w = {4, 3, 3, 3};
  dbl.attrs = {{"pads", attr_ints({1, 1, 1, 1})}};
  dbl.act = "relu";
  check_nhwc_conv(dbl, DType::Double);
}

#define EXPECT_STATUS(result, substr)                                                               \
  do {                                                                                              \
    EXPECT_EQ((result).st.code(), rt::StatusCode::kInvalidArgument) << (result).st.message();       \
    EXPECT_NE((result).st.message().find(substr), std::string::npos) << (result).st.message();      \
  } while (0)

TEST(FusedLinearKernel, BadInputsNameTheProblem) {
  const TensorData a = random_tensor({3, 4}, 1), b = random_tensor({4, 5}, 2), b_bad = random_tensor({3, 5}, 2);
  const TensorData v = random_tensor({4}, 3), bias_bad = random_tensor({4}, 3), d = random_tensor({4, 5}, 2, DType::Double);
  EXPECT_STATUS(run("cuvil", "FusedMatMul", 1, {}, {&a, &b_bad}), "FusedMatMul node 'n_FusedMatMul': inner dimensions differ");
  EXPECT_STATUS(run("cuvil", "FusedMatMul", 1, {}, {&a, &b, &bias_bad}), "bias [4] does not broadcast to the output [3,5]");
  EXPECT_STATUS(run("cuvil", "FusedMatMul", 1, {}, {&a, &b, nullptr, &bias_bad}),
                "residual [4] does not broadcast to the output [3,5]");
  EXPECT_STATUS(run("cuvil", "FusedMatMul", 1, {{"activation", attr_str("swish")}}, {&a, &b}),
                "attribute 'activation' is 'swish', not a known activation");
  EXPECT_STATUS(run("cuvil", "FusedMatMul", 1, {{"transB", attr_int(2)}}, {&a, &b}), "attribute 'transB' is 2, must be 0 or 1");
  EXPECT_STATUS(run("cuvil", "FusedMatMul", 1, {{"transA", attr_int(1)}}, {&v, &b}), "a transposed operand needs rank >= 2");
  EXPECT_STATUS(run("cuvil", "FusedMatMul", 1, {}, {&a, &d}), "A and B must share a float dtype");
  EXPECT_STATUS(run("cuvil", "FusedMatMul", 1, {}, {&a, nullptr}), "expects inputs A and B");
  EXPECT_STATUS(run("cuvil", "FusedMatMul", 1, {}, {&a, &b, nullptr, nullptr, &a}), "has 5 inputs, at most 4");
  const TensorData ai = [] {
    TensorData t = random_tensor({3, 4}, 1);
    t.dtype = DType::Int32;
    return t;
  }();
  EXPECT_STATUS(run("cuvil", "FusedMatMul", 1, {}, {&ai, &ai}), "A and B must share a float dtype, got i32 and i32");

  const TensorData x = random_tensor({1, 2, 4, 4}, 5), w = random_tensor({3, 2, 3, 3}, 6);
  const TensorData res_bad = random_tensor({1, 4, 2, 2}, 7);
  EXPECT_STATUS(run("cuvil", "FusedConv", 1, {}, {&x, &w, nullptr, &res_bad}),
                "FusedConv node 'n_FusedConv': residual [1,4,2,2] does not broadcast to the output [1,3,2,2]");
  EXPECT_STATUS(run("cuvil", "FusedConv", 1, {{"activation", attr_str("relu6")}}, {&x, &w}),
                "attribute 'activation' is 'relu6', not a known activation");
  EXPECT_STATUS(run("cuvil", "FusedConv", 1, {{"group", attr_int(2)}}, {&x, &w}), "X has 2 channels but W");
  EXPECT_STATUS(run("cuvil", "FusedConv", 1, {}, {&x, &w, nullptr, nullptr, &x}), "has 5 inputs, at most 4");
  EXPECT_STATUS(run("cuvil", "FusedConv", 1, {{"layout", attr_str("NCWH")}}, {&x, &w}),
                "attribute 'layout' is 'NCWH', not NCHW or NHWC");
  // NHWC reads the channels from the last axis: [1, 2, 4, 4] has 4 of them, W expects 2.
  EXPECT_STATUS(run("cuvil", "FusedConv", 1, {{"layout", attr_str("NHWC")}}, {&x, &w}), "X has 4 channels but W");
}

}  // namespace
