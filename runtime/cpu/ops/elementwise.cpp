// Whole-tensor CPU kernels for the elementwise ops of ir/ops.def: unary math and activations,
// Cast/CastLike/Clip/Dropout/IsNaN/IsInf, and the numpy-broadcasting binary, variadic and
// ternary (Where) ops. One broadcasting loop serves every n-ary op: the output shape is
// collapsed to as few dims as the inputs' strides allow, rows of the innermost dim are split
// across threads, and each row runs a contiguous, scalar-broadcast or strided inner loop of an
// op functor. Functors see the arithmetic type (float for float16/bfloat16) and the loop
// converts on store. Integer arithmetic wraps (no signed-overflow UB); integer division or
// modulo by zero is a kRuntime error.
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/vec_math.h"
#include "runtime/op_kernel.h"

namespace cuvil::rt::ops {
namespace {

constexpr int64_t kGrainElements = int64_t{1} << 15;

// ---- the broadcasting loop -------------------------------------------------------------------

// Output dims with size-1 dims dropped and dims merged wherever every input is contiguous
// across them; strides[k] are input k's element strides (0 on broadcast dims).
template <size_t N> struct BroadcastPlan {
  std::vector<int64_t> dims;
  std::array<std::vector<int64_t>, N> strides;
  int64_t rows = 1;   // product of all dims but the innermost
  int64_t inner = 1;  // the innermost dim
};

template <size_t N>
BroadcastPlan<N> plan_broadcast(const std::vector<int64_t>& out_dims,
                                const std::array<const std::vector<int64_t>*, N>& in_dims) {
  BroadcastPlan<N> p;
  std::array<std::vector<int64_t>, N> full;
  for (size_t k = 0; k < N; ++k) full[k] = broadcast_strides(*in_dims[k], out_dims);
  for (size_t d = 0; d < out_dims.size(); ++d) {
    if (out_dims[d] == 1) continue;
    bool merge = !p.dims.empty();
    for (size_t k = 0; k < N && merge; ++k)
      merge = p.strides[k].back() == full[k][d] * out_dims[d];
    if (merge) {
      p.dims.back() *= out_dims[d];
      for (size_t k = 0; k < N; ++k) p.strides[k].back() = full[k][d];
    } else {
      p.dims.push_back(out_dims[d]);
      for (size_t k = 0; k < N; ++k) p.strides[k].push_back(full[k][d]);
    }
  }
  if (p.dims.empty()) {
    p.dims.push_back(1);
    for (size_t k = 0; k < N; ++k) p.strides[k].push_back(0);
  }
  // A long innermost dim (a whole contiguous tensor is one) becomes rows of a block of it,
  // when a block size near kGrainElements divides it: otherwise it would be one chunk, run by
  // one thread and past the run's deadline and cancellation checks, which come between chunks.
  if (p.dims.back() > kGrainElements)
    for (int64_t block = kGrainElements; block >= kGrainElements / 32; block /= 2)
      if (p.dims.back() % block == 0) {
        p.dims.back() /= block;
        p.dims.push_back(block);
        for (size_t k = 0; k < N; ++k) {
          p.strides[k].push_back(p.strides[k].back());
          p.strides[k][p.strides[k].size() - 2] *= block;
        }
        break;
      }
  p.inner = p.dims.back();
  for (size_t d = 0; d + 1 < p.dims.size(); ++d) p.rows *= p.dims[d];
  return p;
}

// Calls row(out_offset, in_offsets, inner_strides) for rows [row_begin, row_end), walking the
// outer multi-index incrementally.
template <size_t N, typename RowFn>
void for_each_row(const BroadcastPlan<N>& p, int64_t row_begin, int64_t row_end, RowFn&& row) {
  const size_t outer = p.dims.size() - 1;
  std::vector<int64_t> idx(outer, 0);
  std::array<int64_t, N> off{};
  std::array<int64_t, N> inner_stride{};
  int64_t r = row_begin;
  for (size_t d = outer; d-- > 0;) {
    idx[d] = r % p.dims[d];
    r /= p.dims[d];
    for (size_t k = 0; k < N; ++k) off[k] += idx[d] * p.strides[k][d];
  }
  for (size_t k = 0; k < N; ++k) inner_stride[k] = p.strides[k][outer];
  for (int64_t rr = row_begin; rr < row_end; ++rr) {
    row(rr * p.inner, off, inner_stride);
    for (size_t d = outer; d-- > 0;) {
      for (size_t k = 0; k < N; ++k) off[k] += p.strides[k][d];
      if (++idx[d] < p.dims[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= p.strides[k][d] * p.dims[d];
      idx[d] = 0;
    }
  }
}

template <size_t N, typename RowFn>
void parallel_rows(OpContext& ctx, const BroadcastPlan<N>& p, RowFn&& row) {
  const int64_t grain = p.inner >= kGrainElements ? 1 : kGrainElements / p.inner;
  parallel_range(ctx, p.rows, grain,
                 [&](int64_t begin, int64_t end) { for_each_row(p, begin, end, row); });
}

// out[i] = f(a[i], b[i]) over a broadcast plan; f takes and returns arithmetic types.
template <typename A, typename B, typename R, typename F>
void apply_binary(OpContext& ctx, const BroadcastPlan<2>& p, const A* a, const B* b, R* out,
                  const F& f) {
  using CA = compute_t<A>;
  using CB = compute_t<B>;
  const int64_t n = p.inner;
  parallel_rows(ctx, p, [&](int64_t o, const std::array<int64_t, 2>& off,
                            const std::array<int64_t, 2>& st) {
    const A* pa = a + off[0];
    const B* pb = b + off[1];
    R* po = out + o;
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) po[i] = convert<R>(f(CA(pa[i]), CB(pb[i])));
    } else if (st[0] == 0 && st[1] == 1) {
      const CA av = CA(pa[0]);
      for (int64_t i = 0; i < n; ++i) po[i] = convert<R>(f(av, CB(pb[i])));
    } else if (st[0] == 1 && st[1] == 0) {
      const CB bv = CB(pb[0]);
      for (int64_t i = 0; i < n; ++i) po[i] = convert<R>(f(CA(pa[i]), bv));
    } else {
      for (int64_t i = 0; i < n; ++i) po[i] = convert<R>(f(CA(pa[i * st[0]]), CB(pb[i * st[1]])));
    }
  });
}

// out[i] = convert(in[i] broadcast to the output); out may not alias in.
template <typename T, typename R>
void broadcast_copy(OpContext& ctx, const TensorView& in, const std::vector<int64_t>& out_dims,
                    R* out) {
  const auto p = plan_broadcast<1>(out_dims, {&in.dims});
  const T* src = in.as<T>();
  const int64_t n = p.inner;
  parallel_rows(ctx, p, [&](int64_t o, const std::array<int64_t, 1>& off,
                            const std::array<int64_t, 1>& st) {
    for (int64_t i = 0; i < n; ++i) out[o + i] = convert<R>(src[off[0] + i * st[0]]);
  });
}

// ---- integer-safe arithmetic -----------------------------------------------------------------

// Integer division truncating toward zero; the divisor was checked non-zero. MIN / -1 wraps.
template <typename C> C div_int(C a, C b) {
  if constexpr (std::is_signed_v<C>) {
    if (b == -1) return neg_wrap(a);
  }
  return static_cast<C>(a / b);
}

// Integer power by squaring (wrapping); a negative exponent gives 0 unless |base| == 1.
template <typename C, typename E> C pow_int(C base, E exp) {
  if constexpr (std::is_signed_v<E>) {
    if (exp < 0) {
      if (base == C(1)) return C(1);
      if constexpr (std::is_signed_v<C>) {
        if (base == C(-1)) return (exp % 2 == 0) ? C(1) : C(-1);
      }
      return C(0);
    }
  }
  C result = 1;
  while (exp != 0) {
    if (exp & 1) result = mul_wrap(result, base);
    exp = static_cast<E>(exp / 2);
    if (exp != 0) base = mul_wrap(base, base);
  }
  return result;
}

template <typename C> C round_half_even(C x) {
  const C r = std::round(x);  // halves away from zero
  if (std::fabs(x - std::trunc(x)) == C(0.5)) return C(2) * std::round(x / C(2));
  return r;
}

// ---- input checks ----------------------------------------------------------------------------

Status require_inputs(OpContext& ctx, size_t min_count) {
  if (ctx.num_inputs() < min_count)
    return ctx.error(StatusCode::kInvalidArgument, "expects at least ", min_count, " inputs, got ",
                     ctx.num_inputs());
  for (size_t i = 0; i < min_count; ++i)
    if (!ctx.input(i))
      return ctx.error(StatusCode::kInvalidArgument, "required input ", i, " is missing");
  return Status::ok();
}

Status bad_dtype(OpContext& ctx, size_t input, DType t) {
  return ctx.error(StatusCode::kInvalidArgument, "input ", input, " has unsupported dtype ",
                   dtype_name(t));
}

Status require_dtype(OpContext& ctx, size_t input, unsigned set) {
  const DType t = ctx.input(input)->dtype;
  return dtype_in_set(t, set) ? Status::ok() : bad_dtype(ctx, input, t);
}

Status require_same_dtype(OpContext& ctx, size_t i, size_t j) {
  const DType a = ctx.input(i)->dtype, b = ctx.input(j)->dtype;
  if (a != b)
    return ctx.error(StatusCode::kInvalidArgument, "input ", j, " has dtype ", dtype_name(b),
                     ", expected ", dtype_name(a), " like input ", i);
  return Status::ok();
}

// ---- unary -----------------------------------------------------------------------------------

// out = f(x) elementwise, out dtype = x dtype, for x in the dtype set `Set`.
template <unsigned Set, typename F> Status unary_op(OpContext& ctx, const F& f) {
  CUVIL_RETURN_IF_ERROR(require_inputs(ctx, 1));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, Set));
  const TensorView& x = *ctx.input(0);
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x.dtype, x.dims, &out));
  visit_dtype<Set>(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* src = x.as<T>();
    T* dst = out->as<T>();
    parallel_range(ctx, x.numel(), kGrainElements, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = convert<T>(f(C(src[i])));
    });
  });
  return Status::ok();
}

