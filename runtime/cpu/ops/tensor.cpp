// Whole-tensor kernels for the shape, creation and selection ops: Shape, Size, Reshape, Flatten,
// Squeeze, Unsqueeze, Concat, Split, Constant, ConstantOfShape, Range, EyeLike, OneHot,
// NonZero, Compress, TopK and Unique. Ops that only move data work on raw elements of any
// dtype (element size from dtype_bits, 4-bit types nibble by nibble); ops that compare or
// compute (Range, NonZero, TopK, Unique, ...) dispatch on the dtype through kernel_util.h.
// Every output size derived from data (shape inputs, counts) is checked against
// kMaxOutputBytes before anything is allocated.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "ir/symbolic_ints.h"
#include "runtime/cpu/ops/kernel_util.h"

namespace cuvil::rt::ops {
namespace {

// Axes from the attribute (older opsets) or from input `input_index` (newer ones).
Status read_axes(const OpContext& ctx, bool from_input, size_t input_index,
                 std::vector<int64_t>* axes, bool* given) {
  axes->clear();
  *given = false;
  if (from_input) {
    const TensorView* t = ctx.input(input_index);
    if (!t) return Status::ok();
    if (!read_int_tensor(t, axes))
      return ctx.error(StatusCode::kInvalidArgument, "input 'axes' has dtype ",
                       dtype_name(t->dtype), "; expected an integer type");
    *given = true;
    return Status::ok();
  }
  if (ctx.attrs().has("axes")) {
    *axes = ctx.attrs().get_ints("axes");
    *given = true;
  }
  return Status::ok();
}

// Normalises every axis against rank; rejects out-of-range and repeated axes.
Status normalize_axes(const OpContext& ctx, std::vector<int64_t>* axes, int64_t rank) {
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t& a : *axes) {
    const int64_t orig = a;
    if (!normalize_axis(orig, rank, &a))
      return ctx.error(StatusCode::kInvalidArgument, "axis ", orig, " is out of range for rank ",
                       rank);
    if (seen[static_cast<size_t>(a)])
      return ctx.error(StatusCode::kInvalidArgument, "axis ", orig, " is repeated");
    seen[static_cast<size_t>(a)] = true;
  }
  return Status::ok();
}

// Outputs that alias their input's bytes under new dims (Reshape, Flatten, Squeeze, Unsqueeze).
Status copy_with_dims(OpContext& ctx, const TensorView& x, const std::vector<int64_t>& dims) {
  int64_t n = 0;
  if (!dims_numel(dims, &n) || n != x.numel())
    return ctx.error(StatusCode::kShape, "cannot view input of dims ", dims_string(x.dims), " (",
                     x.numel(), " elements) as ", dims_string(dims));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x.dtype, "input 0"));
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x.dtype, dims, &out));
  if (x.bytes() > 0) std::memcpy(out->data, x.data, x.bytes());
  return Status::ok();
}

// Writes the value v (converted) into element i of a tensor of dtype t; false for dtypes
// visit_dtype does not know.
bool store_double(DType t, void* data, int64_t i, double v) {
  return visit_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    static_cast<T*>(data)[i] = convert<T>(static_cast<compute_t<T>>(v));
  });
}

// Three-way comparison that orders NaN after every number and equal to itself.
template <typename C>
int compare_values(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) return na == nb ? 0 : (na ? 1 : -1);
  }
  return a < b ? -1 : (b < a ? 1 : 0);
}

}  // namespace

// ---- shape queries ---------------------------------------------------------------------------

Status kernel_Shape(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  const int64_t rank = static_cast<int64_t>(x->dims.size());
  // Shape-15 start/end: negative counts from the back, then clamped to [0, rank].
  auto clamp_end = [rank](int64_t v) {
    if (v < 0) v += rank;
    return std::clamp<int64_t>(v, 0, rank);
  };
  const int64_t start = clamp_end(ctx.attrs().get_int("start", 0));
  const int64_t end = ctx.attrs().has("end") ? clamp_end(ctx.attrs().get_int("end", rank)) : rank;
  const int64_t n = std::max<int64_t>(0, end - start);
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, DType::Int64, {n}, &out));
  for (int64_t i = 0; i < n; ++i) out->as<int64_t>()[i] = x->dims[static_cast<size_t>(start + i)];
  return Status::ok();
}

