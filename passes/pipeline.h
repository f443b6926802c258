// The compiler's pass pipeline, in order (one table, so every tool and test runs the same
// passes): graph rewrites first, then symbolic shape inference.
//
//   1. loop_sequences_to_scans  (passes/loop_sequences.h)
//   2. infer_shapes             (passes/infer_shapes.h)
//
// Requires: an imported, verified model. After: what infer_shapes guarantees.
#pragma once

#include "ir/graph.h"
#include "support/limits.h"

namespace cuvil {

struct PassOptions {
  // The resource caps (support/limits.def) the passes enforce; the same struct the frontend
  // got in ImportOptions.
  CompileLimits limits;
};

void run_passes(Model& model, const PassOptions& options = {});

}  // namespace cuvil