// Float-only unary math.
template <typename F> Status float_unary(OpContext& ctx, const F& f) {
  return unary_op<kFloatTypes>(ctx, f);
}

// Unary math with a runtime/cpu/vec_math.h form: float32 tensors run the vectorised array
// function, float16/bfloat16 its scalar twin on each element converted to float (the same bits,
// as the tile interpreter computes them), double keeps `f` in double precision.
template <typename F>
Status vec_unary(OpContext& ctx, void (*array)(const float*, float*, int64_t), float (*scalar)(float), const F& f) {
  CUVIL_RETURN_IF_ERROR(require_inputs(ctx, 1));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, kFloatTypes));
  const TensorView& x = *ctx.input(0);
  if (x.dtype == DType::Double) return unary_op<kFloatTypes>(ctx, f);
  if (x.dtype != DType::Float) return unary_op<kFloatTypes>(ctx, [scalar](auto v) { return scalar(float(v)); });
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x.dtype, x.dims, &out));
  const float* src = x.as<float>();
  float* dst = out->as<float>();
  parallel_range(ctx, x.numel(), kGrainElements,
                 [&](int64_t b, int64_t e) { array(src + b, dst + b, e - b); });
  return Status::ok();
}

// out (bool) = pred(x) for float x.
template <typename F> Status float_predicate(OpContext& ctx, const F& pred) {
  CUVIL_RETURN_IF_ERROR(require_inputs(ctx, 1));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, kFloatTypes));
  const TensorView& x = *ctx.input(0);
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Bool, x.dims, &out));
  visit_dtype<kFloatTypes>(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* src = x.as<T>();
    bool* dst = out->as<bool>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) dst[i] = pred(C(src[i]));
  });
  return Status::ok();
}

float attr_f(OpContext& ctx, const char* name, float fallback) {
  return ctx.attrs().get_float(name, fallback);
}

// Copies input 0 into output 0 (same dtype and dims); any fixed-size dtype.
Status copy_input_to_output(OpContext& ctx, size_t output) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype == DType::String || dtype_bits(x.dtype) == 0) return bad_dtype(ctx, 0, x.dtype);
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(output, x.dtype, x.dims, &out));
  if (x.bytes() > 0) std::memcpy(out->data, x.data, x.bytes());
  return Status::ok();
}

// ---- binary / variadic / ternary ---------------------------------------------------------------

