// Signal-processing and loss kernels: DFT, STFT, the Hann/Hamming/Blackman windows,
// MelWeightMatrix, NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss and NonMaxSuppression.
// Transforms run in double through a mixed-radix FFT (smallest prime factor first), with
// Bluestein's algorithm for lengths that have a large prime factor, so every length costs
// O(n log n).
#include <algorithm>
#include <cmath>
#include <complex>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/cpu/ops/kernel_util.h"

namespace cuvil::rt::ops {
namespace {

using cd = std::complex<double>;
constexpr double kPi = 3.14159265358979323846;

bool is_float_dtype(DType t) { return visit_dtype<kFloatTypes>(t, [](auto) {}); }

// Largest transform length accepted (the output and the scratch stay far below memory caps).
constexpr int64_t kMaxDftLength = int64_t{1} << 22;

// Discrete Fourier transform of x (length n, stride xs) into y, with tw[t] = exp(sign 2 pi i t / N)
// and N / n = tw_step.
void fft_rec(const cd* x, int64_t xs, cd* y, int64_t n, const std::vector<cd>& tw, int64_t tw_step,
             std::vector<cd>& scratch) {
  if (n == 1) {
    y[0] = x[0];
    return;
  }
  int64_t p = n;
  for (int64_t f = 2; f * f <= n; ++f)
    if (n % f == 0) {
      p = f;
      break;
    }
  const int64_t m = n / p;
  if (m == 1) {  // prime length: direct sum
    for (int64_t k = 0; k < n; ++k) {
      cd acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += x[j * xs] * tw[((j * k) % n) * tw_step];
      scratch[k] = acc;
    }
    std::copy(scratch.begin(), scratch.begin() + n, y);
    return;
  }
  for (int64_t r = 0; r < p; ++r) fft_rec(x + r * xs, xs * p, y + r * m, m, tw, tw_step * p, scratch);
  for (int64_t k = 0; k < m; ++k)
    for (int64_t q = 0; q < p; ++q) {
      cd acc = 0;
      const int64_t e = k + q * m;
      for (int64_t r = 0; r < p; ++r) acc += y[r * m + k] * tw[((r * e) % n) * tw_step];
      scratch[q * m + k] = acc;
    }
  std::copy(scratch.begin(), scratch.begin() + n, y);
}

// n-point transform of one line. Lengths whose prime factors are all small use the mixed-radix
// recursion directly; others (large primes would make it quadratic) go through Bluestein's
// chirp-z identity jk = (j^2 + k^2 - (k - j)^2) / 2, a convolution done with power-of-two FFTs.
class Dft {
 public:
  Dft(int64_t n, bool inverse) : n_(n) {
    const double sign = inverse ? 1.0 : -1.0;
    if (largest_prime_factor(n) <= kDirectPrime) {
      tw_ = twiddles(n, sign);
      scratch_.resize(static_cast<size_t>(n));
      return;
    }
    bluestein_ = true;
    m_ = 1;
    while (m_ < 2 * n - 1) m_ *= 2;
    tw_ = twiddles(m_, -1.0);
    itw_ = twiddles(m_, 1.0);
    scratch_.resize(static_cast<size_t>(m_));
    chirp_.resize(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      const int64_t q = (t * t) % (2 * n);  // keeps the angle exact for long transforms
      chirp_[t] = std::polar(1.0, sign * kPi * static_cast<double>(q) / static_cast<double>(n));
    }
    std::vector<cd> d(static_cast<size_t>(m_), cd(0));
    for (int64_t t = 0; t < n; ++t) {
      d[t] = std::conj(chirp_[t]);
      if (t > 0) d[m_ - t] = std::conj(chirp_[t]);
    }
    dhat_.resize(static_cast<size_t>(m_));
    fft_rec(d.data(), 1, dhat_.data(), m_, tw_, 1, scratch_);
  }

