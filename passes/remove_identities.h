// Pass: Identity and inference-mode Dropout removal.
//
// Rewrites: an Identity node, or a Dropout whose mask output nobody reads and that is not in
// training mode (no training_mode input, or a constant false one), is removed and its readers
// read its input instead. A node whose output is a graph output stays (the output keeps its
// name), and so does one over a non-tensor value whose kind shape inference did not settle.
// Requires: infer_shapes (constant training_mode inputs are known). After: a verified model.
#pragma once

#include "ir/graph.h"

namespace cuvil {

void remove_identities(Model& model);

}  // namespace cuvil
