// Activation observers for calibration: each quantizable activation gets one Observer, fed the
// tensor of every calibration sample in order. Pass 1 (observe_range) records min/max and the
// EMA of per-sample min/max; methods that need a histogram (percentile, entropy, mse) get a
// pass 2 (observe_histogram) over |x| on [0, max|x|] with kHistogramBins bins. choose_range
// then gives the clipping range [lo, hi] and activation_params the scale and zero point.
// Formulas: docs/quantization.md "## Calibration".
#pragma once

#include <cstdint>
#include <vector>

#include "options/quantize_options.h"

namespace cuvil::quant {

constexpr int kHistogramBins = 2048;

class Observer {
 public:
  void observe_range(const float* x, int64_t n, double ema_alpha);
  void observe_histogram(const float* x, int64_t n);
  bool needs_histogram(CalibrationMethod m) const {
    return m == CalibrationMethod::kPercentile || m == CalibrationMethod::kEntropy || m == CalibrationMethod::kMse;
  }
  // The clipping range for `method`; always lo <= 0 <= hi (zero must be exact).
  void choose_range(CalibrationMethod method, const QuantizeOptions& o, double* lo, double* hi) const;

  double min() const { return min_; }
  double max() const { return max_; }
  bool seen() const { return seen_; }

 private:
  double abs_max() const { return std::max(-min_, max_); }
  double threshold_percentile(double p) const;
  double threshold_entropy() const;
  double threshold_mse(bool symmetric) const;

  bool seen_ = false;
  double min_ = 0, max_ = 0;          // over all samples
  double ema_min_ = 0, ema_max_ = 0;  // EMA of per-sample min/max
  std::vector<double> hist_;          // of |x| on [0, abs_max()]
};

// Activation quantization parameters for a range: u8 with zero point (asymmetric) or s8 with
// zero point 0 (symmetric). scale > 0 always (a constant-zero range gets scale 1).
struct QuantParams {
  float scale = 1;
  int32_t zero_point = 0;
  bool is_signed = false;  // s8 (true) or u8
};
QuantParams activation_params(double lo, double hi, bool symmetric);
// Symmetric s8 weight scale for |w| <= abs_max: abs_max / 127 (values in [-127, 127]).
float weight_scale(double abs_max);

}  // namespace cuvil::quant
