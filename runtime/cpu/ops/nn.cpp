// Convolution, pooling and normalisation kernels: Conv (im2col + the shared GEMM; float
// depthwise and small-group convolutions run the direct kernels of conv_depthwise.h),
// ConvInteger, QLinearConv, ConvTranspose (GEMM + col2im), the windowed and global pools (their
// channels-last form's vector kernels in pool_nhwc.h),
// MaxRoiPool, RoiAlign, MaxUnpool, the normalisations (Batch, Instance, Layer, Group, LRN,
// MeanVariance), GridSample, Col2Im and DeformConv. Float kernels compute in float (double for Double
// tensors); float16/bfloat16 tensors are converted on the way in and out. Every spatial op
// shares one window-geometry routine (kernel, strides, dilations, pads, auto_pad, ceil_mode)
// so that their validation and output-size rules agree.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cpu/ops/conv.h"
#include "runtime/cpu/ops/conv_depthwise.h"
#include "runtime/cpu/ops/conv_igemm.h"
#include "runtime/cpu/ops/conv_igemm_int8.h"
#include "runtime/cpu/ops/gemm_int8.h"
#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/ops/pool_nhwc.h"
#include "runtime/cpu/ops/quant_params.h"
#include "runtime/cpu/vec_math.h"

namespace cuvil::rt::ops {
namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

bool is_float_dtype(DType t) { return visit_dtype<kFloatTypes>(t, [](auto) {}); }

// Runs fn(TypeTag<C>) with C = float, or double for Double tensors; false for non-floats.
template <typename Fn> bool visit_compute_float(DType t, Fn&& fn) {
  if (t == DType::Double) {
    fn(TypeTag<double>{});
    return true;
  }
  if (!is_float_dtype(t)) return false;
  fn(TypeTag<float>{});
  return true;
}

// ---- window geometry ---------------------------------------------------------------------------

// The spatial dims D1, ... of an [N, C, D1, ...] shape (rank >= 2 checked by the caller).
std::vector<int64_t> spatial_dims(const std::vector<int64_t>& dims) {
  return std::vector<int64_t>(dims.begin() + 2, dims.end());
}

// The shape [n, c, spatial...] of an image-shaped output.
std::vector<int64_t> image_dims(int64_t n, int64_t c, const std::vector<int64_t>& spatial) {
  std::vector<int64_t> dims = {n, c};
  dims.insert(dims.end(), spatial.begin(), spatial.end());
  return dims;
}

// A per-spatial-dimension ints attribute (strides, dilations, pads, ...), or `count` copies
// of `fill` when the attribute is absent or empty.
std::vector<int64_t> ints_or_fill(const AttrReader& at, const char* name, size_t count, int64_t fill) {
  std::vector<int64_t> v = at.get_ints(name);
  if (v.empty()) v.assign(count, fill);
  return v;
}

// Spatial geometry of a sliding-window op over `in` (spatial dims only).
struct Window {
  std::vector<int64_t> in, kernel, strides, dilations, pad_begin, pad_end, out;
  size_t rank() const { return in.size(); }
};

// Reads strides, dilations, pads and auto_pad for a window of `kernel` over `in`, and computes
// the output size (floor, or ceil with ceil_mode, which never starts a window in the end pad).
Status window_geometry(OpContext& ctx, const std::vector<int64_t>& in,
                       const std::vector<int64_t>& kernel, bool ceil_mode, Window* w) {
  const size_t r = in.size();
  const AttrReader& at = ctx.attrs();
  w->in = in;
  w->kernel = kernel;
  w->strides = ints_or_fill(at, "strides", r, 1);
  w->dilations = ints_or_fill(at, "dilations", r, 1);
  const std::vector<int64_t> pads = ints_or_fill(at, "pads", 2 * r, 0);
  if (kernel.size() != r || w->strides.size() != r || w->dilations.size() != r || pads.size() != 2 * r)
    return ctx.error(StatusCode::kInvalidArgument, "kernel_shape ", dims_string(kernel), ", strides ",
                     dims_string(w->strides), ", dilations ", dims_string(w->dilations), " and pads ",
                     dims_string(pads), " do not match ", r, " spatial dimensions");
  for (size_t i = 0; i < r; ++i) {
    // Bounds keep every size computation below far from int64 overflow.
    if (in[i] < 0 || in[i] > (int64_t{1} << 40))
      return ctx.error(StatusCode::kInvalidArgument, "spatial dimension ", i, " = ", in[i], " is out of range");
    if (kernel[i] < 1 || kernel[i] > (int64_t{1} << 31))
      return ctx.error(StatusCode::kInvalidArgument, "kernel_shape[", i, "] = ", kernel[i], " is invalid");
    if (w->strides[i] < 1 || w->strides[i] > (int64_t{1} << 31))
      return ctx.error(StatusCode::kInvalidArgument, "strides[", i, "] = ", w->strides[i], " must be >= 1");
    if (w->dilations[i] < 1 || w->dilations[i] > (int64_t{1} << 31))
      return ctx.error(StatusCode::kInvalidArgument, "dilations[", i, "] = ", w->dilations[i], " must be >= 1");
    if (pads[i] < 0 || pads[i + r] < 0 || pads[i] > (int64_t{1} << 31) || pads[i + r] > (int64_t{1} << 31))
      return ctx.error(StatusCode::kInvalidArgument, "pads ", dims_string(pads), " must be non-negative");
  }
  const std::string auto_pad = at.get_string("auto_pad", "NOTSET");
  w->pad_begin.assign(pads.begin(), pads.begin() + r);
  w->pad_end.assign(pads.begin() + r, pads.end());
  w->out.assign(r, 0);
  for (size_t i = 0; i < r; ++i) {
    const int64_t span = (kernel[i] - 1) * w->dilations[i] + 1;
    const int64_t s = w->strides[i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      w->out[i] = ceil_div(in[i], s);
      const int64_t total = std::max<int64_t>(0, (w->out[i] - 1) * s + span - in[i]);
      w->pad_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w->pad_end[i] = total - w->pad_begin[i];
    } else if (auto_pad == "VALID") {
      w->pad_begin[i] = w->pad_end[i] = 0;
      w->out[i] = in[i] >= span ? (in[i] - span) / s + 1 : 0;
    } else if (auto_pad == "NOTSET" || auto_pad.empty()) {
      const int64_t avail = in[i] + w->pad_begin[i] + w->pad_end[i] - span;
      if (avail < 0) {
        w->out[i] = 0;
      } else if (ceil_mode) {
        w->out[i] = ceil_div(avail, s) + 1;
        if ((w->out[i] - 1) * s >= in[i] + w->pad_begin[i]) --w->out[i];
      } else {
        w->out[i] = avail / s + 1;
      }
    } else {
      return ctx.error(StatusCode::kInvalidArgument, "auto_pad '", auto_pad, "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
    }
    if (w->out[i] <= 0)
      return ctx.error(StatusCode::kInvalidArgument, "spatial dimension ", i, " of size ", in[i],
                       " is too small for a window of ", span, " with pads ", w->pad_begin[i], "+", w->pad_end[i]);
  }
  return Status::ok();
}

// kernel_shape attribute, checked against the weight's spatial dims when both are known.
Status kernel_shape_from(OpContext& ctx, const std::vector<int64_t>& weight_spatial,
                         std::vector<int64_t>* kernel) {
  *kernel = ctx.attrs().get_ints("kernel_shape");
  if (kernel->empty()) {
    *kernel = weight_spatial;
  } else if (*kernel != weight_spatial) {
    return ctx.error(StatusCode::kInvalidArgument, "kernel_shape ", dims_string(*kernel),
                     " does not match the weight's spatial dims ", dims_string(weight_spatial));
  }
  return Status::ok();
}

Status check_numel(OpContext& ctx, const std::vector<int64_t>& dims, const char* what) {
  int64_t n = 0;
  if (!dims_numel(dims, &n))
    return ctx.error(StatusCode::kInvalidArgument, what, " shape ", dims_string(dims), " overflows");
  return Status::ok();
}

// ---- im2col / col2im -----------------------------------------------------------------------

// Output positions [lo, hi) along one dim whose input coordinate o * s + off lies in [0, n).
inline void valid_range(int64_t count, int64_t s, int64_t off, int64_t n, int64_t* lo, int64_t* hi) {
  int64_t l = off >= 0 ? 0 : ceil_div(-off, s);
  int64_t h = n - 1 - off < 0 ? 0 : floor_div(n - 1 - off, s) + 1;
  *lo = std::min(std::max<int64_t>(l, 0), count);
  *hi = std::max(std::min(h, count), *lo);
}

// Scratch budget (elements) for im2col / col2im columns: larger problems are cut into chunks of
// output rows (Conv) or input positions (ConvTranspose) so memory stays bounded.
constexpr int64_t kColumnBudget = int64_t{1} << 22;

// Rows of the last spatial dim per chunk when each row costs `per_row` column elements.
int64_t rows_per_chunk(int64_t per_row, int64_t total_rows) {
  const int64_t rows = per_row > 0 ? kColumnBudget / per_row : total_rows;
  return std::max<int64_t>(1, std::min(rows, total_rows));
}

// col[(c, k...), (o...)] = x[c, o*s - pad + k*d] (or pad_value outside), for channels x[0..cg)
// and the output rows [row0, row1) (a "row" is one run of the last spatial dim); col's leading
// dimension is (row1 - row0) * out.back().
template <typename A>
void im2col(OpContext* ctx, const A* x, const Window& w, int64_t cg, A pad_value, A* col,
            int64_t row0, int64_t row1) {
  const size_t r = w.rank();
  const int64_t kprod = product(w.kernel), pin = product(w.in);
  const int64_t last_out = w.out[r - 1], last_in = w.in[r - 1];
  const int64_t outer = row1 - row0, ld = outer * last_out;
  auto rows = [&](int64_t begin, int64_t end) {
    std::vector<int64_t> kidx(r), oidx(r);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t c = row / kprod;
      int64_t rem = row % kprod;
      for (size_t d = r; d-- > 0;) {
        kidx[d] = rem % w.kernel[d];
        rem /= w.kernel[d];
      }
      const A* xc = x + c * pin;
      A* dst = col + row * ld;
      const int64_t off_last = kidx[r - 1] * w.dilations[r - 1] - w.pad_begin[r - 1];
      int64_t lo, hi;
      valid_range(last_out, w.strides[r - 1], off_last, last_in, &lo, &hi);
      int64_t start = row0;
      for (size_t d = r - 1; d-- > 0;) {
        oidx[d] = start % w.out[d];
        start /= w.out[d];
      }
      for (int64_t o = 0; o < outer; ++o) {
        bool inside = true;
        int64_t base = 0;
        for (size_t d = 0; d + 1 < r; ++d) {
          const int64_t i = oidx[d] * w.strides[d] - w.pad_begin[d] + kidx[d] * w.dilations[d];
          if (i < 0 || i >= w.in[d]) inside = false;
          base = base * w.in[d] + i;
        }
        A* drow = dst + o * last_out;
        if (!inside) {
          std::fill(drow, drow + last_out, pad_value);
        } else {
          const A* xrow = xc + base * last_in;
          std::fill(drow, drow + lo, pad_value);
          const int64_t s = w.strides[r - 1];
          if (s == 1) {
            std::copy(xrow + lo + off_last, xrow + hi + off_last, drow + lo);
          } else {
            for (int64_t j = lo; j < hi; ++j) drow[j] = xrow[j * s + off_last];
          }
          std::fill(drow + hi, drow + last_out, pad_value);
        }
        for (size_t d = r - 1; d-- > 0;) {
          if (++oidx[d] < w.out[d]) break;
          oidx[d] = 0;
        }
      }
    }
  };
  const int64_t nrows = cg * kprod;
  if (ctx && ctx->threads() > 1) parallel_range(*ctx, nrows, 4, rows);
  else rows(0, nrows);
}

// y[m, o*s - pad + k*d] += col[(m, k...), (o...)] for window positions o in [pos0, pos1)
// (ConvTranspose, Col2Im): `w.in` is the output image here and `w.out` the grid of window
// positions; col's leading dimension is pos1 - pos0.
template <typename A>
void col2im(OpContext* ctx, const A* col, const Window& w, int64_t channels, A* y, int64_t pos0,
            int64_t pos1) {
  const size_t r = w.rank();
  const int64_t kprod = product(w.kernel), pos = pos1 - pos0, pimg = product(w.in);
  auto chans = [&](int64_t begin, int64_t end) {
    std::vector<int64_t> kidx(r), oidx(r);
    for (int64_t m = begin; m < end; ++m) {
      A* ym = y + m * pimg;
      for (int64_t kk = 0; kk < kprod; ++kk) {
        int64_t rem = kk;
        for (size_t d = r; d-- > 0;) {
          kidx[d] = rem % w.kernel[d];
          rem /= w.kernel[d];
        }
        const A* src = col + (m * kprod + kk) * pos;
        int64_t start = pos0;
        for (size_t d = r; d-- > 0;) {
          oidx[d] = start % w.out[d];
          start /= w.out[d];
        }
        for (int64_t p = 0; p < pos; ++p) {
          int64_t off = 0;
          bool inside = true;
          for (size_t d = 0; d < r; ++d) {
            const int64_t i = oidx[d] * w.strides[d] - w.pad_begin[d] + kidx[d] * w.dilations[d];
            if (i < 0 || i >= w.in[d]) {
              inside = false;
              break;
            }
            off = off * w.in[d] + i;
          }
          if (inside) ym[off] += src[p];
          for (size_t d = r; d-- > 0;) {
            if (++oidx[d] < w.out[d]) break;
            oidx[d] = 0;
          }
        }
      }
    }
  };
  if (ctx && ctx->threads() > 1) parallel_range(*ctx, channels, 1, chans);
  else chans(0, channels);
}

}  // namespace

// ---- Conv -----------------------------------------------------------------------------------

