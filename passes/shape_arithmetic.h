// Pass: shape arithmetic becomes expressions.
//
// Rewrites: a node whose result is a small integer tensor (rank <= 1, int64 or int32) whose
// every element shape inference knows as an expression over shape symbols (the Shape ->
// Gather -> Unsqueeze -> Concat -> Cast chains exporters build for Reshape, Expand, Slice,
// ConstantOfShape ...) becomes one cuvil::SymbolicInts node (ir/symbolic_ints.h) reading the
// dims of the values that define those symbols. The chains it read die (eliminate_dead_code
// removes them), so a run evaluates a few integer expressions where it ran a chain of op
// calls. Results whose elements are all numbers are fold-constants' work; a node is left alone
// when a symbol has no defining value before it, or its result is a graph output.
// Requires: infer_shapes. After: a verified model; sym_data and shapes unchanged.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace cuvil {

// Returns the number of nodes rewritten.
int64_t shape_arithmetic_to_expressions(Model& model);

}  // namespace cuvil
