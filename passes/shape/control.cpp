// Shape rules for control flow (ONNX opsets 1..21): If, Loop and Scan. Each rule sets the
// body graph's inputs, runs shape inference on the body (InferContext::infer_subgraph) and
// derives the node's outputs from the body's outputs. Extents that differ between If branches
// or between loop iterations are data-dependent and get fresh symbols; nothing is assumed
// equal unless proven. Loop-carried (and Scan state) values reach a fixed point: a body input
// starts with the initial value's shape and is widened where the body's output disagrees
// (first to a fresh per-iteration symbol, then to unknown), then the body is inferred again.
// Symbols minted while inferring a body are per-iteration facts, so stacked scan outputs and
// final values never mention them.
// Bounded: nested loops would re-infer inner bodies at every pass of every enclosing loop
// (passes^depth). All fixpoints share one budget of rule applications (InferState,
// widen_at_once): once it is spent, a fixpoint binds its carried values as rank-unknown, which
// is a fixed point after one pass, so every enclosing loop finishes with one more pass each.
#include <functional>
#include <map>
#include <set>

#include "passes/shape/infer.h"

namespace cuvil::shape {
namespace {

// Widening passes before every carried value is made rank-unknown (a fixed point).
constexpr int kMaxCarriedPasses = 4;

Graph& subgraph_attr(const InferContext& ctx, const char* key) {
  const Attribute* a = ctx.node().attr(key);
  if (!a) ctx.fail("required attribute '", key, "' is missing");
  if (a->kind != Attribute::Kind::Graph || !a->g)
    ctx.fail("attribute '", key, "' must be a graph, got ", attribute_kind_name(a->kind));
  return *a->g;
}

bool same_dim(const Dim& a, const Dim& b) {
  return a.has_value() == b.has_value() && (!a || *a == *b);
}

bool same_shape(const std::optional<Shape>& a, const std::optional<Shape>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  if (a->size() != b->size()) return false;
  for (size_t i = 0; i < a->size(); ++i)
    if (!same_dim((*a)[i], (*b)[i])) return false;
  return true;
}

// Sets a node output from a value computed in a body (kind, dtype, shape).
void set_output_like(InferContext& ctx, size_t i, ValueKind kind, DType dtype,
                     std::optional<Shape> shape) {
  if (kind == ValueKind::Tensor) {
    ctx.set_output(i, dtype, std::move(shape));
    return;
  }
  if (Value* v = ctx.output(i)) {
    v->kind = kind;
    v->dtype = dtype;
    v->shape.reset();
  }
}

// Sets a body input before inference; the contents vary per iteration, so no data.
void bind_body_input(Graph& body, size_t index, ValueKind kind, DType dtype,
                     std::optional<Shape> shape) {
  Value& v = body.value(body.inputs[index]);
  v.kind = kind;
  v.dtype = dtype;
  v.shape = kind == ValueKind::Tensor ? std::move(shape) : std::nullopt;
  v.data.reset();
  v.sym_data.reset();
}

// The symbols that exist before a body is inferred, as a watermark on the order in which
// symbols are minted; any symbol minted later is per-iteration.
int64_t known_symbols(const InferContext& ctx) {
  return static_cast<int64_t>(ctx.state().minted.size());
}

// Rewrites dims that mention a per-iteration symbol into fresh symbols for a value that
// exists once per node (a stacked scan output, a final carried value). One fresh symbol per
// distinct expression, so equal dims stay equal.
class LocalSymbolLifter {
 public:
  LocalSymbolLifter(InferContext& ctx, int64_t outer, std::string hint)
      : ctx_(ctx), outer_(outer), hint_(std::move(hint)) {}

  Dim lift(const Dim& d) {
    if (!d) return d;
    bool local = false;
    const auto& minted = ctx_.state().minted;
    for (const std::string& s : d->symbols()) {
      auto it = minted.find(s);
      if (it != minted.end() && it->second >= outer_) local = true;
    }
    if (!local) return d;
    auto it = memo_.find(*d);
    if (it != memo_.end()) return it->second;
    DimExpr fresh = ctx_.data_dependent_dim(hint_);
    memo_.emplace(*d, fresh);
    return fresh;
  }
  std::optional<Shape> lift(const std::optional<Shape>& s) {
    if (!s) return s;
    Shape out;
    for (const Dim& d : *s) out.push_back(lift(d));
    return out;
  }

