// Pass: symbolic shape inference.
//
// Rewrites: sets dtype, shape and (for small integer tensors) symbolic contents of every value
// produced by a node, in every graph and subgraph, from the per-op rules in passes/shape/.
// Requires: an imported, verified Model (nodes in topological order). Graph inputs keep the
// shapes the model (or --dim) gave them; intermediate value_info from the model is ignored.
// After: every value whose shape the rules can determine has it; `count_unknown_shapes`
// reports the rest.
// Bounded: subgraphs nest at most limits.max_nesting_depth levels; a tensor whose element
// count is known (a constant shape) may not exceed limits.max_tensor_elements (both refuse,
// exit 4); symbolic contents are kept for at most limits.max_fold_elements elements (more
// stays run-time work). Loop/Scan fixpoints share one widening budget proportional to the
// model's node count: once it is spent, remaining carried values widen straight to unknown
// rank, so nested loops cost O(depth * nodes) rule applications instead of passes^depth.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "support/limits.h"

namespace cuvil {

// What one run of infer_shapes did, for tests and the resource-model measurements.
struct ShapeInferenceStats {
  int64_t rule_applications = 0;  // shape rules run, over all graphs and all passes
  int64_t body_inferences = 0;    // subgraph (If branch, Loop/Scan body) inferences
  int64_t widening_budget = 0;    // rule applications allowed before fixpoints widen at once
  bool budget_spent = false;      // some Loop/Scan widened to unknown rank because of the budget
};

ShapeInferenceStats infer_shapes(Model& model, const CompileLimits& limits = {});

struct ShapeCoverage {
  int values = 0;         // tensor values in all graphs
  int fully_known = 0;    // rank and every dim known
  // The others, first ones: "graph/value (Op 'node'): what is unknown; why" (the node's own
  // cause, or the input it inherits the gap from).
  std::vector<std::string> unknown;
};
ShapeCoverage shape_coverage(const Model& model, size_t max_listed = 20);

}  // namespace cuvil
