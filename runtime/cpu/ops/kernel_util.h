// Helpers shared by the whole-tensor CPU kernels (runtime/cpu/ops/*.cpp): 16-bit float storage
// types that convert through float, float8 encode/decode, dtype -> C++ type dispatch, saturating
// conversions, wrapping integer arithmetic, numpy broadcasting of shapes and strides, axis
// normalisation, parallel loops with lambdas, reading small integer tensors (axes, k), and the
// raw-element copies and size-checked output allocation of the data-movement kernels.
// Header-only; every kernel family uses it, so keep the API stable (add, do not change).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "ir/dtype.h"
#include "runtime/op_kernel.h"
#include "support/checked.h"

namespace cuvil::rt::ops {

// ---- 16-bit floats -------------------------------------------------------------------------

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; overflow gives infinity, NaN stays NaN.
inline uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return sign | (absx > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (absx >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: infinity
  if (absx < 0x38800000u) {                        // below the smallest normal half (2^-14)
    if (absx < 0x33000000u) return sign;           // below half the smallest subnormal
    const uint32_t e = absx >> 23;
    const uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // value / 2^-24 == mant >> shift (mant carries 2^23)
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t r = absx + 0xfffu + ((absx >> 13) & 1u);  // round to nearest even at bit 13
  r -= 0x38000000u;                                  // rebias exponent 127 -> 15
  return sign | static_cast<uint16_t>(r >> 13);
}

inline float bfloat16_bits_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_bfloat16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// ---- 8-bit floats (Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ) -------------------

struct Float8Format {
  int mant_bits;
  int bias;
  bool fnuz;     // 0x80 is the only NaN, no negative zero, no infinity
  bool has_inf;  // E5M2 only: IEEE-style infinities and NaNs
  double max;    // largest finite value
};
// Null for non-float8 dtypes.
inline const Float8Format* float8_format(DType t) {
  static const Float8Format kE4M3FN{3, 7, false, false, 448.0};
  static const Float8Format kE4M3FNUZ{3, 8, true, false, 240.0};
  static const Float8Format kE5M2{2, 15, false, true, 57344.0};
  static const Float8Format kE5M2FNUZ{2, 16, true, false, 57344.0};
  switch (t) {
    case DType::Float8E4M3FN: return &kE4M3FN;
    case DType::Float8E4M3FNUZ: return &kE4M3FNUZ;
    case DType::Float8E5M2: return &kE5M2;
    case DType::Float8E5M2FNUZ: return &kE5M2FNUZ;
    default: return nullptr;
  }
}

inline float float8_bits_to_float(uint8_t b, const Float8Format& f) {
  const int exp_bits = 7 - f.mant_bits;
  const int exp_max = (1 << exp_bits) - 1;
  const bool neg = (b & 0x80u) != 0;
  const int e = (b >> f.mant_bits) & exp_max;
  const int m = b & ((1 << f.mant_bits) - 1);
  if (f.fnuz && b == 0x80u) return NAN;
  if (!f.fnuz && !f.has_inf && (b & 0x7fu) == 0x7fu) return NAN;
  if (f.has_inf && e == exp_max) return m ? NAN : (neg ? -INFINITY : INFINITY);
  const double v = e == 0 ? std::ldexp(static_cast<double>(m), 1 - f.bias - f.mant_bits)
                          : std::ldexp(static_cast<double>((1 << f.mant_bits) | m), e - f.bias - f.mant_bits);
  return static_cast<float>(neg ? -v : v);
}

// Round to nearest even. With `saturate`, out-of-range values (and infinities, except for
// E5M2) become +-max; without, they become NaN (infinity for E5M2), as ONNX Cast specifies.
inline uint8_t float_to_float8_bits(float x, const Float8Format& f, bool saturate) {
  const uint8_t nan = f.fnuz ? 0x80u : 0x7fu;
  if (std::isnan(x)) return nan;
  const uint8_t sign = std::signbit(x) ? 0x80u : 0x00u;
  auto overflow = [&]() -> uint8_t {
    if (saturate) {
      if (f.has_inf && std::isinf(x)) return sign | 0x7cu;
      int e = 0;
      const double m = std::frexp(f.max, &e);  // max = m * 2^e, m in [0.5, 1)
      const int mant = static_cast<int>(std::ldexp(m, f.mant_bits + 1)) - (1 << f.mant_bits);
      return sign | static_cast<uint8_t>(((e - 1 + f.bias) << f.mant_bits) | mant);
    }
    return f.has_inf ? (sign | 0x7cu) : nan;
  };
  if (std::isinf(x)) return overflow();
  const double a = std::fabs(static_cast<double>(x));
  if (a == 0) return f.fnuz ? 0 : sign;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): the leading bit is 2^(e-1)
  const int emin = 1 - f.bias;
  const int q = std::max(e - 1, emin) - f.mant_bits;  // quantum exponent
  const double scaled = std::ldexp(a, -q);
  double r = std::floor(scaled);
  const double frac = scaled - r;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0)) r += 1;
  if (std::ldexp(r, q) > f.max) return overflow();
  if (r == 0) return f.fnuz ? 0 : sign;
  int64_t mant = static_cast<int64_t>(r);
  int qe = q;
  if (mant >= (int64_t{1} << (f.mant_bits + 1))) {  // rounding carried into the next binade
    mant >>= 1;
    ++qe;
  }
  if (mant < (int64_t{1} << f.mant_bits)) return sign | static_cast<uint8_t>(mant);  // subnormal
  const int exp_field = qe + f.mant_bits + f.bias;
  return sign | static_cast<uint8_t>((exp_field << f.mant_bits) | (mant - (int64_t{1} << f.mant_bits)));
}

