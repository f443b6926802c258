// Whole-tensor CPU kernels for reductions and ops that work along axes: Reduce* (one
// accumulate loop over the input in memory order, with output strides of 0 on reduced dims),
// ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax (opset < 13 coerce the input to 2-D at `axis`;
// 13+ work along one axis), CumSum, Trilu, MeanVarianceNormalization and LRN. Float inputs
// accumulate in double, integers in 64-bit with wrapping; float16/bfloat16 convert through
// float on load and store.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/vec_math.h"
#include "runtime/op_kernel.h"

namespace cuvil::rt::ops {
namespace {

constexpr int64_t kGrainElements = int64_t{1} << 15;

Status require_input(OpContext& ctx, size_t i) {
  if (i >= ctx.num_inputs() || !ctx.input(i))
    return ctx.error(StatusCode::kInvalidArgument, "required input ", i, " is missing");
  return Status::ok();
}

Status require_dtype(OpContext& ctx, size_t i, unsigned set) {
  const DType t = ctx.input(i)->dtype;
  if (!dtype_in_set(t, set))
    return ctx.error(StatusCode::kInvalidArgument, "input ", i, " has unsupported dtype ", dtype_name(t));
  return Status::ok();
}

// A tensor seen as [outer, len, inner] around one axis.
struct AxisView {
  int64_t outer = 1, len = 1, inner = 1;
};
AxisView axis_view(const std::vector<int64_t>& dims, int64_t axis) {
  AxisView v;
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    if (d < axis) v.outer *= dims[d];
    else if (d == axis) v.len = dims[d];
    else v.inner *= dims[d];
  }
  return v;
}

// ---- Reduce* ---------------------------------------------------------------------------------

enum class ReduceKind { L1, L2, LogSum, LogSumExp, Max, Mean, Min, Prod, Sum, SumSquare };

// The input walk of a reduction: input dims with size-1 dims dropped and neighbours of the
// same kind (reduced / kept) merged, so reduced and kept dims alternate.
struct ReducePlan {
  std::vector<int64_t> out_dims;     // the output shape (keepdims applied)
  std::vector<int64_t> dims;         // collapsed input dims (at least one)
  std::vector<int64_t> out_strides;  // output element stride per collapsed dim, 0 if reduced
  int64_t out_numel = 1;
  int64_t reduce_count = 1;  // input elements per output element
  int64_t rows = 1;          // product of collapsed dims but the innermost
};

ReducePlan plan_reduce(const std::vector<int64_t>& in_dims, const std::vector<bool>& reduce,
                       bool keepdims) {
  ReducePlan p;
  std::vector<bool> kinds;
  for (size_t d = 0; d < in_dims.size(); ++d) {
    if (reduce[d]) {
      p.reduce_count *= in_dims[d];
      if (keepdims) p.out_dims.push_back(1);
    } else {
      p.out_dims.push_back(in_dims[d]);
      p.out_numel *= in_dims[d];
    }
    if (in_dims[d] == 1) continue;
    if (!kinds.empty() && kinds.back() == reduce[d]) {
      p.dims.back() *= in_dims[d];
    } else {
      p.dims.push_back(in_dims[d]);
      kinds.push_back(reduce[d]);
    }
  }
  if (p.dims.empty()) {
    p.dims.push_back(1);
    kinds.push_back(false);
  }
  p.out_strides.assign(p.dims.size(), 0);
  int64_t stride = 1;
  for (size_t d = p.dims.size(); d-- > 0;) {
    if (!kinds[d]) {
      p.out_strides[d] = stride;
      stride *= p.dims[d];
    }
  }
  for (size_t d = 0; d + 1 < p.dims.size(); ++d) p.rows *= p.dims[d];
  return p;
}

// Calls row(in_offset, out_offset, n, out_stride) for input rows [row_begin, row_end); the input
// row is contiguous, the output advances by out_stride (0: one accumulator for the row).
template <typename RowFn>
void walk_rows(const ReducePlan& p, int64_t row_begin, int64_t row_end, RowFn&& row) {
  const size_t outer = p.dims.size() - 1;
  const int64_t inner = p.dims[outer];
  std::vector<int64_t> idx(outer, 0);
  int64_t out_off = 0;
  int64_t r = row_begin;
  for (size_t d = outer; d-- > 0;) {
    idx[d] = r % p.dims[d];
    r /= p.dims[d];
    out_off += idx[d] * p.out_strides[d];
  }
  for (int64_t rr = row_begin; rr < row_end; ++rr) {
    row(rr * inner, out_off, inner, p.out_strides[outer]);
    for (size_t d = outer; d-- > 0;) {
      out_off += p.out_strides[d];
      if (++idx[d] < p.dims[d]) break;
      out_off -= p.out_strides[d] * p.dims[d];
      idx[d] = 0;
    }
  }
}

// Runs the walk, in parallel over the outermost collapsed dim when it is kept (its slices
// write disjoint outputs).
template <typename RowFn> void walk_all(OpContext& ctx, const ReducePlan& p, RowFn&& row) {
  if (p.dims.size() > 1 && p.out_strides[0] != 0) {
    const int64_t rows_per = p.rows / p.dims[0];
    const int64_t per_slice = rows_per * p.dims.back();
    const int64_t grain = per_slice >= kGrainElements ? 1 : kGrainElements / per_slice;
    parallel_range(ctx, p.dims[0], grain, [&](int64_t b, int64_t e) {
      walk_rows(p, b * rows_per, e * rows_per, row);
    });
  } else {
    walk_rows(p, 0, p.rows, row);
  }
}

template <typename T>
using acc_t = std::conditional_t<is_float_v<T>, double,
                                 std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;

template <ReduceKind K, typename A> A reduce_init() {
  if constexpr (K == ReduceKind::Prod) return A(1);
  else if constexpr (K == ReduceKind::Max || K == ReduceKind::LogSumExp)
    return std::is_floating_point_v<A> ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::lowest();
  else if constexpr (K == ReduceKind::Min)
    return std::is_floating_point_v<A> ? std::numeric_limits<A>::infinity() : std::numeric_limits<A>::max();
  else return A(0);
}

// The value one element contributes (before combining).
template <ReduceKind K, typename A> A reduce_pre(A v) {
  if constexpr (K == ReduceKind::L1) {
    if constexpr (std::is_signed_v<A>) return v < A(0) ? neg_wrap(v) : v;
    else return v;
  } else if constexpr (K == ReduceKind::L2 || K == ReduceKind::SumSquare) {
    return mul_wrap(v, v);
  } else {
    return v;
  }
}

template <ReduceKind K, typename A> A reduce_combine(A acc, A v) {
  if constexpr (K == ReduceKind::Max) return (v > acc || is_nan_value(v)) ? v : acc;
  else if constexpr (K == ReduceKind::Min) return (v < acc || is_nan_value(v)) ? v : acc;
  else if constexpr (K == ReduceKind::Prod) return mul_wrap(acc, v);
  else return add_wrap(acc, v);
}

template <ReduceKind K, typename T, typename A> T reduce_post(A acc, int64_t count) {
  if constexpr (K == ReduceKind::L2) return convert<T>(std::sqrt(static_cast<double>(acc)));
  else if constexpr (K == ReduceKind::LogSum) return convert<T>(std::log(static_cast<double>(acc)));
  else if constexpr (K == ReduceKind::Mean)
    return convert<T>(static_cast<double>(acc) / static_cast<double>(count));
  else return convert<T>(acc);
}

template <ReduceKind K, typename T>
void accumulate(OpContext& ctx, const ReducePlan& p, const T* x, std::vector<acc_t<T>>* acc) {
  using A = acc_t<T>;
  A* pa = acc->data();
  walk_all(ctx, p, [&](int64_t in_off, int64_t out_off, int64_t n, int64_t out_stride) {
    const T* px = x + in_off;
    A* po = pa + out_off;
    if (out_stride == 0) {
      A a = po[0];
      for (int64_t i = 0; i < n; ++i) a = reduce_combine<K>(a, reduce_pre<K>(convert<A>(px[i])));
      po[0] = a;
    } else {
      for (int64_t i = 0; i < n; ++i) po[i] = reduce_combine<K>(po[i], reduce_pre<K>(convert<A>(px[i])));
    }
  });
}

template <ReduceKind K, typename T>
void run_reduce(OpContext& ctx, const ReducePlan& p, const TensorView& in, TensorView* out) {
  using A = acc_t<T>;
  const T* x = in.as<T>();
  T* y = out->as<T>();
  const bool empty = in.numel() == 0;
  if constexpr (K == ReduceKind::LogSumExp) {
    // log(sum(exp(x - m))) + m with m the (finite) max, so large inputs do not overflow.
    std::vector<A> mx(static_cast<size_t>(p.out_numel), reduce_init<ReduceKind::Max, A>());
    if (!empty) accumulate<ReduceKind::Max>(ctx, p, x, &mx);
    std::vector<double> sum(static_cast<size_t>(p.out_numel), 0.0);
    for (auto& m : mx)
      if (!std::isfinite(static_cast<double>(m))) m = A(0);
    double* ps = sum.data();
    const A* pm = mx.data();
    if (!empty) {
      walk_all(ctx, p, [&](int64_t in_off, int64_t out_off, int64_t n, int64_t out_stride) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t o = out_off + i * out_stride;
          ps[o] += std::exp(static_cast<double>(convert<A>(x[in_off + i])) - static_cast<double>(pm[o]));
        }
      });
    }
    for (int64_t o = 0; o < p.out_numel; ++o)
      y[o] = convert<T>(std::log(ps[o]) + static_cast<double>(pm[o]));
  } else {
    std::vector<A> acc(static_cast<size_t>(p.out_numel), reduce_init<K, A>());
    if (!empty) accumulate<K>(ctx, p, x, &acc);
    for (int64_t o = 0; o < p.out_numel; ++o) y[o] = reduce_post<K, T>(acc[o], p.reduce_count);
  }
}

