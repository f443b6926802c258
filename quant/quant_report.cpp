// The per-layer error report as text, JSON and SVG (quant/quant_report.h).
#include "quant/quant_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "support/json_text.h"

namespace cuvil::quant {
namespace {

std::string num(double v, const char* fmt = "%.4g") {
  if (std::isinf(v)) return v > 0 ? "1e308" : "-1e308";  // JSON has no infinity
  if (std::isnan(v)) return "0";
  char buf[48];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string line(const LayerError& e) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "SQNR %6.2f dB, cosine %.6f, rel L2 %.4g", e.sqnr_db, e.cosine, e.rel_l2);
  return e.op + " '" + e.node + "': " + buf;
}

std::string xml(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '&') o += "&amp;";
    else if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

// Badness in [0, 1] per metric, for the colour: 0 is good (green), 1 is bad (red).
// SQNR: 40 dB or more is 0, 10 dB or less is 1; cosine: 1 - cos scaled so 0.99 is 1;
// rel L2: 0 is 0, 0.3 or more is 1.
double badness(int metric, const LayerError& e) {
  double b = 0;
  if (metric == 0) b = (40.0 - e.sqnr_db) / 30.0;
  if (metric == 1) b = (1.0 - e.cosine) / 0.01;
  if (metric == 2) b = e.rel_l2 / 0.3;
  return std::clamp(std::isnan(b) ? 1.0 : b, 0.0, 1.0);
}

std::string colour(double b) {
  // green (good) -> yellow -> red (bad)
  const int r = static_cast<int>(std::lround(b < 0.5 ? 510 * b : 255));
  const int g = static_cast<int>(std::lround(b < 0.5 ? 200 : 200 * (1 - b) * 2));
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x40", std::clamp(r, 0, 255), std::clamp(g, 0, 255));
  return buf;
}

}  // namespace

std::string quant_report_text(const QuantizeResult& r) {
  std::ostringstream os;
  os << "quantization: w8a8, " << r.method << " calibration over " << r.samples << " samples; "
     << r.layers.size() << " layers int8, " << r.fallbacks.size() + r.not_quantized.size() << " float32\n";
  for (const LayerError& e : r.layers) os << "  quantized " << line(e) << "\n";
  for (const LayerError& e : r.fallbacks) os << "  fallback  " << line(e) << " (below the SQNR threshold)\n";
  for (const auto& [node, why] : r.not_quantized) os << "  float32   '" << node << "': " << why << "\n";
  return os.str();
}

std::string quant_report_json(const QuantizeResult& r, const std::string& in) {
  std::ostringstream os;
  auto layer = [&](const LayerError& e) {
    return "{\"node\": " + json_string(e.node) + ", \"op\": " + json_string(e.op) + ", \"output\": " +
           json_string(e.output) + ", \"sqnr_db\": " + num(e.sqnr_db) + ", \"cosine\": " + num(e.cosine, "%.8g") +
           ", \"rel_l2\": " + num(e.rel_l2) + "}";
  };
  os << "{\n" << in << "  \"scheme\": \"w8a8\",\n" << in << "  \"method\": " << json_string(r.method) << ",\n"
     << in << "  \"samples\": " << r.samples << ",\n" << in << "  \"layers\": [";
  for (size_t i = 0; i < r.layers.size(); ++i) os << (i ? ",\n" : "\n") << in << "    " << layer(r.layers[i]);
  os << (r.layers.empty() ? "],\n" : "\n" + in + "  ],\n") << in << "  \"fallbacks\": [";
  for (size_t i = 0; i < r.fallbacks.size(); ++i) os << (i ? ",\n" : "\n") << in << "    " << layer(r.fallbacks[i]);
  os << (r.fallbacks.empty() ? "],\n" : "\n" + in + "  ],\n") << in << "  \"not_quantized\": [";
  for (size_t i = 0; i < r.not_quantized.size(); ++i)
    os << (i ? ",\n" : "\n") << in << "    {\"node\": " << json_string(r.not_quantized[i].first)
       << ", \"why\": " << json_string(r.not_quantized[i].second) << "}";
  os << (r.not_quantized.empty() ? "]\n" : "\n" + in + "  ]\n") << in << "}";
  return os.str();
}

