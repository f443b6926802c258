// MaxPool's 2-D float path (runtime/cpu/ops/nn.cpp, max_pool_2d_plane) against the generic
// N-d window walk of the same kernel: asking for the Indices output takes the generic path, so
// every case runs both and compares the values bit for bit, over strides, pads (symmetric,
// asymmetric, larger than the kernel's reach: windows wholly in the padding), dilations,
// ceil_mode, kernels wider than the input, and inputs with NaNs and infinities where the
// generic rule (first tap inside the input, then `v > best`) decides (suite PoolKernel).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>

#include "kernel_harness.h"

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

}  // namespace