// cuvil::SymbolicInts (ir/symbolic_ints.h): integer expressions over the dims of its inputs.
// Every attribute comes from the package, so each is checked before use.
Status kernel_SymbolicInts(OpContext& ctx) {
  const AttrReader& a = ctx.attrs();
  const std::vector<int64_t> dims = a.get_ints("dims"), code = a.get_ints("code"), lengths = a.get_ints("lengths"),
                             shape = a.get_ints("shape");
  const int64_t to = a.get_int("to", 7);
  if (dims.size() % 2 != 0) return ctx.error(StatusCode::kInvalidArgument, "dims must hold (input, axis) pairs");
  std::vector<int64_t> slots;
  for (size_t k = 0; k < dims.size(); k += 2) {
    if (dims[k] < 0 || static_cast<uint64_t>(dims[k]) >= ctx.num_inputs() || !ctx.input(static_cast<size_t>(dims[k])))
      return ctx.error(StatusCode::kInvalidArgument, "slot ", k / 2, " reads input ", dims[k], ", which is not there");
    const TensorView* x = ctx.input(static_cast<size_t>(dims[k]));
    if (dims[k + 1] < 0 || static_cast<uint64_t>(dims[k + 1]) >= x->dims.size())
      return ctx.error(StatusCode::kInvalidArgument, "slot ", k / 2, " reads axis ", dims[k + 1], " of a rank-",
                       x->dims.size(), " input");
    slots.push_back(x->dims[static_cast<size_t>(dims[k + 1])]);
  }
  struct Int64Ops {
    bool overflow = false, by_zero = false;
    int64_t constant(int64_t v) const { return v; }
    int64_t add(int64_t x, int64_t y) {
      auto r = checked_add(x, y);
      overflow = overflow || !r;
      return r ? *r : 0;
    }
    int64_t mul(int64_t x, int64_t y) {
      auto r = checked_mul(x, y);
      overflow = overflow || !r;
      return r ? *r : 0;
    }
    int64_t floordiv(int64_t x, int64_t y) {
      if (y == 0 || (x == INT64_MIN && y == -1)) {
        by_zero = by_zero || y == 0;
        overflow = overflow || y != 0;
        return 0;
      }
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return q;
    }
    int64_t mod(int64_t x, int64_t y) {
      const int64_t q = floordiv(x, y);
      return failed() ? 0 : x - q * y;
    }
    int64_t min(int64_t x, int64_t y) const { return std::min(x, y); }
    int64_t max(int64_t x, int64_t y) const { return std::max(x, y); }
    bool failed() const { return overflow || by_zero; }
  } ops;
  std::vector<int64_t> values;
  const std::string problem = symints::evaluate(code, lengths, slots, ops, &values);
  if (!problem.empty()) return ctx.error(StatusCode::kInvalidArgument, "malformed expressions: ", problem);
  if (ops.by_zero) return ctx.error(StatusCode::kRuntime, "an expression divides by zero");
  if (ops.overflow) return ctx.error(StatusCode::kRuntime, "an expression overflows int64");
  const bool scalar = shape.empty();
  if (scalar ? values.size() != 1 : (shape.size() != 1 || shape[0] != static_cast<int64_t>(values.size())))
    return ctx.error(StatusCode::kInvalidArgument, "shape does not hold the ", values.size(), " elements");
  if (to != static_cast<int64_t>(DType::Int64) && to != static_cast<int64_t>(DType::Int32))
    return ctx.error(StatusCode::kInvalidArgument, "to must be int64 or int32, got ", to);
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, static_cast<DType>(to), shape, &out));
  for (size_t i = 0; i < values.size(); ++i) {
    if (to == static_cast<int64_t>(DType::Int64)) {
      out->as<int64_t>()[i] = values[i];
    } else {
      if (values[i] < INT32_MIN || values[i] > INT32_MAX)
        return ctx.error(StatusCode::kRuntime, "element ", i, " = ", values[i], " does not fit int32");
      out->as<int32_t>()[i] = static_cast<int32_t>(values[i]);
    }
  }
  return Status::ok();
}

Status kernel_Size(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, DType::Int64, {}, &out));
  out->as<int64_t>()[0] = x->numel();
  return Status::ok();
}

// ---- views: Reshape, Flatten, Squeeze, Unsqueeze --------------------------------------------

Status kernel_Reshape(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  std::vector<int64_t> shape;
  if (ctx.opset() >= 5) {
    const TensorView* s = nullptr;
    CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &s));
    if (!read_int_tensor(s, &shape))
      return ctx.error(StatusCode::kInvalidArgument, "input 'shape' has dtype ",
                       dtype_name(s->dtype), "; expected int64");
  } else {
    shape = ctx.attrs().get_ints("shape");
  }
  const bool allowzero = ctx.attrs().get_int("allowzero", 0) != 0;
  std::vector<int64_t> dims(shape.size());
  int64_t infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t d = shape[i];
    if (d == 0 && !allowzero) {
      if (i >= x->dims.size())
        return ctx.error(StatusCode::kShape, "shape entry ", i,
                         " is 0 (copy the input dim) but the input has rank ", x->dims.size());
      d = x->dims[i];
    } else if (d == -1) {
      if (infer_at >= 0)
        return ctx.error(StatusCode::kShape, "shape ", dims_string(shape), " has more than one -1");
      infer_at = static_cast<int64_t>(i);
      continue;
    } else if (d < 0) {
      return ctx.error(StatusCode::kShape, "shape entry ", i, " is ", d);
    }
    dims[i] = d;
    auto k = checked_mul(known, d);
    if (!k) return ctx.error(StatusCode::kShape, "shape ", dims_string(shape), " overflows");
    known = *k;
  }
  const int64_t numel = x->numel();
  if (infer_at >= 0) {
    if (known == 0 || numel % known != 0)
      return ctx.error(StatusCode::kShape, "cannot infer the -1 of shape ", dims_string(shape),
                       " for ", numel, " elements (input dims ", dims_string(x->dims), ")");
    dims[static_cast<size_t>(infer_at)] = numel / known;
  }
  return copy_with_dims(ctx, *x, dims);
}

