// Tests for the shape-manipulation and data-movement shape rules (passes/shape/shape_ops.cpp
// and passes/shape/movement.cpp): versioned attribute/input forms, symbolic dims through
// Reshape/Slice/Split/Concat/Gather/Pad/Resize, data-dependent extents, and the torch-style
// shape chains (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, Shape -> Slice -> Concat,
// Range over a dim, Slice of a position-ids buffer) whose results must be expressions, not
// unknowns. Failure tests expect a diagnostic naming the node. The graph builder is tests/shape_test_util.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <random>

#include "shape_test_util.h"

namespace cuvil {
namespace {

using namespace shape_test;  // NOLINT: the shared builder is this suite's vocabulary

// ---- the torch export chains ----

TEST(ShapeRulesTensor, TorchReshapeChainGivesExpressions) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "seq", 768});
  ValueId shape = b.op("shape", OpKind::Shape, {x});
  ValueId batch =
      b.op("unsq0", OpKind::Unsqueeze, {dim_of(b, shape, 0, "gather0"), b.i64("ax0", {0})});
  ValueId seq =
      b.op("unsq1", OpKind::Unsqueeze, {dim_of(b, shape, 1, "gather1"), b.i64("ax1", {0})});
  ValueId target = b.op("concat", OpKind::Concat, {batch, seq, b.i64("heads", {12, 64})},
                        {{"axis", int_attr(0)}});
  ValueId y = b.op("reshape", OpKind::Reshape, {x, target});
  ValueId t = b.op("transpose", OpKind::Transpose, {y}, {{"perm", ints_attr({0, 2, 1, 3})}});
  b.infer();
  EXPECT_EQ(b.data(target), "{batch, seq, 12, 64}");
  EXPECT_EQ(b.dims(y), "[batch, seq, 12, 64]");
  EXPECT_EQ(b.dims(t), "[batch, 12, seq, 64]");
}

TEST(ShapeRulesTensor, TorchReshapeChainWithArithmetic) {
  // Shape -> Slice -> Concat(Mul(Gather)) -> Reshape: merge the last two dims.
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", 12, "seq", 64});
  ValueId shape = b.op("shape", OpKind::Shape, {x});
  ValueId lead = b.op("slice", OpKind::Slice, {shape, b.i64("s", {0}), b.i64("e", {1})});
  ValueId heads = dim_of(b, shape, 1, "g1");
  ValueId width = b.op("mul", OpKind::Mul, {heads, dim_of(b, shape, 3, "g3")});
  ValueId seq = b.op("unsq_s", OpKind::Unsqueeze, {dim_of(b, shape, 2, "g2"), b.i64("a", {0})});
  ValueId w = b.op("unsq_w", OpKind::Unsqueeze, {width, b.i64("a2", {0})});
  ValueId target = b.op("concat", OpKind::Concat, {lead, seq, w}, {{"axis", int_attr(0)}});
  ValueId y = b.op("reshape", OpKind::Reshape, {x, target});
  b.infer();
  EXPECT_EQ(b.data(lead), "{batch}");
  EXPECT_EQ(b.dims(y), "[batch, seq, 768]");
}

TEST(ShapeRulesTensor, RangeOverADim) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "seq"});
  ValueId shape = b.op("shape", OpKind::Shape, {x});
  ValueId r = b.op("range", OpKind::Range,
                   {b.i64_scalar("zero", 0), dim_of(b, shape, 1, "g1"), b.i64_scalar("one", 1)});
  ValueId r2 = b.op("range2", OpKind::Range,
                    {b.i64_scalar("start", 2), b.i64_scalar("limit", 11), b.i64_scalar("d", 3)});
  ValueId down = b.op("down", OpKind::Range,
                      {dim_of(b, shape, 1, "g1b"), b.i64_scalar("lim", 0), b.i64_scalar("m2", -2)});
  auto scalar_f = [&](const std::string& name, float v) {
    return b.initializer(name, tensor<float>(DType::Float, {}, {v}));
  };
  ValueId rf = b.op("rangef", OpKind::Range, {scalar_f("fs", 0.5f), scalar_f("fl", 3.0f),
                                                scalar_f("fd", 0.75f)});
  // A float Range counting to Cast(n): window functions and some exporters build these.
  ValueId seq_f = b.op("seq_f", OpKind::Cast, {dim_of(b, shape, 1, "g1c")}, {{"to", int_attr(1)}});
  ValueId rc =
      b.op("range_cast", OpKind::Range, {scalar_f("f0", 0.0f), seq_f, scalar_f("f1", 1.0f)});
  ValueId rd = b.op("ranged", OpKind::Range,
                    {b.i64_scalar("z2", 0), b.input("n", DType::Int64, {}), b.i64_scalar("o2", 1)});
  b.infer();
  EXPECT_EQ(b.dims(r), "[seq]");
  EXPECT_EQ(b.v(r).dtype, DType::Int64);
  EXPECT_EQ(b.dims(r2), "[3]");
  EXPECT_EQ(b.data(r2), "{2, 5, 8}");
  EXPECT_EQ(b.dims(down), "[floordiv(seq + 1, 2)]");
  EXPECT_EQ(b.dims(rf), "[4]");
  EXPECT_EQ(b.dims(rc), "[seq]");
  EXPECT_EQ(b.v(rc).dtype, DType::Float);
  EXPECT_EQ(b.dims(rd), "[range_0]");
}

TEST(ShapeRulesTensor, RangeWithZeroDeltaFails) {
  GraphBuilder b;
  b.op("range_bad", OpKind::Range,
       {b.i64_scalar("a", 0), b.i64_scalar("b", 5), b.i64_scalar("c", 0)});
  expect_failure(b, "range_bad", "delta");
}

TEST(ShapeRulesTensor, SlicePositionIdsBySeq) {
  GraphBuilder b;
  ValueId ids = b.input("ids", DType::Int64, {"batch", "seq"});
  ValueId pos = b.input("position_ids", DType::Int64, {1, 512});
  ValueId seq = b.op("unsq", OpKind::Unsqueeze,
                     {dim_of(b, b.op("shape", OpKind::Shape, {ids}), 1, "g1"), b.i64("a", {0})});
  ValueId cut = b.op("slice", OpKind::Slice, {pos, b.i64("st", {0}), seq, b.i64("axes", {1})});
  ValueId cut_end = b.op("slice_end", OpKind::Slice,
                         {ids, b.i64("st2", {1}), b.i64("e2", {INT64_MAX}), b.i64("ax2", {1})});
  ValueId cut_neg = b.op("slice_neg", OpKind::Slice,
                         {ids, b.i64("st3", {-3}), b.i64("e3", {INT64_MAX}), b.i64("ax3", {-1})});
  b.infer();
  EXPECT_EQ(b.dims(cut), "[1, min(seq, 512)]");
  EXPECT_EQ(b.dims(cut_end), "[batch, max(seq - 1, 0)]");
  // min(seq, 3), in the form the clamps give.
  EXPECT_EQ(b.dims(cut_neg), "[batch, seq - max(seq - 3, 0)]");
}

TEST(ShapeRulesTensor, SliceWithRangesSimplifies) {
  GraphBuilder b;
  b.model.ranges.set("seq", sym::Range{1, 512});
  ValueId ids = b.input("ids", DType::Int64, {"batch", "seq"});
  ValueId pos = b.input("position_ids", DType::Int64, {1, 512});
  ValueId seq = b.op("unsq", OpKind::Unsqueeze,
                     {dim_of(b, b.op("shape", OpKind::Shape, {ids}), 1, "g1"), b.i64("a", {0})});
  ValueId cut = b.op("slice", OpKind::Slice, {pos, b.i64("st", {0}), seq, b.i64("axes", {1})});
  b.infer();
  EXPECT_EQ(b.dims(cut), "[1, seq]");
}

