// DeformConv's kernel against a scalar transcription of the ONNX reference
// (onnx/reference/ops/op_deform_conv.py: every tap samples X bilinearly at its grid position
// plus its offset, zeros outside, times the mask), with groups, offset groups, strides, pads,
// dilations, a bias and fractional offsets that leave the image; and with zero offsets and no
// mask it is the plain convolution.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernel_harness.h"
#include "shape_test_util.h"

namespace cuvil {
namespace {

using shape_test::int_attr;
using shape_test::ints_attr;

rt::TensorView view(std::vector<float>& v, std::vector<int64_t> dims) {
  rt::TensorView t;
  t.dtype = DType::Float;
  t.dims = std::move(dims);
  t.data = v.data();
  return t;
}

double bilinear(const std::vector<float>& x, int64_t base, int64_t h, int64_t w, double y, double xx) {
  const double y0 = std::floor(y), x0 = std::floor(xx);
  double sum = 0;
  for (int dy = 0; dy < 2; ++dy)
    for (int dx = 0; dx < 2; ++dx) {
      const int64_t r = static_cast<int64_t>(y0) + dy, c = static_cast<int64_t>(x0) + dx;
      if (r < 0 || r >= h || c < 0 || c >= w) continue;
      const double wy = dy ? y - y0 : 1 - (y - y0), wx = dx ? xx - x0 : 1 - (xx - x0);
      sum += wy * wx * x[static_cast<size_t>(base + r * w + c)];
    }
  return sum;
}

TEST(DeformConvKernel, EqualsTheReference) {
  const int64_t N = 2, C = 4, H = 6, W = 5, M = 4, group = 2, og = 2, kh = 3, kw = 2;
  const int64_t sh = 2, sw = 1, dh = 1, dw = 2, pt = 1, pl = 1, pb = 1, pr = 0, K = kh * kw;
  const int64_t OH = (H + pt + pb - (kh - 1) * dh - 1) / sh + 1, OW = (W + pl + pr - (kw - 1) * dw - 1) / sw + 1;
  for (int zero_offsets = 0; zero_offsets < 2; ++zero_offsets) {
    SCOPED_TRACE(zero_offsets ? "zero offsets, no mask: a convolution" : "offsets and mask");
    std::vector<float> x(N * C * H * W), w(M * (C / group) * K), off(N * og * K * 2 * OH * OW), mask(N * og * K * OH * OW),
        b(M);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.53f * static_cast<float>(i));
    for (size_t i = 0; i < off.size(); ++i) off[i] = zero_offsets ? 0.f : 1.7f * std::sin(0.91f * static_cast<float>(i));
    for (size_t i = 0; i < mask.size(); ++i) mask[i] = 0.5f + 0.5f * std::cos(0.29f * static_cast<float>(i));
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * static_cast<float>(i) - 0.2f;
    Node node;
    node.op_type = "DeformConv";
    node.opset = 19;
    node.name = "dcn";
    node.attrs = {{"group", int_attr(group)},         {"offset_group", int_attr(og)},
                  {"strides", ints_attr({sh, sw})},    {"dilations", ints_attr({dh, dw})},
                  {"pads", ints_attr({pt, pl, pb, pr})}, {"kernel_shape", ints_attr({kh, kw})}};
    node.outputs = {0};
    rt::TensorView xv = view(x, {N, C, H, W}), wv = view(w, {M, C / group, kh, kw}),
                   ov = view(off, {N, og * K * 2, OH, OW}), bv = view(b, {M}), mv = view(mask, {N, og * K, OH, OW});
    std::vector<const rt::TensorView*> inputs = {&xv, &wv, &ov, &bv};
    if (!zero_offsets) inputs.push_back(&mv);
    cuvil::testing::on_every_cpu_path([&](int chunks) {
      testing::ChunkedContext ctx(node, inputs, chunks);
      const rt::Status st = rt::find_op_kernel("", "DeformConv")(ctx);
      ASSERT_TRUE(st.is_ok()) << st.message();
      const rt::TensorView& y = ctx.output(0);
      ASSERT_EQ(y.dims, (std::vector<int64_t>{N, M, OH, OW}));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m)
          for (int64_t oy = 0; oy < OH; ++oy)
            for (int64_t ox = 0; ox < OW; ++ox) {
              double want = b[static_cast<size_t>(m)];
              const int64_t g = m / (M / group);
              for (int64_t cl = 0; cl < C / group; ++cl) {
                const int64_t c = g * (C / group) + cl, o = c / (C / og);
                for (int64_t i = 0; i < kh; ++i)
                  for (int64_t j = 0; j < kw; ++j) {
                    const int64_t t = i * kw + j, p = oy * OW + ox;
                    const double ofy = off[static_cast<size_t>((((n * og + o) * K + t) * 2 + 0) * OH * OW + p)];
                    const double ofx = off[static_cast<size_t>((((n * og + o) * K + t) * 2 + 1) * OH * OW + p)];
                    const double sy = oy * sh - pt + i * dh + ofy, sx = ox * sw - pl + j * dw + ofx;
                    double v = bilinear(x, (n * C + c) * H * W, H, W, sy, sx);
                    if (!zero_offsets) v *= mask[static_cast<size_t>(((n * og + o) * K + t) * OH * OW + p)];
                    want += v * w[static_cast<size_t>((m * (C / group) + cl) * K + t)];
                  }
              }
              EXPECT_NEAR(y.as<float>()[((n * M + m) * OH + oy) * OW + ox], want, 1e-4) << n << "," << m << "," << oy << "," << ox;
            }
    });
  }
}

}  // namespace
}  // namespace cuvil
