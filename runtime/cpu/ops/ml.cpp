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

constexpr int64_t kFailed = INT64_MIN;  // a step that found a bad table (`err` says what)

// One step down from interior node `ref` for the row whose features start at xr: the child
// it goes to, or kFailed.
template <typename T>
inline int64_t step(const ForestView& f, const T* xr, int64_t features, int64_t row, int64_t ref, WalkError& err) {
  if (ref >= f.m) return err.set(kBadNode, row, ref), kFailed;
  const int32_t* nd = f.nodes + ref * 6;
  if (nd[0] < 0 || nd[0] >= features) return err.set(kBadFeature, row, ref), kFailed;
  const double v = static_cast<double>(convert<compute_t<T>>(xr[nd[0]])), s = f.splits[ref];
  if (nd[3] == 0) return v <= s ? nd[1] : nd[2];  // x <= split without the missing rule: most forests
  bool go = false;
  switch (nd[3] & 7) {
    case 0: go = v <= s; break;
    case 1: go = v < s; break;
    case 2: go = v >= s; break;
    case 3: go = v > s; break;
    case 4: go = v == s; break;
    case 5: go = v != s; break;
    case 6: {
      if (nd[4] < 0 || nd[4] > nd[5] || nd[5] > f.k) return err.set(kBadMembers, row, ref), kFailed;
      for (int32_t i = nd[4]; i < nd[5] && !go; ++i) go = f.members[i] == v;
      break;
    }
    default: return err.set(kBadNode, row, ref), kFailed;
  }
  if (!go && (nd[3] & 8) && std::isnan(v)) go = true;
  return go ? nd[1] : nd[2];
}

