// DeformConv (opset 19; ir/ops.def): a 2-D convolution whose every tap reads the input at its
// grid position plus a learned offset, bilinearly interpolated (zeros outside the image, as
// GridSample with align_corners 1 and zero padding, which the ONNX reference calls), and
// scaled by an optional mask. Per image: the sampled columns [C * kH * kW, OH * OW] (one row per
// input channel and tap, the channel's offset group's offsets and mask) are built over the
// workers, then each group's output rows are one GEMM of W's rows with its columns, the bias
// added after. float32; 1-D and 3-D inputs are refused (the reference has only 2-D).
#include <cmath>
#include <vector>

#include "runtime/cpu/ops/kernel_util.h"

namespace cuvil::rt::ops {
namespace {

// x[y, x] of an h x w plane, bilinear between the four neighbours, 0 where a neighbour is
// outside the plane.
float sample_bilinear(const float* plane, int64_t h, int64_t w, double y, double x) {
  const double y0f = std::floor(y), x0f = std::floor(x);
  if (!(y0f > -2 && x0f > -2 && y0f < static_cast<double>(h) && x0f < static_cast<double>(w)))
    return 0.f;  // all four neighbours outside (NaN offsets land here too)
  const int64_t y0 = static_cast<int64_t>(y0f), x0 = static_cast<int64_t>(x0f);
  const double ly = y - y0f, lx = x - x0f;
  auto at = [&](int64_t r, int64_t c) -> double {
    return r >= 0 && r < h && c >= 0 && c < w ? plane[r * w + c] : 0.0;
  };
  return static_cast<float>((1 - ly) * ((1 - lx) * at(y0, x0) + lx * at(y0, x0 + 1)) +
                            ly * ((1 - lx) * at(y0 + 1, x0) + lx * at(y0 + 1, x0 + 1)));
}

std::vector<int64_t> ints_attr(const OpContext& ctx, const char* name, size_t count, int64_t fill) {
  std::vector<int64_t> v = ctx.attrs().get_ints(name);
  if (v.empty()) v.assign(count, fill);
  return v;
}

}  // namespace

Status kernel_DeformConv(OpContext& ctx) {
  const TensorView *x = ctx.input(0), *w = ctx.input(1), *offset = ctx.input(2), *bias = ctx.input(3),
                   *mask = ctx.input(4);
  if (!x || !w || !offset) return ctx.error(StatusCode::kInvalidArgument, "expects inputs X, W and offset");
  for (const TensorView* t : {x, w, offset, bias, mask})
    if (t && t->dtype != DType::Float)
      return ctx.error(StatusCode::kUnsupported, "input of type ", dtype_name(t->dtype), "; only f32 is supported");
  if (x->dims.size() != 4 || w->dims.size() != 4 || offset->dims.size() != 4)
    return ctx.error(StatusCode::kUnsupported, "only 2-D DeformConv is supported (X ", dims_string(x->dims), ", W ",
                     dims_string(w->dims), ", offset ", dims_string(offset->dims), ")");
  const int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
  const int64_t M = w->dims[0], cpg = w->dims[1], kh = w->dims[2], kw = w->dims[3], K = kh * kw;
  const int64_t group = ctx.attrs().get_int("group", 1), og = ctx.attrs().get_int("offset_group", 1);
  const std::vector<int64_t> strides = ints_attr(ctx, "strides", 2, 1), dil = ints_attr(ctx, "dilations", 2, 1),
                             pads = ints_attr(ctx, "pads", 4, 0);
  if (strides.size() != 2 || dil.size() != 2 || pads.size() != 4 || strides[0] < 1 || strides[1] < 1 ||
      dil[0] < 1 || dil[1] < 1)
    return ctx.error(StatusCode::kInvalidArgument, "strides, dilations (2 each, >= 1) or pads (4) are malformed");
  if (group < 1 || og < 1 || C != cpg * group || M % group != 0 || C % og != 0)
    return ctx.error(StatusCode::kInvalidArgument, "X ", dims_string(x->dims), " and W ", dims_string(w->dims),
                     " do not fit group ", group, " and offset_group ", og);
  const int64_t OH = (H + pads[0] + pads[2] - (kh - 1) * dil[0] - 1) / strides[0] + 1;
  const int64_t OW = (W + pads[1] + pads[3] - (kw - 1) * dil[1] - 1) / strides[1] + 1;
  if (OH < 1 || OW < 1 || offset->dims != std::vector<int64_t>{N, og * K * 2, OH, OW})
    return ctx.error(StatusCode::kInvalidArgument, "offset ", dims_string(offset->dims), " is not [", N, ", ",
                     og * K * 2, ", ", OH, ", ", OW, "]");
  if (mask && mask->dims != std::vector<int64_t>{N, og * K, OH, OW})
    return ctx.error(StatusCode::kInvalidArgument, "mask ", dims_string(mask->dims), " is not [", N, ", ", og * K,
                     ", ", OH, ", ", OW, "]");
  if (bias && bias->dims != std::vector<int64_t>{M})
    return ctx.error(StatusCode::kInvalidArgument, "B ", dims_string(bias->dims), " is not [", M, "]");
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Float, {N, M, OH, OW}, &y));
  const int64_t P = OH * OW, cpo = C / og, mpg = M / group;
  std::vector<float> cols(static_cast<size_t>(C * K * P));
  for (int64_t n = 0; n < N; ++n) {
    const float* off = offset->as<float>() + n * og * K * 2 * P;
    const float* msk = mask ? mask->as<float>() + n * og * K * P : nullptr;
    const float* img = x->as<float>() + n * C * H * W;
    // Row (c, t) of the columns: channel c sampled under tap t = (i, j) at every output position.
    parallel_range(ctx, C * K, 1, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t c = row / K, t = row % K, i = t / kw, j = t % kw, g = c / cpo;
        const float* dy = off + ((g * K + t) * 2) * P;  // offsets: [og][kh][kw][2 (y, x)][OH][OW]
        const float* dx = dy + P;
        const float* m = msk ? msk + (g * K + t) * P : nullptr;
        float* out = cols.data() + row * P;
        for (int64_t p = 0; p < P; ++p) {
          const int64_t oy = p / OW, ox = p % OW;
          const double sy = static_cast<double>(oy * strides[0] - pads[0] + i * dil[0]) + dy[p];
          const double sx = static_cast<double>(ox * strides[1] - pads[1] + j * dil[1]) + dx[p];
          const float v = sample_bilinear(img + c * H * W, H, W, sy, sx);
          out[p] = m ? v * m[p] : v;
        }
      }
    });
    float* yn = y->as<float>() + n * M * P;
    for (int64_t g = 0; g < group; ++g)
      gemm(&ctx, false, false, mpg, P, cpg * K, 1.f, w->as<float>() + g * mpg * cpg * K, cpg * K,
           cols.data() + g * cpg * K * P, P, 0.f, yn + g * mpg * P, P);
    if (bias)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t p = 0; p < P; ++p) yn[m * P + p] += bias->as<float>()[m];
  }
  return Status::ok();
}

}  // namespace cuvil::rt::ops
