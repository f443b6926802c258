// The direct depthwise / small-group convolution (runtime/cpu/ops/conv_depthwise.h) through
// cuvil::FusedConv and Conv, against a plain double-precision convolution written here: NCHW
// and NHWC, strides 1-3, asymmetric pads, dilations, 1-D, grouped (several input and output
// channels per group), channel multipliers, widths and channel counts that leave partial
// vectors, every epilogue form (bias or none, a residual of the output's shape or a
// broadcasting one, each activation); on every CPU path this machine runs, with the work split
// into several chunks (bitwise equal to one chunk); and fused == unfused bitwise (suite
// ConvDepthwiseKernel); and the same checks for the one-group channels-last convolutions of the
// indirect-GEMM kernel (suite ConvIgemmKernel).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "ir/fused_ops.h"
#include "kernel_harness.h"
#include "runtime/cpu/cpu_features.h"

using namespace cuvil;

namespace {

TensorData random_tensor(std::vector<int64_t> dims, uint32_t seed) {
  TensorData t;
  t.dtype = DType::Float;
  t.dims = dims;
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  t.bytes.resize(static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    const float f = dist(gen);
    std::memcpy(t.bytes.data() + i * 4, &f, 4);
  }
  return t;
}
const float* fp(const TensorData& t) { return reinterpret_cast<const float*>(t.bytes.data()); }

Attribute attr_int(int64_t v) { Attribute a; a.kind = Attribute::Kind::Int; a.i = v; return a; }
Attribute attr_float(float v) { Attribute a; a.kind = Attribute::Kind::Float; a.f = v; return a; }
Attribute attr_str(std::string v) { Attribute a; a.kind = Attribute::Kind::String; a.s = v; return a; }
Attribute attr_ints(std::vector<int64_t> v) { Attribute a; a.kind = Attribute::Kind::Ints; a.ints = v; return a; }

using cuvil::testing::ChunkedContext;

TensorData run(const std::string& domain, const std::string& op, std::map<std::string, Attribute> attrs,
               std::vector<const TensorData*> inputs, int chunks = 1) {
  Node node;
  node.op_type = op;
  node.domain = domain;
  node.opset = domain.empty() ? 14 : 1;
  node.name = "n_" + op;
  node.attrs = std::move(attrs);
  node.outputs.push_back(0);
  std::vector<rt::TensorView> views(inputs.size());
  std::vector<const rt::TensorView*> ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i]) views[i] = cuvil::testing::view_of(*inputs[i]);
    ptrs.push_back(inputs[i] ? &views[i] : nullptr);
  }
  ChunkedContext ctx(node, ptrs, chunks);
  rt::OpKernelFn fn = rt::find_op_kernel(domain, op);
  EXPECT_TRUE(fn);
  const rt::Status st = fn(ctx);
  EXPECT_TRUE(st.is_ok()) << st.message();
  TensorData out;
  if (!st.is_ok()) return out;
  const rt::TensorView& o = ctx.output(0);
  out.dtype = o.dtype;
  out.dims = o.dims;
  out.bytes.assign(static_cast<const uint8_t*>(o.data), static_cast<const uint8_t*>(o.data) + o.bytes());
  return out;
}

TensorData permute(const TensorData& t, std::vector<int64_t> perm) {
  return run("", "Transpose", {{"perm", attr_ints(perm)}}, {&t});
}
std::vector<int64_t> to_nhwc(size_t r) {
  std::vector<int64_t> p = {0};
  for (size_t i = 2; i < r; ++i) p.push_back(static_cast<int64_t>(i));
  p.push_back(1);
  return p;
}

struct Case {
  std::string name;
  std::vector<int64_t> x, w;  // NCHW x; w [M, C/group, k...]
  int64_t group = 1;
  std::vector<int64_t> strides, dilations, pads;  // empty: defaults
  std::string auto_pad;
  bool bias = true;
  int residual = 1;  // 0 none, 1 the output's shape, 2 broadcast over the spatial dims
  std::string act;
  float alpha = 0.f, beta = 0.f;
  Case(std::string n, std::vector<int64_t> xd, std::vector<int64_t> wd, int64_t g)
      : name(std::move(n)), x(std::move(xd)), w(std::move(wd)), group(g) {}
};

