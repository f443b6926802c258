// OpKind and per-op facts, expanded from ir/ops.def.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace cuvil {

enum OpFlags : uint32_t {
  kNone = 0,
  kTraining = 1u << 0,       // ai.onnx.preview.training: imported, never compiled
  kRandom = 1u << 1,         // results are random: not comparable with expected outputs
  kSequenceTypes = 1u << 2,  // works on sequence/optional/string values
  kControlFlow = 1u << 3,    // has subgraph attributes
};

enum class OpKind : uint16_t {
#define CUVIL_OP(name, domain, rule, flags) name,
#include "ir/ops.def"
#undef CUVIL_OP
  Unknown,  // not in the table: reported as unsupported
};

constexpr int kOpKindCount = static_cast<int>(OpKind::Unknown);

const char* op_name(OpKind op);
const char* op_domain(OpKind op);
uint32_t op_flags(OpKind op);
// Looks an op up by ONNX domain ("" and "ai.onnx" are the same) and op_type.
std::optional<OpKind> op_from_name(std::string_view domain, std::string_view op_type);

}  // namespace cuvil
