// Pass: common subexpression elimination.
//
// Rewrites: two nodes with the same op, opset, attributes and inputs compute the same values;
// the later one goes and its readers read the earlier one's outputs. Small initializers with
// the same dtype, dims and bytes (exporters write a fresh Constant 2.0 or [-1] per use) become
// one, which lets more nodes match. Random ops and nodes holding subgraphs are left alone, and
// so is a node whose outputs are graph outputs (the output keeps its producer). One sweep in
// topological order reaches the fixed point: a node's inputs are merged before it is looked at.
// Requires: a verified model. After: a verified model; merged initializers nothing reads are
// left for eliminate_dead_code.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace cuvil {

// Returns the number of nodes and initializers merged.
int64_t eliminate_common_subexpressions(Model& model);

}  // namespace cuvil