TEST(ShapeRulesTensor, SliceStepsAndOldAttributes) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"n", 10, 7});
  ValueId rev = b.op("reverse", OpKind::Slice,
                     {x, b.i64("s", {-1, -1}), b.i64("e", {INT64_MIN, INT64_MIN}),
                      b.i64("a", {0, 1}), b.i64("st", {-1, -3})});
  ValueId even = b.op("even", OpKind::Slice,
                      {x, b.i64("s2", {0}), b.i64("e2", {INT64_MAX}), b.i64("a2", {0}),
                       b.i64("st2", {2})});
  ValueId old = b.op("old", OpKind::Slice, {x},
                     {{"starts", ints_attr({1, 2})}, {"ends", ints_attr({5, 100})},
                      {"axes", ints_attr({1, 2})}},
                     9);
  ValueId shape = b.op("shape", OpKind::Shape, {x});
  ValueId tail = b.op("tail", OpKind::Slice, {shape, b.i64("s3", {-2}), b.i64("e3", {100})});
  ValueId back = b.op("back", OpKind::Slice,
                      {shape, b.i64("s4", {-1}), b.i64("e4", {-100}), b.i64("a4", {0}),
                       b.i64("st4", {-1})});
  b.infer();
  EXPECT_EQ(b.dims(rev), "[n, 4, 7]");
  EXPECT_EQ(b.dims(even), "[floordiv(n + 1, 2), 10, 7]");
  EXPECT_EQ(b.dims(old), "[n, 4, 5]");
  EXPECT_EQ(b.data(tail), "{10, 7}");
  EXPECT_EQ(b.data(back), "{7, 10, n}");
}

// The ONNX Slice definition on numbers: negative bounds count from the end, then clamp. An
// empty axis gives nothing (the spec's clamp to [0, d - 1] is empty then; numpy agrees).
int64_t reference_slice_length(int64_t d, int64_t s, int64_t e, int64_t step) {
  if (d == 0) return 0;
  auto norm = [&](int64_t v, int64_t lo, int64_t hi) {
    if (v < 0) v += d;
    return std::max(lo, std::min(v, hi));
  };
  int64_t n = 0;
  if (step > 0) {
    for (int64_t i = norm(s, 0, d), end = norm(e, 0, d); i < end; i += step) ++n;
  } else {
    for (int64_t i = norm(s, 0, d - 1), end = norm(e, -1, d - 1); i > end; i += step) ++n;
  }
  return n;
}

TEST(ShapeRulesTensor, SliceExtentMatchesReferenceForEveryBinding) {
  const int64_t bounds[] = {0, 1, 2, 5, -1, -2, -7, INT64_MAX, INT64_MIN, INT32_MAX};
  const int64_t steps[] = {1, 2, 3, -1, -2, -3};
  int checked = 0;
  for (int64_t s : bounds)
    for (int64_t e : bounds)
      for (int64_t step : steps) {
        GraphBuilder b;
        ValueId x = b.input("x", DType::Float, {"n"});
        ValueId y = b.op("slice", OpKind::Slice,
                         {x, b.i64("s", {s}), b.i64("e", {e}), b.i64("a", {0}),
                          b.i64("st", {step})});
        b.infer();
        const Dim& d = (*b.v(y).shape)[0];
        ASSERT_TRUE(d) << s << ":" << e << ":" << step;
        for (int64_t n = 0; n <= 12; ++n) {
          auto got = sym::evaluate(*d, {{"n", n}});
          ASSERT_TRUE(got.value) << got.error;
          ASSERT_EQ(*got.value, reference_slice_length(n, s, e, step))
              << "n=" << n << " slice " << s << ":" << e << ":" << step << " gave "
              << d->to_string();
          ++checked;
        }
      }
  // Symbolic bounds (a dim of another input, so never negative).
  for (int64_t step : steps) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::Float, {"n"});
    ValueId other = b.op("shape", OpKind::Shape, {b.input("o", DType::Float, {"k"})});
    ValueId y = b.op("slice", OpKind::Slice,
                     {x, other, b.i64("e", {step > 0 ? INT64_MAX : 0}), b.i64("a", {0}),
                      b.i64("st", {step})});
    ValueId z = b.op("slice2", OpKind::Slice,
                     {x, b.i64("s2", {step > 0 ? 1 : -1}), other, b.i64("a2", {0}),
                      b.i64("st2", {step})});
    b.infer();
    for (ValueId v : {y, z}) {
      const Dim& d = (*b.v(v).shape)[0];
      ASSERT_TRUE(d);
      for (int64_t n = 0; n <= 9; ++n)
        for (int64_t k = 0; k <= 11; ++k) {
          auto got = sym::evaluate(*d, {{"n", n}, {"k", k}});
          ASSERT_TRUE(got.value) << got.error;
          int64_t want = v == y ? reference_slice_length(n, k, step > 0 ? INT64_MAX : 0, step)
                                : reference_slice_length(n, step > 0 ? 1 : -1, k, step);
          ASSERT_EQ(*got.value, want) << "n=" << n << " k=" << k << " step " << step << ": "
                                      << d->to_string();
        }
    }
  }
  EXPECT_GT(checked, 7000);
}

TEST(ShapeRulesTensor, SliceZeroStepFails) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {4});
  b.op("slice_bad", OpKind::Slice,
       {x, b.i64("s", {0}), b.i64("e", {4}), b.i64("a", {0}), b.i64("st", {0})});
  expect_failure(b, "slice_bad", "'steps'");
}

// ---- Reshape ----

TEST(ShapeRulesTensor, ReshapeInfersMinusOne) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "seq", 768});
  ValueId heads = b.op("split_heads", OpKind::Reshape, {x, b.i64("t1", {0, 0, 12, -1})});
  ValueId merged = b.op("merge", OpKind::Reshape, {heads, b.i64("t2", {0, 0, -1})});
  ValueId flat = b.op("flat", OpKind::Reshape, {x, b.i64("t3", {-1, 768})});
  ValueId xy = b.input("xy", DType::Float, {DimSpec("x_"), DimSpec("y_")});
  ValueId joined = b.op("join", OpKind::Reshape, {xy, b.i64("t4", {-1})});
  ValueId x_only = b.op("unsq", OpKind::Unsqueeze,
                        {dim_of(b, b.op("shape", OpKind::Shape, {xy}), 0, "g0"), b.i64("a", {0})});
  ValueId target =
      b.op("cat", OpKind::Concat, {x_only, b.i64("m1", {-1})}, {{"axis", int_attr(0)}});
  ValueId back = b.op("unjoin", OpKind::Reshape, {joined, target});
  b.infer();
  EXPECT_EQ(b.dims(heads), "[batch, seq, 12, 64]");
  EXPECT_EQ(b.dims(merged), "[batch, seq, 768]");
  EXPECT_EQ(b.dims(flat), "[batch*seq, 768]");
  EXPECT_EQ(b.dims(joined), "[x_*y_]");
  EXPECT_EQ(b.dims(back), "[x_, y_]");
}