namespace {

// Shapes shared by Conv, ConvInteger and QLinearConv.
struct ConvShape {
  int64_t n = 0, c = 0, m = 0, group = 1, cg = 0, mg = 0;
  Window w;
  std::vector<int64_t> out_dims;
};

// xdims is X's shape in [N, C, D1, ...] order (a channels-last X is permuted by the caller).
Status conv_shape(OpContext& ctx, const std::vector<int64_t>& xdims, const TensorView& wt, ConvShape* s) {
  const size_t r = xdims.size();
  if (r < 3)
    return ctx.error(StatusCode::kInvalidArgument, "X must be [N, C, D1, ...], got ", dims_string(xdims));
  if (wt.dims.size() != r)
    return ctx.error(StatusCode::kInvalidArgument, "W ", dims_string(wt.dims), " must have the rank of X ",
                     dims_string(xdims));
  s->group = ctx.attrs().get_int("group", 1);
  s->n = xdims[0];
  s->c = xdims[1];
  s->m = wt.dims[0];
  if (s->group < 1)
    return ctx.error(StatusCode::kInvalidArgument, "group = ", s->group, " must be >= 1");
  if (s->c != wt.dims[1] * s->group)
    return ctx.error(StatusCode::kInvalidArgument, "X has ", s->c, " channels but W ", dims_string(wt.dims),
                     " with group ", s->group, " expects ", wt.dims[1] * s->group);
  if (s->m % s->group != 0)
    return ctx.error(StatusCode::kInvalidArgument, "W has ", s->m, " output channels, not a multiple of group ",
                     s->group);
  s->cg = s->c / s->group;
  s->mg = s->m / s->group;
  std::vector<int64_t> kernel;
  CUVIL_RETURN_IF_ERROR(kernel_shape_from(ctx, spatial_dims(wt.dims), &kernel));
  CUVIL_RETURN_IF_ERROR(window_geometry(ctx, spatial_dims(xdims), kernel, false, &s->w));
  s->out_dims = image_dims(s->n, s->m, s->w.out);
  CUVIL_RETURN_IF_ERROR(check_numel(ctx, s->out_dims, "output"));
  return check_numel(ctx, {s->cg, product(s->w.kernel), s->w.out.back()}, "im2col row");
}
Status conv_shape(OpContext& ctx, const TensorView& x, const TensorView& wt, ConvShape* s) {
  return conv_shape(ctx, x.dims, wt, s);
}

// The geometry of a convolution over one or two spatial dims as the direct and indirect-GEMM
// kernels take it (a 1-D one is of height 1); false for more spatial dims.
bool dw_shape_of(const ConvShape& s, DwShape* d) {
  const size_t r = s.w.rank();
  if (r > 2) return false;
  d->n = s.n;
  d->c = s.c;
  d->m = s.m;
  d->group = s.group;
  d->in_h = r == 2 ? s.w.in[0] : 1;
  d->out_h = r == 2 ? s.w.out[0] : 1;
  d->k_h = r == 2 ? s.w.kernel[0] : 1;
  d->s_h = r == 2 ? s.w.strides[0] : 1;
  d->d_h = r == 2 ? s.w.dilations[0] : 1;
  d->p_h = r == 2 ? s.w.pad_begin[0] : 0;
  d->in_w = s.w.in[r - 1];
  d->out_w = s.w.out[r - 1];
  d->k_w = s.w.kernel[r - 1];
  d->s_w = s.w.strides[r - 1];
  d->d_w = s.w.dilations[r - 1];
  d->p_w = s.w.pad_begin[r - 1];
  return true;
}

bool is_pointwise(const Window& w) {
  for (size_t d = 0; d < w.rank(); ++d)
    if (w.kernel[d] != 1 || w.strides[d] != 1 || w.pad_begin[d] != 0 || w.pad_end[d] != 0) return false;
  return true;
}

// Direct convolution for groups with fewer output channels than the GEMM's register tile
// (depthwise convs): each output plane accumulates one shifted, scaled input row per tap.
template <typename C>
void conv_direct(OpContext& ctx, const ConvShape& s, const C* x, const C* w, const C* bias, C* y) {
  const Window& win = s.w;
  const size_t r = win.rank();
  const int64_t kprod = product(win.kernel), pout = product(win.out), pin = product(win.in);
  const int64_t last_out = win.out[r - 1], last_in = win.in[r - 1], outer = pout / last_out;
  parallel_range(ctx, s.n * s.m, 1, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> kidx(r), oidx(r);
    for (int64_t nm = begin; nm < end; ++nm) {
      const int64_t n = nm / s.m, m = nm % s.m, g = m / s.mg;
      C* yp = y + nm * pout;
      std::fill(yp, yp + pout, bias ? bias[m] : C(0));
      for (int64_t c = 0; c < s.cg; ++c) {
        const C* xc = x + (n * s.c + g * s.cg + c) * pin;
        const C* wc = w + (m * s.cg + c) * kprod;
        for (int64_t kk = 0; kk < kprod; ++kk) {
          int64_t rem = kk;
          for (size_t d = r; d-- > 0;) {
            kidx[d] = rem % win.kernel[d];
            rem /= win.kernel[d];
          }
          const C wv = wc[kk];
          const int64_t off_last = kidx[r - 1] * win.dilations[r - 1] - win.pad_begin[r - 1];
          const int64_t st = win.strides[r - 1];
          int64_t lo, hi;
          valid_range(last_out, st, off_last, last_in, &lo, &hi);
          std::fill(oidx.begin(), oidx.end(), 0);
          for (int64_t o = 0; o < outer; ++o) {
            bool inside = true;
            int64_t base = 0;
            for (size_t d = 0; d + 1 < r; ++d) {
              const int64_t i = oidx[d] * win.strides[d] - win.pad_begin[d] + kidx[d] * win.dilations[d];
              if (i < 0 || i >= win.in[d]) inside = false;
              base = base * win.in[d] + i;
            }
            if (inside) {
              const C* xrow = xc + base * last_in;
              C* yrow = yp + o * last_out;
              if (st == 1) {
                for (int64_t j = lo; j < hi; ++j) yrow[j] += wv * xrow[j + off_last];
              } else {
                for (int64_t j = lo; j < hi; ++j) yrow[j] += wv * xrow[j * st + off_last];
              }
            }
            for (size_t d = r - 1; d-- > 0;) {
              if (++oidx[d] < win.out[d]) break;
              oidx[d] = 0;
            }
          }
        }
      }
    }
  });
}

template <typename C>
void conv_float(OpContext& ctx, const ConvShape& s, const C* x, const C* w, const C* bias, C* y) {
  const int64_t kg = s.cg * product(s.w.kernel);
  const int64_t pout = product(s.w.out), pin = product(s.w.in);
  if (s.mg < 4 && s.group > 1) {
    conv_direct<C>(ctx, s, x, w, bias, y);
    return;
  }
  const bool direct = is_pointwise(s.w);
  const int64_t last_out = s.w.out.back(), rows = pout / last_out;
  const int64_t chunk = rows_per_chunk(kg * last_out, rows);
  std::vector<C> col(direct ? 0 : static_cast<size_t>(kg * chunk * last_out));
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t g = 0; g < s.group; ++g) {
      const C* xg = x + (n * s.c + g * s.cg) * pin;
      C* yg = y + (n * s.m + g * s.mg) * pout;
      if (direct) {
        gemm(&ctx, false, false, s.mg, pout, kg, C(1), w + g * s.mg * kg, kg, xg, pout, C(0), yg, pout);
        continue;
      }
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t r1 = std::min(rows, r0 + chunk), cols = (r1 - r0) * last_out;
        im2col<C>(&ctx, xg, s.w, s.cg, C(0), col.data(), r0, r1);
        gemm(&ctx, false, false, s.mg, cols, kg, C(1), w + g * s.mg * kg, kg, col.data(), cols, C(0),
             yg + r0 * last_out, pout);
      }
    }
  }
  if (bias) {
    parallel_range(ctx, s.n * s.m, 16, [&](int64_t begin, int64_t end) {
      for (int64_t nm = begin; nm < end; ++nm) {
        const C bv = bias[nm % s.m];
        C* yp = y + nm * pout;
        for (int64_t p = 0; p < pout; ++p) yp[p] += bv;
      }
    });
  }
}

// ---- Conv over channels-last tensors (cuvil::FusedConv layout = "NHWC") -----------------------
//
// X is [N, D..., C] and Y [N, O..., M], so one output position's channels are contiguous: the
// convolution is an implicit GEMM Y[positions, M] = col[positions, (c, k...)] @ W_g^T, W read as
// it is ([M, C/group, k...] is W_g^T row-major per group: the GEMM packs it transposed, so no
// repacked copy of the weights is made per call). A pointwise conv needs no col at all (X itself
// is the [positions, C] matrix); a depthwise conv (one input and one output channel per group)
// runs tap by tap, vectorised over the contiguous channels (float ones, and NCHW depthwise and
// small-group ones, take the direct kernels of conv_depthwise.h before they get here).

// The input position of output position `o` (spatial multi-index) under tap `kidx`, as a
// flat spatial offset, or -1 in the padding.
inline int64_t nhwc_input_offset(const Window& win, const int64_t* oidx, const int64_t* kidx) {
  int64_t off = 0;
  for (size_t d = 0; d < win.rank(); ++d) {
    const int64_t i = oidx[d] * win.strides[d] - win.pad_begin[d] + kidx[d] * win.dilations[d];
    if (i < 0 || i >= win.in[d]) return -1;
    off = off * win.in[d] + i;
  }
  return off;
}

inline void unflatten(int64_t flat, const std::vector<int64_t>& extents, int64_t* idx) {
  for (size_t d = extents.size(); d-- > 0;) {
    idx[d] = flat % extents[d];
    flat /= extents[d];
  }
}

template <typename C>
void conv_nhwc(OpContext& ctx, const ConvShape& s, const C* x, const C* w, const C* bias, C* y) {
  const Window& win = s.w;
  const size_t r = win.rank();
  const int64_t kprod = product(win.kernel), pout = product(win.out), pin = product(win.in);
  const int64_t rows = s.n * pout;  // output positions over the batch
  if (s.cg == 1 && s.mg == 1 && s.group > 1) {
    // Depthwise: y[o, m] = sum over taps of x[i(o, tap), m] * w[m, tap], contiguous in m.
    std::vector<C> wt(static_cast<size_t>(kprod * s.m));
    for (int64_t m = 0; m < s.m; ++m)
      for (int64_t kk = 0; kk < kprod; ++kk) wt[kk * s.m + m] = w[m * kprod + kk];
    parallel_range(ctx, rows, 4, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> oidx(r), kidx(r);
      for (int64_t row = begin; row < end; ++row) {
        const int64_t n = row / pout;
        unflatten(row % pout, win.out, oidx.data());
        C* yr = y + row * s.m;
        if (bias) std::copy(bias, bias + s.m, yr);
        else std::fill(yr, yr + s.m, C(0));
        for (int64_t kk = 0; kk < kprod; ++kk) {
          unflatten(kk, win.kernel, kidx.data());
          const int64_t off = nhwc_input_offset(win, oidx.data(), kidx.data());
          if (off < 0) continue;
          const C* xr = x + (n * pin + off) * s.m;
          const C* wr = wt.data() + kk * s.m;
          for (int64_t m = 0; m < s.m; ++m) yr[m] += xr[m] * wr[m];
        }
      }
    });
    return;
  }
  const int64_t kg = kprod * s.cg;
  if (is_pointwise(win)) {
    // X is already the [positions, C] matrix; each group reads its cg columns.
    for (int64_t g = 0; g < s.group; ++g)
      gemm(&ctx, false, true, rows, s.mg, s.cg, C(1), x + g * s.cg, s.c, w + g * s.mg * kg, kg, C(0),
           y + g * s.mg, s.m);
  } else {
    // One col for all groups, built once per chunk of rows: col[row][(g, c, kk)] = x[n, i(o, kk),
    // g * cg + c], zero in the padding. Per group that is W's own order (c, kk), so each row
    // scatters its taps within group * kg elements (in L1), W needs no copy, and group g's GEMM
    // reads its kg columns at col + g * kg.
    const int64_t kall = kg * s.group;
    const int64_t chunk = std::max<int64_t>(1, std::min(rows, kColumnBudget / kall));
    std::vector<int64_t> taps(static_cast<size_t>(kprod) * r);  // each tap's kernel index, once
    for (int64_t kk = 0; kk < kprod; ++kk) unflatten(kk, win.kernel, taps.data() + kk * r);
    std::vector<C> col(static_cast<size_t>(chunk * kall));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t r1 = std::min(rows, r0 + chunk);
      parallel_range(ctx, r1 - r0, 8, [&](int64_t begin, int64_t end) {
        std::vector<int64_t> oidx(r);
        for (int64_t row = r0 + begin; row < r0 + end; ++row) {
          const int64_t n = row / pout;
          unflatten(row % pout, win.out, oidx.data());
          C* cr = col.data() + (row - r0) * kall;
          for (int64_t kk = 0; kk < kprod; ++kk) {
            const int64_t off = nhwc_input_offset(win, oidx.data(), taps.data() + kk * r);
            const C* xs = off < 0 ? nullptr : x + (n * pin + off) * s.c;
            for (int64_t g = 0; g < s.group; ++g) {
              C* cg_row = cr + g * kg;
              if (!xs) {
                for (int64_t c = 0; c < s.cg; ++c) cg_row[c * kprod + kk] = C(0);
              } else {
                for (int64_t c = 0; c < s.cg; ++c) cg_row[c * kprod + kk] = xs[g * s.cg + c];
              }
            }
          }
        }
      });
      for (int64_t g = 0; g < s.group; ++g)
        gemm(&ctx, false, true, r1 - r0, s.mg, kg, C(1), col.data() + g * kg, kall, w + g * s.mg * kg, kg, C(0),
             y + r0 * s.m + g * s.mg, s.m);
    }
  }
  if (bias) {
    parallel_range(ctx, rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        C* yr = y + row * s.m;
        for (int64_t m = 0; m < s.m; ++m) yr[m] += bias[m];
      }
    });
  }
}

}  // namespace

