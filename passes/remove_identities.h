// Pass: Identity, inference-mode Dropout, no-op Cast and no-op reshape removal.
//
// Rewrites: an Identity node, a Cast to the dtype its input already has, a Reshape, Flatten,
// Squeeze or Unsqueeze whose inferred output shape is its input's, dim for dim, or a Dropout whose
// mask output nobody reads and that is not in training mode (no training_mode input, or a
// constant false one), is removed and its readers
// read its input instead. When its output is a graph output (which keeps its name), the node
// producing its input writes the output directly, if nothing else reads that input; otherwise
// the node stays, as does one over a value whose kind shape inference did not settle. An
// OptionalGetElement of a plain tensor (opset 18) passes it through like an Identity.
// Requires: infer_shapes (constant training_mode inputs and input dtypes are known). Also run
// at the start of canonicalize, so idioms match without pass-throughs in them. After: a verified model.
#pragma once

#include "ir/graph.h"

namespace cuvil {

void remove_identities(Model& model);

}  // namespace cuvil
