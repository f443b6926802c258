// Shape rules for convolution, pooling and normalisation ops (ONNX opsets 1..21): Conv,
// ConvInteger, QLinearConv, ConvTranspose, Average/Max/LpPool, MaxRoiPool, RoiAlign,
// MaxUnpool, the global pools, BatchNormalization, LayerNormalization, DepthToSpace,
// SpaceToDepth, GridSample and Col2Im. Spatial extents stay symbolic: a window over a symbolic
// extent `h` gives `floordiv(h + pads - dilation*(k-1) - 1, stride) + 1` rather than "?", so a
// dynamic-resolution model keeps one expression per dim. Window attributes are validated here
// (strides, dilations, kernel, group, pads) because this is the first pass that reads them; a
// bad value is a user diagnostic naming the node and the attribute.
#include <algorithm>

#include "passes/shape/infer.h"
#include "support/checked.h"

namespace cuvil::shape {
namespace {

// Col2Im reads its spatial rank from a declared input length; anything past this is hostile.
constexpr int64_t kMaxSpatialAxes = 64;

Dim dim_at(const Value* v, size_t i) {
  if (!v || !v->shape || i >= v->shape->size()) return std::nullopt;
  return (*v->shape)[i];
}

std::optional<int64_t> const_dim_at(const Value* v, size_t i) {
  Dim d = dim_at(v, i);
  return d ? d->constant() : std::nullopt;
}

enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid };

AutoPad read_auto_pad(const InferContext& ctx) {
  std::string s = ctx.attr_string("auto_pad", "NOTSET");
  // Some exporters write an empty string for the default.
  if (s == "NOTSET" || s.empty()) return AutoPad::kNotSet;
  if (s == "SAME_UPPER") return AutoPad::kSameUpper;
  if (s == "SAME_LOWER") return AutoPad::kSameLower;
  if (s == "VALID") return AutoPad::kValid;
  ctx.fail("attribute 'auto_pad' has unknown value '", s, "'");
}

// An ints attribute with one entry per spatial axis (or `per_axis` entries per axis), each at
// least `min_value`; absent means `fallback` everywhere.
std::vector<int64_t> spatial_ints(const InferContext& ctx, const char* key, size_t n_spatial,
                                  int64_t fallback, int64_t min_value, size_t per_axis = 1) {
  auto given = ctx.attr_ints(key);
  if (!given) return std::vector<int64_t>(n_spatial * per_axis, fallback);
  if (given->size() != n_spatial * per_axis)
    ctx.fail("attribute '", key, "' has ", given->size(), " entries, expected ",
             n_spatial * per_axis, " for ", n_spatial, " spatial axes");
  for (size_t i = 0; i < given->size(); ++i)
    if ((*given)[i] < min_value)
      ctx.fail("attribute '", key, "' entry ", i, " is ", (*given)[i], ", must be >= ", min_value);
  return *given;
}

// The window geometry shared by Conv, ConvInteger, QLinearConv and the pools.
struct Window {
  size_t n_spatial = 0;
  std::vector<Dim> kernel;  // per spatial axis; nullopt when read from an unknown weight dim
  std::vector<int64_t> strides, dilations, pads;  // pads: all begins, then all ends
  AutoPad auto_pad = AutoPad::kNotSet;
  bool ceil_mode = false;
};

// dilation*(k-1)+1 with checked arithmetic: attributes are file contents.
Dim effective_kernel(const InferContext& ctx, const Dim& k, int64_t dilation) {
  if (!k) return std::nullopt;
  if (auto c = k->constant()) {
    auto km1 = checked_sub(*c, 1);
    auto scaled = km1 ? checked_mul(*km1, dilation) : std::nullopt;
    auto ek = scaled ? checked_add(*scaled, 1) : std::nullopt;
    if (!ek)
      ctx.fail("attributes 'kernel_shape'/'dilations' overflow (kernel ", *c, ", dilation ",
               dilation, ")");
    return DimExpr(*ek);
  }
  return DimExpr(dilation) * (*k - 1) + 1;
}

// One output extent of a sliding window over `in`.
Dim window_out_dim(const InferContext& ctx, const Window& w, size_t axis, const Dim& in) {
  int64_t stride = w.strides[axis];
  if (w.auto_pad == AutoPad::kSameUpper || w.auto_pad == AutoPad::kSameLower) {
    // SAME pads so that every stride position covers the input: ceil(in / stride).
    if (!in) return std::nullopt;
    return sym::ceildiv(*in, stride);
  }
  int64_t pb = 0, pe = 0;
  if (w.auto_pad == AutoPad::kNotSet) {
    pb = w.pads[axis];
    pe = w.pads[axis + w.n_spatial];
  }
  Dim ek = effective_kernel(ctx, w.kernel[axis], w.dilations[axis]);
  if (!in || !ek) return std::nullopt;
  if (auto cin = in->constant(), cek = ek->constant(); cin && cek) {
    auto padded = checked_add(*cin, pb);
    padded = padded ? checked_add(*padded, pe) : std::nullopt;
    if (!padded) ctx.fail("attribute 'pads' overflows spatial axis ", axis);
    if (*padded < *cek)
      ctx.fail("kernel extent ", *cek, " is larger than padded input extent ", *padded,
               " on spatial axis ", axis, " (attributes 'kernel_shape', 'dilations', 'pads')");
  }
  DimExpr span = *in + DimExpr(pb) + DimExpr(pe) - *ek;
  if (!w.ceil_mode) return sym::floordiv(span, stride) + 1;
  // Ceil mode drops a last window that would start inside the right padding (the ONNX
  // clarification that matches PyTorch): out = min(ceil(span/s) + 1, ceil((in + pb)/s)).
  // With a constant kernel that folds into one ceildiv: ceil(span/s) + 1 = ceil((span+s)/s)
  // and span + s = in + pb + (pe + s - ek).
  if (auto cek = ek->constant()) {
    auto extra = checked_add(pe, stride);
    extra = extra ? checked_sub(*extra, *cek) : std::nullopt;
    if (!extra) ctx.fail("attributes 'pads'/'strides' overflow on spatial axis ", axis);
    return sym::ceildiv(*in + DimExpr(pb) + DimExpr(std::min<int64_t>(*extra, 0)), stride);
  }
  return sym::min(sym::ceildiv(span, stride) + 1, sym::ceildiv(*in + DimExpr(pb), stride));
}

Window read_window(const InferContext& ctx, size_t n_spatial, bool use_dilations) {
  Window w;
  w.n_spatial = n_spatial;
  w.auto_pad = read_auto_pad(ctx);
  w.strides = spatial_ints(ctx, "strides", n_spatial, 1, 1);
  w.dilations = use_dilations ? spatial_ints(ctx, "dilations", n_spatial, 1, 1)
                              : std::vector<int64_t>(n_spatial, 1);
  w.pads = spatial_ints(ctx, "pads", n_spatial, 0, 0, 2);
  w.ceil_mode = ctx.attr_int("ceil_mode", 0) != 0;
  return w;
}

// Conv, ConvInteger and QLinearConv: X [N, C, spatial...], W [M, C/group, kernel...].
// channels_last: X and Y are [N, D1, ..., C] (FusedConv layout = "NHWC"); W stays [M, C/group, k...].
void infer_conv_common(InferContext& ctx, size_t x_index, size_t w_index, DType out_dtype,
                       bool channels_last = false) {
  const Value& x = ctx.required_input(x_index);
  const Value& w = ctx.required_input(w_index);
  auto x_rank = rank_of(&x), w_rank = rank_of(&w);
  if (x_rank && w_rank && *x_rank != *w_rank)
    ctx.fail("weight '", w.name, "' has rank ", *w_rank, " but input '", x.name, "' has rank ",
             *x_rank);
  auto kernel_attr = ctx.attr_ints("kernel_shape");
  std::optional<int64_t> rank = x_rank ? x_rank : w_rank;
  if (!rank && kernel_attr) rank = static_cast<int64_t>(kernel_attr->size()) + 2;
  int64_t group = ctx.attr_int("group", 1);
  if (group < 1) ctx.fail("attribute 'group' is ", group, ", must be >= 1");
  if (!rank) {
    ctx.set_output(0, out_dtype, std::nullopt);
    return;
  }
  if (*rank < 3)
    ctx.fail("input '", x.name, "' has rank ", *rank, ", expected at least 3 (N, C, spatial)");
  size_t n_spatial = static_cast<size_t>(*rank - 2);
  Window win = read_window(ctx, n_spatial, /*use_dilations=*/true);
  win.ceil_mode = false;  // not a Conv attribute
  win.kernel.assign(n_spatial, std::nullopt);
  if (kernel_attr) {
    if (kernel_attr->size() != n_spatial)
      ctx.fail("attribute 'kernel_shape' has ", kernel_attr->size(), " entries, expected ",
               n_spatial);
    for (size_t i = 0; i < n_spatial; ++i) {
      int64_t k = (*kernel_attr)[i];
      if (k < 1) ctx.fail("attribute 'kernel_shape' entry ", i, " is ", k, ", must be >= 1");
      auto wk = const_dim_at(&w, i + 2);
      if (wk && *wk != k)
        ctx.fail("attribute 'kernel_shape' entry ", i, " is ", k, " but weight '", w.name, "' has ",
                 *wk);
      win.kernel[i] = DimExpr(k);
    }
  } else {
    for (size_t i = 0; i < n_spatial; ++i) {
      win.kernel[i] = dim_at(&w, i + 2);
      if (auto k = const_dim_at(&w, i + 2); k && *k < 1)
        ctx.fail("weight '", w.name, "' has kernel extent ", *k, " on spatial axis ", i);
    }
  }

  const size_t c_axis = channels_last ? n_spatial + 1 : 1, s_axis0 = channels_last ? 1 : 2;
  auto c_in = const_dim_at(&x, c_axis), c_per_group = const_dim_at(&w, 1), m = const_dim_at(&w, 0);
  if (c_in && *c_in % group != 0)
    ctx.fail("attribute 'group' (", group, ") does not divide the ", *c_in, " input channels of '",
             x.name, "'");
  auto c_expected = c_per_group ? checked_mul(*c_per_group, group) : std::nullopt;
  if (c_in && c_per_group && (!c_expected || *c_in != *c_expected))
    ctx.fail("input '", x.name, "' has ", *c_in, " channels but weight '", w.name, "' expects ",
             *c_per_group, " per group x ", group, " groups (attribute 'group')");
  if (m && *m % group != 0)
    ctx.fail("attribute 'group' (", group, ") does not divide the ", *m,
             " output channels of weight '", w.name, "'");

  Shape out;
  out.push_back(dim_at(&x, 0));
  if (!channels_last) out.push_back(dim_at(&w, 0));
  for (size_t i = 0; i < n_spatial; ++i)
    out.push_back(window_out_dim(ctx, win, i, dim_at(&x, i + s_axis0)));
  if (channels_last) out.push_back(dim_at(&w, 0));
  ctx.set_output(0, out_dtype, std::move(out));
}

// Ranks 4.. of the classic N, C, H, W image ops.
void require_rank(const InferContext& ctx, const Value& v, int64_t rank) {
  auto r = rank_of(&v);
  if (r && *r != rank) ctx.fail("input '", v.name, "' has rank ", *r, ", expected ", rank);
}

int64_t positive_int_attr(const InferContext& ctx, const char* key, int64_t fallback,
                          bool required) {
  if (required && !ctx.node().attr(key)) ctx.fail("required attribute '", key, "' is missing");
  int64_t v = ctx.attr_int(key, fallback);
  if (v < 1) ctx.fail("attribute '", key, "' is ", v, ", must be >= 1");
  return v;
}

}  // namespace