  void run(const std::vector<cd>& in, std::vector<cd>* out) {
    out->resize(static_cast<size_t>(n_));
    if (!bluestein_) {
      fft_rec(in.data(), 1, out->data(), n_, tw_, 1, scratch_);
      return;
    }
    std::vector<cd> a(static_cast<size_t>(m_), cd(0)), ah(static_cast<size_t>(m_)), conv(static_cast<size_t>(m_));
    for (int64_t j = 0; j < n_; ++j) a[j] = in[j] * chirp_[j];
    fft_rec(a.data(), 1, ah.data(), m_, tw_, 1, scratch_);
    for (int64_t i = 0; i < m_; ++i) ah[i] *= dhat_[i];
    fft_rec(ah.data(), 1, conv.data(), m_, itw_, 1, scratch_);
    for (int64_t k = 0; k < n_; ++k) (*out)[k] = chirp_[k] * conv[k] / static_cast<double>(m_);
  }

 private:
  static constexpr int64_t kDirectPrime = 64;
  static int64_t largest_prime_factor(int64_t n) {
    int64_t best = 1;
    for (int64_t f = 2; f * f <= n; ++f)
      while (n % f == 0) {
        best = f;
        n /= f;
      }
    return std::max(best, n);
  }
  static std::vector<cd> twiddles(int64_t n, double sign) {
    std::vector<cd> tw(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t)
      tw[t] = std::polar(1.0, sign * 2.0 * kPi * static_cast<double>(t) / static_cast<double>(n));
    return tw;
  }

  int64_t n_, m_ = 0;
  bool bluestein_ = false;
  std::vector<cd> tw_, itw_, scratch_, chirp_, dhat_;
};

Status read_int_scalar(OpContext& ctx, const TensorView* t, const char* what, int64_t* out) {
  std::vector<int64_t> v;
  if (!read_int_tensor(t, &v) || v.size() != 1)
    return ctx.error(StatusCode::kInvalidArgument, what, " must be an integer scalar");
  *out = v[0];
  return Status::ok();
}

}  // namespace

// ---- DFT / STFT ------------------------------------------------------------------------------

Status kernel_DFT(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  if (!x) return ctx.error(StatusCode::kInvalidArgument, "expects input");
  if (!is_float_dtype(x->dtype)) return ctx.error(StatusCode::kInvalidArgument, "input must be a float tensor");
  const int64_t rank = static_cast<int64_t>(x->dims.size());
  if (rank < 2 || (x->dims.back() != 1 && x->dims.back() != 2))
    return ctx.error(StatusCode::kInvalidArgument, "input must be [..., 1] (real) or [..., 2] (complex), got ",
                     dims_string(x->dims));
  const bool inverse = ctx.attrs().get_int("inverse", 0) != 0;
  const bool onesided = ctx.attrs().get_int("onesided", 0) != 0;
  int64_t axis = ctx.opset() >= 20 ? -2 : ctx.attrs().get_int("axis", 1);
  if (ctx.opset() >= 20 && ctx.input(2)) CUVIL_RETURN_IF_ERROR(read_int_scalar(ctx, ctx.input(2), "axis", &axis));
  int64_t ax = 0;
  if (!normalize_axis(axis, rank, &ax) || ax == rank - 1)
    return ctx.error(StatusCode::kInvalidArgument, "axis ", axis, " is out of range for input ", dims_string(x->dims));
  const int64_t n_in = x->dims[ax];
  // onesided + inverse: the inverse real FFT (numpy's irfft): the first len / 2 + 1 bins of a
  // Hermitian spectrum in (the rest are their conjugates), a real signal of len points out.
  const bool irfft = onesided && inverse;
  int64_t len = irfft ? 2 * (n_in - 1) : n_in;
  if (ctx.input(1)) CUVIL_RETURN_IF_ERROR(read_int_scalar(ctx, ctx.input(1), "dft_length", &len));
  if (len < 1 || len > kMaxDftLength)
    return ctx.error(StatusCode::kInvalidArgument, "dft_length = ", len, " must be in [1, ", kMaxDftLength, "]");
  const bool complex_in = x->dims.back() == 2;
  if (onesided && complex_in && !inverse)
    return ctx.error(StatusCode::kInvalidArgument, "onesided requires a real input");
  const int64_t out_len = irfft || !onesided ? len : len / 2 + 1;
  const int64_t co = irfft ? 1 : 2;  // output parts: real only, or real and imaginary
  std::vector<int64_t> out_dims = x->dims;
  out_dims[ax] = out_len;
  out_dims.back() = co;
  int64_t total = 0;
  if (!dims_numel(out_dims, &total)) return ctx.error(StatusCode::kInvalidArgument, "output shape overflows");
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, out_dims, &y));
  std::vector<double> xb;
  const double* xp = compute_data<double>(*x, &xb);
  ComputeOutput<double> out(y);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < ax; ++d) outer *= x->dims[d];
  for (int64_t d = ax + 1; d < rank - 1; ++d) inner *= x->dims[d];
  const int64_t ci = complex_in ? 2 : 1;
  Dft dft(len, inverse);
  std::vector<cd> line(static_cast<size_t>(len)), res;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t j = 0; j < len; ++j) {
        const int64_t src = irfft && j > len / 2 ? len - j : j;  // bins past the half: conjugates
        if (src < n_in) {
          const double* e = xp + ((o * n_in + src) * inner + i) * ci;
          line[j] = cd(e[0], complex_in ? e[1] : 0.0);
          if (src != j) line[j] = std::conj(line[j]);
        } else {
          line[j] = 0;
        }
      }
      dft.run(line, &res);
      for (int64_t k = 0; k < out_len; ++k) {
        cd v = res[k];
        if (inverse) v /= static_cast<double>(len);
        double* e = out.data() + ((o * out_len + k) * inner + i) * co;
        e[0] = v.real();
        if (co == 2) e[1] = v.imag();
      }
    }
  out.finish();
  return Status::ok();
}

