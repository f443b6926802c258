// Shape rules for the ops that compute or rearrange shapes: Shape, Size, Reshape, Flatten,
// Squeeze, Unsqueeze, Transpose, Concat, Split, Slice, Expand, Tile, Constant, ConstantOfShape
// and Range. These are the ops of exporters' shape arithmetic (Shape -> Gather -> Unsqueeze ->
// Concat -> Reshape), so besides output shapes they carry the symbolic contents (`sym_data`) of
// small integer tensors: Shape produces them, Concat/Slice/Split/Squeeze/... move them, and
// Reshape/Expand/ConstantOfShape/Tile read them back as dims. Versioned semantics follow
// Node::opset (attributes that became inputs: Squeeze/Unsqueeze/Split at 13, Slice at 10,
// Reshape at 5); opset 0 (a hand-built node) reads with the newest semantics. Where ONNX leaves
// a dim to run-time data it stays unknown or gets a data-dependent symbol, never a guess.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ir/slice_bounds.h"
#include "passes/shape/infer.h"
#include "support/checked.h"

namespace cuvil::shape {
namespace {

using Values = std::vector<DimExpr>;

// A rank read from a tensor's length (Reshape's shape input, ConstantOfShape, Expand) or
// data: beyond this it is a hostile model, and building the shape alone could exhaust memory.
constexpr int64_t kMaxRank = 1024;
// sym_data is kept for at most this many elements (InferContext enforces the same cap).
constexpr int64_t kMaxSymElements = 1024;

bool since(const InferContext& ctx, int version) {
  int v = ctx.node().opset;
  return v <= 0 || v >= version;
}

bool holds_sym_data(DType t) { return dtype_is_integer(t) || t == DType::Bool; }

void check_rank_limit(const InferContext& ctx, int64_t rank, const char* what) {
  if (rank > kMaxRank)
    ctx.unsupported(what, " gives an output rank of ", rank, ", more than the supported ",
                    kMaxRank);
}


// Product of dims [begin, end); nullopt when one is unknown.
Dim product(const InferContext& ctx, const Shape& s, size_t begin, size_t end) {
  return naming_overflow(ctx, "element count", [&]() -> Dim {
    DimExpr p(1);
    for (size_t k = begin; k < end; ++k) {
      if (!s[k]) return std::nullopt;
      p = p * *s[k];
    }
    return p;
  });
}

// Length of a rank-1 input, from its contents or its static shape.
std::optional<int64_t> vector_length(const InferContext& ctx, size_t i) {
  if (auto s = ctx.sym_ints(i)) return static_cast<int64_t>(s->size());
  const Value* v = ctx.input(i);
  if (!v || !v->shape || v->shape->size() != 1 || !(*v->shape)[0]) return std::nullopt;
  return (*v->shape)[0]->constant();
}

// Fails unless input i is (when its rank is known) a 1-D tensor.
void require_vector(const InferContext& ctx, size_t i, const char* what) {
  auto r = rank_of(ctx.input(i));
  if (r && *r != 1) ctx.fail(what, " must be a 1-D tensor, got rank ", *r);
}

// True when a rank <= 1 output of shape `s` holds exactly `n` elements.
bool holds_elements(const std::optional<Shape>& s, size_t n) {
  if (!s || s->size() > 1) return false;
  if (s->empty()) return n == 1;
  return (*s)[0] && (*s)[0]->constant() == static_cast<int64_t>(n);
}

// For ops that move values without changing them (Reshape, Squeeze, Unsqueeze, Transpose):
// input 0's contents become output 0's when both are small vectors or scalars.
void forward_sym_data(InferContext& ctx, const std::optional<Shape>& out_shape) {
  auto in = ctx.sym_ints(0);
  if (in && holds_elements(out_shape, in->size())) ctx.set_output_sym_data(0, std::move(*in));
}

// Normalises axes against `rank`; fails on out-of-range or repeated axes.
std::vector<int64_t> normalize_axes(const InferContext& ctx, const std::vector<int64_t>& axes,
                                    int64_t rank, const char* what) {
  std::vector<int64_t> out;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    int64_t n = ctx.normalize_axis(a, rank, what);
    if (seen[static_cast<size_t>(n)]) ctx.fail(what, " names axis ", a, " more than once");
    seen[static_cast<size_t>(n)] = true;
    out.push_back(n);
  }
  return out;
}

// Axes of Squeeze/Unsqueeze: the `axes` attribute before opset 13, input 1 from then on. The
// input is 1-D by the spec; a scalar is taken as one axis (ONNX Runtime takes it too, and the
// ONNX function bodies of AffineGrid pass one).
struct AxesArg {
  bool given = false;
  std::optional<std::vector<int64_t>> values;  // nullopt when given but not constant
  std::optional<int64_t> count;                // number of axes when known
};

AxesArg axes_arg(const InferContext& ctx) {
  AxesArg a;
  if (since(ctx, 13)) {
    if (!ctx.has_input(1)) return a;
    const std::optional<int64_t> rank = rank_of(ctx.input(1));
    if (rank != 0) require_vector(ctx, 1, "input 'axes'");
    a.given = true;
    a.values = ctx.const_ints(1);
    a.count = a.values ? std::optional<int64_t>(static_cast<int64_t>(a.values->size()))
              : rank == 0 ? std::optional<int64_t>(1)
                          : vector_length(ctx, 1);
  } else if (auto v = ctx.attr_ints("axes")) {
    a.given = true;
    a.values = v;
    a.count = static_cast<int64_t>(v->size());
  }
  return a;
}

std::shared_ptr<TensorData> int64_tensor(const std::vector<int64_t>& values, bool scalar) {
  auto t = std::make_shared<TensorData>();
  t->dtype = DType::Int64;
  if (!scalar) t->dims = {static_cast<int64_t>(values.size())};
  t->bytes.resize(values.size() * sizeof(int64_t));
  if (!values.empty()) std::memcpy(t->bytes.data(), values.data(), t->bytes.size());
  return t;
}

std::shared_ptr<TensorData> float_tensor(const std::vector<float>& values, bool scalar) {
  auto t = std::make_shared<TensorData>();
  t->dtype = DType::Float;
  if (!scalar) t->dims = {static_cast<int64_t>(values.size())};
  t->bytes.resize(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(t->bytes.data(), values.data(), t->bytes.size());
  return t;
}


// Element count of `in` over that of `out` (all dims known), after cancelling dims that appear
// on both sides: [b, s, 768] over [b, s, 12] leaves 768 / 12, which needs no help from the
// simplifier. A cancelled dim that may be 0 makes both counts 0, so then the quotient proves
// nothing about a mismatch (`cancelled_maybe_zero`).
struct Quotient {
  DimExpr num, den;
  bool cancelled_maybe_zero = false;
  std::vector<std::string> den_symbols;  // factors of `den` that are a single symbol
};

std::optional<Quotient> count_quotient(const Shape& in, const Shape& out,
                                       const sym::SymbolRanges& r) {
  std::vector<DimExpr> rest_in;
  for (const Dim& d : in) {
    if (!d) return std::nullopt;
    rest_in.push_back(*d);
  }
  Quotient q;
  q.num = DimExpr(1);
  q.den = DimExpr(1);
  std::vector<bool> used(rest_in.size(), false);
  for (const Dim& d : out) {
    if (!d) return std::nullopt;
    bool cancelled = false;
    for (size_t k = 0; k < rest_in.size() && !cancelled; ++k) {
      if (used[k] || !(rest_in[k] == *d)) continue;
      used[k] = cancelled = true;
      if (sym::bounds(*d, r).lo < 1) q.cancelled_maybe_zero = true;
    }
    if (!cancelled) {
      q.den = q.den * *d;
      if (auto name = d->as_symbol()) q.den_symbols.push_back(*name);
    }
  }
  for (size_t k = 0; k < rest_in.size(); ++k)
    if (!used[k]) q.num = q.num * rest_in[k];
  return q;
}

// The -1 of a Reshape: num / den. The division is exact for a valid model, and only
// resolvable when den != 0, so each symbol that is a whole factor of den may be taken as >= 1;
// that lets the simplifier divide [x*y] by [x] to y.
DimExpr infer_minus_one(const Quotient& q, const sym::SymbolRanges& ranges) {
  if (q.den.constant() == 1) return q.num;
  sym::SymbolRanges nonzero = ranges;
  for (const std::string& name : q.den_symbols) {
    sym::Range r = ranges.get(name);
    if (r.lo < 1 && r.hi >= 1) nonzero.set(name, sym::Range{1, r.hi});
  }
  return sym::simplify(sym::floordiv(q.num, q.den), nonzero);
}

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t k = 0; k < s.size(); ++k) {
    if (k) out += ", ";
    out += s[k] ? s[k]->to_string() : "?";
  }
  return out + "]";
}

