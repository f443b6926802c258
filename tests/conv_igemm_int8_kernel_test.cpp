// The indirect-GEMM 8-bit convolution (runtime/cpu/ops/conv_igemm_int8.h) against a plain
// reference loop written here, bitwise (suite ConvIgemmInt8Kernel): int32 sums (ConvInteger's
// epilogue) and requantised uint8 / int8 outputs (QLinearConv's: per-tensor and per-channel
// scales, int32 bias, output zero point, saturation), on every CPU path this machine runs,
// with the work split into 1 and 3 chunks run in reverse order; over 3x3 with padding,
// asymmetric pads, strides, dilations, 1x1 with and without stride, an RGB-stem-like 3-channel
// 7x7 stride 2, a window as large as the input, a 1-D convolution, batch > 1, uint8 and int8
// activations with zero points (including 0 and 255, which padding taps must contribute),
// int8 and uint8 weights with zero zero points and nonzero ones (per tensor and per channel),
// channel counts that are not multiples of 4, 8 or 32, and more than 256 output channels (several
// column chunks). The same cases also run through the QLinearConv and ConvInteger kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "kernel_harness.h"
#include "shape_test_util.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/ops/conv_igemm_int8.h"

using namespace cuvil;

namespace {

using cuvil::shape_test::ints_attr;
using cuvil::testing::tensor_bytes;

struct Case {
  const char* name;
  int64_t n, c, h, w, m, kh, kw;
  std::vector<int64_t> pads;     // top, left, bottom, right
  std::vector<int64_t> strides;  // h, w
  std::vector<int64_t> dil;      // h, w
  bool x_s8;
  int32_t xz;
  bool w_s8;
  int wz_kind;  // 0: zero, 1: one nonzero value, 2: one per channel
  bool one_d;   // a rank-3 convolution (h == kh == 1)
};

const Case kCases[] = {
    {"3x3_pad1_u8", 1, 5, 6, 7, 7, 3, 3, {1, 1, 1, 1}, {1, 1}, {1, 1}, false, 100, true, 0, false},
    {"rgb_stem_7x7_s2", 1, 3, 19, 17, 13, 7, 7, {3, 3, 3, 3}, {2, 2}, {1, 1}, false, 128, true, 0, false},
    {"1x1_batch2", 2, 17, 5, 6, 33, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, false, 3, true, 0, false},
    {"1x1_stride2", 1, 8, 9, 7, 12, 1, 1, {0, 0, 0, 0}, {2, 2}, {1, 1}, true, -9, true, 0, false},
    {"dilated_s8_x", 1, 6, 9, 8, 9, 3, 3, {2, 2, 2, 2}, {1, 1}, {2, 2}, true, -7, true, 0, false},
    {"asym_pads_strides", 2, 4, 7, 9, 5, 2, 3, {0, 1, 2, 0}, {2, 1}, {1, 2}, false, 255, true, 1, false},
    {"window_is_input", 1, 33, 3, 3, 65, 3, 3, {0, 0, 0, 0}, {1, 1}, {1, 1}, false, 0, true, 0, false},
    {"u8_weights_zero_per_channel", 3, 11, 6, 5, 19, 3, 3, {1, 1, 1, 1}, {1, 2}, {1, 1}, false, 77, false, 2,
     false},
    {"wide_300_channels", 1, 20, 4, 5, 300, 3, 3, {1, 1, 1, 1}, {1, 1}, {1, 1}, false, 5, true, 2, false},
    {"deep_and_many_rows", 2, 40, 12, 11, 70, 3, 3, {1, 1, 1, 1}, {1, 1}, {1, 1}, false, 60, true, 0, false},
    {"one_d", 2, 7, 1, 23, 10, 1, 5, {0, 2, 0, 2}, {1, 1}, {1, 1}, true, 12, true, 1, true},
};

std::vector<uint8_t> random_bytes(int64_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> v(static_cast<size_t>(count));
  for (auto& b : v) b = static_cast<uint8_t>(byte(gen));
  return v;
}

int32_t value(const std::vector<uint8_t>& v, int64_t i, bool s8) {
  return s8 ? int32_t(int8_t(v[i])) : int32_t(v[i]);
}

struct Operands {
  Case k;
  int64_t oh, ow;
  std::vector<uint8_t> x, w;
  std::vector<int32_t> wz;
  std::vector<int32_t> acc;  // the reference sums [n][m][oh][ow]
};

Operands make_operands(const Case& k, uint32_t seed) {
  Operands o;
  o.k = k;
  o.oh = (k.h + k.pads[0] + k.pads[2] - ((k.kh - 1) * k.dil[0] + 1)) / k.strides[0] + 1;
  o.ow = (k.w + k.pads[1] + k.pads[3] - ((k.kw - 1) * k.dil[1] + 1)) / k.strides[1] + 1;
  o.x = random_bytes(k.n * k.c * k.h * k.w, seed);
  o.w = random_bytes(k.m * k.c * k.kh * k.kw, seed + 1);
  o.wz.assign(k.wz_kind == 2 ? k.m : 1, 0);
  if (k.wz_kind > 0)
    for (size_t i = 0; i < o.wz.size(); ++i) o.wz[i] = (k.w_s8 ? -60 : 70) + static_cast<int32_t>(i * 37 % 90);
  o.acc.resize(static_cast<size_t>(k.n * k.m * o.oh * o.ow));
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t m = 0; m < k.m; ++m)
      for (int64_t oh = 0; oh < o.oh; ++oh)
        for (int64_t ow = 0; ow < o.ow; ++ow) {
          int64_t s = 0;
          for (int64_t c = 0; c < k.c; ++c)
            for (int64_t kh = 0; kh < k.kh; ++kh)
              for (int64_t kw = 0; kw < k.kw; ++kw) {
                const int64_t ih = oh * k.strides[0] - k.pads[0] + kh * k.dil[0];
                const int64_t iw = ow * k.strides[1] - k.pads[1] + kw * k.dil[1];
                const bool inside = ih >= 0 && ih < k.h && iw >= 0 && iw < k.w;
                const int32_t xv = inside ? value(o.x, ((n * k.c + c) * k.h + ih) * k.w + iw, k.x_s8) : k.xz;
                const int32_t wv = value(o.w, ((m * k.c + c) * k.kh + kh) * k.kw + kw, k.w_s8);
                s += int64_t(xv - k.xz) * (wv - o.wz[o.wz.size() == 1 ? 0 : m]);
              }
          o.acc[((n * k.m + m) * o.oh + oh) * o.ow + ow] = static_cast<int32_t>(s);
        }
  return o;
}