// Aggregates the votes of trees [t_begin, t_end) for rows [begin, end) into acc[(r - begin) *
// width + target].
// Tree by tree over the whole block, so that a tree's nodes stay in cache while the rows walk it
// (a forest is often larger than the L2 cache, one tree rarely), and kLanes rows down a tree at
// once: a walk is a chain of dependent loads, and independent chains overlap in the core.
template <typename T>
bool score_rows(const ForestView& f, const T* x, int64_t features, int64_t begin, int64_t end, int64_t t_begin,
                int64_t t_end, int64_t n_targets, int64_t aggregate, double* acc, int64_t width, WalkError& err) {
  constexpr int64_t kLanes = 8;
  for (int64_t t = t_begin; t < t_end; ++t)
    for (int64_t r0 = begin; r0 < end; r0 += kLanes) {
      const int64_t lanes = std::min(kLanes, end - r0);
      int64_t ref[kLanes];
      for (int64_t k = 0; k < lanes; ++k) ref[k] = f.roots[t];
      for (int64_t steps = 0, walking = lanes; walking > 0; ++steps) {
        if (steps > f.m) return err.set(kCycle, r0, t), false;
        walking = 0;
        for (int64_t k = 0; k < lanes; ++k) {
          if (ref[k] < 0) continue;
          ref[k] = step(f, x + (r0 + k) * features, features, r0 + k, ref[k], err);
          if (ref[k] == kFailed) return false;
          walking += ref[k] >= 0;
        }
      }
      for (int64_t k = 0; k < lanes; ++k) {
        const int64_t leaf = -ref[k] - 1;
        if (leaf >= f.leaves || f.offsets[leaf] < 0 || f.offsets[leaf] > f.offsets[leaf + 1] ||
            f.offsets[leaf + 1] > f.entries)
          return err.set(kBadLeaf, r0 + k, leaf), false;
        double* a = acc + (r0 + k - begin) * width;
        for (int64_t j = f.offsets[leaf], e = f.offsets[leaf + 1]; j < e; ++j) {
          const int32_t target = f.targets[j];
          if (target < 0 || target >= n_targets) return err.set(kBadTarget, r0 + k, j), false;
          const double w = f.weights[j];
          a[target] = aggregate == 2 ? std::min(a[target], w) : aggregate == 3 ? std::max(a[target], w) : a[target] + w;
        }
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
  if (x->dtype != DType::Float && x->dtype != DType::Double && x->dtype != DType::Float16 && x->dtype != DType::Int32 &&
      x->dtype != DType::Int64)
    return ctx.error(StatusCode::kUnsupported, "X has dtype ", dtype_name(x->dtype));
  TensorView* y;
  CUVIL_RETURN_IF_ERROR(allocate_checked(ctx, 0, out_type, {rows, columns}, &y));
  // MIN and MAX start from the output type's extremes, as the reference does.
  const double type_max = out_type == DType::Double ? DBL_MAX : out_type == DType::Float16 ? 65504.0 : FLT_MAX;
  const double init = aggregate == 2 ? type_max : aggregate == 3 ? -type_max : 0.0;
  const int64_t width = std::max(columns, n_targets);
  constexpr int64_t kBlock = 256;  // rows that walk a tree together
  // The trees in a fixed number of groups, each aggregated on its own and the groups combined
  // in order: the same sums whichever way the work is split, so the result does not depend on
  // the thread count or the batch size.
  const int64_t groups = std::min<int64_t>(f.trees, 8);
  WalkError err;
  // Group g's aggregates for rows [b0, b1) into acc.
  auto score_group = [&](int64_t g, int64_t b0, int64_t b1, double* acc) {
    std::fill(acc, acc + (b1 - b0) * width, init);
    bool ok = true;
    visit_dtype<kFloatTypes | kSignedInts>(x->dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      ok = score_rows(f, x->as<T>(), features, b0, b1, f.trees * g / groups, f.trees * (g + 1) / groups, n_targets,
                      aggregate, acc, width, err);
    });
    return ok;
  };
  // Combines the groups' aggregates (group g at accs + g * stride) and writes rows [b0, b1).
  auto finish_rows = [&](int64_t b0, int64_t b1, double* accs, int64_t stride) {
    for (int64_t r = b0; r < b1; ++r) {
      double* a = accs + (r - b0) * width;
      for (int64_t g = 1; g < groups; ++g) {
        const double* o = a + g * stride;
        for (int64_t t = 0; t < n_targets; ++t)
          a[t] = aggregate == 2 ? std::min(a[t], o[t]) : aggregate == 3 ? std::max(a[t], o[t]) : a[t] + o[t];
      }
      for (int64_t t = 0; t < n_targets; ++t) {
        if (aggregate == 0) a[t] /= static_cast<double>(f.trees);
        if (f.base_count) a[t] += f.base[f.base_count == 1 ? 0 : t];
      }
      if (binary) {
        a[1] = a[0];
        a[0] = post == 0 || post == 4 ? 1 - a[1] : -a[1];
      }
      post_transform(post, a, columns);
      visit_dtype<kFloatTypes>(out_type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* out = y->as<T>() + r * columns;
        for (int64_t c = 0; c < columns; ++c) out[c] = convert<T>(static_cast<compute_t<T>>(a[c]));
      });
    }
  };
  if (rows <= kBlock && ctx.threads() > 1 && groups > 1) {
    // A few rows: the threads share the trees.
    std::vector<double> accs(static_cast<size_t>(groups * rows * width));
    parallel_range(ctx, groups, 1, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1 && score_group(g, 0, rows, accs.data() + g * rows * width); ++g) {
      }
    });
    if (err.code.load() == kNoError) finish_rows(0, rows, accs.data(), rows * width);
  } else {
    // Every thread one share of the rows, in blocks of at most kBlock.
    const int64_t grain = std::clamp<int64_t>((rows + ctx.threads() - 1) / ctx.threads(), 1, kBlock);
    parallel_range(ctx, rows, grain, [&](int64_t begin, int64_t end) {
      std::vector<double> accs(static_cast<size_t>(groups * kBlock * width));
      for (int64_t b0 = begin; b0 < end && err.code.load(std::memory_order_relaxed) == kNoError; b0 += kBlock) {
        const int64_t b1 = std::min(end, b0 + kBlock);
        for (int64_t g = 0; g < groups; ++g)
          if (!score_group(g, b0, b1, accs.data() + g * kBlock * width)) return;
        finish_rows(b0, b1, accs.data(), kBlock * width);
      }
    });
  }
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