// Before opset 7, binary ops broadcast only with broadcast=1, aligning B's dims with A's
// starting at `axis` (suffix-aligned, i.e. numpy, when axis is absent). Returns B's dims
// rewritten to A's rank in that case.
Status legacy_broadcast_dims(OpContext& ctx, const TensorView& a, const TensorView& b,
                             std::vector<int64_t>* b_dims) {
  *b_dims = b.dims;
  if (ctx.opset() >= 7 || ctx.attrs().get_int("broadcast", 0) == 0 || !ctx.attrs().has("axis"))
    return Status::ok();
  const int64_t rank = static_cast<int64_t>(a.dims.size());
  int64_t axis = 0;
  if (!normalize_axis(ctx.attrs().get_int("axis", 0), rank, &axis) ||
      axis + static_cast<int64_t>(b.dims.size()) > rank)
    return ctx.error(StatusCode::kInvalidArgument, "legacy broadcast axis ",
                     ctx.attrs().get_int("axis", 0), " does not fit B ", dims_string(b.dims),
                     " into A ", dims_string(a.dims));
  b_dims->assign(static_cast<size_t>(rank), 1);
  for (size_t i = 0; i < b.dims.size(); ++i) (*b_dims)[static_cast<size_t>(axis) + i] = b.dims[i];
  return Status::ok();
}

// Shapes of inputs 0 and 1 (with legacy broadcast applied) and their broadcast.
struct BinaryShapes {
  TensorView a, b;  // views with possibly rewritten dims
  std::vector<int64_t> out;
};

Status binary_shapes(OpContext& ctx, BinaryShapes* s) {
  CUVIL_RETURN_IF_ERROR(require_inputs(ctx, 2));
  s->a = *ctx.input(0);
  s->b = *ctx.input(1);
  CUVIL_RETURN_IF_ERROR(legacy_broadcast_dims(ctx, *ctx.input(0), *ctx.input(1), &s->b.dims));
  if (!broadcast_shape(s->a.dims, s->b.dims, &s->out))
    return ctx.error(StatusCode::kInvalidArgument, "input shapes ", dims_string(s->a.dims), " and ",
                     dims_string(s->b.dims), " do not broadcast");
  return Status::ok();
}

// A binary op over two inputs of one dtype in `Set`; the output dtype is the input dtype, or
// bool when BoolOut. f is generic over the arithmetic types. With check_zero_divisor, an
// integer zero anywhere in input 1 is a kRuntime error (Div, Mod) raised before computing.
template <unsigned Set, bool BoolOut, typename F>
Status binary_op(OpContext& ctx, const F& f, bool check_zero_divisor = false) {
  BinaryShapes s;
  CUVIL_RETURN_IF_ERROR(binary_shapes(ctx, &s));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, Set));
  CUVIL_RETURN_IF_ERROR(require_same_dtype(ctx, 0, 1));
  int64_t numel = 0;
  if (!dims_numel(s.out, &numel))
    return ctx.error(StatusCode::kInvalidArgument, "output shape ", dims_string(s.out), " overflows");
  if (check_zero_divisor && numel > 0 && dtype_is_integer(s.b.dtype)) {
    bool zero = false;
    visit_dtype<kIntTypes>(s.b.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* p = s.b.as<T>();
      for (int64_t i = 0, n = s.b.numel(); i < n && !zero; ++i) zero = p[i] == T(0);
    });
    if (zero) return ctx.error(StatusCode::kRuntime, "integer division by zero (input 1)");
  }
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, BoolOut ? DType::Bool : s.a.dtype, s.out, &out));
  if (numel == 0) return Status::ok();
  const auto plan = plan_broadcast<2>(s.out, {&s.a.dims, &s.b.dims});
  visit_dtype<Set>(s.a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using R = std::conditional_t<BoolOut, bool, T>;
    apply_binary(ctx, plan, s.a.as<T>(), s.b.as<T>(), out->as<R>(), f);
  });
  return Status::ok();
}

template <unsigned Set, typename F> Status arith_op(OpContext& ctx, const F& f) {
  return binary_op<Set, false>(ctx, f);
}
template <unsigned Set, typename F> Status compare_op(OpContext& ctx, const F& f) {
  return binary_op<Set, true>(ctx, f);
}

// Max/Min/Sum/Mean: fold f over all inputs (broadcast) into the output; Mean divides.
template <unsigned Set, typename F> Status variadic_op(OpContext& ctx, const F& f, bool mean) {
  const size_t n_in = ctx.num_inputs();
  if (n_in < 1) return ctx.error(StatusCode::kInvalidArgument, "expects at least one input");
  CUVIL_RETURN_IF_ERROR(require_inputs(ctx, n_in));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, Set));
  std::vector<const std::vector<int64_t>*> shapes;
  for (size_t i = 0; i < n_in; ++i) {
    CUVIL_RETURN_IF_ERROR(require_same_dtype(ctx, 0, i));
    shapes.push_back(&ctx.input(i)->dims);
  }
  std::vector<int64_t> out_dims;
  if (!broadcast_shape(shapes, &out_dims)) {
    std::string all;
    for (const auto* d : shapes) all += dims_string(*d) + " ";
    return ctx.error(StatusCode::kInvalidArgument, "input shapes ", all, "do not broadcast");
  }
  int64_t numel = 0;
  if (!dims_numel(out_dims, &numel))
    return ctx.error(StatusCode::kInvalidArgument, "output shape ", dims_string(out_dims), " overflows");
  const DType dt = ctx.input(0)->dtype;
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, dt, out_dims, &out));
  if (numel == 0) return Status::ok();
  visit_dtype<Set>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    T* o = out->as<T>();
    broadcast_copy<T, T>(ctx, *ctx.input(0), out_dims, o);
    for (size_t i = 1; i < n_in; ++i) {
      const auto plan = plan_broadcast<2>(out_dims, {&out_dims, &ctx.input(i)->dims});
      apply_binary(ctx, plan, o, ctx.input(i)->as<T>(), o, f);  // in place: same offsets
    }
    if (mean && n_in > 1) {
      const C div = static_cast<C>(n_in);
      for (int64_t i = 0; i < numel; ++i) o[i] = convert<T>(C(o[i]) / div);
    }
  });
  return Status::ok();
}

