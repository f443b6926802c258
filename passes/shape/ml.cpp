// Shape rules of the ai.onnx.ml ops cuvil computes (Binarizer, ArrayFeatureExtractor) and of
// cuvil::DecisionForest, the form the tree ensembles import as (frontend/ml_ops.h,
// ir/fused_ops.h).
#include "passes/shape/infer.h"

namespace cuvil::shape {
namespace {

bool numeric_feature_type(DType t) {
  return t == DType::Float || t == DType::Double || t == DType::Float16 || t == DType::Int32 || t == DType::Int64;
}

}  // namespace

// Binarizer: X's shape and type.
void infer_binarizer(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  if (x.dtype != DType::Undefined && !numeric_feature_type(x.dtype))
    ctx.fail("X is ", dtype_name(x.dtype), "; Binarizer takes float, double, int32 or int64");
  ctx.set_output(0, x.dtype, x.shape);
}

// ArrayFeatureExtractor(X, Y): X[..., Y] with Y read as a flat list of indices along X's last
// axis; X [..., F] gives [..., numel(Y)], a 1-D X [1, numel(Y)] (as ONNX Runtime does).
void infer_array_feature_extractor(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  const Value& y = ctx.required_input(1);
  if (y.dtype != DType::Undefined && y.dtype != DType::Int64) ctx.fail("Y (the indices) is ", dtype_name(y.dtype), "; it must be int64");
  if (x.dtype == DType::String) ctx.unsupported("string tensors are not supported");
  std::optional<Shape> out;
  if (x.shape && y.shape) {
    if (x.shape->empty()) ctx.fail("X is a scalar; ArrayFeatureExtractor takes a tensor of rank >= 1");
    Dim count = DimExpr(1);
    for (const Dim& d : *y.shape) count = count && d ? Dim(*count * *d) : Dim();
    out = x.shape->size() == 1 ? Shape{DimExpr(1), count} : *x.shape;
    out->back() = count;
  }
  ctx.set_output(0, x.dtype, out);
}

// DecisionForest(X, nodes, splits, roots, leaf_offsets, leaf_targets, leaf_weights, members?,
// base_values?) -> Y [N, n_targets] (2 columns for a binary ensemble of one target).
void infer_decision_forest(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  if (x.dtype != DType::Undefined && !numeric_feature_type(x.dtype))
    ctx.fail("X is ", dtype_name(x.dtype), "; a tree ensemble takes float, double, float16, int32 or int64");
  if (auto r = rank_of(&x); r && *r != 1 && *r != 2) ctx.fail("X has rank ", *r, "; a tree ensemble takes [N, F] (or [F])");
  const DType table_types[] = {DType::Int32, DType::Double, DType::Int32, DType::Int32, DType::Int32, DType::Double,
                               DType::Double, DType::Double};
  for (size_t i = 1; i < ctx.num_inputs() && i <= 8; ++i)
    if (const Value* t = ctx.input(i); t && t->dtype != table_types[i - 1])
      ctx.fail("table input ", i, " is ", dtype_name(t->dtype), ", not ", dtype_name(table_types[i - 1]));
  for (size_t i = 1; i <= 6; ++i) ctx.required_input(i);
  const int64_t targets = ctx.attr_int("n_targets", 0);
  if (targets < 1) ctx.fail("n_targets ", targets, " (must be positive)");
  const int64_t columns = ctx.attr_int("binary", 0) != 0 && targets == 1 ? 2 : targets;
  const DType out = ctx.attr_int("to_float", 0) != 0 ? DType::Float : x.dtype;
  std::optional<Shape> shape;
  if (x.shape) shape = Shape{x.shape->size() == 2 ? (*x.shape)[0] : Dim(DimExpr(1)), DimExpr(columns)};
  ctx.set_output(0, out, shape);
}

}  // namespace cuvil::shape
