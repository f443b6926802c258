// The conformance harnesses' handling of ONNX 1.12's uint16-stored bfloat16 test tensors
// (testing::adopt_uint16_as_bfloat16 in kernel_harness.h): retag only when the model declares
// bfloat16 and the element count agrees, never otherwise.
#include <gtest/gtest.h>

#include "kernel_harness.h"

using namespace cuvil;

namespace {

TensorData uint16_tensor(std::vector<int64_t> dims) {
  TensorData t;
  t.dtype = DType::UInt16;
  t.dims = dims;
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  t.bytes.assign(static_cast<size_t>(n) * 2, 0x3f);
  return t;
}

Value declared(DType dtype, std::optional<Shape> shape) {
  Value v;
  v.name = "x";
  v.dtype = dtype;
  v.shape = std::move(shape);
  return v;
}

TEST(BFloat16TestDataQuirk, RetagsOnlyMatchingBFloat16Values) {
  TensorData t = uint16_tensor({3, 4});
  cuvil::testing::adopt_uint16_as_bfloat16(t, declared(DType::BFloat16, Shape{DimExpr(3), DimExpr(4)}));
  EXPECT_EQ(t.dtype, DType::BFloat16);
  EXPECT_EQ(t.bytes.size(), 24u);

  TensorData symbolic = uint16_tensor({5});
  cuvil::testing::adopt_uint16_as_bfloat16(symbolic, declared(DType::BFloat16, Shape{DimExpr::symbol("n")}));
  EXPECT_EQ(symbolic.dtype, DType::BFloat16);

  // ONNX 1.12's castlike data feeds 'like' as [1] where the model declares [3,4]: left alone.
  TensorData like = uint16_tensor({1});
  cuvil::testing::adopt_uint16_as_bfloat16(like, declared(DType::BFloat16, Shape{DimExpr(3), DimExpr(4)}));
  EXPECT_EQ(like.dtype, DType::UInt16);

  TensorData genuine = uint16_tensor({3, 4});
  cuvil::testing::adopt_uint16_as_bfloat16(genuine, declared(DType::UInt16, Shape{DimExpr(3), DimExpr(4)}));
  EXPECT_EQ(genuine.dtype, DType::UInt16);
  cuvil::testing::adopt_uint16_as_bfloat16(genuine, declared(DType::Float, std::nullopt));
  EXPECT_EQ(genuine.dtype, DType::UInt16);

  TensorData short_bytes = uint16_tensor({3, 4});
  short_bytes.bytes.resize(10);
  cuvil::testing::adopt_uint16_as_bfloat16(short_bytes, declared(DType::BFloat16, std::nullopt));
  EXPECT_EQ(short_bytes.dtype, DType::UInt16);
}

}  // namespace
