// The rewriting passes of passes/passes.def: those whose output computes the same values with
// other ops (idioms to fused ops, folding, epilogues). Tests compile a model with all of them
// skipped (`--skip-pass`, PipelineOptions::skip) and without tile fusion as the "unfused"
// reference that fused compilations must agree with. Add a pass here when it joins the pipeline.
#pragma once

#include <set>
#include <string>

namespace cuvil::test {

inline const std::set<std::string>& rewrite_passes() {
  // qdq-to-int8 computes the float QDQ graph's values up to one quantization step, not up to
  // float rounding: tests/qdq_import_test.cpp checks it against both.
  static const std::set<std::string> passes = {"qdq-to-int8",    "canonicalize",   "fuse-attention",
                                               "fold-batch-norm", "fuse-epilogues", "choose-layout"};
  return passes;
}

}  // namespace cuvil::test