std::map<std::string, Attribute> conv_attrs(const Case& c) {
  std::map<std::string, Attribute> a = {{"group", attr_int(c.group)}};
  if (!c.strides.empty()) a["strides"] = attr_ints(c.strides);
  if (!c.dilations.empty()) a["dilations"] = attr_ints(c.dilations);
  if (!c.pads.empty()) a["pads"] = attr_ints(c.pads);
  if (!c.auto_pad.empty()) a["auto_pad"] = attr_str(c.auto_pad);
  return a;
}

// act(conv(x, w) + bias + residual) in double (the activation in float on the rounded sum),
// NCHW, for one or two spatial dims; out_dims from the kernel under test.
TensorData reference(const Case& c, const TensorData& x, const TensorData& w, const TensorData* b,
                     const TensorData* res, const std::vector<int64_t>& out_dims) {
  const bool two = c.x.size() == 4;
  const int64_t N = c.x[0], C = c.x[1], H = two ? c.x[2] : 1, W = c.x.back();
  const int64_t M = c.w[0], cg = C / c.group, mg = M / c.group;
  const int64_t KH = two ? c.w[2] : 1, KW = c.w.back();
  const int64_t OH = two ? out_dims[2] : 1, OW = out_dims.back();
  // Attribute lists are per spatial dim (pads: all begins, then all ends).
  const size_t r = two ? 2 : 1;
  auto dim_or = [&](const std::vector<int64_t>& v, size_t d, int64_t fill) { return v.empty() ? fill : v[d]; };
  const int64_t sh = two ? dim_or(c.strides, 0, 1) : 1, sw = dim_or(c.strides, r - 1, 1);
  const int64_t dh = two ? dim_or(c.dilations, 0, 1) : 1, dw = dim_or(c.dilations, r - 1, 1);
  int64_t ph = two ? dim_or(c.pads, 0, 0) : 0, pw = dim_or(c.pads, r - 1, 0);
  if (c.auto_pad == "SAME_UPPER") {  // stride 1 in the cases that use it: total pad = span - 1
    ph = two ? ((KH - 1) * dh) / 2 : 0;
    pw = ((KW - 1) * dw) / 2;
  }
  TensorData y;
  y.dtype = DType::Float;
  y.dims = out_dims;
  y.bytes.resize(static_cast<size_t>(N * M * OH * OW) * 4);
  float* yp = reinterpret_cast<float*>(y.bytes.data());
  const auto act = *fused::parse_activation(c.act);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = 0;
          const int64_t g = m / mg;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += double(fp(x)[((n * C + g * cg + ci) * H + ih) * W + iw]) *
                       fp(w)[((m * cg + ci) * KH + kh) * KW + kw];
              }
          const int64_t o = ((n * M + m) * OH + oh) * OW + ow;
          if (b) acc += fp(*b)[m];
          if (res) acc += fp(*res)[c.residual == 2 ? m : o];
          yp[o] = fused::apply_activation(act, static_cast<float>(acc), c.alpha, c.beta);
        }
  return y;
}

void expect_close(const TensorData& got, const TensorData& want) {
  ASSERT_EQ(got.dims, want.dims);
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.float_at(i), w = want.float_at(i);
    ASSERT_LE(std::fabs(g - w), 2e-5 + 1e-4 * std::fabs(w)) << "element " << i << ": " << g << " vs " << w;
  }
}
bool bitwise_equal(const TensorData& a, const TensorData& b) { return a.dims == b.dims && a.bytes == b.bytes; }

