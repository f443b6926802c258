// Shape rules for elementwise ops: unary ops keep their input's shape, binary and variadic ops
// broadcast with numpy rules (InferContext::broadcast), Where broadcasts three inputs, Cast and
// CastLike change only the dtype. Besides shapes these rules carry `sym_data` through the
// integer arithmetic exporters emit between Shape and Reshape (Gather -> Mul/Div/Add -> Concat,
// ConstantOfShape -> Mul -> Equal -> Where for torch's Expand), so that final shapes come out as
// expressions of the input symbols instead of unknowns. Propagation is all-or-nothing per tensor
// and only done when every element's result is provable: ONNX integer division truncates toward
// zero, so it becomes floordiv/ceildiv only when the operand signs are proven; comparisons fold
// only when sym::prove_* decides them. sym_data is kept for integer and bool tensors only (the
// invariant in ir/graph.h), so a Cast to a float type drops it. Node::opset 0 (a hand-built
// node the frontend never saw) reads with the newest semantics.
#include <cmath>
#include <limits>

#include "passes/shape/infer.h"
#include "support/checked.h"

namespace cuvil::shape {
namespace {

using Values = std::vector<DimExpr>;

bool since(const InferContext& ctx, int version) {
  int v = ctx.node().opset;
  return v <= 0 || v >= version;
}

bool holds_sym_data(DType t) { return dtype_is_integer(t) || t == DType::Bool; }

bool provably_nonneg(const DimExpr& e, const sym::SymbolRanges& r) {
  return sym::bounds(e, r).lo >= 0 || sym::prove_less_equal(DimExpr(0), e, r);
}
bool provably_nonpos(const DimExpr& e, const sym::SymbolRanges& r) {
  return sym::bounds(e, r).hi <= 0 || sym::prove_less_equal(e, DimExpr(0), r);
}
bool provably_positive(const DimExpr& e, const sym::SymbolRanges& r) {
  return sym::bounds(e, r).lo >= 1 || sym::prove_less(DimExpr(0), e, r);
}

// Elementwise length of rank <= 1 operands under broadcasting (equal lengths, or 1).
std::optional<size_t> broadcast_length(const std::vector<Values>& operands) {
  size_t n = 1;
  for (const Values& v : operands) {
    if (v.size() == 1) continue;
    if (n != 1 && v.size() != n) return std::nullopt;
    n = v.size();
  }
  return n;
}

const DimExpr& element(const Values& v, size_t k) { return v.size() == 1 ? v[0] : v[k]; }

// The contents of every input, when each one has symbolic contents; nullopt otherwise.
std::optional<std::vector<Values>> all_sym_inputs(const InferContext& ctx, size_t first,
                                                  size_t count) {
  std::vector<Values> out;
  for (size_t i = first; i < first + count; ++i) {
    auto v = ctx.sym_ints(i);
    if (!v) return std::nullopt;
    out.push_back(std::move(*v));
  }
  return out;
}

// ONNX Div on integers truncates toward zero.
std::optional<DimExpr> trunc_div(const DimExpr& a, const DimExpr& b, const sym::SymbolRanges& r) {
  auto ca = a.constant(), cb = b.constant();
  if (ca && cb) {
    if (*cb == 0 || (*ca == INT64_MIN && *cb == -1)) return std::nullopt;
    return DimExpr(*ca / *cb);
  }
  if (!provably_positive(b, r)) return std::nullopt;
  if (provably_nonneg(a, r)) return sym::floordiv(a, b);
  if (provably_nonpos(a, r)) return sym::ceildiv(a, b);  // truncation is ceil for a <= 0
  return std::nullopt;
}

// ONNX Mod: fmod=0 takes the divisor's sign (Python %, which sym::mod is); fmod=1 takes the
// dividend's sign (C fmod), which agrees with sym::mod for a >= 0, b > 0.
std::optional<DimExpr> onnx_mod(const DimExpr& a, const DimExpr& b, bool fmod,
                                const sym::SymbolRanges& r) {
  auto ca = a.constant(), cb = b.constant();
  if (ca && cb) {
    if (*cb == 0) return std::nullopt;
    if (*cb == -1) return DimExpr(0);  // also avoids INT64_MIN % -1
    int64_t m = *ca % *cb;
    if (!fmod && m != 0 && ((m < 0) != (*cb < 0))) m += *cb;
    return DimExpr(m);
  }
  if (!provably_positive(b, r)) return std::nullopt;
  if (fmod && !provably_nonneg(a, r)) return std::nullopt;
  return sym::mod(a, b);
}

std::optional<DimExpr> int_pow(const DimExpr& a, const DimExpr& b) {
  auto base = a.constant(), exp = b.constant();
  if (!base || !exp || *exp < 0) return std::nullopt;
  int64_t result = 1, x = *base, e = *exp;
  while (e > 0) {
    if (e & 1) {
      auto m = checked_mul(result, x);
      if (!m) return std::nullopt;
      result = *m;
    }
    e >>= 1;
    if (e > 0) {
      auto sq = checked_mul(x, x);
      if (!sq) return std::nullopt;
      x = *sq;
    }
  }
  return DimExpr(result);
}

std::optional<DimExpr> fold_arithmetic(OpKind op, const DimExpr& a, const DimExpr& b, bool fmod,
                                       const sym::SymbolRanges& r) {
  switch (op) {
    case OpKind::Add: case OpKind::Sum: return a + b;
    case OpKind::Sub: return a - b;
    case OpKind::Mul: return a * b;
    case OpKind::Max: return sym::max(a, b);
    case OpKind::Min: return sym::min(a, b);
    case OpKind::Div: return trunc_div(a, b, r);
    case OpKind::Mod: return onnx_mod(a, b, fmod, r);
    case OpKind::Pow: return int_pow(a, b);
    default: return std::nullopt;
  }
}

// 1 / 0 when the relation is decided for every binding, nullopt otherwise.
std::optional<DimExpr> fold_compare(OpKind op, const DimExpr& a, const DimExpr& b,
                                    const sym::SymbolRanges& r) {
  auto decide = [](bool yes, bool no) -> std::optional<DimExpr> {
    if (yes) return DimExpr(1);
    if (no) return DimExpr(0);
    return std::nullopt;
  };
  switch (op) {
    case OpKind::Equal: return decide(sym::prove_equal(a, b, r), sym::prove_not_equal(a, b, r));
    case OpKind::Less: return decide(sym::prove_less(a, b, r), sym::prove_less_equal(b, a, r));
    case OpKind::LessOrEqual:
      return decide(sym::prove_less_equal(a, b, r), sym::prove_less(b, a, r));
    case OpKind::Greater: return decide(sym::prove_less(b, a, r), sym::prove_less_equal(a, b, r));
    case OpKind::GreaterOrEqual:
      return decide(sym::prove_less_equal(b, a, r), sym::prove_less(a, b, r));
    case OpKind::And: case OpKind::Or: case OpKind::Xor: {
      auto ca = a.constant(), cb = b.constant();
      if (!ca || !cb) return std::nullopt;
      bool x = *ca != 0, y = *cb != 0;
      bool v = op == OpKind::And ? (x && y) : op == OpKind::Or ? (x || y) : (x != y);
      return DimExpr(v ? 1 : 0);
    }
    default: return std::nullopt;
  }
}

// Folds operands left to right, elementwise with broadcasting. Arithmetic on huge constants
// may overflow (sym throws a Diagnostic): the model would wrap at run time, so the contents
// are simply not known, which is never wrong.
template <typename Fold>
std::optional<Values> fold_elementwise(const std::vector<Values>& operands, Fold fold) {
  auto n = broadcast_length(operands);
  if (!n || operands.empty()) return std::nullopt;
  Values out;
  try {
    for (size_t k = 0; k < *n; ++k) {
      DimExpr acc = element(operands[0], k);
      for (size_t j = 1; j < operands.size(); ++j) {
        auto r = fold(acc, element(operands[j], k));
        if (!r) return std::nullopt;
        acc = *r;
      }
      out.push_back(acc);
    }
  } catch (const Diagnostic&) {
    return std::nullopt;
  }
  return out;
}

// Output contents are only meaningful when the output is a rank <= 1 tensor of the fold's
// length (a rank-2 operand without contents never reaches here, but its shape might be odd).
bool sym_output_fits(const std::optional<Shape>& shape, size_t length) {
  if (!shape || shape->size() > 1) return false;
  if (shape->empty()) return length == 1;
  const Dim& d = (*shape)[0];
  return !d || d->constant() == static_cast<int64_t>(length);
}

// The inclusive range of an integer dtype, for checking that a Cast keeps a constant exact.
using Span = std::pair<int64_t, int64_t>;
std::optional<Span> int_range(DType t) {
  switch (t) {
    case DType::Int4: return Span(-8, 7);
    case DType::UInt4: return Span(0, 15);
    case DType::Int8: return Span(INT8_MIN, INT8_MAX);
    case DType::UInt8: return Span(0, UINT8_MAX);
    case DType::Int16: return Span(INT16_MIN, INT16_MAX);
    case DType::UInt16: return Span(0, UINT16_MAX);
    case DType::Int32: return Span(INT32_MIN, INT32_MAX);
    case DType::UInt32: return Span(0, UINT32_MAX);
    case DType::Int64: return Span(INT64_MIN, INT64_MAX);
    // uint64 above INT64_MAX is not representable in a DimExpr.
    case DType::UInt64: return Span(0, INT64_MAX);
    default: return std::nullopt;
  }
}

// Input i's contents for a Cast: symbolic integer contents, or small float constant data
// (torch exports shape constants as floats and casts them), truncated toward zero as Cast does.
std::optional<Values> cast_source(const InferContext& ctx, size_t i) {
  if (auto s = ctx.sym_ints(i)) return s;
  const Value* v = ctx.input(i);
  if (!v || !v->data || v->data->dims.size() > 1) return std::nullopt;
  DType t = v->data->dtype;
  if (t != DType::Float && t != DType::Double) return std::nullopt;
  if (v->data->numel() > 1024) return std::nullopt;
  Values out;
  for (int64_t k = 0; k < v->data->numel(); ++k) {
    double x = v->data->float_at(k);
    // 2^63 is exactly representable; anything at or past it (or NaN) does not fit int64.
    if (!(x > -9223372036854775808.0 && x < 9223372036854775808.0)) return std::nullopt;
    out.emplace_back(static_cast<int64_t>(x));
  }
  return out;
}

std::optional<Values> cast_values(const Values& in, DType to, const sym::SymbolRanges& r) {
  Values out;
  if (to == DType::Bool) {
    for (const DimExpr& e : in) {
      if (auto c = e.constant()) out.emplace_back(*c != 0 ? 1 : 0);
      else if (sym::prove_equal(e, DimExpr(0), r)) out.emplace_back(0);
      else if (sym::prove_not_equal(e, DimExpr(0), r)) out.emplace_back(1);
      else return std::nullopt;
    }
    return out;
  }
  auto range = int_range(to);
  if (!range) return std::nullopt;
  for (const DimExpr& e : in) {
    // A constant outside the target range would wrap; symbolic values are extents and fit.
    if (auto c = e.constant(); c && (*c < range->first || *c > range->second))
      return std::nullopt;
    out.push_back(e);
  }
  return out;
}

// Cast-1 spelled `to` as a TensorProto.DataType name.
std::optional<DType> dtype_from_legacy_name(const std::string& s) {
  static const std::pair<const char*, DType> kNames[] = {
      {"FLOAT", DType::Float},   {"UINT8", DType::UInt8},   {"INT8", DType::Int8},
      {"UINT16", DType::UInt16}, {"INT16", DType::Int16},   {"INT32", DType::Int32},
      {"INT64", DType::Int64},   {"STRING", DType::String}, {"BOOL", DType::Bool},
      {"FLOAT16", DType::Float16}, {"DOUBLE", DType::Double}, {"UINT32", DType::UInt32},
      {"UINT64", DType::UInt64},
  };
  for (const auto& [name, t] : kNames)
    if (s == name) return t;
  return std::nullopt;
}

DType dtype_attr(const InferContext& ctx, const char* key) {
  const Attribute* a = ctx.node().attr(key);
  if (!a) ctx.fail("attribute '", key, "' is missing");
  if (a->kind == Attribute::Kind::String) {
    auto t = dtype_from_legacy_name(a->s);
    if (!t) ctx.fail("attribute '", key, "' names unknown data type '", a->s, "'");
    return *t;
  }
  int64_t code = ctx.attr_int(key, 0);
  auto t = code >= INT32_MIN && code <= INT32_MAX ? dtype_from_onnx(static_cast<int32_t>(code))
                                                  : std::nullopt;
  if (!t) ctx.fail("attribute '", key, "' has unknown data type code ", code);
  return *t;
}

void cast_to(InferContext& ctx, DType to) {
  const Value& x = ctx.required_input(0);
  ctx.set_output(0, to, x.shape);
  auto src = cast_source(ctx, 0);
  if (!src || !sym_output_fits(x.shape, src->size())) return;
  if (auto out = cast_values(*src, to, ctx.ranges())) ctx.set_output_sym_data(0, std::move(*out));
}

// Contents of a unary op's output from its input's, for the ops that appear in shape math.
std::optional<Values> unary_values(InferContext& ctx, const Values& in) {
  const auto& r = ctx.ranges();
  OpKind op = ctx.node().op;
  if (op == OpKind::Identity) return in;
  if (op == OpKind::Clip) {
    // Clip takes integer bounds as inputs only (from opset 12; before that floats only).
    if (!since(ctx, 11)) return std::nullopt;
    std::optional<DimExpr> lo, hi;
    if (ctx.has_input(1) && !(lo = ctx.sym_scalar(1))) return std::nullopt;
    if (ctx.has_input(2) && !(hi = ctx.sym_scalar(2))) return std::nullopt;
    Values out;
    for (DimExpr e : in) {
      if (lo) e = sym::max(e, *lo);
      if (hi) e = sym::min(e, *hi);
      out.push_back(e);
    }
    return out;
  }
  Values out;
  for (const DimExpr& e : in) {
    switch (op) {
      case OpKind::Neg: out.push_back(-e); break;
      case OpKind::Abs:
        if (provably_nonneg(e, r)) out.push_back(e);
        else if (provably_nonpos(e, r)) out.push_back(-e);
        else out.push_back(sym::max(e, -e));
        break;
      case OpKind::Not: {
        auto c = e.constant();
        if (!c) return std::nullopt;
        out.emplace_back(*c != 0 ? 0 : 1);
        break;
      }
      case OpKind::Sign:
        if (provably_positive(e, r)) out.emplace_back(1);
        else if (sym::prove_equal(e, DimExpr(0), r)) out.emplace_back(0);
        else if (sym::prove_less(e, DimExpr(0), r)) out.emplace_back(-1);
        else return std::nullopt;
        break;
      default: return std::nullopt;
    }
  }
  return out;
}

}  // namespace

void infer_unary(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  const Node& n = ctx.node();
  if (n.op == OpKind::Identity && x.kind != ValueKind::Tensor) {
    // Identity-14+ also forwards sequences and optionals: keep the kind set_output would lose.
    if (Value* out = ctx.output(0)) {
      out->kind = x.kind;
      out->dtype = x.dtype;
      out->shape = x.shape;
    }
    return;
  }
  DType dtype = x.dtype;
  if (n.op == OpKind::Bernoulli && n.attr("dtype")) dtype = dtype_attr(ctx, "dtype");
  ctx.set_output(0, dtype, x.shape);
  if (!holds_sym_data(dtype)) return;
  auto in = ctx.sym_ints(0);
  if (!in || !sym_output_fits(x.shape, in->size())) return;
  try {
    if (auto out = unary_values(ctx, *in)) ctx.set_output_sym_data(0, std::move(*out));
  } catch (const Diagnostic&) {
    // Overflow (e.g. Neg of INT64_MIN): contents unknown, see fold_elementwise.
  }
}

void infer_unary_bool(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  ctx.set_output(0, DType::Bool, x.shape);
}

void infer_dropout(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  ctx.set_output(0, x.dtype, x.shape);
  // The mask was of the input's type before opset 10 and bool from then on.
  if (ctx.has_output(1)) ctx.set_output(1, since(ctx, 10) ? DType::Bool : x.dtype, x.shape);
}

void infer_cast(InferContext& ctx) { cast_to(ctx, dtype_attr(ctx, "to")); }

void infer_cast_like(InferContext& ctx) { cast_to(ctx, ctx.required_input(1).dtype); }

// BitCast (opset 26): the same bits read as another type of the same width, the same shape.
void infer_bit_cast(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  const DType to = dtype_attr(ctx, "to");
  if (to == DType::String || x.dtype == DType::String) ctx.fail("BitCast from or to string is not defined");
  if (x.dtype != DType::Undefined && dtype_bits(x.dtype) != dtype_bits(to))
    ctx.fail("BitCast needs types of the same width: ", dtype_name(x.dtype), " is ", dtype_bits(x.dtype),
             " bits, ", dtype_name(to), " ", dtype_bits(to));
  ctx.set_output(0, to, x.shape);
}

void infer_broadcast(InferContext& ctx) {
  const Node& n = ctx.node();
  if (ctx.num_inputs() == 0) ctx.fail("needs at least one input");
  std::vector<const Value*> operands;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) operands.push_back(&ctx.required_input(i));
  DType dtype = DType::Undefined;  // all operands share one type; take the first one known
  for (const Value* v : operands)
    if (dtype == DType::Undefined) dtype = v->dtype;
  std::optional<Shape> shape;
  if (!since(ctx, 7)) {
    // Before opset 7 binary ops broadcast B onto A only (`broadcast`/`axis` attributes) and
    // the variadic ones required equal shapes: the result always has A's shape.
    shape = operands[0]->shape;
  } else {
    shape = ctx.broadcast(operands);
  }
  ctx.set_output(0, dtype, shape);

