// Helpers every graph-rewriting pass shares: where a value is read, rewiring its readers,
// deleting nodes and recomputing producers. "Read" covers node inputs, the graph's outputs and
// the captures of direct subgraphs (a deeper subgraph captures through its parent's capture).
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace cuvil {

struct Uses {
  std::vector<size_t> nodes;  // node indices, once per reading input
  int outputs = 0;            // times it is a graph output
  int captures = 0;           // direct subgraphs that capture it
  bool any() const { return !nodes.empty() || outputs || captures; }
};

Uses uses_of(const Graph& g, ValueId v);
// Every value of `g` that is read (node input, graph output, captured by a direct subgraph).
std::vector<bool> read_values(const Graph& g);
// Points every node input and every subgraph capture that reads `from` at `to` instead
// (graph outputs are left alone: callers decide what a graph output may become).
void replace_uses(Graph& g, ValueId from, ValueId to);
void refresh_producers(Graph& g);
void erase_nodes(Graph& g, const std::set<size_t>& dead);
// A node of `op` with op_type, domain and opset filled from the op table (an internal op of
// domain "cuvil" is version 1; an ONNX op gets `opset`), named `name`, no inputs or outputs.
Node make_node(OpKind op, std::string name, int opset = 1);
// `base`, or `base_1`, `base_2`, ...: the first name no value of `g` has.
std::string unique_value_name(const Graph& g, const std::string& base);
// A new initializer of `g` named unique_value_name(g, base), holding `bytes` (little-endian
// elements of dtype, dims' product of them) with a static shape.
ValueId add_initializer(Graph& g, const std::string& base, DType dtype, const std::vector<int64_t>& dims,
                        std::vector<uint8_t> bytes);
// Calls fn on every subgraph held by the nodes of `g` (not recursively).
void for_each_subgraph(Graph& g, const std::function<void(Graph&)>& fn);

}  // namespace cuvil
