// The op -> whole-tensor kernel table, expanded from ir/ops.def.
#include "runtime/op_kernel.h"

#include <cstring>

#include "runtime/testing_hooks.h"

namespace cuvil::rt {
namespace {

struct KernelEntry {
  const char* domain;
  const char* name;
  OpKernelFn fn;
};

const KernelEntry kKernels[] = {
#define CUVIL_OP(name, domain, rule, flags) {domain, #name, &ops::kernel_##name},
#include "ir/ops.def"
#undef CUVIL_OP
};

}  // namespace

OpKernelFn find_op_kernel(const std::string& domain, const std::string& op_type) {
  testing::count_name_lookup();  // a session does this once per node, when it is made
  const std::string d = domain == "ai.onnx" ? "" : domain;
  for (const KernelEntry& k : kKernels)
    if (d == k.domain && op_type == k.name) return k.fn;
  return nullptr;
}

}  // namespace cuvil::rt
