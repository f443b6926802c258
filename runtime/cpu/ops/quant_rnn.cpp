// Quantisation kernels (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear) and the
// recurrent ops (RNN, GRU, LSTM). Quantisation follows the ONNX reference: x / scale in float,
// round half to even, add the zero point, saturate (float8 targets skip the integer rounding
// and honour the `saturate` attribute); per-tensor, per-axis and (opset 21) blocked scales
// share one element -> scale index map. The recurrent ops run one direction at
// a time: the input projection X * W^T for every step is one GEMM, then each step multiplies
// the previous hidden state by R^T and applies the gate equations; sequence_lens freezes a
// batch entry after its last step (its Y rows stay zero).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/cpu/ops/kernel_util.h"

namespace cuvil::rt::ops {
namespace {

bool is_float_dtype(DType t) { return visit_dtype<kFloatTypes>(t, [](auto) {}); }

// ---- float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ) ----------------------------------------------

bool is_float8(DType t) {
  return t == DType::Float8E4M3FN || t == DType::Float8E4M3FNUZ || t == DType::Float8E5M2 ||
         t == DType::Float8E5M2FNUZ;
}

// Decodes one float8 code. FNUZ types have no negative zero and one NaN (0x80); E4M3FN has no
// infinities (S.1111.111 is NaN); E5M2 follows IEEE (exponent 31: infinity or NaN).
float float8_to_float(DType t, uint8_t v) {
  const bool e4 = t == DType::Float8E4M3FN || t == DType::Float8E4M3FNUZ;
  const bool fnuz = t == DType::Float8E4M3FNUZ || t == DType::Float8E5M2FNUZ;
  const int mbits = e4 ? 3 : 2, ebits = e4 ? 4 : 5;
  const int bias = e4 ? (fnuz ? 8 : 7) : (fnuz ? 16 : 15);
  if (fnuz && v == 0x80) return std::numeric_limits<float>::quiet_NaN();
  const bool neg = (v & 0x80) != 0;
  const int e = (v >> mbits) & ((1 << ebits) - 1), m = v & ((1 << mbits) - 1);
  float f;
  if (t == DType::Float8E4M3FN && e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  if (t == DType::Float8E5M2 && e == 31) {
    if (m != 0) return std::numeric_limits<float>::quiet_NaN();
    f = std::numeric_limits<float>::infinity();
  } else if (e == 0) {
    f = std::ldexp(static_cast<float>(m), 1 - bias - mbits);
  } else {
    f = std::ldexp(1.0f + static_cast<float>(m) / static_cast<float>(1 << mbits), e - bias);
  }
  return neg ? -f : f;
}

// Encodes with round-to-nearest-even; infinities and out-of-range values saturate to the
// largest finite value when `saturate` is set, else become infinity (E5M2) or NaN (the others),
// as the ONNX reference (onnx.helper float32_to_float8*) does.
uint8_t float_to_float8(DType t, float x, bool saturate) {
  // The positive finite codes in increasing order (codes grow with value for a fixed sign).
  struct Table {
    std::vector<float> value;
    std::vector<uint8_t> code;
  };
  static const std::vector<Table> all = [] {
    std::vector<Table> tabs(4);
    const DType types[4] = {DType::Float8E4M3FN, DType::Float8E4M3FNUZ, DType::Float8E5M2, DType::Float8E5M2FNUZ};
    for (int i = 0; i < 4; ++i)
      for (int c = 0; c < 128; ++c) {
        const float f = float8_to_float(types[i], static_cast<uint8_t>(c));
        if (std::isfinite(f)) {
          tabs[i].value.push_back(f);
          tabs[i].code.push_back(static_cast<uint8_t>(c));
        }
      }
    return tabs;
  }();
  const int which = t == DType::Float8E4M3FN ? 0 : t == DType::Float8E4M3FNUZ ? 1 : t == DType::Float8E5M2 ? 2 : 3;
  const Table& tab = all[which];
  const bool fnuz = which == 1 || which == 3;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  // NaN (and non-saturated overflow): FNUZ has the single code 0x80, the others S.1111111.
  if (std::isnan(x)) return fnuz ? 0x80 : static_cast<uint8_t>(sign | 0x7f);
  const float ax = std::fabs(x);
  const float max = tab.value.back(), ulp = tab.value.back() - tab.value[tab.value.size() - 2];
  if (std::isinf(x) || ax > max + ulp / 2) {
    if (saturate) return static_cast<uint8_t>(sign | tab.code.back());
    if (fnuz) return 0x80;
    return static_cast<uint8_t>(sign | (which == 2 ? 0x7c : 0x7f));  // E5M2: infinity
  }
  size_t hi = static_cast<size_t>(std::lower_bound(tab.value.begin(), tab.value.end(), ax) - tab.value.begin());
  uint8_t code;
  if (hi >= tab.value.size()) {
    code = tab.code.back();
  } else if (hi == 0 || tab.value[hi] == ax) {
    code = tab.code[hi];
  } else {
    const float dl = ax - tab.value[hi - 1], dh = tab.value[hi] - ax;
    if (dl < dh) code = tab.code[hi - 1];
    else if (dh < dl) code = tab.code[hi];
    else code = (tab.code[hi - 1] & 1) == 0 ? tab.code[hi - 1] : tab.code[hi];
  }
  if (fnuz && code == 0) return 0;  // no negative zero
  return static_cast<uint8_t>(sign | code);
}

// Integer range of a quantised dtype; false for dtypes QuantizeLinear cannot produce here.
bool quant_range(DType t, double* lo, double* hi) {
  switch (t) {
    case DType::UInt8: *lo = 0; *hi = 255; return true;
    case DType::Int8: *lo = -128; *hi = 127; return true;
    case DType::UInt16: *lo = 0; *hi = 65535; return true;
    case DType::Int16: *lo = -32768; *hi = 32767; return true;
    case DType::Int32: *lo = -2147483648.0; *hi = 2147483647.0; return true;
    case DType::UInt4: *lo = 0; *hi = 15; return true;
    case DType::Int4: *lo = -8; *hi = 7; return true;
    default: return false;
  }
}

// Element i of an integer tensor including the packed 4-bit types (low nibble first).
int64_t load_quant(const TensorView& t, int64_t i) {
  if (t.dtype == DType::UInt4 || t.dtype == DType::Int4) {
    const uint8_t byte = static_cast<const uint8_t*>(t.data)[i / 2];
    int64_t v = (i % 2) ? (byte >> 4) : (byte & 0x0f);
    if (t.dtype == DType::Int4 && v >= 8) v -= 16;
    return v;
  }
  int64_t v = 0;
  visit_dtype<kIntTypes>(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    v = static_cast<int64_t>(t.as<T>()[i]);
  });
  return v;
}

void store_quant(TensorView* t, int64_t i, int64_t v) {
  if (t->dtype == DType::UInt4 || t->dtype == DType::Int4) {
    uint8_t* byte = static_cast<uint8_t*>(t->data) + i / 2;
    const uint8_t nib = static_cast<uint8_t>(v & 0x0f);
    *byte = (i % 2) ? static_cast<uint8_t>((*byte & 0x0f) | (nib << 4)) : static_cast<uint8_t>((*byte & 0xf0) | nib);
    return;
  }
  visit_dtype<kIntTypes>(t->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    t->as<T>()[i] = static_cast<T>(v);
  });
}

// Maps an element of x to its scale / zero-point index: per tensor, per axis or blocked.
struct QuantMap {
  int64_t inner = 1, axis_dim = 1, block = 0, scale_axis_dim = 1;
  bool per_tensor = true;
  int64_t operator()(int64_t i) const {
    if (per_tensor) return 0;
    const int64_t in = i % inner, a = (i / inner) % axis_dim, o = i / (inner * axis_dim);
    if (block == 0) return a;
    return (o * scale_axis_dim + a / block) * inner + in;
  }
};

Status quant_map(OpContext& ctx, const TensorView& x, const TensorView& scale, const TensorView* zp, QuantMap* m) {
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  const int64_t block = ctx.attrs().get_int("block_size", 0);
  if (block < 0) return ctx.error(StatusCode::kInvalidArgument, "block_size = ", block, " must be >= 0");
  if (zp && zp->dims != scale.dims && !(zp->numel() == 1 && scale.numel() == 1))
    return ctx.error(StatusCode::kInvalidArgument, "zero point ", dims_string(zp->dims), " must have the shape of scale ",
                     dims_string(scale.dims));
  if (scale.numel() == 1 && scale.dims.size() <= 1 && block == 0) {
    m->per_tensor = true;
    return Status::ok();
  }
  int64_t axis = 0;
  if (!normalize_axis(ctx.attrs().get_int("axis", 1), rank, &axis))
    return ctx.error(StatusCode::kInvalidArgument, "axis ", ctx.attrs().get_int("axis", 1), " is out of range for rank ", rank);
  m->per_tensor = false;
  m->axis_dim = x.dims[axis];
  m->inner = 1;
  for (int64_t d = axis + 1; d < rank; ++d) m->inner *= x.dims[d];
  if (m->inner == 0 || m->axis_dim == 0) {
    m->per_tensor = true;  // empty tensor: the map is never used
    return Status::ok();
  }
  if (block == 0) {
    if (scale.dims.size() != 1 || scale.dims[0] != m->axis_dim)
      return ctx.error(StatusCode::kInvalidArgument, "per-axis scale ", dims_string(scale.dims), " must be [", m->axis_dim,
                       "] for axis ", axis);
    return Status::ok();
  }
  m->block = block;
  m->scale_axis_dim = (m->axis_dim + block - 1) / block;
  std::vector<int64_t> expect = x.dims;
  expect[axis] = m->scale_axis_dim;
  if (scale.dims != expect)
    return ctx.error(StatusCode::kInvalidArgument, "blocked scale ", dims_string(scale.dims), " must be ", dims_string(expect),
                     " for block_size ", block);
  return Status::ok();
}

}  // namespace