TEST(ShapeRulesTensor, ReshapeUnknownEntriesKeepRank) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", 768});
  ValueId target = b.input("target", DType::Int64, {3});
  ValueId y = b.op("reshape", OpKind::Reshape, {x, target});
  ValueId z = b.op("reshape_u", OpKind::Reshape, {x, b.input("t2", DType::Int64, {"k"})});
  ValueId old = b.op("reshape1", OpKind::Reshape, {x}, {{"shape", ints_attr({0, 24, 32})}}, 1);
  ValueId allow = b.op("allowzero", OpKind::Reshape, {b.input("e", DType::Float, {0, 4}),
                                                      b.i64("t3", {0, 2, 2})},
                       {{"allowzero", int_attr(1)}});
  // A packed int4 shape constant is not read as contents (it used to be an internal error).
  ValueId int4 = b.op("reshape_i4", OpKind::Reshape,
                      {x, b.initializer("t4", tensor<uint8_t>(DType::Int4, {2}, {0x22}))});
  b.infer();
  EXPECT_EQ(b.dims(y), "[?, ?, ?]");
  EXPECT_EQ(b.dims(int4), "[?, ?]");
  EXPECT_EQ(b.dims(z), "unranked");
  EXPECT_EQ(b.dims(old), "[batch, 24, 32]");
  EXPECT_EQ(b.dims(allow), "[0, 2, 2]");
}

TEST(ShapeRulesTensor, ReshapeTwoMinusOnesFails) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", 768});
  b.op("reshape_two", OpKind::Reshape, {x, b.i64("t", {-1, -1})});
  expect_failure(b, "reshape_two", "more than one -1");
}

TEST(ShapeRulesTensor, ReshapeCountMismatchFails) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {6, 4});
  b.op("reshape_bad", OpKind::Reshape, {x, b.i64("t", {5, -1})});
  expect_failure(b, "reshape_bad", "not divisible");
  GraphBuilder c;
  ValueId y = c.input("y", DType::Float, {6, 4});
  c.op("reshape_count", OpKind::Reshape, {y, c.i64("t", {5, 5})});
  expect_failure(c, "reshape_count", "element counts differ");
  GraphBuilder d;
  ValueId z = d.input("z", DType::Float, {6});
  d.op("reshape_neg", OpKind::Reshape, {z, d.i64("t", {-2, 3})});
  expect_failure(d, "reshape_neg", "entry 0 is -2");
}

TEST(ShapeRulesTensor, ReshapeWithSymbolThatMayBeZeroDoesNotFail) {
  // [n, 4] -> [n, 5] is valid when n == 0, so it cannot be rejected.
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"n", 4});
  ValueId y = b.op("reshape", OpKind::Reshape, {x, b.i64("t", {0, 5})});
  b.infer();
  EXPECT_EQ(b.dims(y), "[n, 5]");
}

// ---- Shape, Size, Flatten, Squeeze, Unsqueeze, Transpose ----

TEST(ShapeRulesTensor, ShapeStartEndAndSize) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "seq", 768});
  ValueId tail = b.op("tail", OpKind::Shape, {x}, {{"start", int_attr(-2)}}, 15);
  ValueId mid = b.op("mid", OpKind::Shape, {x}, {{"start", int_attr(1)}, {"end", int_attr(2)}}, 15);
  ValueId empty = b.op("empty", OpKind::Shape, {x}, {{"start", int_attr(5)}}, 15);
  ValueId old = b.op("old", OpKind::Shape, {x}, {{"start", int_attr(1)}}, 13);
  ValueId size = b.op("size", OpKind::Size, {x});
  ValueId un = b.op("unranked", OpKind::Shape, {b.unranked("u", DType::Float)});
  b.infer();
  EXPECT_EQ(b.data(tail), "{seq, 768}");
  EXPECT_EQ(b.data(mid), "{seq}");
  EXPECT_EQ(b.dims(empty), "[0]");
  EXPECT_EQ(b.data(old), "{batch, seq, 768}");
  EXPECT_EQ(b.dims(size), "[]");
  EXPECT_EQ(b.data(size), "{768*batch*seq}");
  EXPECT_EQ(b.dims(un), "[?]");
}

TEST(ShapeRulesTensor, FlattenSqueezeUnsqueeze) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", 1, "seq", 1});
  ValueId f = b.op("flatten", OpKind::Flatten, {x}, {{"axis", int_attr(2)}});
  ValueId f0 = b.op("flatten0", OpKind::Flatten, {x}, {{"axis", int_attr(0)}});
  ValueId s13 = b.op("squeeze13", OpKind::Squeeze, {x, b.i64("axes", {1, -1})}, {}, 13);
  ValueId s11 = b.op("squeeze11", OpKind::Squeeze, {x}, {{"axes", ints_attr({1})}}, 11);
  ValueId all = b.op("squeeze_all", OpKind::Squeeze, {b.input("c", DType::Float, {1, 3, 1})});
  ValueId undecided = b.op("squeeze_sym", OpKind::Squeeze, {x});
  ValueId u13 = b.op("unsqueeze13", OpKind::Unsqueeze, {s13, b.i64("ua", {0, -1})}, {}, 13);
  ValueId u11 = b.op("unsqueeze11", OpKind::Unsqueeze, {s13}, {{"axes", ints_attr({1})}}, 11);
  ValueId dyn = b.op("unsqueeze_dyn", OpKind::Unsqueeze, {x, b.input("ax", DType::Int64, {2})});
  ValueId c4 = b.input("c4", DType::Float, {1, 3, 1, 5});
  ValueId sq_dyn = b.op("squeeze_dyn", OpKind::Squeeze, {c4, b.input("sa", DType::Int64, {2})});
  ValueId sq_dyn1 = b.op("squeeze_dyn1", OpKind::Squeeze, {c4, b.input("sb", DType::Int64, {1})});
  b.infer();
  EXPECT_EQ(b.dims(f), "[batch, seq]");
  EXPECT_EQ(b.dims(f0), "[1, batch*seq]");
  EXPECT_EQ(b.dims(s13), "[batch, seq]");
  EXPECT_EQ(b.dims(s11), "[batch, seq, 1]");
  EXPECT_EQ(b.dims(all), "[3]");
  EXPECT_EQ(b.dims(undecided), "unranked");  // batch or seq might be 1
  EXPECT_EQ(b.dims(u13), "[1, batch, seq, 1]");
  EXPECT_EQ(b.dims(u11), "[batch, 1, seq]");
  EXPECT_EQ(b.dims(dyn), "[?, ?, ?, ?, ?, ?]");
  EXPECT_EQ(b.dims(sq_dyn), "[3, 5]");  // the only two dims that can be squeezed
  EXPECT_EQ(b.dims(sq_dyn1), "[?, ?, ?]");
}

TEST(ShapeRulesTensor, SqueezeOfNonOneFails) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", 3});
  b.op("squeeze_bad", OpKind::Squeeze, {x, b.i64("axes", {1})}, {}, 13);
  expect_failure(b, "squeeze_bad", "size 3");
}

TEST(ShapeRulesTensor, UnsqueezeRepeatedAxisFails) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch"});
  b.op("unsqueeze_bad", OpKind::Unsqueeze, {x, b.i64("axes", {0, 0})}, {}, 13);
  expect_failure(b, "unsqueeze_bad", "more than once");
}

TEST(ShapeRulesTensor, TransposeBadPermFails) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {2, 3, 4});
  b.op("transpose_bad", OpKind::Transpose, {x}, {{"perm", ints_attr({0, 0, 1})}});
  expect_failure(b, "transpose_bad", "attribute 'perm'");
  GraphBuilder c;
  ValueId y = c.input("y", DType::Float, {2, 3, 4});
  c.op("transpose_len", OpKind::Transpose, {y}, {{"perm", ints_attr({0, 1})}});
  expect_failure(c, "transpose_len", "attribute 'perm' has 2 entries");
}

// ---- Concat, Split, Expand, Tile ----

TEST(ShapeRulesTensor, ConcatAddsAxisDims) {
  GraphBuilder b;
  ValueId past = b.input("past", DType::Float, {"batch", 12, "past", 64});
  ValueId cur = b.input("cur", DType::Float, {"batch", 12, "seq", 64});
  ValueId cat = b.op("cat", OpKind::Concat, {past, cur}, {{"axis", int_attr(-2)}});
  b.infer();
  EXPECT_EQ(b.dims(cat), "[batch, 12, past + seq, 64]");
}