Status conv_forward(OpContext& ctx, const ConvEpilogue* epilogue, bool channels_last) {
  const TensorView* x = ctx.input(0);
  const TensorView* w = ctx.input(1);
  const TensorView* b = ctx.input(2);
  if (!x || !w) return ctx.error(StatusCode::kInvalidArgument, "expects inputs X and W");
  if (!is_float_dtype(x->dtype) || w->dtype != x->dtype || (b && b->dtype != x->dtype))
    return ctx.error(StatusCode::kInvalidArgument, "X, W and B must share a float dtype, got ",
                     dtype_name(x->dtype), ", ", dtype_name(w->dtype));
  ConvShape s;
  std::vector<int64_t> xdims = x->dims;  // in [N, C, D...] order
  if (channels_last && xdims.size() >= 3) std::rotate(xdims.begin() + 1, xdims.end() - 1, xdims.end());
  CUVIL_RETURN_IF_ERROR(conv_shape(ctx, xdims, *w, &s));
  if (b && b->numel() != s.m)
    return ctx.error(StatusCode::kInvalidArgument, "B ", dims_string(b->dims), " must have ", s.m, " elements");
  if (channels_last) std::rotate(s.out_dims.begin() + 1, s.out_dims.begin() + 2, s.out_dims.end());
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, s.out_dims, &y));
  Status st;
  visit_compute_float(x->dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> xb, wb, bb;
    const C* xp = compute_data<C>(*x, &xb);
    const C* wp = compute_data<C>(*w, &wb);
    const C* bp = b ? compute_data<C>(*b, &bb) : nullptr;
    ComputeOutput<C> out(y);
    if constexpr (std::is_same_v<C, float>) {
      // Depthwise and small-group convolutions over 1 or 2 spatial dims (conv_depthwise.h) and
      // channels-last ones of one group (conv_igemm.h): the direct kernels, with the epilogue
      // in registers when it has that form.
      const size_t r = s.w.rank();
      DwShape d;
      dw_shape_of(s, &d);
      const bool depthwise = r <= 2 && conv_depthwise_applies(d, channels_last);
      // Channels-first convolutions with a window (and any of a few input channels, as an RGB
      // stem) as well: im2col would copy each input element k_h * k_w times, so instead the
      // input is transposed channels-last, the indirect GEMM writes its product channels-last,
      // and that comes back channels-first, where the epilogue follows. A 1x1 window of more
      // channels reads X as the GEMM's operand in place (below).
      if (r <= 2 && !channels_last && !depthwise && s.n > 0 && conv_igemm_applies(d, true) &&
          (d.c <= kIgemmChannelsFirstMaxC || d.k_h * d.k_w > 1)) {
        const int64_t pin = d.in_h * d.in_w, pout = d.out_h * d.out_w;
        // Not value-initialised: the transpose and the kernel write every element.
        const std::unique_ptr<float[]> xt(new float[static_cast<size_t>(d.n * pin * d.c)]);
        const std::unique_ptr<float[]> yt(new float[static_cast<size_t>(d.n * pout * d.m)]);
        transpose_matrices(ctx, xp, xt.get(), d.n, d.c, pin, sizeof(float));
        conv_igemm_float(ctx, d, xt.get(), wp, bp, DwEpilogue{}, yt.get());
        transpose_matrices(ctx, yt.get(), out.data(), d.n, pout, d.m, sizeof(float));
        if (epilogue) st = epilogue->apply(out.data(), s.out_dims, nullptr, false);
        out.finish();
        return;
      }
      if (depthwise || (r <= 2 && conv_igemm_applies(d, channels_last))) {
        DwEpilogue e;
        const bool in_registers = epilogue && epilogue->register_form(s.out_dims, &e);
        if (!in_registers) e = DwEpilogue{};
        if (depthwise) conv_depthwise_float(ctx, d, xp, wp, bp, e, channels_last, out.data());
        else conv_igemm_float(ctx, d, xp, wp, bp, e, out.data());
        if (epilogue && !in_registers) st = epilogue->apply(out.data(), s.out_dims, nullptr, channels_last);
        out.finish();
        return;
      }
    }
    // The GEMM-based paths add B after the product, as the epilogue's first step would: with
    // an epilogue, B is left to its pass (one pass over y fewer). The direct paths start
    // their sums from B, so they keep it.
    const bool direct = channels_last ? (s.cg == 1 && s.mg == 1 && s.group > 1) : (s.mg < 4 && s.group > 1);
    const C* conv_bias = epilogue && !direct ? nullptr : bp;
    if (channels_last) conv_nhwc<C>(ctx, s, xp, wp, conv_bias, out.data());
    else conv_float<C>(ctx, s, xp, wp, conv_bias, out.data());
    if (epilogue) st = epilogue->apply(out.data(), s.out_dims, conv_bias ? nullptr : bp, channels_last);
    out.finish();
  });
  return st;
}

Status kernel_Conv(OpContext& ctx) { return conv_forward(ctx, nullptr, false); }

// ---- ConvInteger / QLinearConv ------------------------------------------------------------

namespace {

// y[n, m, p] = epilogue(sum (x - x_zp) * (w - w_zp[m]) over the window) on the int8 GEMM
// (gemm_int8.h): one group over one or two spatial dims as an indirect GEMM
// (conv_igemm_int8.h); depthwise and small groups directly; any other grouped or 3-D
// convolution per image and group, where the im2col columns of x ([kg][positions], x's own bytes,
// padded with its zero point so that a pad contributes 0) are a transposed A, the group's rows
// of W ([mg][kg]) a transposed B (packed once per package weight), and the [positions x mg]
// product is stored transposed into y's [mg][positions]. A per-channel scale, bias or zero
// point of ep / w_zp is indexed by output channel.
void conv_int8(OpContext& ctx, const ConvShape& s, const TensorView& x, const TensorView& w,
               int32_t x_zp, const std::vector<int32_t>& w_zp, const Int8Epilogue& ep, void* y,
               size_t y_elem) {
  const int64_t kg = s.cg * product(s.w.kernel);
  const int64_t pout = product(s.w.out), pin = product(s.w.in);
  if (s.mg < 4 && s.group > 1) {
    // Depthwise and small groups: a product of fewer columns than any tile is mostly padding,
    // so the window is summed directly (conv_direct, as for float) over (x - x_zp) and
    // (w - w_zp) in uint32, whose wrapping arithmetic is exact modulo 2^32 like the GEMM's.
    std::vector<uint32_t> xs(static_cast<size_t>(x.numel())), ws(static_cast<size_t>(w.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) xs[i] = static_cast<uint32_t>(load_int8ish(x, i) - x_zp);
    const int64_t per_m = w.numel() / s.m;
    for (int64_t i = 0; i < w.numel(); ++i)
      ws[i] = static_cast<uint32_t>(load_int8ish(w, i) - w_zp[w_zp.size() == 1 ? 0 : i / per_m]);
    std::vector<uint32_t> acc(static_cast<size_t>(s.n * s.m * pout));
    conv_direct<uint32_t>(ctx, s, xs.data(), ws.data(), nullptr, acc.data());
    for (int64_t nm = 0; nm < s.n * s.m; ++nm)
      int8_epilogue_column(ep, nm % s.m, reinterpret_cast<const int32_t*>(acc.data() + nm * pout), pout,
                           static_cast<uint8_t*>(y) + static_cast<size_t>(nm * pout) * y_elem, 1);
    return;
  }
  DwShape d;
  ConvInt8Operands op;
  op.x = x.data;
  op.x_signed = x.dtype == DType::Int8;
  op.x_zero = x_zp;
  op.w = w.data;
  op.w_signed = w.dtype == DType::Int8;
  op.w_zero = w_zp.data();
  op.w_zero_per_channel = w_zp.size() > 1;
  if (dw_shape_of(s, &d) && conv_igemm_int8_applies(d, op)) {
    conv_igemm_int8(ctx, d, op, ep, y, y_elem);
    return;
  }
  const int64_t last_out = s.w.out.back(), rows = pout / last_out;
  const bool direct = is_pointwise(s.w);
  const int64_t chunk = direct ? rows : rows_per_chunk(kg * last_out, rows);
  std::vector<uint8_t> col(direct ? 0 : static_cast<size_t>(kg * chunk * last_out));
  const uint8_t* xb = static_cast<const uint8_t*>(x.data);
  const uint8_t* wb = static_cast<const uint8_t*>(w.data);
  uint8_t* yb = static_cast<uint8_t*>(y);
  Int8GemmArgs g;
  g.n = s.mg;
  g.k = kg;
  g.a_signed = x.dtype == DType::Int8;
  g.trans_a = true;
  g.a_zero = &x_zp;
  g.b_signed = w.dtype == DType::Int8;
  g.trans_b = true;
  g.ldb = kg;
  g.b_zero_per_column = w_zp.size() > 1;
  g.ldc_row = 1;
  g.ldc_col = pout;
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t gi = 0; gi < s.group; ++gi) {
      const int64_t m0 = gi * s.mg;
      const uint8_t* xg = xb + (n * s.c + gi * s.cg) * pin;
      g.b = wb + m0 * kg;
      g.b_zero = w_zp.data() + (w_zp.size() > 1 ? m0 : 0);
      g.epilogue = ep;
      if (ep.scale && ep.scale_per_column) g.epilogue.scale = ep.scale + m0;
      if (ep.bias_f32) g.epilogue.bias_f32 = ep.bias_f32 + m0;
      if (ep.bias_i32) g.epilogue.bias_i32 = ep.bias_i32 + m0;
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t r1 = std::min(rows, r0 + chunk), cols = (r1 - r0) * last_out;
        if (direct) {
          g.a = xg;
        } else {
          im2col<uint8_t>(&ctx, xg, s.w, s.cg, static_cast<uint8_t>(x_zp), col.data(), r0, r1);
          g.a = col.data();
        }
        g.m = cols;
        g.lda = direct ? pin : cols;
        g.c = yb + static_cast<size_t>((n * s.m + m0) * pout + r0 * last_out) * y_elem;
        gemm_int8(&ctx, g);
      }
    }
  }
}

}  // namespace

Status kernel_ConvInteger(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* w = ctx.input(1);
  if (!x || !w) return ctx.error(StatusCode::kInvalidArgument, "expects inputs x and w");
  if (!is_8bit_int(x->dtype) || !is_8bit_int(w->dtype))
    return ctx.error(StatusCode::kInvalidArgument, "x and w must be int8 or uint8, got ",
                     dtype_name(x->dtype), " and ", dtype_name(w->dtype));
  ConvShape s;
  CUVIL_RETURN_IF_ERROR(conv_shape(ctx, *x, *w, &s));
  std::vector<double> xzp, wzp;
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, ctx.input(2), "x_zero_point", 1, &xzp, 0));
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, ctx.input(3), "w_zero_point", s.m, &wzp, 0));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Int32, s.out_dims, &y));
  std::vector<int32_t> wz(wzp.begin(), wzp.end());
  conv_int8(ctx, s, *x, *w, static_cast<int32_t>(xzp[0]), wz, Int8Epilogue{}, y->data, sizeof(int32_t));
  return Status::ok();
}

Status kernel_QLinearConv(OpContext& ctx) {
  for (size_t i = 0; i < 8; ++i)
    if (!ctx.input(i)) return ctx.error(StatusCode::kInvalidArgument, "input ", i, " is required");
  const TensorView* x = ctx.input(0);
  const TensorView* w = ctx.input(3);
  const TensorView* yzt = ctx.input(7);
  const TensorView* b = ctx.input(8);
  if (!is_8bit_int(x->dtype) || !is_8bit_int(w->dtype) || !is_8bit_int(yzt->dtype))
    return ctx.error(StatusCode::kUnsupported, "x, w and y_zero_point must be int8 or uint8");
  ConvShape s;
  CUVIL_RETURN_IF_ERROR(conv_shape(ctx, *x, *w, &s));
  std::vector<double> xs, xzp, ws, wzp, ys, yzp;
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, ctx.input(1), "x_scale", 1, &xs, 1));
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, ctx.input(2), "x_zero_point", 1, &xzp, 0));
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, ctx.input(4), "w_scale", s.m, &ws, 1));
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, ctx.input(5), "w_zero_point", s.m, &wzp, 0));
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, ctx.input(6), "y_scale", 1, &ys, 1));
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, yzt, "y_zero_point", 1, &yzp, 0));
  if (!(ys[0] > 0) || !std::isfinite(ys[0]))
    return ctx.error(StatusCode::kInvalidArgument, "y_scale must be positive and finite, got ", ys[0]);
  if (b && (b->dtype != DType::Int32 || b->numel() != s.m))
    return ctx.error(StatusCode::kInvalidArgument, "B must be int32 with ", s.m, " elements, got ",
                     dtype_name(b->dtype), " ", dims_string(b->dims));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, yzt->dtype, s.out_dims, &y));
  // The requantisation multiplier (x_scale * w_scale) / y_scale in float, per channel.
  std::vector<float> scale(ws.size());
  for (size_t m = 0; m < ws.size(); ++m)
    scale[m] = static_cast<float>(xs[0]) * static_cast<float>(ws[m]) / static_cast<float>(ys[0]);
  Int8Epilogue ep;
  ep.kind = y->dtype == DType::Int8 ? Int8Epilogue::Kind::kQuantS8 : Int8Epilogue::Kind::kQuantU8;
  ep.scale = scale.data();
  ep.scale_per_column = scale.size() > 1;
  ep.bias_i32 = b ? b->as<int32_t>() : nullptr;
  ep.out_zero_point = static_cast<int32_t>(yzp[0]);
  std::vector<int32_t> wz(wzp.begin(), wzp.end());
  conv_int8(ctx, s, *x, *w, static_cast<int32_t>(xzp[0]), wz, ep, y->data, 1);
  return Status::ok();
}

// ---- ConvTranspose --------------------------------------------------------------------------

