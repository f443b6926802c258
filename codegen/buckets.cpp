#include "codegen/buckets.h"

#include <set>

#include "runtime/package.h"
#include "support/error.h"

namespace cuvil::codegen {
namespace {

// Symbols that some input's dims mention: the ones a run binds from its inputs, so a guard
// on them can be checked before anything runs.
std::set<std::string> input_symbols(const Model& m) {
  std::set<std::string> out;
  for (ValueId id : m.graph->inputs) {
    const Value& v = m.graph->value(id);
    if (!v.shape) continue;
    for (const auto& d : *v.shape)
      if (d)
        for (const auto& s : d->symbols()) out.insert(s);
  }
  return out;
}

std::string range_text(const sym::Range& r) {
  return "[" + std::to_string(r.lo) + ", " + (r.hi == sym::Range::kUnbounded ? "inf)" : std::to_string(r.hi) + "]");
}

// The consecutive ranges one spec cuts [lo, hi] into.
std::vector<sym::Range> split(const BucketSpec& spec, const sym::Range& declared) {
  std::vector<int64_t> bounds = spec.bounds;
  if (spec.pow2) {
    if (declared.hi == sym::Range::kUnbounded)
      fail(ExitCode::kUsage, "--buckets ", spec.symbol, "=pow2 needs an upper bound for '", spec.symbol,
           "' (its range is ", range_text(declared), "): give --dim ", spec.symbol, "=lo:hi");
    for (int64_t b = 1; b < declared.hi; b *= 2)
      if (b >= declared.lo) bounds.push_back(b);
  }
  std::vector<sym::Range> out;
  int64_t lo = declared.lo;
  for (int64_t b : bounds) {
    if (b < declared.lo || b > declared.hi)
      fail(ExitCode::kUsage, "--buckets: bound ", b, " of '", spec.symbol, "' is outside its range ",
           range_text(declared), " (set the range with --dim ", spec.symbol, "=lo:hi)");
    out.push_back({lo, b});
    lo = b + 1;
  }
  if (lo <= declared.hi && (out.empty() || out.back().hi != declared.hi)) out.push_back({lo, declared.hi});
  return out;
}

}  // namespace

std::vector<Bucket> plan_buckets(const Model& model, const std::vector<BucketSpec>& specs) {
  std::vector<Bucket> buckets(1);
  if (specs.empty()) return buckets;
  const std::set<std::string> symbols = input_symbols(model);
  for (const BucketSpec& spec : specs) {
    if (!symbols.count(spec.symbol)) {
      std::string names;
      for (const auto& s : symbols) names += (names.empty() ? "" : ", ") + s;
      fail(ExitCode::kUsage, "--buckets: '", spec.symbol, "' is not a symbol of the model's inputs (",
           names.empty() ? std::string("the inputs have no symbolic dims") : "symbols: " + names, ")");
    }
    const std::vector<sym::Range> parts = split(spec, model.ranges.get(spec.symbol));
    if (buckets.size() * parts.size() > rt::kMaxPrograms)
      fail(ExitCode::kUsage, "--buckets: ", buckets.size() * parts.size(), " buckets exceed the limit of ",
           rt::kMaxPrograms, " programs per package");
    std::vector<Bucket> next;
    for (const Bucket& b : buckets)
      for (const sym::Range& r : parts) {
        Bucket n = b;
        n.ranges.emplace_back(spec.symbol, r);
        next.push_back(std::move(n));
      }
    buckets = std::move(next);
  }
  return buckets;
}

std::string bucket_to_string(const Bucket& b) {
  if (b.ranges.empty()) return "always";
  std::string out;
  for (const auto& [name, r] : b.ranges)
    out += (out.empty() ? "" : ", ") + name + " in " + range_text(r);
  return out;
}

}  // namespace cuvil::codegen
