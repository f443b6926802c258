// Kernels of the ai.onnx.ml ops cuvil computes: Binarizer, ArrayFeatureExtractor, and
// cuvil::DecisionForest, the walk of a tree ensemble's tables (ir/fused_ops.h; the importer,
// frontend/ml_ops.cpp, turns TreeEnsemble, TreeEnsembleRegressor and TreeEnsembleClassifier
// into them). The importer checks the tables, but a package is data: the walk checks every
// index it follows (child, feature, member range, leaf range, target) and stops a walk longer
// than the node count (a cycle), so a corrupted table is a run error naming the row, never an
// out-of-range read or an endless loop.
#include <atomic>
#include <cfloat>
#include <cmath>

#include "runtime/cpu/ops/kernel_util.h"

namespace cuvil::rt::ops {
namespace {

template <typename T>
double feature_value(const void* x, int64_t i) {
  return static_cast<double>(convert<compute_t<T>>(static_cast<const T*>(x)[i]));
}

// What the walk found wrong, with the row, for the error message (the first one wins).
struct WalkError {
  std::atomic<int> code{0};
  int64_t row = 0, at = 0;
  void set(int c, int64_t r, int64_t a) {
    int expected = 0;
    if (code.compare_exchange_strong(expected, c)) {
      row = r;
      at = a;
    }
  }
};
enum WalkErrorCode { kNoError = 0, kBadNode, kBadFeature, kBadMembers, kCycle, kBadLeaf, kBadTarget };

// The ONNX reference's erf inverse approximation (and ONNX Runtime's), for PROBIT.
double erf_inv_approx(double x) {
  const double sgn = x < 0 ? -1.0 : 1.0;
  x = (1.0 - x) * (1.0 + x);
  if (x == 0) return 0;
  const double log = std::log(x);
  const double v = 2.0 / (M_PI * 0.147) + 0.5 * log;
  const double v2 = 1.0 / 0.147 * log;
  const double v3 = -v + std::sqrt(v * v - v2);
  return sgn * std::sqrt(v3);
}

void post_transform(int64_t kind, double* s, int64_t n) {
  switch (kind) {
    case 1: {  // SOFTMAX
      double mx = -INFINITY, sum = 0;
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, s[i]);
      for (int64_t i = 0; i < n; ++i) sum += (s[i] = std::exp(s[i] - mx));
      for (int64_t i = 0; i < n; ++i) s[i] /= sum;
      break;
    }
    case 2:  // LOGISTIC
      for (int64_t i = 0; i < n; ++i) s[i] = 1.0 / (1.0 + std::exp(-s[i]));
      break;
    case 3: {  // SOFTMAX_ZERO: zeros stay (scaled) zeros
      double mx = -INFINITY, sum = 0;
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, s[i]);
      const double scale = std::exp(-mx);
      for (int64_t i = 0; i < n; ++i) {
        s[i] = s[i] > 1e-7 || s[i] < -1e-7 ? std::exp(s[i] - mx) : s[i] * scale;
        sum += s[i];
      }
      for (int64_t i = 0; i < n; ++i) s[i] = sum == 0 ? 0.5 : s[i] / sum;
      break;
    }
    case 4:  // PROBIT
      for (int64_t i = 0; i < n; ++i) s[i] = 1.41421356 * erf_inv_approx(s[i] * 2 - 1);
      break;
    default: break;
  }
}

struct ForestView {
  const int32_t* nodes;
  const double* splits;
  const double* members;
  const int32_t *roots, *offsets, *targets;
  const double* weights;
  const double* base;
  int64_t m, k, trees, leaves, entries, base_count;
};

// Walks every tree for one row and aggregates into acc[0, n_targets); false with `err` set on
// a bad table.
bool walk_row(const ForestView& f, double (*load)(const void*, int64_t), const void* x, int64_t row, int64_t features,
              int64_t n_targets, int64_t aggregate, double* acc, WalkError& err) {
  const int64_t base = row * features;
  for (int64_t t = 0; t < f.trees; ++t) {
    int64_t ref = f.roots[t];
    for (int64_t steps = 0; ref >= 0; ++steps) {
      if (ref >= f.m) return err.set(kBadNode, row, ref), false;
      if (steps > f.m) return err.set(kCycle, row, t), false;
      const int32_t* nd = f.nodes + ref * 6;
      if (nd[0] < 0 || nd[0] >= features) return err.set(kBadFeature, row, ref), false;
      const double v = load(x, base + nd[0]), s = f.splits[ref];
      bool go = false;
      switch (nd[3] & 7) {
        case 0: go = v <= s; break;
        case 1: go = v < s; break;
        case 2: go = v >= s; break;
        case 3: go = v > s; break;
        case 4: go = v == s; break;
        case 5: go = v != s; break;
        case 6: {
          if (nd[4] < 0 || nd[4] > nd[5] || nd[5] > f.k) return err.set(kBadMembers, row, ref), false;
          for (int32_t i = nd[4]; i < nd[5] && !go; ++i) go = f.members[i] == v;
          break;
        }
        default: return err.set(kBadNode, row, ref), false;
      }
      if (!go && (nd[3] & 8) && std::isnan(v)) go = true;
      ref = go ? nd[1] : nd[2];
    }
    const int64_t leaf = -ref - 1;
    if (leaf >= f.leaves) return err.set(kBadLeaf, row, leaf), false;
    const int64_t b = f.offsets[leaf], e = f.offsets[leaf + 1];
    if (b < 0 || b > e || e > f.entries) return err.set(kBadLeaf, row, leaf), false;
    for (int64_t j = b; j < e; ++j) {
      const int32_t target = f.targets[j];
      if (target < 0 || target >= n_targets) return err.set(kBadTarget, row, j), false;
      const double w = f.weights[j];
      double& a = acc[target];
      a = aggregate == 2 ? std::min(a, w) : aggregate == 3 ? std::max(a, w) : a + w;
    }
  }
  return true;
}

}  // namespace

