// Shape rules for linear algebra ops (ONNX opsets 1..21): MatMul, MatMulInteger,
// QLinearMatMul, Gemm, Einsum and Det. MatMul follows numpy: 1-D operands are promoted to
// matrices and the promoted axis dropped again, batch axes broadcast like elementwise ops (with
// InferContext::broadcast, so symbolic batch dims behave exactly as they do for Add). The
// contracted dims are checked when they can be proven different; unproven symbolic pairs are
// left to the runtime, as for broadcasting. Einsum parses its equation (explicit and implicit
// output, ellipsis) and derives every output dim from the labelled input dims.
#include <algorithm>
#include <map>

#include "passes/shape/infer.h"

namespace cuvil::shape {
namespace {

Dim dim_at(const Value* v, size_t i) {
  if (!v || !v->shape || i >= v->shape->size()) return std::nullopt;
  return (*v->shape)[i];
}

// Broadcasts two shape fragments (e.g. matmul batch dims) with the elementwise rules.
Shape broadcast_shapes(const InferContext& ctx,
                       const std::vector<std::pair<std::string, Shape>>& parts) {
  std::vector<Value> tmp(parts.size());
  std::vector<const Value*> ptrs;
  for (size_t i = 0; i < parts.size(); ++i) {
    tmp[i].name = parts[i].first;
    tmp[i].shape = parts[i].second;
    ptrs.push_back(&tmp[i]);
  }
  auto out = ctx.broadcast(ptrs);
  CUVIL_ASSERT(out.has_value(), "broadcast of known shapes returned no shape");
  return *out;
}

// Fails when two dims that must match are provably different.
void check_contracted(const InferContext& ctx, const Dim& a, const Dim& b, const Value& va,
                      const Value& vb) {
  if (!a || !b) return;
  if (sym::prove_not_equal(*a, *b, ctx.ranges()))
    ctx.fail("inner dimensions do not match: '", va.name, "' has ", a->to_string(), ", '", vb.name,
             "' has ", b->to_string());
}

// numpy matmul shape of a @ b; nullopt when either rank is unknown.
std::optional<Shape> matmul_shape(const InferContext& ctx, const Value& a, const Value& b) {
  if (!a.shape || !b.shape) return std::nullopt;
  Shape sa = *a.shape, sb = *b.shape;
  if (sa.empty()) ctx.fail("input '", a.name, "' is a scalar; MatMul needs rank >= 1");
  if (sb.empty()) ctx.fail("input '", b.name, "' is a scalar; MatMul needs rank >= 1");
  bool a_vector = sa.size() == 1, b_vector = sb.size() == 1;
  if (a_vector) sa.insert(sa.begin(), Dim(DimExpr(1)));
  if (b_vector) sb.push_back(Dim(DimExpr(1)));
  check_contracted(ctx, sa[sa.size() - 1], sb[sb.size() - 2], a, b);
  Shape batch = broadcast_shapes(
      ctx, {{a.name, Shape(sa.begin(), sa.end() - 2)}, {b.name, Shape(sb.begin(), sb.end() - 2)}});
  Shape out = batch;
  if (!a_vector) out.push_back(sa[sa.size() - 2]);
  if (!b_vector) out.push_back(sb[sb.size() - 1]);
  return out;
}

// ---- Einsum ----

// One operand term: letters and at most one ellipsis, written as '.'.
using Term = std::string;

Term parse_term(const InferContext& ctx, const std::string& text, const std::string& equation) {
  Term t;
  bool ellipsis = false;
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      t.push_back(c);
      ++i;
    } else if (c == '.') {
      if (text.compare(i, 3, "...") != 0 || ellipsis)
        ctx.fail("attribute 'equation' ('", equation, "') has a malformed ellipsis");
      ellipsis = true;
      t.push_back('.');
      i += 3;
    } else {
      ctx.fail("attribute 'equation' ('", equation, "') has unexpected character '", c, "'");
    }
  }
  return t;
}

size_t letter_count(const Term& t) {
  return static_cast<size_t>(std::count_if(t.begin(), t.end(), [](char c) { return c != '.'; }));
}

}  // namespace

void infer_matmul(InferContext& ctx) {
  const Value& a = ctx.required_input(0);
  const Value& b = ctx.required_input(1);
  ctx.set_output(0, a.dtype, matmul_shape(ctx, a, b));
}