Status kernel_ConvTranspose(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* w = ctx.input(1);
  const TensorView* b = ctx.input(2);
  if (!x || !w) return ctx.error(StatusCode::kInvalidArgument, "expects inputs X and W");
  if (!is_float_dtype(x->dtype) || w->dtype != x->dtype || (b && b->dtype != x->dtype))
    return ctx.error(StatusCode::kInvalidArgument, "X, W and B must share a float dtype");
  const size_t r = x->dims.size();
  if (r < 3 || w->dims.size() != r)
    return ctx.error(StatusCode::kInvalidArgument, "X ", dims_string(x->dims), " and W ", dims_string(w->dims),
                     " must be [N, C, D...] and [C, M/group, k...]");
  const size_t sr = r - 2;
  const AttrReader& at = ctx.attrs();
  const int64_t group = at.get_int("group", 1);
  const int64_t n = x->dims[0], c = x->dims[1];
  if (group < 1) return ctx.error(StatusCode::kInvalidArgument, "group = ", group, " must be >= 1");
  if (w->dims[0] != c || c % group != 0)
    return ctx.error(StatusCode::kInvalidArgument, "W ", dims_string(w->dims), " does not match ", c,
                     " input channels with group ", group);
  const int64_t cg = c / group, mg = w->dims[1], m = mg * group;
  std::vector<int64_t> kernel;
  CUVIL_RETURN_IF_ERROR(kernel_shape_from(ctx, spatial_dims(w->dims), &kernel));
  const std::vector<int64_t> strides = ints_or_fill(at, "strides", sr, 1);
  const std::vector<int64_t> dil = ints_or_fill(at, "dilations", sr, 1);
  const std::vector<int64_t> out_pad = ints_or_fill(at, "output_padding", sr, 0);
  const std::vector<int64_t> pads = ints_or_fill(at, "pads", 2 * sr, 0);
  std::vector<int64_t> out_shape = at.get_ints("output_shape");
  if (out_shape.size() == r) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  if (strides.size() != sr || dil.size() != sr || out_pad.size() != sr || pads.size() != 2 * sr ||
      (!out_shape.empty() && out_shape.size() != sr))
    return ctx.error(StatusCode::kInvalidArgument, "strides, dilations, output_padding, pads or output_shape do not match ",
                     sr, " spatial dimensions");
  const std::string auto_pad = at.get_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" && auto_pad != "VALID" && !auto_pad.empty())
    return ctx.error(StatusCode::kInvalidArgument, "auto_pad '", auto_pad, "' is invalid");
  // Window over the output image: in = output spatial, out = input spatial (window positions).
  Window win;
  win.kernel = kernel;
  win.strides = strides;
  win.dilations = dil;
  win.out = spatial_dims(x->dims);
  for (size_t i = 0; i < sr; ++i)
    if (win.out[i] > (int64_t{1} << 40))
      return ctx.error(StatusCode::kInvalidArgument, "spatial dimension ", i, " = ", win.out[i], " is out of range");
  win.in.assign(sr, 0);
  win.pad_begin.assign(sr, 0);
  win.pad_end.assign(sr, 0);
  for (size_t i = 0; i < sr; ++i) {
    if (strides[i] < 1 || dil[i] < 1 || kernel[i] < 1 || out_pad[i] < 0 || pads[i] < 0 || pads[i + sr] < 0 ||
        strides[i] > (int64_t{1} << 31) || dil[i] > (int64_t{1} << 31) || kernel[i] > (int64_t{1} << 31) ||
        out_pad[i] > (int64_t{1} << 31) || pads[i] > (int64_t{1} << 31) || pads[i + sr] > (int64_t{1} << 31))
      return ctx.error(StatusCode::kInvalidArgument, "strides, dilations and kernel must be >= 1; pads and output_padding >= 0");
    const int64_t span = (kernel[i] - 1) * dil[i] + 1;
    const int64_t full = strides[i] * (win.out[i] - 1) + out_pad[i] + span;
    if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t target = !out_shape.empty() ? out_shape[i] : win.out[i] * strides[i];
      const int64_t total = full - target;
      if (total < 0 && out_shape.empty())
        return ctx.error(StatusCode::kInvalidArgument, "cannot reach output size ", target);
      const int64_t tp = std::max<int64_t>(total, 0);
      if (auto_pad == "SAME_UPPER") {
        win.pad_begin[i] = tp / 2;
      } else {
        win.pad_begin[i] = tp - tp / 2;
      }
      win.pad_end[i] = tp - win.pad_begin[i];
      win.in[i] = target;
    } else {
      if (auto_pad != "VALID") {
        win.pad_begin[i] = pads[i];
        win.pad_end[i] = pads[i + sr];
      }
      win.in[i] = full - win.pad_begin[i] - win.pad_end[i];
    }
    if (win.in[i] <= 0)
      return ctx.error(StatusCode::kInvalidArgument, "output spatial dimension ", i, " would be ", win.in[i]);
  }
  if (b && b->numel() != m)
    return ctx.error(StatusCode::kInvalidArgument, "B ", dims_string(b->dims), " must have ", m, " elements");
  const std::vector<int64_t> out_dims = image_dims(n, m, win.in);
  CUVIL_RETURN_IF_ERROR(check_numel(ctx, out_dims, "output"));
  const int64_t kprod = product(kernel), pin = product(win.out), pout = product(win.in);
  CUVIL_RETURN_IF_ERROR(check_numel(ctx, {mg, kprod, pin}, "column buffer"));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, out_dims, &y));
  visit_compute_float(x->dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> xb, wb, bb;
    const C* xp = compute_data<C>(*x, &xb);
    const C* wp = compute_data<C>(*w, &wb);
    const C* bp = b ? compute_data<C>(*b, &bb) : nullptr;
    ComputeOutput<C> out(y);
    C* yp = out.data();
    std::fill(yp, yp + n * m * pout, C(0));
    const int64_t chunk = rows_per_chunk(mg * kprod, pin);
    std::vector<C> col(static_cast<size_t>(mg * kprod * chunk));
    for (int64_t ni = 0; ni < n; ++ni) {
      for (int64_t g = 0; g < group; ++g) {
        for (int64_t p0 = 0; p0 < pin; p0 += chunk) {
          const int64_t p1 = std::min(pin, p0 + chunk);
          // col[(m, k), p] = sum_c W[c, m, k] * X[c, p] for input positions [p0, p1)
          gemm(&ctx, true, false, mg * kprod, p1 - p0, cg, C(1), wp + g * cg * mg * kprod, mg * kprod,
               xp + (ni * c + g * cg) * pin + p0, pin, C(0), col.data(), p1 - p0);
          col2im<C>(&ctx, col.data(), win, mg, yp + (ni * m + g * mg) * pout, p0, p1);
        }
      }
    }
    if (bp)
      for (int64_t nm = 0; nm < n * m; ++nm)
        for (int64_t p = 0; p < pout; ++p) yp[nm * pout + p] += bp[nm % m];
    out.finish();
  });
  return Status::ok();
}

// ---- pooling --------------------------------------------------------------------------------

namespace {

enum class PoolKind { kMax, kAverage, kLp };

struct PoolShape {
  int64_t n = 0, c = 0;
  Window w;
  std::vector<int64_t> out_dims;
};

Status pool_shape(OpContext& ctx, const TensorView& x, PoolShape* s) {
  const size_t r = x.dims.size();
  if (r < 3)
    return ctx.error(StatusCode::kInvalidArgument, "X must be [N, C, D1, ...], got ", dims_string(x.dims));
  const std::vector<int64_t> kernel = ctx.attrs().get_ints("kernel_shape");
  if (kernel.empty()) return ctx.error(StatusCode::kInvalidArgument, "attribute 'kernel_shape' is required");
  const bool ceil_mode = ctx.attrs().get_int("ceil_mode", 0) != 0;
  CUVIL_RETURN_IF_ERROR(window_geometry(ctx, spatial_dims(x.dims), kernel, ceil_mode, &s->w));
  s->n = x.dims[0];
  s->c = x.dims[1];
  s->out_dims = image_dims(s->n, s->c, s->w.out);
  return check_numel(ctx, s->out_dims, "output");
}

// Walks the windows of one plane: begin(o, out_coords) at each output position, then
// elem(offset, column_major_offset) for each window element inside the input, then end(o).
// Output positions o_begin <= o < o_end (row-major flat indices; o_end < 0: to the last).
template <typename Begin, typename Elem, typename End>
void for_each_window(const Window& w, Begin begin, Elem elem, End end, int64_t o_begin = 0, int64_t o_end = -1) {
  const size_t r = w.rank();
  const int64_t pout = o_end < 0 ? product(w.out) : o_end;
  const int64_t kprod = product(w.kernel);
  std::vector<int64_t> oidx(r, 0), kidx(r), col_stride(r, 1);
  for (size_t d = 1; d < r; ++d) col_stride[d] = col_stride[d - 1] * w.in[d - 1];
  for (size_t d = r, rest = static_cast<size_t>(o_begin); d-- > 0;) {
    oidx[d] = static_cast<int64_t>(rest) % w.out[d];
    rest /= static_cast<size_t>(w.out[d]);
  }
  for (int64_t o = o_begin; o < pout; ++o) {
    begin(o, oidx);
    std::fill(kidx.begin(), kidx.end(), 0);
    for (int64_t k = 0; k < kprod; ++k) {
      int64_t off = 0, coff = 0;
      bool inside = true;
      for (size_t d = 0; d < r; ++d) {
        const int64_t i = oidx[d] * w.strides[d] - w.pad_begin[d] + kidx[d] * w.dilations[d];
        if (i < 0 || i >= w.in[d]) {
          inside = false;
          break;
        }
        off = off * w.in[d] + i;
        coff += i * col_stride[d];
      }
      if (inside) elem(off, coff);
      for (size_t d = r; d-- > 0;) {
        if (++kidx[d] < w.kernel[d]) break;
        kidx[d] = 0;
      }
    }
    end(o);
    for (size_t d = r; d-- > 0;) {
      if (++oidx[d] < w.out[d]) break;
      oidx[d] = 0;
    }
  }
}

// AveragePool's count_include_pad divisor at output position oidx: the window elements inside
// the padded input (ceil_mode's overhang past the end pad excluded).
int64_t padded_window_count(const Window& w, const std::vector<int64_t>& oidx) {
  int64_t padded = 1;
  for (size_t d = 0; d < w.rank(); ++d) {
    const int64_t start = oidx[d] * w.strides[d] - w.pad_begin[d];
    int64_t cnt = 0;
    for (int64_t k = 0; k < w.kernel[d]; ++k) {
      const int64_t i = start + k * w.dilations[d];
      if (i >= -w.pad_begin[d] && i < w.in[d] + w.pad_end[d]) ++cnt;
    }
    padded *= cnt;
  }
  return padded;
}

}  // namespace

namespace {

// MaxPool over one [H, W] plane without indices: exactly what for_each_window computes (taps in
// kernel order, the first tap inside the input taken, then `v > best`, so a NaN in the first
// tap stays and later NaNs are skipped; no tap inside gives lowest()), but by output row: the
// columns whose taps all lie inside the row take the taps one at a time over the whole run of
// columns (contiguous when the stride is 1), the edge columns one by one.
void max_pool_2d_plane(const Window& w, const float* xs, float* ys) {
  const int64_t ih_n = w.in[0], iw_n = w.in[1], oh_n = w.out[0], ow_n = w.out[1];
  const int64_t kh_n = w.kernel[0], kw_n = w.kernel[1], sh = w.strides[0], sw = w.strides[1];
  const int64_t dh = w.dilations[0], dw = w.dilations[1], ph = w.pad_begin[0], pw = w.pad_begin[1];
  // Interior columns: ow * sw - pw >= 0 and ow * sw - pw + (kw_n - 1) * dw < iw_n.
  int64_t lo = (pw + sw - 1) / sw;
  const int64_t last = iw_n - 1 - (kw_n - 1) * dw + pw;
  int64_t hi = last < 0 ? -1 : std::min(ow_n - 1, last / sw);  // inclusive
  lo = std::min(lo, ow_n);
  if (hi < lo) hi = lo - 1;
  std::vector<int64_t> rows;
  for (int64_t oh = 0; oh < oh_n; ++oh) {
    float* yr = ys + oh * ow_n;
    rows.clear();
    for (int64_t kh = 0; kh < kh_n; ++kh) {
      const int64_t ih = oh * sh - ph + kh * dh;
      if (ih >= 0 && ih < ih_n) rows.push_back(ih);
    }
    auto edge = [&](int64_t ow) {
      float best = 0.f;
      bool any = false;
      for (int64_t ih : rows)
        for (int64_t kw = 0; kw < kw_n; ++kw) {
          const int64_t iw = ow * sw - pw + kw * dw;
          if (iw < 0 || iw >= iw_n) continue;
          const float v = xs[ih * iw_n + iw];
          if (!any || v > best) best = v;
          any = true;
        }
      yr[ow] = any ? best : std::numeric_limits<float>::lowest();
    };
    for (int64_t ow = 0; ow < lo; ++ow) edge(ow);
    for (int64_t ow = hi + 1; ow < ow_n; ++ow) edge(ow);
    if (hi < lo) continue;
    if (rows.empty()) {
      std::fill(yr + lo, yr + hi + 1, std::numeric_limits<float>::lowest());
      continue;
    }
    bool first = true;
    for (int64_t ih : rows)
      for (int64_t kw = 0; kw < kw_n; ++kw) {
        const float* xr = xs + ih * iw_n + kw * dw - pw;
        if (first) {
          for (int64_t ow = lo; ow <= hi; ++ow) yr[ow] = xr[ow * sw];
          first = false;
        } else if (sw == 1) {
          for (int64_t ow = lo; ow <= hi; ++ow) yr[ow] = xr[ow] > yr[ow] ? xr[ow] : yr[ow];
        } else {
          for (int64_t ow = lo; ow <= hi; ++ow) {
            const float v = xr[ow * sw];
            yr[ow] = v > yr[ow] ? v : yr[ow];
          }
        }
      }
  }
}

// The layout attribute of the pools (docs/ir.md): true for "NHWC".
Status pool_layout(OpContext& ctx, PoolKind kind, const TensorView& x, bool* channels_last) {
  const std::string layout = ctx.attrs().get_string("layout", "NCHW");
  if (layout != "NCHW" && layout != "NHWC")
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'layout' is '", layout, "', not NCHW or NHWC");
  *channels_last = layout == "NHWC";
  if (!*channels_last) return Status::ok();
  if (kind == PoolKind::kLp) return ctx.error(StatusCode::kInvalidArgument, "layout NHWC is not supported by Lp pools");
  if (x.dtype != DType::Float)
    return ctx.error(StatusCode::kInvalidArgument, "layout NHWC takes float32 only, got ", dtype_name(x.dtype));
  return Status::ok();
}

// MaxPool / AveragePool with layout = "NHWC" (pool_nhwc.h): X [N, D1, ..., C], Y [N, O1, ..., C];
// the same window walk as the NCHW kernel, each output position one vector reduction over C.
Status pool_kernel_nhwc(OpContext& ctx, PoolKind kind, const TensorView& x) {
  if (kind == PoolKind::kMax && ctx.num_outputs() > 1 && ctx.output_wanted(1))
    return ctx.error(StatusCode::kInvalidArgument, "layout NHWC has no Indices output");
  const size_t r = x.dims.size();
  if (r < 3) return ctx.error(StatusCode::kInvalidArgument, "X must be [N, D1, ..., C], got ", dims_string(x.dims));
  const std::vector<int64_t> kernel = ctx.attrs().get_ints("kernel_shape");
  if (kernel.empty()) return ctx.error(StatusCode::kInvalidArgument, "attribute 'kernel_shape' is required");
  const bool ceil_mode = ctx.attrs().get_int("ceil_mode", 0) != 0;
  Window w;
  CUVIL_RETURN_IF_ERROR(
      window_geometry(ctx, std::vector<int64_t>(x.dims.begin() + 1, x.dims.end() - 1), kernel, ceil_mode, &w));
  const int64_t n = x.dims[0], c = x.dims[r - 1];
  std::vector<int64_t> out_dims = {n};
  out_dims.insert(out_dims.end(), w.out.begin(), w.out.end());
  out_dims.push_back(c);
  CUVIL_RETURN_IF_ERROR(check_numel(ctx, out_dims, "output"));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x.dtype, out_dims, &y));
  const bool count_include_pad = ctx.attrs().get_int("count_include_pad", 0) != 0;
  const int64_t pin = product(w.in), pout = product(w.out);
  const CpuPath path = active_cpu_path();
  const float* xp = x.as<float>();
  float* yp = y->as<float>();
  parallel_range(ctx, n * pout, std::max<int64_t>(1, 4096 / std::max<int64_t>(c, 1)), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> off;
    PoolNhwcArgs a;
    a.kind = kind == PoolKind::kMax ? PoolNhwcKind::Max : PoolNhwcKind::Average;
    a.channels = c;
    for (int64_t img = begin / pout; img * pout < end; ++img) {
      a.x = xp + img * pin * c;
      for_each_window(
          w,
          [&](int64_t, const std::vector<int64_t>& oidx) {
            off.clear();
            if (count_include_pad) a.denom = static_cast<double>(padded_window_count(w, oidx));
          },
          [&](int64_t at, int64_t) { off.push_back(at * c); },
          [&](int64_t o) {
            a.off = off.data();
            a.ntaps = static_cast<int64_t>(off.size());
            if (!count_include_pad) a.denom = static_cast<double>(a.ntaps);
            a.y = yp + (img * pout + o) * c;
            pool_nhwc_position(path, a);
          },
          std::max(begin, img * pout) - img * pout, std::min(end, (img + 1) * pout) - img * pout);
    }
  });
  return Status::ok();
}

