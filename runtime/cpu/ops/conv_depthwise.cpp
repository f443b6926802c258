// conv_depthwise.h: the driver (task split over threads, phase planes, transposed weights),
// the portable path's trait (4-lane GCC vectors, multiply then add) and the dispatch to the
// AVX2 and AVX-512 paths by active_cpu_path().
#include "runtime/cpu/ops/conv_depthwise.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/ops/conv_igemm_args.h"
#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/ops/portable_vec4.h"
#include "support/checked.h"

namespace cuvil::rt::ops {
namespace dw_portable {
namespace {

struct Portable : PortableV4Memory {
  static V add(V a, V b) { return a + b; }
  static V fma(V a, V b, V c) { return a * b + c; }  // two roundings: this file is built without contraction
  static V relu(V v) { return (v > zero()) | (v != v) ? v : zero(); }
  static V clip(V v, V lo, V hi) { return v < lo ? lo : (v > hi ? hi : v); }
  static V leaky(V v, V a) { return v < zero() ? a * v : v; }
};

#include "runtime/cpu/ops/conv_depthwise_impl.h"
#include "runtime/cpu/ops/conv_igemm_impl.h"

}  // namespace

CUVIL_DW_DEFINE_ENTRY_POINTS(Portable)
CUVIL_IGEMM_DEFINE_ENTRY_POINTS(Portable)

}  // namespace dw_portable

#if defined(__x86_64__)
namespace dw_avx2 {
CUVIL_DW_PATH_ENTRY_POINTS
}
namespace dw_avx512 {
CUVIL_DW_PATH_ENTRY_POINTS
}
#endif

namespace {

void run_plane_rows(CpuPath path, const DwPlaneArgs& a) {
  switch (path) {
#if defined(__x86_64__)
    case CpuPath::Avx512: return dw_avx512::plane_rows(a);
    case CpuPath::Avx2: return dw_avx2::plane_rows(a);
#endif
    default: return dw_portable::plane_rows(a);
  }
}
void run_fill_planes(CpuPath path, const float* xc, const DwShape& s, int64_t eh, int64_t ew, float* dst) {
  switch (path) {
#if defined(__x86_64__)
    case CpuPath::Avx512: return dw_avx512::fill_planes(xc, s, eh, ew, dst);
    case CpuPath::Avx2: return dw_avx2::fill_planes(xc, s, eh, ew, dst);
#endif
    default: return dw_portable::fill_planes(xc, s, eh, ew, dst);
  }
}
void run_nhwc_rows(CpuPath path, const DwNhwcArgs& a) {
  switch (path) {
#if defined(__x86_64__)
    case CpuPath::Avx512: return dw_avx512::nhwc_rows(a);
    case CpuPath::Avx2: return dw_avx2::nhwc_rows(a);
#endif
    default: return dw_portable::nhwc_rows(a);
  }
}

// NCHW. Per (image, group) task: the group's cg input channels become sh * sw phase planes
// each of eh x ew floats, where plane (p, q) element (i, j) is the zero-padded input at row
// i * sh + p, column j * sw + q. Output (oh, ow) under tap (kh, kw) reads padded row
// oh * sh + kh * dh = (oh + kh * dh / sh) * sh + (kh * dh) % sh: plane ((kh * dh) % sh, ...),
// row oh + (kh * dh) / sh, and likewise for columns, so each tap is one offset from the output
// position and consecutive output columns read consecutive floats.
void depthwise_nchw(OpContext& ctx, const DwShape& s, const float* x, const float* w, const float* bias,
                    const DwEpilogue& e, float* y) {
  const int64_t cg = s.c / s.group, mg = s.m / s.group, kk = s.k_h * s.k_w;
  const int64_t eh = s.out_h + (s.k_h - 1) * s.d_h / s.s_h, ew = s.out_w + (s.k_w - 1) * s.d_w / s.s_w;
  const int64_t plane = eh * ew, per_channel = s.s_h * s.s_w * plane;
  const int64_t pin = s.in_h * s.in_w, pout = s.out_h * s.out_w;
  // Tap offsets within the group's planes, in (input channel, kh, kw) order: W's own order.
  std::vector<int64_t> off(static_cast<size_t>(cg * kk));
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t kh = 0; kh < s.k_h; ++kh)
      for (int64_t kw = 0; kw < s.k_w; ++kw) {
        const int64_t rh = kh * s.d_h, rw = kw * s.d_w;
        off[(c * s.k_h + kh) * s.k_w + kw] =
            c * per_channel + ((rh % s.s_h) * s.s_w + rw % s.s_w) * plane + (rh / s.s_h) * ew + rw / s.s_w;
      }
  const CpuPath path = active_cpu_path();
  parallel_range(ctx, s.n * s.group, 1, [&](int64_t begin, int64_t end) {
    // Not value-initialised: every plane element is written below; only the slack is zeroed.
    const int64_t slack = ew + kDwPlaneSlack;
    std::unique_ptr<float[]> planes(new float[static_cast<size_t>(cg * per_channel + slack)]);
    std::fill(planes.get() + cg * per_channel, planes.get() + cg * per_channel + slack, 0.f);
    std::unique_ptr<float[]> scratch(new float[static_cast<size_t>(s.out_h * ew + kDwPlaneSlack)]);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n = task / s.group, g = task % s.group;
      for (int64_t c = 0; c < cg; ++c) {
        const float* xc = x + (n * s.c + g * cg + c) * pin;
        run_fill_planes(path, xc, s, eh, ew, planes.get() + c * per_channel);
      }
      for (int64_t mi = 0; mi < mg; ++mi) {
        const int64_t m = g * mg + mi;
        DwPlaneArgs a;
        a.planes = planes.get();
        a.off = off.data();
        a.w = w + m * cg * kk;
        a.ntaps = cg * kk;
        a.rows = s.out_h;
        a.cols = s.out_w;
        a.row_stride = ew;
        a.bias = bias ? bias + m : nullptr;
        a.residual = e.residual ? e.residual + (n * s.m + m) * pout : nullptr;
        a.y = y + (n * s.m + m) * pout;
        a.scratch = scratch.get();
        a.e = &e;
        run_plane_rows(path, a);
      }
    }
  });
}

