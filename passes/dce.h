// Pass: dead code elimination.
//
// Rewrites: removes every node none of whose outputs is read (by a node, a graph output or a
// subgraph capture), in every graph, until nothing changes; then drops initializers nothing
// reads (their bytes leave the package). ONNX inference ops have no side effects, so a node
// whose results nobody reads is never needed; graph inputs stay (they are the interface).
// Requires: a verified model. After: a verified model with no dead nodes or weights.
#pragma once

#include "ir/graph.h"

namespace cuvil {

void eliminate_dead_code(Model& model);

}  // namespace cuvil
