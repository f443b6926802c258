// The op -> shape rule table, expanded from ir/ops.def.
#include "passes/shape/infer.h"

namespace cuvil::shape {

InferFn rule_for(OpKind op) {
  static constexpr InferFn kRules[] = {
#define CUVIL_OP(name, domain, rule, flags) &infer_##rule,
#include "ir/ops.def"
#undef CUVIL_OP
  };
  static_assert(sizeof(kRules) / sizeof(kRules[0]) == kOpKindCount, "ops.def mismatch");
  CUVIL_ASSERT(op != OpKind::Unknown, "no rule for unknown ops");
  return kRules[static_cast<int>(op)];
}

}  // namespace cuvil::shape
