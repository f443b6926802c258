// Quantisation parameters of the integer kernels (MatMulInteger, QLinearMatMul in linalg.cpp;
// ConvInteger, QLinearConv in nn.cpp): 8-bit integer element loads and scale / zero-point
// inputs that are a scalar or one value per row, column or output channel.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cpu/ops/kernel_util.h"

namespace cuvil::rt::ops {

inline bool is_8bit_int(DType t) { return t == DType::Int8 || t == DType::UInt8; }

// Element i of an int8 or uint8 tensor.
inline int32_t load_int8ish(const TensorView& t, int64_t i) {
  return t.dtype == DType::Int8 ? static_cast<int32_t>(t.as<int8_t>()[i])
                                : static_cast<int32_t>(t.as<uint8_t>()[i]);
}

// A quantisation parameter that is a scalar or has `count` values (one per row, column or
// channel); `fallback` when the optional input is absent.
inline Status read_quant_param(OpContext& ctx, const TensorView* t, const char* what, int64_t count,
                               std::vector<double>* out, double fallback) {
  out->clear();
  if (!t) {
    out->push_back(fallback);
    return Status::ok();
  }
  const int64_t n = t->numel();
  if (n != 1 && n != count)
    return ctx.error(StatusCode::kInvalidArgument, what, " must be a scalar or have ", count,
                     " elements, got ", dims_string(t->dims));
  if (!visit_dtype<kNumericTypes>(t->dtype, [](auto) {}))
    return ctx.error(StatusCode::kInvalidArgument, what, " has unsupported dtype ", dtype_name(t->dtype));
  for (int64_t i = 0; i < n; ++i) out->push_back(load_as_double(*t, i));
  return Status::ok();
}

// Value i of a parameter read by read_quant_param (the one value of a scalar).
inline double per(const std::vector<double>& v, int64_t i) { return v.size() == 1 ? v[0] : v[i]; }

}  // namespace cuvil::rt::ops