// cuvil::FusedMatMul (ir/fused_ops.h): the matmul of op(A) and op(B), where op swaps the last
// two axes when transA/transB is set; bias and residual must broadcast to it.
void infer_fused_matmul(InferContext& ctx) {
  Value a = ctx.required_input(0);
  Value b = ctx.required_input(1);
  for (auto [v, key] : {std::pair<Value*, const char*>{&a, "transA"}, {&b, "transB"}}) {
    const int64_t t = ctx.attr_int(key, 0);
    if (t != 0 && t != 1) ctx.fail("attribute '", key, "' is ", t, ", must be 0 or 1");
    if (t == 0 || !v->shape) continue;
    if (v->shape->size() < 2)
      ctx.fail("input '", v->name, "' has rank ", v->shape->size(), "; '", key, "' needs rank >= 2");
    std::swap((*v->shape)[v->shape->size() - 1], (*v->shape)[v->shape->size() - 2]);
  }
  ctx.set_output(0, a.dtype, matmul_shape(ctx, a, b));
  check_fused_epilogue(ctx, /*first_operand=*/2);
}

void infer_matmul_integer(InferContext& ctx) {
  const Value& a = ctx.required_input(0);
  const Value& b = ctx.required_input(1);
  ctx.set_output(0, DType::Int32, matmul_shape(ctx, a, b));
}

void infer_qlinear_matmul(InferContext& ctx) {
  // a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point
  const Value& a = ctx.required_input(0);
  const Value& b = ctx.required_input(3);
  const Value& y_zero_point = ctx.required_input(7);
  ctx.set_output(0, y_zero_point.dtype, matmul_shape(ctx, a, b));
}

void infer_gemm(InferContext& ctx) {
  const Value& a = ctx.required_input(0);
  const Value& b = ctx.required_input(1);
  for (const Value* v : {&a, &b})
    if (auto r = rank_of(v); r && *r != 2)
      ctx.fail("input '", v->name, "' has rank ", *r, ", Gemm needs rank 2");
  bool trans_a = ctx.attr_int("transA", 0) != 0, trans_b = ctx.attr_int("transB", 0) != 0;
  Dim m = dim_at(&a, trans_a ? 1 : 0), k_a = dim_at(&a, trans_a ? 0 : 1);
  Dim k_b = dim_at(&b, trans_b ? 1 : 0), n = dim_at(&b, trans_b ? 0 : 1);
  check_contracted(ctx, k_a, k_b, a, b);
  // C broadcasts unidirectionally to [M, N]: a constant that is neither 1 nor the target
  // can never run.
  if (const Value* c = ctx.input(2); c && c->shape) {
    const Shape& sc = *c->shape;
    if (sc.size() > 2) ctx.fail("input '", c->name, "' has rank ", sc.size(), ", at most 2");
    Shape target{m, n};
    for (size_t i = 0; i < sc.size(); ++i) {
      const Dim& d = sc[i];
      const Dim& t = target[2 - sc.size() + i];
      if (!d || !t || d->constant() == 1) continue;
      if (d->constant() && t->constant() && *d->constant() != *t->constant())
        ctx.fail("input '", c->name, "' dim ", i, " (", *d->constant(), ") does not broadcast to ",
                 *t->constant());
    }
  }
  ctx.set_output(0, a.dtype, Shape{m, n});
}