// Float functors shared by several kernels.
template <typename C> C sigmoid(C x) {
  if (x >= C(0)) return C(1) / (C(1) + std::exp(-x));
  const C e = std::exp(x);
  return e / (C(1) + e);
}
template <typename C> C softplus(C x) {
  return std::max(x, C(0)) + std::log1p(std::exp(-std::fabs(x)));
}

}  // namespace

// ---- unary math --------------------------------------------------------------------------------

Status kernel_Abs(OpContext& ctx) {
  return unary_op<kNumericTypes>(ctx, [](auto x) {
    using C = decltype(x);
    if constexpr (std::is_unsigned_v<C>) return x;
    else if constexpr (std::is_integral_v<C>) return x < 0 ? neg_wrap(x) : x;
    else return std::fabs(x);
  });
}
Status kernel_Neg(OpContext& ctx) {
  return unary_op<kFloatTypes | kSignedInts>(ctx, [](auto x) { return neg_wrap(x); });
}
Status kernel_Sign(OpContext& ctx) {
  return unary_op<kNumericTypes>(ctx, [](auto x) {
    using C = decltype(x);
    if (is_nan_value(x)) return x;
    return static_cast<C>(x > C(0) ? 1 : (x < C(0) ? -1 : 0));
  });
}
Status kernel_Acos(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::acos(x); }); }
Status kernel_Acosh(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::acosh(x); }); }
Status kernel_Asin(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::asin(x); }); }
Status kernel_Asinh(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::asinh(x); }); }
Status kernel_Atan(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::atan(x); }); }
Status kernel_Atanh(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::atanh(x); }); }
Status kernel_Cos(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::cos(x); }); }
Status kernel_Cosh(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::cosh(x); }); }
Status kernel_Sin(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::sin(x); }); }
Status kernel_Sinh(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::sinh(x); }); }
Status kernel_Tan(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::tan(x); }); }
Status kernel_Tanh(OpContext& ctx) { return vec_unary(ctx, vm::tanh, vm::tanh1, [](auto x) { return std::tanh(x); }); }
Status kernel_Ceil(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::ceil(x); }); }
Status kernel_Floor(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::floor(x); }); }
Status kernel_Round(OpContext& ctx) { return float_unary(ctx, [](auto x) { return round_half_even(x); }); }
Status kernel_Erf(OpContext& ctx) { return vec_unary(ctx, vm::erf, vm::erf1, [](auto x) { return std::erf(x); }); }
Status kernel_Exp(OpContext& ctx) { return vec_unary(ctx, vm::exp, vm::exp1, [](auto x) { return std::exp(x); }); }
Status kernel_Log(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::log(x); }); }
Status kernel_Sqrt(OpContext& ctx) { return float_unary(ctx, [](auto x) { return std::sqrt(x); }); }
Status kernel_Reciprocal(OpContext& ctx) {
  return float_unary(ctx, [](auto x) { return decltype(x)(1) / x; });
}
Status kernel_Sigmoid(OpContext& ctx) { return vec_unary(ctx, vm::sigmoid, vm::sigmoid1, [](auto x) { return sigmoid(x); }); }
Status kernel_Softplus(OpContext& ctx) { return float_unary(ctx, [](auto x) { return softplus(x); }); }
Status kernel_Softsign(OpContext& ctx) {
  return float_unary(ctx, [](auto x) { return x / (decltype(x)(1) + std::fabs(x)); });
}
Status kernel_Mish(OpContext& ctx) {
  return float_unary(ctx, [](auto x) { return x * std::tanh(softplus(x)); });
}
Status kernel_Not(OpContext& ctx) {
  return unary_op<kBoolType>(ctx, [](bool x) { return !x; });
}
Status kernel_BitwiseNot(OpContext& ctx) {
  return unary_op<kIntTypes>(ctx, [](auto x) { return static_cast<decltype(x)>(~x); });
}

// ---- activations with attributes ----------------------------------------------------------------

Status kernel_Relu(OpContext& ctx) {
  return unary_op<kFloatTypes | kSignedInts>(ctx, [](auto x) {
    using C = decltype(x);
    return x > C(0) ? x : (is_nan_value(x) ? x : C(0));
  });
}
Status kernel_LeakyRelu(OpContext& ctx) {
  const double alpha = attr_f(ctx, "alpha", 0.01f);
  return float_unary(ctx, [alpha](auto x) {
    using C = decltype(x);
    return x < C(0) ? static_cast<C>(alpha) * x : x;
  });
}
Status kernel_Elu(OpContext& ctx) {
  const double alpha = attr_f(ctx, "alpha", 1.0f);
  return float_unary(ctx, [alpha](auto x) {
    using C = decltype(x);
    return x < C(0) ? static_cast<C>(alpha) * (std::exp(x) - C(1)) : x;
  });
}
Status kernel_Celu(OpContext& ctx) {
  const double alpha = attr_f(ctx, "alpha", 1.0f);
  if (alpha == 0) return ctx.error(StatusCode::kInvalidArgument, "alpha must not be 0");
  return float_unary(ctx, [alpha](auto x) {
    using C = decltype(x);
    const C a = static_cast<C>(alpha);
    return std::max(C(0), x) + std::min(C(0), a * (std::exp(x / a) - C(1)));
  });
}
Status kernel_Selu(OpContext& ctx) {
  const double alpha = attr_f(ctx, "alpha", 1.67326319217681884765625f);
  const double gamma = attr_f(ctx, "gamma", 1.05070102214813232421875f);
  return float_unary(ctx, [alpha, gamma](auto x) {
    using C = decltype(x);
    const C y = x > C(0) ? x : static_cast<C>(alpha) * (std::exp(x) - C(1));
    return static_cast<C>(gamma) * y;
  });
}
Status kernel_HardSigmoid(OpContext& ctx) {
  const double alpha = attr_f(ctx, "alpha", 0.2f), beta = attr_f(ctx, "beta", 0.5f);
  return float_unary(ctx, [alpha, beta](auto x) {
    using C = decltype(x);
    return std::max(C(0), std::min(C(1), static_cast<C>(alpha) * x + static_cast<C>(beta)));
  });
}
Status kernel_HardSwish(OpContext& ctx) {
  return float_unary(ctx, [](auto x) {
    using C = decltype(x);
    return x * std::max(C(0), std::min(C(1), x / C(6) + C(0.5)));
  });
}
Status kernel_ThresholdedRelu(OpContext& ctx) {
  const double alpha = attr_f(ctx, "alpha", 1.0f);
  return float_unary(ctx, [alpha](auto x) {
    using C = decltype(x);
    return x > static_cast<C>(alpha) ? x : C(0);
  });
}
Status kernel_Shrink(OpContext& ctx) {
  const double bias = attr_f(ctx, "bias", 0.0f), lambd = attr_f(ctx, "lambd", 0.5f);
  return unary_op<kNumericTypes>(ctx, [bias, lambd](auto x) {
    const double v = static_cast<double>(x);
    const double y = v < -lambd ? v + bias : (v > lambd ? v - bias : 0.0);
    return convert<decltype(x)>(y);
  });
}
Status kernel_Gelu(OpContext& ctx) {
  const std::string approx = ctx.attrs().get_string("approximate", "none");
  if (approx == "none") {
    return vec_unary(ctx, vm::gelu, vm::gelu1, [](auto x) {
      using C = decltype(x);
      return C(0.5) * x * (C(1) + std::erf(x * static_cast<C>(0.70710678118654752440)));
    });
  }
  if (approx == "tanh") {
    return vec_unary(ctx, vm::gelu_tanh, vm::gelu_tanh1, [](auto x) {
      using C = decltype(x);
      const C k = static_cast<C>(0.79788456080286535588);  // sqrt(2/pi)
      return C(0.5) * x * (C(1) + std::tanh(k * (x + C(0.044715) * x * x * x)));
    });
  }
  return ctx.error(StatusCode::kInvalidArgument, "approximate must be 'none' or 'tanh', got '",
                   approx, "'");
}