void infer_conv(InferContext& ctx) { infer_conv_common(ctx, 0, 1, ctx.required_input(0).dtype); }

// cuvil::FusedConv (ir/fused_ops.h): Conv's shape; the residual must broadcast to it.
void infer_fused_conv(InferContext& ctx) {
  const std::string layout = ctx.attr_string("layout", "NCHW");
  if (layout != "NCHW" && layout != "NHWC") ctx.fail("attribute 'layout' is '", layout, "', not NCHW or NHWC");
  infer_conv_common(ctx, 0, 1, ctx.required_input(0).dtype, layout == "NHWC");
  check_fused_epilogue(ctx, /*first_operand=*/3);
}

void infer_conv_integer(InferContext& ctx) { infer_conv_common(ctx, 0, 1, DType::Int32); }

// DeformConv (19): Conv's attributes and output shape (no auto_pad); offset (input 2) and mask
// (input 4) carry the output's spatial dims, which the kernel checks.
void infer_deform_conv(InferContext& ctx) {
  if (ctx.node().attr("auto_pad")) ctx.fail("attribute 'auto_pad' is not a DeformConv attribute");
  infer_conv_common(ctx, 0, 1, ctx.required_input(0).dtype);
  ctx.required_input(2);
}

void infer_qlinear_conv(InferContext& ctx) {
  // x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B
  infer_conv_common(ctx, 0, 3, ctx.required_input(7).dtype);
}