// Numeric start, limit, delta of a float Range whose inputs are constant data.
std::optional<double> float_scalar(const InferContext& ctx, size_t i) {
  const Value* v = ctx.input(i);
  if (!v || !v->data || v->data->numel() != 1) return std::nullopt;
  DType t = v->data->dtype;
  if (t != DType::Float && t != DType::Double && !readable_as_ints(t)) return std::nullopt;
  return v->data->float_at(0);
}

// Range's length max(ceil((limit - start) / delta), 0) for integer-valued operands, with the
// division's sign made positive so ceildiv is exact; nullopt when delta's sign is not proven
// or hostile constants overflow.
std::optional<DimExpr> range_length(const DimExpr& s, const DimExpr& l, const DimExpr& d,
                                    const sym::SymbolRanges& ranges) {
  try {
    if (sym::prove_less(DimExpr(0), d, ranges)) {
      DimExpr n = sym::ceildiv(l - s, d);
      return sym::prove_less_equal(s, l, ranges) ? n : sym::max(n, DimExpr(0));
    }
    if (sym::prove_less(d, DimExpr(0), ranges)) {
      DimExpr n = sym::ceildiv(s - l, -d);
      return sym::prove_less_equal(l, s, ranges) ? n : sym::max(n, DimExpr(0));
    }
  } catch (const Diagnostic&) {
  }
  return std::nullopt;
}