  if (!holds_sym_data(dtype) || !since(ctx, 7)) return;
  auto values = all_sym_inputs(ctx, 0, operands.size());
  if (!values) return;
  std::optional<Values> out;
  if (values->size() == 1 &&
      (n.op == OpKind::Sum || n.op == OpKind::Max || n.op == OpKind::Min || n.op == OpKind::Mean)) {
    out = (*values)[0];
  } else {
    bool fmod = n.op == OpKind::Mod && ctx.attr_int("fmod", 0) != 0;
    const auto& r = ctx.ranges();
    out = fold_elementwise(*values, [&](const DimExpr& a, const DimExpr& b) {
      return fold_arithmetic(n.op, a, b, fmod, r);
    });
  }
  if (out && sym_output_fits(shape, out->size())) ctx.set_output_sym_data(0, std::move(*out));
}

void infer_broadcast_bool(InferContext& ctx) {
  const Node& n = ctx.node();
  if (ctx.num_inputs() != 2) ctx.fail("expects 2 inputs, got ", ctx.num_inputs());
  const Value& a = ctx.required_input(0);
  const Value& b = ctx.required_input(1);
  std::optional<Shape> shape = since(ctx, 7) ? ctx.broadcast({&a, &b}) : a.shape;
  ctx.set_output(0, DType::Bool, shape);

  if (!holds_sym_data(a.dtype) || !holds_sym_data(b.dtype) || !since(ctx, 7)) return;
  auto values = all_sym_inputs(ctx, 0, 2);
  if (!values) return;
  const auto& r = ctx.ranges();
  auto out = fold_elementwise(*values, [&](const DimExpr& x, const DimExpr& y) {
    return fold_compare(n.op, x, y, r);
  });
  if (out && sym_output_fits(shape, out->size())) ctx.set_output_sym_data(0, std::move(*out));
}

void infer_where(InferContext& ctx) {
  const Value& cond = ctx.required_input(0);
  const Value& x = ctx.required_input(1);
  const Value& y = ctx.required_input(2);
  std::optional<Shape> shape = ctx.broadcast({&cond, &x, &y});
  DType dtype = x.dtype != DType::Undefined ? x.dtype : y.dtype;
  ctx.set_output(0, dtype, shape);

  if (!holds_sym_data(dtype)) return;
  auto values = all_sym_inputs(ctx, 0, 3);
  if (!values) return;
  auto n = broadcast_length(*values);
  if (!n) return;
  Values out;
  for (size_t k = 0; k < *n; ++k) {
    auto c = element((*values)[0], k).constant();
    if (!c) return;
    out.push_back(*c != 0 ? element((*values)[1], k) : element((*values)[2], k));
  }
  if (sym_output_fits(shape, out.size())) ctx.set_output_sym_data(0, std::move(out));
}

}  // namespace cuvil::shape