void infer_einsum(InferContext& ctx) {
  std::string raw = ctx.attr_string("equation", "");
  std::string eq;
  for (char c : raw)
    if (c != ' ') eq.push_back(c);
  if (eq.empty()) ctx.fail("required attribute 'equation' is missing or empty");
  if (ctx.num_inputs() == 0) ctx.fail("Einsum needs at least one input");
  size_t arrow = eq.find("->");
  bool explicit_output = arrow != std::string::npos;
  std::string lhs = explicit_output ? eq.substr(0, arrow) : eq;
  std::vector<Term> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(parse_term(ctx, lhs.substr(start, comma - start), raw));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ctx.num_inputs())
    ctx.fail("attribute 'equation' ('", raw, "') has ", terms.size(),
             " operand terms but the node has ", ctx.num_inputs(), " inputs");

  std::map<char, Dim> label_dim;
  std::map<char, int> label_uses;
  std::vector<std::pair<std::string, Shape>> ellipsis_parts;
  bool ellipsis_rank_unknown = false, any_ellipsis = false;
  for (size_t i = 0; i < terms.size(); ++i) {
    const Term& t = terms[i];
    const Value& v = ctx.required_input(i);
    bool has_ellipsis = t.find('.') != std::string::npos;
    any_ellipsis = any_ellipsis || has_ellipsis;
    for (char c : t)
      if (c != '.') {
        ++label_uses[c];
        label_dim.emplace(c, std::nullopt);
      }
    if (!v.shape) {
      ellipsis_rank_unknown = ellipsis_rank_unknown || has_ellipsis;
      continue;
    }
    const Shape& s = *v.shape;
    size_t letters = letter_count(t);
    if (has_ellipsis ? s.size() < letters : s.size() != letters)
      ctx.fail("input '", v.name, "' has rank ", s.size(), " but equation term ", i, " ('", t,
               "') names ", letters, " axes");
    size_t ellipsis_rank = s.size() - letters;
    size_t axis = 0;
    for (char c : t) {
      if (c == '.') {
        ellipsis_parts.push_back(
            {v.name, Shape(s.begin() + static_cast<ptrdiff_t>(axis),
                           s.begin() + static_cast<ptrdiff_t>(axis + ellipsis_rank))});
        axis += ellipsis_rank;
        continue;
      }
      const Dim& d = s[axis++];
      Dim& known = label_dim[c];
      if (!d) continue;
      if (!known || known->constant() == 1) {
        known = d;
        continue;
      }
      if (d->constant() == 1 || sym::prove_equal(*known, *d, ctx.ranges())) continue;
      if (known->constant() && d->constant())
        ctx.fail("label '", c, "' has extent ", *known->constant(), " and ", *d->constant(),
                 " (input '", v.name, "')");
      if (d->constant()) known = d;  // prefer the constant, as broadcasting does
    }
  }

  std::string out_term;
  if (explicit_output) {
    out_term = parse_term(ctx, eq.substr(arrow + 2), raw);
    std::string seen;
    for (char c : out_term) {
      if (c == '.') continue;
      if (!label_uses.count(c))
        ctx.fail("attribute 'equation' ('", raw, "') output label '", c,
                 "' does not appear in any input");
      if (seen.find(c) != std::string::npos)
        ctx.fail("attribute 'equation' ('", raw, "') repeats output label '", c, "'");
      seen.push_back(c);
    }
  } else {
    // Implicit output: the ellipsis axes, then every label used once, in ASCII order (numpy).
    if (any_ellipsis) out_term.push_back('.');
    for (const auto& [c, uses] : label_uses)
      if (uses == 1) out_term.push_back(c);
  }

  const Value& first = ctx.required_input(0);
  bool out_has_ellipsis = out_term.find('.') != std::string::npos;
  if (out_has_ellipsis && ellipsis_rank_unknown) {
    ctx.set_output(0, first.dtype, std::nullopt);
    return;
  }
  Shape ellipsis_shape;
  if (out_has_ellipsis && !ellipsis_parts.empty())
    ellipsis_shape = broadcast_shapes(ctx, ellipsis_parts);
  Shape out;
  for (char c : out_term) {
    if (c == '.') {
      out.insert(out.end(), ellipsis_shape.begin(), ellipsis_shape.end());
    } else {
      out.push_back(label_dim[c]);
    }
  }
  ctx.set_output(0, first.dtype, std::move(out));
}

void infer_det(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  if (!x.shape) {
    ctx.set_output(0, x.dtype, std::nullopt);
    return;
  }
  const Shape& s = *x.shape;
  if (s.size() < 2) ctx.fail("input '", x.name, "' has rank ", s.size(), ", Det needs rank >= 2");
  const Dim &rows = s[s.size() - 2], &cols = s[s.size() - 1];
  if (rows && cols && sym::prove_not_equal(*rows, *cols, ctx.ranges()))
    ctx.fail("input '", x.name, "' matrices are not square (", rows->to_string(), " x ",
             cols->to_string(), ")");
  ctx.set_output(0, x.dtype, Shape(s.begin(), s.end() - 2));
}

}  // namespace cuvil::shape
