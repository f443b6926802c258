// Memory planning: one arena per run, reused across intermediates whose lifetimes do not
// overlap. Sizes are symbolic, so slots are too: a slot's size is the max of its tenants'
// sizes and offsets are prefix sums of 64-byte-aligned slot sizes, all evaluated at bind
// time. A tensor lives from the step that defines it to its last use, inclusive, so an op's
// outputs never share memory with its inputs.
#pragma once

#include <vector>

#include "ir/symbolic.h"

namespace cuvil::codegen {

struct PlanItem {
  sym::DimExpr bytes;
  int def_step = 0;
  int last_use = 0;  // >= def_step
};

struct MemoryPlan {
  std::vector<sym::DimExpr> offsets;  // per item
  sym::DimExpr arena_size;
  sym::DimExpr unshared_size;  // sum of every item's aligned size (no reuse)
  int slots = 0;
};

MemoryPlan plan_memory(const std::vector<PlanItem>& items, const sym::SymbolRanges& ranges);

}  // namespace cuvil::codegen