Status kernel_Flatten(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  const int64_t rank = static_cast<int64_t>(x->dims.size());
  int64_t axis = ctx.attrs().get_int("axis", 1);
  if (axis < -rank || axis > rank)
    return ctx.error(StatusCode::kInvalidArgument, "axis ", axis, " is out of range for rank ",
                     rank);
  if (axis < 0) axis += rank;
  const int64_t outer = product(x->dims, 0, static_cast<size_t>(axis));
  const int64_t inner = product(x->dims, static_cast<size_t>(axis), x->dims.size());
  return copy_with_dims(ctx, *x, {outer, inner});
}

Status kernel_Squeeze(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  const int64_t rank = static_cast<int64_t>(x->dims.size());
  std::vector<int64_t> axes;
  bool given = false;
  CUVIL_RETURN_IF_ERROR(read_axes(ctx, ctx.opset() >= 13, 1, &axes, &given));
  std::vector<bool> drop(static_cast<size_t>(rank), false);
  if (given && !axes.empty()) {  // an empty list squeezes every unit axis, as when absent
    CUVIL_RETURN_IF_ERROR(normalize_axes(ctx, &axes, rank));
    for (int64_t a : axes) {
      if (x->dims[static_cast<size_t>(a)] != 1)
        return ctx.error(StatusCode::kShape, "cannot squeeze axis ", a, " of size ",
                         x->dims[static_cast<size_t>(a)]);
      drop[static_cast<size_t>(a)] = true;
    }
  } else {
    for (int64_t a = 0; a < rank; ++a)
      drop[static_cast<size_t>(a)] = x->dims[static_cast<size_t>(a)] == 1;
  }
  std::vector<int64_t> dims;
  for (int64_t a = 0; a < rank; ++a)
    if (!drop[static_cast<size_t>(a)]) dims.push_back(x->dims[static_cast<size_t>(a)]);
  return copy_with_dims(ctx, *x, dims);
}

Status kernel_Unsqueeze(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  std::vector<int64_t> axes;
  bool given = false;
  CUVIL_RETURN_IF_ERROR(read_axes(ctx, ctx.opset() >= 13, 1, &axes, &given));
  if (!given) return ctx.error(StatusCode::kInvalidArgument, "'axes' is missing");
  const int64_t out_rank = static_cast<int64_t>(x->dims.size() + axes.size());
  CUVIL_RETURN_IF_ERROR(normalize_axes(ctx, &axes, out_rank));
  std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
  for (int64_t a : axes) inserted[static_cast<size_t>(a)] = true;
  std::vector<int64_t> dims;
  size_t next = 0;
  for (int64_t a = 0; a < out_rank; ++a)
    dims.push_back(inserted[static_cast<size_t>(a)] ? 1 : x->dims[next++]);
  return copy_with_dims(ctx, *x, dims);
}

// ---- Concat, Split ---------------------------------------------------------------------------

Status kernel_Concat(OpContext& ctx) {
  if (ctx.num_inputs() == 0) return ctx.error(StatusCode::kInvalidArgument, "has no inputs");
  const TensorView* first = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &first));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, first->dtype, "input 0"));
  const int64_t rank = static_cast<int64_t>(first->dims.size());
  if (!ctx.attrs().has("axis"))
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'axis' is missing");
  int64_t axis = 0;
  if (!normalize_axis(ctx.attrs().get_int("axis", 0), rank, &axis))
    return ctx.error(StatusCode::kInvalidArgument, "axis ", ctx.attrs().get_int("axis", 0),
                     " is out of range for rank ", rank);
  const size_t ax = static_cast<size_t>(axis);
  std::vector<int64_t> dims = first->dims;
  dims[ax] = 0;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const TensorView* t = nullptr;
    CUVIL_RETURN_IF_ERROR(require_input(ctx, i, &t));
    if (t->dtype != first->dtype)
      return ctx.error(StatusCode::kShape, "input ", i, " has dtype ", dtype_name(t->dtype),
                       ", input 0 has ", dtype_name(first->dtype));
    bool same = t->dims.size() == first->dims.size();
    for (size_t d = 0; same && d < t->dims.size(); ++d)
      same = d == ax || t->dims[d] == first->dims[d];
    if (!same)
      return ctx.error(StatusCode::kShape, "input ", i, " has dims ", dims_string(t->dims),
                       ", which do not match input 0 ", dims_string(first->dims), " outside axis ",
                       axis);
    auto s = checked_add(dims[ax], t->dims[ax]);
    if (!s) return ctx.error(StatusCode::kShape, "concatenated axis overflows");
    dims[ax] = *s;
  }
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, first->dtype, dims, &out));
  const int bits = dtype_bits(first->dtype);
  const int64_t outer = product(dims, 0, ax);
  const int64_t inner = product(dims, ax + 1, dims.size());
  const int64_t out_block = dims[ax] * inner;
  int64_t offset = 0;  // start of this input's block inside each output block
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const TensorView* t = ctx.input(i);
    const int64_t block = t->dims[ax] * inner;
    for (int64_t o = 0; o < outer; ++o)
      copy_elems(out->data, o * out_block + offset, t->data, o * block, block, bits);
    offset += block;
  }
  return Status::ok();
}

