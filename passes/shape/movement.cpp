// Shape rules for data-movement and data-dependent ops: the Gather and Scatter families, Pad,
// Resize/Upsample, CenterCropPad, OneHot, EyeLike, and the ops whose output extent depends on
// tensor *values* (Compress, NonZero, Unique, NonMaxSuppression), which get fresh symbols from
// InferContext::data_dependent_dim unless the deciding input is constant. Gather of a small
// vector with constant indices also moves symbolic contents (`Shape -> Gather(0)` is how
// exporters read one dim), and a constant index outside such a vector is a model error.
// Attributes that became inputs follow Node::opset (Pad at 11, Resize's roi/scales/sizes at 11,
// Upsample's scales at 9, TopK's k at 10); opset 0 reads with the newest semantics.
#include <algorithm>
#include <cmath>

#include "passes/shape/infer.h"

namespace cuvil::shape {
namespace {

using Values = std::vector<DimExpr>;

constexpr int64_t kMaxSymElements = 1024;

bool since(const InferContext& ctx, int version) {
  int v = ctx.node().opset;
  return v <= 0 || v >= version;
}



std::optional<int64_t> vector_length(const InferContext& ctx, size_t i) {
  if (auto s = ctx.sym_ints(i)) return static_cast<int64_t>(s->size());
  const Value* v = ctx.input(i);
  if (!v || !v->shape || v->shape->size() != 1 || !(*v->shape)[0]) return std::nullopt;
  return (*v->shape)[0]->constant();
}

void require_rank(const InferContext& ctx, size_t i, int64_t rank, const char* what) {
  auto r = rank_of(ctx.input(i));
  if (r && *r != rank) ctx.fail(what, " must have rank ", rank, ", got ", *r);
}

// Input i's contents as doubles when it is small constant data (Resize scales and roi).
std::optional<std::vector<double>> const_floats(const InferContext& ctx, size_t i) {
  const Value* v = ctx.input(i);
  if (!v || !v->data || v->data->numel() > kMaxSymElements) return std::nullopt;
  DType t = v->data->dtype;
  if (t != DType::Float && t != DType::Double && !readable_as_ints(t)) return std::nullopt;
  std::vector<double> out;
  for (int64_t k = 0; k < v->data->numel(); ++k) out.push_back(v->data->float_at(k));
  return out;
}

// A scalar input as an integer expression: integer contents, or a float constant (OneHot's
// depth may be a float tensor; it is truncated like a Cast).
std::optional<DimExpr> int_scalar(const InferContext& ctx, size_t i) {
  if (auto s = ctx.sym_scalar(i)) return s;
  auto f = const_floats(ctx, i);
  if (!f || f->size() != 1 || !(std::fabs((*f)[0]) < 9.0e18)) return std::nullopt;
  return DimExpr(static_cast<int64_t>((*f)[0]));
}

// Axes attribute (Resize-18, CenterCropPad) normalised, or every axis when absent.
std::vector<int64_t> axes_or_all(const InferContext& ctx, int64_t rank) {
  std::vector<int64_t> out;
  auto axes = ctx.attr_ints("axes");
  if (!axes) {
    for (int64_t k = 0; k < rank; ++k) out.push_back(k);
    return out;
  }
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t a : *axes) {
    int64_t n = ctx.normalize_axis(a, rank, "attribute 'axes'");
    if (seen[static_cast<size_t>(n)]) ctx.fail("attribute 'axes' repeats axis ", a);
    seen[static_cast<size_t>(n)] = true;
    out.push_back(n);
  }
  return out;
}

// floor(d * scale) as Resize and Upsample compute output sizes. For a symbolic d this is exact
// only when the float product is: scale a dyadic rational p / 2^k (2.0, 0.5, 1.5, ...).
Dim scaled_dim(const Dim& d, double scale) {
  if (!d) return std::nullopt;
  if (auto c = d->constant()) {
    double v = std::floor(static_cast<double>(*c) * scale);
    if (!(v >= 0 && v < 4.0e18)) return std::nullopt;
    return DimExpr(static_cast<int64_t>(v));
  }
  for (int k = 0; k <= 10; ++k) {
    double p = std::ldexp(scale, k);
    if (p != std::floor(p) || p >= 2147483648.0) continue;
    DimExpr scaled = *d * DimExpr(static_cast<int64_t>(p));
    return k == 0 ? scaled : sym::floordiv(scaled, DimExpr(int64_t{1} << k));
  }
  return std::nullopt;
}

// Element count of a value; nullopt when its rank or a dim is unknown.
Dim element_count(const InferContext& ctx, const Value& v) {
  if (!v.shape) return std::nullopt;
  return naming_overflow(ctx, "element count", [&]() -> Dim {
    DimExpr n(1);
    for (const Dim& d : *v.shape) {
      if (!d) return std::nullopt;
      n = n * *d;
    }
    return n;
  });
}

// Count of nonzero contents when every element is decided; nullopt otherwise.
std::optional<int64_t> count_nonzero(const Values& v, const sym::SymbolRanges& r) {
  int64_t n = 0;
  for (const DimExpr& e : v) {
    if (auto c = e.constant()) n += *c != 0;
    else if (sym::prove_not_equal(e, DimExpr(0), r)) ++n;
    else return std::nullopt;
  }
  return n;
}

}  // namespace

