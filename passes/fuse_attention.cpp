// Pass: attention fusion (passes/fuse_attention.h). Matching starts at each Softmax and walks
// down its input through masks and scales to the scores MatMul, then up through Q and K to
// their sources, and forward from the Softmax to the MatMul with V. Every fact the rewrite
// relies on (ranks, equal dims, broadcasting, the constant scale, a causal buffer) is proven
// from the inferred shapes and constant contents before anything changes.
#include "passes/fuse_attention.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "passes/graph_edit.h"
#include "support/error.h"

namespace cuvil {
namespace {

// Where fills at or below this vanish from a softmax row exactly (exp underflows to 0 below
// -104), like the -inf of a bool mask, wherever the row keeps an entry whose score is above
// F + 104 + |the masked scores| (any score within ~5e8 for F = -1e9). -1e9 is the fill of
// hand-written decoders (testdata/scripts/export_decoders.py); HF uses finfo.min.
constexpr double kMaskFillLimit = -1e9;

struct GraphView {
  Graph& g;
  const sym::SymbolRanges& ranges;
  std::vector<std::vector<size_t>> readers;  // per value: the nodes reading it

  GraphView(Graph& graph, const sym::SymbolRanges& r) : g(graph), ranges(r) {
    readers.resize(g.values.size());
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (ValueId v : g.nodes[i].inputs)
        if (v != kNoValue) readers[static_cast<size_t>(v)].push_back(i);
  }
  const Value& val(ValueId v) const { return g.value(v); }
  const Node* producer(ValueId v) const {
    if (v == kNoValue) return nullptr;
    const int32_t p = g.value(v).producer;
    return p < 0 ? nullptr : &g.nodes[static_cast<size_t>(p)];
  }
  const Node* produced_by(ValueId v, OpKind op) const {
    const Node* n = producer(v);
    return n && n->op == op ? n : nullptr;
  }
  std::optional<size_t> rank(ValueId v) const {
    if (v == kNoValue || !g.value(v).shape) return std::nullopt;
    return g.value(v).shape->size();
  }
  Dim dim(ValueId v, size_t i) const {
    const auto& s = g.value(v).shape;
    return s && i < s->size() ? (*s)[i] : Dim();
  }
  bool equal(const Dim& a, const Dim& b) const {
    return a && b && (*a == *b || sym::prove_equal(*a, *b, ranges));
  }
  bool is_float32(ValueId v) const { return v != kNoValue && g.value(v).dtype == DType::Float; }
};

std::optional<double> scalar_constant(const GraphView& gv, ValueId v) {
  if (v == kNoValue) return std::nullopt;
  const Value& x = gv.val(v);
  if (!x.data || x.data->numel() != 1 || !dtype_is_float(x.data->dtype)) return std::nullopt;
  return x.data->float_at(0);
}

std::optional<std::vector<int64_t>> int_constant(const GraphView& gv, ValueId v) {
  if (v == kNoValue) return std::nullopt;
  const Value& x = gv.val(v);
  if (!x.data || !dtype_is_integer(x.data->dtype)) return std::nullopt;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < x.data->numel(); ++i) out.push_back(x.data->int_at(i));
  return out;
}

// Cast to float of a float32 value: an identity on the tensors this pass fuses.
bool is_float_identity_cast(const GraphView& gv, const Node& n) {
  return n.op == OpKind::Cast && n.attr_int("to", 0) == 1 && gv.is_float32(n.input(0));
}

// Peels constant scalar Mul/Div (and identity Casts) off `v`, multiplying them into *scale.
ValueId peel_scale(const GraphView& gv, ValueId v, double* scale) {
  for (;;) {
    const Node* n = gv.producer(v);
    if (!n) return v;
    if (is_float_identity_cast(gv, *n)) {
      v = n->input(0);
      continue;
    }
    if (n->op != OpKind::Mul && n->op != OpKind::Div) return v;
    const std::optional<double> c1 = scalar_constant(gv, n->input(1));
    const std::optional<double> c0 = n->op == OpKind::Mul ? scalar_constant(gv, n->input(0)) : std::nullopt;
    if (c1 && std::isfinite(*c1) && *c1 != 0) {
      *scale *= n->op == OpKind::Mul ? *c1 : 1.0 / *c1;
      v = n->input(0);
    } else if (c0 && std::isfinite(*c0)) {
      *scale *= *c0;
      v = n->input(1);
    } else {
      return v;
    }
  }
}

// What a softmax input is, read downwards: scale * x, plus a float mask, with a Where mask.
struct SoftmaxInput {
  ValueId x = kNoValue;
  double scale = 1.0;
  ValueId float_mask = kNoValue;
  ValueId where_cond = kNoValue;
  ValueId where_fill = kNoValue;  // the scalar Where writes where where_cond is false
  bool where_outside_add = false;  // Where(cond, s + mask, fill) rather than Where(cond, s, fill) + mask
  bool where_inverted = false;     // Where(cond, fill, s): masked_fill(cond, fill), cond marks the masked
};

// Masks must sit above every scale (a mask under a scale would be scaled too).
SoftmaxInput peel_softmax_input(const GraphView& gv, ValueId v, SoftmaxInput s) {
  for (;;) {
    const Node* n = gv.producer(v);
    if (!n) break;
    if (is_float_identity_cast(gv, *n)) {
      v = n->input(0);
      continue;
    }
    if (n->op == OpKind::Add && s.float_mask == kNoValue && n->inputs.size() == 2) {
      // Either operand may be the scores; the one that reaches a MatMul wins, else the one
      // with the Add's own shape (the mask is then the one that broadcasts).
      std::optional<SoftmaxInput> fallback;
      for (size_t side : {size_t{0}, size_t{1}}) {
        SoftmaxInput t = s;
        t.float_mask = n->inputs[1 - side];
        t = peel_softmax_input(gv, n->inputs[side], t);
        if (gv.produced_by(t.x, OpKind::MatMul)) return t;
        if (!fallback && gv.rank(n->inputs[side]) == gv.rank(n->outputs[0])) fallback = t;
      }
      if (fallback) return *fallback;
      break;
    }
    if (n->op == OpKind::Where && s.where_cond == kNoValue && n->inputs.size() == 3 &&
        gv.val(n->inputs[0]).dtype == DType::Bool) {
      auto is_fill = [&](ValueId f) {
        const std::optional<double> c = scalar_constant(gv, f);
        return c && *c <= kMaskFillLimit;
      };
      const bool inverted = !is_fill(n->inputs[2]);
      if (inverted && !is_fill(n->inputs[1])) break;
      s.where_cond = n->inputs[0];
      s.where_fill = n->inputs[inverted ? 1 : 2];
      s.where_inverted = inverted;
      s.where_outside_add = s.float_mask == kNoValue;
      v = n->inputs[inverted ? 2 : 1];
      continue;
    }
    break;
  }
  s.x = peel_scale(gv, v, &s.scale);
  return s;
}

// `mask` broadcasts to `target` (the scores, whose shape the masked result provably keeps):
// rank <= target's, every dim 1, provably the target's, or not provably different (then the
// unfused broadcast, which kept the target's dim, proves it 1 or equal at run time, which is
// what the fused op checks).
bool mask_fits(const GraphView& gv, ValueId mask, ValueId target) {
  const auto mr = gv.rank(mask), tr = gv.rank(target);
  if (!mr || !tr || *mr > *tr) return false;
  for (size_t i = 0; i < *mr; ++i) {
    const Dim d = gv.dim(mask, i), t = gv.dim(target, *tr - *mr + i);
    if (d && d->constant() == 1) continue;
    if (gv.equal(d, t)) continue;
    if (!d || !t || sym::prove_not_equal(*d, *t, gv.ranges)) return false;
  }
  return true;
}

// y = Reshape(Expand(Unsqueeze(x, axes = [2]), [B, H, n, T, D]), [B, H*n, T, D]): head h of y is
// head h / n of x. Returns x, or `y` itself when that is not proven.
ValueId peel_repeat_kv(const GraphView& gv, ValueId y) {
  const Node* r = gv.produced_by(y, OpKind::Reshape);
  const Node* e = r ? gv.produced_by(r->input(0), OpKind::Expand) : nullptr;
  const Node* u = e ? gv.produced_by(e->input(0), OpKind::Unsqueeze) : nullptr;
  if (!u) return y;
  const ValueId x = u->input(0);
  const std::optional<std::vector<int64_t>> axes =
      u->opset >= 13 ? int_constant(gv, u->input(1)) : u->attr_ints("axes");
  if (!axes || axes->size() != 1 || ((*axes)[0] != 2 && (*axes)[0] != -3)) return y;
  const ValueId ex = e->outputs[0];
  if (gv.rank(x) != 4u || gv.rank(ex) != 5u || gv.rank(y) != 4u) return y;
  const bool expand_ok = gv.equal(gv.dim(ex, 0), gv.dim(x, 0)) && gv.equal(gv.dim(ex, 1), gv.dim(x, 1)) &&
                         gv.equal(gv.dim(ex, 3), gv.dim(x, 2)) && gv.equal(gv.dim(ex, 4), gv.dim(x, 3));
  const Dim h = gv.dim(x, 1), n = gv.dim(ex, 2);
  const bool reshape_ok = h && n && gv.equal(gv.dim(y, 0), gv.dim(x, 0)) &&
                          gv.equal(gv.dim(y, 1), Dim(*h * *n)) && gv.equal(gv.dim(y, 2), gv.dim(x, 2)) &&
                          gv.equal(gv.dim(y, 3), gv.dim(x, 3));
  return expand_ok && reshape_ok ? x : y;
}

// Concat(past, new) along axis 2 of two rank-4 tensors; nullptr otherwise.
const Node* kv_concat(const GraphView& gv, ValueId v) {
  const Node* c = gv.produced_by(v, OpKind::Concat);
  if (!c || c->inputs.size() != 2 || gv.rank(v) != 4u) return nullptr;
  const int64_t axis = c->attr_int("axis", 0);
  if (axis != 2 && axis != -2) return nullptr;
  for (ValueId in : c->inputs)
    if (gv.rank(in) != 4u || !gv.is_float32(in)) return nullptr;
  return c;
}

// The contents of a small integer tensor as expressions: its symbolic contents, or its constant
// data.
std::optional<std::vector<DimExpr>> int_contents(const GraphView& gv, ValueId v) {
  if (v == kNoValue) return std::nullopt;
  if (gv.val(v).sym_data) return gv.val(v).sym_data;
  const std::optional<std::vector<int64_t>> c = int_constant(gv, v);
  if (!c) return std::nullopt;
  return std::vector<DimExpr>(c->begin(), c->end());
}

// The half-open window [start, end) a chain of step-1 Slices keeps of each of a buffer's last
// two axes, read from the Slices' symbolic bounds; nullopt when some bound is unknown.
struct Window {
  DimExpr start, end;
};

// ---- Index-affine masks -------------------------------------------------------------------
// LLaMA's _make_causal_mask builds its additive mask from the sequence length: Where(Less(
// Range(0, T, 1), Reshape(Range(0, S, 1) + 1, [S, 1])), 0, ConstantOfShape(finfo.min)), then
// Unsqueezes and an Expand to [B, 1, S, T]. Such a tensor is read here as a function of its
// element index: an integer tensor as c + sum a_k x_k (x_k the index on axis k), a bool one as
// the sign of such a form, a float one as Where of that with two constants. Only ops whose
// every element is that function are followed; a coefficient on an axis of length 1 is 0 (the
// index there is 0, whatever the axis broadcasts to).
struct Affine {
  std::vector<int64_t> a;  // one per axis of the tensor
  int64_t c = 0;
};
struct AffineCond {  // d(x) < 0 (strict) or d(x) <= 0
  Affine d;
  bool strict = true;
};
struct AffineMask {  // cond(x) ? when_true : when_false
  AffineCond cond;
  double when_true = 0, when_false = 0;
};

bool provably_one(const Dim& d) { return d && d->constant() == 1; }

// Zeroes the coefficients of `v`'s length-1 axes; nullopt when the rank does not match.
std::optional<Affine> normalized(const GraphView& gv, ValueId v, Affine x) {
  if (gv.rank(v) != x.a.size()) return std::nullopt;
  for (size_t k = 0; k < x.a.size(); ++k)
    if (provably_one(gv.dim(v, k))) x.a[k] = 0;
  return x;
}

// `x` over `from`'s axes, broadcast (aligned from the right) onto `to`'s: every axis of `from`
// that is not 1 is provably `to`'s.
std::optional<Affine> broadcast_onto(const GraphView& gv, const Affine& x, ValueId from, ValueId to) {
  const auto rf = gv.rank(from), rt = gv.rank(to);
  if (!rf || !rt || *rf > *rt || x.a.size() != *rf) return std::nullopt;
  Affine y;
  y.a.assign(*rt, 0);
  y.c = x.c;
  for (size_t k = 0; k < *rf; ++k) {
    const size_t o = *rt - *rf + k;
    if (provably_one(gv.dim(from, k))) continue;
    if (!gv.equal(gv.dim(from, k), gv.dim(to, o))) return std::nullopt;
    y.a[o] = x.a[k];
  }
  return normalized(gv, to, y);
}

// Through a node that only moves elements: Cast, Expand (broadcast), and Unsqueeze/Reshape
// that keep the axes not of length 1 in order with provably equal lengths.
std::optional<Affine> through_layout(const GraphView& gv, const Node& n, const Affine& x) {
  const ValueId in = n.input(0), out = n.outputs[0];
  if (n.op == OpKind::Cast) return normalized(gv, out, x);
  if (n.op == OpKind::Expand) return broadcast_onto(gv, x, in, out);
  if (n.op != OpKind::Unsqueeze && n.op != OpKind::Reshape) return std::nullopt;
  const auto ri = gv.rank(in), ro = gv.rank(out);
  if (!ri || !ro || x.a.size() != *ri) return std::nullopt;
  std::vector<size_t> pi, po;
  for (size_t k = 0; k < *ri; ++k) {
    if (!gv.dim(in, k)) return std::nullopt;
    if (!provably_one(gv.dim(in, k))) pi.push_back(k);
  }
  for (size_t k = 0; k < *ro; ++k) {
    if (!gv.dim(out, k)) return std::nullopt;
    if (!provably_one(gv.dim(out, k))) po.push_back(k);
  }
  if (pi.size() != po.size()) return std::nullopt;
  Affine y;
  y.a.assign(*ro, 0);
  y.c = x.c;
  for (size_t k = 0; k < pi.size(); ++k) {
    if (!gv.equal(gv.dim(in, pi[k]), gv.dim(out, po[k]))) return std::nullopt;
    y.a[po[k]] = x.a[pi[k]];
  }
  return y;
}

// A Cast is followed only when it keeps every value: to its own dtype, or an integer to int32
// or int64 (indices and small offsets; a narrower target could wrap).
bool moves_elements(const GraphView& gv, const Node& n) {
  if (n.op == OpKind::Cast) {
    const DType from = gv.val(n.input(0)).dtype, to = gv.val(n.outputs[0]).dtype;
    return from == to || (dtype_is_integer(from) && (to == DType::Int64 || to == DType::Int32));
  }
  return n.op == OpKind::Expand || n.op == OpKind::Unsqueeze || n.op == OpKind::Reshape;
}

constexpr int kAffineDepth = 32;
// Constants (starts, steps, offsets) beyond this are not followed, so that no sum of them along
// kAffineDepth steps can overflow.
constexpr int64_t kAffineConstantLimit = int64_t{1} << 30;
bool small(int64_t x) { return x > -kAffineConstantLimit && x < kAffineConstantLimit; }

std::optional<Affine> affine_int(const GraphView& gv, ValueId v, int depth) {
  if (v == kNoValue || depth > kAffineDepth || !dtype_is_integer(gv.val(v).dtype)) return std::nullopt;
  const auto r = gv.rank(v);
  if (!r) return std::nullopt;
  if (const std::optional<std::vector<int64_t>> c = int_constant(gv, v); c && c->size() == 1) {
    if (!small((*c)[0])) return std::nullopt;
    Affine x;
    x.a.assign(*r, 0);
    x.c = (*c)[0];
    return x;
  }
  const Node* n = gv.producer(v);
  if (!n) return std::nullopt;
  if (n->op == OpKind::Range) {
    const auto start = int_constant(gv, n->input(0)), delta = int_constant(gv, n->input(2));
    if (!start || !delta || start->size() != 1 || delta->size() != 1 || *r != 1) return std::nullopt;
    if (!small((*start)[0]) || !small((*delta)[0])) return std::nullopt;
    return normalized(gv, v, Affine{{(*delta)[0]}, (*start)[0]});
  }
  if ((n->op == OpKind::Add || n->op == OpKind::Sub) && n->inputs.size() == 2) {
    const auto x = affine_int(gv, n->input(0), depth + 1), y = affine_int(gv, n->input(1), depth + 1);
    if (!x || !y) return std::nullopt;
    const auto bx = broadcast_onto(gv, *x, n->input(0), v), by = broadcast_onto(gv, *y, n->input(1), v);
    if (!bx || !by) return std::nullopt;
    Affine z = *bx;
    const int64_t sign = n->op == OpKind::Add ? 1 : -1;
    for (size_t k = 0; k < z.a.size(); ++k) {
      z.a[k] += sign * by->a[k];
      if (!small(z.a[k])) return std::nullopt;
    }
    z.c += sign * by->c;
    if (!small(z.c)) return std::nullopt;
    return normalized(gv, v, z);
  }
  if (moves_elements(gv, *n)) {
    const auto x = affine_int(gv, n->input(0), depth + 1);
    return x ? through_layout(gv, *n, *x) : std::nullopt;
  }
  return std::nullopt;
}

std::optional<AffineCond> affine_cond(const GraphView& gv, ValueId v, int depth) {
  if (v == kNoValue || depth > kAffineDepth || gv.val(v).dtype != DType::Bool) return std::nullopt;
  const Node* n = gv.producer(v);
  if (!n) return std::nullopt;
  const bool less = n->op == OpKind::Less || n->op == OpKind::LessOrEqual;
  const bool greater = n->op == OpKind::Greater || n->op == OpKind::GreaterOrEqual;
  if ((less || greater) && n->inputs.size() == 2) {  // a < b: a - b < 0; a > b: b - a < 0
    const ValueId lo = less ? n->input(0) : n->input(1), hi = less ? n->input(1) : n->input(0);
    const auto x = affine_int(gv, lo, depth + 1), y = affine_int(gv, hi, depth + 1);
    if (!x || !y) return std::nullopt;
    const auto bx = broadcast_onto(gv, *x, lo, v), by = broadcast_onto(gv, *y, hi, v);
    if (!bx || !by) return std::nullopt;
    AffineCond c;
    c.d = *bx;
    for (size_t k = 0; k < c.d.a.size(); ++k) c.d.a[k] -= by->a[k];  // each small: no overflow
    c.d.c -= by->c;
    c.strict = n->op == OpKind::Less || n->op == OpKind::Greater;
    return c;
  }
  if (n->op == OpKind::Not) {  // not (d < 0) is -d <= 0; not (d <= 0) is -d < 0
    auto c = affine_cond(gv, n->input(0), depth + 1);
    if (!c) return std::nullopt;
    for (int64_t& k : c->d.a) k = -k;
    c->d.c = -c->d.c;
    c->strict = !c->strict;
    return c;
  }
  if (moves_elements(gv, *n)) {
    auto c = affine_cond(gv, n->input(0), depth + 1);
    if (!c) return std::nullopt;
    const auto d = through_layout(gv, *n, c->d);
    if (!d) return std::nullopt;
    c->d = *d;
    return c;
  }
  return std::nullopt;
}

// A float tensor whose elements all equal one constant: a one-element constant, or
// ConstantOfShape of a float value.
std::optional<double> uniform_float(const GraphView& gv, ValueId v) {
  if (const std::optional<double> c = scalar_constant(gv, v)) return c;
  const Node* n = gv.produced_by(v, OpKind::ConstantOfShape);
  if (!n || !gv.is_float32(v)) return std::nullopt;
  const auto it = n->attrs.find("value");
  if (it == n->attrs.end()) return 0.0;
  const auto& t = it->second.t;
  if (!t || t->numel() != 1 || !dtype_is_float(t->dtype)) return std::nullopt;
  return t->float_at(0);
}

std::optional<AffineMask> affine_mask(const GraphView& gv, ValueId v, int depth) {
  if (v == kNoValue || depth > kAffineDepth || !gv.is_float32(v)) return std::nullopt;
  const Node* n = gv.producer(v);
  if (!n) return std::nullopt;
  if (n->op == OpKind::Where && n->inputs.size() == 3) {
    const auto t = uniform_float(gv, n->input(1)), f = uniform_float(gv, n->input(2));
    if (!t || !f) return std::nullopt;
    const auto c = affine_cond(gv, n->input(0), depth + 1);
    if (!c) return std::nullopt;
    const auto d = broadcast_onto(gv, c->d, n->input(0), v);
    if (!d) return std::nullopt;
    return AffineMask{{*d, c->strict}, *t, *f};
  }
  if (moves_elements(gv, *n)) {
    auto m = affine_mask(gv, n->input(0), depth + 1);
    if (!m) return std::nullopt;
    const auto d = through_layout(gv, *n, m->cond.d);
    if (!d) return std::nullopt;
    m->cond.d = *d;
    return m;
  }
  return std::nullopt;
}

// `mask` (the only mask, added to the scores [B, H, S, T]) is 0 where j <= i + T - S and a fill
// <= -1e9 elsewhere, with every dim the scores' (provably, or 1 on B and H): then dropping it
// for is_causal = 1 is exact. A masked entry is scale * s + F (or -inf), at least 104 below
// the row's kept entries while the scores stay within ~5e8, so it weighs exactly 0 (exp
// underflows), as -inf does; every row keeps key 0 (T - S >= 0).
bool mask_is_causal(const GraphView& gv, ValueId mask, ValueId scores, const Dim& S, const Dim& T) {
  if (!S || !T || !sym::prove_less_equal(*S, *T, gv.ranges)) return false;
  const std::optional<AffineMask> m = affine_mask(gv, mask, 0);
  const auto r = gv.rank(mask);
  if (!m || !r || *r < 2 || *r > 4) return false;
  for (size_t k = 0; k < *r; ++k) {
    const Dim d = gv.dim(mask, k), t = gv.dim(scores, 4 - *r + k);
    if (!(gv.equal(d, t) || (k + 2 < *r && provably_one(d)))) return false;
    if (k + 2 < *r && m->cond.d.a[k] != 0) return false;
  }
  const bool zero_where_true = m->when_true == 0 && m->when_false <= kMaskFillLimit;
  const bool zero_where_false = m->when_false == 0 && m->when_true <= kMaskFillLimit;
  if (!zero_where_true && !zero_where_false) return false;
  AffineCond keep = m->cond;  // where the mask is 0
  if (!zero_where_true) {     // not (d < 0) is -d <= 0
    for (int64_t& k : keep.d.a) k = -k;
    keep.d.c = -keep.d.c;
    keep.strict = !keep.strict;
  }
  // keep: j - i + c < 0 (j <= i - c - 1) or j - i + c <= 0 (j <= i - c).
  if (keep.d.a[*r - 1] != 1 || keep.d.a[*r - 2] != -1) return false;
  const int64_t offset = keep.strict ? -keep.d.c - 1 : -keep.d.c;
  return gv.equal(Dim(*T - *S), Dim(DimExpr(offset)));
}

// Facts "T <= N" (T a dim expression, N a constant) that hold wherever the graph runs (see
// Causality), and proofs under them. A fact caps every symbol y with y <= T at N, and, when T
// is not yet at most N, T = x + R with x a symbol R does not mention is substituted
// x := N - R - u with a fresh u in [0, N]: every binding with T <= N is some binding of u and
// the other symbols (u = N - T), so what is proven after the substitution holds wherever the
// facts do (x >= 0 is dropped: a superset).
class Facts {
 public:
  explicit Facts(const sym::SymbolRanges& ranges) : ranges_(ranges) {}
  bool le(const DimExpr& a, const DimExpr& b) const {
    try {
      if (sym::prove_less_equal(sym::substitute(a, subst_), sym::substitute(b, subst_), ranges_)) return true;
    } catch (const Diagnostic&) {  // overflow in the substituted constants: not proven this way
    }
    return by_cases(a, b, false);
  }
  bool equal(const DimExpr& a, const DimExpr& b) const {
    try {
      if (sym::prove_equal(sym::substitute(a, subst_), sym::substitute(b, subst_), ranges_)) return true;
    } catch (const Diagnostic&) {
    }
    return by_cases(a, b, true);
  }
  Facts with(const DimExpr& T, int64_t N) const {
    Facts f = *this;
    f.facts_.emplace_back(T, N);
    try {
      for (const std::string& y : T.symbols()) {
        if (!sym::prove_less_equal(DimExpr::symbol(y), T, ranges_)) continue;
        sym::Range r = f.ranges_.get(y);
        r.hi = std::min(r.hi, N);
        if (r.lo <= r.hi) f.ranges_.set(y, r);
      }
      const DimExpr t = sym::substitute(T, subst_);
      if (sym::prove_less_equal(t, DimExpr(N), f.ranges_)) return f;
      for (const std::string& x : t.symbols()) {
        const DimExpr rest = t - DimExpr::symbol(x);
        const std::vector<std::string> in_rest = rest.symbols();
        if (std::find(in_rest.begin(), in_rest.end(), x) != in_rest.end()) continue;
        std::string u;
        for (int i = f.fresh_++;; i = f.fresh_++) {
          u = "slack_" + std::to_string(i);
          if (!f.ranges_.has(u)) break;
        }
        f.ranges_.set(u, sym::Range{0, N});
        const DimExpr repl = DimExpr(N) - rest - DimExpr::symbol(u);
        for (auto& [name, e] : f.subst_) e = sym::substitute(e, {{x, repl}});
        f.subst_[x] = repl;
        return f;
      }
    } catch (const Diagnostic&) {
      Facts g = *this;
      g.facts_.emplace_back(T, N);
      return g;
    }
    return f;
  }

