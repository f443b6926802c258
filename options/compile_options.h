// Every setting of cuvilc in one typed struct, and the YAML config file that fills it.
//
// `cuvilc compile --config FILE` reads FILE into CompileOptions (docs/config.md is the schema);
// options given on the command line then override the same keys (cli/cuvilc.cpp). The reader
// is strict: an unknown key, a wrong type, a duplicate key or a value out of range is a usage
// error (exit 2) whose message starts with `FILE:LINE:COLUMN:` and names the key path
// (`limits.max_nodes`), so a typo never silently falls back to a default.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/symbolic.h"
#include "passes/choose_layout.h"
#include "options/quantize_options.h"
#include "passes/kv_cache.h"
#include "passes/pattern.h"
#include "support/limits.h"

namespace cuvil {

// Shape buckets of one symbol (`buckets:` / --buckets; codegen/buckets.h): the inclusive upper
// bounds of consecutive buckets (`seq=1,16,128`: seq 1, 2..16, 17..128, and 129 up to the
// declared maximum), or powers of two up to the declared maximum (`seq=pow2`).
struct BucketSpec {
  std::string symbol;
  bool pow2 = false;
  std::vector<int64_t> bounds;  // strictly increasing, when !pow2
};

// One frozen input (`freeze:` / --freeze; cli/cuvilc_freeze.h): its value as written, a number
// or a .npy path, and where it was given (for messages).
struct FreezeSpec {
  std::string input;
  std::string value;
  std::string origin;  // "--freeze" or "FILE:LINE:COLUMN: freeze.NAME"
};

struct CompileOptions {
  // The config file these options were read from ("" when none): an input of the compile,
  // which no output may overwrite.
  std::string config_path;
  // Ranges of symbolic dimensions (`dims:` / --dim), in the order given; a later entry for the
  // same name wins.
  std::vector<std::pair<std::string, sym::Range>> dims;
  // Build tile kernels (`fusion:`; --no-fusion sets it false).
  bool fusion = true;
  // Resource caps (`limits:` / --max-...): support/limits.def.
  CompileLimits limits;
  // User-declared patterns (`patterns:`): rewrites join the canonicalize pass; fuse and keep
  // requests go to lowering.
  std::vector<Pattern> patterns;
  // Convolution layout (`layout:` / --layout): auto, nchw or nhwc (passes/choose_layout.h).
  // auto by default: channels-last chains measured 10-26% faster than NCHW on ResNet-18 and
  // MobileNetV2 in two runs on an idle machine (bench/layout_chains.sh, docs/PERF.md).
  LayoutChoice layout = LayoutChoice::kAuto;
  // Shape buckets (`buckets:` / --buckets), one spec per symbol; empty (`auto`, the default):
  // one program, since no lowering decision depends on where in a range a shape lies yet.
  std::vector<BucketSpec> buckets;
  // W8A8 quantization (`quantize:` / --quantize w8a8, --calib, ...; docs/quantization.md):
  // when on, `compile` calibrates and compiles the QDQ model instead of the float one.
  bool quantize = false;
  QuantizeOptions quant;
  // KV cache as session state (`kv_cache:` / --kv-cache): auto, on or off (passes/kv_cache.h).
  KvCacheMode kv_cache = KvCacheMode::kAuto;
  // Inputs fixed at compile time (`freeze:` / --freeze), in the order given; a later entry
  // for the same input wins.
  std::vector<FreezeSpec> freeze;
};

// The largest config file cuvilc reads; configs are hand-written, so this is generous.
constexpr size_t kMaxConfigBytes = size_t{1} << 20;

// Parses config text; `display_name` prefixes every message. Throws Diagnostic(kUsage).
CompileOptions parse_config(std::string_view text, const std::string& display_name);
// Reads and parses a config file: kIo when it cannot be read, kUsage when it is invalid.
CompileOptions load_config_file(const std::string& path);

// Parses one --buckets value: "auto" (clears `out`'s specs, returns true), "name=pow2" or
// "name=b1,b2,..." (strictly increasing non-negative integers). On a syntax error returns
// false and sets *error to what was expected.
bool parse_bucket_option(const std::string& text, std::vector<BucketSpec>* out, std::string* error);

// Sets or replaces the frozen value of `spec.input`.
void set_freeze(CompileOptions& options, FreezeSpec spec);

// Sets or replaces the range of `name`.
void set_dim(CompileOptions& options, const std::string& name, sym::Range range);

}  // namespace cuvil