template <ReduceKind K> Status reduce_kernel(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0));
  constexpr unsigned kSet = (K == ReduceKind::Max || K == ReduceKind::Min) ? kAllTypes : kNumericTypes;
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, kSet));
  const TensorView& in = *ctx.input(0);
  const int64_t rank = static_cast<int64_t>(in.dims.size());
  // Axes are an input from opset 18 (13 for ReduceSum), an attribute before.
  const bool axes_input = ctx.opset() >= (K == ReduceKind::Sum ? 13 : 18);
  std::vector<int64_t> axes;
  bool noop_with_empty_axes = false;
  if (axes_input) {
    noop_with_empty_axes = ctx.attrs().get_int("noop_with_empty_axes", 0) != 0;
    const TensorView* t = ctx.num_inputs() > 1 ? ctx.input(1) : nullptr;
    if (t) {
      if (t->dtype != DType::Int64 || t->dims.size() > 1)
        return ctx.error(StatusCode::kInvalidArgument, "axes (input 1) must be a 1-D int64 tensor, got ",
                         dtype_name(t->dtype), " ", dims_string(t->dims));
      read_int_tensor(t, &axes);
    }
  } else {
    axes = ctx.attrs().get_ints("axes");
  }
  const bool keepdims = ctx.attrs().get_int("keepdims", 1) != 0;
  std::vector<bool> reduce(static_cast<size_t>(rank), axes.empty() && !noop_with_empty_axes);
  for (int64_t a : axes) {
    int64_t axis = 0;
    if (!normalize_axis(a, rank, &axis))
      return ctx.error(StatusCode::kInvalidArgument, "axis ", a, " is out of range for rank ", rank);
    if (reduce[axis])
      return ctx.error(StatusCode::kInvalidArgument, "axis ", a, " is listed more than once");
    reduce[axis] = true;
  }
  const ReducePlan plan = plan_reduce(in.dims, reduce, keepdims);
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, in.dtype, plan.out_dims, &out));
  visit_dtype<kSet>(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_reduce<K, T>(ctx, plan, in, out);
  });
  return Status::ok();
}

