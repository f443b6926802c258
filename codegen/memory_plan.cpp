#include "codegen/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace cuvil::codegen {
namespace {

sym::DimExpr align64(const sym::DimExpr& bytes) { return sym::ceildiv(bytes, 64) * 64; }

struct Slot {
  sym::DimExpr size;
  int busy_until = -1;  // last step of the current tenant
};

}  // namespace

MemoryPlan plan_memory(const std::vector<PlanItem>& items, const sym::SymbolRanges& ranges) {
  MemoryPlan plan;
  plan.offsets.resize(items.size());
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return items[a].def_step < items[b].def_step; });
  std::vector<Slot> slots;
  std::vector<int> slot_of(items.size(), -1);
  for (size_t idx : order) {
    const PlanItem& it = items[idx];
    const sym::DimExpr size = align64(it.bytes);
    plan.unshared_size = plan.unshared_size + size;
    // Prefer a free slot of provably equal size, then a provably larger one, then any free
    // slot (grown to the max); otherwise open a new slot.
    int pick = -1, rank = 3;
    for (size_t s = 0; s < slots.size(); ++s) {
      if (slots[s].busy_until >= it.def_step) continue;
      int r = sym::prove_equal(slots[s].size, size, ranges)        ? 0
              : sym::prove_less_equal(size, slots[s].size, ranges) ? 1
                                                                    : 2;
      if (r < rank) {
        rank = r;
        pick = static_cast<int>(s);
      }
    }
    if (pick < 0) {
      slots.push_back({size, it.last_use});
      pick = static_cast<int>(slots.size()) - 1;
    } else {
      if (rank == 2) slots[pick].size = sym::simplify(sym::max(slots[pick].size, size), ranges);
      slots[pick].busy_until = it.last_use;
    }
    slot_of[idx] = pick;
  }
  std::vector<sym::DimExpr> slot_offset(slots.size());
  sym::DimExpr running(0);
  for (size_t s = 0; s < slots.size(); ++s) {
    slot_offset[s] = running;
    running = running + slots[s].size;
  }
  for (size_t i = 0; i < items.size(); ++i) plan.offsets[i] = slot_offset[slot_of[i]];
  plan.arena_size = running;
  plan.slots = static_cast<int>(slots.size());
  return plan;
}

}  // namespace cuvil::codegen
