// --freeze / `freeze:` (cli/cuvilc_freeze.h): model inputs become initializers with the given
// value before the passes run. Checked against the input as the model declares it (after
// --dim), never converted: a value of another dtype or shape is refused, by name.
#include "cli/cuvilc_freeze.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>

#include "cli/npy.h"
#include "ir/printer.h"
#include "support/error.h"

namespace cuvil {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string input_names(const Graph& g) {
  std::string list;
  for (ValueId id : g.inputs) list += (list.empty() ? "" : ", ") + g.value(id).name;
  return list.empty() ? "none" : list;
}

// The input's dims, every one a constant; refuses a symbolic or unknown one.
std::vector<int64_t> constant_dims(const Value& v, const FreezeSpec& spec) {
  if (!v.shape)
    fail(ExitCode::kUsage, spec.origin, ": input '", v.name, "' has no declared shape; cuvil cannot check a "
         "frozen value against it");
  std::vector<int64_t> dims;
  for (size_t k = 0; k < v.shape->size(); ++k) {
    const Dim& d = (*v.shape)[k];
    const auto c = d ? d->constant() : std::nullopt;
    if (!c)
      fail(ExitCode::kUsage, spec.origin, ": input '", v.name, "' is ", type_to_string(v), "; dim ", k, " (",
           d ? d->to_string() : std::string("?"), ") is not fixed: fix it with --dim ",
           d ? d->to_string() : std::string("NAME"), "=N to freeze this input");
    dims.push_back(*c);
  }
  return dims;
}

template <typename T>
void append_bytes(std::vector<uint8_t>& bytes, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  bytes.insert(bytes.end(), b, b + sizeof(T));
}

// One element of `dtype` from `text`, or a usage error naming the input.
std::vector<uint8_t> parse_scalar(const Value& v, const FreezeSpec& spec) {
  const std::string& s = spec.value;
  const char* first = s.data();
  const char* last = s.data() + s.size();
  auto bad = [&](const char* expected) {
    fail(ExitCode::kUsage, spec.origin, ": input '", v.name, "' is ", type_to_string(v), "; '", s,
         "' is not ", expected);
  };
  std::vector<uint8_t> bytes;
  switch (v.dtype) {
    case DType::Bool:
      if (s == "true" || s == "1") bytes.push_back(1);
      else if (s == "false" || s == "0") bytes.push_back(0);
      else bad("true, false, 1 or 0");
      return bytes;
    case DType::Float:
    case DType::Double: {
      double d = 0;
      const auto [end, ec] = std::from_chars(first, last, d);
      if (s.empty() || ec != std::errc() || end != last) bad("a number");
      if (v.dtype == DType::Float) append_bytes(bytes, static_cast<float>(d));
      else append_bytes(bytes, d);
      return bytes;
    }
    case DType::UInt64: {
      uint64_t u = 0;
      const auto [end, ec] = std::from_chars(first, last, u);
      if (s.empty() || ec != std::errc() || end != last) bad("a u64 integer");
      append_bytes(bytes, u);
      return bytes;
    }
    case DType::Int8: case DType::UInt8: case DType::Int16: case DType::UInt16:
    case DType::Int32: case DType::UInt32: case DType::Int64: {
      int64_t i = 0;
      const auto [end, ec] = std::from_chars(first, last, i);
      if (s.empty() || ec != std::errc() || end != last) bad("an integer");
      const int bits = dtype_bits(v.dtype);
      const bool is_unsigned = v.dtype == DType::UInt8 || v.dtype == DType::UInt16 || v.dtype == DType::UInt32;
      const int64_t lo = is_unsigned ? 0 : bits == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1));
      const int64_t hi = bits == 64 ? std::numeric_limits<int64_t>::max()
                                    : is_unsigned ? (int64_t{1} << bits) - 1 : (int64_t{1} << (bits - 1)) - 1;
      if (i < lo || i > hi)
        fail(ExitCode::kUsage, spec.origin, ": input '", v.name, "' is ", type_to_string(v), "; ", s,
             " is outside the range of ", dtype_name(v.dtype), " (", lo, " to ", hi, ")");
      for (int b = 0; b < bits / 8; ++b) bytes.push_back(static_cast<uint8_t>(static_cast<uint64_t>(i) >> (8 * b)));
      return bytes;
    }
    default:
      fail(ExitCode::kUsage, spec.origin, ": input '", v.name, "' is ", type_to_string(v),
           "; give its value as a .npy file (a number on the command line is read as bool, an integer, "
           "f32 or f64)");
  }
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::shared_ptr<TensorData> frozen_value(const Value& v, const FreezeSpec& spec) {
  auto data = std::make_shared<TensorData>();
  data->dtype = v.dtype;
  data->dims = constant_dims(v, spec);
  if (ends_with(spec.value, ".npy")) {
    tools::HostTensor t;
    if (const std::string err = tools::read_npy(spec.value, &t); !err.empty())
      fail(ExitCode::kUsage, spec.origin, ": input '", v.name, "': ", err);
    if (t.dtype != static_cast<int32_t>(v.dtype))
      fail(ExitCode::kUsage, spec.origin, ": input '", v.name, "' is ", type_to_string(v), " but '", spec.value,
           "' holds ", dtype_from_onnx(t.dtype) ? dtype_name(*dtype_from_onnx(t.dtype)) : "an unknown dtype", " ",
           dims_text(t.dims));
    if (t.dims != data->dims)
      fail(ExitCode::kUsage, spec.origin, ": input '", v.name, "' is ", type_to_string(v), " but '", spec.value,
           "' has shape ", dims_text(t.dims));
    data->bytes = std::move(t.bytes);
    return data;
  }
  if (!std::all_of(data->dims.begin(), data->dims.end(), [](int64_t d) { return d == 1; }))
    fail(ExitCode::kUsage, spec.origin, ": input '", v.name, "' is ", type_to_string(v),
         "; a number freezes an input of one element only: give a .npy file");
  data->bytes = parse_scalar(v, spec);
  return data;
}

}  // namespace

FreezeSpec parse_freeze_option(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    fail(ExitCode::kUsage, "--freeze '", text, "': expected NAME=VALUE or NAME=FILE.npy");
  return FreezeSpec{text.substr(0, eq), text.substr(eq + 1), "--freeze " + text.substr(0, eq)};
}

void freeze_inputs(Model& m, const std::vector<FreezeSpec>& specs) {
  Graph& g = *m.graph;
  for (const FreezeSpec& spec : specs) {
    auto it = std::find_if(g.inputs.begin(), g.inputs.end(),
                           [&](ValueId id) { return g.value(id).name == spec.input; });
    if (it == g.inputs.end())
      fail(ExitCode::kUsage, spec.origin, ": the model has no input '", spec.input, "' (inputs: ",
           input_names(g), ")");
    Value& v = g.value(*it);
    if (v.kind != ValueKind::Tensor)
      fail(ExitCode::kUsage, spec.origin, ": input '", v.name, "' is a ", value_kind_name(v.kind),
           "; only tensor inputs can be frozen");
    v.data = frozen_value(v, spec);
    v.is_initializer = true;
    g.inputs.erase(it);
  }
}

}  // namespace cuvil
