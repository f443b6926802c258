// Element types. Numbering follows ONNX TensorProto.DataType so import is a range check, and
// the list lives in one table (CUVIL_DTYPES) that expands into the enum, names and sizes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cuvil {

// X(Enum, onnx_code, short_name, bits)
#define CUVIL_DTYPES(X)             \
  X(Float, 1, "f32", 32)            \
  X(UInt8, 2, "u8", 8)              \
  X(Int8, 3, "i8", 8)               \
  X(UInt16, 4, "u16", 16)           \
  X(Int16, 5, "i16", 16)            \
  X(Int32, 6, "i32", 32)            \
  X(Int64, 7, "i64", 64)            \
  X(String, 8, "str", 0)            \
  X(Bool, 9, "bool", 8)             \
  X(Float16, 10, "f16", 16)         \
  X(Double, 11, "f64", 64)          \
  X(UInt32, 12, "u32", 32)          \
  X(UInt64, 13, "u64", 64)          \
  X(Complex64, 14, "c64", 64)       \
  X(Complex128, 15, "c128", 128)    \
  X(BFloat16, 16, "bf16", 16)       \
  X(Float8E4M3FN, 17, "f8e4m3fn", 8) \
  X(Float8E4M3FNUZ, 18, "f8e4m3fnuz", 8) \
  X(Float8E5M2, 19, "f8e5m2", 8)    \
  X(Float8E5M2FNUZ, 20, "f8e5m2fnuz", 8) \
  X(UInt4, 21, "u4", 4)             \
  X(Int4, 22, "i4", 4)

enum class DType : int32_t {
  Undefined = 0,
#define CUVIL_X(e, code, name, bits) e = code,
  CUVIL_DTYPES(CUVIL_X)
#undef CUVIL_X
};

// Short name used by the text IR ("f32", "i64"); "?" for Undefined.
const char* dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
// ONNX TensorProto.DataType -> DType; nullopt for 0 and unknown codes.
std::optional<DType> dtype_from_onnx(int32_t code);
// Storage bits per element (4 for int4, 0 for String/Undefined).
int dtype_bits(DType t);
bool dtype_is_float(DType t);
bool dtype_is_integer(DType t);  // signed or unsigned integer, not bool

}  // namespace cuvil
