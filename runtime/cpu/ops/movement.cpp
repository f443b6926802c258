// Whole-tensor kernels for the data-movement ops: Transpose, Expand, Tile, Slice, DepthToSpace,
// SpaceToDepth, ReverseSequence, Gather, GatherElements, GatherND, Scatter, ScatterElements,
// ScatterND, Pad, CenterCropPad, Resize and Upsample.
//
// Most of them are one of two shapes of loop, written once here for raw elements of any dtype:
// a strided copy (every output element reads input[offset + sum(index_k * stride_k)], strides
// may be 0 or negative: Transpose, Expand, Tile, Slice, DepthToSpace, SpaceToDepth) and a
// per-axis map copy (each output coordinate maps to an input coordinate or to a fill value:
// Pad, CenterCropPad, nearest Resize). Data-dependent indices (Gather*, Scatter*) are all
// validated before the first write; an index outside [-n, n) is a kRuntime error naming the
// index and its position. Linear and cubic Resize compute in double and follow the ONNX
// reference implementation (onnx/backend/test/case/node/resize.py).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cpu/ops/kernel_util.h"

namespace cuvil::rt::ops {
namespace {

// The multi-index of flat element `flat` of a tensor with these dims, as "[i,j,k]".
std::string position_str(const std::vector<int64_t>& dims, int64_t flat) {
  std::vector<int64_t> idx(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d] > 0) {
      idx[d] = flat % dims[d];
      flat /= dims[d];
    }
  }
  return dims_string(idx);
}

Status get_axis(const OpContext& ctx, int64_t fallback, int64_t rank, int64_t* axis) {
  const int64_t a = ctx.attrs().get_int("axis", fallback);
  if (!normalize_axis(a, rank, axis))
    return ctx.error(StatusCode::kInvalidArgument, "axis ", a, " is out of range for rank ", rank);
  return Status::ok();
}

Status read_indices(const OpContext& ctx, const TensorView* t, const char* what,
                    std::vector<int64_t>* out) {
  if (!read_int_tensor(t, out))
    return ctx.error(StatusCode::kInvalidArgument, "input '", what, "' has dtype ",
                     dtype_name(t->dtype), "; expected int32 or int64");
  return Status::ok();
}

// Maps a data-dependent index into [0, n): negative values wrap once, as ONNX specifies.
Status wrap_index(const OpContext& ctx, int64_t v, int64_t n,
                  const std::vector<int64_t>& index_dims, int64_t flat, int64_t* out) {
  if (v < -n || v >= n)
    return ctx.error(StatusCode::kRuntime, "index ", v, " out of range [", -n, ", ", n - 1,
                     "] at position ", position_str(index_dims, flat));
  *out = v < 0 ? v + n : v;
  return Status::ok();
}

// ---- raw element copies ----------------------------------------------------------------------

// dst[di + k] = src[si + k * stride] for k < n, with a fixed element size N bytes.
template <size_t N>
void gather_row(uint8_t* dst, int64_t di, const uint8_t* src, int64_t si, int64_t stride,
                int64_t n) {
  uint8_t* d = dst + di * static_cast<int64_t>(N);
  for (int64_t k = 0; k < n; ++k, si += stride)
    std::memcpy(d + k * static_cast<int64_t>(N), src + si * static_cast<int64_t>(N), N);
}

void copy_strided_row(void* dst, int64_t di, const void* src, int64_t si, int64_t stride, int64_t n,
                      int bits) {
  if (stride == 1) return copy_elems(dst, di, src, si, n, bits);
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  switch (bits) {
    case 8:
      return gather_row<1>(d, di, s, si, stride, n);
    case 16:
      return gather_row<2>(d, di, s, si, stride, n);
    case 32:
      return gather_row<4>(d, di, s, si, stride, n);
    case 64:
      return gather_row<8>(d, di, s, si, stride, n);
    case 128:
      return gather_row<16>(d, di, s, si, stride, n);
    default:
      for (int64_t k = 0; k < n; ++k) copy_elems(dst, di + k, src, si + k * stride, 1, bits);
  }
}

// Writes the output (dense, row-major, `dims`) with out[i_0..i_r] = src[offset + sum
// i_k*strides_k]. Strides are in elements and may be 0 (broadcast) or negative (reversed slices).
void strided_copy(void* dst, const void* src, const std::vector<int64_t>& dims,
                  const std::vector<int64_t>& strides, int64_t offset, int bits) {
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  if (total == 0) return;
  // Drop unit dims and merge dims that are contiguous in the source.
  std::vector<int64_t> d2, s2;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 1) continue;
    if (!d2.empty() && s2.back() == strides[k] * dims[k]) {
      d2.back() *= dims[k];
      s2.back() = strides[k];
    } else {
      d2.push_back(dims[k]);
      s2.push_back(strides[k]);
    }
  }
  if (d2.empty()) return copy_elems(dst, 0, src, offset, 1, bits);
  const int64_t inner = d2.back(), inner_stride = s2.back();
  d2.pop_back();
  s2.pop_back();
  std::vector<int64_t> idx(d2.size(), 0);
  int64_t pos = offset;
  for (int64_t row = 0, rows = total / inner; row < rows; ++row) {
    copy_strided_row(dst, row * inner, src, pos, inner_stride, inner, bits);
    for (size_t k = d2.size(); k-- > 0;) {  // odometer step
      pos += s2[k];
      if (++idx[k] < d2[k]) break;
      pos -= s2[k] * d2[k];
      idx[k] = 0;
    }
  }
}

// Writes the output (`out_dims`) where output coordinate c along axis k reads input coordinate
// maps[k][c], or the fill element when that is -1.
void map_copy(void* dst, const TensorView& in, const std::vector<int64_t>& out_dims,
              const std::vector<std::vector<int64_t>>& maps, const void* fill, int bits) {
  int64_t total = 1;
  for (int64_t d : out_dims) total *= d;
  if (total == 0) return;
  const size_t rank = out_dims.size();
  if (rank == 0) return copy_elems(dst, 0, in.data, 0, 1, bits);
  const std::vector<int64_t> strides = row_major_strides(in.dims);
  // Runs of the last axis: consecutive output coordinates reading consecutive input ones.
  struct Run {
    int64_t out_start, length, src;
  };
  std::vector<Run> runs;
  const std::vector<int64_t>& last = maps[rank - 1];
  for (int64_t c = 0; c < out_dims[rank - 1]; ++c) {
    const int64_t s = last[static_cast<size_t>(c)];
    if (!runs.empty()) {
      Run& r = runs.back();
      const bool extends = (s < 0 && r.src < 0) || (s >= 0 && r.src >= 0 && s == r.src + r.length);
      if (extends) {
        ++r.length;
        continue;
      }
    }
    runs.push_back({c, 1, s});
  }
  const int64_t inner = out_dims[rank - 1];
  std::vector<int64_t> idx(rank - 1, 0);
  for (int64_t row = 0, rows = total / inner; row < rows; ++row) {
    int64_t base = 0;
    bool filled = false;
    for (size_t k = 0; k + 1 < rank; ++k) {
      const int64_t s = maps[k][static_cast<size_t>(idx[k])];
      if (s < 0) filled = true;
      base += s * strides[k];
    }
    if (filled) {
      fill_elems(dst, row * inner, inner, fill, bits);
    } else {
      for (const Run& r : runs) {
        if (r.src < 0)
          fill_elems(dst, row * inner + r.out_start, r.length, fill, bits);
        else
          copy_elems(dst, row * inner + r.out_start, in.data, base + r.src, r.length, bits);
      }
    }
    for (size_t k = rank - 1; k-- > 0;) {
      if (++idx[k] < out_dims[k]) break;
      idx[k] = 0;
    }
  }
}

