// Tests for the elementwise shape rules (passes/shape/elementwise.cpp): unary and bool-valued
// ops, numpy broadcasting with symbolic dims, Cast/CastLike/Dropout dtypes, and the symbolic
// contents (`sym_data`) that integer shape arithmetic carries between Shape and Reshape,
// including torch's Expand export (ConstantOfShape -> Mul -> Equal -> Where). Graphs are built
// by hand and run through cuvil::infer_shapes; dims are compared in their printed form.
#include <gtest/gtest.h>


#include "shape_test_util.h"

namespace cuvil {
namespace {

using namespace shape_test;  // NOLINT: the shared builder is this suite's vocabulary

TEST(ShapeRulesElementwise, UnaryKeepsShapeAndDtype) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "seq", 768});
  ValueId r = b.op("relu", OpKind::Relu, {x});
  ValueId nan = b.op("isnan", OpKind::IsNaN, {x});
  ValueId u = b.unranked("u", DType::Float16);
  ValueId t = b.op("tanh", OpKind::Tanh, {u});
  b.infer();
  EXPECT_EQ(b.dims(r), "[batch, seq, 768]");
  EXPECT_EQ(b.v(r).dtype, DType::Float);
  EXPECT_EQ(b.dims(nan), "[batch, seq, 768]");
  EXPECT_EQ(b.v(nan).dtype, DType::Bool);
  EXPECT_EQ(b.dims(t), "unranked");
  EXPECT_EQ(b.v(t).dtype, DType::Float16);
}

TEST(ShapeRulesElementwise, DropoutMaskDtypeFollowsOpset) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", 16});
  auto d12 = b.node("drop12", OpKind::Dropout, {x}, 2, {}, 12);
  auto d7 = b.node("drop7", OpKind::Dropout, {x}, 2, {}, 7);
  b.infer();
  EXPECT_EQ(b.dims(d12[0]), "[batch, 16]");
  EXPECT_EQ(b.dims(d12[1]), "[batch, 16]");
  EXPECT_EQ(b.v(d12[1]).dtype, DType::Bool);
  EXPECT_EQ(b.v(d7[1]).dtype, DType::Float);
}

TEST(ShapeRulesElementwise, BroadcastSymbolicDims) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", 1, "seq", 64});
  ValueId y = b.input("y", DType::Float, {"heads", 1, 64});
  ValueId s = b.input("s", DType::Float, {});
  ValueId add = b.op("add", OpKind::Add, {x, y});
  ValueId sum = b.op("sum", OpKind::Sum, {x, y, s});
  ValueId bias = b.op("bias", OpKind::Add, {x, b.input("b", DType::Float, {64})});
  b.infer();
  EXPECT_EQ(b.dims(add), "[batch, heads, seq, 64]");
  EXPECT_EQ(b.dims(sum), "[batch, heads, seq, 64]");
  EXPECT_EQ(b.dims(bias), "[batch, 1, seq, 64]");
}

TEST(ShapeRulesElementwise, BroadcastIncompatibleConstantsFail) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", 3});
  ValueId y = b.input("y", DType::Float, {4});
  b.op("bad_add", OpKind::Add, {x, y});
  expect_failure(b, "bad_add", "cannot broadcast dimension 3 with 4");
}

// BitCast (opset 26): same shape, the new type; types of different widths are refused.
TEST(ShapeRulesElementwise, BitCastKeepsShapeAndNeedsTheSameWidth) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", 3});
  ValueId y = b.op("as_i32", OpKind::BitCast, {x}, {{"to", int_attr(6)}});
  b.infer();
  EXPECT_EQ(b.v(y).dtype, DType::Int32);
  EXPECT_EQ(b.dims(y), "[batch, 3]");
  GraphBuilder bad;
  ValueId z = bad.input("z", DType::Float, {2});
  bad.op("as_i64", OpKind::BitCast, {z}, {{"to", int_attr(7)}});
  expect_failure(bad, "as_i64", "BitCast needs types of the same width: f32 is 32 bits, i64 64");
}

TEST(ShapeRulesElementwise, LegacyBroadcastKeepsFirstShape) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {2, 3, 4, 5});
  ValueId y = b.input("y", DType::Float, {3, 4});
  ValueId add =
      b.op("add6", OpKind::Add, {x, y}, {{"broadcast", int_attr(1)}, {"axis", int_attr(1)}}, 6);
  b.infer();
  EXPECT_EQ(b.dims(add), "[2, 3, 4, 5]");
}

TEST(ShapeRulesElementwise, WhereBroadcastsThreeInputs) {
  GraphBuilder b;
  ValueId c = b.input("c", DType::Bool, {1, 1, "seq", "seq"});
  ValueId x = b.input("x", DType::Float, {"batch", 12, "seq", "seq"});
  ValueId y = b.input("y", DType::Float, {});
  ValueId w = b.op("where", OpKind::Where, {c, x, y});
  b.infer();
  EXPECT_EQ(b.dims(w), "[batch, 12, seq, seq]");
  EXPECT_EQ(b.v(w).dtype, DType::Float);
}