 private:
  InferContext& ctx_;
  int64_t outer_;  // serial of the first per-iteration symbol
  std::string hint_;
  std::map<DimExpr, DimExpr> memo_;
};

// One carried value: its initial kind/dtype/shape as seen by the body.
struct Carried {
  std::string name;
  ValueKind kind = ValueKind::Tensor;
  DType dtype = DType::Undefined;
  std::optional<Shape> shape;
};

// Infers `body` until the carried inputs' shapes cover every iteration. Carried value i is body
// input `first_in + i` and body output `first_out + i`; `bind_fixed` sets the other body
// inputs before each pass. Returns the carried shapes of the fixed point.
std::vector<std::optional<Shape>> infer_carried(InferContext& ctx, Graph& body, size_t first_in,
                                                size_t first_out,
                                                const std::vector<Carried>& carried,
                                                const std::function<void()>& bind_fixed,
                                                const char* hint) {
  std::vector<std::optional<Shape>> shapes;
  for (const Carried& c : carried)
    shapes.push_back(c.kind == ValueKind::Tensor ? c.shape : std::nullopt);
  // Rank-unknown carried values are a fixed point: one pass settles them.
  bool general = false;
  auto widen_to_general = [&] {
    for (auto& s : shapes) s.reset();
    general = true;
  };
  if (ctx.state().widen_at_once()) {
    widen_to_general();
    ctx.state().stats.budget_spent = true;
  }
  for (int pass = 0;; ++pass) {
    bind_fixed();
    for (size_t i = 0; i < carried.size(); ++i)
      bind_body_input(body, first_in + i, carried[i].kind, carried[i].dtype, shapes[i]);
    ctx.infer_subgraph(body);
    if (general) break;
    bool changed = false;
    for (size_t i = 0; i < carried.size(); ++i) {
      const Value& out = body.value(body.outputs[first_out + i]);
      if (carried[i].dtype != DType::Undefined && out.dtype != DType::Undefined &&
          out.dtype != carried[i].dtype)
        ctx.fail("body output '", out.name, "' has dtype ", dtype_name(out.dtype),
                 " but carried value '", carried[i].name, "' has ", dtype_name(carried[i].dtype));
      std::optional<Shape> widened;
      const std::optional<Shape>& in = shapes[i];
      if (in && out.shape && out.shape->size() == in->size()) {
        widened = Shape();
        for (size_t k = 0; k < in->size(); ++k) {
          const Dim& a = (*in)[k];
          const Dim& b = (*out.shape)[k];
          if (a && b && sym::prove_equal(*a, *b, ctx.ranges()))
            widened->push_back(a);
          else if (a && pass == 0)
            widened->push_back(ctx.data_dependent_dim(hint));
          else
            widened->push_back(std::nullopt);
        }
      }
      if (!same_shape(widened, in)) {
        shapes[i] = std::move(widened);
        changed = true;
      }
    }
    if (!changed) break;
    if (pass == kMaxCarriedPasses) {
      widen_to_general();
    } else if (ctx.state().widen_at_once()) {
      widen_to_general();
      ctx.state().stats.budget_spent = true;
    }
  }
  return shapes;
}

// The final value of a carried variable: its initial dims where every iteration kept them,
// a fresh symbol where some iteration may change them.
std::optional<Shape> final_carried_shape(InferContext& ctx, const Carried& c,
                                         const std::optional<Shape>& fixed_point,
                                         const char* hint) {
  if (!c.shape || !fixed_point || fixed_point->size() != c.shape->size()) return std::nullopt;
  Shape out;
  for (size_t k = 0; k < c.shape->size(); ++k) {
    const Dim& init = (*c.shape)[k];
    const Dim& fixed = (*fixed_point)[k];
    if (!init)
      out.push_back(std::nullopt);  // unknown before the loop, unknown after
    else if (fixed && *init == *fixed)
      out.push_back(init);
    else
      out.push_back(ctx.data_dependent_dim(hint));
  }
  return out;
}

Carried carried_from(const Value& v) { return Carried{v.name, v.kind, v.dtype, v.shape}; }

// A non-negative trip count from M: max(M, 0) unless M is provably non-negative.
DimExpr trip_count_from(const InferContext& ctx, const DimExpr& m) {
  if (auto c = m.constant()) return DimExpr(std::max<int64_t>(*c, 0));
  if (sym::prove_less_equal(DimExpr(0), m, ctx.ranges())) return m;
  return sym::max(m, DimExpr(0));
}

// A control-flow scalar (If and Loop conditions, the Loop trip count) must be one element of
// the ONNX dtype. Refused here when provably not (exit 3): a tensor of another kind or dtype, or
// a constant extent other than 1. An extent still unknown is left to lowering, which needs it
// to be known as 1 (the package verifier's scalar operands) and refuses it with exit 4, so
// inference and `--emit ir` still work on such models.
void require_one_element(const InferContext& ctx, const Value& v, const char* what, DType want) {
  if (v.kind != ValueKind::Tensor)
    ctx.fail(what, " '", v.name, "' is a ", value_kind_name(v.kind), ", expected a ",
             dtype_name(want), " tensor");
  if (v.dtype != DType::Undefined && v.dtype != want)
    ctx.fail(what, " '", v.name, "' has dtype ", dtype_name(v.dtype), ", expected ", dtype_name(want));
  if (!v.shape) return;
  for (size_t k = 0; k < v.shape->size(); ++k) {
    const Dim& d = (*v.shape)[k];
    if (d && d->constant() && *d->constant() != 1)
      ctx.fail(what, " '", v.name, "' has ", *d->constant(), " entries along axis ", k,
               "; it must have exactly one element");
  }
}

// A body input whose declared element type disagrees with what the node feeds it (ONNX
// requires them to agree). Inference binds the fed type over the declared one, so this is
// checked on the declared type before the first binding; later passes see the bound type.
void require_body_input_dtype(const InferContext& ctx, const Graph& body, size_t index, DType fed,
                              const std::string& fed_by) {
  const Value& v = body.value(body.inputs[index]);
  if (v.kind == ValueKind::Tensor && v.dtype != DType::Undefined && fed != DType::Undefined &&
      v.dtype != fed)
    ctx.fail("body input '", v.name, "' is declared ", dtype_name(v.dtype), " but ", fed_by,
             " is ", dtype_name(fed));
}

void require_body_arity(const InferContext& ctx, const Graph& body, const char* key, size_t inputs,
                        size_t min_outputs) {
  if (body.inputs.size() != inputs)
    ctx.fail("attribute '", key, "' graph has ", body.inputs.size(), " inputs, expected ", inputs);
  if (body.outputs.size() < min_outputs)
    ctx.fail("attribute '", key, "' graph has ", body.outputs.size(),
             " outputs, expected at least ", min_outputs);
}

}  // namespace

void infer_if_op(InferContext& ctx) {
  if (ctx.num_inputs() != 1)
    ctx.fail("If has ", ctx.num_inputs(), " inputs, expected 1 (the condition)");
  if (!ctx.has_input(0)) ctx.fail("the condition (input 0) is missing");
  require_one_element(ctx, *ctx.input(0), "condition", DType::Bool);
  Graph& then_g = subgraph_attr(ctx, "then_branch");
  Graph& else_g = subgraph_attr(ctx, "else_branch");
  for (Graph* g : {&then_g, &else_g}) {
    if (!g->inputs.empty())
      ctx.fail("branch '", g->name, "' declares ", g->inputs.size(),
               " inputs; If branches take none (they read enclosing values directly)");
    if (g->outputs.size() != ctx.num_outputs())
      ctx.fail("branch '", g->name, "' has ", g->outputs.size(), " outputs but the node has ",
               ctx.num_outputs());
  }
  // A constant condition selects one branch; the other may not even be valid for these
  // shapes (exporters keep dead branches), so it is not inferred.
  std::optional<bool> taken;
  if (auto cond = ctx.const_ints(0); cond && cond->size() == 1) taken = (*cond)[0] != 0;
  if (!taken || *taken) ctx.infer_subgraph(then_g);
  if (!taken || !*taken) ctx.infer_subgraph(else_g);

  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    const Value& t = then_g.value(then_g.outputs[i]);
    const Value& e = else_g.value(else_g.outputs[i]);
    if (taken) {
      const Value& v = *taken ? t : e;
      set_output_like(ctx, i, v.kind, v.dtype, v.shape);
      if (Value* o = ctx.output(i); o && v.sym_data) o->sym_data = v.sym_data;
      continue;
    }
    if (t.kind != e.kind)
      ctx.fail("output ", i, " is a ", value_kind_name(t.kind), " in then_branch but a ",
               value_kind_name(e.kind), " in else_branch");
    if (t.dtype != DType::Undefined && e.dtype != DType::Undefined && t.dtype != e.dtype)
      ctx.fail("output ", i, " has dtype ", dtype_name(t.dtype), " in then_branch but ",
               dtype_name(e.dtype), " in else_branch");
    DType dtype = t.dtype != DType::Undefined ? t.dtype : e.dtype;
    std::optional<Shape> shape;
    if (t.shape && e.shape && t.shape->size() == e.shape->size()) {
      shape = Shape();
      for (size_t k = 0; k < t.shape->size(); ++k) {
        const Dim& a = (*t.shape)[k];
        const Dim& b = (*e.shape)[k];
        // Two known extents that may differ depend on the condition; an extent unknown in
        // either branch stays unknown.
        if (!a || !b)
          shape->push_back(std::nullopt);
        else if (sym::prove_equal(*a, *b, ctx.ranges()))
          shape->push_back(a);
        else
          shape->push_back(ctx.data_dependent_dim("if"));
      }
    }
    set_output_like(ctx, i, t.kind, dtype, std::move(shape));
    if (Value* o = ctx.output(i); o && t.sym_data && e.sym_data && *t.sym_data == *e.sym_data)
      o->sym_data = t.sym_data;
  }
}

