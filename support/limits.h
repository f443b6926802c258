// Caps on the work a model may ask of cuvilc: the resource model of docs/security.md, one
// table (support/limits.def) expanded into this struct, the command line and the config.
// A small file must not ask for huge work: every cap that is exceeded refuses the model with
// exit 4 and a message naming the cap and the option or YAML key that raises it. Except
// max_fold_elements: constant folding over it folds less instead of refusing.
#pragma once

#include <cstdint>
#include <string>

#include "support/error.h"

namespace cuvil {

struct CompileLimits {
#define CUVIL_LIMIT(field, dflt, flag, key, what) int64_t field = dflt;
#include "support/limits.def"
};

enum class LimitId {
#define CUVIL_LIMIT(field, dflt, flag, key, what) field,
#include "support/limits.def"
  kCount
};

struct LimitInfo {
  const char* field;
  int64_t default_value;
  const char* cli_flag;
  const char* yaml_key;
  const char* what;
};

const LimitInfo& limit_info(LimitId id);
int64_t& limit_value(CompileLimits& limits, LimitId id);
int64_t limit_value(const CompileLimits& limits, LimitId id);

// Throws Diagnostic(kUnsupported): "<context>: <what> exceed <field> = <value> (raise it
// with <cli_flag> N or limits.<yaml_key> in a --config file)".
[[noreturn]] void limit_exceeded(LimitId id, const CompileLimits& limits, const std::string& context);

}  // namespace cuvil
