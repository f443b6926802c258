// Whole-tensor reference kernels of cuvil's row-wise and pointwise fused ops (ir/fused_ops.h):
// RMSNorm, SiLU, SwiGLU and Rotary. They define what the passes' rewrites must compute (the
// canonicalize tests compare them with the unfused ONNX subgraphs they replace) and run where
// no tile form exists: RMSNorm and Rotary always, SiLU and SwiGLU when they are not fused into
// a tile kernel (codegen/lower.cpp). Float32 only: the passes rewrite only float32 idioms, and
// a hand-written IR file with another dtype gets an error naming the node. SiLU and SwiGLU
// call runtime/cpu/vec_math.h, as kernel_Sigmoid and the tile interpreter do, so a rewritten
// graph differs from the unfused one only by the rounding of the final products, and a fused
// tile kernel equals this one bit for bit.
#include <array>
#include <cmath>

#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/vec_math.h"

namespace cuvil::rt::ops {
namespace {

// Input i, present, float32 and with data.
Status float_input(OpContext& ctx, size_t i, const char* role, const TensorView** out) {
  CUVIL_RETURN_IF_ERROR(require_input(ctx, i, out));
  if ((*out)->dtype != DType::Float)
    return ctx.error(StatusCode::kUnsupported, "input ", role, " is ", dtype_name((*out)->dtype),
                     "; the CPU kernel takes float32 only");
  return Status::ok();
}

// Reads operands broadcast (numpy rules) to `out_dims` row by row: a row is the last axis.
// row_offsets(r) gives each operand's element offset of row r; inner_stride[k] is its stride
// along the row (0 when broadcast).
template <size_t N> struct RowBroadcast {
  std::vector<int64_t> dims;
  std::array<std::vector<int64_t>, N> strides;
  std::array<int64_t, N> inner_stride{};
  int64_t rows = 1, cols = 1;

  RowBroadcast(const std::vector<int64_t>& out_dims, const std::array<const std::vector<int64_t>*, N>& ins)
      : dims(out_dims) {
    cols = dims.empty() ? 1 : dims.back();
    rows = dims.empty() ? 1 : product(dims, 0, dims.size() - 1);
    for (size_t k = 0; k < N; ++k) {
      strides[k] = broadcast_strides(*ins[k], dims);
      inner_stride[k] = dims.empty() ? 0 : strides[k].back();
    }
  }
  std::array<int64_t, N> row_offsets(int64_t row) const {
    std::array<int64_t, N> off{};
    for (size_t d = dims.size() - (dims.empty() ? 0 : 1); d-- > 0;) {
      const int64_t idx = row % dims[d];
      row /= dims[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx * strides[k][d];
    }
    return off;
  }
};

// `operand` broadcasts to `target` without changing it (a unidirectional broadcast).
bool broadcasts_onto(const std::vector<int64_t>& operand, const std::vector<int64_t>& target) {
  std::vector<int64_t> b;
  return operand.size() <= target.size() && broadcast_shape(operand, target, &b) && b == target;
}

}  // namespace

Status kernel_RMSNorm(OpContext& ctx) {
  const TensorView *x = nullptr, *scale = nullptr;
  CUVIL_RETURN_IF_ERROR(float_input(ctx, 0, "X", &x));
  CUVIL_RETURN_IF_ERROR(float_input(ctx, 1, "scale", &scale));
  const int64_t rank = static_cast<int64_t>(x->dims.size());
  int64_t axis = 0;
  if (!normalize_axis(ctx.attrs().get_int("axis", -1), rank, &axis))
    return ctx.error(StatusCode::kInvalidArgument, "axis ", ctx.attrs().get_int("axis", -1),
                     " is out of range for rank ", rank);
  const float eps = ctx.attrs().get_float("epsilon", 1e-5f);
  if (!(eps >= 0)) return ctx.error(StatusCode::kInvalidArgument, "epsilon ", eps, " is negative");
  const std::vector<int64_t> norm_dims(x->dims.begin() + axis, x->dims.end());
  if (!broadcasts_onto(scale->dims, norm_dims))
    return ctx.error(StatusCode::kInvalidArgument, "scale ", dims_string(scale->dims),
                     " does not broadcast to the normalised dims ", dims_string(norm_dims));
  const int64_t outer = product(x->dims, 0, static_cast<size_t>(axis)), inner = product(norm_dims);
  // The scale expanded to one row, so the inner loop reads it contiguously.
  std::vector<float> s(static_cast<size_t>(inner));
  {
    const std::vector<int64_t> st = broadcast_strides(scale->dims, norm_dims);
    std::vector<int64_t> idx(norm_dims.size(), 0);
    for (int64_t i = 0; i < inner; ++i) {
      int64_t off = 0;
      for (size_t d = 0; d < norm_dims.size(); ++d) off += idx[d] * st[d];
      s[static_cast<size_t>(i)] = scale->as<float>()[off];
      for (size_t d = norm_dims.size(); d-- > 0;) {
        if (++idx[d] < norm_dims[d]) break;
        idx[d] = 0;
      }
    }
  }
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Float, x->dims, &y));
  const float* xp = x->as<float>();
  float* yp = y->as<float>();
  parallel_range(ctx, outer, 1, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const float* xs = xp + o * inner;
      float* ys = yp + o * inner;
      // One pass for the sum of squares; a double accumulator keeps long rows as exact as
      // the unfused ReduceMean.
      double sum_sq = 0;
      for (int64_t i = 0; i < inner; ++i) sum_sq += static_cast<double>(xs[i]) * xs[i];
      const float mean_sq = static_cast<float>(sum_sq / static_cast<double>(std::max<int64_t>(inner, 1)));
      const float inv = 1.f / std::sqrt(mean_sq + eps);
      for (int64_t i = 0; i < inner; ++i) ys[i] = xs[i] * inv * s[static_cast<size_t>(i)];
    }
  });
  return Status::ok();
}