// Storage types for Float16 / BFloat16 elements; arithmetic goes through float.
struct half_t {
  uint16_t bits = 0;
  half_t() = default;
  explicit half_t(float f) : bits(float_to_half_bits(f)) {}
  operator float() const { return half_bits_to_float(bits); }
};
struct bfloat16_t {
  uint16_t bits = 0;
  bfloat16_t() = default;
  explicit bfloat16_t(float f) : bits(float_to_bfloat16_bits(f)) {}
  operator float() const { return bfloat16_bits_to_float(bits); }
};
static_assert(sizeof(half_t) == 2 && sizeof(bfloat16_t) == 2, "16-bit float storage");

// The arithmetic type of a storage type: float for the 16-bit floats, itself otherwise.
template <typename T> struct compute_type { using type = T; };
template <> struct compute_type<half_t> { using type = float; };
template <> struct compute_type<bfloat16_t> { using type = float; };
template <typename T> using compute_t = typename compute_type<T>::type;

template <typename T> constexpr bool is_float_v =
    std::is_floating_point_v<T> || std::is_same_v<T, half_t> || std::is_same_v<T, bfloat16_t>;

// Converts any supported element value to storage type To (16-bit floats through float; bool
// is "!= 0"). Float -> integer truncates toward zero and saturates (NaN -> 0).
template <typename To, typename From> inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, half_t> || std::is_same_v<From, bfloat16_t>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, half_t> || std::is_same_v<To, bfloat16_t>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    // Out-of-range float -> int is undefined behaviour in C++: saturate, NaN -> 0.
    const double d = static_cast<double>(v);
    if (std::isnan(d)) return To(0);
    if (d <= static_cast<double>(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    if (d >= static_cast<double>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(d);
  } else {
    return static_cast<To>(v);
  }
}

// ---- integer-safe arithmetic -----------------------------------------------------------------
// Integers wrap (two's complement) instead of overflowing into UB; floats are plain.

template <typename C> using wide_unsigned_t = std::make_unsigned_t<decltype(C() + C())>;

template <typename C> C add_wrap(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = wide_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename C> C sub_wrap(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = wide_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return a - b;
  }
}
template <typename C> C mul_wrap(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = wide_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}
template <typename C> C neg_wrap(C a) { return sub_wrap(C(0), a); }

template <typename C> bool is_nan_value(C v) {
  if constexpr (std::is_floating_point_v<C>) return std::isnan(v);
  return false;
}

// ---- dtype <-> C++ type ----------------------------------------------------------------------

template <typename T> struct TypeTag { using type = T; };

template <typename T> constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::Float;
  else if constexpr (std::is_same_v<T, double>) return DType::Double;
  else if constexpr (std::is_same_v<T, half_t>) return DType::Float16;
  else if constexpr (std::is_same_v<T, bfloat16_t>) return DType::BFloat16;
  else if constexpr (std::is_same_v<T, int8_t>) return DType::Int8;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::UInt8;
  else if constexpr (std::is_same_v<T, int16_t>) return DType::Int16;
  else if constexpr (std::is_same_v<T, uint16_t>) return DType::UInt16;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::Int32;
  else if constexpr (std::is_same_v<T, uint32_t>) return DType::UInt32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::Int64;
  else if constexpr (std::is_same_v<T, uint64_t>) return DType::UInt64;
  else if constexpr (std::is_same_v<T, bool>) return DType::Bool;
  else return DType::Undefined;
}