Status kernel_Split(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x->dtype, "input 0"));
  const size_t n_out = ctx.num_outputs();
  if (n_out == 0) return ctx.error(StatusCode::kInvalidArgument, "has no outputs");
  const int64_t rank = static_cast<int64_t>(x->dims.size());
  int64_t axis = 0;
  if (!normalize_axis(ctx.attrs().get_int("axis", 0), rank, &axis))
    return ctx.error(StatusCode::kInvalidArgument, "axis ", ctx.attrs().get_int("axis", 0),
                     " is out of range for rank ", rank);
  const size_t ax = static_cast<size_t>(axis);
  const int64_t dim = x->dims[ax];
  std::vector<int64_t> sizes;
  bool given = false;
  if (ctx.opset() >= 13) {
    if (const TensorView* s = ctx.input(1); s && s->numel() > 0) {  // empty counts as absent
      if (!read_int_tensor(s, &sizes))
        return ctx.error(StatusCode::kInvalidArgument, "input 'split' has dtype ",
                         dtype_name(s->dtype), "; expected int64");
      given = true;
    }
  } else if (ctx.attrs().has("split")) {
    sizes = ctx.attrs().get_ints("split");
    given = true;
  }
  const int64_t n = static_cast<int64_t>(n_out);
  if (!given) {
    if (dim % n == 0) {
      sizes.assign(n_out, dim / n);
    } else if (ctx.opset() >= 18 && ctx.attrs().has("num_outputs")) {
      // Split-18 num_outputs: equal chunks of ceil(dim / n), the last one smaller.
      const int64_t chunk = dim / n + 1;
      sizes.assign(n_out, chunk);
      sizes.back() = dim - chunk * (n - 1);
      if (sizes.back() < 0)
        return ctx.error(StatusCode::kShape, "axis ", axis, " of size ", dim,
                         " cannot be split into ", n, " chunks");
    } else {
      return ctx.error(StatusCode::kShape, "axis ", axis, " of size ", dim,
                       " does not split evenly into ", n, " outputs");
    }
  }
  if (sizes.size() != n_out)
    return ctx.error(StatusCode::kShape, "'split' has ", sizes.size(), " sizes for ", n_out,
                     " outputs");
  int64_t sum = 0;
  for (int64_t s : sizes) {
    if (s < 0) return ctx.error(StatusCode::kShape, "'split' has a negative size ", s);
    auto t = checked_add(sum, s);
    if (!t) return ctx.error(StatusCode::kShape, "'split' sizes overflow");
    sum = *t;
  }
  if (sum != dim)
    return ctx.error(StatusCode::kShape, "'split' sizes ", dims_string(sizes), " sum to ", sum,
                     " but axis ", axis, " has size ", dim);
  const int bits = dtype_bits(x->dtype);
  const int64_t outer = product(x->dims, 0, ax);
  const int64_t inner = product(x->dims, ax + 1, x->dims.size());
  int64_t offset = 0;
  for (size_t i = 0; i < n_out; ++i) {
    const int64_t block = sizes[i] * inner;
    if (ctx.output_wanted(i)) {
      std::vector<int64_t> dims = x->dims;
      dims[ax] = sizes[i];
      TensorView* out = nullptr;
      CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, i, x->dtype, dims, &out));
      for (int64_t o = 0; o < outer; ++o)
        copy_elems(out->data, o * block, x->data, o * dim * inner + offset, block, bits);
    }
    offset += block;
  }
  return Status::ok();
}

// ---- creation: Constant, ConstantOfShape, Range, EyeLike, OneHot ----------------------------

Status kernel_Constant(OpContext& ctx) {
  const AttrReader& a = ctx.attrs();
  TensorView* out = nullptr;
  if (const TensorView* t = a.get_tensor("value")) {
    CUVIL_RETURN_IF_ERROR(require_sized(ctx, t->dtype, "attribute 'value'"));
    CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, t->dtype, t->dims, &out));
    if (t->bytes() > 0) std::memcpy(out->data, t->data, t->bytes());
    return Status::ok();
  }
  if (a.has("value_float")) {
    CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, DType::Float, {}, &out));
    out->as<float>()[0] = a.get_float("value_float", 0.0f);
    return Status::ok();
  }
  if (a.has("value_floats")) {
    const std::vector<float> v = a.get_floats("value_floats");
    CUVIL_RETURN_IF_ERROR(
        allocate_checked(ctx, 0, DType::Float, {static_cast<int64_t>(v.size())}, &out));
    std::copy(v.begin(), v.end(), out->as<float>());
    return Status::ok();
  }
  if (a.has("value_int")) {
    CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, DType::Int64, {}, &out));
    out->as<int64_t>()[0] = a.get_int("value_int", 0);
    return Status::ok();
  }
  if (a.has("value_ints")) {
    const std::vector<int64_t> v = a.get_ints("value_ints");
    CUVIL_RETURN_IF_ERROR(
        allocate_checked(ctx, 0, DType::Int64, {static_cast<int64_t>(v.size())}, &out));
    std::copy(v.begin(), v.end(), out->as<int64_t>());
    return Status::ok();
  }
  return ctx.error(StatusCode::kUnsupported,
                   "needs one of the attributes value, value_float(s), value_int(s) (string and "
                   "sparse values are not supported)");
}

