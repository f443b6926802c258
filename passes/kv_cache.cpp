// Pass: KV-cache recognition (passes/kv_cache.h): finds past/present pairs from the graph's
// structure, for the package's STATE section.
#include "passes/kv_cache.h"

#include <algorithm>
#include <set>

#include "support/checked.h"
#include "support/error.h"

namespace cuvil {

std::optional<KvCacheMode> parse_kv_cache_mode(std::string_view s) {
  if (s == "auto") return KvCacheMode::kAuto;
  if (s == "on") return KvCacheMode::kOn;
  if (s == "off") return KvCacheMode::kOff;
  return std::nullopt;
}

const char* kv_cache_mode_name(KvCacheMode m) {
  switch (m) {
    case KvCacheMode::kAuto: return "auto";
    case KvCacheMode::kOn: return "on";
    case KvCacheMode::kOff: return "off";
  }
  return "?";
}

namespace {

std::string range_text(const sym::Range& r) {
  return std::to_string(r.lo) + ":" + (r.hi == sym::Range::kUnbounded ? std::string() : std::to_string(r.hi));
}

// The pair (past P, present Q) when P is a graph input, Q a graph output and Q = Concat(P,
// new) along `axis`, with P's extent on that axis a bare symbol; nullopt otherwise.
std::optional<KvCachePair> make_pair(const Graph& g, ValueId p, ValueId q, int64_t axis,
                                     const std::set<ValueId>& inputs, const std::set<ValueId>& outputs) {
  if (p == kNoValue || q == kNoValue || !inputs.count(p) || !outputs.count(q)) return std::nullopt;
  const Value& past = g.value(p);
  const Value& present = g.value(q);
  if (past.kind != ValueKind::Tensor || !past.shape || past.dtype != present.dtype) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(past.shape->size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return std::nullopt;
  const Dim& d = (*past.shape)[static_cast<size_t>(axis)];
  if (!d || !d->as_symbol()) return std::nullopt;
  for (const Dim& k : *past.shape)
    if (!k) return std::nullopt;
  KvCachePair pair;
  pair.input = past.name;
  pair.output = present.name;
  pair.symbol = *d->as_symbol();
  pair.axis = static_cast<int>(axis);
  pair.dtype = past.dtype;
  return pair;
}

// The pairs node `n` makes: a two-operand Concat(past, new), or a cuvil::Attention whose
// past_key/past_value (inputs 4, 5) become present_key/present_value (outputs 1, 2) by the
// concatenation along axis 2 that ir/fused_ops.h defines (fuse-attention absorbs the cache's
// Concat into Attention).
std::vector<KvCachePair> match_pairs(const Graph& g, const Node& n, const std::set<ValueId>& inputs,
                                     const std::set<ValueId>& outputs) {
  std::vector<KvCachePair> out;
  // The new rows are computed: a Concat of two graph inputs (or of an input and a constant)
  // copies the caller's data and is no cache.
  auto computed = [&](ValueId v) {
    return v != kNoValue && !inputs.count(v) && !g.value(v).is_initializer && !g.value(v).data;
  };
  if (n.op == OpKind::Concat && n.inputs.size() == 2 && n.outputs.size() == 1 && computed(n.inputs[1])) {
    if (auto pair = make_pair(g, n.inputs[0], n.outputs[0], n.attr_int("axis", 0), inputs, outputs))
      out.push_back(std::move(*pair));
  } else if (n.op == OpKind::Attention && computed(n.input(1)) && computed(n.input(2))) {
    for (size_t k = 0; k < 2; ++k)
      if (n.outputs.size() > 1 + k)
        if (auto pair = make_pair(g, n.input(4 + k), n.outputs[1 + k], 2, inputs, outputs))
          out.push_back(std::move(*pair));
  }
  return out;
}

}  // namespace

KvCacheAnalysis find_kv_cache(const Model& model, KvCacheMode mode) {
  KvCacheAnalysis a;
  if (mode == KvCacheMode::kOff) return a;
  const Graph& g = *model.graph;
  const std::set<ValueId> inputs(g.inputs.begin(), g.inputs.end());
  const std::set<ValueId> outputs(g.outputs.begin(), g.outputs.end());
  std::vector<KvCachePair> pairs;
  std::set<std::string> used;  // a past or present in two pairs is no cache
  for (const Node& n : g.nodes)
    for (KvCachePair& pair : match_pairs(g, n, inputs, outputs)) {
      if (!used.insert("in " + pair.input).second || !used.insert("out " + pair.output).second) continue;
      pairs.push_back(std::move(pair));
    }
  // Graph input order, so that the STATE records follow the inputs.
  auto position = [&](const std::string& name) {
    for (size_t i = 0; i < g.inputs.size(); ++i)
      if (g.value(g.inputs[i]).name == name) return i;
    return g.inputs.size();
  };
  std::stable_sort(pairs.begin(), pairs.end(),
                   [&](const KvCachePair& x, const KvCachePair& y) { return position(x.input) < position(y.input); });
  a.found = pairs.size();
  auto not_kept = [&](const std::string& why) {
    if (mode == KvCacheMode::kOn) fail(ExitCode::kUsage, "--kv-cache on: ", why);
    a.why_not = why;
    return a;
  };
  if (pairs.empty()) return not_kept("no cache pair found (a graph output Concat(graph input, new) along an axis "
                                     "whose extent is a shape symbol)");
  for (const KvCachePair& p : pairs)
    if (p.symbol != pairs.front().symbol)
      return not_kept("cache pairs use different length symbols ('" + pairs.front().symbol + "' for '" +
                      pairs.front().input + "', '" + p.symbol + "' for '" + p.input + "'); one is needed");
  // Maximum extents: the state is allocated once, at its largest.
  for (KvCachePair& p : pairs) {
    const Value& past = g.value(g.find(p.input));
    for (size_t k = 0; k < past.shape->size(); ++k) {
      const sym::DimExpr& d = *(*past.shape)[k];
      if (auto c = d.constant()) {
        p.max_dims.push_back(*c);
        continue;
      }
      const std::optional<std::string> s = d.as_symbol();
      if (!s)
        return not_kept("dim " + std::to_string(k) + " of '" + p.input + "' is " + d.to_string() +
                        ", not a constant or a symbol, so the state cannot be sized");
      const sym::Range r = model.ranges.get(*s);
      if (r.hi == sym::Range::kUnbounded)
        return not_kept("the state '" + p.input + "' is sized by the range of '" + *s + "' (dim " +
                        std::to_string(k) + "), which is " + range_text(r) + " with no upper bound; give --dim " +
                        *s + "=" + std::to_string(r.lo) + ":N (or dims: in the config)");
      p.max_dims.push_back(r.hi);
    }
    const std::optional<int64_t> n = checked_numel(p.max_dims);
    const std::optional<int64_t> bytes = n ? checked_mul(*n, static_cast<int64_t>((dtype_bits(p.dtype) + 7) / 8)) : std::nullopt;
    if (!bytes || *bytes > (int64_t{1} << 40))
      return not_kept("the state '" + p.input + "' at its maximum extents would be too large");
  }
  a.pairs = std::move(pairs);
  return a;
}

std::string kv_cache_note(const KvCacheAnalysis& a) {
  if (!a.why_not.empty())
    return a.found ? std::to_string(a.found) + " cache pairs found, not kept as state: " + a.why_not : "none";
  if (a.pairs.empty()) return "off";
  std::string note = std::to_string(a.pairs.size()) + " pairs kept as state (length symbol " + a.pairs.front().symbol +
                     ", at most " + std::to_string(a.pairs.front().max_dims[static_cast<size_t>(a.pairs.front().axis)]) +
                     "):";
  for (const KvCachePair& p : a.pairs) note += " " + p.input + " -> " + p.output;
  return note;
}

}  // namespace cuvil