void check(const Case& c) {
  SCOPED_TRACE(c.name + ", activation '" + c.act + "'");
  const TensorData x = random_tensor(c.x, 11), w = random_tensor(c.w, 12), b = random_tensor({c.w[0]}, 13);
  std::map<std::string, Attribute> attrs = conv_attrs(c);
  const TensorData plain = run("", "Conv", attrs, {&x, &w, c.bias ? &b : nullptr});
  std::vector<int64_t> rdims = plain.dims;
  if (c.residual == 2) rdims = c.x.size() == 4 ? std::vector<int64_t>{c.w[0], 1, 1} : std::vector<int64_t>{c.w[0], 1};
  const TensorData res = random_tensor(rdims, 14);
  const TensorData* resp = c.residual ? &res : nullptr;
  const TensorData want = reference(c, x, w, c.bias ? &b : nullptr, resp, plain.dims);
  if (!c.act.empty()) attrs["activation"] = attr_str(c.act);
  attrs["activation_alpha"] = attr_float(c.alpha);
  attrs["activation_beta"] = attr_float(c.beta);
  const std::vector<const TensorData*> in = {&x, &w, c.bias ? &b : nullptr, resp};
  // NHWC operands: X and a full-shape residual transposed (a broadcasting residual [M, 1, 1]
  // becomes [1, 1, M]).
  const size_t rank = c.x.size();
  const TensorData xt = permute(x, to_nhwc(rank));
  TensorData rt_;
  if (c.residual == 1) rt_ = permute(res, to_nhwc(rank));
  if (c.residual == 2) {
    rt_ = res;
    rt_.dims.assign(rank - 1, 1);
    rt_.dims.back() = c.w[0];
  }
  const TensorData want_nhwc = permute(want, to_nhwc(rank));
  std::map<std::string, Attribute> nhwc_attrs = attrs;
  nhwc_attrs["layout"] = attr_str("NHWC");
  const std::vector<const TensorData*> in_nhwc = {&xt, &w, c.bias ? &b : nullptr, c.residual ? &rt_ : nullptr};

  const rt::CpuPath before = rt::active_cpu_path();
  for (rt::CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    SCOPED_TRACE(rt::cpu_path_name(path));
    const TensorData one = run("cuvil", "FusedConv", attrs, in, 1);
    expect_close(one, want);
    const TensorData split = run("cuvil", "FusedConv", attrs, in, 5);
    EXPECT_TRUE(bitwise_equal(one, split)) << "NCHW: 5 chunks differ from 1";
    const TensorData nhwc = run("cuvil", "FusedConv", nhwc_attrs, in_nhwc, 1);
    expect_close(nhwc, want_nhwc);
    const TensorData nhwc_split = run("cuvil", "FusedConv", nhwc_attrs, in_nhwc, 7);
    EXPECT_TRUE(bitwise_equal(nhwc, nhwc_split)) << "NHWC: 7 chunks differ from 1";
    // Fused == unfused, bit for bit: Conv, then Add, then the activation's own op.
    if (c.act.empty() || c.act == "relu") {
      TensorData u = run("", "Conv", conv_attrs(c), {&x, &w, c.bias ? &b : nullptr});
      if (resp) u = run("", "Add", {}, {&u, resp});
      if (c.act == "relu") u = run("", "Relu", {}, {&u});
      EXPECT_TRUE(bitwise_equal(one, u)) << "fused and unfused differ";
    }
  }
  rt::set_cpu_path_for_testing(before);
}

TEST(ConvDepthwiseKernel, MobileNetShapesEveryActivation) {
  const std::vector<std::pair<std::string, std::pair<float, float>>> acts = {
      {"", {0, 0}}, {"relu", {0, 0}}, {"clip", {0.f, 1.5f}}, {"leaky_relu", {0.1f, 0}},
      {"sigmoid", {0, 0}}, {"gelu", {0, 0}}, {"silu", {0, 0}}};
  for (const auto& [act, ab] : acts) {
    Case s1("3x3 stride 1, 70 wide (four-vector blocks and a partial one)", {1, 21, 9, 70}, {21, 1, 3, 3}, 21);
    s1.pads = {1, 1, 1, 1};
    s1.act = act;
    s1.alpha = ab.first;
    s1.beta = ab.second;
    check(s1);
    Case s2("3x3 stride 2, 7 wide, asymmetric pads", {2, 40, 13, 14}, {40, 1, 3, 3}, 40);
    s2.strides = {2, 2};
    s2.pads = {0, 1, 1, 0};
    s2.act = act;
    s2.alpha = ab.first;
    s2.beta = ab.second;
    s2.residual = 0;
    check(s2);
  }
}