// A float Range operand that holds an integer: integral constant data, or the output of a Cast
// to float/double from an integer value with known contents (`Range(0.0, Cast(n), 1.0)` is how
// window functions and some exporters count to a dim). Float arithmetic on such operands is
// exact for extents below 2^24, which is what the integer formula then assumes.
std::optional<DimExpr> integral_float_scalar(InferContext& ctx, size_t i) {
  if (auto f = float_scalar(ctx, i)) {
    if (std::floor(*f) != *f || !(std::fabs(*f) <= 9007199254740992.0)) return std::nullopt;
    return DimExpr(static_cast<int64_t>(*f));
  }
  const Value* v = ctx.input(i);
  const Graph& g = ctx.graph();
  if (!v || v->producer < 0 || static_cast<size_t>(v->producer) >= g.nodes.size())
    return std::nullopt;
  if (v->dtype != DType::Float && v->dtype != DType::Double) return std::nullopt;
  // `producer` is kept by the importer; check it still names this value's node.
  const Node& cast = g.nodes[static_cast<size_t>(v->producer)];
  ValueId id = ctx.node().inputs[i];
  if (cast.op != OpKind::Cast || cast.input(0) == kNoValue ||
      std::find(cast.outputs.begin(), cast.outputs.end(), id) == cast.outputs.end())
    return std::nullopt;
  const Value& src = g.value(cast.input(0));
  if (!holds_sym_data(src.dtype)) return std::nullopt;
  if (src.sym_data && src.sym_data->size() == 1) return (*src.sym_data)[0];
  if (src.data && readable_as_ints(src.data->dtype) && src.data->numel() == 1)
    return DimExpr(src.data->int_at(0));
  return std::nullopt;
}

}  // namespace

void infer_shape(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  auto rank = rank_of(&x);
  if (!rank) {
    ctx.set_output(0, DType::Int64, Shape{Dim()});
    return;
  }
  int64_t start = 0, end = *rank;
  if (since(ctx, 15)) {  // start/end attributes slice the shape (opset 15)
    start = ctx.attr_int("start", 0);
    end = ctx.attr_int("end", *rank);
  }
  auto clamp_index = [&](int64_t i) {
    if (i < 0) i += *rank;  // cannot overflow: i < 0 <= rank
    return std::clamp<int64_t>(i, 0, *rank);
  };
  start = clamp_index(start);
  end = clamp_index(end);
  int64_t len = std::max<int64_t>(end - start, 0);
  ctx.set_output(0, DType::Int64, Shape{Dim(DimExpr(len))});
  Values contents;
  for (int64_t k = start; k < start + len; ++k) {
    const Dim& d = (*x.shape)[static_cast<size_t>(k)];
    if (!d) return;
    contents.push_back(*d);
  }
  ctx.set_output_sym_data(0, std::move(contents));
}

void infer_size(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  ctx.set_output(0, DType::Int64, Shape{});
  if (!x.shape) return;
  if (Dim n = product(ctx, *x.shape, 0, x.shape->size())) ctx.set_output_sym_data(0, {*n});
}

void infer_reshape(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  std::optional<Values> target;
  std::optional<int64_t> rank;
  if (!since(ctx, 5)) {
    auto s = ctx.attr_ints("shape");
    if (!s) ctx.fail("attribute 'shape' is missing");
    target = Values(s->begin(), s->end());
  } else {
    ctx.required_input(1);
    require_vector(ctx, 1, "input 'shape'");
    target = ctx.sym_ints(1);
    rank = vector_length(ctx, 1);
  }
  if (target) rank = static_cast<int64_t>(target->size());
  if (!rank) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  check_rank_limit(ctx, *rank, "input 'shape'");
  Shape out = unknown_dims(*rank);
  if (!target) {  // rank from the shape input's length, entries unknown
    ctx.set_output(0, x.dtype, out);
    return;
  }
  bool allowzero = since(ctx, 14) && ctx.attr_int("allowzero", 0) != 0;
  auto in_rank = rank_of(&x);
  int64_t minus_one = -1;
  bool has_zero = false;
  for (size_t i = 0; i < target->size(); ++i) {
    const DimExpr& e = (*target)[i];
    auto c = e.constant();
    if (c && *c == -1) {
      if (minus_one >= 0)
        ctx.fail("input 'shape' has more than one -1 (entries ", minus_one, " and ", i, ")");
      minus_one = static_cast<int64_t>(i);
    } else if (c && *c < -1) {
      ctx.fail("input 'shape' entry ", i, " is ", *c, "; entries must be >= -1");
    } else if (c && *c == 0 && !allowzero) {
      // 0 copies the input's dim at the same index.
      if (in_rank && static_cast<int64_t>(i) >= *in_rank)
        ctx.fail("input 'shape' entry ", i, " is 0 (copy) but the input has rank ", *in_rank);
      if (in_rank) out[i] = (*x.shape)[i];
    } else {
      has_zero = has_zero || (c && *c == 0);
      out[i] = e;
    }
  }
  if (allowzero && has_zero && minus_one >= 0)
    ctx.fail("input 'shape' has both 0 and -1 with allowzero=1");

  if (x.shape) {
    Shape others;
    for (size_t i = 0; i < out.size(); ++i)
      if (static_cast<int64_t>(i) != minus_one) others.push_back(out[i]);
    auto q = naming_overflow(ctx, "element count",
                             [&] { return count_quotient(*x.shape, others, ctx.ranges()); });
    if (q) {
      auto cn = q->num.constant(), cd = q->den.constant();
      if (minus_one >= 0) {
        if (cd == 0) {
          // Zero elements elsewhere: the -1 is ambiguous; leave it unknown.
        } else if (cn && cd) {
          if (*cn % *cd == 0) out[static_cast<size_t>(minus_one)] = DimExpr(*cn / *cd);
          else if (!q->cancelled_maybe_zero)
            ctx.fail("cannot reshape input ", shape_text(*x.shape), " into ", shape_text(out),
                     ": the element count is not divisible by that of the other dims");
        } else {
          out[static_cast<size_t>(minus_one)] = infer_minus_one(*q, ctx.ranges());
        }
      } else if (cn && cd && *cn != *cd && !q->cancelled_maybe_zero) {
        ctx.fail("cannot reshape input ", shape_text(*x.shape), " into ", shape_text(out),
                 ": element counts differ");
      }
    }
  }
  ctx.set_output(0, x.dtype, out);
  forward_sym_data(ctx, out);
}