 private:
  // The substitution loses x >= 0, which some proofs need (a later layer's window starts at
  // the cache length): where the facts cap every symbol involved, a <= b (a == b) is checked
  // at every binding the facts and ranges allow, up to kMaxCases of them.
  static constexpr int64_t kMaxCases = int64_t{1} << 16;
  bool by_cases(const DimExpr& a, const DimExpr& b, bool equal) const {
    std::set<std::string> names;
    for (const DimExpr* e : {&a, &b})
      for (const std::string& n : e->symbols()) names.insert(n);
    std::vector<const std::pair<DimExpr, int64_t>*> relevant;
    for (bool grew = true; grew;) {  // the facts mentioning those symbols, and theirs
      grew = false;
      for (const auto& f : facts_) {
        const std::vector<std::string> fs = f.first.symbols();
        bool touches = false;
        for (const std::string& n : fs) touches |= names.count(n) != 0;
        if (!touches || std::find(relevant.begin(), relevant.end(), &f) != relevant.end()) continue;
        relevant.push_back(&f);
        for (const std::string& n : fs) grew |= names.insert(n).second;
      }
    }
    std::vector<std::string> syms(names.begin(), names.end());
    std::vector<sym::Range> box;
    int64_t cases = 1;
    for (const std::string& n : syms) {
      const sym::Range r = ranges_.get(n);
      if (r.hi == sym::Range::kUnbounded || r.hi - r.lo >= kMaxCases) return false;
      cases *= r.hi - r.lo + 1;
      if (cases > kMaxCases) return false;
      box.push_back(r);
    }
    std::map<std::string, int64_t> binding;
    for (size_t i = 0; i < syms.size(); ++i) binding[syms[i]] = box[i].lo;
    for (int64_t c = 0; c < cases; ++c) {
      if (c > 0) {  // next binding, odometer order
        for (size_t i = 0; i < syms.size(); ++i) {
          if (++binding[syms[i]] <= box[i].hi) break;
          binding[syms[i]] = box[i].lo;
        }
      }
      bool allowed = true;
      for (const auto* f : relevant) {
        const sym::EvalResult t = sym::evaluate(f->first, binding);
        if (!t.value) return false;
        allowed &= *t.value <= f->second;
      }
      if (!allowed) continue;
      const sym::EvalResult x = sym::evaluate(a, binding), y = sym::evaluate(b, binding);
      if (!x.value || !y.value) return false;
      if (equal ? *x.value != *y.value : *x.value > *y.value) return false;
    }
    return true;
  }

