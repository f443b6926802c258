// Shape rules for reductions (ONNX opsets 1..21): the Reduce* family and ArgMax/ArgMin.
// Where the axes live depends on the op and opset: an `axes` attribute before opset 18, except
// ReduceSum whose axes became an optional input in opset 13; an optional input for every
// Reduce* from opset 18. Empty or absent axes reduce everything unless noop_with_empty_axes
// (an attribute from the same opset that moved the axes to an input) asks for the identity.
// Axes that are a non-constant input still give the rank when keepdims is set, and keep every
// dim that is already 1 (reduced or not, it stays 1).
#include <algorithm>

#include "passes/shape/infer.h"

namespace cuvil::shape {
namespace {

bool axes_are_input(const InferContext& ctx) {
  int opset = ctx.node().opset;
  return opset >= 18 || (ctx.node().op == OpKind::ReduceSum && opset >= 13);
}

// Validates and normalises axes against `rank`; duplicates are rejected like numpy does.
std::vector<int64_t> normalized_axes(const InferContext& ctx, const std::vector<int64_t>& axes,
                                     int64_t rank, const char* what) {
  std::vector<int64_t> out;
  for (int64_t a : axes) {
    int64_t n = ctx.normalize_axis(a, rank, what);
    if (std::find(out.begin(), out.end(), n) != out.end())
      ctx.fail(what, " names axis ", a, " more than once");
    out.push_back(n);
  }
  return out;
}

}  // namespace

void infer_reduce(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  bool keepdims = ctx.attr_int("keepdims", 1) != 0;
  bool noop_with_empty_axes = ctx.attr_int("noop_with_empty_axes", 0) != 0;
  std::optional<std::vector<int64_t>> axes;  // nullopt: present but not constant
  const char* what = "attribute 'axes'";
  if (axes_are_input(ctx)) {
    what = "input 'axes'";
    if (!ctx.has_input(1)) {
      axes = std::vector<int64_t>{};
    } else {
      axes = ctx.const_ints(1);
      const Value& axes_value = *ctx.input(1);
      if (!axes && axes_value.shape && axes_value.shape->size() == 1 && (*axes_value.shape)[0] &&
          (*axes_value.shape)[0]->constant() == 0)
        axes = std::vector<int64_t>{};  // an empty tensor, even if its contents are unknown
    }
  } else {
    axes = ctx.attr_ints("axes").value_or(std::vector<int64_t>{});
  }

  if (axes && axes->empty()) {
    if (noop_with_empty_axes) {
      ctx.set_output(0, x.dtype, x.shape);
      return;
    }
    if (!x.shape) {
      // Reducing everything without keepdims is a scalar whatever the input rank.
      ctx.set_output(0, x.dtype, keepdims ? std::nullopt : std::optional<Shape>(Shape{}));
      return;
    }
    ctx.set_output(0, x.dtype, keepdims ? Shape(x.shape->size(), Dim(DimExpr(1))) : Shape{});
    return;
  }
  if (!x.shape) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  const Shape& s = *x.shape;
  int64_t rank = static_cast<int64_t>(s.size());
  if (!axes) {
    // Unknown axes: with keepdims every dim is itself or 1, so only dims already 1 are known.
    if (keepdims) {
      Shape out(s.size(), std::nullopt);
      for (size_t i = 0; i < s.size(); ++i)
        if (s[i] && s[i]->constant() == 1) out[i] = s[i];
      ctx.set_output(0, x.dtype, std::move(out));
      return;
    }
    const Value& axes_value = *ctx.input(1);
    if (axes_value.shape && axes_value.shape->size() == 1 && (*axes_value.shape)[0]) {
      if (auto n = (*axes_value.shape)[0]->constant(); n && *n >= 0 && *n <= rank) {
        ctx.set_output(0, x.dtype, Shape(static_cast<size_t>(rank - *n), std::nullopt));
        return;
      }
    }
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  std::vector<int64_t> reduced = normalized_axes(ctx, *axes, rank, what);
  Shape out;
  for (int64_t i = 0; i < rank; ++i) {
    bool is_reduced = std::find(reduced.begin(), reduced.end(), i) != reduced.end();
    if (!is_reduced)
      out.push_back(s[static_cast<size_t>(i)]);
    else if (keepdims)
      out.push_back(DimExpr(1));
  }
  ctx.set_output(0, x.dtype, std::move(out));
}

void infer_argreduce(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  bool keepdims = ctx.attr_int("keepdims", 1) != 0;
  int64_t select_last = ctx.attr_int("select_last_index", 0);
  if (select_last != 0 && select_last != 1)
    ctx.fail("attribute 'select_last_index' is ", select_last, ", must be 0 or 1");
  if (!x.shape) {
    ctx.set_output(0, DType::Int64, std::nullopt);
    return;
  }
  Shape out = *x.shape;
  int64_t axis = ctx.normalize_axis(ctx.attr_int("axis", 0), static_cast<int64_t>(out.size()),
                                    "attribute 'axis'");
  if (keepdims)
    out[static_cast<size_t>(axis)] = DimExpr(1);
  else
    out.erase(out.begin() + axis);
  ctx.set_output(0, DType::Int64, std::move(out));
}

}  // namespace cuvil::shape