// ---- QuantizeLinear / DequantizeLinear --------------------------------------------------------

Status kernel_QuantizeLinear(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* scale = ctx.input(1);
  const TensorView* zp = ctx.input(2);
  if (!x || !scale) return ctx.error(StatusCode::kInvalidArgument, "expects inputs x and y_scale");
  if (!(is_float_dtype(x->dtype) || x->dtype == DType::Int32) || !is_float_dtype(scale->dtype))
    return ctx.error(StatusCode::kInvalidArgument, "x must be float or int32 and y_scale float, got ",
                     dtype_name(x->dtype), " and ", dtype_name(scale->dtype));
  DType out_t = DType::UInt8;
  if (zp) {
    out_t = zp->dtype;
  } else if (ctx.attrs().get_int("output_dtype", 0) != 0) {
    auto t = dtype_from_onnx(static_cast<int32_t>(ctx.attrs().get_int("output_dtype", 0)));
    if (!t) return ctx.error(StatusCode::kInvalidArgument, "output_dtype is not a known dtype");
    out_t = *t;
  }
  double qmin = 0, qmax = 0;
  const bool f8 = is_float8(out_t);
  if (!f8 && !quant_range(out_t, &qmin, &qmax))
    return ctx.error(StatusCode::kUnsupported, "quantising to ", dtype_name(out_t), " is not supported");
  const bool saturate = ctx.attrs().get_int("saturate", 1) != 0;
  QuantMap map;
  CUVIL_RETURN_IF_ERROR(quant_map(ctx, *x, *scale, zp, &map));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, out_t, x->dims, &y));
  const int64_t n = x->numel();
  if (dtype_bits(out_t) < 8 && y->bytes() > 0) std::memset(y->data, 0, y->bytes());
  std::vector<float> sbuf, xbuf;
  const float* sp = compute_data<float>(*scale, &sbuf);
  const bool wide = x->dtype == DType::Double || x->dtype == DType::Int32;
  std::vector<double> xd;
  const double* xdp = wide ? compute_data<double>(*x, &xd) : nullptr;
  const float* xp = wide ? nullptr : compute_data<float>(*x, &xbuf);
  if (f8) {  // float8: no rounding to an integer grid, just the cast (ONNX QuantizeLinear-19)
    uint8_t* yp = static_cast<uint8_t*>(y->data);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t si = map(i);
      const float z = zp ? float8_to_float(out_t, static_cast<const uint8_t*>(zp->data)[si]) : 0.0f;
      const float v = (wide ? static_cast<float>(xdp[i] / static_cast<double>(sp[si])) : xp[i] / sp[si]) + z;
      yp[i] = float_to_float8(out_t, v, saturate);
    }
    return Status::ok();
  }
  if (!wide && map.per_tensor && (out_t == DType::UInt8 || out_t == DType::Int8)) {
    // Every activation of a QDQ model: float32 x, one scale and zero point, 8 bits out (BERT-base
    // int8 spent a quarter of its time in the general loop below, which dispatches on the dtypes
    // per element). The same float operations in the same order, so the same bits: q is an
    // integer in float, q + z is exact below 2^24 and lands past the same clamp above it.
    const float s = sp[0], z = zp ? static_cast<float>(load_quant(*zp, 0)) : 0.0f;
    const float lo = static_cast<float>(qmin), hi = static_cast<float>(qmax);
    auto quantize = [&](auto* yp) {
      using T = std::remove_pointer_t<decltype(yp)>;
      for (int64_t i = 0; i < n; ++i) {
        const float v = std::nearbyint(xp[i] / s) + z;
        yp[i] = std::isnan(v) ? T(0) : static_cast<T>(std::min(std::max(v, lo), hi));
      }
    };
    if (out_t == DType::UInt8) quantize(static_cast<uint8_t*>(y->data));
    else quantize(static_cast<int8_t*>(y->data));
    return Status::ok();
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t si = map(i);
    const double q = wide ? std::nearbyint(xdp[i] / static_cast<double>(sp[si]))
                          : static_cast<double>(std::nearbyint(xp[i] / sp[si]));
    double v = q + (zp ? static_cast<double>(load_quant(*zp, si)) : 0.0);
    if (std::isnan(v)) v = 0;
    v = std::min(std::max(v, qmin), qmax);
    store_quant(y, i, static_cast<int64_t>(v));
  }
  return Status::ok();
}