  std::map<std::string, DimExpr> subst_;
  sym::SymbolRanges ranges_;
  std::vector<std::pair<DimExpr, int64_t>> facts_;
  int fresh_ = 0;
};

// What proves_causal found: the window is causal outright (T <= N proven), or only where T <= N,
// which the unfused graph then enforces at run time (the cond's min(T, N) columns broadcast
// against the scores' T: N != T and N != 1 when T > N >= 2, a broadcast error), as does the
// fused op checking the cond as its mask.
struct Causality {
  bool causal = false;           // cond[i][j] == (j <= i + T - S), T <= N proven
  std::optional<Facts> if_fits;  // the same, proven only under `known` and T <= N (these facts)
};

// cond = Slice...(Cast?(buffer)) with a constant lower-triangular buffer [.., N, N] (nonzero
// exactly where j <= i), keeping rows [T - S, T) and columns [0, T), T <= N: then cond[i][j]
// is j <= i + T - S, Attention's is_causal. S and T are the scores' dims 2 and 3.
Causality proves_causal(const GraphView& gv, ValueId cond, const Dim& S, const Dim& T, const Facts& known) {
  Causality none;
  if (!S || !T) return none;
  std::vector<const Node*> slices;
  ValueId v = cond;
  for (;;) {
    const Node* n = gv.producer(v);
    if (n && n->op == OpKind::Slice && n->opset >= 10) {
      slices.push_back(n);
      v = n->input(0);
    } else if (n && n->op == OpKind::Cast && n->attr_int("to", 0) == 9) {
      v = n->input(0);
    } else {
      break;
    }
  }
  const Value& buf = gv.val(v);
  if (!buf.data || buf.data->dtype == DType::String) return none;
  const std::vector<int64_t>& bd = buf.data->dims;
  const size_t rank = bd.size();
  if (rank < 2 || bd[rank - 1] != bd[rank - 2]) return none;
  for (size_t i = 0; i + 2 < rank; ++i)
    if (bd[i] != 1) return none;
  const int64_t N = bd[rank - 1];
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < N; ++j)
      if ((buf.data->float_at(i * N + j) != 0) != (j <= i)) return none;
  // The window proof, with every comparison also proven under `fits` (T <= N) when given.
  // T > N fails the graph at run time when the cond then has N columns: every Slice of the
  // columns starts at 0 and ends at T or later (without `fits`).
  bool columns_enforce = true;
  auto window_is_causal = [&](const Facts* fits) {
    Window win[2] = {{0, N}, {0, N}};  // rows, columns
    auto le = [&](const DimExpr& a, const DimExpr& b) {
      return a == b || sym::prove_less_equal(a, b, gv.ranges) || (fits && fits->le(a, b));
    };
    auto eq = [&](const DimExpr& a, const Dim& b) { return gv.equal(a, b) || (b && fits && fits->equal(a, *b)); };
    for (auto it = slices.rbegin(); it != slices.rend(); ++it) {  // innermost first
      const Node& s = **it;
      const std::optional<std::vector<DimExpr>> starts = int_contents(gv, s.input(1));
      const std::optional<std::vector<DimExpr>> ends = int_contents(gv, s.input(2));
      if (!starts || !ends || starts->size() != ends->size()) return false;
      std::vector<int64_t> axes;
      if (s.input(3) != kNoValue) {
        auto a = int_constant(gv, s.input(3));
        if (!a) return false;
        axes = *a;
      } else {
        for (size_t i = 0; i < starts->size(); ++i) axes.push_back(static_cast<int64_t>(i));
      }
      if (axes.size() != starts->size()) return false;
      if (s.input(4) != kNoValue) {
        auto st = int_constant(gv, s.input(4));
        if (!st) return false;
        for (int64_t x : *st)
          if (x != 1) return false;
      }
      for (size_t k = 0; k < axes.size(); ++k) {
        int64_t a = axes[k] < 0 ? axes[k] + static_cast<int64_t>(rank) : axes[k];
        const DimExpr& st = (*starts)[k];
        const DimExpr& en = (*ends)[k];
        if (a < 0 || a >= static_cast<int64_t>(rank)) return false;
        if (a + 2 < static_cast<int64_t>(rank)) {  // a leading size-1 axis must be kept whole
          if (st.constant() != 0 || !le(DimExpr(1), en)) return false;
          continue;
        }
        if (a + 1 == static_cast<int64_t>(rank) &&
            (st.constant() != 0 || !(en == *T || sym::prove_less_equal(*T, en, gv.ranges))))
          columns_enforce = false;
        Window& w = win[a - static_cast<int64_t>(rank) + 2];
        const DimExpr len = w.end - w.start;
        if (!le(DimExpr(0), st) || !le(st, en)) return false;
        const DimExpr end = le(len, en) ? len : en;  // Slice clamps an end past the length
        if (!le(st, end) || !le(end, len)) return false;
        w = {w.start + st, w.start + end};
      }
    }
    const DimExpr t = *T, s = *S;
    return le(t, DimExpr(N)) && le(s, t) && eq(win[0].start, Dim(t - s)) && eq(win[0].end, T) &&
           eq(win[1].start, Dim(DimExpr(0))) && eq(win[1].end, T);
  };
  Causality c;
  c.causal = window_is_causal(nullptr);
  if (c.causal || N < 2) return c;
  Facts fits = known.with(*T, N);
  if (window_is_causal(&fits) && columns_enforce) c.if_fits = std::move(fits);
  return c;
}

