// Builds the .cuvir bytes for a lowered model: the manifest (inputs/outputs with symbolic
// shapes, symbol ranges, memory plan, versions), the weights, the program and the compile
// report. Deterministic: nothing depends on time, paths (only the model's file name is
// recorded), thread count or locale.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/lower.h"
#include "ir/graph.h"

namespace cuvil::codegen {

// `passes_report` (the pipeline's node counts per pass, no times) is appended to the report.
std::vector<uint8_t> build_package(const Model& model, const LoweredModel& lowered,
                                   const std::string& passes_report = "");

}  // namespace cuvil::codegen