Status kernel_DequantizeLinear(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  const TensorView* scale = ctx.input(1);
  const TensorView* zp = ctx.input(2);
  if (!x || !scale) return ctx.error(StatusCode::kInvalidArgument, "expects inputs x and x_scale");
  double lo, hi;
  const bool f8 = is_float8(x->dtype);
  if (!f8 && !quant_range(x->dtype, &lo, &hi))
    return ctx.error(StatusCode::kUnsupported, "dequantising ", dtype_name(x->dtype), " is not supported");
  auto load = [&](const TensorView& t, int64_t i) {
    return f8 ? static_cast<double>(float8_to_float(t.dtype, static_cast<const uint8_t*>(t.data)[i]))
              : static_cast<double>(load_quant(t, i));
  };
  if (!is_float_dtype(scale->dtype))
    return ctx.error(StatusCode::kInvalidArgument, "x_scale must be a float tensor, got ", dtype_name(scale->dtype));
  if (zp && zp->dtype != x->dtype)
    return ctx.error(StatusCode::kInvalidArgument, "x_zero_point is ", dtype_name(zp->dtype), " but x is ",
                     dtype_name(x->dtype));
  QuantMap map;
  CUVIL_RETURN_IF_ERROR(quant_map(ctx, *x, *scale, zp, &map));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, scale->dtype, x->dims, &y));
  const int64_t n = x->numel();
  visit_dtype<kFloatTypes>(scale->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    std::vector<C> sbuf;
    const C* sp = compute_data<C>(*scale, &sbuf);
    ComputeOutput<C> out(y);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t si = map(i);
      const C z = zp ? static_cast<C>(load(*zp, si)) : C(0);
      out.data()[i] = (static_cast<C>(load(*x, i)) - z) * sp[si];
    }
    out.finish();
  });
  return Status::ok();
}