rt::ops::DwShape shape_of(const Operands& o) {
  const Case& k = o.k;
  rt::ops::DwShape d;
  d.n = k.n;
  d.c = k.c;
  d.m = k.m;
  d.in_h = k.h;
  d.in_w = k.w;
  d.out_h = o.oh;
  d.out_w = o.ow;
  d.k_h = k.kh;
  d.k_w = k.kw;
  d.s_h = k.strides[0];
  d.s_w = k.strides[1];
  d.d_h = k.dil[0];
  d.d_w = k.dil[1];
  d.p_h = k.pads[0];
  d.p_w = k.pads[1];
  return d;
}

// QLinearConv's output, plainly: clamp(nearbyint(float(acc + bias[m]) * scale[m]) + yz).
std::vector<int32_t> requantize_reference(const Operands& o, const std::vector<float>& scale,
                                          const std::vector<int32_t>& bias, int32_t yz, bool s8_out) {
  const int64_t plane = o.oh * o.ow;
  std::vector<int32_t> want(o.acc.size());
  for (size_t i = 0; i < o.acc.size(); ++i) {
    const int64_t m = (static_cast<int64_t>(i) / plane) % o.k.m;
    const float sc = scale[scale.size() == 1 ? 0 : m];
    float v = std::nearbyint(static_cast<float>(o.acc[i] + bias[m]) * sc) + static_cast<float>(yz);
    v = std::min(std::max(v, s8_out ? -128.f : 0.f), s8_out ? 127.f : 255.f);
    want[i] = static_cast<int32_t>(v);
  }
  return want;
}

