// Pass: loop-carried sequence accumulators become Loop scan outputs.
//
// Exporters turn `outs.append(t)` inside a loop followed by `torch.stack(outs)` into a
// SequenceEmpty carried through a Loop, a SequenceInsert(seq, t) in the body and a
// ConcatFromSequence(axis=0, new_axis=1) after the loop. That is exactly what a Loop scan
// output is, and the runtime has no sequence values, so:
// Rewrites: for each such carried slot, the slot leaves the Loop (input, body input, body
// output, node output); the body yields t as an extra scan output; each ConcatFromSequence of
// the final sequence becomes an Identity of the new scan output; the SequenceEmpty goes when
// nothing else reads it. A sequence used in any other way (indexed, erased, inserted at a
// position, concatenated without a new axis, returned) is left alone.
// Requires: an imported, verified model; runs before shape inference (it resets the kinds,
// dtypes and shapes of the values it turns into tensors).
// After: a verified model with fewer sequence values; nodes stay in topological order.
#pragma once

#include "ir/graph.h"

namespace cuvil {

void loop_sequences_to_scans(Model& model);

}  // namespace cuvil
