// Pass: KV-cache recognition (analysis; the graph is not changed).
//
// A cache pair is a graph input P and a graph output Q where Q = Concat(P, new) along the axis
// whose extent in P is a bare shape symbol (the past length, e.g. `past`): decoders exported
// with past_key_<i>/past_value_<i> inputs and present_* outputs. The Concat is a two-operand
// Concat node, or a cuvil::Attention's past_key/past_value -> present_key/present_value
// (fuse-attention absorbs the cache's Concat into Attention). The new rows must be computed
// (not a graph input or a constant): concatenating two of the caller's tensors is no cache. Pairs are found from that
// structure alone (names are not consulted). All pairs must share one length symbol. Kept as
// session state (runtime/session.h; the package's STATE section, docs/kv_cache.md) when every
// dim of P has an upper bound: the state is allocated with those maximum extents, so the
// length symbol's range (`--dim past=0:N`) must be bounded, and so must batch-like symbols.
// `--kv-cache auto` (the default) keeps the pairs when they can be kept and otherwise says why
// not in the report; `on` makes that a usage error; `off` keeps none.
// Requires: infer_shapes. After: the model unchanged.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace cuvil {

enum class KvCacheMode { kAuto, kOn, kOff };
std::optional<KvCacheMode> parse_kv_cache_mode(std::string_view s);  // "auto", "on", "off"
const char* kv_cache_mode_name(KvCacheMode m);

struct KvCachePair {
  std::string input, output;  // graph input P (the past) and output Q (the present)
  std::string symbol;         // the length symbol: P's extent on `axis`
  int axis = 0;
  DType dtype = DType::Undefined;
  std::vector<int64_t> max_dims;  // P's dims at their maximum (the symbol's range hi on `axis`)
};

struct KvCacheAnalysis {
  std::vector<KvCachePair> pairs;  // kept as state (empty when not kept)
  size_t found = 0;                // pairs recognised, kept or not
  std::string why_not;             // found but not kept: the reason, naming the symbol/input
};

// Finds the pairs of `model`'s main graph. With kOn, pairs that cannot be kept (none found, an
// unbounded range) are a usage error (Diagnostic kUsage) naming the input and symbol.
KvCacheAnalysis find_kv_cache(const Model& model, KvCacheMode mode);
// One line for the compile report: "2 pairs kept as state (past 0:64): past_key_0 -> ...".
std::string kv_cache_note(const KvCacheAnalysis& a);

}  // namespace cuvil