// ---- ArgMax / ArgMin ---------------------------------------------------------------------------

// NaN ranks above every number (numpy's argmax/argmin pick the first NaN).
template <bool kMax, typename C> bool better(C v, C best) {
  if (is_nan_value(best)) return false;
  if (is_nan_value(v)) return true;
  return kMax ? v > best : v < best;
}

template <bool kMax> Status arg_reduce(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, kNumericTypes));
  const TensorView& in = *ctx.input(0);
  const int64_t rank = static_cast<int64_t>(in.dims.size());
  int64_t axis = 0;
  const int64_t axis_attr = ctx.attrs().get_int("axis", 0);
  if (!normalize_axis(axis_attr, rank, &axis))
    return ctx.error(StatusCode::kInvalidArgument, "axis ", axis_attr, " is out of range for rank ", rank);
  const bool keepdims = ctx.attrs().get_int("keepdims", 1) != 0;
  const bool last = ctx.opset() >= 12 && ctx.attrs().get_int("select_last_index", 0) != 0;
  const AxisView v = axis_view(in.dims, axis);
  if (v.len == 0 && v.outer * v.inner > 0)
    return ctx.error(StatusCode::kInvalidArgument, "axis ", axis_attr, " has size 0");
  std::vector<int64_t> out_dims = in.dims;
  if (keepdims) out_dims[axis] = 1;
  else out_dims.erase(out_dims.begin() + axis);
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Int64, out_dims, &out));
  int64_t* y = out->as<int64_t>();
  visit_dtype<kNumericTypes>(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* x = in.as<T>();
    for (int64_t o = 0; o < v.outer; ++o) {
      for (int64_t i = 0; i < v.inner; ++i) {
        const T* p = x + o * v.len * v.inner + i;
        int64_t best_j = 0;
        C best = C(p[0]);
        for (int64_t j = 1; j < v.len; ++j) {
          const C c = C(p[j * v.inner]);
          if (better<kMax>(c, best) ||
              (last && !better<kMax>(best, c) && (c == best || (is_nan_value(c) && is_nan_value(best))))) {
            best = c;
            best_j = j;
          }
        }
        y[o * v.inner + i] = best_j;
      }
    }
  });
  return Status::ok();
}

