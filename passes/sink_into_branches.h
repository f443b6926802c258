// Pass: If outputs whose branches give different ranks.
//
// Shape inference leaves such an output rank-unknown (which branch runs is known only at run
// time), and a package tensor has one rank. This pass moves the nodes after the If that
// depend on its outputs into both branches (cloned, with captures for the other values they
// read), so each branch computes the rest of its graph with ranks it knows; the If's outputs
// become the graph outputs those nodes produce. Shapes are then inferred again. A value that
// reaches a graph output with a rank that still differs stays rank-unknown (code generation
// refuses it, naming the If). Ifs are taken one at a time, first to last, then inside the
// branches, in rounds with shapes inferred after each: a second such If after the first ends
// up in both of its branches and is taken in the next round. The pass stops growing the model
// at limits.max_nodes and after limits.max_nesting_depth rounds (what is left is refused the
// same way).
// Requires: infer_shapes (and fold-constants first, so Ifs on frozen inputs are gone).
// After: a verified model with shapes inferred.
#pragma once

#include <cstdint>

#include "ir/graph.h"
#include "support/limits.h"

namespace cuvil {

// Returns how many Ifs had nodes moved into their branches.
int64_t sink_into_branches(Model& model, const CompileLimits& limits);

}  // namespace cuvil