TEST(ShapeRulesElementwise, IntegerArithmeticOnShapeValues) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "seq", 768});
  ValueId shape = b.op("shape", OpKind::Shape, {x});
  ValueId seq = dim_of(b, shape, 1, "seq");
  ValueId two = b.i64_scalar("two", 2);
  ValueId mul = b.op("mul", OpKind::Mul, {seq, two});
  ValueId div = b.op("div", OpKind::Div, {mul, b.i64_scalar("four", 4)});
  ValueId sub = b.op("sub", OpKind::Sub, {seq, b.i64_scalar("ten", 10)});
  ValueId add = b.op("add", OpKind::Add, {sub, b.i64_scalar("one", 1)});
  // seq - 10 may be negative: truncating division is not floordiv there, so no contents.
  ValueId div_neg = b.op("div_neg", OpKind::Div, {sub, two});
  ValueId mod = b.op("mod", OpKind::Mod, {seq, b.i64_scalar("eight", 8)});
  ValueId vec = b.op("vec", OpKind::Mul, {shape, two});  // a scalar against a vector
  ValueId mx = b.op("max", OpKind::Max, {seq, b.i64_scalar("k", 5), two});
  ValueId neg = b.op("neg", OpKind::Neg, {seq});
  ValueId abs = b.op("abs", OpKind::Abs, {neg});
  b.infer();
  EXPECT_EQ(b.dims(seq), "[]");
  EXPECT_EQ(b.data(seq), "{seq}");
  EXPECT_EQ(b.data(mul), "{2*seq}");
  EXPECT_EQ(b.data(div), "{floordiv(seq, 2)}");
  EXPECT_EQ(b.data(add), "{seq - 9}");
  EXPECT_EQ(b.data(div_neg), "none");
  EXPECT_EQ(b.data(mod), "{mod(seq, 8)}");
  EXPECT_EQ(b.dims(vec), "[3]");
  EXPECT_EQ(b.data(vec), "{2*batch, 2*seq, 1536}");
  EXPECT_EQ(b.data(mx), "{max(seq, 5)}");
  EXPECT_EQ(b.data(neg), "{-seq}");
  EXPECT_EQ(b.data(abs), "{seq}");
}

TEST(ShapeRulesElementwise, ConstantDivisionTruncatesTowardZero) {
  GraphBuilder b;
  ValueId a = b.i64("a", {7, -7, 7, -7});
  ValueId d = b.i64("d", {2, 2, -2, -2});
  ValueId div = b.op("div", OpKind::Div, {a, d});
  ValueId mod = b.op("mod", OpKind::Mod, {a, d});
  ValueId fmod = b.op("fmod", OpKind::Mod, {a, d}, {{"fmod", int_attr(1)}});
  b.infer();
  EXPECT_EQ(b.data(div), "{3, -3, -3, 3}");
  EXPECT_EQ(b.data(mod), "{1, 1, -1, -1}");
  EXPECT_EQ(b.data(fmod), "{1, -1, 1, -1}");
}

TEST(ShapeRulesElementwise, OverflowDropsContentsWithoutFailing) {
  GraphBuilder b;
  ValueId big = b.i64("big", {INT64_MAX});
  ValueId add = b.op("add", OpKind::Add, {big, b.i64("one", {1})});
  ValueId zero = b.op("divzero", OpKind::Div, {big, b.i64("z", {0})});
  b.infer();
  EXPECT_EQ(b.dims(add), "[1]");
  EXPECT_EQ(b.data(add), "none");
  EXPECT_EQ(b.data(zero), "none");
}

TEST(ShapeRulesElementwise, ComparisonsFoldOnlyWhenProvable) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "seq", 768});
  ValueId shape = b.op("shape", OpKind::Shape, {x});
  ValueId eq = b.op("eq", OpKind::Equal, {shape, b.i64_scalar("m1", -1)});
  ValueId eq2 = b.op("eq2", OpKind::Equal, {shape, b.i64("bs", {1, 1, 768})});
  ValueId less = b.op("less", OpKind::Less, {shape, b.i64_scalar("zero", 0)});
  ValueId geq = b.op("geq", OpKind::GreaterOrEqual, {shape, b.i64_scalar("z2", 0)});
  ValueId neq = b.op("not", OpKind::Not, {eq});
  b.infer();
  EXPECT_EQ(b.v(eq).dtype, DType::Bool);
  EXPECT_EQ(b.data(eq), "{0, 0, 0}");
  EXPECT_EQ(b.data(eq2), "none");  // batch == 1 is not decided
  EXPECT_EQ(b.data(less), "{0, 0, 0}");
  EXPECT_EQ(b.data(geq), "{1, 1, 1}");
  EXPECT_EQ(b.data(neq), "{1, 1, 1}");
}

