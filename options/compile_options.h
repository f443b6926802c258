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
#include "passes/pattern.h"
#include "support/limits.h"

namespace cuvil {

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
  // nchw by default: the channels-last kernels have not yet been measured against NCHW on an
  // idle machine, and nchw keeps every compile as it was until they are.
  LayoutChoice layout = LayoutChoice::kNchw;
};

// The largest config file cuvilc reads; configs are hand-written, so this is generous.
constexpr size_t kMaxConfigBytes = size_t{1} << 20;

// Parses config text; `display_name` prefixes every message. Throws Diagnostic(kUsage).
CompileOptions parse_config(std::string_view text, const std::string& display_name);
// Reads and parses a config file: kIo when it cannot be read, kUsage when it is invalid.
CompileOptions load_config_file(const std::string& path);

// Sets or replaces the range of `name`.
void set_dim(CompileOptions& options, const std::string& name, sym::Range range);

}  // namespace cuvil
