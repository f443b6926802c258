#include "support/limits.h"

namespace cuvil {
namespace {

constexpr LimitInfo kLimits[] = {
#define CUVIL_LIMIT(field, dflt, flag, key, what) {#field, dflt, flag, key, what},
#include "support/limits.def"
};
static_assert(sizeof kLimits / sizeof kLimits[0] == static_cast<size_t>(LimitId::kCount),
              "support/limits.def and LimitId disagree");

}  // namespace

const LimitInfo& limit_info(LimitId id) { return kLimits[static_cast<size_t>(id)]; }

int64_t& limit_value(CompileLimits& limits, LimitId id) {
  switch (id) {
#define CUVIL_LIMIT(field, dflt, flag, key, what) \
  case LimitId::field:                            \
    return limits.field;
#include "support/limits.def"
    case LimitId::kCount:
      break;
  }
  CUVIL_ASSERT(false, "limit id out of range");
  __builtin_unreachable();
}

int64_t limit_value(const CompileLimits& limits, LimitId id) {
  return limit_value(const_cast<CompileLimits&>(limits), id);
}

void limit_exceeded(LimitId id, const CompileLimits& limits, const std::string& context) {
  const LimitInfo& info = limit_info(id);
  fail(ExitCode::kUnsupported, context, (context.empty() ? "" : ": "), info.what,
       " exceed the cap ", info.field, " = ", limit_value(limits, id), " (raise it with ",
       info.cli_flag, " N or limits.", info.yaml_key, " in a --config file)");
}

}  // namespace cuvil
