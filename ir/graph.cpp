#include "ir/graph.h"

#include <cstring>

#include "support/checked.h"
#include "support/error.h"

namespace cuvil {

int64_t TensorData::numel() const {
  auto n = checked_numel(dims);
  CUVIL_ASSERT(n.has_value(), "tensor dims were not validated at import");
  return *n;
}

namespace {
template <typename T>
T load(const std::vector<uint8_t>& bytes, int64_t i) {
  T v;
  size_t off = static_cast<size_t>(i) * sizeof(T);
  CUVIL_ASSERT(off + sizeof(T) <= bytes.size(), "element " << i << " outside tensor data");
  std::memcpy(&v, bytes.data() + off, sizeof(T));
  return v;
}
}  // namespace

int64_t TensorData::int_at(int64_t i) const {
  switch (dtype) {
    case DType::Int64: return load<int64_t>(bytes, i);
    case DType::Int32: return load<int32_t>(bytes, i);
    case DType::Int16: return load<int16_t>(bytes, i);
    case DType::Int8: return load<int8_t>(bytes, i);
    case DType::UInt8: case DType::Bool: return load<uint8_t>(bytes, i);
    case DType::UInt16: return load<uint16_t>(bytes, i);
    case DType::UInt32: return load<uint32_t>(bytes, i);
    case DType::UInt64: return static_cast<int64_t>(load<uint64_t>(bytes, i));
    case DType::Float: return static_cast<int64_t>(load<float>(bytes, i));
    case DType::Double: return static_cast<int64_t>(load<double>(bytes, i));
    default: CUVIL_ASSERT(false, "int_at on dtype " << dtype_name(dtype));
  }
  return 0;
}

double TensorData::float_at(int64_t i) const {
  switch (dtype) {
    case DType::Float: return load<float>(bytes, i);
    case DType::Double: return load<double>(bytes, i);
    default: return static_cast<double>(int_at(i));
  }
}

const char* value_kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::Tensor: return "tensor";
    case ValueKind::Sequence: return "seq";
    case ValueKind::Optional: return "opt";
    case ValueKind::Map: return "map";
    case ValueKind::SparseTensor: return "sparse";
    case ValueKind::Unknown: return "unknown";
  }
  return "?";
}

bool Value::shape_known() const {
  if (!shape) return false;
  for (const auto& d : *shape)
    if (!d) return false;
  return true;
}

const char* attribute_kind_name(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::Float: return "float";
    case Attribute::Kind::Int: return "int";
    case Attribute::Kind::String: return "string";
    case Attribute::Kind::Tensor: return "tensor";
    case Attribute::Kind::Graph: return "graph";
    case Attribute::Kind::SparseTensor: return "sparse_tensor";
    case Attribute::Kind::TypeProto: return "type";
    case Attribute::Kind::Floats: return "floats";
    case Attribute::Kind::Ints: return "ints";
    case Attribute::Kind::Strings: return "strings";
    case Attribute::Kind::Tensors: return "tensors";
    case Attribute::Kind::Graphs: return "graphs";
    case Attribute::Kind::SparseTensors: return "sparse_tensors";
    case Attribute::Kind::TypeProtos: return "types";
  }
  return "?";
}

const Attribute* Node::attr(const std::string& key) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? nullptr : &it->second;
}

int64_t Node::attr_int(const std::string& key, int64_t fallback) const {
  const Attribute* a = attr(key);
  if (!a) return fallback;
  if (a->kind != Attribute::Kind::Int)
    fail(ExitCode::kInvalidModel, "node '", name, "' (", op_type, "): attribute '", key,
         "' must be an int, got ", attribute_kind_name(a->kind));
  return a->i;
}

float Node::attr_float(const std::string& key, float fallback) const {
  const Attribute* a = attr(key);
  if (!a) return fallback;
  if (a->kind == Attribute::Kind::Int) return static_cast<float>(a->i);
  if (a->kind != Attribute::Kind::Float)
    fail(ExitCode::kInvalidModel, "node '", name, "' (", op_type, "): attribute '", key,
         "' must be a float, got ", attribute_kind_name(a->kind));
  return a->f;
}

std::string Node::attr_string(const std::string& key, const std::string& fallback) const {
  const Attribute* a = attr(key);
  if (!a) return fallback;
  if (a->kind != Attribute::Kind::String)
    fail(ExitCode::kInvalidModel, "node '", name, "' (", op_type, "): attribute '", key,
         "' must be a string, got ", attribute_kind_name(a->kind));
  return a->s;
}

std::optional<std::vector<int64_t>> Node::attr_ints(const std::string& key) const {
  const Attribute* a = attr(key);
  if (!a) return std::nullopt;
  if (a->kind != Attribute::Kind::Ints)
    fail(ExitCode::kInvalidModel, "node '", name, "' (", op_type, "): attribute '", key,
         "' must be a list of ints, got ", attribute_kind_name(a->kind));
  return a->ints;
}

ValueId Graph::add_value(std::string value_name) {
  ValueId id = static_cast<ValueId>(values.size());
  Value v;
  v.name = std::move(value_name);
  if (!v.name.empty()) by_name_[v.name] = id;
  values.push_back(std::move(v));
  return id;
}

ValueId Graph::find(const std::string& value_name) const {
  auto it = by_name_.find(value_name);
  return it == by_name_.end() ? kNoValue : it->second;
}

void Graph::reindex() {
  by_name_.clear();
  for (size_t i = 0; i < values.size(); ++i)
    if (!values[i].name.empty()) by_name_[values[i].name] = static_cast<ValueId>(i);
}

int64_t opset_of(const Model& m, const std::string& domain) {
  auto it = m.opset_imports.find(domain == "ai.onnx" ? "" : domain);
  return it == m.opset_imports.end() ? 0 : it->second;
}

int64_t count_nodes(const Graph& g) {
  int64_t n = static_cast<int64_t>(g.nodes.size());
  for (const Node& node : g.nodes)
    for (const auto& [key, a] : node.attrs) {
      if (a.g) n += count_nodes(*a.g);
      for (const auto& sub : a.graphs) n += count_nodes(*sub);
    }
  return n;
}

}  // namespace cuvil