void infer_conv_transpose(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  const Value& w = ctx.required_input(1);
  auto x_rank = rank_of(&x), w_rank = rank_of(&w);
  if (x_rank && w_rank && *x_rank != *w_rank)
    ctx.fail("weight '", w.name, "' has rank ", *w_rank, " but input '", x.name, "' has rank ",
             *x_rank);
  int64_t group = ctx.attr_int("group", 1);
  if (group < 1) ctx.fail("attribute 'group' is ", group, ", must be >= 1");
  auto kernel_attr = ctx.attr_ints("kernel_shape");
  std::optional<int64_t> rank = x_rank ? x_rank : w_rank;
  if (!rank && kernel_attr) rank = static_cast<int64_t>(kernel_attr->size()) + 2;
  if (!rank) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  if (*rank < 3)
    ctx.fail("input '", x.name, "' has rank ", *rank, ", expected at least 3 (N, C, spatial)");
  size_t n = static_cast<size_t>(*rank - 2);
  Window win = read_window(ctx, n, /*use_dilations=*/true);
  std::vector<int64_t> output_padding = spatial_ints(ctx, "output_padding", n, 0, 0);
  std::vector<Dim> kernel(n);
  for (size_t i = 0; i < n; ++i) kernel[i] = dim_at(&w, i + 2);
  if (kernel_attr) {
    if (kernel_attr->size() != n)
      ctx.fail("attribute 'kernel_shape' has ", kernel_attr->size(), " entries, expected ", n);
    for (size_t i = 0; i < n; ++i) {
      if ((*kernel_attr)[i] < 1)
        ctx.fail("attribute 'kernel_shape' entry ", i, " is ", (*kernel_attr)[i], ", must be >= 1");
      kernel[i] = DimExpr((*kernel_attr)[i]);
    }
  }
  auto c_in = const_dim_at(&x, 1), c_w = const_dim_at(&w, 0);
  if (c_in && *c_in % group != 0)
    ctx.fail("attribute 'group' (", group, ") does not divide the ", *c_in, " input channels of '",
             x.name, "'");
  if (c_in && c_w && *c_in != *c_w)
    ctx.fail("input '", x.name, "' has ", *c_in, " channels but weight '", w.name, "' has ", *c_w);

  Shape out;
  out.push_back(dim_at(&x, 0));
  Dim m_per_group = dim_at(&w, 1);
  out.push_back(m_per_group ? Dim(*m_per_group * DimExpr(group)) : std::nullopt);

  // An explicit output_shape overrides the computed extents (the pads are derived from it).
  // Some exporters write it with N and C in front; accept both lengths.
  if (auto output_shape = ctx.attr_ints("output_shape")) {
    size_t skip = output_shape->size() == n + 2 ? 2 : 0;
    if (output_shape->size() != n && skip == 0)
      ctx.fail("attribute 'output_shape' has ", output_shape->size(), " entries, expected ", n);
    for (size_t i = 0; i < n; ++i) {
      int64_t e = (*output_shape)[i + skip];
      if (e < 0) ctx.fail("attribute 'output_shape' entry ", i + skip, " is negative (", e, ")");
      out.push_back(DimExpr(e));
    }
    ctx.set_output(0, x.dtype, std::move(out));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    Dim in = dim_at(&x, i + 2);
    if (!in) {
      out.push_back(std::nullopt);
      continue;
    }
    if (win.auto_pad == AutoPad::kSameUpper || win.auto_pad == AutoPad::kSameLower) {
      out.push_back(*in * DimExpr(win.strides[i]));
      continue;
    }
    Dim ek = effective_kernel(ctx, kernel[i], win.dilations[i]);
    if (!ek) {
      out.push_back(std::nullopt);
      continue;
    }
    int64_t pads = 0;
    if (win.auto_pad == AutoPad::kNotSet) {
      auto sum = checked_add(win.pads[i], win.pads[i + n]);
      if (!sum) ctx.fail("attribute 'pads' overflows on spatial axis ", i);
      pads = *sum;
    }
    out.push_back(DimExpr(win.strides[i]) * (*in - 1) + DimExpr(output_padding[i]) + *ek -
                  DimExpr(pads));
  }
  ctx.set_output(0, x.dtype, std::move(out));
}