Status kernel_IsNaN(OpContext& ctx) {
  return float_predicate(ctx, [](auto x) { return std::isnan(x); });
}
Status kernel_IsInf(OpContext& ctx) {
  const bool neg = ctx.attrs().get_int("detect_negative", 1) != 0;
  const bool pos = ctx.attrs().get_int("detect_positive", 1) != 0;
  return float_predicate(ctx, [neg, pos](auto x) {
    return std::isinf(x) && ((x > 0 && pos) || (x < 0 && neg));
  });
}

Status kernel_Identity(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_inputs(ctx, 1));
  return copy_input_to_output(ctx, 0);
}

// The optionals cuvil runs are the ones without an element (an omitted input) and plain
// tensors (opset 18 accepts them): OptionalHasElement says which, OptionalGetElement passes a
// tensor through and fails on an empty optional, as ONNX says.
Status kernel_OptionalHasElement(OpContext& ctx) {
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Bool, {}, &out));
  *out->as<bool>() = ctx.num_inputs() > 0 && ctx.input(0) != nullptr;
  return Status::ok();
}

Status kernel_OptionalGetElement(OpContext& ctx) {
  if (ctx.num_inputs() < 1 || ctx.input(0) == nullptr)
    return ctx.error(StatusCode::kRuntime, "the optional input has no element");
  return copy_input_to_output(ctx, 0);
}

namespace {
// Training-mode Dropout: element i is kept when the i-th uniform draw of MT19937(seed) (53-bit
// doubles built as numpy's RandomState.uniform builds them) is >= ratio, and scaled by
// 1 / (1 - ratio). The same seed gives the same mask on every run; without `seed` it is 0.
Status training_dropout(OpContext& ctx, double ratio) {
  const TensorView& x = *ctx.input(0);
  TensorView* out = nullptr;
  TensorView* mask = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x.dtype, x.dims, &out));
  if (ctx.num_outputs() > 1 && ctx.output_wanted(1))
    CUVIL_RETURN_IF_ERROR(ctx.allocate_output(1, DType::Bool, x.dims, &mask));
  std::mt19937 gen(static_cast<uint32_t>(ctx.attrs().get_int("seed", 0)));
  visit_dtype<kFloatTypes>(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const C scale = static_cast<C>(1.0 / (1.0 - ratio));
    const T* src = x.as<T>();
    T* dst = out->as<T>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) {
      const uint32_t hi = gen() >> 5, lo = gen() >> 6;
      const bool keep = (hi * 67108864.0 + lo) / 9007199254740992.0 >= ratio;
      dst[i] = keep ? convert<T>(C(src[i]) * scale) : convert<T>(C(0));
      if (mask) mask->as<bool>()[i] = keep;
    }
  });
  return Status::ok();
}
}  // namespace

// Inference Dropout: the identity; the optional mask is all true (bool from opset 10, the
// input dtype before).
Status kernel_Dropout(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_inputs(ctx, 1));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, kFloatTypes));
  const TensorView& x = *ctx.input(0);
  double ratio = ctx.attrs().get_float("ratio", 0.5f);
  bool training = false;
  if (ctx.opset() >= 12) {
    ratio = 0.5;
    if (ctx.num_inputs() > 1 && ctx.input(1) && !read_scalar(ctx.input(1), &ratio))
      return ctx.error(StatusCode::kInvalidArgument, "ratio (input 1) must be a float scalar");
    double t = 0;
    if (ctx.num_inputs() > 2 && ctx.input(2)) {
      if (ctx.input(2)->dtype != DType::Bool || !read_scalar(ctx.input(2), &t))
        return ctx.error(StatusCode::kInvalidArgument, "training_mode (input 2) must be a bool scalar");
      training = t != 0;
    }
  }
  if (!(ratio >= 0 && ratio < 1))
    return ctx.error(StatusCode::kInvalidArgument, "ratio must be in [0, 1), got ", ratio);
  if (training && ratio != 0) return training_dropout(ctx, ratio);
  CUVIL_RETURN_IF_ERROR(copy_input_to_output(ctx, 0));
  if (ctx.num_outputs() > 1 && ctx.output_wanted(1)) {
    const DType mask_type = ctx.opset() >= 10 ? DType::Bool : x.dtype;
    TensorView* mask = nullptr;
    CUVIL_RETURN_IF_ERROR(ctx.allocate_output(1, mask_type, x.dims, &mask));
    visit_dtype<kFloatTypes | kBoolType>(mask_type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* m = mask->as<T>();
      for (int64_t i = 0, n = x.numel(); i < n; ++i) m[i] = convert<T>(1.0f);
    });
  }
  return Status::ok();
}

