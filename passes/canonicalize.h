// Pass: canonicalisation of exporter idioms.
//
// Rewrites: every match of a built-in pattern (passes/builtin_patterns.cpp: LayerNorm spelled
// as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, GELU through Erf or through Tanh) and
// then of the user's `patterns:` (cuvilc --config) becomes the one op it spells, in every graph.
// Requires: infer_shapes (constraints read shapes and constant contents). After: a verified
// model; the constants and nodes a match consumed are left for eliminate_dead_code.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "passes/pattern.h"

namespace cuvil {

// Returns the rewrites per pattern name.
std::map<std::string, int64_t> canonicalize(Model& model, const std::vector<Pattern>& user_patterns);

}  // namespace cuvil