// An element of dtype t holding v (converted), for fill values given as attributes. Zero is
// all-zero bits in every dtype, so it works for dtypes visit_dtype does not know.
bool make_fill(DType t, double v, std::vector<uint8_t>* out) {
  out->assign(16, 0);
  if (v == 0.0) return true;
  return visit_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T e = convert<T>(static_cast<compute_t<T>>(v));
    std::memcpy(out->data(), &e, sizeof(T));
  });
}

// ---- reductions for Scatter* -----------------------------------------------------------------

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

Status read_reduction(const OpContext& ctx, Reduction* r) {
  const std::string s = ctx.attrs().get_string("reduction", "none");
  if (s == "none")
    *r = Reduction::kNone;
  else if (s == "add")
    *r = Reduction::kAdd;
  else if (s == "mul")
    *r = Reduction::kMul;
  else if (s == "max")
    *r = Reduction::kMax;
  else if (s == "min")
    *r = Reduction::kMin;
  else
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'reduction' is '", s, "'");
  return Status::ok();
}

// out[targets[i] + k] (op)= updates[i * slice + k] for every i and k < slice. Targets are
// already validated.
Status scatter_apply(const OpContext& ctx, TensorView* out, const TensorView& updates,
                     const std::vector<int64_t>& targets, int64_t slice, Reduction r) {
  const int bits = dtype_bits(out->dtype);
  const int64_t n = static_cast<int64_t>(targets.size());
  if (r == Reduction::kNone) {
    for (int64_t i = 0; i < n; ++i)
      copy_elems(out->data, targets[static_cast<size_t>(i)], updates.data, i * slice, slice, bits);
    return Status::ok();
  }
  const bool known = visit_dtype(out->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    T* o = out->as<T>();
    const T* u = updates.as<T>();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < slice; ++k) {
        T& dst = o[targets[static_cast<size_t>(i)] + k];
        const C a = convert<C>(dst), b = convert<C>(u[i * slice + k]);
        switch (r) {
          case Reduction::kAdd:
            dst = convert<T>(static_cast<C>(a + b));
            break;
          case Reduction::kMul:
            dst = convert<T>(static_cast<C>(a * b));
            break;
          case Reduction::kMax:
            dst = convert<T>(std::max(a, b));
            break;
          case Reduction::kMin:
            dst = convert<T>(std::min(a, b));
            break;
          case Reduction::kNone:
            break;
        }
      }
    }
  });
  if (!known)
    return ctx.error(StatusCode::kUnsupported, "reduction on dtype ", dtype_name(out->dtype),
                     " is not supported");
  return Status::ok();
}

Status copy_input_to_output(OpContext& ctx, const TensorView& x, TensorView** out) {
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x.dtype, "input 0"));
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x.dtype, x.dims, out));
  if (x.bytes() > 0) std::memcpy((*out)->data, x.data, x.bytes());
  return Status::ok();
}

// A permutation that, once output axes which stay neighbours are merged and axes of one
// element dropped, is (batch, a, b) -> (batch, b, a): every batch is an [a x b] matrix
// transposed (NCHW <-> NHWC is one: [C, H*W] <-> [H*W, C]). False for anything else.
bool batched_matrix_transpose(const std::vector<int64_t>& dims, const std::vector<int64_t>& perm, int64_t* batch,
                              int64_t* a, int64_t* b) {
  // Runs of output axes whose input axes are consecutive, without the axes of one element.
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first input axis, extent), in output order
  int64_t last = -2;
  for (int64_t ax : perm) {
    const int64_t d = dims[static_cast<size_t>(ax)];
    if (d == 1) continue;
    if (!runs.empty() && ax == last + 1) runs.back().second *= d;
    else runs.push_back({ax, d});
    last = ax;
  }
  // A run's place in the input is its first axis: two runs swapped, or a first run followed
  // by two swapped ones.
  if (runs.size() == 2 && runs[1].first < runs[0].first) {
    *batch = 1;
  } else if (runs.size() == 3 && runs[0].first < runs[2].first && runs[2].first < runs[1].first) {
    *batch = runs[0].second;
  } else {
    return false;
  }
  *a = runs[runs.size() - 1].second;  // the input's rows
  *b = runs[runs.size() - 2].second;  // its columns
  return true;
}

// y[batch][b][a] = x[batch][a][b] for elements of E bytes, in 32 x 32 blocks so that both
// sides move whole cache lines; the batches' block rows are split among the workers.
template <typename E>
void transpose_blocks(OpContext& ctx, const void* xv, void* yv, int64_t batch, int64_t a, int64_t b) {
  constexpr int64_t kBlock = 32;
  const E* x = static_cast<const E*>(xv);
  E* y = static_cast<E*>(yv);
  const int64_t row_blocks = (a + kBlock - 1) / kBlock;
  parallel_range(ctx, batch * row_blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n = task / row_blocks, i0 = task % row_blocks * kBlock, i1 = std::min(a, i0 + kBlock);
      const E* xn = x + n * a * b;
      E* yn = y + n * a * b;
      for (int64_t j0 = 0; j0 < b; j0 += kBlock) {
        const int64_t j1 = std::min(b, j0 + kBlock);
        for (int64_t j = j0; j < j1; ++j)
          for (int64_t i = i0; i < i1; ++i) yn[j * a + i] = xn[i * b + j];
      }
    }
  });
}

}  // namespace

void transpose_matrices(OpContext& ctx, const void* x, void* y, int64_t batch, int64_t a, int64_t b,
                        size_t elem_bytes) {
  switch (elem_bytes) {
    case 1: return transpose_blocks<uint8_t>(ctx, x, y, batch, a, b);
    case 2: return transpose_blocks<uint16_t>(ctx, x, y, batch, a, b);
    case 4: return transpose_blocks<uint32_t>(ctx, x, y, batch, a, b);
    default: return transpose_blocks<uint64_t>(ctx, x, y, batch, a, b);
  }
}

// ---- strided copies: Transpose, Expand, Tile, Slice, DepthToSpace, SpaceToDepth -------------

Status kernel_Transpose(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x->dtype, "input 0"));
  const size_t rank = x->dims.size();
  std::vector<int64_t> perm = ctx.attrs().get_ints("perm");
  if (!ctx.attrs().has("perm")) {
    perm.resize(rank);
    for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(rank - 1 - i);
  }
  std::vector<bool> seen(rank, false);
  bool valid = perm.size() == rank;
  for (size_t i = 0; valid && i < perm.size(); ++i) {
    valid =
        perm[i] >= 0 && perm[i] < static_cast<int64_t>(rank) && !seen[static_cast<size_t>(perm[i])];
    if (valid) seen[static_cast<size_t>(perm[i])] = true;
  }
  if (!valid)
    return ctx.error(StatusCode::kInvalidArgument, "perm ", dims_string(perm),
                     " is not a permutation of ", rank, " axes");
  const std::vector<int64_t> in_strides = row_major_strides(x->dims);
  std::vector<int64_t> dims(rank), strides(rank);
  for (size_t i = 0; i < rank; ++i) {
    dims[i] = x->dims[static_cast<size_t>(perm[i])];
    strides[i] = in_strides[static_cast<size_t>(perm[i])];
  }
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, dims, &out));
  int64_t batch = 0, a = 0, b = 0;
  if (out->numel() > 0 && batched_matrix_transpose(x->dims, perm, &batch, &a, &b)) {
    const size_t bits = dtype_bits(x->dtype);
    if (bits == 8 || bits == 16 || bits == 32 || bits == 64) {
      transpose_matrices(ctx, x->data, out->data, batch, a, b, bits / 8);
      return Status::ok();
    }
  }
  strided_copy(out->data, x->data, dims, strides, 0, dtype_bits(x->dtype));
  return Status::ok();
}