Status kernel_STFT(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* window = ctx.input(2);
  if (!x || !ctx.input(1)) return ctx.error(StatusCode::kInvalidArgument, "expects inputs signal and frame_step");
  if (!is_float_dtype(x->dtype)) return ctx.error(StatusCode::kInvalidArgument, "signal must be a float tensor");
  if (x->dims.size() != 3 || (x->dims[2] != 1 && x->dims[2] != 2))
    return ctx.error(StatusCode::kInvalidArgument, "signal must be [batch, length, 1 or 2], got ", dims_string(x->dims));
  int64_t step = 0;
  CUVIL_RETURN_IF_ERROR(read_int_scalar(ctx, ctx.input(1), "frame_step", &step));
  if (step < 1) return ctx.error(StatusCode::kInvalidArgument, "frame_step = ", step, " must be >= 1");
  int64_t flen = -1;
  if (window) {
    if (window->dims.size() != 1 || !is_float_dtype(window->dtype))
      return ctx.error(StatusCode::kInvalidArgument, "window must be a 1-D float tensor, got ", dims_string(window->dims));
    flen = window->dims[0];
  }
  if (ctx.input(3)) {
    int64_t f = 0;
    CUVIL_RETURN_IF_ERROR(read_int_scalar(ctx, ctx.input(3), "frame_length", &f));
    if (flen >= 0 && f != flen)
      return ctx.error(StatusCode::kInvalidArgument, "frame_length ", f, " differs from the window length ", flen);
    flen = f;
  }
  if (flen < 1 || flen > kMaxDftLength)
    return ctx.error(StatusCode::kInvalidArgument, "frame length must be in [1, ", kMaxDftLength, "] (give a window or frame_length)");
  const int64_t batch = x->dims[0], slen = x->dims[1];
  if (slen < flen)
    return ctx.error(StatusCode::kInvalidArgument, "signal length ", slen, " is shorter than the frame length ", flen);
  const bool complex_in = x->dims[2] == 2;
  const bool onesided = ctx.attrs().get_int("onesided", 1) != 0 && !complex_in;
  const int64_t frames = (slen - flen) / step + 1, bins = onesided ? flen / 2 + 1 : flen;
  const std::vector<int64_t> out_dims = {batch, frames, bins, 2};
  int64_t total = 0;
  if (!dims_numel(out_dims, &total)) return ctx.error(StatusCode::kInvalidArgument, "output shape overflows");
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, out_dims, &y));
  std::vector<double> xb, wb;
  const double* xp = compute_data<double>(*x, &xb);
  const double* wp = window ? compute_data<double>(*window, &wb) : nullptr;
  ComputeOutput<double> out(y);
  const int64_t ci = complex_in ? 2 : 1;
  Dft dft(flen, false);
  std::vector<cd> line(static_cast<size_t>(flen)), res;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t f = 0; f < frames; ++f) {
      for (int64_t j = 0; j < flen; ++j) {
        const double* e = xp + (b * slen + f * step + j) * ci;
        const double wv = wp ? wp[j] : 1.0;
        line[j] = cd(e[0] * wv, complex_in ? e[1] * wv : 0.0);
      }
      dft.run(line, &res);
      for (int64_t k = 0; k < bins; ++k) {
        double* e = out.data() + ((b * frames + f) * bins + k) * 2;
        e[0] = res[k].real();
        e[1] = res[k].imag();
      }
    }
  out.finish();
  return Status::ok();
}

