// Pass: canonicalisation of exporter idioms (passes/canonicalize.h).
#include "passes/canonicalize.h"

namespace cuvil {

std::map<std::string, int64_t> canonicalize(Model& model, const std::vector<Pattern>& user_patterns) {
  std::vector<Pattern> all = builtin_patterns();
  all.insert(all.end(), user_patterns.begin(), user_patterns.end());
  return apply_patterns(model, all);
}

}  // namespace cuvil
