#include "passes/infer_shapes.h"

#include <set>

#include "ir/unknown_shape.h"
#include "passes/shape/infer.h"
#include "support/checked.h"

namespace cuvil {
namespace shape {
namespace {

// Rule applications every node may cost before Loop/Scan fixpoints widen at once, plus a
// floor for small models: far above what ordinary nested loops need (each loop level takes one
// to three passes), far below passes^depth for a deep nest.
constexpr int64_t kWideningPassesPerNode = 64;
constexpr int64_t kWideningFloor = 1 << 16;

// A tensor whose element count is known at compile time (every dim a constant) may not
// exceed max_tensor_elements: the runtime would be asked to allocate it.
void check_output_elements(const InferState& state, const Graph& graph, const Node& node) {
  for (ValueId out : node.outputs) {
    if (out == kNoValue) continue;
    const Value& v = graph.value(out);
    if (v.kind != ValueKind::Tensor || !v.shape) continue;
    int64_t numel = 1;
    bool known = true;
    for (const Dim& d : *v.shape) {
      auto c = d ? d->constant() : std::nullopt;
      if (!c || *c < 0) {
        known = false;
        break;
      }
      auto m = checked_mul(numel, *c);
      numel = m ? *m : INT64_MAX;
    }
    if (known && numel > state.limits.max_tensor_elements)
      limit_exceeded(LimitId::max_tensor_elements, state.limits,
                     "node '" + node.name + "' (" + node.op_type + ") in graph '" + graph.name +
                         "': output '" + v.name + "' has " +
                         (numel == INT64_MAX ? std::string("more than 2^63") : std::to_string(numel)) +
                         " elements");
  }
}

void infer_graph(InferState& state, Graph& graph) {
  // The frontend enforces the same cap on the imported model; this guards models built or
  // rewritten in memory.
  if (state.depth > state.limits.max_nesting_depth)
    limit_exceeded(LimitId::max_nesting_depth, state.limits,
                   "subgraph '" + graph.name + "' nested " + std::to_string(state.depth) + " levels deep");
  for (Node& node : graph.nodes) {
    // Forget exporter value_info: outputs are what our rules derive, nothing else.
    for (ValueId out : node.outputs) {
      if (out == kNoValue) continue;
      Value& v = graph.value(out);
      v.shape.reset();
      v.sym_data.reset();
      if (v.kind == ValueKind::Tensor) v.dtype = DType::Undefined;
    }
    if (node.op == OpKind::Unknown) continue;
    ++state.stats.rule_applications;
    InferContext ctx(state, graph, node);
    try {
      rule_for(node.op)(ctx);
    } catch (const Diagnostic& d) {
      // Dim arithmetic deep inside a rule (overflow, division by zero) cannot know the node;
      // name it here unless the rule already did.
      const std::string msg = d.what();
      if (msg.find("'" + node.name + "'") != std::string::npos) throw;
      throw Diagnostic(d.code(), "node '" + node.name + "' (" + node.op_type + "): " + msg);
    }
    check_output_elements(state, graph, node);
  }
}

}  // namespace

void InferContext::infer_subgraph(Graph& body) {
  for (ValueId c : body.captures) {
    Value& local = body.value(c);
    CUVIL_ASSERT(body.parent, "capture in a graph without parent");
    const Value& outer = body.parent->value(local.outer);
    local.kind = outer.kind;
    local.dtype = outer.dtype;
    local.shape = outer.shape;
    local.data = outer.data;
    local.sym_data = outer.sym_data;
  }
  ++state_.depth;
  ++state_.stats.body_inferences;
  infer_graph(state_, body);
  --state_.depth;
}

}  // namespace shape

ShapeInferenceStats infer_shapes(Model& model, const CompileLimits& limits) {
  shape::InferState state;
  state.model = &model;
  state.limits = limits;
  int64_t nodes = count_nodes(*model.graph);
  state.stats.widening_budget =
      checked_add(checked_mul(nodes, shape::kWideningPassesPerNode).value_or(INT64_MAX / 2),
                  shape::kWideningFloor)
          .value_or(INT64_MAX);
  shape::infer_graph(state, *model.graph);
  return state.stats;
}

namespace {

void cover(const Graph& g, ShapeCoverage& c, size_t max_listed) {
  std::set<ValueId> inputs(g.inputs.begin(), g.inputs.end());
  for (ValueId id = 0; id < static_cast<ValueId>(g.values.size()); ++id) {
    const Value& v = g.value(id);
    if (v.kind != ValueKind::Tensor) continue;
    // A value nothing defines any more (its node moved or went) is no value of the graph.
    if (v.producer < 0 && !v.is_initializer && v.outer == kNoValue && !inputs.count(id)) continue;
    ++c.values;
    if (v.shape_known()) {
      ++c.fully_known;
    } else if (c.unknown.size() < max_listed) {
      std::string where = g.name + "/" + v.name;
      if (v.producer >= 0) {
        const Node& n = g.nodes[static_cast<size_t>(v.producer)];
        where += " (" + n.op_type + " '" + n.name + "')";
      }
      c.unknown.push_back(where + ": " + what_is_unknown(v) + "; " + why_shape_unknown(g, v));
    }
  }
  for (const Node& n : g.nodes)
    for (const auto& [key, a] : n.attrs) {
      if (a.g) cover(*a.g, c, max_listed);
      for (const auto& sub : a.graphs) cover(*sub, c, max_listed);
    }
}
}  // namespace

ShapeCoverage shape_coverage(const Model& model, size_t max_listed) {
  ShapeCoverage c;
  cover(*model.graph, c, max_listed);
  return c;
}

}  // namespace cuvil