Status pool_kernel(OpContext& ctx, PoolKind kind) {
  const TensorView* x = ctx.input(0);
  if (!x) return ctx.error(StatusCode::kInvalidArgument, "expects input X");
  bool channels_last = false;
  CUVIL_RETURN_IF_ERROR(pool_layout(ctx, kind, *x, &channels_last));
  if (channels_last) return pool_kernel_nhwc(ctx, kind, *x);
  PoolShape s;
  CUVIL_RETURN_IF_ERROR(pool_shape(ctx, *x, &s));
  const bool max_ints = kind == PoolKind::kMax && (x->dtype == DType::Int8 || x->dtype == DType::UInt8);
  if (!is_float_dtype(x->dtype) && !max_ints)
    return ctx.error(StatusCode::kInvalidArgument, "dtype ", dtype_name(x->dtype), " is not supported");
  const bool count_include_pad = ctx.attrs().get_int("count_include_pad", 0) != 0;
  const int64_t storage_order = ctx.attrs().get_int("storage_order", 0);
  const double p = static_cast<double>(ctx.attrs().get_int("p", 2));
  if (kind == PoolKind::kLp && p <= 0) return ctx.error(StatusCode::kInvalidArgument, "p must be positive");
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, s.out_dims, &y));
  TensorView* ind = nullptr;
  if (kind == PoolKind::kMax && ctx.num_outputs() > 1 && ctx.output_wanted(1))
    CUVIL_RETURN_IF_ERROR(ctx.allocate_output(1, DType::Int64, s.out_dims, &ind));
  const int64_t pin = product(s.w.in), pout = product(s.w.out);
  const size_t r = s.w.rank();
  visit_dtype<kFloatTypes | kSignedInts | kUnsignedInts>(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_same_v<compute_t<T>, double>, double,
                                 std::conditional_t<is_float_v<T>, float, T>>;
    std::vector<C> xb;
    const C* xp = compute_data<C>(*x, &xb);
    ComputeOutput<C> out(y);
    C* yp = out.data();
    parallel_range(ctx, s.n * s.c, 1, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const C* xs = xp + plane * pin;
        C* ys = yp + plane * pout;
        int64_t* is = ind ? ind->as<int64_t>() + plane * pout : nullptr;
        if constexpr (std::is_same_v<C, float>) {
          if (kind == PoolKind::kMax && !is && r == 2) {
            max_pool_2d_plane(s.w, xs, ys);
            continue;
          }
        }
        if (kind == PoolKind::kMax) {
          C best = C(0);
          int64_t best_at = -1;
          for_each_window(
              s.w, [&](int64_t, const std::vector<int64_t>&) { best_at = -1; },
              [&](int64_t off, int64_t coff) {
                if (best_at < 0 || xs[off] > best) {
                  best = xs[off];
                  best_at = storage_order ? coff : off;
                }
              },
              [&](int64_t o) {
                ys[o] = best_at < 0 ? std::numeric_limits<C>::lowest() : best;
                if (is) is[o] = best_at < 0 ? 0 : plane * pin + best_at;
              });
        } else {
          double acc = 0;
          int64_t count = 0, padded = 0;
          for_each_window(
              s.w,
              [&](int64_t, const std::vector<int64_t>& oidx) {
                acc = 0;
                count = 0;
                padded = padded_window_count(s.w, oidx);
              },
              [&](int64_t off, int64_t) {
                const double v = static_cast<double>(xs[off]);
                acc += kind == PoolKind::kLp ? std::pow(std::fabs(v), p) : v;
                ++count;
              },
              [&](int64_t o) {
                if (kind == PoolKind::kLp) {
                  ys[o] = static_cast<C>(std::pow(acc, 1.0 / p));
                } else {
                  const int64_t denom = count_include_pad ? padded : count;
                  ys[o] = static_cast<C>(denom > 0 ? acc / static_cast<double>(denom) : 0.0);
                }
              });
        }
      }
    });
    out.finish();
  });
  return Status::ok();
}

}  // namespace

Status kernel_MaxPool(OpContext& ctx) {
  const int64_t so = ctx.attrs().get_int("storage_order", 0);
  if (so != 0 && so != 1) return ctx.error(StatusCode::kInvalidArgument, "storage_order must be 0 or 1");
  return pool_kernel(ctx, PoolKind::kMax);
}
Status kernel_AveragePool(OpContext& ctx) { return pool_kernel(ctx, PoolKind::kAverage); }
Status kernel_LpPool(OpContext& ctx) { return pool_kernel(ctx, PoolKind::kLp); }

namespace {

// GlobalAveragePool / GlobalMaxPool with layout = "NHWC" (pool_nhwc.h): X [N, D1, ..., C],
// Y [N, 1, ..., 1, C]; each task one image's block of channels, every position one tap.
Status global_pool_nhwc(OpContext& ctx, PoolKind kind, const TensorView& x) {
  const size_t r = x.dims.size();
  if (r < 2) return ctx.error(StatusCode::kInvalidArgument, "X must be [N, ..., C], got ", dims_string(x.dims));
  std::vector<int64_t> out_dims(r, 1);
  out_dims[0] = x.dims[0];
  out_dims[r - 1] = x.dims[r - 1];
  const int64_t c = x.dims[r - 1], pin = product(std::vector<int64_t>(x.dims.begin() + 1, x.dims.end() - 1));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x.dtype, out_dims, &y));
  std::vector<int64_t> off(static_cast<size_t>(pin));
  for (int64_t p = 0; p < pin; ++p) off[static_cast<size_t>(p)] = p * c;
  constexpr int64_t kBlock = 64;  // channels per task
  const int64_t blocks = (c + kBlock - 1) / kBlock;
  const CpuPath path = active_cpu_path();
  const float* xp = x.as<float>();
  float* yp = y->as<float>();
  parallel_range(ctx, x.dims[0] * blocks, 1, [&](int64_t begin, int64_t end) {
    PoolNhwcArgs a;
    a.kind = kind == PoolKind::kMax ? PoolNhwcKind::GlobalMax : PoolNhwcKind::Average;
    a.off = off.data();
    a.ntaps = pin;
    a.denom = static_cast<double>(pin);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t img = t / blocks, c0 = (t % blocks) * kBlock;
      a.x = xp + img * pin * c + c0;
      a.y = yp + img * c + c0;
      a.channels = std::min(kBlock, c - c0);
      pool_nhwc_position(path, a);
    }
  });
  return Status::ok();
}

Status global_pool(OpContext& ctx, PoolKind kind) {
  const TensorView* x = ctx.input(0);
  if (!x) return ctx.error(StatusCode::kInvalidArgument, "expects input X");
  bool channels_last = false;
  CUVIL_RETURN_IF_ERROR(pool_layout(ctx, kind, *x, &channels_last));
  if (channels_last) return global_pool_nhwc(ctx, kind, *x);
  if (x->dims.size() < 2)
    return ctx.error(StatusCode::kInvalidArgument, "X must be [N, C, ...], got ", dims_string(x->dims));
  if (!is_float_dtype(x->dtype))
    return ctx.error(StatusCode::kInvalidArgument, "dtype ", dtype_name(x->dtype), " is not supported");
  std::vector<int64_t> out_dims(x->dims.size(), 1);
  out_dims[0] = x->dims[0];
  out_dims[1] = x->dims[1];
  const int64_t planes = x->dims[0] * x->dims[1], pin = product(x->dims, 2);
  const double p = static_cast<double>(ctx.attrs().get_int("p", 2));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, out_dims, &y));
  visit_compute_float(x->dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> xb;
    const C* xp = compute_data<C>(*x, &xb);
    ComputeOutput<C> out(y);
    parallel_range(ctx, planes, 16, [&](int64_t begin, int64_t end) {
      for (int64_t pl = begin; pl < end; ++pl) {
        const C* xs = xp + pl * pin;
        double acc = kind == PoolKind::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
        for (int64_t i = 0; i < pin; ++i) {
          const double v = xs[i];
          if (kind == PoolKind::kMax) acc = (v > acc || std::isnan(v)) ? v : acc;
          else if (kind == PoolKind::kLp) acc += std::pow(std::fabs(v), p);
          else acc += v;
        }
        if (kind == PoolKind::kAverage) acc = pin > 0 ? acc / static_cast<double>(pin) : 0.0;
        if (kind == PoolKind::kLp) acc = std::pow(acc, 1.0 / p);
        out.data()[pl] = static_cast<C>(acc);
      }
    });
    out.finish();
  });
  return Status::ok();
}

}  // namespace

Status kernel_GlobalAveragePool(OpContext& ctx) { return global_pool(ctx, PoolKind::kAverage); }
Status kernel_GlobalMaxPool(OpContext& ctx) { return global_pool(ctx, PoolKind::kMax); }
Status kernel_GlobalLpPool(OpContext& ctx) { return global_pool(ctx, PoolKind::kLp); }

// ---- MaxRoiPool / RoiAlign -------------------------------------------------------------------

Status kernel_MaxRoiPool(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* rois = ctx.input(1);
  if (!x || !rois) return ctx.error(StatusCode::kInvalidArgument, "expects inputs X and rois");
  if (x->dims.size() != 4 || rois->dims.size() != 2 || rois->dims[1] != 5)
    return ctx.error(StatusCode::kInvalidArgument, "X must be [N, C, H, W] and rois [num_rois, 5], got ",
                     dims_string(x->dims), " and ", dims_string(rois->dims));
  if (!is_float_dtype(x->dtype) || !is_float_dtype(rois->dtype))
    return ctx.error(StatusCode::kInvalidArgument, "X and rois must be float tensors");
  const std::vector<int64_t> pooled = ctx.attrs().get_ints("pooled_shape");
  if (pooled.size() != 2 || pooled[0] < 1 || pooled[1] < 1)
    return ctx.error(StatusCode::kInvalidArgument, "pooled_shape must be two positive ints");
  const double scale = ctx.attrs().get_float("spatial_scale", 1.0f);
  const int64_t nb = x->dims[0], c = x->dims[1], h = x->dims[2], w = x->dims[3];
  const int64_t nr = rois->dims[0], ph = pooled[0], pw = pooled[1];
  std::vector<int64_t> out_dims = {nr, c, ph, pw};
  CUVIL_RETURN_IF_ERROR(check_numel(ctx, out_dims, "output"));
  std::vector<double> rb;
  const double* rp = compute_data<double>(*rois, &rb);
  for (int64_t i = 0; i < nr; ++i) {
    const double bi = rp[i * 5];
    if (!(bi >= 0 && bi < static_cast<double>(nb)))
      return ctx.error(StatusCode::kRuntime, "roi ", i, " has batch index ", bi, " outside [0, ", nb, ")");
    for (int j = 1; j < 5; ++j)
      if (!std::isfinite(rp[i * 5 + j]) || std::fabs(rp[i * 5 + j] * scale) > 1e15)
        return ctx.error(StatusCode::kRuntime, "roi ", i, " has a non-finite or huge coordinate");
  }
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, out_dims, &y));
  visit_compute_float(x->dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> xb;
    const C* xp = compute_data<C>(*x, &xb);
    ComputeOutput<C> out(y);
    C* yp = out.data();
    for (int64_t i = 0; i < nr; ++i) {
      const int64_t bi = static_cast<int64_t>(rp[i * 5]);
      const int64_t x1 = static_cast<int64_t>(std::round(rp[i * 5 + 1] * scale));
      const int64_t y1 = static_cast<int64_t>(std::round(rp[i * 5 + 2] * scale));
      const int64_t x2 = static_cast<int64_t>(std::round(rp[i * 5 + 3] * scale));
      const int64_t y2 = static_cast<int64_t>(std::round(rp[i * 5 + 4] * scale));
      const double rh = static_cast<double>(std::max<int64_t>(y2 - y1 + 1, 1));
      const double rw = static_cast<double>(std::max<int64_t>(x2 - x1 + 1, 1));
      const double bh = rh / static_cast<double>(ph), bw = rw / static_cast<double>(pw);
      for (int64_t ch = 0; ch < c; ++ch) {
        const C* plane = xp + (bi * c + ch) * h * w;
        for (int64_t py = 0; py < ph; ++py) {
          for (int64_t px = 0; px < pw; ++px) {
            const int64_t hs = std::min(std::max<int64_t>(static_cast<int64_t>(std::floor(py * bh)) + y1, 0), h);
            const int64_t he = std::min(std::max<int64_t>(static_cast<int64_t>(std::ceil((py + 1) * bh)) + y1, 0), h);
            const int64_t ws = std::min(std::max<int64_t>(static_cast<int64_t>(std::floor(px * bw)) + x1, 0), w);
            const int64_t we = std::min(std::max<int64_t>(static_cast<int64_t>(std::ceil((px + 1) * bw)) + x1, 0), w);
            C best = C(0);
            bool any = false;
            for (int64_t yy = hs; yy < he; ++yy)
              for (int64_t xx = ws; xx < we; ++xx)
                if (!any || plane[yy * w + xx] > best) {
                  best = plane[yy * w + xx];
                  any = true;
                }
            yp[((i * c + ch) * ph + py) * pw + px] = any ? best : C(0);
          }
        }
      }
    }
    out.finish();
  });
  return Status::ok();
}