// Dtype classes for visit_dtype.
enum DTypeSet : unsigned {
  kFloatTypes = 1u,    // float, double, float16, bfloat16
  kSignedInts = 2u,    // int8..int64
  kUnsignedInts = 4u,  // uint8..uint64
  kBoolType = 8u,
  kIntTypes = kSignedInts | kUnsignedInts,
  kNumericTypes = kFloatTypes | kIntTypes,
  kAllTypes = kNumericTypes | kBoolType,
};

// Calls fn(TypeTag<T>{}) with the storage type T of dtype t when t is in `set`, and returns
// true; returns false without calling fn otherwise (string, complex, float8, int4, ...).
// fn is instantiated only for the types in `set`.
template <unsigned set = kAllTypes, typename Fn> bool visit_dtype(DType t, Fn&& fn) {
  switch (t) {
#define CUVIL_VISIT(E, T, S)                   \
  case DType::E:                               \
    if constexpr ((set & (S)) != 0) {          \
      fn(TypeTag<T>{});                        \
      return true;                             \
    } else {                                   \
      return false;                            \
    }
    CUVIL_VISIT(Float, float, kFloatTypes)
    CUVIL_VISIT(Double, double, kFloatTypes)
    CUVIL_VISIT(Float16, half_t, kFloatTypes)
    CUVIL_VISIT(BFloat16, bfloat16_t, kFloatTypes)
    CUVIL_VISIT(Int8, int8_t, kSignedInts)
    CUVIL_VISIT(Int16, int16_t, kSignedInts)
    CUVIL_VISIT(Int32, int32_t, kSignedInts)
    CUVIL_VISIT(Int64, int64_t, kSignedInts)
    CUVIL_VISIT(UInt8, uint8_t, kUnsignedInts)
    CUVIL_VISIT(UInt16, uint16_t, kUnsignedInts)
    CUVIL_VISIT(UInt32, uint32_t, kUnsignedInts)
    CUVIL_VISIT(UInt64, uint64_t, kUnsignedInts)
    CUVIL_VISIT(Bool, bool, kBoolType)
#undef CUVIL_VISIT
    default: return false;
  }
}

// True when dtype t is in the DTypeSet mask `set`.
inline bool dtype_in_set(DType t, unsigned set) {
  switch (set & kAllTypes) {
    case kAllTypes: return visit_dtype<kAllTypes>(t, [](auto) {});
    default: break;
  }
  return ((set & kFloatTypes) && visit_dtype<kFloatTypes>(t, [](auto) {})) ||
         ((set & kSignedInts) && visit_dtype<kSignedInts>(t, [](auto) {})) ||
         ((set & kUnsignedInts) && visit_dtype<kUnsignedInts>(t, [](auto) {})) ||
         ((set & kBoolType) && t == DType::Bool);
}

// Runs fn(begin, end) over [0, n) through ctx.parallel_for (fn may be a capturing lambda).
template <typename Fn> void parallel_range(OpContext& ctx, int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  using F = std::remove_reference_t<Fn>;
  ctx.parallel_for(
      n, grain < 1 ? 1 : grain,
      [](void* arg, int64_t begin, int64_t end) { (*static_cast<F*>(arg))(begin, end); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

// Element i of a tensor of any visit_dtype type, as double (NaN for unsupported dtypes).
inline double load_as_double(const TensorView& t, int64_t i) {
  double v = NAN;
  visit_dtype(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    v = static_cast<double>(convert<compute_t<T>>(t.as<T>()[i]));
  });
  return v;
}

// ---- shapes ----------------------------------------------------------------------------------

// Numpy (multidirectional) broadcast of several shapes; false when incompatible.
inline bool broadcast_shape(const std::vector<const std::vector<int64_t>*>& shapes,
                            std::vector<int64_t>* out) {
  size_t rank = 0;
  for (const auto* s : shapes) rank = s->size() > rank ? s->size() : rank;
  out->assign(rank, 1);
  for (const auto* s : shapes) {
    const size_t off = rank - s->size();
    for (size_t i = 0; i < s->size(); ++i) {
      const int64_t d = (*s)[i];
      int64_t& o = (*out)[off + i];
      if (d < 0) return false;
      if (d == o || d == 1) continue;
      if (o != 1) return false;
      o = d;
    }
  }
  return true;
}
inline bool broadcast_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                            std::vector<int64_t>* out) {
  return broadcast_shape({&a, &b}, out);
}

// Row-major element strides of dims.
inline std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

// Strides (in elements) for reading a tensor of `in` dims as if it had `out` dims
// (right-aligned numpy broadcasting): 0 on broadcast dims. Returns out.size() entries.
// Precondition: `in` broadcasts to `out`.
inline std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in,
                                              const std::vector<int64_t>& out) {
  std::vector<int64_t> s(out.size(), 0);
  const size_t off = out.size() - in.size();
  int64_t stride = 1;
  for (size_t i = in.size(); i-- > 0;) {
    s[off + i] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return s;
}

// "[2,3,4]" for messages.
inline std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

// Maps axis in [-rank, rank) to [0, rank); false when out of range.
inline bool normalize_axis(int64_t axis, int64_t rank, int64_t* out) {
  if (axis < -rank || axis >= rank) return false;
  *out = axis < 0 ? axis + rank : axis;
  return true;
}

// Product of dims with overflow and negative-dim checks.
inline bool dims_numel(const std::vector<int64_t>& dims, int64_t* out) {
  auto n = checked_numel(dims);
  if (!n) return false;
  *out = *n;
  return true;
}

// Reads an integer tensor (int8..int64, uint8..uint64) as int64 values; false for other dtypes
// or an absent tensor.
inline bool read_int_tensor(const TensorView* t, std::vector<int64_t>* out) {
  out->clear();
  if (!t) return false;
  const int64_t n = t->numel();
  return visit_dtype<kIntTypes>(t->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t->as<T>();
    out->resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) (*out)[i] = static_cast<int64_t>(p[i]);
  });
}