// ---- Softmax family ----------------------------------------------------------------------------

enum class SoftmaxKind { Softmax, LogSoftmax, Hardmax };

template <SoftmaxKind K> Status softmax_kernel(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, kFloatTypes));
  const TensorView& in = *ctx.input(0);
  const int64_t rank = static_cast<int64_t>(in.dims.size());
  const bool legacy = ctx.opset() < 13;
  const int64_t axis_attr = ctx.attrs().get_int("axis", legacy ? 1 : -1);
  int64_t axis = 0;
  if (!normalize_axis(axis_attr, rank, &axis) && !(legacy && axis_attr == rank))
    return ctx.error(StatusCode::kInvalidArgument, "axis ", axis_attr, " is out of range for rank ", rank);
  if (legacy && axis_attr == rank) axis = rank;
  AxisView v;
  if (legacy) {  // coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])]
    for (int64_t d = 0; d < rank; ++d) (d < axis ? v.outer : v.len) *= in.dims[d];
  } else {
    v = axis_view(in.dims, axis);
  }
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, in.dtype, in.dims, &out));
  if (in.numel() == 0) return Status::ok();
  visit_dtype<kFloatTypes>(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* x = in.as<T>();
    T* y = out->as<T>();
    const int64_t inner = v.inner, len = v.len;
    parallel_range(ctx, v.outer, std::max<int64_t>(1, kGrainElements / (len * inner)),
                   [&](int64_t ob, int64_t oe) {
      std::vector<C> best(static_cast<size_t>(inner));
      std::vector<int64_t> best_j(static_cast<size_t>(inner));
      std::vector<double> sum(static_cast<size_t>(inner));
      const bool float_rows = std::is_same_v<T, float> && inner == 1;
      std::vector<C> e(K == SoftmaxKind::Softmax && !float_rows ? static_cast<size_t>(len * inner) : 0);
      std::vector<float> e_float(K == SoftmaxKind::LogSoftmax && float_rows ? static_cast<size_t>(len) : 0);
      for (int64_t o = ob; o < oe; ++o) {
        const T* px = x + o * len * inner;
        T* py = y + o * len * inner;
        for (int64_t i = 0; i < inner; ++i) {
          best[i] = C(px[i]);
          best_j[i] = 0;
          sum[i] = 0;
        }
        if constexpr (K == SoftmaxKind::Hardmax) {  // first maximum wins; NaN counts as largest
          for (int64_t j = 1; j < len; ++j)
            for (int64_t i = 0; i < inner; ++i) {
              const C c = C(px[j * inner + i]);
              if (c > best[i] || (is_nan_value(c) && !is_nan_value(best[i]))) {
                best[i] = c;
                best_j[i] = j;
              }
            }
          for (int64_t j = 0; j < len; ++j)
            for (int64_t i = 0; i < inner; ++i) py[j * inner + i] = convert<T>(C(best_j[i] == j ? 1 : 0));
        } else if (float_rows) {
          // The common case, float32 over the last axis: in float, vectorised
          // (runtime/cpu/vec_math.h: exp, and a sum in a fixed order on every path, with a
          // relative error within about len/16 float roundings, so 2e-6 at len 768).
          const float* fx = reinterpret_cast<const float*>(px);
          float* fy = reinterpret_cast<float*>(py);
          const float m = vm::max(fx, len);  // a NaN anywhere reaches the sum
          // The next row's loads start while this row's exp runs (its max pass would otherwise
          // wait on memory with the vector units idle).
          if (o + 1 < oe)
            for (int64_t j = 0; j < len; j += 16) __builtin_prefetch(fx + len + j);
          if constexpr (K == SoftmaxKind::Softmax) {
            const float inv = 1.0f / vm::exp_sub_sum(fx, m, fy, len);
            vm::scale(fy, inv, fy, len);
          } else {
            float* fe = e_float.data();
            const float log_total = std::log(vm::exp_sub_sum(fx, m, fe, len));
            for (int64_t j = 0; j < len; ++j) fy[j] = (fx[j] - m) - log_total;
          }
        } else if (inner == 1) {  // other float types, last axis: scalar accumulators
          C m = best[0];
          for (int64_t j = 1; j < len; ++j) m = std::max(m, C(px[j]));
          double total = 0;
          for (int64_t j = 0; j < len; ++j) {
            const C ej = std::exp(C(px[j]) - m);
            total += static_cast<double>(ej);
            if constexpr (K == SoftmaxKind::Softmax) e[j] = ej;
          }
          if constexpr (K == SoftmaxKind::Softmax) {
            const C inv = static_cast<C>(1.0 / total);
            for (int64_t j = 0; j < len; ++j) py[j] = convert<T>(e[j] * inv);
          } else {
            const C log_total = static_cast<C>(std::log(total));
            for (int64_t j = 0; j < len; ++j) py[j] = convert<T>((C(px[j]) - m) - log_total);
          }
        } else {
          // A NaN anywhere makes the sum NaN, so the plain max needs no NaN case.
          for (int64_t j = 1; j < len; ++j)
            for (int64_t i = 0; i < inner; ++i) best[i] = std::max(best[i], C(px[j * inner + i]));
          for (int64_t j = 0; j < len; ++j)
            for (int64_t i = 0; i < inner; ++i) {
              const C ej = std::exp(C(px[j * inner + i]) - best[i]);
              sum[i] += static_cast<double>(ej);
              if constexpr (K == SoftmaxKind::Softmax) e[j * inner + i] = ej;
            }
          for (int64_t i = 0; i < inner; ++i)
            sum[i] = K == SoftmaxKind::Softmax ? 1.0 / sum[i] : std::log(sum[i]);
          for (int64_t j = 0; j < len; ++j)
            for (int64_t i = 0; i < inner; ++i) {
              if constexpr (K == SoftmaxKind::Softmax) {
                py[j * inner + i] = convert<T>(static_cast<C>(static_cast<double>(e[j * inner + i]) * sum[i]));
              } else {
                py[j * inner + i] = convert<T>(static_cast<C>(
                    static_cast<double>(C(px[j * inner + i]) - best[i]) - sum[i]));
              }
            }
        }
      }
    });
  });
  return Status::ok();
}

}  // namespace

