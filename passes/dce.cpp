// Pass: dead code elimination (passes/dce.h).
#include "passes/dce.h"

#include "passes/graph_edit.h"

namespace cuvil {
namespace {

// Captures of the subgraphs a node holds, as values of the graph the node is in.
template <typename Fn>
void for_each_captured(const Node& n, Fn&& fn) {
  auto visit = [&](const Graph& s) {
    for (ValueId c : s.captures) fn(s.value(c).outer);
  };
  for (const auto& [key, a] : n.attrs) {
    if (a.g) visit(*a.g);
    for (const auto& sg : a.graphs) visit(*sg);
  }
}

void eliminate_in_graph(Graph& g) {
  for_each_subgraph(g, eliminate_in_graph);
  // Reader counts; walking backwards, a node whose outputs nobody reads dies and stops
  // reading its inputs. Readers come after producers, so one sweep removes whole dead chains.
  std::vector<int64_t> readers(g.values.size(), 0);
  for (const Node& n : g.nodes) {
    for (ValueId in : n.inputs)
      if (in != kNoValue) ++readers[static_cast<size_t>(in)];
    for_each_captured(n, [&](ValueId v) { ++readers[static_cast<size_t>(v)]; });
  }
  for (ValueId o : g.outputs) ++readers[static_cast<size_t>(o)];
  std::set<size_t> dead;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    bool used = false;
    for (ValueId o : n.outputs)
      if (o != kNoValue && readers[static_cast<size_t>(o)] > 0) used = true;
    if (used) continue;
    dead.insert(i);
    for (ValueId in : n.inputs)
      if (in != kNoValue) --readers[static_cast<size_t>(in)];
    for_each_captured(n, [&](ValueId v) { --readers[static_cast<size_t>(v)]; });
  }
  erase_nodes(g, dead);
  for (size_t v = 0; v < g.values.size(); ++v) {
    Value& value = g.values[v];
    if (value.is_initializer && readers[v] == 0) {
      value.is_initializer = false;
      value.data.reset();
    }
  }
}

}  // namespace

void eliminate_dead_code(Model& model) { eliminate_in_graph(*model.graph); }

}  // namespace cuvil