// Reads element 0 of a one-element tensor of any visit_dtype type as double.
inline bool read_scalar(const TensorView* t, double* out) {
  if (!t || t->numel() != 1) return false;
  *out = load_as_double(*t, 0);
  return !(std::isnan(*out) && !dtype_is_float(t->dtype));
}

// Product of dims[begin, end) (clamped to the rank); callers have checked the dims already.
inline int64_t product(const std::vector<int64_t>& dims, size_t begin = 0, size_t end = SIZE_MAX) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < dims.size(); ++i) p *= dims[i];
  return p;
}

// ---- raw elements and checked outputs (movement.cpp, tensor.cpp) ------------------------------
// Kernels that only move data work on raw elements of any fixed-size dtype: whole bytes with
// memcpy, 4-bit types nibble by nibble (element i is the low nibble of byte i/2 when i is even).

// The largest output a data-movement kernel allocates; bigger requests are data errors, not
// allocations that may take the process down.
constexpr uint64_t kMaxOutputBytes = uint64_t{1} << 32;

inline Status require_input(const OpContext& ctx, size_t i, const TensorView** out) {
  *out = ctx.input(i);
  if (!*out) return ctx.error(StatusCode::kInvalidArgument, "input ", i, " is missing");
  // Strings have no fixed-size storage; kernels that read elements reject them (require_sized).
  if (dtype_bits((*out)->dtype) > 0 && (*out)->numel() > 0 && !(*out)->data)
    return ctx.error(StatusCode::kInvalidArgument, "input ", i, " has no data");
  return Status::ok();
}

// Kernels that copy raw elements need a fixed element size; strings have none.
inline Status require_sized(const OpContext& ctx, DType t, const char* what) {
  if (dtype_bits(t) <= 0)
    return ctx.error(StatusCode::kUnsupported, what, " has dtype ", dtype_name(t),
                     ", which this kernel does not support");
  return Status::ok();
}

// Checks dims (non-negative, no overflow, at most kMaxOutputBytes) and allocates output i.
// Sub-byte outputs are zeroed so the padding nibble of the last byte is deterministic.
inline Status allocate_checked(OpContext& ctx, size_t i, DType dtype,
                               const std::vector<int64_t>& dims, TensorView** out) {
  int64_t n = 0;
  if (!dims_numel(dims, &n))
    return ctx.error(StatusCode::kShape, "output ", i, " would have invalid dims ", dims_string(dims));
  const int bits = dtype_bits(dtype);
  auto total_bits = checked_mul_u64(static_cast<uint64_t>(n), static_cast<uint64_t>(bits));
  if (!total_bits || (*total_bits + 7) / 8 > kMaxOutputBytes)
    return ctx.error(StatusCode::kOutOfMemory, "output ", i, " of dims ", dims_string(dims), " (",
                     dtype_name(dtype), ") is larger than the ", kMaxOutputBytes, "-byte limit");
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(i, dtype, dims, out));
  if (bits % 8 != 0 && (*out)->data) std::memset((*out)->data, 0, (*out)->bytes());
  return Status::ok();
}