// conv_igemm_int8 called directly with ep, into bytes of y_elem per element.
std::vector<int32_t> run_direct(const Operands& o, const rt::ops::Int8Epilogue& ep, int chunks) {
  Node node;
  node.op_type = "QLinearConv";
  cuvil::testing::ChunkedContext ctx(node, {}, chunks);
  rt::ops::ConvInt8Operands op;
  op.x = o.x.data();
  op.x_signed = o.k.x_s8;
  op.x_zero = o.k.xz;
  op.w = o.w.data();
  op.w_signed = o.k.w_s8;
  op.w_zero = o.wz.data();
  op.w_zero_per_channel = o.wz.size() > 1;
  const rt::ops::DwShape d = shape_of(o);
  EXPECT_TRUE(rt::ops::conv_igemm_int8_applies(d, op));
  const bool i32 = ep.kind == rt::ops::Int8Epilogue::Kind::kInt32;
  const size_t elem = i32 ? 4 : 1;
  std::vector<uint8_t> y(o.acc.size() * elem + 64, 0xCD);
  rt::ops::conv_igemm_int8(ctx, d, op, ep, y.data(), elem);
  for (size_t i = o.acc.size() * elem; i < y.size(); ++i) EXPECT_EQ(y[i], 0xCD) << "wrote past the output";
  std::vector<int32_t> got(o.acc.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (i32) std::memcpy(&got[i], y.data() + i * 4, 4);
    else got[i] = ep.kind == rt::ops::Int8Epilogue::Kind::kQuantS8 ? int32_t(int8_t(y[i])) : int32_t(y[i]);
  }
  return got;
}

TEST(ConvIgemmInt8Kernel, Int32SumsEqualTheReference) {
  uint32_t seed = 10;
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.name);
    const Operands o = make_operands(k, seed += 2);
    cuvil::testing::on_every_cpu_path([&](int chunks) { EXPECT_EQ(run_direct(o, rt::ops::Int8Epilogue{}, chunks), o.acc); });
  }
}

TEST(ConvIgemmInt8Kernel, RequantisedOutputsEqualTheReference) {
  uint32_t seed = 50;
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.name);
    const Operands o = make_operands(k, seed += 2);
    std::vector<float> per_channel(static_cast<size_t>(k.m));
    std::vector<int32_t> bias(static_cast<size_t>(k.m));
    for (int64_t m = 0; m < k.m; ++m) {
      per_channel[m] = 0.0007f * static_cast<float>(1 + m % 9) / (k.c * k.kh * k.kw);
      bias[m] = static_cast<int32_t>((m * 7919) % 20001) - 10000;
    }
    for (bool s8_out : {false, true})
      for (bool per_tensor : {false, true}) {
        SCOPED_TRACE(std::string(s8_out ? "int8" : "uint8") + (per_tensor ? " per tensor" : " per channel"));
        const std::vector<float> scale = per_tensor ? std::vector<float>{per_channel[0] * 1.7f} : per_channel;
        const int32_t yz = s8_out ? -5 : 131;
        const std::vector<int32_t> want = requantize_reference(o, scale, bias, yz, s8_out);
        rt::ops::Int8Epilogue ep;
        ep.kind = s8_out ? rt::ops::Int8Epilogue::Kind::kQuantS8 : rt::ops::Int8Epilogue::Kind::kQuantU8;
        ep.scale = scale.data();
        ep.scale_per_column = !per_tensor;
        ep.bias_i32 = bias.data();
        ep.out_zero_point = yz;
        cuvil::testing::on_every_cpu_path([&](int chunks) { EXPECT_EQ(run_direct(o, ep, chunks), want); });
      }
  }
}