void infer_loop(InferContext& ctx) {
  // Inputs: M (optional), cond (optional), v_initial...; body inputs: iteration_num, cond,
  // carried...; body outputs: cond, carried..., scan outputs...
  Graph& body = subgraph_attr(ctx, "body");
  if (ctx.num_inputs() < 2)
    ctx.fail("Loop has ", ctx.num_inputs(),
             " inputs, expected at least 2 (M and cond, possibly empty)");
  size_t n_carried = ctx.num_inputs() - 2;
  require_body_arity(ctx, body, "body", 2 + n_carried, 1 + n_carried);
  size_t n_scan = body.outputs.size() - 1 - n_carried;
  if (ctx.num_outputs() > n_carried + n_scan)
    ctx.fail("Loop has ", ctx.num_outputs(), " outputs but its body yields only ",
             n_carried + n_scan);

  if (const Value* m = ctx.input(0)) require_one_element(ctx, *m, "trip count", DType::Int64);
  if (const Value* c = ctx.input(1)) require_one_element(ctx, *c, "condition", DType::Bool);
  std::vector<Carried> carried;
  for (size_t i = 0; i < n_carried; ++i) carried.push_back(carried_from(ctx.required_input(2 + i)));
  require_body_input_dtype(ctx, body, 0, DType::Int64, "the iteration number");
  require_body_input_dtype(ctx, body, 1, DType::Bool, "the condition");
  for (size_t i = 0; i < n_carried; ++i)
    require_body_input_dtype(ctx, body, 2 + i, carried[i].dtype, "carried value '" + carried[i].name + "'");
  const int64_t outer = known_symbols(ctx);
  auto bind_fixed = [&] {
    bind_body_input(body, 0, ValueKind::Tensor, DType::Int64, Shape{});
    bind_body_input(body, 1, ValueKind::Tensor, DType::Bool, Shape{});
  };
  auto fixed = infer_carried(ctx, body, 2, 1, carried, bind_fixed, "loop");
  require_one_element(ctx, body.value(body.outputs[0]), "body condition", DType::Bool);

  for (size_t i = 0; i < n_carried && i < ctx.num_outputs(); ++i) {
    const Value& out = body.value(body.outputs[1 + i]);
    DType dtype = carried[i].dtype != DType::Undefined ? carried[i].dtype : out.dtype;
    set_output_like(ctx, i, carried[i].kind, dtype,
                    final_carried_shape(ctx, carried[i], fixed[i], "loop"));
  }
  // The trip count is M only when nothing can stop the loop early: with the cond input
  // omitted the body's cond output is ignored (a for loop).
  Dim trip;
  if (ctx.has_input(0) && !ctx.has_input(1))
    if (auto m = ctx.sym_scalar(0)) trip = trip_count_from(ctx, *m);
  LocalSymbolLifter lifter(ctx, outer, "loop");
  for (size_t k = 0; k < n_scan && n_carried + k < ctx.num_outputs(); ++k) {
    if (!ctx.has_output(n_carried + k)) continue;
    const Value& out = body.value(body.outputs[1 + n_carried + k]);
    std::optional<Shape> shape = lifter.lift(out.shape);
    if (shape) {
      if (!trip) trip = ctx.data_dependent_dim("loop");
      shape->insert(shape->begin(), trip);
    }
    set_output_like(ctx, n_carried + k, out.kind, out.dtype, std::move(shape));
  }
}