void infer_flatten(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  int64_t axis = ctx.attr_int("axis", 1);
  if (!x.shape) {
    ctx.set_output(0, x.dtype, unknown_dims(2));
    return;
  }
  int64_t r = static_cast<int64_t>(x.shape->size());
  int64_t a = axis < 0 ? axis + r : axis;  // axis == rank is allowed: [numel, 1]
  if (a < 0 || a > r) ctx.fail("attribute 'axis' ", axis, " is out of range for rank ", r);
  size_t split = static_cast<size_t>(a);
  ctx.set_output(0, x.dtype,
                 Shape{product(ctx, *x.shape, 0, split),
                       product(ctx, *x.shape, split, x.shape->size())});
}

void infer_squeeze(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  AxesArg axes = axes_arg(ctx);
  // An empty axes list squeezes every 1, as omitting it does (what onnxruntime does).
  if (axes.given && axes.values && axes.values->empty()) axes.given = false;
  if (!x.shape) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  const Shape& in = *x.shape;
  int64_t r = static_cast<int64_t>(in.size());
  std::optional<Shape> out;
  if (axes.given && !axes.values) {
    // Axes unknown, count known: only dims that may be 1 can go, so when there are exactly
    // that many candidates they all go.
    if (axes.count && *axes.count <= r) {
      Shape kept;
      for (const Dim& d : in)
        if (d && d->is_constant() && d->constant() != 1) kept.push_back(d);
      out = static_cast<int64_t>(in.size() - kept.size()) == *axes.count
                ? kept
                : unknown_dims(r - *axes.count);
    }
  } else if (axes.given) {
    std::vector<bool> drop(in.size(), false);
    for (int64_t a : normalize_axes(ctx, *axes.values, r, "axes")) {
      auto c = in[static_cast<size_t>(a)] ? in[static_cast<size_t>(a)]->constant() : std::nullopt;
      if (c && *c != 1) ctx.fail("cannot squeeze axis ", a, " of size ", *c);
      drop[static_cast<size_t>(a)] = true;
    }
    out = Shape{};
    for (size_t k = 0; k < in.size(); ++k)
      if (!drop[k]) out->push_back(in[k]);
  } else {
    // Every dim that is 1 goes: the rank is known only when each dim is decided.
    out = Shape{};
    for (const Dim& d : in) {
      if (d && d->constant() == 1) continue;
      if (!d || !(d->is_constant() || sym::prove_not_equal(*d, DimExpr(1), ctx.ranges()))) {
        out.reset();
        break;
      }
      out->push_back(d);
    }
  }
  ctx.set_output(0, x.dtype, out);
  forward_sym_data(ctx, out);
}

void infer_unsqueeze(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  AxesArg axes = axes_arg(ctx);
  if (!axes.given)
    ctx.fail(since(ctx, 13) ? "input 'axes' is missing" : "attribute 'axes' is missing");
  if (!x.shape) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  int64_t r = static_cast<int64_t>(x.shape->size());
  if (!axes.count) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  check_rank_limit(ctx, *axes.count, "axes");  // first, so that the sum cannot overflow
  int64_t out_rank = r + *axes.count;
  check_rank_limit(ctx, out_rank, "axes");
  if (!axes.values) {
    ctx.set_output(0, x.dtype, unknown_dims(out_rank));
    return;
  }
  std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
  for (int64_t a : normalize_axes(ctx, *axes.values, out_rank, "axes"))
    inserted[static_cast<size_t>(a)] = true;
  Shape out;
  size_t next = 0;
  for (size_t k = 0; k < inserted.size(); ++k)
    out.push_back(inserted[k] ? Dim(DimExpr(1)) : (*x.shape)[next++]);
  ctx.set_output(0, x.dtype, out);
  forward_sym_data(ctx, out);
}

void infer_transpose(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  auto perm = ctx.attr_ints("perm");
  auto rank = rank_of(&x);
  if (!rank && !perm) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  int64_t r = rank ? *rank : static_cast<int64_t>(perm->size());
  if (perm) {
    if (static_cast<int64_t>(perm->size()) != r)
      ctx.fail("attribute 'perm' has ", perm->size(), " entries for an input of rank ", r);
    std::vector<bool> seen(static_cast<size_t>(r), false);
    for (int64_t p : *perm) {
      if (p < 0 || p >= r) ctx.fail("attribute 'perm' entry ", p, " is out of range for rank ", r);
      if (seen[static_cast<size_t>(p)]) ctx.fail("attribute 'perm' repeats axis ", p);
      seen[static_cast<size_t>(p)] = true;
    }
  }
  if (!rank) {
    ctx.set_output(0, x.dtype, unknown_dims(r));
    return;
  }
  Shape out;
  for (int64_t k = 0; k < r; ++k) {
    int64_t from = perm ? (*perm)[static_cast<size_t>(k)] : r - 1 - k;
    out.push_back((*x.shape)[static_cast<size_t>(from)]);
  }
  ctx.set_output(0, x.dtype, out);
  forward_sym_data(ctx, out);
}