void infer_gather(InferContext& ctx) {
  const Value& data = ctx.required_input(0);
  const Value& indices = ctx.required_input(1);
  int64_t axis = ctx.attr_int("axis", 0);
  if (!data.shape || !indices.shape) {
    ctx.set_output(0, data.dtype, std::nullopt);
    return;
  }
  int64_t r = static_cast<int64_t>(data.shape->size());
  size_t ax = static_cast<size_t>(ctx.normalize_axis(axis, r, "attribute 'axis'"));
  Shape out(data.shape->begin(), data.shape->begin() + static_cast<std::ptrdiff_t>(ax));
  out.insert(out.end(), indices.shape->begin(), indices.shape->end());
  out.insert(out.end(), data.shape->begin() + static_cast<std::ptrdiff_t>(ax) + 1,
             data.shape->end());
  ctx.set_output(0, data.dtype, out);

  // A constant index outside a known extent fails whenever the node runs.
  auto idx = ctx.const_ints(1);
  const Dim& extent = (*data.shape)[ax];
  if (auto n = extent ? extent->constant() : std::nullopt; idx && n) {
    for (int64_t i : *idx) {
      int64_t j = i < 0 ? i + *n : i;  // cannot overflow: i < 0 <= n
      if (j < 0 || j >= *n)
        ctx.fail("index ", i, " is out of range for axis ", ax, " of input '", data.name,
                 "' (size ", *n, ")");
    }
  }

  // Contents: a vector with contents indexed by constants (a scalar index gives a scalar).
  if (r != 1 || indices.shape->size() > 1) return;
  auto values = ctx.sym_ints(0);
  if (!values || !idx || static_cast<int64_t>(idx->size()) > kMaxSymElements) return;
  int64_t n = static_cast<int64_t>(values->size());
  Values result;
  for (int64_t i : *idx) {
    int64_t j = i < 0 ? i + n : i;
    if (j < 0 || j >= n) return;  // contents longer than the static extent: not trusted
    result.push_back((*values)[static_cast<size_t>(j)]);
  }
  bool fits = out.empty() ? result.size() == 1
                          : out[0] && out[0]->constant() == static_cast<int64_t>(result.size());
  if (fits) ctx.set_output_sym_data(0, std::move(result));
}

void infer_gather_elements(InferContext& ctx) {
  const Value& data = ctx.required_input(0);
  const Value& indices = ctx.required_input(1);
  if (data.shape) {
    int64_t r = static_cast<int64_t>(data.shape->size());
    if (indices.shape && static_cast<int64_t>(indices.shape->size()) != r)
      ctx.fail("input 'indices' has rank ", indices.shape->size(), " but 'data' has rank ", r);
    ctx.normalize_axis(ctx.attr_int("axis", 0), r, "attribute 'axis'");
  }
  ctx.set_output(0, data.dtype, indices.shape);
}