Status kernel_ConstantOfShape(OpContext& ctx) {
  const TensorView* s = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &s));
  std::vector<int64_t> dims;
  if (!read_int_tensor(s, &dims))
    return ctx.error(StatusCode::kInvalidArgument, "input 'input' has dtype ", dtype_name(s->dtype),
                     "; expected int64");
  for (int64_t d : dims)
    if (d < 0)
      return ctx.error(StatusCode::kShape, "shape ", dims_string(dims), " has a negative dim");
  const TensorView* value = ctx.attrs().get_tensor("value");
  const float zero = 0.0f;
  DType dtype = DType::Float;
  const void* elem = &zero;
  if (value) {
    if (value->numel() != 1)
      return ctx.error(StatusCode::kInvalidArgument,
                       "attribute 'value' must hold one element, has ", value->numel());
    CUVIL_RETURN_IF_ERROR(require_sized(ctx, value->dtype, "attribute 'value'"));
    dtype = value->dtype;
    elem = value->data;
  }
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, dtype, dims, &out));
  fill_elems(out->data, 0, out->numel(), elem, dtype_bits(dtype));
  return Status::ok();
}

Status kernel_Range(OpContext& ctx) {
  const TensorView *start_t = nullptr, *limit_t = nullptr, *delta_t = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &start_t));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &limit_t));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 2, &delta_t));
  const DType dtype = start_t->dtype;
  if (limit_t->dtype != dtype || delta_t->dtype != dtype)
    return ctx.error(StatusCode::kInvalidArgument, "inputs have dtypes ", dtype_name(dtype), ", ",
                     dtype_name(limit_t->dtype), ", ", dtype_name(delta_t->dtype),
                     "; they must agree");
  if (start_t->numel() != 1 || limit_t->numel() != 1 || delta_t->numel() != 1)
    return ctx.error(StatusCode::kInvalidArgument, "start, limit and delta must be scalars");
  Status st;
  const bool known = visit_dtype<kNumericTypes>(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const C start = convert<C>(start_t->as<T>()[0]);
    const C limit = convert<C>(limit_t->as<T>()[0]);
    const C delta = convert<C>(delta_t->as<T>()[0]);
    if (delta == C(0)) {
      st = ctx.error(StatusCode::kInvalidArgument, "delta is 0");
      return;
    }
    int64_t n = 0;
    if constexpr (std::is_floating_point_v<C>) {
      const double count = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) /
                                     static_cast<double>(delta));
      if (std::isnan(count)) {
        st = ctx.error(StatusCode::kInvalidArgument, "range [", start, ", ", limit, ") by ", delta,
                       " is not a number of elements");
        return;
      }
      if (count > 9.0e18) {
        st = ctx.error(StatusCode::kOutOfMemory, "range [", start, ", ", limit, ") by ", delta,
                       " has too many elements");
        return;
      }
      n = count > 0 ? static_cast<int64_t>(count) : 0;
    } else {
      // Exact integer ceil((limit - start) / delta) in 128 bits.
      const __int128 diff = static_cast<__int128>(limit) - static_cast<__int128>(start);
      const __int128 d = static_cast<__int128>(delta);
      __int128 q = 0;
      if ((diff > 0 && d > 0) || (diff < 0 && d < 0)) {
        const __int128 a = diff > 0 ? diff : -diff, b = d > 0 ? d : -d;
        q = (a + b - 1) / b;
      }
      if (q > static_cast<__int128>(INT64_MAX)) {
        st = ctx.error(StatusCode::kOutOfMemory, "range has too many elements");
        return;
      }
      n = static_cast<int64_t>(q);
    }
    TensorView* out = nullptr;
    st = allocate_checked(ctx, 0, dtype, {n}, &out);
    if (!st.is_ok()) return;
    T* o = out->as<T>();
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_floating_point_v<C>) {
        o[i] = convert<T>(static_cast<C>(static_cast<double>(start) +
                                         static_cast<double>(i) * static_cast<double>(delta)));
      } else {
        o[i] = static_cast<T>(static_cast<__int128>(start) +
                              static_cast<__int128>(i) * static_cast<__int128>(delta));
      }
    }
  });
  if (!known)
    return ctx.error(StatusCode::kUnsupported, "dtype ", dtype_name(dtype), " is not supported");
  return st;
}

