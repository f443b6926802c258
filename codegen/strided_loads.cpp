// Strided loads (codegen/strided_loads.h).
#include "codegen/strided_loads.h"

#include <algorithm>

#include "ir/slice_bounds.h"
#include "support/checked.h"
#include "support/error.h"

namespace cuvil::codegen {
namespace {

bool is_reshaping(const Node& n) {
  return n.op == OpKind::Reshape || n.op == OpKind::Flatten || n.op == OpKind::Squeeze || n.op == OpKind::Unsqueeze;
}

DimExpr element_count(const Shape& s) {
  DimExpr numel(1);
  for (const Dim& d : s) numel = numel * *d;
  return numel;
}

std::vector<DimExpr> row_major_strides(const Shape& s) {
  std::vector<DimExpr> st(s.size(), DimExpr(1));
  for (size_t k = s.size(); k-- > 1;) st[k - 1] = st[k] * *s[k];
  return st;
}

// The contents of a small integer value as expressions: what shape inference knows, or
// constant data.
std::optional<std::vector<DimExpr>> known_ints(const Graph& g, ValueId id) {
  if (id == kNoValue) return std::nullopt;
  const Value& v = g.value(id);
  if (v.sym_data) return *v.sym_data;
  if (v.data && dtype_is_integer(v.data->dtype) && v.data->numel() <= 64) {
    std::vector<DimExpr> out;
    for (int64_t k = 0; k < v.data->numel(); ++k) out.emplace_back(v.data->int_at(k));
    return out;
  }
  return std::nullopt;
}

// The node of `g` producing `id`, or nullptr (inputs, weights, captures). Every pass keeps
// `producer` right (the IR verifier checks it).
const Node* producer_of(const Graph& g, ValueId id) {
  const Value& v = g.value(id);
  if (v.producer < 0 || static_cast<size_t>(v.producer) >= g.nodes.size()) return nullptr;
  const Node& n = g.nodes[static_cast<size_t>(v.producer)];
  CUVIL_ASSERT(std::find(n.outputs.begin(), n.outputs.end(), id) != n.outputs.end(),
               "value '" << v.name << "' names node '" << n.name << "' as its producer");
  return &n;
}

bool known_shape(const LoadContext& c, ValueId id) {
  return id != kNoValue && !c.data_dependent(c.shape(id));
}

// An integer tensor whose elements, in row-major order, are start + delta * i: a Range, a
// weight holding such a progression (BERT's position_ids), a scalar constant, and reshapes
// and Slices of those.
struct Progression {
  DimExpr start, delta;
};
std::optional<Progression> progression(const LoadContext& c, ValueId id, int depth) {
  const Graph& g = c.graph;
  if (id == kNoValue || depth > 16 || !known_shape(c, id)) return std::nullopt;
  const Value& v = g.value(id);
  if (v.dtype != DType::Int64 && v.dtype != DType::Int32) return std::nullopt;
  if (v.data) {
    const int64_t n = v.data->numel();
    if (n == 0 || n > (int64_t{1} << 20)) return std::nullopt;
    const int64_t s = v.data->int_at(0);
    const std::optional<int64_t> d = n > 1 ? checked_add(v.data->int_at(1), -s) : std::optional<int64_t>(0);
    if (!d) return std::nullopt;
    for (int64_t k = 1; k < n; ++k) {
      auto step = checked_mul(*d, k);
      auto want = step ? checked_add(s, *step) : std::nullopt;
      if (!want || v.data->int_at(k) != *want) return std::nullopt;
    }
    return Progression{DimExpr(s), DimExpr(*d)};
  }
  const Node* p = producer_of(g, id);
  if (!p || p->outputs.size() != 1) return std::nullopt;
  if (p->op == OpKind::Range) {
    auto start = known_ints(g, p->input(0)), delta = known_ints(g, p->input(2));
    if (!start || !delta || start->size() != 1 || delta->size() != 1) return std::nullopt;
    if (c.data_dependent(Shape{Dim((*start)[0]), Dim((*delta)[0])})) return std::nullopt;
    return Progression{(*start)[0], (*delta)[0]};
  }
  if (is_reshaping(*p)) {
    if (p->inputs.empty() || !known_shape(c, p->inputs[0]) ||
        !sym::prove_equal(element_count(c.shape(p->inputs[0])), element_count(c.shape(id)), c.ranges))
      return std::nullopt;
    return progression(c, p->inputs[0], depth + 1);
  }
  if (p->op == OpKind::Slice) {
    // Output element i is input element offset + i * stride when at most one output dim
    // is not 1 (that dim's stride).
    auto l = slice_load(c, *p);
    if (!l) return std::nullopt;
    const Shape& out = c.shape(id);
    DimExpr stride(0);
    int long_dims = 0;
    for (size_t k = 0; k < out.size(); ++k)
      if (out[k]->constant() != 1) {
        ++long_dims;
        stride = l->strides[k];
      }
    if (long_dims > 1) return std::nullopt;
    auto inner = progression(c, p->inputs[0], depth + 1);
    if (!inner) return std::nullopt;
    try {
      return Progression{inner->start + inner->delta * l->offset, inner->delta * stride};
    } catch (const Diagnostic&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace

// Slice with starts, ends, axes and steps the compiler knows (numbers or expressions over
// input dims): the start of each sliced axis (ir/slice_bounds.h, as shape inference took its
// length) is the offset, the step scales the stride.
std::optional<StridedLoad> slice_load(const LoadContext& c, const Node& n) {
  const Graph& g = c.graph;
  if (n.op != OpKind::Slice || n.outputs.size() != 1 || !known_shape(c, n.input(0)) || !known_shape(c, n.outputs[0]))
    return std::nullopt;
  const Shape& in = c.shape(n.inputs[0]);
  const Shape& out = c.shape(n.outputs[0]);
  if (in.size() != out.size()) return std::nullopt;
  std::optional<std::vector<DimExpr>> starts, ends, axes, steps;
  auto exprs = [](const std::vector<int64_t>& v) { return std::vector<DimExpr>(v.begin(), v.end()); };
  if (n.opset > 0 && n.opset < 10) {
    auto s = n.attr_ints("starts"), e = n.attr_ints("ends");
    if (!s || !e) return std::nullopt;
    starts = exprs(*s);
    ends = exprs(*e);
    if (auto a = n.attr_ints("axes")) axes = exprs(*a);
  } else {
    starts = known_ints(g, n.input(1));
    ends = known_ints(g, n.input(2));
    if (n.input(3) != kNoValue && !(axes = known_ints(g, n.input(3)))) return std::nullopt;
    if (n.input(4) != kNoValue && !(steps = known_ints(g, n.input(4)))) return std::nullopt;
  }
  if (!starts || !ends || starts->size() != ends->size() || c.data_dependent(Shape(starts->begin(), starts->end())) ||
      c.data_dependent(Shape(ends->begin(), ends->end())))
    return std::nullopt;
  const size_t count = starts->size();
  if ((axes && axes->size() != count) || (steps && steps->size() != count)) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(in.size());
  const std::vector<DimExpr> in_strides = row_major_strides(in);
  StridedLoad l{n.inputs[0], DimExpr(0), in_strides};
  std::vector<bool> sliced(in.size(), false);
  for (size_t i = 0; i < count; ++i) {
    int64_t axis = static_cast<int64_t>(i);
    if (axes) {
      auto c = (*axes)[i].constant();
      if (!c) return std::nullopt;
      axis = *c < 0 ? *c + rank : *c;
    }
    if (axis < 0 || axis >= rank || sliced[static_cast<size_t>(axis)]) return std::nullopt;
    sliced[static_cast<size_t>(axis)] = true;
    int64_t step = 1;
    if (steps) {
      auto c = (*steps)[i].constant();
      if (!c || *c == 0 || *c == INT64_MIN) return std::nullopt;
      step = *c;
    }
    const size_t a = static_cast<size_t>(axis);
    std::optional<sym::SliceAxis> taken;
    try {
      taken = sym::slice_axis(*in[a], (*starts)[i], (*ends)[i], step, c.ranges);
      if (!taken || !sym::prove_equal(taken->length, *out[a], c.ranges)) return std::nullopt;
      l.offset = l.offset + taken->start * in_strides[a];
      l.strides[a] = in_strides[a] * DimExpr(step);
    } catch (const Diagnostic&) {
      return std::nullopt;  // bound arithmetic of hostile constants overflows: the kernel's work
    }
  }
  for (size_t k = 0; k < in.size(); ++k)
    if (!sliced[k] && !sym::prove_equal(*in[k], *out[k], c.ranges)) return std::nullopt;
  return l;
}

// Gather whose indices are a progression: index i reads slab start + delta * i of the data
// along `axis`. Gather's negative indices wrap, so the start must be provably >= 0 and the
// delta a constant >= 0; an index past the axis must fail as the kernel does, which the
// run-time bound proof of the map does for axis 0 (it leaves the tensor), and for other
// axes the last index is proven inside the axis here.
std::optional<StridedLoad> gather_load(const LoadContext& c, const Node& n) {
  if (n.op != OpKind::Gather || n.inputs.size() != 2 || n.outputs.size() != 1 || !known_shape(c, n.input(0)) ||
      !known_shape(c, n.input(1)) || !known_shape(c, n.outputs[0]))
    return std::nullopt;
  const Shape& data = c.shape(n.inputs[0]);
  const Shape& idx = c.shape(n.inputs[1]);
  const Shape& out = c.shape(n.outputs[0]);
  const int64_t rank = static_cast<int64_t>(data.size());
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank || out.size() != data.size() - 1 + idx.size()) return std::nullopt;
  const size_t a = static_cast<size_t>(axis);
  auto p = progression(c, n.inputs[1], 0);
  if (!p) return std::nullopt;
  auto delta = p->delta.constant();
  if (!delta || *delta < 0 || sym::bounds(p->start, c.ranges).lo < 0) return std::nullopt;
  try {
    if (a != 0) {
      const DimExpr last = p->start + p->delta * (element_count(idx) - DimExpr(1));
      if (!sym::prove_less(last, *data[a], c.ranges)) return std::nullopt;
    }
    const std::vector<DimExpr> data_strides = row_major_strides(data), idx_strides = row_major_strides(idx);
    StridedLoad l{n.inputs[0], p->start * data_strides[a], {}};
    for (size_t k = 0; k < a; ++k) l.strides.push_back(data_strides[k]);
    for (const DimExpr& st : idx_strides) l.strides.push_back(p->delta * st * data_strides[a]);
    for (size_t k = a + 1; k < data.size(); ++k) l.strides.push_back(data_strides[k]);
    return l;
  } catch (const Diagnostic&) {
    return std::nullopt;
  }
}

std::optional<StridedLoad> strided_load(const LoadContext& c, const Node& n) {
  if (n.op == OpKind::Slice) return slice_load(c, n);
  if (n.op == OpKind::Gather) return gather_load(c, n);
  return std::nullopt;
}

// A value that only reshapes another (Reshape/Flatten/Squeeze/Unsqueeze chains with the
// element count proven): an elementwise kernel loads the original tensor with the value's
// own shape, since a reshape keeps row-major order, so the reshapes (int64 attention masks
// before their Cast) are not run-time work.
ValueId reshape_source(const LoadContext& c, ValueId v) {
  const Graph& g = c.graph;
  for (int depth = 0; depth < 16 && v != kNoValue && known_shape(c, v); ++depth) {
    const Node* p = producer_of(g, v);
    if (!p || !is_reshaping(*p) || p->outputs.size() != 1 || p->inputs.empty()) break;
    const ValueId in = p->inputs[0];
    if (!known_shape(c, in) || g.value(in).dtype != g.value(v).dtype ||
        !sym::prove_equal(element_count(c.shape(in)), element_count(c.shape(v)), c.ranges))
      break;
    v = in;
  }
  return v;
}


}  // namespace cuvil::codegen
