// DFT's inverse real FFT (onesided = 1 with inverse = 1): the output against the direct sum
// over the Hermitian spectrum whose first half the input holds, for the default length
// 2 (n - 1), an odd length and a length that drops bins.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernel_harness.h"
#include "shape_test_util.h"

namespace cuvil {
namespace {

using shape_test::int_attr;

TEST(DftKernel, InverseRealFftEqualsTheDirectSum) {
  const int64_t batch = 2, bins = 5, inner = 3;  // x [batch, bins, inner, 2], axis 1
  std::vector<float> x(static_cast<size_t>(batch * bins * inner * 2));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.61f * static_cast<float>(i) + 0.3f) * 3.f;
  rt::TensorView xv;
  xv.dtype = DType::Float;
  xv.dims = {batch, bins, inner, 2};
  xv.data = x.data();
  for (int64_t given : {0, 9, 6}) {  // 0: the default, 2 (bins - 1) = 8
    SCOPED_TRACE("dft_length " + std::to_string(given));
    const int64_t n = given ? given : 2 * (bins - 1);
    Node node;
    node.op_type = "DFT";
    node.opset = 17;
    node.name = "irfft";
    node.attrs = {{"onesided", int_attr(1)}, {"inverse", int_attr(1)}, {"axis", int_attr(1)}};
    node.outputs = {0};
    int64_t len_value = given;
    rt::TensorView lv;
    lv.dtype = DType::Int64;
    lv.data = &len_value;
    std::vector<const rt::TensorView*> inputs = {&xv};
    if (given) inputs.push_back(&lv);
    testing::ChunkedContext ctx(node, inputs, 1);
    const rt::OpKernelFn fn = rt::find_op_kernel("", "DFT");
    ASSERT_NE(fn, nullptr);
    const rt::Status st = fn(ctx);
    ASSERT_TRUE(st.is_ok()) << st.message();
    const rt::TensorView& y = ctx.output(0);
    ASSERT_EQ(y.dims, (std::vector<int64_t>{batch, n, inner, 1}));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < inner; ++i)
        for (int64_t t = 0; t < n; ++t) {
          // bin k's (re, im); zero past the input's bins
          auto bin = [&](int64_t k, int part) -> double {
            return k < bins ? x[static_cast<size_t>(((b * bins + k) * inner + i) * 2 + part)] : 0.0;
          };
          double sum = bin(0, 0);  // the imaginary parts of bin 0 (and n/2) do not count
          for (int64_t k = 1; 2 * k < n; ++k) {
            const double a = 2 * M_PI * static_cast<double>(k * t) / static_cast<double>(n);
            sum += 2 * (bin(k, 0) * std::cos(a) - bin(k, 1) * std::sin(a));
          }
          if (n % 2 == 0) sum += bin(n / 2, 0) * ((t % 2) ? -1.0 : 1.0);
          EXPECT_NEAR(y.as<float>()[(b * n + t) * inner + i], sum / static_cast<double>(n), 1e-5)
              << b << "," << t << "," << i;
        }
  }
}

}  // namespace
}  // namespace cuvil
