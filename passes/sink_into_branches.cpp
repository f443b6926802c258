// Pass: nodes after an If whose outputs differ in rank move into its branches
// (passes/sink_into_branches.h).
#include "passes/sink_into_branches.h"

#include <algorithm>
#include <map>
#include <set>

#include "passes/graph_edit.h"
#include "passes/infer_shapes.h"

namespace cuvil {
namespace {

// A copy of `g` whose subgraphs are copies too (a node cloned into two branches must not share
// its bodies: each graph has one parent).
std::shared_ptr<Graph> clone_graph(const Graph& g, Graph* parent) {
  auto copy = std::make_shared<Graph>(g);
  copy->parent = parent;
  for (Node& n : copy->nodes)
    for (auto& [key, a] : n.attrs) {
      if (a.g) a.g = clone_graph(*a.g, copy.get());
      for (auto& sub : a.graphs) sub = clone_graph(*sub, copy.get());
    }
  return copy;
}

Graph* branch(Node& n, const char* key) {
  Attribute* a = n.attrs.count(key) ? &n.attrs[key] : nullptr;
  return a && a->kind == Attribute::Kind::Graph && a->g ? a->g.get() : nullptr;
}

// An If with an output that is rank-unknown because its branches give different ranks.
bool ranks_differ(const Graph& g, Node& n) {
  if (n.op != OpKind::If) return false;
  Graph* t = branch(n, "then_branch");
  Graph* e = branch(n, "else_branch");
  if (!t || !e || t->outputs.size() != n.outputs.size() || e->outputs.size() != n.outputs.size()) return false;
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    if (n.outputs[k] == kNoValue || g.value(n.outputs[k]).shape) continue;
    const Value& a = t->value(t->outputs[k]);
    const Value& b = e->value(e->outputs[k]);
    if (a.shape && b.shape && a.shape->size() != b.shape->size()) return true;
  }
  return false;
}

// The values of `g` that a node reads: its inputs and what its subgraphs capture.
std::vector<ValueId> reads_of(const Node& n) {
  std::vector<ValueId> reads;
  for (ValueId in : n.inputs)
    if (in != kNoValue) reads.push_back(in);
  for (const auto& [key, a] : n.attrs) {
    std::vector<const Graph*> subs;
    if (a.g) subs.push_back(a.g.get());
    for (const auto& s : a.graphs) subs.push_back(s.get());
    for (const Graph* s : subs)
      for (ValueId c : s->captures) reads.push_back(s->value(c).outer);
  }
  return reads;
}

// Appends clones of `g`'s nodes `moved` to branch `b` (a subgraph of g), reading the branch's
// results where they read the If's outputs and capturing every other value of g they read.
// Returns the branch values of g's values in `escaping`, which become the branch's outputs.
std::vector<ValueId> sink(Graph& g, const Node& if_node, Graph& b, const std::vector<size_t>& moved,
                          const std::vector<ValueId>& escaping, const std::string& suffix) {
  std::map<ValueId, ValueId> local;  // value of g -> value of b
  for (size_t k = 0; k < if_node.outputs.size(); ++k)
    if (if_node.outputs[k] != kNoValue) local[if_node.outputs[k]] = b.outputs[k];
  for (ValueId c : b.captures) local.emplace(b.value(c).outer, c);
  auto map = [&](ValueId outer) {
    auto it = local.find(outer);
    if (it != local.end()) return it->second;
    const Value& v = g.value(outer);
    const ValueId c = b.add_value(unique_value_name(b, v.name));
    Value& cv = b.value(c);
    cv.kind = v.kind;
    cv.dtype = v.dtype;
    cv.shape = v.shape;
    cv.outer = outer;
    b.captures.push_back(c);
    local.emplace(outer, c);
    return c;
  };
  for (size_t i : moved) {
    const Node& n = g.nodes[i];
    Node copy = n;
    for (ValueId& in : copy.inputs)
      if (in != kNoValue) in = map(in);
    for (ValueId& o : copy.outputs) {
      if (o == kNoValue) continue;
      const ValueId id = b.add_value(unique_value_name(b, g.value(o).name + suffix));
      local[o] = id;
      o = id;
    }
    for (auto& [key, a] : copy.attrs) {
      std::vector<std::shared_ptr<Graph>*> subs;
      if (a.g) subs.push_back(&a.g);
      for (auto& s : a.graphs) subs.push_back(&s);
      for (std::shared_ptr<Graph>* s : subs) {
        *s = clone_graph(**s, &b);
        for (ValueId c : (*s)->captures) (*s)->value(c).outer = map((*s)->value(c).outer);
      }
    }
    b.nodes.push_back(std::move(copy));
  }
  refresh_producers(b);
  std::vector<ValueId> outputs;
  for (ValueId e : escaping) outputs.push_back(map(e));
  return outputs;
}

// Sinks the nodes after the first If of `g` whose ranks differ; true when it did.
bool sink_first(Graph& g, int64_t& budget) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!ranks_differ(g, g.nodes[i])) continue;
    std::set<ValueId> downstream;
    for (ValueId o : g.nodes[i].outputs)
      if (o != kNoValue) downstream.insert(o);
    std::vector<size_t> moved;
    for (size_t j = i + 1; j < g.nodes.size(); ++j) {
      bool depends = false;
      for (ValueId r : reads_of(g.nodes[j])) depends = depends || downstream.count(r);
      if (!depends) continue;
      moved.push_back(j);
      for (ValueId o : g.nodes[j].outputs)
        if (o != kNoValue) downstream.insert(o);
    }
    std::vector<ValueId> escaping;
    for (ValueId o : g.outputs)
      if (downstream.count(o) && std::find(escaping.begin(), escaping.end(), o) == escaping.end())
        escaping.push_back(o);
    const int64_t growth = static_cast<int64_t>(moved.size());
    if (moved.empty() || escaping.empty() || growth > budget) continue;
    budget -= growth;
    Node& n = g.nodes[i];
    for (const char* key : {"then_branch", "else_branch"}) {
      Graph& b = *branch(n, key);
      b.outputs = sink(g, n, b, moved, escaping, key[0] == 't' ? "_then" : "_else");
    }
    n.outputs = escaping;
    std::set<size_t> dead(moved.begin(), moved.end());
    erase_nodes(g, dead);
    // The branches now capture what the moved nodes read, which nodes after the If may make
    // (a Range that only a moved node reads): the If goes last. Nothing left in g reads its
    // outputs (every reader moved), so that keeps the order topological.
    std::rotate(g.nodes.begin() + static_cast<std::ptrdiff_t>(i), g.nodes.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                g.nodes.end());
    refresh_producers(g);
    return true;
  }
  return false;
}

int64_t sink_graph(Graph& g, int64_t& budget) {
  int64_t count = 0;
  while (sink_first(g, budget)) ++count;
  for_each_subgraph(g, [&](Graph& s) { count += sink_graph(s, budget); });
  return count;
}

}  // namespace

int64_t sink_into_branches(Model& model, const CompileLimits& limits) {
  int64_t budget = limits.max_nodes - count_nodes(*model.graph);
  int64_t total = 0;
  // A second such If moved into a branch shows its ranks only once the branch is inferred
  // again, so the pass goes in rounds. Each round moves nodes one If deeper; the node budget
  // and the nesting cap bound them.
  for (int64_t round = 0; round <= limits.max_nesting_depth; ++round) {
    const int64_t count = sink_graph(*model.graph, budget);
    if (!count) break;
    total += count;
    infer_shapes(model, limits);
  }
  return total;
}

}  // namespace cuvil
