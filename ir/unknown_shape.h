// Explanations for values that shape inference could not shape fully: what is unknown and
// why, for `cuvilc inspect` (passes/infer_shapes.h, shape_coverage) and for code generation's
// "unknown rank" diagnostic (codegen/lower.cpp). Reads the graph only.
#pragma once

#include <string>

#include "ir/graph.h"

namespace cuvil {

// For a value whose shape inference left without a full shape (after infer_shapes):
// "rank unknown" or "dims 0, 2 unknown".
std::string what_is_unknown(const Value& v);
// Why: the cause at this value (an op without a shape rule, If branches of different ranks,
// contents known only at run time) or the input it inherits the gap from. For `cuvilc
// inspect` and code generation's "unknown rank" diagnostic.
std::string why_shape_unknown(const Graph& g, const Value& v);

}  // namespace cuvil
