#include "codegen/package_builder.h"

#include <sstream>

#include "ir/printer.h"
#include "runtime/crc32.h"
#include "runtime/package.h"
#include "runtime/state_layout.h"
#include "support/error.h"

namespace cuvil::codegen {

namespace {

rt::PackageContents package_contents(const Model& model, const LoweredModel& lowered,
                                     const std::string& passes_report, size_t programs,
                                     const std::vector<uint8_t>& ptx_section) {
  const Graph& g = *model.graph;
  std::vector<rt::ManifestEntry> m;
  m.push_back({"cuvil", "0.1.0"});
  std::string file = model.source_path;
  if (auto slash = file.find_last_of('/'); slash != std::string::npos) file = file.substr(slash + 1);
  m.push_back({"model", file});
  if (!model.producer_name.empty()) m.push_back({"producer", model.producer_name + " " + model.producer_version});
  for (const auto& [domain, version] : model.opset_imports)
    m.push_back({"opset", (domain.empty() ? std::string("ai.onnx") : domain) + " " + std::to_string(version)});
  for (ValueId id : g.inputs) m.push_back({"input", value_ref(g.value(id).name).substr(1) + " " + type_to_string(g.value(id))});
  for (ValueId id : g.outputs) m.push_back({"output", value_ref(g.value(id).name).substr(1) + " " + type_to_string(g.value(id))});
  for (rt::Symbol s : lowered.program.symbols) {
    if (model.ranges.has(s.name)) {  // the declared range, not a bucket's
      s.lo = model.ranges.get(s.name).lo;
      s.hi = model.ranges.get(s.name).hi;
    }
    m.push_back({"symbol", s.name + " " + std::to_string(s.lo) + ":" + (s.hi == INT64_MAX ? std::string() : std::to_string(s.hi)) +
                               (s.data_dependent ? " data-dependent" : "")});
  }
  m.push_back({"target", "cpu"});
  m.push_back({"buckets", std::to_string(programs)});
  m.push_back({"arena_bytes", lowered.arena_expr});
  m.push_back({"intermediate_bytes", lowered.intermediates_expr});
  m.push_back({"weights_bytes", std::to_string(lowered.weights_size)});

  std::ostringstream report;
  report << "nodes: " << g.nodes.size() << "\n";
  report << "tile kernels: " << lowered.fused_kernels << " (fusing " << lowered.fused_nodes << " nodes)\n";
  report << "whole-tensor op calls: " << lowered.call_ops << "\n";
  report << "arena bytes: " << lowered.arena_expr << "\n";
  report << "sum of intermediate bytes: " << lowered.intermediates_expr << "\n";
  report << passes_report;

  rt::PackageContents contents;
  contents.manifest = rt::render_manifest(m);
  if (programs == 1) contents.programs.push_back({lowered.program, {}});
  contents.report = report.str();
  contents.ptx = ptx_section;
  return contents;
}

// `p`'s symbols in `order` (program 0's), with the model's declared ranges: the programs of a
// package share one symbol table. Expressions refer to symbols by index, so they are renumbered.
void adopt_symbol_table(rt::Program& p, const rt::Program& order, const Model& model, size_t index) {
  std::vector<uint32_t> remap(p.symbols.size(), rt::kNone);
  for (size_t i = 0; i < p.symbols.size(); ++i)
    for (size_t j = 0; j < order.symbols.size(); ++j)
      if (order.symbols[j].name == p.symbols[i].name) remap[i] = static_cast<uint32_t>(j);
  std::string mine, theirs;
  for (const auto& s : p.symbols) mine += " " + s.name;
  for (const auto& s : order.symbols) theirs += " " + s.name;
  for (uint32_t r : remap)
    CUVIL_ASSERT(r != rt::kNone && p.symbols.size() == order.symbols.size(),
                 "bucket " << index << " lowered to symbols" << mine << ", bucket 0 to" << theirs);
  for (rt::ExprOp& op : p.expr_code)
    if (op.kind == rt::ExprOpKind::kSymbol) op.value = remap[static_cast<size_t>(op.value)];
  std::vector<rt::Symbol> symbols = order.symbols;
  for (rt::Symbol& s : symbols) {
    if (!model.ranges.has(s.name)) continue;
    const sym::Range r = model.ranges.get(s.name);
    s.lo = r.lo;
    s.hi = r.hi;
  }
  p.symbols = std::move(symbols);
}

// The STATE records of `pairs`, by position among `p`'s inputs and outputs (program 0's: every
// program has the same interface and symbol table).
std::vector<rt::StateRecord> state_records(const rt::Program& p, const std::vector<KvCachePair>& pairs) {
  std::vector<rt::StateRecord> out;
  auto position = [&](const std::vector<uint32_t>& ids, const std::string& name) {
    for (size_t i = 0; i < ids.size(); ++i)
      if (p.tensors[ids[i]].name == name) return static_cast<uint32_t>(i);
    CUVIL_ASSERT(false, "cache pair '" << name << "' is not an input or output of the lowered program");
    return rt::kNone;
  };
  for (const KvCachePair& pair : pairs) {
    rt::StateRecord r;
    r.name = pair.input;
    r.input = position(p.inputs, pair.input);
    r.output = position(p.outputs, pair.output);
    r.axis = static_cast<uint32_t>(pair.axis);
    r.symbol = rt::kNone;
    for (size_t j = 0; j < p.symbols.size(); ++j)
      if (p.symbols[j].name == pair.symbol) r.symbol = static_cast<uint32_t>(j);
    CUVIL_ASSERT(r.symbol != rt::kNone, "cache length symbol '" << pair.symbol << "' is not in the symbol table");
    r.dtype = pair.dtype;
    r.max_dims = pair.max_dims;
    out.push_back(std::move(r));
  }
  return out;
}

// Zero bytes for the padding between weights (at most 63 at a time).
constexpr uint8_t kZeros[64] = {};

}  // namespace

PackagePieces build_package_pieces(const Model& model, const LoweredModel& lowered,
                                   const std::string& passes_report, const std::vector<uint8_t>& ptx_section) {
  return build_package_pieces(model, std::vector<BucketProgram>{{&lowered, Bucket{}}}, passes_report, ptx_section);
}

PackagePieces build_package_pieces(const Model& model, const std::vector<BucketProgram>& programs,
                                   const std::string& passes_report, const std::vector<uint8_t>& ptx_section,
                                   const std::vector<KvCachePair>& states) {
  CUVIL_ASSERT(!programs.empty(), "a package needs a program");
  const LoweredModel& lowered = *programs.front().lowered;
  PackagePieces out;
  uint64_t at = 0;
  uint32_t crc = 0;
  auto add = [&](const uint8_t* data, size_t size) {
    if (size == 0) return;
    out.weights.emplace_back(reinterpret_cast<const char*>(data), size);
    crc = rt::crc32c(data, size, crc);
    at += size;
  };
  for (const WeightPiece& p : lowered.weight_pieces) {
    CUVIL_ASSERT(p.offset >= at && p.offset - at < sizeof kZeros, "weight pieces out of order");
    add(kZeros, static_cast<size_t>(p.offset - at));
    add(p.data->bytes.data(), p.data->bytes.size());
  }
  CUVIL_ASSERT(at == lowered.weights_size, "weight pieces do not fill the section");
  rt::PackageContents contents = package_contents(model, lowered, passes_report, programs.size(), ptx_section);
  if (programs.size() > 1) {
    std::ostringstream report;
    for (size_t i = 0; i < programs.size(); ++i) {
      const LoweredModel& l = *programs[i].lowered;
      CUVIL_ASSERT(l.weights_size == lowered.weights_size && l.weight_pieces.size() == lowered.weight_pieces.size(),
                   "bucket " << i << " places the weights differently from bucket 0");
      for (size_t w = 0; w < l.weight_pieces.size(); ++w)
        CUVIL_ASSERT(l.weight_pieces[w].offset == lowered.weight_pieces[w].offset &&
                         l.weight_pieces[w].data == lowered.weight_pieces[w].data,
                     "bucket " << i << " places weight " << w << " differently from bucket 0");
      rt::PackageProgram p{l.program, {}};
      adopt_symbol_table(p.program, lowered.program, model, i);
      if (i + 1 < programs.size())
        for (const auto& [name, r] : programs[i].bucket.ranges) {
          uint32_t sym = rt::kNone;
          for (size_t j = 0; j < p.program.symbols.size(); ++j)
            if (p.program.symbols[j].name == name) sym = static_cast<uint32_t>(j);
          CUVIL_ASSERT(sym != rt::kNone, "bucket symbol " << name << " is not in the program's symbol table");
          p.guard.ranges.push_back({sym, r.lo, r.hi});
        }
      report << "bucket " << i << ": " << bucket_to_string(programs[i].bucket) << "; " << l.fused_kernels
             << " tile kernels, " << l.call_ops << " op calls; arena " << l.arena_expr << " bytes\n";
      contents.programs.push_back(std::move(p));
    }
    contents.report += report.str();
  }
  contents.states = state_records(lowered.program, states);
  if (!states.empty()) {
    // The manifest names the state for `cuvilc inspect` and humans, with the layout a session
    // will choose from these programs (runtime/state_layout.h); the STATE section is what the
    // runtime reads.
    std::vector<const rt::Program*> lowered_programs;
    for (const rt::PackageProgram& p : contents.programs) lowered_programs.push_back(&p.program);
    const std::vector<rt::StateLayout> layouts = rt::plan_state_layouts(lowered_programs, contents.states);
    std::vector<rt::ManifestEntry> extra;
    std::ostringstream report;
    for (size_t i = 0; i < states.size(); ++i) {
      const KvCachePair& pair = states[i];
      std::string dims;
      for (size_t k = 0; k < pair.max_dims.size(); ++k) dims += (k ? ", " : "") + std::to_string(pair.max_dims[k]);
      extra.push_back({"state", pair.input + " " + dtype_name(pair.dtype) + "[" + dims + "] length " + pair.symbol +
                                    " axis " + std::to_string(pair.axis) + " -> " + pair.output + "; " +
                                    rt::state_layout_text(layouts[i])});
      report << "state " << pair.input << ": " << rt::state_layout_text(layouts[i]) << "\n";
    }
    contents.manifest += rt::render_manifest(extra).substr(rt::render_manifest({}).size());
    contents.report += report.str();
  }
  out.head = rt::write_package_head(contents, at, crc);
  out.size = out.head.size() + at;
  return out;
}

std::vector<uint8_t> build_package(const Model& model, const LoweredModel& lowered,
                                   const std::string& passes_report, const std::vector<uint8_t>& ptx_section) {
  rt::PackageContents contents = package_contents(model, lowered, passes_report, 1, ptx_section);
  contents.weights = gather_weights(lowered);
  return rt::write_package(contents);
}

}  // namespace cuvil::codegen