Status kernel_Expand(OpContext& ctx) {
  const TensorView *x = nullptr, *s = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &s));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x->dtype, "input 0"));
  std::vector<int64_t> shape, dims;
  CUVIL_RETURN_IF_ERROR(read_indices(ctx, s, "shape", &shape));
  if (!broadcast_shape(x->dims, shape, &dims))
    return ctx.error(StatusCode::kShape, "input dims ", dims_string(x->dims),
                     " do not broadcast to shape ", dims_string(shape));
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, dims, &out));
  strided_copy(out->data, x->data, dims, broadcast_strides(x->dims, dims), 0, dtype_bits(x->dtype));
  return Status::ok();
}

Status kernel_Tile(OpContext& ctx) {
  const TensorView *x = nullptr, *r = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &r));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x->dtype, "input 0"));
  std::vector<int64_t> repeats;
  CUVIL_RETURN_IF_ERROR(read_indices(ctx, r, "repeats", &repeats));
  const size_t rank = x->dims.size();
  if (repeats.size() != rank)
    return ctx.error(StatusCode::kShape, "input 'repeats' has ", repeats.size(),
                     " entries for rank ", rank);
  const std::vector<int64_t> in_strides = row_major_strides(x->dims);
  // Output axis k is (repeat, i) with the repeat major: view it as two axes, stride 0 on the first.
  std::vector<int64_t> dims(rank), view_dims, view_strides;
  for (size_t k = 0; k < rank; ++k) {
    if (repeats[k] < 0)
      return ctx.error(StatusCode::kShape, "repeats ", dims_string(repeats), " has a negative entry");
    auto d = checked_mul(x->dims[k], repeats[k]);
    if (!d) return ctx.error(StatusCode::kOutOfMemory, "tiled axis ", k, " overflows");
    dims[k] = *d;
    view_dims.insert(view_dims.end(), {repeats[k], x->dims[k]});
    view_strides.insert(view_strides.end(), {0, in_strides[k]});
  }
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, dims, &out));
  strided_copy(out->data, x->data, view_dims, view_strides, 0, dtype_bits(x->dtype));
  return Status::ok();
}

Status kernel_Slice(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x->dtype, "input 0"));
  const int64_t rank = static_cast<int64_t>(x->dims.size());
  std::vector<int64_t> starts, ends, axes, steps;
  bool has_axes = false, has_steps = false;
  if (ctx.opset() >= 10) {
    const TensorView *s = nullptr, *e = nullptr;
    CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &s));
    CUVIL_RETURN_IF_ERROR(require_input(ctx, 2, &e));
    CUVIL_RETURN_IF_ERROR(read_indices(ctx, s, "starts", &starts));
    CUVIL_RETURN_IF_ERROR(read_indices(ctx, e, "ends", &ends));
    if (const TensorView* a = ctx.input(3)) {
      CUVIL_RETURN_IF_ERROR(read_indices(ctx, a, "axes", &axes));
      has_axes = true;
    }
    if (const TensorView* st = ctx.input(4)) {
      CUVIL_RETURN_IF_ERROR(read_indices(ctx, st, "steps", &steps));
      has_steps = true;
    }
  } else {
    starts = ctx.attrs().get_ints("starts");
    ends = ctx.attrs().get_ints("ends");
    has_axes = ctx.attrs().has("axes");
    axes = ctx.attrs().get_ints("axes");
  }
  if (!has_axes) {
    axes.resize(starts.size());
    for (size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<int64_t>(i);
  }
  if (!has_steps) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return ctx.error(StatusCode::kShape, "starts, ends, axes and steps have ", starts.size(), ", ",
                     ends.size(), ", ", axes.size(), " and ", steps.size(),
                     " entries; they must agree");
  std::vector<int64_t> dims = x->dims, first(static_cast<size_t>(rank), 0),
                       step(static_cast<size_t>(rank), 1);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a = 0;
    if (!normalize_axis(axes[i], rank, &a))
      return ctx.error(StatusCode::kInvalidArgument, "axis ", axes[i], " is out of range for rank ",
                       rank);
    if (seen[static_cast<size_t>(a)])
      return ctx.error(StatusCode::kInvalidArgument, "axis ", axes[i], " is repeated");
    seen[static_cast<size_t>(a)] = true;
    const int64_t dim = x->dims[static_cast<size_t>(a)];
    const int64_t st = steps[i];
    if (st == 0) return ctx.error(StatusCode::kInvalidArgument, "step for axis ", axes[i], " is 0");
    // ONNX clamping: starts to [0, dim] (or [0, dim-1] going backwards), ends to [0, dim]
    // (or [-1, dim-1] going backwards), after adding dim to negative values.
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += dim;
    if (e < 0) e += dim;
    int64_t len = 0;
    if (dim == 0) {
      len = 0;
    } else if (st > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > b ? (e - b - 1) / st + 1 : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      len = b > e ? (b - e - 1) / (-st) + 1 : 0;
    }
    dims[static_cast<size_t>(a)] = len;
    first[static_cast<size_t>(a)] = len > 0 ? b : 0;
    step[static_cast<size_t>(a)] = st;
  }
  const std::vector<int64_t> in_strides = row_major_strides(x->dims);
  std::vector<int64_t> strides(static_cast<size_t>(rank));
  int64_t offset = 0;
  for (size_t k = 0; k < static_cast<size_t>(rank); ++k) {
    strides[k] = in_strides[k] * step[k];
    offset += first[k] * in_strides[k];
  }
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, dims, &out));
  strided_copy(out->data, x->data, dims, strides, offset, dtype_bits(x->dtype));
  return Status::ok();
}

namespace {
Status space_depth_common(OpContext& ctx, const TensorView** x, int64_t* b) {
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, x));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, (*x)->dtype, "input 0"));
  if ((*x)->dims.size() != 4)
    return ctx.error(StatusCode::kShape, "input must be 4-D [N,C,H,W], has dims ",
                     dims_string((*x)->dims));
  *b = ctx.attrs().get_int("blocksize", 0);
  if (*b <= 0 || *b > (int64_t{1} << 31))
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'blocksize' is ", *b);
  return Status::ok();
}
}  // namespace

Status kernel_DepthToSpace(OpContext& ctx) {
  const TensorView* x = nullptr;
  int64_t b = 0;
  CUVIL_RETURN_IF_ERROR(space_depth_common(ctx, &x, &b));
  const int64_t n = x->dims[0], c = x->dims[1], h = x->dims[2], w = x->dims[3];
  if (c % (b * b) != 0)
    return ctx.error(StatusCode::kShape, "channels ", c,
                     " are not a multiple of blocksize^2 = ", b * b);
  const int64_t oc = c / (b * b);
  const std::string mode = ctx.attrs().get_string("mode", "DCR");
  // Output [N, C', H, b, W, b] as a view; the source channel of (c', by, bx) is
  // by*b*C' + bx*C' + c' in DCR mode and c'*b*b + by*b + bx in CRD mode.
  std::vector<int64_t> view = {n, oc, h, b, w, b}, strides;
  const int64_t hw = h * w;
  if (mode == "DCR")
    strides = {c * hw, hw, w, b * oc * hw, 1, oc * hw};
  else if (mode == "CRD")
    strides = {c * hw, b * b * hw, w, b * hw, 1, hw};
  else
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'mode' is '", mode,
                     "'; expected DCR or CRD");
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, {n, oc, h * b, w * b}, &out));
  strided_copy(out->data, x->data, view, strides, 0, dtype_bits(x->dtype));
  return Status::ok();
}

