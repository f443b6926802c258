// Slice extents along one axis (ir/slice_bounds.h).
#include "ir/slice_bounds.h"

#include <climits>

#include "support/error.h"

namespace cuvil::sym {
namespace {

// Slice bounds at or beyond this magnitude are exporters' "to the end" sentinels (INT32_MAX,
// INT64_MAX, their negatives). With a symbolic dim they clamp to the dim, which assumes that
// axis is shorter than 2^31 - 1; the exact min(seq, 2147483647) would only clutter every shape
// after it. (With a constant dim the clamp is computed exactly.)
constexpr int64_t kSliceSentinel = INT32_MAX;

// x clamped to [lo, hi], leaving out the bounds the ranges already prove (max(x, lo) <= hi
// follows from x <= hi once lo <= hi is proven too).
DimExpr clamp(const DimExpr& x, const DimExpr& lo, const DimExpr& hi,
              const SymbolRanges& r) {
  bool above_lo = prove_less_equal(lo, x, r);
  bool below_hi = prove_less_equal(x, hi, r) &&
                  (above_lo || prove_less_equal(lo, hi, r));
  DimExpr y = above_lo ? x : max(x, lo);
  return below_hi ? y : min(y, hi);
}

// One Slice endpoint per the spec: negative values count from the end, then clamp to
// [lo, hi]. nullopt when the sign of a symbolic endpoint is not decided by the ranges.
std::optional<DimExpr> slice_endpoint(const DimExpr& v, const DimExpr& dim, const DimExpr& lo,
                                      const DimExpr& hi, const SymbolRanges& r) {
  DimExpr x = v;
  if (auto c = v.constant()) {
    if (!dim.is_constant()) {
      // min(max(x, lo), hi) of such x: hi, or min(lo, hi) (lo > hi when the axis is empty).
      if (*c >= kSliceSentinel) return hi;
      if (*c <= -kSliceSentinel) return clamp(lo, lo, hi, r);
    }
    if (*c < 0) x = dim + v;  // cannot overflow: c < 0 <= dim
  } else {
    Bounds b = bounds(v, r);
    if (b.hi < 0) x = dim + v;
    else if (b.lo < 0) return std::nullopt;
  }
  return clamp(x, lo, hi, r);
}


std::optional<SliceAxis> slice_axis_under(const DimExpr& dim, const DimExpr& start,
                                          const DimExpr& end, int64_t step,
                                          const SymbolRanges& r) {
  // |INT64_MIN| does not exist; any step of that size takes one element, as does -INT64_MAX.
  if (step == INT64_MIN) step = -INT64_MAX;
  if (step > 0) {
    auto s = slice_endpoint(start, dim, DimExpr(0), dim, r);
    auto e = slice_endpoint(end, dim, DimExpr(0), dim, r);
    if (!s || !e) return std::nullopt;
    DimExpr n = step == 1 ? *e - *s : ceildiv(*e - *s, DimExpr(step));
    if (!prove_less_equal(*s, *e, r)) n = max(n, DimExpr(0));
    return SliceAxis{*s, n};
  }
  auto s = slice_endpoint(start, dim, DimExpr(0), dim - 1, r);
  auto e = slice_endpoint(end, dim, DimExpr(-1), dim - 1, r);
  if (!s || !e) return std::nullopt;
  DimExpr n = step == -1 ? *s - *e : ceildiv(*s - *e, DimExpr(-step));
  if (!prove_less_equal(*e, *s, r)) n = max(n, DimExpr(0));
  return SliceAxis{*s, n};
}

}  // namespace

// The sliced extent. Symbols may be 0, which keeps clamps like min(seq, 1) alive; but an
// empty axis always slices to length 0, so when the dim is one symbol the length worked out
// for dim >= 1 (where the clamps simplify) is exact everywhere if at dim = 0 it is a constant
// <= 0 (then max(., 0) fixes that one point). torch.flip's Slice(-1, INT64_MIN, -1) gives
// `n` instead of `min(n - 1, max(n - 1, 0)) + 1`.
std::optional<SliceAxis> slice_axis(const DimExpr& dim, const DimExpr& start, const DimExpr& end,
                                    int64_t step, const SymbolRanges& r) {
  auto exact = slice_axis_under(dim, start, end, step, r);
  auto name = dim.as_symbol();
  if (!exact || !name) return exact;
  Range range = r.get(*name);
  if (range.lo >= 1 || range.hi < 1) return exact;
  SymbolRanges nonempty = r;
  nonempty.set(*name, Range{1, range.hi});
  auto assumed = slice_axis_under(dim, start, end, step, nonempty);
  if (!assumed) return exact;
  DimExpr len = simplify(assumed->length, nonempty);
  auto at_zero = substitute(len, {{*name, DimExpr(0)}}).constant();
  if (!at_zero || *at_zero > 0) return exact;
  if (*at_zero < 0) len = max(len, DimExpr(0));
  return SliceAxis{exact->start, len};
}


}  // namespace cuvil::sym