// Clip: min/max are attributes before opset 11 and optional scalar inputs from 11.
Status kernel_Clip(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_inputs(ctx, 1));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, ctx.opset() >= 12 ? kNumericTypes : kFloatTypes));
  const TensorView& x = *ctx.input(0);
  for (size_t i = 1; i < 3 && ctx.opset() >= 11; ++i) {
    const TensorView* b = i < ctx.num_inputs() ? ctx.input(i) : nullptr;
    if (!b) continue;
    if (b->dtype != x.dtype)
      return ctx.error(StatusCode::kInvalidArgument, "input ", i, " has dtype ", dtype_name(b->dtype),
                       ", expected ", dtype_name(x.dtype));
    if (b->numel() != 1)
      return ctx.error(StatusCode::kInvalidArgument, "input ", i, " must be a scalar, got shape ",
                       dims_string(b->dims));
  }
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x.dtype, x.dims, &out));
  visit_dtype<kNumericTypes>(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
    if (ctx.opset() < 11) {
      lo = static_cast<C>(ctx.attrs().get_float("min", std::numeric_limits<float>::lowest()));
      hi = static_cast<C>(ctx.attrs().get_float("max", std::numeric_limits<float>::max()));
    } else {
      if (ctx.num_inputs() > 1 && ctx.input(1)) lo = C(ctx.input(1)->as<T>()[0]);
      if (ctx.num_inputs() > 2 && ctx.input(2)) hi = C(ctx.input(2)->as<T>()[0]);
    }
    const T* src = x.as<T>();
    T* dst = out->as<T>();
    parallel_range(ctx, x.numel(), kGrainElements, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const C v = C(src[i]);
        dst[i] = convert<T>(is_nan_value(v) ? v : std::min(std::max(v, lo), hi));
      }
    });
  });
  return Status::ok();
}

// ---- Cast ----------------------------------------------------------------------------------------

namespace {
bool is_int4(DType t) { return t == DType::Int4 || t == DType::UInt4; }

// Casts from or to float8 and 4-bit types go through double (rare; not performance critical).
// To int4/uint4: round half to even and saturate (NaN -> 0); nibbles pack low first.
void cast_via_double(const TensorView& x, TensorView* out, bool saturate) {
  const int64_t n = x.numel();
  std::vector<double> tmp(static_cast<size_t>(n));
  const uint8_t* raw = x.as<uint8_t>();
  if (const Float8Format* f = float8_format(x.dtype)) {
    for (int64_t i = 0; i < n; ++i) tmp[i] = float8_bits_to_float(raw[i], *f);
  } else if (is_int4(x.dtype)) {
    for (int64_t i = 0; i < n; ++i) {
      int v = (raw[i / 2] >> ((i % 2) * 4)) & 0xf;
      if (x.dtype == DType::Int4 && v >= 8) v -= 16;
      tmp[i] = v;
    }
  } else {
    visit_dtype(x.dtype, [&](auto tag) {
      using From = typename decltype(tag)::type;
      const From* src = x.as<From>();
      for (int64_t i = 0; i < n; ++i) tmp[i] = convert<double>(src[i]);
    });
  }
  uint8_t* dst = out->as<uint8_t>();
  if (const Float8Format* f = float8_format(out->dtype)) {
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_float8_bits(static_cast<float>(tmp[i]), *f, saturate);
  } else if (is_int4(out->dtype)) {
    const double lo = out->dtype == DType::Int4 ? -8 : 0, hi = out->dtype == DType::Int4 ? 7 : 15;
    if (out->bytes() > 0) std::memset(dst, 0, out->bytes());
    for (int64_t i = 0; i < n; ++i) {
      const double v = std::isnan(tmp[i]) ? 0.0 : std::min(hi, std::max(lo, round_half_even(tmp[i])));
      const uint8_t nibble = static_cast<uint8_t>(static_cast<int>(v) & 0xf);
      dst[i / 2] = static_cast<uint8_t>(dst[i / 2] | (nibble << ((i % 2) * 4)));
    }
  } else {
    visit_dtype(out->dtype, [&](auto tag) {
      using To = typename decltype(tag)::type;
      To* d = out->as<To>();
      for (int64_t i = 0; i < n; ++i) d[i] = convert<To>(tmp[i]);
    });
  }
}

Status cast_to(OpContext& ctx, DType to) {
  const TensorView& x = *ctx.input(0);
  auto special = [](DType t) { return float8_format(t) != nullptr || is_int4(t); };
  if (!dtype_in_set(x.dtype, kAllTypes) && !special(x.dtype)) return bad_dtype(ctx, 0, x.dtype);
  if (!dtype_in_set(to, kAllTypes) && !special(to))
    return ctx.error(StatusCode::kUnsupported, "cast to ", dtype_name(to), " is not supported");
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, to, x.dims, &out));
  if (special(x.dtype) || special(to)) {
    cast_via_double(x, out, ctx.attrs().get_int("saturate", 1) != 0);
    return Status::ok();
  }
  visit_dtype(x.dtype, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    visit_dtype(to, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      const From* src = x.as<From>();
      To* dst = out->as<To>();
      parallel_range(ctx, x.numel(), kGrainElements, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = convert<To>(src[i]);
      });
    });
  });
  return Status::ok();
}
}  // namespace

Status kernel_Cast(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_inputs(ctx, 1));
  if (!ctx.attrs().has("to")) return ctx.error(StatusCode::kInvalidArgument, "missing attribute 'to'");
  const int64_t code = ctx.attrs().get_int("to", 0);
  const auto to = code >= 0 && code <= 1000 ? dtype_from_onnx(static_cast<int32_t>(code)) : std::nullopt;
  if (!to) return ctx.error(StatusCode::kInvalidArgument, "attribute 'to' has unknown dtype code ", code);
  return cast_to(ctx, *to);
}

// BitCast(x, to): x's bytes as `to`, a type of the same width (shape unchanged).
Status kernel_BitCast(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_inputs(ctx, 1));
  const TensorView& x = *ctx.input(0);
  const int64_t code = ctx.attrs().get_int("to", 0);
  const auto to = code >= 0 && code <= 1000 ? dtype_from_onnx(static_cast<int32_t>(code)) : std::nullopt;
  if (!to) return ctx.error(StatusCode::kInvalidArgument, "attribute 'to' has unknown dtype code ", code);
  if (*to == DType::String || x.dtype == DType::String || dtype_bits(*to) != dtype_bits(x.dtype))
    return ctx.error(StatusCode::kInvalidArgument, "BitCast needs types of the same width, got ",
                     dtype_name(x.dtype), " to ", dtype_name(*to));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, *to, x.dims, &y));
  if (x.bytes()) std::memcpy(y->data, x.data, x.bytes());
  return Status::ok();
}