Status kernel_DynamicQuantizeLinear(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  if (!x) return ctx.error(StatusCode::kInvalidArgument, "expects input x");
  if (!is_float_dtype(x->dtype)) return ctx.error(StatusCode::kInvalidArgument, "x must be a float tensor");
  std::vector<float> xb;
  const float* xp = compute_data<float>(*x, &xb);
  const int64_t n = x->numel();
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(xp[i]) || std::isinf(xp[i]))
      return ctx.error(StatusCode::kRuntime, "x[", i, "] is not finite; cannot choose a scale");
    lo = std::min(lo, xp[i]);
    hi = std::max(hi, xp[i]);
  }
  const float scale = (hi - lo) / 255.0f;
  float zpf = 0;
  if (scale != 0) zpf = std::min(std::max(std::nearbyint(0.0f - lo / scale), 0.0f), 255.0f);
  TensorView *y = nullptr, *ys = nullptr, *yz = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::UInt8, x->dims, &y));
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(1, DType::Float, {}, &ys));
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(2, DType::UInt8, {}, &yz));
  *ys->as<float>() = scale;
  *yz->as<uint8_t>() = static_cast<uint8_t>(zpf);
  for (int64_t i = 0; i < n; ++i) {
    const float q = scale != 0 ? std::nearbyint(xp[i] / scale) + zpf : zpf;
    y->as<uint8_t>()[i] = static_cast<uint8_t>(std::min(std::max(q, 0.0f), 255.0f));
  }
  return Status::ok();
}

// ---- RNN / GRU / LSTM -------------------------------------------------------------------------