Status kernel_SpaceToDepth(OpContext& ctx) {
  const TensorView* x = nullptr;
  int64_t b = 0;
  CUVIL_RETURN_IF_ERROR(space_depth_common(ctx, &x, &b));
  const int64_t n = x->dims[0], c = x->dims[1], h = x->dims[2], w = x->dims[3];
  if (h % b != 0 || w % b != 0)
    return ctx.error(StatusCode::kShape, "height ", h, " and width ", w,
                     " must be multiples of blocksize ", b);
  // Output channel (by*b + bx)*C + c (DCR) or c*b*b + by*b + bx (CRD, opset 28) reads
  // input (c, y*b + by, x*b + bx).
  const std::string mode = ctx.attrs().get_string("mode", "DCR");
  std::vector<int64_t> view, strides;
  if (mode == "DCR") {
    view = {n, b, b, c, h / b, w / b};
    strides = {c * h * w, w, 1, h * w, b * w, b};
  } else if (mode == "CRD") {
    view = {n, c, b, b, h / b, w / b};
    strides = {c * h * w, h * w, w, 1, b * w, b};
  } else {
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'mode' is '", mode,
                     "'; expected DCR or CRD");
  }
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, {n, c * b * b, h / b, w / b}, &out));
  strided_copy(out->data, x->data, view, strides, 0, dtype_bits(x->dtype));
  return Status::ok();
}

Status kernel_ReverseSequence(OpContext& ctx) {
  const TensorView *x = nullptr, *lens_t = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &lens_t));
  if (x->dims.size() < 2)
    return ctx.error(StatusCode::kShape, "input must have rank >= 2, has dims ", dims_string(x->dims));
  const int64_t time_axis = ctx.attrs().get_int("time_axis", 0);
  const int64_t batch_axis = ctx.attrs().get_int("batch_axis", 1);
  if (!((time_axis == 0 && batch_axis == 1) || (time_axis == 1 && batch_axis == 0)))
    return ctx.error(StatusCode::kInvalidArgument, "time_axis ", time_axis, " and batch_axis ",
                     batch_axis, " must be 0 and 1 in some order");
  std::vector<int64_t> lens;
  CUVIL_RETURN_IF_ERROR(read_indices(ctx, lens_t, "sequence_lens", &lens));
  const int64_t steps = x->dims[static_cast<size_t>(time_axis)];
  const int64_t batch = x->dims[static_cast<size_t>(batch_axis)];
  if (static_cast<int64_t>(lens.size()) != batch)
    return ctx.error(StatusCode::kShape, "input 'sequence_lens' has ", lens.size(),
                     " entries for batch ", batch);
  for (int64_t i = 0; i < batch; ++i)
    if (lens[static_cast<size_t>(i)] < 0 || lens[static_cast<size_t>(i)] > steps)
      return ctx.error(StatusCode::kRuntime, "sequence length ", lens[static_cast<size_t>(i)],
                       " out of range [0, ", steps, "] at position [", i, "]");
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(copy_input_to_output(ctx, *x, &out));
  const int bits = dtype_bits(x->dtype);
  const int64_t inner = product(x->dims, 2, x->dims.size());
  auto row = [&](int64_t t, int64_t b) {
    return (time_axis == 0 ? t * batch + b : b * steps + t) * inner;
  };
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = lens[static_cast<size_t>(b)];
    for (int64_t t = 0; t < len; ++t)
      copy_elems(out->data, row(t, b), x->data, row(len - 1 - t, b), inner, bits);
  }
  return Status::ok();
}

// ---- gathers ---------------------------------------------------------------------------------

Status kernel_Gather(OpContext& ctx) {
  const TensorView *x = nullptr, *ind = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &ind));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x->dtype, "input 0"));
  const int64_t rank = static_cast<int64_t>(x->dims.size());
  int64_t axis = 0;
  CUVIL_RETURN_IF_ERROR(get_axis(ctx, 0, rank, &axis));
  const size_t ax = static_cast<size_t>(axis);
  std::vector<int64_t> idx;
  CUVIL_RETURN_IF_ERROR(read_indices(ctx, ind, "indices", &idx));
  const int64_t n = x->dims[ax];
  for (size_t j = 0; j < idx.size(); ++j)
    CUVIL_RETURN_IF_ERROR(wrap_index(ctx, idx[j], n, ind->dims, static_cast<int64_t>(j), &idx[j]));
  std::vector<int64_t> dims(x->dims.begin(), x->dims.begin() + axis);
  dims.insert(dims.end(), ind->dims.begin(), ind->dims.end());
  dims.insert(dims.end(), x->dims.begin() + axis + 1, x->dims.end());
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, dims, &out));
  const int bits = dtype_bits(x->dtype);
  const int64_t outer = product(x->dims, 0, ax), inner = product(x->dims, ax + 1, x->dims.size());
  const int64_t count = static_cast<int64_t>(idx.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < count; ++j)
      copy_elems(out->data, (o * count + j) * inner, x->data,
                 (o * n + idx[static_cast<size_t>(j)]) * inner, inner, bits);
  return Status::ok();
}

namespace {
// For GatherElements / ScatterElements: the flat data offset of every element of `indices`
// (index values along `axis`, the other coordinates from the element's own position).
Status element_offsets(const OpContext& ctx, const TensorView& data, const TensorView& ind,
                       int64_t axis, std::vector<int64_t>* offsets) {
  if (ind.dims.size() != data.dims.size())
    return ctx.error(StatusCode::kShape, "indices have dims ", dims_string(ind.dims),
                     " but data has dims ", dims_string(data.dims), "; ranks must agree");
  for (size_t d = 0; d < ind.dims.size(); ++d)
    if (static_cast<int64_t>(d) != axis && ind.dims[d] > data.dims[d])
      return ctx.error(StatusCode::kShape, "indices dims ", dims_string(ind.dims),
                       " exceed data dims ", dims_string(data.dims), " on axis ", d);
  CUVIL_RETURN_IF_ERROR(read_indices(ctx, &ind, "indices", offsets));
  const std::vector<int64_t> strides = row_major_strides(data.dims);
  const size_t rank = ind.dims.size(), ax = static_cast<size_t>(axis);
  const int64_t n = data.dims[ax];
  std::vector<int64_t> pos(rank, 0);
  int64_t base = 0;  // offset of pos without the axis coordinate
  for (size_t i = 0; i < offsets->size(); ++i) {
    int64_t v = 0;
    CUVIL_RETURN_IF_ERROR(wrap_index(ctx, (*offsets)[i], n, ind.dims, static_cast<int64_t>(i), &v));
    (*offsets)[i] = base + v * strides[ax];
    for (size_t k = rank; k-- > 0;) {
      if (k != ax) base += strides[k];
      if (++pos[k] < ind.dims[k]) break;
      if (k != ax) base -= strides[k] * ind.dims[k];
      pos[k] = 0;
    }
  }
  return Status::ok();
}

// For GatherND / ScatterND: the flat data offset of every index tuple (the last axis of
// `indices` holds k coordinates into data axes [batch_dims, batch_dims + k)).
Status tuple_offsets(const OpContext& ctx, const TensorView& data, const TensorView& ind,
                     int64_t batch_dims, std::vector<int64_t>* offsets, int64_t* k_out) {
  const int64_t r = static_cast<int64_t>(data.dims.size()),
                q = static_cast<int64_t>(ind.dims.size());
  if (q < 1) return ctx.error(StatusCode::kShape, "indices must have rank >= 1");
  if (batch_dims < 0 || batch_dims >= q || batch_dims >= r)
    return ctx.error(StatusCode::kInvalidArgument, "batch_dims ", batch_dims,
                     " must be below the ranks of data (", r, ") and indices (", q, ")");
  const int64_t k = ind.dims.back();
  if (k < 0 || k > r - batch_dims)
    return ctx.error(StatusCode::kShape, "index tuples have ", k, " coordinates but data of rank ",
                     r, " has ", r - batch_dims, " after the batch dims");
  for (int64_t i = 0; i < batch_dims; ++i)
    if (ind.dims[static_cast<size_t>(i)] != data.dims[static_cast<size_t>(i)])
      return ctx.error(StatusCode::kShape, "batch dim ", i, " differs: indices ",
                       dims_string(ind.dims), ", data ", dims_string(data.dims));
  std::vector<int64_t> idx;
  CUVIL_RETURN_IF_ERROR(read_indices(ctx, &ind, "indices", &idx));
  const std::vector<int64_t> strides = row_major_strides(data.dims);
  const int64_t tuples = k > 0 ? static_cast<int64_t>(idx.size()) / k
                               : product(ind.dims, 0, static_cast<size_t>(q - 1));
  const int64_t per_batch =
      tuples / std::max<int64_t>(1, product(ind.dims, 0, static_cast<size_t>(batch_dims)));
  const int64_t batch_stride = batch_dims > 0 ? strides[static_cast<size_t>(batch_dims - 1)] : 0;
  offsets->assign(static_cast<size_t>(tuples), 0);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = per_batch > 0 ? (t / per_batch) * batch_stride : 0;
    for (int64_t j = 0; j < k; ++j) {
      const size_t axis = static_cast<size_t>(batch_dims + j);
      int64_t v = 0;
      CUVIL_RETURN_IF_ERROR(wrap_index(ctx, idx[static_cast<size_t>(t * k + j)], data.dims[axis],
                                       ind.dims, t * k + j, &v));
      off += v * strides[axis];
    }
    (*offsets)[static_cast<size_t>(t)] = off;
  }
  *k_out = k;
  return Status::ok();
}
}  // namespace

