#include "passes/pipeline.h"

#include <chrono>

#include "ir/verifier.h"
#include "passes/canonicalize.h"
#include "passes/choose_layout.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/fold_batch_norm.h"
#include "passes/fold_constants.h"
#include "passes/fuse_attention.h"
#include "passes/fuse_epilogues.h"
#include "passes/infer_shapes.h"
#include "passes/kv_cache.h"
#include "passes/loop_sequences.h"
#include "passes/qdq_to_int8.h"
#include "passes/remove_identities.h"
#include "passes/shape_arithmetic.h"
#include "passes/sink_into_branches.h"
#include "support/error.h"

namespace cuvil {
namespace {

std::string run_loop_sequences_to_scans(Model& m, const PassContext&) {
  loop_sequences_to_scans(m);
  return "";
}
std::string run_infer_shapes(Model& m, const PassContext& c) {
  infer_shapes(m, c.limits);
  return "";
}
std::string run_qdq_to_int8(Model& m, const PassContext&) {
  const QdqImportStats s = qdq_to_int8(m);
  return std::to_string(s.qlinear) + " QLinearMatMul/QLinearConv, " + std::to_string(s.integer) +
         " MatMulInteger/ConvInteger";
}
std::string run_fold_constants(Model& m, const PassContext& c) {
  FoldStats s = fold_constants(m, c.limits.max_fold_elements);
  // An If replaced by its taken branch leaves the shapes inference merged from both branches
  // (fresh symbols where they differ): infer again from the branch alone, which may make
  // more conditions constant. Each round removes at least one If, so this ends.
  for (int64_t inlined = s.inlined_ifs; inlined > 0;) {
    infer_shapes(m, c.limits);
    const FoldStats again = fold_constants(m, c.limits.max_fold_elements);
    s.folded_nodes += again.folded_nodes;
    s.too_large = again.too_large;
    s.inlined_ifs += again.inlined_ifs;
    inlined = again.inlined_ifs;
  }
  std::string note = std::to_string(s.folded_nodes) + " nodes folded";
  if (s.inlined_ifs) note += ", " + std::to_string(s.inlined_ifs) + " If nodes replaced by the branch taken";
  if (s.too_large)
    note += "; " + std::to_string(s.too_large) + " with constant inputs left as run-time work (results over " +
            "max_fold_elements = " + std::to_string(c.limits.max_fold_elements) + ")";
  return note;
}
std::string run_sink_into_branches(Model& m, const PassContext& c) {
  const int64_t n = sink_into_branches(m, c.limits);
  return n ? std::to_string(n) + " If nodes took the nodes after them into their branches" : "";
}
std::string run_shape_arithmetic(Model& m, const PassContext&) {
  return std::to_string(shape_arithmetic_to_expressions(m)) + " nodes rewritten";
}
std::string run_canonicalize(Model& m, const PassContext& c) {
  std::string note;
  for (const auto& [name, count] : canonicalize(m, c.user_patterns))
    note += (note.empty() ? "" : ", ") + name + " " + std::to_string(count);
  return note;
}
std::string run_fuse_attention(Model& m, const PassContext&) {
  const AttentionFusionStats s = fuse_attention(m);
  return std::to_string(s.attention) + " Attention, " + std::to_string(s.masked_softmax) + " MaskedSoftmax";
}
std::string run_cse(Model& m, const PassContext&) {
  return std::to_string(eliminate_common_subexpressions(m)) + " merged";
}
std::string run_remove_identities(Model& m, const PassContext&) {
  remove_identities(m);
  return "";
}
std::string run_fold_batch_norm(Model& m, const PassContext&) {
  return std::to_string(fold_batch_norm(m)) + " folded";
}
std::string run_fuse_epilogues(Model& m, const PassContext&) {
  const FuseEpilogueStats s = fuse_epilogues(m);
  return std::to_string(s.matmuls) + " FusedMatMul, " + std::to_string(s.convs) + " FusedConv";
}
std::string run_choose_layout(Model& m, const PassContext& c) {
  const ChooseLayoutStats s = choose_layout(m, c.layout);
  return std::string("layout ") + layout_choice_name(c.layout) + ": " + std::to_string(s.chains) + " chains, " +
         std::to_string(s.convs) + " FusedConv NHWC, " + std::to_string(s.pools) + " pools NHWC, " +
         std::to_string(s.transposes) + " Transpose";
}
std::string run_eliminate_dead_code(Model& m, const PassContext&) {
  eliminate_dead_code(m);
  return "";
}
std::string run_find_kv_cache(Model& m, const PassContext& c) {
  return kv_cache_note(find_kv_cache(m, c.kv_cache));
}

std::string pass_names() {
  std::string s;
  for (const PassInfo& p : all_passes()) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

}  // namespace

const std::vector<PassInfo>& all_passes() {
  static const std::vector<PassInfo> passes = {
#define CUVIL_PASS(id, name, what) {name, what, run_##id},
#include "passes/passes.def"
  };
  return passes;
}

const PassInfo* find_pass(const std::string& name) {
  for (const PassInfo& p : all_passes())
    if (name == p.name) return &p;
  return nullptr;
}


std::vector<PassRecord> run_passes(Model& model, const PipelineOptions& options) {
  if (!options.stop_after.empty() && options.stop_after != kStopAfterImport && !find_pass(options.stop_after))
    fail(ExitCode::kUsage, "--stop-after '", options.stop_after, "': no such pass (", kStopAfterImport,
         " or a pass, in order: ", pass_names(), ")");
  for (const std::string& name : options.skip) {
    if (!find_pass(name))
      fail(ExitCode::kUsage, "--skip-pass '", name, "': no such pass (in order: ", pass_names(), ")");
    if (name == "infer-shapes") fail(ExitCode::kUsage, "--skip-pass infer-shapes: code generation needs every shape");
  }
  std::vector<PassRecord> records;
  if (options.stop_after == kStopAfterImport) return records;
  for (const PassInfo& pass : all_passes()) {
    if (options.skip.count(pass.name)) {
      if (options.stop_after == pass.name) break;
      continue;
    }
    PassRecord r;
    r.name = pass.name;
    r.nodes_before = count_nodes(*model.graph);
    const auto start = std::chrono::steady_clock::now();
    r.note = pass.run(model, options.context);
    r.milliseconds =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    r.nodes_after = count_nodes(*model.graph);
    if (options.verify_each) verify_model(model);
    if (options.after_pass) options.after_pass(r, model);
    records.push_back(r);
    if (options.stop_after == pass.name) break;
  }
  return records;
}

}  // namespace cuvil
