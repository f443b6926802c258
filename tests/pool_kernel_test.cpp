// The pool kernels of runtime/cpu/ops/nn.cpp (suite PoolKernel).
//
// MaxPool's 2-D float path (max_pool_2d_plane) against the generic N-d window walk of the same
// kernel: asking for the Indices output takes the generic path, so every case runs both and
// compares the values bit for bit, over strides, pads (symmetric, asymmetric, larger than the
// kernel's reach: windows wholly in the padding), dilations, ceil_mode, kernels wider than the
// input, and inputs with NaNs and infinities where the generic rule (first tap inside the input,
// then `v > best`) decides.
//
// ChannelsLast*: the layout = "NHWC" forms of MaxPool, AveragePool, GlobalAveragePool and
// GlobalMaxPool (runtime/cpu/ops/pool_nhwc.h) on every CPU path this machine runs, against the
// NCHW kernel on the same values transposed, bit for bit: 1-D, 2-D and 3-D windows with pads,
// strides, dilations, ceil_mode and count_include_pad, channel counts around the vector widths,
// NaNs and infinities, and the work split into chunks that cut planes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>

#include "kernel_harness.h"
#include "runtime/cpu/cpu_features.h"

using namespace cuvil;

namespace {

Attribute attr_int(int64_t v) { Attribute a; a.kind = Attribute::Kind::Int; a.i = v; return a; }
Attribute attr_ints(std::vector<int64_t> v) { Attribute a; a.kind = Attribute::Kind::Ints; a.ints = v; return a; }

struct PoolCase {
  int64_t h, w, kh, kw, sh, sw, dh, dw;
  std::vector<int64_t> pads;  // h_begin, w_begin, h_end, w_end
  int64_t ceil_mode;
};

std::vector<float> run_max_pool(const rt::TensorView& x, const PoolCase& c, bool with_indices, std::vector<int64_t>* dims) {
  Node node;
  node.op_type = "MaxPool";
  node.opset = 12;
  node.name = "pool";
  node.attrs["kernel_shape"] = attr_ints({c.kh, c.kw});
  node.attrs["strides"] = attr_ints({c.sh, c.sw});
  node.attrs["dilations"] = attr_ints({c.dh, c.dw});
  node.attrs["pads"] = attr_ints(c.pads);
  node.attrs["ceil_mode"] = attr_int(c.ceil_mode);
  node.outputs = {0};
  if (with_indices) node.outputs.push_back(1);
  cuvil::testing::HeapOpContext ctx(node, {&x}, with_indices ? 2 : 1);
  rt::OpKernelFn fn = rt::find_op_kernel("", "MaxPool");
  EXPECT_NE(fn, nullptr);
  const rt::Status st = fn(ctx);
  EXPECT_TRUE(st.is_ok()) << st.message();
  if (!st.is_ok()) return {};
  const rt::TensorView& y = ctx.output(0);
  *dims = y.dims;
  return std::vector<float>(y.as<float>(), y.as<float>() + y.numel());
}

TEST(PoolKernel, MaxPool2dFastPathEqualsTheGenericWalk) {
  const PoolCase cases[] = {
      {112, 112, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, 0},  // ResNet's stem pool
      {7, 9, 2, 2, 2, 2, 1, 1, {0, 0, 0, 0}, 0},
      {7, 9, 2, 2, 2, 2, 1, 1, {0, 0, 0, 0}, 1},
      {8, 8, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, 0},
      {6, 10, 3, 2, 1, 3, 2, 1, {0, 2, 1, 0}, 1},
      {5, 5, 5, 5, 1, 1, 1, 1, {2, 2, 2, 2}, 0},
      {4, 4, 7, 7, 1, 1, 1, 1, {3, 3, 3, 3}, 0},  // kernel wider than the input
      {9, 11, 3, 3, 3, 2, 2, 3, {1, 0, 2, 3}, 0},
      {3, 20, 1, 4, 1, 4, 1, 1, {0, 0, 0, 0}, 0},
      {10, 10, 2, 3, 2, 2, 3, 2, {4, 4, 4, 4}, 1},  // pads past the dilated kernel's reach
  };
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(-3.f, 3.f);
  for (const PoolCase& c : cases) {
    SCOPED_TRACE(std::to_string(c.h) + "x" + std::to_string(c.w) + " k" + std::to_string(c.kh) + "x" +
                 std::to_string(c.kw) + " s" + std::to_string(c.sh) + "," + std::to_string(c.sw) + " d" +
                 std::to_string(c.dh) + "," + std::to_string(c.dw) + " ceil " + std::to_string(c.ceil_mode));
    for (int special = 0; special < 2; ++special) {
      std::vector<float> data(static_cast<size_t>(2 * 3 * c.h * c.w));
      for (float& v : data) v = dist(gen);
      if (special)  // NaNs and infinities at random places, some first in their windows
        for (size_t i = 0; i < data.size(); i += 1 + gen() % 5)
          data[i] = (gen() % 3 == 0) ? std::numeric_limits<float>::quiet_NaN()
                                     : (gen() % 2 ? std::numeric_limits<float>::infinity()
                                                  : -std::numeric_limits<float>::infinity());
      rt::TensorView x;
      x.dtype = DType::Float;
      x.dims = {2, 3, c.h, c.w};
      x.data = data.data();
      std::vector<int64_t> fast_dims, generic_dims;
      const std::vector<float> fast = run_max_pool(x, c, false, &fast_dims);
      const std::vector<float> generic = run_max_pool(x, c, true, &generic_dims);
      ASSERT_EQ(fast_dims, generic_dims);
      ASSERT_EQ(fast.size(), generic.size());
      EXPECT_EQ(0, std::memcmp(fast.data(), generic.data(), fast.size() * sizeof(float)))
          << "the fast path differs from the generic walk";
    }
  }
}

// ---- channels-last pools ----------------------------------------------------------------------

struct Tensor {
  std::vector<int64_t> dims;
  std::vector<float> data;
};

// [N, C, D1, ...] -> [N, D1, ..., C] and back.
Tensor to_channels_last(const Tensor& t) {
  const int64_t n = t.dims[0], c = t.dims[1];
  int64_t sp = 1;
  for (size_t i = 2; i < t.dims.size(); ++i) sp *= t.dims[i];
  Tensor o;
  o.dims = {n};
  o.dims.insert(o.dims.end(), t.dims.begin() + 2, t.dims.end());
  o.dims.push_back(c);
  o.data.resize(t.data.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < sp; ++p) o.data[static_cast<size_t>((i * sp + p) * c + ch)] = t.data[static_cast<size_t>((i * c + ch) * sp + p)];
  return o;
}

Attribute attr_string(const std::string& v) { Attribute a; a.kind = Attribute::Kind::String; a.s = v; return a; }

// Runs op_type over x with `attrs` (plus layout when NHWC); chunks > 1 splits the work.
rt::Status run_pool(const std::string& op_type, std::map<std::string, Attribute> attrs, const Tensor& x, bool nhwc,
                    int chunks, Tensor* y) {
  Node node;
  node.op_type = op_type;
  node.opset = 19;
  node.name = "pool";
  node.attrs = std::move(attrs);
  if (nhwc) node.attrs["layout"] = attr_string("NHWC");
  node.outputs = {0};
  rt::TensorView xv;
  xv.dtype = DType::Float;
  xv.dims = x.dims;
  xv.data = const_cast<float*>(x.data.data());
  cuvil::testing::ChunkedContext ctx(node, {&xv}, chunks);
  rt::OpKernelFn fn = rt::find_op_kernel("", op_type);
  EXPECT_NE(fn, nullptr);
  const rt::Status st = fn(ctx);
  if (!st.is_ok()) return st;
  const rt::TensorView& out = ctx.output(0);
  y->dims = out.dims;
  y->data.assign(out.as<float>(), out.as<float>() + out.numel());
  return st;
}

std::vector<float> random_values(size_t count, bool special, std::mt19937& gen) {
  std::uniform_real_distribution<float> dist(-3.f, 3.f);
  std::vector<float> v(count);
  for (float& f : v) f = dist(gen);
  if (special)
    for (size_t i = 0; i < v.size(); i += 1 + gen() % 7)
      v[i] = (gen() % 3 == 0) ? std::numeric_limits<float>::quiet_NaN()
                              : (gen() % 2 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity());
  return v;
}

// Index of the first element whose bits differ, or -1. Any NaN equals any NaN: which NaN a sum
// of NaNs and opposite infinities yields depends on the order the compiler gives the operands of
// an addition (x86 keeps the first operand's payload; inf + -inf gives the negative default NaN),
// and IEEE 754 and ONNX leave it open; every other value must match bit for bit.
int64_t first_difference(const std::vector<float>& got, const std::vector<float>& want) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

// For every CPU path and value set: NHWC(transpose(x)) == transpose(NCHW(x)) bit for bit (NaNs
// as NaNs).
void expect_channels_last_equals_nchw(const std::string& op_type, const std::map<std::string, Attribute>& attrs,
                                      const std::vector<int64_t>& dims, const std::string& label) {
  SCOPED_TRACE(op_type + " " + label);
  std::mt19937 gen(11);
  const rt::CpuPath before = rt::active_cpu_path();
  for (int special = 0; special < 2; ++special) {
    Tensor x;
    x.dims = dims;
    size_t count = 1;
    for (int64_t d : dims) count *= static_cast<size_t>(d);
    x.data = random_values(count, special != 0, gen);
    Tensor want;
    ASSERT_TRUE(run_pool(op_type, attrs, x, false, 1, &want).is_ok());
    const Tensor want_nhwc = to_channels_last(want);
    for (rt::CpuPath path : rt::supported_cpu_paths()) {
      ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
      for (int chunks : {1, 5}) {
        SCOPED_TRACE(std::string(rt::cpu_path_name(path)) + ", " + std::to_string(chunks) + " chunks, special " +
                     std::to_string(special));
        Tensor got;
        const rt::Status st = run_pool(op_type, attrs, to_channels_last(x), true, chunks, &got);
        ASSERT_TRUE(st.is_ok()) << st.message();
        ASSERT_EQ(got.dims, want_nhwc.dims);
        ASSERT_EQ(got.data.size(), want_nhwc.data.size());
        EXPECT_EQ(first_difference(got.data, want_nhwc.data), -1) << "NHWC differs from NCHW at this index";
      }
    }
  }
  rt::set_cpu_path_for_testing(before);
}

struct WindowCase {
  std::vector<int64_t> spatial, kernel, strides, dilations, pads;
  int64_t ceil_mode;
};

// 1-D, 2-D and 3-D windows; channel counts below, at and around the 4/8/16-lane widths and
// their four-vector blocks.
const WindowCase kWindowCases[] = {
    {{20, 20}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 0},  // ResNet's stem pool, on a smaller image
    {{7, 9}, {2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}, 1},
    {{8, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 0},
    {{6, 10}, {3, 2}, {1, 3}, {2, 1}, {0, 2, 1, 0}, 1},
    {{4, 4}, {7, 7}, {1, 1}, {1, 1}, {3, 3, 3, 3}, 0},  // kernel wider than the input
    {{10, 10}, {2, 3}, {2, 2}, {3, 2}, {4, 4, 4, 4}, 1},  // windows wholly in the padding
    {{13}, {3}, {2}, {2}, {1, 2}, 1},
    {{9}, {4}, {3}, {1}, {0, 0}, 0},
    {{5, 6, 7}, {2, 3, 2}, {2, 1, 2}, {1, 2, 1}, {1, 0, 1, 0, 2, 1}, 1},
};
const int64_t kChannelCounts[] = {1, 3, 8, 13, 37, 64};

std::string window_label(const WindowCase& w, int64_t c) {
  auto list = [](const std::vector<int64_t>& v) {
    std::string s;
    for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
    return "[" + s + "]";
  };
  return "in " + list(w.spatial) + " k " + list(w.kernel) + " s " + list(w.strides) + " d " + list(w.dilations) +
         " pads " + list(w.pads) + " ceil " + std::to_string(w.ceil_mode) + " C " + std::to_string(c);
}

std::map<std::string, Attribute> window_attrs(const WindowCase& w) {
  return {{"kernel_shape", attr_ints(w.kernel)}, {"strides", attr_ints(w.strides)}, {"dilations", attr_ints(w.dilations)},
          {"pads", attr_ints(w.pads)}, {"ceil_mode", attr_int(w.ceil_mode)}};
}

std::vector<int64_t> image(int64_t n, int64_t c, const WindowCase& w) {
  std::vector<int64_t> dims = {n, c};
  dims.insert(dims.end(), w.spatial.begin(), w.spatial.end());
  return dims;
}

TEST(PoolKernel, ChannelsLastMaxPoolEqualsNchw) {
  for (const WindowCase& w : kWindowCases)
    for (int64_t c : kChannelCounts)
      expect_channels_last_equals_nchw("MaxPool", window_attrs(w), image(2, c, w), window_label(w, c));
}

TEST(PoolKernel, ChannelsLastAveragePoolEqualsNchw) {
  for (const WindowCase& w : kWindowCases)
    for (int64_t c : kChannelCounts)
      for (int64_t include_pad : {0, 1}) {
        std::map<std::string, Attribute> attrs = window_attrs(w);
        attrs["count_include_pad"] = attr_int(include_pad);
        expect_channels_last_equals_nchw("AveragePool", attrs, image(2, c, w),
                                         window_label(w, c) + " count_include_pad " + std::to_string(include_pad));
      }
}

TEST(PoolKernel, ChannelsLastAutoPadEqualsNchw) {
  for (const char* pad : {"SAME_UPPER", "SAME_LOWER", "VALID"})
    for (const char* op : {"MaxPool", "AveragePool"}) {
      std::map<std::string, Attribute> attrs = {{"kernel_shape", attr_ints({3, 2})}, {"strides", attr_ints({2, 1})},
                                                {"auto_pad", attr_string(pad)}, {"count_include_pad", attr_int(1)}};
      if (std::string(op) == "MaxPool") attrs.erase("count_include_pad");
      expect_channels_last_equals_nchw(op, attrs, {1, 19, 7, 6}, pad);
    }
}

TEST(PoolKernel, ChannelsLastGlobalPoolsEqualNchw) {
  const std::vector<std::vector<int64_t>> shapes = {{2, 37, 7, 7}, {1, 64, 3, 1}, {3, 5, 11}, {1, 13, 2, 3, 4}, {2, 8, 1, 1}};
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"})
    for (const std::vector<int64_t>& dims : shapes) {
      std::string label;
      for (int64_t d : dims) label += std::to_string(d) + " ";
      expect_channels_last_equals_nchw(op, {}, dims, label);
    }
}

TEST(PoolKernel, ChannelsLastRefusesWhatItDoesNotCompute) {
  Tensor x;
  x.dims = {1, 3, 4, 2};  // NHWC [N, H, W, C]
  x.data.assign(24, 1.f);
  Tensor y;
  const std::map<std::string, Attribute> k2 = {{"kernel_shape", attr_ints({2, 2})}};
  rt::Status st = run_pool("LpPool", k2, x, true, 1, &y);
  EXPECT_NE(st.message().find("layout NHWC is not supported by Lp pools"), std::string::npos) << st.message();
  std::map<std::string, Attribute> odd = k2;
  odd["layout"] = attr_string("CHWN");
  st = run_pool("MaxPool", odd, x, false, 1, &y);
  EXPECT_NE(st.message().find("attribute 'layout' is 'CHWN', not NCHW or NHWC"), std::string::npos) << st.message();
  // MaxPool's Indices address NCHW positions: asking for them in NHWC is refused.
  Node node;
  node.op_type = "MaxPool";
  node.opset = 12;
  node.name = "pool";
  node.attrs = k2;
  node.attrs["layout"] = attr_string("NHWC");
  node.outputs = {0, 1};
  rt::TensorView xv;
  xv.dtype = DType::Float;
  xv.dims = x.dims;
  xv.data = x.data.data();
  cuvil::testing::HeapOpContext ctx(node, {&xv}, 2);
  st = rt::find_op_kernel("", "MaxPool")(ctx);
  EXPECT_NE(st.message().find("layout NHWC has no Indices output"), std::string::npos) << st.message();
  std::vector<double> doubles(24, 1.0);
  xv.dtype = DType::Double;
  xv.data = doubles.data();
  node.outputs = {0};
  cuvil::testing::HeapOpContext dctx(node, {&xv}, 1);
  st = rt::find_op_kernel("", "MaxPool")(dctx);
  EXPECT_NE(st.message().find("layout NHWC takes float32 only, got f64"), std::string::npos) << st.message();
}

}  // namespace