TEST(ShapeRulesTensor, ConcatRankMismatchFails) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {2, 3});
  ValueId y = b.input("y", DType::Float, {2});
  b.op("cat_bad", OpKind::Concat, {x, y}, {{"axis", int_attr(0)}});
  expect_failure(b, "cat_bad", "rank");
  GraphBuilder c;
  ValueId p = c.input("p", DType::Float, {2, 3});
  ValueId q = c.input("q", DType::Float, {2, 4});
  c.op("cat_dims", OpKind::Concat, {p, q}, {{"axis", int_attr(0)}});
  expect_failure(c, "cat_dims", "differ in dim 1");
}

TEST(ShapeRulesTensor, SplitVersions) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "seq", 2304});
  auto qkv = b.node("qkv", OpKind::Split, {x}, 3, {{"axis", int_attr(-1)}}, 13);
  auto sized = b.node("sized", OpKind::Split, {x, b.i64("sizes", {768, 1536})}, 2,
                      {{"axis", int_attr(2)}}, 13);
  auto old = b.node("old", OpKind::Split, {x}, 2,
                    {{"axis", int_attr(2)}, {"split", ints_attr({2000, 304})}}, 11);
  ValueId y = b.input("y", DType::Float, {"n", 10});
  auto uneven = b.node("uneven", OpKind::Split, {y}, 4,
                       {{"axis", int_attr(1)}, {"num_outputs", int_attr(4)}}, 18);
  auto halves = b.node("halves", OpKind::Split, {y}, 2, {{"axis", int_attr(0)}}, 13);
  auto chunks = b.node("chunks", OpKind::Split, {y}, 3,
                       {{"axis", int_attr(0)}, {"num_outputs", int_attr(3)}}, 18);
  ValueId shape = b.op("shape", OpKind::Shape, {x});
  auto parts = b.node("parts", OpKind::Split, {shape, b.i64("ps", {2, 1})}, 2, {}, 13);
  b.infer();
  EXPECT_EQ(b.dims(qkv[2]), "[batch, seq, 768]");
  EXPECT_EQ(b.dims(sized[1]), "[batch, seq, 1536]");
  EXPECT_EQ(b.dims(old[0]), "[batch, seq, 2000]");
  EXPECT_EQ(b.dims(uneven[0]), "[n, 3]");
  EXPECT_EQ(b.dims(uneven[3]), "[n, 1]");
  EXPECT_EQ(b.dims(halves[1]), "[floordiv(n, 2), 10]");
  EXPECT_EQ(b.dims(chunks[0]), "[floordiv(n + 2, 3), 10]");
  EXPECT_EQ(b.dims(chunks[2]), "[n - 2*floordiv(n + 2, 3), 10]");
  EXPECT_EQ(b.data(parts[0]), "{batch, seq}");
  EXPECT_EQ(b.data(parts[1]), "{2304}");
}

TEST(ShapeRulesTensor, SplitSizesNotSummingFails) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", 10});
  b.node("split_bad", OpKind::Split, {x, b.i64("sizes", {3, 3})}, 2, {{"axis", int_attr(1)}},
         13);
  expect_failure(b, "split_bad", "sum to 6");
  GraphBuilder c;
  ValueId y = c.input("y", DType::Float, {10});
  c.node("split_count", OpKind::Split, {y, c.i64("sizes", {5, 5})}, 3, {}, 13);
  expect_failure(c, "split_count", "2 sizes for 3 outputs");
  GraphBuilder d;
  ValueId z = d.input("z", DType::Float, {10});
  d.node("split_even", OpKind::Split, {z}, 3, {}, 13);
  expect_failure(d, "split_even", "does not split evenly");
}

TEST(ShapeRulesTensor, ExpandAndTile) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"seq", 1});
  ValueId e = b.op("expand", OpKind::Expand, {x, b.i64("t", {2, 1, 64})});
  ValueId dyn = b.op("expand_dyn", OpKind::Expand, {b.input("c", DType::Float, {5, 1}),
                                                   b.input("shp", DType::Int64, {3})});
  ValueId t = b.op("tile", OpKind::Tile, {x, b.i64("reps", {3, 4})});
  ValueId shape = b.op("shape", OpKind::Shape, {x});
  ValueId tv = b.op("tile_vec", OpKind::Tile, {shape, b.i64("reps2", {2})});
  ValueId ev = b.op("expand_vec", OpKind::Expand, {b.i64("one", {1}), b.i64("t3", {3})});
  b.infer();
  EXPECT_EQ(b.dims(e), "[2, seq, 64]");
  EXPECT_EQ(b.dims(dyn), "[?, 5, ?]");
  EXPECT_EQ(b.dims(t), "[3*seq, 4]");
  EXPECT_EQ(b.data(tv), "{seq, 1, seq, 1}");
  EXPECT_EQ(b.data(ev), "{1, 1, 1}");
}

TEST(ShapeRulesTensor, ExpandIncompatibleFails) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {3, 1});
  b.op("expand_bad", OpKind::Expand, {x, b.i64("t", {4, 5})});
  expect_failure(b, "expand_bad", "cannot broadcast dimension 3 with 4");
}

TEST(ShapeRulesTensor, TileWrongLengthFails) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {3, 1});
  b.op("tile_bad", OpKind::Tile, {x, b.i64("reps", {2})});
  expect_failure(b, "tile_bad", "1 entries for an input of rank 2");
}

// ---- Constant, ConstantOfShape ----

TEST(ShapeRulesTensor, ConstantForms) {
  GraphBuilder b;
  ValueId ints = b.op("ints", OpKind::Constant, {}, {{"value_ints", ints_attr({12, 64})}});
  ValueId one = b.op("one", OpKind::Constant, {}, {{"value_int", int_attr(7)}});
  ValueId f = b.op("f", OpKind::Constant, {}, {{"value_float", float_attr(0.5f)}});
  ValueId t = b.op("t", OpKind::Constant, {},
                   {{"value", tensor_attr(tensor<int32_t>(DType::Int32, {2, 2}, {1, 2, 3, 4}))}});
  ValueId v = b.op("v", OpKind::Constant, {},
                   {{"value", tensor_attr(tensor<int32_t>(DType::Int32, {3}, {5, 6, 7}))}});
  ValueId s = b.op("s", OpKind::Constant, {}, {{"value_string", string_attr("hi")}});
  b.infer();
  EXPECT_EQ(b.dims(ints), "[2]");
  EXPECT_EQ(b.data(ints), "{12, 64}");
  EXPECT_EQ(b.v(ints).dtype, DType::Int64);
  EXPECT_EQ(b.dims(one), "[]");
  EXPECT_EQ(b.data(one), "{7}");
  EXPECT_EQ(b.dims(f), "[]");
  EXPECT_EQ(b.v(f).dtype, DType::Float);
  EXPECT_EQ(b.data(f), "none");
  ASSERT_TRUE(b.v(f).data);
  EXPECT_EQ(b.v(f).data->float_at(0), 0.5);
  EXPECT_EQ(b.dims(t), "[2, 2]");
  EXPECT_EQ(b.data(t), "none");
  EXPECT_EQ(b.data(v), "{5, 6, 7}");
  EXPECT_EQ(b.v(s).dtype, DType::String);
}