Status kernel_ReduceL1(OpContext& ctx) { return reduce_kernel<ReduceKind::L1>(ctx); }
Status kernel_ReduceL2(OpContext& ctx) { return reduce_kernel<ReduceKind::L2>(ctx); }
Status kernel_ReduceLogSum(OpContext& ctx) { return reduce_kernel<ReduceKind::LogSum>(ctx); }
Status kernel_ReduceLogSumExp(OpContext& ctx) { return reduce_kernel<ReduceKind::LogSumExp>(ctx); }
Status kernel_ReduceMax(OpContext& ctx) { return reduce_kernel<ReduceKind::Max>(ctx); }
Status kernel_ReduceMean(OpContext& ctx) { return reduce_kernel<ReduceKind::Mean>(ctx); }
Status kernel_ReduceMin(OpContext& ctx) { return reduce_kernel<ReduceKind::Min>(ctx); }
Status kernel_ReduceProd(OpContext& ctx) { return reduce_kernel<ReduceKind::Prod>(ctx); }
Status kernel_ReduceSum(OpContext& ctx) { return reduce_kernel<ReduceKind::Sum>(ctx); }
Status kernel_ReduceSumSquare(OpContext& ctx) { return reduce_kernel<ReduceKind::SumSquare>(ctx); }
Status kernel_ArgMax(OpContext& ctx) { return arg_reduce<true>(ctx); }
Status kernel_ArgMin(OpContext& ctx) { return arg_reduce<false>(ctx); }
Status kernel_Softmax(OpContext& ctx) { return softmax_kernel<SoftmaxKind::Softmax>(ctx); }
Status kernel_LogSoftmax(OpContext& ctx) { return softmax_kernel<SoftmaxKind::LogSoftmax>(ctx); }
Status kernel_Hardmax(OpContext& ctx) { return softmax_kernel<SoftmaxKind::Hardmax>(ctx); }