Status kernel_CastLike(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_inputs(ctx, 2));
  return cast_to(ctx, ctx.input(1)->dtype);
}

// ---- binary arithmetic ------------------------------------------------------------------------------

Status kernel_Add(OpContext& ctx) {
  return arith_op<kNumericTypes>(ctx, [](auto a, auto b) { return add_wrap(a, b); });
}
Status kernel_Sub(OpContext& ctx) {
  return arith_op<kNumericTypes>(ctx, [](auto a, auto b) { return sub_wrap(a, b); });
}
Status kernel_Mul(OpContext& ctx) {
  return arith_op<kNumericTypes>(ctx, [](auto a, auto b) { return mul_wrap(a, b); });
}
Status kernel_Div(OpContext& ctx) {
  return binary_op<kNumericTypes, false>(
      ctx,
      [](auto a, auto b) {
        if constexpr (std::is_integral_v<decltype(a)>) return div_int(a, b);
        else return a / b;
      },
      /*check_zero_divisor=*/true);
}

Status kernel_Mod(OpContext& ctx) {
  const bool fmod = ctx.attrs().get_int("fmod", 0) != 0;
  CUVIL_RETURN_IF_ERROR(require_inputs(ctx, 1));
  if (!fmod && dtype_is_float(ctx.input(0)->dtype)) {
    if (ctx.opset() < 28)
      return ctx.error(StatusCode::kInvalidArgument, "fmod must be 1 for float inputs (before opset 28)");
    // Opset 28: the remainder takes the divisor's sign, as numpy.mod (npy_divmod): fmod, moved
    // by one divisor when the signs differ; a zero remainder is a zero of the divisor's sign.
    return binary_op<kFloatTypes, false>(ctx, [](auto a, auto b) {
      using C = decltype(a);
      C r = std::fmod(a, b);
      if (b == C(0)) return r;
      if (r != C(0)) {
        if ((b < C(0)) != (r < C(0))) r += b;
      } else {
        r = std::copysign(C(0), b);
      }
      return r;
    });
  }
  if (fmod) {
    return binary_op<kNumericTypes, false>(
        ctx,
        [](auto a, auto b) {
          using C = decltype(a);
          if constexpr (std::is_floating_point_v<C>) return std::fmod(a, b);
          else if constexpr (std::is_signed_v<C>) return b == C(-1) ? C(0) : static_cast<C>(a % b);
          else return static_cast<C>(a % b);
        },
        true);
  }
  return binary_op<kIntTypes, false>(
      ctx,
      [](auto a, auto b) {
        using C = decltype(a);
        if constexpr (std::is_signed_v<C>) {
          if (b == C(-1)) return C(0);
          C r = static_cast<C>(a % b);
          if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<C>(r + b);
          return r;
        } else {
          return static_cast<C>(a % b);
        }
      },
      true);
}

// Pow: the output has the base's dtype; the exponent may have another numeric dtype.
Status kernel_Pow(OpContext& ctx) {
  BinaryShapes s;
  CUVIL_RETURN_IF_ERROR(binary_shapes(ctx, &s));
  const unsigned set = ctx.opset() >= 12 ? (kFloatTypes | kSignedInts | kUnsignedInts) : kFloatTypes;
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, set));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 1, set));
  if (ctx.opset() < 12) CUVIL_RETURN_IF_ERROR(require_same_dtype(ctx, 0, 1));
  int64_t numel = 0;
  if (!dims_numel(s.out, &numel))
    return ctx.error(StatusCode::kInvalidArgument, "output shape ", dims_string(s.out), " overflows");
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, s.a.dtype, s.out, &out));
  if (numel == 0) return Status::ok();
  const auto plan = plan_broadcast<2>(s.out, {&s.a.dims, &s.b.dims});
  visit_dtype<kNumericTypes>(s.a.dtype, [&](auto base_tag) {
    using A = typename decltype(base_tag)::type;
    visit_dtype<kNumericTypes>(s.b.dtype, [&](auto exp_tag) {
      using B = typename decltype(exp_tag)::type;
      apply_binary(ctx, plan, s.a.as<A>(), s.b.as<B>(), out->as<A>(), [](auto a, auto b) {
        using CA = decltype(a);
        using CB = decltype(b);
        if constexpr (std::is_integral_v<CA> && std::is_integral_v<CB>) {
          return pow_int(a, b);
        } else if constexpr (std::is_same_v<CA, float> && std::is_same_v<CB, float>) {
          return std::pow(a, b);
        } else {
          return convert<CA>(std::pow(static_cast<double>(a), static_cast<double>(b)));
        }
      });
    });
  });
  return Status::ok();
}

Status kernel_BitShift(OpContext& ctx) {
  const std::string dir = ctx.attrs().get_string("direction", "");
  if (dir != "LEFT" && dir != "RIGHT")
    return ctx.error(StatusCode::kInvalidArgument, "direction must be 'LEFT' or 'RIGHT', got '", dir, "'");
  const bool left = dir == "LEFT";
  // A shift by the width or more (or, signed, by a negative amount) gives 0, or -1 for a
  // negative value shifted right; a left shift wraps (as on the unsigned bits), a signed right
  // shift is arithmetic. Opset 28 added the signed integers.
  auto shift = [left](auto a, auto b) {
    using C = decltype(a);
    using U = std::make_unsigned_t<C>;
    bool negative = false;
    if constexpr (std::is_signed_v<C>) negative = a < C(0);
    bool out_of_range = b >= static_cast<C>(sizeof(C) * 8);
    if constexpr (std::is_signed_v<C>) out_of_range = out_of_range || b < C(0);
    if (out_of_range) return left || !negative ? C(0) : C(-1);
    return static_cast<C>(left ? static_cast<U>(static_cast<U>(a) << b) : a >> b);
  };
  if (ctx.opset() >= 28) return arith_op<kIntTypes>(ctx, shift);
  return arith_op<kUnsignedInts>(ctx, shift);
}
Status kernel_BitwiseAnd(OpContext& ctx) {
  return arith_op<kIntTypes>(ctx, [](auto a, auto b) { return static_cast<decltype(a)>(a & b); });
}
Status kernel_BitwiseOr(OpContext& ctx) {
  return arith_op<kIntTypes>(ctx, [](auto a, auto b) { return static_cast<decltype(a)>(a | b); });
}
Status kernel_BitwiseXor(OpContext& ctx) {
  return arith_op<kIntTypes>(ctx, [](auto a, auto b) { return static_cast<decltype(a)>(a ^ b); });
}