inline uint8_t get_nibble(const void* p, int64_t i) {
  const uint8_t b = static_cast<const uint8_t*>(p)[i >> 1];
  return (i & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 0xf);
}
inline void set_nibble(void* p, int64_t i, uint8_t v) {
  uint8_t& b = static_cast<uint8_t*>(p)[i >> 1];
  b = (i & 1) ? static_cast<uint8_t>((b & 0x0f) | (v << 4))
              : static_cast<uint8_t>((b & 0xf0) | (v & 0xf));
}

// Copies n elements of `bits` bits: src[si, si+n) -> dst[di, di+n).
inline void copy_elems(void* dst, int64_t di, const void* src, int64_t si, int64_t n, int bits) {
  if (n <= 0) return;
  if (bits % 8 == 0) {
    const size_t es = static_cast<size_t>(bits / 8);
    std::memcpy(static_cast<uint8_t*>(dst) + di * es, static_cast<const uint8_t*>(src) + si * es,
                static_cast<size_t>(n) * es);
    return;
  }
  for (int64_t k = 0; k < n; ++k) set_nibble(dst, di + k, get_nibble(src, si + k));
}

// Fills dst[di, di+n) with copies of the one element at `value`.
inline void fill_elems(void* dst, int64_t di, int64_t n, const void* value, int bits) {
  if (n <= 0) return;
  if (bits % 8 == 0) {
    const size_t es = static_cast<size_t>(bits / 8);
    uint8_t* p = static_cast<uint8_t*>(dst) + di * es;
    std::memcpy(p, value, es);
    size_t done = 1;  // doubling copies: log(n) memcpy calls
    while (done < static_cast<size_t>(n)) {
      const size_t chunk = std::min(done, static_cast<size_t>(n) - done);
      std::memcpy(p + done * es, p, chunk * es);
      done += chunk;
    }
    return;
  }
  const uint8_t v = get_nibble(value, 0);
  for (int64_t k = 0; k < n; ++k) set_nibble(dst, di + k, v);
}

}  // namespace cuvil::rt::ops

// ---- compute buffers and the shared GEMM (linalg.cpp, nn.cpp, quant_rnn.cpp, signal.cpp) ---
namespace cuvil::rt::ops {

// The elements of t as compute type C: t's own data when it is stored as C, otherwise a
// converted copy kept in *buf (16-bit floats and integers go through convert<C>).
template <typename C> const C* compute_data(const TensorView& t, std::vector<C>* buf) {
  if (t.dtype == dtype_of<C>()) return t.as<C>();
  const int64_t n = t.numel();
  buf->assign(static_cast<size_t>(n), C(0));
  visit_dtype<kNumericTypes | kBoolType>(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.as<T>();
    for (int64_t i = 0; i < n; ++i) (*buf)[i] = convert<C>(p[i]);
  });
  return buf->data();
}

// An output tensor written in compute type C: data() is the output itself when it is stored as
// C, otherwise a scratch buffer that finish() converts into the output's dtype.
template <typename C> class ComputeOutput {
 public:
  explicit ComputeOutput(TensorView* out) : out_(out) {
    if (out->dtype == dtype_of<C>()) {
      data_ = out->as<C>();
    } else {
      buf_.assign(static_cast<size_t>(out->numel()), C(0));
      data_ = buf_.data();
    }
  }
  C* data() { return data_; }
  void finish() {
    if (data_ != buf_.data() || buf_.empty()) return;
    visit_dtype<kNumericTypes>(out_->dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = out_->as<T>();
      for (size_t i = 0; i < buf_.size(); ++i) p[i] = convert<T>(buf_[i]);
    });
  }

 private:
  TensorView* out_;
  std::vector<C> buf_;
  C* data_ = nullptr;
};

// c = alpha * op(a) * op(b) + beta * c for row-major matrices, op(a) m x k, op(b) k x n, where
// op transposes when trans_* is set; beta == 0 means c is not read (it may be uninitialised).
// Splits the work over ctx's threads when ctx is non-null (never call it with a ctx from
// inside a parallel_range body: parallel_for is not re-entrant). In gemm_kernels.cpp/linalg.cpp.
void gemm(OpContext* ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
          float* c, int64_t ldc);
void gemm(OpContext* ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
          double beta, double* c, int64_t ldc);

// y[n][j][i] = x[n][i][j] for n < batch, i < a, j < b, elements of elem_bytes (1, 2, 4 or 8)
// bytes, in cache blocks split over ctx's workers (the same rule about parallel_range as gemm).
// In movement.cpp, next to Transpose, which uses it.
void transpose_matrices(OpContext& ctx, const void* x, void* y, int64_t batch, int64_t a, int64_t b,
                        size_t elem_bytes);

}  // namespace cuvil::rt::ops