Status kernel_RoiAlign(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* rois = ctx.input(1);
  const TensorView* bidx = ctx.input(2);
  if (!x || !rois || !bidx) return ctx.error(StatusCode::kInvalidArgument, "expects inputs X, rois and batch_indices");
  if (x->dims.size() != 4 || rois->dims.size() != 2 || rois->dims[1] != 4 || bidx->dims.size() != 1 ||
      bidx->dims[0] != rois->dims[0])
    return ctx.error(StatusCode::kInvalidArgument, "X must be [N, C, H, W], rois [R, 4], batch_indices [R]; got ",
                     dims_string(x->dims), ", ", dims_string(rois->dims), ", ", dims_string(bidx->dims));
  if (!is_float_dtype(x->dtype) || !is_float_dtype(rois->dtype))
    return ctx.error(StatusCode::kInvalidArgument, "X and rois must be float tensors");
  const AttrReader& at = ctx.attrs();
  const std::string mode = at.get_string("mode", "avg");
  const std::string ctm = at.get_string("coordinate_transformation_mode", ctx.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  if (mode != "avg" && mode != "max") return ctx.error(StatusCode::kInvalidArgument, "mode '", mode, "' is invalid");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    return ctx.error(StatusCode::kInvalidArgument, "coordinate_transformation_mode '", ctm, "' is invalid");
  const int64_t oh = at.get_int("output_height", 1), ow = at.get_int("output_width", 1);
  const int64_t sampling = at.get_int("sampling_ratio", 0);
  const double scale = at.get_float("spatial_scale", 1.0f);
  if (oh < 1 || ow < 1 || sampling < 0)
    return ctx.error(StatusCode::kInvalidArgument, "output_height/output_width must be >= 1 and sampling_ratio >= 0");
  const int64_t nb = x->dims[0], c = x->dims[1], h = x->dims[2], w = x->dims[3], nr = rois->dims[0];
  std::vector<int64_t> batch;
  if (!read_int_tensor(bidx, &batch))
    return ctx.error(StatusCode::kInvalidArgument, "batch_indices must be an integer tensor");
  for (int64_t i = 0; i < nr; ++i)
    if (batch[i] < 0 || batch[i] >= nb)
      return ctx.error(StatusCode::kRuntime, "batch_indices[", i, "] = ", batch[i], " is outside [0, ", nb, ")");
  std::vector<double> rb;
  const double* rp = compute_data<double>(*rois, &rb);
  for (int64_t i = 0; i < nr * 4; ++i)
    if (!std::isfinite(rp[i]) || std::fabs(rp[i] * scale) > 1e9)
      return ctx.error(StatusCode::kRuntime, "roi ", i / 4, " has a non-finite or huge coordinate");
  std::vector<int64_t> out_dims = {nr, c, oh, ow};
  CUVIL_RETURN_IF_ERROR(check_numel(ctx, out_dims, "output"));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, out_dims, &y));
  const bool half_pixel = ctm == "half_pixel";
  const bool is_max = mode == "max";
  visit_compute_float(x->dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> xb;
    const C* xp = compute_data<C>(*x, &xb);
    ComputeOutput<C> out(y);
    C* yp = out.data();
    struct Sample {
      int64_t pos[4];
      double wt[4];
    };
    for (int64_t i = 0; i < nr; ++i) {
      const double off = half_pixel ? 0.5 : 0.0;
      const double sx = rp[i * 4] * scale - off, sy = rp[i * 4 + 1] * scale - off;
      const double ex = rp[i * 4 + 2] * scale - off, ey = rp[i * 4 + 3] * scale - off;
      double rw = ex - sx, rh = ey - sy;
      if (!half_pixel) {
        rw = std::max(rw, 1.0);
        rh = std::max(rh, 1.0);
      }
      const double bh = rh / static_cast<double>(oh), bw = rw / static_cast<double>(ow);
      const int64_t gh = sampling > 0 ? sampling : static_cast<int64_t>(std::ceil(rh / static_cast<double>(oh)));
      const int64_t gw = sampling > 0 ? sampling : static_cast<int64_t>(std::ceil(rw / static_cast<double>(ow)));
      const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
      // Bilinear sample positions and weights per output cell, shared by all channels.
      std::vector<Sample> samples;
      samples.reserve(static_cast<size_t>(oh * ow * std::max<int64_t>(gh, 0) * std::max<int64_t>(gw, 0)));
      for (int64_t py = 0; py < oh; ++py)
        for (int64_t px = 0; px < ow; ++px)
          for (int64_t iy = 0; iy < gh; ++iy) {
            double yy = sy + py * bh + (iy + 0.5) * bh / static_cast<double>(gh);
            for (int64_t ix = 0; ix < gw; ++ix) {
              double xx = sx + px * bw + (ix + 0.5) * bw / static_cast<double>(gw);
              Sample smp = {{0, 0, 0, 0}, {0, 0, 0, 0}};
              if (!(yy < -1.0 || yy > static_cast<double>(h) || xx < -1.0 || xx > static_cast<double>(w))) {
                double ys = std::max(yy, 0.0), xs = std::max(xx, 0.0);
                int64_t y0 = static_cast<int64_t>(ys), x0 = static_cast<int64_t>(xs), y1, x1;
                if (y0 >= h - 1) {
                  y1 = y0 = h - 1;
                  ys = static_cast<double>(y0);
                } else {
                  y1 = y0 + 1;
                }
                if (x0 >= w - 1) {
                  x1 = x0 = w - 1;
                  xs = static_cast<double>(x0);
                } else {
                  x1 = x0 + 1;
                }
                const double ly = ys - y0, lx = xs - x0, hy = 1 - ly, hx = 1 - lx;
                smp = {{y0 * w + x0, y0 * w + x1, y1 * w + x0, y1 * w + x1}, {hy * hx, hy * lx, ly * hx, ly * lx}};
              }
              samples.push_back(smp);
            }
          }
      const int64_t per_cell = gh * gw;
      for (int64_t ch = 0; ch < c; ++ch) {
        const C* plane = xp + (batch[i] * c + ch) * h * w;
        for (int64_t cell = 0; cell < oh * ow; ++cell) {
          double acc = 0;
          bool first = true;
          for (int64_t sidx = 0; sidx < per_cell; ++sidx) {
            const Sample& s = samples[cell * per_cell + sidx];
            if (h == 0 || w == 0) break;
            if (is_max) {
              double v = s.wt[0] * plane[s.pos[0]];
              for (int k = 1; k < 4; ++k) v = std::max(v, s.wt[k] * static_cast<double>(plane[s.pos[k]]));
              acc = first ? v : std::max(acc, v);
              first = false;
            } else {
              for (int k = 0; k < 4; ++k) acc += s.wt[k] * static_cast<double>(plane[s.pos[k]]);
            }
          }
          yp[(i * c + ch) * oh * ow + cell] = static_cast<C>(is_max ? acc : acc / count);
        }
      }
    }
    out.finish();
  });
  return Status::ok();
}

// ---- MaxUnpool --------------------------------------------------------------------------------

Status kernel_MaxUnpool(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* ind = ctx.input(1);
  const TensorView* oshape = ctx.input(2);
  if (!x || !ind) return ctx.error(StatusCode::kInvalidArgument, "expects inputs X and I");
  const size_t r = x->dims.size();
  if (r < 3 || ind->dims != x->dims)
    return ctx.error(StatusCode::kInvalidArgument, "X ", dims_string(x->dims), " must be [N, C, D...] and I the same shape, got ",
                     dims_string(ind->dims));
  if (ind->dtype != DType::Int64) return ctx.error(StatusCode::kInvalidArgument, "I must be int64");
  const std::vector<int64_t> kernel = ctx.attrs().get_ints("kernel_shape");
  if (kernel.size() != r - 2) return ctx.error(StatusCode::kInvalidArgument, "kernel_shape must have ", r - 2, " values");
  const std::vector<int64_t> strides = ints_or_fill(ctx.attrs(), "strides", r - 2, 1);
  const std::vector<int64_t> pads = ints_or_fill(ctx.attrs(), "pads", 2 * (r - 2), 0);
  if (strides.size() != r - 2 || pads.size() != 2 * (r - 2))
    return ctx.error(StatusCode::kInvalidArgument, "strides or pads do not match the spatial rank");
  std::vector<int64_t> out_dims = {x->dims[0], x->dims[1]};
  for (size_t d = 0; d < r - 2; ++d) {
    constexpr int64_t kMaxAttr = int64_t{1} << 31;
    if (kernel[d] < 1 || strides[d] < 1 || pads[d] < 0 || pads[d + r - 2] < 0 || kernel[d] > kMaxAttr ||
        strides[d] > kMaxAttr || pads[d] > kMaxAttr || pads[d + r - 2] > kMaxAttr)
      return ctx.error(StatusCode::kInvalidArgument, "kernel_shape and strides must be in [1, 2^31] and pads in [0, 2^31]");
    auto span = checked_mul(std::max<int64_t>(x->dims[d + 2] - 1, 0), strides[d]);
    if (!span) return ctx.error(StatusCode::kInvalidArgument, "unpooled dimension ", d, " overflows");
    out_dims.push_back(*span + kernel[d] - pads[d] - pads[d + r - 2]);
  }
  // Indices address the default unpooled shape; a larger output_shape pads at the end of
  // each spatial dim (as ONNX Runtime does), so indices are mapped through coordinates.
  for (int64_t d : out_dims)
    if (d < 0) return ctx.error(StatusCode::kInvalidArgument, "output shape ", dims_string(out_dims), " is negative");
  const std::vector<int64_t> default_dims = out_dims;
  if (oshape) {
    std::vector<int64_t> os;
    if (!read_int_tensor(oshape, &os) || os.size() != r)
      return ctx.error(StatusCode::kInvalidArgument, "output_shape must be an integer tensor of ", r, " values");
    for (size_t d = 0; d < r; ++d)
      if (os[d] < default_dims[d] || (d < 2 && os[d] != x->dims[d]))
        return ctx.error(StatusCode::kInvalidArgument, "output_shape ", dims_string(os), " is smaller than the unpooled shape ",
                         dims_string(default_dims));
    out_dims = os;
  }
  CUVIL_RETURN_IF_ERROR(check_numel(ctx, out_dims, "output"));
  CUVIL_RETURN_IF_ERROR(check_numel(ctx, default_dims, "unpooled"));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, out_dims, &y));
  const int64_t total = product(default_dims), n = x->numel();
  const int64_t* ip = ind->as<int64_t>();
  const size_t esize = static_cast<size_t>(dtype_bits(x->dtype) / 8);
  if (esize == 0 || dtype_bits(x->dtype) % 8 != 0)
    return ctx.error(StatusCode::kUnsupported, "dtype ", dtype_name(x->dtype), " is not supported");
  for (int64_t i = 0; i < n; ++i)
    if (ip[i] < 0 || ip[i] >= total)
      return ctx.error(StatusCode::kRuntime, "index I[", i, "] = ", ip[i], " is outside the unpooled shape ",
                       dims_string(default_dims), " (", total, " elements)");
  if (y->numel() > 0) std::memset(y->data, 0, static_cast<size_t>(y->numel()) * esize);
  uint8_t* yb = static_cast<uint8_t*>(y->data);
  const uint8_t* xb = static_cast<const uint8_t*>(x->data);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = ip[i], off = 0, scale = 1;
    for (size_t d = r; d-- > 0;) {
      off += (rem % default_dims[d]) * scale;
      rem /= default_dims[d];
      scale *= out_dims[d];
    }
    std::memcpy(yb + off * esize, xb + i * esize, esize);
  }
  return Status::ok();
}

// ---- normalisations ---------------------------------------------------------------------------