TEST(ShapeRulesTensor, ConstantWithoutValueFails) {
  GraphBuilder b;
  b.op("const_bad", OpKind::Constant, {});
  expect_failure(b, "const_bad", "no value attribute");
  GraphBuilder c;
  c.op("const_two", OpKind::Constant, {},
       {{"value_int", int_attr(1)}, {"value_ints", ints_attr({1})}});
  expect_failure(c, "const_two", "both");
}

TEST(ShapeRulesTensor, ConstantOfShape) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "seq"});
  ValueId z = b.op("zeros", OpKind::ConstantOfShape, {b.op("shape", OpKind::Shape, {x})});
  ValueId s = b.op("scalar", OpKind::ConstantOfShape, {b.i64("empty", {})},
                   {{"value", tensor_attr(tensor<int32_t>(DType::Int32, {1}, {3}))}});
  ValueId u = b.op("dyn", OpKind::ConstantOfShape, {b.input("shp", DType::Int64, {2})});
  b.infer();
  EXPECT_EQ(b.dims(z), "[batch, seq]");
  EXPECT_EQ(b.v(z).dtype, DType::Float);
  EXPECT_EQ(b.dims(s), "[]");
  EXPECT_EQ(b.data(s), "{3}");
  EXPECT_EQ(b.dims(u), "[?, ?]");
}

// ---- Gather family, Scatter ----

TEST(ShapeRulesTensor, GatherShapes) {
  GraphBuilder b;
  ValueId emb = b.input("emb", DType::Float, {30522, 768});
  ValueId ids = b.input("ids", DType::Int64, {"batch", "seq"});
  ValueId g = b.op("embed", OpKind::Gather, {emb, ids});
  ValueId x = b.input("x", DType::Float, {"batch", "seq", 768});
  ValueId last = b.op("last", OpKind::Gather, {x, b.i64_scalar("m1", -1)}, {{"axis", int_attr(1)}});
  ValueId shape = b.op("shape", OpKind::Shape, {x});
  ValueId pick = b.op("pick", OpKind::Gather, {shape, b.i64("idx", {2, 0})});
  b.infer();
  EXPECT_EQ(b.dims(g), "[batch, seq, 768]");
  EXPECT_EQ(b.dims(last), "[batch, 768]");
  EXPECT_EQ(b.dims(pick), "[2]");
  EXPECT_EQ(b.data(pick), "{768, batch}");
}

TEST(ShapeRulesTensor, GatherOutOfRangeConstantIndexFails) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "seq"});
  ValueId shape = b.op("shape", OpKind::Shape, {x});
  b.op("gather_bad", OpKind::Gather, {shape, b.i64_scalar("i", 2)});
  expect_failure(b, "gather_bad", "index 2 is out of range");
}

TEST(ShapeRulesTensor, GatherElementsNDAndScatter) {
  GraphBuilder b;
  ValueId data = b.input("data", DType::Float, {"b", 5, 6});
  ValueId ge = b.op("ge", OpKind::GatherElements, {data, b.input("gi", DType::Int64, {"b", 2, 6})},
                    {{"axis", int_attr(1)}});
  ValueId nd = b.op("nd", OpKind::GatherND, {data, b.input("ni", DType::Int64, {"b", 4, 1})},
                    {{"batch_dims", int_attr(1)}});
  ValueId nd0 = b.op("nd0", OpKind::GatherND, {data, b.input("nj", DType::Int64, {3, 2})});
  ValueId sc = b.op("sc", OpKind::ScatterND, {data, b.input("si", DType::Int64, {3, 2}),
                                              b.input("su", DType::Float, {3, 6})});
  b.infer();
  EXPECT_EQ(b.dims(ge), "[b, 2, 6]");
  EXPECT_EQ(b.dims(nd), "[b, 4, 6]");
  EXPECT_EQ(b.dims(nd0), "[3, 6]");
  EXPECT_EQ(b.dims(sc), "[b, 5, 6]");
}

TEST(ShapeRulesTensor, GatherNDBadIndexDepthFails) {
  GraphBuilder b;
  ValueId data = b.input("data", DType::Float, {5, 6});
  b.op("nd_bad", OpKind::GatherND, {data, b.input("i", DType::Int64, {3, 3})});
  expect_failure(b, "nd_bad", "last dim of input 'indices' is 3");
}

// ---- Pad, Resize, CenterCropPad ----

TEST(ShapeRulesTensor, PadVersions) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"n", 3, "h", "w"});
  ValueId p11 = b.op("pad11", OpKind::Pad, {x, b.i64("pads", {0, 0, 1, 2, 0, 0, 1, 2})}, {}, 11);
  ValueId p2 = b.op("pad2", OpKind::Pad, {x}, {{"pads", ints_attr({0, 0, 1, 1, 0, 0, 1, 1})}}, 2);
  ValueId p18 = b.op("pad18", OpKind::Pad,
                     {x, b.i64("pads2", {2, 3, 4, 5}), kNoValue, b.i64("axes", {-2, -1})}, {}, 18);
  ValueId dyn = b.op("pad_dyn", OpKind::Pad, {x, b.input("pd", DType::Int64, {8})}, {}, 13);
  b.infer();
  EXPECT_EQ(b.dims(p11), "[n, 3, h + 2, w + 4]");
  EXPECT_EQ(b.dims(p2), "[n, 3, h + 2, w + 2]");
  EXPECT_EQ(b.dims(p18), "[n, 3, h + 6, w + 8]");
  EXPECT_EQ(b.dims(dyn), "[?, ?, ?, ?]");
}

TEST(ShapeRulesTensor, PadWrongLengthFails) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {2, 3});
  b.op("pad_bad", OpKind::Pad, {x, b.i64("pads", {1, 1})}, {}, 13);
  expect_failure(b, "pad_bad", "'pads' has 2 entries");
}

TEST(ShapeRulesTensor, ResizeScalesAndSizes) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"n", 3, "h", 10});
  auto floats = [&](const std::string& name, std::vector<float> v) {
    int64_t len = static_cast<int64_t>(v.size());
    return b.initializer(name, tensor<float>(DType::Float, {len}, std::move(v)));
  };
  ValueId up = b.op("up", OpKind::Resize, {x, kNoValue, floats("sc", {1, 1, 2, 1.5})}, {}, 13);
  ValueId half =
      b.op("half", OpKind::Resize, {x, floats("roi", {}), floats("sc2", {1, 1, 0.5, 0.5})}, {}, 11);
  ValueId sized =
      b.op("sized", OpKind::Resize, {x, kNoValue, kNoValue, b.i64("sz", {1, 3, 224, 224})}, {}, 13);
  ValueId axes = b.op("axes18", OpKind::Resize, {x, kNoValue, kNoValue, b.i64("sz2", {20, 40})},
                      {{"axes", ints_attr({2, 3})}}, 18);
  ValueId keep = b.op(
      "keep", OpKind::Resize,
      {b.input("img", DType::Float, {1, 3, 100, 200}), kNoValue, kNoValue, b.i64("sz3", {50, 50})},
      {{"axes", ints_attr({2, 3})}, {"keep_aspect_ratio_policy", string_attr("not_larger")}}, 18);
  ValueId ups = b.op("upsample", OpKind::Upsample, {x, floats("sc3", {1, 1, 2, 2})}, {}, 9);
  ValueId ups7 =
      b.op("upsample7", OpKind::Upsample, {x}, {{"scales", floats_attr({1, 1, 3, 3})}}, 7);
  b.infer();
  EXPECT_EQ(b.dims(up), "[n, 3, 2*h, 15]");
  EXPECT_EQ(b.dims(half), "[n, 3, floordiv(h, 2), 5]");
  EXPECT_EQ(b.dims(sized), "[1, 3, 224, 224]");
  EXPECT_EQ(b.dims(axes), "[n, 3, 20, 40]");
  EXPECT_EQ(b.dims(keep), "[1, 3, 25, 50]");
  EXPECT_EQ(b.dims(ups), "[n, 3, 2*h, 20]");
  EXPECT_EQ(b.dims(ups7), "[n, 3, 3*h, 30]");
}