std::string quant_report_svg(const QuantizeResult& r) {
  // Rows: quantized layers, then fallbacks (marked); columns: SQNR, cosine, rel L2; each cell
  // holds its value, coloured by how bad it is; a colour scale below.
  std::vector<std::pair<const LayerError*, bool>> rows;
  for (const auto& e : r.layers) rows.push_back({&e, false});
  for (const auto& e : r.fallbacks) rows.push_back({&e, true});
  size_t label_chars = 12;
  for (const auto& [e, fb] : rows) label_chars = std::max(label_chars, e->node.size() + e->op.size() + 3 + (fb ? 11 : 0));
  const int label_w = static_cast<int>(std::min<size_t>(label_chars, 60) * 7 + 16);
  const int cell_w = 110, cell_h = 22, top = 64;
  const int width = label_w + 3 * cell_w + 20;
  const int height = top + static_cast<int>(std::max<size_t>(rows.size(), 1)) * cell_h + 90;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
     << "\" font-family=\"monospace\" font-size=\"12\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << "<text x=\"8\" y=\"18\" font-size=\"14\" font-weight=\"bold\">cuvil W8A8 per-layer error (" << xml(r.method)
     << " calibration, " << r.samples << " samples)</text>\n";
  const char* metrics[3] = {"SQNR (dB)", "cosine", "rel L2"};
  for (int m = 0; m < 3; ++m)
    os << "<text x=\"" << label_w + m * cell_w + cell_w / 2 << "\" y=\"" << top - 10
       << "\" text-anchor=\"middle\" font-weight=\"bold\">" << metrics[m] << "</text>\n";
  if (rows.empty())
    os << "<text x=\"8\" y=\"" << top + 15 << "\">no quantized layers</text>\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const LayerError& e = *rows[i].first;
    const int y = top + static_cast<int>(i) * cell_h;
    std::string label = e.op + " " + e.node + (rows[i].second ? " (fallback)" : "");
    if (label.size() > 60) label = label.substr(0, 57) + "...";
    os << "<text x=\"8\" y=\"" << y + 15 << "\">" << xml(label) << "</text>\n";
    const double values[3] = {e.sqnr_db, e.cosine, e.rel_l2};
    const char* fmts[3] = {"%.2f", "%.6f", "%.4g"};
    for (int m = 0; m < 3; ++m) {
      const int x = label_w + m * cell_w;
      os << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << cell_w - 2 << "\" height=\"" << cell_h - 2
         << "\" fill=\"" << colour(badness(m, e)) << "\"><title>" << xml(e.node) << " " << metrics[m] << " "
         << num(values[m], fmts[m]) << "</title></rect>\n";
      os << "<text x=\"" << x + cell_w / 2 << "\" y=\"" << y + 15 << "\" text-anchor=\"middle\">"
         << num(values[m], fmts[m]) << "</text>\n";
    }
  }
  // The colour scale: ten steps from good to bad, with each metric's ends.
  const int sy = top + static_cast<int>(std::max<size_t>(rows.size(), 1)) * cell_h + 20;
  os << "<text x=\"8\" y=\"" << sy + 13 << "\">colour scale</text>\n";
  for (int k = 0; k < 10; ++k)
    os << "<rect x=\"" << label_w + k * 30 << "\" y=\"" << sy << "\" width=\"30\" height=\"16\" fill=\""
       << colour(k / 9.0) << "\"/>\n";
  os << "<text x=\"" << label_w << "\" y=\"" << sy + 32 << "\">good: SQNR &gt;= 40 dB, cosine 1, rel L2 0</text>\n";
  os << "<text x=\"" << label_w << "\" y=\"" << sy + 48
     << "\">bad: SQNR &lt;= 10 dB, cosine &lt;= 0.99, rel L2 &gt;= 0.3</text>\n";
  os << "</svg>\n";
  return os.str();
}

}  // namespace cuvil::quant