TEST(ConvDepthwiseKernel, StridesDilationsPadsAndOneDim) {
  Case big("5x3, strides 3x2, dilations 2x3, pads 2,1,3,0", {1, 5, 17, 41}, {5, 1, 5, 3}, 5);
  big.strides = {3, 2};
  big.dilations = {2, 3};
  big.pads = {2, 1, 3, 0};
  big.act = "relu";
  check(big);
  Case same("SAME_UPPER dilated", {2, 70, 6, 9}, {70, 1, 3, 3}, 70);
  same.auto_pad = "SAME_UPPER";
  same.dilations = {2, 2};
  same.bias = false;
  check(same);
  // Pads and strides of 2^20: the phase planes would be 2^40 floats per channel, so NCHW takes
  // the general path (and must still be right); NHWC needs no planes.
  Case huge("strides and pads of 2^20", {1, 2, 3, 3}, {2, 1, 1, 1}, 2);
  huge.strides = {1 << 20, 1 << 20};
  huge.pads = {1 << 20, 1 << 20, 1 << 20, 1 << 20};
  huge.act = "relu";
  check(huge);
  Case fifty("50 channels (3 full AVX-512 vectors and a partial one in NHWC)", {1, 50, 5, 5}, {50, 1, 3, 3}, 50);
  fifty.pads = {1, 1, 1, 1};
  fifty.act = "relu";
  check(fifty);
  Case oned("1-D, stride 2, pads 2,1", {2, 8, 50}, {8, 1, 5}, 8);
  oned.strides = {2};
  oned.pads = {2, 1};
  oned.act = "clip";
  oned.alpha = -0.5f;
  oned.beta = 0.5f;
  check(oned);
  Case wide("1x1 depthwise, 130 wide", {1, 3, 2, 130}, {3, 1, 1, 1}, 3);
  wide.act = "leaky_relu";
  wide.alpha = 0.2f;
  check(wide);
}

TEST(ConvDepthwiseKernel, GroupsMultipliersAndBroadcastResidual) {
  Case grouped("3 input and 2 output channels per group", {1, 6, 8, 19}, {4, 3, 3, 3}, 2);
  grouped.pads = {1, 1, 1, 1};
  grouped.act = "relu";
  check(grouped);
  Case mult("channel multiplier 3", {1, 3, 6, 9}, {9, 1, 3, 3}, 3);
  mult.strides = {1, 2};
  mult.pads = {1, 0, 1, 1};
  check(mult);
  Case bcast("residual [M, 1, 1] broadcast (epilogue after the kernel)", {1, 24, 5, 6}, {24, 1, 3, 3}, 24);
  bcast.pads = {1, 1, 1, 1};
  bcast.residual = 2;
  bcast.act = "clip";
  bcast.alpha = 0.f;
  bcast.beta = 1.f;
  check(bcast);
  Case nobias("no bias, full residual, gelu", {2, 17, 4, 4}, {17, 1, 2, 2}, 17);
  nobias.bias = false;
  nobias.act = "gelu";
  check(nobias);
}

// The NHWC kernel sweeps the columns whose window lies inside the width in strips of 8, 4, 2
// and 1 (3 or 5 taps wide, stride 1 or 2); the borders and other geometries go position by
// position. Every path must still sum each output's taps in (kh, kw) order: without padding
// every tap is valid in both layouts, so NHWC equals the NCHW phase-plane kernel bit for bit.
// 15 interior columns take one strip of each width; 21 channels end in a partial vector on
// every path. With padding (pads of 2 on a 5x5 window skip window rows at the top and bottom
// and send 2 columns each side through the per-position kernel) the reference decides.
TEST(ConvDepthwiseKernel, NhwcRowSweepEveryStripWidth) {
  struct Geometry {
    int64_t k, stride, in_w;
  };
  for (const Geometry& g : {Geometry{3, 1, 17}, Geometry{3, 2, 31}, Geometry{5, 1, 19}, Geometry{5, 2, 33}}) {
    Case c("k " + std::to_string(g.k) + " stride " + std::to_string(g.stride) + ", 15 columns, no padding",
           {2, 21, 7, g.in_w}, {21, 1, g.k, g.k}, 21);
    c.strides = {g.stride, g.stride};
    c.act = "clip";
    c.alpha = -0.5f;
    c.beta = 0.5f;
    check(c);
    const TensorData x = random_tensor(c.x, 21), w = random_tensor(c.w, 22), b = random_tensor({21}, 23);
    std::map<std::string, Attribute> attrs = conv_attrs(c);
    attrs["activation"] = attr_str("clip");
    attrs["activation_alpha"] = attr_float(-0.5f);
    attrs["activation_beta"] = attr_float(0.5f);
    std::map<std::string, Attribute> nhwc_attrs = attrs;
    nhwc_attrs["layout"] = attr_str("NHWC");
    const TensorData xt = permute(x, to_nhwc(4));
    const rt::CpuPath before = rt::active_cpu_path();
    for (rt::CpuPath path : rt::supported_cpu_paths()) {
      ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
      SCOPED_TRACE(c.name + ", " + rt::cpu_path_name(path));
      const TensorData nchw = run("cuvil", "FusedConv", attrs, {&x, &w, &b, nullptr}, 1);
      const TensorData nhwc = run("cuvil", "FusedConv", nhwc_attrs, {&xt, &w, &b, nullptr}, 3);
      EXPECT_TRUE(bitwise_equal(permute(nchw, to_nhwc(4)), nhwc)) << "NHWC and NCHW sums differ";
    }
    rt::set_cpu_path_for_testing(before);
    Case padded(c.name + ", pads 2", {1, 21, 6, g.in_w}, {21, 1, g.k, g.k}, 21);
    padded.strides = c.strides;
    padded.pads = {2, 2, 2, 2};
    padded.act = "relu";
    check(padded);
  }
}