// ---- windows and MelWeightMatrix -----------------------------------------------------------

namespace {

Status output_dtype(OpContext& ctx, DType* t) {
  const int64_t code = ctx.attrs().get_int("output_datatype", 1);
  auto d = dtype_from_onnx(static_cast<int32_t>(code));
  if (!d || !visit_dtype<kNumericTypes>(*d, [](auto) {}))
    return ctx.error(StatusCode::kInvalidArgument, "output_datatype ", code, " is not a supported numeric dtype");
  *t = *d;
  return Status::ok();
}

Status store_values(OpContext& ctx, DType t, const std::vector<int64_t>& dims, const std::vector<double>& v) {
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, t, dims, &y));
  visit_dtype<kNumericTypes>(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < v.size(); ++i) y->as<T>()[i] = convert<T>(static_cast<compute_t<T>>(v[i]));
  });
  return Status::ok();
}

Status window_kernel(OpContext& ctx, const double* coeffs, int terms) {
  int64_t size = 0;
  CUVIL_RETURN_IF_ERROR(read_int_scalar(ctx, ctx.input(0), "size", &size));
  if (size < 0 || size > kMaxDftLength)
    return ctx.error(StatusCode::kInvalidArgument, "size = ", size, " must be in [0, ", kMaxDftLength, "]");
  DType t;
  CUVIL_RETURN_IF_ERROR(output_dtype(ctx, &t));
  const bool periodic = ctx.attrs().get_int("periodic", 1) != 0;
  const double denom = static_cast<double>(periodic ? size : size - 1);
  std::vector<double> v(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    double acc = 0;
    for (int k = 0; k < terms; ++k)
      acc += coeffs[k] * (denom > 0 ? std::cos(2.0 * kPi * k * static_cast<double>(i) / denom) : 1.0);
    v[i] = acc;
  }
  return store_values(ctx, t, {size}, v);
}

}  // namespace

Status kernel_HannWindow(OpContext& ctx) {
  static const double c[] = {0.5, -0.5};
  return window_kernel(ctx, c, 2);
}
Status kernel_HammingWindow(OpContext& ctx) {
  static const double c[] = {25.0 / 46.0, -(1.0 - 25.0 / 46.0)};
  return window_kernel(ctx, c, 2);
}
Status kernel_BlackmanWindow(OpContext& ctx) {
  static const double c[] = {0.42, -0.5, 0.08};
  return window_kernel(ctx, c, 3);
}