namespace {

enum class RnnKind { kRnn, kGru, kLstm };

struct Activation {
  enum Fn { kTanh, kSigmoid, kRelu, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid, kElu,
            kSoftsign, kSoftplus } fn = kTanh;
  double alpha = 0, beta = 0;
  template <typename C> C operator()(C x) const {
    switch (fn) {
      case kTanh: return std::tanh(x);
      case kSigmoid: return C(1) / (C(1) + std::exp(-x));
      case kRelu: return x > C(0) ? x : C(0);
      case kAffine: return static_cast<C>(alpha * x + beta);
      case kLeakyRelu: return x >= C(0) ? x : static_cast<C>(alpha * x);
      case kThresholdedRelu: return x > alpha ? x : C(0);
      case kScaledTanh: return static_cast<C>(alpha * std::tanh(beta * x));
      case kHardSigmoid: return static_cast<C>(std::min(1.0, std::max(0.0, alpha * x + beta)));
      case kElu: return x >= C(0) ? x : static_cast<C>(alpha * (std::exp(x) - 1));
      case kSoftsign: return x / (C(1) + std::fabs(x));
      case kSoftplus: return std::log1p(std::exp(x));
    }
    return x;
  }
};

bool parse_activation(std::string name, const std::vector<float>& alphas, const std::vector<float>& betas,
                      size_t* ai, size_t* bi, Activation* a) {
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  auto next = [](const std::vector<float>& v, size_t* i, double fallback) {
    return *i < v.size() ? static_cast<double>(v[(*i)++]) : fallback;
  };
  if (name == "tanh") a->fn = Activation::kTanh;
  else if (name == "sigmoid") a->fn = Activation::kSigmoid;
  else if (name == "relu") a->fn = Activation::kRelu;
  else if (name == "softsign") a->fn = Activation::kSoftsign;
  else if (name == "softplus") a->fn = Activation::kSoftplus;
  else if (name == "affine") { a->fn = Activation::kAffine; a->alpha = next(alphas, ai, 1.0); a->beta = next(betas, bi, 0.0); }
  else if (name == "leakyrelu") { a->fn = Activation::kLeakyRelu; a->alpha = next(alphas, ai, 0.01); }
  else if (name == "thresholdedrelu") { a->fn = Activation::kThresholdedRelu; a->alpha = next(alphas, ai, 1.0); }
  else if (name == "scaledtanh") { a->fn = Activation::kScaledTanh; a->alpha = next(alphas, ai, 1.0); a->beta = next(betas, bi, 1.0); }
  else if (name == "hardsigmoid") { a->fn = Activation::kHardSigmoid; a->alpha = next(alphas, ai, 0.2); a->beta = next(betas, bi, 0.5); }
  else if (name == "elu") { a->fn = Activation::kElu; a->alpha = next(alphas, ai, 1.0); }
  else return false;
  return true;
}

struct RnnSpec {
  RnnKind kind;
  int64_t gates = 1;      // G: 1 (RNN), 3 (GRU), 4 (LSTM)
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1;
  int64_t layout = 0;
  bool reverse_only = false;
  bool linear_before_reset = false, input_forget = false;
  bool has_clip = false;
  double clip = 0;
  std::vector<Activation> acts;  // per direction: nact entries
  size_t nact = 1;
  std::vector<int64_t> lens;
};

template <typename C> inline C clip_to(C v, const RnnSpec& s) {
  if (!s.has_clip) return v;
  return std::min(std::max(v, static_cast<C>(-s.clip)), static_cast<C>(s.clip));
}

// Reads X/initial states in layout 0 order ([seq, batch, ...] / [dirs, batch, hidden]).
template <typename C>
std::vector<C> to_layout0(const C* p, int64_t a, int64_t b, int64_t inner, bool swap) {
  std::vector<C> out(static_cast<size_t>(a * b * inner));
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j) {
      const C* src = swap ? p + (j * a + i) * inner : p + (i * b + j) * inner;
      std::copy(src, src + inner, out.data() + (i * b + j) * inner);
    }
  return out;
}