// NHWC, one input and one output channel per group: split over (image, output row) tasks.
void depthwise_nhwc(OpContext& ctx, const DwShape& s, const float* x, const float* w, const float* bias,
                    const DwEpilogue& e, float* y) {
  const int64_t kk = s.k_h * s.k_w;
  std::vector<float> wt(static_cast<size_t>(kk * s.c));  // [tap][channel]: channels contiguous
  for (int64_t c = 0; c < s.c; ++c)
    for (int64_t t = 0; t < kk; ++t) wt[t * s.c + c] = w[c * kk + t];
  const CpuPath path = active_cpu_path();
  const int64_t in_img = s.in_h * s.in_w * s.c, out_img = s.out_h * s.out_w * s.c;
  parallel_range(ctx, s.n * s.out_h, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end;) {
      const int64_t n = task / s.out_h, oh0 = task % s.out_h;
      const int64_t oh1 = std::min(s.out_h, oh0 + (end - task));
      DwNhwcArgs a;
      a.s = &s;
      a.x = x + n * in_img;
      a.wt = wt.data();
      a.bias = bias;
      a.residual = e.residual ? e.residual + n * out_img : nullptr;
      a.y = y + n * out_img;
      a.oh0 = oh0;
      a.oh1 = oh1;
      a.e = &e;
      run_nhwc_rows(path, a);
      task += oh1 - oh0;
    }
  });
}

constexpr int64_t kNhwcMaxTaps = 64;  // conv_depthwise_impl.h's per-position tap list

}  // namespace

void epilogue_row(float* y, int64_t n, const float* bias, bool bias_vec, const float* res, const DwEpilogue& e) {
  switch (active_cpu_path()) {
#if defined(__x86_64__)
    case CpuPath::Avx512: return dw_avx512::epilogue_row(y, n, bias, bias_vec, res, e);
    case CpuPath::Avx2: return dw_avx2::epilogue_row(y, n, bias, bias_vec, res, e);
#endif
    default: return dw_portable::epilogue_row(y, n, bias, bias_vec, res, e);
  }
}

void activate_row(float* y, int64_t n, const DwEpilogue& e) {
  switch (active_cpu_path()) {
#if defined(__x86_64__)
    case CpuPath::Avx512: return dw_avx512::activate_row(y, n, e);
    case CpuPath::Avx2: return dw_avx2::activate_row(y, n, e);
#endif
    default: return dw_portable::activate_row(y, n, e);
  }
}

bool conv_depthwise_applies(const DwShape& s, bool channels_last) {
  if (s.group <= 1 || s.c % s.group != 0 || s.m % s.group != 0) return false;
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  if (channels_last) return cg == 1 && mg == 1 && s.k_h * s.k_w <= kNhwcMaxTaps;
  // Fewer output channels per group than any GEMM register tile has rows (the direct kernel
  // reads each input once per output channel, the GEMM would run mostly empty tiles).
  if (mg >= 4) return false;
  // One channel's phase planes, checked: about the padded input, unless pads and strides are
  // huge next to the output (then most of the planes would be padding nobody reads).
  const int64_t eh = s.out_h + (s.k_h - 1) * s.d_h / s.s_h, ew = s.out_w + (s.k_w - 1) * s.d_w / s.s_w;
  std::optional<int64_t> planes = checked_mul(eh, ew);
  if (planes) planes = checked_mul(*planes, s.s_h);
  if (planes) planes = checked_mul(*planes, s.s_w);
  const std::optional<int64_t> input = checked_mul(s.in_h, s.in_w);
  return planes && input && *input <= (int64_t{1} << 60) && *planes <= 4 * *input + 4096;
}

void conv_depthwise_float(OpContext& ctx, const DwShape& s, const float* x, const float* w, const float* bias,
                          const DwEpilogue& e, bool channels_last, float* y) {
  if (channels_last) depthwise_nhwc(ctx, s, x, w, bias, e, y);
  else depthwise_nchw(ctx, s, x, w, bias, e, y);
}

}  // namespace cuvil::rt::ops
