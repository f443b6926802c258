// The per-layer quantization error report in its three forms: text (the package's REPORT
// section, which `cuvilc inspect` prints, and cuvilc's stderr), a JSON object (report.json's
// "quantization") and an SVG heatmap of layers x metrics (`--quant-report FILE.svg`), written
// by hand so cuvilc needs no plotting library. How to read it: docs/quantization.md.
#pragma once

#include <string>

#include "quant/quantize.h"

namespace cuvil::quant {

std::string quant_report_text(const QuantizeResult& r);
std::string quant_report_json(const QuantizeResult& r, const std::string& indent = "  ");
std::string quant_report_svg(const QuantizeResult& r);

}  // namespace cuvil::quant