namespace {

// CumSum and CumProd(x, axis): running sums (products) along axis; `exclusive` shifts by one
// (starting from 0, or 1), `reverse` runs backwards. Integers wrap.
template <bool kProduct>
Status cumulative(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 1));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, kFloatTypes | kSignedInts | kUnsignedInts));
  const TensorView& in = *ctx.input(0);
  const TensorView* axis_t = ctx.input(1);
  std::vector<int64_t> axis_v;
  if ((axis_t->dtype != DType::Int32 && axis_t->dtype != DType::Int64) || axis_t->numel() != 1 ||
      axis_t->dims.size() > 1 || !read_int_tensor(axis_t, &axis_v))
    return ctx.error(StatusCode::kInvalidArgument, "axis (input 1) must be an int32/int64 scalar");
  const int64_t rank = static_cast<int64_t>(in.dims.size());
  int64_t axis = 0;
  if (!normalize_axis(axis_v[0], rank, &axis))
    return ctx.error(StatusCode::kInvalidArgument, "axis ", axis_v[0], " is out of range for rank ", rank);
  const bool exclusive = ctx.attrs().get_int("exclusive", 0) != 0;
  const bool reverse = ctx.attrs().get_int("reverse", 0) != 0;
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, in.dtype, in.dims, &out));
  const AxisView v = axis_view(in.dims, axis);
  visit_dtype<kNumericTypes>(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* x = in.as<T>();
    T* y = out->as<T>();
    const int64_t slice = v.len * v.inner;
    parallel_range(ctx, v.outer, slice >= kGrainElements ? 1 : kGrainElements / std::max<int64_t>(1, slice),
                   [&](int64_t ob, int64_t oe) {
      std::vector<C> acc(static_cast<size_t>(v.inner));
      for (int64_t o = ob; o < oe; ++o) {
        std::fill(acc.begin(), acc.end(), C(kProduct ? 1 : 0));
        for (int64_t jj = 0; jj < v.len; ++jj) {
          const int64_t j = reverse ? v.len - 1 - jj : jj;
          const int64_t base = (o * v.len + j) * v.inner;
          for (int64_t i = 0; i < v.inner; ++i) {
            const C c = C(x[base + i]);
            const auto step = [](C a, C b) { return kProduct ? mul_wrap(a, b) : add_wrap(a, b); };
            if (exclusive) {
              y[base + i] = convert<T>(acc[i]);
              acc[i] = step(acc[i], c);
            } else {
              acc[i] = step(acc[i], c);
              y[base + i] = convert<T>(acc[i]);
            }
          }
        }
      }
    });
  });
  return Status::ok();
}

}  // namespace