Status kernel_GatherElements(OpContext& ctx) {
  const TensorView *x = nullptr, *ind = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &ind));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x->dtype, "input 0"));
  int64_t axis = 0;
  CUVIL_RETURN_IF_ERROR(get_axis(ctx, 0, static_cast<int64_t>(x->dims.size()), &axis));
  std::vector<int64_t> offsets;
  CUVIL_RETURN_IF_ERROR(element_offsets(ctx, *x, *ind, axis, &offsets));
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, ind->dims, &out));
  const int bits = dtype_bits(x->dtype);
  for (size_t i = 0; i < offsets.size(); ++i)
    copy_elems(out->data, static_cast<int64_t>(i), x->data, offsets[i], 1, bits);
  return Status::ok();
}

Status kernel_GatherND(OpContext& ctx) {
  const TensorView *x = nullptr, *ind = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &ind));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x->dtype, "input 0"));
  const int64_t b = ctx.attrs().get_int("batch_dims", 0);
  std::vector<int64_t> offsets;
  int64_t k = 0;
  CUVIL_RETURN_IF_ERROR(tuple_offsets(ctx, *x, *ind, b, &offsets, &k));
  std::vector<int64_t> dims(ind->dims.begin(), ind->dims.end() - 1);
  dims.insert(dims.end(), x->dims.begin() + b + k, x->dims.end());
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, dims, &out));
  const int bits = dtype_bits(x->dtype);
  const int64_t slice = product(x->dims, static_cast<size_t>(b + k), x->dims.size());
  for (size_t t = 0; t < offsets.size(); ++t)
    copy_elems(out->data, static_cast<int64_t>(t) * slice, x->data, offsets[t], slice, bits);
  return Status::ok();
}

// ---- scatters --------------------------------------------------------------------------------

namespace {
Status scatter_elements(OpContext& ctx, bool with_reduction) {
  const TensorView *x = nullptr, *ind = nullptr, *upd = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &ind));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 2, &upd));
  if (upd->dims != ind->dims)
    return ctx.error(StatusCode::kShape, "updates dims ", dims_string(upd->dims),
                     " differ from indices dims ", dims_string(ind->dims));
  if (upd->dtype != x->dtype)
    return ctx.error(StatusCode::kShape, "updates dtype ", dtype_name(upd->dtype),
                     " differs from data dtype ", dtype_name(x->dtype));
  Reduction r = Reduction::kNone;
  if (with_reduction) CUVIL_RETURN_IF_ERROR(read_reduction(ctx, &r));
  int64_t axis = 0;
  CUVIL_RETURN_IF_ERROR(get_axis(ctx, 0, static_cast<int64_t>(x->dims.size()), &axis));
  std::vector<int64_t> offsets;
  CUVIL_RETURN_IF_ERROR(element_offsets(ctx, *x, *ind, axis, &offsets));
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(copy_input_to_output(ctx, *x, &out));
  return scatter_apply(ctx, out, *upd, offsets, 1, r);
}
}  // namespace

Status kernel_Scatter(OpContext& ctx) { return scatter_elements(ctx, false); }

Status kernel_ScatterElements(OpContext& ctx) { return scatter_elements(ctx, true); }

Status kernel_ScatterND(OpContext& ctx) {
  const TensorView *x = nullptr, *ind = nullptr, *upd = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &ind));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 2, &upd));
  if (upd->dtype != x->dtype)
    return ctx.error(StatusCode::kShape, "updates dtype ", dtype_name(upd->dtype),
                     " differs from data dtype ", dtype_name(x->dtype));
  Reduction r = Reduction::kNone;
  CUVIL_RETURN_IF_ERROR(read_reduction(ctx, &r));
  std::vector<int64_t> offsets;
  int64_t k = 0;
  if (ind->dims.empty()) return ctx.error(StatusCode::kShape, "indices must have rank >= 1");
  CUVIL_RETURN_IF_ERROR(tuple_offsets(ctx, *x, *ind, 0, &offsets, &k));
  std::vector<int64_t> expected(ind->dims.begin(), ind->dims.end() - 1);
  expected.insert(expected.end(), x->dims.begin() + k, x->dims.end());
  if (upd->dims != expected)
    return ctx.error(StatusCode::kShape, "updates have dims ", dims_string(upd->dims), "; expected ",
                     dims_string(expected));
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(copy_input_to_output(ctx, *x, &out));
  return scatter_apply(ctx, out, *upd, offsets,
                       product(x->dims, static_cast<size_t>(k), x->dims.size()), r);
}

// ---- padding: Pad, CenterCropPad -------------------------------------------------------------

