#include "ir/ops.h"

#include <string>
#include <unordered_map>

namespace cuvil {
namespace {

struct OpInfo {
  const char* name;
  const char* domain;
  uint32_t flags;
};

constexpr OpInfo kOps[] = {
#define CUVIL_OP(name, domain, rule, flags) {#name, domain, flags},
#include "ir/ops.def"
#undef CUVIL_OP
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == kOpKindCount, "ops.def expansion mismatch");

}  // namespace

const char* op_name(OpKind op) {
  return op == OpKind::Unknown ? "<unknown>" : kOps[static_cast<int>(op)].name;
}
const char* op_domain(OpKind op) {
  return op == OpKind::Unknown ? "" : kOps[static_cast<int>(op)].domain;
}
uint32_t op_flags(OpKind op) {
  return op == OpKind::Unknown ? 0 : kOps[static_cast<int>(op)].flags;
}

std::optional<OpKind> op_from_name(std::string_view domain, std::string_view op_type) {
  static const std::unordered_map<std::string, OpKind> table = [] {
    std::unordered_map<std::string, OpKind> t;
    for (int i = 0; i < kOpKindCount; ++i)
      t.emplace(std::string(kOps[i].domain) + "::" + kOps[i].name, static_cast<OpKind>(i));
    return t;
  }();
  if (domain == "ai.onnx") domain = "";
  auto it = table.find(std::string(domain) + "::" + std::string(op_type));
  if (it == table.end()) return std::nullopt;
  return it->second;
}

}  // namespace cuvil