TEST(ShapeRulesTensor, ResizeBadScalesFail) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {1, 3, 8, 8});
  ValueId sc = b.initializer("sc", tensor<float>(DType::Float, {2}, {2.0f, 2.0f}));
  b.op("resize_bad", OpKind::Resize, {x, kNoValue, sc}, {}, 13);
  expect_failure(b, "resize_bad", "'scales' has 2 entries for 4 axes");
  GraphBuilder c;
  ValueId y = c.input("y", DType::Float, {1, 3, 8, 8});
  c.op("resize_none", OpKind::Resize, {y}, {}, 13);
  expect_failure(c, "resize_none", "needs one of 'scales' and 'sizes'");
}

TEST(ShapeRulesTensor, CenterCropPad) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"h", "w", 3});
  ValueId c = b.op("crop", OpKind::CenterCropPad, {x, b.i64("shape", {224, 224})},
                   {{"axes", ints_attr({0, 1})}});
  b.infer();
  EXPECT_EQ(b.dims(c), "[224, 224, 3]");
}

// ---- data-dependent extents ----

TEST(ShapeRulesTensor, DataDependentOps) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", 10});
  ValueId nz = b.op("nonzero", OpKind::NonZero, {x});
  auto uq = b.node("unique", OpKind::Unique, {x}, 4);
  auto uqa = b.node("unique_axis", OpKind::Unique, {x}, 4, {{"axis", int_attr(1)}});
  ValueId nms = b.op("nms", OpKind::NonMaxSuppression,
                     {b.input("boxes", DType::Float, {1, "boxes", 4}),
                      b.input("scores", DType::Float, {1, 1, "boxes"})});
  ValueId cmp = b.op("compress", OpKind::Compress, {x, b.input("cond", DType::Bool, {10})},
                     {{"axis", int_attr(1)}});
  ValueId cmpc = b.op("compress_const", OpKind::Compress,
                      {x, b.initializer("cc", tensor<uint8_t>(DType::Bool, {3}, {1, 0, 1}))},
                      {{"axis", int_attr(1)}});
  ValueId nzc = b.op("nonzero_const", OpKind::NonZero, {b.i64("v", {0, 3, 0, 5})});
  b.infer();
  EXPECT_EQ(b.dims(nz), "[2, nonzero_0]");
  EXPECT_EQ(b.v(nz).dtype, DType::Int64);
  EXPECT_EQ(b.dims(uq[0]), "[unique_1]");
  EXPECT_EQ(b.dims(uq[2]), "[10*batch]");
  EXPECT_EQ(b.dims(uq[3]), "[unique_1]");
  EXPECT_EQ(b.dims(uqa[0]), "[batch, unique_2]");
  EXPECT_EQ(b.dims(uqa[2]), "[10]");
  EXPECT_EQ(b.dims(nms), "[nms_3, 3]");
  EXPECT_EQ(b.dims(cmp), "[batch, compress_4]");
  EXPECT_EQ(b.dims(cmpc), "[batch, 2]");
  EXPECT_EQ(b.dims(nzc), "[1, 2]");
}

TEST(ShapeRulesTensor, TopKOneHotEyeLike) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "vocab"});
  auto topk = b.node("topk", OpKind::TopK, {x, b.i64("k", {5})}, 2);
  auto topk1 =
      b.node("topk1", OpKind::TopK, {x}, 2, {{"k", int_attr(3)}, {"axis", int_attr(0)}}, 1);
  ValueId oh = b.op("onehot", OpKind::OneHot,
                    {b.input("i", DType::Int64, {"batch", "seq"}), b.i64_scalar("depth", 10),
                     b.input("vals", DType::Float, {2})},
                    {{"axis", int_attr(1)}});
  ValueId eye = b.op("eye", OpKind::EyeLike, {b.input("m", DType::Float, {"n", "n"})},
                     {{"dtype", int_attr(7)}});
  b.infer();
  EXPECT_EQ(b.dims(topk[0]), "[batch, 5]");
  EXPECT_EQ(b.v(topk[1]).dtype, DType::Int64);
  EXPECT_EQ(b.dims(topk1[1]), "[3, vocab]");
  EXPECT_EQ(b.dims(oh), "[batch, 10, seq]");
  EXPECT_EQ(b.v(oh).dtype, DType::Float);
  EXPECT_EQ(b.dims(eye), "[n, n]");
  EXPECT_EQ(b.v(eye).dtype, DType::Int64);
}

TEST(ShapeRulesTensor, TopKLargerThanAxisFails) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", 4});
  b.node("topk_bad", OpKind::TopK, {x, b.i64("k", {5})}, 2);
  expect_failure(b, "topk_bad", "'k' is 5");
}

// ---- hostile attributes ----

TEST(ShapeRulesTensor, HostileAttributesFailCleanly) {
  struct Case {
    const char* node;
    OpKind op;
    std::map<std::string, Attribute> attrs;
    int opset;
    const char* detail;
  };
  const Case cases[] = {
      {"flatten_axis", OpKind::Flatten, {{"axis", int_attr(INT64_MIN)}}, 13, "attribute 'axis'"},
      {"concat_axis", OpKind::Concat, {{"axis", int_attr(INT64_MAX)}}, 13, "attribute 'axis'"},
      {"gather_axis", OpKind::Gather, {{"axis", int_attr(-99)}}, 13, "attribute 'axis'"},
      {"unsq_axes", OpKind::Unsqueeze, {{"axes", ints_attr({INT64_MAX})}}, 11, "axes"},
      {"squeeze_axes", OpKind::Squeeze, {{"axes", ints_attr({INT64_MIN})}}, 11, "axes"},
      {"perm_huge", OpKind::Transpose, {{"perm", ints_attr({INT64_MAX, 0})}}, 13, "'perm'"},
      {"split_neg", OpKind::Split, {{"split", ints_attr({-1, 5})}}, 11, "negative"},
      {"slice_attrs", OpKind::Slice,
       {{"starts", ints_attr({0, 0})}, {"ends", ints_attr({1})}}, 9, "entries"},
      {"cast_str", OpKind::Cast, {{"to", string_attr("NOPE")}}, 1, "attribute 'to'"},
      {"gathernd_bd", OpKind::GatherND, {{"batch_dims", int_attr(INT64_MIN)}}, 13, "batch_dims"},
      {"onehot_axis", OpKind::OneHot, {{"axis", int_attr(INT64_MIN)}}, 13, "attribute 'axis'"},
  };
  for (const Case& c : cases) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::Float, {2, 4});
    std::vector<ValueId> ins = {x};
    if (c.op == OpKind::Gather || c.op == OpKind::GatherND)
      ins.push_back(b.input("i", DType::Int64, {1, 1}));
    if (c.op == OpKind::OneHot) {
      ins.push_back(b.i64_scalar("d", 3));
      ins.push_back(b.input("v", DType::Float, {2}));
    }
    size_t outs = c.op == OpKind::Split ? 2 : 1;
    b.node(c.node, c.op, ins, outs, c.attrs, c.opset);
    SCOPED_TRACE(c.node);
    expect_failure(b, c.node, c.detail);
  }
}