void infer_gather_nd(InferContext& ctx) {
  const Value& data = ctx.required_input(0);
  const Value& indices = ctx.required_input(1);
  int64_t b = since(ctx, 12) ? ctx.attr_int("batch_dims", 0) : 0;
  if (!data.shape || !indices.shape) {
    ctx.set_output(0, data.dtype, std::nullopt);
    return;
  }
  int64_t r = static_cast<int64_t>(data.shape->size());
  int64_t q = static_cast<int64_t>(indices.shape->size());
  if (r < 1 || q < 1) ctx.fail("inputs 'data' and 'indices' must have rank >= 1");
  if (b < 0 || b >= std::min(q, r))
    ctx.fail("attribute 'batch_dims' ", b, " must be in [0, ", std::min(q, r), ")");
  const Dim& last = indices.shape->back();
  auto m = last ? last->constant() : std::nullopt;
  if (!m) {
    ctx.set_output(0, data.dtype, std::nullopt);
    return;
  }
  if (*m < 1 || *m > r - b)
    ctx.fail("the last dim of input 'indices' is ", *m, "; it must be in [1, ", r - b, "]");
  Shape out(indices.shape->begin(), indices.shape->end() - 1);
  out.insert(out.end(), data.shape->begin() + static_cast<std::ptrdiff_t>(b + *m),
             data.shape->end());
  ctx.set_output(0, data.dtype, out);
}

void infer_scatter(InferContext& ctx) {
  const Value& data = ctx.required_input(0);
  ctx.required_input(1);
  ctx.required_input(2);
  ctx.set_output(0, data.dtype, data.shape);
}

void infer_pad(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  std::optional<Values> pads;
  std::optional<int64_t> pads_len;
  std::optional<std::vector<int64_t>> axes;
  bool axes_given = false;
  if (!since(ctx, 11)) {
    auto p = ctx.attr_ints("pads");
    if (!p) p = ctx.attr_ints("paddings");  // Pad-1's name for it
    if (!p) ctx.fail("attribute 'pads' is missing");
    pads = Values(p->begin(), p->end());
  } else {
    ctx.required_input(1);
    require_rank(ctx, 1, 1, "input 'pads'");
    pads = ctx.sym_ints(1);
    if (since(ctx, 18) && ctx.has_input(3)) {
      require_rank(ctx, 3, 1, "input 'axes'");
      axes_given = true;
      axes = ctx.const_ints(3);
    }
  }
  pads_len = pads ? std::optional<int64_t>(pads->size()) : vector_length(ctx, 1);
  if (!x.shape) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  int64_t r = static_cast<int64_t>(x.shape->size());
  if (axes_given && !axes) {
    ctx.set_output(0, x.dtype, unknown_dims(r));
    return;
  }
  std::vector<int64_t> padded;
  if (axes) {
    std::vector<bool> seen(static_cast<size_t>(r), false);
    for (int64_t a : *axes) {
      int64_t n = ctx.normalize_axis(a, r, "input 'axes'");
      if (seen[static_cast<size_t>(n)]) ctx.fail("input 'axes' repeats axis ", a);
      seen[static_cast<size_t>(n)] = true;
      padded.push_back(n);
    }
  } else {
    for (int64_t k = 0; k < r; ++k) padded.push_back(k);
  }
  size_t n = padded.size();
  if (pads_len && *pads_len != static_cast<int64_t>(2 * n))
    ctx.fail("'pads' has ", *pads_len, " entries for ", n, " padded axes (needs ", 2 * n, ")");
  Shape out = *x.shape;
  for (size_t i = 0; i < n; ++i) {
    Dim& d = out[static_cast<size_t>(padded[i])];
    if (!pads || !d) {
      d.reset();
      continue;
    }
    // Negative pads crop; the result must still be a size.
    DimExpr v = naming_overflow(ctx, "'pads'", [&] { return *d + (*pads)[i] + (*pads)[i + n]; });
    if (auto c = v.constant(); c && *c < 0)
      ctx.fail("'pads' make axis ", padded[i], " negative (", *c, ")");
    d = v;
  }
  ctx.set_output(0, x.dtype, out);
}

