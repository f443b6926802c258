#include "cli/cuvilc_report.h"

#include <sys/resource.h>

#include <cstdio>
#include <sstream>

#include "support/json_text.h"

namespace cuvil {
namespace {


std::string ms(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

}  // namespace

int64_t peak_rss_bytes() {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string passes_summary(const std::vector<PassRecord>& passes) {
  std::ostringstream os;
  for (const PassRecord& p : passes)
    os << "pass " << p.name << ": nodes " << p.nodes_before << " -> " << p.nodes_after
       << (p.note.empty() ? "" : "; " + p.note) << "\n";
  return os.str();
}

std::string report_to_json(const CompileReport& r) {
  std::ostringstream os;
  os << "{\n";
  os << "  \"cuvil\": \"0.1.0\",\n";
  os << "  \"model\": " << json_string(r.model) << ",\n";
  os << "  \"output\": " << json_string(r.output) << ",\n";
  os << "  \"nodes_imported\": " << r.nodes_imported << ",\n";
  os << "  \"nodes_after_passes\": " << r.nodes_after_passes << ",\n";
  os << "  \"passes\": [";
  for (size_t i = 0; i < r.passes.size(); ++i) {
    const PassRecord& p = r.passes[i];
    os << (i ? ",\n" : "\n") << "    {\"name\": " << json_string(p.name) << ", \"ms\": " << ms(p.milliseconds)
       << ", \"nodes_before\": " << p.nodes_before << ", \"nodes_after\": " << p.nodes_after
       << ", \"note\": " << json_string(p.note) << "}";
  }
  os << (r.passes.empty() ? "],\n" : "\n  ],\n");
  os << "  \"tile_kernels\": " << r.tile_kernels << ",\n";
  os << "  \"fused_nodes\": " << r.fused_nodes << ",\n";
  os << "  \"op_calls\": " << r.op_calls << ",\n";
  os << "  \"nodes_not_emitted\": " << r.nodes_not_emitted << ",\n";
  os << "  \"buckets\": " << r.buckets << ",\n";
  os << "  \"tile_kernel_nodes\": [";
  for (size_t k = 0; k < r.kernel_nodes.size(); ++k) {
    os << (k ? ",\n    [" : "\n    [");
    for (size_t i = 0; i < r.kernel_nodes[k].size(); ++i) os << (i ? ", " : "") << json_string(r.kernel_nodes[k][i]);
    os << "]";
  }
  os << (r.kernel_nodes.empty() ? "],\n" : "\n  ],\n");
  os << "  \"not_fused\": [";
  for (size_t i = 0; i < r.not_fused.size(); ++i)
    os << (i ? ",\n" : "\n") << "    {\"node\": " << json_string(r.not_fused[i].node)
       << ", \"op\": " << json_string(r.not_fused[i].op) << ", \"why\": " << json_string(r.not_fused[i].why) << "}";
  os << (r.not_fused.empty() ? "],\n" : "\n  ],\n");
  os << "  \"pattern_matches\": {";
  for (size_t i = 0; i < r.pattern_matches.size(); ++i)
    os << (i ? ", " : "") << json_string(r.pattern_matches[i].first) << ": " << r.pattern_matches[i].second;
  os << "},\n";
  os << "  \"arena_bytes\": " << json_string(r.arena_bytes) << ",\n";
  os << "  \"package_bytes\": " << r.package_bytes << ",\n";
  os << "  \"time_ms\": {\"import\": " << ms(r.import_ms) << ", \"passes\": " << ms(r.passes_ms)
     << ", \"lower\": " << ms(r.lower_ms) << ", \"package\": " << ms(r.package_ms) << ", \"total\": "
     << ms(r.total_ms) << "},\n";
  if (!r.quantization_json.empty()) os << "  \"quantization\": " << r.quantization_json << ",\n";
  os << "  \"peak_rss_bytes\": " << peak_rss_bytes() << "\n";
  os << "}\n";
  return os.str();
}

}  // namespace cuvil
