// W8A8 quantization settings (`cuvilc quantize`, `cuvilc compile --quantize w8a8`, the config's
// `quantize:` section; docs/quantization.md): where the calibration data is, how activation
// ranges are chosen, and per-node overrides. Header-only so CompileOptions can hold it without
// the options library linking the quantizer.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cuvil {

// How an activation's range is chosen from what calibration observed (quant/observer.h).
enum class CalibrationMethod { kMinMax, kEma, kPercentile, kEntropy, kMse };

// Weight scales: one per output channel (the default, like ONNX Runtime's per_channel=True)
// or one per tensor.
enum class WeightGranularity { kPerChannel, kPerTensor };

// One row per method: its name on the command line and in YAML.
inline const char* calibration_method_name(CalibrationMethod m) {
  switch (m) {
    case CalibrationMethod::kMinMax: return "minmax";
    case CalibrationMethod::kEma: return "ema";
    case CalibrationMethod::kPercentile: return "percentile";
    case CalibrationMethod::kEntropy: return "entropy";
    case CalibrationMethod::kMse: return "mse";
  }
  return "?";
}
inline std::optional<CalibrationMethod> parse_calibration_method(const std::string& s) {
  for (CalibrationMethod m : {CalibrationMethod::kMinMax, CalibrationMethod::kEma, CalibrationMethod::kPercentile,
                              CalibrationMethod::kEntropy, CalibrationMethod::kMse})
    if (s == calibration_method_name(m)) return m;
  return std::nullopt;
}
inline std::vector<std::string> calibration_method_names() {
  return {"minmax", "ema", "percentile", "entropy", "mse"};
}

// A per-node override (`quantize.nodes:` in YAML): `name` is an ONNX node name.
struct QuantNodeOverride {
  std::string name;
  bool exclude = false;                          // keep this node in float32
  std::optional<CalibrationMethod> method;       // for the node's input activations
  std::optional<WeightGranularity> granularity;  // for the node's weight
};

struct QuantizeOptions {
  std::string calib_dir;  // --calib
  CalibrationMethod method = CalibrationMethod::kMinMax;
  double ema_alpha = 0.01;       // ema: weight of each new sample's min/max (ORT's averaging_constant)
  double percentile = 99.999;    // percentile: of |x|, in (0, 100]
  bool symmetric_activations = false;  // false: u8 with a zero point (ORT's default); true: s8, zero point 0
  WeightGranularity granularity = WeightGranularity::kPerChannel;
  // Layers whose SQNR (dB) over the calibration set is below this stay float32; 0 = none.
  double fallback_sqnr_db = 0;
  std::vector<QuantNodeOverride> nodes;

  const QuantNodeOverride* override_for(const std::string& node) const {
    for (const auto& o : nodes)
      if (o.name == node) return &o;
    return nullptr;
  }
};

}  // namespace cuvil