// One case per diagnostic not covered above: each must name its node and say what is wrong.
TEST(ShapeRulesTensor, EachDiagnosticNamesNodeAndCause) {
  using Build = std::function<void(GraphBuilder&, const std::string&)>;
  auto f32 = [](GraphBuilder& b, std::vector<DimSpec> dims) {
    return b.input("x" + std::to_string(b.g().values.size()), DType::Float, std::move(dims));
  };
  auto fscalar = [](GraphBuilder& b, const std::string& name, float v) {
    return b.initializer(name, tensor<float>(DType::Float, {}, {v}));
  };
  auto floats = [](GraphBuilder& b, const std::string& name, std::vector<float> v) {
    int64_t len = static_cast<int64_t>(v.size());
    return b.initializer(name, tensor<float>(DType::Float, {len}, std::move(v)));
  };
  struct Case {
    const char* node;
    Build build;
    const char* detail;
  };
  const Case cases[] = {
      {"concat_none",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Concat, {}, {{"axis", int_attr(0)}});
       },
       "needs at least one input"},
      {"concat_noaxis",
       [&](GraphBuilder& b, const std::string& n) { b.op(n, OpKind::Concat, {f32(b, {2})}); },
       "attribute 'axis' is missing"},
      {"equal_three",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Equal, {f32(b, {2}), f32(b, {2}), f32(b, {2})});
       },
       "expects 2 inputs"},
      {"add_none", [&](GraphBuilder& b, const std::string& n) { b.op(n, OpKind::Add, {}); },
       "needs at least one input"},
      {"reshape_rank2",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Reshape, {f32(b, {6}), b.input("t", DType::Int64, {2, 2})});
       },
       "input 'shape' must be a 1-D tensor"},
      {"reshape1_noshape",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Reshape, {f32(b, {6})}, {}, 1);
       },
       "attribute 'shape' is missing"},
      {"reshape_copy",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Reshape, {f32(b, {6}), b.i64("t", {6, 0})});
       },
       "0 (copy)"},
      {"reshape_allowzero",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Reshape, {f32(b, {0, 6}), b.i64("t", {0, -1})},
              {{"allowzero", int_attr(1)}});
       },
       "both 0 and -1"},
      {"unsqueeze_noaxes",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Unsqueeze, {f32(b, {2})}, {}, 13);
       },
       "input 'axes' is missing"},
      {"unsqueeze11_noaxes",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Unsqueeze, {f32(b, {2})}, {}, 11);
       },
       "attribute 'axes' is missing"},
      {"split_noout",
       [&](GraphBuilder& b, const std::string& n) { b.node(n, OpKind::Split, {f32(b, {4})}, 0); },
       "has no outputs"},
      {"split_both",
       [&](GraphBuilder& b, const std::string& n) {
         b.node(n, OpKind::Split, {f32(b, {4}), b.i64("s", {2, 2})}, 2,
                {{"num_outputs", int_attr(2)}}, 18);
       },
       "both input 'split'"},
      {"split_numout",
       [&](GraphBuilder& b, const std::string& n) {
         b.node(n, OpKind::Split, {f32(b, {4})}, 2, {{"num_outputs", int_attr(3)}}, 18);
       },
       "'num_outputs' is 3"},
      {"split_chunks",
       [&](GraphBuilder& b, const std::string& n) {
         b.node(n, OpKind::Split, {f32(b, {5})}, 4, {{"num_outputs", int_attr(4)}}, 18);
       },
       "cannot be split into 4 chunks"},
      {"slice9_nostarts",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Slice, {f32(b, {5})}, {{"ends", ints_attr({1})}}, 9);
       },
       "attribute 'starts' is missing"},
      {"slice9_noends",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Slice, {f32(b, {5})}, {{"starts", ints_attr({1})}}, 9);
       },
       "attribute 'ends' is missing"},
      {"slice_toomany",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Slice, {f32(b, {5}), b.i64("s", {0, 0}), b.i64("e", {1, 1})});
       },
       "slices 2 axes of a rank-1 input"},
      {"expand_neg",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Expand, {f32(b, {1}), b.i64("t", {-3})});
       },
       "entry 0 is -3"},
      {"tile_neg",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Tile, {f32(b, {2}), b.i64("r", {-1})});
       },
       "'repeats' entry 0 is negative"},
      {"tile_overflow",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Tile, {f32(b, {int64_t{1} << 40}), b.i64("r", {int64_t{1} << 40})});
       },
       "input 'repeats'"},
      {"size_overflow",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Size, {f32(b, {int64_t{1} << 40, int64_t{1} << 40})});
       },
       "element count"},
      {"pad_overflow",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Pad, {f32(b, {4}), b.i64("p", {INT64_MAX, 1})});
       },
       "'pads'"},
      {"pad_negative",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Pad, {f32(b, {4}), b.i64("p", {-3, -3})});
       },
       "negative (-2)"},
      {"pad2_nopads",
       [&](GraphBuilder& b, const std::string& n) { b.op(n, OpKind::Pad, {f32(b, {4})}, {}, 2); },
       "attribute 'pads' is missing"},
      {"pad_axes_twice",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Pad, {f32(b, {4, 4}), b.i64("p", {1, 1, 1, 1}), kNoValue,
                               b.i64("a", {1, -1})}, {}, 18);
       },
       "repeats axis -1"},
      {"constant_kind",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Constant, {}, {{"value_int", ints_attr({1})}});
       },
       "attribute 'value_int' must be int"},
      {"constant_null",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Constant, {}, {{"value", tensor_attr(nullptr)}});
       },
       "holds no tensor"},
      {"cos_kind",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::ConstantOfShape, {b.i64("s", {2})}, {{"value", int_attr(1)}});
       },
       "attribute 'value' must be a tensor"},
      {"cos_two",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::ConstantOfShape, {b.i64("s", {2})},
              {{"value", tensor_attr(tensor<float>(DType::Float, {2}, {1, 2}))}});
       },
       "must hold one element"},
      {"cos_neg",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::ConstantOfShape, {b.i64("s", {2, -2})});
       },
       "entry 1 is negative"},
      {"range_rank",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Range, {b.input("s", DType::Int64, {1, 1}), b.i64_scalar("l", 3),
                                 b.i64_scalar("d", 1)});
       },
       "input 'start' must be a scalar"},
      {"rangef_zero",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Range, {fscalar(b, "s", 0), fscalar(b, "l", 1), fscalar(b, "d", 0)});
       },
       "input 'delta' is 0"},
      {"rangef_inf",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Range,
              {fscalar(b, "s", 0), fscalar(b, "l", INFINITY), fscalar(b, "d", 1)});
       },
       "non-finite"},
      {"rangef_huge",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Range, {fscalar(b, "s", 0), fscalar(b, "l", 1e30f), fscalar(b, "d", 1)});
       },
       "too large"},
      {"gather_elements_rank",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::GatherElements, {f32(b, {2, 2}), b.input("i", DType::Int64, {2})});
       },
       "has rank 1 but 'data' has rank 2"},
      {"gather_nd_rank0",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::GatherND, {f32(b, {}), b.input("i", DType::Int64, {1})});
       },
       "must have rank >= 1"},
      {"upsample_scales_kind",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Upsample, {f32(b, {2})}, {{"scales", int_attr(2)}}, 7);
       },
       "attribute 'scales' must be floats"},
      {"resize_both",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Resize, {f32(b, {2}), kNoValue, floats(b, "sc", {2}), b.i64("sz", {4})},
              {}, 13);
       },
       "both 'scales' and 'sizes'"},
      {"resize_sizes_len",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Resize, {f32(b, {2, 2}), kNoValue, kNoValue, b.i64("sz", {4})}, {}, 13);
       },
       "'sizes' has 1 entries for 2 axes"},
      {"resize_sizes_neg",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Resize, {f32(b, {2}), kNoValue, kNoValue, b.i64("sz", {-4})}, {}, 13);
       },
       "'sizes' entry 0 is negative"},
      {"resize_policy",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Resize, {f32(b, {2}), kNoValue, kNoValue, b.i64("sz", {4})},
              {{"keep_aspect_ratio_policy", string_attr("squash")}}, 18);
       },
       "keep_aspect_ratio_policy"},
      {"resize_scale_zero",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Resize, {f32(b, {2}), kNoValue, floats(b, "sc", {0})}, {}, 13);
       },
       "scales must be positive"},
      {"crop_len",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::CenterCropPad, {f32(b, {4, 4}), b.i64("s", {2})});
       },
       "has 1 entries for 2 axes"},
      {"crop_neg",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::CenterCropPad, {f32(b, {4}), b.i64("s", {-1})});
       },
       "entry 0 is negative"},
      {"crop_axes",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::CenterCropPad, {f32(b, {4, 4}), b.i64("s", {2, 2})},
              {{"axes", ints_attr({0, -2})}});
       },
       "attribute 'axes' repeats axis -2"},
      {"compress_rank",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Compress, {f32(b, {4}), b.input("c", DType::Bool, {2, 2})});
       },
       "input 'condition' must have rank 1"},
      {"onehot_values",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::OneHot, {b.input("i", DType::Int64, {3}), b.i64_scalar("d", 4),
                                  f32(b, {3})});
       },
       "must hold 2 elements"},
      {"onehot_depth",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::OneHot, {b.input("i", DType::Int64, {3}), b.i64_scalar("d", -4),
                                  f32(b, {2})});
       },
       "input 'depth' is negative"},
      {"eye_rank",
       [&](GraphBuilder& b, const std::string& n) { b.op(n, OpKind::EyeLike, {f32(b, {3})}); },
       "must have rank 2"},
      {"eye_dtype",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::EyeLike, {f32(b, {3, 3})}, {{"dtype", int_attr(99)}});
       },
       "attribute 'dtype'"},
      {"topk_k_len",
       [&](GraphBuilder& b, const std::string& n) {
         b.node(n, OpKind::TopK, {f32(b, {5}), b.i64("k", {1, 2})}, 2);
       },
       "one element, has 2"},
      {"topk1_nok",
       [&](GraphBuilder& b, const std::string& n) {
         b.node(n, OpKind::TopK, {f32(b, {5})}, 2, {}, 1);
       },
       "attribute 'k' is missing"},
      {"topk_neg",
       [&](GraphBuilder& b, const std::string& n) {
         b.node(n, OpKind::TopK, {f32(b, {5}), b.i64("k", {-1})}, 2);
       },
       "'k' is negative"},
      {"bernoulli_dtype",
       [&](GraphBuilder& b, const std::string& n) {
         b.op(n, OpKind::Bernoulli, {f32(b, {5})}, {{"dtype", int_attr(0)}});
       },
       "attribute 'dtype'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.node);
    GraphBuilder b;
    c.build(b, c.node);
    expect_failure(b, c.node, c.detail);
  }
}

