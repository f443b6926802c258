// Calibration observers and range choice (quant/observer.h). Entropy follows TensorRT's
// calibrator (and ONNX Runtime's EntropyCalibrater): the threshold whose clipped, 128-level
// requantized histogram has the least KL divergence from the original.
#include "quant/observer.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cuvil::quant {

void Observer::observe_range(const float* x, int64_t n, double ema_alpha) {
  if (n <= 0) return;
  double lo = x[0], hi = x[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, static_cast<double>(x[i]));
    hi = std::max(hi, static_cast<double>(x[i]));
  }
  if (!seen_) {
    min_ = lo;
    max_ = hi;
    ema_min_ = lo;
    ema_max_ = hi;
    seen_ = true;
    return;
  }
  min_ = std::min(min_, lo);
  max_ = std::max(max_, hi);
  ema_min_ = ema_alpha * lo + (1 - ema_alpha) * ema_min_;
  ema_max_ = ema_alpha * hi + (1 - ema_alpha) * ema_max_;
}

void Observer::observe_histogram(const float* x, int64_t n) {
  if (hist_.empty()) hist_.assign(kHistogramBins, 0.0);
  const double top = abs_max();
  if (top <= 0) {
    hist_[0] += static_cast<double>(n);
    return;
  }
  const double per_bin = kHistogramBins / top;
  for (int64_t i = 0; i < n; ++i) {
    int b = static_cast<int>(std::fabs(static_cast<double>(x[i])) * per_bin);
    hist_[std::min(b, kHistogramBins - 1)] += 1;
  }
}

double Observer::threshold_percentile(double p) const {
  double total = 0;
  for (double c : hist_) total += c;
  if (total <= 0) return abs_max();
  const double want = total * p / 100.0;
  double acc = 0;
  for (int i = 0; i < kHistogramBins; ++i) {
    acc += hist_[i];
    if (acc >= want) return abs_max() * (i + 1) / kHistogramBins;
  }
  return abs_max();
}

double Observer::threshold_entropy() const {
  constexpr int kLevels = 128;
  double total = 0;
  for (double c : hist_) total += c;
  if (total <= 0 || abs_max() <= 0) return abs_max();
  double best_kl = std::numeric_limits<double>::infinity();
  int best = kHistogramBins;
  std::vector<double> p(kHistogramBins), q(kHistogramBins);
  for (int i = kLevels; i <= kHistogramBins; ++i) {
    // p: the first i bins with everything beyond folded into the last; q: the first i bins
    // (without the clipped values) merged into kLevels groups and spread back evenly over the
    // non-empty bins of each group.
    std::copy(hist_.begin(), hist_.begin() + i, p.begin());
    double outliers = 0;
    for (int k = i; k < kHistogramBins; ++k) outliers += hist_[k];
    p[i - 1] += outliers;
    std::fill(q.begin(), q.begin() + i, 0.0);
    // Bin 0 (zero, exact on every grid: padding, a ReLU's zeros) is a level of its own; merged
    // into a group, its spike would dominate the divergence and push every clip down.
    q[0] = hist_[0];
    const double group = static_cast<double>(i) / kLevels;
    for (int g = 0; g < kLevels; ++g) {
      const int start = std::max(1, static_cast<int>(std::floor(g * group)));
      const int stop = g == kLevels - 1 ? i : static_cast<int>(std::floor((g + 1) * group));
      double sum = 0;
      int nonzero = 0;
      for (int k = start; k < stop; ++k) {
        sum += hist_[k];
        nonzero += hist_[k] != 0;
      }
      if (nonzero == 0) continue;
      for (int k = start; k < stop; ++k)
        if (hist_[k] != 0) q[k] = sum / nonzero;
    }
    // Both are normalised by the total count, not q by its own sum as TensorRT does: the
    // clipped mass then counts as divergence (at least -log(1 - clipped fraction)), where
    // renormalising makes a clip that leaves a single non-empty bin look perfect (it does on
    // discrete data such as 4-bit pixels or a ReLU's exact zeros).
    double kl = 0;
    for (int k = 0; k < i; ++k) {
      if (p[k] <= 0) continue;
      const double pk = p[k] / total;
      const double qk = (q[k] > 0 ? q[k] : 1e-4) / total;  // a bin only p has (the fold): smoothed
      kl += pk * std::log(pk / qk);
    }
    if (kl < best_kl) {
      best_kl = kl;
      best = i;
    }
  }
  return abs_max() * best / kHistogramBins;
}

double Observer::threshold_mse(bool symmetric) const {
  // The clip t in {k/100 * max|x|, k = 10..100} with the least expected squared error of
  // quantizing a value at each bin centre to the grid of [0, t] (one-sided ranges) or
  // [-t, t], clipping included.
  const double top = abs_max();
  if (top <= 0) return top;
  const bool one_sided = min_ >= 0;
  const double levels = one_sided && !symmetric ? 255.0 : (symmetric ? 127.0 : 127.5);
  double best_err = std::numeric_limits<double>::infinity(), best_t = top;
  for (int k = 10; k <= 100; ++k) {
    const double t = top * k / 100.0;
    const double step = t / levels;
    double err = 0;
    for (int b = 0; b < kHistogramBins; ++b) {
      if (hist_[b] == 0) continue;
      const double v = (b + 0.5) * top / kHistogramBins;
      const double q = std::min(std::round(v / step) * step, t);
      err += hist_[b] * (v - q) * (v - q);
    }
    if (err < best_err) {
      best_err = err;
      best_t = t;
    }
  }
  return best_t;
}

void Observer::choose_range(CalibrationMethod method, const QuantizeOptions& o, double* lo, double* hi) const {
  double l = min_, h = max_;
  switch (method) {
    case CalibrationMethod::kMinMax: break;
    case CalibrationMethod::kEma:
      l = ema_min_;
      h = ema_max_;
      break;
    case CalibrationMethod::kPercentile:
    case CalibrationMethod::kEntropy:
    case CalibrationMethod::kMse: {
      const double t = method == CalibrationMethod::kPercentile ? threshold_percentile(o.percentile)
                       : method == CalibrationMethod::kEntropy  ? threshold_entropy()
                                                                : threshold_mse(o.symmetric_activations);
      // Histogram methods clip |x|: a one-sided activation (after ReLU) keeps [0, t].
      l = min_ >= 0 ? 0.0 : -t;
      h = max_ <= 0 ? 0.0 : t;
      break;
    }
  }
  *lo = std::min(l, 0.0);
  *hi = std::max(h, 0.0);
}

QuantParams activation_params(double lo, double hi, bool symmetric) {
  QuantParams p;
  p.is_signed = symmetric;
  if (symmetric) {
    const double a = std::max(-lo, hi);
    p.scale = a > 0 ? static_cast<float>(a / 127.0) : 1.0f;
    p.zero_point = 0;
    return p;
  }
  const double range = hi - lo;
  if (!(range > 0)) return p;
  p.scale = static_cast<float>(range / 255.0);
  const double zp = std::round(-lo / static_cast<double>(p.scale));
  p.zero_point = static_cast<int32_t>(std::clamp(zp, 0.0, 255.0));
  return p;
}

float weight_scale(double abs_max) { return abs_max > 0 ? static_cast<float>(abs_max / 127.0) : 1.0f; }

}  // namespace cuvil::quant