Attribute int_attr(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::Int;
  a.i = v;
  return a;
}
Attribute float_attr(float v) {
  Attribute a;
  a.kind = Attribute::Kind::Float;
  a.f = v;
  return a;
}

// One rewrite, decided before the graph changes: the nodes to insert in place of `anchor`.
struct Rewrite {
  size_t anchor = 0;
  std::vector<Node> nodes;
  // Values whose producer moves to the fused node: the Concat writes `renamed` instead, and
  // readers placed before the anchor read that.
  std::vector<std::pair<ValueId, ValueId>> moved;  // (original, renamed)
};

class Fuser {
 public:
  // `captured`: values a subgraph captures (their producer must not move).
  Fuser(Graph& g, const sym::SymbolRanges& ranges, int onnx_opset, std::set<ValueId> captured)
      : gv_(g, ranges), opset_(onnx_opset), captured_(std::move(captured)), facts_(ranges) {}
  // Rewrites already decided claim their anchor and the values whose producer they move.
  std::set<size_t> anchors;

  std::optional<Rewrite> attention(size_t softmax_index);
  std::optional<Rewrite> masked_softmax(size_t softmax_index);

 private:
  // How the peeled masks become the fused op's one mask input, decided before anything is
  // created. A Where with fill -inf is the bool mask cond; one with a finite fill F becomes the
  // float mask Where(cond, 0, F): the fused op then adds scale * s to F, which rounds back to
  // F (|scale * s| < ulp(F) / 2: 32 for F = -1e9, about 1e22 for F = -1e30), so even a row
  // the Where masks entirely stays what the unfused softmax makes of it (uniform), where -inf
  // would give NaN.
  // With a float mask m too: Where(cond, m, F) when the Where is outside the Add, else
  // Add(Where(cond, 0, F), m), again exactly the values the unfused graph adds to the scores.
  enum class MaskKind { None, Float, Bool, WhereZero, WhereMask, AddWhere };
  struct MaskPlan {
    MaskKind kind = MaskKind::None;
    ValueId cond = kNoValue, fill = kNoValue, mask = kNoValue;
    bool inverted = false;  // cond marks the masked entries (Where(cond, fill, s))
  };
  // nullopt when the masks do not fit `target` or (cond_is_causal) a finite-fill causal Where
  // meets a float mask: a row the two mask entirely would differ, so no is_causal then.
  // cond_fits: the cond is proven the scores' [S, T] causal window wherever the graph runs
  // (Causality::if_fits), whatever shape inference could say of it.
  std::optional<MaskPlan> plan_mask(const SoftmaxInput& in, ValueId target, bool cond_is_causal,
                                    bool cond_fits = false) const;
  ValueId build_mask(const MaskPlan& plan, ValueId target, const std::string& base, Rewrite* rw);
  Dim broadcast_dim(ValueId a, ValueId b, ValueId target, size_t i_from_end) const;
  bool softmax_on_last_axis(const Node& sm) const {
    const auto r = gv_.rank(sm.input(0));
    if (!r || *r == 0 || !gv_.is_float32(sm.input(0))) return false;
    int64_t axis = sm.attr_int("axis", sm.opset < 13 ? 1 : -1);
    if (axis < 0) axis += static_cast<int64_t>(*r);
    return axis == static_cast<int64_t>(*r) - 1;
  }
  ValueId fresh_value(const std::string& name, const Value& like) {
    Graph& g = gv_.g;
    std::string n = name;
    for (int i = 1; g.find(n) != kNoValue; ++i) n = name + "_" + std::to_string(i);
    const ValueId id = g.add_value(n);
    g.value(id).dtype = like.dtype;
    g.value(id).shape = like.shape;
    gv_.readers.emplace_back();
    return id;
  }