void infer_concat(InferContext& ctx) {
  if (ctx.num_inputs() == 0) ctx.fail("needs at least one input");
  std::vector<const Value*> in;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) in.push_back(&ctx.required_input(i));
  if (since(ctx, 4) && !ctx.node().attr("axis")) ctx.fail("attribute 'axis' is missing");
  int64_t axis = ctx.attr_int("axis", 1);  // Concat-1 defaulted to 1
  const Value* ranked = nullptr;
  for (const Value* v : in) {
    if (!v->shape) continue;
    if (ranked && ranked->shape->size() != v->shape->size())
      ctx.fail("input '", ranked->name, "' has rank ", ranked->shape->size(), " but input '",
               v->name, "' has rank ", v->shape->size());
    if (!ranked) ranked = v;
  }
  if (!ranked) {
    ctx.set_output(0, in[0]->dtype, std::nullopt);
    return;
  }
  int64_t r = static_cast<int64_t>(ranked->shape->size());
  size_t ax = static_cast<size_t>(ctx.normalize_axis(axis, r, "attribute 'axis'"));
  Shape out = unknown_dims(r);
  Dim total = DimExpr(0);
  for (const Value* v : in) {
    if (!v->shape || !(*v->shape)[ax]) total.reset();
    else if (total)
      total = naming_overflow(ctx, "concatenated size", [&] { return *total + *(*v->shape)[ax]; });
  }
  out[ax] = total;
  // Other dims must agree; a constant wins over a symbol (the runtime checks the symbol).
  for (size_t k = 0; k < out.size(); ++k) {
    if (k == ax) continue;
    const Value* from = nullptr;
    for (const Value* v : in) {
      if (!v->shape || !(*v->shape)[k]) continue;
      const DimExpr& d = *(*v->shape)[k];
      if (!out[k] || (!out[k]->is_constant() && d.is_constant())) {
        out[k] = d;
        from = v;
      } else if (out[k]->is_constant() && d.is_constant() && *out[k] != d) {
        ctx.fail("inputs '", from->name, "' and '", v->name, "' differ in dim ", k, ": ",
                 out[k]->to_string(), " vs ", d.to_string());
      }
    }
  }
  ctx.set_output(0, in[0]->dtype, out);

  if (r != 1) return;
  Values contents;
  for (size_t i = 0; i < in.size(); ++i) {
    auto v = ctx.sym_ints(i);
    if (!v || static_cast<int64_t>(contents.size() + v->size()) > kMaxSymElements) return;
    contents.insert(contents.end(), v->begin(), v->end());
  }
  ctx.set_output_sym_data(0, std::move(contents));
}

void infer_split(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  size_t n_out = ctx.num_outputs();
  if (n_out == 0) ctx.fail("has no outputs");
  int64_t axis = ctx.attr_int("axis", 0);
  bool sizes_given = false;
  std::optional<Values> sizes;
  if (since(ctx, 13)) {
    if (ctx.has_input(1)) {
      require_vector(ctx, 1, "input 'split'");
      sizes_given = true;
      sizes = ctx.sym_ints(1);
    }
  } else if (auto s = ctx.attr_ints("split")) {
    sizes_given = true;
    sizes = Values(s->begin(), s->end());
  }
  bool uneven_ok = false;  // opset 18 num_outputs: the last chunk may be smaller
  if (since(ctx, 18) && ctx.node().attr("num_outputs")) {
    int64_t k = ctx.attr_int("num_outputs", 0);
    if (sizes_given) ctx.fail("has both input 'split' and attribute 'num_outputs'");
    if (k != static_cast<int64_t>(n_out))
      ctx.fail("attribute 'num_outputs' is ", k, " but the node has ", n_out, " outputs");
    uneven_ok = true;
  }
  if (sizes) {
    if (sizes->size() != n_out)
      ctx.fail("'split' has ", sizes->size(), " sizes for ", n_out, " outputs");
    for (const DimExpr& s : *sizes)
      if (auto c = s.constant(); c && *c < 0) ctx.fail("'split' has a negative size ", *c);
  }
  if (!x.shape) {
    for (size_t i = 0; i < n_out; ++i) ctx.set_output(i, x.dtype, std::nullopt);
    return;
  }
  int64_t r = static_cast<int64_t>(x.shape->size());
  size_t ax = static_cast<size_t>(ctx.normalize_axis(axis, r, "attribute 'axis'"));
  const Dim& d = (*x.shape)[ax];
  std::vector<Dim> parts(n_out);
  if (sizes) {
    DimExpr sum = naming_overflow(ctx, "'split' sizes", [&] {
      DimExpr total(0);
      for (const DimExpr& s : *sizes) total = total + s;
      return total;
    });
    if (d && d->is_constant() && sum.is_constant() && *d != sum)
      ctx.fail("'split' sizes sum to ", sum.to_string(), " but axis ", ax, " has size ",
               d->to_string());
    for (size_t i = 0; i < n_out; ++i) parts[i] = (*sizes)[i];
  } else if (!sizes_given && d) {
    int64_t n = static_cast<int64_t>(n_out);
    if (auto c = d->constant()) {
      if (*c % n == 0) {
        std::fill(parts.begin(), parts.end(), Dim(DimExpr(*c / n)));
      } else if (!uneven_ok) {
        ctx.fail("axis ", ax, " of size ", *c, " does not split evenly into ", n, " outputs");
      } else {
        int64_t chunk = *c / n + 1;
        int64_t last = *c - chunk * (n - 1);  // chunk * (n - 1) < c + n: no overflow
        if (last < 0)
          ctx.fail("axis ", ax, " of size ", *c, " cannot be split into ", n, " chunks");
        std::fill(parts.begin(), parts.end(), Dim(DimExpr(chunk)));
        parts.back() = DimExpr(last);
      }
    } else if (!uneven_ok || sym::mod(*d, DimExpr(n)).constant() == 0) {
      std::fill(parts.begin(), parts.end(), Dim(sym::floordiv(*d, DimExpr(n))));
    } else {
      DimExpr chunk = sym::ceildiv(*d, DimExpr(n));
      std::fill(parts.begin(), parts.end(), Dim(chunk));
      parts.back() = *d - chunk * DimExpr(n - 1);
    }
  }
  for (size_t i = 0; i < n_out; ++i) {
    Shape s = *x.shape;
    s[ax] = parts[i];
    ctx.set_output(i, x.dtype, s);
  }

  auto in = ctx.sym_ints(0);
  if (!in || r != 1) return;
  size_t offset = 0;
  for (size_t i = 0; i < n_out; ++i) {
    auto c = parts[i] ? parts[i]->constant() : std::nullopt;
    if (!c || *c < 0 || offset + static_cast<size_t>(*c) > in->size()) return;
    ctx.set_output_sym_data(i, Values(in->begin() + static_cast<std::ptrdiff_t>(offset),
                                      in->begin() + static_cast<std::ptrdiff_t>(offset + *c)));
    offset += static_cast<size_t>(*c);
  }
}

