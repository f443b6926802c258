// The compile report of `cuvilc compile --report FILE.json`: what each pass did (time, node
// counts before and after), what lowering made (tile kernels, op calls, arena), time per
// stage and the process's peak memory. Times live only here and on stderr, never in the
// package, which stays byte-identical from one compile to the next.
#pragma once

#include <string>
#include <vector>

#include "codegen/lower.h"
#include "passes/pipeline.h"

namespace cuvil {

struct CompileReport {
  std::string model, output;
  std::vector<PassRecord> passes;
  double import_ms = 0, passes_ms = 0, lower_ms = 0, package_ms = 0, total_ms = 0;
  int64_t nodes_imported = 0, nodes_after_passes = 0;
  int64_t tile_kernels = 0, fused_nodes = 0, op_calls = 0, package_bytes = 0;
  int64_t buckets = 1;  // programs in the package (codegen/buckets.h)
  int64_t nodes_not_emitted = 0;  // shape operands no lowered code reads (LoweredModel::skipped_nodes)
  std::string arena_bytes;  // symbolic
  std::vector<std::vector<std::string>> kernel_nodes;              // per tile kernel, its nodes
  std::vector<std::pair<std::string, int64_t>> pattern_matches;    // fuse/keep patterns: matches
  std::vector<codegen::LoweredModel::NotFused> not_fused;          // op calls and kernel boundaries, why
  std::string quantization_json;  // --quantize w8a8: the per-layer error report (quant/quant_report.h)
};

std::string report_to_json(const CompileReport& report);
// Peak resident set size of this process so far, in bytes (getrusage).
int64_t peak_rss_bytes();
// One line per pass ("pass NAME: nodes A -> B"), for the package's report (no times).
std::string passes_summary(const std::vector<PassRecord>& passes);

}  // namespace cuvil