Status kernel_EyeLike(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  if (x->dims.size() != 2)
    return ctx.error(StatusCode::kShape, "input must be 2-D, has dims ", dims_string(x->dims));
  DType dtype = x->dtype;
  if (ctx.attrs().has("dtype")) {
    const int64_t code = ctx.attrs().get_int("dtype", 0);
    auto t = code >= INT32_MIN && code <= INT32_MAX ? dtype_from_onnx(static_cast<int32_t>(code))
                                                    : std::nullopt;
    if (!t)
      return ctx.error(StatusCode::kInvalidArgument, "attribute 'dtype' is an unknown type code ",
                       code);
    dtype = *t;
  }
  const int64_t k = ctx.attrs().get_int("k", 0);
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, dtype, "output"));
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, dtype, x->dims, &out));
  if (out->bytes() > 0) std::memset(out->data, 0, out->bytes());  // zero bits are 0 in every dtype
  const int64_t rows = x->dims[0], cols = x->dims[1];
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t j = i + k;
    if (j < 0 || j >= cols) continue;
    if (!store_double(dtype, out->data, i * cols + j, 1.0))
      return ctx.error(StatusCode::kUnsupported, "dtype ", dtype_name(dtype), " is not supported");
  }
  return Status::ok();
}

Status kernel_OneHot(OpContext& ctx) {
  const TensorView *indices = nullptr, *depth_t = nullptr, *values = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &indices));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &depth_t));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 2, &values));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, values->dtype, "input 'values'"));
  if (values->numel() != 2)
    return ctx.error(StatusCode::kInvalidArgument,
                     "input 'values' must hold 2 elements (off, on), has ", values->numel());
  double depth_value = 0;
  if (!read_scalar(depth_t, &depth_value) || !std::isfinite(depth_value))
    return ctx.error(StatusCode::kInvalidArgument, "input 'depth' must be one finite number");
  if (depth_value < 1 || depth_value > 9.0e18)
    return ctx.error(StatusCode::kInvalidArgument, "input 'depth' is ", depth_value,
                     "; it must be at least 1");
  const int64_t depth = static_cast<int64_t>(depth_value);
  const int64_t rank = static_cast<int64_t>(indices->dims.size());
  int64_t axis = 0;
  if (!normalize_axis(ctx.attrs().get_int("axis", -1), rank + 1, &axis))
    return ctx.error(StatusCode::kInvalidArgument, "axis ", ctx.attrs().get_int("axis", -1),
                     " is out of range for output rank ", rank + 1);
  std::vector<int64_t> dims = indices->dims;
  dims.insert(dims.begin() + axis, depth);
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, values->dtype, dims, &out));
  const int bits = dtype_bits(values->dtype);
  const uint8_t* vbytes = static_cast<const uint8_t*>(values->data);
  // The on value is element 1; for 4-bit types fill_elems/copy_elems take nibble indices.
  fill_elems(out->data, 0, out->numel(), vbytes, bits);
  const int64_t outer = product(indices->dims, 0, static_cast<size_t>(axis));
  const int64_t inner = product(indices->dims, static_cast<size_t>(axis), indices->dims.size());
  std::vector<double> idx(static_cast<size_t>(indices->numel()));
  bool numeric = true;
  for (size_t i = 0; i < idx.size() && numeric; ++i) {
    idx[i] = load_as_double(*indices, static_cast<int64_t>(i));
    numeric = !(std::isnan(idx[i]) && !dtype_is_float(indices->dtype));
  }
  if (!numeric)
    return ctx.error(StatusCode::kUnsupported, "input 'indices' has dtype ",
                     dtype_name(indices->dtype));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const double v = std::trunc(idx[static_cast<size_t>(o * inner + i)]);
      // ONNX: indices in [-depth, depth) select (negative ones wrap once); anything else,
      // NaN included, leaves the whole row at the off value.
      if (!(v >= -static_cast<double>(depth) && v < static_cast<double>(depth))) continue;
      int64_t c = static_cast<int64_t>(v);
      if (c < 0) c += depth;
      copy_elems(out->data, (o * depth + c) * inner + i, vbytes, 1, 1, bits);
    }
  }
  return Status::ok();
}

// ---- data-dependent selection: NonZero, Compress, TopK, Unique ------------------------------

Status kernel_NonZero(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  const int64_t n = x->numel();
  std::vector<int64_t> hits;
  const bool known = visit_dtype(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* p = x->as<T>();
    for (int64_t i = 0; i < n; ++i)
      if (convert<C>(p[i]) != C(0)) hits.push_back(i);
  });
  if (!known)
    return ctx.error(StatusCode::kUnsupported, "dtype ", dtype_name(x->dtype), " is not supported");
  // numpy's nonzero does atleast_1d: a scalar has one coordinate row.
  const std::vector<int64_t> dims = x->dims.empty() ? std::vector<int64_t>{1} : x->dims;
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t count = static_cast<int64_t>(hits.size());
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, DType::Int64, {rank, count}, &out));
  int64_t* o = out->as<int64_t>();
  for (int64_t j = 0; j < count; ++j) {
    int64_t flat = hits[static_cast<size_t>(j)];
    for (int64_t d = rank; d-- > 0;) {
      o[d * count + j] = flat % dims[static_cast<size_t>(d)];
      flat /= dims[static_cast<size_t>(d)];
    }
  }
  return Status::ok();
}