template <typename C>
void run_direction(OpContext& ctx, const RnnSpec& s, int64_t d, bool reverse, const C* x, const C* w,
                   const C* r, const C* bias, const C* peep, C* h, C* c, C* y /* [seq, dirs, batch, H] */) {
  const int64_t H = s.hidden, G = s.gates, B = s.batch, GH = G * H;
  const Activation* act = s.acts.data() + d * s.nact;
  // xw[t, b, :] = x[t, b] * W^T + Wb (+ Rb where it is purely additive).
  std::vector<C> xw(static_cast<size_t>(s.seq * B * GH));
  gemm(&ctx, false, true, s.seq * B, GH, s.input, C(1), x, s.input, w, s.input, C(0), xw.data(), GH);
  if (bias) {
    for (int64_t row = 0; row < s.seq * B; ++row)
      for (int64_t j = 0; j < GH; ++j) {
        C v = bias[j];
        const bool rb_inside = s.kind == RnnKind::kGru && j >= 2 * H && s.linear_before_reset;
        if (!rb_inside) v += bias[GH + j];
        xw[row * GH + j] += v;
      }
  }
  std::vector<C> hr(static_cast<size_t>(B * GH)), rh(static_cast<size_t>(B * H));
  for (int64_t step = 0; step < s.seq; ++step) {
    // hr = h * R^T (for GRU without linear_before_reset only the z and r gates here).
    const bool gru_split = s.kind == RnnKind::kGru && !s.linear_before_reset;
    gemm(&ctx, false, true, B, gru_split ? 2 * H : GH, H, C(1), h, H, r, H, C(0), hr.data(), GH);
    if (gru_split) {
      for (int64_t b = 0; b < B; ++b) {
        if (step >= s.lens[b]) continue;
        const int64_t t = reverse ? s.lens[b] - 1 - step : step;
        const C* g = xw.data() + (t * B + b) * GH;
        for (int64_t j = 0; j < H; ++j) {
          const C rt = act[0](clip_to<C>(g[H + j] + hr[b * GH + H + j], s));
          rh[b * H + j] = rt * h[b * H + j];
        }
      }
      gemm(&ctx, false, true, B, H, H, C(1), rh.data(), H, r + 2 * H * H, H, C(0), hr.data() + 2 * H, GH);
    }
    for (int64_t b = 0; b < B; ++b) {
      if (step >= s.lens[b]) continue;
      const int64_t t = reverse ? s.lens[b] - 1 - step : step;
      const C* g = xw.data() + (t * B + b) * GH;
      const C* hg = hr.data() + b * GH;
      C* hb = h + b * H;
      if (s.kind == RnnKind::kRnn) {
        for (int64_t j = 0; j < H; ++j) hb[j] = act[0](clip_to<C>(g[j] + hg[j], s));
      } else if (s.kind == RnnKind::kGru) {
        for (int64_t j = 0; j < H; ++j) {
          const C z = act[0](clip_to<C>(g[j] + hg[j], s));
          C pre;
          if (s.linear_before_reset) {
            const C rt = act[0](clip_to<C>(g[H + j] + hg[H + j], s));
            pre = g[2 * H + j] + rt * (hg[2 * H + j] + (bias ? bias[GH + 2 * H + j] : C(0)));
          } else {
            pre = g[2 * H + j] + hg[2 * H + j];
          }
          const C ht = act[1](clip_to<C>(pre, s));
          hb[j] = (C(1) - z) * ht + z * hb[j];
        }
      } else {
        C* cb = c + b * H;
        for (int64_t j = 0; j < H; ++j) {
          const C pi = peep ? peep[j] : C(0), po = peep ? peep[H + j] : C(0), pf = peep ? peep[2 * H + j] : C(0);
          const C it = act[0](clip_to<C>(g[j] + hg[j] + pi * cb[j], s));
          C ft = act[0](clip_to<C>(g[2 * H + j] + hg[2 * H + j] + pf * cb[j], s));
          if (s.input_forget) ft = C(1) - it;
          const C ct = act[1](clip_to<C>(g[3 * H + j] + hg[3 * H + j], s));
          cb[j] = ft * cb[j] + it * ct;
          const C ot = act[0](clip_to<C>(g[H + j] + hg[H + j] + po * cb[j], s));
          hb[j] = ot * act[2](cb[j]);
        }
      }
      if (y) std::copy(hb, hb + H, y + ((t * s.dirs + d) * B + b) * H);
    }
  }
}