Status kernel_Pad(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x->dtype, "input 0"));
  const int64_t rank = static_cast<int64_t>(x->dims.size());
  const int bits = dtype_bits(x->dtype);
  const std::string mode = ctx.attrs().get_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'mode' is '", mode, "'");
  std::vector<int64_t> pads, axes;
  std::vector<uint8_t> fill;
  if (ctx.opset() < 11) {
    pads =
        ctx.attrs().has("pads") ? ctx.attrs().get_ints("pads") : ctx.attrs().get_ints("paddings");
    if (!make_fill(x->dtype, ctx.attrs().get_float("value", 0.0f), &fill))
      return ctx.error(StatusCode::kUnsupported, "a non-zero pad value for dtype ",
                       dtype_name(x->dtype));
  } else {
    const TensorView* p = nullptr;
    CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &p));
    CUVIL_RETURN_IF_ERROR(read_indices(ctx, p, "pads", &pads));
    fill.assign(16, 0);
    if (const TensorView* v = ctx.input(2); v && v->numel() > 0) {
      if (v->dtype != x->dtype)
        return ctx.error(StatusCode::kShape, "constant_value has dtype ", dtype_name(v->dtype),
                         ", data has ", dtype_name(x->dtype));
      copy_elems(fill.data(), 0, v->data, 0, 1, bits);
    }
    if (const TensorView* a = ctx.input(3))
      CUVIL_RETURN_IF_ERROR(read_indices(ctx, a, "axes", &axes));
  }
  if (!ctx.input(3) || ctx.opset() < 11) {
    axes.resize(static_cast<size_t>(rank));
    for (int64_t k = 0; k < rank; ++k) axes[static_cast<size_t>(k)] = k;
  }
  const size_t na = axes.size();
  if (pads.size() != 2 * na)
    return ctx.error(StatusCode::kShape, "'pads' has ", pads.size(), " entries for ", na,
                     " padded axes (needs ", 2 * na, ")");
  std::vector<int64_t> begin(static_cast<size_t>(rank), 0), end(static_cast<size_t>(rank), 0);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < na; ++i) {
    int64_t a = 0;
    if (!normalize_axis(axes[i], rank, &a))
      return ctx.error(StatusCode::kInvalidArgument, "axis ", axes[i], " is out of range for rank ",
                       rank);
    if (seen[static_cast<size_t>(a)])
      return ctx.error(StatusCode::kInvalidArgument, "axis ", axes[i], " is repeated");
    seen[static_cast<size_t>(a)] = true;
    begin[static_cast<size_t>(a)] = pads[i];
    end[static_cast<size_t>(a)] = pads[i + na];
  }
  // Negative pads crop first; the remaining positive pads extend the cropped range
  // [lo, lo + n) with the fill value or its reflection / edge / wrap-around.
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (size_t k = 0; k < static_cast<size_t>(rank); ++k) {
    const int64_t dim = x->dims[k];
    auto total = checked_add(dim, begin[k]);
    if (total) total = checked_add(*total, end[k]);
    if (!total || *total < 0)
      return ctx.error(StatusCode::kShape, "pads ", begin[k], " and ", end[k], " make axis ", k,
                       " of size ", dim, " negative or too large");
    dims[k] = *total;
    const int64_t n = dim - std::max<int64_t>(0, -begin[k]) - std::max<int64_t>(0, -end[k]);
    if (n <= 0 && mode != "constant" && *total > 0)
      return ctx.error(StatusCode::kShape, "cannot pad axis ", k, " of size ", dim, " in ", mode,
                       " mode: nothing is left to copy");
  }
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, dims, &out));
  if (out->numel() == 0)
    return Status::ok();  // also bounds every axis (and map) by the output size
  std::vector<std::vector<int64_t>> maps(static_cast<size_t>(rank));
  for (size_t k = 0; k < static_cast<size_t>(rank); ++k) {
    const int64_t lo = std::max<int64_t>(0, -begin[k]);
    const int64_t n = x->dims[k] - lo - std::max<int64_t>(0, -end[k]);
    const int64_t shift = std::max<int64_t>(0, begin[k]);
    std::vector<int64_t>& map = maps[k];
    map.resize(static_cast<size_t>(dims[k]));
    for (int64_t o = 0; o < dims[k]; ++o) {
      int64_t c = o - shift;
      if (c < 0 || c >= n) {
        if (mode == "constant") {
          c = -1;
        } else if (mode == "edge") {
          c = std::clamp<int64_t>(c, 0, n - 1);
        } else if (mode == "wrap") {
          c = ((c % n) + n) % n;
        } else if (n == 1) {  // reflect
          c = 0;
        } else {
          const int64_t period = 2 * (n - 1);
          c = ((c % period) + period) % period;
          if (c >= n) c = period - c;
        }
      }
      map[static_cast<size_t>(o)] = c < 0 ? -1 : lo + c;
    }
  }
  map_copy(out->data, *x, dims, maps, fill.data(), bits);
  return Status::ok();
}

Status kernel_CenterCropPad(OpContext& ctx) {
  const TensorView *x = nullptr, *s = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &s));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x->dtype, "input 0"));
  const int64_t rank = static_cast<int64_t>(x->dims.size());
  std::vector<int64_t> shape;
  CUVIL_RETURN_IF_ERROR(read_indices(ctx, s, "shape", &shape));
  std::vector<int64_t> axes = ctx.attrs().get_ints("axes");
  if (!ctx.attrs().has("axes")) {
    axes.resize(static_cast<size_t>(rank));
    for (int64_t k = 0; k < rank; ++k) axes[static_cast<size_t>(k)] = k;
  }
  if (shape.size() != axes.size())
    return ctx.error(StatusCode::kShape, "input 'shape' has ", shape.size(), " entries for ",
                     axes.size(), " axes");
  std::vector<int64_t> dims = x->dims;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = 0;
    if (!normalize_axis(axes[i], rank, &a))
      return ctx.error(StatusCode::kInvalidArgument, "axis ", axes[i], " is out of range for rank ",
                       rank);
    if (seen[static_cast<size_t>(a)])
      return ctx.error(StatusCode::kInvalidArgument, "axis ", axes[i], " is repeated");
    seen[static_cast<size_t>(a)] = true;
    if (shape[i] < 0)
      return ctx.error(StatusCode::kShape, "input 'shape' entry ", i, " is negative (", shape[i],
                       ")");
    dims[static_cast<size_t>(a)] = shape[i];
  }
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, dims, &out));
  if (out->numel() == 0)
    return Status::ok();  // also bounds every axis (and map) by the output size
  std::vector<std::vector<int64_t>> maps(static_cast<size_t>(rank));
  for (size_t k = 0; k < static_cast<size_t>(rank); ++k) {
    const int64_t dim = x->dims[k], target = dims[k];
    // Crop starts at floor((dim - target) / 2); padding puts floor((target - dim) / 2) in front.
    const int64_t shift = target <= dim ? -((dim - target) / 2) : (target - dim) / 2;
    maps[k].resize(static_cast<size_t>(target));
    for (int64_t o = 0; o < target; ++o) {
      const int64_t c = o - shift;
      maps[k][static_cast<size_t>(o)] = c >= 0 && c < dim ? c : -1;
    }
  }
  const std::vector<uint8_t> zero(16, 0);
  map_copy(out->data, *x, dims, maps, zero.data(), dtype_bits(x->dtype));
  return Status::ok();
}

// ---- Resize, Upsample ------------------------------------------------------------------------

