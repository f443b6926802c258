// Printer: the text form of values, types and names.
#include <gtest/gtest.h>

#include "ir/printer.h"

namespace cuvil {
namespace {

TEST(IrPrinter, PlainAndQuotedValueNames) {
  EXPECT_EQ(value_ref("x"), "%x");
  EXPECT_EQ(value_ref("onnx::Gather_5"), "%onnx::Gather_5");
  EXPECT_EQ(value_ref("/embeddings/Shape_output_0"), "%/embeddings/Shape_output_0");
  EXPECT_EQ(value_ref("a b"), "%\"a b\"");
  EXPECT_EQ(value_ref("ends:"), "%\"ends:\"");
  EXPECT_EQ(value_ref(""), "%\"\"");
}

TEST(IrPrinter, TypesWithSymbolicAndUnknownDims) {
  Value v;
  v.dtype = DType::Float;
  v.shape = Shape{DimExpr::symbol("batch"), DimExpr::symbol("seq"), DimExpr(768)};
  EXPECT_EQ(type_to_string(v), "f32[batch, seq, 768]");
  v.shape->push_back(std::nullopt);
  EXPECT_EQ(type_to_string(v), "f32[batch, seq, 768, ?]");
  v.shape.reset();
  EXPECT_EQ(type_to_string(v), "f32[*]");
  v.shape = Shape{};
  v.dtype = DType::Int64;
  EXPECT_EQ(type_to_string(v), "i64[]");
}

}  // namespace
}  // namespace cuvil
