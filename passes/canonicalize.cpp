// Pass: canonicalisation of exporter idioms (passes/canonicalize.h).
#include "passes/canonicalize.h"

#include "passes/remove_identities.h"

namespace cuvil {

std::map<std::string, int64_t> canonicalize(Model& model, const std::vector<Pattern>& user_patterns) {
  // Pass-throughs (Identity, inference Dropout, a Cast to the type it already has) would break
  // an idiom apart: torch's RMSNorm casts x to float32 before squaring it.
  remove_identities(model);
  std::vector<Pattern> all = builtin_patterns();
  all.insert(all.end(), user_patterns.begin(), user_patterns.end());
  return apply_patterns(model, all);
}

}  // namespace cuvil