// The pools' layout attribute (docs/ir.md): true for "NHWC", which MaxPool (without its Indices
// output), AveragePool and the global average/max pools take, on float32 only.
bool read_pool_layout(const InferContext& ctx) {
  const std::string layout = ctx.attr_string("layout", "NCHW");
  if (layout != "NCHW" && layout != "NHWC") ctx.fail("attribute 'layout' is '", layout, "', not NCHW or NHWC");
  if (layout == "NCHW") return false;
  const Node& n = ctx.node();
  if (n.op == OpKind::LpPool || n.op == OpKind::GlobalLpPool) ctx.fail("layout NHWC is not supported by ", n.op_type);
  if (n.op == OpKind::MaxPool && n.outputs.size() > 1 && n.outputs[1] != kNoValue)
    ctx.fail("layout NHWC has no Indices output (output 1 of MaxPool)");
  const Value& x = ctx.required_input(0);
  if (x.dtype != DType::Float) ctx.fail("layout NHWC takes float32 only, input '", x.name, "' is ", dtype_name(x.dtype));
  return true;
}

void infer_pool(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  const bool channels_last = read_pool_layout(ctx);
  auto kernel_attr = ctx.attr_ints("kernel_shape");
  if (!kernel_attr) ctx.fail("required attribute 'kernel_shape' is missing");
  size_t n = kernel_attr->size();
  auto x_rank = rank_of(&x);
  if (x_rank && *x_rank != static_cast<int64_t>(n) + 2)
    ctx.fail("attribute 'kernel_shape' has ", n, " entries but input '", x.name, "' has rank ",
             *x_rank);
  if (n == 0) ctx.fail("attribute 'kernel_shape' is empty");
  // MaxPool has dilations from opset 10, AveragePool from 19, LpPool from 18; reading them
  // whenever present is harmless because older nodes cannot carry the attribute.
  Window win = read_window(ctx, n, /*use_dilations=*/true);
  win.kernel.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if ((*kernel_attr)[i] < 1)
      ctx.fail("attribute 'kernel_shape' entry ", i, " is ", (*kernel_attr)[i], ", must be >= 1");
    win.kernel[i] = DimExpr((*kernel_attr)[i]);
  }
  if (ctx.node().op == OpKind::MaxPool) {
    int64_t order = ctx.attr_int("storage_order", 0);
    if (order != 0 && order != 1)
      ctx.fail("attribute 'storage_order' is ", order, ", must be 0 or 1");
  }
  // NHWC: [N, O1, ..., C] from [N, D1, ..., C].
  const size_t c_axis = channels_last ? n + 1 : 1, s_axis0 = channels_last ? 1 : 2;
  Shape out;
  out.push_back(dim_at(&x, 0));
  if (!channels_last) out.push_back(dim_at(&x, c_axis));
  for (size_t i = 0; i < n; ++i) out.push_back(window_out_dim(ctx, win, i, dim_at(&x, i + s_axis0)));
  if (channels_last) out.push_back(dim_at(&x, c_axis));
  ctx.set_output(0, x.dtype, out);
  if (ctx.node().op == OpKind::MaxPool) ctx.set_output(1, DType::Int64, out);
}