Status kernel_BatchNormalization(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  if (!x) return ctx.error(StatusCode::kInvalidArgument, "expects input X");
  for (size_t i = 1; i < 5; ++i)
    if (!ctx.input(i)) return ctx.error(StatusCode::kInvalidArgument, "input ", i, " is required");
  if (x->dims.size() < 2)
    return ctx.error(StatusCode::kInvalidArgument, "X must be [N, C, ...], got ", dims_string(x->dims));
  if (!is_float_dtype(x->dtype)) return ctx.error(StatusCode::kInvalidArgument, "X must be a float tensor");
  for (size_t i = 1; i < 5; ++i)
    if (!is_float_dtype(ctx.input(i)->dtype))
      return ctx.error(StatusCode::kInvalidArgument, "input ", i, " must be a float tensor");
  const int64_t n = x->dims[0], c = x->dims[1], inner = product(x->dims, 2);
  // spatial = 0 (opset < 7) gives per-activation parameters of C x inner values.
  const int64_t pcount = ctx.input(1)->numel();
  const bool per_activation = pcount == c * inner && pcount != c;
  for (size_t i = 1; i < 5; ++i)
    if (ctx.input(i)->numel() != (per_activation ? c * inner : c))
      return ctx.error(StatusCode::kInvalidArgument, "input ", i, " ", dims_string(ctx.input(i)->dims), " must have ", c,
                       " elements");
  const double eps = ctx.attrs().get_float("epsilon", 1e-5f);
  const double momentum = ctx.attrs().get_float("momentum", 0.9f);
  const bool training = ctx.opset() >= 14 ? ctx.attrs().get_int("training_mode", 0) != 0
                                          : (ctx.num_outputs() > 1 && ctx.output_wanted(1) &&
                                             ctx.attrs().get_int("is_test", 0) == 0);
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, x->dims, &y));
  const int64_t pn = per_activation ? c * inner : c;
  std::vector<double> scale(pn), bias(pn), mean(pn), var(pn);
  for (int64_t i = 0; i < pn; ++i) {
    scale[i] = load_as_double(*ctx.input(1), i);
    bias[i] = load_as_double(*ctx.input(2), i);
    mean[i] = load_as_double(*ctx.input(3), i);
    var[i] = load_as_double(*ctx.input(4), i);
  }
  visit_compute_float(x->dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> xb;
    const C* xp = compute_data<C>(*x, &xb);
    std::vector<double> bmean(pn, 0.0), bvar(pn, 0.0);
    if (training) {
      const double cnt = static_cast<double>(per_activation ? n : n * inner);
      for (int64_t ni = 0; ni < n; ++ni)
        for (int64_t ci = 0; ci < c; ++ci)
          for (int64_t i = 0; i < inner; ++i)
            bmean[per_activation ? ci * inner + i : ci] += xp[(ni * c + ci) * inner + i];
      for (double& v : bmean) v /= cnt;
      for (int64_t ni = 0; ni < n; ++ni)
        for (int64_t ci = 0; ci < c; ++ci)
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t pi = per_activation ? ci * inner + i : ci;
            const double d = xp[(ni * c + ci) * inner + i] - bmean[pi];
            bvar[pi] += d * d;
          }
      for (double& v : bvar) v /= cnt;
    }
    const std::vector<double>& um = training ? bmean : mean;
    const std::vector<double>& uv = training ? bvar : var;
    ComputeOutput<C> out(y);
    C* yp = out.data();
    parallel_range(ctx, n * c, 4, [&](int64_t begin, int64_t end) {
      for (int64_t nc = begin; nc < end; ++nc) {
        const int64_t ci = nc % c;
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t pi = per_activation ? ci * inner + i : ci;
          const double a = scale[pi] / std::sqrt(uv[pi] + eps);
          yp[nc * inner + i] = static_cast<C>((xp[nc * inner + i] - um[pi]) * a + bias[pi]);
        }
      }
    });
    out.finish();
    if (training) {
      // Opset 14+: running_mean, running_var. Opset < 14: mean, var, saved_mean, saved_var.
      for (size_t o = 1; o < ctx.num_outputs() && o < 5; ++o) {
        if (!ctx.output_wanted(o)) continue;
        const TensorView* like = ctx.input(o <= 2 ? o + 2 : 3);
        TensorView* t = nullptr;
        Status st = ctx.allocate_output(o, like->dtype, like->dims, &t);
        if (!st.is_ok()) continue;
        ComputeOutput<double> to(t);
        for (int64_t i = 0; i < pn; ++i) {
          double v;
          if (o == 1) v = mean[i] * momentum + bmean[i] * (1 - momentum);
          else if (o == 2) v = var[i] * momentum + bvar[i] * (1 - momentum);
          else if (o == 3) v = bmean[i];
          else v = bvar[i];
          to.data()[i] = v;
        }
        to.finish();
      }
    }
  });
  return Status::ok();
}

Status kernel_InstanceNormalization(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* sc = ctx.input(1);
  const TensorView* bi = ctx.input(2);
  if (!x || !sc || !bi) return ctx.error(StatusCode::kInvalidArgument, "expects inputs input, scale and B");
  if (x->dims.size() < 3)
    return ctx.error(StatusCode::kInvalidArgument, "input must be [N, C, D...], got ", dims_string(x->dims));
  if (!is_float_dtype(x->dtype)) return ctx.error(StatusCode::kInvalidArgument, "input must be a float tensor");
  const int64_t n = x->dims[0], c = x->dims[1], inner = product(x->dims, 2);
  if (sc->numel() != c || bi->numel() != c)
    return ctx.error(StatusCode::kInvalidArgument, "scale and B must have ", c, " elements");
  const double eps = ctx.attrs().get_float("epsilon", 1e-5f);
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, x->dims, &y));
  visit_compute_float(x->dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> xb;
    const C* xp = compute_data<C>(*x, &xb);
    ComputeOutput<C> out(y);
    C* yp = out.data();
    parallel_range(ctx, n * c, 1, [&](int64_t begin, int64_t end) {
      for (int64_t nc = begin; nc < end; ++nc) {
        const C* xs = xp + nc * inner;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < inner; ++i) mean += xs[i];
        mean /= static_cast<double>(std::max<int64_t>(inner, 1));
        for (int64_t i = 0; i < inner; ++i) var += (xs[i] - mean) * (xs[i] - mean);
        var /= static_cast<double>(std::max<int64_t>(inner, 1));
        const double a = load_as_double(*sc, nc % c) / std::sqrt(var + eps);
        const double b = load_as_double(*bi, nc % c);
        for (int64_t i = 0; i < inner; ++i) yp[nc * inner + i] = static_cast<C>((xs[i] - mean) * a + b);
      }
    });
    out.finish();
  });
  return Status::ok();
}

namespace {

DType stash_dtype(int64_t code) {
  switch (code) {
    case 10: return DType::Float16;
    case 11: return DType::Double;
    case 16: return DType::BFloat16;
    default: return DType::Float;
  }
}

// Expands a parameter that broadcasts to `dims` into one value per element of dims.
Status expand_param(OpContext& ctx, const TensorView* t, const std::vector<int64_t>& dims, const char* what,
                    double fallback, std::vector<double>* out) {
  const int64_t n = product(dims);
  out->assign(static_cast<size_t>(n), fallback);
  if (!t) return Status::ok();
  std::vector<int64_t> b;
  if (t->dims.size() > dims.size() || !broadcast_shape(t->dims, dims, &b) || b != dims)
    return ctx.error(StatusCode::kInvalidArgument, what, " ", dims_string(t->dims), " does not broadcast to ", dims_string(dims));
  const std::vector<int64_t> st = broadcast_strides(t->dims, dims);
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < dims.size(); ++d) off += idx[d] * st[d];
    (*out)[i] = load_as_double(*t, off);
    for (size_t d = dims.size(); d-- > 0;) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  return Status::ok();
}

}  // namespace

Status kernel_LayerNormalization(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  if (!x) return ctx.error(StatusCode::kInvalidArgument, "expects input X");
  if (!is_float_dtype(x->dtype)) return ctx.error(StatusCode::kInvalidArgument, "X must be a float tensor");
  const int64_t rank = static_cast<int64_t>(x->dims.size());
  int64_t axis = 0;
  if (!normalize_axis(ctx.attrs().get_int("axis", -1), rank, &axis))
    return ctx.error(StatusCode::kInvalidArgument, "axis ", ctx.attrs().get_int("axis", -1), " is out of range for rank ", rank);
  const double eps = ctx.attrs().get_float("epsilon", 1e-5f);
  const DType stash = stash_dtype(ctx.attrs().get_int("stash_type", 1));
  const std::vector<int64_t> norm_dims(x->dims.begin() + axis, x->dims.end());
  const int64_t outer = product(x->dims, 0, static_cast<size_t>(axis)), inner = product(norm_dims);
  std::vector<double> scale, bias;
  CUVIL_RETURN_IF_ERROR(expand_param(ctx, ctx.input(1), norm_dims, "Scale", 1.0, &scale));
  CUVIL_RETURN_IF_ERROR(expand_param(ctx, ctx.input(2), norm_dims, "B", 0.0, &bias));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, x->dims, &y));
  std::vector<int64_t> stat_dims(x->dims.begin(), x->dims.begin() + axis);
  stat_dims.resize(x->dims.size(), 1);
  TensorView* mean_out = nullptr;
  TensorView* inv_out = nullptr;
  if (ctx.num_outputs() > 1 && ctx.output_wanted(1))
    CUVIL_RETURN_IF_ERROR(ctx.allocate_output(1, stash, stat_dims, &mean_out));
  if (ctx.num_outputs() > 2 && ctx.output_wanted(2))
    CUVIL_RETURN_IF_ERROR(ctx.allocate_output(2, stash, stat_dims, &inv_out));
  std::vector<double> means(outer), invs(outer);
  if (x->dtype == DType::Float && stash == DType::Float) {
    // Float32 with float statistics (the default stash_type): in float, vectorised
    // (runtime/cpu/vec_math.h). One pass over the row gives the sum and the sum of squares of
    // x - x[0] (shifting by a row element keeps the E[d^2] - E[d]^2 cancellation small when
    // |mean| >> stddev), then one pass writes fma((x - mean) * rstd, scale, bias). Accuracy:
    // the sums carry about inner/16 float roundings (a relative 3e-6 at inner = 768), the
    // variance that times (1 + (mean - x[0])^2 / var); the ONNX tests' tolerance is 1e-3..1e-5.
    std::vector<float> fscale(scale.begin(), scale.end()), fbias(bias.begin(), bias.end());
    const float feps = static_cast<float>(eps);
    const float* xp = x->as<float>();
    float* yp = y->as<float>();
    const float n = static_cast<float>(std::max<int64_t>(inner, 1));
    parallel_range(ctx, outer, 1, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const float* xs = xp + o * inner;
        const float shift = inner > 0 ? xs[0] : 0.0f;
        float sum = 0, sumsq = 0;
        vm::shifted_moments(xs, inner, shift, &sum, &sumsq);
        const float dmean = sum / n;
        const float var = std::max(sumsq / n - dmean * dmean, 0.0f);
        const float mean = shift + dmean;
        const float inv = 1.0f / std::sqrt(var + feps);
        means[o] = mean;
        invs[o] = inv;
        vm::normalize_affine(xs, yp + o * inner, inner, mean, inv, fscale.data(), fbias.data());
      }
    });
  } else visit_compute_float(x->dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> xb;
    const C* xp = compute_data<C>(*x, &xb);
    ComputeOutput<C> out(y);
    C* yp = out.data();
    parallel_range(ctx, outer, 1, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const C* xs = xp + o * inner;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < inner; ++i) mean += xs[i];
        mean /= static_cast<double>(std::max<int64_t>(inner, 1));
        for (int64_t i = 0; i < inner; ++i) var += (xs[i] - mean) * (xs[i] - mean);
        var /= static_cast<double>(std::max<int64_t>(inner, 1));
        const double inv = 1.0 / std::sqrt(var + eps);
        means[o] = mean;
        invs[o] = inv;
        for (int64_t i = 0; i < inner; ++i)
          yp[o * inner + i] = static_cast<C>((xs[i] - mean) * inv * scale[i] + bias[i]);
      }
    });
    out.finish();
  });
  auto store = [&](TensorView* t, const std::vector<double>& v) {
    if (!t) return;
    ComputeOutput<double> o(t);
    std::copy(v.begin(), v.end(), o.data());
    o.finish();
  };
  store(mean_out, means);
  store(inv_out, invs);
  return Status::ok();
}

Status kernel_GroupNormalization(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* sc = ctx.input(1);
  const TensorView* bi = ctx.input(2);
  if (!x || !sc || !bi) return ctx.error(StatusCode::kInvalidArgument, "expects inputs X, scale and bias");
  if (!is_float_dtype(x->dtype)) return ctx.error(StatusCode::kInvalidArgument, "X must be a float tensor");
  if (x->dims.size() < 2) return ctx.error(StatusCode::kInvalidArgument, "X must be [N, C, ...], got ", dims_string(x->dims));
  const int64_t groups = ctx.attrs().get_int("num_groups", 0);
  const int64_t n = x->dims[0], c = x->dims[1], inner = product(x->dims, 2);
  if (groups < 1 || c % groups != 0)
    return ctx.error(StatusCode::kInvalidArgument, "num_groups = ", groups, " must be >= 1 and divide ", c, " channels");
  const int64_t cpg = c / groups;
  const bool per_channel = sc->numel() == c;
  if ((!per_channel && sc->numel() != groups) || bi->numel() != sc->numel())
    return ctx.error(StatusCode::kInvalidArgument, "scale and bias must have ", c, " (or num_groups) elements, got ",
                     dims_string(sc->dims), " and ", dims_string(bi->dims));
  const double eps = ctx.attrs().get_float("epsilon", 1e-5f);
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, x->dims, &y));
  visit_compute_float(x->dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> xb;
    const C* xp = compute_data<C>(*x, &xb);
    ComputeOutput<C> out(y);
    C* yp = out.data();
    const int64_t gsize = cpg * inner;
    parallel_range(ctx, n * groups, 1, [&](int64_t begin, int64_t end) {
      for (int64_t ng = begin; ng < end; ++ng) {
        const C* xs = xp + ng * gsize;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < gsize; ++i) mean += xs[i];
        mean /= static_cast<double>(std::max<int64_t>(gsize, 1));
        for (int64_t i = 0; i < gsize; ++i) var += (xs[i] - mean) * (xs[i] - mean);
        var /= static_cast<double>(std::max<int64_t>(gsize, 1));
        const double inv = 1.0 / std::sqrt(var + eps);
        const int64_t g = ng % groups;
        for (int64_t cc = 0; cc < cpg; ++cc) {
          const int64_t pi = per_channel ? g * cpg + cc : g;
          const double a = load_as_double(*sc, pi) * inv, b = load_as_double(*bi, pi);
          for (int64_t i = 0; i < inner; ++i)
            yp[ng * gsize + cc * inner + i] = static_cast<C>((xs[cc * inner + i] - mean) * a + b);
        }
      }
    });
    out.finish();
  });
  return Status::ok();
}