Status kernel_CumSum(OpContext& ctx) { return cumulative<false>(ctx); }
Status kernel_CumProd(OpContext& ctx) { return cumulative<true>(ctx); }

// Trilu(x, k): keeps the upper (j - i >= k) or lower (j - i <= k) triangle of each matrix.
Status kernel_Trilu(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, kAllTypes));
  const TensorView& in = *ctx.input(0);
  if (in.dims.size() < 2)
    return ctx.error(StatusCode::kInvalidArgument, "input must have rank >= 2, got ", dims_string(in.dims));
  int64_t k = 0;
  if (ctx.num_inputs() > 1 && ctx.input(1)) {
    std::vector<int64_t> kv;
    if (ctx.input(1)->dtype != DType::Int64 || ctx.input(1)->numel() != 1 || !read_int_tensor(ctx.input(1), &kv))
      return ctx.error(StatusCode::kInvalidArgument, "k (input 1) must be an int64 scalar");
    k = kv[0];
  }
  const bool upper = ctx.attrs().get_int("upper", 1) != 0;
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, in.dtype, in.dims, &out));
  const int64_t rows = in.dims[in.dims.size() - 2], cols = in.dims.back();
  const int64_t mats = rows * cols == 0 ? 0 : in.numel() / (rows * cols);
  // k is user data: clamp it to where the answer stops changing so j - i vs k cannot overflow.
  const int64_t kc = std::clamp<int64_t>(k, -rows - 1, cols + 1);
  visit_dtype(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = in.as<T>();
    T* y = out->as<T>();
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t e = (m * rows + i) * cols + j;
          const bool keep = upper ? j - i >= kc : j - i <= kc;
          y[e] = keep ? x[e] : T(0);
        }
  });
  return Status::ok();
}