Status kernel_MelWeightMatrix(OpContext& ctx) {
  for (size_t i = 0; i < 5; ++i)
    if (!ctx.input(i)) return ctx.error(StatusCode::kInvalidArgument, "input ", i, " is required");
  int64_t bins = 0, dft_len = 0, rate = 0;
  CUVIL_RETURN_IF_ERROR(read_int_scalar(ctx, ctx.input(0), "num_mel_bins", &bins));
  CUVIL_RETURN_IF_ERROR(read_int_scalar(ctx, ctx.input(1), "dft_length", &dft_len));
  CUVIL_RETURN_IF_ERROR(read_int_scalar(ctx, ctx.input(2), "sample_rate", &rate));
  double lo = 0, hi = 0;
  if (!read_scalar(ctx.input(3), &lo) || !read_scalar(ctx.input(4), &hi))
    return ctx.error(StatusCode::kInvalidArgument, "lower_edge_hertz and upper_edge_hertz must be scalars");
  if (bins < 1 || dft_len < 1 || rate < 1 || bins > kMaxDftLength || dft_len > kMaxDftLength)
    return ctx.error(StatusCode::kInvalidArgument, "num_mel_bins, dft_length and sample_rate must be positive");
  if (!(lo >= 0) || !(hi >= lo) || !std::isfinite(hi))
    return ctx.error(StatusCode::kInvalidArgument, "edge frequencies ", lo, " and ", hi, " are invalid");
  DType t;
  CUVIL_RETURN_IF_ERROR(output_dtype(ctx, &t));
  const int64_t spec_bins = dft_len / 2 + 1;
  int64_t total = 0;
  if (!dims_numel({spec_bins, bins}, &total) || total > (int64_t{1} << 31))
    return ctx.error(StatusCode::kInvalidArgument, "output [", spec_bins, ", ", bins, "] is too large");
  // As in the ONNX reference: num_mel_bins + 2 points evenly spaced in mel, mapped to FFT bins.
  const float lo_mel = 2595.0f * std::log10(1.0f + static_cast<float>(lo) / 700.0f);
  const float hi_mel = 2595.0f * std::log10(1.0f + static_cast<float>(hi) / 700.0f);
  const double step = (static_cast<double>(hi_mel) - lo_mel) / static_cast<double>(bins + 2);
  std::vector<int64_t> fb(static_cast<size_t>(bins + 2));
  for (int64_t i = 0; i < bins + 2; ++i) {
    const double mel = static_cast<double>(i) * step + lo_mel;
    const double hz = 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
    fb[i] = static_cast<int64_t>(std::floor(static_cast<double>(dft_len + 1) * hz / static_cast<double>(rate)));
  }
  std::vector<double> v(static_cast<size_t>(total), 0.0);
  for (int64_t i = 0; i < bins; ++i) {
    const int64_t l = fb[i], c = fb[i + 1], r = fb[i + 2];
    if (l < 0 || r >= spec_bins || c < l || r < c)
      return ctx.error(StatusCode::kInvalidArgument, "mel bin ", i, " maps to FFT bins [", l, ", ", r,
                       "] outside [0, ", spec_bins, "); lower the upper edge or raise dft_length");
    if (c == l) {
      v[c * bins + i] = 1.0;
    } else {
      for (int64_t j = l; j <= c; ++j) v[j * bins + i] = static_cast<double>(j - l) / static_cast<double>(c - l);
    }
    if (r > c)
      for (int64_t j = c; j < r; ++j) v[j * bins + i] = static_cast<double>(r - j) / static_cast<double>(r - c);
  }
  return store_values(ctx, t, {spec_bins, bins}, v);
}

// ---- losses ----------------------------------------------------------------------------------

namespace {

// Shared by both losses: logp is [N, C, D...] log-probabilities (or -loss inputs for NLL).
Status nll(OpContext& ctx, const TensorView& input, const double* logp, const TensorView& target,
           const TensorView* weight, size_t out_index, DType out_t) {
  const std::string reduction = ctx.attrs().get_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return ctx.error(StatusCode::kInvalidArgument, "reduction '", reduction, "' is invalid");
  const bool has_ignore = ctx.attrs().has("ignore_index");
  const int64_t ignore = ctx.attrs().get_int("ignore_index", 0);
  if (input.dims.size() < 2)
    return ctx.error(StatusCode::kInvalidArgument, "input must be [N, C, ...], got ", dims_string(input.dims));
  const int64_t n = input.dims[0], c = input.dims[1];
  std::vector<int64_t> tdims = {n};
  tdims.insert(tdims.end(), input.dims.begin() + 2, input.dims.end());
  if (target.dims != tdims)
    return ctx.error(StatusCode::kInvalidArgument, "target ", dims_string(target.dims), " must be ", dims_string(tdims));
  std::vector<int64_t> labels;
  if (!read_int_tensor(&target, &labels))
    return ctx.error(StatusCode::kInvalidArgument, "target must be an integer tensor");
  if (weight && (weight->dims.size() != 1 || weight->dims[0] != c || !is_float_dtype(weight->dtype)))
    return ctx.error(StatusCode::kInvalidArgument, "weight must be a float tensor of ", c, " values");
  const int64_t inner = target.numel() / std::max<int64_t>(n, 1);
  std::vector<double> loss(labels.size(), 0.0);
  double wsum = 0;
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t k = ni * inner + i;
      const int64_t lab = labels[k];
      if (has_ignore && lab == ignore) continue;
      if (lab < 0 || lab >= c)
        return ctx.error(StatusCode::kRuntime, "target[", k, "] = ", lab, " is outside [0, ", c, ")");
      const double w = weight ? load_as_double(*weight, lab) : 1.0;
      loss[k] = -logp[(ni * c + lab) * inner + i] * w;
      wsum += w;
    }
  TensorView* y = nullptr;
  if (reduction == "none") {
    CUVIL_RETURN_IF_ERROR(ctx.allocate_output(out_index, out_t, tdims, &y));
    ComputeOutput<double> out(y);
    std::copy(loss.begin(), loss.end(), out.data());
    out.finish();
    return Status::ok();
  }
  double total = 0;
  for (double v : loss) total += v;
  if (reduction == "mean") total = total / wsum;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(out_index, out_t, {}, &y));
  ComputeOutput<double> out(y);
  out.data()[0] = total;
  out.finish();
  return Status::ok();
}

}  // namespace

