#include "passes/infer_shapes.h"

#include "passes/shape/infer.h"

namespace cuvil {
namespace shape {
namespace {

constexpr int kMaxSubgraphDepth = 64;

void infer_graph(InferState& state, Graph& graph) {
  if (state.depth > kMaxSubgraphDepth)
    fail(ExitCode::kInvalidModel, "subgraph '", graph.name, "' is nested more than ",
         kMaxSubgraphDepth, " levels deep");
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
  infer_graph(state_, body);
  --state_.depth;
}

}  // namespace shape

void infer_shapes(Model& model) {
  shape::InferState state;
  state.model = &model;
  shape::infer_graph(state, *model.graph);
}

namespace {
void cover(const Graph& g, ShapeCoverage& c, size_t max_listed) {
  for (const Value& v : g.values) {
    if (v.kind != ValueKind::Tensor) continue;
    ++c.values;
    if (v.shape_known()) {
      ++c.fully_known;
    } else if (c.unknown.size() < max_listed) {
      std::string where = g.name + "/" + v.name;
      if (v.producer >= 0) {
        const Node& n = g.nodes[static_cast<size_t>(v.producer)];
        where += " (" + n.op_type + " '" + n.name + "')";
      }
      c.unknown.push_back(where);
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
