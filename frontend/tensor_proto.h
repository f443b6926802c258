// TensorProto -> TensorData with every check of RELIABILITY.md: known dtype, non-negative dims
// whose product (and byte size) does not overflow, exactly one data source, sizes that agree
// with numel, external data read through frontend/external_data.
#pragma once

#include <memory>
#include <string>

#include "ir/graph.h"

namespace onnx {
class TensorProto;
}

namespace cuvil::frontend {

// `model_dir` anchors external data (empty: external data is refused).
std::shared_ptr<TensorData> import_tensor(const onnx::TensorProto& proto,
                                          const std::string& model_dir,
                                          const std::string& context);

// Byte size of numel elements of dtype (4-bit types round up); nullopt on overflow.
std::optional<uint64_t> tensor_byte_size(DType dtype, int64_t numel);

// The name of an ONNX data type added after the ones cuvil has (onnx 1.23: FLOAT4E2M1 = 23,
// FLOAT8E8M0, UINT2, INT2, FLOAT6E2M3, FLOAT6E3M2 = 28), or nullptr: such a type is refused as unsupported, naming it, rather than
// as an unknown code.
const char* newer_onnx_type_name(int32_t code);

}  // namespace cuvil::frontend
