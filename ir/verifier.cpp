#include "ir/verifier.h"

#include <vector>

#include "support/error.h"

namespace cuvil {
namespace {

void verify_graph(const Graph& g, int depth) {
  CUVIL_ASSERT(depth < 256, "graph nesting too deep");
  const ValueId count = static_cast<ValueId>(g.values.size());
  std::vector<bool> defined(g.values.size(), false);
  auto check_id = [&](ValueId id, const char* what) {
    CUVIL_ASSERT(id >= 0 && id < count, "graph '" << g.name << "': " << what << " id " << id
                                                  << " out of range");
  };
  for (ValueId id : g.inputs) {
    check_id(id, "input");
    defined[id] = true;
  }
  for (ValueId id = 0; id < count; ++id) {
    const Value& v = g.value(id);
    if (v.is_initializer) {
      CUVIL_ASSERT(v.data, "initializer '" << v.name << "' has no data");
      CUVIL_ASSERT(v.producer < 0, "initializer '" << v.name << "' also has a producer");
      defined[id] = true;
    }
  }
  for (ValueId id : g.captures) {
    check_id(id, "capture");
    const Value& v = g.value(id);
    CUVIL_ASSERT(g.parent, "capture '" << v.name << "' in a graph without parent");
    CUVIL_ASSERT(v.outer >= 0 && v.outer < static_cast<ValueId>(g.parent->values.size()),
                 "capture '" << v.name << "' points outside the parent graph");
    defined[id] = true;
  }
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    for (ValueId in : n.inputs) {
      if (in == kNoValue) continue;
      check_id(in, "node input");
      CUVIL_ASSERT(defined[in], "node '" << n.name << "' reads '" << g.value(in).name
                                         << "' before it is defined");
    }
    for (ValueId out : n.outputs) {
      if (out == kNoValue) continue;
      check_id(out, "node output");
      CUVIL_ASSERT(!defined[out], "value '" << g.value(out).name << "' is defined twice");
      CUVIL_ASSERT(g.value(out).producer == static_cast<int32_t>(ni),
                   "value '" << g.value(out).name << "' has the wrong producer");
      defined[out] = true;
    }
    for (const auto& [key, a] : n.attrs) {
      if (a.g) {
        CUVIL_ASSERT(a.g->parent == &g, "subgraph of '" << n.name << "' has the wrong parent");
        verify_graph(*a.g, depth + 1);
      }
      for (const auto& sg : a.graphs) {
        CUVIL_ASSERT(sg->parent == &g, "subgraph of '" << n.name << "' has the wrong parent");
        verify_graph(*sg, depth + 1);
      }
    }
  }
  for (ValueId out : g.outputs) {
    check_id(out, "graph output");
    CUVIL_ASSERT(defined[out], "graph output '" << g.value(out).name << "' is never defined");
  }
}

}  // namespace

void verify_model(const Model& model) {
  CUVIL_ASSERT(model.graph, "model has no graph");
  CUVIL_ASSERT(!model.graph->parent, "main graph has a parent");
  verify_graph(*model.graph, 0);
}

}  // namespace cuvil
