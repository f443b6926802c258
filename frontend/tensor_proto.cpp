#include "frontend/tensor_proto.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <set>

#include "frontend/external_data.h"
#include "frontend/printable.h"
#include "support/checked.h"
#include "support/error.h"

namespace cuvil::frontend {

std::optional<uint64_t> tensor_byte_size(DType dtype, int64_t numel) {
  if (numel < 0) return std::nullopt;
  auto bits = checked_mul_u64(static_cast<uint64_t>(numel), static_cast<uint64_t>(dtype_bits(dtype)));
  if (!bits) return std::nullopt;
  return (*bits + 7) / 8;
}

namespace {

template <typename Out, typename In>
void pack(std::vector<uint8_t>& bytes, const In& values) {
  bytes.resize(static_cast<size_t>(values.size()) * sizeof(Out));
  for (int i = 0; i < values.size(); ++i) {
    Out v = static_cast<Out>(values.Get(i));
    std::memcpy(bytes.data() + static_cast<size_t>(i) * sizeof(Out), &v, sizeof(Out));
  }
}

// Number of entries the typed field must hold for numel elements.
int64_t typed_count(DType t, int64_t numel) {
  switch (t) {
    case DType::Complex64: case DType::Complex128: return numel * 2;
    case DType::Int4: case DType::UInt4: return (numel + 1) / 2;
    default: return numel;
  }
}

}  // namespace

const char* newer_onnx_type_name(int32_t code) {
  switch (code) {
    case 23: return "FLOAT4E2M1";
    case 24: return "FLOAT8E8M0";
    case 25: return "UINT2";
    case 26: return "INT2";
    case 27: return "FLOAT6E2M3";
    case 28: return "FLOAT6E3M2";
    default: return nullptr;
  }
}

std::shared_ptr<TensorData> import_tensor(const onnx::TensorProto& proto,
                                          const std::string& model_dir,
                                          const std::string& context) {
  const std::string& raw_name = proto.name().empty() ? context : proto.name();
  const std::string name = printable(raw_name);
  auto bad = [&](const auto&... parts) {
    fail(ExitCode::kInvalidModel, "tensor '", name, "': ", parts...);
  };
  auto dtype = dtype_from_onnx(proto.data_type());
  if (const char* newer = dtype ? nullptr : newer_onnx_type_name(proto.data_type()))
    fail(ExitCode::kUnsupported, "tensor '", name, "': data type ", newer, " (", proto.data_type(),
         ") is not supported");
  if (!dtype) bad("data_type ", proto.data_type(), proto.data_type() == 0 ? " (UNDEFINED)" : " is unknown");
  auto t = std::make_shared<TensorData>();
  t->dtype = *dtype;
  for (int64_t d : proto.dims()) {
    if (d < 0) bad("negative dimension ", d);
    t->dims.push_back(d);
  }
  auto numel = checked_numel(t->dims);
  if (!numel) bad("the product of its dims overflows int64");
  if (proto.has_segment())
    fail(ExitCode::kUnsupported, "tensor '", name, "': segmented tensors are not supported");

  if (*dtype == DType::String) {
    if (proto.data_location() == onnx::TensorProto::EXTERNAL || proto.has_raw_data())
      bad("string tensors must use string_data");
    if (proto.string_data_size() != *numel)
      bad("has ", proto.string_data_size(), " strings but its dims hold ", *numel);
    for (const auto& s : proto.string_data()) t->strings.push_back(s);
    return t;
  }
  auto nbytes = tensor_byte_size(*dtype, *numel);
  if (!nbytes || *nbytes > (uint64_t{1} << 62)) bad("byte size overflows");

  const int typed = proto.float_data_size() + proto.int32_data_size() + proto.string_data_size() +
                    proto.int64_data_size() + proto.double_data_size() + proto.uint64_data_size();
  const bool external = proto.data_location() == onnx::TensorProto::EXTERNAL;
  const int sources = (proto.has_raw_data() ? 1 : 0) + (typed > 0 ? 1 : 0) + (external ? 1 : 0);
  if (sources > 1) bad("has more than one data source (raw_data, typed *_data, external)");

  if (external) {
    if (model_dir.empty()) bad("uses external data but the model was not loaded from a file");
    ExternalDataRef ref;
    std::set<std::string> keys;
    for (const auto& kv : proto.external_data()) {
      // A repeated key would let two readers of the model see different files or ranges.
      if (!keys.insert(kv.key()).second)
        bad("external data key '", printable(kv.key()), "' is given twice");
      // The full uint64 range is accepted (so that a wrapping offset + length reaches the
      // range check and is reported as such); anything beyond is out of range, not wrapped.
      auto parse_u64 = [&](const std::string& s) -> uint64_t {
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
          bad("external data '", printable(kv.key()), "' is not a non-negative integer: '",
              printable(s), "'");
        uint64_t v = 0;
        for (char c : s) {
          auto next = checked_mul_u64(v, 10);
          next = next ? checked_add_u64(*next, static_cast<uint64_t>(c - '0')) : std::nullopt;
          if (!next)
            bad("external data '", kv.key(), "' is out of range (over 2^64 - 1): '", s, "'");
          v = *next;
        }
        return v;
      };
      if (kv.key() == "location") ref.location = kv.value();
      else if (kv.key() == "offset") ref.offset = parse_u64(kv.value());
      else if (kv.key() == "length") ref.length = parse_u64(kv.value());
    }
    t->bytes = read_external_data(model_dir, raw_name, ref, *nbytes);
    return t;
  }
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != *nbytes)
      bad("raw_data holds ", proto.raw_data().size(), " bytes but ", *numel, " elements of ",
          dtype_name(*dtype), " need ", *nbytes);
    t->bytes.assign(proto.raw_data().begin(), proto.raw_data().end());
    return t;
  }
  if (typed == 0) {
    if (*numel != 0) bad("has no data for its ", *numel, " elements");
    return t;
  }
  const int64_t want = typed_count(*dtype, *numel);
  auto check_count = [&](int have, const char* field) {
    if (have != want) bad(field, " holds ", have, " values but ", want, " are needed");
  };
  switch (*dtype) {
    case DType::Float: case DType::Complex64:
      check_count(proto.float_data_size(), "float_data");
      pack<float>(t->bytes, proto.float_data());
      break;
    case DType::Double: case DType::Complex128:
      check_count(proto.double_data_size(), "double_data");
      pack<double>(t->bytes, proto.double_data());
      break;
    case DType::Int64:
      check_count(proto.int64_data_size(), "int64_data");
      pack<int64_t>(t->bytes, proto.int64_data());
      break;
    case DType::UInt32: case DType::UInt64:
      check_count(proto.uint64_data_size(), "uint64_data");
      if (*dtype == DType::UInt32) pack<uint32_t>(t->bytes, proto.uint64_data());
      else pack<uint64_t>(t->bytes, proto.uint64_data());
      break;
    case DType::Int32:
      check_count(proto.int32_data_size(), "int32_data");
      pack<int32_t>(t->bytes, proto.int32_data());
      break;
    case DType::Int16: case DType::UInt16: case DType::Float16: case DType::BFloat16:
      check_count(proto.int32_data_size(), "int32_data");
      pack<uint16_t>(t->bytes, proto.int32_data());
      break;
    case DType::Int8: case DType::UInt8: case DType::Bool: case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ: case DType::Float8E5M2: case DType::Float8E5M2FNUZ:
    case DType::Int4: case DType::UInt4:
      check_count(proto.int32_data_size(), "int32_data");
      pack<uint8_t>(t->bytes, proto.int32_data());
      break;
    default:
      bad("typed data for dtype ", dtype_name(*dtype), " is not supported");
  }
  if (t->bytes.size() != *nbytes) bad("typed data does not match the tensor's byte size");
  return t;
}

}  // namespace cuvil::frontend