Status kernel_NegativeLogLikelihoodLoss(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* t = ctx.input(1);
  if (!x || !t) return ctx.error(StatusCode::kInvalidArgument, "expects inputs input and target");
  if (!is_float_dtype(x->dtype)) return ctx.error(StatusCode::kInvalidArgument, "input must be a float tensor");
  std::vector<double> xb;
  const double* xp = compute_data<double>(*x, &xb);
  return nll(ctx, *x, xp, *t, ctx.input(2), 0, x->dtype);
}

Status kernel_SoftmaxCrossEntropyLoss(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* t = ctx.input(1);
  if (!x || !t) return ctx.error(StatusCode::kInvalidArgument, "expects inputs scores and labels");
  if (!is_float_dtype(x->dtype)) return ctx.error(StatusCode::kInvalidArgument, "scores must be a float tensor");
  if (x->dims.size() < 2)
    return ctx.error(StatusCode::kInvalidArgument, "scores must be [N, C, ...], got ", dims_string(x->dims));
  const int64_t n = x->dims[0], c = x->dims[1], inner = x->numel() / std::max<int64_t>(n * c, 1);
  std::vector<double> xb;
  const double* xp = compute_data<double>(*x, &xb);
  std::vector<double> logp(static_cast<size_t>(x->numel()));
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t i = 0; i < inner; ++i) {
      double mx = -INFINITY;
      for (int64_t k = 0; k < c; ++k) mx = std::max(mx, xp[(ni * c + k) * inner + i]);
      double sum = 0;
      for (int64_t k = 0; k < c; ++k) sum += std::exp(xp[(ni * c + k) * inner + i] - mx);
      const double lse = mx + std::log(sum);
      for (int64_t k = 0; k < c; ++k) logp[(ni * c + k) * inner + i] = xp[(ni * c + k) * inner + i] - lse;
    }
  CUVIL_RETURN_IF_ERROR(nll(ctx, *x, logp.data(), *t, ctx.input(2), 0, x->dtype));
  if (ctx.num_outputs() > 1 && ctx.output_wanted(1)) {
    TensorView* lp = nullptr;
    CUVIL_RETURN_IF_ERROR(ctx.allocate_output(1, x->dtype, x->dims, &lp));
    ComputeOutput<double> out(lp);
    std::copy(logp.begin(), logp.end(), out.data());
    out.finish();
  }
  return Status::ok();
}

// ---- NonMaxSuppression -----------------------------------------------------------------------