  GraphView gv_;
  int opset_;
  std::set<ValueId> captured_;
  std::set<ValueId> moved_;
  Facts facts_;  // T <= N facts the rewrites decided so far enforce (Causality)
};

std::optional<Fuser::MaskPlan> Fuser::plan_mask(const SoftmaxInput& in, ValueId target, bool cond_is_causal,
                                                bool cond_fits) const {
  MaskPlan p;
  p.cond = in.where_cond;
  p.fill = in.where_fill;
  p.mask = in.float_mask;
  p.inverted = in.where_inverted;
  if (p.mask != kNoValue && (!gv_.is_float32(p.mask) || !mask_fits(gv_, p.mask, target))) return std::nullopt;
  if (p.cond == kNoValue) {
    p.kind = p.mask == kNoValue ? MaskKind::None : MaskKind::Float;
    return p;
  }
  const std::optional<double> fill = scalar_constant(gv_, p.fill);
  if (!fill || !gv_.is_float32(p.fill)) return std::nullopt;
  const bool inf_fill = std::isinf(*fill);
  if (cond_is_causal) {
    // Causal rows are never empty (S <= T), so a lone causal Where is is_causal exactly; with
    // a float mask only when the fill is -inf (-inf + m is -inf as is_causal's -inf).
    if (p.mask == kNoValue) p.kind = MaskKind::None;
    else if (inf_fill) p.kind = MaskKind::Float;
    else return std::nullopt;
    return p;
  }
  if (!cond_fits && !mask_fits(gv_, p.cond, target)) return std::nullopt;
  if (p.mask == kNoValue) p.kind = inf_fill ? MaskKind::Bool : MaskKind::WhereZero;
  else p.kind = in.where_outside_add ? MaskKind::WhereMask : MaskKind::AddWhere;
  return p;
}