void infer_slice(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  std::optional<Values> starts, ends;
  std::optional<std::vector<int64_t>> axes, steps;
  bool axes_given = false, steps_given = false;
  std::optional<int64_t> count;  // number of sliced axes when known
  if (!since(ctx, 10)) {
    auto s = ctx.attr_ints("starts"), e = ctx.attr_ints("ends");
    if (!s) ctx.fail("attribute 'starts' is missing");
    if (!e) ctx.fail("attribute 'ends' is missing");
    starts = Values(s->begin(), s->end());
    ends = Values(e->begin(), e->end());
    axes = ctx.attr_ints("axes");
    axes_given = axes.has_value();
  } else {
    ctx.required_input(1);
    ctx.required_input(2);
    require_vector(ctx, 1, "input 'starts'");
    require_vector(ctx, 2, "input 'ends'");
    starts = ctx.sym_ints(1);
    ends = ctx.sym_ints(2);
    if (ctx.has_input(3)) {
      require_vector(ctx, 3, "input 'axes'");
      axes_given = true;
      axes = ctx.const_ints(3);
    }
    if (ctx.has_input(4)) {
      require_vector(ctx, 4, "input 'steps'");
      steps_given = true;
      steps = ctx.const_ints(4);
    }
  }
  // Every list present must have the same length.
  auto agree = [&](std::optional<int64_t> n, const char* what) {
    if (!n) return;
    if (count && *count != *n)
      ctx.fail("'", what, "' has ", *n, " entries but another slice list has ", *count);
    count = n;
  };
  agree(starts ? std::optional<int64_t>(starts->size()) : vector_length(ctx, 1), "starts");
  agree(ends ? std::optional<int64_t>(ends->size()) : vector_length(ctx, 2), "ends");
  if (axes) agree(static_cast<int64_t>(axes->size()), "axes");
  if (steps) agree(static_cast<int64_t>(steps->size()), "steps");
  if (steps)
    for (int64_t s : *steps)
      if (s == 0) ctx.fail("'steps' has a 0 entry");

  if (!x.shape) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  const Shape& in = *x.shape;
  int64_t r = static_cast<int64_t>(in.size());
  Shape out = in;
  // Which axes are sliced: unknown axes (or an unknown count) leave every dim unknown.
  std::vector<int64_t> sliced;
  if (axes) {
    sliced = normalize_axes(ctx, *axes, r, "'axes'");
  } else if (!axes_given && count) {
    if (*count > r) ctx.fail("slices ", *count, " axes of a rank-", r, " input");
    for (int64_t k = 0; k < *count; ++k) sliced.push_back(k);
  } else {
    ctx.set_output(0, x.dtype, unknown_dims(r));
    return;
  }
  std::vector<sym::SliceAxis> taken(sliced.size(), sym::SliceAxis{DimExpr(0), DimExpr(0)});
  std::vector<bool> taken_known(sliced.size(), false);
  for (size_t i = 0; i < sliced.size(); ++i) {
    size_t a = static_cast<size_t>(sliced[i]);
    out[a].reset();
    if (!starts || !ends || (steps_given && !steps) || !in[a]) continue;
    int64_t step = steps ? (*steps)[i] : 1;
    std::optional<sym::SliceAxis> s;
    try {
      s = sym::slice_axis(*in[a], (*starts)[i], (*ends)[i], step, ctx.ranges());
    } catch (const Diagnostic&) {
      // Overflow in bound arithmetic of hostile constants: the extent stays unknown.
    }
    if (!s) continue;
    out[a] = s->length;
    taken[i] = *s;
    taken_known[i] = true;
  }
  ctx.set_output(0, x.dtype, out);

  // Contents: a constant slice of a rank-1 tensor with contents.
  auto contents = ctx.sym_ints(0);
  if (!contents || r != 1 || sliced.size() != 1 || !taken_known[0]) return;
  auto start = taken[0].start.constant(), len = taken[0].length.constant();
  int64_t step = steps ? (*steps)[0] : 1;
  if (!start || !len) return;
  Values result;
  for (int64_t k = 0, idx = *start; k < *len; ++k) {
    if (idx < 0 || idx >= static_cast<int64_t>(contents->size())) return;
    result.push_back((*contents)[static_cast<size_t>(idx)]);
    auto next = checked_add(idx, step);
    if (!next) break;  // only possible after the last element
    idx = *next;
  }
  ctx.set_output_sym_data(0, std::move(result));
}

