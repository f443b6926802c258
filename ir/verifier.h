// IR verifier: structural invariants every pass must keep. Run after import and (in tests)
// after every pass. Checks, in every graph and subgraph: value ids in range; each node output
// produced by exactly that node; node inputs defined before use (topological order); graph
// outputs defined; captures point at a value of the parent graph; initializers have data whose
// dims match their shape; attribute subgraphs have this graph as parent.
#pragma once

#include "ir/graph.h"

namespace cuvil {

// Throws InternalError (via CUVIL_ASSERT) describing the first broken invariant.
void verify_model(const Model& model);

}  // namespace cuvil