// One group, channels-last: the indirect-GEMM kernel (runtime/cpu/ops/conv_igemm.h) takes
// every NHWC case below, and the NCHW ones with a window or of at most kIgemmChannelsFirstMaxC
// input channels between two transposes (the other NCHW ones, 1x1, run the GEMM): ResNet's shapes at small sizes,
// output positions and channels that leave partial row groups and partial panels (more than
// one panel on every path), taps in the padding, strides, dilations, 1-D, a batch, no bias,
// each activation and a broadcasting residual (applied after the kernel).
TEST(ConvIgemmKernel, ResNetShapesEveryActivation) {
  const std::vector<std::pair<std::string, std::pair<float, float>>> acts = {
      {"", {0, 0}}, {"relu", {0, 0}}, {"clip", {0.f, 1.5f}}, {"leaky_relu", {0.1f, 0}}, {"sigmoid", {0, 0}}};
  for (const auto& [act, ab] : acts) {
    Case s1("3x3 stride 1 pad 1, 64 -> 70 channels, 9x7 positions", {1, 64, 9, 7}, {70, 64, 3, 3}, 1);
    s1.pads = {1, 1, 1, 1};
    s1.act = act;
    s1.alpha = ab.first;
    s1.beta = ab.second;
    check(s1);
    Case s2("3x3 stride 2, 20 -> 37 channels, batch 2, no residual", {2, 20, 11, 10}, {37, 20, 3, 3}, 1);
    s2.strides = {2, 2};
    s2.pads = {1, 1, 1, 1};
    s2.act = act;
    s2.alpha = ab.first;
    s2.beta = ab.second;
    s2.residual = 0;
    check(s2);
  }
}

