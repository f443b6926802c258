// Pass: an inference BatchNormalization after a Conv is folded into the Conv's weights.
//
// Rewrites: Conv(X, W, B?) -> BatchNormalization(scale, bias, mean, var) where W, B and the
// four BatchNormalization parameters are constants of C = W's output-channel count elements
// (float or double, as W), the Conv's output is read by that BatchNormalization alone, and the
// BatchNormalization is in inference mode (training_mode 0 from opset 14; before, no output but
// Y is read) becomes one Conv with weights W' = W * s and bias B' = (B - mean) * s + bias per
// output channel, s = scale / sqrt(var + epsilon), computed in double and stored in W's dtype
// (new weights: the old ones stay for dce). The Conv writes the BatchNormalization's output. A
// BatchNormalization that does not follow such a Conv stays as it is.
// Requires: infer_shapes, fold_constants (the parameters are known). After: a verified model.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace cuvil {

// Returns the number of BatchNormalization nodes folded.
int64_t fold_batch_norm(Model& model);

}  // namespace cuvil