Status kernel_NonMaxSuppression(OpContext& ctx) {
  const TensorView* boxes = ctx.input(0);
  const TensorView* scores = ctx.input(1);
  if (!boxes || !scores) return ctx.error(StatusCode::kInvalidArgument, "expects inputs boxes and scores");
  if (boxes->dims.size() != 3 || boxes->dims[2] != 4 || scores->dims.size() != 3 || scores->dims[0] != boxes->dims[0] ||
      scores->dims[2] != boxes->dims[1])
    return ctx.error(StatusCode::kInvalidArgument, "boxes ", dims_string(boxes->dims), " and scores ", dims_string(scores->dims),
                     " must be [B, S, 4] and [B, classes, S]");
  if (!is_float_dtype(boxes->dtype) || !is_float_dtype(scores->dtype))
    return ctx.error(StatusCode::kInvalidArgument, "boxes and scores must be float tensors");
  int64_t max_out = 0;
  double iou_th = 0, score_th = 0;
  const bool has_score_th = ctx.input(4) != nullptr;
  if (ctx.input(2)) CUVIL_RETURN_IF_ERROR(read_int_scalar(ctx, ctx.input(2), "max_output_boxes_per_class", &max_out));
  if (ctx.input(3) && !read_scalar(ctx.input(3), &iou_th))
    return ctx.error(StatusCode::kInvalidArgument, "iou_threshold must be a scalar");
  if (has_score_th && !read_scalar(ctx.input(4), &score_th))
    return ctx.error(StatusCode::kInvalidArgument, "score_threshold must be a scalar");
  if (iou_th < 0 || iou_th > 1) return ctx.error(StatusCode::kInvalidArgument, "iou_threshold ", iou_th, " must be in [0, 1]");
  const int64_t cpb = ctx.attrs().get_int("center_point_box", 0);
  if (cpb != 0 && cpb != 1) return ctx.error(StatusCode::kInvalidArgument, "center_point_box must be 0 or 1");
  const int64_t nb = boxes->dims[0], ns = boxes->dims[1], ncls = scores->dims[1];
  std::vector<double> bb, sb;
  const double* bp = compute_data<double>(*boxes, &bb);
  const double* sp = compute_data<double>(*scores, &sb);
  std::vector<int64_t> selected;
  std::vector<int64_t> order;
  std::vector<int64_t> kept;
  if (max_out > 0) {
    for (int64_t b = 0; b < nb; ++b) {
      // Corners as (y1, x1, y2, x2) with y1 <= y2, x1 <= x2.
      std::vector<double> corner(static_cast<size_t>(ns * 4));
      for (int64_t i = 0; i < ns; ++i) {
        const double* e = bp + (b * ns + i) * 4;
        double y1, x1, y2, x2;
        if (cpb) {
          x1 = e[0] - e[2] / 2; x2 = e[0] + e[2] / 2;
          y1 = e[1] - e[3] / 2; y2 = e[1] + e[3] / 2;
        } else {
          y1 = std::min(e[0], e[2]); y2 = std::max(e[0], e[2]);
          x1 = std::min(e[1], e[3]); x2 = std::max(e[1], e[3]);
        }
        corner[i * 4] = y1; corner[i * 4 + 1] = x1; corner[i * 4 + 2] = y2; corner[i * 4 + 3] = x2;
      }
      auto suppress = [&](int64_t a, int64_t c) {
        const double* p = corner.data() + a * 4;
        const double* q = corner.data() + c * 4;
        const double area1 = (p[2] - p[0]) * (p[3] - p[1]), area2 = (q[2] - q[0]) * (q[3] - q[1]);
        if (area1 <= 0 || area2 <= 0) return false;
        const double ih = std::min(p[2], q[2]) - std::max(p[0], q[0]);
        const double iw = std::min(p[3], q[3]) - std::max(p[1], q[1]);
        if (ih <= 0 || iw <= 0) return false;
        const double inter = ih * iw, uni = area1 + area2 - inter;
        if (uni <= 0) return false;
        return inter / uni > iou_th;
      };
      for (int64_t cl = 0; cl < ncls; ++cl) {
        const double* sc = sp + (b * ncls + cl) * ns;
        order.clear();
        for (int64_t i = 0; i < ns; ++i)
          if (!has_score_th || sc[i] > score_th) order.push_back(i);
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return sc[a] > sc[c]; });
        kept.clear();
        for (int64_t cand : order) {
          if (static_cast<int64_t>(kept.size()) >= max_out) break;
          bool drop = false;
          for (int64_t k : kept)
            if (suppress(k, cand)) {
              drop = true;
              break;
            }
          if (drop) continue;
          kept.push_back(cand);
          selected.insert(selected.end(), {b, cl, cand});
        }
      }
    }
  }
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Int64, {static_cast<int64_t>(selected.size() / 3), 3}, &y));
  std::copy(selected.begin(), selected.end(), y->as<int64_t>());
  return Status::ok();
}

}  // namespace cuvil::rt::ops
