// The cuvil IR: a Model owns a Graph of Nodes (one op list, ir/ops.def) over Values that carry
// a dtype and a symbolic shape. Subgraphs (If/Loop/Scan bodies) are Graphs held by attributes;
// a subgraph refers to an enclosing graph's value through a local Value whose `outer` field
// names it (an explicit capture), so every graph is self-contained for the verifier.
//
// Values are addressed by index (ValueId) into Graph::values and nodes by index into
// Graph::nodes. Passes that delete or reorder nodes rebuild the vectors; ids are not stable
// across such passes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/ops.h"
#include "ir/symbolic.h"

namespace cuvil {

using sym::DimExpr;
using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

// Constant tensor contents. Numeric data is packed little-endian in `bytes` (int4/uint4 two
// per byte, low nibble first); String tensors use `strings` instead.
struct TensorData {
  DType dtype = DType::Undefined;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
  std::vector<std::string> strings;
  int64_t numel() const;  // product of dims (validated non-negative, non-overflowing at import)
  // Element i as int64 / double for integer, bool and float types (for shape folding).
  int64_t int_at(int64_t i) const;
  double float_at(int64_t i) const;
};

// A dim is a symbolic expression, or nullopt when shape inference could not determine it.
using Dim = std::optional<DimExpr>;
using Shape = std::vector<Dim>;

enum class ValueKind : uint8_t { Tensor, Sequence, Optional, Map, SparseTensor, Unknown };
const char* value_kind_name(ValueKind k);

struct Value {
  std::string name;
  ValueKind kind = ValueKind::Tensor;
  DType dtype = DType::Undefined;  // element dtype (for Sequence/Optional: of the element)
  std::optional<Shape> shape;      // nullopt: rank unknown
  // Contents when constant (initializers, Constant nodes, folded values).
  std::shared_ptr<const TensorData> data;
  // Symbolic contents of a small integer/bool tensor of rank <= 1, row-major: what makes
  // Shape -> Gather -> Concat -> Reshape chains come out as expressions.
  std::optional<std::vector<DimExpr>> sym_data;
  bool is_initializer = false;
  ValueId outer = kNoValue;  // for captures: the value in the parent graph
  int32_t producer = -1;     // node index, -1 for graph inputs/initializers/captures

  bool shape_known() const;  // rank known and every dim known
};

struct Graph;

struct Attribute {
  enum class Kind : uint8_t {
    Float, Int, String, Tensor, Graph, SparseTensor, TypeProto,
    Floats, Ints, Strings, Tensors, Graphs, SparseTensors, TypeProtos,
  };
  Kind kind = Kind::Int;
  float f = 0;
  int64_t i = 0;
  std::string s;
  std::shared_ptr<const TensorData> t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;  // also the text of TypeProto(s) and SparseTensor(s)
  std::vector<std::shared_ptr<const TensorData>> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;
};
const char* attribute_kind_name(Attribute::Kind k);

struct Node {
  OpKind op = OpKind::Unknown;
  std::string op_type;  // as in the model (kept for Unknown ops)
  std::string domain;   // "" for ai.onnx
  int opset = 0;        // opset version of `domain` the node was written against
  std::string name;     // node name from the model, or a generated "<op_type>_<index>"
  std::vector<ValueId> inputs;  // kNoValue for an omitted optional input
  std::vector<ValueId> outputs; // kNoValue for an omitted optional output
  std::map<std::string, Attribute> attrs;

  const Attribute* attr(const std::string& key) const;
  int64_t attr_int(const std::string& key, int64_t fallback) const;
  float attr_float(const std::string& key, float fallback) const;
  std::string attr_string(const std::string& key, const std::string& fallback) const;
  std::optional<std::vector<int64_t>> attr_ints(const std::string& key) const;
  ValueId input(size_t i) const { return i < inputs.size() ? inputs[i] : kNoValue; }
};

struct Graph {
  std::string name;
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<ValueId> inputs;   // graph inputs that are not initializers
  std::vector<ValueId> outputs;
  std::vector<ValueId> captures; // values with `outer` set
  Graph* parent = nullptr;

  ValueId add_value(std::string name);
  ValueId find(const std::string& name) const;  // kNoValue when absent
  Value& value(ValueId id) { return values.at(static_cast<size_t>(id)); }
  const Value& value(ValueId id) const { return values.at(static_cast<size_t>(id)); }
  // Rebuilds the name index (after passes that edit `values` directly).
  void reindex();

 private:
  std::map<std::string, ValueId> by_name_;
};

struct Model {
  int64_t ir_version = 0;
  std::string producer_name, producer_version, domain, doc_string;
  std::map<std::string, int64_t> opset_imports;  // domain ("" = ai.onnx) -> version
  std::vector<std::string> local_functions;      // "domain::name" of inlined model functions
  std::string source_path;
  std::shared_ptr<Graph> graph;
  sym::SymbolRanges ranges;  // from ONNX dim_params and --dim
};

int64_t opset_of(const Model& m, const std::string& domain);
// Nodes of `g` and of every subgraph it holds, recursively.
int64_t count_nodes(const Graph& g);

}  // namespace cuvil
