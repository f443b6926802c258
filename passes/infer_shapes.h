// Pass: symbolic shape inference.
//
// Rewrites: sets dtype, shape and (for small integer tensors) symbolic contents of every value
// produced by a node, in every graph and subgraph, from the per-op rules in passes/shape/.
// Requires: an imported, verified Model (nodes in topological order). Graph inputs keep the
// shapes the model (or --dim) gave them; intermediate value_info from the model is ignored.
// After: every value whose shape the rules can determine has it; `count_unknown_shapes`
// reports the rest.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace cuvil {

void infer_shapes(Model& model);

struct ShapeCoverage {
  int values = 0;         // tensor values in all graphs
  int fully_known = 0;    // rank and every dim known
  std::vector<std::string> unknown;  // "graph/value (op node)" for the others, first ones
};
ShapeCoverage shape_coverage(const Model& model, size_t max_listed = 20);

}  // namespace cuvil