Status kernel_Compress(OpContext& ctx) {
  const TensorView *x = nullptr, *cond = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &cond));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x->dtype, "input 0"));
  if (cond->dims.size() != 1)
    return ctx.error(StatusCode::kShape, "input 'condition' must be 1-D, has dims ",
                     dims_string(cond->dims));
  std::vector<bool> keep(static_cast<size_t>(cond->numel()));
  const bool known = visit_dtype(cond->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < keep.size(); ++i)
      keep[i] = convert<compute_t<T>>(cond->as<T>()[i]) != compute_t<T>(0);
  });
  if (!known)
    return ctx.error(StatusCode::kUnsupported, "input 'condition' has dtype ",
                     dtype_name(cond->dtype));
  const bool has_axis = ctx.attrs().has("axis");
  int64_t axis = 0;
  std::vector<int64_t> in_dims = x->dims;
  if (!has_axis) {
    in_dims = {x->numel()};
  } else if (!normalize_axis(ctx.attrs().get_int("axis", 0), static_cast<int64_t>(x->dims.size()),
                             &axis)) {
    return ctx.error(StatusCode::kInvalidArgument, "axis ", ctx.attrs().get_int("axis", 0),
                     " is out of range for rank ", x->dims.size());
  }
  const size_t ax = static_cast<size_t>(axis);
  const int64_t dim = in_dims[ax];
  std::vector<int64_t> selected;
  for (size_t i = 0; i < keep.size(); ++i) {
    if (!keep[i]) continue;
    if (static_cast<int64_t>(i) >= dim)
      return ctx.error(StatusCode::kRuntime, "condition selects index ", i, " out of range [0, ",
                       dim - 1, "] of axis ", axis);
    selected.push_back(static_cast<int64_t>(i));
  }
  std::vector<int64_t> dims = in_dims;
  dims[ax] = static_cast<int64_t>(selected.size());
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, dims, &out));
  const int bits = dtype_bits(x->dtype);
  const int64_t outer = product(in_dims, 0, ax);
  const int64_t inner = product(in_dims, ax + 1, in_dims.size());
  const int64_t kept = static_cast<int64_t>(selected.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < kept; ++j)
      copy_elems(out->data, (o * kept + j) * inner, x->data,
                 (o * dim + selected[static_cast<size_t>(j)]) * inner, inner, bits);
  return Status::ok();
}

Status kernel_TopK(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  int64_t k = 0;
  if (ctx.opset() >= 10) {
    const TensorView* kt = nullptr;
    CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &kt));
    std::vector<int64_t> kv;
    if (!read_int_tensor(kt, &kv) || kv.size() != 1)
      return ctx.error(StatusCode::kInvalidArgument, "input 'K' must hold one integer");
    k = kv[0];
  } else {
    if (!ctx.attrs().has("k"))
      return ctx.error(StatusCode::kInvalidArgument, "attribute 'k' is missing");
    k = ctx.attrs().get_int("k", 0);
  }
  const int64_t rank = static_cast<int64_t>(x->dims.size());
  int64_t axis = 0;
  if (!normalize_axis(ctx.attrs().get_int("axis", -1), rank, &axis))
    return ctx.error(StatusCode::kInvalidArgument, "axis ", ctx.attrs().get_int("axis", -1),
                     " is out of range for rank ", rank);
  const size_t ax = static_cast<size_t>(axis);
  const int64_t dim = x->dims[ax];
  if (k < 0 || k > dim)
    return ctx.error(StatusCode::kRuntime, "k is ", k, " but axis ", axis, " has ", dim,
                     " elements");
  const bool largest = ctx.attrs().get_int("largest", 1) != 0;
  std::vector<int64_t> dims = x->dims;
  dims[ax] = k;
  TensorView *values = nullptr, *indices = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, dims, &values));
  if (ctx.num_outputs() > 1 && ctx.output_wanted(1))
    CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 1, DType::Int64, dims, &indices));
  const int64_t outer = product(x->dims, 0, ax);
  const int64_t inner = product(x->dims, ax + 1, x->dims.size());
  const bool known = visit_dtype<kNumericTypes>(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* in = x->as<T>();
    T* vout = values->as<T>();
    std::vector<std::pair<C, int64_t>> row(static_cast<size_t>(dim));
    // Ties keep the lower index first; NaN counts as the largest value.
    auto before = [largest](const std::pair<C, int64_t>& a, const std::pair<C, int64_t>& b) {
      const int c = compare_values(a.first, b.first);
      if (c != 0) return largest ? c > 0 : c < 0;
      return a.second < b.second;
    };
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        for (int64_t j = 0; j < dim; ++j)
          row[static_cast<size_t>(j)] = {convert<C>(in[(o * dim + j) * inner + i]), j};
        std::partial_sort(row.begin(), row.begin() + k, row.end(), before);
        for (int64_t j = 0; j < k; ++j) {
          const int64_t at = (o * k + j) * inner + i;
          const int64_t src = row[static_cast<size_t>(j)].second;
          vout[at] = in[(o * dim + src) * inner + i];
          if (indices) indices->as<int64_t>()[at] = src;
        }
      }
    }
  });
  if (!known)
    return ctx.error(StatusCode::kUnsupported, "dtype ", dtype_name(x->dtype), " is not supported");
  return Status::ok();
}