void infer_resize(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  const Node& n = ctx.node();
  bool resize = n.op == OpKind::Resize;
  std::optional<std::vector<double>> scales, roi;
  std::optional<Values> sizes;
  bool scales_given = false, sizes_given = false;
  // An input that is present but empty (Resize-11/12 pass an empty `scales` next to `sizes`)
  // counts as absent.
  auto present = [&](size_t i) {
    if (!ctx.has_input(i)) return false;
    auto len = vector_length(ctx, i);
    return !(len && *len == 0);
  };
  if (!resize && !since(ctx, 9)) {
    if (const Attribute* a = n.attr("scales")) {  // Upsample-7/8
      if (a->kind != Attribute::Kind::Floats) ctx.fail("attribute 'scales' must be floats");
      scales = std::vector<double>(a->floats.begin(), a->floats.end());
    } else {  // Upsample-1: height_scale / width_scale on a 4-D input
      scales = std::vector<double>{1.0, 1.0, ctx.attr_float("height_scale", 1.0f),
                                   ctx.attr_float("width_scale", 1.0f)};
    }
    scales_given = true;
  } else if (!resize || !since(ctx, 11)) {  // Upsample-9, Resize-10: scales is input 1
    ctx.required_input(1);
    scales_given = true;
    scales = const_floats(ctx, 1);
  } else {
    if (ctx.has_input(1)) roi = const_floats(ctx, 1);
    if (present(2)) {
      scales_given = true;
      scales = const_floats(ctx, 2);
    }
    if (present(3)) {
      sizes_given = true;
      sizes = ctx.sym_ints(3);
    }
    if (scales_given && sizes_given) ctx.fail("has both 'scales' and 'sizes'");
    if (!scales_given && !sizes_given) ctx.fail("needs one of 'scales' and 'sizes'");
  }
  if (!x.shape) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  int64_t r = static_cast<int64_t>(x.shape->size());
  std::vector<int64_t> axes;
  if (resize && since(ctx, 18)) {
    axes = axes_or_all(ctx, r);
  } else {
    for (int64_t k = 0; k < r; ++k) axes.push_back(k);
  }
  size_t na = axes.size();
  Shape out = *x.shape;
  for (int64_t a : axes) out[static_cast<size_t>(a)].reset();

  if (sizes) {
    if (sizes->size() != na)
      ctx.fail("'sizes' has ", sizes->size(), " entries for ", na, " axes");
    for (size_t i = 0; i < na; ++i)
      if (auto c = (*sizes)[i].constant(); c && *c < 0)
        ctx.fail("'sizes' entry ", i, " is negative (", *c, ")");
    std::string policy =
        since(ctx, 18) ? ctx.attr_string("keep_aspect_ratio_policy", "stretch") : "stretch";
    if (policy == "stretch") {
      for (size_t i = 0; i < na; ++i) out[static_cast<size_t>(axes[i])] = (*sizes)[i];
    } else if (policy == "not_larger" || policy == "not_smaller") {
      // One scale for all axes (the min or max of sizes/dims), then round half up.
      std::vector<double> ins;
      double scale = policy == "not_larger" ? INFINITY : -INFINITY;
      for (size_t i = 0; i < na; ++i) {
        const Dim& d = (*x.shape)[static_cast<size_t>(axes[i])];
        int64_t in_size = d && d->is_constant() ? d->constant().value_or(0) : 0;
        auto cs = (*sizes)[i].constant();
        if (in_size <= 0 || !cs) {  // symbolic or empty: the shared scale is unknown
          ctx.set_output(0, x.dtype, out);
          return;
        }
        double s = static_cast<double>(*cs) / static_cast<double>(in_size);
        scale = policy == "not_larger" ? std::min(scale, s) : std::max(scale, s);
        ins.push_back(static_cast<double>(in_size));
      }
      for (size_t i = 0; i < na; ++i) {
        double v = std::floor(ins[i] * scale + 0.5);
        if (v >= 0 && v < 4.0e18)
          out[static_cast<size_t>(axes[i])] = DimExpr(static_cast<int64_t>(v));
      }
    } else {
      ctx.fail("attribute 'keep_aspect_ratio_policy' is '", policy, "'");
    }
  } else if (scales) {
    if (scales->size() != na)
      ctx.fail("'scales' has ", scales->size(), " entries for ", na, " axes");
    for (size_t i = 0; i < na; ++i)
      if (!((*scales)[i] > 0) || !std::isfinite((*scales)[i]))
        ctx.fail("'scales' entry ", i, " is ", (*scales)[i], "; scales must be positive");
    bool crop = resize && since(ctx, 11) &&
                ctx.attr_string("coordinate_transformation_mode", "half_pixel") ==
                    "tf_crop_and_resize";
    for (size_t i = 0; i < na; ++i) {
      const Dim& d = (*x.shape)[static_cast<size_t>(axes[i])];
      double scale = (*scales)[i];
      if (crop) {
        // The output covers roi[end] - roi[start] of the input (roi is [starts..., ends...]).
        if (!roi || roi->size() != 2 * na) continue;
        scale *= (*roi)[na + i] - (*roi)[i];
        auto c = d ? d->constant() : std::nullopt;
        if (!c) continue;
      }
      out[static_cast<size_t>(axes[i])] = scaled_dim(d, scale);
    }
  }
  ctx.set_output(0, x.dtype, out);
}