void infer_scan(InferContext& ctx) {
  Graph& body = subgraph_attr(ctx, "body");
  const Attribute* m_attr = ctx.node().attr("num_scan_inputs");
  if (!m_attr) ctx.fail("required attribute 'num_scan_inputs' is missing");
  int64_t m = ctx.attr_int("num_scan_inputs", 0);
  bool v8 = ctx.node().opset < 9;
  size_t first_state = v8 ? 1 : 0;  // opset 8 starts with the optional sequence_lens
  if (m < 1 || static_cast<uint64_t>(m) + first_state > ctx.num_inputs())
    ctx.fail("attribute 'num_scan_inputs' is ", m, " but the node has ", ctx.num_inputs(),
             " inputs");
  size_t n_scan_in = static_cast<size_t>(m);
  size_t n_state = ctx.num_inputs() - first_state - n_scan_in;
  require_body_arity(ctx, body, "body", n_state + n_scan_in, n_state);
  size_t n_scan_out = body.outputs.size() - n_state;
  if (ctx.num_outputs() > n_state + n_scan_out)
    ctx.fail("Scan has ", ctx.num_outputs(), " outputs but its body yields only ",
             n_state + n_scan_out);

  // Per-input scan axes (opset 9+). Opset 8 scans axis 1, which is axis 0 once the batch
  // axis is stripped below.
  std::vector<int64_t> in_axes(n_scan_in, 0);
  if (!v8) {
    if (auto axes = ctx.attr_ints("scan_input_axes")) {
      if (axes->size() != n_scan_in)
        ctx.fail("attribute 'scan_input_axes' has ", axes->size(), " entries, expected ",
                 n_scan_in);
      in_axes = *axes;
    }
  }
  for (const char* key : {"directions", "scan_input_directions"}) {
    auto dirs = ctx.attr_ints(key);
    if (!dirs) continue;
    if (dirs->size() != n_scan_in)
      ctx.fail("attribute '", key, "' has ", dirs->size(), " entries, expected ", n_scan_in);
    for (int64_t d : *dirs)
      if (d != 0 && d != 1) ctx.fail("attribute '", key, "' entry ", d, " must be 0 or 1");
  }
  std::vector<int64_t> out_axes(n_scan_out, 0);
  if (!v8) {
    if (auto axes = ctx.attr_ints("scan_output_axes")) {
      if (axes->size() != n_scan_out)
        ctx.fail("attribute 'scan_output_axes' has ", axes->size(), " entries, expected ",
                 n_scan_out);
      out_axes = *axes;
    }
    if (auto dirs = ctx.attr_ints("scan_output_directions")) {
      if (dirs->size() != n_scan_out)
        ctx.fail("attribute 'scan_output_directions' has ", dirs->size(), " entries, expected ",
                 n_scan_out);
      for (int64_t d : *dirs)
        if (d != 0 && d != 1)
          ctx.fail("attribute 'scan_output_directions' entry ", d, " must be 0 or 1");
    }
  }

  // Opset 8: every state and scan input has a leading batch axis the body does not see.
  Dim batch;
  auto strip_batch = [&](const Value& v) -> std::optional<Shape> {
    if (!v8 || !v.shape) return v.shape;
    if (v.shape->empty())
      ctx.fail("input '", v.name, "' is a scalar but Scan-8 inputs have a batch axis");
    const Dim& b = v.shape->front();
    if (batch && b && sym::prove_not_equal(*batch, *b, ctx.ranges()))
      ctx.fail("input '", v.name, "' has batch size ", b->to_string(), " but the first input has ",
               batch->to_string(), " (Scan-8 inputs share their leading batch axis)");
    if (!batch) batch = b;
    return Shape(v.shape->begin() + 1, v.shape->end());
  };

  std::vector<Carried> state;
  for (size_t i = 0; i < n_state; ++i) {
    const Value& v = ctx.required_input(first_state + i);
    Carried c = carried_from(v);
    c.shape = strip_batch(v);
    state.push_back(c);
    require_body_input_dtype(ctx, body, i, c.dtype, "state '" + c.name + "'");
  }
  // Scan inputs: the body sees one slice, without the scan axis. The sequence length is the
  // scanned extent, shared by all scan inputs.
  Dim seq_len;
  std::vector<Carried> slices;
  for (size_t j = 0; j < n_scan_in; ++j) {
    const Value& v = ctx.required_input(first_state + n_state + j);
    Carried c = carried_from(v);
    require_body_input_dtype(ctx, body, n_state + j, c.dtype, "scan input '" + c.name + "'");
    c.shape = strip_batch(v);
    if (c.shape) {
      int64_t rank = static_cast<int64_t>(c.shape->size());
      int64_t axis = ctx.normalize_axis(in_axes[j], rank, "attribute 'scan_input_axes' entry");
      Dim len = (*c.shape)[static_cast<size_t>(axis)];
      if (len && seq_len && sym::prove_not_equal(*len, *seq_len, ctx.ranges()))
        ctx.fail("scan input '", v.name, "' has sequence length ", len->to_string(), ", expected ",
                 seq_len->to_string());
      if (!seq_len) seq_len = len;
      c.shape->erase(c.shape->begin() + axis);
    }
    slices.push_back(c);
  }

  const int64_t outer = known_symbols(ctx);
  auto bind_fixed = [&] {
    for (size_t j = 0; j < n_scan_in; ++j)
      bind_body_input(body, n_state + j, slices[j].kind, slices[j].dtype, slices[j].shape);
  };
  auto fixed = infer_carried(ctx, body, 0, 0, state, bind_fixed, "scan");

  auto add_batch = [&](std::optional<Shape> s) {
    if (v8 && s) s->insert(s->begin(), batch);
    return s;
  };
  for (size_t i = 0; i < n_state && i < ctx.num_outputs(); ++i) {
    const Value& out = body.value(body.outputs[i]);
    DType dtype = state[i].dtype != DType::Undefined ? state[i].dtype : out.dtype;
    set_output_like(ctx, i, state[i].kind, dtype,
                    add_batch(final_carried_shape(ctx, state[i], fixed[i], "scan")));
  }
  LocalSymbolLifter lifter(ctx, outer, "scan");
  for (size_t k = 0; k < n_scan_out && n_state + k < ctx.num_outputs(); ++k) {
    if (!ctx.has_output(n_state + k)) continue;
    const Value& out = body.value(body.outputs[n_state + k]);
    std::optional<Shape> shape = lifter.lift(out.shape);
    if (shape) {
      int64_t rank = static_cast<int64_t>(shape->size()) + 1;
      int64_t axis = ctx.normalize_axis(out_axes[k], rank, "attribute 'scan_output_axes' entry");
      shape->insert(shape->begin() + axis, seq_len);
    }
    set_output_like(ctx, n_state + k, out.kind, out.dtype, add_batch(std::move(shape)));
  }
}

}  // namespace cuvil::shape
