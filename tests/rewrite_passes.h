// The rewriting passes of passes/passes.def: those whose output computes the same values with
// other ops (idioms to fused ops, folding, epilogues). Tests compile a model with all of them
// skipped (`--skip-pass`, PipelineOptions::skip) and without tile fusion as the "unfused"
// reference that fused compilations must agree with. Add a pass here when it joins the pipeline.
#pragma once

#include <set>
#include <string>

namespace cuvil::test {

inline const std::set<std::string>& rewrite_passes() {
  static const std::set<std::string> passes = {"canonicalize", "fuse-attention", "fold-batch-norm",
                                               "fuse-epilogues", "choose-layout"};
  return passes;
}

}  // namespace cuvil::test