// MeanVarianceNormalization: (x - mean) / (sqrt(E[x^2] - mean^2) + 1e-9) over `axes`.
Status kernel_MeanVarianceNormalization(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, kFloatTypes));
  const TensorView& in = *ctx.input(0);
  const int64_t rank = static_cast<int64_t>(in.dims.size());
  std::vector<int64_t> axes = ctx.attrs().has("axes") ? ctx.attrs().get_ints("axes")
                                                      : std::vector<int64_t>{0, 2, 3};
  std::vector<bool> reduce(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    int64_t axis = 0;
    if (!normalize_axis(a, rank, &axis))
      return ctx.error(StatusCode::kInvalidArgument, "axis ", a, " is out of range for rank ", rank);
    if (reduce[axis]) return ctx.error(StatusCode::kInvalidArgument, "axis ", a, " is listed more than once");
    reduce[axis] = true;
  }
  const ReducePlan plan = plan_reduce(in.dims, reduce, true);
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, in.dtype, in.dims, &out));
  if (in.numel() == 0) return Status::ok();
  visit_dtype<kFloatTypes>(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = in.as<T>();
    T* y = out->as<T>();
    std::vector<double> sum(static_cast<size_t>(plan.out_numel), 0.0), sq(sum);
    walk_rows(plan, 0, plan.rows, [&](int64_t in_off, int64_t out_off, int64_t n, int64_t st) {
      for (int64_t i = 0; i < n; ++i) {
        const double v = convert<double>(x[in_off + i]);
        sum[out_off + i * st] += v;
        sq[out_off + i * st] += v * v;
      }
    });
    const double count = static_cast<double>(plan.reduce_count);
    for (size_t o = 0; o < sum.size(); ++o) {
      const double mean = sum[o] / count;
      sum[o] = mean;
      sq[o] = std::sqrt(std::max(0.0, sq[o] / count - mean * mean)) + 1e-9;
    }
    walk_rows(plan, 0, plan.rows, [&](int64_t in_off, int64_t out_off, int64_t n, int64_t st) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t o = out_off + i * st;
        y[in_off + i] = convert<T>((convert<double>(x[in_off + i]) - sum[o]) / sq[o]);
      }
    });
  });
  return Status::ok();
}

// LRN over channels (dim 1): y = x / (bias + alpha / size * sum of x^2 over the window)^beta.
Status kernel_LRN(OpContext& ctx) {
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0));
  CUVIL_RETURN_IF_ERROR(require_dtype(ctx, 0, kFloatTypes));
  const TensorView& in = *ctx.input(0);
  if (in.dims.size() < 2)
    return ctx.error(StatusCode::kInvalidArgument, "input must have rank >= 2, got ", dims_string(in.dims));
  const int64_t size = ctx.attrs().get_int("size", 0);
  if (size <= 0) return ctx.error(StatusCode::kInvalidArgument, "size must be positive, got ", size);
  const double alpha = ctx.attrs().get_float("alpha", 1e-4f);
  const double beta = ctx.attrs().get_float("beta", 0.75f);
  const double bias = ctx.attrs().get_float("bias", 1.0f);
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, in.dtype, in.dims, &out));
  const AxisView v = axis_view(in.dims, 1);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;  // floor / ceil of (size-1)/2
  visit_dtype<kFloatTypes>(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = in.as<T>();
    T* y = out->as<T>();
    for (int64_t n = 0; n < v.outer; ++n)
      for (int64_t c = 0; c < v.len; ++c) {
        const int64_t lo = std::max<int64_t>(0, c - before);
        const int64_t hi = std::min<int64_t>(v.len - 1, c + std::min(after, v.len));
        for (int64_t i = 0; i < v.inner; ++i) {
          double s = 0;
          for (int64_t cc = lo; cc <= hi; ++cc) {
            const double e = convert<double>(x[(n * v.len + cc) * v.inner + i]);
            s += e * e;
          }
          const int64_t e = (n * v.len + c) * v.inner + i;
          y[e] = convert<T>(convert<double>(x[e]) / std::pow(bias + alpha / static_cast<double>(size) * s, beta));
        }
      }
  });
  return Status::ok();
}

}  // namespace cuvil::rt::ops
