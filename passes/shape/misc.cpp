// Shape rules for the ops that fit no larger family (ONNX opsets 1..21): quantisation
// (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear), the losses, the random
// generators, TfIdfVectorizer, and `opaque` for sequence/optional/string/training ops. Opaque
// ops are imported but not compiled, so their rule sets only what is plain from the op itself
// (SequenceLength is an int64 scalar, a sequence op yields a sequence of its input's dtype) and
// never invents element shapes.
#include <algorithm>

#include "passes/shape/infer.h"
#include "support/checked.h"

namespace cuvil::shape {
namespace {

Dim dim_at(const Value* v, size_t i) {
  if (!v || !v->shape || i >= v->shape->size()) return std::nullopt;
  return (*v->shape)[i];
}

// An ONNX TensorProto.DataType code from an attribute, validated.
DType dtype_attr(const InferContext& ctx, const char* key, int64_t code, bool want_float) {
  auto t =
      code >= 1 && code <= INT32_MAX ? dtype_from_onnx(static_cast<int32_t>(code)) : std::nullopt;
  if (!t || (want_float && !dtype_is_float(*t)))
    ctx.fail("attribute '", key, "' is ", code, ", not a valid ",
             want_float ? "floating-point " : "", "ONNX data type");
  return *t;
}

// Per-axis quantisation parameters must match the quantised axis; blocked ones (opset 21)
// have the input's rank.
void check_quant_params(const InferContext& ctx, const Value& x, const Value& scale) {
  int64_t block_size = ctx.attr_int("block_size", 0);
  if (block_size < 0) ctx.fail("attribute 'block_size' is ", block_size, ", must be >= 0");
  auto x_rank = rank_of(&x), s_rank = rank_of(&scale);
  if (!x_rank || !s_rank) return;
  if (block_size > 0) {
    if (*s_rank != *x_rank)
      ctx.fail("blocked quantization needs scale '", scale.name, "' of rank ", *x_rank, ", got ",
               *s_rank);
    return;
  }
  if (*s_rank == 0) return;
  if (*s_rank != 1) ctx.fail("scale '", scale.name, "' has rank ", *s_rank, ", expected 0 or 1");
  int64_t axis = ctx.normalize_axis(ctx.attr_int("axis", 1), *x_rank, "attribute 'axis'");
  Dim n = dim_at(&scale, 0), d = dim_at(&x, static_cast<size_t>(axis));
  if (n && d && n->constant() && d->constant() && *n->constant() != *d->constant() &&
      *n->constant() != 1)
    ctx.fail("scale '", scale.name, "' has ", *n->constant(), " entries but axis ", axis, " of '",
             x.name, "' has ", *d->constant());
}

void set_sequence(InferContext& ctx, size_t i, DType element) {
  Value* v = ctx.output(i);
  if (!v) return;
  v->kind = ValueKind::Sequence;
  v->dtype = element;
  v->shape.reset();
}

// reduction = none keeps the per-element loss [N, d1, ...]; mean and sum give a scalar.
std::optional<Shape> loss_shape(const InferContext& ctx, const Value& scores, const Value& target) {
  std::string reduction = ctx.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    ctx.fail("attribute 'reduction' has unknown value '", reduction, "'");
  auto s_rank = rank_of(&scores), t_rank = rank_of(&target);
  if (s_rank && *s_rank < 2)
    ctx.fail("input '", scores.name, "' has rank ", *s_rank, ", expected [N, C, ...]");
  if (s_rank && t_rank && *t_rank != *s_rank - 1)
    ctx.fail("target '", target.name, "' has rank ", *t_rank, ", expected ", *s_rank - 1);
  if (reduction != "none") return Shape{};
  if (target.shape) {
    Shape out = *target.shape;
    // Dims known on either side are the same extent.
    if (scores.shape)
      for (size_t i = 0; i < out.size(); ++i)
        if (!out[i]) out[i] = dim_at(&scores, i == 0 ? 0 : i + 1);
    return out;
  }
  if (!scores.shape) return std::nullopt;
  Shape out = *scores.shape;
  out.erase(out.begin() + 1);
  return out;
}

}  // namespace

void infer_quantize_linear(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  const Value& scale = ctx.required_input(1);
  const Value* zero_point = ctx.input(2);
  check_quant_params(ctx, x, scale);
  // Opset 21 adds output_dtype (0 = from the zero point, else uint8); both must agree.
  int64_t code = ctx.attr_int("output_dtype", 0);
  DType out = zero_point ? zero_point->dtype : DType::UInt8;
  if (code != 0) {
    DType wanted = dtype_attr(ctx, "output_dtype", code, /*want_float=*/false);
    if (zero_point && zero_point->dtype != DType::Undefined && zero_point->dtype != wanted)
      ctx.fail("attribute 'output_dtype' (", dtype_name(wanted), ") differs from the dtype of ",
               "zero point '", zero_point->name, "' (", dtype_name(zero_point->dtype), ")");
    out = wanted;
  }
  ctx.set_output(0, out, x.shape);
}

void infer_dequantize_linear(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  const Value& scale = ctx.required_input(1);
  check_quant_params(ctx, x, scale);
  // The result has the scale's dtype (float only before opset 19); a later output_dtype
  // attribute, where present, says the same thing explicitly.
  DType out = scale.dtype;
  if (int64_t code = ctx.attr_int("output_dtype", 0); code != 0)
    out = dtype_attr(ctx, "output_dtype", code, /*want_float=*/true);
  else if (out == DType::Undefined && ctx.node().opset < 19)
    out = DType::Float;
  ctx.set_output(0, out, x.shape);
}

void infer_dynamic_quantize_linear(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  ctx.set_output(0, DType::UInt8, x.shape);
  ctx.set_output(1, DType::Float, Shape{});
  ctx.set_output(2, DType::UInt8, Shape{});
}

void infer_nll_loss(InferContext& ctx) {
  const Value& scores = ctx.required_input(0);
  const Value& target = ctx.required_input(1);
  ctx.set_output(0, scores.dtype, loss_shape(ctx, scores, target));
}

void infer_softmax_cross_entropy_loss(InferContext& ctx) {
  const Value& scores = ctx.required_input(0);
  const Value& labels = ctx.required_input(1);
  ctx.set_output(0, scores.dtype, loss_shape(ctx, scores, labels));
  ctx.set_output(1, scores.dtype, scores.shape);  // log_prob
}

void infer_random_static(InferContext& ctx) {
  auto shape = ctx.attr_ints("shape");
  if (!shape) ctx.fail("required attribute 'shape' is missing");
  DType dtype = dtype_attr(ctx, "dtype", ctx.attr_int("dtype", 1), /*want_float=*/true);
  Shape out;
  for (size_t i = 0; i < shape->size(); ++i) {
    if ((*shape)[i] < 0)
      ctx.fail("attribute 'shape' entry ", i, " is negative (", (*shape)[i], ")");
    out.push_back(DimExpr((*shape)[i]));
  }
  ctx.set_output(0, dtype, std::move(out));
}

void infer_random_like(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  DType dtype = x.dtype;
  if (ctx.node().attr("dtype"))
    dtype = dtype_attr(ctx, "dtype", ctx.attr_int("dtype", 1), /*want_float=*/true);
  ctx.set_output(0, dtype, x.shape);
}

void infer_multinomial(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  if (auto r = rank_of(&x); r && *r != 2)
    ctx.fail("input '", x.name, "' has rank ", *r, ", expected [batch, class_size]");
  int64_t samples = ctx.attr_int("sample_size", 1);
  if (samples < 1) ctx.fail("attribute 'sample_size' is ", samples, ", must be >= 1");
  DType dtype = dtype_attr(ctx, "dtype", ctx.attr_int("dtype", 6), /*want_float=*/false);
  if (dtype != DType::Int32 && dtype != DType::Int64)
    ctx.fail("attribute 'dtype' must be int32 or int64, got ", dtype_name(dtype));
  ctx.set_output(0, dtype, Shape{dim_at(&x, 0), DimExpr(samples)});
}

void infer_tfidf_vectorizer(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  auto indexes = ctx.attr_ints("ngram_indexes");
  if (!indexes || indexes->empty()) ctx.fail("attribute 'ngram_indexes' is missing or empty");
  for (size_t i = 0; i < indexes->size(); ++i)
    if ((*indexes)[i] < 0)
      ctx.fail("attribute 'ngram_indexes' entry ", i, " is negative (", (*indexes)[i], ")");
  auto width = checked_add(*std::max_element(indexes->begin(), indexes->end()), 1);
  if (!width) ctx.fail("attribute 'ngram_indexes' is too large");
  auto rank = rank_of(&x);
  if (!rank) {
    ctx.set_output(0, DType::Float, std::nullopt);
    return;
  }
  if (*rank == 1)
    ctx.set_output(0, DType::Float, Shape{DimExpr(*width)});
  else if (*rank == 2)
    ctx.set_output(0, DType::Float, Shape{dim_at(&x, 0), DimExpr(*width)});
  else
    ctx.fail("input '", x.name, "' has rank ", *rank, ", expected 1 or 2");
}

void infer_opaque(InferContext& ctx) {
  const Value* in0 = ctx.input(0);
  switch (ctx.node().op) {
    case OpKind::SequenceLength:
      ctx.set_output(0, DType::Int64, Shape{});
      return;
    case OpKind::OptionalHasElement:
      ctx.set_output(0, DType::Bool, Shape{});
      return;
    case OpKind::SequenceEmpty:
      set_sequence(ctx, 0, dtype_attr(ctx, "dtype", ctx.attr_int("dtype", 1), false));
      return;
    case OpKind::SequenceConstruct:
    case OpKind::SequenceInsert:
    case OpKind::SequenceErase:
    case OpKind::SplitToSequence:
      if (in0) set_sequence(ctx, 0, in0->dtype);
      return;
    case OpKind::SequenceAt:
    case OpKind::ConcatFromSequence:
      if (in0 && in0->kind == ValueKind::Sequence) ctx.set_output(0, in0->dtype, std::nullopt);
      return;
    case OpKind::OptionalGetElement:
      // Opset 18 accepts a plain tensor too. An optional's element may be a sequence, which a
      // Value cannot say, so only an output the model declares a tensor is filled in.
      if (in0 &&
          (in0->kind == ValueKind::Tensor || (in0->kind == ValueKind::Optional && ctx.output(0) &&
                                              ctx.output(0)->kind == ValueKind::Tensor)))
        ctx.set_output(0, in0->dtype, in0->shape);
      return;
    case OpKind::StringNormalizer: {
      if (!in0) return;
      std::optional<Shape> shape = in0->shape;
      // Stop words remove entries of the last axis, a data-dependent count.
      auto stopwords = ctx.node().attr("stopwords");
      if (shape && !shape->empty() && stopwords && !stopwords->strings.empty())
        shape->back() = ctx.data_dependent_dim("string_normalizer");
      ctx.set_output(0, DType::String, std::move(shape));
      return;
    }
    default:
      return;  // sequence maps, optionals of unknown kind, training ops: nothing is plain
  }
}

}  // namespace cuvil::shape
