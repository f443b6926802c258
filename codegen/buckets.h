// Shape buckets (docs/buckets.md): the partition of the input symbols' ranges into the boxes
// the package has one program for. plan_buckets expands the user's specs (--buckets,
// `buckets:`) against the model's declared ranges; the compiler lowers the model once per
// bucket with the bucket's ranges (so every range-dependent decision of lowering and memory
// planning is made for the bucket) and writes each program with its guard: the bucket's
// ranges, except for the last bucket, whose guard is empty (it takes what the others do not).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "ir/symbolic.h"
#include "options/compile_options.h"

namespace cuvil::codegen {

struct Bucket {
  // One range per bucketed symbol, in the order of the specs; inside the declared range.
  std::vector<std::pair<std::string, sym::Range>> ranges;
};

// The buckets in selection order (the cartesian product of each spec's ranges, the last
// symbol varying fastest); one bucket with no ranges when `specs` is empty. Usage errors
// (Diagnostic kUsage) name the option: a symbol that no input dim uses, a bound outside the
// declared range, pow2 over an unbounded range, more than rt::kMaxPrograms buckets.
std::vector<Bucket> plan_buckets(const Model& model, const std::vector<BucketSpec>& specs);

// "seq in [2, 16], batch in [1, 1]", or "always" for a bucket without ranges.
std::string bucket_to_string(const Bucket& b);

}  // namespace cuvil::codegen