TEST(ConvIgemmKernel, StemDownsampleDilationsAndOneDim) {
  Case stem("7x7 stride 2 pad 3, 3 -> 16 channels (the stem)", {1, 3, 23, 21}, {16, 3, 7, 7}, 1);
  stem.strides = {2, 2};
  stem.pads = {3, 3, 3, 3};
  stem.act = "relu";
  stem.residual = 0;
  check(stem);
  Case down("1x1 stride 2 (downsample), 24 -> 48", {2, 24, 9, 9}, {48, 24, 1, 1}, 1);
  down.strides = {2, 2};
  down.bias = false;
  check(down);
  Case dil("3x2 kernel, dilations 2x3, asymmetric pads, one output channel", {1, 5, 12, 13}, {1, 5, 3, 2}, 1);
  dil.dilations = {2, 3};
  dil.pads = {2, 0, 1, 3};
  dil.act = "leaky_relu";
  dil.alpha = 0.2f;
  check(dil);
  Case oned("1-D, kernel 5, stride 3, pads 2,1", {2, 9, 40}, {33, 9, 5}, 1);
  oned.strides = {3};
  oned.pads = {2, 1};
  oned.act = "clip";
  oned.alpha = -0.5f;
  oned.beta = 0.5f;
  check(oned);
  Case bcast("residual [M, 1, 1] broadcast, gelu", {1, 8, 6, 5}, {40, 8, 3, 3}, 1);
  bcast.pads = {1, 1, 1, 1};
  bcast.residual = 2;
  bcast.act = "gelu";
  check(bcast);
  Case pw("1x1 stride 1 (a pointwise layer: pointers straight at the positions), batch 2", {2, 24, 5, 7},
          {40, 24, 1, 1}, 1);
  pw.act = "clip";
  pw.alpha = 0.f;
  pw.beta = 6.f;
  check(pw);
  Case pw_pad("1x1 with padding 1 (not pointwise: the border is the bias)", {1, 6, 3, 4}, {9, 6, 1, 1}, 1);
  pw_pad.pads = {1, 1, 1, 1};
  check(pw_pad);
    Case rows("5 channels (a window row read as one run), 3x4 kernel, dilation 2 x 1, stride 1 x 2, edges",
            {2, 5, 9, 11}, {12, 5, 3, 4}, 1);
  rows.dilations = {2, 1};
  rows.strides = {1, 2};
  rows.pads = {1, 2, 0, 1};
  rows.act = "leaky_relu";
  rows.alpha = 0.1f;
  check(rows);
    Case empty("batch 0", {0, 6, 5, 5}, {7, 6, 3, 3}, 1);
  empty.pads = {1, 1, 1, 1};
  check(empty);
    Case few("1-D, 2 input channels, batch 3, stride 2, dilation 2", {3, 2, 29}, {11, 2, 4}, 1);
  few.strides = {2};
  few.dilations = {2};
  few.pads = {3, 2};
  few.act = "relu";
  check(few);
    Case pad_only("every tap of some positions in the padding (pads 4, kernel 3)", {1, 4, 2, 2}, {9, 4, 3, 3}, 1);
  pad_only.pads = {4, 4, 4, 4};
  check(pad_only);
}

// Output maps of 1 to 90 positions: the kernel evens the row groups out (49 positions are 7
// groups of 7 on AVX-512), so every rows-per-group count from 1 to the path's maximum runs;
// 37 input channels of a 3x3 kernel are a depth of 333, whose depth blocks end inside a tap.
TEST(ConvIgemmKernel, EveryRowsPerGroupAndDepthBlocksInsideATap) {
  for (int64_t hw = 1; hw <= 9; ++hw) {
    for (int64_t extra = 0; extra <= 1; ++extra) {
      Case c("3x3 pad 1, " + std::to_string(hw) + "x" + std::to_string(hw + extra) + " map, 37 -> 21 channels",
             {1, 37, hw, hw + extra}, {21, 37, 3, 3}, 1);
      c.pads = {1, 1, 1, 1};
      c.act = "relu";
      check(c);
    }
  }
}

// NaN in the input stays NaN through the in-register activations (relu and clip would turn
// it into 0 or a bound if they compared the wrong way round).
TEST(ConvDepthwiseKernel, NaNPropagates) {
  TensorData x = random_tensor({1, 16, 3, 3}, 1);
  const float nan = NAN;
  std::memcpy(x.bytes.data(), &nan, 4);  // channel 0, position (0, 0)
  const TensorData w = random_tensor({16, 1, 1, 1}, 2);
  const rt::CpuPath before = rt::active_cpu_path();
  for (rt::CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    for (const char* act : {"relu", "clip", "leaky_relu"}) {
      for (const char* layout : {"NCHW", "NHWC"}) {
        TensorData xl = x;  // NHWC: the same bytes read as [1, 3, 3, 16]; element 0 is still channel 0 at (0, 0)
        if (std::string(layout) == "NHWC") xl.dims = {1, 3, 3, 16};
        const TensorData y = run("cuvil", "FusedConv",
                                 {{"group", attr_int(16)}, {"activation", attr_str(act)},
                                  {"activation_alpha", attr_float(0.f)}, {"activation_beta", attr_float(6.f)},
                                  {"layout", attr_str(layout)}},
                                 {&xl, &w});
        EXPECT_TRUE(std::isnan(y.float_at(0))) << rt::cpu_path_name(path) << " " << act << " " << layout;
        EXPECT_FALSE(std::isnan(y.float_at(1))) << rt::cpu_path_name(path) << " " << act << " " << layout;
      }
    }
  }
  rt::set_cpu_path_for_testing(before);
}

