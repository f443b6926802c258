// Shape rules for the signal-processing ops (ONNX opsets 17..21): DFT, STFT, the cosine-sum
// windows (Hann, Hamming, Blackman) and MelWeightMatrix. Their extents come from small scalar
// inputs (dft_length, frame_step, size, ...), read through sym_scalar so that a length computed
// from a symbolic shape stays symbolic. DFT changed form in opset 20: `axis` moved from an
// attribute (default 1) to an optional input (default -2).
#include "passes/shape/infer.h"

namespace cuvil::shape {
namespace {

Dim dim_at(const Value* v, size_t i) {
  if (!v || !v->shape || i >= v->shape->size()) return std::nullopt;
  return (*v->shape)[i];
}

// A length input: its symbolic value; a fresh data-dependent symbol when its contents are
// only known at run time; nullopt when absent. Constant values must be positive.
Dim length_input(InferContext& ctx, size_t i, const char* name) {
  if (!ctx.has_input(i)) return std::nullopt;
  auto v = ctx.sym_scalar(i);
  if (!v) return ctx.data_dependent_dim(std::string(op_name(ctx.node().op)) + "_" + name);
  if (v->constant() && *v->constant() < 1)
    ctx.fail("input '", name, "' is ", *v->constant(), ", must be >= 1");
  return v;
}

DType output_datatype(const InferContext& ctx) {
  int64_t code = ctx.attr_int("output_datatype", 1);
  auto t =
      code >= 1 && code <= INT32_MAX ? dtype_from_onnx(static_cast<int32_t>(code)) : std::nullopt;
  if (!t || !(dtype_is_float(*t) || dtype_is_integer(*t)))
    ctx.fail("attribute 'output_datatype' is ", code, ", not a numeric ONNX data type");
  return *t;
}

Dim onesided_bins(const Dim& n) {
  if (!n) return std::nullopt;
  return sym::floordiv(*n, 2) + 1;
}

}  // namespace

void infer_dft(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  bool onesided = ctx.attr_int("onesided", 0) != 0;
  bool inverse = ctx.attr_int("inverse", 0) != 0;
  Dim dft_length = length_input(ctx, 1, "dft_length");
  bool length_given = ctx.has_input(1);
  if (!x.shape) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  Shape out = *x.shape;
  int64_t rank = static_cast<int64_t>(out.size());
  if (rank < 2) ctx.fail("input '", x.name, "' has rank ", rank, ", expected at least 2");
  if (auto c = out.back() ? out.back()->constant() : std::nullopt; c && *c != 1 && *c != 2)
    ctx.fail("input '", x.name, "' last dim is ", *c, ", expected 1 (real) or 2 (complex)");
  // onesided + inverse is the inverse real FFT: one-sided complex bins in, a real signal out.
  const bool irfft = onesided && inverse;
  out.back() = DimExpr(irfft ? 1 : 2);

  std::optional<int64_t> axis;
  if (ctx.node().opset >= 20) {
    if (!ctx.has_input(2)) {
      axis = -2;
    } else if (auto a = ctx.const_ints(2)) {
      if (a->size() != 1) ctx.fail("input 'axis' has ", a->size(), " elements, expected 1");
      axis = (*a)[0];
    }
  } else {
    axis = ctx.attr_int("axis", 1);
  }
  if (!axis) {
    // The axis is data: without a length change every non-complex dim is unchanged.
    if (!length_given && !onesided) {
      ctx.set_output(0, x.dtype, std::move(out));
      return;
    }
    for (size_t i = 0; i + 1 < out.size(); ++i) out[i].reset();
    ctx.set_output(0, x.dtype, std::move(out));
    return;
  }
  // The last axis holds the real/imaginary parts and cannot be transformed.
  int64_t a = ctx.normalize_axis(*axis, rank, "axis");
  if (a == rank - 1)
    ctx.fail("axis ", *axis, " names the real/imaginary axis of rank-", rank, " input '", x.name,
             "'");
  Dim& d = out[static_cast<size_t>(a)];
  if (length_given) d = dft_length;
  else if (irfft && d) d = (*d - DimExpr(1)) * DimExpr(2);  // 2 (n - 1)
  if (onesided && !irfft) d = onesided_bins(d);
  ctx.set_output(0, x.dtype, std::move(out));
}

void infer_stft(InferContext& ctx) {
  const Value& signal = ctx.required_input(0);
  ctx.required_input(1);
  bool onesided = ctx.attr_int("onesided", 1) != 0;
  if (auto r = rank_of(&signal); r && *r != 3 && *r != 2)
    ctx.fail("input '", signal.name, "' has rank ", *r,
             ", expected [batch, signal_length, 1 or 2]");
  Dim frame_step = length_input(ctx, 1, "frame_step");
  Dim frame_length = length_input(ctx, 3, "frame_length");
  const Value* window = ctx.input(2);
  if (window) {
    if (auto r = rank_of(window); r && *r != 1)
      ctx.fail("input '", window->name, "' has rank ", *r, ", expected 1");
    Dim window_length = dim_at(window, 0);
    if (frame_length && window_length && frame_length->constant() && window_length->constant() &&
        *frame_length->constant() != *window_length->constant())
      ctx.fail("window '", window->name, "' has length ", *window_length->constant(),
               " but frame_length is ", *frame_length->constant());
    // Both must agree, so either one gives the frame length; prefer a constant.
    if (!frame_length || (!frame_length->constant() && window_length && window_length->constant()))
      frame_length = window_length;
  }
  Dim signal_length = dim_at(&signal, 1);
  Dim frames;
  if (signal_length && frame_length && frame_step) {
    if (auto sl = signal_length->constant(), fl = frame_length->constant(); sl && fl && *fl > *sl)
      ctx.fail("frame_length ", *fl, " is longer than the signal (", *sl, " samples)");
    frames = sym::floordiv(*signal_length - *frame_length, *frame_step) + 1;
  }
  Dim bins = onesided ? onesided_bins(frame_length) : frame_length;
  ctx.set_output(0, signal.dtype, Shape{dim_at(&signal, 0), frames, bins, DimExpr(2)});
}

void infer_window(InferContext& ctx) {
  ctx.required_input(0);
  DType dtype = output_datatype(ctx);
  int64_t periodic = ctx.attr_int("periodic", 1);
  if (periodic != 0 && periodic != 1)
    ctx.fail("attribute 'periodic' is ", periodic, ", must be 0 or 1");
  ctx.set_output(0, dtype, Shape{length_input(ctx, 0, "size")});
}

void infer_mel_weight_matrix(InferContext& ctx) {
  for (size_t i = 0; i < 5; ++i) ctx.required_input(i);
  DType dtype = output_datatype(ctx);
  Dim num_mel_bins = length_input(ctx, 0, "num_mel_bins");
  Dim dft_length = length_input(ctx, 1, "dft_length");
  ctx.set_output(0, dtype, Shape{onesided_bins(dft_length), num_mel_bins});
}

}  // namespace cuvil::shape