// Dim i (counted from the last) of broadcast(a, b) inside `target`: a dim 1 yields to the other;
// a dim provably the target's wins (the other is then 1 or equal at run time).
Dim Fuser::broadcast_dim(ValueId a, ValueId b, ValueId target, size_t i_from_end) const {
  auto dim_from_end = [&](ValueId v) -> Dim {
    const size_t r = *gv_.rank(v);
    return i_from_end < r ? gv_.dim(v, r - 1 - i_from_end) : Dim(DimExpr(1));
  };
  const Dim da = dim_from_end(a), db = dim_from_end(b), dt = dim_from_end(target);
  if (da && da->constant() == 1) return db;
  if (db && db->constant() == 1) return da;
  if (gv_.equal(db, dt)) return db;
  return da;
}

ValueId Fuser::build_mask(const MaskPlan& p, ValueId target, const std::string& base, Rewrite* rw) {
  switch (p.kind) {
    case MaskKind::None: return kNoValue;
    case MaskKind::Float: return p.mask;
    case MaskKind::Bool: if (!p.inverted) return p.cond; break;
    default: break;
  }
  Graph& g = gv_.g;
  auto add_node = [&](OpKind op, const std::string& suffix, std::vector<ValueId> inputs, ValueId a, ValueId b,
                      DType dtype = DType::Float) {
    Value like;
    like.dtype = dtype;
    Shape shape;
    const size_t rank = std::max(*gv_.rank(a), *gv_.rank(b));
    for (size_t i = rank; i-- > 0;) shape.push_back(broadcast_dim(a, b, target, i));
    like.shape = shape;
    const ValueId out = fresh_value(base + suffix, like);
    Node n = make_node(op, base + suffix, opset_);
    n.inputs = std::move(inputs);
    n.outputs = {out};
    rw->nodes.push_back(std::move(n));
    return out;
  };
  if (p.kind == MaskKind::Bool)  // masked_fill(cond, -inf): keep where cond is false
    return add_node(OpKind::Not, "/mask", {p.cond}, p.cond, p.cond, DType::Bool);
  if (p.kind == MaskKind::WhereMask) {
    std::vector<ValueId> in = p.inverted ? std::vector<ValueId>{p.cond, p.fill, p.mask}
                                         : std::vector<ValueId>{p.cond, p.mask, p.fill};
    return add_node(OpKind::Where, "/mask", in, p.cond, p.mask);
  }
  Value zero_like;
  zero_like.dtype = DType::Float;
  zero_like.shape = Shape{};
  const ValueId zero = fresh_value(base + "/zero", zero_like);
  auto data = std::make_shared<TensorData>();
  data->dtype = DType::Float;
  data->bytes.assign(4, 0);
  g.value(zero).data = data;
  g.value(zero).is_initializer = true;
  const ValueId w = add_node(OpKind::Where, "/mask_where",
                             p.inverted ? std::vector<ValueId>{p.cond, p.fill, zero}
                                        : std::vector<ValueId>{p.cond, zero, p.fill},
                             p.cond, p.cond);
  if (p.kind == MaskKind::WhereZero) return w;
  return add_node(OpKind::Add, "/mask", {w, p.mask}, w, p.mask);
}

