#include "passes/graph_edit.h"

namespace cuvil {
namespace {

template <typename G, typename Fn>
void each_subgraph(G& g, Fn&& fn) {
  for (auto& n : g.nodes)
    for (auto& [key, a] : n.attrs) {
      if (a.g) fn(*a.g);
      for (auto& sg : a.graphs) fn(*sg);
    }
}

}  // namespace

Uses uses_of(const Graph& g, ValueId v) {
  Uses u;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (ValueId in : g.nodes[i].inputs)
      if (in == v) u.nodes.push_back(i);
  each_subgraph(g, [&](const Graph& s) {
    for (ValueId c : s.captures)
      if (s.value(c).outer == v) u.captures++;
  });
  for (ValueId o : g.outputs)
    if (o == v) u.outputs++;
  return u;
}

std::vector<bool> read_values(const Graph& g) {
  std::vector<bool> read(g.values.size(), false);
  for (const Node& n : g.nodes)
    for (ValueId in : n.inputs)
      if (in != kNoValue) read[static_cast<size_t>(in)] = true;
  each_subgraph(g, [&](const Graph& s) {
    for (ValueId c : s.captures) {
      const ValueId outer = s.value(c).outer;
      if (outer >= 0 && static_cast<size_t>(outer) < read.size()) read[static_cast<size_t>(outer)] = true;
    }
  });
  for (ValueId o : g.outputs) read[static_cast<size_t>(o)] = true;
  return read;
}

void replace_uses(Graph& g, ValueId from, ValueId to) {
  for (Node& n : g.nodes)
    for (ValueId& in : n.inputs)
      if (in == from) in = to;
  each_subgraph(g, [&](Graph& s) {
    for (ValueId c : s.captures)
      if (s.value(c).outer == from) s.value(c).outer = to;
  });
}

void refresh_producers(Graph& g) {
  for (Value& v : g.values) v.producer = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (ValueId o : g.nodes[i].outputs)
      if (o != kNoValue) g.value(o).producer = static_cast<int32_t>(i);
}

void erase_nodes(Graph& g, const std::set<size_t>& dead) {
  if (dead.empty()) return;
  std::vector<Node> kept;
  kept.reserve(g.nodes.size() - dead.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!dead.count(i)) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  refresh_producers(g);
}

void for_each_subgraph(Graph& g, const std::function<void(Graph&)>& fn) { each_subgraph(g, fn); }

Node make_node(OpKind op, std::string name, int opset) {
  Node n;
  n.op = op;
  n.op_type = op_name(op);
  n.domain = op_domain(op);
  n.opset = n.domain == "cuvil" ? 1 : opset;
  n.name = std::move(name);
  return n;
}

std::string unique_value_name(const Graph& g, const std::string& base) {
  std::string name = base;
  for (int k = 1; g.find(name) != kNoValue; ++k) name = base + "_" + std::to_string(k);
  return name;
}

ValueId add_initializer(Graph& g, const std::string& base, DType dtype, const std::vector<int64_t>& dims,
                        std::vector<uint8_t> bytes) {
  auto data = std::make_shared<TensorData>();
  data->dtype = dtype;
  data->dims = dims;
  data->bytes = std::move(bytes);
  const ValueId id = g.add_value(unique_value_name(g, base));
  Value& v = g.value(id);
  v.dtype = dtype;
  Shape shape;
  for (int64_t d : dims) shape.push_back(DimExpr(d));
  v.shape = shape;
  v.data = data;
  v.is_initializer = true;
  return id;
}

}  // namespace cuvil