// torch's Expand export: Where(Equal(shape, -1), ones, shape) with ones from
// ConstantOfShape, then Expand to the result.
TEST(ShapeRulesElementwise, TorchExpandChain) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "seq"});
  ValueId mask = b.input("mask", DType::Float, {"batch", 1, 1, "seq"});
  ValueId shape = b.op("shape", OpKind::Shape, {x});
  ValueId batch = b.op("unsq0", OpKind::Unsqueeze,
                       {dim_of(b, shape, 0, "g0"), b.i64("ax0", {0})});
  ValueId seq = b.op("unsq1", OpKind::Unsqueeze, {dim_of(b, shape, 1, "g1"), b.i64("ax1", {0})});
  ValueId target = b.op("target", OpKind::Concat, {batch, b.i64("c1", {1}), seq, seq},
                        {{"axis", int_attr(0)}});
  ValueId ones = b.op("ones", OpKind::ConstantOfShape, {b.i64("four", {4})},
                      {{"value", tensor_attr(tensor<int64_t>(DType::Int64, {1}, {1}))}});
  ValueId minus = b.op("minus", OpKind::Mul, {ones, b.i64_scalar("m1", -1)});
  ValueId eq = b.op("eq", OpKind::Equal, {target, minus});
  ValueId where = b.op("where", OpKind::Where, {eq, ones, target});
  ValueId expanded = b.op("expand", OpKind::Expand, {mask, where});
  b.infer();
  EXPECT_EQ(b.data(ones), "{1, 1, 1, 1}");
  EXPECT_EQ(b.data(minus), "{-1, -1, -1, -1}");
  EXPECT_EQ(b.data(eq), "{0, 0, 0, 0}");
  EXPECT_EQ(b.data(where), "{batch, 1, seq, seq}");
  EXPECT_EQ(b.dims(expanded), "[batch, 1, seq, seq]");
}

TEST(ShapeRulesElementwise, WherePicksContentsByConstantCondition) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "seq"});
  ValueId shape = b.op("shape", OpKind::Shape, {x});
  ValueId cond = b.initializer("cond", tensor<uint8_t>(DType::Bool, {2}, {1, 0}));
  ValueId w = b.op("where", OpKind::Where, {cond, shape, b.i64("alt", {7, 9})});
  ValueId unknown_cond = b.input("uc", DType::Bool, {2});
  ValueId w2 = b.op("where2", OpKind::Where, {unknown_cond, shape, b.i64("alt2", {7, 9})});
  b.infer();
  EXPECT_EQ(b.data(w), "{batch, 9}");
  EXPECT_EQ(b.dims(w2), "[2]");
  EXPECT_EQ(b.data(w2), "none");
}

TEST(ShapeRulesElementwise, CastKeepsIntegerContents) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "seq"});
  ValueId shape = b.op("shape", OpKind::Shape, {x});
  ValueId i32 = b.op("to_i32", OpKind::Cast, {shape}, {{"to", int_attr(6)}});
  ValueId f32 = b.op("to_f32", OpKind::Cast, {shape}, {{"to", int_attr(1)}});
  ValueId flag = b.op("to_bool", OpKind::Cast, {b.i64("c", {0, 3})}, {{"to", int_attr(9)}});
  ValueId narrow = b.op("to_i8", OpKind::Cast, {b.i64("w", {300})}, {{"to", int_attr(3)}});
  ValueId from_float =
      b.op("from_float", OpKind::Cast,
           {b.initializer("fc", tensor<float>(DType::Float, {2}, {12.0f, -2.5f}))},
           {{"to", int_attr(7)}});
  ValueId like = b.op("like", OpKind::CastLike, {shape, b.input("t", DType::Int32, {})});
  b.infer();
  EXPECT_EQ(b.v(i32).dtype, DType::Int32);
  EXPECT_EQ(b.data(i32), "{batch, seq}");
  EXPECT_EQ(b.v(f32).dtype, DType::Float);
  EXPECT_EQ(b.dims(f32), "[2]");
  EXPECT_EQ(b.data(f32), "none");  // sym_data is for integer tensors only
  EXPECT_EQ(b.data(flag), "{0, 1}");
  EXPECT_EQ(b.data(narrow), "none");  // 300 wraps in int8
  EXPECT_EQ(b.data(from_float), "{12, -2}");
  EXPECT_EQ(b.v(like).dtype, DType::Int32);
  EXPECT_EQ(b.data(like), "{batch, seq}");
}

TEST(ShapeRulesElementwise, CastWithoutTargetFails) {
  GraphBuilder b;
  b.op("cast_missing", OpKind::Cast, {b.input("x", DType::Float, {2})});
  expect_failure(b, "cast_missing", "attribute 'to'");
}

TEST(ShapeRulesElementwise, CastWithUnknownTargetFails) {
  GraphBuilder b;
  b.op("cast_bad", OpKind::Cast, {b.input("x", DType::Float, {2})}, {{"to", int_attr(99)}});
  expect_failure(b, "cast_bad", "attribute 'to'");
}

TEST(ShapeRulesElementwise, ClipOfIntegersClampsContents) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::Float, {"batch", "seq"});
  ValueId shape = b.op("shape", OpKind::Shape, {x});
  ValueId clip = b.op("clip", OpKind::Clip,
                      {shape, b.i64_scalar("lo", 0), b.i64_scalar("hi", 512)}, {}, 13);
  b.infer();
  EXPECT_EQ(b.data(clip), "{min(batch, 512), min(seq, 512)}");
}

}  // namespace
}  // namespace cuvil
