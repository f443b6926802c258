// Builds the .cuvir bytes for a lowered model: the manifest (inputs/outputs with symbolic
// shapes, symbol ranges, memory plan, versions), the weights, the program and the compile
// report. Deterministic: nothing depends on time, paths (only the model's file name is
// recorded), thread count or locale.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/buckets.h"
#include "codegen/lower.h"
#include "ir/graph.h"
#include "passes/kv_cache.h"

namespace cuvil::codegen {

// `passes_report` (the pipeline's node counts per pass, no times) is appended to the report.
// `ptx_section`, when not empty, becomes the PTX section (codegen/ptx/megakernel_ptx.h
// megakernel_ptx_section; cuvilc includes it unless --no-ptx).
std::vector<uint8_t> build_package(const Model& model, const LoweredModel& lowered,
                                   const std::string& passes_report = "",
                                   const std::vector<uint8_t>& ptx_section = {});

// The same package as pieces to write in order: `head` (everything before the weights' bytes)
// and then each of `weights` (views of the model's tensors and zero padding; they stay valid
// while the model and the lowered model live). Writing them gives build_package's bytes
// without ever holding the whole file in memory.
struct PackagePieces {
  std::vector<uint8_t> head;
  std::vector<std::string_view> weights;
  uint64_t size = 0;  // head + weights
};
PackagePieces build_package_pieces(const Model& model, const LoweredModel& lowered,
                                   const std::string& passes_report = "",
                                   const std::vector<uint8_t>& ptx_section = {});

// One program per shape bucket (codegen/buckets.h), in selection order, each lowered with its
// bucket's ranges; the weights come from programs[0] (every program must place them alike:
// checked). The programs' symbol tables are made the same (program 0's order, the model's
// declared ranges) and each gets its bucket's ranges as its guard, the last an empty one.
struct BucketProgram {
  const LoweredModel* lowered;
  Bucket bucket;
};
// `states`: the KV-cache pairs kept as session state (passes/kv_cache.h), written as the
// STATE section (none: no section).
PackagePieces build_package_pieces(const Model& model, const std::vector<BucketProgram>& programs,
                                   const std::string& passes_report = "",
                                   const std::vector<uint8_t>& ptx_section = {},
                                   const std::vector<KvCachePair>& states = {});

}  // namespace cuvil::codegen