Status kernel_Unique(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  const bool sorted = ctx.attrs().get_int("sorted", 1) != 0;
  const bool has_axis = ctx.attrs().has("axis");
  std::vector<int64_t> in_dims = x->dims;
  int64_t axis = 0;
  if (!has_axis) {
    in_dims = {x->numel()};
  } else if (!normalize_axis(ctx.attrs().get_int("axis", 0), static_cast<int64_t>(x->dims.size()),
                             &axis)) {
    return ctx.error(StatusCode::kInvalidArgument, "axis ", ctx.attrs().get_int("axis", 0),
                     " is out of range for rank ", x->dims.size());
  }
  const size_t ax = static_cast<size_t>(axis);
  const int64_t n = in_dims[ax];
  const int64_t outer = product(in_dims, 0, ax);
  const int64_t inner = product(in_dims, ax + 1, in_dims.size());
  // Slice j is the sub-tensor at index j of the axis; slices compare lexicographically.
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::vector<int64_t> group_of(static_cast<size_t>(n));
  std::vector<int64_t> group_start;  // positions in `order` where a new group begins
  const bool known = visit_dtype(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* p = x->as<T>();
    auto compare = [&](int64_t a, int64_t b) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const int c = compare_values(convert<C>(p[(o * n + a) * inner + i]),
                                       convert<C>(p[(o * n + b) * inner + i]));
          if (c != 0) return c;
        }
      return 0;
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return compare(a, b) < 0; });
    for (size_t j = 0; j < order.size(); ++j)
      if (j == 0 || compare(order[j - 1], order[j]) != 0)
        group_start.push_back(static_cast<int64_t>(j));
  });
  if (!known)
    return ctx.error(StatusCode::kUnsupported, "dtype ", dtype_name(x->dtype), " is not supported");
  const int64_t u = static_cast<int64_t>(group_start.size());
  // Groups in output order: ascending values when sorted, else by first occurrence. The
  // stable sort leaves each group's first occurrence at its start.
  std::vector<int64_t> groups(static_cast<size_t>(u));
  std::iota(groups.begin(), groups.end(), 0);
  auto first_of = [&](int64_t g) {
    return order[static_cast<size_t>(group_start[static_cast<size_t>(g)])];
  };
  if (!sorted)
    std::sort(groups.begin(), groups.end(),
              [&](int64_t a, int64_t b) { return first_of(a) < first_of(b); });
  std::vector<int64_t> counts(static_cast<size_t>(u));
  for (int64_t q = 0; q < u; ++q) {
    const int64_t g = groups[static_cast<size_t>(q)];
    const int64_t begin = group_start[static_cast<size_t>(g)];
    const int64_t end = g + 1 < u ? group_start[static_cast<size_t>(g + 1)] : n;
    counts[static_cast<size_t>(q)] = end - begin;
    for (int64_t j = begin; j < end; ++j)
      group_of[static_cast<size_t>(order[static_cast<size_t>(j)])] = q;
  }
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x->dtype, "input 0"));
  std::vector<int64_t> y_dims = in_dims;
  y_dims[ax] = u;
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, y_dims, &out));
  const int bits = dtype_bits(x->dtype);
  for (int64_t q = 0; q < u; ++q) {
    const int64_t src = first_of(groups[static_cast<size_t>(q)]);
    for (int64_t o = 0; o < outer; ++o)
      copy_elems(out->data, (o * u + q) * inner, x->data, (o * n + src) * inner, inner, bits);
  }
  if (ctx.num_outputs() > 1 && ctx.output_wanted(1)) {
    CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 1, DType::Int64, {u}, &out));
    for (int64_t q = 0; q < u; ++q)
      out->as<int64_t>()[q] = first_of(groups[static_cast<size_t>(q)]);
  }
  if (ctx.num_outputs() > 2 && ctx.output_wanted(2)) {
    CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 2, DType::Int64, {n}, &out));
    std::copy(group_of.begin(), group_of.end(), out->as<int64_t>());
  }
  if (ctx.num_outputs() > 3 && ctx.output_wanted(3)) {
    CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 3, DType::Int64, {u}, &out));
    std::copy(counts.begin(), counts.end(), out->as<int64_t>());
  }
  return Status::ok();
}

}  // namespace cuvil::rt::ops