std::optional<Rewrite> Fuser::attention(size_t si) {
  const Node& sm = gv_.g.nodes[si];
  if (!softmax_on_last_axis(sm) || gv_.rank(sm.input(0)) != 4u) return std::nullopt;
  // Forward: the MatMul(probs, V) reading the softmax (maybe through an identity Cast).
  ValueId probs = sm.outputs[0];
  const Node* pv = nullptr;
  size_t pv_index = 0;
  auto find_pv = [&](ValueId p) {
    for (size_t r : gv_.readers[static_cast<size_t>(p)]) {
      const Node& n = gv_.g.nodes[r];
      if (n.op == OpKind::MatMul && n.input(0) == p && n.input(1) != p) {
        pv = &n;
        pv_index = r;
        return;
      }
    }
  };
  find_pv(probs);
  for (int depth = 0; !pv && depth < 4; ++depth) {  // through identity Casts (LLaMA has two)
    ValueId next = kNoValue;
    for (size_t r : gv_.readers[static_cast<size_t>(probs)])
      if (is_float_identity_cast(gv_, gv_.g.nodes[r])) next = gv_.g.nodes[r].outputs[0];
    if (next == kNoValue) break;
    probs = next;
    find_pv(probs);
  }
  if (!pv) return std::nullopt;

  // Downward: masks and scale to the scores MatMul(Q, K^T).
  const SoftmaxInput in = peel_softmax_input(gv_, sm.input(0), SoftmaxInput{});
  const Node* qk = gv_.produced_by(in.x, OpKind::MatMul);
  if (!qk) return std::nullopt;
  const ValueId scores = in.x;
  double scale = in.scale;
  const ValueId q = peel_scale(gv_, qk->input(0), &scale);
  const ValueId kt = peel_scale(gv_, qk->input(1), &scale);
  const Node* tr = gv_.produced_by(kt, OpKind::Transpose);
  if (!tr) return std::nullopt;
  const std::optional<std::vector<int64_t>> perm = tr->attr_ints("perm");
  if (!perm) return std::nullopt;
  const ValueId k_src = peel_scale(gv_, tr->input(0), &scale);
  const bool bert_layout = *perm == std::vector<int64_t>{0, 2, 3, 1};
  if (!bert_layout && *perm != std::vector<int64_t>{0, 1, 3, 2}) return std::nullopt;
  if (!(scale > 0) || !std::isfinite(scale)) return std::nullopt;

  // Shapes: Q [B, H, S, D], scores [B, H, S, T], K as the scores read it [B, H, T, D] (or
  // [B, T, H, D] before the BERT transpose), V as the output reads it [B, H, T, Dv]; no MatMul
  // broadcasting anywhere.
  const ValueId v_read = pv->input(1);
  for (ValueId t : {q, k_src, v_read, scores, pv->outputs[0]})
    if (gv_.rank(t) != 4u || !gv_.is_float32(t)) return std::nullopt;
  const size_t k_head_axis = bert_layout ? 2 : 1, k_len_axis = bert_layout ? 1 : 2;
  const Dim B = gv_.dim(q, 0), H = gv_.dim(q, 1), S = gv_.dim(q, 2), D = gv_.dim(q, 3), T = gv_.dim(scores, 3);
  if (!gv_.equal(gv_.dim(k_src, 0), B) || !gv_.equal(gv_.dim(k_src, k_head_axis), H) ||
      !gv_.equal(gv_.dim(k_src, k_len_axis), T) || !gv_.equal(gv_.dim(k_src, 3), D) ||
      !gv_.equal(gv_.dim(v_read, 0), B) || !gv_.equal(gv_.dim(v_read, 1), H) ||
      !gv_.equal(gv_.dim(v_read, 2), T) || !gv_.equal(gv_.dim(scores, 0), B) ||
      !gv_.equal(gv_.dim(scores, 1), H) || !gv_.equal(gv_.dim(scores, 2), S))
    return std::nullopt;

  // Masks.
  Causality window;
  if (in.where_cond != kNoValue && !in.where_inverted) window = proves_causal(gv_, in.where_cond, S, T, facts_);
  bool causal = window.causal;

  // The masks do not widen the scores: the softmax input has the scores' shape. Where shape
  // inference could not prove two broadcast dims equal it kept the first operand's, so behind
  // a causal Where on a buffer sliced by the sequence length the softmax input reads
  // min(T, N)-style rows and columns. Those equal the scores' S and T wherever T <= N, which
  // the unfused graph needs to run at all (Causality), and the run time checks every value's
  // shape against its inferred one: so the unfused graph runs only where they are equal, and
  // the fused op (whose output is the scores' S rows) runs only where they are equal too. The
  // fused op keeps the output shape inferred for the MatMul it replaces.
  for (size_t i = 0; i < 4; ++i) {
    const Dim o = gv_.dim(sm.input(0), i), t = gv_.dim(scores, i);
    if (gv_.equal(o, t)) continue;
    if (!window.if_fits || i < 2 || !o || !t || !window.if_fits->equal(*o, *t)) return std::nullopt;
  }
  const bool cond_fits = causal || window.if_fits.has_value();
  std::optional<MaskPlan> plan = plan_mask(in, scores, causal, cond_fits);
  if (!plan && causal) {
    causal = false;
    plan = plan_mask(in, scores, false, cond_fits);
  }
  if (!plan) return std::nullopt;
  // An additive causal mask computed from the sequence length (LLaMA) is is_causal, and the
  // [S, T] mask is no longer computed at run time.
  if (!causal && plan->kind == MaskKind::Float && mask_is_causal(gv_, plan->mask, scores, S, T)) {
    causal = true;
    plan->kind = MaskKind::None;
  }

  // K and V sources: grouped-query repeats, then the cache Concat, on both or on neither.
  ValueId k = k_src, v = v_read;
  ValueId past_k = kNoValue, past_v = kNoValue;
  const Node* concat_k = nullptr;
  const Node* concat_v = nullptr;
  if (!bert_layout) {
    const ValueId k_rep = peel_repeat_kv(gv_, k), v_rep = peel_repeat_kv(gv_, v);
    if ((k_rep != k) == (v_rep != v) && gv_.equal(gv_.dim(k_rep, 1), gv_.dim(v_rep, 1))) {
      k = k_rep;
      v = v_rep;
    }
    concat_k = kv_concat(gv_, k);
    concat_v = kv_concat(gv_, v);
    if (concat_k && concat_v && gv_.equal(gv_.dim(concat_k->inputs[0], 1), gv_.dim(concat_v->inputs[0], 1))) {
      past_k = concat_k->inputs[0];
      past_v = concat_v->inputs[0];
    } else {
      concat_k = concat_v = nullptr;
    }
  }

  // The Concat outputs read after the anchor become Attention's present outputs.
  Graph& g = gv_.g;
  std::vector<ValueId> presents;
  if (concat_k) {
    for (const Node* c : {concat_k, concat_v}) {
      const ValueId present = c->outputs[0];
      bool read_later = false;  // by the graph or by a node after the anchor
      for (ValueId o : g.outputs) read_later |= o == present;
      for (size_t r : gv_.readers[static_cast<size_t>(present)]) read_later |= r > pv_index;
      presents.push_back(read_later ? present : kNoValue);
      if (read_later && (captured_.count(present) || moved_.count(present))) return std::nullopt;
    }
  }
  if (anchors.count(pv_index)) return std::nullopt;

  // The fused op checks that the cond, now its mask, broadcasts: T <= N holds wherever it runs,
  // for the layers after it. The cond is [1, .., 1, S, T] there: dims shape inference could
  // not find (a later layer's Slice bounds) are those.
  if (window.if_fits && !causal) {
    // Only from a fused op something reads (dead code, which dce removes, enforces nothing).
    const ValueId y = pv->outputs[0];
    bool read = !gv_.readers[static_cast<size_t>(y)].empty();
    for (ValueId o : g.outputs) read |= o == y;
    if (read) facts_ = *window.if_fits;
    Value& c = g.value(in.where_cond);
    if (c.shape)
      for (size_t i = 0; i < c.shape->size(); ++i)
        if (!(*c.shape)[i]) (*c.shape)[i] = i + 2 < c.shape->size() ? Dim(DimExpr(1)) : i + 2 == c.shape->size() ? S : T;
  }

  Rewrite rw;
  rw.anchor = pv_index;
  ValueId k_in = k, v_in = v;
  if (bert_layout) {  // [B, T, H, D] -> [B, H, T, D]
    Node t = make_node(OpKind::Transpose, tr->name + "/fused_attention_k", opset_);
    Attribute p;
    p.kind = Attribute::Kind::Ints;
    p.ints = {0, 2, 1, 3};
    t.attrs["perm"] = p;
    Value like = gv_.val(k_src);
    if (like.shape) like.shape = Shape{(*like.shape)[0], (*like.shape)[2], (*like.shape)[1], (*like.shape)[3]};
    const ValueId out = fresh_value(g.value(k_src).name + "/fused_attention_k", like);
    t.inputs = {k_src};
    t.outputs = {out};
    rw.nodes.push_back(std::move(t));
    k_in = out;
  }
  if (concat_k) {
    k_in = concat_k->inputs[1];
    v_in = concat_v->inputs[1];
  }
  const ValueId mask = build_mask(*plan, scores, sm.name + "/fused_attention", &rw);
  Node att = make_node(OpKind::Attention, sm.name + "/fused_attention");
  att.inputs = {q, k_in, v_in, mask};
  if (concat_k) {
    att.inputs.push_back(past_k);
    att.inputs.push_back(past_v);
  }
  while (!att.inputs.empty() && att.inputs.back() == kNoValue) att.inputs.pop_back();
  att.outputs = {pv->outputs[0]};
  for (ValueId present : presents) {
    att.outputs.push_back(present);
    if (present == kNoValue) continue;
    rw.moved.push_back({present, fresh_value(g.value(present).name + "/unfused", g.value(present))});
    moved_.insert(present);
  }
  while (att.outputs.back() == kNoValue) att.outputs.pop_back();
  att.attrs["scale"] = float_attr(static_cast<float>(scale));
  if (causal) att.attrs["is_causal"] = int_attr(1);
  rw.nodes.push_back(std::move(att));
  return rw;
}

