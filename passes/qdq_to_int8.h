// Pass: QDQ import. A MatMul, Gemm or Conv whose operands are DequantizeLinear outputs (ONNX
// Runtime's quantize_static in QDQ format, QAT exports) runs as an int8 product on the int8
// GEMM kernels instead of on dequantised floats.
//
// Rewrites, with x_q an 8-bit activation (scalar constant scale and zero point) and w_q an
// 8-bit constant weight (scale per tensor, or per output channel on the output-channel axis):
//   Conv(DQ(x_q), DQ(w_q), B?) -> QuantizeLinear(sy, zy)   => QLinearConv(x_q .. zy, B_i32)
//   MatMul(DQ(x_q), DQ(w_q))   -> QuantizeLinear(sy, zy)   => QLinearMatMul(x_q .. zy)
//   (for MatMul, w_q may also be a second activation of any rank >= 2: attention products)
//   otherwise (no QuantizeLinear reads the product alone, or a Gemm / MatMul bias):
//     ConvInteger / MatMulInteger(x_q, w_q, zx, zw) -> Cast(float) -> Mul(sx * sw) -> Add(B)?
//   (a QuantizeLinear after it stays).
// B: a float constant or DequantizeLinear(int32 constant), converted as ONNX Runtime does to
// int32 at scale sx * sw[c], B_i32 = round(B / (sx * sw[c])) (the same integers when B was
// quantised at that scale). Gemm: alpha = beta = 1, transA = 0; transB = 1 transposes w_q into
// a new weight. Exact up to the float rounding of one multiply-add per element: results within
// one quantisation step of the float QDQ semantics. Anything else stays as it is (the
// DequantizeLinear nodes then run as before).
// Requires: infer_shapes (dtypes and shapes of the values), before fold_constants (which
// would fold DQ(w_q) into a float weight). After: the replaced DequantizeLinear nodes of the
// weights are dead (dce removes them); a verified model.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace cuvil {

struct QdqImportStats {
  int64_t qlinear = 0;   // QLinearMatMul / QLinearConv made
  int64_t integer = 0;   // MatMulInteger / ConvInteger with a dequantising Mul made
};

QdqImportStats qdq_to_int8(Model& model);

}  // namespace cuvil