void infer_max_roi_pool(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  const Value& rois = ctx.required_input(1);
  auto pooled = ctx.attr_ints("pooled_shape");
  if (!pooled) ctx.fail("required attribute 'pooled_shape' is missing");
  if (pooled->size() != 2)
    ctx.fail("attribute 'pooled_shape' has ", pooled->size(), " entries, expected 2");
  for (size_t i = 0; i < 2; ++i)
    if ((*pooled)[i] < 1)
      ctx.fail("attribute 'pooled_shape' entry ", i, " is ", (*pooled)[i], ", must be >= 1");
  require_rank(ctx, x, 4);
  require_rank(ctx, rois, 2);
  if (auto c = const_dim_at(&rois, 1); c && *c != 5)
    ctx.fail("input '", rois.name, "' has ", *c, " columns, expected 5 (batch, x1, y1, x2, y2)");
  ctx.set_output(
      0, x.dtype,
      Shape{dim_at(&rois, 0), dim_at(&x, 1), DimExpr((*pooled)[0]), DimExpr((*pooled)[1])});
}

void infer_roi_align(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  const Value& rois = ctx.required_input(1);
  const Value& batch_indices = ctx.required_input(2);
  require_rank(ctx, x, 4);
  require_rank(ctx, rois, 2);
  require_rank(ctx, batch_indices, 1);
  if (auto c = const_dim_at(&rois, 1); c && *c != 4)
    ctx.fail("input '", rois.name, "' has ", *c, " columns, expected 4 (x1, y1, x2, y2)");
  int64_t oh = positive_int_attr(ctx, "output_height", 1, false);
  int64_t ow = positive_int_attr(ctx, "output_width", 1, false);
  std::string mode = ctx.attr_string("mode", "avg");
  if (mode != "avg" && mode != "max") ctx.fail("attribute 'mode' has unknown value '", mode, "'");
  Dim num_rois = dim_at(&rois, 0);
  if (!num_rois) num_rois = dim_at(&batch_indices, 0);
  ctx.set_output(0, x.dtype, Shape{num_rois, dim_at(&x, 1), DimExpr(oh), DimExpr(ow)});
}