void infer_center_crop_pad(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  ctx.required_input(1);
  require_rank(ctx, 1, 1, "input 'shape'");
  auto target = ctx.sym_ints(1);
  auto len = vector_length(ctx, 1);
  if (!x.shape) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  std::vector<int64_t> axes = axes_or_all(ctx, static_cast<int64_t>(x.shape->size()));
  if (len && *len != static_cast<int64_t>(axes.size()))
    ctx.fail("input 'shape' has ", *len, " entries for ", axes.size(), " axes");
  Shape out = *x.shape;
  for (size_t i = 0; i < axes.size(); ++i) {
    Dim& d = out[static_cast<size_t>(axes[i])];
    if (!target) {
      d.reset();
      continue;
    }
    if (auto c = (*target)[i].constant(); c && *c < 0)
      ctx.fail("input 'shape' entry ", i, " is negative (", *c, ")");
    d = (*target)[i];
  }
  ctx.set_output(0, x.dtype, out);
}

void infer_compress(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  ctx.required_input(1);
  require_rank(ctx, 1, 1, "input 'condition'");
  bool has_axis = ctx.node().attr("axis") != nullptr;
  // The condition may be shorter than the axis (the rest is dropped): count within the axis.
  auto selected = [&](const Dim& extent) -> DimExpr {
    auto cond = ctx.const_ints(1);
    auto c = extent ? extent->constant() : std::nullopt;
    if (cond && c) {
      size_t upto = std::min(cond->size(), static_cast<size_t>(std::max<int64_t>(*c, 0)));
      return DimExpr(static_cast<int64_t>(
          std::count_if(cond->begin(), cond->begin() + static_cast<std::ptrdiff_t>(upto),
                        [](int64_t v) { return v != 0; })));
    }
    return ctx.data_dependent_dim("compress");
  };
  if (!has_axis) {
    ctx.set_output(0, x.dtype, Shape{selected(element_count(ctx, x))});
    return;
  }
  if (!x.shape) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  int64_t r = static_cast<int64_t>(x.shape->size());
  size_t ax = static_cast<size_t>(
      ctx.normalize_axis(ctx.attr_int("axis", 0), r, "attribute 'axis'"));
  Shape out = *x.shape;
  out[ax] = selected((*x.shape)[ax]);
  ctx.set_output(0, x.dtype, out);
}

void infer_one_hot(InferContext& ctx) {
  const Value& indices = ctx.required_input(0);
  ctx.required_input(1);
  const Value& values = ctx.required_input(2);
  require_rank(ctx, 2, 1, "input 'values'");
  if (auto len = vector_length(ctx, 2); len && *len != 2)
    ctx.fail("input 'values' must hold 2 elements (off, on), has ", *len);
  auto depth = int_scalar(ctx, 1);
  if (depth)
    if (auto c = depth->constant(); c && *c < 0) ctx.fail("input 'depth' is negative (", *c, ")");
  if (!indices.shape) {
    ctx.set_output(0, values.dtype, std::nullopt);
    return;
  }
  int64_t r = static_cast<int64_t>(indices.shape->size());
  int64_t a = ctx.normalize_axis(ctx.attr_int("axis", -1), r + 1, "attribute 'axis'");
  Shape out = *indices.shape;
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(a), depth);
  ctx.set_output(0, values.dtype, out);
}

