// Strided loads: nodes whose output is one input read through a single access map over the
// output's shape (an element offset and one stride per output dim), so the lowering
// (codegen/lower.cpp) emits them as a tile Load and their index operands are not run-time
// work: a Slice whose starts, ends, axes and steps the compiler knows as numbers or
// expressions over input dims (the start of each sliced axis, by ir/slice_bounds.h, is the
// offset; the step scales the stride), and a Gather whose indices are a progression
// start + delta * i (a Range, a weight holding one such as BERT's position ids, a scalar
// constant, and reshapes and Slices of those). Also: the tensor a reshape chain reads
// (reshape_source), which an elementwise kernel loads with the reshape's shape instead.
// Requires: shapes inferred; the caller's shapes have every dim known (LoadContext).
// After: maps the run-time bound proof checks (runtime/cpu/tile_interpreter.cpp); an index
// past a Gather's axis fails that proof on axis 0 and is proven impossible on other axes.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "ir/graph.h"

namespace cuvil::codegen {

// What the lowering knows of a graph: its values' shapes (every dim known) and which dims
// wait on data (they are bound only when their producer runs, after a kernel's maps are).
struct LoadContext {
  const Graph& graph;
  const sym::SymbolRanges& ranges;
  std::function<const Shape&(ValueId)> shape;
  std::function<bool(const Shape&)> data_dependent;
};

// `source` read at `offset` with one stride per output dim (element units of `source`).
struct StridedLoad {
  ValueId source = kNoValue;
  DimExpr offset;
  std::vector<DimExpr> strides;
};

// The map of a Slice node, or nothing when its bounds are not known at compile time.
std::optional<StridedLoad> slice_load(const LoadContext& c, const Node& n);

// The map of a Gather node whose indices are a progression with a start provably >= 0 and a
// constant delta >= 0 (negative indices wrap in the kernel), and whose last index is inside
// the axis when the axis is not 0; otherwise nothing.
std::optional<StridedLoad> gather_load(const LoadContext& c, const Node& n);

// slice_load or gather_load by the node's op; nothing for other ops.
std::optional<StridedLoad> strided_load(const LoadContext& c, const Node& n);

// The value a chain of Reshape/Flatten/Squeeze/Unsqueeze nodes (same dtype, element count
// proven equal) starts from; `v` itself when it is not such a reshape.
ValueId reshape_source(const LoadContext& c, ValueId v);

}  // namespace cuvil::codegen