void infer_max_unpool(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  ctx.required_input(1);
  auto kernel_attr = ctx.attr_ints("kernel_shape");
  if (!kernel_attr) ctx.fail("required attribute 'kernel_shape' is missing");
  size_t n = kernel_attr->size();
  auto x_rank = rank_of(&x);
  if (x_rank && *x_rank != static_cast<int64_t>(n) + 2)
    ctx.fail("attribute 'kernel_shape' has ", n, " entries but input '", x.name, "' has rank ",
             *x_rank);
  for (size_t i = 0; i < n; ++i)
    if ((*kernel_attr)[i] < 1)
      ctx.fail("attribute 'kernel_shape' entry ", i, " is ", (*kernel_attr)[i], ", must be >= 1");
  std::vector<int64_t> strides = spatial_ints(ctx, "strides", n, 1, 1);
  std::vector<int64_t> pads = spatial_ints(ctx, "pads", n, 0, 0, 2);

  // The optional output_shape input gives the full output shape (N, C included).
  if (ctx.has_input(2)) {
    if (auto dims = ctx.sym_ints(2)) {
      if (dims->size() != n + 2)
        ctx.fail("input 'output_shape' has ", dims->size(), " entries, expected ", n + 2);
      for (size_t i = 0; i < dims->size(); ++i)
        if (auto c = (*dims)[i].constant(); c && *c < 0)
          ctx.fail("input 'output_shape' entry ", i, " is negative (", *c, ")");
      ctx.set_output(0, x.dtype, Shape(dims->begin(), dims->end()));
    } else {
      // Run-time contents: N and C are the input's, the spatial extents are data.
      Shape out{dim_at(&x, 0), dim_at(&x, 1)};
      for (size_t i = 0; i < n; ++i) out.push_back(ctx.data_dependent_dim("max_unpool"));
      ctx.set_output(0, x.dtype, std::move(out));
    }
    return;
  }
  Shape out{dim_at(&x, 0), dim_at(&x, 1)};
  for (size_t i = 0; i < n; ++i) {
    Dim in = dim_at(&x, i + 2);
    auto pad_sum = checked_add(pads[i], pads[i + n]);
    if (!pad_sum) ctx.fail("attribute 'pads' overflows on spatial axis ", i);
    out.push_back(
        in ? Dim(DimExpr(strides[i]) * (*in - 1) + DimExpr((*kernel_attr)[i]) - DimExpr(*pad_sum))
           : std::nullopt);
  }
  ctx.set_output(0, x.dtype, std::move(out));
}

