// Which elements a Slice takes along one axis, as expressions: the ONNX rules (negative
// endpoints count from the end, then clamp; "to the end" sentinels) over a dim that may be
// symbolic. Shape inference (passes/shape/shape_ops.cpp) takes the length from here for the
// output's shape, and code generation (codegen/lower.cpp) the start for the access map of a
// Slice lowered as a strided load, so the two can never disagree on what a Slice takes.
#pragma once

#include <cstdint>
#include <optional>

#include "ir/symbolic.h"

namespace cuvil::sym {

struct SliceAxis {
  DimExpr start;   // first index taken, after clamping
  DimExpr length;  // number of elements taken
};

// The elements Slice takes along an axis of extent `dim` from `start` to `end` by `step`
// (nonzero); nullopt when the ranges do not decide the sign of a symbolic endpoint. Bound
// arithmetic of hostile constants may throw Diagnostic (overflow).
std::optional<SliceAxis> slice_axis(const DimExpr& dim, const DimExpr& start, const DimExpr& end,
                                    int64_t step, const SymbolRanges& r);

}  // namespace cuvil::sym