// Random nodes of every rule in shape_ops.cpp, movement.cpp and elementwise.cpp, with extreme
// attribute values, constant inputs and opsets: inference must succeed or throw a Diagnostic,
// never an internal error or anything else (run under the sanitizer build to catch UB).
TEST(ShapeRulesTensor, RandomHostileNodesNeverCrash) {
  const OpKind ops[] = {
      OpKind::Shape, OpKind::Size, OpKind::Reshape, OpKind::Flatten, OpKind::Squeeze,
      OpKind::Unsqueeze, OpKind::Transpose, OpKind::Concat, OpKind::Split, OpKind::Slice,
      OpKind::Expand, OpKind::Tile, OpKind::Constant, OpKind::ConstantOfShape, OpKind::Range,
      OpKind::Gather, OpKind::GatherElements, OpKind::GatherND, OpKind::ScatterND, OpKind::Pad,
      OpKind::Resize, OpKind::Upsample, OpKind::Compress, OpKind::OneHot, OpKind::EyeLike,
      OpKind::NonZero, OpKind::TopK, OpKind::Unique, OpKind::NonMaxSuppression,
      OpKind::CenterCropPad, OpKind::Add, OpKind::Div, OpKind::Mod, OpKind::Equal, OpKind::Where,
      OpKind::Cast, OpKind::Neg, OpKind::Abs, OpKind::Clip, OpKind::Dropout, OpKind::CastLike};
  const int64_t extremes[] = {0, 1, 2, 3, -1, -2, 5, INT64_MAX, INT64_MIN, INT32_MAX, -INT32_MAX,
                              int64_t{1} << 40};
  const char* int_keys[] = {"axis", "allowzero", "batch_dims", "num_outputs", "start", "end",
                            "k", "to", "value_int", "dtype", "fmod"};
  const char* ints_keys[] = {"axes", "perm", "split", "starts", "ends", "pads", "value_ints",
                             "shape"};
  const int opsets[] = {1, 5, 6, 7, 9, 10, 11, 13, 15, 18};
  std::mt19937 rng(1234);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  auto extreme = [&] { return extremes[pick(std::size(extremes))]; };
  int diagnostics = 0, successes = 0;
  for (int iter = 0; iter < 6000; ++iter) {
    GraphBuilder b;
    OpKind op = ops[pick(std::size(ops))];
    std::vector<ValueId> ins;
    size_t n_in = pick(5);
    for (size_t i = 0; i < n_in; ++i) {
      std::string name = "in" + std::to_string(i);
      switch (pick(4)) {
        case 0: {  // constant int64 vector or scalar with extreme values
          std::vector<int64_t> v(pick(5));
          for (auto& e : v) e = extreme();
          ins.push_back(pick(3) == 0 && !v.empty() ? b.i64_scalar(name, v[0]) : b.i64(name, v));
          break;
        }
        case 1: {  // a tensor with a random shape
          std::vector<DimSpec> dims;
          for (size_t k = pick(4); k > 0; --k) {
            const DimSpec choices[] = {0, 1, 2, 3, 5, "n", "m", "?"};
            dims.push_back(choices[pick(std::size(choices))]);
          }
          ins.push_back(b.input(name, pick(2) ? DType::Float : DType::Int64, dims));
          break;
        }
        case 2: ins.push_back(b.unranked(name, DType::Float)); break;
        default: ins.push_back(kNoValue); break;
      }
    }
    std::map<std::string, Attribute> attrs;
    for (size_t k = pick(4); k > 0; --k) {
      if (pick(2)) {
        attrs[int_keys[pick(std::size(int_keys))]] = int_attr(extreme());
      } else {
        std::vector<int64_t> v(pick(5));
        for (auto& e : v) e = extreme();
        attrs[ints_keys[pick(std::size(ints_keys))]] = ints_attr(v);
      }
    }
    b.node("fuzz", op, ins, 1 + pick(4), attrs, opsets[pick(std::size(opsets))]);
    try {
      b.infer();
      ++successes;
    } catch (const Diagnostic&) {
      ++diagnostics;
    } catch (const std::exception& e) {
      FAIL() << "iteration " << iter << " (" << op_name(op) << "): " << e.what();
    }
  }
  EXPECT_GT(successes, 100);
  EXPECT_GT(diagnostics, 100);
}

TEST(ShapeRulesTensor, HugeRankFromShapeInputIsRefused) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {2});
  b.op("reshape_huge", OpKind::Reshape, {x, b.input("t", DType::Int64, {int64_t{1} << 40})});
  try {
    b.infer();
    ADD_FAILURE() << "no diagnostic";
  } catch (const Diagnostic& d) {
    EXPECT_EQ(d.code(), ExitCode::kUnsupported);
    EXPECT_NE(std::string(d.what()).find("reshape_huge"), std::string::npos) << d.what();
  }
}

}  // namespace
}  // namespace cuvil