void infer_expand(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  const Value& shape_in = ctx.required_input(1);
  require_vector(ctx, 1, "input 'shape'");
  auto target = ctx.sym_ints(1);
  auto length = vector_length(ctx, 1);
  if (!x.shape || !length) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  check_rank_limit(ctx, *length, "input 'shape'");
  std::optional<Shape> out;
  if (target) {
    Value wanted;  // the target as a value, for InferContext::broadcast and its messages
    wanted.name = shape_in.name;
    wanted.shape = Shape{};
    for (size_t k = 0; k < target->size(); ++k) {
      if (auto c = (*target)[k].constant(); c && *c < 0)
        ctx.fail("input 'shape' entry ", k, " is ", *c, "; Expand needs sizes >= 0");
      wanted.shape->push_back((*target)[k]);
    }
    out = ctx.broadcast({&x, &wanted});
  } else {
    // Target sizes unknown: only an input dim that is a constant other than 1 survives.
    size_t r = std::max(x.shape->size(), static_cast<size_t>(*length));
    out = Shape(r);
    for (size_t k = 0; k < r; ++k) {
      if (k + x.shape->size() < r) continue;  // a new leading dim: its size is the target's
      const Dim& d = (*x.shape)[k + x.shape->size() - r];
      if (d && d->is_constant() && d->constant() != 1) (*out)[k] = d;
    }
  }
  ctx.set_output(0, x.dtype, out);

  auto in = ctx.sym_ints(0);
  if (!in || !out || out->size() > 1) return;
  size_t n = 1;
  if (out->size() == 1) {
    auto c = (*out)[0] ? (*out)[0]->constant() : std::nullopt;
    if (!c || *c > kMaxSymElements) return;
    n = static_cast<size_t>(*c);
  }
  if (in->size() != 1 && in->size() != n) return;
  Values result;
  for (size_t k = 0; k < n; ++k) result.push_back((*in)[in->size() == 1 ? 0 : k]);
  ctx.set_output_sym_data(0, std::move(result));
}

void infer_tile(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  ctx.required_input(1);
  if (!x.shape) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  int64_t r = static_cast<int64_t>(x.shape->size());
  Shape out = *x.shape;
  if (!since(ctx, 6)) {
    // Tile-1: scalar inputs `tiles` and `axis` repeat one axis.
    auto tiles = ctx.sym_scalar(1);
    auto axis = ctx.const_ints(2);
    if (!axis || axis->size() != 1) {
      ctx.set_output(0, x.dtype, unknown_dims(r));
      return;
    }
    size_t a = static_cast<size_t>(ctx.normalize_axis((*axis)[0], r, "input 'axis'"));
    if (tiles && out[a])
      out[a] = naming_overflow(ctx, "input 'tiles'", [&] { return *out[a] * *tiles; });
    else
      out[a].reset();
    ctx.set_output(0, x.dtype, out);
    return;
  }
  require_vector(ctx, 1, "input 'repeats'");
  auto reps = ctx.sym_ints(1);
  auto count = vector_length(ctx, 1);
  if (count && *count != r)
    ctx.fail("input 'repeats' has ", *count, " entries for an input of rank ", r);
  if (!reps) {
    ctx.set_output(0, x.dtype, unknown_dims(r));
    return;
  }
  for (size_t k = 0; k < out.size(); ++k) {
    if (auto c = (*reps)[k].constant(); c && *c < 0)
      ctx.fail("input 'repeats' entry ", k, " is negative (", *c, ")");
    if (out[k])
      out[k] = naming_overflow(ctx, "input 'repeats'", [&] { return *out[k] * (*reps)[k]; });
  }
  ctx.set_output(0, x.dtype, out);

  auto in = ctx.sym_ints(0);
  if (!in || r != 1) return;
  auto times = (*reps)[0].constant();
  auto total = times ? checked_mul(static_cast<int64_t>(in->size()), *times) : std::nullopt;
  if (!total || *total > kMaxSymElements) return;
  Values result;
  // An empty vector repeated INT64_MAX times is still empty: loop only when it grows.
  for (int64_t t = 0; !in->empty() && t < *times; ++t)
    result.insert(result.end(), in->begin(), in->end());
  ctx.set_output_sym_data(0, std::move(result));
}