Status kernel_Binarizer(OpContext& ctx) {
  const TensorView* x;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  const double threshold = ctx.attrs().get_float("threshold", 0.f);
  TensorView* y;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, x->dims, &y));
  bool done = visit_dtype<kFloatTypes | kSignedInts>(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x->as<T>();
    T* out = y->as<T>();
    const T one = convert<T>(compute_t<T>(1)), zero = convert<T>(compute_t<T>(0));
    for (int64_t i = 0, n = x->numel(); i < n; ++i)
      out[i] = static_cast<double>(convert<compute_t<T>>(in[i])) > threshold ? one : zero;
  });
  if (!done) return ctx.error(StatusCode::kUnsupported, "X has dtype ", dtype_name(x->dtype));
  return Status::ok();
}

Status kernel_ArrayFeatureExtractor(OpContext& ctx) {
  const TensorView *x, *y;
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 0, &x));
  CUVIL_RETURN_IF_ERROR(require_input(ctx, 1, &y));
  CUVIL_RETURN_IF_ERROR(require_sized(ctx, x->dtype, "X"));
  if (y->dtype != DType::Int64) return ctx.error(StatusCode::kInvalidArgument, "Y must be int64, not ", dtype_name(y->dtype));
  if (x->dims.empty()) return ctx.error(StatusCode::kShape, "X is a scalar; it must have rank >= 1");
  const int64_t features = x->dims.back(), count = y->numel(), rows = x->numel() / std::max<int64_t>(features, 1);
  std::vector<int64_t> dims = x->dims.size() == 1 ? std::vector<int64_t>{1, count} : x->dims;
  dims.back() = count;
  const int64_t* idx = y->as<int64_t>();
  for (int64_t j = 0; j < count; ++j)
    if (idx[j] < 0 || idx[j] >= features)
      return ctx.error(StatusCode::kRuntime, "index Y[", j, "] = ", idx[j], " is outside X's last axis (", features, ")");
  TensorView* out;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, x->dtype, dims, &out));
  const int bits = dtype_bits(x->dtype);
  for (int64_t r = 0; r < (features == 0 ? 0 : rows); ++r)
    for (int64_t j = 0; j < count; ++j) copy_elems(out->data, r * count + j, x->data, r * features + idx[j], 1, bits);
  return Status::ok();
}