void infer_eye_like(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  require_rank(ctx, 0, 2, "input 'input'");
  DType dtype = x.dtype;
  if (ctx.node().attr("dtype")) {
    int64_t code = ctx.attr_int("dtype", 0);
    auto t = code >= INT32_MIN && code <= INT32_MAX
                 ? dtype_from_onnx(static_cast<int32_t>(code))
                 : std::nullopt;
    if (!t) ctx.fail("attribute 'dtype' has unknown data type code ", code);
    dtype = *t;
  }
  ctx.set_output(0, dtype, x.shape ? *x.shape : unknown_dims(2));
}

void infer_non_zero(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  // One row per input axis; a scalar counts as rank 1 (numpy's nonzero does atleast_1d).
  Dim rows = x.shape ? Dim(DimExpr(std::max<int64_t>(1, x.shape->size()))) : std::nullopt;
  std::optional<int64_t> count;
  if (auto v = ctx.sym_ints(0)) {
    count = count_nonzero(*v, ctx.ranges());
  } else if (auto c = ctx.const_ints(0)) {
    count =
        static_cast<int64_t>(std::count_if(c->begin(), c->end(), [](int64_t e) { return e != 0; }));
  }
  DimExpr n = count ? DimExpr(*count) : ctx.data_dependent_dim("nonzero");
  ctx.set_output(0, DType::Int64, Shape{rows, n});
}

void infer_top_k(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  std::optional<DimExpr> k;
  if (since(ctx, 10)) {
    ctx.required_input(1);
    if (auto len = vector_length(ctx, 1); len && *len != 1)
      ctx.fail("input 'K' must hold one element, has ", *len);
    k = ctx.sym_scalar(1);
  } else {
    if (!ctx.node().attr("k")) ctx.fail("attribute 'k' is missing");
    k = DimExpr(ctx.attr_int("k", 0));
  }
  if (k)
    if (auto c = k->constant(); c && *c < 0) ctx.fail("'k' is negative (", *c, ")");
  if (!x.shape) {
    ctx.set_output(0, x.dtype, std::nullopt);
    ctx.set_output(1, DType::Int64, std::nullopt);
    return;
  }
  int64_t r = static_cast<int64_t>(x.shape->size());
  size_t ax =
      static_cast<size_t>(ctx.normalize_axis(ctx.attr_int("axis", -1), r, "attribute 'axis'"));
  const Dim& d = (*x.shape)[ax];
  if (k && d && k->is_constant() && d->is_constant() && *k->constant() > *d->constant())
    ctx.fail("'k' is ", *k->constant(), " but axis ", ax, " has only ", *d->constant(),
             " elements");
  Shape out = *x.shape;
  out[ax] = k;
  ctx.set_output(0, x.dtype, out);
  ctx.set_output(1, DType::Int64, out);
}

void infer_unique(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  DimExpr u = ctx.data_dependent_dim("unique");
  std::optional<Shape> y;
  Dim inverse_len;
  if (ctx.node().attr("axis")) {
    if (x.shape) {
      int64_t r = static_cast<int64_t>(x.shape->size());
      size_t ax = static_cast<size_t>(
          ctx.normalize_axis(ctx.attr_int("axis", 0), r, "attribute 'axis'"));
      y = *x.shape;
      (*y)[ax] = u;
      inverse_len = (*x.shape)[ax];
    }
  } else {
    // Without an axis the input is flattened.
    y = Shape{u};
    inverse_len = element_count(ctx, x);
  }
  ctx.set_output(0, x.dtype, y);
  ctx.set_output(1, DType::Int64, Shape{u});
  ctx.set_output(2, DType::Int64, Shape{inverse_len});
  ctx.set_output(3, DType::Int64, Shape{u});
}

void infer_non_max_suppression(InferContext& ctx) {
  ctx.required_input(0);
  ctx.required_input(1);
  // Rows are [batch_index, class_index, box_index] of the boxes kept, which data decides.
  ctx.set_output(0, DType::Int64, Shape{ctx.data_dependent_dim("nms"), DimExpr(3)});
}

}  // namespace cuvil::shape