void infer_constant(InferContext& ctx) {
  static const char* const kValueAttrs[] = {"value",        "value_int",    "value_ints",
                                            "value_float",  "value_floats", "value_string",
                                            "value_strings", "sparse_value"};
  const Node& n = ctx.node();
  const char* key = nullptr;
  for (const char* k : kValueAttrs) {
    if (!n.attr(k)) continue;
    if (key) ctx.fail("has both attribute '", key, "' and '", k, "'");
    key = k;
  }
  if (!key) ctx.fail("has no value attribute");
  const Attribute& a = *n.attr(key);
  std::string which = key;
  auto expect = [&](Attribute::Kind kind) {
    if (a.kind != kind)
      ctx.fail("attribute '", which, "' must be ", attribute_kind_name(kind), ", got ",
               attribute_kind_name(a.kind));
  };
  std::shared_ptr<const TensorData> data;
  if (which == "value") {
    expect(Attribute::Kind::Tensor);
    if (!a.t) ctx.fail("attribute 'value' holds no tensor");
    data = a.t;
  } else if (which == "value_int") {
    expect(Attribute::Kind::Int);
    data = int64_tensor({a.i}, true);
  } else if (which == "value_ints") {
    expect(Attribute::Kind::Ints);
    data = int64_tensor(a.ints, false);
  } else if (which == "value_float") {
    expect(Attribute::Kind::Float);
    data = float_tensor({a.f}, true);
  } else if (which == "value_floats") {
    expect(Attribute::Kind::Floats);
    data = float_tensor(a.floats, false);
  } else if (which == "value_string" || which == "value_strings") {
    bool scalar = which == "value_string";
    expect(scalar ? Attribute::Kind::String : Attribute::Kind::Strings);
    auto t = std::make_shared<TensorData>();
    t->dtype = DType::String;
    t->strings = scalar ? std::vector<std::string>{a.s} : a.strings;
    if (!scalar) t->dims = {static_cast<int64_t>(a.strings.size())};
    data = t;
  } else {
    // sparse_value: kept as text by the importer; its type and shape are not known here.
    ctx.set_output(0, DType::Undefined, std::nullopt);
    return;
  }
  Shape shape;
  for (int64_t d : data->dims) shape.push_back(DimExpr(d));
  ctx.set_output(0, data->dtype, shape);
  Value* out = ctx.output(0);
  if (out && !out->data) out->data = data;
  if (readable_as_ints(data->dtype) && data->dims.size() <= 1 &&
      data->numel() <= kMaxSymElements) {
    Values contents;
    for (int64_t k = 0; k < data->numel(); ++k) contents.emplace_back(data->int_at(k));
    ctx.set_output_sym_data(0, std::move(contents));
  }
}

void infer_constant_of_shape(InferContext& ctx) {
  ctx.required_input(0);
  require_vector(ctx, 0, "input 'shape'");
  DType dtype = DType::Float;
  std::optional<int64_t> fill;
  if (const Attribute* a = ctx.node().attr("value")) {
    if (a->kind != Attribute::Kind::Tensor || !a->t)
      ctx.fail("attribute 'value' must be a tensor, got ", attribute_kind_name(a->kind));
    if (a->t->numel() != 1)
      ctx.fail("attribute 'value' must hold one element, has ", a->t->numel());
    dtype = a->t->dtype;
    if (readable_as_ints(dtype)) fill = a->t->int_at(0);
  }
  auto target = ctx.sym_ints(0);
  auto length = vector_length(ctx, 0);
  if (!length) {
    ctx.set_output(0, dtype, std::nullopt);
    return;
  }
  check_rank_limit(ctx, *length, "input 'shape'");
  if (!target) {
    ctx.set_output(0, dtype, unknown_dims(*length));
    return;
  }
  Shape out;
  for (size_t k = 0; k < target->size(); ++k) {
    if (auto c = (*target)[k].constant(); c && *c < 0)
      ctx.fail("input 'shape' entry ", k, " is negative (", *c, ")");
    out.push_back((*target)[k]);
  }
  ctx.set_output(0, dtype, out);
  if (!fill || out.size() > 1) return;
  auto n = out.empty() ? std::optional<int64_t>(1) : out[0]->constant();
  if (!n || *n > kMaxSymElements) return;
  ctx.set_output_sym_data(0, Values(static_cast<size_t>(*n), DimExpr(*fill)));
}

void infer_range(InferContext& ctx) {
  const Value& start_v = ctx.required_input(0);
  ctx.required_input(1);
  ctx.required_input(2);
  const char* names[] = {"start", "limit", "delta"};
  for (size_t i = 0; i < 3; ++i) {
    auto r = rank_of(ctx.input(i));
    if (r && *r > 1) ctx.fail("input '", names[i], "' must be a scalar, got rank ", *r);
  }
  DType dtype = start_v.dtype;
  bool is_float = dtype_is_float(dtype);
  std::optional<DimExpr> s, l, d;
  if (is_float) {
    s = integral_float_scalar(ctx, 0);
    l = integral_float_scalar(ctx, 1);
    d = integral_float_scalar(ctx, 2);
  } else {
    s = ctx.sym_scalar(0);
    l = ctx.sym_scalar(1);
    d = ctx.sym_scalar(2);
  }
  if (d && d->constant() == 0) ctx.fail("input 'delta' is 0");
  if (s && l && d) {
    if (auto n = range_length(*s, *l, *d, ctx.ranges())) {
      ctx.set_output(0, dtype, Shape{*n});
      auto c = n->constant();
      if (c && *c <= kMaxSymElements && holds_sym_data(dtype)) {
        Values contents;
        try {
          for (int64_t k = 0; k < *c; ++k) contents.push_back(*s + *d * DimExpr(k));
          ctx.set_output_sym_data(0, std::move(contents));
        } catch (const Diagnostic&) {
          // An element overflows int64: the contents are not known, the length still is.
        }
      }
      return;
    }
  }
  if (is_float) {  // constants that are not integers: the float formula on numbers
    auto fs = float_scalar(ctx, 0), fl = float_scalar(ctx, 1), fd = float_scalar(ctx, 2);
    if (fs && fl && fd) {
      if (*fd == 0) ctx.fail("input 'delta' is 0");
      double n = std::ceil((*fl - *fs) / *fd);
      if (!std::isfinite(n)) ctx.fail("start, limit and delta give a non-finite length");
      if (n > static_cast<double>(INT64_MAX / 2)) ctx.fail("length ", n, " is too large");
      ctx.set_output(0, dtype, Shape{DimExpr(n > 0 ? static_cast<int64_t>(n) : 0)});
      return;
    }
  }
  ctx.set_output(0, dtype, Shape{ctx.data_dependent_dim("range")});
}

}  // namespace cuvil::shape
