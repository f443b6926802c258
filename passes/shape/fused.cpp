// Shape rules for cuvil's fused ops (ir/fused_ops.h, domain "cuvil"); FusedMatMul's is next to
// MatMul's (linalg.cpp) and FusedConv's next to Conv's (nn.cpp). These rules are also the
// ops' verifier: a fused node the passes or a hand-written IR file produce with a bad
// attribute or operand is reported here, naming the node.
#include "ir/fused_ops.h"
#include "passes/shape/infer.h"

namespace cuvil::shape {
namespace {

void require_float(const InferContext& ctx, const Value& v) {
  if (v.dtype != DType::Undefined && !dtype_is_float(v.dtype))
    ctx.fail("input '", v.name, "' is ", dtype_name(v.dtype), ", expected a floating-point tensor");
}

// `operand` broadcasts onto `target` (numpy rules, target unchanged): fails when a known dim
// of the operand is neither 1 nor provably equal to the target's.
void require_broadcasts_to(const InferContext& ctx, const Value& operand, const Shape& target,
                           const char* role) {
  if (!operand.shape) return;
  const Shape& s = *operand.shape;
  if (s.size() > target.size())
    ctx.fail(role, " '", operand.name, "' has rank ", s.size(), ", more than the output's ",
             target.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const Dim& d = s[i];
    const Dim& t = target[target.size() - s.size() + i];
    if (!d || !t || d->constant() == 1) continue;
    if (sym::prove_not_equal(*d, *t, ctx.ranges()))
      ctx.fail(role, " '", operand.name, "' dim ", i, " (", d->to_string(),
               ") does not broadcast to the output's ", t->to_string());
  }
}

const Value& float_input(const InferContext& ctx, size_t i) {
  const Value& v = ctx.required_input(i);
  require_float(ctx, v);
  return v;
}

}  // namespace

void check_fused_epilogue(InferContext& ctx, size_t first_operand) {
  const std::string act = ctx.attr_string("activation", "");
  if (!fused::parse_activation(act)) ctx.fail("attribute 'activation' is '", act, "', not a known activation");
  const Value* y = ctx.output(0);
  static const char* const roles[] = {"bias", "residual"};
  for (size_t i = first_operand; i < ctx.num_inputs() && i < first_operand + 2; ++i) {
    const Value* v = ctx.input(i);
    if (!v) continue;
    require_float(ctx, *v);
    if (y && y->shape) require_broadcasts_to(ctx, *v, *y->shape, roles[i - first_operand]);
  }
  if (ctx.num_inputs() > first_operand + 2)
    ctx.fail("has ", ctx.num_inputs(), " inputs, at most ", first_operand + 2);
}

void infer_rms_norm(InferContext& ctx) {
  const Value& x = float_input(ctx, 0);
  const Value& scale = float_input(ctx, 1);
  ctx.set_output(0, x.dtype, x.shape);
  if (!x.shape) return;
  const int64_t rank = static_cast<int64_t>(x.shape->size());
  const int64_t axis = ctx.normalize_axis(ctx.attr_int("axis", -1), rank);
  if (ctx.attr_float("epsilon", 1e-5f) < 0) ctx.fail("attribute 'epsilon' is negative");
  require_broadcasts_to(ctx, scale, Shape(x.shape->begin() + axis, x.shape->end()), "scale");
}

void infer_silu(InferContext& ctx) {
  const Value& x = float_input(ctx, 0);
  ctx.set_output(0, x.dtype, x.shape);
}

void infer_swiglu(InferContext& ctx) {
  const Value& g = float_input(ctx, 0);
  const Value& u = float_input(ctx, 1);
  if (g.dtype != u.dtype && g.dtype != DType::Undefined && u.dtype != DType::Undefined)
    ctx.fail("inputs '", g.name, "' and '", u.name, "' differ in type");
  ctx.set_output(0, g.dtype, ctx.broadcast({&g, &u}));
}

void infer_rotary(InferContext& ctx) {
  const Value& x = float_input(ctx, 0);
  const int64_t interleaved = ctx.attr_int("interleaved", 0);
  if (interleaved != 0 && interleaved != 1)
    ctx.fail("attribute 'interleaved' is ", interleaved, ", must be 0 or 1");
  ctx.set_output(0, x.dtype, x.shape);
  if (!x.shape) return;
  if (x.shape->empty()) ctx.fail("input '", x.name, "' is a scalar; Rotary needs rank >= 1");
  const Dim& d = x.shape->back();
  if (d && d->constant() && *d->constant() % 2 != 0)
    ctx.fail("input '", x.name, "' has an odd last dim (", *d->constant(), "); Rotary rotates pairs");
  for (size_t i : {size_t{1}, size_t{2}}) require_broadcasts_to(ctx, float_input(ctx, i), *x.shape, i == 1 ? "cos" : "sin");
}

void infer_masked_softmax(InferContext& ctx) {
  const Value& x = float_input(ctx, 0);
  ctx.set_output(0, x.dtype, x.shape);
  const Value* mask = ctx.input(1);
  if (!mask) return;
  if (mask->dtype != DType::Bool) require_float(ctx, *mask);
  if (x.shape) require_broadcasts_to(ctx, *mask, *x.shape, "mask");
}

void infer_attention(InferContext& ctx) {
  const Value& q = float_input(ctx, 0);
  const Value& k = float_input(ctx, 1);
  const Value& v = float_input(ctx, 2);
  for (const Value* t : {&q, &k, &v})
    if (auto r = rank_of(t); r && *r != 4)
      ctx.fail("input '", t->name, "' has rank ", *r, "; Attention takes [batch, heads, seq, head_dim]");
  const int64_t causal = ctx.attr_int("is_causal", 0);
  if (causal != 0 && causal != 1) ctx.fail("attribute 'is_causal' is ", causal, ", must be 0 or 1");
  if (ctx.attr_float("scale", 0.0f) < 0) ctx.fail("attribute 'scale' is negative");
  const Value* past_k = ctx.input(4);
  const Value* past_v = ctx.input(5);
  if ((past_k == nullptr) != (past_v == nullptr))
    ctx.fail("past_key and past_value must be given together");
  auto dim = [](const Value* t, size_t i) -> Dim { return t && t->shape ? (*t->shape)[i] : Dim(); };
  auto same = [&](const Value* a, size_t ia, const Value* b, size_t ib, const char* what) {
    const Dim da = dim(a, ia), db = dim(b, ib);
    if (da && db && sym::prove_not_equal(*da, *db, ctx.ranges()))
      ctx.fail(what, " differ: '", a->name, "' has ", da->to_string(), ", '", b->name, "' has ",
               db->to_string());
  };
  same(&q, 0, &k, 0, "batch sizes");
  same(&k, 0, &v, 0, "batch sizes");
  same(&q, 3, &k, 3, "query and key head sizes");
  same(&k, 1, &v, 1, "key and value head counts");
  same(&k, 2, &v, 2, "key and value lengths");
  const Dim hq = dim(&q, 1), hkv = dim(&k, 1);
  if (hq && hkv && hq->constant() && hkv->constant() &&
      (*hkv->constant() < 1 || *hq->constant() % *hkv->constant() != 0))
    ctx.fail("query heads (", *hq->constant(), ") are not a multiple of key/value heads (",
             *hkv->constant(), ")");
  Dim total = dim(&k, 2);
  if (past_k) {
    for (const Value* t : {past_k, past_v})
      if (auto r = rank_of(t); r && *r != 4) ctx.fail("input '", t->name, "' has rank ", *r, ", expected 4");
    same(past_k, 0, &k, 0, "batch sizes");
    same(past_k, 1, &k, 1, "key head counts");
    same(past_k, 3, &k, 3, "key head sizes");
    same(past_v, 3, &v, 3, "value head sizes");
    same(past_k, 2, past_v, 2, "past key and value lengths");
    const Dim p = dim(past_k, 2);
    total = p && total ? Dim(*p + *total) : Dim();
  }
  std::optional<Shape> y;
  if (q.shape || v.shape) y = Shape{dim(&q, 0), dim(&q, 1), dim(&q, 2), dim(&v, 3)};
  ctx.set_output(0, q.dtype, y);
  if (const Value* mask = ctx.input(3)) {
    if (mask->dtype != DType::Bool) require_float(ctx, *mask);
    if (y) require_broadcasts_to(ctx, *mask, Shape{(*y)[0], (*y)[1], (*y)[2], total}, "mask");
  }
  auto present = [&](const Value& t) -> std::optional<Shape> {
    if (!t.shape && !q.shape) return std::nullopt;
    return Shape{dim(&t, 0), dim(&t, 1), total, dim(&t, 3)};
  };
  if (ctx.has_output(1)) ctx.set_output(1, k.dtype, present(k));
  if (ctx.has_output(2)) ctx.set_output(2, v.dtype, present(v));
}

void infer_linear_attention(InferContext& ctx) {
  const Value& q = float_input(ctx, 0);
  const Value& k = float_input(ctx, 1);
  const Value& v = float_input(ctx, 2);
  for (const Value* t : {&q, &k, &v})
    if (auto r = rank_of(t); r && *r != 3)
      ctx.fail("input '", t->name, "' has rank ", *r, "; LinearAttention takes [batch, seq, heads * head_dim]");
  const int64_t hq = ctx.attr_int("q_num_heads", 0), hkv = ctx.attr_int("kv_num_heads", 0);
  if (hq < 1 || hkv < 1 || hq % hkv != 0)
    ctx.fail("q_num_heads (", hq, ") must be a positive multiple of kv_num_heads (", hkv, ")");
  const std::string rule = ctx.attr_string("update_rule", "gated_delta");
  if (rule != "linear" && rule != "gated" && rule != "delta" && rule != "gated_delta")
    ctx.fail("attribute 'update_rule' is '", rule, "', must be linear, gated, delta or gated_delta");
  const bool gated = rule == "gated" || rule == "gated_delta", delta = rule == "delta" || rule == "gated_delta";
  if (gated != (ctx.input(4) != nullptr)) ctx.fail("update_rule '", rule, gated ? "' needs" : "' takes no", " input 'decay'");
  if (delta != (ctx.input(5) != nullptr)) ctx.fail("update_rule '", rule, delta ? "' needs" : "' takes no", " input 'beta'");
  for (size_t i : {size_t{3}, size_t{4}, size_t{5}})
    if (const Value* t = ctx.input(i)) require_float(ctx, *t);
  auto dim = [](const Value& t, size_t i) -> Dim { return t.shape ? (*t.shape)[i] : Dim(); };
  // A packed last dim split into `heads` heads: its head size.
  auto head_size = [&](const Value& t, int64_t heads) -> Dim {
    const Dim d = dim(t, 2);
    if (!d) return Dim();
    if (auto c = d->constant()) {
      if (*c % heads != 0) ctx.fail("input '", t.name, "' last dim ", *c, " is not a multiple of its ", heads, " heads");
      return DimExpr(*c / heads);
    }
    return sym::floordiv(*d, heads);
  };
  const Dim dk = head_size(q, hq), dv = head_size(v, hkv);
  std::optional<Shape> y;
  if (q.shape || v.shape) y = Shape{dim(q, 0), dim(q, 1), dv ? Dim(*dv * DimExpr(hq)) : Dim()};
  ctx.set_output(0, q.dtype, y);
  if (ctx.has_output(1)) ctx.set_output(1, q.dtype, Shape{dim(q, 0), DimExpr(hkv), dk, dv});
}

}  // namespace cuvil::shape