Status recurrent(OpContext& ctx, RnnKind kind) {
  const AttrReader& at = ctx.attrs();
  RnnSpec s;
  s.kind = kind;
  s.gates = kind == RnnKind::kRnn ? 1 : (kind == RnnKind::kGru ? 3 : 4);
  s.nact = kind == RnnKind::kRnn ? 1 : (kind == RnnKind::kGru ? 2 : 3);
  const TensorView* x = ctx.input(0);
  const TensorView* w = ctx.input(1);
  const TensorView* r = ctx.input(2);
  const TensorView* b = ctx.input(3);
  const TensorView* lens = ctx.input(4);
  const TensorView* h0 = ctx.input(5);
  const TensorView* c0 = kind == RnnKind::kLstm ? ctx.input(6) : nullptr;
  const TensorView* p = kind == RnnKind::kLstm ? ctx.input(7) : nullptr;
  if (!x || !w || !r) return ctx.error(StatusCode::kInvalidArgument, "expects inputs X, W and R");
  if (!is_float_dtype(x->dtype) || w->dtype != x->dtype || r->dtype != x->dtype)
    return ctx.error(StatusCode::kInvalidArgument, "X, W and R must share a float dtype");
  const std::string direction = at.get_string("direction", "forward");
  if (direction == "bidirectional") s.dirs = 2;
  else if (direction == "reverse") s.reverse_only = true;
  else if (direction != "forward")
    return ctx.error(StatusCode::kInvalidArgument, "direction '", direction, "' is invalid");
  s.layout = at.get_int("layout", 0);
  if (s.layout != 0 && s.layout != 1) return ctx.error(StatusCode::kInvalidArgument, "layout must be 0 or 1");
  if (x->dims.size() != 3) return ctx.error(StatusCode::kInvalidArgument, "X must be rank 3, got ", dims_string(x->dims));
  s.seq = s.layout ? x->dims[1] : x->dims[0];
  s.batch = s.layout ? x->dims[0] : x->dims[1];
  s.input = x->dims[2];
  s.hidden = at.get_int("hidden_size", 0);
  if (s.hidden <= 0 && r->dims.size() == 3) s.hidden = r->dims[2];
  const int64_t H = s.hidden, GH = s.gates * H;
  if (H <= 0) return ctx.error(StatusCode::kInvalidArgument, "hidden_size must be positive");
  if (w->dims != std::vector<int64_t>{s.dirs, GH, s.input})
    return ctx.error(StatusCode::kInvalidArgument, "W ", dims_string(w->dims), " must be ", dims_string({s.dirs, GH, s.input}));
  if (r->dims != std::vector<int64_t>{s.dirs, GH, H})
    return ctx.error(StatusCode::kInvalidArgument, "R ", dims_string(r->dims), " must be ", dims_string({s.dirs, GH, H}));
  if (b && (b->dtype != x->dtype || b->dims != std::vector<int64_t>{s.dirs, 2 * GH}))
    return ctx.error(StatusCode::kInvalidArgument, "B ", dims_string(b->dims), " must be ", dims_string({s.dirs, 2 * GH}));
  const std::vector<int64_t> state_dims =
      s.layout ? std::vector<int64_t>{s.batch, s.dirs, H} : std::vector<int64_t>{s.dirs, s.batch, H};
  if (h0 && (h0->dtype != x->dtype || h0->dims != state_dims))
    return ctx.error(StatusCode::kInvalidArgument, "initial_h ", dims_string(h0->dims), " must be ", dims_string(state_dims));
  if (c0 && (c0->dtype != x->dtype || c0->dims != state_dims))
    return ctx.error(StatusCode::kInvalidArgument, "initial_c ", dims_string(c0->dims), " must be ", dims_string(state_dims));
  if (p && (p->dtype != x->dtype || p->dims != std::vector<int64_t>{s.dirs, 3 * H}))
    return ctx.error(StatusCode::kInvalidArgument, "P ", dims_string(p->dims), " must be ", dims_string({s.dirs, 3 * H}));
  s.lens.assign(static_cast<size_t>(s.batch), s.seq);
  if (lens) {
    std::vector<int64_t> l;
    if (!read_int_tensor(lens, &l) || static_cast<int64_t>(l.size()) != s.batch)
      return ctx.error(StatusCode::kInvalidArgument, "sequence_lens must be an integer tensor of ", s.batch, " values");
    for (int64_t i = 0; i < s.batch; ++i) {
      if (l[i] < 0 || l[i] > s.seq)
        return ctx.error(StatusCode::kRuntime, "sequence_lens[", i, "] = ", l[i], " is outside [0, ", s.seq, "]");
      s.lens[i] = l[i];
    }
  }
  s.linear_before_reset = at.get_int("linear_before_reset", 0) != 0;
  s.input_forget = at.get_int("input_forget", 0) != 0;
  s.has_clip = at.has("clip");
  s.clip = at.get_float("clip", 0.0f);
  if (s.has_clip && !(s.clip > 0)) return ctx.error(StatusCode::kInvalidArgument, "clip must be positive");
  std::vector<std::string> names = at.get_strings("activations");
  if (names.empty()) {
    if (kind == RnnKind::kRnn) names = {"Tanh"};
    else if (kind == RnnKind::kGru) names = {"Sigmoid", "Tanh"};
    else names = {"Sigmoid", "Tanh", "Tanh"};
  }
  if (names.size() == s.nact && s.dirs == 2) {  // one list for both directions
    const std::vector<std::string> forward = names;
    names.insert(names.end(), forward.begin(), forward.end());
  }
  if (names.size() != s.nact * static_cast<size_t>(s.dirs))
    return ctx.error(StatusCode::kInvalidArgument, "activations has ", names.size(), " entries, expected ",
                     s.nact * s.dirs);
  const std::vector<float> alphas = at.get_floats("activation_alpha"), betas = at.get_floats("activation_beta");
  size_t ai = 0, bi = 0;
  for (const std::string& nm : names) {
    Activation a;
    if (!parse_activation(nm, alphas, betas, &ai, &bi, &a))
      return ctx.error(StatusCode::kInvalidArgument, "activation '", nm, "' is not supported");
    s.acts.push_back(a);
  }
  const std::vector<int64_t> y_dims = s.layout ? std::vector<int64_t>{s.batch, s.seq, s.dirs, H}
                                               : std::vector<int64_t>{s.seq, s.dirs, s.batch, H};
  TensorView *y = nullptr, *yh = nullptr, *yc = nullptr;
  if (ctx.num_outputs() > 0 && ctx.output_wanted(0)) CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, y_dims, &y));
  if (ctx.num_outputs() > 1 && ctx.output_wanted(1)) CUVIL_RETURN_IF_ERROR(ctx.allocate_output(1, x->dtype, state_dims, &yh));
  if (kind == RnnKind::kLstm && ctx.num_outputs() > 2 && ctx.output_wanted(2))
    CUVIL_RETURN_IF_ERROR(ctx.allocate_output(2, x->dtype, state_dims, &yc));
  const auto run = [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> xb, wb, rb, bb, h0b, c0b, pb;
    const C* xp = compute_data<C>(*x, &xb);
    const C* wp = compute_data<C>(*w, &wb);
    const C* rp = compute_data<C>(*r, &rb);
    const C* bp = b ? compute_data<C>(*b, &bb) : nullptr;
    const C* h0p = h0 ? compute_data<C>(*h0, &h0b) : nullptr;
    const C* c0p = c0 ? compute_data<C>(*c0, &c0b) : nullptr;
    const C* pp = p ? compute_data<C>(*p, &pb) : nullptr;
    const std::vector<C> x0 = to_layout0(xp, s.seq, s.batch, s.input, s.layout == 1);
    std::vector<C> hs(static_cast<size_t>(s.dirs * s.batch * H), C(0)), cs(hs.size(), C(0));
    if (h0p) hs = to_layout0(h0p, s.dirs, s.batch, H, s.layout == 1);
    if (c0p) cs = to_layout0(c0p, s.dirs, s.batch, H, s.layout == 1);
    std::vector<C> y0(static_cast<size_t>(s.seq * s.dirs * s.batch * H), C(0));
    for (int64_t d = 0; d < s.dirs; ++d) {
      const bool reverse = s.reverse_only || d == 1;
      run_direction<C>(ctx, s, d, reverse, x0.data(), wp + d * GH * s.input, rp + d * GH * H,
                       bp ? bp + d * 2 * GH : nullptr, pp ? pp + d * 3 * H : nullptr, hs.data() + d * s.batch * H,
                       cs.data() + d * s.batch * H, y0.data());
    }
    if (y) {
      ComputeOutput<C> out(y);
      if (s.layout == 0) {
        std::copy(y0.begin(), y0.end(), out.data());
      } else {
        for (int64_t t = 0; t < s.seq; ++t)
          for (int64_t d = 0; d < s.dirs; ++d)
            for (int64_t bb2 = 0; bb2 < s.batch; ++bb2)
              std::copy_n(y0.data() + ((t * s.dirs + d) * s.batch + bb2) * H, H,
                          out.data() + ((bb2 * s.seq + t) * s.dirs + d) * H);
      }
      out.finish();
    }
    auto store_state = [&](TensorView* t, const std::vector<C>& st) {
      if (!t) return;
      ComputeOutput<C> out(t);
      for (int64_t d = 0; d < s.dirs; ++d)
        for (int64_t bb2 = 0; bb2 < s.batch; ++bb2)
          std::copy_n(st.data() + (d * s.batch + bb2) * H, H,
                      out.data() + (s.layout ? (bb2 * s.dirs + d) : (d * s.batch + bb2)) * H);
      out.finish();
    };
    store_state(yh, hs);
    store_state(yc, cs);
  };
  if (x->dtype == DType::Double) run(TypeTag<double>{});
  else run(TypeTag<float>{});
  return Status::ok();
}

}  // namespace

Status kernel_RNN(OpContext& ctx) { return recurrent(ctx, RnnKind::kRnn); }
Status kernel_GRU(OpContext& ctx) { return recurrent(ctx, RnnKind::kGru); }
Status kernel_LSTM(OpContext& ctx) { return recurrent(ctx, RnnKind::kLstm); }

}  // namespace cuvil::rt::ops
