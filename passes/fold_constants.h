// Pass: constant folding.
//
// Rewrites: every node whose outputs can all be known at compile time becomes initializers
// (weights), and the node goes:
//   - outputs whose contents shape inference already knows: Constant, and small integer
//     tensors of shape arithmetic whose symbolic contents are all numbers (Shape -> Gather ->
//     Concat chains over static dims);
//   - nodes whose inputs are all constants, evaluated at compile time with the op's own CPU
//     kernel (so folding and the runtime agree bit for bit), when every output has a static
//     shape of at most `max_fold_elements` elements. Larger results stay run-time work (the
//     report says how many): folding never materialises a huge Expand or ConstantOfShape.
//   - an If whose condition is constant (a frozen input, a test on a static shape) is replaced
//     by the nodes of the branch it takes, then those nodes are folded in turn; each If output
//     becomes an Identity of the branch's result (remove-identities takes it away).
// Random, training, other control-flow and sequence ops are never folded, nor values that are graph
// outputs (a graph output stays the output of a node). A kernel that fails (a bad index in a
// constant Gather, ...) leaves the node to fail the same way at run time.
// Requires: infer_shapes. After: a verified model; nodes whose results are dead are left for
// eliminate_dead_code.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace cuvil {

struct FoldStats {
  int64_t folded_nodes = 0;
  int64_t too_large = 0;  // nodes with constant inputs left alone by max_fold_elements
  int64_t inlined_ifs = 0;  // If nodes replaced by the branch their constant condition takes
};

FoldStats fold_constants(Model& model, int64_t max_fold_elements);

}  // namespace cuvil
