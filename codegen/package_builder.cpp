#include "codegen/package_builder.h"

#include <sstream>

#include "ir/printer.h"
#include "runtime/crc32.h"
#include "runtime/package.h"
#include "support/error.h"

namespace cuvil::codegen {

namespace {

rt::PackageContents package_contents(const Model& model, const LoweredModel& lowered,
                                     const std::string& passes_report) {
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
  for (const rt::Symbol& s : lowered.program.symbols)
    m.push_back({"symbol", s.name + " " + std::to_string(s.lo) + ":" + (s.hi == INT64_MAX ? std::string() : std::to_string(s.hi)) +
                               (s.data_dependent ? " data-dependent" : "")});
  m.push_back({"target", "cpu"});
  m.push_back({"buckets", "1"});  // the compiler writes one program (shape buckets: issue 10)
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
  contents.programs.push_back({lowered.program, {}});
  contents.report = report.str();
  return contents;
}

// Zero bytes for the padding between weights (at most 63 at a time).
constexpr uint8_t kZeros[64] = {};

}  // namespace

PackagePieces build_package_pieces(const Model& model, const LoweredModel& lowered,
                                   const std::string& passes_report) {
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
  out.head = rt::write_package_head(package_contents(model, lowered, passes_report), at, crc);
  out.size = out.head.size() + at;
  return out;
}

std::vector<uint8_t> build_package(const Model& model, const LoweredModel& lowered,
                                   const std::string& passes_report) {
  rt::PackageContents contents = package_contents(model, lowered, passes_report);
  contents.weights = gather_weights(lowered);
  return rt::write_package(contents);
}

}  // namespace cuvil::codegen
