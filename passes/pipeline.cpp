#include "passes/pipeline.h"

#include "passes/infer_shapes.h"
#include "passes/loop_sequences.h"

namespace cuvil {

void run_passes(Model& model, const PassOptions& options) {
  loop_sequences_to_scans(model);
  infer_shapes(model, options.limits);
}

}  // namespace cuvil