// PRelu: slope broadcasts unidirectionally to X (before opset 7 a 1-D slope is per channel).
Status kernel_PRelu(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_inputs(ctx, 2));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, kFloatTypes | kSignedInts | kUnsignedInts));
  CUVIL_RETURN_IF_ERROR(require_same_dtype(ctx, 0, 1));
  const TensorView& x = *ctx.input(0);
  TensorView slope = *ctx.input(1);
  if (ctx.opset() < 7 && slope.dims.size() == 1 && x.dims.size() >= 2 && slope.dims[0] == x.dims[1] &&
      slope.dims[0] != 1) {
    slope.dims.assign(x.dims.size() - 1, 1);
    slope.dims[0] = x.dims[1];
  }
  std::vector<int64_t> out_dims;
  if (!broadcast_shape(x.dims, slope.dims, &out_dims) || out_dims != x.dims)
    return ctx.error(StatusCode::kInvalidArgument, "slope ", dims_string(slope.dims),
                     " does not broadcast to X ", dims_string(x.dims));
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x.dtype, x.dims, &out));
  if (x.numel() == 0) return Status::ok();
  const auto plan = plan_broadcast<2>(x.dims, {&x.dims, &slope.dims});
  visit_dtype<kNumericTypes>(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    apply_binary(ctx, plan, x.as<T>(), slope.as<T>(), out->as<T>(), [](auto a, auto s) {
      return a < decltype(a)(0) ? mul_wrap(a, s) : a;
    });
  });
  return Status::ok();
}

// ---- variadic ------------------------------------------------------------------------------------

namespace {
// NaN propagates; on ties (+0 vs -0) the first operand wins, as numpy's maximum/minimum (the
// fused tile kernels agree bitwise).
// NaN propagates; on a tie (0 vs -0) the second operand wins, as in the tile interpreter. The
// strict comparison is the IEEE-exact maxss/minss pattern, so the compiler cannot pick the
// other operand on ties (with `>=` GCC may emit maxss with either operand order).
auto max_fn = [](auto a, auto b) { return is_nan_value(a) || a > b ? a : b; };
auto min_fn = [](auto a, auto b) { return is_nan_value(a) || a < b ? a : b; };
}  // namespace

Status kernel_Max(OpContext& ctx) { return variadic_op<kNumericTypes>(ctx, max_fn, false); }
Status kernel_Min(OpContext& ctx) { return variadic_op<kNumericTypes>(ctx, min_fn, false); }
Status kernel_Sum(OpContext& ctx) {
  return variadic_op<kNumericTypes>(ctx, [](auto a, auto b) { return add_wrap(a, b); }, false);
}
Status kernel_Mean(OpContext& ctx) {
  return variadic_op<kFloatTypes>(ctx, [](auto a, auto b) { return a + b; }, true);
}

// ---- logical and comparison ----------------------------------------------------------------------

Status kernel_And(OpContext& ctx) { return compare_op<kBoolType>(ctx, [](bool a, bool b) { return a && b; }); }
Status kernel_Or(OpContext& ctx) { return compare_op<kBoolType>(ctx, [](bool a, bool b) { return a || b; }); }
Status kernel_Xor(OpContext& ctx) { return compare_op<kBoolType>(ctx, [](bool a, bool b) { return a != b; }); }
Status kernel_Equal(OpContext& ctx) {
  return compare_op<kAllTypes>(ctx, [](auto a, auto b) { return a == b; });
}
Status kernel_Greater(OpContext& ctx) {
  return compare_op<kNumericTypes>(ctx, [](auto a, auto b) { return a > b; });
}
Status kernel_GreaterOrEqual(OpContext& ctx) {
  return compare_op<kNumericTypes>(ctx, [](auto a, auto b) { return a >= b; });
}
Status kernel_Less(OpContext& ctx) {
  return compare_op<kNumericTypes>(ctx, [](auto a, auto b) { return a < b; });
}
Status kernel_LessOrEqual(OpContext& ctx) {
  return compare_op<kNumericTypes>(ctx, [](auto a, auto b) { return a <= b; });
}

// Where(cond, X, Y): three-way broadcast, output dtype of X.
Status kernel_Where(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_inputs(ctx, 3));
  const TensorView &c = *ctx.input(0), &x = *ctx.input(1), &y = *ctx.input(2);
  if (c.dtype != DType::Bool) return bad_dtype(ctx, 0, c.dtype);
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 1, kAllTypes));
  CUVIL_RETURN_IF_ERROR(require_same_dtype(ctx, 1, 2));
  std::vector<int64_t> out_dims;
  if (!broadcast_shape({&c.dims, &x.dims, &y.dims}, &out_dims))
    return ctx.error(StatusCode::kInvalidArgument, "input shapes ", dims_string(c.dims), " ",
                     dims_string(x.dims), " ", dims_string(y.dims), " do not broadcast");
  int64_t numel = 0;
  if (!dims_numel(out_dims, &numel))
    return ctx.error(StatusCode::kInvalidArgument, "output shape ", dims_string(out_dims), " overflows");
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x.dtype, out_dims, &out));
  if (numel == 0) return Status::ok();
  const auto plan = plan_broadcast<3>(out_dims, {&c.dims, &x.dims, &y.dims});
  visit_dtype(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool* pc = c.as<bool>();
    const T* px = x.as<T>();
    const T* py = y.as<T>();
    T* po = out->as<T>();
    const int64_t n = plan.inner;
    parallel_rows(ctx, plan, [&](int64_t o, const std::array<int64_t, 3>& off,
                                 const std::array<int64_t, 3>& st) {
      for (int64_t i = 0; i < n; ++i)
        po[o + i] = pc[off[0] + i * st[0]] ? px[off[1] + i * st[1]] : py[off[2] + i * st[2]];
    });
  });
  return Status::ok();
}

}  // namespace cuvil::rt::ops