std::optional<Rewrite> Fuser::masked_softmax(size_t si) {
  const Node& sm = gv_.g.nodes[si];
  if (!softmax_on_last_axis(sm)) return std::nullopt;
  const SoftmaxInput in = peel_softmax_input(gv_, sm.input(0), SoftmaxInput{});
  if (in.where_cond == kNoValue && in.float_mask == kNoValue && in.scale == 1.0) return std::nullopt;
  if (!(in.scale > 0) || !std::isfinite(in.scale)) return std::nullopt;
  const ValueId y = sm.input(0);
  if (!gv_.is_float32(in.x) || gv_.rank(in.x) != gv_.rank(y)) return std::nullopt;
  for (size_t i = 0; i < *gv_.rank(y); ++i)
    if (!gv_.equal(gv_.dim(in.x, i), gv_.dim(y, i))) return std::nullopt;
  const std::optional<MaskPlan> plan = plan_mask(in, y, false);
  if (!plan || anchors.count(si)) return std::nullopt;
  Rewrite rw;
  rw.anchor = si;
  const ValueId mask = build_mask(*plan, y, sm.name + "/fused_softmax", &rw);
  Node ms = make_node(OpKind::MaskedSoftmax, sm.name + "/fused_softmax");
  ms.inputs = {in.x};
  if (mask != kNoValue) ms.inputs.push_back(mask);
  ms.outputs = {sm.outputs[0]};
  if (in.scale != 1.0) ms.attrs["scale"] = float_attr(static_cast<float>(in.scale));
  rw.nodes.push_back(std::move(ms));
  return rw;
}

// Applies the rewrites (anchors distinct) in one pass over the node list.
void apply(Graph& g, std::vector<Rewrite>& rewrites) {
  std::map<size_t, Rewrite*> at;
  for (Rewrite& r : rewrites) at[r.anchor] = &r;
  // Moved producers: the Concat writes the renamed value; earlier readers follow it.
  for (Rewrite& r : rewrites)
    for (auto [orig, renamed] : r.moved) {
      for (size_t i = 0; i < r.anchor; ++i) {
        Node& n = g.nodes[i];
        for (ValueId& o : n.outputs)
          if (o == orig) o = renamed;
        for (ValueId& x : n.inputs)
          if (x == orig) x = renamed;
      }
      for (Rewrite& earlier : rewrites)  // fused nodes placed before this one read it too
        if (earlier.anchor < r.anchor)
          for (Node& n : earlier.nodes)
            for (ValueId& x : n.inputs)
              if (x == orig) x = renamed;
    }
  std::vector<Node> out;
  out.reserve(g.nodes.size() + rewrites.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto it = at.find(i);
    if (it == at.end()) {
      out.push_back(std::move(g.nodes[i]));
      continue;
    }
    for (Node& n : it->second->nodes) out.push_back(std::move(n));
  }
  g.nodes = std::move(out);
  refresh_producers(g);
}

void fuse_in_graph(Graph& g, const sym::SymbolRanges& ranges, int opset, AttentionFusionStats* stats) {
  for_each_subgraph(g, [&](Graph& sub) { fuse_in_graph(sub, ranges, opset, stats); });
  refresh_producers(g);
  // A subgraph capturing a value whose producer would move is not rewritten (rare; keeps the
  // renaming local to this graph's node list).
  std::set<ValueId> captured;
  for_each_subgraph(g, [&](Graph& sub) {
    for (ValueId c : sub.captures)
      if (sub.value(c).outer != kNoValue) captured.insert(sub.value(c).outer);
  });
  Fuser f(g, ranges, opset, std::move(captured));
  std::vector<Rewrite> rewrites;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op != OpKind::Softmax) continue;
    std::optional<Rewrite> rw = f.attention(i);
    const bool is_attention = rw.has_value();
    if (!rw) rw = f.masked_softmax(i);
    if (!rw) continue;
    f.anchors.insert(rw->anchor);
    ++(is_attention ? stats->attention : stats->masked_softmax);
    rewrites.push_back(std::move(*rw));
  }
  if (!rewrites.empty()) apply(g, rewrites);
}

}  // namespace

AttentionFusionStats fuse_attention(Model& model) {
  AttentionFusionStats stats;
  fuse_in_graph(*model.graph, model.ranges, static_cast<int>(opset_of(model, "")), &stats);
  return stats;
}

}  // namespace cuvil