Status kernel_SiLU(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(float_input(ctx, 0, "X", &x));
  const float alpha = ctx.attrs().get_float("alpha", 1.f);
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Float, x->dims, &y));
  const float* xp = x->as<float>();
  float* yp = y->as<float>();
  parallel_range(ctx, x->numel(), 4096, [&](int64_t begin, int64_t end) {
    vm::silu(xp + begin, yp + begin, end - begin, alpha);
  });
  return Status::ok();
}

Status kernel_SwiGLU(OpContext& ctx) {
  const TensorView *g = nullptr, *u = nullptr;
  CUVIL_RETURN_IF_ERROR(float_input(ctx, 0, "G", &g));
  CUVIL_RETURN_IF_ERROR(float_input(ctx, 1, "U", &u));
  std::vector<int64_t> dims;
  if (!broadcast_shape(g->dims, u->dims, &dims))
    return ctx.error(StatusCode::kInvalidArgument, "G ", dims_string(g->dims), " and U ", dims_string(u->dims),
                     " do not broadcast");
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Float, dims, &y));
  if (y->numel() == 0) return Status::ok();
  const RowBroadcast<2> plan(dims, {&g->dims, &u->dims});
  const float *gp = g->as<float>(), *up = u->as<float>();
  float* yp = y->as<float>();
  parallel_range(ctx, plan.rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const auto off = plan.row_offsets(r);
      const float *gr = gp + off[0], *ur = up + off[1];
      float* yr = yp + r * plan.cols;
      const int64_t sg = plan.inner_stride[0], su = plan.inner_stride[1];
      if (sg == 1 && su == 1) vm::swiglu(gr, ur, yr, plan.cols);
      else
        for (int64_t c = 0; c < plan.cols; ++c) yr[c] = vm::swiglu1(gr[c * sg], ur[c * su]);
    }
  });
  return Status::ok();
}

Status kernel_Rotary(OpContext& ctx) {
  const TensorView *x = nullptr, *cos = nullptr, *sin = nullptr;
  CUVIL_RETURN_IF_ERROR(float_input(ctx, 0, "X", &x));
  CUVIL_RETURN_IF_ERROR(float_input(ctx, 1, "cos", &cos));
  CUVIL_RETURN_IF_ERROR(float_input(ctx, 2, "sin", &sin));
  const int64_t interleaved = ctx.attrs().get_int("interleaved", 0);
  if (interleaved != 0 && interleaved != 1)
    return ctx.error(StatusCode::kInvalidArgument, "interleaved is ", interleaved, ", must be 0 or 1");
  if (x->dims.empty()) return ctx.error(StatusCode::kInvalidArgument, "X is a scalar; Rotary needs rank >= 1");
  const int64_t d = x->dims.back();
  if (d % 2 != 0)
    return ctx.error(StatusCode::kInvalidArgument, "X ", dims_string(x->dims), " has an odd last dim; Rotary rotates pairs");
  for (const TensorView* t : {cos, sin})
    if (!broadcasts_onto(t->dims, x->dims))
      return ctx.error(StatusCode::kInvalidArgument, t == cos ? "cos " : "sin ", dims_string(t->dims),
                       " does not broadcast to X ", dims_string(x->dims));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Float, x->dims, &y));
  if (y->numel() == 0) return Status::ok();
  const RowBroadcast<2> plan(x->dims, {&cos->dims, &sin->dims});
  const float *xp = x->as<float>(), *cp = cos->as<float>(), *sp = sin->as<float>();
  float* yp = y->as<float>();
  const int64_t half = d / 2;
  parallel_range(ctx, plan.rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const auto off = plan.row_offsets(r);
      const float *xr = xp + r * d, *cr = cp + off[0], *sr = sp + off[1];
      float* yr = yp + r * d;
      const int64_t sc = plan.inner_stride[0], ss = plan.inner_stride[1];
      for (int64_t c = 0; c < d; ++c) {
        float rotated;
        if (interleaved) rotated = c % 2 == 0 ? -xr[c + 1] : xr[c - 1];
        else rotated = c < half ? -xr[c + half] : xr[c - half];
        yr[c] = xr[c] * cr[c * sc] + rotated * sr[c * ss];
      }
    }
  });
  return Status::ok();
}

}  // namespace cuvil::rt::ops