// The same cases through the op kernels, which take the indirect GEMM for one group.
TEST(ConvIgemmInt8Kernel, QLinearConvAndConvIntegerOpsEqualTheReference) {
  uint32_t seed = 90;
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.name);
    const Operands o = make_operands(k, seed += 2);
    const DType xt = k.x_s8 ? DType::Int8 : DType::UInt8, wt = k.w_s8 ? DType::Int8 : DType::UInt8;
    const std::vector<int64_t> xd = k.one_d ? std::vector<int64_t>{k.n, k.c, k.w} : std::vector<int64_t>{k.n, k.c, k.h, k.w};
    const std::vector<int64_t> wd =
        k.one_d ? std::vector<int64_t>{k.m, k.c, k.kw} : std::vector<int64_t>{k.m, k.c, k.kh, k.kw};
    std::map<std::string, Attribute> attrs;
    if (k.one_d) {
      attrs["pads"] = ints_attr({k.pads[1], k.pads[3]});
      attrs["strides"] = ints_attr({k.strides[1]});
      attrs["dilations"] = ints_attr({k.dil[1]});
    } else {
      attrs["pads"] = ints_attr(k.pads);
      attrs["strides"] = ints_attr(k.strides);
      attrs["dilations"] = ints_attr(k.dil);
    }
    const TensorData x = tensor_bytes(xt, xd, o.x.data(), o.x.size());
    const TensorData w = tensor_bytes(wt, wd, o.w.data(), o.w.size());
    const int8_t xz8 = static_cast<int8_t>(k.xz);
    const TensorData xz = tensor_bytes(xt, {}, &xz8, 1);
    std::vector<uint8_t> wz8;
    for (int32_t z : o.wz) wz8.push_back(static_cast<uint8_t>(z));
    const TensorData wz = tensor_bytes(wt, {static_cast<int64_t>(wz8.size())}, wz8.data(), wz8.size());
    std::vector<float> ws(static_cast<size_t>(k.m));
    std::vector<int32_t> bias(static_cast<size_t>(k.m));
    for (int64_t m = 0; m < k.m; ++m) {
      ws[m] = 0.01f * static_cast<float>(1 + m % 5);
      bias[m] = static_cast<int32_t>(m * 331 % 4001) - 2000;
    }
    const float xscale = 0.02f, yscale = 0.03f * static_cast<float>(k.c * k.kh * k.kw);
    std::vector<float> scale(ws.size());
    for (size_t m = 0; m < ws.size(); ++m) scale[m] = xscale * ws[m] / yscale;
    const std::vector<int32_t> want = requantize_reference(o, scale, bias, 128, false);
    const TensorData xs = tensor_bytes(DType::Float, {}, &xscale, 4);
    const TensorData wst = tensor_bytes(DType::Float, {k.m}, ws.data(), ws.size() * 4);
    const TensorData ys = tensor_bytes(DType::Float, {}, &yscale, 4);
    const uint8_t yz8 = 128;
    const TensorData yz = tensor_bytes(DType::UInt8, {}, &yz8, 1);
    const TensorData b = tensor_bytes(DType::Int32, {k.m}, bias.data(), bias.size() * 4);
    cuvil::testing::on_every_cpu_path([&](int chunks) {
      for (const char* op : {"ConvInteger", "QLinearConv"}) {
        SCOPED_TRACE(op);
        Node node;
        node.op_type = op;
        node.opset = 13;
        node.name = std::string("n_") + op;
        node.attrs = attrs;
        node.outputs.push_back(0);
        const bool q = std::string(op) == "QLinearConv";
        std::vector<const TensorData*> in = q ? std::vector<const TensorData*>{&x, &xs, &xz, &w, &wst, &wz, &ys, &yz, &b}
                                              : std::vector<const TensorData*>{&x, &w, &xz, &wz};
        std::vector<rt::TensorView> views;
        for (const TensorData* t : in) views.push_back(cuvil::testing::view_of(*t));
        std::vector<const rt::TensorView*> ptrs;
        for (const rt::TensorView& v : views) ptrs.push_back(&v);
        cuvil::testing::ChunkedContext ctx(node, ptrs, chunks);
        const rt::Status st = rt::find_op_kernel("", op)(ctx);
        ASSERT_TRUE(st.is_ok()) << st.message();
        const rt::TensorView& out = ctx.output(0);
        ASSERT_EQ(out.numel(), static_cast<int64_t>(want.size()));
        std::vector<int32_t> got(want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          if (q) got[i] = static_cast<const uint8_t*>(out.data)[i];
          else got[i] = static_cast<const int32_t*>(out.data)[i];
        }
        EXPECT_EQ(got, q ? want : o.acc);
      }
    });
  }
}

}  // namespace