namespace {

struct ResizeParams {
  std::string mode;          // nearest, linear, cubic
  std::string coord_mode;    // coordinate_transformation_mode
  std::string nearest_mode;  // round_prefer_floor, round_prefer_ceil, floor, ceil, simple
  double cubic_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;
  double extrapolation = 0.0;
};

// One output coordinate along one axis: the input coordinates it blends, or "extrapolate".
struct Taps {
  bool extrapolate = false;
  std::vector<std::pair<int64_t, double>> taps;  // (input index, weight), zero weights dropped
};

double cubic_kernel(double t, double a) {
  t = std::fabs(t);
  if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
  if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
  return 0;
}

// The input coordinate of output coordinate x (ONNX coordinate_transformation_mode).
// `length_resized` is scale * input length (a float, as in the ONNX reference).
Status original_coordinate(const OpContext& ctx, const ResizeParams& p, double x, double scale,
                           double out_len, double length_resized, double in_len, double roi_start,
                           double roi_end, double* result) {
  const std::string& m = p.coord_mode;
  if (m == "half_pixel") {
    *result = (x + 0.5) / scale - 0.5;
  } else if (m == "half_pixel_symmetric") {
    const double adjustment = out_len / length_resized;
    const double center = in_len / 2;
    *result = center * (1 - adjustment) + (x + 0.5) / scale - 0.5;
  } else if (m == "pytorch_half_pixel") {
    *result = length_resized > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  } else if (m == "align_corners") {
    *result = length_resized == 1 ? 0.0 : x * (in_len - 1) / (length_resized - 1);
  } else if (m == "asymmetric") {
    *result = x / scale;
  } else if (m == "tf_half_pixel_for_nn") {
    *result = (x + 0.5) / scale;
  } else if (m == "tf_crop_and_resize") {
    *result = length_resized > 1
                  ? roi_start * (in_len - 1) +
                        x * (roi_end - roi_start) * (in_len - 1) / (length_resized - 1)
                  : 0.5 * (roi_start + roi_end) * (in_len - 1);
  } else {
    return ctx.error(StatusCode::kInvalidArgument, "coordinate_transformation_mode '", m,
                     "' is not known");
  }
  return Status::ok();
}

Status axis_taps(const OpContext& ctx, const ResizeParams& p, int64_t in_len, int64_t out_len,
                 double scale, double length_resized, double roi_start, double roi_end,
                 std::vector<Taps>* taps) {
  taps->assign(static_cast<size_t>(out_len), Taps{});
  for (int64_t o = 0; o < out_len; ++o) {
    Taps& t = (*taps)[static_cast<size_t>(o)];
    double x = 0;
    CUVIL_RETURN_IF_ERROR(original_coordinate(ctx, p, static_cast<double>(o), scale,
                                              static_cast<double>(out_len), length_resized,
                                              static_cast<double>(in_len), roi_start, roi_end, &x));
    if (p.coord_mode == "tf_crop_and_resize" && (x < 0 || x > static_cast<double>(in_len - 1))) {
      t.extrapolate = true;
      continue;
    }
    if (!std::isfinite(x))
      return ctx.error(StatusCode::kRuntime, "resize coordinate ", x, " is not finite");
    auto clamp_index = [in_len](double v) -> int64_t {
      if (v < 0) return 0;
      if (v > static_cast<double>(in_len - 1)) return in_len - 1;
      return static_cast<int64_t>(v);
    };
    if (p.mode == "nearest") {
      const double f = std::floor(x), d = x - f;
      double v = f;
      const std::string& nm = p.nearest_mode;
      if (nm == "round_prefer_floor")
        v = d > 0.5 ? f + 1 : f;
      else if (nm == "round_prefer_ceil")
        v = d >= 0.5 ? f + 1 : f;
      else if (nm == "floor")
        v = f;
      else if (nm == "ceil")
        v = std::ceil(x);
      else if (nm == "simple")
        v = scale < 1 ? std::ceil(x) : f;
      else
        return ctx.error(StatusCode::kInvalidArgument, "nearest_mode '", nm, "' is not known");
      t.taps.push_back({clamp_index(v), 1.0});
      continue;
    }
    // Linear (support 1) and cubic (support 2) kernels; with antialias the kernel stretches
    // by 1/scale when downsampling.
    const bool cubic = p.mode == "cubic";
    const double support = cubic ? 2.0 : 1.0;
    const double s = p.antialias ? std::min(scale, 1.0) : 1.0;
    const double f = std::floor(x), ratio = x - f;
    const int64_t start = static_cast<int64_t>(std::floor(-support / s)) + 1;
    const int64_t end = 2 - start;  // exclusive
    if (end - start > 4096)
      return ctx.error(StatusCode::kUnsupported, "antialias scale ", scale, " is too small");
    std::vector<std::pair<int64_t, double>> raw;
    double sum = 0;
    for (int64_t i = start; i < end; ++i) {
      const double arg = s * (static_cast<double>(i) - ratio);
      const double w = cubic ? cubic_kernel(arg, p.cubic_a) : std::max(0.0, 1.0 - std::fabs(arg));
      raw.push_back({static_cast<int64_t>(f) + i, w});
      sum += w;
    }
    if (p.antialias && sum != 0)
      for (auto& r : raw) r.second /= sum;
    if (p.exclude_outside) {
      sum = 0;
      for (auto& r : raw) {
        if (r.first < 0 || r.first >= in_len) r.second = 0;
        sum += r.second;
      }
      if (sum != 0)
        for (auto& r : raw) r.second /= sum;
    }
    for (const auto& r : raw)
      if (r.second != 0) t.taps.push_back({std::clamp<int64_t>(r.first, 0, in_len - 1), r.second});
  }
  return Status::ok();
}

Status read_float_list(const OpContext& ctx, const TensorView* t, const char* what,
                       std::vector<double>* out) {
  out->clear();
  for (int64_t i = 0; i < t->numel(); ++i) {
    const double v = load_as_double(*t, i);
    if (std::isnan(v) && !dtype_is_float(t->dtype))
      return ctx.error(StatusCode::kInvalidArgument, "input '", what, "' has dtype ",
                       dtype_name(t->dtype));
    out->push_back(v);
  }
  return Status::ok();
}

Status resize(OpContext& ctx, bool is_resize) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x->dtype, "input 0"));
  const AttrReader& at = ctx.attrs();
  const int opset = ctx.opset();
  const bool v11 = is_resize && opset >= 11;
  const int64_t rank = static_cast<int64_t>(x->dims.size());
  ResizeParams p;
  p.mode = at.get_string("mode", "nearest");
  if (p.mode == "bilinear" || p.mode == "trilinear") p.mode = "linear";
  if (p.mode != "nearest" && p.mode != "linear" && p.mode != "cubic")
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'mode' is '", p.mode, "'");
  // Upsample and Resize-10 sample asymmetrically and take the nearest pixel the way ONNX
  // Runtime's "simple" mode does (floor when upsampling, ceil when downsampling).
  p.coord_mode = v11 ? at.get_string("coordinate_transformation_mode", "half_pixel") : "asymmetric";
  p.nearest_mode = v11 ? at.get_string("nearest_mode", "round_prefer_floor") : "simple";
  p.cubic_a = at.get_float("cubic_coeff_a", -0.75f);
  p.exclude_outside = at.get_int("exclude_outside", 0) != 0;
  p.antialias = at.get_int("antialias", 0) != 0 && p.mode != "nearest";
  p.extrapolation = at.get_float("extrapolation_value", 0.0f);

  std::vector<int64_t> axes;
  if (is_resize && opset >= 18 && at.has("axes")) {
    axes = at.get_ints("axes");
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    for (int64_t& a : axes) {
      const int64_t orig = a;
      if (!normalize_axis(orig, rank, &a))
        return ctx.error(StatusCode::kInvalidArgument, "axis ", orig, " is out of range for rank ",
                         rank);
      if (seen[static_cast<size_t>(a)])
        return ctx.error(StatusCode::kInvalidArgument, "axis ", orig, " is repeated");
      seen[static_cast<size_t>(a)] = true;
    }
  } else {
    for (int64_t k = 0; k < rank; ++k) axes.push_back(k);
  }
  const size_t na = axes.size();

  std::vector<double> scales, roi;
  std::vector<int64_t> sizes;
  bool have_scales = false, have_sizes = false;
  if (!is_resize && opset < 9) {
    if (at.has("scales")) {
      for (float f : at.get_floats("scales")) scales.push_back(f);
    } else {  // Upsample-1
      scales = {1.0, 1.0, at.get_float("height_scale", 1.0f), at.get_float("width_scale", 1.0f)};
    }
    have_scales = true;
  } else if (!v11) {
    const TensorView* s = nullptr;
    CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &s));
    CUVIL_RETURN_IF_ERROR(read_float_list(ctx, s, "scales", &scales));
    have_scales = true;
  } else {
    if (const TensorView* r = ctx.input(1))
      CUVIL_RETURN_IF_ERROR(read_float_list(ctx, r, "roi", &roi));
    if (const TensorView* s = ctx.input(2); s && s->numel() > 0) {
      CUVIL_RETURN_IF_ERROR(read_float_list(ctx, s, "scales", &scales));
      have_scales = true;
    }
    if (const TensorView* s = ctx.input(3); s && s->numel() > 0) {
      CUVIL_RETURN_IF_ERROR(read_indices(ctx, s, "sizes", &sizes));
      have_sizes = true;
    }
    if (have_scales == have_sizes)
      return ctx.error(StatusCode::kInvalidArgument, "needs exactly one of 'scales' and 'sizes'");
  }
  const bool crop = p.coord_mode == "tf_crop_and_resize";
  std::vector<double> roi_start(static_cast<size_t>(rank), 0.0),
      roi_end(static_cast<size_t>(rank), 1.0);
  if (crop) {
    if (roi.size() != 2 * na)
      return ctx.error(StatusCode::kShape, "'roi' has ", roi.size(), " entries for ", na,
                       " axes (needs ", 2 * na, ")");
    for (size_t i = 0; i < na; ++i) {
      roi_start[static_cast<size_t>(axes[i])] = roi[i];
      roi_end[static_cast<size_t>(axes[i])] = roi[i + na];
    }
  }

  std::vector<double> scale(static_cast<size_t>(rank), 1.0),
      length_resized(static_cast<size_t>(rank));
  std::vector<int64_t> dims = x->dims;
  for (int64_t k = 0; k < rank; ++k)
    length_resized[static_cast<size_t>(k)] = static_cast<double>(x->dims[static_cast<size_t>(k)]);
  auto set_dim = [&](size_t a, double v) -> Status {
    if (!(v >= 0) || v > 4.0e9)
      return ctx.error(StatusCode::kOutOfMemory, "resized axis ", a, " would have ", v,
                       " elements");
    dims[a] = static_cast<int64_t>(v);
    return Status::ok();
  };
  if (have_scales) {
    if (scales.size() != na)
      return ctx.error(StatusCode::kShape, "'scales' has ", scales.size(), " entries for ", na,
                       " axes");
    for (size_t i = 0; i < na; ++i) {
      const size_t a = static_cast<size_t>(axes[i]);
      const double s = scales[i];
      if (!(s > 0) || !std::isfinite(s))
        return ctx.error(StatusCode::kInvalidArgument, "'scales' entry ", i, " is ", s,
                         "; scales must be positive");
      scale[a] = s;
      const double in = static_cast<double>(x->dims[a]);
      length_resized[a] = s * in * (crop ? roi_end[a] - roi_start[a] : 1.0);
      CUVIL_RETURN_IF_ERROR(set_dim(a, std::floor(length_resized[a])));
    }
  } else {
    if (sizes.size() != na)
      return ctx.error(StatusCode::kShape, "'sizes' has ", sizes.size(), " entries for ", na,
                       " axes");
    const std::string policy =
        opset >= 18 ? at.get_string("keep_aspect_ratio_policy", "stretch") : "stretch";
    if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
      return ctx.error(StatusCode::kInvalidArgument, "attribute 'keep_aspect_ratio_policy' is '",
                       policy, "'");
    double common = policy == "not_larger" ? INFINITY : -INFINITY;
    for (size_t i = 0; i < na; ++i) {
      const size_t a = static_cast<size_t>(axes[i]);
      if (sizes[i] < 0)
        return ctx.error(StatusCode::kShape, "'sizes' entry ", i, " is negative (", sizes[i], ")");
      if (x->dims[a] == 0) {
        if (sizes[i] != 0)
          return ctx.error(StatusCode::kShape, "cannot resize empty axis ", a, " to ", sizes[i]);
        scale[a] = 1.0;
        continue;
      }
      scale[a] = static_cast<double>(sizes[i]) / static_cast<double>(x->dims[a]);
      common = policy == "not_larger" ? std::min(common, scale[a]) : std::max(common, scale[a]);
    }
    for (size_t i = 0; i < na; ++i) {
      const size_t a = static_cast<size_t>(axes[i]);
      if (x->dims[a] == 0) {
        dims[a] = 0;
        continue;
      }
      if (policy != "stretch") scale[a] = common;
      const double in = static_cast<double>(x->dims[a]);
      length_resized[a] = scale[a] * in;
      CUVIL_RETURN_IF_ERROR(set_dim(
          a, policy == "stretch" ? static_cast<double>(sizes[i]) : std::floor(in * common + 0.5)));
    }
  }
  if (p.mode != "nearest") {
    bool numeric = visit_dtype<kNumericTypes>(x->dtype, [](auto) {});
    if (!numeric)
      return ctx.error(StatusCode::kUnsupported, p.mode, " resize of dtype ", dtype_name(x->dtype),
                       " is not supported");
  }
  for (size_t a = 0; a < static_cast<size_t>(rank); ++a)
    if (x->dims[a] == 0 && dims[a] > 0)
      return ctx.error(StatusCode::kShape, "cannot resize empty axis ", a);
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, dims, &out));
  const int64_t numel = out->numel();
  if (numel == 0) return Status::ok();  // also bounds every axis (and its taps) by the output size
  std::vector<std::vector<Taps>> taps(static_cast<size_t>(rank));
  for (size_t a = 0; a < static_cast<size_t>(rank); ++a)
    CUVIL_RETURN_IF_ERROR(axis_taps(ctx, p, x->dims[a], dims[a], scale[a], length_resized[a],
                                    roi_start[a], roi_end[a], &taps[a]));

  if (p.mode == "nearest") {
    std::vector<std::vector<int64_t>> maps(static_cast<size_t>(rank));
    for (size_t a = 0; a < static_cast<size_t>(rank); ++a)
      for (const Taps& t : taps[a]) maps[a].push_back(t.extrapolate ? -1 : t.taps[0].first);
    std::vector<uint8_t> fill;
    if (!make_fill(x->dtype, p.extrapolation, &fill))
      return ctx.error(StatusCode::kUnsupported, "extrapolation_value for dtype ",
                       dtype_name(x->dtype));
    map_copy(out->data, *x, dims, maps, fill.data(), dtype_bits(x->dtype));
    return Status::ok();
  }

  // Linear / cubic: every output element is the tensor product of its per-axis taps.
  const std::vector<int64_t> strides = row_major_strides(x->dims);
  visit_dtype<kNumericTypes>(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* in = x->as<T>();
    T* o = out->as<T>();
    auto store = [](double v) -> T {
      if constexpr (is_float_v<T>) {
        return convert<T>(static_cast<C>(v));
      } else {
        if (std::isnan(v)) return T(0);
        v = std::nearbyint(v);
        const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
        const double hi = static_cast<double>(std::numeric_limits<T>::max());
        if (v <= lo) return std::numeric_limits<T>::lowest();
        if (v >= hi) return std::numeric_limits<T>::max();
        return static_cast<T>(v);
      }
    };
    const size_t r = static_cast<size_t>(rank);
    std::vector<int64_t> idx(r, 0);
    std::vector<size_t> tap(r, 0);
    std::vector<const Taps*> cur(r);
    for (int64_t e = 0; e < numel; ++e) {
      bool extrapolate = false;
      bool empty = false;  // every weight of some axis cancelled out (exclude_outside)
      for (size_t a = 0; a < r; ++a) {
        cur[a] = &taps[a][static_cast<size_t>(idx[a])];
        extrapolate = extrapolate || cur[a]->extrapolate;
        empty = empty || cur[a]->taps.empty();
      }
      double acc = 0;
      if (extrapolate) {
        acc = p.extrapolation;
      } else if (empty) {
        acc = 0;
      } else if (r == 0) {
        acc = static_cast<double>(convert<C>(in[0]));
      } else {
        std::fill(tap.begin(), tap.end(), 0);
        for (;;) {
          double w = 1;
          int64_t off = 0;
          for (size_t a = 0; a < r; ++a) {
            const auto& t = cur[a]->taps[tap[a]];
            w *= t.second;
            off += t.first * strides[a];
          }
          acc += w * static_cast<double>(convert<C>(in[off]));
          size_t a = r;
          while (a-- > 0) {
            if (++tap[a] < cur[a]->taps.size()) break;
            tap[a] = 0;
          }
          if (a == static_cast<size_t>(-1)) break;
        }
      }
      o[e] = store(acc);
      for (size_t a = r; a-- > 0;) {
        if (++idx[a] < dims[a]) break;
        idx[a] = 0;
      }
    }
  });
  return Status::ok();
}

}  // namespace

Status kernel_Resize(OpContext& ctx) { return resize(ctx, true); }

Status kernel_Upsample(OpContext& ctx) { return resize(ctx, false); }

}  // namespace cuvil::rt::ops
