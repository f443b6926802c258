// The compiler's pass pipeline: the passes of passes/passes.def, in that order, so every tool
// and test runs the same passes. Each pass has its own header under passes/ saying what it
// rewrites, what it requires and what holds after it.
//
// Requires: an imported, verified model. After: what the last pass run guarantees.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/choose_layout.h"
#include "passes/kv_cache.h"
#include "passes/pattern.h"
#include "support/limits.h"

namespace cuvil {

// What every pass may consult.
struct PassContext {
  CompileLimits limits;
  std::vector<Pattern> user_patterns;  // `patterns:` of the config
  LayoutChoice layout = LayoutChoice::kAuto;  // `layout:` of the config / --layout
  KvCacheMode kv_cache = KvCacheMode::kAuto;  // `kv_cache:` of the config / --kv-cache
};

struct PassInfo {
  const char* name;  // command-line name, e.g. "infer-shapes"
  const char* what;
  // Runs the pass; returns a note for the report ("" when there is nothing to say).
  std::string (*run)(Model&, const PassContext&);
};
const std::vector<PassInfo>& all_passes();
// The pass called `name`, or nullptr.
const PassInfo* find_pass(const std::string& name);

// What one pass did, for the compile report (times are not written into packages: those stay
// byte-identical from one compile to the next).
struct PassRecord {
  std::string name;
  double milliseconds = 0;
  int64_t nodes_before = 0, nodes_after = 0;  // all graphs, subgraphs included
  std::string note;                           // what the pass reports, e.g. what it left alone
};

// The stop point before every pass: the IR as imported.
constexpr const char* kStopAfterImport = "import";

struct PipelineOptions {
  // Stop after this pass (a name from passes.def, or kStopAfterImport); empty runs them all.
  std::string stop_after;
  // Passes not to run (names from passes.def), e.g. the rewriting passes, to compare a model
  // compiled with and without them. infer-shapes cannot be skipped (lowering needs shapes).
  std::set<std::string> skip;
  // Called after each pass with its record (e.g. --print-after-all prints the IR).
  std::function<void(const PassRecord&, const Model&)> after_pass;
  // Run the IR verifier after every pass (tests; cheap enough to leave on in cuvilc too).
  bool verify_each = true;
  PassContext context;
};

// Runs the pipeline; returns one record per pass run. An unknown stop_after is a usage error
// naming the passes.
std::vector<PassRecord> run_passes(Model& model, const PipelineOptions& options = {});

}  // namespace cuvil