// The GEMM-based FusedConv and FusedMatMul apply relu, clip and leaky_relu with the same
// in-register code (conv_depthwise.h's activate_row) on every path: bit for bit what Conv or
// MatMul, Add and the activation's ONNX op give, with NaN and signed zeros in the sums.
TEST(ConvDepthwiseKernel, GemmEpilogueActivationsEqualTheUnfusedOps) {
  TensorData a = random_tensor({5, 7}, 1);
  const TensorData b = random_tensor({7, 37}, 2), bias = random_tensor({37}, 3);
  const float nan = NAN;
  std::memcpy(a.bytes.data(), &nan, 4);  // row 0 of the product is NaN
  const TensorData x = random_tensor({1, 6, 5, 9}, 4), w = random_tensor({8, 6, 3, 3}, 5), cb = random_tensor({8}, 6);
  TensorData zero = random_tensor({1, 1}, 7);
  const float lo = -0.5f, hi = 0.75f;
  TensorData tlo = zero, thi = zero;
  tlo.dims = thi.dims = {};
  std::memcpy(tlo.bytes.data(), &lo, 4);
  std::memcpy(thi.bytes.data(), &hi, 4);
  const rt::CpuPath before = rt::active_cpu_path();
  for (rt::CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    for (const char* act : {"relu", "clip", "leaky_relu"}) {
      SCOPED_TRACE(std::string(rt::cpu_path_name(path)) + " " + act);
      const float alpha = std::string(act) == "clip" ? lo : 0.3f;
      auto unfused_act = [&](const TensorData& t) {
        if (std::string(act) == "relu") return run("", "Relu", {}, {&t});
        if (std::string(act) == "clip") return run("", "Clip", {}, {&t, &tlo, &thi});
        return run("", "LeakyRelu", {{"alpha", attr_float(alpha)}}, {&t});
      };
      const std::map<std::string, Attribute> fa = {{"activation", attr_str(act)},
                                                   {"activation_alpha", attr_float(alpha)},
                                                   {"activation_beta", attr_float(hi)}};
      const TensorData fused_mm = run("cuvil", "FusedMatMul", fa, {&a, &b, &bias});
      TensorData mm = run("", "MatMul", {}, {&a, &b});
      mm = run("", "Add", {}, {&mm, &bias});
      EXPECT_TRUE(bitwise_equal(fused_mm, unfused_act(mm))) << "FusedMatMul";
      std::map<std::string, Attribute> ca = fa;
      ca["pads"] = attr_ints({1, 1, 1, 1});
      const TensorData fused_conv = run("cuvil", "FusedConv", ca, {&x, &w, &cb});
      const TensorData conv = run("", "Conv", {{"pads", attr_ints({1, 1, 1, 1})}}, {&x, &w, &cb});
      EXPECT_TRUE(bitwise_equal(fused_conv, unfused_act(conv))) << "FusedConv";
    }
  }
  rt::set_cpu_path_for_testing(before);
}

// A residual the depthwise kernel cannot take in registers still gets apply()'s checks.
TEST(ConvDepthwiseKernel, BadResidualIsNamed) {
  const TensorData x = random_tensor({1, 4, 5, 5}, 1), w = random_tensor({4, 1, 3, 3}, 2);
  TensorData bad = random_tensor({1, 3, 5, 5}, 3);
  Node node;
  node.op_type = "FusedConv";
  node.domain = "cuvil";
  node.opset = 1;
  node.name = "dw";
  node.outputs.push_back(0);
  node.attrs = {{"group", attr_int(4)}, {"pads", attr_ints({1, 1, 1, 1})}};
  const rt::TensorView xv = cuvil::testing::view_of(x), wv = cuvil::testing::view_of(w),
                       rv = cuvil::testing::view_of(bad);
  cuvil::testing::HeapOpContext ctx(node, {&xv, &wv, nullptr, &rv}, 1, 1);
  const rt::Status st = rt::find_op_kernel("cuvil", "FusedConv")(ctx);
  EXPECT_EQ(st.code(), rt::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("residual [1,3,5,5] does not broadcast to the output [1,4,5,5]"), std::string::npos)
      << st.message();
}

}  // namespace