Status kernel_LRN(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  if (!x) return ctx.error(StatusCode::kInvalidArgument, "expects input X");
  if (!is_float_dtype(x->dtype)) return ctx.error(StatusCode::kInvalidArgument, "X must be a float tensor");
  if (x->dims.size() < 2) return ctx.error(StatusCode::kInvalidArgument, "X must be [N, C, ...], got ", dims_string(x->dims));
  const int64_t size = ctx.attrs().get_int("size", 0);
  if (size < 1) return ctx.error(StatusCode::kInvalidArgument, "size = ", size, " must be >= 1");
  const double alpha = ctx.attrs().get_float("alpha", 1e-4f), beta = ctx.attrs().get_float("beta", 0.75f);
  const double bias = ctx.attrs().get_float("bias", 1.0f);
  const int64_t n = x->dims[0], c = x->dims[1], inner = product(x->dims, 2);
  const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, x->dims, &y));
  visit_compute_float(x->dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> xb;
    const C* xp = compute_data<C>(*x, &xb);
    ComputeOutput<C> out(y);
    C* yp = out.data();
    parallel_range(ctx, n * c, 1, [&](int64_t begin, int64_t end) {
      for (int64_t nc = begin; nc < end; ++nc) {
        const int64_t ni = nc / c, ci = nc % c;
        const int64_t c0 = std::max<int64_t>(0, ci - lo), c1 = std::min<int64_t>(c - 1, ci + hi);
        for (int64_t i = 0; i < inner; ++i) {
          double sq = 0;
          for (int64_t cc = c0; cc <= c1; ++cc) {
            const double v = xp[(ni * c + cc) * inner + i];
            sq += v * v;
          }
          yp[nc * inner + i] = static_cast<C>(xp[nc * inner + i] / std::pow(bias + alpha / size * sq, beta));
        }
      }
    });
    out.finish();
  });
  return Status::ok();
}

Status kernel_MeanVarianceNormalization(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  if (!x) return ctx.error(StatusCode::kInvalidArgument, "expects input X");
  if (!is_float_dtype(x->dtype)) return ctx.error(StatusCode::kInvalidArgument, "X must be a float tensor");
  const int64_t rank = static_cast<int64_t>(x->dims.size());
  std::vector<int64_t> axes = ctx.attrs().get_ints("axes");
  if (!ctx.attrs().has("axes")) axes = {0, 2, 3};
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    int64_t na = 0;
    if (!normalize_axis(a, rank, &na))
      return ctx.error(StatusCode::kInvalidArgument, "axis ", a, " is out of range for rank ", rank);
    reduced[na] = true;
  }
  // Kept dims index the statistics; the element -> statistic map is a strided walk.
  std::vector<int64_t> kept_stride(static_cast<size_t>(rank), 0);
  int64_t stats = 1;
  for (int64_t d = rank; d-- > 0;)
    if (!reduced[d]) {
      kept_stride[d] = stats;
      stats *= x->dims[d];
    }
  const int64_t total = x->numel();
  std::vector<int64_t> map(static_cast<size_t>(total));
  {
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    for (int64_t i = 0; i < total; ++i) {
      int64_t s = 0;
      for (int64_t d = 0; d < rank; ++d) s += idx[d] * kept_stride[d];
      map[i] = s;
      for (int64_t d = rank; d-- > 0;) {
        if (++idx[d] < x->dims[d]) break;
        idx[d] = 0;
      }
    }
  }
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, x->dims, &y));
  visit_compute_float(x->dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> xb;
    const C* xp = compute_data<C>(*x, &xb);
    std::vector<double> sum(stats, 0.0), sq(stats, 0.0);
    std::vector<int64_t> cnt(stats, 0);
    for (int64_t i = 0; i < total; ++i) {
      sum[map[i]] += xp[i];
      sq[map[i]] += static_cast<double>(xp[i]) * xp[i];
      ++cnt[map[i]];
    }
    ComputeOutput<C> out(y);
    for (int64_t i = 0; i < total; ++i) {
      const double k = static_cast<double>(std::max<int64_t>(cnt[map[i]], 1));
      const double mean = sum[map[i]] / k;
      const double var = std::max(sq[map[i]] / k - mean * mean, 0.0);
      out.data()[i] = static_cast<C>((xp[i] - mean) / (std::sqrt(var) + 1e-9));
    }
    out.finish();
  });
  return Status::ok();
}

// ---- GridSample ----------------------------------------------------------------------------

namespace {

double gs_reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const double n = std::floor(dx / range);
    const double r = dx - n * range;
    return std::fmod(n, 2.0) == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const double n = std::floor(dx / range);
    const double r = dx - n * range;
    return std::fmod(n, 2.0) == 0 ? hi - r : lo + r;
  }
  return x;
}

void cubic_coeffs(double t, double c[4]) {
  constexpr double a = -0.75;
  const double x = std::fabs(t);
  c[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
  c[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
  c[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
  c[3] = ((a * (2 - x) - 5 * a) * (2 - x) + 8 * a) * (2 - x) - 4 * a;
}

}  // namespace

Status kernel_GridSample(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* grid = ctx.input(1);
  if (!x || !grid) return ctx.error(StatusCode::kInvalidArgument, "expects inputs X and grid");
  const size_t r = x->dims.size();
  if (r < 3 || grid->dims.size() != r || grid->dims[0] != x->dims[0] || grid->dims[r - 1] != static_cast<int64_t>(r - 2))
    return ctx.error(StatusCode::kInvalidArgument, "X ", dims_string(x->dims), " and grid ", dims_string(grid->dims),
                     " must be [N, C, D...] and [N, D_out..., ", r - 2, "]");
  if (!is_float_dtype(x->dtype) || !is_float_dtype(grid->dtype))
    return ctx.error(StatusCode::kInvalidArgument, "X and grid must be float tensors");
  std::string mode = ctx.attrs().get_string("mode", ctx.opset() >= 20 ? "linear" : "bilinear");
  if (mode == "bilinear") mode = "linear";
  if (mode == "bicubic") mode = "cubic";
  const std::string padding = ctx.attrs().get_string("padding_mode", "zeros");
  const bool align = ctx.attrs().get_int("align_corners", 0) != 0;
  if (mode != "linear" && mode != "nearest" && mode != "cubic")
    return ctx.error(StatusCode::kInvalidArgument, "mode '", mode, "' is invalid");
  if (padding != "zeros" && padding != "border" && padding != "reflection")
    return ctx.error(StatusCode::kInvalidArgument, "padding_mode '", padding, "' is invalid");
  const size_t sr = r - 2;
  if (mode == "cubic" && sr > 3) return ctx.error(StatusCode::kUnsupported, "cubic mode supports up to 3 spatial dims");
  const int64_t n = x->dims[0], c = x->dims[1];
  const std::vector<int64_t> in = spatial_dims(x->dims);
  const std::vector<int64_t> gout(grid->dims.begin() + 1, grid->dims.end() - 1);
  const std::vector<int64_t> out_dims = image_dims(n, c, gout);
  CUVIL_RETURN_IF_ERROR(check_numel(ctx, out_dims, "output"));
  const int64_t pin = product(in), pout = product(gout);
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, out_dims, &y));
  const int taps = mode == "nearest" ? 1 : (mode == "linear" ? 2 : 4);
  int64_t corners = 1;
  for (size_t d = 0; d < sr; ++d) corners *= taps;
  std::vector<double> gb;
  const double* gp = compute_data<double>(*grid, &gb);
  visit_compute_float(x->dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> xb;
    const C* xp = compute_data<C>(*x, &xb);
    ComputeOutput<C> out(y);
    C* yp = out.data();
    parallel_range(ctx, n * pout, 16, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> base(sr), idx(sr), offs(static_cast<size_t>(corners));
      std::vector<double> wts(static_cast<size_t>(corners));
      std::vector<std::vector<double>> tapw(sr, std::vector<double>(4));
      for (int64_t np = begin; np < end; ++np) {
        const int64_t ni = np / pout, p = np % pout;
        const double* g = gp + np * sr;
        bool nan = false;
        for (size_t d = 0; d < sr; ++d) {
          const double size = static_cast<double>(in[d]);
          double v = g[sr - 1 - d];  // grid's last axis lists x (innermost dim) first
          if (std::isnan(v)) {
            nan = true;
            v = 0;
          }
          v = align ? (v + 1) / 2 * (size - 1) : ((v + 1) * size - 1) / 2;
          const double lo = align ? 0 : -0.5, hi = align ? size - 1 : size - 0.5;
          if (mode == "nearest") v = std::nearbyint(v);
          if (v < lo || v > hi) {
            if (padding == "border") v = std::min(std::max(v, 0.0), size - 1);
            else if (padding == "reflection") v = gs_reflect(v, lo, hi);
          }
          v = std::min(std::max(v, -1e9), 1e9);
          const double fl = std::floor(v);
          if (mode == "nearest") {
            base[d] = static_cast<int64_t>(v);
            tapw[d][0] = 1;
          } else if (mode == "linear") {
            base[d] = static_cast<int64_t>(fl);
            tapw[d][0] = fl + 1 - v;
            tapw[d][1] = v - fl;
          } else {
            base[d] = static_cast<int64_t>(fl) - 1;
            double cc[4];
            cubic_coeffs(v - fl, cc);
            for (int k = 0; k < 4; ++k) tapw[d][k] = cc[k];
          }
        }
        // Resolve every corner to an element offset (-1: zero padding) and a weight.
        for (int64_t k = 0; k < corners; ++k) {
          int64_t rem = k;
          double wt = 1;
          bool zero = nan;
          for (size_t d = sr; d-- > 0;) {
            const int64_t t = rem % taps;
            rem /= taps;
            int64_t i = base[d] + t;
            wt *= tapw[d][t];
            const int64_t size = in[d];
            if (i < 0 || i >= size) {
              if (padding == "zeros" || size == 0) {
                zero = true;
              } else if (padding == "border") {
                i = std::min<int64_t>(std::max<int64_t>(i, 0), size - 1);
              } else {
                const double lo = align ? 0 : -0.5, hi = align ? size - 1 : size - 0.5;
                i = static_cast<int64_t>(gs_reflect(static_cast<double>(i), lo, hi));
                i = std::min<int64_t>(std::max<int64_t>(i, 0), size - 1);
              }
            }
            idx[d] = i;
          }
          int64_t off = 0;
          for (size_t d = 0; d < sr; ++d) off = off * in[d] + idx[d];
          offs[k] = zero ? -1 : off;
          wts[k] = wt;
        }
        for (int64_t ci = 0; ci < c; ++ci) {
          const C* plane = xp + (ni * c + ci) * pin;
          double acc = 0;
          for (int64_t k = 0; k < corners; ++k)
            if (offs[k] >= 0) acc += wts[k] * static_cast<double>(plane[offs[k]]);
          yp[(ni * c + ci) * pout + p] = static_cast<C>(nan ? std::numeric_limits<double>::quiet_NaN() : acc);
        }
      }
    });
    out.finish();
  });
  return Status::ok();
}

// ---- Col2Im --------------------------------------------------------------------------------

Status kernel_Col2Im(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  if (!x || !ctx.input(1) || !ctx.input(2))
    return ctx.error(StatusCode::kInvalidArgument, "expects inputs input, image_shape and block_shape");
  if (!is_float_dtype(x->dtype)) return ctx.error(StatusCode::kInvalidArgument, "input must be a float tensor");
  std::vector<int64_t> image, block;
  if (!read_int_tensor(ctx.input(1), &image) || !read_int_tensor(ctx.input(2), &block) || image.size() != block.size() ||
      image.empty())
    return ctx.error(StatusCode::kInvalidArgument, "image_shape and block_shape must be integer tensors of equal length");
  if (x->dims.size() != 3) return ctx.error(StatusCode::kInvalidArgument, "input must be [N, C*prod(block), L], got ",
                                            dims_string(x->dims));
  for (int64_t v : image)
    if (v < 1) return ctx.error(StatusCode::kInvalidArgument, "image_shape ", dims_string(image), " must be positive");
  Window w;
  CUVIL_RETURN_IF_ERROR(window_geometry(ctx, image, block, false, &w));
  const int64_t kprod = product(block), blocks = product(w.out);
  if (x->dims[1] % kprod != 0 || x->dims[2] != blocks)
    return ctx.error(StatusCode::kInvalidArgument, "input ", dims_string(x->dims), " does not match block_shape ",
                     dims_string(block), " (", blocks, " blocks)");
  const int64_t n = x->dims[0], c = x->dims[1] / kprod, pimg = product(image);
  const std::vector<int64_t> out_dims = image_dims(n, c, image);
  CUVIL_RETURN_IF_ERROR(check_numel(ctx, out_dims, "output"));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, out_dims, &y));
  visit_compute_float(x->dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> xb;
    const C* xp = compute_data<C>(*x, &xb);
    ComputeOutput<C> out(y);
    std::fill(out.data(), out.data() + n * c * pimg, C(0));
    for (int64_t ni = 0; ni < n; ++ni)
      col2im<C>(&ctx, xp + ni * c * kprod * blocks, w, c, out.data() + ni * c * pimg, 0, blocks);
    out.finish();
  });
  return Status::ok();
}

// ---- DeformConv ----------------------------------------------------------------------------

// DeformConv (opset 19): a 2-D convolution whose every tap reads the input at its
// grid position plus a learned offset, bilinearly interpolated (zeros outside the image, as
// GridSample with align_corners 1 and zero padding, which the ONNX reference calls), and
// scaled by an optional mask. Per image: the sampled columns [C * kH * kW, OH * OW] (one row per
// input channel and tap, the channel's offset group's offsets and mask) are built over the
// workers, then each group's output rows are one GEMM of W's rows with its columns, the bias
// added after. float32; 1-D and 3-D inputs are refused (the reference has only 2-D).

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
  const std::vector<int64_t> strides = ints_or_fill(ctx.attrs(), "strides", 2, 1), dil = ints_or_fill(ctx.attrs(), "dilations", 2, 1),
                             pads = ints_or_fill(ctx.attrs(), "pads", 4, 0);
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
