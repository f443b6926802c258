#include "ir/dtype.h"

namespace cuvil {

const char* dtype_name(DType t) {
  switch (t) {
#define CUVIL_X(e, code, name, bits) \
  case DType::e:                     \
    return name;
    CUVIL_DTYPES(CUVIL_X)
#undef CUVIL_X
    case DType::Undefined: break;
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
#define CUVIL_X(e, code, n, bits) \
  if (name == n) return DType::e;
  CUVIL_DTYPES(CUVIL_X)
#undef CUVIL_X
  return std::nullopt;
}

std::optional<DType> dtype_from_onnx(int32_t code) {
  switch (code) {
#define CUVIL_X(e, c, name, bits) \
  case c:                         \
    return DType::e;
    CUVIL_DTYPES(CUVIL_X)
#undef CUVIL_X
    default: return std::nullopt;
  }
}

int dtype_bits(DType t) {
  switch (t) {
#define CUVIL_X(e, code, name, bits) \
  case DType::e:                     \
    return bits;
    CUVIL_DTYPES(CUVIL_X)
#undef CUVIL_X
    case DType::Undefined: break;
  }
  return 0;
}

bool dtype_is_float(DType t) {
  switch (t) {
    case DType::Float: case DType::Float16: case DType::Double: case DType::BFloat16:
    case DType::Float8E4M3FN: case DType::Float8E4M3FNUZ: case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ:
      return true;
    default: return false;
  }
}

bool dtype_is_integer(DType t) {
  switch (t) {
    case DType::UInt8: case DType::Int8: case DType::UInt16: case DType::Int16:
    case DType::Int32: case DType::Int64: case DType::UInt32: case DType::UInt64:
    case DType::UInt4: case DType::Int4:
      return true;
    default: return false;
  }
}

}  // namespace cuvil