void infer_global_pool(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  const bool channels_last = read_pool_layout(ctx);
  auto rank = rank_of(&x);
  if (!rank) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  if (*rank < 2) ctx.fail("input '", x.name, "' has rank ", *rank, ", expected at least 2");
  // NCHW [N, C, 1, ...]; NHWC [N, 1, ..., C].
  Shape out = *x.shape;
  for (size_t i = channels_last ? 1 : 2; i + (channels_last ? 1 : 0) < out.size(); ++i) out[i] = DimExpr(1);
  ctx.set_output(0, x.dtype, std::move(out));
}

void infer_batch_norm(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  ctx.set_output(0, x.dtype, x.shape);
  // Outputs 1..4 are running mean/var (all opsets) and, before opset 14, the saved batch
  // mean/var. All have the shape and dtype of the `mean` input (T2 since opset 15), which is
  // [C] (or [C, D1, ...] for spatial=0 before opset 9).
  const Value* mean = ctx.input(3);
  for (size_t i = 1; i < ctx.num_outputs() && i <= 4; ++i) {
    if (mean) {
      ctx.set_output(i, mean->dtype, mean->shape);
    } else {
      ctx.set_output(i, x.dtype, std::nullopt);
    }
  }
}

void infer_layer_norm(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  int64_t stash = ctx.attr_int("stash_type", 1);
  auto stash_dtype = stash >= INT32_MIN && stash <= INT32_MAX
                         ? dtype_from_onnx(static_cast<int32_t>(stash))
                         : std::nullopt;
  if (!stash_dtype || !dtype_is_float(*stash_dtype))
    ctx.fail("attribute 'stash_type' is ", stash, ", not a floating-point ONNX data type");
  ctx.set_output(0, x.dtype, x.shape);
  std::optional<Shape> stats;
  if (x.shape) {
    int64_t rank = static_cast<int64_t>(x.shape->size());
    int64_t axis = ctx.normalize_axis(ctx.attr_int("axis", -1), rank);
    stats = *x.shape;
    for (int64_t i = axis; i < rank; ++i) (*stats)[static_cast<size_t>(i)] = DimExpr(1);
  }
  ctx.set_output(1, *stash_dtype, stats);
  ctx.set_output(2, *stash_dtype, stats);
}

void infer_depth_to_space(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  int64_t b = positive_int_attr(ctx, "blocksize", 1, /*required=*/true);
  if (ctx.node().opset >= 11) {
    std::string mode = ctx.attr_string("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") ctx.fail("attribute 'mode' has unknown value '", mode, "'");
  }
  require_rank(ctx, x, 4);
  auto bb = checked_mul(b, b);
  if (!bb) ctx.fail("attribute 'blocksize' (", b, ") is too large");
  Dim c = dim_at(&x, 1), h = dim_at(&x, 2), w = dim_at(&x, 3);
  if (c && c->constant() && *c->constant() % *bb != 0)
    ctx.fail("input '", x.name, "' has ", *c->constant(),
             " channels, not divisible by blocksize^2 = ", *bb, " (attribute 'blocksize')");
  ctx.set_output(
      0, x.dtype,
      Shape{dim_at(&x, 0), c ? Dim(sym::floordiv(*c, *bb)) : std::nullopt,
            h ? Dim(*h * DimExpr(b)) : std::nullopt, w ? Dim(*w * DimExpr(b)) : std::nullopt});
}

void infer_space_to_depth(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  int64_t b = positive_int_attr(ctx, "blocksize", 1, /*required=*/true);
  require_rank(ctx, x, 4);
  auto bb = checked_mul(b, b);
  if (!bb) ctx.fail("attribute 'blocksize' (", b, ") is too large");
  Dim c = dim_at(&x, 1), h = dim_at(&x, 2), w = dim_at(&x, 3);
  for (const Dim* d : {&h, &w})
    if (*d && (*d)->constant() && *(*d)->constant() % b != 0)
      ctx.fail("input '", x.name, "' spatial extent ", *(*d)->constant(),
               " is not divisible by attribute 'blocksize' (", b, ")");
  ctx.set_output(0, x.dtype,
                 Shape{dim_at(&x, 0), c ? Dim(*c * DimExpr(*bb)) : std::nullopt,
                       h ? Dim(sym::floordiv(*h, b)) : std::nullopt,
                       w ? Dim(sym::floordiv(*w, b)) : std::nullopt});
}