Status kernel_DecisionForest(OpContext& ctx) {
  const TensorView* in[7];
  for (size_t i = 0; i < 7; ++i) CUVIL_RETURN_IF_ERROR(require_input(ctx, i, &in[i]));
  const TensorView *x = in[0], *members = ctx.num_inputs() > 7 ? ctx.input(7) : nullptr,
                   *base = ctx.num_inputs() > 8 ? ctx.input(8) : nullptr;
  const DType want[] = {DType::Int32, DType::Double, DType::Int32, DType::Int32, DType::Int32, DType::Double};
  for (size_t i = 1; i < 7; ++i)
    if (in[i]->dtype != want[i - 1])
      return ctx.error(StatusCode::kInvalidArgument, "table input ", i, " is ", dtype_name(in[i]->dtype), ", not ",
                       dtype_name(want[i - 1]));
  for (const TensorView* t : {members, base})
    if (t && (t->dtype != DType::Double || (t->numel() > 0 && !t->data)))
      return ctx.error(StatusCode::kInvalidArgument, "members and base_values must be double tensors");
  ForestView f{};
  f.m = in[2]->numel();
  if (in[1]->dims.size() != 2 || in[1]->dims[1] != 6 || in[1]->dims[0] != f.m)
    return ctx.error(StatusCode::kInvalidArgument, "nodes must be [", f.m, ", 6], not ", dims_string(in[1]->dims));
  f.nodes = in[1]->as<int32_t>();
  f.splits = in[2]->as<double>();
  f.roots = in[3]->as<int32_t>();
  f.trees = in[3]->numel();
  f.offsets = in[4]->as<int32_t>();
  f.leaves = in[4]->numel() - 1;
  f.targets = in[5]->as<int32_t>();
  f.weights = in[6]->as<double>();
  f.entries = in[5]->numel();
  if (f.leaves < 0 || in[6]->numel() != f.entries)
    return ctx.error(StatusCode::kInvalidArgument, "leaf tables of ", in[4]->numel(), " offsets, ", f.entries,
                     " targets and ", in[6]->numel(), " weights");
  f.members = members ? members->as<double>() : nullptr;
  f.k = members ? members->numel() : 0;
  f.base = base ? base->as<double>() : nullptr;
  f.base_count = base ? base->numel() : 0;
  const int64_t n_targets = ctx.attrs().get_int("n_targets", 0), aggregate = ctx.attrs().get_int("aggregate_function", 1),
                post = ctx.attrs().get_int("post_transform", 0);
  const bool binary = ctx.attrs().get_int("binary", 0) != 0, to_float = ctx.attrs().get_int("to_float", 0) != 0;
  if (n_targets < 1 || aggregate < 0 || aggregate > 3 || post < 0 || post > 4 || f.trees < 1 ||
      (f.base_count > 1 && f.base_count != n_targets))
    return ctx.error(StatusCode::kInvalidArgument, "attributes n_targets ", n_targets, ", aggregate_function ", aggregate,
                     ", post_transform ", post, " with ", f.trees, " trees and ", f.base_count, " base values");
  if (x->dims.size() != 1 && x->dims.size() != 2)
    return ctx.error(StatusCode::kShape, "X is ", dims_string(x->dims), "; it must be [N, F] or [F]");
  const int64_t rows = x->dims.size() == 2 ? x->dims[0] : 1, features = x->dims.back();
  const int64_t columns = binary && n_targets == 1 ? 2 : n_targets;
  const DType out_type = to_float ? DType::Float : x->dtype;
  double (*load)(const void*, int64_t) = nullptr;
  visit_dtype<kFloatTypes | kSignedInts>(x->dtype, [&](auto tag) { load = &feature_value<typename decltype(tag)::type>; });
  if (!load || x->dtype == DType::BFloat16 || x->dtype == DType::Int8 || x->dtype == DType::Int16)
    return ctx.error(StatusCode::kUnsupported, "X has dtype ", dtype_name(x->dtype));
  TensorView* y;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, out_type, {rows, columns}, &y));
  // MIN and MAX start from the output type's extremes, as the reference does.
  const double type_max = out_type == DType::Double ? DBL_MAX : out_type == DType::Float16 ? 65504.0 : FLT_MAX;
  const double init = aggregate == 2 ? type_max : aggregate == 3 ? -type_max : 0.0;
  WalkError err;
  parallel_range(ctx, rows, std::max<int64_t>(1, 4096 / f.trees), [&](int64_t begin, int64_t end) {
    std::vector<double> acc(static_cast<size_t>(std::max(columns, n_targets)));
    for (int64_t r = begin; r < end && err.code.load(std::memory_order_relaxed) == kNoError; ++r) {
      std::fill(acc.begin(), acc.end(), init);
      if (!walk_row(f, load, x->data, r, features, n_targets, aggregate, acc.data(), err)) return;
      for (int64_t t = 0; t < n_targets; ++t) {
        if (aggregate == 0) acc[t] /= static_cast<double>(f.trees);
        if (f.base_count) acc[t] += f.base[f.base_count == 1 ? 0 : t];
      }
      if (binary) {
        acc[1] = acc[0];
        acc[0] = post == 0 || post == 4 ? 1 - acc[1] : -acc[1];
      }
      post_transform(post, acc.data(), columns);
      visit_dtype<kFloatTypes>(out_type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* out = y->as<T>() + r * columns;
        for (int64_t c = 0; c < columns; ++c) out[c] = convert<T>(static_cast<compute_t<T>>(acc[c]));
      });
    }
  });
  switch (err.code.load()) {
    case kNoError: return Status::ok();
    case kBadFeature:
      return ctx.error(StatusCode::kRuntime, "row ", err.row, ": node ", err.at, " tests a feature outside X's ", features,
                       " features");
    case kCycle: return ctx.error(StatusCode::kRuntime, "row ", err.row, ": tree ", err.at, " does not end in a leaf (a cycle)");
    default:
      return ctx.error(StatusCode::kRuntime, "row ", err.row, ": the forest tables are inconsistent (entry ", err.at,
                       ", check ", err.code.load(), ")");
  }
}

}  // namespace cuvil::rt::ops