void infer_grid_sample(InferContext& ctx) {
  // X [N, C, D1..Dr], grid [N, D1_out..Dr_out, r] -> [N, C, D1_out..Dr_out].
  const Value& x = ctx.required_input(0);
  const Value& grid = ctx.required_input(1);
  auto x_rank = rank_of(&x), g_rank = rank_of(&grid);
  if (x_rank && g_rank && *x_rank != *g_rank)
    ctx.fail("grid '", grid.name, "' has rank ", *g_rank, " but input '", x.name, "' has rank ",
             *x_rank);
  std::optional<int64_t> rank = x_rank ? x_rank : g_rank;
  if (!rank) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  if (*rank < 3) ctx.fail("input '", x.name, "' has rank ", *rank, ", expected at least 3");
  if (auto r = const_dim_at(&grid, static_cast<size_t>(*rank - 1)); r && *r != *rank - 2)
    ctx.fail("grid '", grid.name, "' last dim is ", *r, ", expected ", *rank - 2,
             " (one coordinate per spatial axis)");
  Dim n = dim_at(&x, 0);
  if (!n) n = dim_at(&grid, 0);
  Shape out{n, dim_at(&x, 1)};
  for (int64_t i = 1; i < *rank - 1; ++i) out.push_back(dim_at(&grid, static_cast<size_t>(i)));
  ctx.set_output(0, x.dtype, std::move(out));
}

void infer_col2im(InferContext& ctx) {
  // input [N, C*prod(block_shape), L], image_shape [k], block_shape [k] -> [N, C, image...].
  const Value& x = ctx.required_input(0);
  const Value& image_shape = ctx.required_input(1);
  ctx.required_input(2);
  require_rank(ctx, x, 3);
  auto image = ctx.sym_ints(1);
  auto block = ctx.const_ints(2);
  std::optional<size_t> k;
  if (image)
    k = image->size();
  else if (auto c = const_dim_at(&image_shape, 0)) {
    // A declared length, not data in memory: bound it before sizing anything by it.
    if (*c < 0 || *c > kMaxSpatialAxes)
      ctx.fail("input '", image_shape.name, "' has ", *c, " entries, expected at most ",
               kMaxSpatialAxes, " spatial axes");
    k = static_cast<size_t>(*c);
  }
  if (block) {
    if (k && block->size() != *k)
      ctx.fail("input 'block_shape' has ", block->size(), " entries but 'image_shape' has ", *k);
    k = block->size();
  }
  for (const char* key : {"dilations", "strides"})
    if (k) spatial_ints(ctx, key, *k, 1, 1);
  if (k) spatial_ints(ctx, "pads", *k, 0, 0, 2);
  if (!k) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  Dim channels;
  if (block) {
    int64_t prod = 1;
    for (size_t i = 0; i < block->size(); ++i) {
      if ((*block)[i] < 1)
        ctx.fail("input 'block_shape' entry ", i, " is ", (*block)[i], ", must be >= 1");
      auto p = checked_mul(prod, (*block)[i]);
      if (!p) ctx.fail("input 'block_shape' product overflows");
      prod = *p;
    }
    if (Dim c = dim_at(&x, 1)) {
      if (auto cc = c->constant(); cc && *cc % prod != 0)
        ctx.fail("input '", x.name, "' dim 1 (", *cc,
                 ") is not divisible by the block size product ", prod);
      channels = sym::floordiv(*c, prod);
    }
  }
  Shape out{dim_at(&x, 0), channels};
  for (size_t i = 0; i < *k; ++i) {
    if (image) {
      if (auto c = (*image)[i].constant(); c && *c < 0)
        ctx.fail("input 'image_shape' entry ", i, " is negative (", *c, ")");
      out.push_back((*image)[i]);
    } else {
      out.push_back(ctx.data_dependent_dim("col2im"));  // image_shape known only at run time
    }
  }
  ctx.set_output(0, x.dtype, std::move(out));
}

}  // namespace cuvil::shape
